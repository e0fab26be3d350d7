// expect: Net has no public isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle,
// void** request) The v8 size type: it compiled before, and a 3 GiB send was truncated without a word.
#include "vendor_net.hpp"

struct Net {
  static constexpr const char kName[] = "vendor";
  VENDOR_NET_INIT
  VENDOR_NET_REGMR
  ncclResult_t isend(void*, void*, int, int, void*, void*, void**) { return ncclSuccess; }
  VENDOR_NET_TEST
  VENDOR_NET_OTHERS
};
NCCL_NET_SDK_EXPORT(Net)
