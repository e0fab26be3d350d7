// nns/cuda/kernels.hpp: CUDA reduction, divide and premultiply (avg) and copy kernels over device buffers, on a
// caller's stream.
#pragma once

#include <cstddef>
#include <string>

#include <cuda_runtime_api.h>
#include <nccl_net/types.h>

namespace nns::cuda {

// dst[i] = a[i] op b[i] for every ncclDataType_t and ncclSum/Prod/Max/Min/Avg. Avg accumulates like sum here: an
// integer avg's final step calls divide() once with the rank count, a floating-point avg's inputs go through
// premultiply() (NCCL's two ways).
// dst may alias a or b exactly (in place). Each pointer must be a multiple of the element size, as the GPU's typed
// loads need (a misaligned element would fault and leave the CUDA context unusable): otherwise cudaErrorInvalidValue
// and nothing is launched. Beyond that any offset works: 16-byte vectors where dst, a and b share one modulo 16,
// element by element where they do not.
cudaError_t reduce(void* dst, const void* a, const void* b, size_t count, ncclDataType_t type, ncclRedOp_t op,
                   cudaStream_t stream);
// buf[i] = buf[i] / divisor: integer division for integer types (as the CPU path), float division otherwise
// (16-bit floats and fp8 computed in float and rounded to nearest even). buf must be aligned as for reduce().
cudaError_t divide(void* buf, size_t count, ncclDataType_t type, int divisor, cudaStream_t stream);
// dst[i] = src[i] x *scalar (one value of `type`, read on the host at the call), as prod computes it: NCCL's
// ncclDevPreMulSum before its sum, for a premultiplied-sum op and for a floating-point avg (scalar:
// nns::coll::avgScalar). dst may be src; aligned as reduce().
cudaError_t premultiply(void* dst, const void* src, size_t count, ncclDataType_t type, const void* scalar,
                        cudaStream_t stream);
// A vectorized copy kernel (cudaMemcpyAsync is the alternative; this one keeps the copy on the compute engines). Any
// byte offsets.
cudaError_t copy(void* dst, const void* src, size_t bytes, cudaStream_t stream);

// reduce()'s and copy()'s launch: up to kReduceBlocksPerSm blocks of kReduceThreads threads per SM, each thread
// taking kReduceUnroll 16-byte vectors of each input at a time while that many grid strides of vectors remain, then
// one at a time. Public so that a check can pick counts that reach each loop on a given GPU.
inline constexpr int kReduceThreads = 512;
inline constexpr int kReduceBlocksPerSm = 4;
inline constexpr int kReduceUnroll = 4;

// True when ptr is device memory (cudaMalloc, or managed) as seen by cudaPointerGetAttributes; host, pinned host and
// unknown pointers are false, so the schedule can pick the kernel layer by buffer location.
bool isDevicePointer(const void* ptr);
// True when a kernel can read and write `ptr`: device or managed memory, or host memory pinned or registered with
// CUDA; false for plain (pageable) host memory, which a kernel faults on with a sticky error.
bool deviceReachable(const void* ptr);
// True when at least one CUDA device can be used by this process.
bool deviceAvailable();
// Why deviceAvailable() is false, with the CUDA error cudaGetDeviceCount returned: "cudaGetDeviceCount:
// cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime version", "cudaGetDeviceCount:
// cudaErrorNoDevice: no CUDA-capable device is detected" or "cudaGetDeviceCount: 0 devices"; "" when a device can be
// used. Tools print "no CUDA device (<reason>)".
std::string deviceUnavailableReason();

}  // namespace nns::cuda

// The C-style name for the reduction entry point.
inline cudaError_t nnsCudaReduce(void* dst, const void* a, const void* b, size_t count, ncclDataType_t type,
                                 ncclRedOp_t op, cudaStream_t stream) {
  return nns::cuda::reduce(dst, a, b, count, type, op, stream);
}
