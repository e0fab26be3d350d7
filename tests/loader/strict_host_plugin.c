/* strict_host_plugin.c: a test double of a plugin that trusts its host as NCCL's own example plugin does: it logs
 * through the logger init was given, reads the config NCCL always passes (init's since v11, connect's in v10), and
 * takes makeVDevice's device list as given. Built once per version (NNS_STRICT_VERSION, 8..12; v8 has no vNIC list
 * and no makeVDevice, int sizes, and an irecv that answers "not yet": success with no request). Where a careless
 * plugin would crash on a NULL logger or config, this one refuses with ncclInvalidArgument, and it records what the
 * host handed it in nnsStrictRecord for loader_test to read. It moves no data: listen, connect (after recording its
 * config), irecv (after recording its profiler handles) and the other data calls refuse with ncclInternalError. Its
 * properties are all distinct from what an adapter fills in by default, so a field an adapter drops shows. */
#include <stddef.h>
#include <string.h>

#include "nccl_net/net.h"

#define EXPORT __attribute__((visibility("default")))
#define V NNS_STRICT_VERSION
#define CAT4(a, b, c, d) a##b##c##d
#define VERSIONED(a, b, c, d) CAT4(a, b, c, d)
#define T(type) VERSIONED(type, _v, V, _t) /* T(ncclNet) is ncclNet_vN_t */

typedef struct {
  int inits;
  int nullLogger;   /* an init got a NULL logger */
  int nullConfig;   /* an init (v11, v12) or a connect (v10) got a NULL config */
  int trafficClass; /* from the last config seen */
  int vndevs;       /* the last makeVDevice's list */
  int vdevs[NCCL_NET_MAX_DEVS_PER_NIC];
  int nullProfiler;   /* a v10+ init got a NULL profiler callback */
  int overlaps;       /* an init or finalize began while another was running (NCCL runs them one at a time) */
  int irecvs;         /* irecv calls */
  int nullPhandles;   /* a v10+ irecv got a NULL array of profiler handles (NCCL always passes one) */
  long long sendSize; /* the size the last isend was given */
} NnsStrictRecord;

EXPORT NnsStrictRecord nnsStrictRecord;

static ncclDebugLogger_t logFunction;

/* init and finalize each hold `inside` for a moment: one that finds another there counts an overlap. */
static int inside;
__attribute__((unused)) static void enter(void) {
  if (__atomic_fetch_add(&inside, 1, __ATOMIC_ACQ_REL) != 0)
    __atomic_fetch_add(&nnsStrictRecord.overlaps, 1, __ATOMIC_RELAXED);
  for (volatile int spin = 0; spin < 200000; ++spin) {
  }
}
__attribute__((unused)) static void leave(void) {
  __atomic_fetch_sub(&inside, 1, __ATOMIC_ACQ_REL);
}

/* Inits to fail before one succeeds (loader_test sets it: a failed init is tried again, not taken as done). */
EXPORT int nnsStrictFailInits = 0;

static ncclResult_t keepLogger(ncclDebugLogger_t logger) {
  __atomic_fetch_add(&nnsStrictRecord.inits, 1, __ATOMIC_RELAXED);
  if (nnsStrictFailInits > 0) {
    --nnsStrictFailInits;
    return ncclSystemError;
  }
  if (logger == NULL) {
    nnsStrictRecord.nullLogger = 1;
    return ncclInvalidArgument;
  }
  logFunction = logger;
  logFunction(NCCL_LOG_INFO, NCCL_INIT | NCCL_NET, __FILE__, __LINE__, "strict: init through the host's logger");
  return ncclSuccess;
}

#if V >= 10
/* NCCL always passes its profiler callback (a no-op one when no profiler plugin is loaded): this plugin calls it
 * without a check, so it refuses a NULL one. */
static ncclResult_t keepProfiler(ncclProfilerCallback_t profiler) {
  if (profiler == NULL) {
    nnsStrictRecord.nullProfiler = 1;
    return ncclInvalidArgument;
  }
  void* event = NULL;
  return profiler(&event, 0, NULL, 0, NULL);
}

static ncclResult_t readConfig(const void* config, int trafficClass) {
  if (config == NULL) {
    nnsStrictRecord.nullConfig = 1;
    return ncclInvalidArgument;
  }
  nnsStrictRecord.trafficClass = trafficClass;
  return ncclSuccess;
}
#endif

#if V >= 11
static ncclResult_t init(void** ctx, uint64_t commId, T(ncclNetCommConfig) * config, ncclDebugLogger_t logger,
                         ncclProfilerCallback_t profiler) {
  (void)commId;
  *ctx = NULL;
  enter();
  ncclResult_t result = keepProfiler(profiler);
  if (result == ncclSuccess) result = keepLogger(logger);
  if (result == ncclSuccess) result = readConfig(config, config != NULL ? config->trafficClass : 0);
  leave();
  return result;
}
#elif V == 10
static ncclResult_t init(ncclDebugLogger_t logger, ncclProfilerCallback_t profiler) {
  ncclResult_t result = keepProfiler(profiler);
  return result != ncclSuccess ? result : keepLogger(logger);
}
#else
static ncclResult_t init(ncclDebugLogger_t logger) {
  return keepLogger(logger);
}
#endif

static ncclResult_t devices(int* ndev) {
  *ndev = 2;
  return ncclSuccess;
}

/* The virtual NIC size getProperties reports (loader_test sets it: a count beyond the version's list). */
EXPORT int nnsStrictVNicSize = 0;

/* Every field differs from an adapter's default (loader_test checks each): the vNIC's devices listed from the
 * highest down, as many as fit the version's list. */
static ncclResult_t getProperties(int dev, T(ncclNetProperties) * props) {
  memset(props, 0, sizeof(*props));
  props->name = dev == 0 ? "strict0" : "strict1";
  props->pciPath = "/sys/devices/pci0000:00/0000:00:02.0/strict";
  props->guid = 0x5eed0000u + (unsigned)dev;
  props->ptrSupport = NCCL_PTR_HOST;
  props->regIsGlobal = 1;
  props->speed = 1000;
  props->port = 3;
  props->latency = 2.5f;
  props->maxComms = 7;
  props->maxRecvs = 8;
#if V >= 9
  props->forceFlush = 1;
  props->vProps.ndevs = nnsStrictVNicSize;
  for (int i = 0; i < nnsStrictVNicSize && i < (int)(sizeof(props->vProps.devs) / sizeof(props->vProps.devs[0])); ++i)
    props->vProps.devs[i] = nnsStrictVNicSize - 1 - i;
  props->maxP2pBytes = (1ull << 31) + (size_t)dev;
  props->maxCollBytes = 3ull << 30;
#endif
#if V >= 11
  props->maxMultiRequestSize = 8;
#endif
  return ncclSuccess;
}

#if V >= 11
static ncclResult_t listen(void* ctx, int dev, void* handle, void** comm) {
  return (void)ctx, (void)dev, (void)handle, (void)comm, ncclInternalError;
}
static ncclResult_t connect(void* ctx, int dev, void* handle, void** comm, T(ncclNetDeviceHandle) * *devComm) {
  return (void)ctx, (void)dev, (void)handle, (void)comm, (void)devComm, ncclInternalError;
}
#else
static ncclResult_t listen(int dev, void* handle, void** comm) {
  return (void)dev, (void)handle, (void)comm, ncclInternalError;
}
#if V == 10
static ncclResult_t connect(int dev, ncclNetCommConfig_v10_t* config, void* handle, void** comm,
                            ncclNetDeviceHandle_v10_t** devComm) {
  (void)dev, (void)handle, (void)comm, (void)devComm;
  ncclResult_t result = readConfig(config, config != NULL ? config->trafficClass : 0);
  return result != ncclSuccess ? result : ncclInternalError;
}
#else
static ncclResult_t connect(int dev, void* handle, void** comm, T(ncclNetDeviceHandle) * *devComm) {
  return (void)dev, (void)handle, (void)comm, (void)devComm, ncclInternalError;
}
#endif
#endif

static ncclResult_t accept(void* listenComm, void** comm, T(ncclNetDeviceHandle) * *devComm) {
  return (void)listenComm, (void)comm, (void)devComm, ncclInternalError;
}
static ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  return (void)comm, (void)data, (void)size, (void)type, (void)mhandle, ncclInternalError;
}
static ncclResult_t deregMr(void* comm, void* mhandle) {
  return (void)comm, (void)mhandle, ncclInternalError;
}
#if V >= 10
static ncclResult_t isend(void* comm, void* data, size_t size, int tag, void* mhandle, void* phandle, void** request) {
  nnsStrictRecord.sendSize = (long long)size;
  return (void)comm, (void)data, (void)tag, (void)mhandle, (void)phandle, (void)request, ncclInternalError;
}
static ncclResult_t irecv(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** phandles,
                          void** request) {
  __atomic_fetch_add(&nnsStrictRecord.irecvs, 1, __ATOMIC_RELAXED);
  if (phandles == NULL) nnsStrictRecord.nullPhandles = 1; /* NCCL's example plugin would index it */
  return (void)comm, (void)n, (void)data, (void)sizes, (void)tags, (void)mhandles, (void)request, ncclInternalError;
}
#elif V == 9
static ncclResult_t isend(void* comm, void* data, size_t size, int tag, void* mhandle, void** request) {
  nnsStrictRecord.sendSize = (long long)size;
  return (void)comm, (void)data, (void)tag, (void)mhandle, (void)request, ncclInternalError;
}
static ncclResult_t irecv(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** request) {
  return (void)comm, (void)n, (void)data, (void)sizes, (void)tags, (void)mhandles, (void)request, ncclInternalError;
}
#else
static ncclResult_t isend(void* comm, void* data, int size, int tag, void* mhandle, void** request) {
  nnsStrictRecord.sendSize = size;
  return (void)comm, (void)data, (void)tag, (void)mhandle, (void)request, ncclInternalError;
}
/* "Not yet": success with no request, *request left as it was (NCCL sets it to NULL before the call). */
static ncclResult_t irecv(void* comm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request) {
  __atomic_fetch_add(&nnsStrictRecord.irecvs, 1, __ATOMIC_RELAXED);
  return (void)comm, (void)n, (void)data, (void)sizes, (void)tags, (void)mhandles, (void)request, ncclSuccess;
}
#endif
static ncclResult_t test(void* request, int* done, int* sizes) {
  return (void)request, (void)done, (void)sizes, ncclInternalError;
}
static ncclResult_t closeComm(void* comm) {
  return (void)comm, ncclInternalError;
}

#if V >= 11
static ncclResult_t finalize(void* ctx) {
  (void)ctx;
  enter();
  leave();
  return ncclSuccess;
}
#endif

#if V >= 9
static ncclResult_t makeVDevice(int* d, T(ncclNetVDeviceProps) * props) {
  if (props->ndevs < 1 || props->ndevs > (int)(sizeof(props->devs) / sizeof(props->devs[0])))
    return ncclInvalidArgument;
  nnsStrictRecord.vndevs = props->ndevs;
  for (int i = 0; i < props->ndevs; ++i) nnsStrictRecord.vdevs[i] = props->devs[i];
  *d = 2;
  return ncclSuccess;
}
#endif

EXPORT const T(ncclNet) VERSIONED(ncclNetPlugin, _v, V, ) = {
    .name = "strict-host",
    .init = init,
    .devices = devices,
    .getProperties = getProperties,
    .listen = listen,
    .connect = connect,
    .accept = accept,
    .regMr = regMr,
    .deregMr = deregMr,
    .isend = isend,
    .irecv = irecv,
    .test = test,
    .closeSend = closeComm,
    .closeRecv = closeComm,
    .closeListen = closeComm,
#if V >= 9
    .makeVDevice = makeVDevice,
#endif
#if V >= 11
    .finalize = finalize,
#endif
};
