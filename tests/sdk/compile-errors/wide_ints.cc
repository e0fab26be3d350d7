// expect: success
// int parameters declared as a wider or unsigned integer of int's width take NCCL's int without narrowing, and a
// helper named like an NCCL call of another API (flush) is the class's own business.
#include <cstdint>

#include "vendor_net.hpp"

struct Net {
  static constexpr const char kName[] = "vendor";
  VENDOR_NET_INIT
  ncclResult_t regMr(void*, void*, size_t, long, void**) { return ncclSuccess; }
  ncclResult_t isend(void*, void*, size_t, uint32_t, void*, void*, void**) { return ncclSuccess; }
  VENDOR_NET_TEST
  VENDOR_NET_OTHERS
  ncclResult_t regMrDmaBuf(void*, void*, size_t, int, size_t, int64_t, void**) { return ncclSuccess; }
  void flush() {}
};
NCCL_NET_SDK_EXPORT(Net)
