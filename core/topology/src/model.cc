// Builds the topology graph from NCCL topology XML (ncclTopoGetSystemFromXml's rules) and completes partial files.
#include "nns/topology/model.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <tuple>
#include <unordered_set>

namespace nns::topo {

namespace {
constexpr std::array<std::string_view, kNodeTypeCount> kNodeNames = {"GPU", "PCI", "NVS", "CPU", "NIC", "NET"};
constexpr std::array<std::string_view, 11> kLinkNames = {"LOC", "NVL", "", "C2C", "PCI", "", "", "", "", "SYS", "NET"};
constexpr std::array<std::string_view, 12> kPathNames = {"LOC", "NVL", "NVB", "C2C", "PIX", "PXB",
                                                         "P2C", "PXN", "PHB", "SYS", "NET", "DIS"};

bool startsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}
}  // namespace

std::string_view nodeTypeName(int type) {
  return type >= 0 && type < kNodeTypeCount ? kNodeNames[static_cast<std::size_t>(type)] : "???";
}
std::string_view linkTypeName(int type) {
  return type >= 0 && type < 11 ? kLinkNames[static_cast<std::size_t>(type)] : "???";
}
std::string_view pathTypeName(int type) {
  return type >= 0 && type < 12 ? kPathNames[static_cast<std::size_t>(type)] : "???";
}

float nvlinkBandwidth(int sm) {
  if (sm >= 100) return SM100_NVLINK_BW;
  if (sm >= 90) return SM90_NVLINK_BW;
  if (sm == 86) return SM86_NVLINK_BW;
  if (sm >= 80) return SM80_NVLINK_BW;
  if (sm >= 70) return SM70_NVLINK_BW;
  if (sm >= 60) return SM60_NVLINK_BW;
  return SM80_NVLINK_BW;
}

std::int64_t busIdToInt64(std::string_view busId) {
  std::uint64_t v = 0;
  int digits = 0;
  for (char c : busId) {
    if (c == '.' || c == ':') continue;
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      break;
    if (++digits > 16) break;  // NCCL keeps at most 16 hex digits
    v = (v << 4) | static_cast<std::uint64_t>(d);
  }
  return static_cast<std::int64_t>(v);
}

float interCpuBandwidth(const CpuInfo& cpu) {
  if (cpu.arch == CpuArch::Power) return P9_BW;
  if (cpu.arch == CpuArch::Arm) return ARM_BW;
  if (cpu.arch == CpuArch::X86) {
    switch (cpu.vendor) {
      case CpuVendor::Intel:
        return cpu.model == CpuModel::IntelErp   ? ERP_QPI_BW
               : cpu.model == CpuModel::IntelSrp ? SRP_QPI_BW
               : cpu.model == CpuModel::IntelSkl ? SKL_QPI_BW
                                                 : BDW_QPI_BW;
      case CpuVendor::Amd: return AMD_BW;
      case CpuVendor::Zhaoxin: return cpu.model == CpuModel::Yongfeng ? YONGFENG_ZPI_BW : ZPI_BW;
      default: break;
    }
  }
  return LOC_BW;
}

int System::indexOf(int type, std::int64_t id) const {
  const auto& v = nodes[type];
  for (std::size_t i = 0; i < v.size(); ++i)
    if (v[i].id == id) return static_cast<int>(i);
  return -1;
}

int System::gpuIndexOfRank(int rank) const {
  for (int g = 0; g < count(GPU); ++g)
    if (node(GPU, g).gpu.rank == rank) return g;
  return -1;
}

int System::netIndexOfDev(int dev) const {
  for (int n = 0; n < count(NET); ++n)
    if (node(NET, n).net.dev == dev) return n;
  return -1;
}

int System::addNode(int type, std::int64_t id) {
  if (indexOf(type, id) != -1) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s/%x-%llx", std::string(nodeTypeName(type)).c_str(), topoIdSystem(id),
                  static_cast<unsigned long long>(topoIdLocal(id)));
    throw TopologyError(std::string("duplicate node ") + buf);
  }
  if (count(type) >= kMaxNodesPerType)
    throw TopologyError("more than " + std::to_string(kMaxNodesPerType) + " " + std::string(nodeTypeName(type)) +
                        " nodes (NCCL_TOPO_MAX_NODES)");
  Node n;
  n.type = type;
  n.id = id;
  nodes[type].push_back(std::move(n));
  return count(type) - 1;
}

void System::connect(int type1, int index1, int type2, int index2, int linkType, float bw) {
  auto& links = node(type1, index1).links;
  std::size_t pos = 0;
  for (; pos < links.size(); ++pos)
    if (links[pos].remType == type2 && links[pos].remIndex == index2 && links[pos].type == linkType) break;
  // Links between the same pair and type aggregate (e.g. 12 NVLinks to the switches become one link).
  if (pos == links.size()) links.push_back(Link{linkType, 0.0f, type2, index2});
  links[pos].bw += bw;
  // Keep links sorted by decreasing bandwidth; an equal-bandwidth link stays behind the existing ones.
  Link saved = links[pos];
  while (pos > 0 && links[pos - 1].bw < saved.bw) {
    links[pos] = links[pos - 1];
    --pos;
  }
  links[pos] = saved;
}

void System::clearPaths() {
  for (auto& v : nodes)
    for (auto& n : v)
      for (auto& p : n.paths) p.clear();
}

void System::removeNode(int type, int index) {
  clearPaths();
  nodes[type].erase(nodes[type].begin() + index);
  for (auto& v : nodes) {
    for (auto& n : v) {
      auto& links = n.links;
      links.erase(std::remove_if(links.begin(), links.end(),
                                 [&](const Link& l) { return l.remType == type && l.remIndex == index; }),
                  links.end());
      for (auto& l : links)
        if (l.remType == type && l.remIndex > index) --l.remIndex;
    }
  }
}

std::string System::idString(int type, int index) const {
  const Node& n = node(type, index);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s/%x-%llx", std::string(nodeTypeName(type)).c_str(), topoIdSystem(n.id),
                static_cast<unsigned long long>(topoIdLocal(n.id)));
  return buf;
}

// ---------------------------------------------------------------------------------------------------------------
// Completion of partial files.

namespace {

// An attribute's number as the file reader reads it (decimal, 0x hex, 0 octal), for numbering what completion adds
// after it: only values in [0, kMaxRanks) count. Anything else the reader refuses later, naming the line.
void raiseToNumber(const XmlElement& e, const char* key, int& max) {
  const std::string* text = e.attr(key);
  if (text == nullptr || text->empty()) return;
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text->c_str(), &end, 0);
  if (*end == '\0' && errno == 0 && value >= 0 && value < kMaxRanks) max = std::max(max, static_cast<int>(value));
}

void collectLeaves(XmlElement& e, std::vector<XmlElement*>& gpus, std::vector<XmlElement*>& nics, int& maxRank,
                   int& maxGpuDev, int& maxNetDev) {
  if (e.name == "gpu") {
    raiseToNumber(e, "rank", maxRank);
    raiseToNumber(e, "dev", maxGpuDev);
  }
  if (e.name == "net") raiseToNumber(e, "dev", maxNetDev);
  if (e.name == "pci" && !e.child("gpu") && !e.child("nic") && !e.child("pci")) {
    const std::string* cls = e.attr("class");
    if (cls && startsWith(*cls, "0x03")) gpus.push_back(&e);
    if (cls && startsWith(*cls, "0x02")) nics.push_back(&e);
  }
  for (auto& c : e.children) collectLeaves(c, gpus, nics, maxRank, maxGpuDev, maxNetDev);
}

void sortByBusId(std::vector<XmlElement*>& v) {
  std::stable_sort(v.begin(), v.end(), [](const XmlElement* a, const XmlElement* b) {
    const std::string* ba = a->attr("busid");
    const std::string* bb = b->attr("busid");
    return busIdToInt64(ba ? *ba : "") < busIdToInt64(bb ? *bb : "");
  });
}

}  // namespace

std::pair<int, int> completeTopology(XmlElement& systemRoot, const CompletionOptions& options) {
  std::vector<XmlElement*> gpus, nics;
  int maxRank = -1, maxGpuDev = -1, maxNetDev = -1;
  collectLeaves(systemRoot, gpus, nics, maxRank, maxGpuDev, maxNetDev);
  sortByBusId(gpus);
  sortByBusId(nics);
  int addedGpus = 0, addedNets = 0;
  if (options.gpuSm > 0) {
    for (XmlElement* pci : gpus) {
      XmlElement& gpu = pci->addChild("gpu");
      gpu.line = pci->line;  // numbers past the builder's range are then named at the leaf they were added to
      gpu.setAttr("dev", std::to_string(maxGpuDev + 1 + addedGpus));
      gpu.setAttr("sm", std::to_string(options.gpuSm));
      gpu.setAttr("rank", std::to_string(maxRank + 1 + addedGpus));
      gpu.setAttr("gdr", std::to_string(options.gpuGdr));
      if (options.gpuNvlinks > 0) {
        // What NCCL writes when the NVSwitch is not visible (VMs): a target that matches nothing, switch class.
        XmlElement& nvl = gpu.addChild("nvlink");
        nvl.setAttr("target", "fffffff:ffff:ff");
        nvl.setAttr("count", std::to_string(options.gpuNvlinks));
        nvl.setAttr("tclass", "0x068000");
      }
      ++addedGpus;
    }
  }
  if (options.nicSpeedMbps > 0) {
    for (XmlElement* pci : nics) {
      int dev = maxNetDev + 1 + addedNets;
      XmlElement& nic = pci->addChild("nic");
      nic.line = pci->line;
      XmlElement& net = nic.addChild("net");
      net.line = pci->line;
      net.setAttr("name", options.nicNamePrefix + std::to_string(dev));
      net.setAttr("dev", std::to_string(dev));
      net.setAttr("speed", std::to_string(options.nicSpeedMbps));
      net.setAttr("port", std::to_string(options.nicPort));
      net.setAttr("latency", "0.000000");
      char guid[24];  // NCCL's dump always has one (the plugin's); this is what a <net> without one is read as
      std::snprintf(guid, sizeof guid, "0x%x", static_cast<unsigned>(dev));
      net.setAttr("guid", guid);
      if (options.nicMaxConn > 0) net.setAttr("maxconn", std::to_string(options.nicMaxConn));
      net.setAttr("gdr", std::to_string(options.nicGdr));
      ++addedNets;
    }
  }
  return {addedGpus, addedNets};
}

// ---------------------------------------------------------------------------------------------------------------
// XML -> System.

namespace {

int pciClassToType(std::string_view cls) {
  // Prefix match, first hit, like NCCL's kvDictPciClass; anything unknown is a PCI device.
  if (startsWith(cls, "0x060400")) return PCI;
  if (startsWith(cls, "0x080100")) return PCI;
  if (startsWith(cls, "0x068000")) return NVS;
  if (startsWith(cls, "0x068001")) return CPU;
  if (startsWith(cls, "0x03")) return GPU;
  if (startsWith(cls, "0x02")) return NIC;
  return PCI;
}

int pciLaneRate(std::string_view speed) {
  // Per-lane rate in 100 Mb/s units; short forms are kernels <= 5.6, " PCIe" suffixed ones newer kernels.
  static const std::pair<std::string_view, int> kRates[] = {
      {"2.5 GT/s", 15},        {"5 GT/s", 30},          {"8 GT/s", 60},         {"16 GT/s", 120},
      {"32 GT/s", 240},        {"2.5 GT/s PCIe", 15},   {"5.0 GT/s PCIe", 30},  {"8.0 GT/s PCIe", 60},
      {"16.0 GT/s PCIe", 120}, {"32.0 GT/s PCIe", 240}, {"64.0 GT/s PCIe", 480}};
  for (const auto& [s, v] : kRates)
    if (startsWith(speed, s)) return v;
  return 60;
}

struct Builder {
  System sys;
  const std::string& source;
  int systemId = 0;

  std::string at(const XmlElement& e) const { return source + ":" + std::to_string(e.line) + ": <" + e.name + ">"; }

  // busIdText: the <pci>'s busid, when the id was made from it. Its id keeps 56 bits (14 hex digits), so two bus ids
  // that differ only past those give one node; the error then says so instead of naming only the shortened id.
  int addNodeAt(const XmlElement& e, int type, std::int64_t id, const std::string* busIdText = nullptr) {
    try {
      return sys.addNode(type, id);
    } catch (const TopologyError& err) {
      std::string why = at(e) + " " + err.what();
      if (busIdText) {
        const auto digits = std::count_if(busIdText->begin(), busIdText->end(),
                                          [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; });
        if (digits > 14)
          why += " (busid=\"" + *busIdText + "\" has " + std::to_string(digits) +
                 " hex digits; NCCL's node id keeps the last 14 of the first 16, so it reads as an id seen earlier)";
      }
      throw TopologyError(why);
    }
  }

  int intAttr(const XmlElement& e, std::string_view key) {
    std::int64_t v = parseIntAttr(e, key, source);
    if (v < INT32_MIN || v > INT32_MAX)
      throw TopologyError(at(e) + " attribute " + std::string(key) + " is out of range");
    return static_cast<int>(v);
  }
  int intAttrOr(const XmlElement& e, std::string_view key, int fallback) {
    auto v = parseOptionalIntAttr(e, key, source);
    if (!v) return fallback;
    if (*v < INT32_MIN || *v > INT32_MAX)
      throw TopologyError(at(e) + " attribute " + std::string(key) + " is out of range");
    return static_cast<int>(*v);
  }

  // An attribute that must lie in [lo, hi] (or its fallback when absent): values NCCL would take and then misuse
  // (sm 0, a gdr flag of 7, maxconn -1) are the file's mistake, named at their line.
  int boundedAttrOr(const XmlElement& e, std::string_view key, int fallback, int lo, int hi) {
    int v = intAttrOr(e, key, fallback);
    if (v < lo || v > hi)
      throw TopologyError(at(e) + " attribute " + std::string(key) + "=" + std::to_string(v) + " is outside " +
                          std::to_string(lo) + ".." + std::to_string(hi));
    return v;
  }

  void addNet(const XmlElement& xmlNet, int nicIndex, const std::string& pciBusId) {
    int dev = intAttr(xmlNet, "dev");
    if (dev < 0) throw TopologyError(at(xmlNet) + " attribute dev must not be negative");
    int n = addNodeAt(xmlNet, NET, makeTopoId(systemId, dev));
    NetInfo& net = sys.node(NET, n).net;
    net.dev = dev;
    net.busId = pciBusId;
    if (const std::string* name = xmlNet.attr("name")) net.name = *name;
    if (const std::string* guid = xmlNet.attr("guid")) {
      // Hexadecimal with or without 0x, as NCCL reads it (strtoull base 16): "10" is 0x10, and a GUID uses all 64
      // bits, beyond what a signed read accepts.
      errno = 0;
      char* end = nullptr;
      net.asic = std::strtoull(guid->c_str(), &end, 16);
      if (guid->empty() || *end != '\0' || errno == ERANGE || (*guid)[0] == '-')
        throw TopologyError(at(xmlNet) + " attribute guid=\"" + *guid + "\" is not a 64-bit hexadecimal number");
    } else {
      net.asic = static_cast<std::uint64_t>(dev);
    }
    int mbps = intAttrOr(xmlNet, "speed", 0);
    if (mbps <= 0) mbps = 10000;  // some NICs report -1
    net.bw = static_cast<float>(mbps / 8000.0);
    net.latency = parseOptionalFloatAttr(xmlNet, "latency", source).value_or(0.0f);
    if (net.latency < 0)
      throw TopologyError(at(xmlNet) + " attribute latency=" + std::to_string(net.latency) + " is negative");
    net.port = boundedAttrOr(xmlNet, "port", 0, 0, INT32_MAX);
    net.gdr = boundedAttrOr(xmlNet, "gdr", 0, 0, 1);
    net.maxChannels = boundedAttrOr(xmlNet, "maxconn", kMaxChannels, 1, INT32_MAX);
    net.coll = boundedAttrOr(xmlNet, "coll", 0, 0, 1);
    sys.connect(NIC, nicIndex, NET, n, LINK_NET, net.bw);
    sys.connect(NET, n, NIC, nicIndex, LINK_NET, net.bw);
  }

  void addNic(const XmlElement& xmlNic, int nicIndex, const std::string& pciBusId) {
    for (const auto& sub : xmlNic.children) {
      if (sub.name != "net") continue;
      if (!sub.hasAttr("dev")) continue;  // not a device of this plugin
      // As ncclTopoAddNic: `net` (default 1) makes the NET node, `gin` (default 0) a GIN node (GPU-initiated
      // networking, NCCL 2.28+), each when not 0. A GIN node is not modelled here: said, rather than the device
      // silently missing (or, before `net` was read, shown as a NET that NCCL does not make).
      const bool isNet = intAttrOr(sub, "net", 1) != 0;
      if (isNet) addNet(sub, nicIndex, pciBusId);
      if (intAttrOr(sub, "gin", 0) != 0) {
        const std::string* name = sub.attr("name");
        sys.notes.push_back(at(sub) + " dev " + std::to_string(intAttr(sub, "dev")) +
                            (name ? " (" + *name + ")" : std::string()) + " has gin=\"" + *sub.attr("gin") +
                            "\": NCCL makes a GIN node (GPU-initiated networking) for it, which this engine does not " +
                            "model: left out (" + (isNet ? "its NET is shown" : "it has net=\"0\": no NET either") +
                            ")");
      }
    }
  }

  // ncclTopoTrimXml, before the system is built: a <cpu>, <pci>, <nic> or <net> with nothing kept at or below it is
  // removed. Kept are what NCCL marks keep="1": the GPUs of the communicator (a <gpu> with a rank) and the net plugin's
  // devices (a <net> with a dev), and an element a file marks so itself (with all below it). So a NUMA node or a
  // PCI switch with neither, and a NIC no plugin lists, make no node, as in NCCL (they were kept, with their links).
  std::unordered_set<const XmlElement*> trimmed = {};
  bool trim(const XmlElement& e) {
    const std::string* keep = e.attr("keep");
    if ((keep && *keep == "1") || (e.name == "gpu" && e.hasAttr("rank")) || (e.name == "net" && e.hasAttr("dev")))
      return true;
    bool kept = false;
    for (const auto& c : e.children) kept = trim(c) || kept;
    if (!kept && (e.name == "pci" || e.name == "cpu" || e.name == "nic" || e.name == "net")) trimmed.insert(&e);
    return kept;
  }
  bool isTrimmed(const XmlElement& e) const { return trimmed.count(&e) != 0; }

  void addPci(const XmlElement& xmlPci, int parentType, int parentIndex, int numaId) {
    int type = pciClassToType(requireAttr(xmlPci, "class", source));
    const std::string& busIdText = requireAttr(xmlPci, "busid", source);
    // NCCL reads a bus id up to its first character that is not a hex digit, ':' or '.': "zzzz" and "" became bus 0,
    // and two such devices a "duplicate node" far from the cause. A file's busid is all such characters.
    if (busIdText.empty() || busIdText.find_first_not_of("0123456789abcdefABCDEF:.") != std::string::npos ||
        busIdText.find_first_of("0123456789abcdefABCDEF") == std::string::npos)
      throw TopologyError(at(xmlPci) + " busid=\"" + busIdText +
                          "\" is not a PCI bus id (hex digits with ':' and '.', as 0000:17:00.0)");
    std::int64_t busId = busIdToInt64(busIdText);
    // One PCI function is a GPU or a NIC. NCCL given both makes the two nodes and connects only the NIC's: the GPU's
    // paths are all DIS, and the file fails far away ("no CPU close to GPU/...") or searches an unconnected GPU.
    if (xmlPci.child("gpu") != nullptr && xmlPci.child("nic") != nullptr)
      throw TopologyError(at(xmlPci) +
                          " holds both a <gpu> and a <nic>: NCCL would connect only the NIC and leave the GPU "
                          "unconnected (give each its own <pci>)");
    int nodeType = -1, nodeIndex = -1;
    if (const XmlElement* xmlGpu = xmlPci.child("gpu")) {
      if (!xmlGpu->hasAttr("rank")) return;  // GPU of another process: not part of this communicator
      nodeType = GPU;
      nodeIndex = addNodeAt(xmlPci, GPU, makeTopoId(systemId, busId), &busIdText);
      Node& g = sys.node(GPU, nodeIndex);
      g.busId = busIdText;
      g.gpu.sm = intAttr(*xmlGpu, "sm");
      if (g.gpu.sm <= 0 || g.gpu.sm > 1000)
        throw TopologyError(at(*xmlGpu) + " attribute sm=" + std::to_string(g.gpu.sm) +
                            " is not a compute capability (10 x major + minor, as 90)");
      g.gpu.rank = intAttr(*xmlGpu, "rank");
      if (g.gpu.rank < 0 || g.gpu.rank >= kMaxRanks)
        throw TopologyError(at(*xmlGpu) + " rank " + std::to_string(g.gpu.rank) + " is outside 0.." +
                            std::to_string(kMaxRanks - 1));
      // The NVML index picks the GPU's NICs (dev + channel, bit-mirrored) and names it in graph files: it lies in
      // the range ranks do, which keeps that arithmetic far from overflowing.
      g.gpu.dev = intAttr(*xmlGpu, "dev");
      if (g.gpu.dev < 0 || g.gpu.dev >= kMaxRanks)
        throw TopologyError(at(*xmlGpu) + " attribute dev=" + std::to_string(g.gpu.dev) + " is outside 0.." +
                            std::to_string(kMaxRanks - 1));
      g.gpu.gdr = intAttr(*xmlGpu, "gdr");
      if (g.gpu.gdr != 0 && g.gpu.gdr != 1)
        throw TopologyError(at(*xmlGpu) + " attribute gdr=" + std::to_string(g.gpu.gdr) + " is outside 0..1");
      for (int o = 0; o + 1 < sys.count(GPU); ++o) {
        if (sys.node(GPU, o).gpu.rank == g.gpu.rank)
          throw TopologyError(at(*xmlGpu) + " rank " + std::to_string(g.gpu.rank) + " is used by two GPUs");
        if (sys.node(GPU, o).gpu.dev == g.gpu.dev)
          throw TopologyError(at(*xmlGpu) + " dev " + std::to_string(g.gpu.dev) + " is used by two GPUs");
      }
    }
    if (const XmlElement* xmlNic = xmlPci.child("nic")) {
      // Multi-port NICs share one NIC node: the id ignores the PCI function (spec topology.md, `<nic>`: 0000:12:00.0
      // and .1 are one NIC, each port a NET). Its NUMA part (numaId << 56) is what the spec names, but makeTopoId
      // keeps only the low 56 bits, as NCCL_TOPO_ID does: NCCL's id, and so this one, is the bus id alone.
      std::int64_t localNicId = static_cast<std::int64_t>((static_cast<std::uint64_t>(numaId) << 56) +
                                                          (static_cast<std::uint64_t>(busId) & ~std::uint64_t{0xf}));
      std::int64_t id = makeTopoId(systemId, localNicId);
      int nic = sys.indexOf(NIC, id);
      if (nic == -1) {
        nic = addNodeAt(xmlPci, NIC, id, &busIdText);
        sys.node(NIC, nic).busId = busIdText;
        nodeType = NIC;
        nodeIndex = nic;
      }
      addNic(*xmlNic, nic, busIdText);
    } else if (type == PCI && nodeType == -1) {
      nodeType = PCI;
      nodeIndex = addNodeAt(xmlPci, PCI, makeTopoId(systemId, busId), &busIdText);
      std::uint64_t device = 0;
      static const std::pair<std::string_view, int> kIdParts[] = {
          {"vendor", 48}, {"device", 32}, {"subsystem_vendor", 16}, {"subsystem_device", 0}};
      for (const auto& [key, shift] : kIdParts)
        if (auto v = parseOptionalIntAttr(xmlPci, key, source)) device += static_cast<std::uint64_t>(*v) << shift;
      sys.node(PCI, nodeIndex).pciDevice = device;
      sys.node(PCI, nodeIndex).busId = busIdText;
      // NCCL reads every child of a switch but <pcilink> as a <pci>, and fails the file on one without a class: a
      // <net> or <gpu> here (a hand-edited file without its <pci><nic> or <pci> wrapper) was silently left out.
      for (const auto& sub : xmlPci.children) {
        if (sub.name == "pci") {
          if (!isTrimmed(sub)) addPci(sub, PCI, nodeIndex, numaId);
        } else if (sub.name != "pcilink") {
          throw TopologyError(at(sub) + " inside a PCI switch's <pci> is not read by NCCL, which fails the file: a " +
                              "switch holds <pci> (and <pcilink>) only; a NET goes in <pci><nic><net>, a GPU in " +
                              "<pci><gpu>");
        }
      }
    }
    if (nodeType != -1) {
      // link_width "" or 0 means unknown: NCCL assumes x16.
      const std::string& widthText = requireAttr(xmlPci, "link_width", source);
      int width = widthText.empty() ? 0 : intAttr(xmlPci, "link_width");
      if (width < 0 || width > 1024) throw TopologyError(at(xmlPci) + " link_width=\"" + widthText + "\" is invalid");
      if (width == 0) width = 16;
      int rate = pciLaneRate(requireAttr(xmlPci, "link_speed", source));
      float bw = static_cast<float>(width * rate / 80.0);
      sys.connect(nodeType, nodeIndex, parentType, parentIndex, LINK_PCI, bw);
      sys.connect(parentType, parentIndex, nodeType, nodeIndex, LINK_PCI, bw);
    }
  }

  void addCpu(const XmlElement& xmlCpu) {
    int numaId = intAttr(xmlCpu, "numaid");
    int c = addNodeAt(xmlCpu, CPU, makeTopoId(systemId, numaId));
    CpuInfo& cpu = sys.node(CPU, c).cpu;
    cpu.numaId = numaId;
    if (const std::string* aff = xmlCpu.attr("affinity")) cpu.affinity = *aff;
    const std::string& arch = requireAttr(xmlCpu, "arch", source);
    cpu.arch = startsWith(arch, "x86_64")  ? CpuArch::X86
               : startsWith(arch, "arm64") ? CpuArch::Arm
               : startsWith(arch, "ppc64") ? CpuArch::Power
                                           : CpuArch::Unknown;
    if (cpu.arch == CpuArch::X86) {
      const std::string& vendor = requireAttr(xmlCpu, "vendor", source);
      cpu.vendor = startsWith(vendor, "GenuineIntel")                                           ? CpuVendor::Intel
                   : startsWith(vendor, "AuthenticAMD")                                         ? CpuVendor::Amd
                   : (startsWith(vendor, "CentaurHauls") || startsWith(vendor, "  Shanghai  ")) ? CpuVendor::Zhaoxin
                                                                                                : CpuVendor::Unknown;
      if (cpu.vendor == CpuVendor::Intel) {
        int family = intAttr(xmlCpu, "familyid"), model = intAttr(xmlCpu, "modelid");
        cpu.model = family == 6 && model >= 0xCF   ? CpuModel::IntelErp
                    : family == 6 && model >= 0x8F ? CpuModel::IntelSrp
                    : family == 6 && model >= 0x55 ? CpuModel::IntelSkl
                                                   : CpuModel::IntelBdw;
      }
      if (cpu.vendor == CpuVendor::Zhaoxin) {
        int family = intAttr(xmlCpu, "familyid"), model = intAttr(xmlCpu, "modelid");
        if (family == 7 && model == 0x5B) cpu.model = CpuModel::Yongfeng;
      }
    }
    for (const auto& sub : xmlCpu.children) {
      if (sub.name == "gpu" || sub.name == "net")
        throw TopologyError(at(sub) + " directly under <cpu> is not read by NCCL: a <" + sub.name + "> goes inside " +
                            (sub.name == "gpu" ? "a <pci>" : "a <nic>"));
      if (isTrimmed(sub)) continue;
      if (sub.name == "pci") addPci(sub, CPU, c, numaId);
      if (sub.name == "nic") {
        // A NIC without a PCI parent (virtual) hangs off the CPU with a local-bandwidth link. Its id's NUMA part is
        // masked off as NCCL_TOPO_ID masks it: such NICs under two NUMA nodes are one NIC node (the first CPU's), as
        // in NCCL.
        std::int64_t id = makeTopoId(systemId, static_cast<std::int64_t>(static_cast<std::uint64_t>(numaId) << 56));
        int nic = sys.indexOf(NIC, id);
        if (nic == -1) {
          nic = addNodeAt(sub, NIC, id);
          sys.connect(CPU, c, NIC, nic, LINK_PCI, LOC_BW);
          sys.connect(NIC, nic, CPU, c, LINK_PCI, LOC_BW);
        }
        addNic(sub, nic, "");
      }
    }
  }

  // Walks up the PCI tree (only through switches) to the CPU, like NCCL's findLocalCpu.
  int findLocalCpu(int type, int index, int fromType, int fromIndex, int depth = 0) {
    if (type == CPU) return index;
    if (depth > 64) return -1;
    for (const Link& l : sys.node(type, index).links) {
      if (l.type != LINK_PCI || (l.remType == fromType && l.remIndex == fromIndex)) continue;
      if (l.remType != PCI && l.remType != CPU) continue;
      int c = findLocalCpu(l.remType, l.remIndex, type, index, depth + 1);
      if (c != -1) return c;
    }
    return -1;
  }

  void addNvLinks(const XmlElement& e, const std::string* parentBusId) {
    if (e.name == "nvlink") {
      if (!parentBusId) throw TopologyError(at(e) + " is not inside a <pci> element");
      int g = sys.indexOf(GPU, makeTopoId(systemId, busIdToInt64(*parentBusId)));
      if (g == -1) return;  // GPU without a rank (not in this communicator): NCCL trims it before this point
      int count = intAttr(e, "count");
      if (count < 0 || count > 1024) throw TopologyError(at(e) + " count=" + std::to_string(count) + " is invalid");
      int targetType = pciClassToType(requireAttr(e, "tclass", source));
      int remType = -1, remIndex = -1;
      if (targetType == GPU) {
        remIndex = sys.indexOf(GPU, makeTopoId(systemId, busIdToInt64(requireAttr(e, "target", source))));
        if (remIndex != -1) remType = GPU;
      } else if (targetType == CPU) {
        remIndex = findLocalCpu(GPU, g, -1, -1);
        if (remIndex != -1) remType = CPU;
      } else {
        // Every switch collapses into one NVS node.
        if (sys.count(NVS) == 0) sys.addNode(NVS, 0);
        remType = NVS;
        remIndex = 0;
      }
      if (remType != -1) {
        float bw = static_cast<float>(count) * nvlinkBandwidth(sys.node(GPU, g).gpu.sm);
        sys.connect(GPU, g, remType, remIndex, LINK_NVL, bw);
        if (remType == GPU) gpuNvLinks.push_back({g, remIndex, &e});
        // Each GPU lists its own side of a GPU-GPU NVLink; switch and CPU sides are added here.
        if (remType != GPU) sys.connect(remType, remIndex, GPU, g, LINK_NVL, bw);
      }
      return;
    }
    const std::string* busId = e.attr("busid");
    for (const auto& c : e.children) addNvLinks(c, busId ? busId : parentBusId);
  }

  // Links each side lists for itself (a GPU its side of a GPU-GPU <nvlink>, a PCI switch its side of a <pcilink>):
  // one side missing is the file's mistake, named at the line of the side that is there (path search found it
  // later, with no line, as "no reverse link").
  struct ListedLink {
    int from, to;
    const XmlElement* element;
  };
  std::vector<ListedLink> gpuNvLinks = {}, pciLinks = {};
  void checkBothWays(const std::vector<ListedLink>& listed, int type, int linkType, const std::string& node) {
    for (const auto& [from, to, element] : listed) {
      bool back = false;
      for (const Link& l : sys.node(type, to).links)
        back = back || (l.type == linkType && l.remType == type && l.remIndex == from);
      if (!back)
        throw TopologyError(at(*element) + " links " + node + " " + sys.node(type, from).busId + " to " + node + " " +
                            sys.node(type, to).busId + ", which lists no <" + element->name + "> back (each " + node +
                            " lists its side)");
    }
  }

  void addC2c(const XmlElement& e, const std::string* parentBusId) {
    if (e.name == "c2c") {
      if (!parentBusId) throw TopologyError(at(e) + " is not inside a <pci> element");
      int g = sys.indexOf(GPU, makeTopoId(systemId, busIdToInt64(*parentBusId)));
      if (g == -1) return;
      int count = intAttr(e, "count");
      int bw = intAttr(e, "bw");
      if (count < 0 || bw < 0) throw TopologyError(at(e) + " count and bw must not be negative");
      float c2cBw = static_cast<float>((static_cast<double>(bw) * count) / 1000.0);
      int c = findLocalCpu(GPU, g, -1, -1);
      if (c == -1) return;
      sys.connect(GPU, g, CPU, c, LINK_C2C, c2cBw);
      sys.connect(CPU, c, GPU, g, LINK_C2C, c2cBw);
      return;
    }
    const std::string* busId = e.attr("busid");
    for (const auto& c : e.children) addC2c(c, busId ? busId : parentBusId);
  }

  void addPciLinks(const XmlElement& e, const std::string* parentBusId) {
    if (e.name == "pcilink") {
      if (!parentBusId) throw TopologyError(at(e) + " is not inside a <pci> element");
      int p = sys.indexOf(PCI, makeTopoId(systemId, busIdToInt64(*parentBusId)));
      if (p == -1) throw TopologyError(at(e) + " parent " + *parentBusId + " is not a PCI switch");
      int r = sys.indexOf(PCI, makeTopoId(systemId, busIdToInt64(requireAttr(e, "target", source))));
      if (r != -1 && r != p) {
        sys.connect(PCI, p, PCI, r, LINK_LOC, LOC_BW);
        pciLinks.push_back({p, r, &e});
      }
      return;
    }
    if (isTrimmed(e)) return;  // a switch with nothing kept below it is gone, and so are its <pcilink>s
    const std::string* busId = e.attr("busid");
    for (const auto& c : e.children) addPciLinks(c, busId ? busId : parentBusId);
  }

  static int bcmGen(std::uint64_t id, int level) {
    if ((id & 0xfffffffffffff000ULL) == 0x1000c0101000a000ULL) return 4;
    if ((id & 0xfffffffffffff000ULL) == (0x1000c03010000000ULL | static_cast<std::uint64_t>(level) * 0x1000)) return 5;
    return 0;
  }

  // Broadcom Gen4/Gen5 switches show up as two levels with the same id; the lower level is folded into the upper.
  void flattenBcmSwitches() {
    for (int s = 0; s < sys.count(PCI); ++s) {
      int gen = bcmGen(sys.node(PCI, s).pciDevice, 0);
      if (!gen) continue;
      std::vector<std::int64_t> subIds;
      auto& links = sys.node(PCI, s).links;
      for (std::size_t l = 0; l < links.size();) {
        const Link& link = links[l];
        if (link.remType == PCI && bcmGen(sys.node(PCI, link.remIndex).pciDevice, 1) == gen) {
          subIds.push_back(sys.node(PCI, link.remIndex).id);
          links.erase(links.begin() + static_cast<std::ptrdiff_t>(l));
        } else {
          ++l;
        }
      }
      std::int64_t parentId = sys.node(PCI, s).id;
      for (std::int64_t subId : subIds) {
        int sub = sys.indexOf(PCI, subId);
        int parent = sys.indexOf(PCI, parentId);
        for (const Link& l : sys.node(PCI, sub).links) {
          if (l.remType == PCI && l.remIndex == parent) continue;
          sys.node(PCI, parent).links.push_back(l);
          for (Link& back : sys.node(l.remType, l.remIndex).links) {
            if (back.remType == PCI && back.remIndex == sub) {
              back.remIndex = parent;
              break;
            }
          }
        }
        sys.removeNode(PCI, sub);
      }
      int parent = sys.indexOf(PCI, parentId);
      sys.node(PCI, parent).pciDevice |= 0xffff;  // never merge this switch again
      s = -1;                                     // node indices changed: start over
    }
  }

  void connectCpus() {
    for (int a = 0; a < sys.count(CPU); ++a)
      for (int b = 0; b < sys.count(CPU); ++b) {
        if (a == b || topoIdSystem(sys.node(CPU, a).id) != topoIdSystem(sys.node(CPU, b).id)) continue;
        sys.connect(CPU, a, CPU, b, LINK_SYS, interCpuBandwidth(sys.node(CPU, a).cpu));
      }
  }

  // Moves the up-link (towards the CPU) of every PCI tree node last, so searches go down before going up.
  void sortRec(int type, int index, int upType, int upIndex, int depth) {
    if (depth > 64) throw TopologyError(source + ": PCI tree deeper than 64 levels");
    auto& links = sys.node(type, index).links;
    if (upType != -1) {
      auto it = std::find_if(links.begin(), links.end(),
                             [&](const Link& l) { return l.remType == upType && l.remIndex == upIndex; });
      if (it != links.end()) std::rotate(it, it + 1, links.end());
    }
    for (std::size_t l = 0; l < sys.node(type, index).links.size(); ++l) {
      Link link = sys.node(type, index).links[l];
      if (link.type == LINK_PCI && !(link.remType == upType && link.remIndex == upIndex))
        sortRec(link.remType, link.remIndex, type, index, depth + 1);
    }
  }
};

}  // namespace

namespace {

// ncclTopoGetSystemFromXml on the whole document, or (trim) on what ncclTopoTrimXml keeps of it.
System buildFrom(const XmlElement& root, const std::string& sourceName, bool trim) {
  Builder b{System{}, sourceName};
  if (root.name == "graphs")
    throw TopologyError(sourceName + ":" + std::to_string(root.line) +
                        ": this is a graph file (NCCL_GRAPH_FILE), not a topology file");
  if (root.name != "system")
    throw TopologyError(sourceName + ":" + std::to_string(root.line) + ": root element is <" + root.name +
                        ">, expected <system>");
  std::int64_t version = parseIntAttr(root, "version", sourceName);
  if (version != 1)
    throw TopologyError(sourceName + ":" + std::to_string(root.line) + ": XML topology has wrong version " +
                        std::to_string(version) + " (expected 1)");
  if (const std::string* name = root.attr("name")) b.sys.name = *name;
  if (trim) b.trim(root);
  for (const auto& c : root.children) {
    // NCCL reads only <cpu> here; a device placed beside the CPUs would silently vanish from the machine.
    if (c.name == "pci" || c.name == "nic" || c.name == "gpu" || c.name == "net")
      throw TopologyError(sourceName + ":" + std::to_string(c.line) + ": <" + c.name +
                          "> directly under <system> is not read by NCCL: devices go inside a <cpu>");
    if (c.name == "cpu" && !b.isTrimmed(c)) b.addCpu(c);
  }
  b.addNvLinks(root, nullptr);
  b.checkBothWays(b.gpuNvLinks, GPU, LINK_NVL, "GPU");
  b.addC2c(root, nullptr);
  b.addPciLinks(root, nullptr);
  b.checkBothWays(b.pciLinks, PCI, LINK_LOC, "PCI switch");
  b.flattenBcmSwitches();
  b.connectCpus();
  for (int c = 0; c < b.sys.count(CPU); ++c) b.sortRec(CPU, c, -1, -1, 0);
  return std::move(b.sys);
}

}  // namespace

System buildSystem(const XmlElement& root, const std::string& sourceName) {
  // Every element is read first, trimmed or not: this reads a file alone, where NCCL fuses it with detection, so a
  // file's mistake is named wherever it is (a skeleton such as AWS's g5 file, whose <cpu>s lack arch and whose <pci>s
  // lack class, is refused at its first gap rather than trimmed to an empty machine). The system is then built from
  // what NCCL keeps.
  buildFrom(root, sourceName, false);
  return buildFrom(root, sourceName, true);
}

System buildSystem(const XmlDocument& doc) {
  return buildSystem(doc.root, doc.sourceName);
}

}  // namespace nns::topo
