// nns/coll/float_convert.hpp: float16, bfloat16 and fp8 (e4m3, e5m2) to and from float, bit-exact with the CUDA
// kernels' conversions; header-only so the host kernels, the CUDA kernels' check and tests share one implementation.
#pragma once

#include <cstdint>
#include <cstring>

namespace nns::coll {

// Every function is branch-free (each candidate result computed, then selected) so that a loop calling it inlines
// and auto-vectorizes at -O3: GCC will not speculate floating-point arithmetic out of a branch under its default
// -ftrapping-math, but it will blend values that were all computed anyway. The few float additions used here are
// exact or round to nearest even, which is what the result needs.
namespace detail {
inline float bitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}
inline uint32_t floatToBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

// A small binary float format below float: ExpBits exponent bits, MantBits mantissa bits, IEEE-style bias.
template <int ExpBits, int MantBits>
struct SmallFormat {
  static constexpr int kBias = (1 << (ExpBits - 1)) - 1;
  static constexpr int kShift = 23 - MantBits;  // float mantissa bits dropped
  // Rebias: float exponent field minus the format's, placed at the format's exponent position.
  static constexpr uint32_t kRebias = static_cast<uint32_t>(127 - kBias) << MantBits;
  // Smallest normal (2^(1 - bias)) as float bits: below it the format is subnormal.
  static constexpr uint32_t kMinNormal = static_cast<uint32_t>(127 + 1 - kBias) << 23;
  // Adding 2^(1 - bias - MantBits + 23) to a value below the smallest normal leaves exactly the format's subnormal
  // quantum in float's last mantissa bit: the float addition rounds to nearest even onto that grid, and the
  // mantissa bits then are the format's code (2^MantBits when it rounded up to the smallest normal).
  static constexpr uint32_t kSubnormalMagic = static_cast<uint32_t>(127 + 1 - kBias - MantBits + 23) << 23;
};

// float -> small format code without the sign, rounding to nearest even; codes above the largest finite one are
// left for the caller (saturate or infinity). abs is |f|'s bits and not NaN. Comparisons and clamps are on int32_t
// (abs < 2^31): SSE2 has signed 32-bit compares but no unsigned ones and no 32-bit min, and a loop with one
// operation the target lacks does not vectorize at all.
template <class Format>
inline int32_t narrowMagnitude(int32_t abs) {
  auto bits = static_cast<uint32_t>(abs);
  uint32_t lsb = (bits >> Format::kShift) & 1u;
  // Normal: add just under half an ulp plus the kept lsb (ties to even), truncate, rebias. abs <= 0x7f800000, so
  // the addition cannot carry out of the word (the difference wraps for small abs, which then takes the other arm).
  auto normal =
      static_cast<int32_t>((((bits + ((1u << (Format::kShift - 1)) - 1u) + lsb) >> Format::kShift) - Format::kRebias));
  auto subnormal = static_cast<int32_t>(floatToBits(bitsToFloat(bits) + bitsToFloat(Format::kSubnormalMagic)) -
                                        Format::kSubnormalMagic);
  return abs < static_cast<int32_t>(Format::kMinNormal) ? subnormal : normal;
}
using E4m3 = SmallFormat<4, 3>;
using E5m2 = SmallFormat<5, 2>;
using Half = SmallFormat<5, 10>;
}  // namespace detail

// float16: round to nearest even; overflow gives infinity; NaN becomes the quiet NaN 0x7e00 with the sign kept.
inline float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t shifted = static_cast<uint32_t>(h & 0x7fffu) << 13;  // exponent and mantissa in float's place
  uint32_t exponent = shifted & 0x0f800000u;
  uint32_t normal = shifted + (112u << 23);    // rebias 15 -> 127
  uint32_t infOrNan = shifted + (224u << 23);  // exponent 31 -> 255
  // Subnormal m * 2^-24: read as 2^-14 * (1 + m/1024) and subtract 2^-14 (exact).
  uint32_t subnormal =
      detail::floatToBits(detail::bitsToFloat(shifted + (113u << 23)) - detail::bitsToFloat(113u << 23));
  uint32_t bits = exponent == 0x0f800000u ? infOrNan : exponent == 0 ? subnormal : normal;
  return detail::bitsToFloat(bits | sign);
}

inline uint16_t floatToHalf(float f) {
  uint32_t bits = detail::floatToBits(f);
  uint32_t sign = (bits >> 16) & 0x8000u;
  auto abs = static_cast<int32_t>(bits & 0x7fffffffu);
  int32_t magnitude = detail::narrowMagnitude<detail::Half>(abs);
  // Finite values at or above 65520 round past 0x7bff into 0x7c00 (infinity) by themselves; bigger ones and
  // infinity are clamped there.
  magnitude = magnitude > 0x7c00 ? 0x7c00 : magnitude;
  magnitude = abs > 0x7f800000 ? 0x7e00 : magnitude;
  return static_cast<uint16_t>(sign | static_cast<uint32_t>(magnitude));
}

// bfloat16: float's top half, rounded to nearest even; NaN stays NaN (quieted, sign and payload top kept).
inline float bfloat16ToFloat(uint16_t b) {
  return detail::bitsToFloat(static_cast<uint32_t>(b) << 16);
}

inline uint16_t floatToBfloat16(float f) {
  uint32_t bits = detail::floatToBits(f);
  uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  uint32_t nan = (bits >> 16) | 0x40u;
  return static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

// fp8, as cuda_fp8.h's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, kind) and __nv_cvt_fp8_to_halfraw: round to nearest
// even; anything beyond the largest finite value, infinity included, saturates to it with its sign (448 for e4m3,
// 57344 for e5m2); NaN becomes 0x7f whatever its sign (the canonical NaN of both kinds); -0 stays -0.
inline float fp8e4m3ToFloat(uint8_t v) {
  uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  uint32_t shifted = static_cast<uint32_t>(v & 0x7fu) << 20;
  uint32_t normal = shifted + (120u << 23);  // rebias 7 -> 127
  // Subnormal m * 2^-9: read as 2^-6 * (1 + m/8) and subtract 2^-6 (exact).
  uint32_t subnormal =
      detail::floatToBits(detail::bitsToFloat(shifted + (121u << 23)) - detail::bitsToFloat(121u << 23));
  uint32_t bits = (v & 0x7fu) == 0x7fu ? 0x7fc00000u : (v & 0x78u) == 0 ? subnormal : normal;  // no infinity
  return detail::bitsToFloat(bits | sign);
}

inline uint8_t floatToFp8e4m3(float f) {
  uint32_t bits = detail::floatToBits(f);
  auto abs = static_cast<int32_t>(bits & 0x7fffffffu);
  int32_t magnitude = detail::narrowMagnitude<detail::E4m3>(abs);
  magnitude = magnitude > 0x7e ? 0x7e : magnitude;  // 0x7f is NaN: 464 and above saturate to 448
  uint32_t code = ((bits >> 24) & 0x80u) | static_cast<uint32_t>(magnitude);
  return static_cast<uint8_t>(abs > 0x7f800000 ? 0x7fu : code);
}

// e5m2 is float16's top byte, so it widens through float16.
inline float fp8e5m2ToFloat(uint8_t v) {
  return halfToFloat(static_cast<uint16_t>(v << 8));
}

inline uint8_t floatToFp8e5m2(float f) {
  uint32_t bits = detail::floatToBits(f);
  auto abs = static_cast<int32_t>(bits & 0x7fffffffu);
  int32_t magnitude = detail::narrowMagnitude<detail::E5m2>(abs);
  magnitude = magnitude > 0x7b ? 0x7b : magnitude;  // 0x7c is infinity: 61440 and above saturate to 57344
  uint32_t code = ((bits >> 24) & 0x80u) | static_cast<uint32_t>(magnitude);
  return static_cast<uint8_t>(abs > 0x7f800000 ? 0x7fu : code);
}

}  // namespace nns::coll
