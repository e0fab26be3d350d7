// reduce_bench.cc: nns-cuda-reduce-bench [MiB...]: reduction kernel bandwidth as a fraction of the device's measured
// D2D copy, per buffer size in MiB (default 64 256 1024: three buffers of the largest, 3 GiB, are far beyond any L2,
// an H200's 60 MB included; 64 MiB can read above 100% where part of the working set stays in L2). One row per
// (kernel, size): type, size, median ms, GB/s, copy GB/s at that size, fraction. "SKIP: no CUDA device (<the CUDA
// error>)" and exit 4 without a usable device.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "nns/cuda/kernels.hpp"

namespace {

constexpr int kWarmup = 5;
constexpr int kRepeats = 25;

#define CHECK_CUDA(call)                                                           \
  do {                                                                             \
    cudaError_t status_ = (call);                                                  \
    if (status_ != cudaSuccess) {                                                  \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(status_)); \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

// Median milliseconds of one launch of run(), each repeat timed alone with events after a warm-up.
template <class Run>
double medianMs(Run run) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < kWarmup; ++i) CHECK_CUDA(run());
  std::vector<float> times;
  for (int i = 0; i < kRepeats; ++i) {
    CHECK_CUDA(cudaEventRecord(start));
    CHECK_CUDA(run());
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> sizes;
  for (int i = 1; i < argc; ++i) {
    char* end = nullptr;
    unsigned long long mib = std::strtoull(argv[i], &end, 10);
    if (end == argv[i] || *end != '\0' || mib == 0 || mib > (size_t{1} << 20)) {
      std::fprintf(stderr, "usage: %s [MiB...] (buffer sizes; default 64 256 1024)\n", argv[0]);
      return 2;
    }
    sizes.push_back(mib);
  }
  if (sizes.empty()) sizes = {64, 256, 1024};
  const std::string unavailable = nns::cuda::deviceUnavailableReason();
  if (!unavailable.empty()) {
    std::printf("SKIP: no CUDA device (%s)\n", unavailable.c_str());
    return 4;
  }
  int device = 0;
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDevice(&device));
  CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  std::printf("device: %s (sm_%d%d, %d SMs, L2 %d MiB)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount,
              prop.l2CacheSize >> 20);
  std::printf(
      "bytes moved: copy = read + write (2 x size), reduce dst = a + b = 2 reads + 1 write (3 x size);"
      " median of %d after %d warm-up\n",
      kRepeats, kWarmup);
  std::printf("%-9s %-9s %10s %12s %12s %10s\n", "type", "size", "ms", "GB/s", "copy GB/s", "fraction");
  for (size_t mib : sizes) {
    size_t bytes = mib << 20;
    void *a, *b, *dst;
    CHECK_CUDA(cudaMalloc(&a, bytes));
    CHECK_CUDA(cudaMalloc(&b, bytes));
    CHECK_CUDA(cudaMalloc(&dst, bytes));
    // Non-zero data: 0x3c bytes are finite, ordinary float32 and bfloat16 values.
    CHECK_CUDA(cudaMemset(a, 0x3c, bytes));
    CHECK_CUDA(cudaMemset(b, 0x3b, bytes));
    double copyMs = medianMs([&] { return cudaMemcpyAsync(dst, a, bytes, cudaMemcpyDeviceToDevice, nullptr); });
    double copyGBs = 2.0 * bytes / copyMs / 1e6;
    double kernelCopyMs = medianMs([&] { return nns::cuda::copy(dst, a, bytes, nullptr); });
    double kernelCopyGBs = 2.0 * bytes / kernelCopyMs / 1e6;
    std::printf("%-9s %4zu MiB %10.3f %12.1f %12.1f %9.1f%%\n", "copy-kern", mib, kernelCopyMs, kernelCopyGBs, copyGBs,
                100.0 * kernelCopyGBs / copyGBs);
    for (ncclDataType_t type : {ncclFloat32, ncclBfloat16}) {
      size_t count = bytes / (type == ncclFloat32 ? 4 : 2);
      double ms = medianMs([&] { return nns::cuda::reduce(dst, a, b, count, type, ncclSum, nullptr); });
      double gbs = 3.0 * bytes / ms / 1e6;
      std::printf("%-9s %4zu MiB %10.3f %12.1f %12.1f %9.1f%%\n", type == ncclFloat32 ? "float32" : "bfloat16", mib, ms,
                  gbs, copyGBs, 100.0 * gbs / copyGBs);
    }
    CHECK_CUDA(cudaFree(a));
    CHECK_CUDA(cudaFree(b));
    CHECK_CUDA(cudaFree(dst));
  }
  return 0;
}
