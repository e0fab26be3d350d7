// NCCL's topology model: node, link and path types, bandwidth constants, and the System graph built from XML.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "nns/topology/xml.h"

namespace nns::topo {

// Node types; the numbering is NCCL's and matters for printing order and array layout.
enum NodeType : int { GPU = 0, PCI = 1, NVS = 2, CPU = 3, NIC = 4, NET = 5 };
inline constexpr int kNodeTypeCount = 6;

// Link types and path types share one numbering (NCCL topo.h). Gaps in link types are path-only values.
enum LinkType : int { LINK_LOC = 0, LINK_NVL = 1, LINK_C2C = 3, LINK_PCI = 4, LINK_SYS = 9, LINK_NET = 10 };
enum PathType : int {
  PATH_LOC = 0,
  PATH_NVL = 1,
  PATH_NVB = 2,
  PATH_C2C = 3,
  PATH_PIX = 4,
  PATH_PXB = 5,
  PATH_P2C = 6,
  PATH_PXN = 7,
  PATH_PHB = 8,
  PATH_SYS = 9,
  PATH_NET = 10,
  PATH_DIS = 11
};
// Only used for NIC fusion distances: two ports of one NIC.
inline constexpr int PATH_PORT = PATH_NVL;

std::string_view nodeTypeName(int type);
std::string_view linkTypeName(int type);
std::string_view pathTypeName(int type);

// Bandwidths in GB/s (NCCL topo.h).
inline constexpr float LOC_BW = 5000.0f;
inline constexpr float SM60_NVLINK_BW = 18.0f;
inline constexpr float SM70_NVLINK_BW = 20.0f;
inline constexpr float SM80_NVLINK_BW = 20.0f;
inline constexpr float SM86_NVLINK_BW = 12.0f;
inline constexpr float SM90_NVLINK_BW = 20.6f;
inline constexpr float SM100_NVLINK_BW = 40.1f;
inline constexpr float AMD_BW = 16.0f;
inline constexpr float BDW_QPI_BW = 6.0f;
inline constexpr float SKL_QPI_BW = 10.0f;
inline constexpr float SRP_QPI_BW = 22.0f;
inline constexpr float ERP_QPI_BW = 40.0f;
inline constexpr float ZPI_BW = 6.0f;
inline constexpr float YONGFENG_ZPI_BW = 9.0f;
inline constexpr float P9_BW = 32.0f;
inline constexpr float ARM_BW = 6.0f;
inline constexpr int kMaxChannels = 64;
// NCCL_TOPO_MAX_NODES of NCCL 2.30 (576 GPUs of an NVL144-class system plus headroom): more nodes of one type is
// rejected, which also bounds the memory of the per-node path tables.
inline constexpr int kMaxNodesPerType = 640;

float nvlinkBandwidth(int sm);

enum class CpuArch : int { Unknown = 0, X86 = 1, Power = 2, Arm = 3 };
enum class CpuVendor : int { Unknown = 0, Intel = 1, Amd = 2, Zhaoxin = 3 };
// NCCL's CPU model classes (only Intel and Zhaoxin distinguish them).
enum class CpuModel : int { Unknown = 0, IntelBdw = 1, IntelSkl = 2, IntelSrp = 3, IntelErp = 4, Yongfeng = 5 };
// The number NCCL's log prints for a model: NCCL numbers each vendor's models from 1 (its Yongfeng is 1, as Intel's
// Broadwell), so the enum above, which keeps them apart, is not it.
inline constexpr int ncclCpuModelCode(CpuModel model) {
  return model == CpuModel::Yongfeng ? 1 : static_cast<int>(model);
}

// Node ids: top 8 bits system (host) index, low 56 bits the local id (bus id, numa id, net dev). As NCCL's
// NCCL_TOPO_ID, the local id is masked to its low 56 bits: a NIC's (numaid << 56) + busid keeps only the bus id, and
// a CPU of numaid -1 is CPU/0-ffffffffffffff, on system 0.
inline constexpr std::int64_t makeTopoId(int systemId, std::int64_t localId) {
  return (static_cast<std::int64_t>(systemId) << 56) + (localId & 0x00ffffffffffffffLL);
}
inline constexpr int topoIdSystem(std::int64_t id) {
  return static_cast<int>(static_cast<std::uint64_t>(id) >> 56);
}
inline constexpr std::int64_t topoIdLocal(std::int64_t id) {
  return id & 0x00ffffffffffffffLL;
}
// "0000:17:00.0" -> 0x17000: the hex digits with ':' and '.' removed (NCCL busIdToInt64).
std::int64_t busIdToInt64(std::string_view busId);

struct Link {
  int type = LINK_LOC;
  float bw = 0;
  int remType = 0;
  int remIndex = 0;
};

struct Path {
  std::vector<Link*> links;  // hops from the owning node towards the target
  float bw = 0;
  int type = PATH_DIS;
  int count() const { return static_cast<int>(links.size()); }
};

// The largest communicator the topology code takes: GPU ranks in a file are 0 .. kMaxRanks - 1.
constexpr int kMaxRanks = 1 << 24;

struct GpuInfo {
  int dev = 0;
  int rank = 0;
  int sm = 0;
  int gdr = 0;
};
struct NetInfo {
  int dev = 0;
  std::string name;
  std::string busId;  // of the <pci> it is on (a port's own function; its NIC node is the first function's), or ""
  std::uint64_t asic = 0;
  int port = 0;
  float bw = 0;
  float latency = 0;
  int gdr = 0;
  int maxChannels = kMaxChannels;
  int coll = 0;
};
struct CpuInfo {
  int numaId = 0;
  CpuArch arch = CpuArch::Unknown;
  CpuVendor vendor = CpuVendor::Unknown;
  CpuModel model = CpuModel::Unknown;
  std::string affinity;
};

struct Node {
  int type = GPU;
  std::int64_t id = 0;
  std::string busId;  // PCI bus id text when the node comes from a <pci> element
  GpuInfo gpu;
  NetInfo net;
  CpuInfo cpu;
  std::uint64_t pciDevice = 0;  // vendor<<48 | device<<32 | subvendor<<16 | subdevice
  std::vector<Link> links;
  std::array<std::vector<Path>, kNodeTypeCount> paths;  // paths[t][i]: from this node to node i of type t
  std::uint64_t used = 0;                               // search: channels that already went through this GPU
};

// The graph. Links hold (type, index) references; paths hold pointers into the link vectors, so a System is
// move-only and paths must be recomputed after any structural change (computePaths does that).
class System {
 public:
  System() = default;
  System(const System&) = delete;
  System& operator=(const System&) = delete;
  System(System&&) = default;
  System& operator=(System&&) = default;

  std::array<std::vector<Node>, kNodeTypeCount> nodes;
  bool inter = false;  // more ranks than local GPUs: the network is used (set by trimSystem or by the caller)
  float maxBw = 0;
  float totalBw = 0;
  std::string name;
  // What the file asks of NCCL that this engine leaves out (a GIN node), one sentence each with the file and line.
  std::vector<std::string> notes;

  int count(int type) const { return static_cast<int>(nodes[type].size()); }
  Node& node(int type, int index) { return nodes[type][static_cast<std::size_t>(index)]; }
  const Node& node(int type, int index) const { return nodes[type][static_cast<std::size_t>(index)]; }
  int indexOf(int type, std::int64_t id) const;  // -1 when absent
  int gpuIndexOfRank(int rank) const;            // -1 when absent
  int netIndexOfDev(int dev) const;              // -1 when absent
  // Adds a node; throws TopologyError on a duplicate id of the same type.
  int addNode(int type, std::int64_t id);
  // Adds bw to the link node->rem of that type, creating it; keeps links sorted by decreasing bw (stable).
  void connect(int type1, int index1, int type2, int index2, int linkType, float bw);
  // Removes a node and every link to it, shifting indices of later nodes of that type. Clears all paths.
  void removeNode(int type, int index);
  void clearPaths();
  std::string idString(int type, int index) const;  // NCCL log shape "GPU/0-17000"
};

// Options for files that only list the PCI tree (cloud files): what NVML and the net plugin would add.
struct CompletionOptions {
  int gpuSm = 0;       // 0: do not add <gpu> to GPU-class leaves
  int gpuNvlinks = 0;  // NVLinks to an NVSwitch per GPU (tclass 0x068000), as NCCL adds in VMs
  int gpuGdr = 1;
  int nicSpeedMbps = 0;  // 0: do not add <nic><net> to NIC-class leaves
  int nicPort = 0;
  int nicMaxConn = 0;  // 0: leave maxconn out (NCCL default 64)
  int nicGdr = 1;
  std::string nicNamePrefix = "net";
};
// Adds <gpu> and <nic><net> to PCI leaves that lack them: dev/rank follow bus-id order among the added devices
// (ranks continue after existing ones). Returns the number of GPUs and NETs added.
std::pair<int, int> completeTopology(XmlElement& systemRoot, const CompletionOptions& options);

// Builds the graph from a <system> element, following ncclTopoGetSystemFromXml: CPUs and PCI trees, NVLinks, C2C,
// pcilinks, Broadcom switch flattening, CPU interconnect, link sorting. Throws TopologyError with file:line.
System buildSystem(const XmlDocument& doc);
System buildSystem(const XmlElement& systemRoot, const std::string& sourceName);

// CPU interconnect bandwidth from the source CPU of a SYS link.
float interCpuBandwidth(const CpuInfo& cpu);

}  // namespace nns::topo
