/* defective_tables.c: libraries that export a plugin's symbol but not a usable table, one defect per build
 * (NNS_DEFECT_*): the loader must refuse each with the reason, before it calls or reads anything it should not; and
 * one with only the optional iflush missing, which must load. */
#include <stddef.h>
#include <string.h>

#include "nccl_net/net.h"

#define EXPORT __attribute__((visibility("default")))

#if defined(NNS_DEFECT_NULL_ENTRIES) || defined(NNS_DEFECT_NO_IFLUSH) || defined(NNS_DEFECT_UNPACK_DEVICE) ||        \
    defined(NNS_DEFECT_ODD_PROPERTIES) || defined(NNS_DEFECT_UNPACK_0X7) || defined(NNS_DEFECT_V11_PROPS_OVERRUN) || \
    defined(NNS_DEFECT_UNREADABLE_NAME)
/* What the tables below start from: an init and a devices that work. */
static ncclResult_t init(void** ctx, uint64_t commId, ncclNetCommConfig_v12_t* config, ncclDebugLogger_t logger,
                         ncclProfilerCallback_t profiler) {
  (void)commId, (void)config, (void)logger, (void)profiler;
  *ctx = NULL;
  return ncclSuccess;
}
static ncclResult_t devices(int* ndev) {
#if defined(NNS_DEFECT_ODD_PROPERTIES)
  *ndev = 4;
#else
  *ndev = 1;
#endif
  return ncclSuccess;
}
#endif

#if defined(NNS_DEFECT_NULL_ENTRIES) || defined(NNS_DEFECT_NO_IFLUSH) || defined(NNS_DEFECT_UNPACK_DEVICE) ||        \
    defined(NNS_DEFECT_ODD_PROPERTIES) || defined(NNS_DEFECT_UNPACK_0X7) || defined(NNS_DEFECT_V11_PROPS_OVERRUN) || \
    defined(NNS_DEFECT_UNREADABLE_NAME)
/* NO_IFLUSH is not a defect: every entry NCCL calls unchecked is there, iflush (which NCCL calls only after
 * GPU-direct receives) is NULL. UNPACK_DEVICE is the same table with device 0 an UNPACK device at version 0x6, which
 * NCCL refuses to assign (it speaks 0x7 only), and UNPACK_0X7 one at 0x7, which NCCL takes (its kernels finish the
 * receives) and a host engine cannot serve; ODD_PROPERTIES is the table with properties a tool must print as they
 * are (below); V11_PROPS_OVERRUN exports it as ncclNet_v11 with v12's getProperties (at the end); UNREADABLE_NAME
 * the NO_IFLUSH table with a name pointer aimed at no memory (0x10); NULL_ENTRIES a v12 table of init and devices
 * only, beside a whole v11 table (at the end). A test double:
 * the entries beside init, devices, getProperties and
 * finalize refuse with ncclInternalError. */
static ncclResult_t finalize(void* ctx) {
  (void)ctx;
  return ncclSuccess;
}
/* Unused by NULL_ENTRIES, whose v12 table stops at devices. */
__attribute__((unused)) static ncclResult_t getProperties(int dev, ncclNetProperties_v12_t* props) {
#if defined(NNS_DEFECT_ODD_PROPERTIES)
  /* ODD_PROPERTIES: device 1 answers success and writes nothing (a plugin that forgot a device), device 0 has a
   * 2.5 Gb/s link and a latency that is not a number, device 2 (below) more, and device 3 cannot be described (its
   * getProperties fails): a tool must show what it got, not crash on it. */
  if (dev == 1) return ncclSuccess;
  if (dev == 3) return ncclInternalError;
#endif
  (void)dev;
  memset(props, 0, sizeof(*props));
  props->name = (char*)"defective0";
  props->ptrSupport = NCCL_PTR_HOST;
  props->speed = 1000;
  props->maxComms = 1;
  props->maxRecvs = 1;
#if defined(NNS_DEFECT_UNPACK_DEVICE)
  props->netDeviceType = NCCL_NET_DEVICE_UNPACK;
  props->netDeviceVersion = 0x6;
#elif defined(NNS_DEFECT_UNPACK_0X7)
  props->netDeviceType = NCCL_NET_DEVICE_UNPACK;
  props->netDeviceVersion = NCCL_NET_DEVICE_UNPACK_VERSION;
#elif defined(NNS_DEFECT_ODD_PROPERTIES)
  props->speed = 2500;
  props->latency = __builtin_nanf("");
  /* Device 2: exactly 1 Gb/s, an infinite latency, and pointer support beyond the host's: DMA-BUF and a bit NCCL does
   * not define. */
  if (dev == 2) {
    props->name = (char*)"defective2";
    props->speed = 1000;
    props->latency = __builtin_inff();
    props->ptrSupport = NCCL_PTR_HOST | NCCL_PTR_DMABUF | 0x40;
  }
#endif
  return ncclSuccess;
}
static ncclResult_t listen(void* ctx, int dev, void* handle, void** comm) {
  return (void)ctx, (void)dev, (void)handle, (void)comm, ncclInternalError;
}
static ncclResult_t connect(void* ctx, int dev, void* handle, void** comm, ncclNetDeviceHandle_v12_t** devComm) {
  return (void)ctx, (void)dev, (void)handle, (void)comm, (void)devComm, ncclInternalError;
}
static ncclResult_t accept(void* listenComm, void** comm, ncclNetDeviceHandle_v12_t** devComm) {
  return (void)listenComm, (void)comm, (void)devComm, ncclInternalError;
}
static ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  return (void)comm, (void)data, (void)size, (void)type, (void)mhandle, ncclInternalError;
}
static ncclResult_t deregMr(void* comm, void* mhandle) {
  return (void)comm, (void)mhandle, ncclInternalError;
}
static ncclResult_t isend(void* comm, void* data, size_t size, int tag, void* mhandle, void* phandle, void** request) {
  return (void)comm, (void)data, (void)size, (void)tag, (void)mhandle, (void)phandle, (void)request, ncclInternalError;
}
static ncclResult_t irecv(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** phandles,
                          void** request) {
  return (void)comm, (void)n, (void)data, (void)sizes, (void)tags, (void)mhandles, (void)phandles, (void)request,
         ncclInternalError;
}
static ncclResult_t test(void* request, int* done, int* sizes) {
  return (void)request, (void)done, (void)sizes, ncclInternalError;
}
static ncclResult_t closeComm(void* comm) {
  return (void)comm, ncclInternalError;
}
/* The entries after getProperties, alike in the v11 and v12 tables below. */
#define NNS_TABLE_REST                                                                                        \
  .listen = listen, .connect = connect, .accept = accept, .regMr = regMr, .deregMr = deregMr, .isend = isend, \
  .irecv = irecv, .test = test, .closeSend = closeComm, .closeRecv = closeComm, .closeListen = closeComm,     \
  .finalize = finalize
#if defined(NNS_DEFECT_NULL_ENTRIES) || defined(NNS_DEFECT_V11_PROPS_OVERRUN)
static ncclResult_t initV11(void** ctx, uint64_t commId, ncclNetCommConfig_v11_t* config, ncclDebugLogger_t logger,
                            ncclProfilerCallback_t profiler) {
  (void)config;
  return init(ctx, commId, NULL, logger, profiler);
}
#endif
#if defined(NNS_DEFECT_NULL_ENTRIES)
/* A table half filled in: init and devices work (so a loader that only calls those would accept it), everything
 * NCCL calls later is NULL. The collNet beside it has no name and only init. And beside them a whole ncclNet_v11
 * table, as a plugin built for several versions exports: NCCL takes the newest version it finds and never looks at
 * an older one, so the library is refused, not loaded at v11. */
static ncclResult_t collInit(void** ctx, uint64_t commId, ncclDebugLogger_t logger) {
  (void)commId, (void)logger;
  *ctx = NULL;
  return ncclSuccess;
}
static ncclResult_t getPropertiesWholeV11(int dev, ncclNetProperties_v11_t* props) {
  (void)dev;
  memset(props, 0, sizeof(*props));
  props->name = (char*)"whole-v11";
  props->ptrSupport = NCCL_PTR_HOST;
  props->speed = 1000;
  props->maxComms = 1;
  props->maxRecvs = 1;
  return ncclSuccess;
}
EXPORT const ncclNet_v12_t ncclNetPlugin_v12 = {.name = "half-table", .init = init, .devices = devices};
EXPORT const ncclCollNet_v12_t ncclCollNetPlugin_v12 = {.init = collInit};
EXPORT const ncclNet_v11_t ncclNetPlugin_v11 = {
    .name = "whole-v11", .init = initV11, .devices = devices, .getProperties = getPropertiesWholeV11, NNS_TABLE_REST};
#elif defined(NNS_DEFECT_V11_PROPS_OVERRUN)
/* A port to ncclNet_v11 that kept v12's getProperties: it fills a v12 struct (128 bytes) where NCCL passes v11's (112
 * bytes), so 16 bytes land past it, on NCCL's stack. The loader refuses it, and the rejection must say why. */
static ncclResult_t getPropertiesV11(int dev, ncclNetProperties_v11_t* props) {
  return getProperties(dev, (ncclNetProperties_v12_t*)props);
}
EXPORT const ncclNet_v11_t ncclNetPlugin_v11 = {.name = "v11-props-overrun",
                                                .init = initV11,
                                                .devices = devices,
                                                .getProperties = getPropertiesV11,
                                                NNS_TABLE_REST};
#else
#if defined(NNS_DEFECT_UNPACK_DEVICE)
#define NNS_TABLE_NAME "unpack-0x6"
#elif defined(NNS_DEFECT_UNPACK_0X7)
#define NNS_TABLE_NAME "unpack-0x7"
#elif defined(NNS_DEFECT_ODD_PROPERTIES)
#define NNS_TABLE_NAME "odd-properties"
#elif defined(NNS_DEFECT_UNREADABLE_NAME)
#define NNS_TABLE_NAME ((const char*)0x10)
#else
#define NNS_TABLE_NAME "no-iflush"
#endif
EXPORT const ncclNet_v12_t ncclNetPlugin_v12 = {
    .name = NNS_TABLE_NAME, .init = init, .devices = devices, .getProperties = getProperties, NNS_TABLE_REST};
#endif
#elif defined(NNS_DEFECT_FUNCTION)
/* The table's name on a function. */
EXPORT void ncclNetPlugin_v12(void) {}
#elif defined(NNS_DEFECT_CODE_LABEL)
/* The table's name on a label in the library's code, as an assembler defines one: no symbol type, no size, and
 * behind it instructions (int3 here), which read as pointers are garbage. */
__asm__(".text\n.globl ncclNetPlugin_v12\nncclNetPlugin_v12:\n.fill 512, 1, 0xcc\n.previous\n");
#elif defined(NNS_DEFECT_SHORT_OBJECT)
/* The table's name on an object far smaller than the table. */
EXPORT const char ncclNetPlugin_v12[24] = "a string, not a table";
#elif defined(NNS_DEFECT_ONE_ENTRY_SHORT)
/* An object one entry shorter than the table, as a table built against a header with one entry fewer. */
EXPORT const char ncclNetPlugin_v12[sizeof(ncclNet_v12_t) - sizeof(void*)] = "one entry short";
#elif defined(NNS_DEFECT_POINTER)
/* The table's name on a pointer to a table (a plugin that exports `ncclNet_v12_t* ncclNetPlugin_v12 = &table`). */
static const ncclNet_v12_t table = {.name = "pointed-at"};
EXPORT const ncclNet_v12_t* const ncclNetPlugin_v12 = &table;
#elif defined(NNS_DEFECT_ONLY_V5)
/* A plugin of an ABI older than any this host loads: only its version's symbol (the table's contents do not matter:
 * the loader must not read it). */
EXPORT const char ncclNetPlugin_v5[8] = "v5 only";
#elif defined(NNS_DEFECT_ONLY_V13)
/* A plugin built for an ABI newer than this host knows. */
EXPORT const char ncclNetPlugin_v13[8] = "v13 only";
#else
#error "define one NNS_DEFECT_*"
#endif
