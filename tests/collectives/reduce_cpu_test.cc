// reduce_cpu_test.cc: the host kernel layer against a straightforward scalar reference: float16/bfloat16/fp8
// conversions (exhaustive where the format is small, sweeps over every float's rounding-relevant bits otherwise),
// every op and divide on every type, type names; and cuda_fp8.h's own conversions where the CUDA headers exist.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "nns/coll/reduce.hpp"
#include "nns/core/communicator.hpp"

#ifdef NNS_HAVE_CUDA_FP8
#include <cuda_fp8.h>
#endif

using namespace nns;

namespace {

// ---- The reference: formats described by their widths, values decoded and rounded with double arithmetic. ----

struct Format {
  int expBits, mantBits;
  bool ieeeTop;   // the top exponent holds infinity and NaN (float16, bfloat16, e5m2); e4m3: only S.1111.111 is NaN
  bool saturate;  // out of range gives the largest finite value (cuda_fp8.h's __NV_SATFINITE), else infinity
};
constexpr Format kHalf{5, 10, true, false}, kBf16{8, 7, true, false}, kE4m3{4, 3, false, true}, kE5m2{5, 2, true, true};

int bias(const Format& f) {
  return (1 << (f.expBits - 1)) - 1;
}
uint32_t signBit(const Format& f) {
  return 1u << (f.expBits + f.mantBits);
}
double maxFinite(const Format& f) {
  int topExp = (1 << f.expBits) - 1 - (f.ieeeTop ? 1 : 0);
  double mant = 2.0 - std::ldexp(f.ieeeTop ? 1.0 : 2.0, -f.mantBits);
  return std::ldexp(mant, topExp - bias(f));
}
bool isNanCode(const Format& f, uint32_t bits) {
  uint32_t e = (bits >> f.mantBits) & ((1u << f.expBits) - 1), m = bits & ((1u << f.mantBits) - 1);
  if (f.ieeeTop) return e == (1u << f.expBits) - 1 && m != 0;
  return e == (1u << f.expBits) - 1 && m == (1u << f.mantBits) - 1;
}

double refDecode(const Format& f, uint32_t bits) {
  uint32_t e = (bits >> f.mantBits) & ((1u << f.expBits) - 1), m = bits & ((1u << f.mantBits) - 1);
  double v;
  if (isNanCode(f, bits))
    v = NAN;
  else if (f.ieeeTop && e == (1u << f.expBits) - 1)
    v = INFINITY;
  else if (e == 0)
    v = std::ldexp(static_cast<double>(m), 1 - bias(f) - f.mantBits);
  else
    v = std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -f.mantBits), static_cast<int>(e) - bias(f));
  return (bits & signBit(f)) ? -v : v;
}

// Round to nearest even onto the format's grid. NaN gives fp8's canonical 0x7f and float16/bfloat16's quiet NaN.
uint32_t refEncode(const Format& f, double x) {
  if (std::isnan(x)) return f.saturate ? 0x7fu : ((1u << (f.expBits + 1)) - 1) << (f.mantBits - 1);
  uint32_t sign = std::signbit(x) ? signBit(f) : 0u;
  double ax = std::fabs(x);
  int minExp = 1 - bias(f);
  if (std::isfinite(ax) && ax != 0) {
    int e;
    std::frexp(ax, &e);
    double quantum = std::ldexp(1.0, std::max(e - 1, minExp) - f.mantBits);
    ax = std::nearbyint(ax / quantum) * quantum;  // exact scaling by powers of two; nearbyint ties to even
  }
  if (ax > maxFinite(f)) {
    if (f.saturate) return sign | refEncode(f, maxFinite(f));
    return sign | (((1u << f.expBits) - 1) << f.mantBits);  // infinity
  }
  if (ax == 0) return sign;
  int e;
  double m = std::frexp(ax, &e);  // ax = m * 2^e, m in [0.5, 1)
  e -= 1;
  if (e < minExp) return sign | static_cast<uint32_t>(std::ldexp(ax, f.mantBits - minExp));
  return sign | (static_cast<uint32_t>(e + bias(f)) << f.mantBits) |
         static_cast<uint32_t>(std::ldexp(m * 2.0 - 1.0, f.mantBits));
}

float bitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Every float's rounding depends on its sign, exponent, the mantissa bits down to the format's halfway bit and
// whether anything below is set: the top 20 bits (down to float16's halfway bit, bit 12) enumerated with low
// 12-bit patterns (exact, sticky, just under and over a lower halfway point) cover every case for every format.
template <class Check>
void sweepFloats(Check check) {
  const uint32_t lows[] = {0x000, 0x001, 0x7ff, 0x800, 0x801, 0xfff};
  for (uint32_t high = 0; high < (1u << 20); ++high)
    for (uint32_t low : lows) check(bitsToFloat((high << 12) | low));
}

std::string hex(uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%x", v);
  return text;
}
std::string floatText(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  char text[64];
  std::snprintf(text, sizeof(text), "%a (bits 0x%08x)", static_cast<double>(f), bits);
  return text;
}

// ---- Conversions. ----

TEST(Fp8, EveryCodeWidensToItsValue) {
  for (uint32_t v = 0; v < 256; ++v) {
    uint8_t code = static_cast<uint8_t>(v);
    double e4 = refDecode(kE4m3, v), e5 = refDecode(kE5m2, v);
    float g4 = coll::fp8e4m3ToFloat(code), g5 = coll::fp8e5m2ToFloat(code);
    EXPECT_TRUE(std::isnan(e4) ? std::isnan(g4) : static_cast<double>(g4) == e4) << hex(v) << " e4m3 " << g4;
    EXPECT_TRUE(std::isnan(e5) ? std::isnan(g5) : static_cast<double>(g5) == e5) << hex(v) << " e5m2 " << g5;
    EXPECT_EQ(std::signbit(g4), (v & 0x80) != 0) << hex(v) << ": the sign survives, zero included";
  }
  EXPECT_EQ(coll::fp8e4m3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(coll::fp8e4m3ToFloat(0x01), std::ldexp(1.0f, -9)) << "smallest e4m3 subnormal";
  EXPECT_EQ(coll::fp8e5m2ToFloat(0x7b), 57344.0f);
  EXPECT_EQ(coll::fp8e5m2ToFloat(0x01), std::ldexp(1.0f, -16)) << "smallest e5m2 subnormal";
  EXPECT_EQ(coll::fp8e5m2ToFloat(0x7c), INFINITY) << "e5m2 has infinities (only narrowing saturates)";
}

TEST(Fp8, EveryFiniteCodeRoundTrips) {
  for (uint32_t v = 0; v < 256; ++v) {
    if (!isNanCode(kE4m3, v)) {
      EXPECT_EQ(coll::floatToFp8e4m3(coll::fp8e4m3ToFloat(static_cast<uint8_t>(v))), v);
    }
    if (!isNanCode(kE5m2, v) && (v & 0x7f) != 0x7c) {  // infinity saturates on the way back
      EXPECT_EQ(coll::floatToFp8e5m2(coll::fp8e5m2ToFloat(static_cast<uint8_t>(v))), v);
    }
  }
}

TEST(Fp8, TiesGoToEvenAndOverflowSaturates) {
  // e4m3 near 1: grid step 1/8; 1 + 1/16 is halfway between 1 (even) and 1.125.
  EXPECT_EQ(coll::floatToFp8e4m3(1.0f + 1.0f / 16), 0x38);
  EXPECT_EQ(coll::floatToFp8e4m3(1.0f + 3.0f / 16), 0x3a) << "halfway between 1.125 and 1.25 (even) goes up";
  EXPECT_EQ(coll::floatToFp8e4m3(std::nextafter(1.0f + 1.0f / 16, 2.0f)), 0x39) << "just above halfway";
  EXPECT_EQ(coll::floatToFp8e4m3(std::ldexp(1.0f, -10)), 0x00) << "half the smallest subnormal ties to zero";
  EXPECT_EQ(coll::floatToFp8e4m3(std::ldexp(3.0f, -10)), 0x02) << "subnormal tie to even (up)";
  EXPECT_EQ(coll::floatToFp8e4m3(-std::ldexp(1.0f, -12)), 0x80) << "underflow keeps the sign";
  EXPECT_EQ(coll::floatToFp8e4m3(448.0f), 0x7e);
  EXPECT_EQ(coll::floatToFp8e4m3(464.0f), 0x7e) << "halfway to 480 (which would be NaN) rounds to even 448";
  EXPECT_EQ(coll::floatToFp8e4m3(465.0f), 0x7e) << "saturates rather than NaN";
  EXPECT_EQ(coll::floatToFp8e4m3(-1e30f), 0xfe);
  EXPECT_EQ(coll::floatToFp8e4m3(INFINITY), 0x7e) << "SATFINITE: infinity saturates too";
  EXPECT_EQ(coll::floatToFp8e4m3(-INFINITY), 0xfe);
  EXPECT_EQ(coll::floatToFp8e4m3(NAN), 0x7f);
  EXPECT_EQ(coll::floatToFp8e4m3(-NAN), 0x7f) << "NaN is the canonical 0x7f whatever its sign";
  EXPECT_EQ(coll::floatToFp8e4m3(-0.0f), 0x80);
  // e5m2: grid step 1/4 near 1.
  EXPECT_EQ(coll::floatToFp8e5m2(1.0f + 1.0f / 8), 0x3c);
  EXPECT_EQ(coll::floatToFp8e5m2(1.0f + 3.0f / 8), 0x3e);
  EXPECT_EQ(coll::floatToFp8e5m2(std::ldexp(1.0f, -17)), 0x00);
  EXPECT_EQ(coll::floatToFp8e5m2(std::ldexp(3.0f, -17)), 0x02);
  EXPECT_EQ(coll::floatToFp8e5m2(57344.0f), 0x7b);
  EXPECT_EQ(coll::floatToFp8e5m2(61440.0f), 0x7b) << "halfway to 65536 would round up to infinity: saturates";
  EXPECT_EQ(coll::floatToFp8e5m2(INFINITY), 0x7b);
  EXPECT_EQ(coll::floatToFp8e5m2(-INFINITY), 0xfb);
  EXPECT_EQ(coll::floatToFp8e5m2(NAN), 0x7f);
  EXPECT_EQ(coll::floatToFp8e5m2(-NAN), 0x7f);
}

TEST(Fp8, NarrowingMatchesTheReferenceOverEveryRoundingCase) {
  size_t failures = 0;
  sweepFloats([&](float f) {
    uint32_t want4 = refEncode(kE4m3, f), got4 = coll::floatToFp8e4m3(f);
    uint32_t want5 = refEncode(kE5m2, f), got5 = coll::floatToFp8e5m2(f);
    if ((want4 != got4 || want5 != got5) && failures++ < 10)
      ADD_FAILURE() << floatText(f) << ": e4m3 " << hex(got4) << " want " << hex(want4) << ", e5m2 " << hex(got5)
                    << " want " << hex(want5);
  });
  EXPECT_EQ(failures, 0u);
}

TEST(SixteenBit, NarrowingMatchesTheReferenceOverEveryRoundingCase) {
  size_t failures = 0;
  sweepFloats([&](float f) {
    uint32_t gotHalf = coll::floatToHalf(f), gotBf16 = coll::floatToBfloat16(f);
    bool ok;
    if (std::isnan(f)) {
      ok = isNanCode(kHalf, gotHalf) && isNanCode(kBf16, gotBf16) && (gotHalf >> 15) == (gotBf16 >> 15) &&
           (gotHalf >> 15) == static_cast<uint32_t>(std::signbit(f));
    } else {
      ok = gotHalf == refEncode(kHalf, f) && gotBf16 == refEncode(kBf16, f);
    }
    if (!ok && failures++ < 10)
      ADD_FAILURE() << floatText(f) << ": half " << hex(gotHalf) << " want " << hex(refEncode(kHalf, f))
                    << ", bfloat16 " << hex(gotBf16) << " want " << hex(refEncode(kBf16, f));
  });
  EXPECT_EQ(failures, 0u);
}

TEST(SixteenBit, EveryCodeWidensToItsValueAndRoundTrips) {
  for (uint32_t v = 0; v < 65536; ++v) {
    uint16_t code = static_cast<uint16_t>(v);
    for (const Format* f : {&kHalf, &kBf16}) {
      float got = f == &kHalf ? coll::halfToFloat(code) : coll::bfloat16ToFloat(code);
      uint32_t back = f == &kHalf ? coll::floatToHalf(got) : coll::floatToBfloat16(got);
      if (isNanCode(*f, v)) {
        ASSERT_TRUE(std::isnan(got)) << hex(v);
        ASSERT_TRUE(isNanCode(*f, back)) << hex(v);
      } else {
        ASSERT_EQ(static_cast<double>(got), refDecode(*f, v)) << hex(v);
        ASSERT_EQ(back, v) << hex(v);
      }
    }
  }
  // Ties and subnormals, spelled out.
  EXPECT_EQ(coll::floatToHalf(1.0f + 1.0f / 2048), 0x3c00);
  EXPECT_EQ(coll::floatToHalf(1.0f + 3.0f / 2048), 0x3c02);
  EXPECT_EQ(coll::floatToHalf(std::ldexp(1.0f, -25)), 0x0000) << "half the smallest subnormal ties to zero";
  EXPECT_EQ(coll::floatToHalf(std::ldexp(3.0f, -25)), 0x0002) << "subnormal tie to even (up)";
  EXPECT_EQ(coll::floatToHalf(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)), 0x0400) << "rounds up into normal";
  EXPECT_EQ(coll::floatToHalf(65520.0f), 0x7c00) << "halfway past the largest finite rounds to infinity";
  EXPECT_EQ(coll::floatToHalf(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(coll::floatToBfloat16(1.0f + 1.0f / 256), 0x3f80);
  EXPECT_EQ(coll::floatToBfloat16(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_EQ(coll::floatToBfloat16(bitsToFloat(0x00008000u)), 0x0000) << "float subnormal tie to even zero";
  EXPECT_EQ(coll::floatToBfloat16(bitsToFloat(0x00018000u)), 0x0002) << "float subnormal tie to even (up)";
  EXPECT_EQ(coll::floatToBfloat16(bitsToFloat(0x7f7fffffu)), 0x7f80) << "FLT_MAX rounds to infinity";
}

#ifdef NNS_HAVE_CUDA_FP8
// cuda_fp8.h's host implementation of the conversions the CUDA kernels call: the ground truth for fp8.
TEST(Fp8, MatchesCudaFp8Conversions) {
  for (uint32_t v = 0; v < 256; ++v) {
    for (auto kind : {__NV_E4M3, __NV_E5M2}) {
      __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(v), kind);
      float want = coll::halfToFloat(h.x);
      float got = kind == __NV_E4M3 ? coll::fp8e4m3ToFloat(static_cast<uint8_t>(v))
                                    : coll::fp8e5m2ToFloat(static_cast<uint8_t>(v));
      // Bit for bit (a signed zero must keep its sign); NaNs only as NaNs.
      EXPECT_TRUE(std::isnan(want)
                      ? std::isnan(got)
                      : std::memcmp(&got, &want, sizeof(got)) == 0)  // NOLINT(bugprone-suspicious-memory-comparison)
          << hex(v) << " kind " << kind;
    }
  }
  size_t failures = 0;
  sweepFloats([&](float f) {
    uint32_t want4 = __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3), got4 = coll::floatToFp8e4m3(f);
    uint32_t want5 = __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E5M2), got5 = coll::floatToFp8e5m2(f);
    if ((want4 != got4 || want5 != got5) && failures++ < 10)
      ADD_FAILURE() << floatText(f) << ": e4m3 " << hex(got4) << " cuda " << hex(want4) << ", e5m2 " << hex(got5)
                    << " cuda " << hex(want5);
  });
  EXPECT_EQ(failures, 0u);
}
#else
TEST(Fp8, MatchesCudaFp8Conversions) {
  GTEST_SKIP() << "cuda_fp8.h not found at configure time";
}
#endif

// ---- Kernels: every type x op against the scalar reference, one element at a time. ----

size_t elementSize(ncclDataType_t type) {
  return coll::typeSize(type);
}

const Format* smallFormat(ncclDataType_t type) {
  switch (type) {
    case ncclFloat16: return &kHalf;
    case ncclBfloat16: return &kBf16;
    case ncclFloat8e4m3: return &kE4m3;
    case ncclFloat8e5m2: return &kE5m2;
    default: return nullptr;
  }
}

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
template <class T>
void store(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(v));
}

template <class T>
T intOp(T x, T y, ncclRedOp_t op) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case ncclProd: return static_cast<T>(static_cast<U>(static_cast<U>(x) * static_cast<U>(y)));
    case ncclMax: return x > y ? x : y;
    case ncclMin: return x < y ? x : y;
    default: return static_cast<T>(static_cast<U>(static_cast<U>(x) + static_cast<U>(y)));
  }
}
template <class T>
T realOp(T x, T y, ncclRedOp_t op) {
  switch (op) {
    case ncclProd: return x * y;
    case ncclMax: return x > y || std::isnan(y) ? x : y;
    case ncclMin: return x < y || std::isnan(y) ? x : y;
    default: return x + y;
  }
}

// The reference for one element; NaN results of float16/bfloat16 may carry any payload (x86 and the GPU differ), so
// those compare as "is NaN" (see sameResult); fp8's NaN is always 0x7f.
void referenceOne(ncclDataType_t type, ncclRedOp_t op, const uint8_t* a, const uint8_t* b, uint8_t* out) {
  switch (type) {
    case ncclInt8: store(out, intOp(load<int8_t>(a), load<int8_t>(b), op)); break;
    case ncclUint8: store(out, intOp(load<uint8_t>(a), load<uint8_t>(b), op)); break;
    case ncclInt32: store(out, intOp(load<int32_t>(a), load<int32_t>(b), op)); break;
    case ncclUint32: store(out, intOp(load<uint32_t>(a), load<uint32_t>(b), op)); break;
    case ncclInt64: store(out, intOp(load<int64_t>(a), load<int64_t>(b), op)); break;
    case ncclUint64: store(out, intOp(load<uint64_t>(a), load<uint64_t>(b), op)); break;
    case ncclFloat32: store(out, realOp(load<float>(a), load<float>(b), op)); break;
    case ncclFloat64: store(out, realOp(load<double>(a), load<double>(b), op)); break;
    default: {
      const Format& f = *smallFormat(type);
      bool wide = elementSize(type) == 2;
      uint32_t x = wide ? load<uint16_t>(a) : load<uint8_t>(a), y = wide ? load<uint16_t>(b) : load<uint8_t>(b);
      double dx = refDecode(f, x), dy = refDecode(f, y);
      // max/min keep one input's bits: x when it compares greater (less) or y is NaN, else y (a NaN is passed
      // over, as NCCL's fmaxf/__hmax do; two NaNs give y).
      uint32_t bits = op == ncclMax   ? (dx > dy || std::isnan(dy) ? x : y)
                      : op == ncclMin ? (dx < dy || std::isnan(dy) ? x : y)
                                      : refEncode(f, realOp(dx, dy, op));  // exact in double but bfloat16 sums,
                                                                           // which round once to >= 2p + 2 bits
      if (wide)
        store<uint16_t>(out, static_cast<uint16_t>(bits));
      else
        store<uint8_t>(out, static_cast<uint8_t>(bits));
    }
  }
}

bool sameResult(ncclDataType_t type, const uint8_t* got, const uint8_t* want) {
  size_t es = elementSize(type);
  if (std::memcmp(got, want, es) == 0) return true;
  switch (type) {
    case ncclFloat32: return std::isnan(load<float>(got)) && std::isnan(load<float>(want));
    case ncclFloat64: return std::isnan(load<double>(got)) && std::isnan(load<double>(want));
    case ncclFloat16:
    case ncclBfloat16:
      return isNanCode(*smallFormat(type), load<uint16_t>(got)) && isNanCode(*smallFormat(type), load<uint16_t>(want));
    default: return false;
  }
}

constexpr ncclDataType_t kAllTypes[] = {ncclInt8,    ncclUint8,    ncclInt32,      ncclUint32,
                                        ncclInt64,   ncclUint64,   ncclFloat16,    ncclFloat32,
                                        ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
constexpr ncclRedOp_t kAllOps[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};

// Inputs: fp8 gets every (a, b) pair; other types random bits (every class: NaN, infinity, subnormal, huge) mixed
// with small values whose sums and products land on ties, plus the special values themselves.
void makeInputs(ncclDataType_t type, std::vector<uint8_t>* a, std::vector<uint8_t>* b, size_t* count) {
  size_t es = elementSize(type);
  std::mt19937_64 rng(static_cast<uint64_t>(type) * 7919 + 1);
  if (es == 1 && smallFormat(type)) {
    *count = 65536;
    a->resize(*count);
    b->resize(*count);
    for (size_t i = 0; i < *count; ++i) {
      (*a)[i] = static_cast<uint8_t>(i >> 8);
      (*b)[i] = static_cast<uint8_t>(i);
    }
    return;
  }
  *count = 40000 + 3;
  a->resize(*count * es);
  b->resize(*count * es);
  std::uniform_int_distribution<int> small(-64, 64);
  for (size_t i = 0; i < *count; ++i) {
    for (auto* v : {a, b}) {
      uint8_t* e = v->data() + i * es;
      uint64_t r = rng();
      if (i % 3 == 0 && smallFormat(type)) {  // small multiples of a power of two: sums and products tie often
        float x = std::ldexp(static_cast<float>(small(rng)), static_cast<int>(r % 9) - 4);
        if (type == ncclFloat16)
          store<uint16_t>(e, coll::floatToHalf(x));
        else
          store<uint16_t>(e, coll::floatToBfloat16(x));
      } else if (i % 3 == 0 && type == ncclFloat32) {
        store<float>(e, std::ldexp(static_cast<float>(small(rng)), static_cast<int>(r % 9) - 4));
      } else {
        std::memcpy(e, &r, es);
      }
    }
  }
}

// reduce (dst = dst op src), and reduceInto with a third buffer (dst = a op src, a untouched) and in place.
enum class Form { kReduce, kIntoThirdBuffer, kIntoInPlace };

void checkEveryOpOnEveryType(Form form) {
  for (ncclDataType_t type : kAllTypes) {
    size_t es = elementSize(type), count = 0;
    std::vector<uint8_t> a, b;
    makeInputs(type, &a, &b, &count);
    for (ncclRedOp_t op : kAllOps) {
      std::vector<uint8_t> want(count * es);
      for (size_t i = 0; i < count; ++i) referenceOne(type, op, &a[i * es], &b[i * es], &want[i * es]);
      // Misaligned starts (one element in) and a guard past the end, so vector heads, tails and overruns show.
      std::vector<uint8_t> dst(es + count * es + 64, 0xa5), src(es + count * es), first(es + count * es);
      std::memcpy(src.data() + es, b.data(), count * es);
      if (form == Form::kIntoThirdBuffer) {
        std::memcpy(first.data() + es, a.data(), count * es);
        coll::hostKernels().reduceInto(dst.data() + es, first.data() + es, src.data() + es, count, type, op);
        ASSERT_EQ(std::memcmp(first.data() + es, a.data(), count * es), 0) << "reduceInto wrote its first operand";
      } else {
        std::memcpy(dst.data() + es, a.data(), count * es);
        if (form == Form::kReduce)
          coll::hostKernels().reduce(dst.data() + es, src.data() + es, count, type, op);
        else
          coll::hostKernels().reduceInto(dst.data() + es, dst.data() + es, src.data() + es, count, type, op);
      }
      size_t wrong = 0;
      for (size_t i = 0; i < count; ++i) {
        if (!sameResult(type, &dst[es + i * es], &want[i * es]) && wrong++ < 5) {
          uint64_t x = 0, y = 0, g = 0, w = 0;
          std::memcpy(&x, &a[i * es], es);
          std::memcpy(&y, &b[i * es], es);
          std::memcpy(&g, &dst[es + i * es], es);
          std::memcpy(&w, &want[i * es], es);
          ADD_FAILURE() << coll::typeName(type) << " " << coll::opName(op) << " element " << i << ": " << hex(x)
                        << " op " << hex(y) << " gave " << hex(g) << ", want " << hex(w);
        }
      }
      EXPECT_EQ(wrong, 0u) << coll::typeName(type) << " " << coll::opName(op);
      EXPECT_EQ(dst[0], 0xa5) << "wrote before dst";
      for (size_t k = es + count * es; k < dst.size(); ++k) ASSERT_EQ(dst[k], 0xa5) << "wrote past dst";
    }
  }
}

TEST(HostKernels, EveryOpOnEveryTypeMatchesTheScalarReference) {
  checkEveryOpOnEveryType(Form::kReduce);
}

TEST(HostKernels, ReduceIntoAThirdBufferMatchesTheScalarReference) {
  checkEveryOpOnEveryType(Form::kIntoThirdBuffer);
}

TEST(HostKernels, ReduceIntoInPlaceMatchesTheScalarReference) {
  checkEveryOpOnEveryType(Form::kIntoInPlace);
}

TEST(HostKernels, DivideMatchesTheScalarReference) {
  for (ncclDataType_t type : kAllTypes) {
    size_t es = elementSize(type), count = 0;
    std::vector<uint8_t> a, b;
    makeInputs(type, &a, &b, &count);
    for (int divisor : {1, 2, 3, 7, 12, 127, 128, 256, 1000}) {  // 128 and 256 do not fit 8-bit types
      std::vector<uint8_t> buf = a, want(count * es);
      for (size_t i = 0; i < count; ++i) {
        const uint8_t* x = &a[i * es];
        uint8_t* w = &want[i * es];
        switch (type) {
          case ncclInt8: store<int8_t>(w, static_cast<int8_t>(load<int8_t>(x) / divisor)); break;
          case ncclUint8: store<uint8_t>(w, static_cast<uint8_t>(load<uint8_t>(x) / divisor)); break;
          case ncclInt32: store<int32_t>(w, load<int32_t>(x) / divisor); break;
          case ncclUint32: store<uint32_t>(w, load<uint32_t>(x) / static_cast<uint32_t>(divisor)); break;
          case ncclInt64: store<int64_t>(w, load<int64_t>(x) / divisor); break;
          case ncclUint64: store<uint64_t>(w, load<uint64_t>(x) / static_cast<uint64_t>(divisor)); break;
          case ncclFloat32: store<float>(w, load<float>(x) / static_cast<float>(divisor)); break;
          case ncclFloat64: store<double>(w, load<double>(x) / divisor); break;
          default: {
            const Format& f = *smallFormat(type);
            uint32_t bits = es == 2 ? load<uint16_t>(x) : load<uint8_t>(x);
            uint32_t r = refEncode(f, refDecode(f, bits) / divisor);  // correctly rounded quotient
            if (es == 2)
              store<uint16_t>(w, static_cast<uint16_t>(r));
            else
              store<uint8_t>(w, static_cast<uint8_t>(r));
          }
        }
      }
      coll::hostKernels().divide(buf.data(), count, type, divisor);
      size_t wrong = 0;
      for (size_t i = 0; i < count; ++i)
        if (!sameResult(type, &buf[i * es], &want[i * es]) && wrong++ < 5)
          ADD_FAILURE() << coll::typeName(type) << " / " << divisor << " element " << i;
      EXPECT_EQ(wrong, 0u) << coll::typeName(type) << " / " << divisor;
    }
  }
}

// Every code of the 8- and 16-bit floating-point types divided, as avg divides a sum by the rank count, each quotient
// rounded once to the type: every divisor from 1 to 4096 for fp8 (its conversion instructions hold an 8-bit
// quotient exact only up to 127, where a divisor of 139 turned 0x2d into 0x02, not 0x01), and for the 16-bit types a
// few divisors, over the whole table at once and in calls of 1 and 17 elements, so that every code also goes
// through the vector loop's tail (which divided by multiplying with 1/d there: half 0x8c9c / 1000 came out one
// unit off).
TEST(HostKernels, DivideRoundsEveryCodeOnceInTheLoopAndInItsTail) {
  for (ncclDataType_t type : {ncclFloat8e4m3, ncclFloat8e5m2, ncclFloat16, ncclBfloat16}) {
    const Format& f = *smallFormat(type);
    const size_t es = elementSize(type), count = es == 1 ? 256 : 65536;
    std::vector<uint8_t> codes(count * es);
    for (size_t i = 0; i < count; ++i) {
      if (es == 1)
        store<uint8_t>(&codes[i], static_cast<uint8_t>(i));
      else
        store<uint16_t>(&codes[i * 2], static_cast<uint16_t>(i));
    }
    std::vector<int> divisors;
    if (es == 1) {
      for (int d = 1; d <= 4096; ++d) divisors.push_back(d);
    } else {
      divisors = {3, 7, 139, 143, 1000, 4095};
    }
    for (int divisor : divisors) {
      for (size_t call : {count, size_t{1}, size_t{17}}) {
        if (es == 1 && call != count && divisor % 97 != 1) continue;  // fp8's tails: every 97th divisor
        std::vector<uint8_t> buf = codes;
        for (size_t at = 0; at < count; at += call)
          coll::hostKernels().divide(buf.data() + at * es, std::min(call, count - at), type, divisor);
        size_t wrong = 0;
        for (size_t i = 0; i < count; ++i) {
          uint8_t want[2];
          const uint32_t r = refEncode(f, refDecode(f, static_cast<uint32_t>(i)) / divisor);
          if (es == 1)
            store<uint8_t>(want, static_cast<uint8_t>(r));
          else
            store<uint16_t>(want, static_cast<uint16_t>(r));
          if (!sameResult(type, &buf[i * es], want) && wrong++ < 3)
            ADD_FAILURE() << coll::typeName(type) << " " << hex(static_cast<uint32_t>(i)) << " / " << divisor
                          << " in calls of " << call << " gave " << hex(es == 1 ? buf[i] : load<uint16_t>(&buf[i * 2]))
                          << ", want " << hex(r);
        }
        ASSERT_EQ(wrong, 0u) << coll::typeName(type) << " / " << divisor << " in calls of " << call;
      }
    }
  }
}

// A sum, product or quotient with one NaN operand gives the same NaN bits in every variant (the baseline's bit code,
// F16C's and AVX-512's conversions): float16's sign | 0x7e00, bfloat16's input quieted (0x40 set), whatever payload
// came in. Only two NaNs may give either one's. Each case fills a whole vector step and a tail.
TEST(HostKernels, ANanResultHasTheSameBitsInEveryVariant) {
  struct Case {
    ncclDataType_t type;
    uint16_t nan, want;
  };
  const uint16_t one[] = {0x3c00, 0x3f80};  // 1.0 in float16, bfloat16
  for (const Case& c :
       {Case{ncclFloat16, 0x7d01, 0x7e00}, Case{ncclFloat16, 0xfc01, 0xfe00}, Case{ncclFloat16, 0x7fff, 0x7e00},
        Case{ncclBfloat16, 0x7f81, 0x7fc1}, Case{ncclBfloat16, 0xff81, 0xffc1}}) {
    const uint16_t other = one[c.type == ncclBfloat16 ? 1 : 0];
    for (ncclRedOp_t op : {ncclSum, ncclProd}) {
      for (size_t count : {size_t{67}, size_t{3}}) {
        std::vector<uint16_t> dst(count, c.nan), src(count, other);
        coll::hostKernels().reduce(dst.data(), src.data(), count, c.type, op);
        for (size_t i = 0; i < count; ++i)
          ASSERT_EQ(dst[i], c.want) << coll::typeName(c.type) << " " << hex(c.nan) << " " << coll::opName(op) << " "
                                    << hex(other) << ", element " << i << " of " << count << ", variant "
                                    << coll::hostKernelIsa();
      }
    }
    for (size_t count : {size_t{67}, size_t{3}}) {
      std::vector<uint16_t> buf(count, c.nan);
      coll::hostKernels().divide(buf.data(), count, c.type, 3);
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(buf[i], c.want) << coll::typeName(c.type) << " " << hex(c.nan) << " / 3, element " << i << " of "
                                  << count << ", variant " << coll::hostKernelIsa();
    }
  }
}

// x times the reference's product with one value (integers wrapped through the unsigned type, as prod).
template <class T>
T wrappedProduct(T x, T s) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(x) * static_cast<U>(s)));
}

// A premultiplied sum's first step (NCCL's ncclDevPreMulSum): x times one scalar of the type, the product rounded
// once (integers wrap); for floating-point types with avg's scalars, which avgScalar makes as NCCL does (1/n from
// double to float, then to the type; float64: the double); out of place and in place.
TEST(HostKernels, PremultiplyMatchesTheScalarReference) {
  for (ncclDataType_t type : kAllTypes) {
    size_t es = elementSize(type), count = 0;
    std::vector<uint8_t> a, b;
    makeInputs(type, &a, &b, &count);
    const bool floating = coll::isFloatingPoint(type);
    // Floating-point types: avg's scalar for these rank counts; integers: these factors.
    for (long k : floating ? std::vector<long>{1, 2, 3, 5, 7, 8, 12, 1000} : std::vector<long>{0, 1, 3, -2, 200}) {
      uint8_t scalar[8] = {};
      if (floating) {
        ASSERT_TRUE(coll::avgScalar(type, static_cast<int>(k), scalar));
        const float single = static_cast<float>(1.0 / k);
        uint8_t expected[8] = {};
        if (type == ncclFloat32) store<float>(expected, single);
        if (type == ncclFloat64) store<double>(expected, 1.0 / k);
        if (const Format* f = smallFormat(type)) {
          const uint32_t bits = refEncode(*f, single);
          if (es == 2)
            store<uint16_t>(expected, static_cast<uint16_t>(bits));
          else
            store<uint8_t>(expected, static_cast<uint8_t>(bits));
        }
        ASSERT_EQ(std::memcmp(scalar, expected, es), 0) << coll::typeName(type) << " avg over " << k;
      } else {
        EXPECT_FALSE(coll::avgScalar(type, 2, scalar)) << coll::typeName(type) << ": integer avg divides";
        const uint64_t bits = static_cast<uint64_t>(k);  // two's complement, little-endian: the low es bytes
        std::memcpy(scalar, &bits, es);
      }
      std::vector<uint8_t> want(count * es);
      for (size_t i = 0; i < count; ++i) {
        const uint8_t* x = &a[i * es];
        uint8_t* w = &want[i * es];
        switch (type) {
          case ncclInt8: store<int8_t>(w, wrappedProduct(load<int8_t>(x), load<int8_t>(scalar))); break;
          case ncclUint8: store<uint8_t>(w, wrappedProduct(load<uint8_t>(x), load<uint8_t>(scalar))); break;
          case ncclInt32: store<int32_t>(w, wrappedProduct(load<int32_t>(x), load<int32_t>(scalar))); break;
          case ncclUint32: store<uint32_t>(w, wrappedProduct(load<uint32_t>(x), load<uint32_t>(scalar))); break;
          case ncclInt64: store<int64_t>(w, wrappedProduct(load<int64_t>(x), load<int64_t>(scalar))); break;
          case ncclUint64: store<uint64_t>(w, wrappedProduct(load<uint64_t>(x), load<uint64_t>(scalar))); break;
          case ncclFloat32: store<float>(w, load<float>(x) * load<float>(scalar)); break;
          case ncclFloat64: store<double>(w, load<double>(x) * load<double>(scalar)); break;
          default: {
            const Format& f = *smallFormat(type);
            const bool wide = es == 2;
            const double s = refDecode(f, wide ? load<uint16_t>(scalar) : load<uint8_t>(scalar));
            const uint32_t r = refEncode(f, refDecode(f, wide ? load<uint16_t>(x) : load<uint8_t>(x)) * s);  // exact
            if (wide)
              store<uint16_t>(w, static_cast<uint16_t>(r));
            else
              store<uint8_t>(w, static_cast<uint8_t>(r));
          }
        }
      }
      std::vector<uint8_t> out(count * es, 0xa5), inPlace = a;
      coll::hostKernels().premultiply(out.data(), a.data(), count, type, scalar);
      coll::hostKernels().premultiply(inPlace.data(), inPlace.data(), count, type, scalar);
      size_t wrong = 0;
      for (size_t i = 0; i < count; ++i) {
        if (!sameResult(type, &out[i * es], &want[i * es]) && wrong++ < 5)
          ADD_FAILURE() << coll::typeName(type) << " x scalar " << k << " element " << i;
        if (!sameResult(type, &inPlace[i * es], &want[i * es]) && wrong++ < 5)
          ADD_FAILURE() << coll::typeName(type) << " x scalar " << k << " in place, element " << i;
      }
      EXPECT_EQ(wrong, 0u) << coll::typeName(type) << " x scalar " << k;
    }
    std::vector<uint8_t> out(count * es);
    EXPECT_THROW(coll::hostKernels().premultiply(out.data(), a.data(), count, type, nullptr), core::CommError)
        << coll::typeName(type) << ": no scalar";
  }
}

TEST(HostKernels, RunsTheVariantAskedFor) {
  const char* wanted = std::getenv("NNS_HOST_ISA");
  const std::string isa = coll::hostKernelIsa();
  std::printf("host kernel variant: %s\n", isa.c_str());
  if (wanted && std::strcmp(wanted, "baseline") == 0) {
    EXPECT_EQ(isa, "baseline");
  }
  if (wanted && std::strcmp(wanted, "x86-64-v3") == 0) {
    EXPECT_EQ(isa.find("x86-64-v4"), std::string::npos);
  }
  if (wanted && std::strcmp(wanted, "x86-64-v4") == 0) {
    EXPECT_EQ(isa.find("avx512bf16"), std::string::npos);
  }
}

// In a fresh process (the settings are read once per process; threadsafe style re-executes the test alone): with
// `variable` set to `value` and the other setting unset, the first use of the host kernels fails with `message` and
// ncclInvalidUsage (5).
void expectSettingRefused(const char* variable, const char* value, const char* other, const std::string& message) {
  ::testing::GTEST_FLAG(death_test_style) = "threadsafe";
  EXPECT_EXIT(
      {
        unsetenv(other);
        setenv(variable, value, 1);
        try {
          coll::hostKernels();
        } catch (const nns::core::CommError& e) {
          std::fprintf(stderr, "%s [%d]\n", e.what(), static_cast<int>(e.result()));
          std::exit(3);
        }
        std::exit(0);
      },
      ::testing::ExitedWithCode(3), message + " \\[5\\]");
}

// An unknown NNS_HOST_ISA (a typo, or a name of another scheme such as "avx2") is refused by name, not taken as "the
// best the CPU has".
TEST(HostKernelSetting, AnUnknownVariantIsRefused) {
  expectSettingRefused("NNS_HOST_ISA", "avx2", "NNS_BF16_WIDEN",
                       "NNS_HOST_ISA=avx2 is not baseline, x86-64-v3 or x86-64-v4 \\(unset: the best this CPU has\\)");
}

// The same for the bfloat16 shape: a value that is neither shape is refused, not taken as the default.
TEST(HostKernelSetting, AnUnknownBfloat16ShapeIsRefused) {
  expectSettingRefused("NNS_BF16_WIDEN", "shifted", "NNS_HOST_ISA",
                       "NNS_BF16_WIDEN=shifted is not unpack or shift \\(unset: shift on Intel, unpack elsewhere\\)");
}

// The AVX512_BF16 conversion flushes subnormal results to zero; the kernels must not (and exact zeros, which send a
// vector to the subnormal check, must keep their sign). Each case sits in one lane of otherwise ordinary vectors
// (every position of two 64-element steps, a 32- and a 16-element vector, and the tail), and the results must be
// the scalar reference's bits, whichever variant runs.
TEST(HostKernels, Bfloat16SubnormalResultsKeepTheirBits) {
  struct Case {
    ncclRedOp_t op;
    uint16_t a, b;
  };
  const Case cases[] = {
      {ncclSum, 0x0080, 0x8081},   // 2^-126 - (2^-126 + 2^-133) = -2^-133: bfloat16 0x8001
      {ncclSum, 0x0001, 0x0002},   // subnormal + subnormal
      {ncclProd, 0x3f81, 0x0003},  // 3 x 2^-133 x (1 + 2^-7): rounds to 0x0003
      {ncclProd, 0x3f00, 0x0003},  // 1.5 x 2^-133: a tie, to even (0x0002)
      {ncclProd, 0x0100, 0x3e80},  // a normal x a normal with a subnormal product
      {ncclSum, 0x3f80, 0xbf80},   // 1 - 1: +0
      {ncclSum, 0x8000, 0x8000},   // -0 + -0: -0
  };
  constexpr size_t kCount = 32 * 5 + 16 + 7;
  for (const Case& c : cases) {
    for (size_t lane = 0; lane < kCount; ++lane) {
      std::vector<uint16_t> a(kCount), b(kCount), want(kCount);
      for (size_t i = 0; i < kCount; ++i) {
        a[i] = static_cast<uint16_t>(0x3f80 + i % 64);  // 1 + i/128, and a small addend
        b[i] = static_cast<uint16_t>(0x3c00 + i % 32);
      }
      a[lane] = c.a;
      b[lane] = c.b;
      for (size_t i = 0; i < kCount; ++i)
        referenceOne(ncclBfloat16, c.op, reinterpret_cast<const uint8_t*>(&a[i]),
                     reinterpret_cast<const uint8_t*>(&b[i]), reinterpret_cast<uint8_t*>(&want[i]));
      coll::hostKernels().reduce(a.data(), b.data(), kCount, ncclBfloat16, c.op);
      for (size_t i = 0; i < kCount; ++i)
        ASSERT_EQ(a[i], want[i]) << coll::opName(c.op) << " " << hex(c.a) << ", " << hex(c.b) << " in lane " << lane
                                 << ": element " << i;
    }
  }
  // Division: 3 x 2^-133 / 2 is a tie between two subnormals.
  std::vector<uint16_t> buf(kCount, 0x4000), want(kCount, 0x3f80);
  buf[37] = 0x0003;
  want[37] = 0x0002;
  coll::hostKernels().divide(buf.data(), kCount, ncclBfloat16, 2);
  EXPECT_EQ(buf, want);
}

#if defined(__x86_64__)
// A thread that flushes subnormals (MXCSR's FTZ and DAZ, as -ffast-math's startup code, oneDNN's workers and
// torch.set_flush_denormal set them) still gets IEEE results, and its setting back: bfloat16 0x0001 + 0x0001 was 0,
// float 1e-40 + 1e-40 was 0 (in every variant, vector body and tail alike).
TEST(HostKernels, SubnormalsSurviveAThreadThatFlushesThem) {
  const unsigned saved = _mm_getcsr();
  const unsigned flushing = saved | 0x8040;
  _mm_setcsr(flushing);
  constexpr size_t kCount = 64 + 7;
  std::vector<uint16_t> a(kCount, 0x0001), b(kCount, 0x0001), out(kCount);
  coll::hostKernels().reduceInto(out.data(), a.data(), b.data(), kCount, ncclBfloat16, ncclSum);
  const unsigned after = _mm_getcsr();
  std::vector<float> f(kCount, 1e-40f), g(kCount, 1e-40f);
  coll::hostKernels().reduce(f.data(), g.data(), kCount, ncclFloat32, ncclSum);
  std::vector<float> h(kCount, 4e-40f);
  coll::hostKernels().divide(h.data(), kCount, ncclFloat32, 2);
  _mm_setcsr(saved);
  EXPECT_EQ(after, flushing) << "the caller's flush-to-zero setting was not put back";
  for (size_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(out[i], 0x0002) << "bfloat16 element " << i;
    volatile float twice = 1e-40f, half = 4e-40f;  // IEEE here: the setting is the test's own again
    ASSERT_EQ(f[i], twice + twice) << "float element " << i;
    ASSERT_EQ(h[i], half / 2) << "divided float element " << i;
  }
}
#endif

TEST(HostKernels, EmptyAndShortRangesTouchNothingElse) {
  for (ncclDataType_t type : kAllTypes) {
    size_t es = elementSize(type);
    for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{17}}) {
      std::vector<uint8_t> dst(count * es + 32, 0xa5), src(count * es + 32, 0x11);
      coll::hostKernels().reduce(dst.data(), src.data(), count, type, ncclSum);
      for (size_t k = count * es; k < dst.size(); ++k) ASSERT_EQ(dst[k], 0xa5) << coll::typeName(type);
    }
  }
}

TEST(TypeNames, Fp8ParsesAndPrints) {
  ncclDataType_t type;
  ASSERT_TRUE(coll::parseType("fp8e4m3", &type));
  EXPECT_EQ(type, ncclFloat8e4m3);
  ASSERT_TRUE(coll::parseType("f8e4m3", &type));
  EXPECT_EQ(type, ncclFloat8e4m3);
  ASSERT_TRUE(coll::parseType("fp8e5m2", &type));
  EXPECT_EQ(type, ncclFloat8e5m2);
  ASSERT_TRUE(coll::parseType("F8E5M2", &type));
  EXPECT_EQ(type, ncclFloat8e5m2);
  EXPECT_STREQ(coll::typeName(ncclFloat8e4m3), "fp8e4m3");
  EXPECT_STREQ(coll::typeName(ncclFloat8e5m2), "fp8e5m2");
  EXPECT_EQ(coll::typeSize(ncclFloat8e4m3), 1u);
  EXPECT_FALSE(coll::parseType("fp8", &type));
  for (ncclDataType_t t : kAllTypes) {
    ASSERT_TRUE(coll::parseType(coll::typeName(t), &type)) << coll::typeName(t);
    EXPECT_EQ(type, t);
  }
}

}  // namespace
