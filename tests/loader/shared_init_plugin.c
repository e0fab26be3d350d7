/* shared_init_plugin.c: a test double of a plugin that exports ncclNet_v9 and ncclNet_v8 sharing one init, as plugins
 * built for several NCCL versions commonly do, and whose init refuses a second call (NCCL, which loads one version,
 * calls it once per process). It counts its init calls in nnsSharedInits for loader_test, and lists no device when
 * NNS_SHARED_INIT_NO_DEVICES is set. Built with NNS_SEPARATE_INITS, each table has an init of its own instead (the
 * v8 one counting in nnsSeparateInits8), each refusing a second call of itself. It moves no data: every
 * other call refuses with ncclInternalError. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_net/net.h"

#define EXPORT __attribute__((visibility("default")))

EXPORT int nnsSharedInits = 0;

static ncclResult_t init(ncclDebugLogger_t logger) {
  (void)logger;
  return ++nnsSharedInits == 1 ? ncclSuccess : ncclInternalError;
}
#ifdef NNS_SEPARATE_INITS
EXPORT int nnsSeparateInits8 = 0;
static ncclResult_t init8(ncclDebugLogger_t logger) {
  (void)logger;
  return ++nnsSeparateInits8 == 1 ? ncclSuccess : ncclInternalError;
}
#else
#define init8 init
#endif
static ncclResult_t devices(int* ndev) {
  *ndev = getenv("NNS_SHARED_INIT_NO_DEVICES") != NULL ? 0 : 1; /* a plugin that finds no device once initialised */
  return ncclSuccess;
}
#define FILL_PROPERTIES(props)          \
  memset((props), 0, sizeof(*(props))); \
  (props)->name = "shared0";            \
  (props)->ptrSupport = NCCL_PTR_HOST;  \
  (props)->speed = 1000;                \
  (props)->maxComms = 1;                \
  (props)->maxRecvs = 1
static ncclResult_t getProperties9(int dev, ncclNetProperties_v9_t* props) {
  FILL_PROPERTIES(props);
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
  props->maxP2pBytes = 1 << 30;
  props->maxCollBytes = 1 << 30;
  return ncclSuccess;
}
static ncclResult_t getProperties8(int dev, ncclNetProperties_v8_t* props) {
  (void)dev;
  FILL_PROPERTIES(props);
  return ncclSuccess;
}
static ncclResult_t listen(int dev, void* handle, void** comm) {
  return (void)dev, (void)handle, (void)comm, ncclInternalError;
}
static ncclResult_t connect9(int dev, void* handle, void** comm, ncclNetDeviceHandle_v9_t** devComm) {
  return (void)dev, (void)handle, (void)comm, (void)devComm, ncclInternalError;
}
static ncclResult_t connect8(int dev, void* handle, void** comm, ncclNetDeviceHandle_v8_t** devComm) {
  return (void)dev, (void)handle, (void)comm, (void)devComm, ncclInternalError;
}
static ncclResult_t accept9(void* listenComm, void** comm, ncclNetDeviceHandle_v9_t** devComm) {
  return (void)listenComm, (void)comm, (void)devComm, ncclInternalError;
}
static ncclResult_t accept8(void* listenComm, void** comm, ncclNetDeviceHandle_v8_t** devComm) {
  return (void)listenComm, (void)comm, (void)devComm, ncclInternalError;
}
static ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  return (void)comm, (void)data, (void)size, (void)type, (void)mhandle, ncclInternalError;
}
static ncclResult_t deregMr(void* comm, void* mhandle) {
  return (void)comm, (void)mhandle, ncclInternalError;
}
static ncclResult_t isend9(void* comm, void* data, size_t size, int tag, void* mhandle, void** request) {
  return (void)comm, (void)data, (void)size, (void)tag, (void)mhandle, (void)request, ncclInternalError;
}
static ncclResult_t isend8(void* comm, void* data, int size, int tag, void* mhandle, void** request) {
  return (void)comm, (void)data, (void)size, (void)tag, (void)mhandle, (void)request, ncclInternalError;
}
static ncclResult_t irecv9(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** request) {
  return (void)comm, (void)n, (void)data, (void)sizes, (void)tags, (void)mhandles, (void)request, ncclInternalError;
}
static ncclResult_t irecv8(void* comm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request) {
  return (void)comm, (void)n, (void)data, (void)sizes, (void)tags, (void)mhandles, (void)request, ncclInternalError;
}
static ncclResult_t iflush(void* comm, int n, void** data, int* sizes, void** mhandles, void** request) {
  return (void)comm, (void)n, (void)data, (void)sizes, (void)mhandles, (void)request, ncclInternalError;
}
static ncclResult_t test(void* request, int* done, int* sizes) {
  return (void)request, (void)done, (void)sizes, ncclInternalError;
}
static ncclResult_t closeComm(void* comm) {
  return (void)comm, ncclInternalError;
}

EXPORT const ncclNet_v9_t ncclNetPlugin_v9 = {
    "shared-init", init,   devices, getProperties9, listen,    connect9,  accept9,   regMr, NULL, deregMr,
    isend9,        irecv9, iflush,  test,           closeComm, closeComm, closeComm, NULL,  NULL, NULL};
EXPORT const ncclNet_v8_t ncclNetPlugin_v8 = {
    "shared-init", init8,  devices, getProperties8, listen,    connect8,  accept8,   regMr, NULL, deregMr,
    isend8,        irecv8, iflush,  test,           closeComm, closeComm, closeComm, NULL,  NULL};
