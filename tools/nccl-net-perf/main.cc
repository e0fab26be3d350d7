// nccl-net-perf: bandwidth and latency per message size between two processes over any ncclNet plugin, in the
// spirit of ib_write_bw / ucx_perftest (-b -e -f sweep, iterations, in-flight window, multi-recv n; --json). The two
// processes are workers of the tool's own process, which times every plugin call they make (--call-timeout) and names
// the call, and the process, that crashed or hung.
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "nccl_net/sdk/plugin.hpp"
#include "nns/core/cpus.hpp"
#include "nns/core/loader.hpp"
#include "nns/core/printable.hpp"
#include "nns/tools/call_notes.hpp"
#include "nns/tools/cpu_shares.hpp"
#include "nns/tools/executable_dir.hpp"
#include "nns/tools/guarded_main.hpp"
#include "nns/tools/host_memory.hpp"
#include "nns/tools/isolated_probe.hpp"
#include "nns/tools/parse_arguments.hpp"
#include "nns/tools/search_dirs.hpp"
#include "nns/tools/size_option.hpp"

namespace {

// Exit statuses (--help and docs/conformance.md list them). 1 and 2 are every tool's: a failed run, a refused argument
// or a plugin that did not load (also when it crashed or hung while loading, as nccl-net-check reports it).
constexpr int kExitFailed = 1;
constexpr int kExitNotLoaded = 2;
constexpr int kExitCrashed = 3;  // a plugin call crashed a process (or it ended in one, as under a sanitizer)
constexpr int kExitHung = 4;     // a plugin call did not return within --call-timeout
constexpr int kMaxIterations = 10'000'000;  // -n: the latency keeps each round trip (80 MB at most)

// The loader's own steps, timed as one call; when it crashes or hangs, isolated_probe.hpp's pinpointFailure names
// the step. The same words as nccl-net-check and nccl-net-info use.
constexpr const char* kLoaderProbe = "the loader's probe (dlopen, init, devices, getProperties(0), finalize)";

struct Settings {
  size_t minBytes = 8;
  size_t maxBytes = 64 << 20;
  int factor = 2;
  int iterations = 20;
  int warmup = 5;
  int window = 8;
  int multiRecv = 1;
  int dev = 0;
  int callTimeoutSeconds = 30;
  // A worker's own waits for what the plugin keeps answering 'not yet' (connect and accept, a post, a completion):
  // --call-timeout plus a second. A plugin call that hangs in one worker leaves the other waiting for its messages;
  // the tool's process sees that hang (sampling every 100 ms) before the waiting worker gives up, and names it.
  double ownWaitSeconds() const { return callTimeoutSeconds + 1.0; }
};

struct Row {
  size_t bytes = 0;
  double latencyUs = 0;  // half a ping-pong round trip
  double bandwidthGBs = 0;
};

double now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Every wait on the plugin (a NULL request to post again, a request not done yet) spins this long, then yields the
// CPU at each further poll: when both processes share a CPU (one CPU, or --bind-to none on a busy host), a side that
// only spun would keep the CPU from the peer it waits for until the scheduler's next tick, and a latency read that
// tick (4 ms) instead of the plugin. On a CPU of its own, sched_yield returns at once. (Unbound on this project's
// 2-CPU host, a 20 us spin read 37 us for the socket plugin's 8-byte latency where 2 us read 19 us: a side sharing
// the CPU with its peer spins out its time before the peer can answer.)
constexpr double kSpinSeconds = 2e-6;
class Poll {
 public:
  void next() {
    double t = now();
    if (spinStart_ == 0) spinStart_ = t;
    if (t - spinStart_ > kSpinSeconds) sched_yield();
  }

 private:
  double spinStart_ = 0;
};

void check(ncclResult_t result, const char* what) {
  if (result != ncclSuccess)
    throw std::runtime_error(std::string(what) + " returned " + std::to_string(static_cast<int>(result)) + " (" +
                             nccl_net::sdk::resultName(result) + ")");
}

// The workers' own channel (the listen handles, "ready", "done"); `what` names the exchange in an error.
void writeAll(int fd, const void* data, size_t size, const char* what = "handle exchange") {
  if (write(fd, data, size) != static_cast<ssize_t>(size))
    throw std::runtime_error(std::string(what) + ": write failed");
}
void readAll(int fd, void* data, size_t size, const char* what = "handle exchange") {
  size_t got = 0;
  while (got < size) {
    ssize_t n = read(fd, static_cast<char*>(data) + got, size - got);
    if (n <= 0) throw std::runtime_error(std::string(what) + ": the other process went away");
    got += n;
  }
}

// One side of the benchmark: a send comm to the peer and a receive comm from it (latency needs both directions).
// Every plugin call is named in `note` while it runs: the tool's own process times it and names it if it crashes.
class Side {
 public:
  Side(nns::core::Net& net, const Settings& settings, int exchangeFd, nns::tools::CallNote& note)
      : net_(net), settings_(settings), note_(note) {
    check(call("init", [&] { return net_.init(&ctx_, 0x706572, nullptr, nullptr, nullptr); }), "init");
    int ndev = 0;
    check(call("devices", [&] { return net_.devices(&ndev); }), "devices");
    if (settings_.dev >= ndev) throw std::runtime_error("device " + std::to_string(settings_.dev) + " absent");
    check(call("getProperties", [&] { return net_.getProperties(settings_.dev, &props_); }), "getProperties");
    if (settings_.maxBytes > props_.maxP2pBytes)
      throw std::runtime_error("-e " + std::to_string(settings_.maxBytes) + " exceeds the device's maxP2pBytes " +
                               std::to_string(props_.maxP2pBytes) + " (NCCL never sends more in one message)");
    if (settings_.multiRecv > props_.maxRecvs)
      throw std::runtime_error("-m " + std::to_string(settings_.multiRecv) + " exceeds the device's maxRecvs " +
                               std::to_string(props_.maxRecvs));
    char mine[NCCL_NET_HANDLE_MAXSIZE] = {};
    char theirs[NCCL_NET_HANDLE_MAXSIZE] = {};
    check(call("listen", [&] { return net_.listen(ctx_, settings_.dev, mine, &listenComm_); }), "listen");
    writeAll(exchangeFd, mine, sizeof(mine));
    readAll(exchangeFd, theirs, sizeof(theirs));
    // connect and accept are non-blocking: both sides drive both until each has its comm. Each call is timed on its
    // own (a connect that blocks until the peer accepts never returns here: the peer is connecting too).
    double deadline = now() + settings_.ownWaitSeconds();
    Poll poll;
    while (sendComm_ == nullptr || recvComm_ == nullptr) {
      if (sendComm_ == nullptr)
        check(call("connect", [&] { return net_.connect(ctx_, settings_.dev, theirs, &sendComm_, &deviceHandle_); }),
              "connect");
      if (recvComm_ == nullptr)
        check(call("accept", [&] { return net_.accept(listenComm_, &recvComm_, &deviceHandle_); }), "accept");
      if (now() > deadline)
        throw std::runtime_error("connection not established within " + std::to_string(settings_.callTimeoutSeconds) +
                                 " s (connect and accept kept answering 'not yet')");
      poll.next();
    }
    buffers_.resize(static_cast<size_t>(settings_.window) * settings_.multiRecv);
    for (auto& buffer : buffers_) buffer.assign(settings_.maxBytes == 0 ? 1 : settings_.maxBytes, 0x5a);
    for (auto& buffer : buffers_) {
      void* sendHandle = nullptr;
      void* recvHandle = nullptr;
      check(call("regMr",
                 [&] { return net_.regMr(sendComm_, buffer.data(), buffer.size(), NCCL_PTR_HOST, &sendHandle); }),
            "regMr");
      sendHandles_.push_back(sendHandle);
      check(call("regMr",
                 [&] { return net_.regMr(recvComm_, buffer.data(), buffer.size(), NCCL_PTR_HOST, &recvHandle); }),
            "regMr");
      recvHandles_.push_back(recvHandle);
    }
    // Both ready before either measures: the first size's first ping-pong waited for the slower side's buffers
    // and registrations (1 ms for 8 bytes with -w 0 and -e 64M; 5.5 ms with -e 256M -W 4).
    const char ready = 'r';
    char theirsReady = 0;
    writeAll(exchangeFd, &ready, 1);
    readAll(exchangeFd, &theirsReady, 1);
  }

  // The registrations, comms and context released, each call timed and named like every other (a close that hangs
  // or crashes is reported as such); every one is made, and then the first that returned an error is thrown: NCCL
  // checks these results, and a failed close fails its communicator's destroy. A constructor that threw runs none
  // of this: its worker process is stopped rather than left to close comms whose peer may be gone.
  void close() {
    if (closed_) return;
    closed_ = true;
    std::string failure;
    auto note = [&](const char* name, ncclResult_t result) {
      if (result != ncclSuccess && failure.empty())
        failure = std::string(name) + " returned " + std::to_string(static_cast<int>(result)) + " (" +
                  nccl_net::sdk::resultName(result) + ")";
    };
    for (void* handle : sendHandles_) note("deregMr", call("deregMr", [&] { return net_.deregMr(sendComm_, handle); }));
    for (void* handle : recvHandles_) note("deregMr", call("deregMr", [&] { return net_.deregMr(recvComm_, handle); }));
    if (sendComm_ != nullptr) note("closeSend", call("closeSend", [&] { return net_.closeSend(sendComm_); }));
    if (recvComm_ != nullptr) note("closeRecv", call("closeRecv", [&] { return net_.closeRecv(recvComm_); }));
    if (listenComm_ != nullptr) note("closeListen", call("closeListen", [&] { return net_.closeListen(listenComm_); }));
    note("finalize", call("finalize", [&] { return net_.finalize(ctx_); }));
    if (!failure.empty()) throw std::runtime_error(failure);
  }
  ~Side() {
    try {
      close();
    } catch (const std::exception&) {  // the results of a close the worker did not ask for are not its verdict
    }
  }
  Side(const Side&) = delete;
  Side& operator=(const Side&) = delete;

  // A request as posted: a receive keeps what its test() must report (`receives` messages of `bytes` each); a send
  // has none (0), as NCCL never reads a send's size.
  struct Posted {
    void* request = nullptr;
    size_t bytes = 0;
    int receives = 0;
  };

  // A request posted and not yet seen complete, with the operation (bandwidth's op) that posted it: its buffer is free
  // again once it completes.
  struct Pending {
    Posted posted;
    int op;
  };
  using InFlight = std::deque<Pending>;

  // A NULL request means "not now": post again until the plugin takes it. Meanwhile the oldest request in `inFlight`
  // is tested (and dropped once complete), as NCCL's proxy goes on testing its requests when a post returns NULL: a
  // plugin that moves data only inside test() frees nothing otherwise, and the post would be refused for ever. Each
  // completion restarts the --call-timeout clock; a post refused that long with nothing in flight, or with nothing in
  // flight completing, is the plugin's failure.
  Posted postSend(size_t slot, size_t bytes, int tag, InFlight* inFlight = nullptr) {
    void* request = postRetrying("isend", inFlight, [&](void** posted) {
      return net_.isend(sendComm_, buffers_[slot].data(), bytes, tag, sendHandles_[slot], nullptr, posted);
    });
    return {request, bytes, 0};
  }

  Posted postRecv(size_t firstSlot, size_t bytes, int n, InFlight* inFlight = nullptr) {
    std::vector<void*> data(n), handles(n);
    std::vector<size_t> sizes(n, bytes);
    std::vector<int> tags(n);
    for (int i = 0; i < n; ++i) {
      data[i] = buffers_[firstSlot + i].data();
      handles[i] = recvHandles_[firstSlot + i];
      tags[i] = i;
    }
    void* request = postRetrying("irecv", inFlight, [&](void** posted) {
      return net_.irecv(recvComm_, n, data.data(), sizes.data(), tags.data(), handles.data(), nullptr, posted);
    });
    return {request, bytes, n};
  }

  // One test() of a request: whether it completed (it is then no longer the caller's). A completed receive must report
  // the bytes sent for each of its messages: NCCL takes a receive's sizes as what arrived, and a bandwidth computed
  // from the bytes posted would hide a plugin that delivers less (or says so wrongly). An unwritten size reads as in
  // NCCL, which zeroes the sizes before each receive's test: 0, right for a 0-byte message only.
  bool testOnce(const Posted& posted) {
    // Unwritten sizes read -1, which no message has: a completion that reports none is seen too.
    std::fill_n(completedSizes_.begin(), posted.receives, -1);
    int done = 0;
    check(call("test", [&] { return net_.test(posted.request, &done, completedSizes_.data()); }), "test");
    if (done == 0) return false;
    for (int i = 0; i < posted.receives; ++i) {
      const int size = completedSizes_[static_cast<size_t>(i)];
      if (size == static_cast<long long>(posted.bytes) || (size == -1 && posted.bytes == 0)) continue;
      const std::string which =
          posted.receives == 1 ? "a receive"
                               : "message " + std::to_string(i) + " of a receive of " + std::to_string(posted.receives);
      throw std::runtime_error(size == -1 ? "test completed " + which + " of " + std::to_string(posted.bytes) +
                                                " bytes without reporting its size (sizes[" + std::to_string(i) +
                                                "] left unwritten: NCCL, which zeroes it first, would take 0)"
                                          : "test reported " + std::to_string(size) + " bytes for " + which + " of " +
                                                std::to_string(posted.bytes) + " bytes (sizes[" + std::to_string(i) +
                                                "]): the plugin's size is wrong");
    }
    return true;
  }

  void wait(const Posted& posted) {
    double deadline = now() + settings_.ownWaitSeconds();
    Poll poll;
    while (!testOnce(posted)) {
      if (now() > deadline) throw std::runtime_error("a request did not complete within the timeout");
      poll.next();
    }
  }

  // Ping-pong: the initiator sends, the peer answers with the same size; half the median round trip is the latency.
  double latency(size_t bytes, bool initiator) {
    auto once = [&] {
      if (initiator) {
        Posted s = postSend(0, bytes, 0);
        Posted r = postRecv(0, bytes, 1);
        wait(s);
        wait(r);
      } else {
        Posted r = postRecv(0, bytes, 1);
        wait(r);
        Posted s = postSend(0, bytes, 0);
        wait(s);
      }
    };
    // Latency is one message per receive whatever -m says: grouping only matters for throughput.
    for (int i = 0; i < settings_.warmup; ++i) once();
    // The median round trip: on a shared host one descheduled iteration would dominate a mean.
    std::vector<double> roundTrips;
    roundTrips.reserve(static_cast<size_t>(settings_.iterations));
    for (int i = 0; i < settings_.iterations; ++i) {
      double start = now();
      once();
      roundTrips.push_back(now() - start);
    }
    std::sort(roundTrips.begin(), roundTrips.end());
    const size_t half = roundTrips.size() / 2;  // an even count's median is the mean of the middle two
    const double median = roundTrips.size() % 2 == 1 ? roundTrips[half] : (roundTrips[half - 1] + roundTrips[half]) / 2;
    return median / 2 * 1e6;
  }

  // Streaming: `window` receives (each of n messages) kept in flight; the receiver acknowledges the end with a
  // zero-byte message so the sender's clock covers delivery, not just posting.
  double bandwidth(size_t bytes, bool sender) {
    int n = settings_.multiRecv;
    int total = settings_.iterations;  // receive operations, each n messages
    auto run = [&](int count) {
      // Operation k uses slot k % window: buffers (k % window)*n .. +n-1. Its requests are the oldest in flight when
      // the slot comes round again, and must be complete before the buffers are posted again.
      InFlight inFlight;
      for (int op = 0; op < count; ++op) {
        while (!inFlight.empty() && inFlight.front().op <= op - settings_.window) {
          wait(inFlight.front().posted);
          inFlight.pop_front();
        }
        size_t firstBuffer = static_cast<size_t>(op % settings_.window) * n;
        if (sender) {
          for (int i = 0; i < n; ++i) inFlight.push_back({postSend(firstBuffer + i, bytes, i, &inFlight), op});
        } else {
          inFlight.push_back({postRecv(firstBuffer, bytes, n, &inFlight), op});
        }
      }
      for (const Pending& pending : inFlight) wait(pending.posted);
      if (sender) {
        wait(postRecv(0, 0, 1));
      } else {
        wait(postSend(0, 0, 0));
      }
    };
    // A warmup uses every slot of the window (at least -W operations): a buffer's first copy by the kernel (a socket
    // plugin's sendmsg/recvmsg) costs far more than later ones on some hosts, and with -w below -W the slots past the
    // warmup paid it inside the timed run (-W 8 -w 5 measured 5x below -W 1 over the socket plugin, in a VM).
    run(settings_.warmup == 0 ? 0 : std::max(settings_.warmup, settings_.window));
    double start = now();
    run(total);
    double elapsed = now() - start;
    return static_cast<double>(bytes) * total * n / elapsed / 1e9;
  }

  const ncclNetProperties_v12_t& props() const { return props_; }

 private:
  template <class Call>
  ncclResult_t call(const char* name, Call&& plugin) {
    return nns::tools::watchedCall(note_, name, std::forward<Call>(plugin));
  }

  // `post` is isend or irecv, given where to store the request; see postSend.
  template <class Post>
  void* postRetrying(const char* name, InFlight* inFlight, Post&& post) {
    void* request = nullptr;
    double deadline = now() + settings_.ownWaitSeconds();
    Poll poll;
    for (;;) {
      check(call(name, [&] { return post(&request); }), name);
      if (request != nullptr) return request;
      if (inFlight != nullptr && !inFlight->empty() && testOnce(inFlight->front().posted)) {
        inFlight->pop_front();
        deadline = now() + settings_.ownWaitSeconds();
        continue;  // a request freed: post again at once
      }
      if (now() > deadline) {
        if (inFlight == nullptr || inFlight->empty())
          throw std::runtime_error(std::string(name) + " refused until the timeout");
        throw std::runtime_error(std::string(name) + " refused until the timeout, and the oldest of the " +
                                 std::to_string(inFlight->size()) +
                                 " requests in flight did not complete meanwhile (tested all along)");
      }
      poll.next();
    }
  }

  nns::core::Net& net_;
  Settings settings_;
  nns::tools::CallNote& note_;
  void* ctx_ = nullptr;
  ncclNetProperties_v12_t props_{};
  void* listenComm_ = nullptr;
  void* sendComm_ = nullptr;
  void* recvComm_ = nullptr;
  ncclNetDeviceHandle_v12_t* deviceHandle_ = nullptr;  // where connect and accept may write one, as under NCCL
  bool closed_ = false;
  std::vector<std::vector<char>> buffers_;
  std::vector<void*> sendHandles_;
  std::vector<void*> recvHandles_;
  // test()'s sizes out: room for NCCL_PROXY_MAX_SUBS (64), as NCCL gives every test, not -m's worth. A plugin may
  // fill a size for each receive its requests can hold (its maxRecvs) whatever this irecv's n: the nccl-like fixture
  // writes 8, and with -m 1 it wrote past a one-int vector into the heap.
  std::vector<int> completedSizes_ = std::vector<int>(nccl_net::sdk::kMaxGroupedRecvs);
};

std::vector<size_t> sweep(const Settings& settings) {
  std::vector<size_t> sizes;
  for (size_t bytes = settings.minBytes; bytes <= settings.maxBytes; bytes = bytes == 0 ? 1 : bytes * settings.factor) {
    sizes.push_back(bytes);
    if (bytes > settings.maxBytes / settings.factor) break;  // the next step is past -e (or would wrap around)
  }
  return sizes;
}

// Both workers run this; the measuring one starts each ping-pong and sends in the bandwidth test, the peer mirrors
// it. Steps are in lockstep: the same sizes in the same order, so no extra synchronisation is needed beyond the
// plugin's own messages. `step` is told each phase before it starts (outside what is timed), `measured` each row as
// it is done: a failure part-way keeps the rows before it and names the size and phase it came in.
void measure(Side& side, const Settings& settings, bool measuring,
             const std::function<void(const char* phase, size_t bytes)>& step,
             const std::function<void(const Row&)>& measured) {
  for (size_t bytes : sweep(settings)) {
    Row row;
    row.bytes = bytes;
    step("latency", bytes);
    row.latencyUs = side.latency(bytes, measuring);
    step("bandwidth", bytes);
    row.bandwidthGBs = side.bandwidth(bytes, measuring);
    measured(row);
  }
}

nlohmann::json rowJson(const Row& row) {
  return {{"bytes", row.bytes}, {"latencyUs", row.latencyUs}, {"bandwidthGBs", row.bandwidthGBs}};
}

// ---- the two worker processes, and the tool's process that watches them ---------------------------------------------

// Worker 0 measures, worker 1 is its peer. Both listen, connect, accept, send and receive (latency needs both
// directions); the measuring one starts each ping-pong and streams in the bandwidth test, the peer answers and
// receives.
constexpr int kWorkers = 2;
const char* workerName(int index) {
  return index == 0 ? "measuring process" : "peer process";
}

// What a worker needs, all made before it is forked.
struct WorkerSetup {
  int index = 0;
  Settings settings;
  nns::core::LoadOptions load;
  const cpu_set_t* cpus = nullptr;  // nullptr: unbound
  int exchangeFd = -1;              // the listen handles cross here, to and from the other worker
  int reportFd = -1;                // records (isolated_probe.hpp's "D <json>" lines) to the tool's process
  nns::tools::CallNote* note = nullptr;
};

[[noreturn]] void finishWorker(int status) {
  std::fflush(nullptr);
  _exit(status);
}

// A worker's life: bind, load the plugin (each process its own: plugins may not survive a fork after init), measure,
// and send what it found to the tool's process, which prints it: each phase as it starts ("step"), each row as it is
// measured ("row", the measuring process). It says "finished" last, so that a plugin calling exit(0) half-way is not
// taken for a finished run. Exit status 0 when finished, 1 after an "error" record, 2 when
// the plugin did not load (its candidates sent, then "notLoaded").
[[noreturn]] void runWorker(const WorkerSetup& setup) {
  bool measuring = setup.index == 0;
  // The plugin may print: on stderr, so that it cannot break the tool's --json on stdout.
  dup2(STDERR_FILENO, STDOUT_FILENO);
  signal(SIGPIPE, SIG_IGN);
  nns::tools::ProbeChannel channel(setup.reportFd);
  if (setup.cpus != nullptr && sched_setaffinity(0, sizeof(cpu_set_t), setup.cpus) != 0) {
    std::fprintf(stderr, "nccl-net-perf: %s not bound: %s\n", workerName(setup.index), std::strerror(errno));
    if (measuring) channel.send({{"binding", "not bound (sched_setaffinity failed); waits yield the CPU after 2 us"}});
  }
  std::unique_ptr<nns::core::Net> net;
  std::optional<Side> side;
  try {
    // Each entry of the list alone, as nccl-net-check loads it: when the loader crashes or hangs, the tool's process
    // knows which entry, and probes it again step by step to name the call.
    for (const auto& entry : nns::core::pluginSpecEntries(setup.load)) {
      channel.send({{"loading", entry}});
      nns::core::LoadOptions one = setup.load;
      one.plugin = entry + ",";  // a list of one, as the entry is within the list
      nns::core::LoadReport report;
      net = nns::tools::watchedCall(*setup.note, kLoaderProbe, [&] { return nns::core::loadNet(one, &report); });
      for (const auto& c : report.candidates) channel.send({{"candidate", nns::tools::candidateJson(c)}});
      if (net != nullptr) break;
    }
    if (net == nullptr) {
      channel.send({{"notLoaded", true}});
      finishWorker(kExitNotLoaded);
    }
    if (measuring)
      channel.send(
          {{"loaded",
            {{"name", nns::core::printable(net->name())}, {"path", net->path()}, {"version", net->version()}}}});
    side.emplace(*net, setup.settings, setup.exchangeFd, *setup.note);
    measure(
        *side, setup.settings, measuring,
        [&](const char* phase, size_t bytes) {
          channel.send({{"step", {{"phase", phase}, {"bytes", bytes}}}});
        },
        [&](const Row& row) {
          if (measuring) channel.send({{"row", rowJson(row)}});
        });
    // Both done before either closes, as a communicator is destroyed once its operations are: the peer, done with
    // its last acknowledgement, closed (and failed to) while the measuring process still timed the last size, whose
    // row the stopped run then lost.
    const char done = 'd';
    char theirsDone = 0;
    writeAll(setup.exchangeFd, &done, 1, "end of the sweep");
    readAll(setup.exchangeFd, &theirsDone, 1, "end of the sweep");
    channel.send({{"step", {{"phase", "close"}}}});
    side->close();
  } catch (const std::exception& e) {
    // Said before anything is closed (but for a failed close, said once every release call was made): the tool's
    // process stops both workers on it, since closing comms whose peer may be gone could only hang.
    channel.send({{"error", e.what()}});
    finishWorker(kExitFailed);
  }
  side.reset();
  channel.send({{"finished", true}});
  finishWorker(0);
}

// The tool's view of one worker.
struct Worker {
  int index = 0;
  pid_t pid = -1;
  int reportFd = -1;  // the non-blocking read end of its records
  bool reportOpen = false;
  std::string pending;  // a record not yet whole
  std::vector<nlohmann::json> records;
  bool running = false;
  int waitStatus = 0;
};

// Reads what the worker has sent so far.
void readRecords(Worker& worker) {
  char buffer[4096];
  while (worker.reportOpen) {
    ssize_t n = read(worker.reportFd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;  // EAGAIN: nothing more for now
    if (n == 0) {
      worker.reportOpen = false;
      break;
    }
    worker.pending.append(buffer, static_cast<size_t>(n));
  }
  for (size_t end; (end = worker.pending.find('\n')) != std::string::npos; worker.pending.erase(0, end + 1)) {
    if (worker.pending.compare(0, 2, "D ") == 0)
      worker.records.push_back(nlohmann::json::parse(worker.pending.substr(2, end - 2), nullptr, false));
  }
}

// The last record holding `key`, or nullptr.
const nlohmann::json* lastRecord(const Worker& worker, const char* key) {
  for (auto it = worker.records.rbegin(); it != worker.records.rend(); ++it)
    if (it->is_object() && it->contains(key)) return &(*it)[key];
  return nullptr;
}

// A failure's outcomes, most telling first: when two show at once, a crash or hang is the cause and the other
// worker's error ("the peer process went away") its effect.
enum class Outcome { kDied, kHung, kError, kNotLoaded, kRunning, kFinished };
bool isFailure(Outcome outcome) {
  return outcome != Outcome::kRunning && outcome != Outcome::kFinished;
}

// Where the worker stands now. A worker that has ended is reaped here.
Outcome outcomeOf(Worker& worker, nns::tools::CallWatch& watch, nns::tools::CallWatch::Clock::time_point now) {
  if (worker.running) {
    readRecords(worker);
    if (lastRecord(worker, "error") != nullptr) return Outcome::kError;  // stopped at once: see runWorker
    pid_t ended = waitpid(worker.pid, &worker.waitStatus, WNOHANG);
    if (ended != worker.pid) return watch.overdue(now) ? Outcome::kHung : Outcome::kRunning;
    worker.running = false;
    readRecords(worker);  // what it wrote before it ended is all in the pipe now
  }
  int status = worker.waitStatus;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && lastRecord(worker, "finished") != nullptr)
    return Outcome::kFinished;
  if (WIFEXITED(status) && WEXITSTATUS(status) == kExitFailed && lastRecord(worker, "error") != nullptr)
    return Outcome::kError;
  if (WIFEXITED(status) && WEXITSTATUS(status) == kExitNotLoaded && lastRecord(worker, "notLoaded") != nullptr)
    return Outcome::kNotLoaded;
  return Outcome::kDied;
}

void stopWorker(Worker& worker) {
  if (!worker.running) return;
  kill(worker.pid, SIGKILL);
  while (waitpid(worker.pid, &worker.waitStatus, 0) < 0 && errno == EINTR) {
  }
  worker.running = false;
  readRecords(worker);
}

// A run that failed, as superviseWorkers found it. runTool prints it after whatever was measured: a failure while
// closing the connections comes after every row was sent, and those rows are still the run's results.
struct Failure {
  int status = 0;                  // the exit status (0: both workers finished)
  std::string error;               // what failed, naming the process and the call
  std::vector<std::string> notes;  // the other process: its own crash or hang, or where it was stopped
  bool notLoaded = false;
  // When the plugin did not load: each entry tried and why it was refused (or the crash or hang that ended it).
  std::vector<std::pair<std::string, std::string>> candidates;
};

// "plugin did not load", with each candidate the worker tried; `failure` (a crash or hang while loading, the call
// named) last, under its entry.
Failure notLoaded(const Worker& worker, const std::string& failure) {
  Failure result{kExitNotLoaded, "plugin did not load", {}, true, {}};
  for (const auto& record : worker.records) {
    if (!record.is_object() || !record.contains("candidate")) continue;
    auto c = nns::tools::candidateFromJson(record["candidate"]);
    result.candidates.emplace_back(c.requested, c.rejectReason);
  }
  if (!failure.empty()) {
    const nlohmann::json* entry = lastRecord(worker, "loading");
    result.candidates.emplace_back(entry != nullptr ? entry->get<std::string>() : "?",
                                   failure + ", in the " + workerName(worker.index));
  }
  return result;
}

// What the workers produced: everything when both finished; what the measuring process sent before one failed.
struct Measurement {
  std::string name, path;  // the plugin's, as loaded in the measuring process (empty: not loaded)
  int version = 0;
  std::vector<Row> rows;
  bool swept = false;   // every size was measured (the failure, if any, came while closing)
  std::string binding;  // replaced when the measuring process could not be bound
  Failure failure;
};

// Watches both workers until both finish (then `result` holds the measurement and the return is 0) or one fails: a
// worker that dies, exits before finishing, reports an error or spends more than --call-timeout in one plugin call
// ends the run. Both are then stopped, `result->failure` names the worker and the call, and its exit status is
// returned; what the measuring process sent before is in `result` too. Hangs are sampled every 100 ms, so one is seen
// at most that late.
int superviseWorkers(std::vector<Worker>& workers, nns::tools::SharedCallNotes& notes, const Settings& settings,
                     const nns::core::LoadOptions& load, Measurement* result) {
  using Clock = nns::tools::CallWatch::Clock;
  std::vector<nns::tools::CallWatch> watches;
  for (int i = 0; i < kWorkers; ++i) watches.emplace_back(notes[i], std::chrono::seconds(settings.callTimeoutSeconds));
  std::vector<Outcome> outcomes(kWorkers, Outcome::kRunning);
  // Waits up to 100 ms for a record, then updates every running worker's outcome.
  auto sample = [&] {
    std::vector<pollfd> fds;
    for (const Worker& worker : workers)
      if (worker.running && worker.reportOpen) fds.push_back({worker.reportFd, POLLIN, 0});
    if (!fds.empty()) {
      poll(fds.data(), fds.size(), 100);
    } else {
      usleep(100 * 1000);
    }
    auto now = Clock::now();
    for (int i = 0; i < kWorkers; ++i)
      if (outcomes[i] == Outcome::kRunning) outcomes[i] = outcomeOf(workers[i], watches[i], now);
  };
  // The worker whose failure to report: the most telling outcome, the measuring process first among equals.
  // Of two errors, one saying the other process is gone (ncclRemoteError) is the other's consequence: the other's
  // own error is the cause, and is named first.
  auto remoteOnly = [&](int i) {
    const nlohmann::json* error = lastRecord(workers[i], "error");
    return error != nullptr && error->is_string() &&
           error->get<std::string>().find("(ncclRemoteError)") != std::string::npos;
  };
  auto mostTelling = [&] {
    int failed = -1;
    for (int i = 0; i < kWorkers; ++i)
      if (isFailure(outcomes[i]) && (failed < 0 || outcomes[i] < outcomes[failed] ||
                                     (outcomes[i] == Outcome::kError && outcomes[failed] == Outcome::kError &&
                                      remoteOnly(failed) && !remoteOnly(i))))
        failed = i;
    return failed;
  };
  int failed = -1;
  for (;;) {
    sample();
    if (std::all_of(outcomes.begin(), outcomes.end(), [](Outcome o) { return o == Outcome::kFinished; })) break;
    failed = mostTelling();
    if (failed < 0) continue;
    // An error can reach this process before the crash that caused it is seen (a process's sockets close before it
    // can be waited for): one more sample for the other worker's crash or hang.
    if (outcomes[failed] == Outcome::kError || outcomes[failed] == Outcome::kNotLoaded) {
      sample();
      failed = mostTelling();
    }
    break;
  }
  // What the measuring process said, read once it has ended or been stopped.
  auto takeMeasurement = [&] {
    const Worker& measuring = workers[0];
    if (const nlohmann::json* loaded = lastRecord(measuring, "loaded")) {
      result->name = loaded->value("name", "");
      result->path = loaded->value("path", "");
      result->version = loaded->value("version", 0);
    }
    for (const auto& record : measuring.records) {
      if (!record.is_object() || !record.contains("row")) continue;
      const auto& row = record["row"];
      result->rows.push_back(
          {row.value("bytes", size_t{0}), row.value("latencyUs", 0.0), row.value("bandwidthGBs", 0.0)});
    }
    if (const nlohmann::json* step = lastRecord(measuring, "step")) result->swept = step->value("phase", "") == "close";
    if (const nlohmann::json* binding = lastRecord(measuring, "binding")) result->binding = binding->get<std::string>();
  };
  if (failed < 0) {
    takeMeasurement();
    return 0;
  }

  // Where every worker still running was, read before they are stopped: for two workers each waiting on the other,
  // both calls tell the story.
  auto now = Clock::now();
  std::vector<std::string> stoppedIn(kWorkers);
  for (int i = 0; i < kWorkers; ++i) {
    if (i == failed || outcomes[i] != Outcome::kRunning) continue;
    const nns::tools::CallNote& note = notes[i];
    std::string call = nns::tools::callName(note);
    // How long it had been in the call, when long enough to matter (sampled, so shorter is noise): a worker that
    // polls test in a loop is in a test call most of the time.
    char since[48] = "";
    if (double seconds = watches[i].secondsInCall(now); seconds >= 1)
      std::snprintf(since, sizeof(since), ", %.1f s into it", seconds);
    stoppedIn[i] = call.empty()        ? "stopped before its first plugin call"
                   : note.inProgress() ? "stopped in " + call + since
                                       : "stopped between plugin calls (the last: " + call + ")";
  }
  for (Worker& worker : workers) stopWorker(worker);
  takeMeasurement();

  const Worker& worker = workers[failed];
  const nns::tools::CallNote& note = notes[failed];
  Outcome outcome = outcomes[failed];
  std::string failure;
  if (outcome == Outcome::kDied) failure = nns::tools::deathText(worker.waitStatus, note);
  if (outcome == Outcome::kHung) failure = nns::tools::hungText(note, settings.callTimeoutSeconds);
  bool whileLoading = (outcome == Outcome::kDied || outcome == Outcome::kHung) && note.inProgress() &&
                      nns::tools::callName(note) == kLoaderProbe;
  Failure& report = result->failure;
  if (outcome == Outcome::kNotLoaded) {
    report = notLoaded(worker, "");
    if (const std::string none = nns::core::noPluginReason(load); !none.empty() && report.candidates.empty())
      report.candidates.emplace_back(
          !load.plugin.empty() ? load.plugin : nns::core::printable(std::getenv("NCCL_NET_PLUGIN")), none);
    return report.status;
  }
  if (whileLoading) {
    // The loader's steps again, one by one in a child of their own, to name the call (as nccl-net-check does). A
    // hang there costs one more --call-timeout.
    const nlohmann::json* entry = lastRecord(worker, "loading");
    if (entry != nullptr)
      failure =
          nns::tools::pinpointFailure(entry->get<std::string>(), load.searchDirs, failure, settings.callTimeoutSeconds);
    report = notLoaded(worker, failure);
    return report.status;
  }
  // Where in the sweep the worker failed: the size and phase, or the closing; nothing before the first size (the
  // call named says it: init, listen, connect, ...).
  std::string where;
  if (const nlohmann::json* step = lastRecord(worker, "step")) {
    const std::string phase = step->value("phase", "");
    where = phase == "close" ? ", closing the connections"
                             : ", at " + std::to_string(step->value("bytes", size_t{0})) + " bytes (" + phase + ")";
  }
  if (outcome == Outcome::kError) {
    report.status = kExitFailed;
    failure = lastRecord(worker, "error")->get<std::string>();
  } else {
    report.status = outcome == Outcome::kHung ? kExitHung : kExitCrashed;
  }
  report.error = std::string(workerName(failed)) + where + ": " + failure;
  // The other worker: its own crash or hang when it had one too, else where it was stopped.
  for (int i = 0; i < kWorkers; ++i) {
    if (i == failed) continue;
    const std::string process = std::string(workerName(i)) + ": ";
    if (outcomes[i] == Outcome::kDied)
      report.notes.push_back(process + nns::tools::deathText(workers[i].waitStatus, notes[i]));
    if (outcomes[i] == Outcome::kHung)
      report.notes.push_back(process + nns::tools::hungText(notes[i], settings.callTimeoutSeconds));
    if (outcomes[i] == Outcome::kError)
      report.notes.push_back(process + "also failed: " + lastRecord(workers[i], "error")->get<std::string>());
    if (!stoppedIn[i].empty()) report.notes.push_back(process + stoppedIn[i]);
  }
  return report.status;
}

// The run as one JSON object: the plugin, the settings and the rows measured; on a failure also "error" (what failed,
// the same words as on stderr), "notes" (the other process) and, when the plugin did not load, "candidates" (each
// entry tried and why it was refused), so that a pipeline reading --json learns why a run failed.
nlohmann::json runJson(const std::string& requested, const Settings& settings, const std::string& binding,
                       const Measurement& measured) {
  const Failure& failure = measured.failure;
  nlohmann::json out;
  out["plugin"] = measured.name.empty() ? requested : measured.name;
  out["path"] = measured.path;
  out["version"] = measured.version;
  out["dev"] = settings.dev;
  // The sweep as asked (-b -e -f), so that a run can be repeated from its JSON alone.
  out["minBytes"] = settings.minBytes;
  out["maxBytes"] = settings.maxBytes;
  out["factor"] = settings.factor;
  out["callTimeout"] = settings.callTimeoutSeconds;
  out["iterations"] = settings.iterations;
  out["warmup"] = settings.warmup;
  out["window"] = settings.window;
  out["multiRecv"] = settings.multiRecv;
  out["binding"] = binding;
  out["results"] = nlohmann::json::array();
  for (const Row& row : measured.rows) out["results"].push_back(rowJson(row));
  if (failure.status == 0) return out;
  out["error"] = failure.error;
  out["notes"] = failure.notes;
  out["exitStatus"] = failure.status;
  if (failure.notLoaded) {
    out["candidates"] = nlohmann::json::array();
    for (const auto& [requestedEntry, reason] : failure.candidates)
      out["candidates"].push_back({{"requested", requestedEntry}, {"rejectReason", reason}});
  }
  return out;
}

// The failure on stderr, as one line per process (and one per candidate when the plugin did not load).
void printFailure(const Failure& failure) {
  if (failure.notLoaded) {
    std::fprintf(stderr, "nccl-net-perf: %s:\n", failure.error.c_str());
    for (const auto& [requested, reason] : failure.candidates)
      std::fprintf(stderr, "  %s: %s\n", requested.c_str(), reason.c_str());
    return;
  }
  std::fprintf(stderr, "nccl-net-perf: %s\n", failure.error.c_str());
  for (const std::string& note : failure.notes) std::fprintf(stderr, "nccl-net-perf: %s\n", note.c_str());
}

}  // namespace

int runTool(int argc, char** argv) {
  CLI::App app{"nccl-net-perf: point-to-point bandwidth and latency of an ncclNet plugin between two processes"};
  Settings settings;
  nns::core::LoadOptions load;
  std::string plugin;
  bool asJson = false;
  app.add_option("plugin", plugin,
                 "plugin name (libnccl-net-NAME.so) or path, NCCL_NET_PLUGIN semantics (default: $NCCL_NET_PLUGIN, "
                 "else libnccl-net.so, as NCCL)");
  // One directory per -L (repeat it for more): taking several, -L DIR PLUGIN took the plugin as a second directory.
  app.add_option("-L,--search-dir", load.searchDirs,
                 "directory searched first for the plugin, one per -L, repeatable (default ../lib beside this tool, "
                 "searched before the dynamic linker's path; nccl-net-info searches it last, as NCCL would not)")
      ->allow_extra_args(false);
  nns::tools::addSizeOption(app, "-b,--minbytes", settings.minBytes, "smallest message (K/M/G; default 8)");
  // test() reports a message's size as an int: a larger message could not be seen to arrive whole.
  nns::tools::addSizeOption(app, "-e,--maxbytes", settings.maxBytes, "largest message (default 64M, below 2G)")
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{INT_MAX}, "below 2 GiB: test() reports sizes as int"));
  app.add_option("-f,--stepfactor", settings.factor, "size multiplier between steps (default 2)")
      ->transform(nns::tools::integerIn(2, INT_MAX));
  // The latency's median keeps every round trip (8 bytes each): -n 2147483647 asked for 16 GiB of them, a
  // std::bad_alloc in the measuring process.
  app.add_option("-n,--iters", settings.iterations,
                 "timed iterations per size (default 20, at most " + std::to_string(kMaxIterations) + ")")
      ->transform(nns::tools::integerIn(1, kMaxIterations));
  app.add_option(
         "-w,--warmup", settings.warmup,
         "untimed iterations per size (default 5; the bandwidth test's are at least -W, so that every buffer is used "
         "once before the clock runs; 0: none)")
      ->transform(nns::tools::integerIn(0, INT_MAX));
  // More than NCCL_NET_MAX_REQUESTS receives in flight on one comm is more than NCCL posts or a plugin must take.
  app.add_option("-W,--window", settings.window, "receives kept in flight for bandwidth (default 8, at most 32)")
      ->transform(nns::tools::integerIn(1, NCCL_NET_MAX_REQUESTS));
  // NCCL groups at most NCCL_PROXY_MAX_SUBS (64) receives in one irecv; a larger -m allocated its sizes before the
  // device's maxRecvs refused it (1.2 GB for -m 300000000).
  app.add_option("-m,--multi-recv", settings.multiRecv, "messages grouped in one irecv (default 1, <= maxRecvs, <= 64)")
      ->transform(nns::tools::integerIn(1, nccl_net::sdk::kMaxGroupedRecvs));
  app.add_option("-d,--dev", settings.dev, "device index (default 0)")->transform(nns::tools::integerIn(0, INT_MAX));
  app.add_option("--call-timeout", settings.callTimeoutSeconds,
                 "seconds any one plugin call may take (loading the plugin counts as one), and any operation the "
                 "plugin keeps answering 'not yet' (connect and accept, a post, a request's completion) (default 30)")
      ->transform(nns::tools::integerIn(1, 3600));
  std::string bindTo = "spread";
  app.add_option("--bind-to", bindTo,
                 "spread: each process on CPUs of its own when there are 2 or more (hwloc's spread, as nccl-net-run); "
                 "none: unbound (default spread)")
      ->check(CLI::IsMember({"spread", "none"}));
  app.add_flag("--json", asJson, "machine-readable output");
  app.footer(
      "Exit status:\n"
      "  0  measured\n"
      "  1  the run failed: a plugin call returned an error, test() reported a received size other than the bytes\n"
      "     sent (or none), an operation ran out of --call-timeout, -e is above the device's maxP2pBytes, or -m\n"
      "     above its maxRecvs\n"
      "  2  a refused argument, or the plugin did not load (also when it crashed or hung while loading: the call\n"
      "     is named)\n"
      "  3  a plugin call crashed the measuring or the peer process (the call and the process named)\n"
      "  4  a plugin call did not return within --call-timeout (the call and the process named)\n"
      "On 3 and 4 both processes are stopped, and where the other one was is said too.");
  if (int status = nns::tools::parseArguments(app, argc, argv); status >= 0) return status;
  nns::tools::warnUnusableSearchDirs("nccl-net-perf", load.searchDirs);
  // A failure from here on is said on stderr and, with --json, as the run's JSON object with its "error" (stdout
  // was empty, where nccl-net-check and nccl-net-info still print one object).
  std::string binding;
  auto failRun = [&](Measurement& measured) {
    if (asJson) {
      std::printf("%s\n", runJson(plugin, settings, binding, measured)
                              .dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
                              .c_str());
      std::fflush(stdout);
    }
    if (measured.swept)
      std::fprintf(stderr, "nccl-net-perf: every size was measured (%s), then the run failed:\n",
                   asJson ? "\"results\" in the JSON" : "the rows above");
    else if (!measured.rows.empty())
      std::fprintf(stderr, "nccl-net-perf: the sizes up to %zu bytes were measured (%s), then the run failed:\n",
                   measured.rows.back().bytes, asJson ? "\"results\" in the JSON" : "the rows above");
    printFailure(measured.failure);
    return measured.failure.status;
  };
  auto refuse = [&](const std::string& text) {
    Measurement refused;
    refused.failure.status = kExitNotLoaded;  // 2: what the arguments ask cannot run here
    refused.failure.error = text;
    return failRun(refused);
  };
  if (settings.minBytes > settings.maxBytes)
    return refuse("-b " + std::to_string(settings.minBytes) + " is above -e " + std::to_string(settings.maxBytes));
  // Each process holds -W x -m buffers of -e bytes: refused up front when two of those do not fit in the memory this
  // host has available now, rather than failing in the plugin's process with std::bad_alloc (or waking the OOM
  // killer).
  const double available = nns::tools::hostAvailableBytes();
  double bufferBytes = static_cast<double>(settings.window) * settings.multiRecv *
                       static_cast<double>(std::max<size_t>(settings.maxBytes, 1));
  if (available > 0 && 2 * bufferBytes > available) {
    char text[320];
    std::snprintf(text, sizeof(text),
                  "-e %zu with -W %d and -m %d needs %.1f GiB of buffers in each of the two processes, %.1f GiB in "
                  "all; this host has %.1f GiB available (MemAvailable in /proc/meminfo)",
                  settings.maxBytes, settings.window, settings.multiRecv, bufferBytes / (1 << 30),
                  2 * bufferBytes / (1 << 30), available / (1 << 30));
    return refuse(text);
  }
  load.plugin = plugin;
  load.readNcclNet = false;  // the plugin named is the one measured, whatever NCCL_NET asks of NCCL
  if (load.searchDirs.empty()) load.searchDirs.push_back(nns::tools::libDirBesideExecutable());

  // The two processes busy-wait on each other: each gets CPUs of its own when there are enough, so neither waits for
  // the other to be descheduled (the waits also yield, for when they share one).
  std::string unbound = "--bind-to none";
  std::vector<cpu_set_t> shares =
      bindTo == "spread" ? nns::tools::cpuShares(2, "processes", &unbound) : std::vector<cpu_set_t>{};
  binding = shares.empty() ? "not bound (" + unbound + "); waits yield the CPU after 2 us"
                           : "measuring process on CPUs " + nns::core::cpuList(shares[0]) + ", peer on CPUs " +
                                 nns::core::cpuList(shares[1]);

  // Two worker processes, each loading the plugin itself (plugins may not survive a fork after init), each naming
  // the plugin call it is in where this process reads it: this one only watches them, so that neither a crash nor a
  // call that never returns can take the tool down or hold it.
  nns::tools::SharedCallNotes notes(kWorkers);
  if (!notes.valid())
    return refuse(std::string("no shared memory to watch the plugin calls in: mmap: ") + std::strerror(errno));
  int exchange[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, exchange) != 0)
    return refuse(std::string("socketpair: ") + std::strerror(errno));
  std::vector<Worker> workers(kWorkers);
  auto giveUp = [&](const char* what) {
    const std::string text = std::string(what) + ": " + std::strerror(errno);
    for (Worker& worker : workers) stopWorker(worker);
    close(exchange[0]);
    close(exchange[1]);
    return refuse(text);
  };
  pid_t tool = getpid();
  for (int i = 0; i < kWorkers; ++i) {
    int report[2];
    if (pipe2(report, O_CLOEXEC) != 0) return giveUp("pipe");
    std::fflush(nullptr);
    pid_t pid = fork();
    if (pid < 0) {
      close(report[0]);
      close(report[1]);
      return giveUp("fork");
    }
    if (pid == 0) {
      // Dies with the tool (killed, or interrupted at a terminal): a worker stuck in the plugin must not outlive it.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != tool) _exit(kExitFailed);
      close(report[0]);
      for (int j = 0; j < i; ++j) close(workers[j].reportFd);
      close(exchange[1 - i]);
      WorkerSetup setup;
      setup.index = i;
      setup.settings = settings;
      setup.load = load;
      setup.cpus = shares.empty() ? nullptr : &shares[i];
      setup.exchangeFd = exchange[i];
      setup.reportFd = report[1];
      setup.note = &notes[i];
      runWorker(setup);
    }
    close(report[1]);
    fcntl(report[0], F_SETFL, O_NONBLOCK);
    workers[i] = Worker{i, pid, report[0], true, "", {}, true, 0};
  }
  close(exchange[0]);
  close(exchange[1]);
  Measurement measured;
  int status = superviseWorkers(workers, notes, settings, load, &measured);
  for (Worker& worker : workers) close(worker.reportFd);
  if (!measured.binding.empty()) binding = measured.binding;
  const std::string& name = measured.name;
  const std::string& path = measured.path;
  int version = measured.version;
  const std::vector<Row>& rows = measured.rows;
  // A failure keeps the rows measured before it (every one, when it came while closing the connections): printed,
  // then the failure, whose exit status the run keeps.
  if (status != 0 && (asJson || rows.empty())) return failRun(measured);

  if (asJson) {
    std::printf("%s\n", runJson(plugin, settings, binding, measured)
                            .dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
                            .c_str());
    return 0;
  }
  std::printf("# nccl-net-perf: plugin %s (ncclNet_v%d, %s), dev %d, iters %d, warmup %d, window %d, multi-recv %d\n",
              name.c_str(), version, path.c_str(), settings.dev, settings.iterations, settings.warmup, settings.window,
              settings.multiRecv);
  std::printf("# processes: %s\n", binding.c_str());
  std::printf("# %12s %14s %14s\n", "size(B)", "lat(us)", "bw(GB/s)");
  for (const Row& row : rows) std::printf("  %12zu %14.2f %14.3f\n", row.bytes, row.latencyUs, row.bandwidthGBs);
  if (status != 0) {
    std::fflush(stdout);
    return failRun(measured);
  }
  return 0;
}

int main(int argc, char** argv) {
  return nns::tools::guardedMain("nccl-net-perf", argc, argv, runTool);
}
