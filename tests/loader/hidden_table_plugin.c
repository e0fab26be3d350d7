/* hidden_table_plugin.c: a C plugin whose table is defined without NCCL_NET_EXPORT, built with -fvisibility=hidden
 * as the SDK's C plugins are: the table is in the library's static symbol table (nm shows "d ncclNetPlugin_v8"), but
 * not among its dynamic symbols, so neither dlsym nor NCCL finds it. The loader must say so, not "not a net plugin".
 * NNS_TABLE_STATIC defines it static instead; NNS_HIDDEN_COLLNET exports the net (which loads: init, devices and
 * getProperties work, every other call refuses with ncclInternalError) and leaves its collNet hidden. Never loaded
 * by the tools' default listings: built outside lib/. */
#include <string.h>

#include "nccl_net/export.h"
#include "nccl_net/net.h"

static ncclResult_t init(ncclDebugLogger_t logger) {
  (void)logger;
  return ncclSuccess;
}
static ncclResult_t devices(int* ndev) {
  *ndev = 1;
  return ncclSuccess;
}
static ncclResult_t getProperties(int dev, ncclNetProperties_v8_t* props) {
  (void)dev;
  memset(props, 0, sizeof(*props));
  props->name = (char*)"hidden0";
  props->ptrSupport = NCCL_PTR_HOST;
  props->speed = 1000;
  props->maxComms = 1;
  props->maxRecvs = 1;
  return ncclSuccess;
}
/* Every entry the tests do not call refuses: the loader refuses a table with a NULL where NCCL calls unchecked. */
static ncclResult_t listen(int dev, void* handle, void** comm) {
  return (void)dev, (void)handle, (void)comm, ncclInternalError;
}
static ncclResult_t connect(int dev, void* handle, void** comm, ncclNetDeviceHandle_v8_t** devComm) {
  return (void)dev, (void)handle, (void)comm, (void)devComm, ncclInternalError;
}
static ncclResult_t accept(void* listenComm, void** comm, ncclNetDeviceHandle_v8_t** devComm) {
  return (void)listenComm, (void)comm, (void)devComm, ncclInternalError;
}
static ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  return (void)comm, (void)data, (void)size, (void)type, (void)mhandle, ncclInternalError;
}
static ncclResult_t deregMr(void* comm, void* mhandle) {
  return (void)comm, (void)mhandle, ncclInternalError;
}
static ncclResult_t isend(void* comm, void* data, int size, int tag, void* mhandle, void** request) {
  return (void)comm, (void)data, (void)size, (void)tag, (void)mhandle, (void)request, ncclInternalError;
}
static ncclResult_t irecv(void* comm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request) {
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

#if defined(NNS_HIDDEN_COLLNET)
NCCL_NET_EXPORT const ncclNet_v8_t ncclNetPlugin_v8 = {
#elif defined(NNS_TABLE_STATIC)
/* Kept though nothing refers to it (GCC drops an unused static at -O1 and above, and nm then shows nothing either),
 * as a static table the library's own code refers to is. */
__attribute__((used)) static const ncclNet_v8_t ncclNetPlugin_v8 = {
#else
const ncclNet_v8_t ncclNetPlugin_v8 = {
#endif
    "hidden-table", init,  devices, getProperties, listen,    connect,   accept,    regMr, NULL, deregMr,
    isend,          irecv, iflush,  test,          closeComm, closeComm, closeComm, NULL,  NULL};

#if defined(NNS_HIDDEN_COLLNET)
/* Never loaded (it is not found): a name is all it needs. */
const ncclCollNet_v8_t ncclCollNetPlugin_v8 = {.name = "hidden-collnet"};
#endif
