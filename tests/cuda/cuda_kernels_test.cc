// cuda_kernels_test.cc: every type x op x count x misalignment of the CUDA kernels against the CPU reference.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <tuple>

#include "nns/core/loader.hpp"
#include "nns/cuda/kernel_layer.hpp"
#include "nns/cuda/kernels.hpp"
#include "nns/cuda/slot_memory.hpp"
#include "reduce_check.hpp"

namespace {

using namespace nns::cuda::check;

#define SKIP_WITHOUT_CUDA_DEVICE() \
  if (!nns::cuda::deviceAvailable()) GTEST_SKIP() << "no CUDA device"

class CudaReduce : public ::testing::TestWithParam<std::tuple<ncclDataType_t, ncclRedOp_t>> {};

TEST_P(CudaReduce, MatchesReferenceAtEveryCountAndOffset) {
  SKIP_WITHOUT_CUDA_DEVICE();
  auto [type, op] = GetParam();
  const size_t offsets[][3] = {{0, 0, 0}, {1, 1, 1}, {3, 3, 3}, {0, 1, 2}, {5, 2, 0}};
  unsigned seed = 1;
  for (size_t count : kCounts)
    for (const auto& offset : offsets)
      for (bool inPlace : {false, true})
        EXPECT_EQ(checkReduce(type, op, count, offset[0], offset[1], offset[2], inPlace, seed++), "")
            << "count " << count << " offsets " << offset[0] << "/" << offset[1] << "/" << offset[2]
            << (inPlace ? " in place" : "");
}

INSTANTIATE_TEST_SUITE_P(AllTypesAndOps, CudaReduce,
                         ::testing::Combine(::testing::ValuesIn(kTypes), ::testing::ValuesIn(kOps)),
                         [](const auto& info) {
                           return std::string(typeName(std::get<0>(info.param))) + "_" +
                                  opName(std::get<1>(info.param));
                         });

class CudaDivide : public ::testing::TestWithParam<ncclDataType_t> {};

TEST_P(CudaDivide, AvgFinalizeMatchesReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (int divisor : {2, 3, 7, 128, 256})  // 128 and 256: more ranks than an 8-bit type holds
    for (size_t count : kCounts)
      EXPECT_EQ(checkDivide(GetParam(), count, divisor, static_cast<unsigned>(count) + divisor), "")
          << "divisor " << divisor << " count " << count;
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CudaDivide, ::testing::ValuesIn(kTypes),
                         [](const auto& info) { return std::string(typeName(info.param)); });

TEST(CudaCopy, CopiesEveryByteAtAnyOffset) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (size_t bytes : {size_t{1}, size_t{15}, size_t{4097}, size_t{(1u << 22) + 5}})
    for (size_t offset : {size_t{0}, size_t{3}})
      EXPECT_EQ(checkCopy(bytes, offset, offset == 0 ? 0 : 7, static_cast<unsigned>(bytes)), "") << bytes;
}

TEST(CudaPointer, HostMemoryIsNotDeviceMemory) {
  SKIP_WITHOUT_CUDA_DEVICE();
  int onStack = 0;
  EXPECT_FALSE(nns::cuda::isDevicePointer(&onStack));
  void* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, 64), cudaSuccess);
  EXPECT_TRUE(nns::cuda::isDevicePointer(device));
  EXPECT_TRUE(nns::cuda::isDevicePointer(static_cast<char*>(device) + 3));
  cudaFree(device);
}

// Needs no device: a host buffer must always get the host layer, GPU or not.
TEST(CudaKernelLayer, HostBufferGetsHostKernels) {
  int onStack = 0;
  EXPECT_EQ(&nns::cuda::kernelsFor(&onStack), &nns::coll::hostKernels());
}

// Needs no device: the GPU Direct switches are read before the device is looked for, so a typo is named anywhere.
TEST(CudaSlotMemory, AMalformedSwitchIsRefused) {
  nns::core::LoadOptions load;
  load.plugin = "socket";
  load.searchDirs = {NNS_PLUGIN_DIR};
  nns::core::LoadReport report;
  auto net = nns::core::loadNet(load, &report);
  ASSERT_NE(net, nullptr);
  for (const char* name : {"NNS_GDR", "NNS_NET_FORCE_FLUSH"}) {
    setenv(name, "yes", 1);
    try {
      nns::cuda::chooseSlotMemory(*net, 0);
      ADD_FAILURE() << name << "=yes was accepted";
    } catch (const nns::core::CommError& e) {
      EXPECT_EQ(std::string(e.what()), std::string(name) + "=yes is not 0 or 1");
      EXPECT_EQ(e.result(), ncclInvalidUsage);
    }
    unsetenv(name);
  }
}

TEST(CudaKernelLayer, DeviceBufferAvgReducesThenDivides) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const float host[4] = {1, 2, 3, 4}, other[4] = {3, 4, 5, 8};
  void *dst = nullptr, *src = nullptr;
  ASSERT_EQ(cudaMalloc(&dst, sizeof(host)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&src, sizeof(other)), cudaSuccess);
  nns::coll::KernelLayer& layer = nns::cuda::kernelsFor(dst);
  EXPECT_EQ(&layer, &nns::cuda::deviceKernels());
  layer.copy(dst, host, sizeof(host));
  layer.copy(src, other, sizeof(other));
  layer.reduce(dst, src, 4, ncclFloat32, ncclAvg);
  layer.divide(dst, 4, ncclFloat32, 2);
  float result[4];
  layer.copy(result, dst, sizeof(result));
  EXPECT_EQ(result[0], 2.0f);
  EXPECT_EQ(result[3], 6.0f);
  cudaFree(dst);
  cudaFree(src);
}

}  // namespace
