// expect: Net::kName is empty
// It compiled before; NCCL_NET= could not select the plugin and logs named it "".
#include "vendor_net.hpp"

struct Net {
  static constexpr const char kName[] = "";
  VENDOR_NET_INIT
  VENDOR_NET_REGMR
  VENDOR_NET_ISEND
  VENDOR_NET_TEST
  VENDOR_NET_OTHERS
};
NCCL_NET_SDK_EXPORT(Net)
