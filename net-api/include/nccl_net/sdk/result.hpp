// nccl_net/sdk/result.hpp: names for ncclResult_t and the propagate-on-error macro.
#pragma once

#include "../net.h"
#include "visibility.hpp"

NCCL_NET_SDK_NAMESPACE_BEGIN

// Switches on the value: an nccl.h included first (err.h then defers to it) has no ncclTimeout before NCCL 2.30.
constexpr const char* resultName(ncclResult_t result) {
  constexpr int kTimeout = 8;  // ncclTimeout
  switch (static_cast<int>(result)) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    case kTimeout: return "ncclTimeout";
    default: return "unknown ncclResult_t";
  }
}

NCCL_NET_SDK_NAMESPACE_END

// Returns the failing status of `call` from the enclosing function.
#define NCCL_NET_CHECK(call)                      \
  do {                                            \
    ncclResult_t nccl_net_check_result_ = (call); \
    if (nccl_net_check_result_ != ncclSuccess) {  \
      return nccl_net_check_result_;              \
    }                                             \
  } while (0)
