// ucx_devices.hpp: the devices the nns-ucx plugin offers NCCL, taken from what UCX itself would use in this process.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nccl_net/sdk/socket.hpp>

namespace nns_ucx {

struct UcxDevice {
  std::string name;                     // UCX's device name: "eth0", "mlx5_0:1", or "memory" (shared memory)
  std::vector<std::string> transports;  // the UCX transports that use it ("tcp", "rc_mlx5", "posix", ...)
  bool sharedMemory = false;            // the stand-in device when UCX was given shared-memory transports only
  bool sharedMemoryTransports = false;  // UCX also selected shared-memory transports (for peers on this host)
  bool rdma = false;                    // an RDMA transport (rc/ud/dc) uses it: registering memory up front pays off
  std::string pciPath;                  // empty when the device is not a PCI function (loopback, virtual links)
  int speedMbps = 0;
  int port = 0;  // the port of an RDMA device ("mlx5_0:1" -> 1), 0 otherwise
  uint64_t guid = 0;
  nccl_net::sdk::SocketAddress sideChannel{};  // where this device's listeners bind the connection side channel
};

// Runs UCX's own resource selection (UCX_TLS, UCX_NET_DEVICES, UCX_SHM_DEVICES...) and returns one device per network
// device it selected, loopback left out unless named in UCX_NET_DEVICES or alone. With no network device selected
// (UCX_TLS=sm) a single "memory" device stands for UCX's shared-memory transports. Empty with *error set on failure,
// which includes a network device left without a side channel (no IP interface, or NNS_UCX_SIDE_IFNAME matching none).
// `sharedMemorySpeedMbps` is what the "memory" device reports as its speed (UCX gives no number NCCL could use).
std::vector<UcxDevice> discoverDevices(int sharedMemorySpeedMbps, std::string* error);

// Removes the devices that are an RDMA device's own port seen again through TCP: the Ethernet port of a RoCE adapter
// or the IPoIB interface of an IB one, which UCX lists beside "mlx5_0:1" (tcp/eth2) and which share its PCI function.
// NCCL would take them for two equal NICs and spread channels over both, half of them over TCP. An interface named in
// `keep` (UCX_NET_DEVICES, when it lists devices) stays. Returns the names removed.
std::vector<std::string> dropTcpViewsOfRdmaPorts(std::vector<UcxDevice>& devices, const std::vector<std::string>& keep);

// Removes loopback ("lo") and container bridges ("docker*"), which UCX lists for tcp like any interface but NCCL's
// own interface choice passes over (NCCL_SOCKET_IFNAME's default, ^docker,lo): NCCL would take them for NICs and send
// a share of its channels through them. They stay when named in `keep` (UCX_NET_DEVICES), or when nothing else is
// listed (a single host's tests over loopback). Returns the names removed.
std::vector<std::string> dropHostOnlyInterfaces(std::vector<UcxDevice>& devices, const std::vector<std::string>& keep);

// Parses the resource lines of ucp_context_print_info() ("#      resource 1  :  md 1  dev 1  flags -- tcp/lo")
// into (transport, device) pairs. Exposed for the unit test.
std::vector<std::pair<std::string, std::string>> parseResources(const std::string& printedInfo);

}  // namespace nns_ucx
