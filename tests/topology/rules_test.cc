// Small hand-built machines, one NCCL rule each: link rates, PXB, NVB, C2C/P2C, Broadcom switches, fusion, levels.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <set>
#include <utility>

#include "../support/sanitizer.hpp"
#include "topology_test_util.h"

namespace nns::topo::testing {
namespace {

std::string cpuOpen(int numa, const std::string& arch = "x86_64", const std::string& vendor = "GenuineIntel") {
  return "<cpu numaid=\"" + std::to_string(numa) + "\" arch=\"" + arch + "\" vendor=\"" + vendor +
         "\" familyid=\"6\" modelid=\"143\">";
}
std::string pci(const std::string& busId, const std::string& cls, const std::string& inner = "",
                const std::string& speed = "32.0 GT/s PCIe", int width = 16, const std::string& ids = "") {
  return "<pci busid=\"" + busId + "\" class=\"" + cls + "\" " + ids + " link_speed=\"" + speed + "\" link_width=\"" +
         std::to_string(width) + "\">" + inner + "</pci>";
}
std::string gpu(int rank, int sm = 90, const std::string& inner = "") {
  return "<gpu dev=\"" + std::to_string(rank) + "\" sm=\"" + std::to_string(sm) + "\" rank=\"" + std::to_string(rank) +
         "\" gdr=\"1\">" + inner + "</gpu>";
}
std::string net(int dev, const std::string& name = "", int speed = 400000) {
  // Built by appending: GCC 12's -Wrestrict took the one long concatenation for an overlapping copy at -O3.
  std::string text = "<nic><net name=\"";
  text += name.empty() ? "n" + std::to_string(dev) : name;
  text += "\" dev=\"" + std::to_string(dev) + "\" speed=\"" + std::to_string(speed) + "\" gdr=\"1\"/></nic>";
  return text;
}
std::string nvlink(const std::string& target, int count = 4) {
  return "<nvlink target=\"" + target + "\" count=\"" + std::to_string(count) + "\" tclass=\"0x030200\"/>";
}
Analysis run(const std::string& body, const TopoSettings& settings = {}, int nRanks = 0) {
  AnalysisOptions o;
  o.settings = settings;
  o.nRanks = nRanks;
  return analyze(parseXml("<system version=\"1\">" + body + "</system>", "rule.xml"), o);
}

TEST(TopologyRules, PciLaneRates) {
  // Rule: bw = width * lane rate / 80, lane rate by prefix of link_speed; unknown strings fall back to Gen3.
  std::string body = cpuOpen(0) + pci("0000:01:00.0", "0x030200", gpu(0), "16 GT/s", 8) +
                     pci("0000:02:00.0", "0x030200", gpu(1), "32.0 GT/s PCIe", 16) +
                     pci("0000:03:00.0", "0x030200", gpu(2), "weird", 16) + "</cpu>";
  Analysis a = run(body);
  EXPECT_FLOAT_EQ(gpuToCpu(a, 0, 0).bw, 12.0f);
  EXPECT_FLOAT_EQ(gpuToCpu(a, 1, 0).bw, 48.0f);
  EXPECT_FLOAT_EQ(gpuToCpu(a, 2, 0).bw, 12.0f);
}

TEST(TopologyRules, NetGuidIsHexadecimal) {
  // Rule: <net guid> is hexadecimal, with or without 0x (NCCL: strtoull base 16); it names the ASIC, whose ports share
  // bandwidth in the search. A dump's "a87cb10003e1a258" was refused, and "10" read as sixteen's decimal neighbour.
  System plain = buildSystem(readXmlFile(casePath("net-guid-without-0x.xml")));
  ASSERT_EQ(plain.count(NET), 3);
  EXPECT_EQ(plain.node(NET, plain.netIndexOfDev(0)).net.asic, 0xa87cb10003e1a258ULL);
  EXPECT_EQ(plain.node(NET, plain.netIndexOfDev(1)).net.asic, 1u);  // no guid: the NET's id
  System same = buildSystem(readXmlFile(casePath("net-guid-10-and-0x10.xml")));
  EXPECT_EQ(same.node(NET, same.netIndexOfDev(0)).net.asic, 0x10u);
  EXPECT_EQ(same.node(NET, same.netIndexOfDev(1)).net.asic, 0x10u);
  for (const char* bad : {"0x", "xyz", "-1", "10000000000000000"}) {
    std::string body =
        cpuOpen(0) +
        pci("0000:01:00.0", "0x020000", std::string("<nic><net name=\"a\" dev=\"0\" guid=\"") + bad + "\"/></nic>") +
        "</cpu>";
    try {
      run(body);
      ADD_FAILURE() << bad << ": expected an error";
    } catch (const TopologyError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("guid=\"") + bad + "\" is not a 64-bit hexadecimal number"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(TopologyRules, TwoSwitchLevelsArePxbAndKeepGdr) {
  // Rule: a switch->switch hop is PXB; PXB <= P2C so GDR stays on, and P2P (level PXB) too.
  std::string body = cpuOpen(0) +
                     pci("0000:10:00.0", "0x060400",
                         pci("0000:11:00.0", "0x060400", pci("0000:12:00.0", "0x030200", gpu(0))) +
                             pci("0000:13:00.0", "0x060400",
                                 pci("0000:14:00.0", "0x020700", net(0)) + pci("0000:15:00.0", "0x030200", gpu(1)))) +
                     "</cpu>";
  Analysis a = run(body);
  EXPECT_EQ(pathTypeName(gpuToNet(a, 0, 0).type), "PXB");
  EXPECT_EQ(pathTypeName(gpuToNet(a, 1, 0).type), "PIX");
  EXPECT_EQ(pathTypeName(gpuToGpu(a, 0, 1).type), "PXB");
  EXPECT_TRUE(a.p2p[0][1].p2p);
  EXPECT_NE(a.gdrRead[0][0].mode, GdrMode::Disabled);
  // Rule: the local NET of GPU 0 is its only one even though GPU 1 is closer to it.
  EXPECT_EQ(a.localNets[0][0].netDev, 0);
  // Rule: no NVLink between the GPUs, so no PXN.
  EXPECT_TRUE(a.pxn.empty());
}

TEST(TopologyRules, NvlinkThroughOneGpuIsNvb) {
  // Rule: a path may cross one GPU over NVLink (NVB); P2P applies (NVB <= PXB) with that GPU as relay.
  std::string body = cpuOpen(0) + pci("0000:01:00.0", "0x030200", gpu(0, 80, nvlink("0000:02:00.0"))) +
                     pci("0000:02:00.0", "0x030200", gpu(1, 80, nvlink("0000:01:00.0") + nvlink("0000:03:00.0"))) +
                     pci("0000:03:00.0", "0x030200", gpu(2, 80, nvlink("0000:02:00.0"))) + "</cpu>";
  Analysis a = run(body);
  EXPECT_EQ(pathText(gpuToGpu(a, 0, 1)), "NVL/80.00");
  EXPECT_EQ(pathText(gpuToGpu(a, 0, 2)), "NVB/80.00");
  P2pDecision d = checkP2p(a.system, {}, 0, 2);
  EXPECT_TRUE(d.p2p);
  EXPECT_EQ(d.intermediateRank, 1);
  EXPECT_FALSE(d.read);  // P2P read only for direct NVLink between sm80 GPUs
  EXPECT_TRUE(checkP2p(a.system, {}, 0, 1).read);
  // Rule: NCCL_NVB_DISABLE removes the relay; the path falls back to PCI through the CPU (no P2P at PHB).
  TopoSettings noNvb;
  noNvb.nvbDisable = true;
  Analysis b = run(body, noNvb);
  EXPECT_EQ(pathTypeName(gpuToGpu(b, 0, 2).type), "PHB");
  EXPECT_FALSE(b.p2p[0][2].p2p);
}

// Four GPUs on an NVLink line 0-1-2-3, each behind a switch of its own under one CPU; the NIC shares GPU 3's switch,
// and with `nicByGpu0` a second one shares GPU 0's.
std::string nvlinkLine(bool nicByGpu0 = false) {
  auto leaf = [](int g, const std::string& links) {
    const std::string bus = "0000:" + std::to_string(g + 1) + "0:00.0";
    const std::string dev = "0000:" + std::to_string(g + 1) + "1:00.0";
    return std::make_pair(bus, pci(dev, "0x030200", gpu(g, 80, links)));
  };
  auto bus = [](int g) { return "0000:" + std::to_string(g + 1) + "1:00.0"; };
  std::string body = cpuOpen(0);
  for (int g = 0; g < 4; ++g) {
    std::string links;
    if (g > 0) links += nvlink(bus(g - 1), 2);
    if (g < 3) links += nvlink(bus(g + 1), 2);
    auto [switchBus, gpuLeaf] = leaf(g, links);
    std::string nic;
    if (g == 3) nic = pci("0000:42:00.0", "0x020700", net(0, "mlx5_0", 200000));
    if (g == 0 && nicByGpu0) nic = pci("0000:12:00.0", "0x020700", net(1, "mlx5_1", 200000));
    body += pci(switchBus, "0x060400", gpuLeaf + nic);
  }
  return body + "</cpu>";
}

TEST(TopologyRules, NvlinkRelaysThroughOneGpuOnly) {
  // Rule (ncclTopoSetPaths): a path crosses at most one GPU, over NVLink. On the line 0-1-2-3, GPU 0 reaches GPU 2
  // through GPU 1 (NVB, P2P with GPU 1 as relay) but GPU 3 only over PCI through the CPU (PHB: no P2P at the default
  // level).
  Analysis a = run(nvlinkLine());
  EXPECT_EQ(pathTypeName(gpuToGpu(a, 0, 1).type), "NVL");
  EXPECT_EQ(pathTypeName(gpuToGpu(a, 0, 2).type), "NVB");
  EXPECT_EQ(pathTypeName(gpuToGpu(a, 0, 3).type), "PHB");
  EXPECT_EQ(pathTypeName(gpuToGpu(a, 3, 0).type), "PHB");
  EXPECT_TRUE(checkP2p(a.system, {}, 0, 2).p2p);
  EXPECT_FALSE(checkP2p(a.system, {}, 0, 3).p2p);
  EXPECT_FALSE(a.p2p[0][3].p2p);
}

TEST(TopologyRules, PxnRelaysOnlyThroughADirectNvlinkPeer) {
  // Rule (computePaths, PXN): GPU g sends through the NET's owner only when the two are joined by NVLink directly
  // (path <= NVL). The NIC is GPU 3's: GPU 2 (one NVLink away) goes through it, GPU 1 (NVB, through GPU 2) does not.
  // With GDR allowed at any distance, no GDR fallback reroutes GPU 1's path through the CPU either: it stays PHB.
  TopoSettings anyGdr;
  anyGdr.netGdrLevel = PATH_SYS;
  for (const TopoSettings& settings : {TopoSettings{}, anyGdr}) {
    Analysis a = run(nvlinkLine(), settings);
    std::set<std::pair<int, int>> relays;
    for (const PxnRelay& p : a.pxn) relays.emplace(p.rank, p.relayRank);
    EXPECT_EQ(relays, (std::set<std::pair<int, int>>{{2, 3}})) << "NCCL_NET_GDR_LEVEL " << settings.netGdrLevel;
    EXPECT_EQ(pathTypeName(gpuToNet(a, 2, 0).type), "PXN");
    EXPECT_EQ(pathTypeName(gpuToNet(a, 1, 0).type), "PHB");
  }
}

TEST(TopologyRules, P2pNetDevAdoptsThePeersNicOnlyThroughADirectNvlinkOwner) {
  // Rule (ncclTopoGetNetDev without a graph, NCCL_P2P_PXN_LEVEL 2): a rank takes the NIC its peer's equivalent GPU
  // would use, with that NIC's owner as proxy, only when the owner is NVLink-connected to it. Peer dev 3 uses GPU 3's
  // NIC (dev 0): rank 2 (NVL to GPU 3) takes it through GPU 3; rank 1 (NVB) keeps a NIC of its own, as its own proxy.
  Analysis a = run(nvlinkLine(true));
  NetDevChoice near = netDevForPeer(a.system, a.settings, 2, 0, 3);
  EXPECT_EQ(near.netDev, 0) << near.reason;
  EXPECT_EQ(near.proxyRank, 3) << near.reason;
  NetDevChoice far = netDevForPeer(a.system, a.settings, 1, 0, 3);
  EXPECT_EQ(far.proxyRank, 1) << far.reason;
}

TEST(TopologyRules, NetsPerGpuIsRoundedUp) {
  // Rule (ncclTopoGetLocalNet, NCCL_NETDEVS_POLICY=AUTO): netsPerGpu = ceil(#local NETs / #GPUs sharing them). Three
  // NICs beside two GPUs give each GPU two (not one), taken by channel: 3 is not a power of two, so no bit mirroring.
  std::string leaves = pci("0000:11:00.0", "0x030200", gpu(0, 80)) + pci("0000:12:00.0", "0x030200", gpu(1, 80));
  for (int n = 0; n < 3; ++n)
    leaves += pci("0000:1" + std::to_string(n + 3) + ":00.0", "0x020700", net(n, "mlx5_" + std::to_string(n), 200000));
  Analysis a = run(cpuOpen(0) + pci("0000:10:00.0", "0x060400", leaves) + "</cpu>");
  std::vector<int> rank0, rank1;
  for (int c = 0; c < 4; ++c) {
    rank0.push_back(a.localNets[0][static_cast<size_t>(c)].netDev);
    rank1.push_back(a.localNets[1][static_cast<size_t>(c)].netDev);
  }
  EXPECT_EQ(rank0, ints("0 1 0 1"));
  EXPECT_EQ(rank1, ints("1 2 1 2"));
  EXPECT_EQ(a.localNets[0][0].netsPerGpu, 2) << a.localNets[0][0].reason;
}

TEST(TopologyRules, P2pReadIsForDirectNvlinkBetweenSm80GpusOnly) {
  // Rule (ncclTopoCheckP2p): read is enabled for an NVL path whose GPUs are both sm 80, not sm 90 nor a mix.
  auto pair = [](int sm0, int sm1) {
    return cpuOpen(0) + pci("0000:01:00.0", "0x030200", gpu(0, sm0, nvlink("0000:02:00.0"))) +
           pci("0000:02:00.0", "0x030200", gpu(1, sm1, nvlink("0000:01:00.0"))) + "</cpu>";
  };
  EXPECT_TRUE(checkP2p(run(pair(80, 80)).system, {}, 0, 1).read);
  for (auto [sm0, sm1] : {std::pair{90, 90}, std::pair{80, 90}, std::pair{100, 100}}) {
    P2pDecision d = checkP2p(run(pair(sm0, sm1)).system, {}, 0, 1);
    EXPECT_TRUE(d.p2p) << sm0 << "/" << sm1;
    EXPECT_FALSE(d.read) << sm0 << "/" << sm1;
  }
}

TEST(TopologyRules, FlushIsNeededForGdrReceivesBeforeHopper) {
  // Rule: a GDR receive needs a flush when the GPU is older than sm 90 (or reaches its CPU over C2C with the NIC
  // PCI-close: GraceC2cGivesP2cAndGdr); not on an sm 90 GPU over PCI.
  auto machine = [](int sm) {
    return cpuOpen(0) +
           pci("0000:10:00.0", "0x060400",
               pci("0000:11:00.0", "0x030200", gpu(0, sm)) + pci("0000:12:00.0", "0x020700", net(0))) +
           "</cpu>";
  };
  for (int sm : {70, 80, 89}) EXPECT_TRUE(needsFlush(run(machine(sm)).system, 0, 0)) << "sm " << sm;
  for (int sm : {90, 100}) EXPECT_FALSE(needsFlush(run(machine(sm)).system, 0, 0)) << "sm " << sm;
}

TEST(TopologyRules, TwoNvlinkIslandsMakeTheRingStartAtTwoChannels) {
  // Rule (ncclTopoSplitNvLink): two sockets, each with an NVLink pair, joined by the CPUs' link only. NCCL's ring then
  // needs at least two channels (the tree needs two there, and the ring keeps as many as the tree): one channel at
  // the CPU link's 10 GB/s is refused, two at 5 are taken, as in the ring that crosses that link both ways.
  std::string body = cpuOpen(0) + pci("0000:17:00.0", "0x030200", gpu(0, 80, nvlink("0000:65:00.0"))) +
                     pci("0000:65:00.0", "0x030200", gpu(1, 80, nvlink("0000:17:00.0"))) + "</cpu>" + cpuOpen(1) +
                     pci("0000:b1:00.0", "0x030200", gpu(2, 80, nvlink("0000:ca:00.0"))) +
                     pci("0000:ca:00.0", "0x030200", gpu(3, 80, nvlink("0000:b1:00.0"))) + "</cpu>";
  // Skylake sockets: a 10 GB/s link between them.
  for (std::size_t at = body.find("modelid=\"143\""); at != std::string::npos; at = body.find("modelid=\"143\""))
    body.replace(at, 13, "modelid=\"85\"");
  Analysis a = run(body);
  const Graph& ring = a.searches[0].ring;
  EXPECT_EQ(ring.minChannels, 2);
  EXPECT_EQ(ring.nChannels, 2);
  EXPECT_FLOAT_EQ(ring.bwIntra, 5.0f);
  // A third NVLink joins the islands into one: the rule does not apply.
  std::string joined = cpuOpen(0) + pci("0000:17:00.0", "0x030200", gpu(0, 80, nvlink("0000:65:00.0"))) +
                       pci("0000:65:00.0", "0x030200", gpu(1, 80, nvlink("0000:17:00.0") + nvlink("0000:b1:00.0"))) +
                       "</cpu>" + cpuOpen(1) +
                       pci("0000:b1:00.0", "0x030200", gpu(2, 80, nvlink("0000:ca:00.0") + nvlink("0000:65:00.0"))) +
                       pci("0000:ca:00.0", "0x030200", gpu(3, 80, nvlink("0000:b1:00.0"))) + "</cpu>";
  EXPECT_EQ(run(joined).searches[0].ring.minChannels, 1);
}

TEST(TopologyRules, GraceC2cGivesP2cAndGdr) {
  // Grace-Hopper: the GPU reaches its CPU over C2C (here 900 GB/s), the NIC hangs off the same CPU over PCI.
  std::string c2c = "<c2c bw=\"50000\" count=\"18\"/>";
  std::string body = "<cpu numaid=\"0\" arch=\"arm64\">" + pci("0009:01:00.0", "0x030200", gpu(0, 90, c2c)) +
                     pci("0000:01:00.0", "0x020700", net(0)) + "</cpu>";
  Analysis a = run(body);
  EXPECT_EQ(pathText(gpuToCpu(a, 0, 0)), "C2C/900.00");
  // Rule: GPU->CPU is C2C and NIC->CPU is PHB: merged, that is P2C.
  EXPECT_EQ(pathTypeName(gpuToNet(a, 0, 0).type), "P2C");
  // Rule: default GDR level is P2C (NCCL_NET_GDR_C2C=1); mode stays Default because the distance is P2C.
  EXPECT_EQ(a.gdrRead[0][0].mode, GdrMode::Default);
  TopoSettings noC2c;
  noC2c.netGdrC2c = false;
  Analysis b = run(body, noC2c);
  EXPECT_EQ(b.gdrWrite[0][0].mode, GdrMode::Disabled);
  EXPECT_NE(b.gdrWrite[0][0].reason.find("level PXB"), std::string::npos) << b.gdrWrite[0][0].reason;
  // Rule: flush is needed for GDR receives before sm90, or on C2C systems when the NIC is PCI-close: here the NIC
  // hangs off the CPU (P2C), so none.
  EXPECT_FALSE(needsFlush(a.system, 0, 0));
  // The same sm 90 GPU on C2C with the NIC under its own PCIe switch (PIX, <= PXB): NCCL's ncclTopoNeedFlush keeps the
  // flush on receives (the DataDirect case: control over C2C, data over PCIe).
  Analysis pix = analyze(readXmlFile(casePath("c2c-gpu-nic-on-one-switch.xml")), AnalysisOptions{});
  ASSERT_EQ(pathTypeName(gpuToNet(pix, 0, 0).type), "PIX");
  ASSERT_EQ(pathTypeName(gpuToCpu(pix, 0, 0).type), "C2C");
  EXPECT_TRUE(needsFlush(pix.system, 0, 0));
  EXPECT_NE(pix.gdrWrite[0][0].mode, GdrMode::Disabled) << pix.gdrWrite[0][0].reason;
}

TEST(TopologyRules, NetAttributeZeroMakesNoNetAndGinIsSaid) {
  // spec a, <net>: `net` (default 1) makes the NET node and `gin` (default 0) a GIN node (GPU-initiated networking),
  // as NCCL's ncclTopoAddNic reads them. net="0" gives no NET; a GIN node, which this engine does not model, is left
  // out with a note naming the <net>.
  auto port = [](int dev, const std::string& attrs) {
    return "<nic><net name=\"n" + std::to_string(dev) + "\" dev=\"" + std::to_string(dev) +
           "\" speed=\"400000\" gdr=\"1\" " + attrs + "/></nic>";
  };
  std::string body = cpuOpen(0) + "\n" + pci("0000:11:00.0", "0x030200", gpu(0)) + "\n" +
                     pci("0000:21:00.0", "0x020700", port(0, "")) + "\n" +
                     pci("0000:22:00.0", "0x020700", port(1, "net=\"0\" gin=\"1\"")) + "\n" +
                     pci("0000:23:00.0", "0x020700", port(2, "net=\"0\"")) + "\n" +
                     pci("0000:24:00.0", "0x020700", port(3, "gin=\"1\"")) + "\n" +
                     pci("0000:25:00.0", "0x020700", port(4, "net=\"1\" gin=\"0\"")) + "</cpu>";
  System sys = buildSystem(parseXml("<system version=\"1\">" + body + "</system>", "gin.xml"));
  std::vector<int> nets;
  for (int n = 0; n < sys.count(NET); ++n) nets.push_back(sys.node(NET, n).net.dev);
  EXPECT_EQ(nets, ints("0 3 4"));
  EXPECT_EQ(sys.count(NIC), 5);  // NCCL makes the NIC node before it reads the <net>s
  ASSERT_EQ(sys.notes.size(), 2u) << ::testing::PrintToString(sys.notes);
  EXPECT_EQ(sys.notes[0],
            "gin.xml:4: <net> dev 1 (n1) has gin=\"1\": NCCL makes a GIN node (GPU-initiated networking) for it, "
            "which this engine does not model: left out (it has net=\"0\": no NET either)");
  EXPECT_EQ(sys.notes[1],
            "gin.xml:6: <net> dev 3 (n3) has gin=\"1\": NCCL makes a GIN node (GPU-initiated networking) for it, "
            "which this engine does not model: left out (its NET is shown)");
}

TEST(TopologyRules, BranchesWithoutAGpuOrNetAreTrimmed) {
  // ncclTopoTrimXml: a <cpu>, <pci>, <nic> or <net> with no kept element below it (a <gpu> of a rank, a <net> of a
  // plugin device, i.e. with a dev) is removed before the system is built. Here: a switch holding only a GPU-class
  // leaf without <gpu>, a switch whose NIC lists no device, and a second NUMA node whose GPU has no rank.
  std::string body =
      cpuOpen(0) +
      pci("0000:10:00.0", "0x060400",
          pci("0000:11:00.0", "0x030200", gpu(0)) + pci("0000:12:00.0", "0x060400", pci("0000:13:00.0", "0x030200"))) +
      pci("0000:20:00.0", "0x060400", pci("0000:21:00.0", "0x020000", "<nic><net name=\"unlisted\"/></nic>")) +
      pci("0000:30:00.0", "0x020000", net(0, "mlx5_0")) + "</cpu>" + cpuOpen(1) +
      pci("0000:80:00.0", "0x060400", pci("0000:81:00.0", "0x030200", "<gpu dev=\"1\" sm=\"90\" gdr=\"1\"/>")) +
      "</cpu>";
  System sys = buildSystem(parseXml("<system version=\"1\">" + body + "</system>", "trim.xml"));
  EXPECT_EQ(sys.count(CPU), 1);
  ASSERT_EQ(sys.count(PCI), 1);
  EXPECT_EQ(sys.node(PCI, 0).busId, "0000:10:00.0");
  EXPECT_EQ(sys.count(GPU), 1);
  ASSERT_EQ(sys.count(NIC), 1);
  EXPECT_EQ(sys.node(NIC, 0).busId, "0000:30:00.0");
  // The CPU's links: the switch and the NIC, and no SYS link to the trimmed NUMA node.
  EXPECT_EQ(sys.node(CPU, 0).links.size(), 2u);
  // A <pcilink> to a trimmed switch goes with it: the kept switch has its PCI links only.
  std::string bcm = "vendor=\"0x1000\" device=\"0xc030\" subsystem_vendor=\"0x1000\" subsystem_device=\"0x100b\"";
  std::string linked =
      cpuOpen(0) +
      pci("0000:10:00.0", "0x060400", "<pcilink target=\"0000:20:00.0\"/>" + pci("0000:11:00.0", "0x030200", gpu(0)),
          "32.0 GT/s PCIe", 16, bcm) +
      pci("0000:20:00.0", "0x060400", "<pcilink target=\"0000:10:00.0\"/>", "32.0 GT/s PCIe", 16, bcm) + "</cpu>";
  System withLink = buildSystem(parseXml("<system version=\"1\">" + linked + "</system>", "pcilink.xml"));
  ASSERT_EQ(withLink.count(PCI), 1);
  for (const Link& l : withLink.node(PCI, 0).links) EXPECT_EQ(l.type, LINK_PCI);
  // What is trimmed is still read: a file's mistake there is named (the tool reads a file alone, which NCCL fuses
  // with its detection), as here a switch with nothing kept below it and no class.
  try {
    buildSystem(parseXml("<system version=\"1\">" + cpuOpen(0) + "\n" + pci("0000:11:00.0", "0x030200", gpu(0)) +
                             "\n<pci busid=\"0000:20:00.0\" link_speed=\"\" link_width=\"0\"/></cpu></system>",
                         "gap.xml"));
    ADD_FAILURE() << "a <pci> without class was read";
  } catch (const TopologyError& e) {
    EXPECT_NE(std::string(e.what()).find("gap.xml:3: <pci> is missing required attribute class"), std::string::npos)
        << e.what();
  }
}

TEST(TopologyRules, BroadcomGen5SwitchLevelsAreFlattened) {
  // Rule: a Broadcom Gen5 switch shows as two levels with the same id; NCCL folds the lower level into the upper,
  // so a GPU and a NIC behind the two levels are PIX, not PXB.
  std::string upper = "vendor=\"0x1000\" device=\"0xc030\" subsystem_vendor=\"0x1000\" subsystem_device=\"0x0000\"";
  std::string lower = "vendor=\"0x1000\" device=\"0xc030\" subsystem_vendor=\"0x1000\" subsystem_device=\"0x1000\"";
  std::string body =
      cpuOpen(0) +
      pci("0000:10:00.0", "0x060400",
          pci("0000:11:00.0", "0x060400", pci("0000:12:00.0", "0x030200", gpu(0)), "32.0 GT/s PCIe", 16, lower) +
              pci("0000:13:00.0", "0x060400", pci("0000:14:00.0", "0x020700", net(0)), "32.0 GT/s PCIe", 16, lower),
          "32.0 GT/s PCIe", 16, upper) +
      "</cpu>";
  Analysis a = run(body);
  EXPECT_EQ(a.system.count(PCI), 1);
  EXPECT_EQ(pathTypeName(gpuToNet(a, 0, 0).type), "PIX");
}

TEST(TopologyRules, PciLinkBetweenSwitchesAvoidsTheCpu) {
  // Rule: <pcilink> adds a LOC_BW link between two switches; a switch->switch hop counts as PXB, so the GPUs meet
  // at PXB instead of PHB, and P2P is allowed.
  std::string body =
      cpuOpen(0) +
      pci("0000:10:00.0", "0x060400", "<pcilink target=\"0000:20:00.0\"/>" + pci("0000:11:00.0", "0x030200", gpu(0))) +
      pci("0000:20:00.0", "0x060400", "<pcilink target=\"0000:10:00.0\"/>" + pci("0000:21:00.0", "0x030200", gpu(1))) +
      "</cpu>";
  Analysis a = run(body);
  EXPECT_EQ(pathText(gpuToGpu(a, 0, 1)), "PXB/48.00");
  EXPECT_TRUE(a.p2p[0][1].p2p);
}

TEST(TopologyRules, AmdWithTwoGpusAllowsP2pAcrossSockets) {
  // Rule: x86 AMD with at most 2 GPUs raises the P2P level to SYS.
  std::string body = cpuOpen(0, "x86_64", "AuthenticAMD") + pci("0000:01:00.0", "0x030200", gpu(0)) + "</cpu>" +
                     cpuOpen(1, "x86_64", "AuthenticAMD") + pci("0000:81:00.0", "0x030200", gpu(1)) + "</cpu>";
  Analysis a = run(body);
  EXPECT_EQ(pathText(gpuToGpu(a, 0, 1)), "SYS/16.00");  // AMD inter-socket bw
  EXPECT_TRUE(a.p2p[0][1].p2p);
  EXPECT_EQ(a.p2p[0][1].level, PATH_SYS);
  // Rule: NCCL_P2P_LEVEL overrides it.
  TopoSettings user;
  user.p2pLevel = PATH_PHB;
  EXPECT_FALSE(run(body, user).p2p[0][1].p2p);
}

TEST(TopologyRules, LocalNetMirrorsTheDevIndex) {
  // Rule: with 4 local NETs (a power of two) the GPU's dev index is bit-mirrored: dev 1 -> 2, dev 2 -> 1, 3 -> 3;
  // 4 NETs shared by 4 GPUs give one NET per GPU.
  std::string leaves;
  for (int i = 0; i < 4; ++i) leaves += pci("0000:1" + std::to_string(i) + ":00.0", "0x030200", gpu(i));
  for (int i = 0; i < 4; ++i) leaves += pci("0000:2" + std::to_string(i) + ":00.0", "0x020700", net(i));
  Analysis a = run(cpuOpen(0) + pci("0000:01:00.0", "0x060400", leaves) + "</cpu>");
  std::vector<int> chosen;
  for (int g = 0; g < 4; ++g) chosen.push_back(a.localNets[g][0].netDev);
  EXPECT_EQ(chosen, ints("0 2 1 3"));
  // Rule: NCCL_NETDEVS_POLICY=ALL lets a GPU rotate over all its local NETs by channel.
  TopoSettings all;
  all.netDevsPolicyMax = -1;
  Analysis b = run(cpuOpen(0) + pci("0000:01:00.0", "0x060400", leaves) + "</cpu>", all);
  std::vector<int> rotation;
  for (int c = 0; c < 4; ++c) rotation.push_back(b.localNets[1][c].netDev);
  EXPECT_EQ(rotation, ints("2 3 0 1"));
  // The reason names what set the share and shows the mirrored index, so "4 GPUs share 4 NETs -> 4 per GPU" is not a
  // riddle.
  EXPECT_EQ(
      a.localNets[1][0].reason,
      "4 NET(s) at the best bw 48.0/PIX from this GPU, shared by 4 GPU(s) -> 1 net(s) per GPU (ceil(4/4), "
      "NCCL_NETDEVS_POLICY=AUTO); index = dev 1 bit-mirrored over 4 = 2, + (channel 0 % 1 = 0) = 2, mod 4 -> NET 2");
  EXPECT_EQ(
      b.localNets[1][1].reason,
      "4 NET(s) at the best bw 48.0/PIX from this GPU, shared by 4 GPU(s) -> 4 net(s) per GPU "
      "(NCCL_NETDEVS_POLICY=ALL); index = dev 1 bit-mirrored over 4 = 2, + (channel 1 % 4 = 1) = 3, mod 4 -> NET 3");
}

TEST(TopologyRules, PortsOfOneNicShareItsNode) {
  // Rule (spec a, <nic>): multi-port NICs share one NIC node, the id ignoring the PCI function: 0000:12:00.0 and .1
  // are NIC/0-12000 with two NETs (they were two NIC nodes, NIC/0-12001 the second), so the NETs reach each other
  // through their NIC (LOC) rather than over the switch (PIX). Each NET keeps its own function's bus id.
  std::string body = cpuOpen(0) +
                     pci("0000:10:00.0", "0x060400",
                         pci("0000:11:00.0", "0x030200", gpu(0), "16.0 GT/s PCIe") +
                             pci("0000:12:00.0", "0x020700", net(0, "mlx5_0", 200000), "16.0 GT/s PCIe") +
                             pci("0000:12:00.1", "0x020700", net(1, "mlx5_1", 200000), "16.0 GT/s PCIe") +
                             pci("0000:13:00.0", "0x020700", net(2, "mlx5_2", 200000), "16.0 GT/s PCIe"),
                         "16.0 GT/s PCIe") +
                     "</cpu>";
  Analysis a = run(body);
  const System& s = a.system;
  ASSERT_EQ(s.count(NIC), 2);
  EXPECT_EQ(s.idString(NIC, 0), "NIC/0-12000");
  EXPECT_EQ(s.idString(NIC, 1), "NIC/0-13000");
  int ports = 0;
  for (const Link& l : s.node(NIC, 0).links) ports += l.remType == NET;
  EXPECT_EQ(ports, 2);
  EXPECT_EQ(netBusId(s, s.netIndexOfDev(0)), "0000:12:00.0");
  EXPECT_EQ(netBusId(s, s.netIndexOfDev(1)), "0000:12:00.1");
  const auto netToNet = [&](int from, int to) {
    return pathText(s.node(NET, s.netIndexOfDev(from)).paths[NET][static_cast<std::size_t>(s.netIndexOfDev(to))]);
  };
  EXPECT_EQ(netToNet(0, 1), "LOC/25.00");
  EXPECT_EQ(netToNet(0, 2), "PIX/24.00");
  EXPECT_EQ(pathText(gpuToNet(a, 0, 1)), "PIX/24.00");
}

TEST(TopologyRules, FusionGroupsByDistance) {
  // Two ports of one NIC (PCI functions .0 and .1), a second NIC on the same switch, a third NIC under the other CPU.
  std::string body =
      cpuOpen(0) +
      pci("0000:10:00.0", "0x060400",
          pci("0000:11:00.0", "0x020700", net(0, "mlx5_0")) + pci("0000:11:00.1", "0x020700", net(1, "mlx5_1")) +
              pci("0000:12:00.0", "0x020700", net(2, "mlx5_2"))) +
      "</cpu>" + cpuOpen(1) + pci("0000:81:00.0", "0x020700", net(3, "mlx5_3")) + "</cpu>";
  XmlDocument doc = parseXml("<system version=\"1\">" + body + "</system>");
  auto devs = listNetDevices(doc.root);
  ASSERT_EQ(devs.size(), 4u);
  EXPECT_EQ(netDistance(doc.root, *devs[0].net, *devs[1].net), PATH_PORT);
  EXPECT_EQ(netDistance(doc.root, *devs[0].net, *devs[2].net), PATH_PIX);
  EXPECT_EQ(netDistance(doc.root, *devs[0].net, *devs[3].net), PATH_SYS);
  // Rule: default merge level PORT fuses only the two ports.
  auto port = computeFusionGroups(doc.root, PATH_PORT);
  ASSERT_EQ(port.size(), 1u);
  EXPECT_EQ(port[0].devs, ints("0 1"));
  // PIX adds the other NIC on the switch; SYS would take all four (the limit is 4 per vNIC).
  EXPECT_EQ(computeFusionGroups(doc.root, PATH_PIX)[0].devs, ints("0 1 2"));
  EXPECT_EQ(computeFusionGroups(doc.root, PATH_SYS)[0].devs, ints("0 1 2 3"));
  // LOC disables fusion; a forced group is applied first and must match every name.
  EXPECT_TRUE(computeFusionGroups(doc.root, PATH_LOC).empty());
  EXPECT_EQ(computeFusionGroups(doc.root, PATH_LOC, "mlx5_0,mlx5_3")[0].devs, ints("0 3"));
  EXPECT_THROW(computeFusionGroups(doc.root, PATH_LOC, "mlx5_0,nope"), TopologyError);
}

TEST(TopologyRules, FusionReadsDevLikeTheSystemBuilder) {
  // Rule (spec a): numeric attributes have their base detected as strtol(.., 0) does, by the builder and so by fusion:
  // dev="0x1" is 1 (atoi made both ports 0 and printed the group {0,0}), "010" is 8.
  auto port = [](const std::string& dev, int number) {
    return "<nic><net name=\"mlx5_" + std::to_string(number) + "\" dev=\"" + dev + "\" port=\"" +
           std::to_string(number) + "\" guid=\"0x100\" speed=\"200000\" gdr=\"1\"/></nic>";
  };
  XmlDocument doc = parseXml(
      "<system version=\"1\">" + cpuOpen(0) +
          pci("0000:10:00.0", "0x060400",
              pci("0000:11:00.0", "0x030200", gpu(0)) + pci("0000:12:00.0", "0x020700", port("0x0", 1)) +
                  pci("0000:12:00.1", "0x020700", port("0x1", 2)) + pci("0000:13:00.0", "0x020700", port("010", 3))) +
          "</cpu></system>",
      "hexdev.xml");
  System sys = buildSystem(doc);
  std::vector<int> built;
  for (int n = 0; n < sys.count(NET); ++n) built.push_back(sys.node(NET, n).net.dev);
  std::vector<int> listed;
  for (const FusionDevice& d : listNetDevices(doc.root)) listed.push_back(d.dev);
  EXPECT_EQ(listed, built);
  EXPECT_EQ(listed, ints("0 1 8"));
  auto groups = computeFusionGroups(doc.root, PATH_PORT);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].devs, ints("0 1"));
  // A dev that is not a whole number is the file's error at its line, as the builder reports it.
  XmlDocument bad = parseXml(
      "<system version=\"1\">" + cpuOpen(0) + "\n" + pci("0000:12:00.0", "0x020700", port("1x", 1)) + "</cpu></system>",
      "bad.xml");
  try {
    computeFusionGroups(bad.root, PATH_PORT, "", "bad.xml");
    ADD_FAILURE() << "dev=\"1x\" was read as a number";
  } catch (const TopologyError& e) {
    EXPECT_STREQ(e.what(), "bad.xml:2: <net> attribute dev=\"1x\" is not an integer");
  }
}

TEST(TopologyRules, FusionWalksDevicesInIndexOrderNotFileOrder) {
  // Six NICs on one switch, listed dev 5 first: groups of at most 4 start from device 0, as NCCL walks indices.
  std::string nics;
  for (int dev = 5; dev >= 0; --dev) {
    char bus[16];
    std::snprintf(bus, sizeof(bus), "0000:2%d:00.0", 5 - dev);
    nics += pci(bus, "0x020000", net(dev, "mlx5_" + std::to_string(dev)));
  }
  XmlDocument doc =
      parseXml("<system version=\"1\">" + cpuOpen(0) + pci("0000:10:00.0", "0x060400", nics) + "</cpu></system>");
  auto groups = computeFusionGroups(doc.root, PATH_PIX);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].devs, ints("0 1 2 3"));
  EXPECT_EQ(groups[1].devs, ints("4 5"));
  // NCCL_NET_FORCE_MERGE keeps the first 4 names of a group, as NCCL's parser does (a 5-device vNIC was made), and
  // the automatic fusion groups the rest.
  auto forced = computeFusionGroups(doc.root, PATH_PIX, "mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4");
  ASSERT_EQ(forced.size(), 2u);
  EXPECT_EQ(forced[0].devs, ints("0 1 2 3"));
  EXPECT_NE(forced[0].reason.find("1 name(s) past the 4th ignored"), std::string::npos) << forced[0].reason;
  EXPECT_EQ(forced[1].devs, ints("4 5"));
}

TEST(TopologyRules, ForcedFusionNamesWithoutAPortTakeEveryPort) {
  // One device name with two ports: "mlx5_0" names both (NCCL's matchIfList), so a group of that one name matches
  // two devices for one name, which NCCL refuses; "mlx5_0:2" names one port.
  auto port = [](int dev, int number) {
    return "<nic><net name=\"mlx5_0\" port=\"" + std::to_string(number) + "\" dev=\"" + std::to_string(dev) +
           "\" speed=\"200000\" gdr=\"1\"/></nic>";
  };
  XmlDocument doc = parseXml("<system version=\"1\">" + cpuOpen(0) + pci("0000:11:00.0", "0x020700", port(0, 1)) +
                             pci("0000:11:00.1", "0x020700", port(1, 2)) +
                             pci("0000:12:00.0", "0x020700", net(2, "mlx5_2")) + "</cpu></system>");
  try {
    computeFusionGroups(doc.root, PATH_LOC, "mlx5_0");
    ADD_FAILURE() << "a name matching two ports was taken for one device";
  } catch (const TopologyError& e) {
    EXPECT_NE(std::string(e.what()).find("matches 2 devices, 1 requested"), std::string::npos) << e.what();
  }
  EXPECT_THROW(computeFusionGroups(doc.root, PATH_LOC, "mlx5_0,mlx5_2"), TopologyError);  // 3 devices, 2 names
  auto onePort = computeFusionGroups(doc.root, PATH_LOC, "mlx5_0:2,mlx5_2");
  ASSERT_EQ(onePort.size(), 1u);
  EXPECT_EQ(onePort[0].devs, ints("1 2"));
  // NCCL's parseStringList reads the port with atoi: "02" is port 2 and "0x1" port 0; a <net> without a port
  // attribute is port 0 (its default), so "mlx5_2:0" names it.
  EXPECT_EQ(computeFusionGroups(doc.root, PATH_LOC, "mlx5_0:02,mlx5_2")[0].devs, ints("1 2"));
  EXPECT_EQ(computeFusionGroups(doc.root, PATH_LOC, "mlx5_0:1,mlx5_2:0")[0].devs, ints("0 2"));
  EXPECT_THROW(computeFusionGroups(doc.root, PATH_LOC, "mlx5_0:0x1,mlx5_2"), TopologyError);  // port 0: none
}

TEST(TopologyRules, AForcedFusionGroupOfOneDeviceMakesNoVnicAndIsSaid) {
  // ncclTopoForceMerge hands every group to ncclTopoMakeVnic, which makes no vNIC of one device, and marks the
  // device placed: the automatic fusion leaves it alone. The tool says so rather than dropping the group silently.
  XmlDocument doc = parseXml("<system version=\"1\">" + cpuOpen(0) +
                             pci("0000:10:00.0", "0x060400",
                                 pci("0000:11:00.0", "0x020700", net(0, "mlx5_0")) +
                                     pci("0000:11:00.1", "0x020700", net(1, "mlx5_1")) +
                                     pci("0000:12:00.0", "0x020700", net(2, "mlx5_2"))) +
                             "</cpu></system>");
  EXPECT_EQ(computeFusionGroups(doc.root, PATH_PIX)[0].devs, ints("0 1 2"));
  std::vector<std::string> notes;
  auto groups = computeFusionGroups(doc.root, PATH_PIX, "mlx5_2", "<memory>", &notes);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].devs, ints("0 1"));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("NCCL_NET_FORCE_MERGE group \"mlx5_2\" is one device (dev 2): NCCL makes no vNIC of one "
                          "device, and keeps it out of the automatic fusion"),
            std::string::npos)
      << notes[0];
}

TEST(TopologyRules, PreferredNetsAreTakenGpuByGpuOnOneHost) {
  // Two GPUs on an NVSwitch, each with two NICs on its own switch. NCCL lists the NETs to try GPU by GPU (each GPU's
  // local NETs over its channels: 0, 1, then 3, 2) on one host, and channel by channel across GPUs (0, 3, 1, 2) only
  // between the hosts of a multi-node NVLink system. The tree's channels follow that list.
  auto gpuWithNics = [](int index) {
    const std::string b = std::to_string(index + 1);
    const std::string nvs = "<nvlink target=\"fffffff:ffff:ff\" count=\"18\" tclass=\"0x068000\"/>";
    return pci(
        "0000:" + b + "0:00.0", "0x060400",
        pci("0000:" + b + "1:00.0", "0x030200", gpu(index, 90, nvs)) +
            pci("0000:" + b + "2:00.0", "0x020000", net(2 * index, "mlx5_" + std::to_string(2 * index))) +
            pci("0000:" + b + "3:00.0", "0x020000", net(2 * index + 1, "mlx5_" + std::to_string(2 * index + 1))));
  };
  Analysis a = run(cpuOpen(0) + gpuWithNics(0) + gpuWithNics(1) + "</cpu>");
  ASSERT_FALSE(a.searches.empty());
  const Graph& tree = a.searches.back().tree;
  ASSERT_EQ(tree.nChannels, 4);
  std::vector<std::int64_t> first;
  for (int c = 0; c < tree.nChannels; ++c) first.push_back(tree.inter[static_cast<std::size_t>(2 * c)]);
  EXPECT_EQ(first, (std::vector<std::int64_t>{0, 1, 3, 2}));
}

TEST(TopologyRules, TrimKeepsTheDomainAndDecidesInter) {
  std::string body = cpuOpen(0) + pci("0000:01:00.0", "0x030200", gpu(0)) + pci("0000:02:00.0", "0x030200", gpu(1)) +
                     pci("0000:03:00.0", "0x020700", net(0)) + "</cpu>";
  // Rule: every local GPU is reachable without the network, so all stay; inter = (local GPUs != ranks).
  Analysis single = run(body, {}, 2);
  EXPECT_TRUE(single.trim.removedRanks.empty());
  EXPECT_FALSE(single.trim.inter);
  Analysis multi = run(body, {}, 4);
  EXPECT_TRUE(multi.trim.inter);
  AnalysisOptions bad;
  bad.rank = 7;
  EXPECT_THROW(analyze(parseXml("<system version=\"1\">" + body + "</system>"), bad), TopologyError);
}

TEST(TopologyRules, GdrReadPreAmpereNeedsNvlink) {
  // Rule: sm < 80 GPUs only allow GDR reads when they have an NVLink peer (or are alone).
  std::string nvl = cpuOpen(0) +
                    pci("0000:10:00.0", "0x060400",
                        pci("0000:01:00.0", "0x030200", gpu(0, 70, nvlink("0000:02:00.0"))) +
                            pci("0000:02:00.0", "0x030200", gpu(1, 70, nvlink("0000:01:00.0"))) +
                            pci("0000:03:00.0", "0x020700", net(0))) +
                    "</cpu>";
  Analysis a = run(nvl);
  EXPECT_NE(a.gdrRead[0][0].mode, GdrMode::Disabled);
  std::string pcie = cpuOpen(0) +
                     pci("0000:10:00.0", "0x060400",
                         pci("0000:01:00.0", "0x030200", gpu(0, 70)) + pci("0000:02:00.0", "0x030200", gpu(1, 70)) +
                             pci("0000:03:00.0", "0x020700", net(0))) +
                     "</cpu>";
  Analysis b = run(pcie);
  EXPECT_EQ(b.gdrRead[0][0].mode, GdrMode::Disabled);
  EXPECT_NE(b.gdrWrite[0][0].mode, GdrMode::Disabled);  // writes do not have that restriction
  TopoSettings noRead;
  noRead.netGdrRead = 0;
  EXPECT_EQ(run(nvl, noRead).gdrRead[0][0].mode, GdrMode::Disabled);
}

TEST(TopologyRules, NcclLogShapes) {
  Analysis a = analyzeFile("aws-p4d.24xlarge.xml", [] {
    CompletionOptions f;
    f.gpuSm = 80;
    f.gpuNvlinks = 12;
    f.nicSpeedMbps = 100000;
    return f;
  }());
  auto sysLines = systemLogLines(a.system);
  EXPECT_EQ(sysLines[0], "=== System : maxBw 12.0 totalBw 240.0 ===");
  EXPECT_EQ(sysLines[1], "CPU/0-0 (1/1/2)");
  // NCCL numbers each vendor's CPU models from 1: a Zhaoxin Yongfeng (family 7, model 0x5B) logs as model 1.
  const std::string yongfeng =
      "<cpu numaid=\"0\" arch=\"x86_64\" vendor=\"CentaurHauls\" familyid=\"7\" modelid=\"91\">";
  Analysis z = run(yongfeng + pci("0000:01:00.0", "0x030200", gpu(0), "16 GT/s", 8) + "</cpu>");
  EXPECT_EQ(systemLogLines(z.system)[1], "CPU/0-0 (1/3/1)");
  auto paths = pathLogLines(a.system);
  EXPECT_EQ(paths[0].rfind("GPU/0-101c0 :GPU/0-101c0 (0/5000.0/LOC) GPU/0-101d0 (2/240.0/NVL) ", 0), 0u) << paths[0];
  EXPECT_EQ(a.gdrRead[0][0].ncclLog,
            "GPU Direct RDMA Enabled for GPU/0-65984 (rank 0) - NET/0-0 (distance 4 <= 6, read 1, mode Default)");
  EXPECT_NE(a.gdrRead[0][1].ncclLog.find("( using PXN via GPU/0-131520, distance 4 <= 6"), std::string::npos)
      << a.gdrRead[0][1].ncclLog;
  auto graph = graphLogLines(a.system, a.searches[1].ring);
  EXPECT_EQ(graph[0], "Pattern 4, crossNic 0, nChannels 4, bw 12.000000/12.000000, type NVL/PIX, sameChannels 0");
  EXPECT_EQ(graph[1],
            " 0 : NET/0-0 GPU/0-101c0 GPU/0-a01d0 GPU/0-a01c0 GPU/0-901d0 GPU/0-901c0 GPU/0-201d0 GPU/0-201c0 "
            "GPU/0-101d0 NET/0-0");
  EXPECT_EQ(ringLogLines(a.system, a.searches[1].ring, 0)[0], "Ring 00 : NET -> 0 -> 7");
  // The Trees line of a multi-node search only knows this node: the output says so instead of looking like NCCL's
  // single-node line (NCCL prints the other node's rank where the tool prints -1).
  std::string searches = formatSearches(a, 0);
  EXPECT_NE(searches.find("Trees [0] 1/-1/-1->0->-1 [1] 1/-1/-1->0->7"), std::string::npos) << searches;
  EXPECT_NE(searches.find("this node only: a channel's head (first GPU) also has a tree peer on another node"),
            std::string::npos)
      << searches;
  auto transport = transportLogLines(a);
  EXPECT_EQ(transport[0], "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read");
  auto has = [&](const std::string& line) {
    return std::find(transport.begin(), transport.end(), line) != transport.end();
  };
  EXPECT_TRUE(has("Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA"));
  // PXN level 2: rank 1's rail NIC is owned by rank 0, which proxies the send.
  EXPECT_TRUE(has("Channel 00/0 : 1[1] -> 9[1] [send] via NET/IB/0(0)/GDRDMA"));
  {
    // NCCL_CROSS_NIC=0 takes the rail NIC, and PXN still picks its proxy (NCCL goes on to the PXN levels).
    TopoSettings noCross;
    noCross.crossNic = 0;
    NetDevChoice c = netDevForPeer(a.system, noCross, 1, 0, 1);
    NetDevChoice d = netDevForPeer(a.system, TopoSettings{}, 1, 0, 1);
    EXPECT_EQ(c.netDev, d.netDev);
    EXPECT_EQ(c.proxyRank, 0) << c.reason;
  }
  EXPECT_TRUE(has("Channel 00/0 : 9[1] -> 1[1] [receive] via NET/IB/0/GDRDMA"));
  std::string dot = formatDot(a);
  EXPECT_EQ(dot.rfind("digraph topology {", 0), 0u);
  EXPECT_NE(dot.find("GPU_0 -> NET_0 [style=dashed"), std::string::npos);
}

// Names are shown as the file has them, but cannot act on a terminal or end a dot label: an escape sequence's bytes
// are written as \xNN, a quote in a dot label is escaped.
TEST(TopologyRules, NamesFromTheFileAreShownNotInterpreted) {
  std::ifstream in(dataPath("azure-ncv4.xml"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string plain = "name=\"eth0\"";
  ASSERT_NE(text.find(plain), std::string::npos);
  text.replace(text.find(plain), plain.size(), "name=\"e&quot;th0\x1b[31m\\\"");
  Analysis a = analyze(parseXml(text, "named.xml"), {});
  ASSERT_EQ(a.system.node(NET, 0).net.name, "e\"th0\x1b[31m\\");
  std::string summary = terminalSafe(formatSummary(a));
  EXPECT_EQ(summary.find('\x1b'), std::string::npos);
  EXPECT_NE(summary.find("e\"th0\\x1b[31m\\"), std::string::npos) << summary;
  EXPECT_EQ(terminalSafe("a\tb\nc\rd\x7f"), "a\tb\nc\\x0dd\\x7f");
  std::string dot = formatDot(a);
  EXPECT_NE(dot.find("[label=\"NET 0 e\\\"th0\\\\x1b[31m\\\\\\n"), std::string::npos) << dot;
}

TEST(TopologyRules, SyntheticScaleSystem) {
  Analysis a = analyze(makeSyntheticTopology(72, 18), {});
  EXPECT_EQ(a.system.count(GPU), 72);
  EXPECT_EQ(a.system.count(NET), 18);
  // Rule: 4 GPUs share each switch's NIC; each GPU's local NET is its switch's.
  EXPECT_EQ(a.localNets[5][0].netDev, 1);
  ASSERT_FALSE(a.searches.empty());
  for (const auto& s : a.searches) EXPECT_GE(s.ring.nChannels, 1);
}

// GPUs and NICs side by side under one CPU, as a generated or flattened file has them (the review's flat_G_N.xml).
std::string flatMachine(int gpus, int nets) {
  std::string body =
      "<cpu numaid=\"0\" affinity=\"ffffffff\" arch=\"x86_64\" vendor=\"GenuineIntel\" familyid=\"6\" "
      "modelid=\"143\">";
  char busId[32];
  for (int i = 0; i < gpus; ++i) {
    std::snprintf(busId, sizeof busId, "0000:%02x:%02x.0", (i >> 4) + 1, i & 15);
    body += pci(busId, "0x030200", gpu(i), "16.0 GT/s PCIe");
  }
  for (int j = 0; j < nets; ++j) {
    std::snprintf(busId, sizeof busId, "0001:%02x:%02x.0", (j >> 4) + 1, j & 15);
    body += pci(busId, "0x020700", net(j, "mlx5_" + std::to_string(j), 200000), "16.0 GT/s PCIe");
  }
  return "<system version=\"1\">" + body + "</cpu></system>";
}

// NCCL's ncclTopoGetLocalGpu as the spec words it: for channel c = 0..63, for each of the NET's local GPUs in order,
// the first GPU whose local NET on channel c is this NET.
int ownerByDefinition(const System& sys, const TopoSettings& settings, int n) {
  for (int c = 0; c < kMaxChannels; ++c)
    for (int g : localNodes(sys, NET, n, GPU))
      if (localNet(sys, settings, sys.node(GPU, g).gpu.rank, c).netIndex == n) return g;
  return -1;
}

TEST(TopologyRules, NetOwnerIsNcclsLocalGpu) {
  // The owner kept per NET (computed once, not per GPU) is the one the definition gives, for every NET policy.
  std::vector<System> systems;
  systems.push_back(buildSystem(parseXml(flatMachine(12, 6), "flat.xml")));
  systems.push_back(buildSystem(parseXml(flatMachine(4, 8), "flat.xml")));
  systems.push_back(buildSystem(makeSyntheticTopology(72, 18)));
  for (int policy : {0, -1, 1, 3}) {
    TopoSettings settings;
    settings.netDevsPolicyMax = policy;
    for (System& sys : systems) {
      computePaths(sys, settings);
      for (int n = 0; n < sys.count(NET); ++n)
        EXPECT_EQ(localGpuOfNet(sys, settings, n), ownerByDefinition(sys, settings, n))
            << sys.idString(NET, n) << " policy " << policy;
    }
  }
}

TEST(TopologyRules, PathsOfManyGpusAndNetsAreQuick) {
  // computePaths' PXN step asks for each NET's owner for every GPU; recomputed each time (every candidate GPU's local
  // NETs, per question), 256 GPUs and 128 NETs took 26 s and the tool's 640 x 640 ran for hours. Now 0.15 s in the
  // release build; under ASan on a loaded 2-core host it took 3.48 s, past a 3 s bound, so a sanitizer build gets
  // 15 s, still far below what the quadratic version took there.
  System sys = buildSystem(parseXml(flatMachine(256, 128), "flat_256_128.xml"));
  const auto start = std::chrono::steady_clock::now();
  computePaths(sys, TopoSettings{});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, nns::test::kUnderSanitizer ? 15.0 : 3.0);
  // Every GPU and NET sits on the CPU: all GPU-NET paths are PHB (no PXN without NVLinks), and the owner of NET 7 is
  // the first GPU whose bit-mirrored dev over 128 NETs is 7: dev 112.
  EXPECT_EQ(sys.node(GPU, 5).paths[NET][7].type, PATH_PHB);
  EXPECT_EQ(localGpuOfNet(sys, TopoSettings{}, 7), 112);
  EXPECT_EQ(ownerByDefinition(sys, TopoSettings{}, 7), 112);
}

}  // namespace
}  // namespace nns::topo::testing

namespace nns::topo::testing {
namespace {

// Sets NCCL_* variables for one test and restores them, so other tests keep NCCL's defaults.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_.empty())
      ::unsetenv(name_);
    else
      ::setenv(name_, old_.c_str(), 1);
  }

 private:
  const char* name_;
  std::string old_;
};

TEST(TopologySettings, ReadsNcclVariablesLikeNccl) {
  {
    ScopedEnv a("NCCL_P2P_LEVEL", "NVL");
    ScopedEnv b("NCCL_NET_GDR_LEVEL", "2");  // old integer level 2 = PXB
    ScopedEnv c("NCCL_PXN_DISABLE", "1");
    ScopedEnv d("NCCL_NET_MERGE_LEVEL", "PIX");
    ScopedEnv e("NCCL_NETDEVS_POLICY", "MAX:2");
    TopoSettings s = TopoSettings::fromEnvironment();
    EXPECT_EQ(s.p2pLevel, PATH_NVL);
    EXPECT_EQ(s.netGdrLevel, PATH_PXB);
    EXPECT_TRUE(s.pxnDisable);
    EXPECT_EQ(s.netMergeLevel, PATH_PIX);
    EXPECT_EQ(s.netDevsPolicyMax, 2);
  }
  {
    ScopedEnv a("NCCL_P2P_DISABLE", "1");
    EXPECT_EQ(TopoSettings::fromEnvironment().p2pLevel, PATH_LOC);
  }
  {
    // Refused, but saying what NCCL does with it: nothing, silently (ncclGetLevel keeps its default).
    ScopedEnv a("NCCL_P2P_LEVEL", "pix");
    try {
      TopoSettings::fromEnvironment();
      ADD_FAILURE() << "NCCL_P2P_LEVEL=pix was read";
    } catch (const TopologyError& e) {
      EXPECT_NE(std::string(e.what()).find("NCCL_P2P_LEVEL=pix: unknown level (LOC NVL"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("NCCL itself silently ignores a value it cannot read and uses its default"),
                std::string::npos)
          << e.what();
    }
  }
  {
    // As NCCL: the merge level by name prefix (case matters), anything else LOC; the policy ignoring case, anything
    // else AUTO; NVB off for any non-zero value. Each fallback, and a name read from the start of the value, leaves a
    // note.
    ScopedEnv a("NCCL_NET_MERGE_LEVEL", "PXB_PLEASE");
    ScopedEnv b("NCCL_NETDEVS_POLICY", "all");
    ScopedEnv c("NCCL_NVB_DISABLE", "2");
    TopoSettings s = TopoSettings::fromEnvironment();
    EXPECT_EQ(s.netMergeLevel, PATH_PXB);
    EXPECT_EQ(s.netDevsPolicyMax, -1);
    EXPECT_TRUE(s.nvbDisable);
    ASSERT_EQ(s.notes.size(), 1u);
    EXPECT_NE(s.notes[0].find("NCCL_NET_MERGE_LEVEL=PXB_PLEASE begins with PXB"), std::string::npos) << s.notes[0];
  }
  {
    ScopedEnv a("NCCL_NET_MERGE_LEVEL", "2");  // no old integer levels here: LOC
    ScopedEnv b("NCCL_NETDEVS_POLICY", "MAX:0");
    TopoSettings s = TopoSettings::fromEnvironment();
    EXPECT_EQ(s.netMergeLevel, PATH_LOC);
    EXPECT_EQ(s.netDevsPolicyMax, 0);
    ASSERT_EQ(s.notes.size(), 2u);
    EXPECT_NE(s.notes[0].find("NCCL takes LOC (no fusion)"), std::string::npos) << s.notes[0];
    EXPECT_NE(s.notes[1].find("NCCL takes AUTO"), std::string::npos) << s.notes[1];
  }
  {
    ScopedEnv a("NCCL_NET_MERGE_LEVEL", "pxb");
    EXPECT_EQ(TopoSettings::fromEnvironment().netMergeLevel, PATH_LOC);
  }
  TopoSettings defaults = TopoSettings::fromEnvironment();
  EXPECT_EQ(defaults.p2pLevel, -2);
  EXPECT_EQ(defaults.crossNic, 2);
}

TEST(TopologySettings, ReadsIntegersAsNcclsStrtolWithBase0) {
  // ncclGetLevel: `int disable = strtol(str, NULL, 0)`, P2P off when it is 1; an old integer level is
  // strtol(str, NULL, 0) of a value that starts with a digit. ncclLoadParam (NCCL_PARAM): strtoll(str, NULL, 0), its
  // default only on a range error.
  {
    ScopedEnv a("NCCL_P2P_DISABLE", "1x");
    TopoSettings s = TopoSettings::fromEnvironment();
    EXPECT_EQ(s.p2pLevel, PATH_LOC);
    ASSERT_EQ(s.notes.size(), 1u);
    EXPECT_NE(s.notes[0].find("NCCL_P2P_DISABLE=1x: NCCL reads the integer it starts with, 1"), std::string::npos);
  }
  {
    ScopedEnv a("NCCL_P2P_DISABLE", "0x1");
    EXPECT_EQ(TopoSettings::fromEnvironment().p2pLevel, PATH_LOC);
  }
  {
    ScopedEnv a("NCCL_P2P_DISABLE", "2");  // not 1: the level decides
    ScopedEnv b("NCCL_P2P_LEVEL", "0x3");
    ScopedEnv c("NCCL_NET_GDR_LEVEL", "09");  // octal: reads 0
    TopoSettings s = TopoSettings::fromEnvironment();
    EXPECT_EQ(s.p2pLevel, PATH_PHB);
    EXPECT_EQ(s.netGdrLevel, PATH_LOC);
    ASSERT_EQ(s.notes.size(), 2u);
    EXPECT_NE(s.notes[0].find("NCCL_P2P_LEVEL=0x3: NCCL reads the integer it starts with, 3 (PHB)"), std::string::npos)
        << s.notes[0];
    EXPECT_NE(s.notes[1].find("NCCL_NET_GDR_LEVEL=09: NCCL reads the integer it starts with, 0 (LOC)"),
              std::string::npos)
        << s.notes[1];
  }
  {
    ScopedEnv a("NCCL_P2P_LEVEL", "4");  // plainly an old level: no note
    ScopedEnv b("NCCL_NET_GDR_LEVEL", "010");
    TopoSettings s = TopoSettings::fromEnvironment();
    EXPECT_EQ(s.p2pLevel, PATH_SYS);
    EXPECT_EQ(s.netGdrLevel, PATH_SYS);  // 8, clamped to the last old level
    EXPECT_EQ(s.notes.size(), 1u);
  }
  {
    // ncclGetLevel keeps strtol's long in an int: 4294967296 is 0 there (LOC), said in a note.
    ScopedEnv a("NCCL_P2P_LEVEL", "4294967296");
    ScopedEnv b("NCCL_NET_GDR_LEVEL", "4294967300");  // 4 in an int: SYS
    TopoSettings s = TopoSettings::fromEnvironment();
    EXPECT_EQ(s.p2pLevel, PATH_LOC);
    EXPECT_EQ(s.netGdrLevel, PATH_SYS);
    ASSERT_EQ(s.notes.size(), 2u);
    EXPECT_NE(s.notes[0].find("NCCL_P2P_LEVEL=4294967296: NCCL reads the integer it starts with, 4294967296, into an "
                              "int, where it is 0 (LOC)"),
              std::string::npos)
        << s.notes[0];
  }
  // One that is negative in an int (2^31, 2^32 - 1, strtol's LONG_MAX for a longer number) would index NCCL's table
  // of old levels out of range: refused, saying so.
  for (const char* negative : {"2147483648", "4294967295", "99999999999999999999"}) {
    ScopedEnv a("NCCL_NET_GDR_LEVEL", negative);
    try {
      TopoSettings::fromEnvironment();
      ADD_FAILURE() << negative << ": expected an error";
    } catch (const TopologyError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("NCCL_NET_GDR_LEVEL=") + negative + ": NCCL reads"),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
    }
  }
  {
    ScopedEnv a("NCCL_CROSS_NIC", "1x");
    ScopedEnv b("NCCL_P2P_PXN_LEVEL", "yes");
    ScopedEnv c("NCCL_PXN_DISABLE", "0x1");
    ScopedEnv d("NCCL_NET_GDR_READ", "99999999999999999999");
    TopoSettings s = TopoSettings::fromEnvironment();
    EXPECT_EQ(s.crossNic, 1);
    EXPECT_EQ(s.p2pPxnLevel, 0);
    EXPECT_TRUE(s.pxnDisable);
    EXPECT_EQ(s.netGdrRead, -2);
    ASSERT_EQ(s.notes.size(), 3u);
    EXPECT_NE(s.notes[0].find("NCCL_NET_GDR_READ=99999999999999999999 is out of range: NCCL uses its default (-2)"),
              std::string::npos)
        << s.notes[0];
    EXPECT_NE(s.notes[1].find("NCCL_P2P_PXN_LEVEL=yes does not start with an integer: NCCL reads 0"), std::string::npos)
        << s.notes[1];
    EXPECT_NE(s.notes[2].find("NCCL_CROSS_NIC=1x: NCCL reads the integer it starts with, 1"), std::string::npos)
        << s.notes[2];
  }
}

}  // namespace
}  // namespace nns::topo::testing
