// tcp_strangers.hpp: for the harness (rule strangers-are-dropped) and tests that play a stranger on a plugin's
// listen port (a port scanner, a stale process of another job): find the TCP ports this process listens on, connect
// to one, and see whether the plugin hung up.
#pragma once

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

namespace nns::check {

// The TCP sockets this process listens on, by port, from /proc (IPv4 and IPv6): how a test finds the address
// behind a plugin's opaque listen handle. An unspecified address (0.0.0.0, ::) is given as loopback.
inline std::map<int, sockaddr_storage> listeningSockets() {
  std::set<std::string> inodes;
  if (DIR* fds = opendir("/proc/self/fd")) {
    while (dirent* entry = readdir(fds)) {
      char target[64] = {};
      const std::string path = std::string("/proc/self/fd/") + entry->d_name;
      if (readlink(path.c_str(), target, sizeof(target) - 1) > 8 && std::strncmp(target, "socket:[", 8) == 0)
        inodes.insert(std::string(target + 8, std::strlen(target) - 9));
    }
    closedir(fds);
  }
  std::map<int, sockaddr_storage> sockets;
  for (int family : {AF_INET, AF_INET6}) {
    std::ifstream table(family == AF_INET ? "/proc/self/net/tcp" : "/proc/self/net/tcp6");
    std::string line;
    std::getline(table, line);  // the header
    while (std::getline(table, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
      if (state != "0A" || inodes.count(inode) == 0) continue;  // 0A: LISTEN
      const size_t colon = local.rfind(':');
      const int port = static_cast<int>(std::strtol(local.c_str() + colon + 1, nullptr, 16));
      sockaddr_storage address{};
      // The kernel prints each 32-bit word of the address as a number in host order: parsing gives the bytes back.
      if (family == AF_INET) {
        auto* v4 = reinterpret_cast<sockaddr_in*>(&address);
        v4->sin_family = AF_INET;
        v4->sin_port = htons(static_cast<uint16_t>(port));
        v4->sin_addr.s_addr = static_cast<uint32_t>(std::strtoul(local.substr(0, colon).c_str(), nullptr, 16));
        if (v4->sin_addr.s_addr == htonl(INADDR_ANY)) v4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      } else {
        auto* v6 = reinterpret_cast<sockaddr_in6*>(&address);
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(static_cast<uint16_t>(port));
        for (int w = 0; w < 4; ++w) {
          const uint32_t word = static_cast<uint32_t>(std::strtoul(local.substr(8 * w, 8).c_str(), nullptr, 16));
          std::memcpy(v6->sin6_addr.s6_addr + 4 * w, &word, sizeof(word));
        }
        if (IN6_IS_ADDR_UNSPECIFIED(&v6->sin6_addr)) v6->sin6_addr = in6addr_loopback;
      }
      sockets[port] = address;
    }
  }
  return sockets;
}

// The one TCP listening socket that appeared since the snapshot `before` (what a listen call opened): false when
// none or several did.
inline bool newListeningSocket(const std::map<int, sockaddr_storage>& before, sockaddr_storage* address) {
  auto now = listeningSockets();
  for (const auto& entry : before) now.erase(entry.first);
  if (now.size() != 1) return false;
  *address = now.begin()->second;
  return true;
}

// A blocking TCP connection to `address`, or -1.
inline int connectTcp(const sockaddr_storage& address) {
  const int fd = socket(address.ss_family, SOCK_STREAM, 0);
  const socklen_t length = address.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<const sockaddr*>(&address), length) == 0) return fd;
  if (fd >= 0) close(fd);
  return -1;
}

// Three strangers on `address`: `garbage` sends `noiseBytes` bytes of 0x5a and stays, another sends 5 bytes (part
// of any hello) and leaves, `silent` connects and says nothing. The caller closes the two that stay.
struct Strangers {
  int garbage = -1;
  int silent = -1;
};
inline bool sendStrangers(const sockaddr_storage& address, size_t noiseBytes, Strangers* strangers) {
  const std::string noise(noiseBytes, '\x5a');
  strangers->garbage = connectTcp(address);
  strangers->silent = connectTcp(address);
  const int truncated = connectTcp(address);
  bool ok = strangers->garbage >= 0 && strangers->silent >= 0 && truncated >= 0 &&
            send(strangers->garbage, noise.data(), noise.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(noise.size()) &&
            send(truncated, noise.data(), 5, MSG_NOSIGNAL) == 5;
  if (truncated >= 0) close(truncated);
  return ok;
}

// Whether the other end closed `fd` within `timeout` (end of stream or a reset).
inline bool closedByPeer(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (poll(&p, 1, 50) <= 0) continue;
    char byte;
    const ssize_t n = recv(fd, &byte, 1, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return true;
  }
  return false;
}

}  // namespace nns::check
