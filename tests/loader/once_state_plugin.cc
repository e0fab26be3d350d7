// once_state_plugin.cc: a test double of a ncclNet_v12 plugin that sets its process state up once (std::call_once,
// at its first init) and frees it when its last context is finalized, as NCCL allows: NCCL unloads a plugin with its
// last communicator, so one loaded copy never sees an init after its last finalize. A later init here fails
// ("state freed"). Its ncclCollNet_v12 does the same with state of its own (calls recorded as coll-init,
// coll-devices, coll-finalize). Its calls are appended to nnsOnceStateCalls for loader_test. With
// NNS_ONCE_STATE_THROW=init (or devices) set, that call throws a C++ exception through the C ABI, a bug the loader must
// reject cleanly. It moves no data: the data path refuses with ncclInternalError.
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

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
  std::memset(props, 0, sizeof(*props));
  props->name = const_cast<char*>("once0");
  props->ptrSupport = NCCL_PTR_HOST;
  props->speed = 1000;
  props->maxComms = 1;
  props->maxRecvs = 1;
  props->vProps.ndevs = 1;
  props->maxP2pBytes = 1 << 30;
  props->maxCollBytes = 1 << 30;
  props->maxMultiRequestSize = 1;
  props->railId = props->planeId = -1;
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
ncclResult_t listen(void*, int, void*, void**) {
  return ncclInternalError;
}
ncclResult_t connect(void*, int, void*, void**, ncclNetDeviceHandle_v12_t**) {
  return ncclInternalError;
}
ncclResult_t accept(void*, void**, ncclNetDeviceHandle_v12_t**) {
  return ncclInternalError;
}
ncclResult_t regMr(void*, void*, size_t, int, void**) {
  return ncclInternalError;
}
ncclResult_t deregMr(void*, void*) {
  return ncclInternalError;
}
ncclResult_t isend(void*, void*, size_t, int, void*, void*, void**) {
  return ncclInternalError;
}
ncclResult_t irecv(void*, int, void**, size_t*, int*, void**, void**, void**) {
  return ncclInternalError;
}
ncclResult_t test(void*, int*, int*) {
  return ncclInternalError;
}
ncclResult_t close(void*) {
  return ncclInternalError;
}

// The collNet: the same once-set-up state, its own.
State* collState = nullptr;
std::once_flag collOnce;
int collContexts = 0;

ncclResult_t collInit(void** ctx, uint64_t, ncclDebugLogger_t logger) {
  record("coll-init");
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
// In the table's order (designated initializers are C++20).
const ncclNet_v12_t ncclNetPlugin_v12 = {"once-state",
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
EXPORT extern const ncclCollNet_v12_t ncclCollNetPlugin_v12;
const ncclCollNet_v12_t ncclCollNetPlugin_v12 = {"once-state",
                                                 collInit,
                                                 collDevices,
                                                 collGetProperties,
                                                 listen,
                                                 collConnect,
                                                 reduceSupport,
                                                 regMr,
                                                 nullptr /* regMrDmaBuf */,
                                                 deregMr,
                                                 iallreduce,
                                                 nullptr /* iallgather */,
                                                 nullptr /* ireducescatter */,
                                                 collIflush,
                                                 test,
                                                 close,
                                                 close,
                                                 nullptr /* makeVDevice */,
                                                 collFinalize};
}
