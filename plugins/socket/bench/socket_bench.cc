// socket_bench.cc: nns-socket-bench: point-to-point bandwidth (1 KiB .. 256 MiB) and 8-byte latency of a net plugin
// between two processes, next to a raw TCP ping-pong measured in the same run.
//
// Usage: nns-socket-bench --plugin PATH [--min-bytes N] [--max-bytes N] [--seconds S] [--window W]
//                         [--latency-iterations N]
// The plugin reads its own environment (NCCL_SOCKET_IFNAME=lo keeps everything on loopback).
#include <dlfcn.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <nccl_net/net.h>

namespace {

using Clock = std::chrono::steady_clock;

// The receiver keeps one slot per message in flight; above this much memory the window shrinks (big messages need
// no deep window to fill the pipe).
constexpr size_t kReceiveMemoryBytes = size_t{512} << 20;
int windowFor(size_t size, int window) {
  return static_cast<int>(std::clamp<size_t>(kReceiveMemoryBytes / size, 1, static_cast<size_t>(window)));
}

struct Options {
  std::string plugin;
  size_t minBytes = 1024;
  size_t maxBytes = size_t{256} << 20;
  double seconds = 1.0;
  int window = 8;  // messages in flight, as NCCL's NCCL_STEPS
  int latencyIterations = 20000;
};

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "nns-socket-bench: %s\n", what);
  std::fflush(stderr);
  _exit(1);
}

void check(ncclResult_t result, const char* what) {
  if (result != ncclSuccess) {
    std::fprintf(stderr, "nns-socket-bench: %s returned %d\n", what, result);
    _exit(1);
  }
}

bool writeAll(int fd, const void* data, size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, bytes, size);
    if (n <= 0) return false;
    bytes += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}
bool readAll(int fd, void* data, size_t size) {
  auto* bytes = static_cast<unsigned char*>(data);
  while (size > 0) {
    pollfd waiter{fd, POLLIN, 0};
    if (poll(&waiter, 1, 30000) <= 0) return false;  // every wait is bounded
    ssize_t n = ::read(fd, bytes, size);
    if (n <= 0) return false;
    bytes += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// One process's view: a send comm to the peer and a receive comm from it.
struct Endpoint {
  const ncclNet_v12_t* net = nullptr;
  void* ctx = nullptr;
  void* sendComm = nullptr;
  void* recvComm = nullptr;
  void* listenComm = nullptr;

  void wait(void* request, int* size) {
    auto deadline = Clock::now() + std::chrono::seconds(60);
    int done = 0;
    while (!done) {
      check(net->test(request, &done, size), "test");
      if (!done && Clock::now() > deadline) die("a request did not complete within 60 s");
      // As NCCL's proxy thread does when a pass made no progress: let the plugin's helper threads run.
      if (!done) sched_yield();
    }
  }
  void* send(void* data, size_t size) {
    void* request = nullptr;
    while (request == nullptr) check(net->isend(sendComm, data, size, 0, nullptr, nullptr, &request), "isend");
    return request;
  }
  void* recv(void* data, size_t size) {
    void* request = nullptr;
    int tag = 0;
    void* mhandle = nullptr;
    while (request == nullptr) check(net->irecv(recvComm, 1, &data, &size, &tag, &mhandle, nullptr, &request), "irecv");
    return request;
  }
  void close() {
    net->closeSend(sendComm);
    net->closeRecv(recvComm);
    net->closeListen(listenComm);
  }
};

// Loads the plugin, listens, swaps handles with the peer over pipes, then connects and accepts.
Endpoint connectEndpoint(const Options& options, int handleOut, int handleIn) {
  Endpoint e;
  void* library = dlopen(options.plugin.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) die(dlerror());
  e.net = static_cast<const ncclNet_v12_t*>(dlsym(library, "ncclNetPlugin_v12"));
  if (e.net == nullptr) die("no ncclNetPlugin_v12 in the plugin");
  check(e.net->init(&e.ctx, 1, nullptr, nullptr, nullptr), "init");
  unsigned char mine[NCCL_NET_HANDLE_MAXSIZE] = {}, theirs[NCCL_NET_HANDLE_MAXSIZE];
  check(e.net->listen(e.ctx, 0, mine, &e.listenComm), "listen");
  if (!writeAll(handleOut, mine, sizeof(mine)) || !readAll(handleIn, theirs, sizeof(theirs))) die("handle exchange");
  ncclNetDeviceHandle_v12_t* devHandle = nullptr;
  auto deadline = Clock::now() + std::chrono::seconds(30);
  while (e.sendComm == nullptr || e.recvComm == nullptr) {
    if (e.sendComm == nullptr) check(e.net->connect(e.ctx, 0, theirs, &e.sendComm, &devHandle), "connect");
    if (e.recvComm == nullptr) check(e.net->accept(e.listenComm, &e.recvComm, &devHandle), "accept");
    if (Clock::now() > deadline) die("connection not established within 30 s");
  }
  return e;
}

// Sender side of one bandwidth point: `count` messages with `window` in flight, then the receiver's 8-byte ack.
double timedBurst(Endpoint& e, std::vector<unsigned char>& buffer, size_t size, long count, int window) {
  uint64_t ack = 0;
  auto start = Clock::now();
  std::vector<void*> inFlight;
  for (long sent = 0; sent < count || !inFlight.empty();) {
    while (sent < count && static_cast<int>(inFlight.size()) < window) {
      inFlight.push_back(e.send(buffer.data(), size));
      ++sent;
    }
    e.wait(inFlight.front(), nullptr);
    inFlight.erase(inFlight.begin());
  }
  e.wait(e.recv(&ack, sizeof(ack)), nullptr);
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void receiveBurst(Endpoint& e, std::vector<unsigned char>& buffer, size_t size, long count, int window) {
  std::vector<void*> inFlight;
  for (long posted = 0; posted < count || !inFlight.empty();) {
    while (posted < count && static_cast<int>(inFlight.size()) < window) {
      // Receives in flight land in distinct slots, as NCCL's do: two never write the same bytes at once.
      inFlight.push_back(e.recv(buffer.data() + static_cast<size_t>(posted % window) * size, size));
      ++posted;
    }
    int received = 0;
    e.wait(inFlight.front(), &received);
    if (static_cast<size_t>(received) != size) die("wrong received size");
    inFlight.erase(inFlight.begin());
  }
  uint64_t ack = 1;
  e.wait(e.send(&ack, sizeof(ack)), nullptr);
}

// The initiator of each bandwidth point picks the message count from a short calibration and tells the peer.
void bandwidthInitiator(Endpoint& e, const Options& options) {
  std::vector<unsigned char> buffer(options.maxBytes, 1);
  std::printf("# bandwidth: up to %d messages in flight (fewer above %zu MiB of receive slots), one direction\n",
              options.window, kReceiveMemoryBytes >> 20);
  std::printf("%12s %10s %10s %10s %10s\n", "bytes", "count", "window", "seconds", "GB/s");
  for (size_t size = options.minBytes; size <= options.maxBytes; size *= 4) {
    // Calibrate with bursts that double until one takes a tenth of the target time, so the final ack's round
    // trip does not distort the per-message estimate of small messages.
    int window = windowFor(size, options.window);
    long calibration = 4;
    double perMessage = 0;
    uint64_t header[2] = {size, 0};
    for (;;) {
      header[1] = static_cast<uint64_t>(calibration);
      e.wait(e.send(header, sizeof(header)), nullptr);
      double seconds = timedBurst(e, buffer, size, calibration, window);
      perMessage = seconds / static_cast<double>(calibration);
      if (seconds >= options.seconds / 10 || calibration >= 1000000) break;
      calibration *= 2;
    }
    long count = std::clamp(static_cast<long>(options.seconds / perMessage), 4L, 4000000L);
    header[1] = static_cast<uint64_t>(count);
    e.wait(e.send(header, sizeof(header)), nullptr);
    double seconds = timedBurst(e, buffer, size, count, window);
    double gbps = static_cast<double>(size) * static_cast<double>(count) / seconds / 1e9;
    std::printf("%12zu %10ld %10d %10.4f %10.3f\n", size, count, window, seconds, gbps);
    std::printf("BW %zu %.4f\n", size, gbps);
    std::fflush(stdout);
  }
  uint64_t stop[2] = {0, 0};
  e.wait(e.send(stop, sizeof(stop)), nullptr);
}

void bandwidthResponder(Endpoint& e, const Options& options) {
  std::vector<unsigned char> buffer(std::min(options.maxBytes * static_cast<size_t>(options.window),
                                             std::max(kReceiveMemoryBytes, options.maxBytes)));
  for (;;) {
    uint64_t header[2];
    e.wait(e.recv(header, sizeof(header)), nullptr);
    if (header[1] == 0) return;
    receiveBurst(e, buffer, header[0], static_cast<long>(header[1]), windowFor(header[0], options.window));
  }
}

struct LatencySummary {
  double p50, average, minimum;
};
LatencySummary summarize(std::vector<double>& oneWayMicroseconds) {
  std::sort(oneWayMicroseconds.begin(), oneWayMicroseconds.end());
  double sum = 0;
  for (double v : oneWayMicroseconds) sum += v;
  return {oneWayMicroseconds[oneWayMicroseconds.size() / 2], sum / static_cast<double>(oneWayMicroseconds.size()),
          oneWayMicroseconds.front()};
}

// 8-byte ping-pong over the plugin; one-way latency = round trip / 2.
void latencyInitiator(Endpoint& e, const Options& options) {
  uint64_t ping = 0, pong = 0;
  std::vector<double> samples;
  int warmup = std::max(10, options.latencyIterations / 10);
  for (int i = 0; i < warmup + options.latencyIterations; ++i) {
    auto start = Clock::now();
    void* recvRequest = e.recv(&pong, sizeof(pong));
    e.wait(e.send(&ping, sizeof(ping)), nullptr);
    e.wait(recvRequest, nullptr);
    if (i >= warmup) samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() / 2);
  }
  LatencySummary s = summarize(samples);
  std::printf("# latency 8 B over the plugin, one-way (round trip / 2), %d iterations\n", options.latencyIterations);
  std::printf("LAT plugin p50 %.2f avg %.2f min %.2f us\n", s.p50, s.average, s.minimum);
  std::fflush(stdout);
}
void latencyResponder(Endpoint& e, const Options& options) {
  uint64_t value = 0;
  int warmup = std::max(10, options.latencyIterations / 10);
  for (int i = 0; i < warmup + options.latencyIterations; ++i) {
    e.wait(e.recv(&value, sizeof(value)), nullptr);
    e.wait(e.send(&value, sizeof(value)), nullptr);
  }
}

// Receives exactly `size` bytes by polling a non-blocking recv and yielding in between, the way the plugin's
// requests are waited for above: the raw baseline then differs from the plugin only by the plugin's own work.
bool pollingReceive(int fd, void* data, size_t size) {
  auto* bytes = static_cast<unsigned char*>(data);
  auto deadline = Clock::now() + std::chrono::seconds(30);
  while (size > 0) {
    ssize_t n = ::recv(fd, bytes, size, MSG_DONTWAIT);
    if (n > 0) {
      bytes += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return false;
    if (Clock::now() > deadline) return false;
    sched_yield();
  }
  return true;
}

int rawListen(sockaddr_in* address) {
  int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  *address = sockaddr_in{};
  address->sin_family = AF_INET;
  address->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(*address);
  if (bind(listener, reinterpret_cast<sockaddr*>(address), sizeof(*address)) != 0 || ::listen(listener, 2) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(address), &length) != 0)
    die("raw TCP listen");
  return listener;
}
int rawConnect(const sockaddr_in& address) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) die("raw TCP connect");
  return fd;
}
int rawAccept(int listener) {
  int fd = accept(listener, nullptr, nullptr);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// The same ping-pong over plain TCP sockets on 127.0.0.1 with Nagle off: the floor for the plugin. With one
// connection the reply rides the same socket (the classic ping-pong: data and ACKs share packets); with two, each
// direction has its own connection, the only shape a net plugin has (its send and receive comms are one-way).
void rawTcpPingPong(const Options& options, bool twoConnections) {
  sockaddr_in forward{}, backward{};
  int forwardListener = rawListen(&forward);
  int backwardListener = twoConnections ? rawListen(&backward) : -1;
  int warmup = std::max(10, options.latencyIterations / 10);
  int total = warmup + options.latencyIterations;
  std::fflush(stdout);
  pid_t echo = fork();
  if (echo == 0) {
    int in = rawAccept(forwardListener);
    int out = twoConnections ? rawConnect(backward) : in;
    uint64_t value;
    for (int i = 0; i < total; ++i)
      if (!pollingReceive(in, &value, sizeof(value)) || !writeAll(out, &value, sizeof(value))) _exit(1);
    _exit(0);
  }
  int out = rawConnect(forward);
  int in = twoConnections ? rawAccept(backwardListener) : out;
  std::vector<double> samples;
  uint64_t value = 0;
  for (int i = 0; i < total; ++i) {
    auto start = Clock::now();
    if (!writeAll(out, &value, sizeof(value)) || !pollingReceive(in, &value, sizeof(value))) die("raw TCP ping-pong");
    if (i >= warmup) samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() / 2);
  }
  close(out);
  if (twoConnections) close(in);
  close(forwardListener);
  if (twoConnections) close(backwardListener);
  int status = 0;
  waitpid(echo, &status, 0);
  LatencySummary s = summarize(samples);
  std::printf("# latency 8 B over raw TCP, %s (polled non-blocking recv, TCP_NODELAY), one-way, %d iterations\n",
              twoConnections ? "one connection per direction" : "one connection", options.latencyIterations);
  std::printf("LAT %s p50 %.2f avg %.2f min %.2f us\n", twoConnections ? "raw2" : "raw", s.p50, s.average, s.minimum);
  std::fflush(stdout);
}

constexpr const char* kUsage =
    "usage: nns-socket-bench --plugin PATH [--min-bytes N] [--max-bytes N] [--seconds S] [--window W] "
    "[--latency-iterations N]";

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      std::printf("%s\n", kUsage);
      std::exit(0);
    }
    if (i + 1 >= argc) die(("missing value after " + flag).c_str());
    const char* value = argv[++i];
    if (flag == "--plugin")
      o.plugin = value;
    else if (flag == "--min-bytes")
      o.minBytes = std::strtoull(value, nullptr, 0);
    else if (flag == "--max-bytes")
      o.maxBytes = std::strtoull(value, nullptr, 0);
    else if (flag == "--seconds")
      o.seconds = std::strtod(value, nullptr);
    else if (flag == "--window")
      o.window = std::atoi(value);
    else if (flag == "--latency-iterations")
      o.latencyIterations = std::atoi(value);
    else
      die(("unknown option " + flag).c_str());
  }
  if (o.plugin.empty() || o.minBytes == 0 || o.maxBytes < o.minBytes || o.window < 1 || o.latencyIterations < 1)
    die(kUsage);
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  Options options = parse(argc, argv);
  int toResponder[2], toInitiator[2];
  if (pipe(toResponder) != 0 || pipe(toInitiator) != 0) die("pipe");
  std::fflush(stdout);
  pid_t responder = fork();
  if (responder == 0) {
    Endpoint e = connectEndpoint(options, toInitiator[1], toResponder[0]);
    latencyResponder(e, options);
    bandwidthResponder(e, options);
    e.close();
    _exit(0);
  }
  Endpoint e = connectEndpoint(options, toResponder[1], toInitiator[0]);
  latencyInitiator(e, options);
  bandwidthInitiator(e, options);
  e.close();
  int status = 0;
  waitpid(responder, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) die("the responder process failed");
  rawTcpPingPong(options, false);
  rawTcpPingPong(options, true);
  return 0;
}
