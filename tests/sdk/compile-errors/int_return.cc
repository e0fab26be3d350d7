// expect: Net has no public test(void* request, int* done, nccl_net::sdk::CompletedSizes& sizes)
#include "vendor_net.hpp"

struct Net {
  static constexpr const char kName[] = "vendor";
  VENDOR_NET_INIT
  VENDOR_NET_REGMR
  VENDOR_NET_ISEND
  int test(void*, int*, nccl_net::sdk::CompletedSizes&) { return 0; }
  VENDOR_NET_OTHERS
};
NCCL_NET_SDK_EXPORT(Net)
