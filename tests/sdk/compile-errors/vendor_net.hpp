// vendor_net.hpp: the pieces of a vendor's plugin class for the compile-error cases; each case writes the four
// methods whose mistakes it shows (init, regMr, isend, test) and takes the others from VENDOR_NET_OTHERS.
#pragma once

#include <nccl_net/sdk/plugin.hpp>

#define VENDOR_NET_OTHERS                                                         \
  ncclResult_t devices(int* ndev) {                                               \
    *ndev = 1;                                                                    \
    return ncclSuccess;                                                           \
  }                                                                               \
  ncclResult_t getProperties(int, ncclNetProperties_v12_t*) {                     \
    return ncclSuccess;                                                           \
  }                                                                               \
  ncclResult_t listen(void*, int, void*, void**) {                                \
    return ncclSuccess;                                                           \
  }                                                                               \
  ncclResult_t connect(void*, int, void*, void**, ncclNetDeviceHandle_v12_t**) {  \
    return ncclSuccess;                                                           \
  }                                                                               \
  ncclResult_t accept(void*, void**, ncclNetDeviceHandle_v12_t**) {               \
    return ncclSuccess;                                                           \
  }                                                                               \
  ncclResult_t deregMr(void*, void*) {                                            \
    return ncclSuccess;                                                           \
  }                                                                               \
  ncclResult_t irecv(void*, int, void**, size_t*, int*, void**, void**, void**) { \
    return ncclSuccess;                                                           \
  }                                                                               \
  ncclResult_t closeSend(void*) {                                                 \
    return ncclSuccess;                                                           \
  }                                                                               \
  ncclResult_t closeRecv(void*) {                                                 \
    return ncclSuccess;                                                           \
  }                                                                               \
  ncclResult_t closeListen(void*) {                                               \
    return ncclSuccess;                                                           \
  }

#define VENDOR_NET_INIT                                       \
  ncclResult_t init(const nccl_net::sdk::InitArgs&, void**) { \
    return ncclSuccess;                                       \
  }
#define VENDOR_NET_REGMR                                  \
  ncclResult_t regMr(void*, void*, size_t, int, void**) { \
    return ncclSuccess;                                   \
  }
#define VENDOR_NET_ISEND                                                \
  ncclResult_t isend(void*, void*, size_t, int, void*, void*, void**) { \
    return ncclSuccess;                                                 \
  }
#define VENDOR_NET_TEST                                            \
  ncclResult_t test(void*, int*, nccl_net::sdk::CompletedSizes&) { \
    return ncclSuccess;                                            \
  }
// All of them, for a case whose mistake is elsewhere (its name, an optional method, its access).
#define VENDOR_NET_REQUIRED \
  VENDOR_NET_INIT           \
  VENDOR_NET_REGMR          \
  VENDOR_NET_ISEND          \
  VENDOR_NET_TEST           \
  VENDOR_NET_OTHERS
