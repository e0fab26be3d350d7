// reduce.cu: element-wise reduction, divide, premultiply and copy kernels: 16-byte vectors, grid-stride, one kernel per
// (type, op).
#include "nns/cuda/kernels.hpp"

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

namespace nns::cuda {
namespace {

// In kernels.hpp, so that the check can size a count that reaches the unrolled loop on every thread.
constexpr int kThreads = kReduceThreads;
constexpr int kUnroll = kReduceUnroll;  // independent 16-byte loads in flight per thread before the first use
constexpr int kBlocksPerSm = kReduceBlocksPerSm;

// Integer sum/prod wrap around (two's complement) through the unsigned type: signed overflow would be undefined.
template <class T>
struct Unsigned {
  using type = T;
};
template <>
struct Unsigned<int8_t> {
  using type = uint8_t;
};
template <>
struct Unsigned<int32_t> {
  using type = uint32_t;
};
template <>
struct Unsigned<int64_t> {
  using type = uint64_t;
};

template <class T>
struct SumOp {
  __device__ static T apply(T x, T y) {
    using U = typename Unsigned<T>::type;
    return static_cast<T>(static_cast<U>(static_cast<U>(x) + static_cast<U>(y)));
  }
};
template <class T>
struct ProdOp {
  __device__ static T apply(T x, T y) {
    using U = typename Unsigned<T>::type;
    return static_cast<T>(static_cast<U>(static_cast<U>(x) * static_cast<U>(y)));
  }
};
// Max and min pass over a NaN operand, as NCCL's kernels do (fmaxf/fminf, __hmax/__hmin): only two NaNs give NaN.
// `y != y` is the NaN test (always false for integers).
template <class T>
struct MaxOp {
  __device__ static T apply(T x, T y) { return x > y || y != y ? x : y; }
};
template <class T>
struct MinOp {
  __device__ static T apply(T x, T y) { return x < y || y != y ? x : y; }
};

// 16-bit floats: native half/bfloat16 arithmetic (sm_80+ has both); a single IEEE add or multiply rounds exactly as
// float-then-round-to-nearest-even would.
template <>
struct SumOp<__half> {
  __device__ static __half apply(__half x, __half y) { return __hadd(x, y); }
};
template <>
struct ProdOp<__half> {
  __device__ static __half apply(__half x, __half y) { return __hmul(x, y); }
};
template <>
struct MaxOp<__half> {
  __device__ static __half apply(__half x, __half y) { return __hgt(x, y) || __hisnan(y) ? x : y; }
};
template <>
struct MinOp<__half> {
  __device__ static __half apply(__half x, __half y) { return __hlt(x, y) || __hisnan(y) ? x : y; }
};
using Bf16 = __nv_bfloat16;
template <>
struct SumOp<Bf16> {
  __device__ static Bf16 apply(Bf16 x, Bf16 y) { return __hadd(x, y); }
};
template <>
struct ProdOp<Bf16> {
  __device__ static Bf16 apply(Bf16 x, Bf16 y) { return __hmul(x, y); }
};
template <>
struct MaxOp<Bf16> {
  __device__ static Bf16 apply(Bf16 x, Bf16 y) { return __hgt(x, y) || __hisnan(y) ? x : y; }
};
template <>
struct MinOp<Bf16> {
  __device__ static Bf16 apply(Bf16 x, Bf16 y) { return __hlt(x, y) || __hisnan(y) ? x : y; }
};

// fp8 has no arithmetic units: widen to float (exact), compute, narrow with round-to-nearest-even, saturating to
// the largest finite value as the cuda_fp8.h conversions do (NaN stays NaN).
template <__nv_fp8_interpretation_t Kind>
struct Fp8 {
  __nv_fp8_storage_t bits;
};
template <__nv_fp8_interpretation_t Kind>
__device__ float widen(Fp8<Kind> x) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(x.bits, Kind)));
}
template <__nv_fp8_interpretation_t Kind>
__device__ Fp8<Kind> narrow(float f) {
  return Fp8<Kind>{__nv_cvt_float_to_fp8(f, __NV_SATFINITE, Kind)};
}
template <__nv_fp8_interpretation_t K>
struct SumOp<Fp8<K>> {
  __device__ static Fp8<K> apply(Fp8<K> x, Fp8<K> y) { return narrow<K>(widen(x) + widen(y)); }
};
template <__nv_fp8_interpretation_t K>
struct ProdOp<Fp8<K>> {
  __device__ static Fp8<K> apply(Fp8<K> x, Fp8<K> y) { return narrow<K>(widen(x) * widen(y)); }
};
template <__nv_fp8_interpretation_t K>
struct MaxOp<Fp8<K>> {
  __device__ static Fp8<K> apply(Fp8<K> x, Fp8<K> y) { return widen(x) > widen(y) || isnan(widen(y)) ? x : y; }
};
template <__nv_fp8_interpretation_t K>
struct MinOp<Fp8<K>> {
  __device__ static Fp8<K> apply(Fp8<K> x, Fp8<K> y) { return widen(x) < widen(y) || isnan(widen(y)) ? x : y; }
};
using E4m3 = Fp8<__NV_E4M3>;
using E5m2 = Fp8<__NV_E5M2>;

// The copy kernel is a "reduction" that returns its second input and never reads the first.
template <class T>
struct CopyOp {
  __device__ static T apply(T, T y) { return y; }
};
template <class Op>
struct ReadsA {
  static constexpr bool value = true;
};
template <class T>
struct ReadsA<CopyOp<T>> {
  static constexpr bool value = false;
};
template <class Op>
__host__ __device__ constexpr bool readsA() {
  return ReadsA<Op>::value;
}

template <class T>
struct alignas(16) Vec {
  static constexpr int kElems = 16 / sizeof(T);
  T v[kElems];
};

template <class T, class Op>
__device__ __forceinline__ Vec<T> applyVec(const Vec<T>& x, const Vec<T>& y) {
  Vec<T> r;
#pragma unroll
  for (int k = 0; k < Vec<T>::kElems; ++k) r.v[k] = Op::apply(x.v[k], y.v[k]);
  return r;
}

// dst, a and b share the same offset modulo 16 bytes when vectorized: the host splits off the unaligned head, hands
// the aligned middle as whole vectors, and the scalar loop covers head and tail (and everything when offsets differ).
// Every pointer is a multiple of sizeof(T) (launch refuses others): the scalar loop's loads and stores are typed.
// No __restrict__: dst is a itself in place (KernelLayer::reduce, and reduceInto where a is dst), and a restrict
// promise on aliased pointers is undefined behaviour, which lets nvcc read a through the read-only (non-coherent)
// cache while dst's stores go around it. Each thread already loads its elements before it stores any.
template <class T, class Op>
__global__ void __launch_bounds__(kThreads)
    reduceKernel(T* dst, const T* a, const T* b, size_t head, size_t vecCount, size_t count) {
  constexpr int V = Vec<T>::kElems;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  auto* dv = reinterpret_cast<Vec<T>*>(dst + head);
  auto* av = reinterpret_cast<const Vec<T>*>(a + head);
  auto* bv = reinterpret_cast<const Vec<T>*>(b + head);
  size_t i = tid;
  for (; i + (kUnroll - 1) * stride < vecCount; i += kUnroll * stride) {
    Vec<T> x[kUnroll], y[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if constexpr (readsA<Op>()) x[u] = av[i + u * stride];
      y[u] = bv[i + u * stride];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) dv[i + u * stride] = applyVec<T, Op>(x[u], y[u]);
  }
  // A collective's pieces (a slot, 512 KiB at most) run only this loop: gridFor gives them about a thread per vector.
  // b is copied into a register first, as above: handed to applyVec by reference, nvcc loaded it an element at a time
  // (16 one-byte loads per vector for uint8 and the copy kernel).
  for (; i < vecCount; i += stride) {
    Vec<T> x;
    if constexpr (readsA<Op>()) x = av[i];
    const Vec<T> y = bv[i];
    dv[i] = applyVec<T, Op>(x, y);
  }
  // Scalar part: the head [0, head) and the tail [head + vecCount * V, count).
  const size_t tailStart = head + vecCount * V;
  const size_t scalarCount = head + (count - tailStart);
  for (size_t s = tid; s < scalarCount; s += stride) {
    size_t e = s < head ? s : tailStart + (s - head);
    T x{};
    if constexpr (readsA<Op>()) x = a[e];
    dst[e] = Op::apply(x, b[e]);
  }
}

int gridFor(size_t work) {
  int device = 0, sms = 1;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
    sms = 1;
  size_t wanted = (work + kThreads - 1) / kThreads;
  size_t cap = static_cast<size_t>(sms) * kBlocksPerSm;
  return static_cast<int>(wanted < 1 ? 1 : (wanted < cap ? wanted : cap));
}

template <class T, class Op>
cudaError_t launch(void* dst, const void* a, const void* b, size_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  constexpr size_t V = Vec<T>::kElems;
  auto addr = [](const void* p) { return reinterpret_cast<uintptr_t>(p); };
  // PTX needs every load and store at a multiple of its size: an element that straddles one faults with
  // cudaErrorMisalignedAddress, which is sticky and leaves the process's CUDA context unusable. The collectives
  // refuse such buffers at the call; this keeps a direct caller's mistake a plain launch error.
  if (addr(dst) % sizeof(T) != 0 || addr(b) % sizeof(T) != 0 || (readsA<Op>() && addr(a) % sizeof(T) != 0))
    return cudaErrorInvalidValue;
  const uintptr_t misalign = addr(dst) % 16;
  bool sameOffset = addr(b) % 16 == misalign && (!readsA<Op>() || addr(a) % 16 == misalign);
  size_t head = count, vecCount = 0;
  if (sameOffset) {
    head = misalign == 0 ? 0 : (16 - misalign) / sizeof(T);
    if (head > count) head = count;
    vecCount = (count - head) / V;
  }
  size_t scalarCount = count - vecCount * V;
  int grid = gridFor(vecCount > scalarCount ? vecCount : scalarCount);
  // cudaLaunchKernel reports this launch's own errors: cudaGetLastError after a <<<>>> launch also returned an
  // earlier error the caller's code left on the thread (a cudaMalloc that failed, handled), failing this call.
  T* out = static_cast<T*>(dst);
  const T* left = static_cast<const T*>(a);
  const T* right = static_cast<const T*>(b);
  void* args[] = {&out, &left, &right, &head, &vecCount, &count};
  return cudaLaunchKernel(reinterpret_cast<const void*>(&reduceKernel<T, Op>), dim3(grid), dim3(kThreads), args, 0,
                          stream);
}

template <class T>
cudaError_t launchOp(void* dst, const void* a, const void* b, size_t count, ncclRedOp_t op, cudaStream_t stream) {
  switch (op) {
    case ncclSum:
    case ncclAvg: return launch<T, SumOp<T>>(dst, a, b, count, stream);
    case ncclProd: return launch<T, ProdOp<T>>(dst, a, b, count, stream);
    case ncclMax: return launch<T, MaxOp<T>>(dst, a, b, count, stream);
    case ncclMin: return launch<T, MinOp<T>>(dst, a, b, count, stream);
    default: return cudaErrorInvalidValue;
  }
}

// Finalize for avg: runs once per collective over the result, so a plain scalar grid-stride loop is enough.
template <class T>
__device__ T divideOne(T x, int d) {
  using Wide = std::conditional_t<(sizeof(T) < sizeof(int)), int, T>;  // int8: 128 ranks must not become -128
  return static_cast<T>(static_cast<Wide>(x) / static_cast<Wide>(d));
}
template <>
__device__ __half divideOne(__half x, int d) {
  return __float2half_rn(__half2float(x) / d);
}
template <>
__device__ Bf16 divideOne(Bf16 x, int d) {
  return __float2bfloat16_rn(__bfloat162float(x) / d);
}
template <>
__device__ E4m3 divideOne(E4m3 x, int d) {
  return narrow<__NV_E4M3>(widen(x) / d);
}
template <>
__device__ E5m2 divideOne(E5m2 x, int d) {
  return narrow<__NV_E5M2>(widen(x) / d);
}

template <class T>
__global__ void __launch_bounds__(kThreads) divideKernel(T* buf, size_t count, int divisor) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride)
    buf[i] = divideOne(buf[i], divisor);
}

template <class T>
cudaError_t launchDivide(void* buf, size_t count, int divisor, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (reinterpret_cast<uintptr_t>(buf) % sizeof(T) != 0) return cudaErrorInvalidValue;  // as launch: a sticky fault
  T* values = static_cast<T*>(buf);
  void* args[] = {&values, &count, &divisor};
  return cudaLaunchKernel(reinterpret_cast<const void*>(&divideKernel<T>), dim3(gridFor(count)), dim3(kThreads), args,
                          0, stream);  // this launch's own errors, as launch's
}

// NCCL's ncclDevPreMulSum before its sum (a premultiplied-sum op, and floating-point avg): x times one scalar of its
// type, as prod computes it (integers wrap; one rounding). Once per collective over the input, like divide: plain
// grid-stride.
template <class T>
__global__ void __launch_bounds__(kThreads) premultiplyKernel(T* dst, const T* src, size_t count, T scalar) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride)
    dst[i] = ProdOp<T>::apply(src[i], scalar);
}

template <class T>
cudaError_t launchPremultiply(void* dst, const void* src, size_t count, const void* scalarBytes, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (reinterpret_cast<uintptr_t>(dst) % sizeof(T) != 0 || reinterpret_cast<uintptr_t>(src) % sizeof(T) != 0)
    return cudaErrorInvalidValue;  // as launch: a sticky fault otherwise
  T scalar;
  std::memcpy(static_cast<void*>(&scalar), scalarBytes, sizeof(T));  // a host value, passed by value
  T* out = static_cast<T*>(dst);
  const T* in = static_cast<const T*>(src);
  void* args[] = {&out, &in, &count, &scalar};
  return cudaLaunchKernel(reinterpret_cast<const void*>(&premultiplyKernel<T>), dim3(gridFor(count)), dim3(kThreads),
                          args, 0, stream);
}

}  // namespace

cudaError_t reduce(void* dst, const void* a, const void* b, size_t count, ncclDataType_t type, ncclRedOp_t op,
                   cudaStream_t stream) {
  switch (type) {
    case ncclInt8: return launchOp<int8_t>(dst, a, b, count, op, stream);
    case ncclUint8: return launchOp<uint8_t>(dst, a, b, count, op, stream);
    case ncclInt32: return launchOp<int32_t>(dst, a, b, count, op, stream);
    case ncclUint32: return launchOp<uint32_t>(dst, a, b, count, op, stream);
    case ncclInt64: return launchOp<int64_t>(dst, a, b, count, op, stream);
    case ncclUint64: return launchOp<uint64_t>(dst, a, b, count, op, stream);
    case ncclFloat16: return launchOp<__half>(dst, a, b, count, op, stream);
    case ncclFloat32: return launchOp<float>(dst, a, b, count, op, stream);
    case ncclFloat64: return launchOp<double>(dst, a, b, count, op, stream);
    case ncclBfloat16: return launchOp<Bf16>(dst, a, b, count, op, stream);
    case ncclFloat8e4m3: return launchOp<E4m3>(dst, a, b, count, op, stream);
    case ncclFloat8e5m2: return launchOp<E5m2>(dst, a, b, count, op, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t divide(void* buf, size_t count, ncclDataType_t type, int divisor, cudaStream_t stream) {
  if (divisor == 0) return cudaErrorInvalidValue;
  switch (type) {
    case ncclInt8: return launchDivide<int8_t>(buf, count, divisor, stream);
    case ncclUint8: return launchDivide<uint8_t>(buf, count, divisor, stream);
    case ncclInt32: return launchDivide<int32_t>(buf, count, divisor, stream);
    case ncclUint32: return launchDivide<uint32_t>(buf, count, divisor, stream);
    case ncclInt64: return launchDivide<int64_t>(buf, count, divisor, stream);
    case ncclUint64: return launchDivide<uint64_t>(buf, count, divisor, stream);
    case ncclFloat16: return launchDivide<__half>(buf, count, divisor, stream);
    case ncclFloat32: return launchDivide<float>(buf, count, divisor, stream);
    case ncclFloat64: return launchDivide<double>(buf, count, divisor, stream);
    case ncclBfloat16: return launchDivide<Bf16>(buf, count, divisor, stream);
    case ncclFloat8e4m3: return launchDivide<E4m3>(buf, count, divisor, stream);
    case ncclFloat8e5m2: return launchDivide<E5m2>(buf, count, divisor, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t premultiply(void* dst, const void* src, size_t count, ncclDataType_t type, const void* scalar,
                        cudaStream_t stream) {
  if (scalar == nullptr) return cudaErrorInvalidValue;
  switch (type) {
    case ncclInt8: return launchPremultiply<int8_t>(dst, src, count, scalar, stream);
    case ncclUint8: return launchPremultiply<uint8_t>(dst, src, count, scalar, stream);
    case ncclInt32: return launchPremultiply<int32_t>(dst, src, count, scalar, stream);
    case ncclUint32: return launchPremultiply<uint32_t>(dst, src, count, scalar, stream);
    case ncclInt64: return launchPremultiply<int64_t>(dst, src, count, scalar, stream);
    case ncclUint64: return launchPremultiply<uint64_t>(dst, src, count, scalar, stream);
    case ncclFloat16: return launchPremultiply<__half>(dst, src, count, scalar, stream);
    case ncclFloat32: return launchPremultiply<float>(dst, src, count, scalar, stream);
    case ncclFloat64: return launchPremultiply<double>(dst, src, count, scalar, stream);
    case ncclBfloat16: return launchPremultiply<Bf16>(dst, src, count, scalar, stream);
    case ncclFloat8e4m3: return launchPremultiply<E4m3>(dst, src, count, scalar, stream);
    case ncclFloat8e5m2: return launchPremultiply<E5m2>(dst, src, count, scalar, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t copy(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (dst == src) return cudaSuccess;
  return launch<uint8_t, CopyOp<uint8_t>>(dst, src, src, bytes, stream);
}

bool isDevicePointer(const void* ptr) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    cudaGetLastError();  // an unknown host pointer must not leave a sticky error for the next launch
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
}

std::string deviceUnavailableReason() {
  int devices = 0;
  cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess) {
    cudaGetLastError();  // no sticky error for the caller's next CUDA call
    return std::string("cudaGetDeviceCount: ") + cudaGetErrorName(status) + ": " + cudaGetErrorString(status);
  }
  return devices > 0 ? "" : "cudaGetDeviceCount: 0 devices";
}

bool deviceReachable(const void* ptr) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attributes.type != cudaMemoryTypeUnregistered;
}

bool deviceAvailable() {
  return deviceUnavailableReason().empty();
}

}  // namespace nns::cuda
