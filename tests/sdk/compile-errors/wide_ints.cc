// expect: success
// int parameters declared as a wider or unsigned integer of int's width, or as a class built from an int, take NCCL's
// int without narrowing; a signed 64-bit DMA-BUF offset loses nothing; and a helper named like an NCCL call of another
// API (flush) is the class's own business.
#include <cstdint>

#include "vendor_net.hpp"

struct DevIndex {
  DevIndex(int value) : index(value) {}  // NOLINT(google-explicit-constructor): the vendor's own wrapper
  int index;
};

struct Net {
  static constexpr const char kName[] = "vendor";
  VENDOR_NET_INIT
  ncclResult_t getProperties(DevIndex, ncclNetProperties_v12_t*) { return ncclSuccess; }
  ncclResult_t devices(int* ndev) {
    *ndev = 1;
    return ncclSuccess;
  }
  ncclResult_t listen(void*, int, void*, void**) { return ncclSuccess; }
  ncclResult_t connect(void*, int, void*, void**, ncclNetDeviceHandle_v12_t**) { return ncclSuccess; }
  ncclResult_t accept(void*, void**, ncclNetDeviceHandle_v12_t**) { return ncclSuccess; }
  ncclResult_t deregMr(void*, void*) { return ncclSuccess; }
  ncclResult_t irecv(void*, int, void**, size_t*, int*, void**, void**, void**) { return ncclSuccess; }
  ncclResult_t closeSend(void*) { return ncclSuccess; }
  ncclResult_t closeRecv(void*) { return ncclSuccess; }
  ncclResult_t closeListen(void*) { return ncclSuccess; }
  ncclResult_t regMr(void*, void*, size_t, long, void**) { return ncclSuccess; }
  ncclResult_t isend(void*, void*, size_t, uint32_t, void*, void*, void**) { return ncclSuccess; }
  VENDOR_NET_TEST
  ncclResult_t regMrDmaBuf(void*, void*, size_t, int, int64_t, int64_t, void**) { return ncclSuccess; }
  void flush() {}
};
NCCL_NET_SDK_EXPORT(Net)
