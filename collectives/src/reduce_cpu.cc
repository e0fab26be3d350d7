// reduce_cpu.cc: host reductions for every type and op; plain loops the compiler vectorizes, float16/bfloat16
// computed in float and rounded to nearest even.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <strings.h>

#include "nns/coll/reduce.hpp"

#pragma GCC optimize("O3")

namespace nns::coll {

size_t typeSize(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

namespace {
struct TypeText { ncclDataType_t type; const char* name; const char* alias; };
constexpr TypeText kTypes[] = {
    {ncclInt8, "int8", "char"},         {ncclUint8, "uint8", "uchar"},     {ncclInt32, "int32", "int"},
    {ncclUint32, "uint32", "uint"},     {ncclInt64, "int64", "long"},      {ncclUint64, "uint64", "ulong"},
    {ncclFloat16, "half", "float16"},   {ncclFloat32, "float", "float32"}, {ncclFloat64, "double", "float64"},
    {ncclBfloat16, "bfloat16", "bf16"}};
struct OpText { ncclRedOp_t op; const char* name; };
constexpr OpText kOps[] = {{ncclSum, "sum"}, {ncclProd, "prod"}, {ncclMax, "max"}, {ncclMin, "min"}, {ncclAvg, "avg"}};
}  // namespace

const char* typeName(ncclDataType_t type) {
  for (const auto& t : kTypes)
    if (t.type == type) return t.name;
  return "unknown";
}
const char* opName(ncclRedOp_t op) {
  for (const auto& o : kOps)
    if (o.op == op) return o.name;
  return "unknown";
}
bool parseType(const char* text, ncclDataType_t* type) {
  for (const auto& t : kTypes) {
    if (strcasecmp(text, t.name) == 0 || strcasecmp(text, t.alias) == 0) {
      *type = t.type;
      return true;
    }
  }
  return false;
}
bool parseOp(const char* text, ncclRedOp_t* op) {
  for (const auto& o : kOps) {
    if (strcasecmp(text, o.name) == 0) {
      *op = o.op;
      return true;
    }
  }
  return false;
}

float halfToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ffu, bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int shift = 0;
      while (!(mantissa & 0x400u)) {
        mantissa <<= 1;
        ++shift;
      }
      bits = sign | ((113u - shift) << 23) | ((mantissa & 0x3ffu) << 13);
    }
  } else if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint16_t floatToHalf(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t abs = bits & 0x7fffffffu;
  if (abs >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to infinity
  if (abs < 0x38800000u) {  // subnormal or zero in half
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
    uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    int shift = 126 - static_cast<int>(abs >> 23);  // 14 + (113 - exponent)
    uint32_t half = mantissa >> (shift);
    uint32_t rest = mantissa & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);  // round to nearest even on the 13 dropped bits
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

float bfloat16ToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint16_t floatToBfloat16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

namespace {

template <class T>
struct Ops {
  static T sum(T a, T b) { return static_cast<T>(a + b); }
  static T prod(T a, T b) { return static_cast<T>(a * b); }
  static T max(T a, T b) { return a > b ? a : b; }
  static T min(T a, T b) { return a < b ? a : b; }
};

template <class T, T (*F)(T, T)>
void apply(T* __restrict dst, const T* __restrict src, size_t count) {
  for (size_t i = 0; i < count; ++i) dst[i] = F(dst[i], src[i]);
}

template <class T>
void reduceTyped(void* dst, const void* src, size_t count, ncclRedOp_t op) {
  auto* d = static_cast<T*>(dst);
  auto* s = static_cast<const T*>(src);
  switch (op) {
    case ncclSum: case ncclAvg: apply<T, Ops<T>::sum>(d, s, count); break;
    case ncclProd: apply<T, Ops<T>::prod>(d, s, count); break;
    case ncclMax: apply<T, Ops<T>::max>(d, s, count); break;
    case ncclMin: apply<T, Ops<T>::min>(d, s, count); break;
    default: break;
  }
}

// 16-bit floats: widen a block to float, reduce, narrow with correct rounding.
template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void reduce16(void* dst, const void* src, size_t count, ncclRedOp_t op) {
  auto* d = static_cast<uint16_t*>(dst);
  auto* s = static_cast<const uint16_t*>(src);
  constexpr size_t kBlock = 256;
  float a[kBlock], b[kBlock];
  for (size_t base = 0; base < count; base += kBlock) {
    size_t n = std::min(kBlock, count - base);
    for (size_t i = 0; i < n; ++i) {
      a[i] = Widen(d[base + i]);
      b[i] = Widen(s[base + i]);
    }
    reduceTyped<float>(a, b, n, op);
    for (size_t i = 0; i < n; ++i) d[base + i] = Narrow(a[i]);
  }
}

template <class T>
void divideTyped(void* buf, size_t count, int divisor) {
  auto* p = static_cast<T*>(buf);
  for (size_t i = 0; i < count; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(divisor));
}

template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void divide16(void* buf, size_t count, int divisor) {
  auto* p = static_cast<uint16_t*>(buf);
  for (size_t i = 0; i < count; ++i) p[i] = Narrow(Widen(p[i]) / static_cast<float>(divisor));
}

class HostKernels final : public KernelLayer {
 public:
  void reduce(void* dst, const void* src, size_t count, ncclDataType_t type, ncclRedOp_t op) override {
    switch (type) {
      case ncclInt8: reduceTyped<int8_t>(dst, src, count, op); break;
      case ncclUint8: reduceTyped<uint8_t>(dst, src, count, op); break;
      case ncclInt32: reduceTyped<int32_t>(dst, src, count, op); break;
      case ncclUint32: reduceTyped<uint32_t>(dst, src, count, op); break;
      case ncclInt64: reduceTyped<int64_t>(dst, src, count, op); break;
      case ncclUint64: reduceTyped<uint64_t>(dst, src, count, op); break;
      case ncclFloat32: reduceTyped<float>(dst, src, count, op); break;
      case ncclFloat64: reduceTyped<double>(dst, src, count, op); break;
      case ncclFloat16: reduce16<halfToFloat, floatToHalf>(dst, src, count, op); break;
      case ncclBfloat16: reduce16<bfloat16ToFloat, floatToBfloat16>(dst, src, count, op); break;
      default: break;
    }
  }
  void divide(void* buf, size_t count, ncclDataType_t type, int divisor) override {
    switch (type) {
      case ncclInt8: divideTyped<int8_t>(buf, count, divisor); break;
      case ncclUint8: divideTyped<uint8_t>(buf, count, divisor); break;
      case ncclInt32: divideTyped<int32_t>(buf, count, divisor); break;
      case ncclUint32: divideTyped<uint32_t>(buf, count, divisor); break;
      case ncclInt64: divideTyped<int64_t>(buf, count, divisor); break;
      case ncclUint64: divideTyped<uint64_t>(buf, count, divisor); break;
      case ncclFloat32: divideTyped<float>(buf, count, divisor); break;
      case ncclFloat64: divideTyped<double>(buf, count, divisor); break;
      case ncclFloat16: divide16<halfToFloat, floatToHalf>(buf, count, divisor); break;
      case ncclBfloat16: divide16<bfloat16ToFloat, floatToBfloat16>(buf, count, divisor); break;
      default: break;
    }
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (dst != src) std::memcpy(dst, src, bytes);
  }
};

}  // namespace

KernelLayer& hostKernels() {
  static HostKernels kernels;
  return kernels;
}

}  // namespace nns::coll
