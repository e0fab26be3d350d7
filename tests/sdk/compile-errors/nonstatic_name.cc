// expect: Net::kName is not a static constant string
// `static` forgotten: before, GCC said "invalid use of non-static data member" once per exported version.
#include "vendor_net.hpp"

struct Net {
  const char kName[7] = "vendor";
  VENDOR_NET_REQUIRED
};
NCCL_NET_SDK_EXPORT(Net)
