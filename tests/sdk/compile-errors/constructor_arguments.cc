// expect: Net is not default-constructible
// Before, the error pointed at the SDK's `static Net net;` once per entry point that reaches it.
#include "vendor_net.hpp"

struct Net {
  static constexpr const char kName[] = "vendor";
  explicit Net(int port) : port_(port) {}
  VENDOR_NET_REQUIRED
  int port_;
};
NCCL_NET_SDK_EXPORT(Net)
