// nns/cuda/kernel_layer.hpp: the collectives' KernelLayer over the CUDA kernels, and the choice of layer by buffer.
#pragma once

#include "nns/coll/reduce.hpp"

namespace nns::cuda {

// Device buffers: each call launches on this thread's default stream (cudaStreamPerThread) and waits for it, since
// KernelLayer's contract is that the result is in place on return. A CUDA failure throws nns::core::CommError
// (ncclUnhandledCudaError) naming the call and cudaGetErrorString's text (KernelLayer has no error return). Each call
// runs on the device that holds its buffer (the calling thread's device is put back after), since schedules also run on
// the progress thread. scratch() is allocated on the calling thread's current device.
coll::KernelLayer& deviceKernels();

// The layer for a buffer: deviceKernels() for device memory, coll::hostKernels() otherwise (every buffer where no
// device can be used). Throws nns::core::CommError (ncclUnhandledCudaError) where a device is there but CUDA cannot
// say where the buffer is, as the layer's calls do for a CUDA failure.
coll::KernelLayer& kernelsFor(const void* buffer);

}  // namespace nns::cuda
