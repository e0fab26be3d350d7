// expect: Net has no public isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle,
// A tag declared narrower than NCCL's int: it compiled, and the SDK's call cut NCCL's tag inside its own header, where
// no -Wconversion warning reaches the vendor.
#include <cstdint>

#include "vendor_net.hpp"

struct Net {
  static constexpr const char kName[] = "vendor";
  VENDOR_NET_INIT
  VENDOR_NET_REGMR
  ncclResult_t isend(void*, void*, size_t, int16_t, void*, void*, void**) { return ncclSuccess; }
  VENDOR_NET_TEST
  VENDOR_NET_OTHERS
};
NCCL_NET_SDK_EXPORT(Net)
