// Local discovery: hwloc for NUMA nodes, cores and PCI ancestry; sysfs for link speeds, NUMA affinity and netdevs.
#include "nns/topology/discovery.h"

#include <hwloc.h>
#include <sys/utsname.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <utility>

#include "nns/topology/model.h"

namespace nns::topo {

namespace fs = std::filesystem;

namespace {

std::string readLine(const fs::path& p) {
  std::ifstream in(p);
  std::string s;
  if (in) std::getline(in, s);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

bool looksLikeBusId(const std::string& s) {
  static const std::regex re("^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\\.[0-7]$");
  return std::regex_match(s, re);
}

// The PCI function that a sysfs device path belongs to: the last path component shaped like a bus id.
std::string busIdOfPath(const std::string& path) {
  std::string best;
  for (const auto& part : fs::path(path))
    if (looksLikeBusId(part.string())) best = part.string();
  return best;
}

// A max_link_speed as NCCL reads it (sscanf "%f GT/s"): the number it starts with, and +infinity when it does not
// start with one ("Unknown", empty), so that such a side never wins the minimum.
float linkSpeedGts(const std::string& speed) {
  float v = std::numeric_limits<float>::infinity();
  if (std::sscanf(speed.c_str(), "%f", &v) != 1) return std::numeric_limits<float>::infinity();
  return v;
}

}  // namespace

std::string minPciLinkSpeed(const std::string& deviceSpeed, const std::string& upstreamSpeed) {
  return linkSpeedGts(upstreamSpeed) < linkSpeedGts(deviceSpeed) ? upstreamSpeed : deviceSpeed;
}

namespace {

struct HwlocTopology {
  hwloc_topology_t topo = nullptr;
  ~HwlocTopology() {
    if (topo) hwloc_topology_destroy(topo);
  }
};

std::string cpumapOf(hwloc_const_bitmap_t set) {
  // Linux cpumap format: 32-bit hex words, most significant first, comma separated.
  int last = hwloc_bitmap_last(set);
  int words = last < 0 ? 1 : last / 32 + 1;
  std::string out;
  for (int w = words - 1; w >= 0; --w) {
    unsigned v = 0;
    for (int b = 0; b < 32; ++b)
      if (hwloc_bitmap_isset(set, static_cast<unsigned>(w * 32 + b))) v |= 1u << b;
    char buf[16];
    std::snprintf(buf, sizeof buf, "%08x", v);
    if (!out.empty()) out += ',';
    out += buf;
  }
  return out;
}

std::string hexOf(unsigned v, int width) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%0*x", width, v);
  return buf;
}

std::string busIdText(const hwloc_obj_t obj) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%01x", obj->attr->pcidev.domain, obj->attr->pcidev.bus,
                obj->attr->pcidev.dev, obj->attr->pcidev.func);
  return buf;
}

// A max_link_width as NCCL reads it (strtol base 0): 0 when the file is missing or does not start with a number.
int linkWidth(const fs::path& file) {
  return static_cast<int>(std::strtol(readLine(file).c_str(), nullptr, 0));
}

// The link NCCL writes for a PCI device: the slower speed and the narrower width of the device's own max_link_* and
// those of the port above it (its sysfs "../max_link_*"). A speed that does not read loses (linkSpeedGts); a width
// that does not read is 0 and wins, as NCCL takes std::min of the two strtol's: so a device with no port above it
// (right on a root bus, pci0000:00, as in most VMs) or under a port without the file gets link_width="0", which
// NCCL's loader then takes as x16. `up` empty: no such port.
void setMinLink(XmlElement& pci, const fs::path& dev, const std::optional<fs::path>& up) {
  std::string speed = readLine(dev / "max_link_speed");
  const int width = linkWidth(dev / "max_link_width");
  const int upWidth = up ? linkWidth(*up / "max_link_width") : 0;
  if (up) speed = minPciLinkSpeed(speed, readLine(*up / "max_link_speed"));
  pci.setAttr("link_speed", speed);
  pci.setAttr("link_width", std::to_string(std::min(width, upWidth)));
}

// Fills class/ids/link attributes of a <pci> from hwloc and sysfs; the link is the minimum of the device and its
// upstream port (hwloc's bridge right above it, the one sysfs has as its parent), as NCCL writes it.
void fillPci(XmlElement& pci, hwloc_obj_t obj, hwloc_obj_t upstream, const std::string& sysfsRoot) {
  const auto& a = obj->attr->pcidev;
  std::string busId = busIdText(obj);
  pci.setAttr("busid", busId);
  pci.setAttr("class", hexOf(static_cast<unsigned>(a.class_id) << 8, 6));
  pci.setAttr("vendor", hexOf(a.vendor_id, 4));
  pci.setAttr("device", hexOf(a.device_id, 4));
  pci.setAttr("subsystem_vendor", hexOf(a.subvendor_id, 4));
  pci.setAttr("subsystem_device", hexOf(a.subdevice_id, 4));
  const fs::path devices = fs::path(sysfsRoot) / "bus/pci/devices";
  setMinLink(pci, devices / busId,
             upstream ? std::optional<fs::path>(devices / busIdText(upstream)) : std::optional<fs::path>());
}

// Sets an environment variable (unsets it for nullptr) for a scope, then puts back what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ScopedEnv(ScopedEnv&& o) noexcept : name_(std::exchange(o.name_, nullptr)), old_(std::move(o.old_)) {}
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ScopedEnv& operator=(ScopedEnv&&) = delete;
  ~ScopedEnv() {
    if (!name_) return;
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A root hwloc can read a machine from: its CPUs, PCI devices and cpuinfo (hwloc reads a tree without them as a
// machine of one processor and no devices, a silent wrong answer).
void requireLinuxTree(const std::string& fsRoot) {
  std::error_code ec;
  if (!fs::is_directory(fsRoot, ec))
    throw TopologyError(fsRoot +
                        ": not a directory (a Linux file system tree: unpack hwloc-gather-topology's tarball)");
  for (const char* needed : {"sys/devices/system/cpu", "sys/bus/pci/devices", "proc/cpuinfo"})
    if (!fs::exists(fs::path(fsRoot) / needed, ec))
      throw TopologyError(fsRoot + ": no " + needed +
                          " (not a Linux file system tree as hwloc-gather-topology saves one)");
}

}  // namespace

std::vector<NicInfo> listSysfsNics(const std::string& sysfsRoot) {
  std::vector<NicInfo> out;
  fs::path base = fs::path(sysfsRoot) / "class/net";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(base, ec)) {
    std::string name = entry.path().filename().string();
    // IFF_LOOPBACK (0x8) in the interface flags: NCCL's socket transport never uses loopback.
    std::string flags = readLine(entry.path() / "flags");
    long flagBits = flags.empty() ? 0 : std::strtol(flags.c_str(), nullptr, 0);
    if (flagBits & 0x8) continue;
    // NCCL's socket transport only uses running interfaces (IFF_RUNNING): up, and with a link or no carrier
    // reporting at all, which the kernel shows as operstate "up" or "unknown". Without operstate, IFF_UP decides.
    std::string operstate = readLine(entry.path() / "operstate");
    if (operstate.empty() ? !(flagBits & 0x1) : (operstate != "up" && operstate != "unknown")) continue;
    NicInfo nic;
    nic.name = name;
    std::error_code e2;
    fs::path dev = fs::canonical(entry.path() / "device", e2);
    if (!e2) nic.pciPath = dev.string();
    nic.speedMbps = std::atoi(readLine(entry.path() / "speed").c_str());
    out.push_back(nic);
  }
  std::sort(out.begin(), out.end(), [](const NicInfo& a, const NicInfo& b) { return a.name < b.name; });
  return out;
}

XmlDocument discoverTopology(const std::vector<NicInfo>& nics, DiscoveryReport* report, const std::string& fsRoot) {
  const std::string sysfsRoot = fsRoot.empty() ? "/sys" : (fs::path(fsRoot) / "sys").string();
  if (!fsRoot.empty()) requireLinuxTree(fsRoot);
  DiscoveryReport local;
  DiscoveryReport& rep = report ? *report : local;
  HwlocTopology h;
  if (hwloc_topology_init(&h.topo) != 0) throw TopologyError("hwloc: topology init failed");
  hwloc_topology_set_io_types_filter(h.topo, HWLOC_TYPE_FILTER_KEEP_ALL);
  {
    // hwloc 2 takes another root from the environment only. Its x86 backend would read this CPU's cpuid and its pci
    // backend this machine's devices (libpciaccess): left out, so the tree's cpuid dump (when gathered) and the Linux
    // backend's reading of the tree's sysfs give them. An HWLOC_XMLFILE set by the user gives hwloc's part instead
    // (hwloc would take the root over it).
    std::vector<ScopedEnv> env;
    const char* hwlocXml = std::getenv("HWLOC_XMLFILE");
    if (!fsRoot.empty() && (hwlocXml == nullptr || *hwlocXml == '\0')) {
      env.emplace_back("HWLOC_FSROOT", fsRoot.c_str());
      const fs::path cpuid = fs::path(fsRoot) / "cpuid";
      std::error_code ec;
      env.emplace_back("HWLOC_CPUID_PATH", fs::is_directory(cpuid, ec) ? cpuid.c_str() : nullptr);
      if (!fs::is_directory(cpuid, ec))
        hwloc_topology_set_components(h.topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "x86");
      hwloc_topology_set_components(h.topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "pci");
    }
    if (hwloc_topology_load(h.topo) != 0) throw TopologyError("hwloc: topology load failed");
  }

  XmlDocument doc;
  doc.sourceName = "<discovery>";
  doc.root.name = "system";
  doc.root.setAttr("version", "1");

  // The architecture hwloc read (uname here, the tree's record of it in a gathered tree, the file's in an XML), else
  // this machine's.
  const char* hwlocArch = hwloc_obj_get_info_by_name(hwloc_get_root_obj(h.topo), "Architecture");
  struct utsname uts {};
  std::string arch = hwlocArch ? hwlocArch : uname(&uts) == 0 ? uts.machine : "";
  if (arch == "aarch64") arch = "arm64";
  hwloc_obj_t package = hwloc_get_next_obj_by_type(h.topo, HWLOC_OBJ_PACKAGE, nullptr);
  auto info = [&](const char* key) -> std::string {
    const char* v = package ? hwloc_obj_get_info_by_name(package, key) : nullptr;
    if (!v) v = hwloc_obj_get_info_by_name(hwloc_get_root_obj(h.topo), key);
    return v ? v : "";
  };
  rep.cpuVendor = info("CPUVendor");
  rep.cpuModelName = info("CPUModel");
  rep.cpuCores = hwloc_get_nbobjs_by_type(h.topo, HWLOC_OBJ_CORE);
  rep.processingUnits = hwloc_get_nbobjs_by_type(h.topo, HWLOC_OBJ_PU);

  // One <cpu> per NUMA node, keyed by the OS index NCCL uses as numaid.
  std::map<unsigned, std::size_t> cpuOfNuma;
  int nNuma = hwloc_get_nbobjs_by_type(h.topo, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < nNuma; ++i) {
    hwloc_obj_t numa = hwloc_get_obj_by_type(h.topo, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    XmlElement& cpu = doc.root.addChild("cpu");
    cpu.setAttr("numaid", std::to_string(numa->os_index));
    cpu.setAttr("affinity", cpumapOf(numa->cpuset));
    cpu.setAttr("arch", arch);
    if (arch == "x86_64") {
      cpu.setAttr("vendor", rep.cpuVendor);
      cpu.setAttr("familyid", info("CPUFamilyNumber").empty() ? "0" : info("CPUFamilyNumber"));
      cpu.setAttr("modelid", info("CPUModelNumber").empty() ? "0" : info("CPUModelNumber"));
    }
    cpuOfNuma[numa->os_index] = doc.root.children.size() - 1;
  }
  rep.numaNodes = nNuma;
  if (nNuma == 0) throw TopologyError("hwloc: no NUMA node found");

  // The NUMA node a PCI device is local to: hwloc's non-I/O ancestor, else sysfs numa_node, else the first one.
  auto numaOf = [&](hwloc_obj_t obj, const std::string& busId) -> unsigned {
    if (obj) {
      hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(h.topo, obj);
      if (anc && anc->nodeset) {
        int first = hwloc_bitmap_first(anc->nodeset);
        if (first >= 0 && hwloc_bitmap_weight(anc->nodeset) == 1 && cpuOfNuma.count(static_cast<unsigned>(first)))
          return static_cast<unsigned>(first);
      }
    }
    int node = std::atoi(readLine(fs::path(sysfsRoot) / "bus/pci/devices" / busId / "numa_node").c_str());
    if (node >= 0 && cpuOfNuma.count(static_cast<unsigned>(node))) return static_cast<unsigned>(node);
    return cpuOfNuma.begin()->first;
  };

  // Places a PCI device with its bridge ancestors (switches) under its NUMA node's <cpu>; returns the leaf element.
  auto placePci = [&](const std::string& busId) -> XmlElement* {
    unsigned d = 0, b = 0, dv = 0, f = 0;
    hwloc_obj_t obj = nullptr;
    if (std::sscanf(busId.c_str(), "%x:%x:%x.%x", &d, &b, &dv, &f) == 4)
      obj = hwloc_get_pcidev_by_busid(h.topo, d, b, dv, f);
    XmlElement* parent = &doc.root.children[cpuOfNuma[numaOf(obj, busId)]];
    if (!obj) {
      rep.notes.push_back("hwloc does not see PCI device " + busId + ": placed directly under its NUMA node");
      XmlElement& pci = parent->addChild("pci");
      pci.setAttr("busid", busId);
      const fs::path dev = fs::path(sysfsRoot) / "bus/pci/devices" / busId;
      pci.setAttr("class", readLine(dev / "class"));
      // The port above it is sysfs's parent of the device, which "<link>/.." reaches (the kernel resolves the link
      // first), as NCCL's "../max_link_*" does.
      setMinLink(pci, dev, dev / "..");
      return &pci;
    }
    // The PCI-to-PCI bridges above the device, nearest first (a PCIe switch is an upstream port above its downstream
    // ports; a root port sits on the root complex).
    std::vector<hwloc_obj_t> above;
    for (hwloc_obj_t p = obj->parent; p && p->type == HWLOC_OBJ_BRIDGE; p = p->parent)
      if (p->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI) above.push_back(p);
    // As NCCL's sysfs walk: a device's parent is the bridge two levels up its sysfs path (the switch's upstream port,
    // skipping the downstream port it hangs off), and so on from there; past the last bridge is the CPU. So root ports
    // and downstream ports are no nodes, and one switch is one <pci> with the devices under it (PIX between them).
    // Each node's link is the narrower of its own and that of the port right above it (NCCL's "../max_link_*").
    std::vector<std::size_t> kept;  // indices into `above`, top-down
    for (std::size_t i = 1; i < above.size(); i += 2) kept.insert(kept.begin(), i);
    for (std::size_t i : kept) {
      hwloc_obj_t bridge = above[i];
      std::string id = busIdText(bridge);
      XmlElement* found = nullptr;
      for (auto& c : parent->children)
        if (c.name == "pci" && c.attr("busid") && *c.attr("busid") == id) found = &c;
      if (!found) {
        found = &parent->addChild("pci");
        fillPci(*found, bridge, i + 1 < above.size() ? above[i + 1] : nullptr, sysfsRoot);
        found->setAttr("class", "0x060400");
      }
      parent = found;
    }
    for (auto& c : parent->children)
      if (c.name == "pci" && c.attr("busid") && *c.attr("busid") == busIdText(obj)) return &c;
    XmlElement& pci = parent->addChild("pci");
    fillPci(pci, obj, above.empty() ? nullptr : above[0], sysfsRoot);
    return &pci;
  };

  // NVIDIA display/3D controllers: GPUs, left without <gpu> until their compute capability is known.
  for (hwloc_obj_t obj = nullptr; (obj = hwloc_get_next_pcidev(h.topo, obj));)
    if (obj->attr->pcidev.vendor_id == 0x10de && (obj->attr->pcidev.class_id >> 8) == 0x03) placePci(busIdText(obj));

  int dev = 0;
  for (const NicInfo& nic : nics) {
    std::string busId = busIdOfPath(nic.pciPath);
    XmlElement* host;
    if (busId.empty()) {
      // Virtual NIC: NCCL attaches it to a CPU directly.
      host = &doc.root.children[cpuOfNuma.begin()->second];
      rep.notes.push_back("NIC " + nic.name + " has no PCI device: attached to NUMA node " +
                          std::to_string(cpuOfNuma.begin()->first));
    } else {
      host = placePci(busId);
    }
    // Ports of one PCI device share a <nic>; virtual NICs get one each, so fusion does not take them for ports
    // (the system still merges CPU-attached NICs of one NUMA node into one NIC node, as NCCL does).
    XmlElement* nicElement = busId.empty() ? nullptr : host->child("nic");
    if (!nicElement) nicElement = &host->addChild("nic");
    XmlElement& net = nicElement->addChild("net");
    net.setAttr("name", nic.name);
    net.setAttr("dev", std::to_string(dev++));
    net.setAttr("speed", std::to_string(nic.speedMbps));
    if (nic.speedMbps <= 0) rep.notes.push_back("NIC " + nic.name + " reports no speed: NCCL assumes 10000 Mb/s");
    net.setAttr("port", std::to_string(nic.port));
    char lat[32];
    std::snprintf(lat, sizeof lat, "%f", static_cast<double>(nic.latency));
    net.setAttr("latency", lat);
    if (nic.guid) {
      char guid[32];
      std::snprintf(guid, sizeof guid, "0x%llx", static_cast<unsigned long long>(nic.guid));
      net.setAttr("guid", guid);
    }
    if (nic.maxComms > 0) net.setAttr("maxconn", std::to_string(nic.maxComms));
    net.setAttr("gdr", nic.gpuDirect ? "1" : "0");
  }
  return doc;
}

}  // namespace nns::topo
