// send_offset_bench.cc: why nns-socket frames its wire in 64-byte units (socket_transport.hpp, kWireAlign).
//
// Two measurements, no plugin involved:
//  copy  `rep movsb` (what the kernel's copy from user memory uses on x86-64 CPUs with fast strings) from a
//        page-aligned source to a destination lying D bytes further on, mod 4096, for several D.
//  tcp   two processes on loopback, each bound to a CPU of its own when there are two, exchange payloads in lockstep:
//        each round sends an H-byte header on one TCP connection, then the payload on another (as the plugin's
//        control and data sockets do) while reading the peer's, then reads the peer's header. The thread's small header
//        moves where the kernel puts the payload's bytes (the thread's page fragment); the round time is printed for
//        each H.
//
// Usage: nns-send-offset-bench [--rounds N] [--payload BYTES] [--headers H,H,...] [--skip-copy]
// Prints one line per case; exits 1 on bad arguments or a socket error.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "nns-send-offset-bench: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<unsigned char[], FreeDeleter>;

Buffer pageAligned(size_t bytes) {
  auto* memory = static_cast<unsigned char*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096));
  if (memory == nullptr) die("aligned_alloc");
  std::memset(memory, 0x5a, bytes);
  return Buffer(memory);
}

void copyBytes(void* dst, const void* src, size_t n) {
#if defined(__x86_64__)
  __asm__ volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(n) : : "memory");
#else
  std::memcpy(dst, src, n);
#endif
}

// GB/s of 28 KiB copies from a page-aligned 512 KiB source into a 64 MiB destination, each copy starting `distance`
// bytes past a page boundary (so that destination - source = distance, mod 4096). Best of 5 passes.
void copyCase(size_t distance) {
  constexpr size_t kCopy = 28 << 10, kStride = 32 << 10, kSource = 512 << 10, kDestination = 64 << 20;
  Buffer source = pageAligned(kSource), destination = pageAligned(kDestination + kStride);
  double best = 1e30;
  for (int pass = 0; pass < 5; ++pass) {
    auto start = Clock::now();
    for (size_t at = 0; at + kStride <= kDestination; at += kStride)
      copyBytes(destination.get() + at + distance, source.get() + at % kSource, kCopy);
    best = std::min(best, secondsSince(start));
  }
  constexpr size_t kCopies = kDestination / kStride;
  const double bytes = static_cast<double>(kCopies * kCopy);
  std::printf("copy  destination - source = %4zu mod 4096: %6.1f GB/s\n", distance, bytes / best / 1e9);
}

int listenOn(uint16_t* port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) die("socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 || listen(fd, 4) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0)
    die("bind/listen on 127.0.0.1");
  *port = ntohs(address.sin_port);
  return fd;
}

int connectTo(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) die("socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) die("connect");
  return fd;
}

void prepare(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (fcntl(fd, F_SETFL, O_NONBLOCK) != 0) die("fcntl");
}

// One non-blocking attempt at bytes [*done, bytes) of `data`; dies on a socket error or the peer's close.
void sendStep(int fd, const unsigned char* data, size_t bytes, size_t* done) {
  ssize_t n = send(fd, data + *done, bytes - *done, MSG_NOSIGNAL);
  if (n > 0)
    *done += static_cast<size_t>(n);
  else if (n < 0 && errno != EAGAIN && errno != EINTR)
    die("send");
}
void recvStep(int fd, unsigned char* data, size_t bytes, size_t* done) {
  ssize_t n = recv(fd, data + *done, bytes - *done, 0);
  if (n > 0)
    *done += static_cast<size_t>(n);
  else if (n == 0)
    die("the peer closed");
  else if (errno != EAGAIN && errno != EINTR)
    die("recv");
}

void sendAll(int fd, const unsigned char* data, size_t bytes) {
  for (size_t done = 0; done < bytes;) sendStep(fd, data, bytes, &done);
}
void recvAll(int fd, unsigned char* data, size_t bytes) {
  for (size_t done = 0; done < bytes;) recvStep(fd, data, bytes, &done);
}

// Sends `bytes` on `out` while reading as many from `in`, so that neither process waits for the other to read.
void exchange(int out, const unsigned char* sending, int in, unsigned char* receiving, size_t bytes) {
  size_t sent = 0, received = 0;
  while (sent < bytes || received < bytes) {
    if (sent < bytes) sendStep(out, sending, bytes, &sent);
    if (received < bytes) recvStep(in, receiving, bytes, &received);
  }
}

void bindToCpu(int rank) {
  cpu_set_t usable;
  if (sched_getaffinity(0, sizeof(usable), &usable) != 0 || CPU_COUNT(&usable) < 2) return;
  int seen = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &usable) || seen++ != rank) continue;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    sched_setaffinity(0, sizeof(one), &one);
    return;
  }
}

// One exchange per header size; prints rank 0's mean round time. Rank 1 is a child process.
void tcpCases(const std::vector<size_t>& headers, size_t payload, int rounds) {
  // One listener per direction and socket, each accepted only by the process it leads to.
  uint16_t ports[2][2] = {};  // [receiving rank][control, data]
  int listeners[2][2];
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 2; ++k) listeners[r][k] = listenOn(&ports[r][k]);
  pid_t child = fork();
  if (child < 0) die("fork");
  const int rank = child == 0 ? 1 : 0, peer = 1 - rank;
  const int controlOut = connectTo(ports[peer][0]), dataOut = connectTo(ports[peer][1]);
  const int controlIn = accept(listeners[rank][0], nullptr, nullptr);
  const int dataIn = accept(listeners[rank][1], nullptr, nullptr);
  if (controlIn < 0 || dataIn < 0) die("accept");
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 2; ++k) close(listeners[r][k]);
  for (int fd : {controlOut, dataOut, controlIn, dataIn}) prepare(fd);
  bindToCpu(rank);
  Buffer out = pageAligned(payload), in = pageAligned(payload), header = pageAligned(4096);
  for (size_t h : headers) {
    double total = 0;
    const int warmup = rounds / 10 + 1;
    for (int round = 0; round < warmup + rounds; ++round) {
      auto start = Clock::now();
      sendAll(controlOut, header.get(), h);
      exchange(dataOut, out.get(), dataIn, in.get(), payload);
      recvAll(controlIn, header.get(), h);
      if (round >= warmup) total += secondsSince(start);
    }
    if (rank == 0)
      std::printf("tcp   %4zu-byte header, then %zu-byte payload each way: %8.1f us per round\n", h, payload,
                  total / rounds * 1e6);
  }
  if (rank == 1) std::_Exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "nns-send-offset-bench: the second process failed\n");
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  int rounds = 1000;
  size_t payload = 512 << 10;
  std::vector<size_t> headers = {16, 48, 64, 128};
  bool copy = true;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "nns-send-offset-bench: %s needs a value\n", arg.c_str());
        std::exit(1);
      }
      return argv[++i];
    };
    if (arg == "--rounds") {
      rounds = std::atoi(value().c_str());
    } else if (arg == "--payload") {
      payload = std::strtoull(value().c_str(), nullptr, 10);
    } else if (arg == "--headers") {
      headers.clear();
      std::string list = value();
      for (size_t at = 0; at <= list.size();) {
        size_t comma = list.find(',', at);
        if (comma == std::string::npos) comma = list.size();
        headers.push_back(std::strtoull(list.substr(at, comma - at).c_str(), nullptr, 10));
        at = comma + 1;
      }
    } else if (arg == "--skip-copy") {
      copy = false;
    } else {
      std::fprintf(stderr,
                   "usage: nns-send-offset-bench [--rounds N] [--payload BYTES] [--headers H,H,...] [--skip-copy]\n");
      return 1;
    }
  }
  for (size_t h : headers) {
    if (h < 1 || h > 4096) {
      std::fprintf(stderr, "nns-send-offset-bench: a header is 1 to 4096 bytes\n");
      return 1;
    }
  }
  if (rounds < 1 || payload < 1 || payload > (size_t{1} << 30)) {
    std::fprintf(stderr, "nns-send-offset-bench: --rounds >= 1, --payload 1 .. 1 GiB\n");
    return 1;
  }
  if (copy)
    for (size_t distance : {0, 16, 48, 64, 128, 2048}) copyCase(distance);
  tcpCases(headers, payload, rounds);
  return 0;
}
