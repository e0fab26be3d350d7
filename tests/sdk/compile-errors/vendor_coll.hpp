// vendor_coll.hpp: the pieces of a vendor's collNet class for the compile-error cases; each case writes iallreduce
// and reduceSupport and takes the others from VENDOR_COLL_OTHERS.
#pragma once

#include <nccl_net/sdk/collnet.hpp>

#define VENDOR_COLL_OTHERS                                         \
  static constexpr const char kName[] = "vendorcoll";              \
  ncclResult_t init(const nccl_net::sdk::InitArgs&, void**) {      \
    return ncclSuccess;                                            \
  }                                                                \
  ncclResult_t devices(int* ndev) {                                \
    *ndev = 1;                                                     \
    return ncclSuccess;                                            \
  }                                                                \
  ncclResult_t getProperties(int, ncclNetProperties_v12_t*) {      \
    return ncclSuccess;                                            \
  }                                                                \
  ncclResult_t listen(void*, int, void*, void**) {                 \
    return ncclSuccess;                                            \
  }                                                                \
  ncclResult_t connect(void**, int, int, void*, void**) {          \
    return ncclSuccess;                                            \
  }                                                                \
  ncclResult_t regMr(void*, void*, size_t, int, void**) {          \
    return ncclSuccess;                                            \
  }                                                                \
  ncclResult_t deregMr(void*, void*) {                             \
    return ncclSuccess;                                            \
  }                                                                \
  ncclResult_t test(void*, int*, nccl_net::sdk::CompletedSizes&) { \
    return ncclSuccess;                                            \
  }                                                                \
  ncclResult_t closeColl(void*) {                                  \
    return ncclSuccess;                                            \
  }                                                                \
  ncclResult_t closeListen(void*) {                                \
    return ncclSuccess;                                            \
  }

#define VENDOR_COLL_REDUCE_SUPPORT                                \
  ncclResult_t reduceSupport(ncclDataType_t, ncclRedOp_t, int*) { \
    return ncclSuccess;                                           \
  }
