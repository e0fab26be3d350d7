/* defective_tables.c: libraries that export a plugin's symbol but not a usable table, one defect per build
 * (NNS_DEFECT_*): the loader must refuse each with the reason, before it calls or reads anything it should not. */
#include <stddef.h>

#include "nccl_net/net.h"

#define EXPORT __attribute__((visibility("default")))

#if defined(NNS_DEFECT_NULL_ENTRIES)
/* A table half filled in: init and devices work (so a loader that only calls those would accept it), everything
 * NCCL calls later is NULL. The collNet beside it has no name and only init. */
static ncclResult_t init(void** ctx, uint64_t commId, ncclNetCommConfig_v12_t* config, ncclDebugLogger_t logger,
                         ncclProfilerCallback_t profiler) {
  (void)commId, (void)config, (void)logger, (void)profiler;
  *ctx = NULL;
  return ncclSuccess;
}
static ncclResult_t devices(int* ndev) {
  *ndev = 1;
  return ncclSuccess;
}
static ncclResult_t collInit(void** ctx, uint64_t commId, ncclDebugLogger_t logger) {
  (void)commId, (void)logger;
  *ctx = NULL;
  return ncclSuccess;
}
EXPORT const ncclNet_v12_t ncclNetPlugin_v12 = {.name = "half-table", .init = init, .devices = devices};
EXPORT const ncclCollNet_v12_t ncclCollNetPlugin_v12 = {.init = collInit};
#elif defined(NNS_DEFECT_FUNCTION)
/* The table's name on a function. */
EXPORT void ncclNetPlugin_v12(void) {}
#elif defined(NNS_DEFECT_SHORT_OBJECT)
/* The table's name on an object far smaller than the table. */
EXPORT const char ncclNetPlugin_v12[24] = "a string, not a table";
#else
#error "define one NNS_DEFECT_*"
#endif
