// Discovery of this machine (no GPU needed): its NUMA nodes, CPUs and network interfaces must all show up.
#include <hwloc.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "nns/topology/discovery.h"
#include "topology_test_util.h"

namespace nns::topo::testing {
namespace {

namespace fs = std::filesystem;

// Interfaces NCCL's socket transport would consider: not loopback, and running (operstate up, or unknown for
// interfaces without carrier reporting).
std::set<std::string> sysfsRunningInterfacesWithoutLoopback() {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator("/sys/class/net")) {
    std::string name = e.path().filename().string();
    std::ifstream flags(e.path() / "flags");
    long f = 0;
    if (flags >> std::hex >> f; f & 0x8) continue;  // IFF_LOOPBACK
    std::ifstream oper(e.path() / "operstate");
    std::string state;
    oper >> state;
    if (state != "up" && state != "unknown") continue;
    out.insert(name);
  }
  return out;
}

void writeFile(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text << "\n";
}

// A file system tree for discovery's own reads (link speeds and widths, NUMA nodes, classes) beside an hwloc XML
// fixture, which hwloc reads in place of the tree (HWLOC_XMLFILE wins over the root, as in hwloc's tools): the paths
// every tree must have, and the files a test writes into it.
class SysfsTree {
 public:
  explicit SysfsTree(const std::string& tag)
      : root_(fs::temp_directory_path() / ("nns-topo-fsroot-" + tag + "-" + std::to_string(::getpid()))) {
    fs::remove_all(root_);
    fs::create_directories(root_ / "sys/devices/system/cpu");
    fs::create_directories(root_ / "sys/bus/pci/devices");
    writeFile(root_ / "proc/cpuinfo", "");
  }
  SysfsTree(const SysfsTree&) = delete;
  SysfsTree& operator=(const SysfsTree&) = delete;
  ~SysfsTree() { fs::remove_all(root_); }
  void device(const std::string& busId, const std::string& file, const std::string& text) const {
    writeFile(root_ / "sys/bus/pci/devices" / busId / file, text);
  }
  void link(const std::string& busId, const std::string& speed, const std::string& width) const {
    device(busId, "max_link_speed", speed);
    device(busId, "max_link_width", width);
  }
  // A device where the kernel puts it, under sys/devices/<parents> (e.g. "pci0000:c0/0000:c0:01.0"), with the
  // bus/pci/devices entry a link to it: its "..", which NCCL reads the upstream port's link from, is its parent.
  void placed(const std::string& busId, const std::string& parents) const {
    fs::create_directories(root_ / "sys/devices" / parents / busId);
    fs::create_directory_symlink(fs::path("../../../devices") / parents / busId, root_ / "sys/bus/pci/devices" / busId);
  }
  void file(const std::string& relative, const std::string& text) const { writeFile(root_ / relative, text); }
  std::string root() const { return root_.string(); }

 private:
  fs::path root_;
};

// Sets HWLOC_XMLFILE for a scope.
class HwlocXml {
 public:
  explicit HwlocXml(const char* file) { EXPECT_EQ(setenv("HWLOC_XMLFILE", file, 1), 0); }
  HwlocXml(const HwlocXml&) = delete;
  HwlocXml& operator=(const HwlocXml&) = delete;
  ~HwlocXml() { unsetenv("HWLOC_XMLFILE"); }
};

std::string attr(const XmlElement& e, const char* name) {
  return e.attr(name) ? *e.attr(name) : "(none)";
}

// The <pci> of a bus id anywhere below e, or nullptr.
const XmlElement* findPci(const XmlElement& e, const std::string& busId) {
  if (e.name == "pci" && attr(e, "busid") == busId) return &e;
  for (const auto& c : e.children)
    if (const XmlElement* found = findPci(c, busId)) return found;
  return nullptr;
}

int sysfsNumaNodes() {
  int n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/sys/devices/system/node", ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind("node", 0) == 0 && name.size() > 4 && std::isdigit(static_cast<unsigned char>(name[4]))) ++n;
  }
  return n == 0 ? 1 : n;  // kernels without NUMA support still have one memory node
}

TEST(TopologyDiscovery, ShowsThisMachinesCpusNumaNodesAndNics) {
  std::vector<NicInfo> nics = listSysfsNics();
  std::set<std::string> names;
  for (const auto& n : nics) names.insert(n.name);
  EXPECT_EQ(names, sysfsRunningInterfacesWithoutLoopback());

  DiscoveryReport report;
  XmlDocument doc = discoverTopology(nics, &report);
  EXPECT_EQ(report.numaNodes, sysfsNumaNodes());
  EXPECT_GE(report.cpuCores, 1);
  EXPECT_GE(report.processingUnits, report.cpuCores);
  EXPECT_EQ(static_cast<int>(doc.root.children.size()), report.numaNodes);

  AnalysisOptions o;
  Analysis a = analyze(doc, o);
  EXPECT_EQ(a.system.count(CPU), report.numaNodes);
  EXPECT_EQ(a.system.count(NET), static_cast<int>(nics.size()));
  for (int c = 0; c < a.system.count(CPU); ++c) {
    EXPECT_FALSE(a.system.node(CPU, c).cpu.affinity.empty());
    EXPECT_NE(a.system.node(CPU, c).cpu.arch, CpuArch::Unknown);
  }
  // Every interface is a NET of the system, with a path to every CPU.
  for (const auto& nic : nics) {
    int found = -1;
    for (int n = 0; n < a.system.count(NET); ++n)
      if (a.system.node(NET, n).net.name == nic.name) found = n;
    ASSERT_GE(found, 0) << nic.name;
    for (int c = 0; c < a.system.count(CPU); ++c)
      EXPECT_LT(a.system.node(NET, found).paths[CPU][static_cast<std::size_t>(c)].type, PATH_NET);
  }
  // A NIC with a PCI device sits under a <pci> with that bus id.
  std::string xml = writeXml(doc.root);
  for (const auto& nic : nics) {
    if (nic.pciPath.empty()) continue;
    std::string busId;
    for (const auto& part : fs::path(nic.pciPath))
      if (part.string().size() == 12 && part.string()[4] == ':') busId = part.string();
    if (!busId.empty()) {
      EXPECT_NE(xml.find("busid=\"" + busId + "\""), std::string::npos) << nic.name;
    }
  }
  // Without a GPU nothing is searched, and the summary still prints the machine.
  std::string summary = formatSummary(a);
  EXPECT_NE(summary.find("NUMA node(s)"), std::string::npos);
}

TEST(TopologyDiscovery, InterfacesThatAreNotRunningAreLeftOut) {
  // NCCL's socket transport only uses running interfaces (IFF_RUNNING: up, with carrier or unknown carrier); an
  // interface that is down, or up without a link, is not a NIC NCCL would use. A sysfs tree of real files stands in
  // for /sys so every case is present.
  fs::path root = fs::temp_directory_path() / ("nns-topo-sysfs-" + std::to_string(::getpid()));
  fs::remove_all(root);
  struct Iface {
    const char* name;
    const char* flags;
    const char* operstate;
  };
  for (const Iface& i :
       {Iface{"up0", "0x1003", "up"}, Iface{"down0", "0x1002", "down"}, Iface{"nolink0", "0x1003", "lowerlayerdown"},
        Iface{"tun0", "0x1091", "unknown"}, Iface{"lo", "0x9", "unknown"}}) {
    writeFile(root / "class/net" / i.name / "flags", i.flags);
    writeFile(root / "class/net" / i.name / "operstate", i.operstate);
    writeFile(root / "class/net" / i.name / "speed", "25000");
  }
  std::vector<NicInfo> nics = listSysfsNics(root.string());
  fs::remove_all(root);
  std::vector<std::string> names;
  for (const auto& n : nics) names.push_back(n.name);
  EXPECT_EQ(names, (std::vector<std::string>{"tun0", "up0"}));
}

// hwloc reads a made-up machine (tests/data/hwloc/pcie-switch.xml): a root port above a PCIe switch (upstream port
// 01:00.0, two downstream ports) with a GPU and a NIC under it, and a GPU right under another root port. NCCL's sysfs
// walk makes the switch one <pci> (its upstream port) with both devices under it, so they are PIX apart, and leaves
// root and downstream ports out; a device under a root port hangs off the CPU.
TEST(TopologyDiscovery, APcieSwitchIsOneNodeAsInNccl) {
  const HwlocXml hwlocXml(NNS_TOPOLOGY_DATA_DIR "/../hwloc/pcie-switch.xml");
  // Each node's link is the slower speed and the narrower width of its own and the port right above it, as NCCL
  // reads sysfs's max_link_speed and max_link_width: the switch's own port against its root port, each device's
  // against its downstream port. A speed that does not read ("Unknown", a missing file) loses; a width that does not
  // read is 0 and wins (NCCL's std::min of two strtol's), which NCCL's loader then takes as x16.
  const SysfsTree tree("switch");
  tree.link("0000:00:01.0", "16.0 GT/s PCIe", "16");  // root port above the switch
  tree.link("0000:01:00.0", "32.0 GT/s PCIe", "8");   // the switch's upstream port
  tree.link("0000:02:00.0", "8.0 GT/s PCIe", "16");   // downstream port above the GPU
  tree.link("0000:03:00.0", "16.0 GT/s PCIe", "16");  // GPU under the switch
  tree.link("0000:02:01.0", "Unknown", "4");          // downstream port above the NIC
  tree.link("0000:04:00.0", "32.0 GT/s PCIe", "16");  // NIC
  tree.link("0000:05:00.0", "16.0 GT/s PCIe", "16");  // GPU under root port 00:02.0, which has no files
  std::vector<NicInfo> nics(1);
  nics[0].name = "mlx5_0";
  nics[0].pciPath = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0";
  nics[0].speedMbps = 200000;
  nics[0].gpuDirect = true;  // without GDR NCCL routes GPU-NIC traffic through the CPU (PHB) whatever the tree
  XmlDocument doc = discoverTopology(nics, nullptr, tree.root());
  std::string xml = writeXml(doc.root);
  const std::vector<std::array<std::string, 3>> links = {{"0000:01:00.0", "16.0 GT/s PCIe", "8"},
                                                         {"0000:03:00.0", "8.0 GT/s PCIe", "16"},
                                                         {"0000:04:00.0", "32.0 GT/s PCIe", "4"},
                                                         {"0000:05:00.0", "16.0 GT/s PCIe", "0"}};
  for (const auto& [busId, speed, width] : links) {
    const XmlElement* pci = findPci(doc.root, busId);
    ASSERT_NE(pci, nullptr) << busId << "\n" << xml;
    EXPECT_EQ(attr(*pci, "link_speed"), speed) << busId;
    EXPECT_EQ(attr(*pci, "link_width"), width) << busId;
  }
  for (const char* skipped : {"0000:00:01.0", "0000:00:02.0", "0000:02:00.0", "0000:02:01.0"})
    EXPECT_EQ(xml.find(std::string("busid=\"") + skipped + "\""), std::string::npos) << skipped << "\n" << xml;
  ASSERT_EQ(doc.root.children.size(), 1u) << xml;
  const XmlElement& cpu = doc.root.children[0];
  std::vector<std::string> top;
  for (const auto& c : cpu.children)
    if (c.name == "pci") top.push_back(*c.attr("busid"));
  EXPECT_EQ(top, (std::vector<std::string>{"0000:01:00.0", "0000:05:00.0"})) << xml;
  CompletionOptions fill;
  fill.gpuSm = 80;
  completeTopology(doc.root, fill);
  AnalysisOptions o;
  o.nRanks = 4;
  Analysis a = analyze(doc, o);
  ASSERT_EQ(a.system.count(GPU), 2);
  ASSERT_EQ(a.system.count(NET), 1);
  EXPECT_EQ(std::string(pathTypeName(gpuToNet(a, 0, 0).type)), "PIX");  // the GPU beside the NIC under the switch
  EXPECT_EQ(std::string(pathTypeName(gpuToNet(a, 1, 0).type)), "PHB");  // the GPU under its own root port
}

// hwloc reads a made-up two-socket machine (tests/data/hwloc/two-sockets.xml): NUMA nodes 1 and 3 (OS indexes, as
// NCCL's numaid, not hwloc's logical 0 and 1), two cores of two hardware threads per socket; a VGA controller that is
// not NVIDIA's on socket 0 (no GPU), and on socket 1 an NVIDIA GPU of the VGA class (0300, a GPU as much as a 3D
// controller's 0302) and a two-port NIC. Every attribute discovery writes is checked against what hwloc and the NICs
// said: the counts, each CPU's numaid, affinity and identity, each PCI device's ids, and each NET's fields.
TEST(TopologyDiscovery, TwoSocketsEachDeviceUnderItsNumaNode) {
  ASSERT_EQ(setenv("HWLOC_XMLFILE", NNS_TOPOLOGY_DATA_DIR "/../hwloc/two-sockets.xml", 1), 0);
  std::vector<NicInfo> nics(4);
  nics[0].name = "mlx5_0";  // port 1 of the NIC at 82:00.0
  nics[0].pciPath = "/sys/devices/pci0000:80/0000:80:02.0/0000:82:00.0";
  nics[0].speedMbps = 200000;
  nics[0].port = 1;
  nics[0].guid = 0xe8ebd30300a1b2c3ull;
  nics[0].maxComms = 65536;
  nics[0].latency = 1.5f;
  nics[0].gpuDirect = true;
  nics[1] = nics[0];  // port 2 of the same NIC: the same <pci> and <nic>
  nics[1].name = "mlx5_1";
  nics[1].port = 2;
  nics[2].name = "veth0";  // virtual, no speed, no maxComms: each virtual NIC a <nic> of its own on the first node
  nics[3].name = "veth1";
  nics[3].speedMbps = 10000;
  DiscoveryReport report;
  XmlDocument doc = discoverTopology(nics, &report);
  unsetenv("HWLOC_XMLFILE");
  const std::string xml = writeXml(doc.root);
  auto names = [](const XmlElement& e) {
    std::vector<std::string> out;
    for (const auto& c : e.children) out.push_back(c.name + (c.attr("busid") ? " " + *c.attr("busid") : ""));
    return out;
  };

  EXPECT_EQ(report.numaNodes, 2);
  EXPECT_EQ(report.cpuCores, 4);
  EXPECT_EQ(report.processingUnits, 8);
  EXPECT_EQ(report.cpuVendor, "AuthenticAMD");
  EXPECT_EQ(report.cpuModelName, "Made-up EPYC");
  ASSERT_EQ(doc.root.children.size(), 2u) << xml;
  const XmlElement& cpu0 = doc.root.children[0];
  const XmlElement& cpu1 = doc.root.children[1];
  EXPECT_EQ(attr(cpu0, "numaid"), "1") << xml;
  EXPECT_EQ(attr(cpu1, "numaid"), "3") << xml;
  EXPECT_EQ(attr(cpu0, "affinity"), "0000000f") << xml;
  EXPECT_EQ(attr(cpu1, "affinity"), "000000f0") << xml;
  // The architecture is the fixture's (hwloc's Architecture), whatever this host is; NCCL's XML has the CPU's
  // identity for x86 only.
  EXPECT_EQ(attr(cpu0, "arch"), "x86_64") << xml;
  EXPECT_EQ(attr(cpu1, "vendor"), "AuthenticAMD") << xml;
  EXPECT_EQ(attr(cpu1, "familyid"), "25") << xml;
  EXPECT_EQ(attr(cpu1, "modelid"), "1") << xml;
  // Socket 0: the two virtual NICs, each a <nic>; the VGA controller that is not NVIDIA's is no GPU and is left out.
  ASSERT_EQ(names(cpu0), (std::vector<std::string>{"nic", "nic"})) << xml;
  // Socket 1: the GPU and the NIC, each right under the CPU (root ports are no nodes, as in NCCL).
  ASSERT_EQ(names(cpu1), (std::vector<std::string>{"pci 0000:81:00.0", "pci 0000:82:00.0"})) << xml;
  const XmlElement& gpu = cpu1.children[0];
  EXPECT_EQ(attr(gpu, "class"), "0x030000") << xml;
  EXPECT_EQ(attr(gpu, "vendor"), "0x10de") << xml;
  EXPECT_EQ(attr(gpu, "device"), "0x1db6") << xml;
  EXPECT_EQ(attr(gpu, "subsystem_vendor"), "0x10de") << xml;
  EXPECT_EQ(attr(gpu, "subsystem_device"), "0x124a") << xml;
  const XmlElement& nicPci = cpu1.children[1];
  EXPECT_EQ(attr(nicPci, "class"), "0x020700") << xml;
  EXPECT_EQ(attr(nicPci, "vendor"), "0x15b3") << xml;
  ASSERT_EQ(names(nicPci), (std::vector<std::string>{"nic"})) << xml;
  const XmlElement& nic = nicPci.children[0];
  ASSERT_EQ(names(nic), (std::vector<std::string>{"net", "net"})) << xml;
  const XmlElement& port1 = nic.children[0];
  EXPECT_EQ(attr(port1, "name"), "mlx5_0");
  EXPECT_EQ(attr(port1, "dev"), "0");
  EXPECT_EQ(attr(port1, "speed"), "200000");
  EXPECT_EQ(attr(port1, "port"), "1");
  EXPECT_EQ(attr(port1, "latency"), "1.500000");
  EXPECT_EQ(attr(port1, "guid"), "0xe8ebd30300a1b2c3");
  EXPECT_EQ(attr(port1, "maxconn"), "65536");
  EXPECT_EQ(attr(port1, "gdr"), "1");
  EXPECT_EQ(attr(nic.children[1], "dev"), "1");
  EXPECT_EQ(attr(nic.children[1], "port"), "2");
  const XmlElement& veth0 = *cpu0.children[0].child("net");
  EXPECT_EQ(attr(veth0, "name"), "veth0");
  EXPECT_EQ(attr(veth0, "dev"), "2");
  EXPECT_EQ(attr(veth0, "maxconn"), "(none)");  // a plugin's maxComms 0 is "not said": NCCL's default applies
  EXPECT_EQ(attr(veth0, "guid"), "(none)");
  EXPECT_EQ(attr(veth0, "gdr"), "0");
  EXPECT_EQ(attr(*cpu0.children[1].child("net"), "dev"), "3");
  auto noted = [&](const std::string& text) {
    return std::find(report.notes.begin(), report.notes.end(), text) != report.notes.end();
  };
  EXPECT_TRUE(noted("NIC veth0 reports no speed: NCCL assumes 10000 Mb/s")) << ::testing::PrintToString(report.notes);
  EXPECT_FALSE(noted("NIC veth1 reports no speed: NCCL assumes 10000 Mb/s")) << ::testing::PrintToString(report.notes);
  EXPECT_TRUE(noted("NIC veth0 has no PCI device: attached to NUMA node 1")) << ::testing::PrintToString(report.notes);
}

// A NIC on a PCI device hwloc does not list (hidden from it, or hot-plugged after it read) goes right under the CPU of
// its sysfs numa_node, with the class and link sysfs gives; a numa_node of -1 (no affinity) or of no node here puts
// it on the first node. Each is said in a note. Its link is, as NCCL writes it, the slower speed and the narrower width
// of its own and its sysfs parent's (the root port above it): c0:01.0 is x4 Gen3, c0:02.0 has no link files (the
// width reads 0 and wins, the speed loses), c0:03.0 is x16 Gen4.
TEST(TopologyDiscovery, ADeviceHwlocDoesNotSeeIsPlacedBySysfs) {
  const HwlocXml hwlocXml(NNS_TOPOLOGY_DATA_DIR "/../hwloc/two-sockets.xml");
  const SysfsTree tree("unseen");
  const std::vector<std::array<std::string, 2>> devices = {
      {"0000:c1:00.0", "3"}, {"0000:c2:00.0", "-1"}, {"0000:c3:00.0", "7"}};
  tree.file("sys/devices/pci0000:c0/0000:c0:01.0/max_link_speed", "8.0 GT/s PCIe");
  tree.file("sys/devices/pci0000:c0/0000:c0:01.0/max_link_width", "4");
  fs::create_directories(fs::path(tree.root()) / "sys/devices/pci0000:c0/0000:c0:02.0");
  tree.file("sys/devices/pci0000:c0/0000:c0:03.0/max_link_speed", "16.0 GT/s PCIe");
  tree.file("sys/devices/pci0000:c0/0000:c0:03.0/max_link_width", "16");
  std::vector<NicInfo> nics;
  for (const auto& [busId, numaNode] : devices) {
    const std::string rootPort = "pci0000:c0/0000:c0:0" + busId.substr(6, 1) + ".0";
    tree.placed(busId, rootPort);
    tree.device(busId, "numa_node", numaNode);
    tree.device(busId, "class", "0x020000");
    tree.link(busId, "16.0 GT/s PCIe", "8");
    NicInfo nic;
    nic.name = "eth-" + busId.substr(5, 2);
    nic.pciPath = "/sys/devices/" + rootPort + "/" + busId;
    nic.speedMbps = 100000;
    nics.push_back(nic);
  }
  DiscoveryReport report;
  XmlDocument doc = discoverTopology(nics, &report, tree.root());
  const std::string xml = writeXml(doc.root);
  ASSERT_EQ(doc.root.children.size(), 2u) << xml;
  const std::vector<std::array<std::string, 4>> placed = {{"0000:c1:00.0", "3", "8.0 GT/s PCIe", "4"},
                                                          {"0000:c2:00.0", "1", "16.0 GT/s PCIe", "0"},
                                                          {"0000:c3:00.0", "1", "16.0 GT/s PCIe", "8"}};
  for (const auto& [busId, numaid, speed, width] : placed) {
    const XmlElement& cpu = doc.root.children[numaid == "1" ? 0 : 1];
    ASSERT_EQ(attr(cpu, "numaid"), numaid) << xml;
    const XmlElement* pci = nullptr;
    for (const auto& c : cpu.children)
      if (c.name == "pci" && attr(c, "busid") == busId) pci = &c;
    ASSERT_NE(pci, nullptr) << busId << " not right under numa " << numaid << "\n" << xml;
    EXPECT_EQ(attr(*pci, "class"), "0x020000") << busId;
    EXPECT_EQ(attr(*pci, "link_speed"), speed) << busId;
    EXPECT_EQ(attr(*pci, "link_width"), width) << busId;
    ASSERT_NE(pci->child("nic"), nullptr) << xml;
    EXPECT_EQ(attr(*pci->child("nic")->child("net"), "name"), "eth-" + busId.substr(5, 2));
    EXPECT_NE(std::find(report.notes.begin(), report.notes.end(),
                        "hwloc does not see PCI device " + busId + ": placed directly under its NUMA node"),
              report.notes.end())
        << ::testing::PrintToString(report.notes);
  }
}

// A root that is not a Linux file system tree is refused by name (hwloc would read an empty one as a machine of one
// processor and no devices, a silent wrong answer).
TEST(TopologyDiscovery, ARootThatIsNoLinuxTreeIsRefused) {
  const fs::path empty = fs::temp_directory_path() / ("nns-topo-fsroot-empty-" + std::to_string(::getpid()));
  fs::remove_all(empty);
  fs::create_directories(empty / "sys");
  const auto refusal = [](const std::string& root) {
    try {
      discoverTopology({}, nullptr, root);
    } catch (const TopologyError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(refusal(empty.string()), empty.string() +
                                         ": no sys/devices/system/cpu (not a Linux file system tree as "
                                         "hwloc-gather-topology saves one)");
  EXPECT_EQ(refusal((empty / "none").string()),
            (empty / "none").string() +
                ": not a directory (a Linux file system tree: unpack hwloc-gather-topology's tarball)");
  fs::remove_all(empty);
}

// An interface's speed and PCI device as sysfs gives them: /sys/class/net/<if>/speed, and the device link resolved.
TEST(TopologyDiscovery, InterfaceSpeedAndPciDeviceComeFromSysfs) {
  fs::path root = fs::temp_directory_path() / ("nns-topo-sysfs-dev-" + std::to_string(::getpid()));
  fs::remove_all(root);
  const fs::path device = root / "devices/pci0000:80/0000:80:02.0/0000:82:00.0";
  fs::create_directories(device);
  writeFile(root / "class/net/eth0/flags", "0x1003");
  writeFile(root / "class/net/eth0/operstate", "up");
  writeFile(root / "class/net/eth0/speed", "25000");
  fs::create_directory_symlink("../../../devices/pci0000:80/0000:80:02.0/0000:82:00.0", root / "class/net/eth0/device");
  std::vector<NicInfo> nics = listSysfsNics(root.string());
  const std::string expectedPath = fs::canonical(device).string();
  fs::remove_all(root);
  ASSERT_EQ(nics.size(), 1u);
  EXPECT_EQ(nics[0].name, "eth0");
  EXPECT_EQ(nics[0].speedMbps, 25000);
  EXPECT_EQ(nics[0].pciPath, expectedPath);
}

TEST(TopologyDiscovery, AnUnreadableLinkSpeedLosesTheMinimum) {
  // NCCL reads the device's and the upstream port's max_link_speed as "%f GT/s" and writes the slower; a side that
  // does not read (sysfs says "Unknown" for some ports) stays FLT_MAX and loses. Taken as the minimum, "Unknown"
  // became NCCL's fallback Gen3 rate: an x16 Gen4 GPU at 12 GB/s instead of 24.
  EXPECT_EQ(minPciLinkSpeed("16.0 GT/s PCIe", "Unknown"), "16.0 GT/s PCIe");
  EXPECT_EQ(minPciLinkSpeed("Unknown", "16.0 GT/s PCIe"), "16.0 GT/s PCIe");
  EXPECT_EQ(minPciLinkSpeed("", "8.0 GT/s PCIe"), "8.0 GT/s PCIe");
  EXPECT_EQ(minPciLinkSpeed("16.0 GT/s PCIe", "8.0 GT/s PCIe"), "8.0 GT/s PCIe");
  EXPECT_EQ(minPciLinkSpeed("2.5 GT/s PCIe", "16.0 GT/s PCIe"), "2.5 GT/s PCIe");
  EXPECT_EQ(minPciLinkSpeed("16 GT/s", "16.0 GT/s PCIe"), "16 GT/s");  // a tie keeps the device's
  EXPECT_EQ(minPciLinkSpeed("Unknown", ""), "Unknown");                // neither reads: the device's
  // What it writes sets the link: x16 at the chosen speed is 24 GB/s.
  XmlDocument doc = parseXml(
      "<system version=\"1\"><cpu numaid=\"0\" arch=\"x86_64\" vendor=\"AuthenticAMD\"><pci busid=\"0000:01:00.0\" "
      "class=\"0x030200\" link_speed=\"" +
          minPciLinkSpeed("16.0 GT/s PCIe", "Unknown") +
          "\" link_width=\"16\"><gpu dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"1\"/></pci></cpu></system>",
      "speed.xml");
  System s = buildSystem(doc);
  ASSERT_EQ(s.count(GPU), 1);
  EXPECT_FLOAT_EQ(s.node(GPU, 0).links[0].bw, 24.0f);
}

TEST(TopologyDiscovery, PluginSuppliedNicsArePlacedByPciPath) {
  // The API takes what a plugin's getProperties reports; a NIC with an unknown PCI path is attached to a CPU.
  std::vector<NicInfo> nics(2);
  nics[0].name = "fake0";
  nics[0].speedMbps = 200000;
  nics[0].guid = 0xabc;
  nics[0].gpuDirect = true;
  nics[1].name = "fake1";
  DiscoveryReport report;
  XmlDocument doc = discoverTopology(nics, &report);
  System s = buildSystem(doc);
  ASSERT_EQ(s.count(NET), 2);
  EXPECT_EQ(s.node(NET, 0).net.name, "fake0");
  EXPECT_FLOAT_EQ(s.node(NET, 0).net.bw, 25.0f);
  EXPECT_EQ(s.node(NET, 0).net.asic, 0xabcu);
  EXPECT_EQ(s.node(NET, 0).net.gdr, 1);
  EXPECT_FLOAT_EQ(s.node(NET, 1).net.bw, 1.25f);  // unknown speed: NCCL's 10 Gb/s
  EXPECT_FALSE(report.notes.empty());
}

}  // namespace
}  // namespace nns::topo::testing
