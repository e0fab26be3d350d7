/* nccl_net/types.h: data types, reduction ops, log levels/subsystems, logger and profiler callback types. */
#ifndef NCCL_NET_TYPES_H_
#define NCCL_NET_TYPES_H_

#include <stdint.h>

#include "err.h"

#ifndef NCCL_H_
typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10, /* since NCCL 2.24 */
  ncclFloat8e5m2 = 11, /* since NCCL 2.24 */
  ncclNumTypes = 12
} ncclDataType_t;

typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,           /* values >= ncclNumOps are user-created ops */
  ncclMaxRedOp = 0x7fffffff /* keeps the enum int-sized */
} ncclRedOp_t;
#endif

/* NCCL's nccl_common.h (guarded by NCCL_DEBUG_H_) defines these the same way; defer to it when it came first. Its
 * newer copies (2.30's) hold the profiler's callback and event types too; older ones (the logger alone, under the
 * same guard) do not, and the v10+ tables then lack ncclProfilerCallback_t: use a newer nccl_common.h, or none (these
 * headers define all that it holds). */
#if !defined(NCCL_COMMON_H_) && !defined(NCCL_DEBUG_H_)
typedef enum {
  NCCL_LOG_NONE = 0,
  NCCL_LOG_VERSION = 1,
  NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3,
  NCCL_LOG_ABORT = 4,
  NCCL_LOG_TRACE = 5
} ncclDebugLogLevel;

typedef enum {
  NCCL_INIT = 0x1,
  NCCL_COLL = 0x2,
  NCCL_P2P = 0x4,
  NCCL_SHM = 0x8,
  NCCL_NET = 0x10,
  NCCL_GRAPH = 0x20,
  NCCL_TUNING = 0x40,
  NCCL_ENV = 0x80,
  NCCL_ALLOC = 0x100,
  NCCL_CALL = 0x200,
  NCCL_PROXY = 0x400,
  NCCL_NVLS = 0x800,
  NCCL_BOOTSTRAP = 0x1000,
  NCCL_REG = 0x2000,
  NCCL_PROFILE = 0x4000,
  NCCL_RAS = 0x8000,
  NCCL_DESTROY = 0x10000,    /* 2.30 */
  NCCL_ALLOC_HOST = 0x20000, /* 2.30.7 */
  NCCL_ALL = ~0
} ncclDebugLogSubSys;

/* The host's logger, handed to init(). printf-style format. */
typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                                  const char* fmt, ...);

/* Since v10: the host's profiler callback. pHandle is the phandle the host passed to isend/irecv. */
typedef ncclResult_t (*ncclProfilerCallback_t)(void** eHandle, int type, void* pHandle, int64_t pluginId,
                                               void* extData);

/* The event types the profiler callback takes. */
enum {
  ncclProfilerNetEventStart = 0,
  ncclProfilerNetEventStop = 1,
  ncclProfilerNetEventUpdate = 2,
  ncclProfilerNetEventUpdateAndStop = 3
};
#endif

#endif /* NCCL_NET_TYPES_H_ */
