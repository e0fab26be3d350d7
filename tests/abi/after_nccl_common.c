/* after_nccl_common.c: the net headers compile after NCCL's own nccl_common.h, as in a plugin that is also a tuner
 * or profiler and includes NCCL's headers first. NCCL's header is guarded by NCCL_DEBUG_H_ (not the name of its
 * file) and defines the log levels, subsystems, logger, the profiler's event types and callback; ours must then leave
 * them out. The lines below stand in for it: its guard and a few of its definitions. */
#ifndef NCCL_DEBUG_H_
#define NCCL_DEBUG_H_
#include <stdint.h>

#include "nccl_net/err.h"
typedef enum {
  NCCL_LOG_NONE = 0,
  NCCL_LOG_VERSION = 1,
  NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3,
  NCCL_LOG_ABORT = 4,
  NCCL_LOG_TRACE = 5
} ncclDebugLogLevel;
typedef enum { NCCL_INIT = 1, NCCL_NET = 16, NCCL_ALL = ~0 } ncclDebugLogSubSys;
typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                                  const char* fmt, ...);
enum {
  ncclProfilerNetEventStart = 0,
  ncclProfilerNetEventStop,
  ncclProfilerNetEventUpdate,
  ncclProfilerNetEventUpdateAndStop,
};
typedef ncclResult_t (*ncclProfilerCallback_t)(void** eHandle, int type, void* pHandle, int64_t pluginId,
                                               void* extData);
#endif

#include "nccl_net/net.h"

int main(void) {
  ncclNet_v12_t table = {0};
  return table.name == 0 && NCCL_NET == 16 && ncclProfilerNetEventUpdateAndStop == 3 ? 0 : 1;
}
