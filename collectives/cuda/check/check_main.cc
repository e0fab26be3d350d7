// check_main.cc: nns-cuda-reduce-check: PASS/FAIL per type x op (every count, misalignment and in-place form, edge
// values, a count through the unrolled loop), exit 1 on any failure; "SKIP: no CUDA device (<the CUDA error>)" and
// exit 4 without a usable device. The groups run on $NNS_CHECK_THREADS threads (default: one per CPU, at most 16):
// the CPU side (inputs, reference, comparison) is most of the time, about 100 s on one thread. Each group's inputs
// come from its own seeds, so the results do not depend on the thread count; the lines print in the same order.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nns/cuda/kernels.hpp"
#include "reduce_check.hpp"

using namespace nns::cuda::check;

namespace {

// One line of the report (a type x op, avg's finalize for a type, or the copy kernel): counts its checks, says
// whether any failed, returns the line.
using Group = std::function<std::string(int& checks, bool& failed)>;

struct Result {
  std::string line;
  int checks = 0;
  bool failed = false;
  bool done = false;
};

std::vector<Group> makeGroups() {
  std::vector<Group> groups;
  // (dst, a, b) element offsets: aligned, all shifted alike (vector path after a scalar head), all different (scalar).
  static const size_t offsets[][3] = {{0, 0, 0}, {1, 1, 1}, {3, 3, 3}, {0, 1, 2}, {5, 2, 0}};
  for (ncclDataType_t type : kTypes) {
    for (ncclRedOp_t op : kOps) {
      groups.push_back([type, op](int& checks, bool& failed) {
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
        // NaN, infinities, overflow and saturation, subnormals: on the vector path with and without a scalar head,
        // and on the scalar one.
        for (size_t count : kEdgeCounts)
          for (int which : {0, 1, 3})
            for (Output output : {Output::kSeparate, Output::kInB})
              check(count, offsets[which], output, Values::kEdges);
        // A thread runs the kernel's 4-deep unrolled loop only while 4 grid strides of 16-byte vectors remain from its
        // index (4 blocks of 512 threads per SM: 270336 vectors, 4.3 MB, per stride on a 132-SM GPU), which none of
        // the counts above reaches: a count sized from this GPU's SM count (largeCount) takes every thread through
        // it, with and without a scalar head. Two runs only: the CPU side (inputs and reference) of each takes about
        // a second for 1-byte types.
        check(largeCount(type), offsets[0], Output::kSeparate, Values::kModerate);
        check(largeCount(type), offsets[1], Output::kInB, Values::kEdges);
        failed = !failure.empty();
        char head[64];
        std::snprintf(head, sizeof(head), "%s reduce %-8s %-5s ", failed ? "FAIL" : "PASS", typeName(type), opName(op));
        return head + failure;
      });
    }
    // Avg's two kernels, each over rank counts x kCounts x moderate and (to 4099 elements) edge values: `run` checks
    // one (ranks, count, seed, values).
    auto sweep = [type](const char* name, const std::vector<int>& rankCounts, const char* what, auto run) {
      return Group([=](int& checks, bool& failed) {
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
        failed = !failure.empty();
        char head[64];
        std::snprintf(head, sizeof(head), "%s %s %-8s ", failed ? "FAIL" : "PASS", name, typeName(type));
        return head + failure;
      });
    };
    // 128 and 256: more ranks than an 8-bit type holds.
    groups.push_back(
        sweep("divide", {2, 3, 7, 128, 256}, "divisor ", [type](int ranks, size_t count, unsigned seed, Values values) {
          return checkDivide(type, count, ranks, seed, values);
        }));
    // Integer avg divides; only the floating-point types premultiply.
    if (type == ncclFloat16 || type == ncclBfloat16 || type == ncclFloat32 || type == ncclFloat64 ||
        type == ncclFloat8e4m3 || type == ncclFloat8e5m2)
      groups.push_back(
          sweep("premultiply", {2, 3, 7, 1000}, "1/", [type](int ranks, size_t count, unsigned seed, Values values) {
            return checkPremultiply(type, count, ranks, seed, values);
          }));
  }
  groups.push_back([](int& checks, bool& failed) {
    std::string failure;
    // The largest: every thread through the unrolled loop (largeCopyBytes), at aligned and different offsets.
    for (size_t bytes : {size_t{1}, size_t{15}, size_t{4097}, size_t{(1u << 22) + 5}, largeCopyBytes()}) {
      for (size_t offset : {size_t{0}, size_t{3}}) {
        ++checks;
        std::string error = checkCopy(bytes, offset, offset == 0 ? 0 : 7, static_cast<unsigned>(bytes));
        if (!error.empty() && failure.empty()) failure = "bytes " + std::to_string(bytes) + ": " + error;
      }
    }
    failed = !failure.empty();
    return std::string(failed ? "FAIL" : "PASS") + " copy " + failure;
  });
  return groups;
}

int threadCount() {
  const char* text = std::getenv("NNS_CHECK_THREADS");
  int threads = text ? std::atoi(text) : static_cast<int>(std::min(std::thread::hardware_concurrency(), 16u));
  return std::max(threads, 1);
}

}  // namespace

int main() {
  const std::string unavailable = nns::cuda::deviceUnavailableReason();
  if (!unavailable.empty()) {
    std::printf("SKIP: no CUDA device (%s)\n", unavailable.c_str());
    return 4;
  }
  std::vector<Group> groups = makeGroups();
  const int threads = std::min(threadCount(), static_cast<int>(groups.size()));
  std::printf("# %zu groups on %d thread(s)\n", groups.size(), threads);
  std::fflush(stdout);
  // Workers take the next group; this thread prints the lines in order as they complete.
  std::vector<Result> results(groups.size());
  std::mutex mutex;
  std::condition_variable finished;
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      for (size_t i; (i = next++) < groups.size();) {
        int checks = 0;
        bool failed = false;
        std::string line = groups[i](checks, failed);
        std::lock_guard<std::mutex> lock(mutex);
        results[i] = Result{std::move(line), checks, failed, true};
        finished.notify_all();
      }
    });
  }
  int failures = 0, checks = 0;
  for (Result& result : results) {
    std::unique_lock<std::mutex> lock(mutex);
    finished.wait(lock, [&] { return result.done; });
    std::printf("%s\n", result.line.c_str());
    std::fflush(stdout);
    checks += result.checks;
    failures += result.failed;
  }
  for (std::thread& worker : workers) worker.join();
  std::printf("%s: %d checks, %d failing groups\n", failures ? "FAIL" : "PASS", checks, failures);
  return failures ? 1 : 0;
}
