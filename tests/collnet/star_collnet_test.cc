// star_collnet_test.cc: the star collNet (examples/star-collnet) loaded through the project's loader, with 2..4 ranks,
// each a forked process on loopback, exchanging listen handles through shared memory; every wait is bounded.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "nns/core/loader.hpp"

namespace {

using namespace nns::core;
using Clock = std::chrono::steady_clock;
constexpr int kMaxRanks = 4;

struct Loaded {
  std::unique_ptr<Net> net;
  std::unique_ptr<CollNet> coll;
  std::string error;
};

// Loaded once in the parent, before any fork: every rank runs the same mapped library.
Loaded& plugin() {
  static Loaded loaded = [] {
    setenv("NNS_STAR_IFNAME", "lo", 1);  // loopback, whatever interfaces the host has
    Loaded result;
    LoadOptions options;
    options.plugin = "star";
    options.searchDirs = {NNS_PLUGIN_DIR};
    LoadReport report;
    result.net = loadNet(options, &report);
    if (result.net == nullptr) {
      for (const auto& c : report.candidates) result.error += c.requested + ": " + c.rejectReason + "\n";
      return result;
    }
    CollNetReport collReport;
    result.coll = loadCollNet(*result.net, &collReport);
    if (result.coll == nullptr) result.error = "collNet: " + collReport.rejectReason;
    return result;
  }();
  return loaded;
}
CollNet& coll() {
  return *plugin().coll;
}

// Shared by the parent and its rank processes (MAP_SHARED, made before fork).
struct Shared {
  char handles[kMaxRanks][NCCL_NET_HANDLE_MAXSIZE];
  std::atomic<int> listening;
  std::atomic<int> finished;  // ranks done with their part (a rank that must outlive the others waits for it)
  std::atomic<int> posted;
  std::atomic<long long> killedAtNs;  // steady clock (CLOCK_MONOTONIC, one for every process)
  char failure[kMaxRanks][512];
};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<long long>::is_always_lock_free,
              "the atomics live in memory shared across processes");

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  char text[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(text, sizeof(text), fmt, args);
  va_end(args);
  return text;
}
#define RANK_CHECK(cond, ...)                                                                   \
  do {                                                                                          \
    if (!(cond)) return format("%s:%d: %s: ", __FILE__, __LINE__, #cond) + format(__VA_ARGS__); \
  } while (0)

bool waitFor(const std::function<bool()>& ready, double seconds) {
  auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (!ready()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

// One rank's plugin objects; closed in the destructor (the process _exits after).
struct Rank {
  Shared* shared = nullptr;
  int rank = 0;
  int nranks = 0;
  void* ctx = nullptr;
  void* listenComm = nullptr;
  void* collComm = nullptr;
  ~Rank() {
    if (collComm != nullptr) coll().closeColl(collComm);
    if (listenComm != nullptr) coll().closeListen(listenComm);
    if (ctx != nullptr) coll().finalize(ctx);
  }
  // init, listen, publish the handle, wait (bounded) until every rank has published its own.
  std::string listen() {
    ncclResult_t result = coll().init(&ctx, 0, nullptr);
    RANK_CHECK(result == ncclSuccess, "init returned %d", result);
    result = coll().listen(ctx, 0, shared->handles[rank], &listenComm);
    RANK_CHECK(result == ncclSuccess, "listen returned %d", result);
    return "";
  }
  std::string publishAndWait() {
    shared->listening.fetch_add(1);
    RANK_CHECK(waitFor([&] { return shared->listening.load() == nranks; }, 10), "the other ranks never listened");
    return "";
  }
  ncclResult_t connect() {
    void* handles[kMaxRanks];
    for (int r = 0; r < nranks; ++r) handles[r] = shared->handles[r];
    return coll().connect(handles, nranks, rank, listenComm, &collComm);
  }
  std::string setUp() {
    std::string error = listen();
    if (error.empty()) error = publishAndWait();
    if (!error.empty()) return error;
    ncclResult_t result = connect();
    RANK_CHECK(result == ncclSuccess && collComm != nullptr, "connect returned %d", result);
    return "";
  }
};

// Tests a request until done, an error, or `seconds`: kTimedOut then.
constexpr ncclResult_t kTimedOut = static_cast<ncclResult_t>(-1);
ncclResult_t waitDone(void* request, int* size, double seconds = 10) {
  auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    int done = 0;
    ncclResult_t result = coll().test(request, &done, size);
    if (result != ncclSuccess) return result;
    if (done) return ncclSuccess;
    if (Clock::now() >= deadline) return kTimedOut;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

using Body = std::function<std::string(Rank&)>;

struct RunOptions {
  int victim = -1;                                                 // a rank the parent kills (its exit is not judged)
  std::function<void(Shared&, const std::vector<pid_t>&)> parent;  // runs in the parent while the ranks run
  std::function<void()> inChild;                                   // before the body, in each rank process
  double timeoutS = 90;
};

// Forks `nranks` processes running `body`; returns "" when each (but the victim) exited 0, else what failed.
std::string runRanks(int nranks, const Body& body, const RunOptions& options = {}) {
  if (plugin().coll == nullptr) return "the star plugin did not load: " + plugin().error;
  void* memory = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return "mmap failed";
  auto* shared = new (memory) Shared{};
  std::vector<pid_t> pids;
  for (int r = 0; r < nranks; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      if (options.inChild) options.inChild();
      std::string error;
      {
        Rank rank;
        rank.shared = shared;
        rank.rank = r;
        rank.nranks = nranks;
        error = body(rank);
      }
      std::snprintf(shared->failure[r], sizeof(shared->failure[r]), "%s", error.c_str());
      _exit(error.empty() ? 0 : 1);
    }
    pids.push_back(pid);
  }
  if (options.parent) options.parent(*shared, pids);
  std::string failures;
  auto deadline = Clock::now() + std::chrono::duration<double>(options.timeoutS);
  for (int r = 0; r < nranks; ++r) {
    int status = 0;
    pid_t waited = 0;
    while ((waited = waitpid(pids[r], &status, WNOHANG)) == 0 && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (waited == 0) {
      kill(pids[r], SIGKILL);
      waitpid(pids[r], &status, 0);
      failures += format("rank %d still ran after %.0f s (killed)\n", r, options.timeoutS);
      continue;
    }
    if (r == options.victim) continue;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      failures += format("rank %d: %s (%s %d)\n", r, shared->failure[r], WIFEXITED(status) ? "exit status" : "signal",
                         WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  }
  shared->~Shared();
  munmap(memory, sizeof(Shared));
  return failures;
}

// ---- reference arithmetic (integers in 64-bit unsigned, truncated: C's unsigned wrap) -------------------------------

template <class T>
T refOp(ncclRedOp_t op, T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    if (op == ncclSum) return static_cast<T>(static_cast<U>(uint64_t(U(a)) + uint64_t(U(b))));
    if (op == ncclProd) return static_cast<T>(static_cast<U>(uint64_t(U(a)) * uint64_t(U(b))));
  } else {
    if (op == ncclSum) return a + b;
    if (op == ncclProd) return a * b;
  }
  if (op == ncclMin) return a < b ? a : b;
  return a < b ? b : a;
}

// Rank r's element i of input `seed`: small values (products stay interesting), some near the type's top (wrap).
template <class T>
T inputValue(int rank, size_t i, int seed) {
  const auto mixed = static_cast<int64_t>(
      (i * 2654435761u + static_cast<size_t>(rank) * 40503u + static_cast<size_t>(seed) * 977u) % 1000u);
  if constexpr (std::is_same_v<T, uint8_t>) return static_cast<T>(200 + mixed % 56);  // sums of 2+ ranks wrap
  if constexpr (std::is_floating_point_v<T>) return static_cast<T>(mixed - 500) / T(8);
  if constexpr (std::is_signed_v<T>) return static_cast<T>(mixed % 7 - 3 + (i % 3 == 0 ? 1000003 * (rank + 1) : 0));
  return static_cast<T>(mixed);
}

template <class T>
std::vector<T> inputOf(int rank, size_t count, int seed) {
  std::vector<T> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = inputValue<T>(rank, i, seed);
  return values;
}

template <class T>
std::vector<T> reference(int nranks, size_t count, int seed, ncclRedOp_t op) {
  std::vector<T> out = inputOf<T>(0, count, seed);
  for (int r = 1; r < nranks; ++r) {
    std::vector<T> in = inputOf<T>(r, count, seed);
    for (size_t i = 0; i < count; ++i) out[i] = refOp(op, out[i], in[i]);
  }
  return out;
}

template <class T>
constexpr ncclDataType_t typeOf() {
  if constexpr (std::is_same_v<T, int8_t>) return ncclInt8;
  if constexpr (std::is_same_v<T, uint8_t>) return ncclUint8;
  if constexpr (std::is_same_v<T, int32_t>) return ncclInt32;
  if constexpr (std::is_same_v<T, uint32_t>) return ncclUint32;
  if constexpr (std::is_same_v<T, int64_t>) return ncclInt64;
  if constexpr (std::is_same_v<T, uint64_t>) return ncclUint64;
  if constexpr (std::is_same_v<T, float>) return ncclFloat32;
  return ncclFloat64;
}

template <class T>
std::string compare(const std::vector<T>& got, const std::vector<T>& want, const char* what) {
  for (size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i])  // the inputs keep every result exact: equal values, not merely close
      return format("%s: element %zu of %zu is %.17g, expected %.17g", what, i, want.size(),
                    static_cast<double>(got[i]), static_cast<double>(want[i]));
  return "";
}

// One all-reduce, in place or not, checked against the serial reference.
template <class T>
std::string allReduceOnce(Rank& rank, ncclRedOp_t op, size_t count, bool inPlace, int seed) {
  std::vector<T> send = inputOf<T>(rank.rank, count, seed);
  std::vector<T> recv(inPlace ? 0 : count, T(7));
  void* sendMr = nullptr;
  void* recvMr = nullptr;
  T* out = inPlace ? send.data() : recv.data();
  RANK_CHECK(coll().regMr(rank.collComm, send.data(), count * sizeof(T), NCCL_PTR_HOST, &sendMr) == ncclSuccess,
             "regMr failed");
  if (!inPlace)
    RANK_CHECK(coll().regMr(rank.collComm, recv.data(), count * sizeof(T), NCCL_PTR_HOST, &recvMr) == ncclSuccess,
               "regMr failed");
  void* request = nullptr;
  ncclResult_t result = coll().iallreduce(rank.collComm, send.data(), out, count, typeOf<T>(), op, sendMr,
                                          inPlace ? sendMr : recvMr, &request);
  RANK_CHECK(result == ncclSuccess && request != nullptr, "iallreduce returned %d", result);
  int size = -1;
  result = waitDone(request, &size);
  RANK_CHECK(result == ncclSuccess, "test returned %d (type %d, op %d, count %zu)", result, typeOf<T>(), op, count);
  RANK_CHECK(size == static_cast<int>(count * sizeof(T)), "size %d for %zu elements", size, count);
  coll().deregMr(rank.collComm, sendMr);
  if (recvMr != nullptr) coll().deregMr(rank.collComm, recvMr);
  std::vector<T> got(out, out + count);
  return compare(
      got, reference<T>(rank.nranks, count, seed, op),
      format("type %d op %d count %zu %s", typeOf<T>(), op, count, inPlace ? "in place" : "out of place").c_str());
}

std::string allReduceMatrix(Rank& rank) {
  std::string error = rank.setUp();
  if (!error.empty()) return error;
  int seed = 0;
  for (size_t count : {size_t{1}, size_t{1023}, size_t{100003}}) {
    for (bool inPlace : {false, true}) {
      for (ncclRedOp_t op : {ncclSum, ncclProd, ncclMin, ncclMax})
        if (!(error = allReduceOnce<int32_t>(rank, op, count, inPlace, ++seed)).empty()) return error;
      if (!(error = allReduceOnce<float>(rank, ncclSum, count, inPlace, ++seed)).empty()) return error;
      if (!(error = allReduceOnce<double>(rank, ncclMax, count, inPlace, ++seed)).empty()) return error;
      if (!(error = allReduceOnce<uint8_t>(rank, ncclSum, count, inPlace, ++seed)).empty()) return error;
      if (!(error = allReduceOnce<int64_t>(rank, ncclProd, count, inPlace, ++seed)).empty()) return error;
    }
  }
  // count 0 completes, with size 0.
  void* request = nullptr;
  int32_t nothing = 0;
  RANK_CHECK(coll().iallreduce(rank.collComm, &nothing, &nothing, 0, ncclInt32, ncclSum, nullptr, nullptr, &request) ==
                 ncclSuccess,
             "count 0 refused");
  int size = -1;
  RANK_CHECK(waitDone(request, &size) == ncclSuccess && size == 0, "count 0: size %d", size);
  return "";
}

// 8 requests posted before any is tested; the last one done means every earlier one is done (posting order).
std::string pipelined(Rank& rank) {
  std::string error = rank.setUp();
  if (!error.empty()) return error;
  constexpr int kRequests = 8;
  constexpr size_t kCount = 1023;
  std::vector<std::vector<int32_t>> send, recv;
  void* requests[kRequests] = {};
  for (int k = 0; k < kRequests; ++k) {
    send.push_back(inputOf<int32_t>(rank.rank, kCount, 100 + k));
    recv.emplace_back(kCount, -1);
  }
  for (int k = 0; k < kRequests; ++k) {
    ncclRedOp_t op = k % 2 == 0 ? ncclSum : ncclMax;
    ncclResult_t result = coll().iallreduce(rank.collComm, send[k].data(), recv[k].data(), kCount, ncclInt32, op,
                                            nullptr, nullptr, &requests[k]);
    RANK_CHECK(result == ncclSuccess && requests[k] != nullptr, "request %d: iallreduce returned %d", k, result);
  }
  int size = -1;
  RANK_CHECK(waitDone(requests[kRequests - 1], &size) == ncclSuccess, "the last request did not complete");
  for (int k = 0; k < kRequests - 1; ++k) {
    int done = 0;
    RANK_CHECK(coll().test(requests[k], &done, &size) == ncclSuccess && done == 1,
               "request %d was not done once request %d was", k, kRequests - 1);
  }
  for (int k = 0; k < kRequests; ++k) {
    error = compare(recv[k], reference<int32_t>(rank.nranks, kCount, 100 + k, k % 2 == 0 ? ncclSum : ncclMax),
                    format("request %d", k).c_str());
    if (!error.empty()) return error;
  }
  return "";
}

// All-gather: the full window in one part, then a window in the middle over 2 parts, and the output walked in windows;
// reduce-scatter: the full window (input in 2 parts) for int32 sum and float32 max, the input walked in windows, and
// a window off the elements refused.
std::string gatherAndScatter(Rank& rank) {
  std::string error = rank.setUp();
  if (!error.empty()) return error;
  const int n = rank.nranks;
  const size_t perRank = 1001;
  auto byteOf = [](int r, size_t i) { return static_cast<char>((r * 131 + static_cast<int>(i) * 7 + 3) & 0xff); };
  std::vector<char> send(perRank);
  for (size_t i = 0; i < perRank; ++i) send[i] = byteOf(rank.rank, i);
  std::vector<char> want(perRank * static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < perRank; ++i) want[static_cast<size_t>(r) * perRank + i] = byteOf(r, i);

  std::vector<char> all(want.size(), 0);
  ncclNetSGE_v12_t whole{nullptr, all.data(), all.size()};
  void* request = nullptr;
  ncclResult_t result =
      coll().iallgather(rank.collComm, send.data(), 1, &whole, perRank, 0, all.size(), nullptr, &request);
  RANK_CHECK(result == ncclSuccess, "iallgather returned %d", result);
  int size = -1;
  RANK_CHECK(waitDone(request, &size) == ncclSuccess && size == static_cast<int>(all.size()), "size %d", size);
  RANK_CHECK(all == want, "the full all-gather differs");

  // Partial windows as NCCL's proxy posts them: sendData at this rank's first byte inside the window (its block's
  // start, or the byte where the window starts inside its block).
  auto windowed = [&](size_t offset, size_t bytes, int nParts) -> std::string {
    const size_t begin = static_cast<size_t>(rank.rank) * perRank;
    char* sendData = send.data() + (offset > begin && offset < begin + perRank ? offset - begin : 0);
    // One part: all in `second`; two: a third in `first`, the rest in `second`.
    const size_t firstBytes = nParts == 1 ? 0 : bytes / 3;
    std::vector<char> first(firstBytes, 0), second(bytes - firstBytes, 0);
    ncclNetSGE_v12_t parts[2] = {{nullptr, first.data(), first.size()}, {nullptr, second.data(), second.size()}};
    ncclNetSGE_v12_t* from = nParts == 1 ? &parts[1] : parts;
    ncclResult_t posted =
        coll().iallgather(rank.collComm, sendData, nParts, from, perRank, offset, bytes, nullptr, &request);
    RANK_CHECK(posted == ncclSuccess, "iallgather of the window %zu+%zu returned %d", offset, bytes, posted);
    RANK_CHECK(waitDone(request, &size) == ncclSuccess && size == static_cast<int>(bytes), "size %d", size);
    first.insert(first.end(), second.begin(), second.end());
    RANK_CHECK(std::equal(first.begin(), first.end(), want.begin() + static_cast<long>(offset)),
               "the all-gather of the window %zu+%zu differs", offset, bytes);
    return "";
  };
  // From inside rank 0's block to inside the last rank's, over 2 parts.
  if (!(error = windowed(500, want.size() - 700, 2)).empty()) return error;
  // The whole output walked in windows of 700 bytes (not a divisor of a block), as NCCL's registered path walks it
  // in windows of maxCollBytes: each starts inside some rank's block, and one touches no byte of some ranks.
  for (size_t offset = 0; offset < want.size(); offset += 700)
    if (!(error = windowed(offset, std::min<size_t>(700, want.size() - offset), 1)).empty()) return error;

  // The full output over 20 parts (more than one sendmsg/recvmsg takes at once).
  constexpr int kParts = 20;
  std::vector<char> many(want.size(), 0);
  ncclNetSGE_v12_t manyParts[kParts];
  const size_t step = many.size() / kParts;
  for (int k = 0; k < kParts; ++k)
    manyParts[k] = {nullptr, many.data() + static_cast<size_t>(k) * step,
                    k == kParts - 1 ? many.size() - static_cast<size_t>(k) * step : step};
  result = coll().iallgather(rank.collComm, send.data(), kParts, manyParts, perRank, 0, many.size(), nullptr, &request);
  RANK_CHECK(result == ncclSuccess, "iallgather over %d parts returned %d", kParts, result);
  RANK_CHECK(waitDone(request, &size) == ncclSuccess && size == static_cast<int>(many.size()), "size %d", size);
  RANK_CHECK(many == want, "the all-gather over %d parts differs", kParts);

  // A window that is not inside the output, or parts that do not carry it: refused, nothing posted.
  request = nullptr;
  RANK_CHECK(coll().iallgather(rank.collComm, send.data(), 1, &whole, perRank, 1, all.size(), nullptr, &request) ==
                     ncclInvalidArgument &&
                 request == nullptr,
             "a window past the output was taken");

  auto scatter = [&](auto typeTag, ncclRedOp_t op, int seed) -> std::string {
    using T = decltype(typeTag);
    const size_t blockCount = 257;
    std::vector<T> input = inputOf<T>(rank.rank, blockCount * static_cast<size_t>(n), seed);
    std::vector<T> out(blockCount, T(-1));
    const size_t split = 13 * sizeof(T) + 1;  // parts need not end on an element
    ncclNetSGE_v12_t in[2] = {
        {nullptr, input.data(), split},
        {nullptr, reinterpret_cast<char*>(input.data()) + split, input.size() * sizeof(T) - split}};
    void* req = nullptr;
    ncclResult_t r = coll().ireducescatter(rank.collComm, 2, in, out.data(), blockCount * sizeof(T), 0,
                                           input.size() * sizeof(T), typeOf<T>(), op, nullptr, &req);
    RANK_CHECK(r == ncclSuccess, "ireducescatter returned %d", r);
    int got = -1;
    RANK_CHECK(waitDone(req, &got) == ncclSuccess && got == static_cast<int>(blockCount * sizeof(T)), "size %d", got);
    std::vector<T> full = reference<T>(n, blockCount * static_cast<size_t>(n), seed, op);
    std::vector<T> mine(full.begin() + static_cast<long>(blockCount) * rank.rank,
                        full.begin() + static_cast<long>(blockCount) * (rank.rank + 1));
    return compare(out, mine, "reduce-scatter");
  };
  if (!(error = scatter(int32_t{}, ncclSum, 7)).empty()) return error;
  if (!(error = scatter(float{}, ncclMax, 8)).empty()) return error;

  // Partial reduce-scatter windows as NCCL's proxy posts them: the input walked in windows of 100 elements (not a
  // divisor of a block), each window's bytes as the send part, recvData at this rank's first byte inside the window.
  {
    const size_t blockCount = 257, windowCount = 100;
    std::vector<int64_t> input = inputOf<int64_t>(rank.rank, blockCount * static_cast<size_t>(n), 9);
    std::vector<int64_t> out(blockCount, -1);
    const size_t begin = blockCount * static_cast<size_t>(rank.rank);
    for (size_t first = 0; first < input.size(); first += windowCount) {
      const size_t count = std::min(windowCount, input.size() - first);
      ncclNetSGE_v12_t window{nullptr, input.data() + first, count * sizeof(int64_t)};
      int64_t* recvData = out.data() + (first > begin && first < begin + blockCount ? first - begin : 0);
      void* req = nullptr;
      result =
          coll().ireducescatter(rank.collComm, 1, &window, recvData, blockCount * sizeof(int64_t),
                                first * sizeof(int64_t), count * sizeof(int64_t), ncclInt64, ncclMin, nullptr, &req);
      RANK_CHECK(result == ncclSuccess, "ireducescatter of the window at element %zu returned %d", first, result);
      const size_t mine = std::min(first + count, begin + blockCount) > std::max(first, begin)
                              ? std::min(first + count, begin + blockCount) - std::max(first, begin)
                              : 0;
      RANK_CHECK(waitDone(req, &size) == ncclSuccess && size == static_cast<int>(mine * sizeof(int64_t)),
                 "the window at element %zu: size %d, expected %zu", first, size, mine * sizeof(int64_t));
    }
    std::vector<int64_t> full = reference<int64_t>(n, blockCount * static_cast<size_t>(n), 9, ncclMin);
    std::vector<int64_t> want(full.begin() + static_cast<long>(begin),
                              full.begin() + static_cast<long>(begin + blockCount));
    if (!(error = compare(out, want, "reduce-scatter in windows")).empty()) return error;
  }
  // A window whose edge is not on an element: refused, nothing posted.
  std::vector<int32_t> input(64 * static_cast<size_t>(n)), out(64);
  ncclNetSGE_v12_t odd{nullptr, reinterpret_cast<char*>(input.data()) + 2, 64 * sizeof(int32_t)};
  request = nullptr;
  result = coll().ireducescatter(rank.collComm, 1, &odd, out.data(), 64 * sizeof(int32_t), 2, 64 * sizeof(int32_t),
                                 ncclInt32, ncclSum, nullptr, &request);
  RANK_CHECK(result == ncclInvalidArgument && request == nullptr, "a window off the elements returned %d", result);
  // Unsupported reductions are refused when posted.
  std::vector<uint16_t> halves(8);
  result = coll().iallreduce(rank.collComm, halves.data(), halves.data(), 8, ncclFloat16, ncclSum, nullptr, nullptr,
                             &request);
  RANK_CHECK(result == ncclInvalidArgument, "a float16 all-reduce returned %d", result);
  result = coll().iallreduce(rank.collComm, out.data(), out.data(), 8, ncclInt32, ncclAvg, nullptr, nullptr, &request);
  RANK_CHECK(result == ncclInvalidArgument, "an average returned %d", result);
  // The communicator still works after the refusals (nothing refused reached the wire).
  return allReduceOnce<int32_t>(rank, ncclSum, 33, false, 99);
}

class StarRanks : public ::testing::TestWithParam<int> {};

TEST_P(StarRanks, AllReduceMatchesSerialReference) {
  EXPECT_EQ(runRanks(GetParam(), allReduceMatrix), "");
}
TEST_P(StarRanks, PostedRequestsCompleteInOrder) {
  EXPECT_EQ(runRanks(GetParam(), pipelined), "");
}
TEST_P(StarRanks, AllGatherWindowsAndReduceScatter) {
  EXPECT_EQ(runRanks(GetParam(), gatherAndScatter), "");
}
INSTANTIATE_TEST_SUITE_P(Star, StarRanks, ::testing::Values(2, 3, 4), [](const ::testing::TestParamInfo<int>& info) {
  return std::to_string(info.param) + "ranks";
});

TEST(Star, OneRankNeedsNoSockets) {
  EXPECT_EQ(runRanks(1,
                     [](Rank& rank) {
                       std::string error = rank.setUp();
                       if (!error.empty()) return error;
                       return allReduceOnce<int64_t>(rank, ncclProd, 1023, true, 3);
                     }),
            "");
}

TEST(Star, ReduceSupportMatrix) {
  ASSERT_NE(plugin().coll, nullptr) << plugin().error;
  const std::set<ncclDataType_t> types = {ncclInt8,  ncclUint8,  ncclInt32,   ncclUint32,
                                          ncclInt64, ncclUint64, ncclFloat32, ncclFloat64};
  for (int type = 0; type < ncclNumTypes; ++type) {
    for (int op = 0; op <= ncclNumOps; ++op) {  // ncclNumOps: the first user-created op
      int supported = -1;
      ASSERT_EQ(coll().reduceSupport(static_cast<ncclDataType_t>(type), static_cast<ncclRedOp_t>(op), &supported),
                ncclSuccess);
      const bool want = types.count(static_cast<ncclDataType_t>(type)) != 0 &&
                        (op == ncclSum || op == ncclProd || op == ncclMin || op == ncclMax);
      EXPECT_EQ(supported, want ? 1 : 0) << "type " << type << " op " << op;
    }
  }
  int supported = -1;
  EXPECT_EQ(coll().reduceSupport(ncclFloat16, ncclSum, &supported), ncclSuccess);
  EXPECT_EQ(supported, 0);
  EXPECT_EQ(coll().reduceSupport(ncclFloat32, ncclAvg, &supported), ncclSuccess);
  EXPECT_EQ(supported, 0);
  ncclNetProperties_v12_t props{};
  ASSERT_EQ(coll().getProperties(0, &props), ncclSuccess);
  EXPECT_STREQ(props.name, "star0");
  EXPECT_EQ(props.ptrSupport, NCCL_PTR_HOST);
  EXPECT_EQ(props.maxCollBytes, 512ull << 20);
}

// A rank SIGKILLed while the others have an all-reduce pending: every survivor's test fails within 10 s.
class StarKill : public ::testing::TestWithParam<int> {};
TEST_P(StarKill, EverySurvivorFailsPromptly) {
  const int victim = GetParam();
  const int nranks = 3;
  RunOptions options;
  options.victim = victim;
  options.parent = [&](Shared& shared, const std::vector<pid_t>& pids) {
    if (!waitFor([&] { return shared.posted.load() == nranks - 1; }, 30)) return;  // the ranks report it
    shared.killedAtNs.store(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
    kill(pids[static_cast<size_t>(victim)], SIGKILL);
  };
  std::string failures = runRanks(
      nranks,
      [victim](Rank& rank) -> std::string {
        std::string error = rank.setUp();
        if (!error.empty()) return error;
        if (rank.rank == victim) {
          std::this_thread::sleep_for(std::chrono::seconds(60));  // killed long before
          return "the victim was not killed";
        }
        std::vector<int32_t> data = inputOf<int32_t>(rank.rank, 1023, 1);
        void* request = nullptr;
        ncclResult_t result = coll().iallreduce(rank.collComm, data.data(), data.data(), data.size(), ncclInt32,
                                                ncclSum, nullptr, nullptr, &request);
        RANK_CHECK(result == ncclSuccess, "iallreduce returned %d", result);
        rank.shared->posted.fetch_add(1);
        RANK_CHECK(waitFor([&] { return rank.shared->killedAtNs.load() != 0; }, 30), "the victim was never killed");
        int size = 0;
        result = waitDone(request, &size, 15);
        const double after =
            (std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count() -
             rank.shared->killedAtNs.load()) /
            1e9;
        RANK_CHECK(result != ncclSuccess, "the all-reduce completed although rank %d was dead", victim);
        RANK_CHECK(result != kTimedOut, "test still pending %.1f s after rank %d was killed", after, victim);
        RANK_CHECK(after < 10, "the failure took %.1f s", after);
        // Later operations fail too, at once.
        result = coll().iallreduce(rank.collComm, data.data(), data.data(), data.size(), ncclInt32, ncclSum, nullptr,
                                   nullptr, &request);
        RANK_CHECK(result != ncclSuccess, "an all-reduce was posted on a failed communicator");
        return "";
      },
      options);
  EXPECT_EQ(failures, "");
}
INSTANTIATE_TEST_SUITE_P(Star, StarKill, ::testing::Values(0, 1), [](const ::testing::TestParamInfo<int>& info) {
  return info.param == 0 ? std::string("Root") : std::string("NonRoot");
});

// One of 3 ranks never calls connect: the others' connect fails within NNS_STAR_CONNECT_TIMEOUT=2 s.
class StarMissing : public ::testing::TestWithParam<int> {};
TEST_P(StarMissing, ConnectFailsAfterTheTimeout) {
  const int missing = GetParam();
  const int nranks = 3;
  RunOptions options;
  options.inChild = [] { setenv("NNS_STAR_CONNECT_TIMEOUT", "2", 1); };  // read at init
  EXPECT_EQ(runRanks(
                nranks,
                [missing](Rank& rank) -> std::string {
                  std::string error = rank.listen();
                  if (error.empty()) error = rank.publishAndWait();
                  if (!error.empty()) return error;
                  if (rank.rank == missing) {  // keeps its listener until the others are done
                    RANK_CHECK(waitFor([&] { return rank.shared->finished.load() == nranks - 1; }, 20),
                               "the others never finished");
                    return "";
                  }
                  auto start = Clock::now();
                  ncclResult_t result = rank.connect();
                  double took = std::chrono::duration<double>(Clock::now() - start).count();
                  rank.shared->finished.fetch_add(1);
                  RANK_CHECK(result != ncclSuccess && rank.collComm == nullptr, "connect returned %d", result);
                  RANK_CHECK(took >= 1.5 && took < 6, "connect failed after %.1f s; the timeout is 2 s", took);
                  return "";
                },
                options),
            "");
}
INSTANTIATE_TEST_SUITE_P(Star, StarMissing, ::testing::Values(2, 0), [](const ::testing::TestParamInfo<int>& info) {
  return info.param == 0 ? std::string("Root") : std::string("NonRoot");
});

// Listening TCP sockets of this process, by descriptor.
std::set<int> listeningSockets() {
  std::set<int> found;
  for (int fd = 0; fd < 1024; ++fd) {
    int listening = 0;
    socklen_t length = sizeof(listening);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &length) == 0 && listening) found.insert(fd);
  }
  return found;
}

// Strangers on rank 0's listener before the ranks connect (one writes 100 garbage bytes, one stays silent, one
// closes at once) do not break the set-up. Rank 0 finds its listener as the listening socket listen() added.
TEST(Star, StrangersDoNotBreakConnect) {
  EXPECT_EQ(runRanks(3,
                     [](Rank& rank) -> std::string {
                       std::set<int> before = listeningSockets();
                       std::string error = rank.listen();
                       if (!error.empty()) return error;
                       std::vector<int> strangers;
                       if (rank.rank == 0) {
                         std::set<int> after = listeningSockets();
                         int listener = -1;
                         for (int fd : after)
                           if (before.count(fd) == 0) listener = fd;
                         RANK_CHECK(listener >= 0, "no new listening socket after listen");
                         sockaddr_storage address{};
                         socklen_t length = sizeof(address);
                         RANK_CHECK(getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) == 0,
                                    "getsockname failed");
                         for (int k = 0; k < 3; ++k) {
                           int fd = socket(address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
                           RANK_CHECK(fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&address), length) == 0,
                                      "stranger %d cannot connect", k);
                           if (k == 0) {
                             char garbage[100];
                             std::memset(garbage, 0xab, sizeof(garbage));
                             RANK_CHECK(send(fd, garbage, sizeof(garbage), MSG_NOSIGNAL) == 100, "send failed");
                           }
                           if (k == 2) {
                             close(fd);
                             continue;
                           }
                           strangers.push_back(fd);
                         }
                       }
                       if (!(error = rank.publishAndWait()).empty()) return error;
                       ncclResult_t result = rank.connect();
                       for (int fd : strangers) close(fd);
                       RANK_CHECK(result == ncclSuccess, "connect returned %d with strangers about", result);
                       return allReduceOnce<int32_t>(rank, ncclSum, 1023, false, 5);
                     }),
            "");
}

}  // namespace
