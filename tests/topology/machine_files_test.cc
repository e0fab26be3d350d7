// Every public machine file: expectations derived by hand from NCCL's rules, each with the rule that makes it so.
#include <algorithm>
#include <fstream>
#include <iterator>
#include <sstream>

#include "topology_test_util.h"

namespace nns::topo::testing {
namespace {

// azure-ndv2.xml: 8 V100 and one IB NIC, all directly under the two Intel Skylake CPUs (no PCI switch). The NVLink
// cube mesh cannot be expressed by completion (it only adds NVSwitch links), so this is the PCI-only view.
class Ndv2 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    CompletionOptions f;
    f.gpuSm = 70;
    f.nicSpeedMbps = 100000;
    analysis = new Analysis(analyzeFile("azure-ndv2.xml", f));
  }
  static void TearDownTestSuite() {
    delete analysis;
    analysis = nullptr;
  }
  static Analysis* analysis;
};
Analysis* Ndv2::analysis = nullptr;

TEST_F(Ndv2, ShapeAndRanksFollowBusIdOrder) {
  const System& s = analysis->system;
  EXPECT_EQ(s.count(GPU), 8);
  EXPECT_EQ(s.count(NET), 1);
  EXPECT_EQ(s.count(PCI), 0);  // GPUs and NIC hang directly off the CPUs
  // Rule: completion numbers GPUs in bus-id order; the file lists them in that order too.
  EXPECT_EQ(analysis->gpuRanks, ints("0 1 2 3 4 5 6 7"));
}

TEST_F(Ndv2, GpuToNicPathTypes) {
  // Rule: a PCI hop that touches a CPU is PHB; GPU -> CPU0 -> NIC is PHB, bottleneck the NET link (100 Gb/s = 12.5).
  EXPECT_EQ(pathText(gpuToNet(*analysis, 0, 0)), "PHB/12.50");
  EXPECT_EQ(pathText(gpuToNet(*analysis, 3, 0)), "PHB/12.50");
  // Rule: crossing the inter-CPU link is SYS; Skylake QPI is 10 GB/s, the bottleneck.
  EXPECT_EQ(pathText(gpuToNet(*analysis, 4, 0)), "SYS/10.00");
  EXPECT_EQ(pathText(gpuToNet(*analysis, 7, 0)), "SYS/10.00");
}

TEST_F(Ndv2, EveryGpuUsesTheOnlyNicAndGdrIsOff) {
  for (std::size_t g = 0; g < 8; ++g) {
    // Rule: ncclTopoGetLocalNet picks among the NETs with the best path; there is one NET.
    EXPECT_EQ(analysis->localNets[g][0].netDev, 0);
    // Rule (GDR read): sm < 80 without an NVLink peer keeps GDR reads off.
    EXPECT_EQ(analysis->gdrRead[g][0].mode, GdrMode::Disabled);
    EXPECT_NE(analysis->gdrRead[g][0].reason.find("pre-Ampere"), std::string::npos) << analysis->gdrRead[g][0].reason;
    // Rule (GDR level): distance PHB (or SYS) > default level P2C.
    EXPECT_EQ(analysis->gdrWrite[g][0].mode, GdrMode::Disabled);
    EXPECT_NE(analysis->gdrWrite[g][0].reason.find("> level P2C"), std::string::npos);
  }
  // Rule: the owner of a NET is the first of its closest GPUs (PHB, in index order) whose local NET it is.
  EXPECT_EQ(analysis->netLocalGpuRank, ints("0"));
  // Rule: PXN needs an NVLink path between the GPUs; there is none.
  EXPECT_TRUE(analysis->pxn.empty());
}

TEST_F(Ndv2, NoP2pThroughTheHostBridge) {
  // Rule: default P2P level is PXB (the CPU is Intel); two GPUs under one CPU meet at PHB -> no P2P.
  EXPECT_FALSE(analysis->p2p[0][1].p2p);
  EXPECT_EQ(pathTypeName(analysis->p2p[0][1].pathType), "PHB");
  // Rerouted through the destination's CPU: still PHB, 24 GB/s ("16 GT/s" x16).
  EXPECT_EQ(pathText(gpuToGpu(*analysis, 0, 1)), "PHB/24.00");
  EXPECT_EQ(pathText(gpuToGpu(*analysis, 0, 4)), "SYS/10.00");
  // Rule: a GPU's path to itself is LOC and always P2P.
  EXPECT_TRUE(analysis->p2p[0][0].p2p);
}

TEST_F(Ndv2, SearchesCrossTheSockets) {
  ASSERT_EQ(analysis->searches.size(), 2u);
  for (const SearchResult& r : analysis->searches) {
    // Rule: the ring must include GPUs of both sockets, so the intra type is raised until SYS.
    EXPECT_EQ(pathTypeName(r.ring.typeIntra), "SYS");
    EXPECT_GE(r.ring.nChannels, 1);
    EXPECT_FALSE(r.ring.fallback);
  }
}

// azure-ncv4.xml: 4 A100 PCIe, one per AMD NUMA node, and one virtual NIC (eth0) directly under CPU 0.
class Ncv4 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { analysis = new Analysis(analyzeFile("azure-ncv4.xml", {})); }
  static void TearDownTestSuite() {
    delete analysis;
    analysis = nullptr;
  }
  static Analysis* analysis;
};
Analysis* Ncv4::analysis = nullptr;

TEST_F(Ncv4, VirtualNicAndUnknownLinkSpeed) {
  const System& s = analysis->system;
  EXPECT_EQ(s.count(GPU), 4);
  EXPECT_EQ(s.count(NIC), 1);
  EXPECT_EQ(s.node(NET, 0).net.name, "eth0");
  // Rule: link_width "0" means x16 and an empty link_speed falls back to Gen3: 12 GB/s per GPU.
  // Rule: a <nic> directly under <cpu> is linked with LOC_BW, so GPU0 -> NET0 is PHB at the GPU's 12 GB/s.
  EXPECT_EQ(pathText(gpuToNet(*analysis, 0, 0)), "PHB/12.00");
  // Rule: other GPUs cross the AMD inter-CPU link (16 GB/s): SYS, still bottlenecked by their 12 GB/s PCI link.
  EXPECT_EQ(pathText(gpuToNet(*analysis, 2, 0)), "SYS/12.00");
  // Rule: the file's <nvlink> targets the GPU itself; NCCL adds it as a link (12 x 20 GB/s), which only shows in
  // totalBw (max of NVLink sum and PCI bw) and never in a path.
  EXPECT_FLOAT_EQ(s.totalBw, 240.0f);
}

TEST_F(Ncv4, GdrOffP2pOffSingleNic) {
  for (std::size_t g = 0; g < 4; ++g) {
    // Rule: the NIC's gdr attribute is 0, which disables GDR before any distance check.
    EXPECT_EQ(analysis->gdrRead[g][0].mode, GdrMode::Disabled);
    EXPECT_EQ(analysis->gdrWrite[g][0].reason, "the NIC does not support GPU memory (gdr=0)");
    EXPECT_EQ(analysis->localNets[g][0].netDev, 0);
    // Rule: AMD raises the P2P level to SYS only with <= 2 GPUs; with 4, PXB applies and SYS paths have no P2P.
    for (std::size_t p = 0; p < 4; ++p) {
      if (p != g) {
        EXPECT_FALSE(analysis->p2p[g][p].p2p);
      }
    }
  }
  EXPECT_EQ(pathTypeName(analysis->localNets[0][0].localPathType), "PHB");
  EXPECT_EQ(pathTypeName(analysis->localNets[1][0].localPathType), "SYS");
  // Rule: the NET's closest GPU (PHB beats SYS at equal bandwidth) owns it.
  EXPECT_EQ(analysis->netLocalGpuRank, ints("0"));
}

TEST_F(Ncv4, SingleNodeRingIsOneSysChannel) {
  // Rule: every GPU has one 12 GB/s PCI link each way; a ring at 12 uses all of it, so one channel, typeIntra SYS.
  const Graph& ring = analysis->searches[0].ring;
  EXPECT_EQ(ring.nChannels, 1);
  EXPECT_FLOAT_EQ(ring.bwIntra, 12.0f);
  EXPECT_EQ(pathTypeName(ring.typeIntra), "SYS");
  EXPECT_EQ(channelText(*analysis, ring, 0, false), "0 1 2 3");
}

TEST_F(Ncv4, GraphFileLoadsAgainstTheSystem) {
  XmlDocument doc = readXmlFile(dataPath("azure-ncv4-graph.xml"));
  std::vector<Graph> graphs = loadGraphXml(doc, &analysis->system);
  ASSERT_EQ(graphs.size(), 3u);
  EXPECT_EQ(graphs[0].id, 0);
  EXPECT_EQ(graphs[0].pattern, PATTERN_RING);
  EXPECT_EQ(graphs[0].nChannels, 2);
  EXPECT_FLOAT_EQ(graphs[0].bwIntra, 12.0f);
  EXPECT_EQ(pathTypeName(graphs[0].typeIntra), "SYS");
  EXPECT_EQ(pathTypeName(graphs[0].typeInter), "PIX");
  // gpu dev values map to ranks through the GPUs' NVML index (dev == rank in this file).
  EXPECT_EQ(std::vector<int>(graphs[0].intra.begin() + 4, graphs[0].intra.end()), ints("0 3 2 1"));
  EXPECT_EQ(graphs[1].pattern, PATTERN_BALANCED_TREE);
  EXPECT_EQ(graphs[1].nChannels, 4);
  EXPECT_EQ(graphs[2].pattern, PATTERN_TREE);
  // Written back out, the graphs read in again identically.
  std::vector<const Graph*> ptrs{&graphs[0], &graphs[1], &graphs[2]};
  XmlDocument again = parseXml(writeXml(graphsToXml(analysis->system, ptrs)), "<written>");
  std::vector<Graph> reread = loadGraphXml(again, &analysis->system);
  ASSERT_EQ(reread.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(reread[i].intra, graphs[i].intra);
    EXPECT_EQ(reread[i].nChannels, graphs[i].nChannels);
  }
}

TEST_F(Ncv4, GraphFileGpuDevIsTheWholeId) {
  // NCCL compares a channel's <gpu dev> (hex) with NCCL_TOPO_ID(system, NVML index) as 64-bit ids: 0x100000000 is no
  // GPU ("dev not found"), not GPU 0 as the int it truncates to.
  XmlDocument doc = readXmlFile(casePath("azure-ncv4-graph-gpu-dev-100000000.xml"));
  try {
    loadGraphXml(doc, &analysis->system);
    FAIL() << "expected an error";
  } catch (const TopologyError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "azure-ncv4-graph-gpu-dev-100000000.xml:4: <gpu> dev=\"100000000\" is no GPU of this topology"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(Ncv4, GraphFileValuesNcclCannotHoldAreRefused) {
  // Each of these loaded and printed as a graph: NCCL's arrays hold 64 channels, its patterns are 1..6, a ring that
  // visits a GPU twice never completes, and a NET id that is no NET of the system is no channel's NIC.
  std::ifstream in(dataPath("azure-ncv4-graph.xml"));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string changed = text;
    changed.replace(changed.find(from), from.size(), to);
    return changed;
  };
  const std::pair<std::string, std::string> cases[] = {
      {replaced("pattern=\"4\"", "pattern=\"99\""), "graph.xml:2: pattern=99 is no NCCL search pattern"},
      {replaced("crossnic=\"0\"", "crossnic=\"5\""), "graph.xml:2: crossnic=5 (0, 1 or 2)"},
      {replaced("nchannels=\"2\"", "nchannels=\"100\""),
       "graph.xml:2: nchannels=100: NCCL holds at most 64 channels (MAXCHANNELS)"},
      {replaced("speedinter=\"12\"", "speedinter=\"-5\""),
       "graph.xml:2: speedinter=-5: a bandwidth in GB/s, 0 or more"},
      {replaced("<gpu dev=\"1\"/>", "<gpu dev=\"0\"/>"), "graph.xml:5: <gpu> dev=\"0\" is listed twice in one channel"},
      {replaced("<gpu dev=\"3\"/>", "<gpu dev=\"3\"/><net dev=\"ff\"/>"),
       "graph.xml:7: <net> dev=\"ff\" is no NET of this topology (NCCL: net not found)"},
      // NCCL stores <net>s in turn: one leaves the channel's exit to an earlier value, a third overruns its slots.
      {replaced("<gpu dev=\"3\"/>", "<gpu dev=\"3\"/><net dev=\"0\"/>"),
       "graph.xml:3: <channel> lists 1 <net>(s); a channel lists none, or two"},
      {replaced("<gpu dev=\"3\"/>", "<net dev=\"0\"/><gpu dev=\"3\"/><net dev=\"0\"/><net dev=\"0\"/>"),
       "graph.xml:3: <channel> lists 3 <net>(s)"},
  };
  for (const auto& [xml, expected] : cases) {
    try {
      loadGraphXml(parseXml(xml, "graph.xml"), &analysis->system);
      ADD_FAILURE() << expected << ": expected an error";
    } catch (const TopologyError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
}

TEST_F(Ncv4, GraphFileTypesAreNcclGraphNames) {
  // typeintra/typeinter are read through NCCL's graph dictionary: LOC NVL NVB PIX PXB P2C PXN PHB SYS, no C2C and no
  // integer levels (those are P2P/GDR level spellings, not graph ones).
  std::ifstream in(dataPath("azure-ncv4-graph.xml"));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const char* type : {"C2C", "2", "4"}) {
    std::string changed = text;
    changed.replace(changed.find("typeintra=\"SYS\""), 15, std::string("typeintra=\"") + type + "\"");
    try {
      loadGraphXml(parseXml(changed, "graph.xml"), &analysis->system);
      ADD_FAILURE() << type << ": expected an error";
    } catch (const TopologyError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("graph.xml:2: typeintra=\"") + type +
                                           "\" is not a graph path type (LOC NVL NVB PIX PXB P2C PXN PHB SYS)"),
                std::string::npos)
          << e.what();
    }
  }
  std::string p2c = text;
  p2c.replace(p2c.find("typeintra=\"SYS\""), 15, "typeintra=\"P2C\"");
  EXPECT_EQ(pathTypeName(loadGraphXml(parseXml(p2c, "graph.xml"), &analysis->system)[0].typeIntra), "P2C");
}

TEST_F(Ncv4, GraphFileCrossNicGraphsAreSkippedWithCrossNic0) {
  // NCCL_CROSS_NIC=0 (a channel must return on its NIC): NCCL skips a graph searched with crossnic=1.
  std::ifstream in(dataPath("azure-ncv4-graph.xml"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.replace(text.find("crossnic=\"0\""), 12, "crossnic=\"1\"");
  XmlDocument doc = parseXml(text, "graph.xml");
  auto ids = [](const std::vector<Graph>& graphs) {
    std::vector<int> out;
    for (const Graph& g : graphs) out.push_back(g.id);
    return out;
  };
  EXPECT_EQ(ids(loadGraphXml(doc, &analysis->system, 0)), ints("1 2"));
  EXPECT_EQ(ids(loadGraphXml(doc, &analysis->system, 1)), ints("0 1 2"));
  EXPECT_EQ(ids(loadGraphXml(doc, &analysis->system)), ints("0 1 2"));  // NCCL's default, 2
}

// azure-ncv4.xml with a second virtual NIC (eth1) directly under CPU 1.
TEST(Ncv4TwoCpuNics, SingleNodeSearchMayCrossNics) {
  // ncclTopoCompute permits crossNic (NCCL_CROSS_NIC, default 2) when there is more than one NET and the pattern is a
  // ring or balanced/split tree, whatever inter is; NCCL 2.29 keeps the NETs in a single-node job, so the single-node
  // ring, which is not perfect at 12 GB/s, also tries crossNic 2 before each lower speed.
  Analysis a = analyzePath(casePath("azure-ncv4-two-cpu-nics.xml"), {});
  ASSERT_EQ(a.system.count(NET), 2);
  ASSERT_FALSE(a.searches.empty());
  ASSERT_FALSE(a.searches[0].inter);
  const Graph& ring = a.searches[0].ring;
  ASSERT_GE(ring.attempts.size(), 2u);
  EXPECT_EQ(ring.attempts[0].crossNic, 0);
  EXPECT_EQ(ring.attempts[1].crossNic, 2);
  EXPECT_FLOAT_EQ(ring.attempts[1].bwIntra, ring.attempts[0].bwIntra);  // the same speed, crossing NICs
  EXPECT_EQ(ring.crossNic, 0);                                          // the result: NCCL prints crossNic 0
  EXPECT_EQ(channelText(a, ring, 0, false), "0 1 2 3");
  // NCCL_CROSS_NIC=0: no such step.
  AnalysisOptions o;
  o.settings.crossNic = 0;
  Analysis noCross = analyzePath(casePath("azure-ncv4-two-cpu-nics.xml"), {}, o);
  for (const SearchAttempt& at : noCross.searches[0].ring.attempts) EXPECT_EQ(at.crossNic, 0);
}

TEST(Ncv4TwoCpuNics, NicIdsKeepOnlyTheBusId) {
  // NCCL 2.29 makes a NIC's id NCCL_TOPO_ID(system, (numaid << 56) + busid), and NCCL_TOPO_ID keeps the low 56 bits
  // of the local id: the NUMA id falls out. A <nic> directly under <cpu> has bus id 0, so the second CPU's <nic> is
  // the NIC node already made under the first CPU (NIC/0-0, not NIC/1-0 on a "system 1"), and eth1 hangs off it.
  Analysis a = analyzePath(casePath("azure-ncv4-two-cpu-nics.xml"), {});
  const System& s = a.system;
  ASSERT_EQ(s.count(NIC), 1);
  EXPECT_EQ(s.idString(NIC, 0), "NIC/0-0");
  EXPECT_EQ(pathText(gpuToNet(a, 0, 1)), "PHB/12.00");
  EXPECT_EQ(pathText(gpuToNet(a, 1, 1)), "SYS/12.00");
}

// Two sm80 GPUs joined by NVLink and one NIC, beside GPU 0 (sm80_pxn_tree.xml: the GPUs on two switches of one CPU;
// sm80_two_sockets_one_nic.xml: on two CPUs). GPU 1 sends to the NIC by PXN, but the NIC reaches GPU 1 only over the
// CPU (PHB, SYS): the balanced tree, which receives on both GPUs, needs that path.
TEST(Sm80InterTree, BalancedTreeMayReachItsNetOverTheCpu) {
  // Rule (spec e, ncclTopoCompute): for the inter-node search maxTypeIntra = maxTypeInter (the GPUs' worst NET path),
  // then, when the smallest sm is below 90, maxTypeInter = SYS. Without it the tree found nothing up to PXN and fell
  // back to the simple order at 0.1 GB/s.
  for (const auto& [file, typeInter] :
       {std::pair{"sm80_pxn_tree.xml", "PHB"}, {"sm80_two_sockets_one_nic.xml", "SYS"}}) {
    SCOPED_TRACE(file);
    Analysis a = analyzePath(casePath(file), {});
    ASSERT_EQ(a.searches.size(), 2u);
    ASSERT_TRUE(a.searches[1].inter);
    const Graph& tree = a.searches[1].tree;
    EXPECT_FALSE(tree.fallback);
    EXPECT_EQ(tree.pattern, PATTERN_BALANCED_TREE);
    EXPECT_EQ(tree.nChannels, 1);
    EXPECT_FLOAT_EQ(tree.bwInter, 24.0f);
    EXPECT_EQ(pathTypeName(tree.typeIntra), "NVL");
    EXPECT_EQ(pathTypeName(tree.typeInter), typeInter);
    EXPECT_EQ(channelText(a, tree, 0, true), "NET/0 0 1 NET/0");
    // The ring needs no such path: sending by PXN, it stays within PXN.
    EXPECT_FALSE(a.searches[1].ring.fallback);
    EXPECT_EQ(pathTypeName(a.searches[1].ring.typeInter), "PXN");
  }
}

TEST(Sm80InterTree, ANicExactlyAsFastAsTheChannelCarriesIt) {
  // Rule (ncclTopoSearchRecNet): a NET is skipped when its bandwidth is below the channel's, not when it equals it.
  // With 192 Gb/s NICs (24 GB/s, one of the speed steps) the multi-node ring runs at 24, not at the next step down.
  std::ifstream in(casePath("sm80_pxn_tree.xml"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (size_t at = text.find("speed=\"200000\""); at != std::string::npos; at = text.find("speed=\"200000\"", at))
    text.replace(at, 14, "speed=\"192000\"");
  AnalysisOptions options;
  options.nRanks = 16;
  Analysis a = analyze(parseXml(text, "sm80_pxn_tree-192g.xml"), options);
  ASSERT_EQ(a.searches.size(), 2u);
  const Graph& ring = a.searches[1].ring;
  EXPECT_EQ(ring.nChannels, 1);
  EXPECT_FLOAT_EQ(ring.bwInter, 24.0f);
  EXPECT_EQ(pathTypeName(ring.typeInter), "PXN");
}

// Searches no EXPECTED file covers, as this engine finds them by NCCL's rules today (regression values, not NCCL's
// own output): sm 90 and sm 70 fills of the public machines and synthetic systems. Each pins a rule that no other test
// does (the topology mutation run of stop 71 changed one rule at a time and nothing else saw it): the sm 90 speed
// tables, the pre-Ampere 1/8 charge on a link's reverse direction, the inter-node type relaxation, channel
// duplication, the tree's n/(n-1) scaling and the order the GPUs are tried in.
std::string graphText(const Analysis& a, const Graph& g, bool inter) {
  std::ostringstream o;
  o << g.nChannels << " ch, intra " << g.bwIntra << "/" << pathTypeName(g.typeIntra) << ", inter " << g.bwInter << "/"
    << pathTypeName(g.typeInter) << (g.fallback ? ", fallback" : "") << ":";
  for (int c = 0; c < g.nChannels; ++c) o << (c ? " |" : "") << " " << channelText(a, g, c, inter);
  return o.str();
}
CompletionOptions fillOf(int sm, int nvlinks, int nicMbps) {
  CompletionOptions f;
  f.gpuSm = sm;
  f.gpuNvlinks = nvlinks;
  f.nicSpeedMbps = nicMbps;
  f.nicPort = 1;
  return f;
}
std::string attemptsText(const Graph& g, size_t count) {
  std::ostringstream o;
  for (size_t i = 0; i < std::min(count, g.attempts.size()); ++i) {
    const SearchAttempt& t = g.attempts[i];
    o << (i ? " " : "") << "[p" << t.pass << " " << pathTypeName(t.typeIntra) << "/" << pathTypeName(t.typeInter)
      << " bw " << t.bwIntra << "/" << t.bwInter << " same " << t.sameChannels << " xnic " << t.crossNic << "]";
  }
  return o.str();
}
Analysis analyzeSynthetic(int gpus, int nics, int nRanks) {
  AnalysisOptions o;
  o.nRanks = nRanks;
  return analyze(makeSyntheticTopology(gpus, nics), o);
}

TEST(SearchRegression, Sm90AndSm70FillsOfThePublicMachines) {
  Analysis sm90 = analyzeFile("azure-ndv4.xml", fillOf(90, 12, 200000));
  EXPECT_EQ(graphText(sm90, sm90.searches[0].ring, false),
            "8 ch, intra 30/NVL, inter 30/PIX: 2 3 0 1 6 7 4 5 | 2 3 0 1 6 7 4 5 | 2 3 0 1 6 7 4 5 | 2 3 0 1 6 7 4 5 | "
            "2 3 0 1 6 7 4 5 | 2 3 0 1 6 7 4 5 | 2 3 0 1 6 7 4 5 | 2 3 0 1 6 7 4 5");
  EXPECT_EQ(graphText(sm90, sm90.searches[1].ring, true),
            "8 ch, intra 24/NVL, inter 24/PIX: NET/2 2 5 4 7 6 1 0 3 NET/2 | NET/3 3 0 1 6 7 4 5 2 NET/3 | NET/0 0 3 2 "
            "5 4 7 6 1 NET/0 | NET/1 1 6 7 4 5 2 3 0 NET/1 | NET/6 6 1 0 3 2 5 4 7 NET/6 | NET/7 7 4 5 2 3 0 1 6 NET/7 "
            "| NET/4 4 7 6 1 0 3 2 5 NET/4 | NET/5 5 2 3 0 1 6 7 4 NET/5");
  Analysis sm70 = analyzeFile("azure-ndv4.xml", fillOf(70, 0, 200000));
  EXPECT_EQ(graphText(sm70, sm70.searches[1].tree, true),
            "1 ch, intra 15/SYS, inter 12/SYS: NET/2 2 3 0 1 6 7 4 5 NET/2");
  EXPECT_EQ(graphText(sm70, sm70.searches[1].ring, true),
            "1 ch, intra 15/SYS, inter 15/SYS: NET/2 2 3 0 1 6 7 4 5 NET/2");
  Analysis p4d = analyzeFile("aws-p4d.24xlarge.xml", fillOf(90, 0, 100000));
  EXPECT_EQ(graphText(p4d, p4d.searches[1].ring, true),
            "9 ch, intra 1.2/SYS, inter 1.2/SYS: NET/0 0 1 2 3 4 5 6 7 NET/3 | NET/3 6 7 4 5 3 2 1 0 NET/0 | NET/2 4 5 "
            "6 7 3 2 1 0 NET/0 | NET/0 0 3 1 2 6 7 5 4 NET/2 | NET/0 0 1 2 3 7 6 5 4 NET/2 | NET/2 4 5 6 7 3 2 1 0 "
            "NET/0 | NET/2 4 5 6 7 1 0 3 2 NET/1 | NET/1 2 3 0 1 6 7 5 4 NET/2 | NET/0 0 1 4 5 6 7 3 2 NET/1");
  EXPECT_EQ(graphText(p4d, p4d.searches[1].tree, true),
            "9 ch, intra 0.24/SYS, inter 0.24/SYS: NET/2 0 1 2 3 4 5 6 7 NET/2 | NET/1 0 1 2 3 4 5 6 7 NET/1 | NET/2 0 "
            "1 2 3 4 5 6 7 NET/2 | NET/3 0 1 2 3 4 5 6 7 NET/3 | NET/0 0 1 2 3 4 5 6 7 NET/0 | NET/1 0 1 2 3 4 5 6 7 "
            "NET/1 | NET/0 0 1 2 3 4 5 6 7 NET/0 | NET/0 0 1 2 3 4 5 6 7 NET/0 | NET/0 0 1 2 3 4 5 6 7 NET/0");
}

TEST(SearchRegression, SyntheticSystems) {
  Analysis eight = analyzeSynthetic(8, 4, 16);
  EXPECT_EQ(graphText(eight, eight.searches[1].ring, true),
            "8 ch, intra 24/NVL, inter 24/PIX: NET/0 0 7 6 5 4 3 2 1 NET/0 | NET/1 2 1 0 7 6 5 4 3 NET/1 | NET/2 4 3 2 "
            "1 0 7 6 5 NET/2 | NET/3 6 5 4 3 2 1 0 7 NET/3 | NET/0 0 7 6 5 4 3 2 1 NET/0 | NET/1 2 1 0 7 6 5 4 3 NET/1 "
            "| NET/2 4 3 2 1 0 7 6 5 NET/2 | NET/3 6 5 4 3 2 1 0 7 NET/3");
  EXPECT_EQ(graphText(eight, eight.searches[1].tree, true),
            "8 ch, intra 48/NVL, inter 24/PIX: NET/0 0 1 2 3 4 5 6 7 NET/0 | NET/1 2 3 4 5 6 7 0 1 NET/1 | NET/2 4 5 6 "
            "7 0 1 2 3 NET/2 | NET/3 6 7 0 1 2 3 4 5 NET/3 | NET/0 1 0 7 6 5 4 3 2 NET/0 | NET/1 3 2 1 0 7 6 5 4 NET/1 "
            "| NET/2 5 4 3 2 1 0 7 6 NET/2 | NET/3 7 6 5 4 3 2 1 0 NET/3");
  // The order of the attempts: the inter-node type is relaxed (up to PXN) before crossNic is tried.
  EXPECT_EQ(attemptsText(eight.searches[1].ring, 4),
            "[p1 NVL/PIX bw 48/48 same 1 xnic 0] [p1 NVL/PIX bw 48/48 same 0 xnic 0] [p1 NVL/PXB bw 48/48 same 1 xnic "
            "0] [p1 NVL/PXB bw 48/48 same 0 xnic 0]");
  EXPECT_EQ(attemptsText(eight.searches[1].tree, 4),
            "[p1 NVL/PIX bw 48/48 same 1 xnic 0] [p1 NVL/PIX bw 48/48 same 0 xnic 0] [p1 NVL/PIX bw 48/48 same 1 xnic "
            "0] [p1 NVL/PIX bw 48/48 same 0 xnic 0]");
  Analysis four = analyzeSynthetic(4, 1, 8);
  EXPECT_EQ(graphText(four, four.searches[1].ring, true),
            "2 ch, intra 24/NVL, inter 24/PIX: NET/0 0 3 2 1 NET/0 | NET/0 0 3 2 1 NET/0");
}

TEST(SearchRegression, TreeSpeedIsScaledByNOverNMinusOne) {
  // The single-node tree starts from totalBw scaled by n/(n-1) (NCCL's ncclTopoCompute for trees): 40, not 20.
  Analysis a = analyzePath(casePath("sm80_pxn_tree.xml"), {});
  EXPECT_EQ(attemptsText(a.searches[0].tree, 2),
            "[p1 NVL/PIX bw 40/40 same 1 xnic 0] [p1 NVL/PIX bw 40/40 same 0 xnic 0]");
  EXPECT_EQ(graphText(a, a.searches[0].tree, false),
            "12 ch, intra 40/NVL, inter 40/PIX: 0 1 | 0 1 | 0 1 | 0 1 | 0 1 | 0 1 | 1 0 | 1 0 | 1 0 | 1 0 | 1 0 | 1 0");
  EXPECT_EQ(graphText(a, a.searches[1].tree, true), "1 ch, intra 48/NVL, inter 24/PHB: NET/0 0 1 NET/0");
}

TEST(PartialFile, WithoutFillInsTheSummarySaysWhatIsMissing) {
  // A cloud file lists GPUs and NICs as bare PCI leaves; NCCL adds <gpu> from NVML and <nic><net> from the plugin.
  // Without --gpu-sm/--nic-speed the user must be told that, not shown an empty machine.
  std::string summary = formatSummary(analyzeFile("azure-ndv2.xml", {}));
  EXPECT_NE(summary.find("none: 8 GPU-class PCI device(s) have no <gpu> (NCCL adds it from NVML): give --gpu-sm"),
            std::string::npos)
      << summary;
  EXPECT_NE(
      summary.find(
          "none: 1 NIC-class PCI device(s) have no <nic><net> (NCCL adds it from the net plugin): give --nic-speed"),
      std::string::npos)
      << summary;
  // GPUs but no NET while the communicator spans several nodes: there is nothing to search with the network.
  CompletionOptions f;
  f.gpuSm = 70;
  Analysis a = analyzeFile("azure-ndv2.xml", f);
  EXPECT_TRUE(a.trim.inter);
  EXPECT_EQ(a.searches.size(), 1u);
  EXPECT_NE(a.trim.reason.find("the topology has no NET: no network decisions or search"), std::string::npos)
      << a.trim.reason;
}

TEST(GraphFile, ChannelsMustListEveryGpuOfTheTopology) {
  // NCCL stores a channel as one rank per GPU of the system: the 4-GPU NC A100 v4 graph file cannot describe the
  // 8-GPU NDv4 (its channels would be read across each other), so loading it there is one clear error.
  CompletionOptions f;
  f.gpuSm = 80;
  f.nicSpeedMbps = 200000;
  Analysis ndv4 = analyzeFile("azure-ndv4.xml", f);
  XmlDocument doc = readXmlFile(dataPath("azure-ncv4-graph.xml"));
  try {
    loadGraphXml(doc, &ndv4.system);
    FAIL() << "expected an error";
  } catch (const TopologyError& e) {
    EXPECT_NE(std::string(e.what()).find("azure-ncv4-graph.xml:3: <channel> lists 4 GPU(s), the topology has 8"),
              std::string::npos)
        << e.what();
  }
  // A gpu dev that is not a hexadecimal number is named too (NCCL reads dev with strtol base 16).
  XmlDocument bad = parseXml(
      "<graphs version=\"1\"><graph id=\"0\" pattern=\"4\" crossnic=\"0\" nchannels=\"1\" speedintra=\"12\" "
      "speedinter=\"12\" typeintra=\"SYS\" typeinter=\"PIX\" samechannels=\"0\"><channel><gpu dev=\"zz\"/>"
      "</channel></graph></graphs>",
      "bad.xml");
  try {
    loadGraphXml(bad, nullptr);
    FAIL() << "expected an error";
  } catch (const TopologyError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.xml:1: <gpu> dev=\"zz\" is not a hexadecimal number"), std::string::npos)
        << e.what();
  }
}

TEST(G5Skeleton, FailsWithOneClearErrorNamingTheLine) {
  // The file only declares <cpu numaid> and bare <pci busid>: NCCL's required reads (arch first) fail on it alone.
  try {
    analyzeFile("aws-g5.48xlarge.xml", {});
    FAIL() << "expected an error";
  } catch (const TopologyError& e) {
    EXPECT_NE(std::string(e.what()).find("aws-g5.48xlarge.xml:13: <cpu> is missing required attribute arch"),
              std::string::npos)
        << e.what();
  }
}

TEST(G5Skeleton, WithArchTheBarePciLeavesStillNeedAClass) {
  XmlDocument doc = readXmlFile(dataPath("aws-g5.48xlarge.xml"));
  for (auto& cpu : doc.root.children) {
    cpu.setAttr("arch", "x86_64");
    cpu.setAttr("vendor", "AuthenticAMD");
  }
  // Rule: <pci> requires class (read before anything else), so the skeleton is still rejected, at the pci's line.
  EXPECT_THROW(buildSystem(doc), TopologyError);
  try {
    buildSystem(doc);
  } catch (const TopologyError& e) {
    EXPECT_NE(std::string(e.what()).find(":14: <pci> is missing required attribute class"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace nns::topo::testing
