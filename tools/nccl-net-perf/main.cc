// nccl-net-perf: bandwidth and latency per message size between two processes over any ncclNet plugin, in the
// spirit of ib_write_bw / ucx_perftest (-b -e -f sweep, iterations, in-flight window, multi-recv n; --json).
#include <limits.h>
#include <sched.h>
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
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "nns/core/cpus.hpp"
#include "nns/core/loader.hpp"
#include "nns/tools/cpu_shares.hpp"
#include "nns/tools/guarded_main.hpp"
#include "nns/tools/parse_arguments.hpp"
#include "nns/tools/size_option.hpp"

namespace {

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
};

struct Row {
  size_t bytes = 0;
  double latencyUs = 0;  // half a ping-pong round trip
  double bandwidthGBs = 0;
};

std::string libDirBesideExecutable() {
  char path[PATH_MAX];
  ssize_t length = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (length <= 0) return "../lib";
  path[length] = '\0';
  std::string dir = std::string(path).substr(0, std::string(path).rfind('/')) + "/../lib";
  char resolved[PATH_MAX];
  return realpath(dir.c_str(), resolved) != nullptr ? resolved : dir;
}

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
    throw std::runtime_error(std::string(what) + " returned ncclResult " + std::to_string(result));
}

void writeAll(int fd, const void* data, size_t size) {
  if (write(fd, data, size) != static_cast<ssize_t>(size)) throw std::runtime_error("handle exchange: write failed");
}
void readAll(int fd, void* data, size_t size) {
  size_t got = 0;
  while (got < size) {
    ssize_t n = read(fd, static_cast<char*>(data) + got, size - got);
    if (n <= 0) throw std::runtime_error("handle exchange: the peer process went away");
    got += n;
  }
}

// One side of the benchmark: a send comm to the peer and a receive comm from it (latency needs both directions).
class Side {
 public:
  Side(nns::core::Net& net, const Settings& settings, int exchangeFd) : net_(net), settings_(settings) {
    check(net_.init(&ctx_, 0x706572, nullptr, nullptr, nullptr), "init");
    int ndev = 0;
    check(net_.devices(&ndev), "devices");
    if (settings_.dev >= ndev) throw std::runtime_error("device " + std::to_string(settings_.dev) + " absent");
    check(net_.getProperties(settings_.dev, &props_), "getProperties");
    if (settings_.maxBytes > props_.maxP2pBytes)
      throw std::runtime_error("-e " + std::to_string(settings_.maxBytes) + " exceeds the device's maxP2pBytes " +
                               std::to_string(props_.maxP2pBytes) + " (NCCL never sends more in one message)");
    if (settings_.multiRecv > props_.maxRecvs)
      throw std::runtime_error("-m " + std::to_string(settings_.multiRecv) + " exceeds the device's maxRecvs " +
                               std::to_string(props_.maxRecvs));
    char mine[NCCL_NET_HANDLE_MAXSIZE] = {};
    char theirs[NCCL_NET_HANDLE_MAXSIZE] = {};
    check(net_.listen(ctx_, settings_.dev, mine, &listenComm_), "listen");
    writeAll(exchangeFd, mine, sizeof(mine));
    readAll(exchangeFd, theirs, sizeof(theirs));
    // connect and accept are non-blocking: both sides drive both until each has its comm.
    double deadline = now() + settings_.callTimeoutSeconds;
    Poll poll;
    while (sendComm_ == nullptr || recvComm_ == nullptr) {
      if (sendComm_ == nullptr) check(net_.connect(ctx_, settings_.dev, theirs, &sendComm_, nullptr), "connect");
      if (recvComm_ == nullptr) check(net_.accept(listenComm_, &recvComm_, nullptr), "accept");
      if (now() > deadline) throw std::runtime_error("connection not established within the timeout");
      poll.next();
    }
    buffers_.resize(static_cast<size_t>(settings_.window) * settings_.multiRecv);
    for (auto& buffer : buffers_) buffer.assign(settings_.maxBytes == 0 ? 1 : settings_.maxBytes, 0x5a);
    for (auto& buffer : buffers_) {
      void* sendHandle = nullptr;
      void* recvHandle = nullptr;
      check(net_.regMr(sendComm_, buffer.data(), buffer.size(), NCCL_PTR_HOST, &sendHandle), "regMr");
      check(net_.regMr(recvComm_, buffer.data(), buffer.size(), NCCL_PTR_HOST, &recvHandle), "regMr");
      sendHandles_.push_back(sendHandle);
      recvHandles_.push_back(recvHandle);
    }
  }

  ~Side() {
    for (size_t i = 0; i < buffers_.size(); ++i) {
      net_.deregMr(sendComm_, sendHandles_[i]);
      net_.deregMr(recvComm_, recvHandles_[i]);
    }
    if (sendComm_ != nullptr) net_.closeSend(sendComm_);
    if (recvComm_ != nullptr) net_.closeRecv(recvComm_);
    if (listenComm_ != nullptr) net_.closeListen(listenComm_);
    net_.finalize(ctx_);
  }

  // A NULL request means "not now": post again until the plugin takes it.
  void* postSend(size_t slot, size_t bytes, int tag) {
    void* request = nullptr;
    double deadline = now() + settings_.callTimeoutSeconds;
    Poll poll;
    while (request == nullptr) {
      check(net_.isend(sendComm_, buffers_[slot].data(), bytes, tag, sendHandles_[slot], nullptr, &request), "isend");
      if (request == nullptr && now() > deadline) throw std::runtime_error("isend refused until the timeout");
      poll.next();
    }
    return request;
  }

  void* postRecv(size_t firstSlot, size_t bytes, int n) {
    std::vector<void*> data(n), handles(n);
    std::vector<size_t> sizes(n, bytes);
    std::vector<int> tags(n);
    for (int i = 0; i < n; ++i) {
      data[i] = buffers_[firstSlot + i].data();
      handles[i] = recvHandles_[firstSlot + i];
      tags[i] = i;
    }
    void* request = nullptr;
    double deadline = now() + settings_.callTimeoutSeconds;
    Poll poll;
    while (request == nullptr) {
      check(net_.irecv(recvComm_, n, data.data(), sizes.data(), tags.data(), handles.data(), nullptr, &request),
            "irecv");
      if (request == nullptr && now() > deadline) throw std::runtime_error("irecv refused until the timeout");
      poll.next();
    }
    return request;
  }

  void wait(void* request) {
    int done = 0;
    std::vector<int> sizes(settings_.multiRecv);
    double deadline = now() + settings_.callTimeoutSeconds;
    Poll poll;
    while (!done) {
      check(net_.test(request, &done, sizes.data()), "test");
      if (done) break;
      if (now() > deadline) throw std::runtime_error("a request did not complete within the timeout");
      poll.next();
    }
  }

  // Ping-pong: the initiator sends, the peer answers with the same size; half the median round trip is the latency.
  double latency(size_t bytes, bool initiator) {
    auto once = [&] {
      if (initiator) {
        void* s = postSend(0, bytes, 0);
        void* r = postRecv(0, bytes, 1);
        wait(s);
        wait(r);
      } else {
        void* r = postRecv(0, bytes, 1);
        wait(r);
        void* s = postSend(0, bytes, 0);
        wait(s);
      }
    };
    // Latency is one message per receive whatever -m says: grouping only matters for throughput.
    for (int i = 0; i < settings_.warmup; ++i) once();
    // The median round trip: on a shared host one descheduled iteration would dominate a mean.
    std::vector<double> roundTrips;
    for (int i = 0; i < settings_.iterations; ++i) {
      double start = now();
      once();
      roundTrips.push_back(now() - start);
    }
    std::sort(roundTrips.begin(), roundTrips.end());
    return roundTrips[roundTrips.size() / 2] / 2 * 1e6;
  }

  // Streaming: `window` receives (each of n messages) kept in flight; the receiver acknowledges the end with a
  // zero-byte message so the sender's clock covers delivery, not just posting.
  double bandwidth(size_t bytes, bool sender) {
    int n = settings_.multiRecv;
    int total = settings_.iterations;  // receive operations, each n messages
    auto run = [&](int count) {
      // Slot k owns buffers k*n .. k*n+n-1 and the requests posted on them; reusing a slot waits for them first.
      std::vector<std::vector<void*>> inFlight(settings_.window);
      for (int op = 0; op < count; ++op) {
        auto& slot = inFlight[op % settings_.window];
        for (void* request : slot) wait(request);
        slot.clear();
        size_t firstBuffer = static_cast<size_t>(op % settings_.window) * n;
        if (sender) {
          for (int i = 0; i < n; ++i) slot.push_back(postSend(firstBuffer + i, bytes, i));
        } else {
          slot.push_back(postRecv(firstBuffer, bytes, n));
        }
      }
      for (auto& slot : inFlight)
        for (void* request : slot) wait(request);
      if (sender) {
        wait(postRecv(0, 0, 1));
      } else {
        wait(postSend(0, 0, 0));
      }
    };
    run(settings_.warmup);
    double start = now();
    run(total);
    double elapsed = now() - start;
    return static_cast<double>(bytes) * total * n / elapsed / 1e9;
  }

  const ncclNetProperties_v12_t& props() const { return props_; }

 private:
  nns::core::Net& net_;
  Settings settings_;
  void* ctx_ = nullptr;
  ncclNetProperties_v12_t props_{};
  void* listenComm_ = nullptr;
  void* sendComm_ = nullptr;
  void* recvComm_ = nullptr;
  std::vector<std::vector<char>> buffers_;
  std::vector<void*> sendHandles_;
  std::vector<void*> recvHandles_;
};

std::vector<size_t> sweep(const Settings& settings) {
  std::vector<size_t> sizes;
  for (size_t bytes = settings.minBytes; bytes <= settings.maxBytes; bytes = bytes == 0 ? 1 : bytes * settings.factor) {
    sizes.push_back(bytes);
    if (bytes > settings.maxBytes / settings.factor) break;  // the next step is past -e (or would wrap around)
  }
  return sizes;
}

// Both processes run this; `leader` is the parent, which measures, the child mirrors it. Steps are in lockstep:
// the same sizes in the same order, so no extra synchronisation is needed beyond the plugin's own messages.
std::vector<Row> runSide(nns::core::Net& net, const Settings& settings, int exchangeFd, bool leader) {
  Side side(net, settings, exchangeFd);
  std::vector<Row> rows;
  for (size_t bytes : sweep(settings)) {
    Row row;
    row.bytes = bytes;
    row.latencyUs = side.latency(bytes, leader);
    row.bandwidthGBs = side.bandwidth(bytes, leader);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

int runTool(int argc, char** argv) {
  CLI::App app{"nccl-net-perf: point-to-point bandwidth and latency of an ncclNet plugin between two processes"};
  Settings settings;
  nns::core::LoadOptions load;
  std::string plugin;
  bool asJson = false;
  app.add_option("plugin", plugin, "plugin name (libnccl-net-NAME.so) or path, NCCL_NET_PLUGIN semantics");
  app.add_option("-L,--search-dir", load.searchDirs, "directories searched for the plugin (default ../lib)");
  nns::tools::addSizeOption(app, "-b,--minbytes", settings.minBytes, "smallest message (K/M/G; default 8)");
  // test() reports a message's size as an int: a larger message could not be seen to arrive whole.
  nns::tools::addSizeOption(app, "-e,--maxbytes", settings.maxBytes, "largest message (default 64M, below 2G)")
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{INT_MAX}, "below 2 GiB: test() reports sizes as int"));
  app.add_option("-f,--stepfactor", settings.factor, "size multiplier between steps (default 2)");
  app.add_option("-n,--iters", settings.iterations, "timed iterations per size (default 20)");
  app.add_option("-w,--warmup", settings.warmup, "untimed iterations per size (default 5)");
  // More than NCCL_NET_MAX_REQUESTS receives in flight on one comm is more than NCCL posts or a plugin must take.
  app.add_option("-W,--window", settings.window, "receives kept in flight for bandwidth (default 8, at most 32)")
      ->check(CLI::Range(1, NCCL_NET_MAX_REQUESTS));
  app.add_option("-m,--multi-recv", settings.multiRecv, "messages grouped in one irecv (default 1, <= maxRecvs)");
  app.add_option("-d,--dev", settings.dev, "device index (default 0)")->check(CLI::Range(0, INT_MAX));
  app.add_option("--call-timeout", settings.callTimeoutSeconds, "seconds any one operation may take (default 30)")
      ->check(CLI::Range(1, 3600));
  std::string bindTo = "spread";
  app.add_option("--bind-to", bindTo,
                 "spread: each process on CPUs of its own when there are 2 or more (hwloc's spread, as nccl-net-run); "
                 "none: unbound (default spread)")
      ->check(CLI::IsMember({"spread", "none"}));
  app.add_flag("--json", asJson, "machine-readable output");
  if (int status = nns::tools::parseArguments(app, argc, argv); status >= 0) return status;
  if (settings.iterations < 1 || settings.factor < 2 || settings.window < 1 || settings.multiRecv < 1 ||
      settings.warmup < 0 || settings.minBytes > settings.maxBytes) {
    std::fprintf(stderr, "nccl-net-perf: need -n >= 1, -f >= 2, -W >= 1, -m >= 1, -w >= 0 and -b <= -e\n");
    return 2;
  }
  // Each process holds -W x -m buffers of -e bytes: refused up front when two of those do not fit this host's memory,
  // rather than failing in the plugin's process with std::bad_alloc (or waking the OOM killer).
  long pages = sysconf(_SC_PHYS_PAGES), pageBytes = sysconf(_SC_PAGESIZE);
  double bufferBytes = static_cast<double>(settings.window) * settings.multiRecv *
                       static_cast<double>(std::max<size_t>(settings.maxBytes, 1));
  if (pages > 0 && pageBytes > 0 && 2 * bufferBytes > static_cast<double>(pages) * static_cast<double>(pageBytes)) {
    std::fprintf(stderr,
                 "nccl-net-perf: -e %zu with -W %d and -m %d needs %.1f GiB of buffers in each of the two processes; "
                 "this host has %.1f GiB of memory\n",
                 settings.maxBytes, settings.window, settings.multiRecv, bufferBytes / (1 << 30),
                 static_cast<double>(pages) * static_cast<double>(pageBytes) / (1 << 30));
    return 2;
  }
  load.plugin = plugin;
  if (load.searchDirs.empty()) load.searchDirs.push_back(libDirBesideExecutable());

  // The two processes busy-wait on each other: each gets CPUs of its own when there are enough, so neither waits for
  // the other to be descheduled (the waits also yield, for when they share one).
  std::string unbound = "--bind-to none";
  std::vector<cpu_set_t> shares =
      bindTo == "spread" ? nns::tools::cpuShares(2, "processes", &unbound) : std::vector<cpu_set_t>{};
  std::string binding = shares.empty() ? "not bound (" + unbound + "); waits yield the CPU after 2 us"
                                       : "measuring process on CPUs " + nns::core::cpuList(shares[0]) +
                                             ", peer on CPUs " + nns::core::cpuList(shares[1]);

  // Two processes, each loading the plugin itself (plugins may not survive a fork after init).
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) {
    std::perror("socketpair");
    return 2;
  }
  std::fflush(nullptr);
  pid_t child = fork();
  if (child < 0) {
    std::perror("fork");
    return 2;
  }
  bool leader = child != 0;
  if (!shares.empty() && sched_setaffinity(0, sizeof(cpu_set_t), &shares[leader ? 0 : 1]) != 0) {
    std::fprintf(stderr, "nccl-net-perf: %s process not bound: %s\n", leader ? "measuring" : "peer",
                 std::strerror(errno));
    if (leader) binding = "not bound (sched_setaffinity failed); waits yield the CPU after 2 us";
  }
  close(fds[leader ? 1 : 0]);
  int exchangeFd = fds[leader ? 0 : 1];

  nns::core::LoadReport report;
  auto net = nns::core::loadNet(load, &report);
  if (!net) {
    if (leader) {
      std::fprintf(stderr, "nccl-net-perf: plugin did not load:\n");
      for (const auto& c : report.candidates)
        std::fprintf(stderr, "  %s: %s\n", c.requested.c_str(), c.rejectReason.c_str());
      close(exchangeFd);
      waitpid(child, nullptr, 0);
      return 2;
    }
    _exit(2);
  }

  std::vector<Row> rows;
  std::string error;
  try {
    rows = runSide(*net, settings, exchangeFd, leader);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!leader) {
    if (!error.empty()) std::fprintf(stderr, "nccl-net-perf (peer): %s\n", error.c_str());
    _exit(error.empty() ? 0 : 1);
  }
  close(exchangeFd);
  int status = 0;
  if (!error.empty()) kill(child, SIGKILL);
  waitpid(child, &status, 0);
  if (error.empty() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) error = "the peer process failed";
  if (!error.empty()) {
    std::fprintf(stderr, "nccl-net-perf: %s\n", error.c_str());
    return 1;
  }

  if (asJson) {
    nlohmann::json out;
    out["plugin"] = net->name();
    out["path"] = net->path();
    out["version"] = net->version();
    out["dev"] = settings.dev;
    out["iterations"] = settings.iterations;
    out["warmup"] = settings.warmup;
    out["window"] = settings.window;
    out["multiRecv"] = settings.multiRecv;
    out["binding"] = binding;
    for (const Row& row : rows)
      out["results"].push_back(
          {{"bytes", row.bytes}, {"latencyUs", row.latencyUs}, {"bandwidthGBs", row.bandwidthGBs}});
    std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("# nccl-net-perf: plugin %s (ncclNet_v%d, %s), dev %d, iters %d, warmup %d, window %d, multi-recv %d\n",
              net->name(), net->version(), net->path().c_str(), settings.dev, settings.iterations, settings.warmup,
              settings.window, settings.multiRecv);
  std::printf("# processes: %s\n", binding.c_str());
  std::printf("# %12s %14s %14s\n", "size(B)", "lat(us)", "bw(GB/s)");
  for (const Row& row : rows) std::printf("  %12zu %14.2f %14.3f\n", row.bytes, row.latencyUs, row.bandwidthGBs);
  return 0;
}

int main(int argc, char** argv) {
  return nns::tools::guardedMain("nccl-net-perf", argc, argv, runTool);
}
