// host_reduce_bench.cc: the host kernel layer's reduce (sum) per type against the streaming bound float a[i] += b[i]
// on the same buffers, interleaved in every iteration so both see the same machine load; and reduceInto against
// the copy-then-reduce it replaces.
//
// Counters: kernel and stream GB/s count 3 bytes per buffer byte (read dst, read src, write dst), as the CUDA bench
// does; ratio = kernel GB/s / stream GB/s. Before each timed operation dst is restored from a pristine copy
// (untimed), so every run sees the same data (values stay normal numbers: no denormal slow paths, no drift) and
// both operations start from the same cache state; glibc copies 64 MiB with non-temporal stores, so the big case
// still starts from memory.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>

#include "nns/coll/reduce.hpp"
#include "nns/core/communicator.hpp"

#if defined(__GNUC__) && !defined(__clang__)  // clang has no optimize pragma; its -O level applies
#pragma GCC optimize("O3")
#endif

namespace {

using nns::coll::hostKernels;

// The bound: the simplest loop the compiler vectorizes, compiled for the same ISA as the kernel variant that
// hostKernels() picked (nns::coll::hostKernelIsa()), so the ratio compares like with like.
__attribute__((noinline)) void streamAddBaseline(float* __restrict a, const float* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) a[i] += b[i];
}
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
__attribute__((noinline, target("arch=x86-64-v3"))) void streamAddV3(float* __restrict a, const float* __restrict b,
                                                                     size_t n) {
  for (size_t i = 0; i < n; ++i) a[i] += b[i];
}
__attribute__((noinline, target("arch=x86-64-v4"))) void streamAddV4(float* __restrict a, const float* __restrict b,
                                                                     size_t n) {
  for (size_t i = 0; i < n; ++i) a[i] += b[i];
}
#endif
using StreamFn = void (*)(float* __restrict, const float* __restrict, size_t);
StreamFn streamFor(const char* isa) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
  // "x86-64-v4+avx512bf16" streams with AVX-512 too (the extension adds only bfloat16 conversions).
  if (std::strncmp(isa, "x86-64-v4", 9) == 0) return streamAddV4;
  if (std::strcmp(isa, "x86-64-v3") == 0) return streamAddV3;
#endif
  (void)isa;
  return streamAddBaseline;
}

struct Aligned {
  void operator()(void* p) const { std::free(p); }
};
std::unique_ptr<uint8_t, Aligned> allocate(size_t bytes) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) std::abort();
  std::memset(p, 0, bytes);  // touch every page before timing
  return std::unique_ptr<uint8_t, Aligned>(static_cast<uint8_t*>(p));
}

// Values in [1, 2) of the type: sums stay finite and normal in every view of the bytes (a pair of bfloat16 or
// float16 values in [1, 2) read as one float is a normal float too).
void fill(uint8_t* p, size_t bytes, ncclDataType_t type, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> real(1.0f, 2.0f);
  size_t es = nns::coll::typeSize(type);
  for (size_t i = 0; i + es <= bytes; i += es) {
    float v = real(rng);
    switch (type) {
      case ncclFloat32: std::memcpy(p + i, &v, 4); break;
      case ncclBfloat16: {
        uint16_t b = nns::coll::floatToBfloat16(v);
        std::memcpy(p + i, &b, 2);
        break;
      }
      case ncclFloat16: {
        uint16_t h = nns::coll::floatToHalf(v);
        std::memcpy(p + i, &h, 2);
        break;
      }
      case ncclFloat8e4m3: p[i] = nns::coll::floatToFp8e4m3(v); break;
      case ncclFloat8e5m2: p[i] = nns::coll::floatToFp8e5m2(v); break;
      default: {  // integers: the bit pattern of a float in [1, 2), so the stream's float view stays normal
        std::memcpy(p + i, &v, std::min<size_t>(es, 4));
      }
    }
  }
}

double seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Runs `reference` and `measured` once each per iteration, interleaved, each after an untimed `prepare`; the
// benchmark's own time is the measured one. Returns both totals in seconds.
struct PairTimes {
  double reference = 0, measured = 0;
};
template <class Prepare, class Reference, class Measured>
PairTimes timeInterleaved(benchmark::State& state, Prepare prepare, Reference reference, Measured measured) {
  PairTimes times;
  for (auto _ : state) {
    prepare();
    auto t0 = std::chrono::steady_clock::now();
    reference();
    benchmark::ClobberMemory();
    times.reference += seconds(t0);

    prepare();
    t0 = std::chrono::steady_clock::now();
    measured();
    benchmark::ClobberMemory();
    double t = seconds(t0);
    times.measured += t;
    state.SetIterationTime(t);
  }
  return times;
}

// Bytes moved over all iterations at 3 bytes per buffer byte (two reads, one write), also set as the throughput.
double bytesMoved(benchmark::State& state, size_t bytes) {
  const double moved = 3.0 * static_cast<double>(bytes) * static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(moved));
  return moved;
}

void reduceVersusStream(benchmark::State& state, ncclDataType_t type) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t count = bytes / nns::coll::typeSize(type);
  auto dst = allocate(bytes), src = allocate(bytes), pristine = allocate(bytes);
  fill(pristine.get(), bytes, type, 1);
  fill(src.get(), bytes, type, 2);
  auto* dstFloat = reinterpret_cast<float*>(dst.get());
  auto* srcFloat = reinterpret_cast<const float*>(src.get());
  const StreamFn streamAdd = streamFor(nns::coll::hostKernelIsa());
  const PairTimes times = timeInterleaved(
      state, [&] { std::memcpy(dst.get(), pristine.get(), bytes); },
      [&] { streamAdd(dstFloat, srcFloat, bytes / sizeof(float)); },
      [&] { hostKernels().reduce(dst.get(), src.get(), count, type, ncclSum); });
  const double moved = bytesMoved(state, bytes);
  state.counters["kernel_GBps"] = moved / times.measured / 1e9;
  state.counters["stream_GBps"] = moved / times.reference / 1e9;
  state.counters["ratio"] = times.reference / times.measured;
}

// reduceInto (dst = a + b in one pass, what a ring step does now) against the copy-then-reduce it replaced, on the
// same three buffers, interleaved. Both write dst from a and b, so each counts 3 bytes per buffer byte;
// speedup = two-pass time / one-pass time.
void intoVersusTwoPass(benchmark::State& state, ncclDataType_t type) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t count = bytes / nns::coll::typeSize(type);
  auto dst = allocate(bytes), a = allocate(bytes), b = allocate(bytes);
  fill(a.get(), bytes, type, 1);
  fill(b.get(), bytes, type, 2);
  const PairTimes times = timeInterleaved(
      state, [] {},
      [&] {
        hostKernels().copy(dst.get(), a.get(), bytes);
        hostKernels().reduce(dst.get(), b.get(), count, type, ncclSum);
      },
      [&] { hostKernels().reduceInto(dst.get(), a.get(), b.get(), count, type, ncclSum); });
  const double moved = bytesMoved(state, bytes);
  state.counters["into_GBps"] = moved / times.measured / 1e9;
  state.counters["two_pass_GBps"] = moved / times.reference / 1e9;
  state.counters["speedup"] = times.reference / times.measured;
}

// 256 KiB per buffer: dst, src (and the pristine copy) fit in a 1 MiB L2. 64 MiB: twice a 32 MiB LLC.
constexpr int64_t kSizes[] = {256 << 10, 64 << 20};

void registerAll() {
  const struct {
    const char* name;
    ncclDataType_t type;
  } types[] = {{"float32", ncclFloat32}, {"bfloat16", ncclBfloat16},  {"float16", ncclFloat16},
               {"int32", ncclInt32},     {"fp8e4m3", ncclFloat8e4m3}, {"fp8e5m2", ncclFloat8e5m2}};
  for (const auto& t : types) {
    auto* b = benchmark::RegisterBenchmark((std::string("sum/") + t.name).c_str(), reduceVersusStream, t.type);
    for (int64_t size : kSizes) b->Arg(size);
    b->UseManualTime()->Unit(benchmark::kMicrosecond);
  }
  for (const auto& t : types) {
    if (t.type != ncclFloat32 && t.type != ncclBfloat16) continue;
    auto* b = benchmark::RegisterBenchmark((std::string("sum_into/") + t.name).c_str(), intoVersusTwoPass, t.type);
    for (int64_t size : kSizes) b->Arg(size);
    b->UseManualTime()->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    benchmark::AddCustomContext("host_kernel_isa", nns::coll::hostKernelIsa());
    // The bfloat16 loop's shape in the avx512bf16 variant (reduce_cpu.cc): forced, or chosen by CPU vendor.
    const char* widen = std::getenv("NNS_BF16_WIDEN");
    benchmark::AddCustomContext(
        "bf16_widen", widen != nullptr && *widen != '\0' ? widen : "default (shift on Intel, unpack elsewhere)");
  } catch (const nns::core::CommError& e) {  // NNS_HOST_ISA names no variant
    std::fprintf(stderr, "host_reduce_bench: %s\n", e.what());
    return 2;
  }
  registerAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
