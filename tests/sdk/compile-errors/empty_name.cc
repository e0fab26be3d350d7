// expect: Net::kName is empty
// It compiled before; NCCL_NET= could not select the plugin and logs named it "".
#include "vendor_net.hpp"

struct Net {
  static constexpr const char kName[] = "";
  VENDOR_NET_REQUIRED
};
NCCL_NET_SDK_EXPORT(Net)
