// expect: Coll has no public iallreduce(void* collComm, void* sendData, void* recvData, size_t count
// The int count of ncclCollNet_v6..v8: it compiled before, and a count above INT_MAX was truncated without a word.
#include "vendor_coll.hpp"

struct Coll {
  VENDOR_COLL_OTHERS
  VENDOR_COLL_REDUCE_SUPPORT
  ncclResult_t iallreduce(void*, void*, void*, int, ncclDataType_t, ncclRedOp_t, void*, void*, void**) {
    return ncclSuccess;
  }
};
NCCL_NET_SDK_EXPORT_COLLNET(Coll)
