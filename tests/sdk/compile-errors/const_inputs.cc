// expect: success
// A const-correct class: what NCCL passes in for the method to read only (irecv's and iflush's lists, makeVDevice's
// props, setNetAttr's attr, a collNet's parts) declared const.
#include "vendor_coll.hpp"
#include "vendor_net.hpp"

struct Net {
  static constexpr const char kName[] = "vendor";
  VENDOR_NET_INIT
  VENDOR_NET_REGMR
  VENDOR_NET_ISEND
  VENDOR_NET_TEST
  ncclResult_t devices(int*) { return ncclSuccess; }
  ncclResult_t getProperties(int, ncclNetProperties_v12_t*) { return ncclSuccess; }
  ncclResult_t listen(void*, int, void*, void**) { return ncclSuccess; }
  ncclResult_t connect(void*, int, void*, void**, ncclNetDeviceHandle_v12_t**) { return ncclSuccess; }
  ncclResult_t accept(void*, void**, ncclNetDeviceHandle_v12_t**) { return ncclSuccess; }
  ncclResult_t deregMr(void*, void*) { return ncclSuccess; }
  ncclResult_t irecv(void*, int, void* const*, const size_t*, const int*, void* const*, void* const*, void**) {
    return ncclSuccess;
  }
  ncclResult_t iflush(void*, int, void* const*, const int*, void* const*, void**) { return ncclSuccess; }
  ncclResult_t makeVDevice(int*, const ncclNetVDeviceProps_v12_t*) { return ncclSuccess; }
  ncclResult_t setNetAttr(void*, const ncclNetAttr_v12_t*) { return ncclSuccess; }
  ncclResult_t closeSend(void*) { return ncclSuccess; }
  ncclResult_t closeRecv(void*) { return ncclSuccess; }
  ncclResult_t closeListen(void*) { return ncclSuccess; }
};
struct Coll {
  VENDOR_COLL_OTHERS
  VENDOR_COLL_REDUCE_SUPPORT
  ncclResult_t iallreduce(void*, void*, void*, size_t, ncclDataType_t, ncclRedOp_t, void*, void*, void**) {
    return ncclSuccess;
  }
  ncclResult_t iallgather(void*, void*, int, const ncclNetSGE_v12_t*, size_t, size_t, size_t, void*, void**) {
    return ncclSuccess;
  }
  ncclResult_t ireducescatter(void*, int, const ncclNetSGE_v12_t*, void*, size_t, size_t, size_t, ncclDataType_t,
                              ncclRedOp_t, void*, void**) {
    return ncclSuccess;
  }
};
NCCL_NET_SDK_EXPORT_WITH_COLLNET(Net, Coll)
