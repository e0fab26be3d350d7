// reduce_check.cc: CPU references (double precision, then correctly rounded to the type) and device runs to compare.
#include "reduce_check.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <cuda_runtime_api.h>

#include "nns/cuda/kernels.hpp"

namespace nns::cuda::check {
namespace {

// A small float format: exponent and mantissa widths; e4m3 has no infinity and its top mantissa at the top exponent
// is NaN, so its largest finite value is 448.
struct Format {
  int expBits, mantBits;
  bool ieeeTop;      // top exponent reserved for inf/NaN
  bool saturate;     // out-of-range rounds to the largest finite value (cuda_fp8.h's __NV_SATFINITE)
};
constexpr Format kHalf{5, 10, true, false}, kBf16{8, 7, true, false}, kE4m3{4, 3, false, true}, kE5m2{5, 2, true, true};

int bias(const Format& f) { return (1 << (f.expBits - 1)) - 1; }
double maxFinite(const Format& f) {
  int maxExp = (f.ieeeTop ? (1 << f.expBits) - 2 : (1 << f.expBits) - 1) - bias(f);
  double maxMant = f.ieeeTop ? 2.0 - std::ldexp(1.0, -f.mantBits) : 2.0 - std::ldexp(2.0, -f.mantBits);
  return std::ldexp(maxMant, maxExp);
}

double decode(const Format& f, uint32_t bits) {
  uint32_t mantMask = (1u << f.mantBits) - 1, expMask = (1u << f.expBits) - 1;
  bool negative = (bits >> (f.expBits + f.mantBits)) & 1u;
  uint32_t e = (bits >> f.mantBits) & expMask, m = bits & mantMask;
  double v;
  if (f.ieeeTop && e == expMask) v = m ? NAN : INFINITY;
  else if (!f.ieeeTop && e == expMask && m == mantMask) v = NAN;
  else if (e == 0) v = std::ldexp(static_cast<double>(m), 1 - bias(f) - f.mantBits);
  else v = std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -f.mantBits), static_cast<int>(e) - bias(f));
  return negative ? -v : v;
}

// Round to nearest even onto the format's grid; x must not be NaN (the generators never make one).
uint32_t encode(const Format& f, double x) {
  uint32_t sign = std::signbit(x) ? 1u << (f.expBits + f.mantBits) : 0u;
  double ax = std::fabs(x);
  int minExp = 1 - bias(f);
  uint32_t expMask = (1u << f.expBits) - 1;
  double rounded = 0;
  if (ax != 0 && std::isfinite(ax)) {
    int e;
    std::frexp(ax, &e);
    e -= 1;
    if (e < minExp) e = minExp;
    double quantum = std::ldexp(1.0, e - f.mantBits);
    rounded = std::nearbyint(ax / quantum) * quantum;  // exact: scaling by powers of two; nearbyint ties to even
  } else {
    rounded = ax;
  }
  if (rounded > maxFinite(f)) {
    if (f.saturate || !f.ieeeTop) return sign | encode(f, maxFinite(f));
    return sign | (expMask << f.mantBits);
  }
  if (rounded == 0) return sign;
  int e;
  double m = std::frexp(rounded, &e);  // rounded = m * 2^e, m in [0.5, 1)
  e -= 1;
  if (e < minExp) return sign | static_cast<uint32_t>(std::ldexp(rounded, f.mantBits - minExp));
  uint32_t mant = static_cast<uint32_t>(std::ldexp(m * 2.0 - 1.0, f.mantBits));
  return sign | (static_cast<uint32_t>(e + bias(f)) << f.mantBits) | mant;
}

size_t sizeOf(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}

const Format* smallFloat(ncclDataType_t type) {
  switch (type) {
    case ncclFloat16: return &kHalf;
    case ncclBfloat16: return &kBf16;
    case ncclFloat8e4m3: return &kE4m3;
    case ncclFloat8e5m2: return &kE5m2;
    default: return nullptr;
  }
}

template <class T> T load(const uint8_t* p) { T v; std::memcpy(&v, p, sizeof(v)); return v; }
template <class T> void store(uint8_t* p, T v) { std::memcpy(p, &v, sizeof(v)); }

// Random elements of moderate size (products of two stay finite in every format, fp8 included); integers over
// their whole range so sums and products wrap.
void fill(ncclDataType_t type, uint8_t* p, size_t count, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> real(-12.0, 12.0);
  for (size_t i = 0; i < count; ++i) {
    uint8_t* e = p + i * sizeOf(type);
    if (const Format* f = smallFloat(type)) {
      uint32_t bits = encode(*f, real(rng));
      if (sizeOf(type) == 1) store<uint8_t>(e, static_cast<uint8_t>(bits));
      else store<uint16_t>(e, static_cast<uint16_t>(bits));
    } else if (type == ncclFloat32) {
      store<float>(e, static_cast<float>(real(rng) * 1000.0));
    } else if (type == ncclFloat64) {
      store<double>(e, real(rng) * 1000.0);
    } else {
      uint64_t r = rng();
      std::memcpy(e, &r, sizeOf(type));
    }
  }
}

template <class T> T intOp(T x, T y, ncclRedOp_t op) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case ncclProd: return static_cast<T>(static_cast<U>(static_cast<U>(x) * static_cast<U>(y)));
    case ncclMax: return x > y ? x : y;
    case ncclMin: return x < y ? x : y;
    default: return static_cast<T>(static_cast<U>(static_cast<U>(x) + static_cast<U>(y)));
  }
}
double realOp(double x, double y, ncclRedOp_t op) {
  switch (op) {
    case ncclProd: return x * y;
    case ncclMax: return x > y ? x : y;
    case ncclMin: return x < y ? x : y;
    default: return x + y;
  }
}

// The reference for one element, written at out.
void referenceOne(ncclDataType_t type, ncclRedOp_t op, const uint8_t* a, const uint8_t* b, uint8_t* out) {
  switch (type) {
    case ncclInt8: store(out, intOp(load<int8_t>(a), load<int8_t>(b), op)); break;
    case ncclUint8: store(out, intOp(load<uint8_t>(a), load<uint8_t>(b), op)); break;
    case ncclInt32: store(out, intOp(load<int32_t>(a), load<int32_t>(b), op)); break;
    case ncclUint32: store(out, intOp(load<uint32_t>(a), load<uint32_t>(b), op)); break;
    case ncclInt64: store(out, intOp(load<int64_t>(a), load<int64_t>(b), op)); break;
    case ncclUint64: store(out, intOp(load<uint64_t>(a), load<uint64_t>(b), op)); break;
    // double's 53 bits hold a float sum or product of two floats closely enough that rounding it to float is the
    // correctly rounded float result (53 >= 2 * 24 + 2); the same holds for the 16-bit and 8-bit formats.
    case ncclFloat32: store(out, static_cast<float>(realOp(load<float>(a), load<float>(b), op))); break;
    case ncclFloat64: store(out, realOp(load<double>(a), load<double>(b), op)); break;
    default: {
      const Format& f = *smallFloat(type);
      bool wide = sizeOf(type) == 2;
      uint32_t x = wide ? load<uint16_t>(a) : load<uint8_t>(a), y = wide ? load<uint16_t>(b) : load<uint8_t>(b);
      double r = realOp(decode(f, x), decode(f, y), op);
      // max/min hand back one input's bits as the kernel does (x when it compares greater/less, else y).
      double dx = decode(f, x), dy = decode(f, y);
      uint32_t bits = op == ncclMax ? (dx > dy ? x : y) : op == ncclMin ? (dx < dy ? x : y) : encode(f, r);
      if (wide) store<uint16_t>(out, static_cast<uint16_t>(bits));
      else store<uint8_t>(out, static_cast<uint8_t>(bits));
    }
  }
}

std::string cudaText(const char* what, cudaError_t e) { return std::string(what) + ": " + cudaGetErrorString(e); }

// Device buffer with room for an element offset; freed on every return path.
struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) { if (cudaMalloc(&ptr, bytes) != cudaSuccess) ptr = nullptr; }
  ~DeviceBuffer() { if (ptr) cudaFree(ptr); }
  uint8_t* bytes() const { return static_cast<uint8_t*>(ptr); }
};

std::string firstMismatch(ncclDataType_t type, const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                          size_t count) {
  size_t es = sizeOf(type);
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(&got[i * es], &want[i * es], es) != 0) {
      uint64_t g = 0, w = 0;
      std::memcpy(&g, &got[i * es], es);
      std::memcpy(&w, &want[i * es], es);
      char text[160];
      std::snprintf(text, sizeof(text), "element %zu of %zu: got bits 0x%llx, want 0x%llx", i, count,
                    static_cast<unsigned long long>(g), static_cast<unsigned long long>(w));
      return text;
    }
  }
  return "";
}

}  // namespace

const char* typeName(ncclDataType_t type) {
  static const char* const names[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                                      "float16", "float32", "float64", "bfloat16", "fp8e4m3", "fp8e5m2"};
  return type >= 0 && type < ncclNumTypes ? names[type] : "unknown";
}

const char* opName(ncclRedOp_t op) {
  static const char* const names[] = {"sum", "prod", "max", "min", "avg"};
  return op >= 0 && op < ncclNumOps ? names[op] : "unknown";
}

std::string checkReduce(ncclDataType_t type, ncclRedOp_t op, size_t count, size_t dstOffset, size_t aOffset,
                        size_t bOffset, bool inPlace, unsigned seed) {
  size_t es = sizeOf(type);
  if (inPlace) dstOffset = aOffset;
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> a(count * es), b(count * es), want(count * es), got(count * es);
  fill(type, a.data(), count, rng);
  fill(type, b.data(), count, rng);
  for (size_t i = 0; i < count; ++i) referenceOne(type, op, &a[i * es], &b[i * es], &want[i * es]);
  size_t slack = 16 * es;
  DeviceBuffer da(count * es + slack), db(count * es + slack), dd(count * es + slack);
  if (!da.ptr || !db.ptr || !dd.ptr) return "cudaMalloc failed";
  uint8_t* pa = da.bytes() + aOffset * es;
  uint8_t* pb = db.bytes() + bOffset * es;
  uint8_t* pd = inPlace ? pa : dd.bytes() + dstOffset * es;
  cudaError_t e;
  if ((e = cudaMemcpy(pa, a.data(), a.size(), cudaMemcpyHostToDevice)) != cudaSuccess) return cudaText("copy a", e);
  if ((e = cudaMemcpy(pb, b.data(), b.size(), cudaMemcpyHostToDevice)) != cudaSuccess) return cudaText("copy b", e);
  // Poison the output so an unwritten element shows.
  if (!inPlace && (e = cudaMemset(dd.ptr, 0xa5, count * es + slack)) != cudaSuccess) return cudaText("memset", e);
  if ((e = reduce(pd, pa, pb, count, type, op, nullptr)) != cudaSuccess) return cudaText("reduce launch", e);
  if ((e = cudaDeviceSynchronize()) != cudaSuccess) return cudaText("reduce", e);
  if ((e = cudaMemcpy(got.data(), pd, got.size(), cudaMemcpyDeviceToHost)) != cudaSuccess) return cudaText("copy back", e);
  if (!inPlace) {  // nothing written past the end
    std::vector<uint8_t> after(es);
    if ((e = cudaMemcpy(after.data(), pd + count * es, es, cudaMemcpyDeviceToHost)) != cudaSuccess)
      return cudaText("copy back", e);
    for (uint8_t byte : after)
      if (byte != 0xa5) return "wrote past the end of dst";
  }
  return firstMismatch(type, got, want, count);
}

std::string checkDivide(ncclDataType_t type, size_t count, int divisor, unsigned seed) {
  size_t es = sizeOf(type);
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> in(count * es), want(count * es), got(count * es);
  fill(type, in.data(), count, rng);
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* x = &in[i * es];
    uint8_t* w = &want[i * es];
    switch (type) {
      case ncclInt8: store<int8_t>(w, static_cast<int8_t>(load<int8_t>(x) / divisor)); break;
      case ncclUint8: store<uint8_t>(w, static_cast<uint8_t>(load<uint8_t>(x) / static_cast<uint8_t>(divisor))); break;
      case ncclInt32: store<int32_t>(w, load<int32_t>(x) / divisor); break;
      case ncclUint32: store<uint32_t>(w, load<uint32_t>(x) / static_cast<uint32_t>(divisor)); break;
      case ncclInt64: store<int64_t>(w, load<int64_t>(x) / divisor); break;
      case ncclUint64: store<uint64_t>(w, load<uint64_t>(x) / static_cast<uint64_t>(divisor)); break;
      case ncclFloat32: store<float>(w, static_cast<float>(static_cast<double>(load<float>(x)) / divisor)); break;
      case ncclFloat64: store<double>(w, load<double>(x) / divisor); break;
      default: {
        const Format& f = *smallFloat(type);
        bool wide = es == 2;
        uint32_t bits = encode(f, decode(f, wide ? load<uint16_t>(x) : load<uint8_t>(x)) / divisor);
        if (wide) store<uint16_t>(w, static_cast<uint16_t>(bits));
        else store<uint8_t>(w, static_cast<uint8_t>(bits));
      }
    }
  }
  DeviceBuffer d(count * es);
  if (!d.ptr) return "cudaMalloc failed";
  cudaError_t e;
  if ((e = cudaMemcpy(d.ptr, in.data(), in.size(), cudaMemcpyHostToDevice)) != cudaSuccess) return cudaText("copy", e);
  if ((e = divide(d.ptr, count, type, divisor, nullptr)) != cudaSuccess) return cudaText("divide launch", e);
  if ((e = cudaDeviceSynchronize()) != cudaSuccess) return cudaText("divide", e);
  if ((e = cudaMemcpy(got.data(), d.ptr, got.size(), cudaMemcpyDeviceToHost)) != cudaSuccess) return cudaText("copy back", e);
  return firstMismatch(type, got, want, count);
}

std::string checkCopy(size_t bytes, size_t dstOffset, size_t srcOffset, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> src(bytes), got(bytes);
  for (auto& byte : src) byte = static_cast<uint8_t>(rng());
  DeviceBuffer ds(bytes + 16), dd(bytes + 16);
  if (!ds.ptr || !dd.ptr) return "cudaMalloc failed";
  cudaError_t e;
  if ((e = cudaMemcpy(ds.bytes() + srcOffset, src.data(), bytes, cudaMemcpyHostToDevice)) != cudaSuccess)
    return cudaText("copy in", e);
  if ((e = cudaMemset(dd.ptr, 0xa5, bytes + 16)) != cudaSuccess) return cudaText("memset", e);
  if ((e = copy(dd.bytes() + dstOffset, ds.bytes() + srcOffset, bytes, nullptr)) != cudaSuccess)
    return cudaText("copy launch", e);
  if ((e = cudaDeviceSynchronize()) != cudaSuccess) return cudaText("copy kernel", e);
  if ((e = cudaMemcpy(got.data(), dd.bytes() + dstOffset, bytes, cudaMemcpyDeviceToHost)) != cudaSuccess)
    return cudaText("copy back", e);
  return firstMismatch(ncclUint8, got, src, bytes);
}

}  // namespace nns::cuda::check
