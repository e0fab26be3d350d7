// reduce_cpu.cc: host reductions for every type and op; plain loops the compiler vectorizes, float16/bfloat16/fp8
// computed in float and rounded to nearest even (fp8 saturating, as the CUDA kernels).
#include <strings.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
// The x86-64-v3/v4 variants need GCC 12 (target "arch=x86-64-v4", __builtin_cpu_supports("x86-64-v4")); clang
// and other targets build the baseline only.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#define NNS_HOST_X86_VARIANTS 1
#include <immintrin.h>
#endif

// O3 vectorizes the loops. fp-contract=off: no a*b+c fused into an FMA by the AVX2/AVX-512 variants (each float
// operation rounds on its own, as the reference and the GPU do). no-trapping-math lets GCC if-convert the
// branch-free conversions in float_convert.hpp (they compute a float candidate that only some lanes use, which
// GCC will not speculate while traps may be on); results are unchanged, nothing here enables traps or reads the
// exception flags. align-loops=32: a 4-instruction loop that straddled a 64-byte boundary ran at half speed in L2
// on Zen 4 (host_reduce_bench, baseline variant). Placed before the project headers so that the inline conversions
// get the same options as the loops they are inlined into.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no such pragma (and vectorizes at -O2 already)
#pragma GCC optimize("O3", "no-trapping-math", "fp-contract=off", "align-loops=32")
#endif

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

// Every reduction loop computes dst = first op src. `first` is either dst itself (kInPlace: the pointer passed is
// null and dst is read) or a third buffer overlapping neither, which lets the ring write a partial sum without
// copying its own input into place first. Each loop is compiled once per case, so both stay vectorized.
template <bool kInPlace, class T>
const T* firstOperand(T* dst, const T* first) {
  return kInPlace ? dst : first;
}

template <class T, class Op, bool kInPlace>
void applyLoop(T* __restrict dst, const T* __restrict first, const T* __restrict src, size_t count) {
  const T* a = firstOperand<kInPlace>(dst, first);
  for (size_t i = 0; i < count; ++i) dst[i] = Op::apply(a[i], src[i]);
}

template <class T, class Op>
void apply(T* dst, const T* first, const T* src, size_t count) {
  if (first == nullptr) applyLoop<T, Op, true>(dst, nullptr, src, count);
  else applyLoop<T, Op, false>(dst, first, src, count);
}

template <class T>
void reduceTyped(void* dst, const void* first, const void* src, size_t count, ncclRedOp_t op) {
  auto* d = static_cast<T*>(dst);
  auto* f = static_cast<const T*>(first);
  auto* s = static_cast<const T*>(src);
  switch (op) {
    case ncclSum: case ncclAvg: apply<T, Sum>(d, f, s, count); break;
    case ncclProd: apply<T, Prod>(d, f, s, count); break;
    case ncclMax: apply<T, Max>(d, f, s, count); break;
    case ncclMin: apply<T, Min>(d, f, s, count); break;
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
//
// The loops walk 32-bit words holding 2 (16-bit formats) or 4 (fp8) elements and take each element out with a
// shift, which the vectorizer turns into in-lane shifts and masks: a loop over the narrow type would instead
// widen and narrow with unpack/pack shuffles, which cost more than the arithmetic (bfloat16's widening becomes a
// single shift or mask). Element order inside a word does not matter, so this holds on either endianness. The
// conversions are branch-free inline code (float_convert.hpp), so each loop vectorizes as a whole.
template <class Format>
struct Packed {
  using Bits = typename Format::Bits;
  static constexpr size_t kPerWord = 4 / sizeof(Bits);
  static constexpr unsigned kWidth = 8 * sizeof(Bits);
  static Bits element(uint32_t word, size_t k) { return static_cast<Bits>(word >> (k * kWidth)); }
  static uint32_t place(Bits v, size_t k) { return static_cast<uint32_t>(v) << (k * kWidth); }
  static uint32_t load(const Bits* p) {
    uint32_t word;
    std::memcpy(&word, p, sizeof(word));
    return word;
  }
  static void store(Bits* p, uint32_t word) { std::memcpy(p, &word, sizeof(word)); }
};

template <class Format, class Op>
typename Format::Bits combine(typename Format::Bits a, typename Format::Bits b) {
  return Format::narrow(Op::apply(Format::widen(a), Format::widen(b)));
}

template <class Format, class Op, bool kInPlace>
void applySmallLoop(typename Format::Bits* __restrict dst, const typename Format::Bits* __restrict first,
                    const typename Format::Bits* __restrict src, size_t count) {
  using P = Packed<Format>;
  const typename Format::Bits* in = firstOperand<kInPlace>(dst, first);
  const size_t words = count / P::kPerWord;
  for (size_t w = 0; w < words; ++w) {
    uint32_t a = P::load(in + w * P::kPerWord), b = P::load(src + w * P::kPerWord), r = 0;
    for (size_t k = 0; k < P::kPerWord; ++k)
      r |= P::place(combine<Format, Op>(P::element(a, k), P::element(b, k)), k);
    P::store(dst + w * P::kPerWord, r);
  }
  for (size_t i = words * P::kPerWord; i < count; ++i) dst[i] = combine<Format, Op>(in[i], src[i]);
}

// Max and min keep one input's bits (no narrowing), as the CUDA kernels do.
template <class Format, class Op>
typename Format::Bits pick(typename Format::Bits a, typename Format::Bits b) {
  return Op::takeFirst(Format::widen(a), Format::widen(b)) ? a : b;
}

template <class Format, class Op, bool kInPlace>
void selectSmallLoop(typename Format::Bits* __restrict dst, const typename Format::Bits* __restrict first,
                     const typename Format::Bits* __restrict src, size_t count) {
  using P = Packed<Format>;
  const typename Format::Bits* in = firstOperand<kInPlace>(dst, first);
  const size_t words = count / P::kPerWord;
  for (size_t w = 0; w < words; ++w) {
    uint32_t a = P::load(in + w * P::kPerWord), b = P::load(src + w * P::kPerWord), r = 0;
    for (size_t k = 0; k < P::kPerWord; ++k) r |= P::place(pick<Format, Op>(P::element(a, k), P::element(b, k)), k);
    P::store(dst + w * P::kPerWord, r);
  }
  for (size_t i = words * P::kPerWord; i < count; ++i) dst[i] = pick<Format, Op>(in[i], src[i]);
}

// Sum and prod combine (widen, operate, narrow); max and min select.
template <class Format, class Op, bool kSelect, bool kInPlace>
void smallLoop(typename Format::Bits* dst, const typename Format::Bits* first, const typename Format::Bits* src,
               size_t count) {
  if constexpr (kSelect) selectSmallLoop<Format, Op, kInPlace>(dst, first, src, count);
  else applySmallLoop<Format, Op, kInPlace>(dst, first, src, count);
}

template <class Format, class Op, bool kSelect>
void small(typename Format::Bits* dst, const typename Format::Bits* first, const typename Format::Bits* src,
           size_t count) {
  if (first == nullptr) smallLoop<Format, Op, kSelect, true>(dst, nullptr, src, count);
  else smallLoop<Format, Op, kSelect, false>(dst, first, src, count);
}

template <class Format>
void reduceSmall(void* dst, const void* first, const void* src, size_t count, ncclRedOp_t op) {
  using Bits = typename Format::Bits;
  auto* d = static_cast<Bits*>(dst);
  auto* f = static_cast<const Bits*>(first);
  auto* s = static_cast<const Bits*>(src);
  switch (op) {
    case ncclSum: case ncclAvg: small<Format, Sum, false>(d, f, s, count); break;
    case ncclProd: small<Format, Prod, false>(d, f, s, count); break;
    case ncclMax: small<Format, Max, true>(d, f, s, count); break;
    case ncclMin: small<Format, Min, true>(d, f, s, count); break;
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

#ifdef NNS_HOST_X86_VARIANTS
// float16 sum, prod and divide in the x86-64-v3/v4 variants: F16C converts 8 elements per instruction, where the
// branch-free bit code (still used by the baseline, for max/min and for tails) needs about 40 vector operations
// per vector of elements and stayed compute-bound even beyond the LLC (0.27 of the streaming bound with AVX-512). Same bits as the bit code: vcvtph2ps is exact; vcvtps2ph
// rounds to nearest even by its immediate (not by MXCSR), gives infinity on overflow and exact subnormals; NaN is
// then made floatToHalf's sign | 0x7e00. dst = first op src (first null: dst op src), or dst / divisor when src
// is null.
__attribute__((target("avx2,f16c"))) void halfF16c(uint16_t* dst, const uint16_t* first, const uint16_t* src,
                                                   size_t count, bool prod, int divisor) {
  if (first == nullptr) first = dst;  // read before written, element by element: in place is safe here
  const __m256 d = _mm256_set1_ps(static_cast<float>(divisor));
  const __m128i absMask = _mm_set1_epi16(0x7fff), infinity = _mm_set1_epi16(0x7c00);
  const __m128i signMask = _mm_set1_epi16(static_cast<int16_t>(0x8000)), quietNan = _mm_set1_epi16(0x7e00);
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(first + i)));
    __m256 r;
    if (!src) {
      r = _mm256_div_ps(a, d);
    } else {
      __m256 b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
      r = prod ? _mm256_mul_ps(a, b) : _mm256_add_ps(a, b);
    }
    __m128i h = _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m128i isNan = _mm_cmpgt_epi16(_mm_and_si128(h, absMask), infinity);  // signed compare: both <= 0x7fff
    __m128i canonical = _mm_or_si128(_mm_and_si128(h, signMask), quietNan);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm_blendv_epi8(h, canonical, isNan));
  }
  for (; i < count; ++i) {
    float a = halfToFloat(first[i]);
    float r = !src ? a / static_cast<float>(divisor) : prod ? a * halfToFloat(src[i]) : a + halfToFloat(src[i]);
    dst[i] = floatToHalf(r);
  }
}
#endif

template <bool F16c>
void reduceAny(void* dst, const void* first, const void* src, size_t count, ncclDataType_t type, ncclRedOp_t op) {
  switch (type) {
    case ncclInt8: reduceTyped<int8_t>(dst, first, src, count, op); break;
    case ncclUint8: reduceTyped<uint8_t>(dst, first, src, count, op); break;
    case ncclInt32: reduceTyped<int32_t>(dst, first, src, count, op); break;
    case ncclUint32: reduceTyped<uint32_t>(dst, first, src, count, op); break;
    case ncclInt64: reduceTyped<int64_t>(dst, first, src, count, op); break;
    case ncclUint64: reduceTyped<uint64_t>(dst, first, src, count, op); break;
    case ncclFloat32: reduceTyped<float>(dst, first, src, count, op); break;
    case ncclFloat64: reduceTyped<double>(dst, first, src, count, op); break;
    case ncclFloat16:
#ifdef NNS_HOST_X86_VARIANTS
      if constexpr (F16c) {
        if (op == ncclSum || op == ncclAvg || op == ncclProd) {
          halfF16c(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(first), static_cast<const uint16_t*>(src),
                   count, op == ncclProd, 0);
          break;
        }
      }
#endif
      reduceSmall<Half>(dst, first, src, count, op);
      break;
    case ncclBfloat16: reduceSmall<Bfloat16>(dst, first, src, count, op); break;
    case ncclFloat8e4m3: reduceSmall<Fp8e4m3>(dst, first, src, count, op); break;
    case ncclFloat8e5m2: reduceSmall<Fp8e5m2>(dst, first, src, count, op); break;
    default: break;
  }
}

template <bool F16c>
void divideAny(void* buf, size_t count, ncclDataType_t type, int divisor) {
  switch (type) {
    case ncclInt8: divideTyped<int8_t>(buf, count, divisor); break;
    case ncclUint8: divideTyped<uint8_t>(buf, count, divisor); break;
    case ncclInt32: divideTyped<int32_t>(buf, count, divisor); break;
    case ncclUint32: divideTyped<uint32_t>(buf, count, divisor); break;
    case ncclInt64: divideTyped<int64_t>(buf, count, divisor); break;
    case ncclUint64: divideTyped<uint64_t>(buf, count, divisor); break;
    case ncclFloat32: divideTyped<float>(buf, count, divisor); break;
    case ncclFloat64: divideTyped<double>(buf, count, divisor); break;
    case ncclFloat16:
#ifdef NNS_HOST_X86_VARIANTS
      if constexpr (F16c) {
        halfF16c(static_cast<uint16_t*>(buf), nullptr, nullptr, count, false, divisor);
        break;
      }
#endif
      divideSmall<Half>(buf, count, divisor);
      break;
    case ncclBfloat16: divideSmall<Bfloat16>(buf, count, divisor); break;
    case ncclFloat8e4m3: divideSmall<Fp8e4m3>(buf, count, divisor); break;
    case ncclFloat8e5m2: divideSmall<Fp8e5m2>(buf, count, divisor); break;
    default: break;
  }
}

// Runtime dispatch: the same loops compiled for the baseline (x86-64: SSE2) and, on x86-64 with GCC, for
// x86-64-v3 (AVX2) and x86-64-v4 (AVX-512), picked once by CPUID. flatten inlines every loop into each variant
// so each is compiled for that variant's ISA. Manual rather than target_clones so that NNS_HOST_ISA can force a
// lower variant: tests run every variant on one machine, and benchmarks can compare them. Every variant computes
// the same bits (integer and IEEE operations only, no contraction into FMA: see the pragma above).
using ReduceFn = void (*)(void*, const void*, const void*, size_t, ncclDataType_t, ncclRedOp_t);
using DivideFn = void (*)(void*, size_t, ncclDataType_t, int);
struct Variant {
  const char* isa;
  ReduceFn reduce;
  DivideFn divide;
};

__attribute__((flatten)) void reduceBaseline(void* d, const void* f, const void* s, size_t n, ncclDataType_t t,
                                             ncclRedOp_t o) {
  reduceAny<false>(d, f, s, n, t, o);
}
__attribute__((flatten)) void divideBaseline(void* b, size_t n, ncclDataType_t t, int divisor) {
  divideAny<false>(b, n, t, divisor);
}
#ifdef NNS_HOST_X86_VARIANTS
__attribute__((target("arch=x86-64-v3"), flatten)) void reduceV3(void* d, const void* f, const void* s, size_t n,
                                                                  ncclDataType_t t, ncclRedOp_t o) {
  reduceAny<true>(d, f, s, n, t, o);
}
__attribute__((target("arch=x86-64-v3"), flatten)) void divideV3(void* b, size_t n, ncclDataType_t t, int divisor) {
  divideAny<true>(b, n, t, divisor);
}
__attribute__((target("arch=x86-64-v4"), flatten)) void reduceV4(void* d, const void* f, const void* s, size_t n,
                                                                  ncclDataType_t t, ncclRedOp_t o) {
  reduceAny<true>(d, f, s, n, t, o);
}
__attribute__((target("arch=x86-64-v4"), flatten)) void divideV4(void* b, size_t n, ncclDataType_t t, int divisor) {
  divideAny<true>(b, n, t, divisor);
}
#endif

const Variant& variant() {
  static const Variant chosen = [] {
#ifdef NNS_HOST_X86_VARIANTS
    // NNS_HOST_ISA caps the choice (baseline or x86-64-v3); anything else, or unset, takes the best the CPU has.
    const char* wanted = std::getenv("NNS_HOST_ISA");
    bool capBaseline = wanted && std::strcmp(wanted, "baseline") == 0;
    bool capV3 = capBaseline || (wanted && std::strcmp(wanted, "x86-64-v3") == 0);
    __builtin_cpu_init();
    if (!capV3 && __builtin_cpu_supports("x86-64-v4")) return Variant{"x86-64-v4", reduceV4, divideV4};
    if (!capBaseline && __builtin_cpu_supports("x86-64-v3")) return Variant{"x86-64-v3", reduceV3, divideV3};
#endif
    return Variant{"baseline", reduceBaseline, divideBaseline};
  }();
  return chosen;
}

class HostKernels final : public KernelLayer {
 public:
  void reduce(void* dst, const void* src, size_t count, ncclDataType_t type, ncclRedOp_t op) override {
    variant().reduce(dst, nullptr, src, count, type, op);
  }
  void reduceInto(void* dst, const void* a, const void* b, size_t count, ncclDataType_t type,
                  ncclRedOp_t op) override {
    variant().reduce(dst, a == dst ? nullptr : a, b, count, type, op);
  }
  void divide(void* buf, size_t count, ncclDataType_t type, int divisor) override {
    variant().divide(buf, count, type, divisor);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (dst != src) std::memcpy(dst, src, bytes);
  }
};

}  // namespace

const char* hostKernelIsa() { return variant().isa; }

KernelLayer& hostKernels() {
  static HostKernels kernels;
  return kernels;
}

}  // namespace nns::coll
