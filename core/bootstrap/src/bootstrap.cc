// bootstrap.cc: launcher environment parsing and the rank-0 TCP rendezvous (length-prefixed messages, deadlines).
#include "nns/core/bootstrap.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace nns::core {

namespace {

using Clock = std::chrono::steady_clock;

// How long a wait polls before it sleeps, where the ranks of this machine do not outnumber its CPUs.
constexpr auto kSpinBeforeSleep = std::chrono::microseconds(200);

const char* firstSet(std::initializer_list<const char*> names, const char** which) {
  for (const char* name : names) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0') {
      if (which != nullptr) *which = name;
      return value;
    }
  }
  return nullptr;
}

bool parseInt(const char* text, int* out) {
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < 0 || value > 1 << 24) return false;
  *out = static_cast<int>(value);
  return true;
}

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("bootstrap: " + what);
}

int remainingMs(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

// connect() that gives up at `deadline` (a root whose accept queue is full drops the SYN, and a blocking connect
// would wait out the kernel's retries, about two minutes). Returns 0 or the errno.
int connectBefore(int fd, const sockaddr_storage& address, socklen_t length, Clock::time_point deadline) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return errno;
  int err = 0;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address), length) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int ready;
      do {
        ready = poll(&p, 1, remainingMs(deadline));
      } while (ready < 0 && errno == EINTR);
      socklen_t size = sizeof(err);
      if (ready == 0)
        err = ETIMEDOUT;
      else if (ready < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &size) != 0)
        err = errno;
    }
  }
  if (err == 0 && fcntl(fd, F_SETFL, flags) != 0) err = errno;
  return err;
}

// With `spin`, polls for that long before sleeping in poll(): the ranks then leave a barrier within microseconds of
// each other, where a rank woken from its sleep comes back tens of microseconds late and the first collective after
// the barrier waits for it (MPI's barriers spin too).
void waitFor(int fd, short events, Clock::time_point deadline, const char* what,
             std::chrono::microseconds spin = std::chrono::microseconds(0)) {
  pollfd p{fd, events, 0};
  for (auto spinUntil = Clock::now() + spin; Clock::now() < spinUntil;)
    if (poll(&p, 1, 0) > 0) return;
  for (;;) {
    int ready = poll(&p, 1, remainingMs(deadline));
    if (ready > 0) return;
    if (ready == 0) fail(std::string("timed out ") + what);
    if (errno != EINTR) fail(std::string("poll failed ") + what + ": " + std::strerror(errno));
  }
}

void sendAll(int fd, const void* data, size_t bytes, Clock::time_point deadline,
             std::chrono::microseconds spin = std::chrono::microseconds(0)) {
  auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    waitFor(fd, POLLOUT, deadline, "sending", spin);
    ssize_t n = send(fd, p, bytes, MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) fail(std::string("send failed: ") + std::strerror(errno));
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void recvAll(int fd, void* data, size_t bytes, Clock::time_point deadline,
             std::chrono::microseconds spin = std::chrono::microseconds(0)) {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    waitFor(fd, POLLIN, deadline, "receiving", spin);
    ssize_t n = recv(fd, p, bytes, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n == 0) fail("a peer closed the bootstrap connection (rank died?)");
    if (n < 0) fail(std::string("recv failed: ") + std::strerror(errno));
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void sendMessage(int fd, const std::string& text, Clock::time_point deadline, std::chrono::microseconds spin) {
  uint32_t length = static_cast<uint32_t>(text.size());
  sendAll(fd, &length, sizeof(length), deadline, spin);
  sendAll(fd, text.data(), text.size(), deadline, spin);
}

std::string recvMessage(int fd, Clock::time_point deadline, std::chrono::microseconds spin) {
  uint32_t length = 0;
  recvAll(fd, &length, sizeof(length), deadline, spin);
  if (length > (64u << 20)) fail("oversized bootstrap message");
  std::string text(length, '\0');
  recvAll(fd, text.data(), length, deadline, spin);
  return text;
}

// What tells this machine apart (one kernel: one set of CPUs, even across network namespaces): its boot id, else
// its host name.
std::string machineId() {
  char id[64] = {};
  if (FILE* file = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    bool read = std::fgets(id, sizeof(id), file) != nullptr;
    std::fclose(file);
    if (read && id[0] != '\0') return id;
  }
  gethostname(id, sizeof(id) - 1);
  return id;
}

sockaddr_storage resolve(const std::string& host, int port, socklen_t* length) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &result);
  if (rc != 0 || result == nullptr) fail("cannot resolve root address " + host + ": " + gai_strerror(rc));
  sockaddr_storage address{};
  std::memcpy(&address, result->ai_addr, result->ai_addrlen);
  *length = result->ai_addrlen;
  freeaddrinfo(result);
  return address;
}

// What a rank tells rank 0 when it joins: who it is, the size it expects, and its job ($NNS_JOB_ID), so that a
// rank of another job that reached this port (a reused MASTER_PORT, two launches at once) is turned away.
struct JoinMessage {
  int32_t rank;
  int32_t size;
  uint64_t job;
};

uint64_t jobId() {
  const char* text = std::getenv("NNS_JOB_ID");
  if (text == nullptr) return 0;
  uint64_t hash = 1469598103934665603ull;  // FNV-1a
  for (const char* c = text; *c != '\0'; ++c) hash = (hash ^ static_cast<unsigned char>(*c)) * 1099511628211ull;
  return hash;
}

// A listening socket handed down by the launcher ($NNS_ROOT_LISTEN_FD, nccl-net-run): the port stays reserved from
// the moment it is chosen, so no other process can take it before rank 0 listens. Taken once per process.
// It is used only if it listens on the root's port; otherwise it is closed and rank 0 binds as usual.
int inheritedListener(int port) {
  const char* text = std::getenv("NNS_ROOT_LISTEN_FD");
  if (text == nullptr) return -1;
  int fd = std::atoi(text);
  unsetenv("NNS_ROOT_LISTEN_FD");
  int accepting = 0;
  socklen_t size = sizeof(accepting);
  if (fd <= 2 || getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &size) != 0 || !accepting) return -1;
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  int boundPort = -1;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) == 0)
    boundPort = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                  : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (boundPort != port) {
    close(fd);
    return -1;
  }
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  return fd;
}

}  // namespace

bool launchInfoFromEnvironment(LaunchInfo* info, std::string* error) {
  const char* rankVar = nullptr;
  const char* sizeVar = nullptr;
  const char* rank = firstSet({"NNS_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "PMI_RANK", "RANK"}, &rankVar);
  const char* size =
      firstSet({"NNS_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS", "PMI_SIZE", "WORLD_SIZE"}, &sizeVar);
  if (rank == nullptr || size == nullptr) {
    *error =
        "no rank/size in the environment (set NNS_RANK and NNS_WORLD_SIZE, or run under mpirun, srun or "
        "torchrun, or use nccl-net-run)";
    return false;
  }
  if (!parseInt(rank, &info->rank) || !parseInt(size, &info->size) || info->size < 1 || info->rank >= info->size) {
    *error = std::string("bad rank/size: ") + rankVar + "=" + rank + " " + sizeVar + "=" + size;
    return false;
  }
  info->source = std::string(rankVar) + "/" + sizeVar;
  auto isPort = [](int port) { return port >= 1 && port <= 65535; };
  if (const char* root = std::getenv("NNS_ROOT_ADDR")) {
    std::string text(root);
    size_t colon = text.rfind(':');
    if (colon == std::string::npos || !parseInt(text.c_str() + colon + 1, &info->rootPort) || !isPort(info->rootPort)) {
      *error = "NNS_ROOT_ADDR must be host:port (port 1..65535), not " + text;
      return false;
    }
    info->rootHost = text.substr(0, colon);
    if (info->rootHost.size() > 2 && info->rootHost.front() == '[')
      info->rootHost = info->rootHost.substr(1, info->rootHost.size() - 2);
  } else if (const char* host = std::getenv("MASTER_ADDR")) {
    const char* port = std::getenv("MASTER_PORT");
    info->rootHost = host;
    if (port == nullptr || !parseInt(port, &info->rootPort) || !isPort(info->rootPort)) {
      *error = "MASTER_ADDR is set but MASTER_PORT is missing or not a port (1..65535)";
      return false;
    }
  } else if (info->size == 1) {
    // A one-rank job meets no one: it needs no root address (mpirun -np 1, a single torchrun worker, a test).
    info->rootHost = "127.0.0.1";
    info->rootPort = 0;
  } else {
    *error = "no root address: set NNS_ROOT_ADDR=host:port (or MASTER_ADDR and MASTER_PORT)";
    return false;
  }
  return true;
}

Bootstrap::Bootstrap(const LaunchInfo& info, std::chrono::milliseconds timeout)
    : rank_(info.rank), size_(info.size), timeout_(timeout) {
  if (size_ == 1) return;
  auto deadline = Clock::now() + timeout_;
  socklen_t length = 0;
  sockaddr_storage root = resolve(info.rootHost, info.rootPort, &length);
  const JoinMessage mine{rank_, size_, jobId()};
  if (rank_ == 0) {
    int listener = inheritedListener(info.rootPort);
    if (listener < 0) {
      listener = socket(root.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      int on = 1;
      setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
      if (bind(listener, reinterpret_cast<sockaddr*>(&root), length) != 0 || ::listen(listener, size_) != 0) {
        int err = errno;
        close(listener);
        fail("rank 0 cannot listen on " + info.rootHost + ":" + std::to_string(info.rootPort) + ": " +
             std::strerror(err));
      }
    }
    memberSockets_.assign(size_, -1);
    int arrived = 1;
    while (arrived < size_) {
      try {
        waitFor(listener, POLLIN, deadline, "waiting for ranks");
      } catch (const std::runtime_error&) {
        std::string missing;
        for (int r = 1; r < size_; ++r)
          if (memberSockets_[r] < 0) missing += (missing.empty() ? "" : ",") + std::to_string(r);
        close(listener);
        fail("rank(s) " + missing + " did not arrive within " + std::to_string(timeout_.count()) + " ms");
      }
      int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      JoinMessage join{-1, -1, 0};
      try {
        recvAll(fd, &join, sizeof(join), std::min(deadline, Clock::now() + std::chrono::seconds(5)));
      } catch (const std::runtime_error&) {
        join.rank = -1;  // said nothing in time: not one of ours
      }
      const int peer = join.rank;
      if (peer <= 0 || peer >= size_ || join.size != size_ || join.job != mine.job || memberSockets_[peer] >= 0) {
        // Another job's rank on a reused port, or a stray connection: turn it away and keep waiting for ours.
        std::fprintf(stderr,
                     "nns bootstrap: rank 0 turned away a connection claiming rank %d of %d (job %llx, ours "
                     "%llx, size %d)\n",
                     peer, join.size, static_cast<unsigned long long>(join.job),
                     static_cast<unsigned long long>(mine.job), size_);
        close(fd);
        continue;
      }
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      memberSockets_[peer] = fd;
      ++arrived;
    }
    close(listener);
  } else {
    // Non-root: retry while rank 0 is not listening yet.
    for (;;) {
      int fd = socket(root.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) fail(std::string("rank ") + std::to_string(rank_) + ": socket: " + std::strerror(errno));
      int err = connectBefore(fd, root, length, deadline);
      if (err == 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        rootSocket_ = fd;
        sendAll(fd, &mine, sizeof(mine), deadline);
        break;
      }
      close(fd);
      if (Clock::now() >= deadline)
        fail("rank " + std::to_string(rank_) + " could not reach rank 0 at " + info.rootHost + ":" +
             std::to_string(info.rootPort) + " within " + std::to_string(timeout_.count()) +
             " ms: " + std::strerror(err));
      usleep(20000);
    }
  }
  // Waits poll before they sleep only where each rank can have a CPU of its own: ranks that share one would spin in
  // the time the rank they wait for needs to get there. (8-byte allreduces after the barrier, 20 per run, medians of
  // 10 runs: 2 ranks on 2 CPUs 7.5 us with the spin against 7.95 without; 4 ranks on 2 CPUs 49 against 48, and in
  // an earlier 9-run comparison 54 against 43.)
  const std::string machine = machineId();
  const auto everyone = allGather(machine);
  localRanks_ = static_cast<int>(std::count(everyone.begin(), everyone.end(), machine));
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  spin_ = cpus > 0 && localRanks_ <= cpus ? kSpinBeforeSleep : std::chrono::microseconds(0);
}

Bootstrap::~Bootstrap() {
  if (rootSocket_ >= 0) close(rootSocket_);
  for (int fd : memberSockets_)
    if (fd >= 0) close(fd);
}

std::vector<std::string> Bootstrap::allGather(const std::string& mine) {
  auto deadline = Clock::now() + timeout_;
  std::vector<std::string> all(size_);
  if (size_ == 1) {
    all[0] = mine;
    return all;
  }
  if (rank_ == 0) {
    all[0] = mine;
    for (int r = 1; r < size_; ++r) all[r] = recvMessage(memberSockets_[r], deadline, spin_);
    std::string packed;
    for (const auto& part : all) {
      uint32_t length = static_cast<uint32_t>(part.size());
      packed.append(reinterpret_cast<const char*>(&length), sizeof(length));
      packed += part;
    }
    for (int r = 1; r < size_; ++r) sendMessage(memberSockets_[r], packed, deadline, spin_);
    return all;
  }
  sendMessage(rootSocket_, mine, deadline, spin_);
  std::string packed = recvMessage(rootSocket_, deadline, spin_);
  size_t offset = 0;
  for (int r = 0; r < size_; ++r) {
    uint32_t length = 0;
    if (offset + sizeof(length) > packed.size()) fail("truncated all-gather from rank 0");
    std::memcpy(&length, packed.data() + offset, sizeof(length));
    offset += sizeof(length);
    if (offset + length > packed.size()) fail("truncated all-gather from rank 0");
    all[r] = packed.substr(offset, length);
    offset += length;
  }
  return all;
}

}  // namespace nns::core
