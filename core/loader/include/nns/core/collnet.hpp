// nns/core/collnet.hpp: the host's one view of a loaded collNet (in-network collectives), whatever ABI version the
// plugin exports.
//
// Like nns::core::Net, each method has ncclCollNet_v12 semantics; the loader's adapters (core/loader/src/adapters.cc)
// fill what an older version lacks the way NCCL 2.30 does and turn values an old version cannot carry into errors.
#pragma once

#include <nccl_net/net.h>

#include <string>

namespace nns::core {

class CollNet {
 public:
  virtual ~CollNet() = default;

  virtual const char* name() const = 0;         // the plugin's ncclCollNet name
  virtual int version() const = 0;              // the ncclCollNet_vN it was loaded through
  virtual const std::string& path() const = 0;  // the library file

  // Per-communicator context (v11+); older versions are initialised once per process and get a NULL ctx.
  virtual ncclResult_t init(void** ctx, uint64_t commId, ncclDebugLogger_t logger) = 0;
  virtual ncclResult_t devices(int* ndev) = 0;
  virtual ncclResult_t getProperties(int dev, ncclNetProperties_v12_t* props) = 0;
  virtual ncclResult_t listen(void* ctx, int dev, void* handle, void** listenComm) = 0;
  virtual ncclResult_t connect(void* handles[], int nranks, int rank, void* listenComm, void** collComm) = 0;
  virtual ncclResult_t reduceSupport(ncclDataType_t dataType, ncclRedOp_t redOp, int* supported) = 0;
  virtual ncclResult_t regMr(void* collComm, void* data, size_t size, int type, void** mhandle) = 0;
  virtual ncclResult_t regMrDmaBuf(void* collComm, void* data, size_t size, int type, uint64_t offset, int fd,
                                   void** mhandle) = 0;
  virtual ncclResult_t deregMr(void* collComm, void* mhandle) = 0;
  virtual ncclResult_t iallreduce(void* collComm, void* sendData, void* recvData, size_t count, ncclDataType_t dataType,
                                  ncclRedOp_t redOp, void* sendMhandle, void* recvMhandle, void** request) = 0;
  // Optional in the ABI (and absent before v8): has*() says whether the plugin provides it; calling an absent one
  // returns ncclInvalidUsage.
  virtual bool hasIallgather() const = 0;
  virtual ncclResult_t iallgather(void* collComm, void* sendData, int nRecvParts, ncclNetSGE_v12_t* recvParts,
                                  size_t bytesPerRank, size_t windowOffset, size_t windowBytes, void* sendMhandle,
                                  void** request) = 0;
  virtual bool hasIreducescatter() const = 0;
  virtual ncclResult_t ireducescatter(void* collComm, int nSendParts, ncclNetSGE_v12_t* sendParts, void* recvData,
                                      size_t bytesPerRank, size_t windowOffset, size_t windowBytes,
                                      ncclDataType_t dataType, ncclRedOp_t redOp, void* recvMhandle,
                                      void** request) = 0;
  virtual ncclResult_t iflush(void* collComm, void* data, int size, void* mhandle, void** request) = 0;
  virtual ncclResult_t test(void* request, int* done, int* size) = 0;
  virtual ncclResult_t closeColl(void* collComm) = 0;
  virtual ncclResult_t closeListen(void* listenComm) = 0;
  virtual bool hasMakeVDevice() const = 0;
  virtual ncclResult_t makeVDevice(int* d, ncclNetVDeviceProps_v12_t* props) = 0;
  virtual ncclResult_t finalize(void* ctx) = 0;  // a no-op before v11
};

}  // namespace nns::core
