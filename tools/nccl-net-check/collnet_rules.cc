// collnet_rules.cc: the collNet rules. A collNet's collectives need every rank: the rule process is rank 0 and forks
// the others; each loads the collNet, listens, publishes its handle in memory shared with the others, and connects
// with all the handles, as NCCL's proxies do. Each rank computes every rank's input from the rank number alone, so
// each checks its own result against a serial reference without any traffic of the harness's own.
#include "collnet_rules.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "nccl_net/sdk/result.hpp"
#include "nns/coll/reduce.hpp"
#include "nns/core/collnet.hpp"
#include "nns/core/printable.hpp"
#include "nns/tools/reduce_support.hpp"

namespace nns::check::collnet {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxRanks = 8;

std::string format(const char* text, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* text, ...) {
  char buffer[768];
  va_list args;
  va_start(args, text);
  std::vsnprintf(buffer, sizeof(buffer), text, args);
  va_end(args);
  return buffer;
}

std::string resultText(ncclResult_t result) {
  return std::to_string(static_cast<int>(result)) + " (" + nccl_net::sdk::resultName(result) + ")";
}

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// ---- data types: each rank's inputs, and the result every rank must see -----------------------------------------
// Types and ops by NCCL's numbers, named as nccl-net-bench names them (nns/coll/reduce.hpp).
const char* typeText(int type) {
  return coll::typeName(static_cast<ncclDataType_t>(type));
}
const char* opText(int op) {
  return coll::opName(static_cast<ncclRedOp_t>(op));
}
size_t typeBytes(int type) {
  return coll::typeSize(static_cast<ncclDataType_t>(type));
}
bool isFloat(int type) {
  return coll::isFloatingPoint(static_cast<ncclDataType_t>(type));
}
bool isUnsigned(int type) {
  return type == ncclUint8 || type == ncclUint32 || type == ncclUint64;
}

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

// Rank `rank`'s input element `index` of the collective seeded `seed`: a small integer (or 0.5 in a float product),
// so that every partial result is exact in every type, whatever order the plugin (or a switch) combines the ranks
// in. fp8 e5m2 holds the integers up to 8 exactly, e4m3 up to 16: their sums draw from {-1, 0, 1}.
double inputValue(int type, int op, int rank, size_t index, uint64_t seed) {
  uint64_t h = mix(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(rank) * 0x632be59bd9b4e019ull + index);
  if (op == ncclProd) {
    if (isUnsigned(type)) return static_cast<double>(1 + h % 3);
    static const double kFactors[] = {1, 2, -1, 0.5};
    return isFloat(type) ? kFactors[h % 4] : kFactors[h % 3];
  }
  const int span = (type == ncclFloat8e4m3 || type == ncclFloat8e5m2) ? 1 : 3;
  const int value = static_cast<int>(h % static_cast<uint64_t>(2 * span + 1));
  return isUnsigned(type) ? value : value - span;
}

void storeValue(int type, double value, unsigned char* out) {
  auto put = [&](auto v) { std::memcpy(out, &v, sizeof(v)); };
  switch (type) {
    case ncclInt8: put(static_cast<int8_t>(static_cast<int64_t>(value))); break;
    case ncclUint8: put(static_cast<uint8_t>(static_cast<int64_t>(value))); break;
    case ncclInt32: put(static_cast<int32_t>(static_cast<int64_t>(value))); break;
    case ncclUint32: put(static_cast<uint32_t>(static_cast<int64_t>(value))); break;
    case ncclInt64: put(static_cast<int64_t>(value)); break;
    case ncclUint64: put(static_cast<uint64_t>(static_cast<int64_t>(value))); break;
    case ncclFloat16: put(coll::floatToHalf(static_cast<float>(value))); break;
    case ncclFloat32: put(static_cast<float>(value)); break;
    case ncclFloat64: put(value); break;
    case ncclBfloat16: put(coll::floatToBfloat16(static_cast<float>(value))); break;
    case ncclFloat8e4m3: put(coll::floatToFp8e4m3(static_cast<float>(value))); break;
    default: put(coll::floatToFp8e5m2(static_cast<float>(value))); break;
  }
}

double loadValue(int type, const unsigned char* in) {
  auto get = [&](auto v) {
    std::memcpy(&v, in, sizeof(v));
    return v;
  };
  switch (type) {
    case ncclInt8: return get(int8_t{});
    case ncclUint8: return get(uint8_t{});
    case ncclInt32: return get(int32_t{});
    case ncclUint32: return get(uint32_t{});
    case ncclInt64: return static_cast<double>(get(int64_t{}));
    case ncclUint64: return static_cast<double>(get(uint64_t{}));
    case ncclFloat16: return coll::halfToFloat(get(uint16_t{}));
    case ncclFloat32: return get(float{});
    case ncclFloat64: return get(double{});
    case ncclBfloat16: return coll::bfloat16ToFloat(get(uint16_t{}));
    case ncclFloat8e4m3: return coll::fp8e4m3ToFloat(get(uint8_t{}));
    default: return coll::fp8e5m2ToFloat(get(uint8_t{}));
  }
}

// The integer types wrap (a product of 8 ranks' 3s overflows int8): their expected value is taken modulo the type,
// as storing it does.
double wrapped(int type, double value) {
  if (isFloat(type)) return value;
  unsigned char bytes[8];
  storeValue(type, value, bytes);
  return loadValue(type, bytes);
}

// The exact result of `op` over every rank's element (avg: NCCL's, the integer types truncating the quotient).
double expectedValue(int type, int op, int ranks, size_t index, uint64_t seed) {
  double acc = inputValue(type, op, 0, index, seed);
  for (int r = 1; r < ranks; ++r) {
    const double v = inputValue(type, op, r, index, seed);
    switch (op) {
      case ncclProd: acc *= v; break;
      case ncclMax: acc = std::max(acc, v); break;
      case ncclMin: acc = std::min(acc, v); break;
      default: acc += v; break;
    }
  }
  if (op == ncclAvg) acc = isFloat(type) ? acc / ranks : std::trunc(acc / ranks);
  return wrapped(type, acc);
}

// A floating-point avg is NCCL's premultiplied sum (each input times 1/n rounded to the type, then summed in the
// type): its rounding depends on the order the ranks are added in, so it may miss the exact quotient by an ulp or so
// per rank of the type.
bool closeEnough(int type, int op, int ranks, double got, double want) {
  if (got == want) return true;
  if (op != ncclAvg || !isFloat(type)) return false;
  const int mantissa = type == ncclFloat64      ? 52
                       : type == ncclFloat32    ? 23
                       : type == ncclFloat16    ? 10
                       : type == ncclBfloat16   ? 7
                       : type == ncclFloat8e4m3 ? 3
                                                : 2;
  const double ulp = std::ldexp(std::max(std::fabs(want), 1.0), -mantissa);
  return std::fabs(got - want) <= 2.0 * ranks * ulp;
}

std::string valueText(int type, double value) {
  return isFloat(type) ? format("%g", value) : format("%.0f", value);
}

// ---- the ranks: processes sharing one page of coordination ------------------------------------------------------
struct RankSlot {
  std::atomic<int> failed;  // 1 once the rank's text says what went wrong
  const char* call;         // a string literal (the same address in every forked rank)
  std::atomic<int> inCall;
  char text[640];  // its evidence, or what went wrong
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE];
};
struct Shared {
  std::atomic<int> abort;        // a rank failed: the others stop waiting for what will not come
  std::atomic<int> firstFailed;  // its rank, -1 before
  std::atomic<int> arrivals;     // every barrier call of every rank (each rank makes the same calls)
  RankSlot slot[kMaxRanks];
};

class Rank;
using Body = std::function<bool(Rank&)>;

class Rank {
 public:
  Rank(const core::Net& net, const Settings& settings, Shared* shared, int rank)
      : net_(net), settings_(settings), shared_(shared), rank_(rank), slot_(shared->slot[rank]) {}

  int rank() const { return rank_; }
  int ranks() const { return settings_.ranks; }
  core::CollNet& coll() { return *coll_; }
  void* comm() const { return comm_; }
  const ncclNetProperties_v12_t& props() const { return props_; }

  // `name` must be a string literal: a rank's last call is read by rank 0 from the shared page.
  ncclResult_t call(const char* name, const std::function<ncclResult_t()>& fn, int seconds = 0) {
    slot_.call = name;
    slot_.inCall.store(1);
    const ncclResult_t result = detail::watchedCall(name, seconds > 0 ? seconds : settings_.callTimeout, fn);
    slot_.inCall.store(0);
    return result;
  }

  bool fail(const std::string& text) {
    std::snprintf(slot_.text, sizeof(slot_.text), "%s", text.c_str());
    int none = -1;
    shared_->firstFailed.compare_exchange_strong(none, rank_);
    slot_.failed.store(1);
    shared_->abort.store(1);
    return false;
  }
  void note(const std::string& text) { std::snprintf(slot_.text, sizeof(slot_.text), "%s", text.c_str()); }
  bool aborted() const { return shared_->abort.load() != 0; }

  // Every rank waits here for all to arrive; false when a rank failed or the wait ran past `seconds`.
  bool barrier(double seconds) {
    const int step = ++barriers_;
    shared_->arrivals.fetch_add(1);
    auto start = Clock::now();
    while (shared_->arrivals.load() < ranks() * step) {
      if (aborted()) return false;
      if (secondsSince(start) > seconds)
        return fail(format("the other ranks did not reach step %d within %.0f s", step, seconds));
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return true;
  }

  // Waits for `request`: ncclSuccess when done, test's error, or kStopped (another rank failed) / kDeadline.
  static constexpr ncclResult_t kDeadline = static_cast<ncclResult_t>(15);
  static constexpr ncclResult_t kStopped = static_cast<ncclResult_t>(16);
  ncclResult_t wait(void* request, double seconds, int* size, bool stopOnAbort = true) {
    auto start = Clock::now();
    for (int spins = 0;; ++spins) {
      int done = 0;
      int reported = -1;
      ncclResult_t result = call("collnet test", [&] { return coll_->test(request, &done, &reported); });
      if (result != ncclSuccess) return result;
      if (done != 0) {
        if (size != nullptr) *size = reported;
        return ncclSuccess;
      }
      if (stopOnAbort && aborted()) return kStopped;
      if (secondsSince(start) > seconds) return kDeadline;
      if (spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  // What a post (Rank::post) ended with.
  static std::string postText(const char* call, ncclResult_t result) {
    if (result == kDeadline) return std::string(call) + " still gave a NULL request (not posted) after 10 s";
    if (result == kStopped) return "stopped: another rank failed first";
    return std::string(call) + " returned " + resultText(result);
  }
  std::string waitText(ncclResult_t result, double seconds) const {
    if (result == kDeadline) return format("test still said 'not done' after %.0f s", seconds);
    if (result == kStopped) return "stopped: another rank failed first";
    return "test returned " + resultText(result);
  }

  // Posts through `post` until it gives a request: a NULL one means "again" as for ncclNet (NCCL's collNet proxy
  // posts again). Bounded.
  ncclResult_t post(const char* name, const std::function<ncclResult_t(void**)>& post, void** request) {
    auto start = Clock::now();
    for (;;) {
      *request = nullptr;
      ncclResult_t result = call(name, [&] { return post(request); });
      if (result != ncclSuccess || *request != nullptr) return result;
      if (aborted()) return kStopped;
      if (secondsSince(start) > 10) return kDeadline;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  // post() of `name` ("collnet iallreduce", ...: a string literal, as for call()) and then wait() up to 30 s:
  // ncclSuccess once the operation is done; else the result, with *failure saying why in the harness's words.
  // *posted: whether the post itself took.
  ncclResult_t complete(const char* name, const std::function<ncclResult_t(void**)>& poster, std::string* failure,
                        bool* posted = nullptr) {
    void* request = nullptr;
    ncclResult_t result = post(name, poster, &request);
    const char* call = std::strncmp(name, "collnet ", 8) == 0 ? name + 8 : name;
    const bool took = result == ncclSuccess;
    if (posted != nullptr) *posted = took;
    if (took) result = wait(request, 30, nullptr);
    if (result != ncclSuccess) *failure = took ? waitText(result, 30) : postText(call, result);
    return result;
  }

  void* reg(void* data, size_t bytes, std::string* why) {
    void* mhandle = nullptr;
    ncclResult_t result =
        call("collnet regMr", [&] { return coll_->regMr(comm_, data, bytes, NCCL_PTR_HOST, &mhandle); });
    if (result != ncclSuccess)
      *why = format("regMr of %zu bytes of host memory returned %s", bytes, resultText(result).c_str());
    return result == ncclSuccess ? mhandle : nullptr;
  }
  void dereg(void* mhandle) {
    if (mhandle != nullptr) call("collnet deregMr", [&] { return coll_->deregMr(comm_, mhandle); });
  }

  // Loads and initialises the collNet (through Settings::version when set, else as NCCL chooses), then joins the
  // others on device 0.
  bool setUp() { return load() && join(); }

  bool load() {
    std::string error;
    call("the loader's collNet probe (dlsym, init, devices)", [&] {
      core::CollNetReport report;
      if (settings_.version != 0) {
        coll_ = core::openCollNetVersion(net_.path(), settings_.version, &error);
      } else {
        coll_ = core::loadCollNet(net_, &report);
        error = report.rejectReason;
      }
      return ncclSuccess;
    });
    if (coll_ == nullptr) return fail("the collNet did not load: " + error);
    ncclResult_t result = call("collnet init", [&] { return coll_->init(&ctx_, 0, core::hostLogger); });
    if (result != ncclSuccess) return fail("init returned " + resultText(result));
    inited_ = true;
    result = call("collnet getProperties", [&] { return coll_->getProperties(0, &props_); });
    if (result != ncclSuccess) return fail("getProperties(0) returned " + resultText(result));
    return true;
  }

  // Listens, publishes the handle, and connects with every rank's (a comm each time it is called).
  bool join() {
    ncclResult_t result = call("collnet listen", [&] { return coll_->listen(ctx_, 0, slot_.handle, &listen_); });
    if (result != ncclSuccess) return fail("listen on device 0 returned " + resultText(result));
    if (!barrier(settings_.ruleSeconds / 3.0)) return false;
    void* handles[kMaxRanks];
    for (int r = 0; r < ranks(); ++r) handles[r] = shared_->slot[r].handle;
    // connect is a collective: it returns once every rank has called it, so it may take as long as the slowest
    // rank's arrival (NCCL calls it once, from its proxy thread, and waits).
    const int connectSeconds = std::max(settings_.callTimeout, settings_.ruleSeconds / 3);
    auto start = Clock::now();
    result = call(
        "collnet connect", [&] { return coll_->connect(handles, ranks(), rank_, listen_, &comm_); }, connectSeconds);
    if (result != ncclSuccess)
      return fail(format("connect as rank %d of %d returned %s after %.1f s", rank_, ranks(),
                         resultText(result).c_str(), secondsSince(start)));
    if (comm_ == nullptr) return fail(format("connect as rank %d of %d returned success but no comm", rank_, ranks()));
    // Nobody rewrites its handle (the next join) before every rank's connect has returned.
    return barrier(settings_.ruleSeconds / 3.0);
  }

  // Closes the comm and the listener (a close that fails where every call before it succeeded is a failure).
  void leave() {
    if (comm_ != nullptr) {
      ncclResult_t result = call("collnet closeColl", [&] { return coll_->closeColl(comm_); });
      if (result != ncclSuccess && slot_.failed.load() == 0)
        fail("closeColl returned " + resultText(result) + " after every collective succeeded");
    }
    comm_ = nullptr;
    if (listen_ != nullptr) call("collnet closeListen", [&] { return coll_->closeListen(listen_); });
    listen_ = nullptr;
  }

  void tearDown() {
    leave();
    if (inited_) call("collnet finalize", [&] { return coll_->finalize(ctx_); });
    inited_ = false;
  }

 private:
  const core::Net& net_;
  const Settings& settings_;
  Shared* shared_;
  int rank_;
  RankSlot& slot_;
  std::unique_ptr<core::CollNet> coll_;
  void* ctx_ = nullptr;
  bool inited_ = false;
  void* listen_ = nullptr;
  void* comm_ = nullptr;
  ncclNetProperties_v12_t props_{};
  int barriers_ = 0;
};

// The ranks' processes, for a body on rank 0 that kills one (pids[0] is unused: rank 0 is the rule process).
struct Run {
  pid_t pids[kMaxRanks] = {};
};

// Runs `body` on every rank after setUp, then tearDown. `victim` (a rank > 0 that rank 0's body kills, or -1) is not
// judged by how its process ended. Returns the verdict: a PASS with rank 0's note, or the first rank's failure.
Outcome runRanks(const core::Net& net, const Settings& settings, const Body& body, Run* run = nullptr,
                 int victim = -1) {
  if (settings.ranks < 1 || settings.ranks > kMaxRanks)
    return {Status::kFail, format("--coll-ranks %d: 1 to %d ranks", settings.ranks, kMaxRanks)};
  if (!libraryHasCollNet(net)) return {Status::kSkip, "the library exports no ncclCollNetPlugin_vN"};
  void* page = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) return {Status::kFail, std::string("the harness could not map memory: ") + strerror(errno)};
  auto* shared = new (page) Shared();
  shared->firstFailed.store(-1);
  Run local;
  if (run == nullptr) run = &local;
  auto start = Clock::now();
  auto rankMain = [&](int r) {
    Rank rank(net, settings, shared, r);
    bool ok = rank.setUp() && body(rank);
    rank.tearDown();
    return ok && shared->slot[r].failed.load() == 0;
  };
  std::fflush(nullptr);
  const pid_t parent = getpid();
  for (int r = 1; r < settings.ranks; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(124);
      detail::becomeRankProcess();
      bool ok = false;
      try {
        ok = rankMain(r);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "nccl-net-check: rank %d: the harness failed (not the plugin): %s\n", r, e.what());
      }
      _exit(ok ? 0 : 1);
    }
    if (pid < 0) {
      shared->abort.store(1);
      for (int k = 1; k < r; ++k) kill(run->pids[k], SIGKILL), waitpid(run->pids[k], nullptr, 0);
      munmap(page, sizeof(Shared));
      return {Status::kFail, std::string("the harness could not fork a rank: ") + strerror(errno)};
    }
    run->pids[r] = pid;
  }
  const bool rootOk = rankMain(0);
  // The other ranks: each has until the rule's time is nearly up (a rank stuck in a call is ended by its watchdog).
  std::string trouble;
  const double budget = std::max(5.0, settings.ruleSeconds - 3 - secondsSince(start));
  auto deadline = Clock::now() + std::chrono::duration<double>(budget);
  for (int r = 1; r < settings.ranks; ++r) {
    if (run->pids[r] <= 0) continue;  // reaped by the body (the killed rank)
    int status = 0;
    pid_t got = 0;
    while ((got = waitpid(run->pids[r], &status, WNOHANG)) == 0 && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    RankSlot& slot = shared->slot[r];
    if (got == 0) {
      kill(run->pids[r], SIGKILL);
      waitpid(run->pids[r], &status, 0);
      if (slot.failed.load() == 0)
        trouble += format("; rank %d did not finish (last call: %s%s)", r, slot.call ? slot.call : "none",
                          slot.inCall.load() ? ", still running" : "");
      continue;
    }
    if (r == victim) continue;
    if (WIFSIGNALED(status) && slot.failed.load() == 0) {
      int none = -1;
      shared->firstFailed.compare_exchange_strong(none, r);
      std::snprintf(slot.text, sizeof(slot.text), "the plugin crashed the process (signal %d, %s)%s%s",
                    WTERMSIG(status), strsignal(WTERMSIG(status)), slot.inCall.load() ? " in " : "",
                    slot.inCall.load() && slot.call ? slot.call : "");
      slot.failed.store(1);
    } else if (WIFEXITED(status) && WEXITSTATUS(status) != 0 && slot.failed.load() == 0) {
      int none = -1;
      shared->firstFailed.compare_exchange_strong(none, r);
      std::snprintf(slot.text, sizeof(slot.text), "%s",
                    WEXITSTATUS(status) == 3 && slot.call != nullptr
                        ? format("%s did not return within its time (a blocking call)", slot.call).c_str()
                        : format("the process ended with status %d%s%s", WEXITSTATUS(status),
                                 slot.call ? ", last call " : "", slot.call ? slot.call : "")
                              .c_str());
      slot.failed.store(1);
    }
  }
  Outcome outcome{Status::kPass, shared->slot[0].text};
  const int first = shared->firstFailed.load();
  if (first < 0 && rootOk && !trouble.empty()) {
    outcome = {Status::kFail, trouble.substr(2)};  // every rank's own checks passed, but one never ended
  } else if (first >= 0 || !rootOk || !trouble.empty()) {
    const int shown = first >= 0 ? first : 0;
    outcome.status = Status::kFail;
    outcome.evidence = format("rank %d of %d: %s", shown, settings.ranks, shared->slot[shown].text);
    std::string others;  // the ranks that failed on their own too (not merely stopped by the first)
    for (int r = 0; r < settings.ranks; ++r)
      if (r != shown && r != victim && shared->slot[r].failed.load() != 0 &&
          std::strstr(shared->slot[r].text, "another rank failed first") == nullptr)
        others += (others.empty() ? "" : ", ") + std::to_string(r);
    if (!others.empty()) outcome.evidence += " (rank(s) " + others + " failed too)";
    outcome.evidence += trouble;
  }
  munmap(page, sizeof(Shared));
  return outcome;
}

// The (type, op) pairs reduceSupport says yes to, asked in this rank.
using Pair = tools::ReducePair;
std::vector<Pair> supportedPairs(Rank& rank, std::string* why) {
  std::vector<Pair> pairs;
  int type = 0, op = 0;
  ncclResult_t result = tools::supportedPairs(
      [&](ncclDataType_t t, ncclRedOp_t o, int* supported) {
        return rank.call("collnet reduceSupport", [&] { return rank.coll().reduceSupport(t, o, supported); });
      },
      &pairs, &type, &op);
  if (result != ncclSuccess) {
    *why = format("reduceSupport(%s, %s) returned %s", typeText(type), opText(op), resultText(result).c_str());
    return {};
  }
  return pairs;
}

std::string pairsText(const std::vector<Pair>& pairs) {
  return tools::reducePairsText(pairs);
}

void fillInputs(unsigned char* data, int type, int op, int rank, size_t first, size_t count, uint64_t seed) {
  const size_t bytes = typeBytes(type);
  for (size_t i = 0; i < count; ++i) storeValue(type, inputValue(type, op, rank, first + i, seed), data + i * bytes);
}

// The first element of `data` (elements first..first+count of the reduced vector) that is not the reduction.
std::string firstWrongElement(const unsigned char* data, int type, int op, int ranks, size_t first, size_t count,
                              uint64_t seed) {
  const size_t bytes = typeBytes(type);
  for (size_t i = 0; i < count; ++i) {
    const double got = loadValue(type, data + i * bytes);
    const double want = expectedValue(type, op, ranks, first + i, seed);
    if (!closeEnough(type, op, ranks, got, want)) {
      std::string inputs;
      for (int r = 0; r < ranks && r < 4; ++r)
        inputs += (r ? ", " : "") + valueText(type, wrapped(type, inputValue(type, op, r, first + i, seed)));
      return format("element %zu is %s, expected %s (the ranks' inputs %s%s)", i, valueText(type, got).c_str(),
                    valueText(type, want).c_str(), inputs.c_str(), ranks > 4 ? ", ..." : "");
    }
  }
  return "";
}

// One all-reduce on every rank, checked here: false (with the rank's failure) when it failed or came out wrong.
bool allreduceOnce(Rank& rank, int type, int op, size_t count, bool inPlace, uint64_t seed) {
  const size_t bytes = count * typeBytes(type);
  std::vector<unsigned char> send(std::max<size_t>(bytes, 1)), recv(std::max<size_t>(bytes, 1), 0xa5);
  fillInputs(send.data(), type, op, rank.rank(), 0, count, seed);
  unsigned char* out = inPlace ? send.data() : recv.data();
  const std::string what =
      format("%s %s of %zu element(s), %s", typeText(type), opText(op), count, inPlace ? "in place" : "out of place");
  std::string why;
  void* sendMh = rank.reg(send.data(), send.size(), &why);
  void* recvMh = inPlace ? sendMh : (sendMh ? rank.reg(recv.data(), recv.size(), &why) : nullptr);
  if (sendMh == nullptr || recvMh == nullptr) {
    rank.dereg(sendMh);
    return rank.fail(what + ": " + why);
  }
  std::string failure;
  ncclResult_t result = rank.complete(
      "collnet iallreduce",
      [&](void** r) {
        return rank.coll().iallreduce(rank.comm(), send.data(), out, count, static_cast<ncclDataType_t>(type),
                                      static_cast<ncclRedOp_t>(op), sendMh, recvMh, r);
      },
      &failure);
  if (!inPlace) rank.dereg(recvMh);
  rank.dereg(sendMh);
  if (result != ncclSuccess) return rank.fail(what + ": " + failure);
  std::string wrong = firstWrongElement(out, type, op, rank.ranks(), 0, count, seed);
  if (!wrong.empty()) return rank.fail(what + ": " + wrong);
  return true;
}

// Registers `send` and then `recv`: true with both handles, or false with neither and *why said.
bool registerBoth(Rank& rank, std::vector<unsigned char>& send, std::vector<unsigned char>& recv, void** sendMh,
                  void** recvMh, std::string* why) {
  *sendMh = rank.reg(send.data(), send.size(), why);
  *recvMh = *sendMh != nullptr ? rank.reg(recv.data(), recv.size(), why) : nullptr;
  if (*recvMh != nullptr) return true;
  rank.dereg(*sendMh);
  return false;
}

// NCCL's registered path posts a registered buffer in chunks: sendData and recvData at offsets inside one
// registration each, with its handles. 65539 elements of pair `p` in parts of 4099 (fewer where maxCollBytes says),
// one after another; false (with the rank's failure) when one failed or the result came out wrong.
bool allreduceInParts(Rank& rank, const Pair& p, uint64_t seed, std::string* note) {
  const size_t es = typeBytes(p.type), count = 65539;
  const size_t perPart = std::min<size_t>(4099, rank.props().maxCollBytes / es);
  if (perPart == 0) return true;
  std::vector<unsigned char> send(count * es), recv(count * es, 0xa5);
  fillInputs(send.data(), p.type, p.op, rank.rank(), 0, count, seed);
  std::string why;
  void *sendMh = nullptr, *recvMh = nullptr;
  if (!registerBoth(rank, send, recv, &sendMh, &recvMh, &why)) return rank.fail("all-reduce in parts: " + why);
  int parts = 0;
  for (size_t first = 0; first < count; first += perPart, ++parts) {
    const size_t elements = std::min(perPart, count - first);
    std::string failure;
    ncclResult_t result = rank.complete(
        "collnet iallreduce",
        [&](void** r) {
          return rank.coll().iallreduce(rank.comm(), send.data() + first * es, recv.data() + first * es, elements,
                                        static_cast<ncclDataType_t>(p.type), static_cast<ncclRedOp_t>(p.op), sendMh,
                                        recvMh, r);
        },
        &failure);
    if (result != ncclSuccess) {
      rank.dereg(recvMh);
      rank.dereg(sendMh);
      return rank.fail(format("all-reduce %s %s of %zu elements, the part of %zu at element %zu inside one "
                              "registration: ",
                              typeText(p.type), opText(p.op), count, elements, first) +
                       failure);
    }
  }
  rank.dereg(recvMh);
  rank.dereg(sendMh);
  std::string wrong = firstWrongElement(recv.data(), p.type, p.op, rank.ranks(), 0, count, seed);
  if (!wrong.empty())
    return rank.fail(format("all-reduce %s %s of %zu elements in parts of %zu inside one registration: ",
                            typeText(p.type), opText(p.op), count, perPart) +
                     wrong);
  *note = format(
      "; and %zu of %s %s in %d parts at offsets inside one registration of each buffer, as NCCL posts "
      "a registered buffer",
      count, typeText(p.type), opText(p.op), parts);
  return true;
}

bool hostPointers(Rank& rank, std::string* why) {
  if ((rank.props().ptrSupport & NCCL_PTR_HOST) != 0) return true;
  *why = format("device 0 does not take host memory (ptrSupport 0x%x): the harness has no GPU buffers to give it",
                rank.props().ptrSupport);
  return false;
}

// The first steps of a rule that reduces: host memory, then the pairs reduceSupport accepts. false where the rule
// stops: skipped (`skipText` says why) or failed (the rank's failure recorded).
bool reductionPairs(Rank& rank, std::string* skipText, std::vector<Pair>* pairs) {
  std::string why;
  if (!hostPointers(rank, &why)) {
    *skipText = why;
    return false;
  }
  *pairs = supportedPairs(rank, &why);
  if (!why.empty()) return rank.fail(why);
  if (pairs->empty()) {
    *skipText = "reduceSupport says no to every type and op: there is nothing to reduce";
    return false;
  }
  return true;
}

// A rule's body may find that it does not apply (a SKIP): every rank asks the same question and answers alike, so
// each returns early, and rank 0's answer (set in the rule process) is the verdict.
Outcome withSkip(const Outcome& outcome, const std::string& skip) {
  if (outcome.status == Status::kPass && !skip.empty()) return {Status::kSkip, skip};
  return outcome;
}

}  // namespace

bool libraryHasCollNet(const core::Net& net) {
  auto exports = core::inspectLibrary(net.path());
  return !exports.collNetVersions.empty();
}

Outcome propertiesSane(const core::Net& net, const Settings& settings) {
  core::CollNetReport report;
  std::unique_ptr<core::CollNet> coll;
  detail::watchedCall("the loader's collNet probe (dlsym, init, devices)", settings.callTimeout, [&] {
    coll = core::loadCollNet(net, &report);
    return ncclSuccess;
  });
  if (coll == nullptr) {
    if (report.exportedVersions.empty()) return {Status::kSkip, "the library exports no ncclCollNetPlugin_vN"};
    return {Status::kFail, "NCCL would disable this collNet: " + report.rejectReason};
  }
  void* ctx = nullptr;
  ncclResult_t result =
      detail::watchedCall("collnet init", settings.callTimeout, [&] { return coll->init(&ctx, 0, core::hostLogger); });
  if (result != ncclSuccess) return {Status::kFail, "init returned " + resultText(result)};
  auto finish = [&](Outcome outcome) {
    detail::watchedCall("collnet finalize", settings.callTimeout, [&] { return coll->finalize(ctx); });
    return outcome;
  };
  int ndev = 0;
  result = detail::watchedCall("collnet devices", settings.callTimeout, [&] { return coll->devices(&ndev); });
  if (result != ncclSuccess) return finish({Status::kFail, "devices returned " + resultText(result)});
  std::string text = format("ncclCollNet_v%d '%s', %d device(s)", coll->version(), coll->name(), ndev);
  for (int dev = 0; dev < ndev; ++dev) {
    ncclNetProperties_v12_t p{};
    result = detail::watchedCall("collnet getProperties", settings.callTimeout,
                                 [&] { return coll->getProperties(dev, &p); });
    if (result != ncclSuccess)
      return finish({Status::kFail, format("getProperties(%d) returned %s", dev, resultText(result).c_str())});
    if (p.name == nullptr || p.name[0] == '\0')
      return finish({Status::kFail, format("device %d has no name (NCCL prints it in every collNet line)", dev)});
    const std::string name = core::printable(p.name);
    if (p.speed <= 0)
      return finish({Status::kFail, format("device %d (%s): speed %d Mb/s (NCCL's tuning divides by it)", dev,
                                           name.c_str(), p.speed)});
    if (p.maxComms < 1)
      return finish({Status::kFail, format("device %d (%s): maxComms %d (NCCL makes one collNet comm per channel)", dev,
                                           name.c_str(), p.maxComms)});
    if ((p.ptrSupport & (NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF)) == 0)
      return finish({Status::kFail,
                     format("device %d (%s): ptrSupport 0x%x names no memory type", dev, name.c_str(), p.ptrSupport)});
    // (0, 1 TiB], as maxP2pBytes: NCCL cuts collectives to it, and refuses the collNet connection on a value above
    // NCCL_MAX_NET_SIZE_BYTES (2.30's coll_net.cc) as it refuses a net's maxP2pBytes.
    if (p.maxCollBytes == 0 || p.maxCollBytes > NCCL_MAX_NET_SIZE_BYTES)
      return finish({Status::kFail, format("device %d (%s): maxCollBytes %zu outside (0, 1 TiB] (NCCL cuts collectives "
                                           "to it, and refuses the connection above 1 TiB)",
                                           dev, name.c_str(), p.maxCollBytes)});
    text += format("; %d: %s, %d Mb/s, ptrSupport 0x%x, maxCollBytes %zu", dev, name.c_str(), p.speed, p.ptrSupport,
                   p.maxCollBytes);
  }
  if (ndev < 1) return finish({Status::kFail, "devices() says 0 (NCCL disables the collNet)"});
  // reduceSupport: an answer for every type and op, the same when asked again (NCCL asks once per communicator).
  std::vector<Pair> pairs;
  for (int pass = 0; pass < 2; ++pass)
    for (int type = 0; type < ncclNumTypes; ++type)
      for (int op = 0; op < ncclNumOps; ++op) {
        int supported = -7;
        result = detail::watchedCall("collnet reduceSupport", settings.callTimeout, [&] {
          return coll->reduceSupport(static_cast<ncclDataType_t>(type), static_cast<ncclRedOp_t>(op), &supported);
        });
        if (result != ncclSuccess)
          return finish({Status::kFail, format("reduceSupport(%s, %s) returned %s (NCCL fails the communicator)",
                                               typeText(type), opText(op), resultText(result).c_str())});
        if (supported != 0 && supported != 1)
          return finish({Status::kFail, format("reduceSupport(%s, %s) wrote %d (0 or 1 expected)", typeText(type),
                                               opText(op), supported)});
        const bool before =
            std::any_of(pairs.begin(), pairs.end(), [&](const Pair& q) { return q.type == type && q.op == op; });
        if (pass == 0 && supported) pairs.push_back({type, op});
        if (pass == 1 && before != (supported == 1))
          return finish({Status::kFail, format("reduceSupport(%s, %s) answered %d, then %d", typeText(type), opText(op),
                                               before ? 1 : 0, supported)});
      }
  text += "; reduces " + pairsText(pairs);
  return finish({Status::kPass, text});
}

Outcome allreduceEveryType(const core::Net& net, const Settings& settings) {
  std::string skipText;
  Outcome outcome = runRanks(net, settings, [&](Rank& rank) {
    std::vector<Pair> pairs;
    if (!reductionPairs(rank, &skipText, &pairs)) return !skipText.empty();
    const size_t counts[] = {1, 1023, 65539};
    int done = 0;
    uint64_t seed = 1;
    for (const Pair& p : pairs)
      for (size_t count : counts) {
        if (count * typeBytes(p.type) > rank.props().maxCollBytes) continue;
        if (!allreduceOnce(rank, p.type, p.op, count, count == 1023, seed++)) return false;
        ++done;
      }
    std::string partsNote;
    if (!allreduceInParts(rank, pairs.back(), seed, &partsNote)) return false;
    rank.note(
        format("%d all-reduces over %d rank(s), each rank's result right: %s; 1, 1023 (in place) and 65539 "
               "elements%s",
               done, rank.ranks(), pairsText(pairs).c_str(), partsNote.c_str()));
    return true;
  });
  return withSkip(outcome, skipText);
}

// Where a window of `bytes` is cut into `parts` (1 or 3) parts of uneven sizes, none empty, none on a rank's block
// boundary by design: cut[i]..cut[i+1], in multiples of `unit` bytes.
std::vector<size_t> windowCuts(size_t bytes, int parts, size_t unit) {
  if (parts == 1) return {0, bytes};
  const size_t units = bytes / unit;
  return {0, (units / 4 + 1) * unit, (units * 3 / 4 - 2) * unit, bytes};
}

// Registered buffers for a window cut by windowCuts, as the SGE list NCCL passes (v9+: several parts, one after
// another); part i is its own allocation and registration unless `whole` (then all of it, one part).
struct WindowParts {
  explicit WindowParts(Rank& owner) : rank(owner) {}
  WindowParts(const WindowParts&) = delete;
  WindowParts& operator=(const WindowParts&) = delete;
  ~WindowParts() {
    for (const ncclNetSGE_v12_t& sge : sges) rank.dereg(sge.mhandle);
  }
  // Registers a part of each cut (cut[i]..cut[i+1]), each its own allocation.
  bool add(const std::vector<size_t>& cuts, std::string* why) {
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      memory.emplace_back(cuts[i + 1] - cuts[i], 0xa5);
      void* mhandle = rank.reg(memory.back().data(), memory.back().size(), why);
      if (mhandle == nullptr) return false;
      sges.push_back({mhandle, memory.back().data(), memory.back().size()});
    }
    return true;
  }
  // The parts' bytes, one after another, into `out`; or the window's bytes from `in` into the parts.
  void gather(unsigned char* out) const {
    for (const ncclNetSGE_v12_t& sge : sges) {
      std::memcpy(out, sge.address, sge.size);
      out += sge.size;
    }
  }
  void scatter(const unsigned char* in) {
    for (const ncclNetSGE_v12_t& sge : sges) {
      std::memcpy(sge.address, in, sge.size);
      in += sge.size;
    }
  }
  Rank& rank;
  std::vector<std::vector<unsigned char>> memory;
  std::vector<ncclNetSGE_v12_t> sges;  // deregistered with this
};

// Where a rank's part of a partial window starts inside its block [begin, begin + blockSize) when the window starts
// at `offset` (the same unit): NCCL points sendData (all-gather) and recvData (reduce-scatter) there, at the window's
// start where it lies inside the block, else at the block's start.
size_t firstInWindow(size_t begin, size_t blockSize, size_t offset) {
  return offset > begin && offset < begin + blockSize ? offset - begin : 0;
}

// A v8 collNet takes one part (its SGE has a 32-bit size and the adapter passes one); later ones take several.
bool takesParts(Rank& rank) {
  return rank.coll().version() >= 9;
}
// A post of several parts that the collNet refused with an error of its own (not a harness deadline): allowed, since
// NCCL posts one part; said in the rule's note.
bool refusedParts(int parts, bool posted, ncclResult_t result) {
  return parts > 1 && !posted && result != Rank::kDeadline && result != Rank::kStopped;
}

Outcome allgatherGathers(const core::Net& net, const Settings& settings) {
  std::string skipText;
  Outcome outcome = runRanks(net, settings, [&](Rank& rank) {
    std::string why;
    if (!hostPointers(rank, &why)) return skipText = why, true;
    if (!rank.coll().hasIallgather()) {
      skipText = format("ncclCollNet_v%d has no iallgather (v8+, optional)", rank.coll().version());
      return true;
    }
    struct Case {
      size_t bytesPerRank;
      bool inPlace;
      int parts;  // the receive window in this many separately registered parts
    };
    const Case cases[] = {{1, false, 1}, {4097, true, 1}, {262147, false, 1}, {4099, false, 3}};
    const int n = rank.ranks();
    std::string partsNote;
    for (const Case& c : cases) {
      const size_t bytesPerRank = c.bytesPerRank;
      if (bytesPerRank * n > rank.props().maxCollBytes || (c.parts > 1 && !takesParts(rank))) continue;
      std::vector<unsigned char> send(bytesPerRank), recv(bytesPerRank * n, 0xa5);
      auto fillBlock = [&](unsigned char* out, int r) {
        for (size_t i = 0; i < bytesPerRank; ++i)
          out[i] = static_cast<unsigned char>(mix(bytesPerRank * 131 + static_cast<size_t>(r) * 7919 + i));
      };
      unsigned char* source = c.inPlace ? recv.data() + bytesPerRank * rank.rank() : send.data();
      fillBlock(source, rank.rank());
      const std::string how = c.inPlace ? ", in place" : c.parts > 1 ? format(" into %d parts", c.parts) : "";
      const std::string what = format("all-gather of %zu byte(s) per rank%s", bytesPerRank, how.c_str());
      WindowParts parts(rank);
      void* recvMh = c.parts == 1 ? rank.reg(recv.data(), recv.size(), &why) : nullptr;
      const bool registered = c.parts == 1 ? recvMh != nullptr : parts.add(windowCuts(recv.size(), c.parts, 1), &why);
      void* sendMh = c.inPlace ? recvMh : (registered ? rank.reg(send.data(), send.size(), &why) : nullptr);
      if (!registered || sendMh == nullptr) {
        rank.dereg(recvMh);
        return rank.fail(what + ": " + why);
      }
      if (c.parts == 1) parts.sges.push_back({recvMh, recv.data(), recv.size()});  // deregistered by parts
      bool posted = false;
      std::string failure;
      ncclResult_t result = rank.complete(
          "collnet iallgather",
          [&](void** r) {
            return rank.coll().iallgather(rank.comm(), source, static_cast<int>(parts.sges.size()), parts.sges.data(),
                                          bytesPerRank, 0, recv.size(), sendMh, r);
          },
          &failure, &posted);
      if (!c.inPlace) rank.dereg(sendMh);
      if (refusedParts(c.parts, posted, result)) {
        partsNote =
            format(", %d parts refused (iallgather returned %s; NCCL posts one)", c.parts, resultText(result).c_str());
        continue;
      }
      if (result != ncclSuccess) return rank.fail(what + ": " + failure);
      if (c.parts > 1) partsNote = format(", of %zu into %d separately registered parts", bytesPerRank, c.parts);
      if (c.parts > 1) parts.gather(recv.data());
      std::vector<unsigned char> block(bytesPerRank);
      for (int r = 0; r < n; ++r) {
        fillBlock(block.data(), r);
        const unsigned char* got = recv.data() + bytesPerRank * r;
        if (std::memcmp(got, block.data(), bytesPerRank) != 0) {
          size_t i = 0;
          while (got[i] == block[i]) ++i;
          return rank.fail(format("%s: byte %zu of rank %d's block (offset %zu) is 0x%02x, rank %d sent 0x%02x",
                                  what.c_str(), i, r, bytesPerRank * r + i, got[i], r, block[i]));
        }
      }
    }
    // Partial windows, as NCCL's registered path walks the output in windows of maxCollBytes: 3001 bytes per rank in
    // windows of 2000 (each starting inside some rank's block), sendData at this rank's first byte inside the
    // window (its block's start, or the byte where the window starts inside its block), the window's part at its
    // place in the output.
    const size_t perRank = 3001, windowBytes = 2000;
    std::vector<unsigned char> send(perRank), recv(perRank * n, 0xa5), want(perRank * n);
    for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<unsigned char>(mix(i * 31 + 17));
    std::memcpy(send.data(), want.data() + perRank * rank.rank(), perRank);
    void *sendMh = nullptr, *recvMh = nullptr;
    if (!registerBoth(rank, send, recv, &sendMh, &recvMh, &why)) return rank.fail("all-gather in windows: " + why);
    int windows = 0;
    for (size_t offset = 0; offset < recv.size(); offset += windowBytes, ++windows) {
      const size_t bytes = std::min(windowBytes, recv.size() - offset);
      unsigned char* sendData = send.data() + firstInWindow(perRank * rank.rank(), perRank, offset);
      ncclNetSGE_v12_t part{recvMh, recv.data() + offset, bytes};
      std::string failure;
      ncclResult_t result = rank.complete(
          "collnet iallgather",
          [&](void** r) {
            return rank.coll().iallgather(rank.comm(), sendData, 1, &part, perRank, offset, bytes, sendMh, r);
          },
          &failure);
      if (result != ncclSuccess) {
        rank.dereg(recvMh);
        rank.dereg(sendMh);
        const std::string what = format("all-gather of %zu bytes per rank, the window %zu+%zu", perRank, offset, bytes);
        return rank.fail(what + ": " + failure);
      }
    }
    rank.dereg(recvMh);
    rank.dereg(sendMh);
    if (recv != want) {
      size_t i = 0;
      while (recv[i] == want[i]) ++i;
      return rank.fail(
          format("all-gather of %zu bytes per rank in windows of %zu: byte %zu (rank %zu's block, the "
                 "window at %zu) is 0x%02x, expected 0x%02x",
                 perRank, windowBytes, i, i / perRank, i / windowBytes * windowBytes, recv[i], want[i]));
    }
    rank.note(
        format("all-gathers of 1, 4097 (in place) and 262147 bytes per rank over %d rank(s)%s, every block in "
               "its rank's place; and of 3001 bytes per rank in %d windows of 2000 bytes as NCCL walks them",
               n, partsNote.c_str(), windows));
    return true;
  });
  return withSkip(outcome, skipText);
}

Outcome reduceScatterScatters(const core::Net& net, const Settings& settings) {
  std::string skipText;
  Outcome outcome = runRanks(net, settings, [&](Rank& rank) {
    if (!rank.coll().hasIreducescatter()) {
      skipText = format("ncclCollNet_v%d has no ireducescatter (v8+, optional)", rank.coll().version());
      return true;
    }
    std::string why;
    std::vector<Pair> pairs;
    if (!reductionPairs(rank, &skipText, &pairs)) return !skipText.empty();
    // Each type once, with sum where it is supported, else its first supported op.
    std::vector<Pair> chosen;
    for (const Pair& p : pairs) {
      auto same = std::find_if(chosen.begin(), chosen.end(), [&](const Pair& q) { return q.type == p.type; });
      if (same == chosen.end()) chosen.push_back(p);
    }
    const int n = rank.ranks();
    int done = 0;
    uint64_t seed = 1000;
    std::string partsNote;
    // One reduce-scatter of `count` elements per rank, its input window in `partCount` separately registered parts.
    auto once = [&](const Pair& p, size_t count, int partCount) {
      const size_t elementBytes = typeBytes(p.type);
      const size_t blockBytes = count * elementBytes;
      std::vector<unsigned char> send(blockBytes * n), recv(blockBytes, 0xa5);
      fillInputs(send.data(), p.type, p.op, rank.rank(), 0, count * n, seed);
      const std::string how = partCount > 1 ? format(", its input in %d parts", partCount) : "";
      const std::string what = format("reduce-scatter %s %s of %zu element(s) per rank%s", typeText(p.type),
                                      opText(p.op), count, how.c_str());
      WindowParts parts(rank);
      const bool registered = parts.add(windowCuts(send.size(), partCount, elementBytes), &why);
      void* recvMh = registered ? rank.reg(recv.data(), recv.size(), &why) : nullptr;
      if (recvMh == nullptr) return rank.fail(what + ": " + why);
      parts.scatter(send.data());
      bool posted = false;
      std::string failure;
      ncclResult_t result = rank.complete(
          "collnet ireducescatter",
          [&](void** r) {
            return rank.coll().ireducescatter(
                rank.comm(), static_cast<int>(parts.sges.size()), parts.sges.data(), recv.data(), blockBytes, 0,
                send.size(), static_cast<ncclDataType_t>(p.type), static_cast<ncclRedOp_t>(p.op), recvMh, r);
          },
          &failure, &posted);
      rank.dereg(recvMh);
      if (refusedParts(partCount, posted, result)) {
        partsNote = format(", %d parts refused (ireducescatter returned %s; NCCL posts one)", partCount,
                           resultText(result).c_str());
        return true;
      }
      if (result != ncclSuccess) return rank.fail(what + ": " + failure);
      if (partCount > 1)
        partsNote = format(", and %zu of %s %s with the input in %d separately registered parts", count,
                           typeText(p.type), opText(p.op), partCount);
      std::string wrong =
          firstWrongElement(recv.data(), p.type, p.op, n, count * static_cast<size_t>(rank.rank()), count, seed);
      if (!wrong.empty()) return rank.fail(what + ": this rank's block: " + wrong);
      ++seed;
      ++done;
      return true;
    };
    const size_t counts[] = {1, 1027, 32771};
    for (const Pair& p : chosen)
      for (size_t count : counts)
        if (count * typeBytes(p.type) * n <= rank.props().maxCollBytes && !once(p, count, 1)) return false;
    const bool inParts =
        takesParts(rank) && !chosen.empty() && 1031 * typeBytes(chosen.back().type) * n <= rank.props().maxCollBytes;
    if (inParts && !once(chosen.back(), 1031, 3)) return false;
    // Partial windows, as NCCL's proxy walks the input in windows of maxCollBytes: 1003 elements per rank of the
    // widest type in windows of 400 elements (each starting inside some rank's block), recvData at this rank's first
    // byte inside the window (its block's start, or the byte where the window starts inside its block). Out of place,
    // then in place (NCCL's ncclReduceScatter with recvbuff = sendbuff + rank * recvcount): each window's result for
    // this rank lands inside the window's own input, so a collNet must read a window whole before it writes there.
    std::string windowsNote;
    for (bool inPlace : {false, true}) {
      if (chosen.empty()) break;
      const Pair& p = chosen.back();
      const size_t es = typeBytes(p.type), count = 1003, windowCount = 400, total = count * n;
      const size_t begin = count * static_cast<size_t>(rank.rank());
      std::vector<unsigned char> send(total * es), recv(inPlace ? 0 : count * es, 0xa5);
      fillInputs(send.data(), p.type, p.op, rank.rank(), 0, total, seed);
      unsigned char* out = inPlace ? send.data() + begin * es : recv.data();
      const char* where = inPlace ? " in place" : "";
      void *sendMh = nullptr, *recvMh = nullptr;
      if (inPlace) {
        sendMh = recvMh = rank.reg(send.data(), send.size(), &why);
        if (sendMh == nullptr) return rank.fail("reduce-scatter in windows in place: " + why);
      } else if (!registerBoth(rank, send, recv, &sendMh, &recvMh, &why)) {
        return rank.fail("reduce-scatter in windows: " + why);
      }
      auto release = [&] {
        if (recvMh != sendMh) rank.dereg(recvMh);
        rank.dereg(sendMh);
      };
      int windows = 0;
      for (size_t first = 0; first < total; first += windowCount, ++windows) {
        const size_t elements = std::min(windowCount, total - first);
        ncclNetSGE_v12_t part{sendMh, send.data() + first * es, elements * es};
        unsigned char* recvData = out + firstInWindow(begin, count, first) * es;
        std::string failure;
        ncclResult_t result = rank.complete(
            "collnet ireducescatter",
            [&](void** r) {
              return rank.coll().ireducescatter(rank.comm(), 1, &part, recvData, count * es, first * es, elements * es,
                                                static_cast<ncclDataType_t>(p.type), static_cast<ncclRedOp_t>(p.op),
                                                recvMh, r);
            },
            &failure);
        if (result != ncclSuccess) {
          release();
          const std::string what = format("reduce-scatter %s %s of %zu elements per rank%s, the window of %zu at %zu",
                                          typeText(p.type), opText(p.op), count, where, elements, first);
          return rank.fail(what + ": " + failure);
        }
      }
      release();
      std::string wrong = firstWrongElement(out, p.type, p.op, n, begin, count, seed);
      if (!wrong.empty())
        return rank.fail(format("reduce-scatter %s %s of %zu elements per rank%s in windows of %zu: this rank's "
                                "block: ",
                                typeText(p.type), opText(p.op), count, where, windowCount) +
                         wrong);
      ++seed;
      if (inPlace)
        windowsNote += ", out of place and in place";
      else
        windowsNote = format("; and %zu of %s %s per rank in %d windows of %zu elements as NCCL walks them", count,
                             typeText(p.type), opText(p.op), windows, windowCount);
    }
    rank.note(
        format("%d reduce-scatters over %d rank(s), each rank given its own block reduced: %s; 1, 1027 and "
               "32771 elements per rank%s%s",
               done, n, pairsText(chosen).c_str(), partsNote.c_str(), windowsNote.c_str()));
    return true;
  });
  return withSkip(outcome, skipText);
}

// NCCL's collNet proxy keeps up to NCCL_STEPS (8) collectives posted per comm before it tests the first.
Outcome operationsInFlight(const core::Net& net, const Settings& settings) {
  std::string skipText;
  Outcome outcome = runRanks(net, settings, [&](Rank& rank) {
    std::string why;
    std::vector<Pair> pairs;
    if (!reductionPairs(rank, &skipText, &pairs)) return !skipText.empty();
    Pair p = pairs.front();
    for (const Pair& q : pairs)
      if (q.type == ncclInt32 && q.op == ncclSum) p = q;
    constexpr int kInFlight = 8;
    const size_t count = std::min<size_t>(4099, rank.props().maxCollBytes / typeBytes(p.type));
    const size_t bytes = count * typeBytes(p.type);
    std::vector<std::vector<unsigned char>> send(kInFlight, std::vector<unsigned char>(bytes)),
        recv(kInFlight, std::vector<unsigned char>(bytes, 0xa5));
    std::vector<void*> handles;
    void* requests[kInFlight] = {};
    auto release = [&] {
      for (void* mh : handles) rank.dereg(mh);
    };
    for (int k = 0; k < kInFlight; ++k) {
      fillInputs(send[k].data(), p.type, p.op, rank.rank(), 0, count, 500 + k);
      void* sendMh = rank.reg(send[k].data(), bytes, &why);
      void* recvMh = sendMh ? rank.reg(recv[k].data(), bytes, &why) : nullptr;
      if (sendMh) handles.push_back(sendMh);
      if (recvMh) handles.push_back(recvMh);
      if (recvMh == nullptr) return release(), rank.fail(why);
      ncclResult_t result = rank.post(
          "collnet iallreduce",
          [&](void** r) {
            return rank.coll().iallreduce(rank.comm(), send[k].data(), recv[k].data(), count,
                                          static_cast<ncclDataType_t>(p.type), static_cast<ncclRedOp_t>(p.op), sendMh,
                                          recvMh, r);
          },
          &requests[k]);
      if (result != ncclSuccess)
        return release(), rank.fail(format("all-reduce %d of %d posted before any test: %s", k + 1, kInFlight,
                                           Rank::postText("iallreduce", result).c_str()));
    }
    for (int k = 0; k < kInFlight; ++k) {
      ncclResult_t result = rank.wait(requests[k], 30, nullptr);
      if (result != ncclSuccess) {
        release();
        return rank.fail(
            format("collective %d of %d posted at once: %s", k + 1, kInFlight, rank.waitText(result, 30).c_str()));
      }
      std::string wrong = firstWrongElement(recv[k].data(), p.type, p.op, rank.ranks(), 0, count, 500 + k);
      if (!wrong.empty()) {
        release();
        return rank.fail(format("collective %d of %d posted at once (%s %s): %s", k + 1, kInFlight, typeText(p.type),
                                opText(p.op), wrong.c_str()));
      }
    }
    release();
    rank.note(
        format("%d all-reduces (%s %s, %zu elements) posted before the first test, completed in order and "
               "right on %d rank(s)",
               kInFlight, typeText(p.type), opText(p.op), count, rank.ranks()));
    return true;
  });
  return withSkip(outcome, skipText);
}

// A rank that dies (a crashed process, a lost node) must fail the others' pending collectives, never leave them
// "not done" for ever: NCCL has no other way to learn of it from inside a collective.
Outcome rankDeathIsAnError(const core::Net& net, const Settings& settings) {
  if (settings.ranks < 2) return {Status::kSkip, "needs 2 or more ranks (--coll-ranks)"};
  const int victim = settings.ranks - 1;
  std::string skipText;
  Run run;
  Outcome outcome = runRanks(
      net, settings,
      [&](Rank& rank) {
        std::string why;
        std::vector<Pair> pairs;
        if (!reductionPairs(rank, &skipText, &pairs)) return !skipText.empty();
        const Pair p = pairs.front();
        // One all-reduce that works first, so the comm is known to move data.
        if (!allreduceOnce(rank, p.type, p.op, 1023, false, 77)) return false;
        if (rank.rank() == victim) {
          // Posts nothing more: waits to be killed (bounded: rank 0 kills it at once, or gives up the rule).
          rank.barrier(settings.ruleSeconds / 2.0);
          std::this_thread::sleep_for(std::chrono::seconds(settings.ruleSeconds));
          return true;
        }
        const size_t count = 1 << 16;
        std::vector<unsigned char> send(count * typeBytes(p.type)), recv(send.size());
        fillInputs(send.data(), p.type, p.op, rank.rank(), 0, count, 78);
        void* sendMh = rank.reg(send.data(), send.size(), &why);
        void* recvMh = sendMh ? rank.reg(recv.data(), recv.size(), &why) : nullptr;
        if (recvMh == nullptr) return rank.dereg(sendMh), rank.fail(why);
        void* request = nullptr;
        ncclResult_t result = rank.post(
            "collnet iallreduce",
            [&](void** r) {
              return rank.coll().iallreduce(rank.comm(), send.data(), recv.data(), count,
                                            static_cast<ncclDataType_t>(p.type), static_cast<ncclRedOp_t>(p.op), sendMh,
                                            recvMh, r);
            },
            &request);
        if (result != ncclSuccess)
          return rank.fail("the all-reduce before the kill: " + Rank::postText("iallreduce", result));
        if (!rank.barrier(settings.ruleSeconds / 2.0)) return false;
        if (rank.rank() == 0) {
          kill(run.pids[victim], SIGKILL);
          waitpid(run.pids[victim], nullptr, 0);
          run.pids[victim] = -1;
        }
        auto start = Clock::now();
        const double allowed = settings.peerDeathSeconds;
        int size = -1;
        result = rank.wait(request, allowed, &size, false);
        const double took = secondsSince(start);
        // Left registered: the comm is broken; closeColl (in tearDown) must still return.
        if (result == ncclSuccess)
          return rank.fail(
              format("test reported the all-reduce done (size %d) after rank %d was killed before it "
                     "posted its part: a result without rank %d's data",
                     size, victim, victim));
        if (result == Rank::kDeadline)
          return rank.fail(format("test still said 'not done' %.0f s after rank %d was killed (--peer-death-timeout)",
                                  allowed, victim));
        rank.note(
            format("rank %d killed with an all-reduce pending on the others: rank 0's test returned %s after "
                   "%.2f s",
                   victim, resultText(result).c_str(), took));
        return true;
      },
      &run, victim);
  return withSkip(outcome, skipText);
}

// Each version NCCL could load the collNet through (a host older than the plugin takes an older table), in processes
// of its own, as NCCL loads one version per process: the same device, and an all-reduce that comes out right.
Outcome everyVersionAgrees(const core::Net& net, const Settings& settings) {
  const std::vector<int> versions = core::inspectLibrary(net.path()).collNetVersions;
  if (versions.empty()) return {Status::kSkip, "the library exports no ncclCollNetPlugin_vN"};
  std::string newestName, summary;
  for (int version : versions) {
    Settings one = settings;
    one.version = version;
    // Rank 0 of this version is a process of its own too (a process initialises one version's table).
    int channel[2];
    if (pipe2(channel, O_CLOEXEC) != 0)
      return {Status::kFail, std::string("the harness could not make a pipe: ") + strerror(errno)};
    std::fflush(nullptr);
    pid_t pid = fork();
    if (pid == 0) {
      close(channel[0]);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      detail::becomeRankProcess();
      std::string name, skipText;
      Outcome outcome = runRanks(net, one, [&](Rank& rank) {
        if (rank.rank() == 0) name = core::printable(rank.props().name);
        std::vector<Pair> pairs;
        if (!reductionPairs(rank, &skipText, &pairs)) return !skipText.empty();
        return allreduceOnce(rank, pairs.front().type, pairs.front().op, 1023, false, 4000 + version);
      });
      std::string text = std::string(outcome.status == Status::kFail ? "F" : "P") + name + "|" + outcome.evidence;
      (void)!write(channel[1], text.data(), text.size());
      _exit(0);
    }
    close(channel[1]);
    if (pid < 0) {
      close(channel[0]);
      return {Status::kFail, std::string("the harness could not fork: ") + strerror(errno)};
    }
    std::string text;
    char buffer[512];
    for (ssize_t n; (n = read(channel[0], buffer, sizeof(buffer))) > 0;) text.append(buffer, static_cast<size_t>(n));
    close(channel[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    const std::string label = "ncclCollNet_v" + std::to_string(version);
    if (text.empty())
      return {Status::kFail, label + ": its rank 0 ended without a word (" +
                                 (WIFSIGNALED(status) ? std::string("signal ") + strsignal(WTERMSIG(status))
                                                      : "exit status " + std::to_string(WEXITSTATUS(status))) +
                                 ")"};
    const size_t bar = text.find('|');
    const std::string name = text.substr(1, bar - 1);
    if (text[0] == 'F') return {Status::kFail, label + ": " + text.substr(bar + 1)};
    if (newestName.empty()) newestName = name;
    if (name != newestName)
      return {Status::kFail, format("%s names device 0 '%s', ncclCollNet_v%d '%s' (NCCL's logs and topology name "
                                    "the device by the version it loaded)",
                                    label.c_str(), name.c_str(), versions.front(), newestName.c_str())};
    summary += (summary.empty() ? "v" : ", v") + std::to_string(version);
  }
  return {Status::kPass, format("%s: each, in processes of its own, names device 0 '%s' and all-reduces right over %d "
                                "rank(s)",
                                summary.c_str(), newestName.c_str(), settings.ranks)};
}

// NCCL connects collNet comms when a communicator is made and closes them when it is destroyed: a socket, a thread or
// a mapping left by each closed comm adds up over a job's communicators.
Outcome commsComeAndGo(const core::Net& net, const Settings& settings) {
  std::string skipText;
  constexpr int kWarmup = 3, kCycles = 20;
  Outcome outcome = runRanks(net, settings, [&](Rank& rank) {
    std::vector<Pair> pairs;
    if (!reductionPairs(rank, &skipText, &pairs)) return !skipText.empty();
    const Pair p = pairs.front();
    detail::Resources base;
    for (int cycle = 0; cycle < kWarmup + kCycles; ++cycle) {
      rank.leave();
      if (cycle == kWarmup) base = detail::resourcesNow();  // with no comm open, as at the end
      if (!rank.join()) return false;
      if (!allreduceOnce(rank, p.type, p.op, 1023, false, 6000 + cycle)) return false;
    }
    rank.leave();
    const detail::Resources grown = detail::resourceGrowthSince(base);
    if (grown.fds > 0 || grown.threads > 0 || grown.mappings > 0)
      return rank.fail(
          format("%d more comms (listen, connect, an all-reduce, closeColl, closeListen) left %d "
                 "descriptor(s), %d thread(s) and %d shared mapping(s) more on this rank",
                 kCycles, std::max(0, grown.fds), std::max(0, grown.threads), std::max(0, grown.mappings)));
    rank.note(
        format("%d comms after a warm-up of %d, each connected, used for an all-reduce and closed, left no "
               "descriptor, thread or shared mapping on any of %d rank(s)",
               kCycles, kWarmup, rank.ranks()));
    return true;
  });
  return withSkip(outcome, skipText);
}

}  // namespace nns::check::collnet
