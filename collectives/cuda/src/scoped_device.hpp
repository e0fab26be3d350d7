// scoped_device.hpp: the calling thread's CUDA device set for a scope and put back after it. The device is per
// thread, and the communicator's progress thread (which starts on device 0) runs schedules, slot copies and closes as
// well as the caller's thread does.
#pragma once

#include <cuda_runtime_api.h>

namespace nns::cuda {

class ScopedDevice {
 public:
  // `device` < 0: nothing changes. status() says whether the switch failed (the caller decides how to report it).
  explicit ScopedDevice(int device) {
    if (device < 0 || cudaGetDevice(&previous_) != cudaSuccess || previous_ == device) return;
    status_ = cudaSetDevice(device);
    switched_ = status_ == cudaSuccess;
  }
  ~ScopedDevice() {
    if (switched_) cudaSetDevice(previous_);
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  cudaError_t status() const { return status_; }

 private:
  int previous_ = -1;
  bool switched_ = false;
  cudaError_t status_ = cudaSuccess;
};

}  // namespace nns::cuda
