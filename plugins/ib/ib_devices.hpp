// ib_devices.hpp: discovery of the plugin's devices: every active port of every HCA that NCCL_IB_HCA selects.
#pragma once

#include <infiniband/verbs.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "gid_choice.hpp"
#include "verbs_loader.hpp"

namespace nns_ib {

// One opened HCA: its context and protection domain are shared by every port and every comm using it.
struct Hca {
  std::string name;
  ibv_context* context = nullptr;
  ibv_pd* pd = nullptr;
  ibv_device_attr attr{};
  bool dmabufSupported = false;  // ibv_reg_dmabuf_mr accepted by libibverbs, the provider and the kernel
  // Asynchronous events (ib_plugin.cc, drainAsyncEvents): one thread reads async_fd at a time (`events`), only in the
  // process that opened the context (`owner`: a forked child's copy of it is the parent's, until it re-opens); a
  // fatal device error is kept for every comm on the HCA (QP and CQ errors go to their comm).
  std::mutex events;
  std::atomic<pid_t> owner{0};
  std::atomic<bool> deviceFatal{false};
  // async_fd was made non-blocking: its events are read only then (a blocking read would hang the thread that
  // drives a comm while no event is pending).
  std::atomic<bool> eventsReadable{false};
  // When each port (by its number; ports past kTrackedPorts are not tracked) last went down, from its port error
  // event, in steady-clock nanoseconds; 0 while it is up (port active).
  static constexpr int kTrackedPorts = 16;
  std::atomic<int64_t> portDownSinceNs[kTrackedPorts]{};
};

// Makes the context's async_fd non-blocking, so its events are read without a thread of their own.
bool makeAsyncEventsNonBlocking(ibv_context* context);

// One active port: what the plugin calls a physical device.
struct Port {
  Hca* hca = nullptr;
  std::string name;  // "mlx5_0", or "mlx5_0:2" when the HCA has several selected ports
  int port = 1;
  ibv_port_attr attr{};
  int gidIndex = 0;
  ibv_gid gid{};
  std::string gidType;  // "RoCE v2", "IB/RoCE v1", or "" for InfiniBand
  int speedMbps = 0;
  std::string pciPath;
  uint64_t guid = 0;
  bool isEthernet() const { return attr.link_layer == IBV_LINK_LAYER_ETHERNET; }
};

struct DiscoveryOptions {
  std::string hcaSpec;          // NCCL_IB_HCA
  int gidIndex = -1;            // NCCL_IB_GID_INDEX; -1 = automatic, by gidPreference
  GidPreference gidPreference;  // NCCL_IB_ADDR_FAMILY, NCCL_IB_ADDR_RANGE, NCCL_IB_ROCE_VERSION_NUM
};

// GPUDirect RDMA kernel support (nvidia-peermem / nv_peer_mem): CUDA pointers can go to ibv_reg_mr.
bool gdrKernelSupport();
// The NVIDIA driver is loaded, so CUDA memory can be exported as a dmabuf.
bool nvidiaDriverPresent();

// Opens every HCA and lists the active ports the filter selects. On an empty result *why says what was seen.
std::vector<Port> discoverPorts(const Verbs& verbs, const DiscoveryOptions& options, std::vector<Hca*>* hcas,
                                std::string* why);

// Picks a GID index for a RoCE port by `preference` (chooseGid: by default a routable IPv4-mapped RoCE v2 GID), with
// a WARN (where `warn`) when none is of the asked family and range; 0 where no GID has an address.
int chooseGidIndex(const Verbs& verbs, ibv_context* context, const std::string& hcaName, int port, int tableLength,
                   const GidPreference& preference, std::string* type, bool warn = true);

// The GID a new connection on `port` uses: on RoCE chosen again from the table as discoverPorts chose it (as NCCL
// chooses per connection), since an address added, removed or moved after init changes the table and a GID taken at
// init may name an address the host no longer has; on InfiniBand the one of init. False, with *error, where the
// port has no usable GID now.
bool currentGid(const Verbs& verbs, const Port& port, const DiscoveryOptions& options, int* index, ibv_gid* gid,
                std::string* error);

// "::ffff:10.0.0.1"-style text of a GID.
std::string gidText(const ibv_gid& gid);

}  // namespace nns_ib
