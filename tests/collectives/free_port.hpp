// free_port.hpp: a loopback TCP port free right now, for a test's bootstrap root, which binds it a moment later.
// Taken below the kernel's ephemeral range (net.ipv4.ip_local_port_range), where no connect() of another test picks
// its source port in between (a port the kernel gave to bind(0) is an ephemeral one, which any connection on the host
// could take before the root binds it: "Address already in use", a reviewer's flake candidate); a random one, tried
// by binding it, so that tests running side by side rarely pick the same.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <random>

namespace nns::test {

// Binds `port` on loopback (0: any) and returns the port bound, or -1.
inline int bindLoopbackPort(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t length = sizeof(address);
  int bound = -1;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0)
    bound = ntohs(address.sin_port);
  if (fd >= 0) close(fd);
  return bound;
}

inline int freeLoopbackPort() {
  int ephemeralLow = 32768;  // Linux's default
  if (FILE* range = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(range, "%d", &ephemeralLow) != 1) ephemeralLow = 32768;
    std::fclose(range);
  }
  constexpr int kLowest = 10000;  // above the well-known and most registered services' ports
  if (ephemeralLow > kLowest + 1000) {
    std::random_device seed;
    std::mt19937 pick(seed());
    std::uniform_int_distribution<int> port(kLowest, ephemeralLow - 1);
    for (int attempt = 0; attempt < 100; ++attempt)
      if (int bound = bindLoopbackPort(port(pick)); bound > 0) return bound;
  }
  return bindLoopbackPort(0);  // a host whose ephemeral range starts low: the kernel's pick
}

}  // namespace nns::test
