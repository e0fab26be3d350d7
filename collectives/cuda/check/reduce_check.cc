// reduce_check.cc: CPU references (double precision, then correctly rounded to the type with the host kernel
// layer's conversions) and device runs to compare.
#include "reduce_check.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <cuda_runtime_api.h>

#include "nns/coll/float_convert.hpp"
#include "nns/cuda/kernels.hpp"

namespace nns::cuda::check {
namespace {

size_t sizeOf(ncclDataType_t type) {
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
    default: return 8;
  }
}

bool isSmallFloat(ncclDataType_t type) {
  return type == ncclFloat16 || type == ncclBfloat16 || type == ncclFloat8e4m3 || type == ncclFloat8e5m2;
}

// The formats below float go through the host kernel layer's conversions (nns/coll/float_convert.hpp), so this
// check holds the GPU to the CPU's bits. Widening is exact.
double widenSmall(ncclDataType_t type, uint32_t bits) {
  switch (type) {
    case ncclFloat16: return nns::coll::halfToFloat(static_cast<uint16_t>(bits));
    case ncclBfloat16: return nns::coll::bfloat16ToFloat(static_cast<uint16_t>(bits));
    case ncclFloat8e4m3: return nns::coll::fp8e4m3ToFloat(static_cast<uint8_t>(bits));
    default: return nns::coll::fp8e5m2ToFloat(static_cast<uint8_t>(bits));
  }
}
// x is one operation's result on values of the format (or one of them over an integer), computed in double.
// Rounding it to float and then to the format rounds as the exact result would: 53 >= 2 * 24 + 2 and
// 24 >= 2 * 11 + 2, so neither double rounding can land on a false tie.
uint32_t narrowSmall(ncclDataType_t type, double x) {
  float f = static_cast<float>(x);
  switch (type) {
    case ncclFloat16: return nns::coll::floatToHalf(f);
    case ncclBfloat16: return nns::coll::floatToBfloat16(f);
    case ncclFloat8e4m3: return nns::coll::floatToFp8e4m3(f);
    default: return nns::coll::floatToFp8e5m2(f);
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

// Bit patterns at the edges of each format, stored little-endian in the element's bytes: NaNs (both signs, quiet
// and signalling, with payloads), infinities, the largest finite values and ones whose sums or products pass them
// (float16 to infinity, fp8 saturating at 448 or 57344), the smallest and largest subnormals and the smallest normal,
// signed zeros, and a small normal whose square is subnormal; integers at 0, 1, -1 and their extremes.
std::vector<uint64_t> edgeBits(ncclDataType_t type) {
  switch (type) {
    case ncclFloat16:  // 49152 (0x7a00) + 49152 and 300 (0x5cb0) x 300 overflow; 2^-10 (0x1400) squared is subnormal
      return {0x7e00, 0xfe01, 0x7d00, 0x7c00, 0xfc00, 0x7bff, 0xfbff, 0x7a00,
              0x5cb0, 0x0001, 0x8001, 0x03ff, 0x0400, 0x0000, 0x8000, 0x1400};
    case ncclBfloat16:
      return {0x7fc0, 0xffc1, 0x7f81, 0x7f80, 0xff80, 0x7f7f, 0xff7f,
              0x7f00, 0x0001, 0x807f, 0x0080, 0x0000, 0x8000, 0x1f80};
    case ncclFloat32:
      return {0x7fc00000, 0xffc00001, 0x7f800001, 0x7f800000, 0xff800000, 0x7f7fffff, 0xff7fffff,
              0x7f000000, 0x00000001, 0x807fffff, 0x00800000, 0x00000000, 0x80000000, 0x1f800000};
    case ncclFloat64:
      return {0x7ff8000000000000, 0xfff8000000000001, 0x7ff0000000000001, 0x7ff0000000000000, 0xfff0000000000000,
              0x7fefffffffffffff, 0xffefffffffffffff, 0x7fe0000000000000, 0x0000000000000001, 0x800fffffffffffff,
              0x0010000000000000, 0x0000000000000000, 0x8000000000000000, 0x1ff0000000000000};
    case ncclFloat8e4m3:  // no infinity; 448 (0x7e), 256 (0x78) and 192 (0x74) saturate when added or multiplied
      return {0x7f, 0xff, 0x7e, 0xfe, 0x78, 0x74, 0x01, 0x81, 0x07, 0x08, 0x00, 0x80, 0x18};
    case ncclFloat8e5m2:
      return {0x7f, 0xfd, 0x7e, 0x7c, 0xfc, 0x7b, 0xfb, 0x78, 0x01, 0x81, 0x03, 0x04, 0x00, 0x80, 0x1c};
    default: {
      const unsigned bits = 8 * static_cast<unsigned>(sizeOf(type));
      const uint64_t all = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
      return {0, 1, all, all >> 1, uint64_t{1} << (bits - 1), (all >> 1) - 1};
    }
  }
}

// Random elements of moderate size (products of two stay finite in every format, fp8 included); integers over
// their whole range so sums and products wrap. With Values::kEdges about half are edgeBits instead.
void fill(ncclDataType_t type, uint8_t* p, size_t count, std::mt19937_64& rng, Values values) {
  std::uniform_real_distribution<double> real(-12.0, 12.0);
  const std::vector<uint64_t> edges = values == Values::kEdges ? edgeBits(type) : std::vector<uint64_t>{};
  for (size_t i = 0; i < count; ++i) {
    uint8_t* e = p + i * sizeOf(type);
    if (!edges.empty() && rng() % 2 == 0) {
      const uint64_t bits = edges[rng() % edges.size()];
      std::memcpy(e, &bits, sizeOf(type));  // little-endian: the low bytes are the element
    } else if (isSmallFloat(type)) {
      uint32_t bits = narrowSmall(type, real(rng));
      if (sizeOf(type) == 1)
        store<uint8_t>(e, static_cast<uint8_t>(bits));
      else
        store<uint16_t>(e, static_cast<uint16_t>(bits));
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
double realOp(double x, double y, ncclRedOp_t op) {
  switch (op) {
    case ncclProd: return x * y;
    case ncclMax: return x > y || std::isnan(y) ? x : y;
    case ncclMin: return x < y || std::isnan(y) ? x : y;
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
      bool wide = sizeOf(type) == 2;
      uint32_t x = wide ? load<uint16_t>(a) : load<uint8_t>(a), y = wide ? load<uint16_t>(b) : load<uint8_t>(b);
      double dx = widenSmall(type, x), dy = widenSmall(type, y);
      // max/min hand back one input's bits as the kernel does (x when it compares greater/less or y is NaN, else y).
      uint32_t bits = op == ncclMax   ? (dx > dy || std::isnan(dy) ? x : y)
                      : op == ncclMin ? (dx < dy || std::isnan(dy) ? x : y)
                                      : narrowSmall(type, realOp(dx, dy, op));
      if (wide)
        store<uint16_t>(out, static_cast<uint16_t>(bits));
      else
        store<uint8_t>(out, static_cast<uint8_t>(bits));
    }
  }
}

std::string cudaText(const char* what, cudaError_t e) {
  return std::string(what) + ": " + cudaGetErrorString(e);
}

// Device buffer with room for an element offset; freed on every return path.
struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    if (cudaMalloc(&ptr, bytes) != cudaSuccess) ptr = nullptr;
  }
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
  uint8_t* bytes() const { return static_cast<uint8_t*>(ptr); }
};

// The element's bits (little-endian) say NaN in its format; integers never are.
bool isNaN(ncclDataType_t type, uint64_t bits) {
  switch (type) {
    case ncclFloat16: return (bits & 0x7fff) > 0x7c00;
    case ncclBfloat16: return (bits & 0x7fff) > 0x7f80;
    case ncclFloat32: return (bits & 0x7fffffff) > 0x7f800000;
    case ncclFloat64: return (bits & 0x7fffffffffffffff) > 0x7ff0000000000000;
    case ncclFloat8e4m3: return (bits & 0x7f) == 0x7f;
    case ncclFloat8e5m2: return (bits & 0x7f) > 0x7c;
    default: return false;
  }
}

// Bit for bit, except that any NaN matches any NaN: NVIDIA's arithmetic returns its canonical NaN (0x7fff,
// 0x7fffffff, ...) where the CPU reference keeps a NaN operand's sign and payload.
std::string firstMismatch(ncclDataType_t type, const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                          size_t count) {
  size_t es = sizeOf(type);
  for (size_t i = 0; i < count; ++i) {
    uint64_t g = 0, w = 0;
    std::memcpy(&g, &got[i * es], es);
    std::memcpy(&w, &want[i * es], es);
    if (g == w || (isNaN(type, g) && isNaN(type, w))) continue;
    char text[160];
    std::snprintf(text, sizeof(text), "element %zu of %zu: got bits 0x%llx, want 0x%llx", i, count,
                  static_cast<unsigned long long>(g), static_cast<unsigned long long>(w));
    return text;
  }
  return "";
}

// Vectors (16 bytes) per buffer that take every thread of the largest grid through the unrolled loop once and half
// of them through the one-vector loop after it: the grid has kReduceBlocksPerSm x kReduceThreads threads per SM,
// and a thread unrolls while kReduceUnroll grid strides of vectors remain from its index.
size_t largeVectors() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms <= 0) {
    (void)cudaGetLastError();
    sms = 132;  // an H100 or H200; the check's own CUDA calls then report what is wrong
  }
  const size_t stride = static_cast<size_t>(sms) * kReduceBlocksPerSm * kReduceThreads;
  return kReduceUnroll * stride + stride / 2;
}

}  // namespace

const char* typeName(ncclDataType_t type) {
  static const char* const names[] = {"int8",    "uint8",   "int32",   "uint32",   "int64",   "uint64",
                                      "float16", "float32", "float64", "bfloat16", "fp8e4m3", "fp8e5m2"};
  return type >= 0 && type < ncclNumTypes ? names[type] : "unknown";
}

const char* opName(ncclRedOp_t op) {
  static const char* const names[] = {"sum", "prod", "max", "min", "avg"};
  return op >= 0 && op < ncclNumOps ? names[op] : "unknown";
}

std::string checkReduce(ncclDataType_t type, ncclRedOp_t op, size_t count, size_t dstOffset, size_t aOffset,
                        size_t bOffset, Output output, unsigned seed, Values values) {
  size_t es = sizeOf(type);
  const bool inPlace = output != Output::kSeparate;
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> a(count * es), b(count * es), want(count * es), got(count * es);
  fill(type, a.data(), count, rng, values);
  fill(type, b.data(), count, rng, values);
  for (size_t i = 0; i < count; ++i) referenceOne(type, op, &a[i * es], &b[i * es], &want[i * es]);
  size_t slack = 16 * es;
  DeviceBuffer da(count * es + slack), db(count * es + slack), dd(count * es + slack);
  if (!da.ptr || !db.ptr || !dd.ptr) return "cudaMalloc failed";
  uint8_t* pa = da.bytes() + aOffset * es;
  uint8_t* pb = db.bytes() + bOffset * es;
  uint8_t* pd = output == Output::kInA ? pa : output == Output::kInB ? pb : dd.bytes() + dstOffset * es;
  cudaError_t e;
  if ((e = cudaMemcpy(pa, a.data(), a.size(), cudaMemcpyHostToDevice)) != cudaSuccess) return cudaText("copy a", e);
  if ((e = cudaMemcpy(pb, b.data(), b.size(), cudaMemcpyHostToDevice)) != cudaSuccess) return cudaText("copy b", e);
  // Poison the output so an unwritten element shows.
  if (!inPlace && (e = cudaMemset(dd.ptr, 0xa5, count * es + slack)) != cudaSuccess) return cudaText("memset", e);
  if ((e = reduce(pd, pa, pb, count, type, op, nullptr)) != cudaSuccess) return cudaText("reduce launch", e);
  if ((e = cudaDeviceSynchronize()) != cudaSuccess) return cudaText("reduce", e);
  if ((e = cudaMemcpy(got.data(), pd, got.size(), cudaMemcpyDeviceToHost)) != cudaSuccess)
    return cudaText("copy back", e);
  if (!inPlace) {  // nothing written past the end
    std::vector<uint8_t> after(es);
    if ((e = cudaMemcpy(after.data(), pd + count * es, es, cudaMemcpyDeviceToHost)) != cudaSuccess)
      return cudaText("copy back", e);
    for (uint8_t byte : after)
      if (byte != 0xa5) return "wrote past the end of dst";
  }
  return firstMismatch(type, got, want, count);
}

std::string checkDivide(ncclDataType_t type, size_t count, int divisor, unsigned seed, Values values) {
  size_t es = sizeOf(type);
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> in(count * es), want(count * es), got(count * es);
  fill(type, in.data(), count, rng, values);
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* x = &in[i * es];
    uint8_t* w = &want[i * es];
    switch (type) {
      case ncclInt8: store<int8_t>(w, static_cast<int8_t>(load<int8_t>(x) / divisor)); break;
      case ncclUint8: store<uint8_t>(w, static_cast<uint8_t>(load<uint8_t>(x) / divisor)); break;
      case ncclInt32: store<int32_t>(w, load<int32_t>(x) / divisor); break;
      case ncclUint32: store<uint32_t>(w, load<uint32_t>(x) / static_cast<uint32_t>(divisor)); break;
      case ncclInt64: store<int64_t>(w, load<int64_t>(x) / divisor); break;
      case ncclUint64: store<uint64_t>(w, load<uint64_t>(x) / static_cast<uint64_t>(divisor)); break;
      case ncclFloat32: store<float>(w, static_cast<float>(static_cast<double>(load<float>(x)) / divisor)); break;
      case ncclFloat64: store<double>(w, load<double>(x) / divisor); break;
      default: {
        bool wide = es == 2;
        uint32_t bits = narrowSmall(type, widenSmall(type, wide ? load<uint16_t>(x) : load<uint8_t>(x)) / divisor);
        if (wide)
          store<uint16_t>(w, static_cast<uint16_t>(bits));
        else
          store<uint8_t>(w, static_cast<uint8_t>(bits));
      }
    }
  }
  DeviceBuffer d(count * es);
  if (!d.ptr) return "cudaMalloc failed";
  cudaError_t e;
  if ((e = cudaMemcpy(d.ptr, in.data(), in.size(), cudaMemcpyHostToDevice)) != cudaSuccess) return cudaText("copy", e);
  if ((e = divide(d.ptr, count, type, divisor, nullptr)) != cudaSuccess) return cudaText("divide launch", e);
  if ((e = cudaDeviceSynchronize()) != cudaSuccess) return cudaText("divide", e);
  if ((e = cudaMemcpy(got.data(), d.ptr, got.size(), cudaMemcpyDeviceToHost)) != cudaSuccess)
    return cudaText("copy back", e);
  return firstMismatch(type, got, want, count);
}

std::string checkPremultiply(ncclDataType_t type, size_t count, int ranks, unsigned seed, Values values) {
  size_t es = sizeOf(type);
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> in(count * es), want(count * es), got(count * es);
  fill(type, in.data(), count, rng, values);
  const float scalar = static_cast<float>(1.0 / ranks);  // as NCCL makes it: double, then float, then the type
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* x = &in[i * es];
    uint8_t* w = &want[i * es];
    switch (type) {
      case ncclFloat32: store<float>(w, load<float>(x) * scalar); break;
      case ncclFloat64: store<double>(w, load<double>(x) * (1.0 / ranks)); break;
      case ncclFloat16:
      case ncclBfloat16:
      case ncclFloat8e4m3:
      case ncclFloat8e5m2: {
        bool wide = es == 2;
        const float s = widenSmall(type, narrowSmall(type, scalar));
        uint32_t bits = narrowSmall(type, widenSmall(type, wide ? load<uint16_t>(x) : load<uint8_t>(x)) * s);
        if (wide)
          store<uint16_t>(w, static_cast<uint16_t>(bits));
        else
          store<uint8_t>(w, static_cast<uint8_t>(bits));
        break;
      }
      default: return std::string("not a floating-point type: ") + typeName(type);
    }
  }
  // The scalar as the kernel takes it: one value of the type.
  uint8_t scalarBytes[8] = {};
  if (type == ncclFloat32)
    store<float>(scalarBytes, scalar);
  else if (type == ncclFloat64)
    store<double>(scalarBytes, 1.0 / ranks);
  else if (es == 2)
    store<uint16_t>(scalarBytes, static_cast<uint16_t>(narrowSmall(type, scalar)));
  else
    store<uint8_t>(scalarBytes, static_cast<uint8_t>(narrowSmall(type, scalar)));
  DeviceBuffer d(count * es), o(count * es);
  if (!d.ptr || !o.ptr) return "cudaMalloc failed";
  cudaError_t e;
  if ((e = cudaMemcpy(d.ptr, in.data(), in.size(), cudaMemcpyHostToDevice)) != cudaSuccess) return cudaText("copy", e);
  if ((e = premultiply(o.ptr, d.ptr, count, type, scalarBytes, nullptr)) != cudaSuccess)
    return cudaText("premultiply launch", e);
  if ((e = premultiply(d.ptr, d.ptr, count, type, scalarBytes, nullptr)) != cudaSuccess)
    return cudaText("premultiply launch (in place)", e);
  if ((e = cudaDeviceSynchronize()) != cudaSuccess) return cudaText("premultiply", e);
  for (auto [buffer, form] : {std::pair{o.ptr, ""}, std::pair{d.ptr, " (in place)"}}) {
    if ((e = cudaMemcpy(got.data(), buffer, got.size(), cudaMemcpyDeviceToHost)) != cudaSuccess)
      return cudaText("copy back", e);
    std::string mismatch = firstMismatch(type, got, want, count);
    if (!mismatch.empty()) return mismatch + form;
  }
  return "";
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

size_t largeCount(ncclDataType_t type) {
  return largeVectors() * (16 / sizeOf(type)) + 3;
}

size_t largeCopyBytes() {
  return largeVectors() * 16 + 5;
}

}  // namespace nns::cuda::check
