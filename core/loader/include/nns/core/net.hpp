// nns/core/net.hpp: the host's one view of a loaded network plugin, whatever ABI version it exports.
//
// This is the contract between the loader (core/loader) and everything above it (collectives, tools). Each method
// has ncclNet_v12 semantics; the loader adapts older versions behind it, in one place, filling missing fields the way
// NCCL does and turning values an old version cannot carry (a size above INT_MAX for an int-sized version) into
// errors.
#pragma once

#include <nccl_net/net.h>

#include <memory>
#include <string>
#include <vector>

namespace nns::core {

class Net {
 public:
  virtual ~Net() = default;

  virtual const char* name() const = 0;         // the plugin's ncclNet name ("Socket", "minimal", ...)
  virtual int version() const = 0;              // the ncclNet_vN the plugin was loaded through
  virtual const std::string& path() const = 0;  // the library file

  // Per-communicator context (v11+); for older versions the adapter passes the process-wide init.
  virtual ncclResult_t init(void** ctx, uint64_t commId, ncclNetCommConfig_v12_t* config, ncclDebugLogger_t logger,
                            ncclProfilerCallback_t profiler) = 0;
  virtual ncclResult_t devices(int* ndev) = 0;
  virtual ncclResult_t getProperties(int dev, ncclNetProperties_v12_t* props) = 0;
  virtual ncclResult_t listen(void* ctx, int dev, void* handle, void** listenComm) = 0;
  virtual ncclResult_t connect(void* ctx, int dev, void* handle, void** sendComm,
                               ncclNetDeviceHandle_v12_t** sendDevComm) = 0;
  virtual ncclResult_t accept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v12_t** recvDevComm) = 0;
  virtual ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle) = 0;
  virtual ncclResult_t regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                                   void** mhandle) = 0;
  virtual ncclResult_t deregMr(void* comm, void* mhandle) = 0;
  virtual ncclResult_t isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                             void** request) = 0;
  virtual ncclResult_t irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                             void** phandles, void** request) = 0;
  virtual ncclResult_t iflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) = 0;
  virtual ncclResult_t test(void* request, int* done, int* sizes) = 0;
  virtual ncclResult_t closeSend(void* sendComm) = 0;
  virtual ncclResult_t closeRecv(void* recvComm) = 0;
  virtual ncclResult_t closeListen(void* listenComm) = 0;
  // Optional in the ABI: has*() says whether the plugin provides it; calling an absent one returns ncclInvalidUsage.
  virtual bool hasMakeVDevice() const = 0;
  virtual ncclResult_t makeVDevice(int* d, ncclNetVDeviceProps_v12_t* props) = 0;
  virtual bool hasSetNetAttr() const = 0;
  virtual ncclResult_t setNetAttr(void* ctx, ncclNetAttr_v12_t* attr) = 0;
  virtual ncclResult_t finalize(void* ctx) = 0;
};

}  // namespace nns::core
