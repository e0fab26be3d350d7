// once_state_plugin.cc: a test double of a ncclNet_v12 plugin that sets its process state up once (std::call_once,
// at its first init) and frees it when its last context is finalized, as NCCL allows: NCCL unloads a plugin with its
// last communicator, so one loaded copy never sees an init after its last finalize. A later init here fails
// ("state freed"). Its ncclCollNet_v12 does the same with state of its own (calls recorded as coll-init,
// coll-devices, coll-finalize). Its calls are appended to nnsOnceStateCalls for loader_test. With
// NNS_ONCE_STATE_THROW=init (or devices) set, that call throws a C++ exception through the C ABI, a bug the loader must
// reject cleanly; with NNS_ONCE_STATE_COLL_NO_DEVICES=1 its collNet lists no device and logs a WARN saying so. It moves
// no data: the data path refuses with ncclInternalError.
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

#include "host_only_net.hpp"
#include "nccl_net/net.h"

#define EXPORT __attribute__((visibility("default")))

extern "C" {
EXPORT char nnsOnceStateCalls[512] = "";
}

namespace {

struct State {
  int devices = 1;
};
State* state = nullptr;
std::once_flag once;
int contexts = 0;

void record(const char* call) {
  std::strncat(nnsOnceStateCalls, call, sizeof(nnsOnceStateCalls) - std::strlen(nnsOnceStateCalls) - 2);
  std::strncat(nnsOnceStateCalls, " ", sizeof(nnsOnceStateCalls) - std::strlen(nnsOnceStateCalls) - 1);
}

void throwIfAsked(const char* call) {
  const char* which = std::getenv("NNS_ONCE_STATE_THROW");
  if (which != nullptr && std::strcmp(which, call) == 0) throw std::runtime_error(std::string(call) + " threw");
}

ncclResult_t init(void** ctx, uint64_t, ncclNetCommConfig_v12_t*, ncclDebugLogger_t logger, ncclProfilerCallback_t) {
  record("init");
  throwIfAsked("init");
  std::call_once(once, [] { state = new State; });
  if (state == nullptr) {
    logger(NCCL_LOG_WARN, NCCL_NET, __FILE__, __LINE__, "once-state: init after the last finalize: state freed");
    return ncclInternalError;
  }
  ++contexts;
  *ctx = state;
  return ncclSuccess;
}
ncclResult_t devices(int* ndev) {
  record("devices");
  throwIfAsked("devices");
  if (state == nullptr) return ncclInternalError;
  *ndev = state->devices;
  return ncclSuccess;
}
ncclResult_t getProperties(int dev, ncclNetProperties_v12_t* props) {
  record("getProperties");
  if (state == nullptr || dev != 0) return ncclInternalError;
  host_only_net::fillProperties(props, "once0");
  return ncclSuccess;
}
ncclResult_t finalize(void*) {
  record("finalize");
  if (--contexts == 0) {
    delete state;
    state = nullptr;  // the once flag stays set: this copy of the library is done
  }
  return ncclSuccess;
}

// The collNet: the same once-set-up state, its own.
State* collState = nullptr;
std::once_flag collOnce;
int collContexts = 0;
ncclDebugLogger_t collLogger = nullptr;

ncclResult_t collInit(void** ctx, uint64_t, ncclDebugLogger_t logger) {
  record("coll-init");
  collLogger = logger;
  std::call_once(collOnce, [] { collState = new State; });
  if (collState == nullptr) {
    logger(NCCL_LOG_WARN, NCCL_NET, __FILE__, __LINE__, "once-state: collNet init after its last finalize");
    return ncclInternalError;
  }
  ++collContexts;
  *ctx = collState;
  return ncclSuccess;
}
ncclResult_t collDevices(int* ndev) {
  record("coll-devices");
  if (collState == nullptr) return ncclInternalError;
  *ndev = collState->devices;
  if (std::getenv("NNS_ONCE_STATE_COLL_NO_DEVICES") != nullptr) {
    if (collLogger != nullptr)
      collLogger(NCCL_LOG_WARN, NCCL_NET, __FILE__, __LINE__, "once-state: the collNet lists no device (asked to)");
    *ndev = 0;
  }
  return ncclSuccess;
}
ncclResult_t collGetProperties(int dev, ncclNetProperties_v12_t* props) {
  return collState == nullptr ? ncclInternalError : getProperties(dev, props);
}
ncclResult_t collFinalize(void*) {
  record("coll-finalize");
  if (--collContexts == 0) {
    delete collState;
    collState = nullptr;
  }
  return ncclSuccess;
}
// A virtual collNet device over its one device: it counts as the next device, as NCCL expects of makeVDevice.
ncclResult_t collMakeVDevice(int* d, ncclNetVDeviceProps_v12_t* props) {
  record("coll-makeVDevice");
  if (collState == nullptr || props == nullptr || props->ndevs != 1 || props->devs[0] != 0) return ncclInvalidArgument;
  *d = collState->devices++;
  return ncclSuccess;
}
ncclResult_t collConnect(void*[], int, int, void*, void**) {
  return ncclInternalError;
}
ncclResult_t reduceSupport(ncclDataType_t, ncclRedOp_t, int* supported) {
  *supported = 0;
  return ncclSuccess;
}
ncclResult_t iallreduce(void*, void*, void*, size_t, ncclDataType_t, ncclRedOp_t, void*, void*, void**) {
  return ncclInternalError;
}
ncclResult_t collIflush(void*, void*, int, void*, void**) {
  return ncclInternalError;
}

}  // namespace

// Declared extern first: a namespace-scope const is otherwise internal, and not exported.
extern "C" {
EXPORT extern const ncclNet_v12_t ncclNetPlugin_v12;
const ncclNet_v12_t ncclNetPlugin_v12 = host_only_net::table("once-state", init, devices, getProperties, finalize);
EXPORT extern const ncclCollNet_v12_t ncclCollNetPlugin_v12;
// In the table's order (designated initializers are C++20); its data path refuses, as the net's.
const ncclCollNet_v12_t ncclCollNetPlugin_v12 = {"once-state",
                                                 collInit,
                                                 collDevices,
                                                 collGetProperties,
                                                 host_only_net::listen,
                                                 collConnect,
                                                 reduceSupport,
                                                 host_only_net::regMr,
                                                 nullptr /* regMrDmaBuf */,
                                                 host_only_net::deregMr,
                                                 iallreduce,
                                                 nullptr /* iallgather */,
                                                 nullptr /* ireducescatter */,
                                                 collIflush,
                                                 host_only_net::test,
                                                 host_only_net::close,
                                                 host_only_net::close,
                                                 collMakeVDevice,
                                                 collFinalize};
}
