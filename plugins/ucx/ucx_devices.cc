// ucx_devices.cc: device discovery for nns-ucx from UCX's own resource list (ucp_context_print_info), plus sysfs facts.
#include "ucx_devices.hpp"

#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>

#include <ucp/api/ucp.h>
#include <nccl_net/sdk/log.hpp>
#include <nccl_net/sdk/sysfs.hpp>

namespace nns_ucx {
namespace sdk = nccl_net::sdk;

namespace {

constexpr int kUnknownSpeedMbps = 10000;  // what NCCL assumes too when a link does not say

bool startsWith(const std::string& text, const char* prefix) {
  return text.rfind(prefix, 0) == 0;
}

bool isSharedMemoryTransport(const std::string& tl) {
  return tl == "posix" || tl == "sysv" || tl == "cma" || tl == "knem" || tl == "xpmem";
}
// Transports that move no bytes between processes over a device NCCL could use as a NIC.
bool isLocalOnlyTransport(const std::string& tl) {
  return tl == "self" || startsWith(tl, "cuda") || startsWith(tl, "rocm") || tl == "gdr_copy" || startsWith(tl, "ze");
}
bool isRdmaTransport(const std::string& tl) {
  return startsWith(tl, "rc") || startsWith(tl, "ud") || startsWith(tl, "dc");
}

std::vector<std::string> splitComma(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ','))
    if (!part.empty()) parts.push_back(part);
  return parts;
}

// "100 Gb/sec (4X EDR)" -> 100000.
int rdmaPortSpeedMbps(const std::string& ibdev, int port) {
  auto rate = sdk::readSysfsString("/sys/class/infiniband/" + ibdev + "/ports/" + std::to_string(port) + "/rate");
  if (!rate) return kUnknownSpeedMbps;
  double gbps = std::atof(rate->c_str());
  return gbps > 0 ? static_cast<int>(gbps * 1000) : kUnknownSpeedMbps;
}

// The first network interface of the PCI function behind an RDMA device (RoCE: its Ethernet port; IB: IPoIB).
std::string netInterfaceOfRdmaDevice(const std::string& ibdev) {
  std::string dir = "/sys/class/infiniband/" + ibdev + "/device/net";
  DIR* listing = opendir(dir.c_str());
  if (listing == nullptr) return {};
  std::string found;
  while (dirent* entry = readdir(listing)) {
    if (entry->d_name[0] == '.') continue;
    found = entry->d_name;
    break;
  }
  closedir(listing);
  return found;
}

bool addressOfInterface(const std::string& ifname, sdk::SocketAddress* address) {
  auto found = sdk::listInterfaces(sdk::InterfaceFilter("=" + ifname), AF_UNSPEC, 1);
  if (found.empty()) return false;
  *address = found[0].address;
  return true;
}

uint64_t nameHash(const std::string& name) {
  return std::hash<std::string>{}(name);
}

}  // namespace

std::vector<std::pair<std::string, std::string>> parseResources(const std::string& printedInfo) {
  std::vector<std::pair<std::string, std::string>> resources;
  std::stringstream in(printedInfo);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("resource") == std::string::npos) continue;
    size_t dashes = line.find("-- ");
    if (dashes == std::string::npos) continue;
    std::string entry = line.substr(dashes + 3);
    while (!entry.empty() && (entry.back() == ' ' || entry.back() == '\r')) entry.pop_back();
    size_t slash = entry.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 >= entry.size()) continue;
    resources.emplace_back(entry.substr(0, slash), entry.substr(slash + 1));
  }
  return resources;
}

std::vector<std::string> dropTcpViewsOfRdmaPorts(std::vector<UcxDevice>& devices,
                                                 const std::vector<std::string>& keep) {
  std::vector<std::string> dropped;
  auto isTcpViewOfRdma = [&](const UcxDevice& d) {
    if (d.rdma || d.sharedMemory || d.pciPath.empty()) return false;
    if (std::find(keep.begin(), keep.end(), d.name) != keep.end()) return false;
    bool view = std::any_of(devices.begin(), devices.end(),
                            [&](const UcxDevice& other) { return other.rdma && other.pciPath == d.pciPath; });
    if (view) dropped.push_back(d.name);
    return view;
  };
  devices.erase(std::remove_if(devices.begin(), devices.end(), isTcpViewOfRdma), devices.end());
  return dropped;
}

std::vector<std::string> dropHostOnlyInterfaces(std::vector<UcxDevice>& devices, const std::vector<std::string>& keep) {
  auto hostOnly = [&](const UcxDevice& d) {
    const bool kind = d.name == "lo" || d.name.rfind("docker", 0) == 0;
    return kind && !d.rdma && std::find(keep.begin(), keep.end(), d.name) == keep.end();
  };
  if (std::all_of(devices.begin(), devices.end(), hostOnly)) return {};  // nothing else: keep them all
  std::vector<std::string> dropped;
  for (const UcxDevice& d : devices)
    if (hostOnly(d)) dropped.push_back(d.name);
  devices.erase(std::remove_if(devices.begin(), devices.end(), hostOnly), devices.end());
  return dropped;
}

std::vector<UcxDevice> discoverDevices(int sharedMemorySpeedMbps, std::string* error) {
  // A throw-away context with the same features the plugin uses: UCX applies UCX_TLS, UCX_NET_DEVICES and friends
  // exactly as it will for the real contexts, so the devices offered are the ones UCX would pick.
  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  if (status != UCS_OK) {
    *error = std::string("ucp_config_read: ") + ucs_status_string(status);
    return {};
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG;
  ucp_context_h context = nullptr;
  status = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (status != UCS_OK) {
    *error = std::string("ucp_init: ") + ucs_status_string(status) + " (check UCX_TLS / UCX_NET_DEVICES)";
    return {};
  }
  char* text = nullptr;
  size_t length = 0;
  FILE* stream = open_memstream(&text, &length);
  if (stream == nullptr) {
    ucp_cleanup(context);
    *error = "open_memstream failed";
    return {};
  }
  ucp_context_print_info(context, stream);
  std::fclose(stream);
  std::string printed(text, length);
  std::free(text);
  ucp_cleanup(context);

  std::vector<UcxDevice> network;
  std::vector<std::string> sharedMemory;
  for (const auto& resource : parseResources(printed)) {
    // Named references, not a structured binding: lambdas may capture bindings only from C++20 on (clang 16).
    const std::string& tl = resource.first;
    const std::string& dev = resource.second;
    if (isLocalOnlyTransport(tl)) continue;
    if (isSharedMemoryTransport(tl)) {
      if (std::find(sharedMemory.begin(), sharedMemory.end(), tl) == sharedMemory.end()) sharedMemory.push_back(tl);
      continue;
    }
    auto same = std::find_if(network.begin(), network.end(), [&](const UcxDevice& d) { return d.name == dev; });
    if (same == network.end()) {
      network.push_back(UcxDevice{});
      same = network.end() - 1;
      same->name = dev;
    }
    same->transports.push_back(tl);
    same->rdma = same->rdma || isRdmaTransport(tl);
  }

  const char* netDevices = std::getenv("UCX_NET_DEVICES");
  auto named = splitComma(netDevices != nullptr ? netDevices : "all");
  for (const std::string& name : dropHostOnlyInterfaces(network, named))
    NCCL_NET_INFO(NCCL_INIT | NCCL_NET,
                  "UCX device %s left out: loopback and container bridges are not NICs (name it in UCX_NET_DEVICES to "
                  "keep it)",
                  name.c_str());

  std::vector<UcxDevice> devices;
  std::vector<std::string> noSideChannel;  // network devices dropped for want of an IP interface for the side channel
  const char* sideIfname = std::getenv("NNS_UCX_SIDE_IFNAME");
  const bool sideIfnameSet = sideIfname != nullptr && *sideIfname != '\0';
  for (UcxDevice& device : network) {
    device.sharedMemoryTransports = !sharedMemory.empty();
    size_t colon = device.name.find(':');
    std::string ifname = device.name;
    if (colon != std::string::npos) {  // an RDMA device: "mlx5_0:1"
      std::string ibdev = device.name.substr(0, colon);
      device.port = std::atoi(device.name.c_str() + colon + 1);
      device.pciPath = sdk::pciPathOfIbDevice(ibdev);
      device.speedMbps = rdmaPortSpeedMbps(ibdev, device.port);
      device.guid = nameHash(ibdev);  // ports of one adapter share a guid, as NCCL expects
      ifname = netInterfaceOfRdmaDevice(ibdev);
    } else {
      device.pciPath = sdk::pciPathOfNetDevice(ifname);
      device.speedMbps = sdk::netDeviceSpeedMbps(ifname, kUnknownSpeedMbps);
      device.guid = nameHash(device.name);
    }
    // The side channel (a short TCP exchange of worker addresses) needs an IP address near the device.
    if (sideIfnameSet) ifname = sideIfname;
    if (ifname.empty() || !addressOfInterface(ifname, &device.sideChannel)) {
      auto fallback = sdk::findInterfaces("NNS_UCX_SIDE_IFNAME", nullptr, 1);
      if (fallback.empty()) {
        noSideChannel.push_back(device.name);
        continue;
      }
      device.sideChannel = fallback[0].address;
    }
    devices.push_back(std::move(device));
  }
  // A network device without a side channel is a configuration error (NNS_UCX_SIDE_IFNAME naming a missing
  // interface, or a host with no usable IP interface), not a reason to offer fewer NICs than UCX selected, nor to
  // fall back to shared memory only: NCCL would then run between hosts over whatever is left, or fail later and
  // obscurely. No device at all, so init fails with this error as its WARN.
  if (!noSideChannel.empty()) {
    std::string names;
    for (const std::string& name : noSideChannel) names += (names.empty() ? "" : ", ") + name;
    *error =
        "no IP interface for the connection side channel of UCX device(s) " + names +
        (sideIfnameSet ? ": NNS_UCX_SIDE_IFNAME=" + std::string(sideIfname) + " matches no interface with an IP address"
                       : " (set NNS_UCX_SIDE_IFNAME to an interface with an IP address)");
    return {};
  }
  for (const std::string& name : dropTcpViewsOfRdmaPorts(devices, named))
    NCCL_NET_INFO(NCCL_INIT | NCCL_NET,
                  "UCX device %s left out: it is the port of an RDMA device listed too, seen through TCP (name it in "
                  "UCX_NET_DEVICES to keep it)",
                  name.c_str());
  // "memory" stands for shared memory only when UCX selected no network transport at all (UCX_TLS=sm).
  if (network.empty() && !sharedMemory.empty()) {
    UcxDevice memory;
    memory.name = "memory";
    memory.transports = sharedMemory;
    memory.sharedMemory = true;
    memory.sharedMemoryTransports = true;
    memory.speedMbps = sharedMemorySpeedMbps;
    memory.guid = nameHash("memory");
    memory.sideChannel = sdk::SocketAddress::loopback(AF_INET);  // shared memory never leaves the host
    devices.push_back(std::move(memory));
  }
  if (devices.empty() && error->empty()) {
    const char* tls = std::getenv("UCX_TLS");
    *error =
        "UCX selected no network or shared-memory transport (UCX_TLS=" + std::string(tls != nullptr ? tls : "<unset>") +
        ")";
  }
  return devices;
}

}  // namespace nns_ucx
