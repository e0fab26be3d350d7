// expect: Net has no public test(void* request, int* done, nccl_net::sdk::CompletedSizes& sizes)
// `void* done` where v12 has `int* done`: it compiled (any pointer converts to void*), and a plugin writing a size_t
// there wrote past NCCL's int.
#include "vendor_net.hpp"

struct Net {
  static constexpr const char kName[] = "vendor";
  VENDOR_NET_INIT
  VENDOR_NET_REGMR
  VENDOR_NET_ISEND
  ncclResult_t test(void*, void*, nccl_net::sdk::CompletedSizes&) { return ncclSuccess; }
  VENDOR_NET_OTHERS
};
NCCL_NET_SDK_EXPORT(Net)
