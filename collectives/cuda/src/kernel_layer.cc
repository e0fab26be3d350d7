// kernel_layer.cc: KernelLayer over the CUDA kernels, synchronous per call, so the schedules stay unchanged.
#include "nns/cuda/kernel_layer.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "nns/core/communicator.hpp"
#include "nns/cuda/kernels.hpp"
#include "scoped_device.hpp"

namespace nns::cuda {
namespace {

// A CUDA failure fails the communicator with NCCL's code for it (ncclUnhandledCudaError), as the slot memory's do.
void throwOnError(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw core::CommError(std::string("CUDA ") + what + ": " + cudaGetErrorString(status), ncclUnhandledCudaError);
}

// The device holding the first of `a`, `b` that is GPU memory CUDA knows, or -1. A kernel launched on another device
// would fault on the buffer without peer access. One cudaPointerGetAttributes per call, next to a stream synchronize.
int deviceOf(const void* a, const void* b = nullptr) {
  for (const void* pointer : {a, b}) {
    if (pointer == nullptr) continue;
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, pointer) != cudaSuccess) {
      (void)cudaGetLastError();  // not a pointer CUDA knows: try the other one
      continue;
    }
    if (attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged) return attributes.device;
  }
  return -1;
}

// Runs the call on the device of its buffers: on whichever thread it is, the caller's device is put back after.
class OnDeviceOf {
 public:
  explicit OnDeviceOf(const void* a, const void* b = nullptr) : device_(deviceOf(a, b)) {
    throwOnError(device_.status(), "cudaSetDevice");
  }

 private:
  ScopedDevice device_;
};

class DeviceKernels final : public coll::KernelLayer {
 public:
  void reduce(void* dst, const void* src, size_t count, ncclDataType_t type, ncclRedOp_t op) override {
    reduceInto(dst, dst, src, count, type, op);
  }
  // The kernels take three operands (dst may alias a exactly), so this is one pass on the GPU too.
  void reduceInto(void* dst, const void* a, const void* b, size_t count, ncclDataType_t type, ncclRedOp_t op) override {
    OnDeviceOf on(dst);
    throwOnError(cuda::reduce(dst, a, b, count, type, op, cudaStreamPerThread), "reduce launch");
    throwOnError(cudaStreamSynchronize(cudaStreamPerThread), "reduce");
  }
  void divide(void* buf, size_t count, ncclDataType_t type, int divisor) override {
    OnDeviceOf on(buf);
    throwOnError(cuda::divide(buf, count, type, divisor, cudaStreamPerThread), "divide launch");
    throwOnError(cudaStreamSynchronize(cudaStreamPerThread), "divide");
  }
  void premultiply(void* dst, const void* src, size_t count, ncclDataType_t type, const void* scalar) override {
    OnDeviceOf on(dst, src);
    throwOnError(cuda::premultiply(dst, src, count, type, scalar, cudaStreamPerThread), "premultiply launch");
    throwOnError(cudaStreamSynchronize(cudaStreamPerThread), "premultiply");
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (dst == src || bytes == 0) return;  // in place: nothing to move (and copies must not overlap)
    OnDeviceOf on(dst, src);
    // cudaMemcpyAsync with cudaMemcpyDefault also covers a host buffer on one side (staging).
    throwOnError(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cudaStreamPerThread), "copy launch");
    throwOnError(cudaStreamSynchronize(cudaStreamPerThread), "copy");
  }
  bool onDevice() const override { return true; }
  bool reaches(const void* buffer) const override { return deviceReachable(buffer); }
  int gpuOf(const void* buffer) const override { return deviceOf(buffer); }
};

}  // namespace

coll::KernelLayer& deviceKernels() {
  static DeviceKernels kernels;
  return kernels;
}

coll::KernelLayer& kernelsFor(const void* buffer) {
  cudaPointerAttributes attributes{};
  const cudaError_t status = cudaPointerGetAttributes(&attributes, buffer);
  if (status == cudaSuccess)
    return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged ? deviceKernels()
                                                                                               : coll::hostKernels();
  (void)cudaGetLastError();
  // CUDA 11 and later answer cudaMemoryTypeUnregistered for plain host memory, so a failure is no answer about the
  // buffer. Without a usable device (no GPU or no driver, as in CI) every buffer is host memory; with one, it is the
  // device's failure (a fault left its context unusable), and taking the buffer for host memory would send a device
  // pointer to the CPU's loops (SIGSEGV) instead of saying what went wrong.
  if (!deviceAvailable()) return coll::hostKernels();
  throwOnError(status, "cudaPointerGetAttributes (the buffer's location is unknown: an earlier CUDA fault?)");
  return coll::hostKernels();  // not reached: throwOnError threw
}

}  // namespace nns::cuda
