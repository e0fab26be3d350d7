// expect: Net::iflush is not a public iflush(void* recvComm, int n, void** data, int* sizes, void** mhandles
// An optional method with the wrong sizes type (size_t* as in irecv; iflush takes int*).
#include "vendor_net.hpp"

struct Net {
  static constexpr const char kName[] = "vendor";
  VENDOR_NET_REQUIRED
  ncclResult_t iflush(void*, int, void**, size_t*, void**, void**) { return ncclSuccess; }
};
NCCL_NET_SDK_EXPORT(Net)
