// reduce_cpu.cc: host reductions for every type and op; plain loops the compiler vectorizes, float16/bfloat16/fp8
// computed in float and rounded to nearest even (fp8 saturating, as the CUDA kernels).
#include <strings.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif
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
#include "nns/core/communicator.hpp"

namespace nns::coll {

size_t typeSize(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
  }
}

namespace {
struct TypeText {
  ncclDataType_t type;
  const char* name;
  const char* alias;
};
constexpr TypeText kTypes[] = {
    {ncclInt8, "int8", "char"},         {ncclUint8, "uint8", "uchar"},         {ncclInt32, "int32", "int"},
    {ncclUint32, "uint32", "uint"},     {ncclInt64, "int64", "long"},          {ncclUint64, "uint64", "ulong"},
    {ncclFloat16, "half", "float16"},   {ncclFloat32, "float", "float32"},     {ncclFloat64, "double", "float64"},
    {ncclBfloat16, "bfloat16", "bf16"}, {ncclFloat8e4m3, "fp8e4m3", "f8e4m3"}, {ncclFloat8e5m2, "fp8e5m2", "f8e5m2"}};
struct OpText {
  ncclRedOp_t op;
  const char* name;
};
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
bool isFloatingPoint(ncclDataType_t type) {
  switch (type) {
    case ncclFloat16:
    case ncclBfloat16:
    case ncclFloat32:
    case ncclFloat64:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return true;
    default: return false;
  }
}
bool avgScalar(ncclDataType_t type, int ranks, void* out) {
  if (!isFloatingPoint(type) || ranks <= 0) return false;
  const double exact = 1.0 / ranks;
  const auto single = static_cast<float>(exact);
  auto write = [out](auto value) { std::memcpy(out, &value, sizeof(value)); };
  switch (type) {
    case ncclFloat64: write(exact); break;
    case ncclFloat32: write(single); break;
    case ncclFloat16: write(floatToHalf(single)); break;
    case ncclBfloat16: write(floatToBfloat16(single)); break;
    case ncclFloat8e4m3: write(floatToFp8e4m3(single)); break;
    default: write(floatToFp8e5m2(single)); break;
  }
  return true;
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
template <class T>
struct Arithmetic {
  using type = T;
};
template <>
struct Arithmetic<int8_t> {
  using type = uint8_t;
};
template <>
struct Arithmetic<int32_t> {
  using type = uint32_t;
};
template <>
struct Arithmetic<int64_t> {
  using type = uint64_t;
};

struct Sum {
  template <class T>
  static T apply(T a, T b) {
    using U = typename Arithmetic<T>::type;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  }
};
struct Prod {
  template <class T>
  static T apply(T a, T b) {
    using U = typename Arithmetic<T>::type;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  }
};
// A NaN operand is passed over, as NCCL's kernels do (fmaxf/fminf for float and double, __hmax/__hmin for the 16-bit
// formats): max(NaN, 2) is 2 whichever side the NaN is on, and only two NaNs give NaN. So a rank's NaN cannot make
// the result depend on where in the ring or tree it entered. The NaN test is an unordered compare (none for
// integers), branch-free: the loops stay vectorized.
template <class T>
bool isNaN(T value) {
  if constexpr (std::is_floating_point_v<T>)
    return std::isnan(value);
  else
    return false;
}
struct Max {
  template <class T>
  static T apply(T a, T b) {
    return takeFirst(a, b) ? a : b;
  }
  template <class T>
  static bool takeFirst(T a, T b) {
    return a > b || isNaN(b);
  }
};
struct Min {
  template <class T>
  static T apply(T a, T b) {
    return takeFirst(a, b) ? a : b;
  }
  template <class T>
  static bool takeFirst(T a, T b) {
    return a < b || isNaN(b);
  }
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
  if (first == nullptr)
    applyLoop<T, Op, true>(dst, nullptr, src, count);
  else
    applyLoop<T, Op, false>(dst, first, src, count);
}

template <class T>
void reduceTyped(void* dst, const void* first, const void* src, size_t count, ncclRedOp_t op) {
  auto* d = static_cast<T*>(dst);
  auto* f = static_cast<const T*>(first);
  auto* s = static_cast<const T*>(src);
  switch (op) {
    case ncclSum:
    case ncclAvg: apply<T, Sum>(d, f, s, count); break;
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
    for (size_t k = 0; k < P::kPerWord; ++k) r |= P::place(combine<Format, Op>(P::element(a, k), P::element(b, k)), k);
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
  if constexpr (kSelect)
    selectSmallLoop<Format, Op, kInPlace>(dst, first, src, count);
  else
    applySmallLoop<Format, Op, kInPlace>(dst, first, src, count);
}

template <class Format, class Op, bool kSelect>
void small(typename Format::Bits* dst, const typename Format::Bits* first, const typename Format::Bits* src,
           size_t count) {
  if (first == nullptr)
    smallLoop<Format, Op, kSelect, true>(dst, nullptr, src, count);
  else
    smallLoop<Format, Op, kSelect, false>(dst, first, src, count);
}

template <class Format>
void reduceSmall(void* dst, const void* first, const void* src, size_t count, ncclRedOp_t op) {
  using Bits = typename Format::Bits;
  auto* d = static_cast<Bits*>(dst);
  auto* f = static_cast<const Bits*>(first);
  auto* s = static_cast<const Bits*>(src);
  switch (op) {
    case ncclSum:
    case ncclAvg: small<Format, Sum, false>(d, f, s, count); break;
    case ncclProd: small<Format, Prod, false>(d, f, s, count); break;
    case ncclMax: small<Format, Max, true>(d, f, s, count); break;
    case ncclMin: small<Format, Min, true>(d, f, s, count); break;
    default: break;
  }
}

template <class T>
void divideTyped(void* buf, size_t count, int divisor) {
  // In int for the 8-bit types: a divisor of 128 ranks or more does not fit them (128 would become -128 in int8,
  // and 256 zero in uint8).
  using Wide = std::conditional_t<(sizeof(T) < sizeof(int)), int, T>;
  auto* p = static_cast<T*>(buf);
  for (size_t i = 0; i < count; ++i) p[i] = static_cast<T>(static_cast<Wide>(p[i]) / static_cast<Wide>(divisor));
}

// A true division (not a multiplication by 1/n, which would round twice), as the CUDA kernels do.
template <class Format>
void divideSmall(void* buf, size_t count, int divisor) {
  auto* p = static_cast<typename Format::Bits*>(buf);
  const float d = static_cast<float>(divisor);
  for (size_t i = 0; i < count; ++i) p[i] = Format::narrow(Format::widen(p[i]) / d);
}

// NCCL's ncclDevPreMulSum before its sum (a premultiplied-sum op, and floating-point avg): each element times one
// scalar of its type, as prod computes it (integers wrap; the formats below float widen, multiply exactly in float,
// and round once).
template <class T, bool kInPlace>
void premultiplyLoop(T* __restrict dst, const T* __restrict src, T scalar, size_t count) {
  const T* in = firstOperand<kInPlace>(dst, src);
  for (size_t i = 0; i < count; ++i) dst[i] = Prod::apply(in[i], scalar);
}

template <class T>
void premultiplyTyped(void* dst, const void* src, size_t count, const void* scalarBytes) {
  T scalar;
  std::memcpy(&scalar, scalarBytes, sizeof(scalar));
  if (dst == src)
    premultiplyLoop<T, true>(static_cast<T*>(dst), nullptr, scalar, count);
  else
    premultiplyLoop<T, false>(static_cast<T*>(dst), static_cast<const T*>(src), scalar, count);
}

// Word-wise like applySmallLoop, so it vectorizes.
template <class Format, bool kInPlace>
void premultiplySmallLoop(typename Format::Bits* __restrict dst, const typename Format::Bits* __restrict src,
                          float scalar, size_t count) {
  using P = Packed<Format>;
  const typename Format::Bits* in = firstOperand<kInPlace>(dst, src);
  const size_t words = count / P::kPerWord;
  for (size_t w = 0; w < words; ++w) {
    uint32_t a = P::load(in + w * P::kPerWord), r = 0;
    for (size_t k = 0; k < P::kPerWord; ++k) r |= P::place(Format::narrow(Format::widen(P::element(a, k)) * scalar), k);
    P::store(dst + w * P::kPerWord, r);
  }
  for (size_t i = words * P::kPerWord; i < count; ++i) dst[i] = Format::narrow(Format::widen(in[i]) * scalar);
}

template <class Format>
void premultiplySmall(void* dst, const void* src, size_t count, const void* scalarBytes) {
  using Bits = typename Format::Bits;
  Bits bits;
  std::memcpy(&bits, scalarBytes, sizeof(bits));
  const float scalar = Format::widen(bits);
  if (dst == src)
    premultiplySmallLoop<Format, true>(static_cast<Bits*>(dst), nullptr, scalar, count);
  else
    premultiplySmallLoop<Format, false>(static_cast<Bits*>(dst), static_cast<const Bits*>(src), scalar, count);
}

// Elements [from, to) of the conversion-instruction loops below, element by element with the bit code: the tails,
// and whole vectors the instructions would get wrong. dst = first op src (sum or prod), or first / divisor when src
// is null.
template <class Format>
void combineTail(typename Format::Bits* dst, const typename Format::Bits* first, const typename Format::Bits* src,
                 size_t from, size_t to, bool prod, int divisor) {
  for (size_t i = from; i < to; ++i) {
    if (!src)
      dst[i] = Format::narrow(Format::widen(first[i]) / static_cast<float>(divisor));  // as divideSmall
    else
      dst[i] = prod ? combine<Format, Prod>(first[i], src[i]) : combine<Format, Sum>(first[i], src[i]);
  }
}

// $NNS_BF16_WIDEN: unset or empty (shift on Intel, unpack elsewhere), "unpack" or "shift".
const char* bf16WidenSetting() {
  const char* wanted = std::getenv("NNS_BF16_WIDEN");
  return wanted != nullptr ? wanted : "";
}
bool bf16WidenSettingValid() {
  const char* wanted = bf16WidenSetting();
  return *wanted == '\0' || std::strcmp(wanted, "unpack") == 0 || std::strcmp(wanted, "shift") == 0;
}

#ifdef NNS_HOST_X86_VARIANTS
// The bfloat16 shape to run: the setting's, else shift on Intel cores (see bfloat16Avx512). An invalid setting is
// refused (checkHostIsaSetting) before any kernel runs.
bool bf16WidenShift() {
  const char* wanted = bf16WidenSetting();
  if (*wanted != '\0') return std::strcmp(wanted, "shift") == 0;
  __builtin_cpu_init();
  return __builtin_cpu_is("intel") != 0;
}

// float16 and bfloat16 sum, prod and divide with conversion instructions: the branch-free bit code (still used by
// the baseline, for max/min and for tails) needs about 30-40 vector operations per vector of elements, which keeps
// those loops compute-bound in L2 (0.28-0.34 of the streaming bound with AVX-512). Each function computes
// dst = first op src (first null: dst op src), or dst / divisor when src is null, and gives the bit code's bits.

// x86-64-v3, F16C: 8 elements per instruction. vcvtph2ps is exact; vcvtps2ph rounds to nearest even by its
// immediate (not by MXCSR), gives infinity on overflow and exact subnormals; NaN is then made floatToHalf's
// sign | 0x7e00.
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
  combineTail<Half>(dst, first, src, i, count, prod, divisor);
}

enum class Arith { kSum, kProd, kDivide };

// x86-64-v3 (AVX2) bfloat16, which has no conversion instruction there: the bit code's own steps, written so that
// one 32-byte vector of 16 elements costs about 20 operations instead of the vectorizer's packed-word loop.
// Widening is exact (the even elements shifted up, the odd ones masked in place); the float results round to
// nearest even by integer addition as floatToBfloat16 does, which is exact for subnormals too (bfloat16 has float's
// exponent range), and an overflow carries into infinity. NaN, rare, is found by one unordered compare of both
// halves, and such a vector takes the bit code.
template <Arith kArith>
__attribute__((target("arch=x86-64-v3"))) void bfloat16Avx2Loop(uint16_t* dst, const uint16_t* first,
                                                                const uint16_t* src, size_t count, int divisor) {
  const __m256 d = _mm256_set1_ps(static_cast<float>(divisor));
  const __m256i top = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  const __m256i half = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
  // Bits of a float rounded to bfloat16 in their top half (the low half is left over).
  auto round = [&](__m256 r) __attribute__((target("arch=x86-64-v3"), always_inline)) {
    __m256i bits = _mm256_castps_si256(r);
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), one);
    return _mm256_add_epi32(bits, _mm256_add_epi32(half, odd));
  };
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(first + i));
    __m256 aEven = _mm256_castsi256_ps(_mm256_slli_epi32(a, 16));
    __m256 aOdd = _mm256_castsi256_ps(_mm256_and_si256(a, top));
    __m256 even, odd;
    if constexpr (kArith == Arith::kDivide) {
      even = _mm256_div_ps(aEven, d);
      odd = _mm256_div_ps(aOdd, d);
    } else {
      __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));  // src is null when dividing
      __m256 bEven = _mm256_castsi256_ps(_mm256_slli_epi32(b, 16));
      __m256 bOdd = _mm256_castsi256_ps(_mm256_and_si256(b, top));
      even = kArith == Arith::kProd ? _mm256_mul_ps(aEven, bEven) : _mm256_add_ps(aEven, bEven);
      odd = kArith == Arith::kProd ? _mm256_mul_ps(aOdd, bOdd) : _mm256_add_ps(aOdd, bOdd);
    }
    if (_mm256_movemask_ps(_mm256_cmp_ps(even, odd, _CMP_UNORD_Q)) != 0) {  // a NaN in either half
      combineTail<Bfloat16>(dst, first, src, i, i + 16, kArith == Arith::kProd, divisor);
      continue;
    }
    __m256i packed = _mm256_blend_epi16(_mm256_srli_epi32(round(even), 16), round(odd), 0xaa);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), packed);
  }
  combineTail<Bfloat16>(dst, first, src, i, count, kArith == Arith::kProd, divisor);
}

__attribute__((target("arch=x86-64-v3"))) void bfloat16Avx2(uint16_t* dst, const uint16_t* first, const uint16_t* src,
                                                            size_t count, bool prod, int divisor) {
  if (first == nullptr) first = dst;  // each vector is read before it is written: in place is safe
  if (!src)
    bfloat16Avx2Loop<Arith::kDivide>(dst, first, src, count, divisor);
  else if (prod)
    bfloat16Avx2Loop<Arith::kProd>(dst, first, src, count, divisor);
  else
    bfloat16Avx2Loop<Arith::kSum>(dst, first, src, count, divisor);
}

// x86-64-v4: the same with 16 elements per conversion, and NaN found by a mask compare on the float result. (The
// all-ones masked forms of the intrinsics here and below: GCC 12 warns about the unmasked ones' undefined inputs.)
__attribute__((target("arch=x86-64-v4"))) void halfAvx512(uint16_t* dst, const uint16_t* first, const uint16_t* src,
                                                          size_t count, bool prod, int divisor) {
  if (first == nullptr) first = dst;
  const __m512 d = _mm512_set1_ps(static_cast<float>(divisor));
  const __m256i signMask = _mm256_set1_epi16(static_cast<int16_t>(0x8000)), quietNan = _mm256_set1_epi16(0x7e00);
  constexpr __mmask16 kAll = 0xffff;
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    __m512 a = _mm512_maskz_cvtph_ps(kAll, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(first + i)));
    __m512 r;
    if (!src) {
      r = _mm512_div_ps(a, d);
    } else {
      __m512 b = _mm512_maskz_cvtph_ps(kAll, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
      r = prod ? _mm512_mul_ps(a, b) : _mm512_add_ps(a, b);
    }
    __m256i h = _mm512_maskz_cvtps_ph(kAll, r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __mmask16 isNan = _mm512_cmp_ps_mask(r, r, _CMP_UNORD_Q);
    __m256i canonical = _mm256_or_si256(_mm256_and_si256(h, signMask), quietNan);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_mask_blend_epi16(isNan, h, canonical));
  }
  combineTail<Half>(dst, first, src, i, count, prod, divisor);
}

// x86-64-v4 with AVX512_BF16 (Zen 4, Sapphire Rapids and later): vcvtne2ps2bf16 narrows 32 floats at once, rounding
// to nearest even, and quiets NaN exactly as floatToBfloat16 does (top half, 0x40 set). It flushes subnormal
// results to zero, though: a vector with a zero result is checked (vfpclassps on the floats) and, if one of them is
// subnormal, redone with the bit code, so the bits stay those of the bit code. Widening is exact (Bf16Widen below).
// The zero test covers two vectors at once (one kortest), the common case being none. In L2 on Zen 5 the unpacking
// shape runs at 0.67-0.87 of the streaming bound (the bit code: about 0.3), 10% faster than the shifting one; on
// Zen 4 shifting was about 5% faster, and on Intel Emerald Rapids 0.59-0.63 against unpacking's 0.52-0.54
// (performance.md). Beyond the LLC both are at the bound. Shifting is the default on Intel, unpacking elsewhere;
// NNS_BF16_WIDEN=unpack|shift forces one (tests run both).
#define NNS_BF16_TARGET target("arch=x86-64-v4,avx512bf16")

// How 32 bfloat16 become two float vectors, and so the order the packed results come out in:
// - kUnpack: unpacking with zero (words 0-3 of each 128-bit lane in one vector, 4-7 in the other); packing leaves
//   64-bit groups out of order, put back with one vpermq.
// - kShift: a dword shifted left by 16 is its even element as a float, the dword masked to its top half its odd
//   element; packing leaves the even results in the first 256 bits and the odd ones in the second, interleaved back
//   with one vpermw. The shift and the mask are not shuffles: on Intel cores, where 512-bit shuffles issue on one
//   port only, this shape leaves that port less to do.
enum class Bf16Widen { kUnpack, kShift };

// Elements [at, at + 32) of first op src (or first / d) as bfloat16, in the order `kWiden` leaves them; low and high
// keep the float results for the subnormal check.
template <Arith kArith, Bf16Widen kWiden>
__attribute__((NNS_BF16_TARGET, always_inline)) inline __m512i bfloat16Combine32(const uint16_t* first,
                                                                                 const uint16_t* src, size_t at,
                                                                                 __m512 d, __m512& low, __m512& high) {
  auto widen = [](__m512i v, __m512 & lo, __m512 & hi) __attribute__((NNS_BF16_TARGET, always_inline)) {
    if constexpr (kWiden == Bf16Widen::kUnpack) {
      const __m512i zero = _mm512_setzero_si512();
      lo = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, v));
      hi = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, v));
    } else {
      lo = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, v, 16));  // unmasked: GCC 12 -Wmaybe-uninitialized
      hi = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
    }
  };
  __m512 aLow, aHigh;
  widen(_mm512_loadu_si512(first + at), aLow, aHigh);
  if constexpr (kArith == Arith::kDivide) {
    low = _mm512_div_ps(aLow, d);
    high = _mm512_div_ps(aHigh, d);
  } else {
    __m512 bLow, bHigh;
    widen(_mm512_loadu_si512(src + at), bLow, bHigh);  // src is null when dividing
    low = kArith == Arith::kProd ? _mm512_mul_ps(aLow, bLow) : _mm512_add_ps(aLow, bLow);
    high = kArith == Arith::kProd ? _mm512_mul_ps(aHigh, bHigh) : _mm512_add_ps(aHigh, bHigh);
  }
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(high, low));
}

template <Arith kArith, Bf16Widen kWiden>
__attribute__((NNS_BF16_TARGET)) void bfloat16Avx512Loop(uint16_t* dst, const uint16_t* first, const uint16_t* src,
                                                         size_t count, int divisor) {
  const __m512 d = _mm512_set1_ps(static_cast<float>(divisor));
  // kUnpack: unpacking takes words 0-3 (low) and 4-7 (high) of each 128-bit lane; packing puts the low results in
  // the first 256 bits and the high ones in the second: put the 64-bit groups back in order. kShift: word k of the
  // result is packed word k / 2 (even) or 16 + k / 2 (odd).
  const __m512i order = _mm512_set_epi64(7, 3, 6, 2, 5, 1, 4, 0);
  const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
                                              6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  constexpr __mmask8 kAll8 = 0xff;  // the unmasked permute trips GCC 12's -Wmaybe-uninitialized
  auto inOrder = [&](__m512i packed) __attribute__((NNS_BF16_TARGET, always_inline)) {
    if constexpr (kWiden == Bf16Widen::kUnpack)
      return _mm512_maskz_permutexvar_epi64(kAll8, order, packed);
    else
      return _mm512_permutexvar_epi16(interleave, packed);
  };
  const __m512i magnitude = _mm512_set1_epi16(0x7fff);
  constexpr int kDenormal = 0x20;  // vfpclassps category
  constexpr bool kProd = kArith == Arith::kProd;
  // Stores elements [at, at + 32), or redoes them with the bit code if one of their float results is subnormal.
  auto finish = [&](__m512i packed, __mmask32 zeros, __m512 low, __m512 high, size_t at)
      __attribute__((NNS_BF16_TARGET, always_inline)) {
    if (zeros != 0 && (_mm512_fpclass_ps_mask(low, kDenormal) | _mm512_fpclass_ps_mask(high, kDenormal)) != 0)
      return combineTail<Bfloat16>(dst, first, src, at, at + 32, kProd, divisor);
    _mm512_storeu_si512(dst + at, inOrder(packed));
  };
  size_t i = 0;
  for (; i + 64 <= count; i += 64) {
    __m512 low0, high0, low1, high1;
    __m512i packed0 = bfloat16Combine32<kArith, kWiden>(first, src, i, d, low0, high0);
    __m512i packed1 = bfloat16Combine32<kArith, kWiden>(first, src, i + 32, d, low1, high1);
    __mmask32 zeros0 = _mm512_testn_epi16_mask(packed0, magnitude);
    __mmask32 zeros1 = _mm512_testn_epi16_mask(packed1, magnitude);
    if (_kortestz_mask32_u8(zeros0, zeros1) != 0) {
      _mm512_storeu_si512(dst + i, inOrder(packed0));
      _mm512_storeu_si512(dst + i + 32, inOrder(packed1));
      continue;
    }
    finish(packed0, zeros0, low0, high0, i);
    finish(packed1, zeros1, low1, high1, i + 32);
  }
  if (i + 32 <= count) {
    __m512 low, high;
    __m512i packed = bfloat16Combine32<kArith, kWiden>(first, src, i, d, low, high);
    finish(packed, _mm512_testn_epi16_mask(packed, magnitude), low, high, i);
    i += 32;
  }
  combineTail<Bfloat16>(dst, first, src, i, count, kProd, divisor);
}

template <Bf16Widen kWiden>
__attribute__((NNS_BF16_TARGET)) void bfloat16Avx512Shape(uint16_t* dst, const uint16_t* first, const uint16_t* src,
                                                          size_t count, bool prod, int divisor) {
  if (!src)
    bfloat16Avx512Loop<Arith::kDivide, kWiden>(dst, first, src, count, divisor);
  else if (prod)
    bfloat16Avx512Loop<Arith::kProd, kWiden>(dst, first, src, count, divisor);
  else
    bfloat16Avx512Loop<Arith::kSum, kWiden>(dst, first, src, count, divisor);
}

__attribute__((NNS_BF16_TARGET)) void bfloat16Avx512(uint16_t* dst, const uint16_t* first, const uint16_t* src,
                                                     size_t count, bool prod, int divisor) {
  if (first == nullptr) first = dst;
  static const bool shift = bf16WidenShift();
  if (shift)
    bfloat16Avx512Shape<Bf16Widen::kShift>(dst, first, src, count, prod, divisor);
  else
    bfloat16Avx512Shape<Bf16Widen::kUnpack>(dst, first, src, count, prod, divisor);
}

// fp8 sum, prod and divide in the x86-64-v4 variants, through float16's conversion instructions (1.8-2.9x the bit
// code, performance.md).
// - Widening: an e5m2 code is float16's top byte; an e4m3 code's magnitude bits moved up by 7 are a float16 (normal
//   or subnormal alike) of the value times 2^-8, and 0x7f (e4m3's NaN; it has no infinity) is made a float16 NaN.
//   e4m3 is computed on those scaled values: sums and quotients stay scaled by 2^-8, and a product, scaled twice,
//   is multiplied by 2^8 (exact).
// - Narrowing: the float result goes to float16 rounding to nearest even, and the float16 drops its low mantissa
//   bits rounding to nearest even, then saturates (infinity included) and maps NaN to 0x7f, as floatToFp8*() do.
// - Rounding twice gives the correctly rounded result because float16's 11 bits >= 2p + 2 for both formats (p = 4,
//   3). In their subnormal ranges, where float16 keeps 7-8 bits more than the format, sums and products of fp8
//   values and quotients by fewer than 128 cannot fall between a midpoint of the format and the float16 next to it;
//   division by 128 or more keeps the bit code. HostKernels.* checks every (a, b) pair and divisors to 1000.
template <bool kE4m3, Arith kArith>
__attribute__((target("arch=x86-64-v4"))) void fp8Avx512Loop(uint8_t* dst, const uint8_t* first, const uint8_t* src,
                                                             size_t count, int divisor) {
  using Format = std::conditional_t<kE4m3, Fp8e4m3, Fp8e5m2>;
  constexpr int kDrop = kE4m3 ? 7 : 8;  // float16 mantissa bits the format does not have
  const __m512 d = _mm512_set1_ps(static_cast<float>(divisor));
  const __m512 up = _mm512_set1_ps(256.0f);
  const __m512i magnitudeMask = _mm512_set1_epi16(0x7fff), signMask = _mm512_set1_epi16(static_cast<short>(0x8000));
  const __m512i infinity = _mm512_set1_epi16(0x7c00), one = _mm512_set1_epi16(1);
  const __m512i belowHalf = _mm512_set1_epi16((1 << (kDrop - 1)) - 1);
  const __m512i largest = _mm512_set1_epi16(kE4m3 ? 0x7e : 0x7b), nanCode = _mm512_set1_epi16(0x7f);
  constexpr __mmask16 kAll = 0xffff;
  constexpr __mmask32 kAllWords = ~__mmask32{0};
  // 32 codes -> 32 floats (elements 0-15, 16-31); e4m3 as its value times 2^-8.
  auto widen = [&](const uint8_t* p, __m512* low, __m512* high) {
    __m256i codes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    __m512i h = _mm512_maskz_slli_epi16(kAllWords, _mm512_maskz_cvtepu8_epi16(kAllWords, codes), 8);
    if constexpr (kE4m3) {
      // Sign stays at bit 15, the magnitude moves down by one (the arithmetic shift copies the sign into bit 14,
      // which the mask clears); 0x7f is NaN.
      h = _mm512_and_si512(_mm512_maskz_srai_epi16(kAllWords, h, 1), _mm512_set1_epi16(static_cast<short>(0xbfff)));
      __mmask32 isNan = _mm512_cmpeq_epi16_mask(_mm512_and_si512(h, magnitudeMask), _mm512_set1_epi16(0x3f80));
      h = _mm512_mask_mov_epi16(h, isNan, _mm512_set1_epi16(0x7e00));
    }
    *low = _mm512_maskz_cvtph_ps(kAll, _mm512_maskz_extracti64x4_epi64(0xf, h, 0));
    *high = _mm512_maskz_cvtph_ps(kAll, _mm512_maskz_extracti64x4_epi64(0xf, h, 1));
  };
  // 32 floats (e4m3: times 2^-8) -> 32 codes.
  auto narrow = [&](__m512 low, __m512 high) {
    constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    __m512i h = _mm512_maskz_inserti64x4(0xff, _mm512_setzero_si512(), _mm512_maskz_cvtps_ph(kAll, low, kRound), 0);
    h = _mm512_maskz_inserti64x4(0xff, h, _mm512_maskz_cvtps_ph(kAll, high, kRound), 1);
    __m512i magnitude = _mm512_and_si512(h, magnitudeMask);
    __mmask32 isNan = _mm512_cmpgt_epu16_mask(magnitude, infinity);
    __m512i odd = _mm512_and_si512(_mm512_maskz_srli_epi16(kAllWords, magnitude, kDrop), one);
    __m512i code =
        _mm512_maskz_srli_epi16(kAllWords, _mm512_add_epi16(_mm512_add_epi16(magnitude, belowHalf), odd), kDrop);
    code = _mm512_min_epu16(code, largest);
    code = _mm512_or_si512(code, _mm512_maskz_srli_epi16(kAllWords, _mm512_and_si512(h, signMask), 8));
    code = _mm512_mask_mov_epi16(code, isNan, nanCode);
    return _mm512_maskz_cvtepi16_epi8(kAllWords, code);
  };
  size_t i = 0;
  for (; i + 32 <= count; i += 32) {
    __m512 aLow, aHigh, low, high;
    widen(first + i, &aLow, &aHigh);
    if constexpr (kArith == Arith::kDivide) {
      low = _mm512_div_ps(aLow, d);
      high = _mm512_div_ps(aHigh, d);
    } else {
      __m512 bLow, bHigh;
      widen(src + i, &bLow, &bHigh);
      low = kArith == Arith::kProd ? _mm512_mul_ps(aLow, bLow) : _mm512_add_ps(aLow, bLow);
      high = kArith == Arith::kProd ? _mm512_mul_ps(aHigh, bHigh) : _mm512_add_ps(aHigh, bHigh);
      if constexpr (kE4m3 && kArith == Arith::kProd) {  // a product of two scaled values is scaled twice
        low = _mm512_mul_ps(low, up);
        high = _mm512_mul_ps(high, up);
      }
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), narrow(low, high));
  }
  combineTail<Format>(dst, first, src, i, count, kArith == Arith::kProd, divisor);
}

template <bool kE4m3>
__attribute__((target("arch=x86-64-v4"))) void fp8Avx512(uint8_t* dst, const uint8_t* first, const uint8_t* src,
                                                         size_t count, bool prod, int divisor) {
  if (first == nullptr) first = dst;
  if (!src)
    fp8Avx512Loop<kE4m3, Arith::kDivide>(dst, first, src, count, divisor);
  else if (prod)
    fp8Avx512Loop<kE4m3, Arith::kProd>(dst, first, src, count, divisor);
  else
    fp8Avx512Loop<kE4m3, Arith::kSum>(dst, first, src, count, divisor);
}
#endif

// The variants the loops are compiled for (see variant() below).
enum class Isa { kBaseline, kV3, kV4, kV4Bf16 };

// float16/bfloat16/fp8 sum, prod (src non-null) and divide (src null) with the conversion instructions this
// variant has (bfloat16 on x86-64-v3: the hand-written AVX2 loop above); false when it has none for the type, and
// the vectorized bit code is used.
template <Isa kIsa>
bool withConversionInstructions(void* dst, const void* first, const void* src, size_t count, ncclDataType_t type,
                                bool prod, int divisor) {
#ifdef NNS_HOST_X86_VARIANTS
  auto* d = static_cast<uint16_t*>(dst);
  auto* f = static_cast<const uint16_t*>(first);
  auto* s = static_cast<const uint16_t*>(src);
  if constexpr (kIsa == Isa::kV3) {
    if (type == ncclFloat16) return halfF16c(d, f, s, count, prod, divisor), true;
    if (type == ncclBfloat16) return bfloat16Avx2(d, f, s, count, prod, divisor), true;
  } else if constexpr (kIsa == Isa::kV4 || kIsa == Isa::kV4Bf16) {
    if (type == ncclFloat16) return halfAvx512(d, f, s, count, prod, divisor), true;
  }
  if constexpr (kIsa == Isa::kV4Bf16) {
    if (type == ncclBfloat16) return bfloat16Avx512(d, f, s, count, prod, divisor), true;
  }
  if constexpr (kIsa == Isa::kV4 || kIsa == Isa::kV4Bf16) {
    auto* d8 = static_cast<uint8_t*>(dst);
    auto* f8 = static_cast<const uint8_t*>(first);
    auto* s8 = static_cast<const uint8_t*>(src);
    const bool exact = src != nullptr || divisor < 128;  // see fp8Avx512Loop
    if (type == ncclFloat8e4m3 && exact) return fp8Avx512<true>(d8, f8, s8, count, prod, divisor), true;
    if (type == ncclFloat8e5m2 && exact) return fp8Avx512<false>(d8, f8, s8, count, prod, divisor), true;
  }
#endif
  (void)dst, (void)first, (void)src, (void)count, (void)type, (void)prod, (void)divisor;
  return false;
}

template <Isa kIsa>
void reduceAny(void* dst, const void* first, const void* src, size_t count, ncclDataType_t type, ncclRedOp_t op) {
  if ((op == ncclSum || op == ncclAvg || op == ncclProd) &&
      withConversionInstructions<kIsa>(dst, first, src, count, type, op == ncclProd, 0))
    return;
  switch (type) {
    case ncclInt8: reduceTyped<int8_t>(dst, first, src, count, op); break;
    case ncclUint8: reduceTyped<uint8_t>(dst, first, src, count, op); break;
    case ncclInt32: reduceTyped<int32_t>(dst, first, src, count, op); break;
    case ncclUint32: reduceTyped<uint32_t>(dst, first, src, count, op); break;
    case ncclInt64: reduceTyped<int64_t>(dst, first, src, count, op); break;
    case ncclUint64: reduceTyped<uint64_t>(dst, first, src, count, op); break;
    case ncclFloat32: reduceTyped<float>(dst, first, src, count, op); break;
    case ncclFloat64: reduceTyped<double>(dst, first, src, count, op); break;
    case ncclFloat16: reduceSmall<Half>(dst, first, src, count, op); break;
    case ncclBfloat16: reduceSmall<Bfloat16>(dst, first, src, count, op); break;
    case ncclFloat8e4m3: reduceSmall<Fp8e4m3>(dst, first, src, count, op); break;
    case ncclFloat8e5m2: reduceSmall<Fp8e5m2>(dst, first, src, count, op); break;
    default: break;
  }
}

template <Isa kIsa>
void divideAny(void* buf, size_t count, ncclDataType_t type, int divisor) {
  if (withConversionInstructions<kIsa>(buf, nullptr, nullptr, count, type, false, divisor)) return;
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

template <Isa kIsa>
void premultiplyAny(void* dst, const void* src, size_t count, ncclDataType_t type, const void* scalar) {
  switch (type) {
    case ncclInt8: premultiplyTyped<int8_t>(dst, src, count, scalar); break;
    case ncclUint8: premultiplyTyped<uint8_t>(dst, src, count, scalar); break;
    case ncclInt32: premultiplyTyped<int32_t>(dst, src, count, scalar); break;
    case ncclUint32: premultiplyTyped<uint32_t>(dst, src, count, scalar); break;
    case ncclInt64: premultiplyTyped<int64_t>(dst, src, count, scalar); break;
    case ncclUint64: premultiplyTyped<uint64_t>(dst, src, count, scalar); break;
    case ncclFloat32: premultiplyTyped<float>(dst, src, count, scalar); break;
    case ncclFloat64: premultiplyTyped<double>(dst, src, count, scalar); break;
    case ncclFloat16: premultiplySmall<Half>(dst, src, count, scalar); break;
    case ncclBfloat16: premultiplySmall<Bfloat16>(dst, src, count, scalar); break;
    case ncclFloat8e4m3: premultiplySmall<Fp8e4m3>(dst, src, count, scalar); break;
    case ncclFloat8e5m2: premultiplySmall<Fp8e5m2>(dst, src, count, scalar); break;
    default: break;  // HostKernels::premultiply refuses it
  }
}

// Runtime dispatch: the same loops compiled for the baseline (x86-64: SSE2) and, on x86-64 with GCC, for
// x86-64-v3 (AVX2), x86-64-v4 (AVX-512) and x86-64-v4 with AVX512_BF16, picked once by CPUID. flatten inlines every
// loop into each variant so each is compiled for that variant's ISA. Manual rather than target_clones so that
// NNS_HOST_ISA can force a lower variant: tests run every variant on one machine, and benchmarks can compare them.
// Every variant computes the same bits (integer and IEEE operations only, no contraction into FMA: see the pragma
// above), except which NaN comes out of a sum or product of two NaNs (always a quiet NaN; the compiler may put the
// operands of a commutative operation either way round, and x86 returns the first one's payload and sign).
using ReduceFn = void (*)(void*, const void*, const void*, size_t, ncclDataType_t, ncclRedOp_t);
using DivideFn = void (*)(void*, size_t, ncclDataType_t, int);
using PremultiplyFn = void (*)(void*, const void*, size_t, ncclDataType_t, const void*);
struct Variant {
  const char* isa;
  ReduceFn reduce;
  DivideFn divide;
  PremultiplyFn premultiply;
};

#define NNS_HOST_VARIANT(name, isa, ...)                                                                          \
  __attribute__((__VA_ARGS__ flatten)) void reduce##name(void* d, const void* f, const void* s, size_t n,         \
                                                         ncclDataType_t t, ncclRedOp_t o) {                       \
    reduceAny<isa>(d, f, s, n, t, o);                                                                             \
  }                                                                                                               \
  __attribute__((__VA_ARGS__ flatten)) void divide##name(void* b, size_t n, ncclDataType_t t, int divisor) {      \
    divideAny<isa>(b, n, t, divisor);                                                                             \
  }                                                                                                               \
  __attribute__((__VA_ARGS__ flatten)) void premultiply##name(void* d, const void* s, size_t n, ncclDataType_t t, \
                                                              const void* scalar) {                               \
    premultiplyAny<isa>(d, s, n, t, scalar);                                                                      \
  }
// The last argument is the variant's target attribute followed by a comma, or nothing for the baseline.
NNS_HOST_VARIANT(Baseline, Isa::kBaseline, )
#ifdef NNS_HOST_X86_VARIANTS
NNS_HOST_VARIANT(V3, Isa::kV3, target("arch=x86-64-v3"), )
NNS_HOST_VARIANT(V4, Isa::kV4, target("arch=x86-64-v4"), )
NNS_HOST_VARIANT(V4Bf16, Isa::kV4Bf16, target("arch=x86-64-v4,avx512bf16"), )
#endif
#undef NNS_HOST_VARIANT

// $NNS_HOST_ISA: unset or empty (the best the CPU has), or a cap that every build accepts (a machine without the
// x86 variants runs the baseline under any cap).
const char* hostIsaSetting() {
  const char* wanted = std::getenv("NNS_HOST_ISA");
  return wanted != nullptr ? wanted : "";
}
bool hostIsaSettingValid() {
  const char* wanted = hostIsaSetting();
  for (const char* name : {"", "baseline", "x86-64-v3", "x86-64-v4"})
    if (std::strcmp(wanted, name) == 0) return true;
  return false;
}

const Variant& variant() {
  static const Variant chosen = [] {
#ifdef NNS_HOST_X86_VARIANTS
    // NNS_HOST_ISA caps the choice (baseline, x86-64-v3 or x86-64-v4); unset, the best the CPU has. hostKernels()
    // refuses any other value before this runs.
    const char* wanted = hostIsaSetting();
    auto capped = [wanted](const char* name) { return std::strcmp(wanted, name) == 0; };
    bool capBaseline = capped("baseline");
    bool capV3 = capBaseline || capped("x86-64-v3");
    bool capV4 = capV3 || capped("x86-64-v4");
    __builtin_cpu_init();
    if (!capV4 && __builtin_cpu_supports("x86-64-v4") && __builtin_cpu_supports("avx512bf16"))
      return Variant{"x86-64-v4+avx512bf16", reduceV4Bf16, divideV4Bf16, premultiplyV4Bf16};
    if (!capV3 && __builtin_cpu_supports("x86-64-v4")) return Variant{"x86-64-v4", reduceV4, divideV4, premultiplyV4};
    if (!capBaseline && __builtin_cpu_supports("x86-64-v3"))
      return Variant{"x86-64-v3", reduceV3, divideV3, premultiplyV3};
#endif
    return Variant{"baseline", reduceBaseline, divideBaseline, premultiplyBaseline};
  }();
  return chosen;
}

// IEEE subnormals whatever the calling thread's SSE control register says, for as long as a kernel runs: a thread with
// flush-to-zero or denormals-are-zero set (-ffast-math's startup code, oneDNN's worker threads,
// torch.set_flush_denormal(True); the progress thread inherits its creator's) computed bfloat16 0x0001 + 0x0001 as 0
// and float 1e-40 + 1e-40 as 0, where the reference and NCCL's GPU kernels keep them. The caller's setting is put back.
class IeeeSubnormals {
 public:
#if defined(__x86_64__) || defined(__i386__)
  IeeeSubnormals() : saved_(_mm_getcsr()) {
    if ((saved_ & kFlush) != 0) _mm_setcsr(saved_ & ~kFlush);
  }
  ~IeeeSubnormals() {
    if ((saved_ & kFlush) != 0) _mm_setcsr(saved_);
  }
  IeeeSubnormals(const IeeeSubnormals&) = delete;
  IeeeSubnormals& operator=(const IeeeSubnormals&) = delete;

 private:
  static constexpr unsigned kFlush = 0x8040;  // MXCSR's FTZ (bit 15) and DAZ (bit 6)
  unsigned saved_;
#endif
};

class HostKernels final : public KernelLayer {
 public:
  void reduce(void* dst, const void* src, size_t count, ncclDataType_t type, ncclRedOp_t op) override {
    const IeeeSubnormals ieee;
    variant().reduce(dst, nullptr, src, count, type, op);
  }
  void reduceInto(void* dst, const void* a, const void* b, size_t count, ncclDataType_t type, ncclRedOp_t op) override {
    const IeeeSubnormals ieee;
    variant().reduce(dst, a == dst ? nullptr : a, b, count, type, op);
  }
  void divide(void* buf, size_t count, ncclDataType_t type, int divisor) override {
    const IeeeSubnormals ieee;
    variant().divide(buf, count, type, divisor);
  }
  void premultiply(void* dst, const void* src, size_t count, ncclDataType_t type, const void* scalar) override {
    if (typeSize(type) == 0 || scalar == nullptr)
      throw core::CommError(std::string("premultiply of ") + typeName(type) + " elements by " +
                                (scalar == nullptr ? "no scalar" : "a scalar") + ": not a known type with a scalar",
                            ncclInternalError);
    const IeeeSubnormals ieee;
    variant().premultiply(dst, src, count, type, scalar);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (dst != src) std::memcpy(dst, src, bytes);
  }
};

// Read once, as the variant is picked once.
void checkHostIsaSetting() {
  static const bool valid = hostIsaSettingValid();
  if (!valid)
    throw core::CommError(std::string("NNS_HOST_ISA=") + hostIsaSetting() +
                              " is not baseline, x86-64-v3 or x86-64-v4 (unset: the best this CPU has)",
                          ncclInvalidUsage);
  static const bool widenValid = bf16WidenSettingValid();
  if (!widenValid)
    throw core::CommError(std::string("NNS_BF16_WIDEN=") + bf16WidenSetting() +
                              " is not unpack or shift (unset: shift on Intel, unpack elsewhere)",
                          ncclInvalidUsage);
}

}  // namespace

const char* hostKernelIsa() {
  checkHostIsaSetting();
  return variant().isa;
}

KernelLayer& hostKernels() {
  checkHostIsaSetting();
  static HostKernels kernels;
  return kernels;
}

}  // namespace nns::coll
