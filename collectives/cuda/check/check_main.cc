// check_main.cc: nns-cuda-reduce-check: PASS/FAIL per type x op (every count, misalignment and in-place form, edge
// values, a count through the unrolled loop), exit 1 on any failure.
#include <cstdio>
#include <string>

#include "nns/cuda/kernels.hpp"
#include "reduce_check.hpp"

using namespace nns::cuda::check;

int main() {
  if (!nns::cuda::deviceAvailable()) {
    std::printf("SKIP: no CUDA device\n");
    return 0;
  }
  int failures = 0, checks = 0;
  // (dst, a, b) element offsets: aligned, all shifted alike (vector path after a scalar head), all different (scalar).
  const size_t offsets[][3] = {{0, 0, 0}, {1, 1, 1}, {3, 3, 3}, {0, 1, 2}, {5, 2, 0}};
  for (ncclDataType_t type : kTypes) {
    for (ncclRedOp_t op : kOps) {
      std::string failure;
      unsigned seed = 1;
      auto check = [&](size_t count, const size_t(&offset)[3], Output output, Values values) {
        ++checks;
        std::string error = checkReduce(type, op, count, offset[0], offset[1], offset[2], output, seed++, values);
        if (!error.empty() && failure.empty())
          failure = "count " + std::to_string(count) + " offsets " + std::to_string(offset[0]) + "/" +
                    std::to_string(offset[1]) + "/" + std::to_string(offset[2]) +
                    (output == Output::kInA   ? " in place (dst = a)"
                     : output == Output::kInB ? " in place (dst = b)"
                                              : "") +
                    (values == Values::kEdges ? " edge values" : "") + ": " + error;
      };
      for (size_t count : kCounts)
        for (const auto& offset : offsets)
          for (Output output : {Output::kSeparate, Output::kInA, Output::kInB})
            check(count, offset, output, Values::kModerate);
      // NaN, infinities, overflow and saturation, subnormals: on the vector path with and without a scalar head, and
      // on the scalar one.
      for (size_t count : kEdgeCounts)
        for (int which : {0, 1, 3})
          for (Output output : {Output::kSeparate, Output::kInB}) check(count, offsets[which], output, Values::kEdges);
      // A thread runs the kernel's 4-deep unrolled loop only while 4 grid strides of 16-byte vectors remain from its
      // index (4 blocks of 512 threads per SM: 270336 vectors, 4.3 MB, per stride on a 132-SM GPU), which none of the
      // counts above reaches: a count sized from this GPU's SM count (largeCount) takes every thread through it, with
      // and without a scalar head. Two runs only: the CPU side (inputs and reference) of each takes about a second
      // for 1-byte types, and scripts/gpu-checks.sh gives the whole check 180 s.
      check(largeCount(type), offsets[0], Output::kSeparate, Values::kModerate);
      check(largeCount(type), offsets[1], Output::kInB, Values::kEdges);
      std::printf("%s reduce %-8s %-5s %s\n", failure.empty() ? "PASS" : "FAIL", typeName(type), opName(op),
                  failure.c_str());
      failures += !failure.empty();
    }
    // Avg's two kernels, each over rank counts x kCounts x moderate and (to 4099 elements) edge values: `run` checks
    // one (ranks, count, seed, values).
    auto sweep = [&](const char* name, std::initializer_list<int> rankCounts, const char* what, auto run) {
      std::string failure;
      for (int ranks : rankCounts) {
        for (size_t count : kCounts) {
          for (Values values : {Values::kModerate, Values::kEdges}) {
            if (values == Values::kEdges && count > 4099) continue;
            ++checks;
            std::string error = run(ranks, count, static_cast<unsigned>(count) + ranks, values);
            if (!error.empty() && failure.empty())
              failure = std::string(what) + std::to_string(ranks) + " count " + std::to_string(count) +
                        (values == Values::kEdges ? " edge values" : "") + ": " + error;
          }
        }
      }
      std::printf("%s %s %-8s %s\n", failure.empty() ? "PASS" : "FAIL", name, typeName(type), failure.c_str());
      failures += !failure.empty();
    };
    // 128 and 256: more ranks than an 8-bit type holds.
    sweep("divide", {2, 3, 7, 128, 256}, "divisor ", [&](int ranks, size_t count, unsigned seed, Values values) {
      return checkDivide(type, count, ranks, seed, values);
    });
    // Integer avg divides; only the floating-point types premultiply.
    if (type == ncclFloat16 || type == ncclBfloat16 || type == ncclFloat32 || type == ncclFloat64 ||
        type == ncclFloat8e4m3 || type == ncclFloat8e5m2)
      sweep("premultiply", {2, 3, 7, 1000}, "1/", [&](int ranks, size_t count, unsigned seed, Values values) {
        return checkPremultiply(type, count, ranks, seed, values);
      });
  }
  std::string failure;
  // The largest: every thread through the unrolled loop (largeCopyBytes), at aligned and different offsets.
  for (size_t bytes : {size_t{1}, size_t{15}, size_t{4097}, size_t{(1u << 22) + 5}, largeCopyBytes()}) {
    for (size_t offset : {size_t{0}, size_t{3}}) {
      ++checks;
      std::string error = checkCopy(bytes, offset, offset == 0 ? 0 : 7, static_cast<unsigned>(bytes));
      if (!error.empty() && failure.empty()) failure = "bytes " + std::to_string(bytes) + ": " + error;
    }
  }
  std::printf("%s copy %s\n", failure.empty() ? "PASS" : "FAIL", failure.c_str());
  failures += !failure.empty();
  std::printf("%s: %d checks, %d failing groups\n", failures ? "FAIL" : "PASS", checks, failures);
  return failures ? 1 : 0;
}
