// cuda_kernels_test.cc: every type x op x count x misalignment of the CUDA kernels against the CPU reference, and the
// refusal of misaligned GPU buffers (which needs no device).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <tuple>

#include "../collectives/free_port.hpp"
#include "nns/coll/collectives.hpp"
#include "nns/core/loader.hpp"
#include "nns/cuda/kernel_layer.hpp"
#include "nns/cuda/kernels.hpp"
#include "nns/cuda/slot_memory.hpp"
#include "reduce_check.hpp"

namespace {

using namespace nns::cuda::check;

#define SKIP_WITHOUT_CUDA_DEVICE() \
  if (!nns::cuda::deviceAvailable()) GTEST_SKIP() << "no CUDA device"

// Where the socket plugin is: the build tree's lib/, or $NNS_TEST_PLUGIN_DIR where the binary was carried to another
// machine without it (scripts/gpu-checks.sh).
std::string pluginDir() {
  const char* carried = std::getenv("NNS_TEST_PLUGIN_DIR");
  return carried != nullptr && *carried != '\0' ? carried : NNS_PLUGIN_DIR;
}

class CudaReduce : public ::testing::TestWithParam<std::tuple<ncclDataType_t, ncclRedOp_t>> {};

const char* outputName(Output output) {
  return output == Output::kInA ? " in place (dst = a)" : output == Output::kInB ? " in place (dst = b)" : "";
}

TEST_P(CudaReduce, MatchesReferenceAtEveryCountAndOffset) {
  SKIP_WITHOUT_CUDA_DEVICE();
  auto [type, op] = GetParam();
  const size_t offsets[][3] = {{0, 0, 0}, {1, 1, 1}, {3, 3, 3}, {0, 1, 2}, {5, 2, 0}};
  unsigned seed = 1;
  for (size_t count : kCounts)
    for (const auto& offset : offsets)
      for (Output output : {Output::kSeparate, Output::kInA, Output::kInB})
        EXPECT_EQ(checkReduce(type, op, count, offset[0], offset[1], offset[2], output, seed++), "")
            << "count " << count << " offsets " << offset[0] << "/" << offset[1] << "/" << offset[2]
            << outputName(output);
}

// NaN (any NaN matches any NaN: the GPU's is canonical), infinities, float16 overflow, fp8 saturation, subnormals.
TEST_P(CudaReduce, MatchesReferenceAtTheFormatsEdges) {
  SKIP_WITHOUT_CUDA_DEVICE();
  auto [type, op] = GetParam();
  const size_t offsets[][3] = {{0, 0, 0}, {1, 1, 1}, {0, 1, 2}};
  unsigned seed = 1;
  for (size_t count : kEdgeCounts)
    for (const auto& offset : offsets)
      for (Output output : {Output::kSeparate, Output::kInB})
        EXPECT_EQ(checkReduce(type, op, count, offset[0], offset[1], offset[2], output, seed++, Values::kEdges), "")
            << "count " << count << " offsets " << offset[0] << "/" << offset[1] << "/" << offset[2]
            << outputName(output);
}

// A count sized from the SM count, so that every thread runs the unrolled loop (no count above reaches it).
TEST_P(CudaReduce, UnrolledLoopMatchesReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  auto [type, op] = GetParam();
  EXPECT_EQ(checkReduce(type, op, largeCount(type), 1, 1, 1, Output::kInB, 1, Values::kEdges), "")
      << "count " << largeCount(type);
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
  for (int divisor : {2, 3, 7, 128, 256}) {  // 128 and 256: more ranks than an 8-bit type holds
    for (size_t count : kCounts)
      EXPECT_EQ(checkDivide(GetParam(), count, divisor, static_cast<unsigned>(count) + divisor), "")
          << "divisor " << divisor << " count " << count;
    for (size_t count : kEdgeCounts)
      EXPECT_EQ(checkDivide(GetParam(), count, divisor, static_cast<unsigned>(count) + divisor, Values::kEdges), "")
          << "divisor " << divisor << " count " << count << " edge values";
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CudaDivide, ::testing::ValuesIn(kTypes),
                         [](const auto& info) { return std::string(typeName(info.param)); });

TEST(CudaCopy, CopiesEveryByteAtAnyOffset) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (size_t bytes : {size_t{1}, size_t{15}, size_t{4097}, size_t{(1u << 22) + 5}, largeCopyBytes()})
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
  load.searchDirs = {pluginDir()};
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
  // NCCL's own variable as NCCL reads it: any integer (2 is on), and only a non-integer refused.
  setenv("NCCL_NET_FORCE_FLUSH", "yes", 1);
  try {
    nns::cuda::chooseSlotMemory(*net, 0);
    ADD_FAILURE() << "NCCL_NET_FORCE_FLUSH=yes was accepted";
  } catch (const nns::core::CommError& e) {
    EXPECT_EQ(std::string(e.what()), "NCCL_NET_FORCE_FLUSH=yes is not an integer");
  }
  setenv("NCCL_NET_FORCE_FLUSH", "2", 1);
  try {
    nns::cuda::chooseSlotMemory(*net, 0);  // on a machine with a device, slots are chosen
  } catch (const nns::core::CommError& e) {
    EXPECT_EQ(std::string(e.what()).find("NCCL_NET_FORCE_FLUSH"), std::string::npos) << e.what();  // no device here
  }
  unsetenv("NCCL_NET_FORCE_FLUSH");
}

// Needs no device: a misaligned element would fault on the GPU (cudaErrorMisalignedAddress, sticky for the whole
// context), so the kernels refuse such pointers before any CUDA call. The pointers are never dereferenced.
TEST(CudaKernels, MisalignedPointersAreRefusedBeforeAnyLaunch) {
  alignas(16) static char memory[64];
  char* aligned = memory;
  char* odd = memory + 2;  // a multiple of 2 but not of 4 or 8
  EXPECT_EQ(nns::cuda::reduce(odd, aligned, aligned, 4, ncclFloat32, ncclSum, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(nns::cuda::reduce(aligned, odd, aligned, 4, ncclFloat32, ncclSum, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(nns::cuda::reduce(aligned, aligned, odd, 4, ncclInt64, ncclMax, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(nns::cuda::reduce(aligned, aligned, memory + 1, 4, ncclBfloat16, ncclProd, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(nns::cuda::divide(odd, 4, ncclFloat64, 3, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(nns::cuda::reduce(odd, odd, odd, 0, ncclFloat32, ncclSum, nullptr), cudaSuccess);  // nothing to do
}

// TEST DOUBLE for the GPU kernel layer (no device needed): says its buffers are GPU memory, but `unreachable` (plain
// host memory, as the real layer finds with cudaPointerGetAttributes), and fails the test if the collective reaches
// it.
class DeviceLayerStandIn final : public nns::coll::KernelLayer {
 public:
  const void* unreachable = nullptr;
  bool reaches(const void* buffer) const override { return buffer != unreachable; }
  void reduce(void*, const void*, size_t, ncclDataType_t, ncclRedOp_t) override { ADD_FAILURE() << "ran"; }
  void divide(void*, size_t, ncclDataType_t, int) override { ADD_FAILURE() << "ran"; }
  void premultiply(void*, const void*, size_t, ncclDataType_t, const void*) override { ADD_FAILURE() << "ran"; }
  void copy(void*, const void*, size_t) override { ADD_FAILURE() << "ran"; }
  bool onDevice() const override { return true; }
};

// Needs no device: the collectives refuse misaligned GPU buffers at the call, naming the buffer, its address and the
// element size, and a plain host buffer beside a GPU one, before the slot placement check or anything else, and the
// communicator stays usable.
TEST(CudaCollectives, MisalignedOrUnreachableBuffersAreAnArgumentError) {
  nns::core::LaunchInfo launch{0, 1, "127.0.0.1", nns::test::freeLoopbackPort(), "test"};
  nns::core::CommOptions options;
  options.plugin = "socket";
  options.searchDirs = {pluginDir()};
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  nns::core::Communicator comm(launch, options);
  DeviceLayerStandIn device;
  alignas(16) static float memory[16];
  const char* base = reinterpret_cast<const char*>(memory);
  void* odd = const_cast<char*>(base + 2);
  auto refusal = [&](auto call) -> std::string {
    try {
      call();
    } catch (const nns::core::ArgumentError& e) {
      return e.what();
    } catch (const std::exception& e) {
      return std::string("not an ArgumentError: ") + e.what();
    }
    return "accepted";
  };
  char address[32];
  std::snprintf(address, sizeof(address), "%p", odd);
  const std::string sendText = std::string("the send buffer ") + address +
                               " is not aligned to its float elements: GPU buffers must start at a multiple of the "
                               "element size (4 bytes)";
  EXPECT_EQ(refusal([&] { nns::coll::allReduce(comm, odd, memory + 8, 2, ncclFloat32, ncclSum, device); }), sendText);
  EXPECT_EQ(refusal([&] { nns::coll::reduceScatter(comm, memory + 8, odd, 2, ncclFloat32, ncclMax, device); }),
            std::string("the receive buffer ") + address +
                " is not aligned to its float elements: GPU buffers must start at a multiple of the element size "
                "(4 bytes)");
  EXPECT_EQ(refusal([&] { nns::coll::reduce(comm, odd, memory + 8, 2, ncclFloat32, ncclSum, 0, device); }), sendText);
  EXPECT_NE(refusal([&] {
              nns::coll::allReduce(comm, odd, odd, 1, ncclFloat64, ncclSum, device);
            }).find("its double elements"),
            std::string::npos);
  // 2-byte elements at a 2-byte offset are aligned: the refusal is then the placement check's (host slots).
  EXPECT_NE(refusal([&] {
              nns::coll::allReduce(comm, odd, odd, 2, ncclFloat16, ncclSum, device);
            }).find("slots the GPU cannot read"),
            std::string::npos);
  // A plain host buffer beside a GPU one: refused before a kernel faults on it (a sticky illegal address).
  device.unreachable = memory + 8;
  const std::string hostText =
      " buffer is plain host memory, which this call's GPU kernels cannot reach: a reduction on GPU buffers needs "
      "both in GPU memory (or in host memory pinned or registered with CUDA)";
  EXPECT_EQ(refusal([&] { nns::coll::allReduce(comm, memory, memory + 8, 2, ncclFloat32, ncclSum, device); }),
            "the receive" + hostText);
  EXPECT_EQ(refusal([&] { nns::coll::reduceScatter(comm, memory + 8, memory, 2, ncclFloat32, ncclSum, device); }),
            "the send" + hostText);
  EXPECT_EQ(comm.asyncError(), "") << "an argument error must not fail the communicator";
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

// A premultiplied sum on the GPU (floating-point avg's first step): float16 60000 times half(1/2) is 30000, and the sum
// of two of them 60000 (summing first would overflow to infinity); out of place and in place; integers wrap as prod
// does; no scalar is refused.
TEST(CudaKernelLayer, DeviceBufferPremultipliesAsNccl) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const uint16_t host[2] = {nns::coll::floatToHalf(60000.0f), nns::coll::floatToHalf(-3.0f)};
  void *dst = nullptr, *src = nullptr;
  ASSERT_EQ(cudaMalloc(&dst, sizeof(host)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&src, sizeof(host)), cudaSuccess);
  nns::coll::KernelLayer& layer = nns::cuda::kernelsFor(dst);
  layer.copy(src, host, sizeof(host));
  const uint16_t half = nns::coll::floatToHalf(0.5f), third = 0x3555;  // half(1/3)
  layer.premultiply(dst, src, 2, ncclFloat16, &half);
  layer.reduce(dst, dst, 2, ncclFloat16, ncclSum);
  uint16_t result[2];
  layer.copy(result, dst, sizeof(result));
  EXPECT_EQ(nns::coll::halfToFloat(result[0]), 60000.0f);
  EXPECT_EQ(nns::coll::halfToFloat(result[1]), -3.0f);
  layer.premultiply(src, src, 2, ncclFloat16, &third);  // in place
  layer.copy(result, src, sizeof(result));
  EXPECT_EQ(result[1], nns::coll::floatToHalf(-3.0f * nns::coll::halfToFloat(third)));
  const int32_t big[2] = {0x40000000, -7}, by = 4;
  layer.copy(dst, big, sizeof(big));
  layer.premultiply(dst, dst, 2, ncclInt32, &by);
  int32_t wrapped[2];
  layer.copy(wrapped, dst, sizeof(wrapped));
  EXPECT_EQ(wrapped[0], 0) << "2^30 x 4 wraps to 0";
  EXPECT_EQ(wrapped[1], -28);
  EXPECT_EQ(nns::cuda::premultiply(dst, src, 2, ncclFloat16, nullptr, cudaStreamPerThread), cudaErrorInvalidValue);
  cudaFree(dst);
  cudaFree(src);
}

}  // namespace
