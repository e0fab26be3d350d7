// expect: Net has no public kName
#include "vendor_net.hpp"

struct Net {
  VENDOR_NET_INIT
  VENDOR_NET_REGMR
  VENDOR_NET_ISEND
  VENDOR_NET_TEST
  VENDOR_NET_OTHERS
};
NCCL_NET_SDK_EXPORT(Net)
