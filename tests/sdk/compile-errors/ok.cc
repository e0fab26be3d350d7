// expect: success
// A correct class: const and noexcept methods, a uint64_t size, optional methods with their v12 signatures.
#include "vendor_net.hpp"

struct Net {
  static constexpr const char kName[] = "vendor";
  ncclResult_t init(nccl_net::sdk::InitArgs, void**) noexcept { return ncclSuccess; }
  ncclResult_t regMr(void*, void*, uint64_t, int, void**) const { return ncclSuccess; }
  VENDOR_NET_ISEND
  VENDOR_NET_TEST
  VENDOR_NET_OTHERS
  ncclResult_t iflush(void*, int, void**, int*, void**, void**) { return ncclSuccess; }
  ncclResult_t regMrDmaBuf(void*, void*, size_t, int, uint64_t, int, void**) { return ncclSuccess; }
  ncclResult_t finalize(void*) { return ncclSuccess; }
};
NCCL_NET_SDK_EXPORT(Net)
