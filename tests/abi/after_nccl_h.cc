// after_nccl_h.cc: the SDK compiles after an installed <nccl.h> from before NCCL 2.30, as in a plugin that includes
// NCCL's public header first. err.h and types.h then defer to nccl.h's enums, which have no ncclTimeout (new in
// 2.30). The lines below stand in for NCCL 2.28's header: its guard and its three enums.
#ifndef NCCL_H_
#define NCCL_H_
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;
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
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4, ncclNumOps = 5 } ncclRedOp_t;
#endif

#include <nccl_net/sdk.hpp>

#include <cstring>

int main() {
  // A code from a 2.30 plugin still gets its name through a host built against 2.28.
  const bool named = std::strcmp(nccl_net::sdk::resultName(static_cast<ncclResult_t>(8)), "ncclTimeout") == 0 &&
                     std::strcmp(nccl_net::sdk::resultName(ncclRemoteError), "ncclRemoteError") == 0;
  return named ? 0 : 1;
}
