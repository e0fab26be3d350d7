// Discovery of the local machine: NUMA nodes, CPUs and the PCI tree through hwloc, NICs placed from a NicInfo list.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nns/topology/xml.h"

namespace nns::topo {

// What a net plugin's getProperties reports for one device; the loader will fill these from a plugin later.
struct NicInfo {
  std::string name;
  std::string pciPath;  // sysfs path of the device (any path under the PCI device), empty for virtual NICs
  int speedMbps = 0;    // <= 0: unknown (NCCL assumes 10 Gb/s)
  int port = 0;
  std::uint64_t guid = 0;  // 0: unknown (NCCL then uses the device index)
  int maxComms = 0;        // 0: not reported
  float latency = 0;
  bool gpuDirect = false;  // ptrSupport includes CUDA (or DMA-BUF) pointers
};

// Running network interfaces from /sys/class/net except loopback, sorted by name: what the tool uses until a plugin
// is loaded (an interface that is down or has no link is not one NCCL's socket transport would use).
std::vector<NicInfo> listSysfsNics(const std::string& sysfsRoot = "/sys");

struct DiscoveryReport {
  int numaNodes = 0;
  int cpuCores = 0;
  int processingUnits = 0;
  std::string cpuVendor;
  std::string cpuModelName;
  std::vector<std::string> notes;  // what could not be read, and what was assumed instead
};

// The link_speed NCCL writes for a PCI device: the slower of the device's and its upstream port's max_link_speed,
// each read as "<float> GT/s"; a side that does not read so ("Unknown", empty) loses, and on a tie the device's wins.
std::string minPciLinkSpeed(const std::string& deviceSpeed, const std::string& upstreamSpeed);

// Builds a <system version="1"> document the way NCCL's own detection writes it: <cpu> per NUMA node (affinity,
// arch, vendor, family, model), the PCI switches leading to each NIC and NVIDIA GPU (as NCCL's sysfs walk keeps them),
// a <nic><net> per NicInfo (dev in list order). GPUs are left as bare <pci> leaves: without NVML their compute
// capability is unknown (see CompletionOptions). Throws TopologyError when hwloc cannot load the topology.
//
// fsRoot: discover another machine from a copy of its file system tree instead of this one, as hwloc's tools do
// with `-i DIR`: the directory hwloc-gather-topology's tarball unpacks to (sys/, proc/, and cpuid/ when gathered).
// hwloc then reads that tree (set through HWLOC_FSROOT for the load: call it from one thread), and the link widths,
// speeds and NUMA nodes come from its sys/. HWLOC_XMLFILE, where set, still gives hwloc's part, as in hwloc's own
// tools. Throws TopologyError when fsRoot is no such tree. Empty: this machine.
XmlDocument discoverTopology(const std::vector<NicInfo>& nics, DiscoveryReport* report = nullptr,
                             const std::string& fsRoot = "");

}  // namespace nns::topo
