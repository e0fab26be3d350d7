// reduce_cpu.cc: host reductions for every type and op; plain loops the compiler vectorizes, float16/bfloat16/fp8
// computed in float and rounded to nearest even (fp8 saturating, as the CUDA kernels).
#include <strings.h>

#include <cstdint>
#include <cstring>

// O3 vectorizes the loops. no-trapping-math lets GCC if-convert the branch-free conversions in float_convert.hpp
// (it computes a float candidate that only some lanes use, which GCC will not speculate while traps may be on);
// results are unchanged, nothing here enables traps or reads the exception flags. Placed before the project
// headers so that the inline conversions get the same options as the loops they are inlined into.
#pragma GCC optimize("O3", "no-trapping-math")

#include "nns/coll/reduce.hpp"

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
    {ncclBfloat16, "bfloat16", "bf16"}, {ncclFloat8e4m3, "fp8e4m3", "f8e4m3"}, {ncclFloat8e5m2, "fp8e5m2", "f8e5m2"}};
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

namespace {

// Integer sum and prod wrap around (two's complement) through the unsigned type, as the CUDA kernels do: signed
// overflow would be undefined.
template <class T> struct Arithmetic { using type = T; };
template <> struct Arithmetic<int8_t> { using type = uint8_t; };
template <> struct Arithmetic<int32_t> { using type = uint32_t; };
template <> struct Arithmetic<int64_t> { using type = uint64_t; };

struct Sum {
  template <class T> static T apply(T a, T b) {
    using U = typename Arithmetic<T>::type;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  }
};
struct Prod {
  template <class T> static T apply(T a, T b) {
    using U = typename Arithmetic<T>::type;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  }
};
// With a NaN the result is the second operand, as on the GPU.
struct Max {
  template <class T> static T apply(T a, T b) { return a > b ? a : b; }
  static bool takeFirst(float a, float b) { return a > b; }
};
struct Min {
  template <class T> static T apply(T a, T b) { return a < b ? a : b; }
  static bool takeFirst(float a, float b) { return a < b; }
};

template <class T, class Op>
void apply(T* __restrict dst, const T* __restrict src, size_t count) {
  for (size_t i = 0; i < count; ++i) dst[i] = Op::apply(dst[i], src[i]);
}

template <class T>
void reduceTyped(void* dst, const void* src, size_t count, ncclRedOp_t op) {
  auto* d = static_cast<T*>(dst);
  auto* s = static_cast<const T*>(src);
  switch (op) {
    case ncclSum: case ncclAvg: apply<T, Sum>(d, s, count); break;
    case ncclProd: apply<T, Prod>(d, s, count); break;
    case ncclMax: apply<T, Max>(d, s, count); break;
    case ncclMin: apply<T, Min>(d, s, count); break;
    default: break;
  }
}

// Formats below float: their storage type and exact conversions (float_convert.hpp).
struct Half {
  using Bits = uint16_t;
  static float widen(Bits v) { return halfToFloat(v); }
  static Bits narrow(float f) { return floatToHalf(f); }
};
struct Bfloat16 {
  using Bits = uint16_t;
  static float widen(Bits v) { return bfloat16ToFloat(v); }
  static Bits narrow(float f) { return floatToBfloat16(f); }
};
struct Fp8e4m3 {
  using Bits = uint8_t;
  static float widen(Bits v) { return fp8e4m3ToFloat(v); }
  static Bits narrow(float f) { return floatToFp8e4m3(f); }
};
struct Fp8e5m2 {
  using Bits = uint8_t;
  static float widen(Bits v) { return fp8e5m2ToFloat(v); }
  static Bits narrow(float f) { return floatToFp8e5m2(f); }
};

// Sum and prod: widen (exact), one float operation, narrow. Rounding twice (to float, then to the format) gives
// the correctly rounded result because float's 24 bits >= 2p + 2 for every format here (p <= 11).
// One fused loop: the conversions are branch-free inline code, so it vectorizes as a whole.
template <class Format, class Op>
void applySmall(typename Format::Bits* __restrict dst, const typename Format::Bits* __restrict src, size_t count) {
  for (size_t i = 0; i < count; ++i)
    dst[i] = Format::narrow(Op::apply(Format::widen(dst[i]), Format::widen(src[i])));
}

// Max and min keep one input's bits (no narrowing), as the CUDA kernels do.
template <class Format, class Op>
void selectSmall(typename Format::Bits* __restrict dst, const typename Format::Bits* __restrict src, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    auto a = dst[i], b = src[i];
    dst[i] = Op::takeFirst(Format::widen(a), Format::widen(b)) ? a : b;
  }
}

template <class Format>
void reduceSmall(void* dst, const void* src, size_t count, ncclRedOp_t op) {
  auto* d = static_cast<typename Format::Bits*>(dst);
  auto* s = static_cast<const typename Format::Bits*>(src);
  switch (op) {
    case ncclSum: case ncclAvg: applySmall<Format, Sum>(d, s, count); break;
    case ncclProd: applySmall<Format, Prod>(d, s, count); break;
    case ncclMax: selectSmall<Format, Max>(d, s, count); break;
    case ncclMin: selectSmall<Format, Min>(d, s, count); break;
    default: break;
  }
}

template <class T>
void divideTyped(void* buf, size_t count, int divisor) {
  auto* p = static_cast<T*>(buf);
  for (size_t i = 0; i < count; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(divisor));
}

// A true division (not a multiplication by 1/n, which would round twice), as the CUDA kernels do.
template <class Format>
void divideSmall(void* buf, size_t count, int divisor) {
  auto* p = static_cast<typename Format::Bits*>(buf);
  const float d = static_cast<float>(divisor);
  for (size_t i = 0; i < count; ++i) p[i] = Format::narrow(Format::widen(p[i]) / d);
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
      case ncclFloat16: reduceSmall<Half>(dst, src, count, op); break;
      case ncclBfloat16: reduceSmall<Bfloat16>(dst, src, count, op); break;
      case ncclFloat8e4m3: reduceSmall<Fp8e4m3>(dst, src, count, op); break;
      case ncclFloat8e5m2: reduceSmall<Fp8e5m2>(dst, src, count, op); break;
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
      case ncclFloat16: divideSmall<Half>(buf, count, divisor); break;
      case ncclBfloat16: divideSmall<Bfloat16>(buf, count, divisor); break;
      case ncclFloat8e4m3: divideSmall<Fp8e4m3>(buf, count, divisor); break;
      case ncclFloat8e5m2: divideSmall<Fp8e5m2>(buf, count, divisor); break;
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
