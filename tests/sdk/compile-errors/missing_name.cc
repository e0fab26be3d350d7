// expect: Net has no public kName
#include "vendor_net.hpp"

struct Net {
  VENDOR_NET_REQUIRED
};
NCCL_NET_SDK_EXPORT(Net)
