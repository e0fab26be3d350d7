// nccl_net/sdk/sysfs.hpp: device facts from sysfs: PCI paths and link speeds for network and RDMA devices.
#pragma once

#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#include "visibility.hpp"

NCCL_NET_SDK_NAMESPACE_BEGIN

inline std::optional<std::string> readSysfsString(const std::string& path) {
  std::ifstream in(path);
  std::string value;
  if (!in || !std::getline(in, value)) return std::nullopt;
  while (!value.empty() && (value.back() == '\n' || value.back() == ' ')) value.pop_back();
  return value;
}

inline std::optional<long> readSysfsLong(const std::string& path) {
  auto text = readSysfsString(path);
  if (!text || text->empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long value = std::strtol(text->c_str(), &end, 0);
  if (errno != 0 || end == text->c_str()) return std::nullopt;
  return value;
}

// True for a sysfs directory name shaped like a PCI function: "0000:3b:00.0". The domain has at least four hex digits
// and may have more (Linux prints it with %04x: domains above 0xffff, such as those behind Intel VMD, read
// "10000:01:00.0").
inline bool isPciBusId(const std::string& name) {
  constexpr size_t kAfterDomain = 8;  // ":3b:00.0"
  if (name.size() < 4 + kAfterDomain || name.size() > 8 + kAfterDomain) return false;
  const size_t domain = name.size() - kAfterDomain;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const size_t tail = i < domain ? SIZE_MAX : i - domain;  // position within ":3b:00.0"
    const bool wantColon = tail == 0 || tail == 3;
    const bool wantDot = tail == 6;
    if (wantColon ? c != ':' : wantDot ? c != '.' : !std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// The realpath of the PCI function behind a sysfs "device" link (NCCL places NICs in its PCI tree with it).
// Walks up from virtio-style children (".../0000:00:03.0/virtio0") to the PCI function. Empty when the device is
// virtual (loopback, veth, bridges) or the link is missing.
inline std::string pciPathOfDeviceLink(const std::string& deviceLink) {
  char resolved[PATH_MAX];
  if (realpath(deviceLink.c_str(), resolved) == nullptr) return {};
  std::string path(resolved);
  while (path.size() > 1) {
    size_t slash = path.rfind('/');
    if (isPciBusId(path.substr(slash + 1))) return path;
    path.resize(slash);
  }
  return {};
}

inline std::string pciPathOfNetDevice(const std::string& ifname) {
  return pciPathOfDeviceLink("/sys/class/net/" + ifname + "/device");
}

inline std::string pciPathOfIbDevice(const std::string& ibdev) {
  return pciPathOfDeviceLink("/sys/class/infiniband/" + ibdev + "/device");
}

// Link speed in Mbps from /sys/class/net/IF/speed; `fallback` when unknown (virtual links report -1 or nothing).
inline int netDeviceSpeedMbps(const std::string& ifname, int fallback) {
  auto speed = readSysfsLong("/sys/class/net/" + ifname + "/speed");
  if (!speed || *speed <= 0 || *speed > INT_MAX) return fallback;
  return static_cast<int>(*speed);
}

NCCL_NET_SDK_NAMESPACE_END
