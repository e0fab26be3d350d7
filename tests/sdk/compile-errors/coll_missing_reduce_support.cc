// expect: Coll has no public reduceSupport(ncclDataType_t dataType, ncclRedOp_t redOp, int* supported)
#include "vendor_coll.hpp"

struct Coll {
  VENDOR_COLL_OTHERS
  ncclResult_t iallreduce(void*, void*, void*, size_t, ncclDataType_t, ncclRedOp_t, void*, void*, void**) {
    return ncclSuccess;
  }
};
NCCL_NET_SDK_EXPORT_COLLNET(Coll)
