// ib_devices.cc: HCA/port enumeration, GID choice, link speed and sysfs facts for each device.
#include "ib_devices.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <nccl_net/sdk/log.hpp>
#include <nccl_net/sdk/sysfs.hpp>

#include "hca_filter.hpp"
#include "port_speed.hpp"

namespace nns_ib {
namespace sdk = nccl_net::sdk;

std::string gidText(const ibv_gid& gid) {
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(AF_INET6, gid.raw, text, sizeof(text));
  return text;
}

namespace {

bool isZeroGid(const ibv_gid& gid) {
  for (unsigned char byte : gid.raw)
    if (byte != 0) return false;
  return true;
}

// NCCL's probe: a dmabuf registration with fd -1 fails with EBADF where the stack supports dmabuf, and with
// EOPNOTSUPP/EPROTONOSUPPORT where the provider or kernel does not (rxe on Linux 6.1 does not).
bool probeDmabuf(const Verbs& verbs, ibv_pd* pd) {
  if (verbs.regDmabufMr == nullptr) return false;
  errno = 0;
  ibv_mr* mr = verbs.regDmabufMr(pd, 0, 0, 0, -1, 0);
  if (mr != nullptr) {
    verbs.deregMr(mr);
    return true;
  }
  return errno != EOPNOTSUPP && errno != EPROTONOSUPPORT && errno != ENOSYS;
}

}  // namespace

bool makeAsyncEventsNonBlocking(ibv_context* context) {
  const int flags = fcntl(context->async_fd, F_GETFL);
  return flags >= 0 && fcntl(context->async_fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

bool gdrKernelSupport() {
  for (const char* path : {"/sys/kernel/mm/memory_peers/nv_mem/version", "/sys/module/nvidia_peermem/version",
                           "/sys/module/nv_peer_mem/version"}) {
    if (sdk::readSysfsString(path)) return true;
  }
  return false;
}

bool nvidiaDriverPresent() {
  return sdk::readSysfsString("/proc/driver/nvidia/version").has_value();
}

int chooseGidIndex(const Verbs& verbs, ibv_context* context, const std::string& hcaName, int port, int tableLength,
                   const GidPreference& preference, std::string* type, bool warn) {
  const std::string typesDir =
      "/sys/class/infiniband/" + hcaName + "/ports/" + std::to_string(port) + "/gid_attrs/types/";
  std::vector<GidEntry> table;
  std::vector<std::string> types;
  for (int index = 0; index < tableLength; ++index) {
    ibv_gid gid{};
    if (verbs.queryGid(context, static_cast<uint8_t>(port), index, &gid) != 0 || isZeroGid(gid)) continue;
    auto gidType = sdk::readSysfsString(typesDir + std::to_string(index));
    GidEntry entry;
    entry.index = index;
    std::memcpy(entry.raw, gid.raw, sizeof(entry.raw));
    entry.roceVersion = gidType ? roceVersionOfType(*gidType) : 0;
    table.push_back(entry);
    types.push_back(gidType ? *gidType : "");
  }
  bool fitted = false;
  const int chosen = chooseGid(table, preference, &fitted);
  if (chosen < 0) return 0;  // no GID with an address: the caller reports the port as unusable
  for (size_t i = 0; i < table.size(); ++i)
    if (table[i].index == chosen && type != nullptr) *type = types[i];
  if (!fitted && warn) {
    std::string range;
    if (preference.hasRange) {
      char text[INET6_ADDRSTRLEN] = {};
      inet_ntop(preference.family, preference.prefix, text, sizeof(text));
      range.append(" in NCCL_IB_ADDR_RANGE ").append(text).append(1, '/');
      range.append(std::to_string(preference.prefixBits));
    }
    ibv_gid gid{};
    for (const GidEntry& entry : table)
      if (entry.index == chosen) std::memcpy(gid.raw, entry.raw, sizeof(gid.raw));
    NCCL_NET_WARN("%s:%d has no routable %s GID%s; using GID %d (%s)", hcaName.c_str(), port,
                  preference.family == AF_INET ? "IPv4 (AF_INET)" : "IPv6 (AF_INET6)", range.c_str(), chosen,
                  gidText(gid).c_str());
  }
  return chosen;
}

bool currentGid(const Verbs& verbs, const Port& port, const DiscoveryOptions& options, int* index, ibv_gid* gid,
                std::string* error) {
  *index = port.gidIndex;
  *gid = port.gid;
  if (!port.isEthernet()) return true;
  ibv_context* context = port.hca->context;
  if (options.gidIndex < 0)
    *index = chooseGidIndex(verbs, context, port.hca->name, port.port, port.attr.gid_tbl_len, options.gidPreference,
                            nullptr, /*warn=*/false);
  if (verbs.queryGid(context, static_cast<uint8_t>(port.port), *index, gid) != 0 || isZeroGid(*gid)) {
    *error = port.name + " has no usable GID now (index " + std::to_string(*index) +
             (options.gidIndex < 0 ? ", the best of its table" : ", NCCL_IB_GID_INDEX") +
             ", is empty or unreadable): did its netdev lose its IP address?";
    return false;
  }
  return true;
}

std::vector<Port> discoverPorts(const Verbs& verbs, const DiscoveryOptions& options, std::vector<Hca*>* hcas,
                                std::string* why) {
  std::vector<Port> ports;
  HcaFilter filter(options.hcaSpec);
  for (const std::string& bad : filter.invalid())
    NCCL_NET_WARN("NCCL_IB_HCA entry \"%s\" is not dev[:port] with a port in 1..255; ignored", bad.c_str());
  if (filter.excludesEverything())
    NCCL_NET_WARN("NCCL_IB_HCA=\"%s\" names no device after '^': as NCCL reads it, every device is excluded",
                  options.hcaSpec.c_str());

  int count = 0;
  ibv_device** list = verbs.getDeviceList(&count);
  if (list == nullptr) {
    // ENOSYS: the kernel has no RDMA support loaded (no ib_uverbs), the usual case on a host without HCAs.
    *why = std::string("no RDMA device: ibv_get_device_list failed: ") + std::strerror(errno) +
           (errno == ENOSYS ? " (no RDMA support in this kernel: ib_uverbs not loaded)" : "");
    return ports;
  }
  std::string seen;
  for (int i = 0; i < count; ++i) {
    std::string hcaName = verbs.getDeviceName(list[i]);
    ibv_context* context = verbs.openDevice(list[i]);
    if (context == nullptr) {
      seen += " " + hcaName + "(cannot open: " + std::strerror(errno) + ")";
      continue;
    }
    auto* hca = new Hca;
    hca->name = hcaName;
    hca->context = context;
    hca->owner.store(getpid(), std::memory_order_release);
    hca->eventsReadable.store(makeAsyncEventsNonBlocking(context), std::memory_order_release);
    if (!hca->eventsReadable.load(std::memory_order_relaxed))
      NCCL_NET_WARN("%s: its asynchronous events (port down, QP errors) stay unread: fcntl on async_fd: %s",
                    hcaName.c_str(), std::strerror(errno));
    if (verbs.queryDevice(context, &hca->attr) != 0) {
      seen += " " + hcaName + "(ibv_query_device failed)";
      verbs.closeDevice(context);
      delete hca;
      continue;
    }
    std::vector<Port> hcaPorts;
    for (int p = 1; p <= hca->attr.phys_port_cnt; ++p) {
      Port port;
      port.hca = hca;
      port.port = p;
      if (verbs.queryPort(context, static_cast<uint8_t>(p), &port.attr) != 0) continue;
      std::string where = hcaName + ":" + std::to_string(p);
      if (port.attr.state != IBV_PORT_ACTIVE) {
        seen += " " + where + "(not active)";
        continue;
      }
      if (port.attr.link_layer != IBV_LINK_LAYER_INFINIBAND && port.attr.link_layer != IBV_LINK_LAYER_ETHERNET) {
        seen += " " + where + "(link layer " + std::to_string(port.attr.link_layer) + ")";
        continue;
      }
      if (!filter.selects(hcaName, p)) {
        seen += " " + where + "(not selected by NCCL_IB_HCA)";
        continue;
      }
      if (options.gidIndex >= 0) {
        port.gidIndex = options.gidIndex;
        auto type = sdk::readSysfsString("/sys/class/infiniband/" + hcaName + "/ports/" + std::to_string(p) +
                                         "/gid_attrs/types/" + std::to_string(options.gidIndex));
        port.gidType = type ? *type : "";
      } else if (port.isEthernet()) {
        port.gidIndex =
            chooseGidIndex(verbs, context, hcaName, p, port.attr.gid_tbl_len, options.gidPreference, &port.gidType);
      }
      if (verbs.queryGid(context, static_cast<uint8_t>(p), port.gidIndex, &port.gid) != 0) {
        seen += " " + where + "(GID index " + std::to_string(port.gidIndex) + " unreadable)";
        continue;
      }
      if (port.isEthernet() && isZeroGid(port.gid)) {
        seen += " " + where + "(GID index " + std::to_string(port.gidIndex) + " empty: no IP address on the netdev?)";
        continue;
      }
      port.speedMbps = portSpeedMbps(port.attr.active_speed, port.attr.active_width);
      if (port.speedMbps == 0) {  // a code this table predates (XDR needs active_speed_ex): the kernel's rate text
        auto rate = sdk::readSysfsString("/sys/class/infiniband/" + hcaName + "/ports/" + std::to_string(p) + "/rate");
        port.speedMbps = rate ? rateTextMbps(*rate) : 0;
      }
      port.pciPath = sdk::pciPathOfIbDevice(hcaName);
      // The ASIC's id, as NCCL's own transport reports it: the PCI functions of one multi-port card share it (NCCL
      // then shares the card's bandwidth between them and trims the slower port); the node GUID is each function's.
      port.guid = hca->attr.sys_image_guid != 0 ? hca->attr.sys_image_guid : hca->attr.node_guid;
      hcaPorts.push_back(port);
    }
    if (hcaPorts.empty()) {
      verbs.closeDevice(context);
      delete hca;
      continue;
    }
    hca->pd = verbs.allocPd(context);
    if (hca->pd == nullptr) {
      seen += " " + hcaName + "(ibv_alloc_pd failed: " + std::strerror(errno) + ")";
      verbs.closeDevice(context);
      delete hca;
      continue;
    }
    hca->dmabufSupported = probeDmabuf(verbs, hca->pd);
    for (Port& port : hcaPorts) {
      port.name = hcaPorts.size() > 1 ? hcaName + ":" + std::to_string(port.port) : hcaName;
      ports.push_back(port);
    }
    hcas->push_back(hca);
  }
  verbs.freeDeviceList(list);
  if (ports.empty()) {
    *why = count == 0 ? "no RDMA device found (ibv_get_device_list lists none; is a driver such as mlx5_ib or "
                        "rdma_rxe loaded?)"
                      : "no usable port among " + std::to_string(count) + " RDMA device(s):" + seen;
  }
  return ports;
}

}  // namespace nns_ib
