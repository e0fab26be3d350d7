// nccl_net/sdk/socket.hpp: header-only TCP helpers (addresses, interface choice, non-blocking connect/accept/IO).
//
// Shared by the socket plugin and by any plugin that needs a TCP side channel (the IB plugin's QP exchange). Nothing
// here blocks longer than a caller-given timeout, and nothing logs: errors come back as text for the caller's WARN.
#pragma once

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "visibility.hpp"

NCCL_NET_SDK_NAMESPACE_BEGIN

// ---- addresses
// -------------------------------------------------------------------------------------------------------

// An IPv4 or IPv6 socket address that is trivially copyable, so it can travel inside a connection handle.
struct SocketAddress {
  union {
    sockaddr base;
    sockaddr_in v4;
    sockaddr_in6 v6;
  } storage;

  static SocketAddress fromSockaddr(const sockaddr* address) {
    SocketAddress result{};
    if (address->sa_family == AF_INET) std::memcpy(&result.storage.v4, address, sizeof(sockaddr_in));
    if (address->sa_family == AF_INET6) std::memcpy(&result.storage.v6, address, sizeof(sockaddr_in6));
    return result;
  }
  // The loopback address of a family, port 0: handy for tests and for "asked for lo".
  static SocketAddress loopback(int family) {
    SocketAddress result{};
    if (family == AF_INET6) {
      result.storage.v6.sin6_family = AF_INET6;
      result.storage.v6.sin6_addr = in6addr_loopback;
    } else {
      result.storage.v4.sin_family = AF_INET;
      result.storage.v4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    }
    return result;
  }

  int family() const { return storage.base.sa_family; }
  bool valid() const { return family() == AF_INET || family() == AF_INET6; }
  socklen_t length() const { return family() == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in); }
  const sockaddr* get() const { return &storage.base; }
  uint16_t port() const { return ntohs(family() == AF_INET6 ? storage.v6.sin6_port : storage.v4.sin_port); }
  void setPort(uint16_t port) {
    if (family() == AF_INET6) {
      storage.v6.sin6_port = htons(port);
    } else {
      storage.v4.sin_port = htons(port);
    }
  }
  bool isLoopback() const {
    if (family() == AF_INET) return (ntohl(storage.v4.sin_addr.s_addr) >> 24) == 127;
    if (family() == AF_INET6) return IN6_IS_ADDR_LOOPBACK(&storage.v6.sin6_addr);
    return false;
  }
  bool isLinkLocal() const { return family() == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&storage.v6.sin6_addr); }

  // "10.0.0.1:5000", "[fe80::1%2]:5000" (scope as an interface index), or "<invalid>".
  std::string toString() const {
    // snprintf rather than string concatenation: GCC 12 at -O3 reports a false -Wrestrict on `"[" + std::string`.
    char text[INET6_ADDRSTRLEN] = {};
    char out[INET6_ADDRSTRLEN + 24];
    if (family() == AF_INET) {
      inet_ntop(AF_INET, &storage.v4.sin_addr, text, sizeof(text));
      std::snprintf(out, sizeof(out), "%s:%u", text, static_cast<unsigned>(port()));
      return out;
    }
    if (family() == AF_INET6) {
      inet_ntop(AF_INET6, &storage.v6.sin6_addr, text, sizeof(text));
      if (storage.v6.sin6_scope_id != 0) {
        std::snprintf(out, sizeof(out), "[%s%%%u]:%u", text, static_cast<unsigned>(storage.v6.sin6_scope_id),
                      static_cast<unsigned>(port()));
      } else {
        std::snprintf(out, sizeof(out), "[%s]:%u", text, static_cast<unsigned>(port()));
      }
      return out;
    }
    return "<invalid>";
  }
};
static_assert(std::is_trivially_copyable_v<SocketAddress>, "SocketAddress travels in connection handles");
static_assert(sizeof(SocketAddress) == sizeof(sockaddr_in6), "SocketAddress is as large as an IPv6 address");

inline SocketAddress localAddressOf(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return SocketAddress{};
  return SocketAddress::fromSockaddr(reinterpret_cast<sockaddr*>(&address));
}
inline SocketAddress peerAddressOf(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return SocketAddress{};
  return SocketAddress::fromSockaddr(reinterpret_cast<sockaddr*>(&address));
}

// ---- interface selection (NCCL_SOCKET_IFNAME semantics)
// ---------------------------------------------------------------

// "eth,ib" selects interfaces whose name starts with eth or ib; "^docker,lo" every interface except those prefixes;
// "=eth0,eth1" exactly those names; "^=eth0" every interface but eth0. As in NCCL, an entry's ":port" suffix is no
// part of its name ("eth0:1" is eth0: NCCL's list parser shares it with NCCL_IB_HCA, where it names the port, and an
// interface has none); empty entries, ":1" included, are ignored. A list left with no name matches every interface, as
// NCCL's matchIfList does: "=," selects all of them, and "^=" none.
class InterfaceFilter {
 public:
  explicit InterfaceFilter(const std::string& spec) {
    std::string rest = spec;
    if (!rest.empty() && rest[0] == '^') {
      exclude_ = true;
      rest.erase(0, 1);
    }
    if (!rest.empty() && rest[0] == '=') {
      exact_ = true;
      rest.erase(0, 1);
    }
    size_t start = 0;
    while (start <= rest.size()) {
      size_t comma = rest.find(',', start);
      if (comma == std::string::npos) comma = rest.size();
      size_t end = std::min(comma, rest.find(':', start));
      if (end > start) names_.push_back(rest.substr(start, end - start));
      start = comma + 1;
    }
  }
  bool matches(const std::string& interfaceName) const {
    bool listed = names_.empty();
    for (const std::string& name : names_) {
      bool hit = exact_ ? interfaceName == name : interfaceName.compare(0, name.size(), name) == 0;
      if (hit) {
        listed = true;
        break;
      }
    }
    return exclude_ ? !listed : listed;
  }
  bool excludes() const { return exclude_; }
  bool exact() const { return exact_; }
  const std::vector<std::string>& names() const { return names_; }

 private:
  bool exclude_ = false;
  bool exact_ = false;
  std::vector<std::string> names_;
};

// AF_INET, AF_INET6 or AF_UNSPEC from a variable holding "AF_INET"/"AF_INET6" (as NCCL_SOCKET_FAMILY does).
// An unknown value sets *unknown (the caller warns) and means AF_UNSPEC.
inline int socketFamilyFromEnv(const char* variable, bool* unknown = nullptr) {
  if (unknown != nullptr) *unknown = false;
  const char* value = variable != nullptr ? std::getenv(variable) : nullptr;
  if (value == nullptr || *value == '\0') return AF_UNSPEC;
  if (std::strcmp(value, "AF_INET") == 0) return AF_INET;
  if (std::strcmp(value, "AF_INET6") == 0) return AF_INET6;
  if (unknown != nullptr) *unknown = true;
  return AF_UNSPEC;
}

struct NetInterface {
  std::string name;
  SocketAddress address;  // port 0
};

// One address per matching interface that is up, in the order the kernel lists interfaces. IPv4 is preferred over
// IPv6, a global IPv6 over a link-local one. IPv6 loopback (::1) only when the family is forced to AF_INET6, since an
// interface listed by IPv4 already covers loopback.
inline std::vector<NetInterface> listInterfaces(const InterfaceFilter& filter, int family, size_t maxInterfaces) {
  std::vector<NetInterface> found;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return found;
  auto rank = [](const SocketAddress& address) {
    if (address.family() == AF_INET) return 0;
    return address.isLinkLocal() ? 2 : 1;
  };
  for (ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || (entry->ifa_flags & IFF_UP) == 0) continue;
    int entryFamily = entry->ifa_addr->sa_family;
    if (entryFamily != AF_INET && entryFamily != AF_INET6) continue;
    if (family != AF_UNSPEC && entryFamily != family) continue;
    std::string name = entry->ifa_name;
    if (!filter.matches(name)) continue;
    SocketAddress address = SocketAddress::fromSockaddr(entry->ifa_addr);
    if (entryFamily == AF_INET6 && address.isLoopback() && family != AF_INET6) continue;
    auto same = std::find_if(found.begin(), found.end(), [&](const NetInterface& i) { return i.name == name; });
    if (same != found.end()) {
      if (rank(address) < rank(same->address)) same->address = address;
      continue;
    }
    if (found.size() < maxInterfaces) found.push_back(NetInterface{name, address});
  }
  freeifaddrs(list);
  return found;
}

// Whether an NCCL_SOCKET_IFNAME-style value selects anything: NCCL takes the variable only when it is longer than one
// character, and chooses automatically otherwise (so "^", "=" or "e" select nothing special).
inline bool interfaceSpecGiven(const char* spec) {
  return spec != nullptr && std::strlen(spec) > 1;
}

// The interfaces a plugin should use. With `ifnameVariable` given (interfaceSpecGiven), exactly what it selects.
// Otherwise NCCL's order: "ib" interfaces; else everything but docker and loopback; else docker; else loopback (so a
// machine with only `lo` still works). `familyVariable` restricts the address family.
inline std::vector<NetInterface> findInterfaces(const char* ifnameVariable, const char* familyVariable,
                                                size_t maxInterfaces) {
  int family = socketFamilyFromEnv(familyVariable);
  const char* spec = ifnameVariable != nullptr ? std::getenv(ifnameVariable) : nullptr;
  if (interfaceSpecGiven(spec)) return listInterfaces(InterfaceFilter(spec), family, maxInterfaces);
  for (const char* fallback : {"ib", "^docker,lo", "docker", "lo"}) {
    auto found = listInterfaces(InterfaceFilter(fallback), family, maxInterfaces);
    if (!found.empty()) return found;
  }
  return {};
}

// ---- sockets -------------------------------------------------------------------------------------------------------

inline std::string errnoText(int error) {
  return std::string(std::strerror(error)) + " (errno " + std::to_string(error) + ")";
}

// A non-blocking, close-on-exec TCP socket with Nagle off (small control messages must leave at once).
inline int openTcpSocket(int family, std::string* error) {
  int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    if (error != nullptr) *error = "socket(): " + errnoText(errno);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// Makes a dead peer or a dead link on an idle connection visible within about `timeoutMs`: keepalive probes from 1 s
// of silence on, unanswered until about `timeoutMs`, fail the socket with ETIMEDOUT (one a second, or fewer and
// further apart beyond 128 s: the kernel takes at most 127). A send that stops progressing is judged by
// peerStoppedAnswering() instead: TCP_USER_TIMEOUT, used before, also ends (since Linux 5.11) a connection whose peer
// is alive but keeps its window closed, a receiver that has not posted its receive yet. Returns false, with the option
// that failed in *error, when one is refused.
inline bool setDeadPeerTimeout(int fd, int timeoutMs, std::string* error = nullptr) {
  if (timeoutMs <= 0) return true;
  // 1 s of silence, then `probes` unanswered probes `interval` apart: about `timeoutMs` in all.
  const int seconds = std::max(1, timeoutMs / 1000 - 1);
  const int probes = std::min(seconds, 127);
  const int options[][2] = {{SOL_SOCKET, SO_KEEPALIVE},
                            {IPPROTO_TCP, TCP_KEEPIDLE},
                            {IPPROTO_TCP, TCP_KEEPINTVL},
                            {IPPROTO_TCP, TCP_KEEPCNT}};
  const int values[] = {1, 1, std::max(1, seconds / probes), probes};
  const char* names[] = {"SO_KEEPALIVE", "TCP_KEEPIDLE", "TCP_KEEPINTVL", "TCP_KEEPCNT"};
  for (int i = 0; i < 4; ++i) {
    if (setsockopt(fd, options[i][0], options[i][1], &values[i], sizeof(values[i])) != 0) {
      if (error != nullptr)
        *error =
            std::string("setsockopt(") + names[i] + ", " + std::to_string(values[i]) + "): " + std::strerror(errno);
      return false;
    }
  }
  return true;
}

// For a send that has made no progress for `timeoutMs`: true when the peer has acknowledged nothing for that long
// while data is unacknowledged or the kernel's window probes go unanswered: a dead peer or link. A live receiver
// that keeps its window closed answers the probes (and has nothing unacknowledged), so it is never judged dead,
// however late it reads.
inline bool peerStoppedAnswering(int fd, int timeoutMs) {
  tcp_info info{};
  socklen_t length = sizeof(info);
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) != 0) return false;
  return info.tcpi_last_ack_recv >= static_cast<unsigned>(timeoutMs) &&
         (info.tcpi_unacked > 0 || info.tcpi_probes >= 2);
}

inline void setSocketBuffers(int fd, int sendBytes, int receiveBytes) {
  if (sendBytes > 0) setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sendBytes, sizeof(sendBytes));
  if (receiveBytes > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receiveBytes, sizeof(receiveBytes));
}

// A listening socket bound to `local` (port 0 picks a free one); *bound receives the address peers connect to.
inline int listenTcp(const SocketAddress& local, int backlog, SocketAddress* bound, std::string* error) {
  int fd = openTcpSocket(local.family(), error);
  if (fd < 0) return -1;
  if (bind(fd, local.get(), local.length()) != 0) {
    if (error != nullptr) *error = "bind(" + local.toString() + "): " + errnoText(errno);
    close(fd);
    return -1;
  }
  if (::listen(fd, backlog) != 0) {
    if (error != nullptr) *error = "listen(" + local.toString() + "): " + errnoText(errno);
    close(fd);
    return -1;
  }
  if (bound != nullptr) *bound = localAddressOf(fd);
  return fd;
}

// What a non-blocking step achieved.
enum class IoStatus {
  kDone,        // the whole operation completed
  kWouldBlock,  // partial or no progress; call again later
  kClosed,      // the peer closed the connection (end of stream)
  kFailed,      // a socket error; see the error text or errno
};

// A non-blocking accept: kDone with *fd set, kWouldBlock when nobody is waiting, kFailed on a listener error.
inline IoStatus acceptTcp(int listenFd, int* fd, SocketAddress* peer, std::string* error) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  int accepted = accept4(listenFd, reinterpret_cast<sockaddr*>(&address), &length, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (accepted < 0) {
    // A connection that died in the backlog, or a signal, is not the listener's failure; nor are the network
    // errors accept(2) passes on from a new connection, which its page says to treat as EAGAIN (and NCCL retries).
    switch (errno) {
      case EAGAIN:
#if EWOULDBLOCK != EAGAIN
      case EWOULDBLOCK:
#endif
      case EINTR:
      case ECONNABORTED:
      case EPROTO:
      case ENETDOWN:
      case ENOPROTOOPT:
      case EHOSTDOWN:
      case ENONET:
      case EHOSTUNREACH:
      case EOPNOTSUPP:
      case ENETUNREACH: return IoStatus::kWouldBlock;
      default: break;
    }
    if (error != nullptr) *error = "accept(): " + errnoText(errno);
    return IoStatus::kFailed;
  }
  int one = 1;
  setsockopt(accepted, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  *fd = accepted;
  if (peer != nullptr) *peer = SocketAddress::fromSockaddr(reinterpret_cast<sockaddr*>(&address));
  return IoStatus::kDone;
}

// A TCP connect driven by repeated progress() calls that never block. A refused or unreachable attempt is retried
// every `retryInterval` (the listener may not be listening yet) until `timeout` after start().
class TcpConnector {
 public:
  using Clock = std::chrono::steady_clock;

  TcpConnector() = default;
  TcpConnector(const TcpConnector&) = delete;
  TcpConnector& operator=(const TcpConnector&) = delete;
  ~TcpConnector() { reset(); }

  // `local` with an invalid family leaves the source address to the kernel.
  void start(const SocketAddress& remote, const SocketAddress& local, std::chrono::milliseconds timeout,
             std::chrono::milliseconds retryInterval) {
    reset();
    remote_ = remote;
    local_ = local;
    retryInterval_ = retryInterval;
    deadline_ = Clock::now() + timeout;
    nextAttempt_ = Clock::now();
    attempts_ = 0;
    selfConnects_ = 0;
    failedHere_ = false;
    started_ = true;
  }

  IoStatus progress() {
    if (!started_) {
      error_ = "connect progressed before start()";
      return IoStatus::kFailed;
    }
    if (connected_) return IoStatus::kDone;
    auto now = Clock::now();
    if (fd_ < 0) {
      if (now >= deadline_) return timedOut();
      if (now < nextAttempt_) return IoStatus::kWouldBlock;
      return attempt();
    }
    pollfd waiter{fd_, POLLOUT, 0};
    int ready = poll(&waiter, 1, 0);
    // EINTR: a signal caught meanwhile (even with no timeout), not the socket's answer; the next call asks again.
    if (ready < 0 && errno == EINTR) ready = 0;
    if (ready == 0) return now >= deadline_ ? timedOut() : IoStatus::kWouldBlock;
    int socketError = 0;
    socklen_t length = sizeof(socketError);
    if (ready < 0 || getsockopt(fd_, SOL_SOCKET, SO_ERROR, &socketError, &length) != 0) socketError = errno;
    if (socketError == 0) return connected();
    return failedAttempt(socketError);
  }

  // Hands the connected socket to the caller (who closes it from then on).
  int release() {
    int fd = fd_;
    fd_ = -1;
    connected_ = false;
    started_ = false;
    return fd;
  }
  void reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    connected_ = false;
    started_ = false;
  }
  const std::string& error() const { return error_; }
  // Whether the failure was on this host (no socket: out of descriptors, or a source address that cannot be bound):
  // the peer was never tried, and the error is the caller's (ncclSystemError), not the network's.
  bool failedHere() const { return failedHere_; }
  int attempts() const { return attempts_; }
  const SocketAddress& remote() const { return remote_; }

 private:
  IoStatus attempt() {
    ++attempts_;
    failedHere_ = false;  // said of the last attempt only
    fd_ = openTcpSocket(remote_.family(), &error_);
    if (fd_ < 0) {
      failedHere_ = true;
      return IoStatus::kFailed;
    }
    if (local_.valid() && local_.family() == remote_.family()) {
      SocketAddress source = local_;
      source.setPort(0);
      // The port is chosen at connect, per destination: a port bound here would be reserved for this source address
      // whatever the peer, so a host's sockets to many peers would run out of ephemeral ports (about 28000) where
      // unbound connects share them. Kernels before 4.2 lack the option and bind a port as before.
      const int one = 1;
      (void)setsockopt(fd_, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
      if (bind(fd_, source.get(), source.length()) != 0) {
        error_ = "bind(" + source.toString() + ") before connecting to " + remote_.toString() + ": " + errnoText(errno);
        failedHere_ = true;
        reset();
        started_ = true;
        return IoStatus::kFailed;
      }
    }
    if (::connect(fd_, remote_.get(), remote_.length()) == 0) return connected();
    if (errno == EINPROGRESS || errno == EINTR) return IoStatus::kWouldBlock;
    return failedAttempt(errno);
  }

  // A connect to a port of this host where nothing listens any more can connect the socket to itself, when the kernel
  // picks that very port as the source port (TCP's simultaneous open): the peer would read its own hello back as the
  // listener's answer and wait for the rest for ever. Taken as the refusal it stands for, and retried.
  IoStatus connected() {
    sockaddr_storage self{}, peer{};
    socklen_t selfLength = sizeof(self), peerLength = sizeof(peer);
    if (getsockname(fd_, reinterpret_cast<sockaddr*>(&self), &selfLength) == 0 &&
        getpeername(fd_, reinterpret_cast<sockaddr*>(&peer), &peerLength) == 0 && selfLength == peerLength &&
        std::memcmp(&self, &peer, selfLength) == 0) {
      ++selfConnects_;
      return failedAttempt(ECONNREFUSED);
    }
    connected_ = true;
    return IoStatus::kDone;
  }

  IoStatus failedAttempt(int error) {
    close(fd_);
    fd_ = -1;
    // EADDRNOTAVAIL: no ephemeral port free for this source and peer now; ports free up as other sockets close.
    bool retryable = error == ECONNREFUSED || error == ETIMEDOUT || error == EHOSTUNREACH || error == ENETUNREACH ||
                     error == ECONNRESET || error == EAGAIN || error == EADDRNOTAVAIL;
    error_ = "connect(" + remote_.toString() + "): " + errnoText(error);
    if (!retryable) return IoStatus::kFailed;
    nextAttempt_ = Clock::now() + retryInterval_;
    return Clock::now() >= deadline_ ? timedOut() : IoStatus::kWouldBlock;
  }

  IoStatus timedOut() {
    std::string last = error_.empty() ? "" : "; last error: " + error_;
    if (selfConnects_ > 0)
      last += "; " + std::to_string(selfConnects_) +
              " attempt(s) connected the socket to itself (its source port was the port tried): nothing listens there";
    error_ = "connect(" + remote_.toString() + ") timed out after " + std::to_string(attempts_) + " attempt(s)" + last;
    reset();
    return IoStatus::kFailed;
  }

  SocketAddress remote_{};
  SocketAddress local_{};
  std::chrono::milliseconds retryInterval_{100};
  Clock::time_point deadline_{};
  Clock::time_point nextAttempt_{};
  int fd_ = -1;
  int attempts_ = 0;
  int selfConnects_ = 0;  // attempts that connected the socket to itself (see connected())
  bool started_ = false;
  bool connected_ = false;
  bool failedHere_ = false;
  std::string error_;
};

// Sends bytes [*offset, size) of `data` without blocking; advances *offset. kDone once all are sent. *error gets
// errno on kFailed (EPIPE/ECONNRESET: the peer is gone; ETIMEDOUT: the dead-peer timeout fired).
inline IoStatus sendSome(int fd, const void* data, size_t size, size_t* offset, int* error) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  while (*offset < size) {
    ssize_t sent = ::send(fd, bytes + *offset, size - *offset, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent > 0) {
      *offset += static_cast<size_t>(sent);
      continue;
    }
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return IoStatus::kWouldBlock;
    *error = sent < 0 ? errno : EPIPE;
    return IoStatus::kFailed;
  }
  return IoStatus::kDone;
}

// The parts of a gathered or scattered transfer still to move: bytes [skip, total) of their concatenation, as at most
// 8 iovecs in `remaining`. Returns how many.
inline int remainingParts(const iovec* parts, int count, size_t skip, iovec* remaining) {
  int used = 0;
  for (int i = 0; i < count && used < 8; ++i) {
    if (skip >= parts[i].iov_len) {
      skip -= parts[i].iov_len;
      continue;
    }
    remaining[used].iov_base = static_cast<unsigned char*>(parts[i].iov_base) + skip;
    remaining[used].iov_len = parts[i].iov_len - skip;
    skip = 0;
    ++used;
  }
  return used;
}

inline size_t totalBytes(const iovec* parts, int count) {
  size_t total = 0;
  for (int i = 0; i < count; ++i) total += parts[i].iov_len;
  return total;
}

// Gathers several buffers into one stream without copying them together: bytes [*offset, total) of the
// concatenation of `parts`. At most 8 parts.
inline IoStatus sendSomeGather(int fd, const iovec* parts, int count, size_t* offset, int* error) {
  const size_t total = totalBytes(parts, count);
  while (*offset < total) {
    iovec remaining[8];
    msghdr message{};
    message.msg_iov = remaining;
    message.msg_iovlen = static_cast<size_t>(remainingParts(parts, count, *offset, remaining));
    ssize_t sent = ::sendmsg(fd, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent > 0) {
      *offset += static_cast<size_t>(sent);
      continue;
    }
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return IoStatus::kWouldBlock;
    *error = sent < 0 ? errno : EPIPE;
    return IoStatus::kFailed;
  }
  return IoStatus::kDone;
}

// Scatters bytes [*offset, total) of a stream over `parts` (at most 8) without blocking; advances *offset. kClosed
// when the peer closed the stream before all of them arrived.
inline IoStatus recvSomeScatter(int fd, const iovec* parts, int count, size_t* offset, int* error) {
  const size_t total = totalBytes(parts, count);
  while (*offset < total) {
    iovec remaining[8];
    msghdr message{};
    message.msg_iov = remaining;
    message.msg_iovlen = static_cast<size_t>(remainingParts(parts, count, *offset, remaining));
    ssize_t received = ::recvmsg(fd, &message, MSG_DONTWAIT);
    if (received > 0) {
      *offset += static_cast<size_t>(received);
      continue;
    }
    if (received == 0) return IoStatus::kClosed;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return IoStatus::kWouldBlock;
    *error = errno;
    return IoStatus::kFailed;
  }
  return IoStatus::kDone;
}

// Receives into bytes [*offset, size) of `data` without blocking; advances *offset. kClosed when the peer closed the
// stream before `size` bytes arrived.
inline IoStatus recvSome(int fd, void* data, size_t size, size_t* offset, int* error) {
  auto* bytes = static_cast<unsigned char*>(data);
  while (*offset < size) {
    ssize_t received = ::recv(fd, bytes + *offset, size - *offset, MSG_DONTWAIT);
    if (received > 0) {
      *offset += static_cast<size_t>(received);
      continue;
    }
    if (received == 0) return IoStatus::kClosed;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return IoStatus::kWouldBlock;
    *error = errno;
    return IoStatus::kFailed;
  }
  return IoStatus::kDone;
}

// sendSome/recvSome with the failure as text for a WARN: errno's text, or "connection closed by the peer".
inline IoStatus sendSome(int fd, const void* data, size_t size, size_t* offset, std::string* error) {
  int code = 0;
  IoStatus status = sendSome(fd, data, size, offset, &code);
  if (status == IoStatus::kFailed) *error = errnoText(code);
  if (status == IoStatus::kClosed) *error = "connection closed by the peer";
  return status;
}
inline IoStatus recvSome(int fd, void* data, size_t size, size_t* offset, std::string* error) {
  int code = 0;
  IoStatus status = recvSome(fd, data, size, offset, &code);
  if (status == IoStatus::kFailed) *error = errnoText(code);
  if (status == IoStatus::kClosed) *error = "connection closed by the peer";
  return status;
}
inline bool failed(IoStatus status) {
  return status == IoStatus::kFailed || status == IoStatus::kClosed;
}

// Waits up to `timeoutMs` for `events` on fd. True when ready (or in error: the next IO call reports it).
inline bool waitForSocket(int fd, short events, int timeoutMs) {
  pollfd waiter{fd, events, 0};
  int ready;
  do {
    ready = poll(&waiter, 1, timeoutMs);
  } while (ready < 0 && errno == EINTR);
  return ready > 0;
}

NCCL_NET_SDK_NAMESPACE_END
