// nns/coll/reduce.hpp: the host kernel layer: element-wise reductions and copies for every data type and op.
// The schedules call these through KernelLayer, so a device implementation can replace them.
#pragma once

#include <cstddef>
#include <cstdint>

#include <nccl_net/types.h>

#include "nns/coll/float_convert.hpp"

namespace nns::coll {

size_t typeSize(ncclDataType_t type);
const char* typeName(ncclDataType_t type);
const char* opName(ncclRedOp_t op);
bool parseType(const char* text, ncclDataType_t* type);
bool parseOp(const char* text, ncclRedOp_t* op);
// True for the floating-point types (float16, bfloat16, float32, float64, fp8), whose average NCCL computes by
// multiplying each rank's input by 1/n in the type first (ncclDevPreMulSum), then summing; the integer types sum,
// then divide (ncclDevSumPostDiv).
bool isFloatingPoint(ncclDataType_t type);
// The scalar NCCL multiplies each input of a floating-point avg over `ranks` ranks by: 1/ranks in double, rounded
// to float, then to the type (float64: the double itself). Written to `out` as one value of `type` (8 bytes hold
// any); false for the other types.
bool avgScalar(ncclDataType_t type, int ranks, void* out);

// Conversions, inline in float_convert.hpp (shared with the CUDA kernels' check), all rounding to nearest even:
//   float halfToFloat(uint16_t);     uint16_t floatToHalf(float);      overflow -> infinity, NaN stays NaN
//   float bfloat16ToFloat(uint16_t); uint16_t floatToBfloat16(float);  NaN stays NaN
//   float fp8e4m3ToFloat(uint8_t);   uint8_t floatToFp8e4m3(float);    saturating at +-448, NaN -> 0x7f
//   float fp8e5m2ToFloat(uint8_t);   uint8_t floatToFp8e5m2(float);    saturating at +-57344, NaN -> 0x7f
// The fp8 rules are cuda_fp8.h's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, kind), which the CUDA kernels use.

// What the schedules need from wherever the buffers live.
class KernelLayer {
 public:
  virtual ~KernelLayer() = default;
  // dst[i] = dst[i] op src[i]; avg accumulates like sum (integer avg: finalize divides; floating-point avg
  // premultiplies instead, below).
  virtual void reduce(void* dst, const void* src, size_t count, ncclDataType_t type, ncclRedOp_t op) = 0;
  // dst[i] = a[i] op b[i], where a is dst itself or overlaps neither dst nor b (one pass where copy + reduce would
  // take two). This default does exactly that copy and reduce.
  virtual void reduceInto(void* dst, const void* a, const void* b, size_t count, ncclDataType_t type, ncclRedOp_t op) {
    if (dst != a) copy(dst, a, count * typeSize(type));
    reduce(dst, b, count, type, op);
  }
  // buf[i] = buf[i] / divisor: integer avg's finalize.
  virtual void divide(void* buf, size_t count, ncclDataType_t type, int divisor) = 0;
  // dst[i] = src[i] x scalar, the product rounded to the type once (integers wrap, as prod does): NCCL's
  // ncclDevPreMulSum before its sum, for a premultiplied-sum op and for floating-point avg (scalar: avgScalar), so
  // that the sum stays in range wherever the average is (float16 60000 averaged over 2 ranks is 60000, not the
  // infinity its sum would be). `scalar` is one value of `type` in host memory; dst may be src exactly.
  virtual void premultiply(void* dst, const void* src, size_t count, ncclDataType_t type, const void* scalar) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // True when the buffers this layer works on are GPU memory (its kernels also read the communicator's slots, so
  // those must be memory the GPU can read).
  virtual bool onDevice() const { return false; }
  // Whether this layer's kernels can work on `buffer` (a GPU layer: not plain pageable host memory). The host layer
  // cannot tell GPU memory from its own, and says true.
  virtual bool reaches(const void* /*buffer*/) const { return true; }
  // The CUDA device this layer's kernels run on for `buffer`: the one whose memory it is (cudaMalloc), or the one a
  // managed buffer was allocated on; -1 for host memory (pinned or not), which kernels on any GPU read, and for a
  // layer that cannot tell (the host layer).
  virtual int gpuOf(const void* /*buffer*/) const { return -1; }
};

// Host memory: vectorized by the compiler (plain loops over restrict pointers at -O3), compiled for the baseline
// ISA and, on x86-64, also for x86-64-v3 (AVX2) and x86-64-v4 (AVX-512), one picked at first use by CPUID; the
// environment variable NNS_HOST_ISA=baseline|x86-64-v3|x86-64-v4 caps the choice. All compute the same bits (but for
// the payload and sign of the quiet NaN a sum or product of two NaNs gives), with IEEE subnormals whatever the calling
// thread's flush-to-zero setting. Both functions throw core::CommError (ncclInvalidUsage) when NNS_HOST_ISA is set to
// anything else.
KernelLayer& hostKernels();
// The variant hostKernels() runs: "baseline", "x86-64-v3", "x86-64-v4" or "x86-64-v4+avx512bf16".
const char* hostKernelIsa();

}  // namespace nns::coll
