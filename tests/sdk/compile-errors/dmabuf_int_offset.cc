// expect: Net::regMrDmaBuf is not a public regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset
// An optional method with a 32-bit offset: it compiled, and a DMA-BUF offset of 3 GiB reached it as -1 GiB.
#include "vendor_net.hpp"

struct Net {
  static constexpr const char kName[] = "vendor";
  VENDOR_NET_REQUIRED
  ncclResult_t regMrDmaBuf(void*, void*, size_t, int, int, int, void**) { return ncclSuccess; }
};
NCCL_NET_SDK_EXPORT(Net)
