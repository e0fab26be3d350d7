// ib_bench.cc: nns-ib-bench, bandwidth (windowed one-way stream) and latency (8-byte ping-pong, half round trip) of
// the nns-ib plugin between two processes, in the units perftest reports (MB = 2^20 bytes, microseconds).
//
//   nns-ib-bench [--plugin PATH] [--send-hca SPEC] [--recv-hca SPEC] [--fuse] [--bytes N] [--iterations N]
//                [--window N] [--latency-iterations N] [--qps N]
// --send-hca/--recv-hca set NCCL_IB_HCA for each side; --fuse fuses every device into one vNIC on both sides (in
// reverse order on the receiver, so each QP crosses between different devices).
#include <sched.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "two_process.hpp"

namespace {

using namespace nns_ib_pair;

struct Options {
  std::string plugin = NNS_IB_PLUGIN_PATH;
  std::string sendHca, recvHca;
  bool fuse = false;
  size_t bytes = 65536;
  int iterations = 2000;
  int window = 16;
  int latencyIterations = 1000;
  std::string qps;
};

int pickDevice(Peer& peer, bool fuse, bool reverse) {
  int ndev = 0;
  peer.net->devices(&ndev);
  if (!fuse) return 0;
  if (ndev < 2) {
    std::fprintf(stderr, "--fuse needs two devices, found %d\n", ndev);
    return -1;
  }
  std::vector<int> devs;
  for (int d = 0; d < ndev; ++d) devs.push_back(d);
  if (reverse) std::reverse(devs.begin(), devs.end());
  return peer.fuse(devs);
}

double seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

#define BENCH_CHECK(call)                                                          \
  do {                                                                             \
    ncclResult_t result_ = (call);                                                 \
    if (result_ != ncclSuccess) {                                                  \
      std::fprintf(stderr, "%s failed: %d (line %d)\n", #call, result_, __LINE__); \
      return 1;                                                                    \
    }                                                                              \
  } while (0)

// One side. The receiver of the stream is also the one answering pings.
int runSide(const Options& o, const Channel& channel, bool streamReceiver) {
  Peer peer;
  if (!peer.load(o.plugin.c_str())) {
    std::fprintf(stderr, "cannot load %s: %s\n", o.plugin.c_str(), peer.error.c_str());
    return 1;
  }
  int dev = pickDevice(peer, o.fuse, streamReceiver);
  if (dev < 0) return 1;
  void *sendComm = nullptr, *recvComm = nullptr, *listenComm = nullptr;
  if (streamReceiver) {
    BENCH_CHECK(peer.acceptFrom(channel, dev, &recvComm, &listenComm));
    BENCH_CHECK(peer.connectTo(channel, dev, &sendComm));
  } else {
    BENCH_CHECK(peer.connectTo(channel, dev, &sendComm));
    BENCH_CHECK(peer.acceptFrom(channel, dev, &recvComm, &listenComm));
  }
  size_t total = o.bytes * static_cast<size_t>(o.window);
  void* buffer = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  std::memset(buffer, streamReceiver ? 0 : 0x5a, total);
  char small[64] = {};
  void *mh = nullptr, *smallSendMh = nullptr, *smallRecvMh = nullptr;
  BENCH_CHECK(peer.net->regMr(streamReceiver ? recvComm : sendComm, buffer, total, NCCL_PTR_HOST, &mh));
  BENCH_CHECK(peer.net->regMr(sendComm, small, 32, NCCL_PTR_HOST, &smallSendMh));
  BENCH_CHECK(peer.net->regMr(recvComm, small + 32, 32, NCCL_PTR_HOST, &smallRecvMh));

  // Stream: keep `window` messages in flight; the sender times from its first post to its last completion.
  auto stream = [&](int count, double* elapsed) -> int {
    std::vector<void*> inflight(static_cast<size_t>(o.window), nullptr);
    int posted = 0, completed = 0;
    auto start = Clock::now();
    while (completed < count) {
      int progressed = completed;
      for (int w = 0; w < o.window; ++w) {
        void*& request = inflight[static_cast<size_t>(w)];
        if (request == nullptr && posted < count) {
          void* slice = static_cast<char*>(buffer) + static_cast<size_t>(w) * o.bytes;
          if (streamReceiver) {
            size_t size = o.bytes;
            int tag = 1;
            BENCH_CHECK(peer.net->irecv(recvComm, 1, &slice, &size, &tag, &mh, nullptr, &request));
          } else {
            BENCH_CHECK(peer.net->isend(sendComm, slice, o.bytes, 1, mh, nullptr, &request));
          }
          if (request != nullptr) ++posted;
        }
        if (request != nullptr) {
          int done = 0, size = 0;
          BENCH_CHECK(peer.net->test(request, &done, &size));
          if (done) {
            request = nullptr;
            ++completed;
          }
        }
      }
      if (completed == progressed) sched_yield();  // idle pass: let the kernel's RDMA work run, as NCCL's proxy does
    }
    *elapsed = seconds(start);
    return 0;
  };
  double elapsed = 0;
  if (stream(std::max(1, o.iterations / 10), &elapsed) != 0) return 1;  // warm-up
  char sync = 1;
  channel.sendValue(sync);
  channel.recvValue(&sync);
  if (stream(o.iterations, &elapsed) != 0) return 1;
  double mbps = static_cast<double>(o.bytes) * o.iterations / elapsed / (1024.0 * 1024.0);

  // Latency: 8-byte ping-pong; half the round trip is what ib_send_lat reports. Like ib_send_lat (and NCCL's proxy,
  // which posts receives steps ahead) each side keeps two receives posted and re-posts after it has answered, so a
  // receiver's FIFO entry travels off the critical path.
  channel.sendValue(sync);
  channel.recvValue(&sync);
  constexpr int kDepth = 2;
  void* pingData[kDepth] = {small + 32, small + 48};
  size_t pingSize = 8;
  int pingTag = 2;
  void* pending[kDepth] = {};
  for (int k = 0; k < kDepth && k < o.latencyIterations; ++k)
    BENCH_CHECK(peer.postRecv(recvComm, 1, &pingData[k], &pingSize, &pingTag, &smallRecvMh, &pending[k]));
  std::vector<double> roundTrips(static_cast<size_t>(o.latencyIterations));  // allocated before timing
  auto start = Clock::now();
  for (int i = 0; i < o.latencyIterations; ++i) {
    auto iterationStart = Clock::now();
    void* request = nullptr;
    int size = 0;
    int k = i % kDepth;
    bool repost = i + kDepth < o.latencyIterations;
    if (streamReceiver) {
      BENCH_CHECK(peer.wait(pending[k], &size));
      BENCH_CHECK(peer.postSend(sendComm, small, 8, 2, smallSendMh, &request));
      if (repost) BENCH_CHECK(peer.postRecv(recvComm, 1, &pingData[k], &pingSize, &pingTag, &smallRecvMh, &pending[k]));
      BENCH_CHECK(peer.wait(request, &size));
    } else {
      BENCH_CHECK(peer.postSend(sendComm, small, 8, 2, smallSendMh, &request));
      BENCH_CHECK(peer.wait(pending[k], &size));
      roundTrips[static_cast<size_t>(i)] = seconds(iterationStart);
      BENCH_CHECK(peer.wait(request, &size));
      if (repost) BENCH_CHECK(peer.postRecv(recvComm, 1, &pingData[k], &pingSize, &pingTag, &smallRecvMh, &pending[k]));
      continue;
    }
    roundTrips[static_cast<size_t>(i)] = seconds(iterationStart);
  }
  double latencyUs = seconds(start) * 1e6 / (2.0 * o.latencyIterations);
  // The median half round trip is what ib_send_lat calls "typical".
  std::sort(roundTrips.begin(), roundTrips.end());
  double medianUs = roundTrips[roundTrips.size() / 2] * 1e6 / 2.0;
  if (!streamReceiver) {
    ncclNetProperties_v12_t props{};
    peer.net->getProperties(dev, &props);
    std::printf(
        "bench: device=%s bw_MBps=%.2f (%zu B x %d, window %d) lat_us=%.2f typical, %.2f average "
        "(8 B x %d, half round trip)\n",
        props.name, mbps, o.bytes, o.iterations, o.window, medianUs, latencyUs, o.latencyIterations);
  }
  channel.sendValue(sync);
  channel.recvValue(&sync);
  peer.net->deregMr(streamReceiver ? recvComm : sendComm, mh);
  peer.net->deregMr(sendComm, smallSendMh);
  peer.net->deregMr(recvComm, smallRecvMh);
  peer.net->closeSend(sendComm);
  peer.net->closeRecv(recvComm);
  peer.net->closeListen(listenComm);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--plugin")
      o.plugin = value();
    else if (arg == "--send-hca")
      o.sendHca = value();
    else if (arg == "--recv-hca")
      o.recvHca = value();
    else if (arg == "--fuse")
      o.fuse = true;
    else if (arg == "--bytes")
      o.bytes = std::strtoull(value().c_str(), nullptr, 0);
    else if (arg == "--iterations")
      o.iterations = std::atoi(value().c_str());
    else if (arg == "--window")
      o.window = std::atoi(value().c_str());
    else if (arg == "--latency-iterations")
      o.latencyIterations = std::atoi(value().c_str());
    else if (arg == "--qps")
      o.qps = value();
    else {
      std::fprintf(stderr, "unknown option %s (see the comment atop ib_bench.cc)\n", arg.c_str());
      return 2;
    }
  }
  if (o.bytes == 0 || o.iterations < 1 || o.window < 1 || o.window > 32 || o.latencyIterations < 1) {
    std::fprintf(stderr, "need --bytes > 0, --iterations >= 1, --window 1..32, --latency-iterations >= 1\n");
    return 2;
  }
  std::vector<std::pair<std::string, std::string>> recvEnv, sendEnv;
  if (!o.recvHca.empty()) recvEnv.emplace_back("NCCL_IB_HCA", o.recvHca);
  if (!o.sendHca.empty()) sendEnv.emplace_back("NCCL_IB_HCA", o.sendHca);
  if (!o.qps.empty()) {
    recvEnv.emplace_back("NCCL_IB_QPS_PER_CONNECTION", o.qps);
    sendEnv.emplace_back("NCCL_IB_QPS_PER_CONNECTION", o.qps);
  }
  PairResult r = runPair(
      recvEnv, [&](const Channel& c) { return runSide(o, c, true); }, sendEnv,
      [&](const Channel& c) { return runSide(o, c, false); }, std::chrono::seconds(300));
  if (r.timedOut || r.first != 0 || r.second != 0) {
    std::fprintf(stderr, "bench failed: receiver status %d, sender status %d%s\n", r.first, r.second,
                 r.timedOut ? " (timed out)" : "");
    return 1;
  }
  return 0;
}
