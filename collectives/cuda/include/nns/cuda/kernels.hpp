// nns/cuda/kernels.hpp: CUDA reduction, divide (avg finalize) and copy kernels over device buffers, on a caller's
// stream.
#pragma once

#include <cstddef>

#include <cuda_runtime_api.h>
#include <nccl_net/types.h>

namespace nns::cuda {

// dst[i] = a[i] op b[i] for every ncclDataType_t and ncclSum/Prod/Max/Min/Avg. Avg accumulates like sum here; the
// final step calls divide() once with the rank count, so partial sums never lose precision to early scaling.
// dst may alias a or b exactly (in place); any alignment is accepted (16-byte vectors where the pointers allow).
cudaError_t reduce(void* dst, const void* a, const void* b, size_t count, ncclDataType_t type, ncclRedOp_t op,
                   cudaStream_t stream);
// buf[i] = buf[i] / divisor: integer division for integer types (as the CPU path), float division otherwise
// (16-bit floats and fp8 computed in float and rounded to nearest even).
cudaError_t divide(void* buf, size_t count, ncclDataType_t type, int divisor, cudaStream_t stream);
// A vectorized copy kernel (cudaMemcpyAsync is the alternative; this one keeps the copy on the compute engines).
cudaError_t copy(void* dst, const void* src, size_t bytes, cudaStream_t stream);

// True when ptr is device memory (cudaMalloc, or managed) as seen by cudaPointerGetAttributes; host, pinned host and
// unknown pointers are false, so the schedule can pick the kernel layer by buffer location.
bool isDevicePointer(const void* ptr);
// True when at least one CUDA device can be used by this process.
bool deviceAvailable();

}  // namespace nns::cuda

// The C-style name for the reduction entry point.
inline cudaError_t nnsCudaReduce(void* dst, const void* a, const void* b, size_t count, ncclDataType_t type,
                                 ncclRedOp_t op, cudaStream_t stream) {
  return nns::cuda::reduce(dst, a, b, count, type, op, stream);
}
