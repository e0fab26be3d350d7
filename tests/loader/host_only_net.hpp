// host_only_net.hpp: what the loader tests' v12 test doubles share: the properties of one host-memory device, and a
// data path that refuses every call (ncclInternalError), since those doubles check loading, not moving data; table()
// puts a double's own calls into an ncclNet_v12_t with that data path. constexpr, so a table made with it is
// initialised constantly (no code runs to fill it; in a program that is not position-independent it is .rodata).
#pragma once

#include <cstring>

#include "nccl_net/net.h"

namespace host_only_net {

inline void fillProperties(ncclNetProperties_v12_t* props, const char* name) {
  std::memset(props, 0, sizeof(*props));
  props->name = const_cast<char*>(name);
  props->ptrSupport = NCCL_PTR_HOST;
  props->speed = 1000;
  props->maxComms = 1;
  props->maxRecvs = 1;
  props->vProps.ndevs = 1;
  props->maxP2pBytes = 1 << 30;
  props->maxCollBytes = 1 << 30;
  props->maxMultiRequestSize = 1;
  props->railId = props->planeId = -1;
}

inline ncclResult_t listen(void*, int, void*, void**) {
  return ncclInternalError;
}
inline ncclResult_t connect(void*, int, void*, void**, ncclNetDeviceHandle_v12_t**) {
  return ncclInternalError;
}
inline ncclResult_t accept(void*, void**, ncclNetDeviceHandle_v12_t**) {
  return ncclInternalError;
}
inline ncclResult_t regMr(void*, void*, size_t, int, void**) {
  return ncclInternalError;
}
inline ncclResult_t deregMr(void*, void*) {
  return ncclInternalError;
}
inline ncclResult_t isend(void*, void*, size_t, int, void*, void*, void**) {
  return ncclInternalError;
}
inline ncclResult_t irecv(void*, int, void**, size_t*, int*, void**, void**, void**) {
  return ncclInternalError;
}
inline ncclResult_t test(void*, int*, int*) {
  return ncclInternalError;
}
inline ncclResult_t close(void*) {
  return ncclInternalError;
}

// In the table's order (designated initializers are C++20).
constexpr ncclNet_v12_t table(const char* name, decltype(ncclNet_v12_t::init) init,
                              decltype(ncclNet_v12_t::devices) devices,
                              decltype(ncclNet_v12_t::getProperties) getProperties,
                              decltype(ncclNet_v12_t::finalize) finalize) {
  return {name,
          init,
          devices,
          getProperties,
          listen,
          connect,
          accept,
          regMr,
          nullptr /* regMrDmaBuf */,
          deregMr,
          isend,
          irecv,
          nullptr /* iflush */,
          test,
          close,
          close,
          close,
          nullptr /* getDeviceMr */,
          nullptr /* irecvConsumed */,
          nullptr /* makeVDevice */,
          finalize,
          nullptr /* setNetAttr */};
}

}  // namespace host_only_net
