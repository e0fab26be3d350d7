// reduce_check.hpp: correctness checks of the CUDA kernels against a CPU reference, shared by the check tool and tests.
#pragma once

#include <cstddef>
#include <string>

#include <nccl_net/types.h>

namespace nns::cuda::check {

// One reduction on the device, element offsets applied to dst, a and b (misaligned starts); inPlace makes dst == a.
// Returns "" when every element matches the reference bit for bit, else what differed.
std::string checkReduce(ncclDataType_t type, ncclRedOp_t op, size_t count, size_t dstOffset, size_t aOffset,
                        size_t bOffset, bool inPlace, unsigned seed);
// Avg's finalize: divide by divisor, compared with the reference's rounding of x / divisor.
std::string checkDivide(ncclDataType_t type, size_t count, int divisor, unsigned seed);
// The copy kernel at a byte offset pair.
std::string checkCopy(size_t bytes, size_t dstOffset, size_t srcOffset, unsigned seed);

const char* typeName(ncclDataType_t type);
const char* opName(ncclRedOp_t op);
constexpr ncclDataType_t kTypes[] = {ncclInt8,    ncclUint8,    ncclInt32,      ncclUint32,
                                     ncclInt64,   ncclUint64,   ncclFloat16,    ncclFloat32,
                                     ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
constexpr ncclRedOp_t kOps[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
constexpr size_t kCounts[] = {1, 7, 33, 1000, 4099, (1u << 20) + 3};
constexpr size_t kLargeCount = (size_t{1} << 23) + 3;  // the reduce kernel's unrolled loop (check_main.cc)

}  // namespace nns::cuda::check
