// scoped_device.hpp: the calling thread's CUDA device set for a scope and put back after it. The device is per
// thread, and the communicator's progress thread (which starts on device 0) runs schedules, slot copies and closes as
// well as the caller's thread does.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

namespace nns::cuda {

class ScopedDevice {
 public:
  // `device` < 0: nothing changes. status() says whether the switch failed (the caller decides how to report it).
  explicit ScopedDevice(int device) {
    if (device < 0 || cudaGetDevice(&previous_) != cudaSuccess || previous_ == device) return;
    // A thread with no CUDA context yet (the progress thread, a caller that never used CUDA) reads as on device 0,
    // and putting it back there makes device 0's primary context: every rank of a node, whatever its GPU, then held
    // one on GPU 0 (hundreds of MiB each; refused outright in exclusive-process mode). Such a thread stays on
    // `device` instead.
    CUcontext current = nullptr;
    restore_ = contextGetter() == nullptr || contextGetter()(&current) != CUDA_SUCCESS || current != nullptr;
    status_ = cudaSetDevice(device);
    switched_ = status_ == cudaSuccess;
  }
  ~ScopedDevice() {
    if (switched_ && restore_) cudaSetDevice(previous_);
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  cudaError_t status() const { return status_; }

 private:
  using GetCurrentContext = CUresult (*)(CUcontext*);
  // cuCtxGetCurrent through the runtime (which loads the driver itself): no link to libcuda, which a machine without
  // a GPU lacks. Null when the runtime cannot give it.
  static GetCurrentContext contextGetter() {
    static const GetCurrentContext getter = [] {
      void* function = nullptr;
      cudaDriverEntryPointQueryResult found{};
      if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &function, 12000, cudaEnableDefault, &found) !=
              cudaSuccess ||
          found != cudaDriverEntryPointSuccess)
        return GetCurrentContext{nullptr};
      return reinterpret_cast<GetCurrentContext>(function);
    }();
    return getter;
  }

  int previous_ = -1;
  bool switched_ = false;
  bool restore_ = true;
  cudaError_t status_ = cudaSuccess;
};

}  // namespace nns::cuda
