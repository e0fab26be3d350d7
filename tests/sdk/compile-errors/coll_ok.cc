// expect: success
// A correct net and collNet exported together, the collNet with the optional iallgather and iflush.
#include "vendor_coll.hpp"
#include "vendor_net.hpp"

struct Net {
  static constexpr const char kName[] = "vendor";
  VENDOR_NET_REQUIRED
};
struct Coll {
  VENDOR_COLL_OTHERS
  VENDOR_COLL_REDUCE_SUPPORT
  ncclResult_t iallreduce(void*, void*, void*, size_t, ncclDataType_t, ncclRedOp_t, void*, void*, void**) {
    return ncclSuccess;
  }
  ncclResult_t iallgather(void*, void*, int, ncclNetSGE_v12_t*, size_t, size_t, size_t, void*, void**) {
    return ncclSuccess;
  }
  ncclResult_t iflush(void*, void*, int, void*, void**) { return ncclSuccess; }
};
NCCL_NET_SDK_EXPORT_WITH_COLLNET(Net, Coll)
