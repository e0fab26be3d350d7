// expect: Net has no public regMr(void* comm, void* data, size_t size, int type, void** mhandle)
// The v7 size type: it compiled before, and a 4 GiB registration was truncated without a word.
#include "vendor_net.hpp"

struct Net {
  static constexpr const char kName[] = "vendor";
  VENDOR_NET_INIT
  ncclResult_t regMr(void*, void*, int, int, void**) { return ncclSuccess; }
  VENDOR_NET_ISEND
  VENDOR_NET_TEST
  VENDOR_NET_OTHERS
};
NCCL_NET_SDK_EXPORT(Net)
