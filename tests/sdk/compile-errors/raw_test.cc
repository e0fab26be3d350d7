// expect: Net has no public test(void* request, int* done, nccl_net::sdk::CompletedSizes& sizes)
// The raw ABI signature, int* sizes.
#include "vendor_net.hpp"

struct Net {
  static constexpr const char kName[] = "vendor";
  VENDOR_NET_INIT
  VENDOR_NET_REGMR
  VENDOR_NET_ISEND
  ncclResult_t test(void*, int*, int*) { return ncclSuccess; }
  VENDOR_NET_OTHERS
};
NCCL_NET_SDK_EXPORT(Net)
