// nns/coll/reduce.hpp: the host kernel layer: element-wise reductions and copies for every data type and op.
// The schedules call these through KernelLayer, so a device implementation can replace them.
#pragma once

#include <cstddef>
#include <cstdint>

#include <nccl_net/types.h>

namespace nns::coll {

size_t typeSize(ncclDataType_t type);
const char* typeName(ncclDataType_t type);
const char* opName(ncclRedOp_t op);
bool parseType(const char* text, ncclDataType_t* type);
bool parseOp(const char* text, ncclRedOp_t* op);

// float16 / bfloat16 conversions, round to nearest even (NaN stays NaN).
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bfloat16ToFloat(uint16_t b);
uint16_t floatToBfloat16(float f);

// What the schedules need from wherever the buffers live.
class KernelLayer {
 public:
  virtual ~KernelLayer() = default;
  // dst[i] = dst[i] op src[i]; avg accumulates like sum (finalize divides).
  virtual void reduce(void* dst, const void* src, size_t count, ncclDataType_t type, ncclRedOp_t op) = 0;
  // buf[i] = buf[i] / divisor, for avg.
  virtual void divide(void* buf, size_t count, ncclDataType_t type, int divisor) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
};

// Host memory: vectorized by the compiler (plain loops over restrict pointers at -O3).
KernelLayer& hostKernels();

}  // namespace nns::coll
