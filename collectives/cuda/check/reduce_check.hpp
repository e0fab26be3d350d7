// reduce_check.hpp: correctness checks of the CUDA kernels against a CPU reference, shared by the check tool and tests.
#pragma once

#include <cstddef>
#include <string>

#include <nccl_net/types.h>

namespace nns::cuda::check {

// Which buffer the output is: its own (poisoned first, and checked for writes past the end), or a or b (in place;
// the README allows either).
enum class Output { kSeparate, kInA, kInB };
// Inputs: random moderate values (sums and products stay finite; integers over their whole range), or about half
// of them at the formats' edges: NaNs, infinities, the largest finite values and values whose sums or products
// overflow float16 or saturate fp8, subnormals, signed zeros, integer extremes.
enum class Values { kModerate, kEdges };

// One reduction on the device, element offsets applied to dst, a and b (misaligned starts; with kInA or kInB,
// dstOffset is ignored). Returns "" when every element matches the reference, else what differed. Bit for bit,
// except that any NaN matches any NaN: NVIDIA's arithmetic returns a canonical NaN where the CPU keeps a NaN
// operand's sign and payload.
std::string checkReduce(ncclDataType_t type, ncclRedOp_t op, size_t count, size_t dstOffset, size_t aOffset,
                        size_t bOffset, Output output, unsigned seed, Values values = Values::kModerate);
// Avg's finalize: divide by divisor, compared with the reference's rounding of x / divisor (NaN as above).
std::string checkDivide(ncclDataType_t type, size_t count, int divisor, unsigned seed,
                        Values values = Values::kModerate);
// Floating-point avg's first step: x times 1/ranks as the type holds it, compared with the reference's rounding of
// that product (NaN as above). Floating-point types only.
std::string checkPremultiply(ncclDataType_t type, size_t count, int ranks, unsigned seed,
                             Values values = Values::kModerate);
// The copy kernel at a byte offset pair.
std::string checkCopy(size_t bytes, size_t dstOffset, size_t srcOffset, unsigned seed);

// Elements of `type` (largeCount) or bytes (largeCopyBytes) for which the kernels' unrolled loop runs on every
// thread of the largest grid on the current device, the one-vector loop after it on half of them, and a scalar tail:
// sized from its SM count (kReduceThreads, kReduceBlocksPerSm, kReduceUnroll in nns/cuda/kernels.hpp).
size_t largeCount(ncclDataType_t type);
size_t largeCopyBytes();

const char* typeName(ncclDataType_t type);
const char* opName(ncclRedOp_t op);
constexpr ncclDataType_t kTypes[] = {ncclInt8,    ncclUint8,    ncclInt32,      ncclUint32,
                                     ncclInt64,   ncclUint64,   ncclFloat16,    ncclFloat32,
                                     ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
constexpr ncclRedOp_t kOps[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
constexpr size_t kCounts[] = {1, 7, 33, 1000, 4099, (1u << 20) + 3};
// Edge values reach the vector loop, with and without a scalar head, and the scalar loop alone.
constexpr size_t kEdgeCounts[] = {1, 33, 4099};

}  // namespace nns::cuda::check
