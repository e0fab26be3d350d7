// NCCL 2.29.7's own results on azure-ndv4.xml and aws-p4d.24xlarge.xml (shared/spec/topologies/EXPECTED-nccl-2.29.md).
#include <cstdint>
#include <map>
#include <set>
#include <utility>

#include "topology_test_util.h"

namespace nns::topo::testing {
namespace {

// What NVML and the IB/EFA plugins would add to the partial files, exactly as EXPECTED-nccl-2.29.md states.
CompletionOptions ndv4Fill(bool nvlink = true) {
  CompletionOptions f;
  f.gpuSm = 80;
  f.gpuNvlinks = nvlink ? 12 : 0;
  f.nicSpeedMbps = 200000;
  f.nicPort = 1;
  f.nicMaxConn = 131072;
  return f;
}
CompletionOptions p4dFill(bool nvlink = true) {
  CompletionOptions f;
  f.gpuSm = 80;
  f.gpuNvlinks = nvlink ? 12 : 0;
  f.nicSpeedMbps = 100000;
  f.nicMaxConn = 1024;
  return f;
}

struct ExpectedGraph {
  int nChannels;
  float bwIntra, bwInter;
  const char* typeIntra;
  const char* typeInter;
  int sameChannels;
  int crossNic;
  std::vector<std::string> channels;  // one entry per channel, or one entry repeated for all
};

void expectGraph(const Analysis& a, const Graph& g, bool inter, const ExpectedGraph& e) {
  // Fatal here: the channels below are read by the expected count (more found than listed read past the list).
  ASSERT_EQ(g.nChannels, e.nChannels);
  EXPECT_FLOAT_EQ(g.bwIntra, e.bwIntra);
  EXPECT_FLOAT_EQ(g.bwInter, e.bwInter);
  EXPECT_EQ(pathTypeName(g.typeIntra), e.typeIntra);
  EXPECT_EQ(pathTypeName(g.typeInter), e.typeInter);
  EXPECT_EQ(g.sameChannels, e.sameChannels);
  EXPECT_EQ(g.crossNic, e.crossNic);
  EXPECT_FALSE(g.fallback);
  for (int c = 0; c < g.nChannels; ++c) {
    const std::string& want = e.channels.size() == 1 ? e.channels[0] : e.channels[static_cast<std::size_t>(c)];
    EXPECT_EQ(channelText(a, g, c, inter), want) << "channel " << c;
  }
}

// Each rank's PXN relays as the EXPECTED file lists them ("nets 0 via r0; nets 1 via r1; ..."), parsed, against the
// analysis's: the same (NET dev, relay rank) pairs, no more, for every rank.
using RelayPairs = std::set<std::pair<int, int>>;
RelayPairs relaysListed(const std::string& text) {
  RelayPairs pairs;
  std::istringstream in(text);
  std::string nets, via, relay;
  int net = -1;
  while (in >> nets >> net >> via >> relay) pairs.emplace(net, std::stoi(relay.substr(1)));  // "r6;" -> 6
  return pairs;
}
void expectRelays(const Analysis& a, const std::map<int, std::string>& listed) {
  std::map<int, RelayPairs> found;
  for (const auto& p : a.pxn) found[p.rank].emplace(p.netDev, p.relayRank);
  for (const auto& [rank, text] : listed) EXPECT_EQ(found[rank], relaysListed(text)) << "rank " << rank;
  EXPECT_EQ(found.size(), listed.size());
}

class Ndv4Expected : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { analysis = new Analysis(analyzeFile("azure-ndv4.xml", ndv4Fill())); }
  static void TearDownTestSuite() {
    delete analysis;
    analysis = nullptr;
  }
  static Analysis* analysis;
};
Analysis* Ndv4Expected::analysis = nullptr;

// The switch that holds each rank's two NICs (same NUMA node); NET dev == rank for the NIC a GPU uses.
const std::map<int, std::vector<int>> kNdv4LocalNets = {{2, {2, 3}}, {3, {2, 3}}, {0, {0, 1}}, {1, {0, 1}},
                                                        {6, {6, 7}}, {7, {6, 7}}, {4, {4, 5}}, {5, {4, 5}}};

TEST_F(Ndv4Expected, SystemShapeAndGpuOrder) {
  const System& s = analysis->system;
  EXPECT_EQ(s.count(GPU), 8);
  EXPECT_EQ(s.count(NET), 8);
  EXPECT_EQ(s.count(NVS), 1);
  EXPECT_EQ(s.count(CPU), 4);
  EXPECT_EQ(s.count(PCI), 4);
  EXPECT_TRUE(s.inter);
  EXPECT_FLOAT_EQ(s.maxBw, 24.0f);
  EXPECT_FLOAT_EQ(s.totalBw, 240.0f);
  // NCCL's GPU order is XML order: numaid 0 holds GPUs 0003 and 0004 (ranks 2 and 3).
  EXPECT_EQ(analysis->gpuRanks, ints("2 3 0 1 6 7 4 5"));
  const std::int64_t ids[8] = {0x300000, 0x400000, 0x100000, 0x200000, 0xd00000, 0xe00000, 0xb00000, 0xc00000};
  for (int g = 0; g < 8; ++g) {
    EXPECT_EQ(s.node(GPU, g).id, ids[g]) << "GPU " << g;
    EXPECT_EQ(s.node(GPU, g).gpu.sm, 80) << "GPU " << g;
  }
  // The NETs in NCCL's order (its NETs and NET->GPU blocks): each switch's pair, in the GPUs' order.
  std::vector<int> netDevs;
  for (int n = 0; n < s.count(NET); ++n) netDevs.push_back(s.node(NET, n).net.dev);
  EXPECT_EQ(netDevs, ints("2 3 0 1 6 7 4 5"));
  for (int n = 0; n < s.count(NET); ++n) {
    EXPECT_FLOAT_EQ(s.node(NET, n).net.bw, 25.0f);
    EXPECT_EQ(s.node(NET, n).net.gdr, 1);
    EXPECT_EQ(s.node(NET, n).net.maxChannels, 131072);
  }
}

TEST_F(Ndv4Expected, PathsGpuNetGpuCpu) {
  for (const auto& [rank, locals] : kNdv4LocalNets) {
    for (int net = 0; net < 8; ++net) {
      bool local = std::find(locals.begin(), locals.end(), net) == locals.end() ? false : true;
      EXPECT_EQ(pathText(gpuToNet(*analysis, rank, net)), local ? "PIX/24.00" : "PXN/24.00") << rank << "->" << net;
      EXPECT_EQ(pathText(netToGpu(*analysis, net, rank)), local ? "PIX/24.00" : "SYS/16.00") << net << "->" << rank;
    }
    for (int peer = 0; peer < 8; ++peer) {
      if (peer != rank) {
        EXPECT_EQ(pathText(gpuToGpu(*analysis, rank, peer)), "NVL/240.00");
      }
    }
  }
  // GPU->CPU: PHB to the own NUMA node, SYS (AMD 16 GB/s) elsewhere.
  const std::map<int, int> localCpuOfRank = {{2, 0}, {3, 0}, {0, 1}, {1, 1}, {6, 2}, {7, 2}, {4, 3}, {5, 3}};
  for (const auto& [rank, cpu] : localCpuOfRank) {
    EXPECT_EQ(localCpu(analysis->system, analysis->system.gpuIndexOfRank(rank)), cpu);
    for (int c = 0; c < 4; ++c) EXPECT_EQ(pathText(gpuToCpu(*analysis, rank, c)), c == cpu ? "PHB/24.00" : "SYS/16.00");
  }
}

TEST_F(Ndv4Expected, GdrP2pLocalNetPxn) {
  const System& s = analysis->system;
  for (int g = 0; g < 8; ++g) {
    for (int n = 0; n < 8; ++n) {
      EXPECT_NE(analysis->gdrRead[g][n].mode, GdrMode::Disabled);
      EXPECT_NE(analysis->gdrWrite[g][n].mode, GdrMode::Disabled);
    }
    for (int p = 0; p < 8; ++p) {
      if (p == g) continue;  // a GPU with itself is LOC: P2P, but no NVLink read
      const P2pDecision& d = analysis->p2p[g][p];
      EXPECT_TRUE(d.p2p);
      EXPECT_TRUE(d.read);
      EXPECT_EQ(d.intermediateRank, -1);
    }
    int rank = analysis->gpuRanks[g];
    for (int c = 0; c < 4; ++c) EXPECT_EQ(analysis->localNets[g][c].netDev, rank);
    EXPECT_EQ(analysis->localNets[g][0].localNetDevs, kNdv4LocalNets.at(rank));
    EXPECT_EQ(pathTypeName(analysis->localNets[g][0].localPathType), "PIX");
  }
  // Each NET is owned by the GPU whose rank equals its dev; PXN relays are those owners.
  for (int n = 0; n < 8; ++n) EXPECT_EQ(analysis->netLocalGpuRank[n], s.node(NET, n).net.dev);
  expectRelays(*analysis,
               {{2, "nets 0 via r0; nets 1 via r1; nets 6 via r6; nets 7 via r7; nets 4 via r4; nets 5 via r5"},
                {3, "nets 0 via r0; nets 1 via r1; nets 6 via r6; nets 7 via r7; nets 4 via r4; nets 5 via r5"},
                {0, "nets 2 via r2; nets 3 via r3; nets 6 via r6; nets 7 via r7; nets 4 via r4; nets 5 via r5"},
                {1, "nets 2 via r2; nets 3 via r3; nets 6 via r6; nets 7 via r7; nets 4 via r4; nets 5 via r5"},
                {6, "nets 2 via r2; nets 3 via r3; nets 0 via r0; nets 1 via r1; nets 4 via r4; nets 5 via r5"},
                {7, "nets 2 via r2; nets 3 via r3; nets 0 via r0; nets 1 via r1; nets 4 via r4; nets 5 via r5"},
                {4, "nets 2 via r2; nets 3 via r3; nets 0 via r0; nets 1 via r1; nets 6 via r6; nets 7 via r7"},
                {5, "nets 2 via r2; nets 3 via r3; nets 0 via r0; nets 1 via r1; nets 6 via r6; nets 7 via r7"}});
  EXPECT_EQ(analysis->pxn.size(), 8u * 6u);
}

TEST_F(Ndv4Expected, P2pPxnLevel1TakesThePeersNicWithinPxn) {
  // Rule (ncclTopoGetNetDev without a graph, NCCL_P2P_PXN_LEVEL=1): rank 0 takes the NIC its peer's equivalent GPU
  // (dev 2) uses, NET 2, since its own path there is PXN (through GPU 2), with the relay as proxy. Level 0 keeps NET 0.
  TopoSettings level1 = analysis->settings;
  level1.p2pPxnLevel = 1;
  NetDevChoice c = netDevForPeer(analysis->system, level1, 0, 0, 2);
  EXPECT_EQ(pathTypeName(gpuToNet(*analysis, 0, 2).type), "PXN");
  EXPECT_EQ(c.netDev, 2) << c.reason;
  EXPECT_EQ(c.proxyRank, 2) << c.reason;
  TopoSettings level0 = analysis->settings;
  level0.p2pPxnLevel = 0;
  level0.crossNic = 1;
  NetDevChoice own = netDevForPeer(analysis->system, level0, 0, 0, 2);
  EXPECT_EQ(own.netDev, 0) << own.reason;
  EXPECT_EQ(own.proxyRank, 0) << own.reason;
}

TEST_F(Ndv4Expected, SearchSingleNode) {
  ASSERT_EQ(analysis->searches.size(), 2u);
  const SearchResult& r = analysis->searches[0];
  EXPECT_FALSE(r.inter);
  EXPECT_FLOAT_EQ(r.maxBw, 240.0f);
  EXPECT_FLOAT_EQ(r.totalBw, 240.0f);
  expectGraph(*analysis, r.ring, false, {12, 20, 20, "NVL", "PIX", 1, 0, {"2 3 0 1 6 7 4 5"}});
  expectGraph(*analysis, r.tree, false, {12, 20, 20, "NVL", "PIX", 1, 0, {"2 3 0 1 6 7 4 5"}});
}

TEST_F(Ndv4Expected, SearchMultiNode) {
  const SearchResult& r = analysis->searches[1];
  EXPECT_TRUE(r.inter);
  EXPECT_FLOAT_EQ(r.maxBw, 24.0f);
  EXPECT_FLOAT_EQ(r.totalBw, 240.0f);
  expectGraph(*analysis, r.ring, true,
              {8,
               24,
               24,
               "NVL",
               "PIX",
               0,
               0,
               {"NET/2 2 5 4 7 6 1 0 3 NET/2", "NET/3 3 0 1 6 7 4 5 2 NET/3", "NET/0 0 3 2 5 4 7 6 1 NET/0",
                "NET/1 1 6 7 4 5 2 3 0 NET/1", "NET/6 6 1 0 3 2 5 4 7 NET/6", "NET/7 7 4 5 2 3 0 1 6 NET/7",
                "NET/4 4 7 6 1 0 3 2 5 NET/4", "NET/5 5 2 3 0 1 6 7 4 NET/5"}});
  expectGraph(*analysis, r.tree, true,
              {8,
               30,
               24,
               "NVL",
               "PIX",
               0,
               0,
               {"NET/2 2 3 0 1 6 7 4 5 NET/2", "NET/3 3 2 5 4 7 6 1 0 NET/3", "NET/0 0 1 6 7 4 5 2 3 NET/0",
                "NET/1 1 0 3 2 5 4 7 6 NET/1", "NET/6 6 7 4 5 2 3 0 1 NET/6", "NET/7 7 6 1 0 3 2 5 4 NET/7",
                "NET/4 4 5 2 3 0 1 6 7 NET/4", "NET/5 5 4 7 6 1 0 3 2 NET/5"}});
}

TEST(Ndv4ExpectedNoNvlink, SensitivityCheck) {
  Analysis a = analyzeFile("azure-ndv4.xml", ndv4Fill(false));
  // Same switch: PIX at 24; otherwise through the CPUs' AMD link at 16.
  EXPECT_EQ(pathText(gpuToGpu(a, 2, 3)), "PIX/24.00");
  EXPECT_EQ(pathText(gpuToGpu(a, 2, 0)), "SYS/16.00");
  EXPECT_TRUE(checkP2p(a.system, {}, 2, 3).p2p);
  EXPECT_FALSE(checkP2p(a.system, {}, 2, 0).p2p);
  // Without NVLink there is no PXN relay: far NICs stay SYS, and GDR only works on the two same-switch NICs.
  EXPECT_EQ(pathTypeName(gpuToNet(a, 2, 0).type), "SYS");
  EXPECT_TRUE(a.pxn.empty());
  int g = a.system.gpuIndexOfRank(2);
  for (int n = 0; n < 8; ++n) {
    bool local = a.netDevs[n] == 2 || a.netDevs[n] == 3;
    EXPECT_EQ(a.gdrRead[g][n].mode != GdrMode::Disabled, local) << "net " << a.netDevs[n];
    EXPECT_EQ(a.gdrWrite[g][n].mode != GdrMode::Disabled, local) << "net " << a.netDevs[n];
  }
  const SearchResult& intra = a.searches[0];
  EXPECT_EQ(intra.ring.nChannels, 1);
  EXPECT_FLOAT_EQ(intra.ring.bwIntra, 15.0f);
  EXPECT_EQ(pathTypeName(intra.ring.typeIntra), "SYS");
  EXPECT_EQ(pathTypeName(intra.ring.typeInter), "PIX");
  const SearchResult& inter = a.searches[1];
  EXPECT_EQ(inter.ring.nChannels, 1);
  EXPECT_FLOAT_EQ(inter.ring.bwInter, 15.0f);
  EXPECT_EQ(pathTypeName(inter.ring.typeIntra), "SYS");
  EXPECT_EQ(pathTypeName(inter.ring.typeInter), "SYS");
  EXPECT_EQ(channelText(a, inter.ring, 0, true), "NET/2 2 3 0 1 6 7 4 5 NET/2");
}

class P4dExpected : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { analysis = new Analysis(analyzeFile("aws-p4d.24xlarge.xml", p4dFill())); }
  static void TearDownTestSuite() {
    delete analysis;
    analysis = nullptr;
  }
  static Analysis* analysis;
};
Analysis* P4dExpected::analysis = nullptr;

TEST_F(P4dExpected, SystemShape) {
  const System& s = analysis->system;
  EXPECT_EQ(s.count(GPU), 8);
  EXPECT_EQ(s.count(NET), 4);
  EXPECT_EQ(s.count(NVS), 1);
  EXPECT_EQ(s.count(CPU), 2);
  EXPECT_EQ(s.count(PCI), 4);
  EXPECT_FLOAT_EQ(s.maxBw, 12.0f);
  EXPECT_FLOAT_EQ(s.totalBw, 240.0f);
  EXPECT_TRUE(s.inter);
  EXPECT_EQ(analysis->gpuRanks, ints("0 1 2 3 4 5 6 7"));
  const std::int64_t ids[8] = {0x101c0, 0x101d0, 0x201c0, 0x201d0, 0x901c0, 0x901d0, 0xa01c0, 0xa01d0};
  for (int g = 0; g < 8; ++g) {
    EXPECT_EQ(s.node(GPU, g).id, ids[g]) << "GPU " << g;
    EXPECT_EQ(s.node(GPU, g).gpu.sm, 80) << "GPU " << g;
  }
  for (int n = 0; n < 4; ++n) {
    EXPECT_EQ(s.node(NET, n).net.dev, n);
    EXPECT_FLOAT_EQ(s.node(NET, n).net.bw, 12.5f) << "NET " << n;
    EXPECT_EQ(s.node(NET, n).net.gdr, 1) << "NET " << n;
    EXPECT_EQ(s.node(NET, n).net.maxChannels, 1024) << "NET " << n;
  }
}

TEST_F(P4dExpected, PathsGdrP2pLocalNetPxn) {
  // NET->GPU rows from EXPECTED: own switch PIX, other switch on the socket PHB, other socket SYS (Skylake 10 GB/s).
  const char* netToGpuRows[4] = {"PIX PIX PHB PHB SYS SYS SYS SYS", "PHB PHB PIX PIX SYS SYS SYS SYS",
                                 "SYS SYS SYS SYS PIX PIX PHB PHB", "SYS SYS SYS SYS PHB PHB PIX PIX"};
  for (int net = 0; net < 4; ++net) {
    std::istringstream row(netToGpuRows[net]);
    for (int rank = 0; rank < 8; ++rank) {
      std::string type;
      row >> type;
      const Path& p = netToGpu(*analysis, net, rank);
      EXPECT_EQ(pathTypeName(p.type), type) << "net " << net << " rank " << rank;
      EXPECT_FLOAT_EQ(p.bw, type == "SYS" ? 10.0f : 12.0f);
    }
  }
  for (int rank = 0; rank < 8; ++rank) {
    int own = rank / 2;
    for (int net = 0; net < 4; ++net)
      EXPECT_EQ(pathText(gpuToNet(*analysis, rank, net)), net == own ? "PIX/12.00" : "PXN/12.00");
    int cpu = rank < 4 ? 0 : 1;
    EXPECT_EQ(localCpu(analysis->system, analysis->system.gpuIndexOfRank(rank)), cpu);
    EXPECT_EQ(pathText(gpuToCpu(*analysis, rank, cpu)), "PHB/12.00");
    EXPECT_EQ(pathText(gpuToCpu(*analysis, rank, 1 - cpu)), "SYS/10.00");
    int g = analysis->system.gpuIndexOfRank(rank);
    for (int c = 0; c < 4; ++c) EXPECT_EQ(analysis->localNets[g][c].netDev, own);
    EXPECT_EQ(analysis->localNets[g][0].localNetDevs, std::vector<int>{own}) << "rank " << rank;
    EXPECT_EQ(pathTypeName(analysis->localNets[g][0].localPathType), "PIX") << "rank " << rank;
    for (int peer = 0; peer < 8; ++peer) {
      if (peer != rank) {
        EXPECT_EQ(pathText(gpuToGpu(*analysis, rank, peer)), "NVL/240.00") << rank << "->" << peer;
      }
    }
    for (int n = 0; n < 4; ++n) {
      EXPECT_NE(analysis->gdrRead[g][n].mode, GdrMode::Disabled);
      EXPECT_NE(analysis->gdrWrite[g][n].mode, GdrMode::Disabled);
    }
    for (int p = 0; p < 8; ++p) {
      if (p == g) continue;
      EXPECT_TRUE(analysis->p2p[g][p].p2p);
      EXPECT_TRUE(analysis->p2p[g][p].read);
      EXPECT_EQ(analysis->p2p[g][p].intermediateRank, -1);
    }
  }
  // Each NIC goes to the even GPU of its pair; PXN relays are always that GPU.
  EXPECT_EQ(analysis->netLocalGpuRank, ints("0 2 4 6"));
  expectRelays(*analysis, {{0, "nets 1 via r2; nets 2 via r4; nets 3 via r6"},
                           {1, "nets 1 via r2; nets 2 via r4; nets 3 via r6"},
                           {2, "nets 0 via r0; nets 2 via r4; nets 3 via r6"},
                           {3, "nets 0 via r0; nets 2 via r4; nets 3 via r6"},
                           {4, "nets 0 via r0; nets 1 via r2; nets 3 via r6"},
                           {5, "nets 0 via r0; nets 1 via r2; nets 3 via r6"},
                           {6, "nets 0 via r0; nets 1 via r2; nets 2 via r4"},
                           {7, "nets 0 via r0; nets 1 via r2; nets 2 via r4"}});
  EXPECT_EQ(analysis->pxn.size(), 8u * 3u);
}

TEST_F(P4dExpected, Searches) {
  ASSERT_EQ(analysis->searches.size(), 2u);
  const SearchResult& intra = analysis->searches[0];
  EXPECT_FALSE(intra.inter);
  EXPECT_FLOAT_EQ(intra.maxBw, 240.0f);
  EXPECT_FLOAT_EQ(intra.totalBw, 240.0f);
  expectGraph(*analysis, intra.ring, false, {12, 20, 20, "NVL", "PIX", 1, 0, {"0 1 2 3 4 5 6 7"}});
  expectGraph(*analysis, intra.tree, false, {12, 20, 20, "NVL", "PIX", 1, 0, {"0 1 2 3 4 5 6 7"}});
  const SearchResult& inter = analysis->searches[1];
  EXPECT_TRUE(inter.inter);
  EXPECT_FLOAT_EQ(inter.maxBw, 12.0f);
  EXPECT_FLOAT_EQ(inter.totalBw, 240.0f);
  expectGraph(*analysis, inter.ring, true,
              {4,
               12,
               12,
               "NVL",
               "PIX",
               0,
               0,
               {"NET/0 0 7 6 5 4 3 2 1 NET/0", "NET/1 2 1 0 7 6 5 4 3 NET/1", "NET/2 4 3 2 1 0 7 6 5 NET/2",
                "NET/3 6 5 4 3 2 1 0 7 NET/3"}});
  expectGraph(*analysis, inter.tree, true,
              {4,
               24,
               12,
               "NVL",
               "PIX",
               0,
               0,
               {"NET/0 0 1 2 3 4 5 6 7 NET/0", "NET/1 2 3 4 5 6 7 0 1 NET/1", "NET/2 4 5 6 7 0 1 2 3 NET/2",
                "NET/3 6 7 0 1 2 3 4 5 NET/3"}});
}

TEST(P4dExpectedNoNvlink, SensitivityCheck) {
  Analysis a = analyzeFile("aws-p4d.24xlarge.xml", p4dFill(false));
  EXPECT_EQ(pathTypeName(gpuToNet(a, 0, 0).type), "PIX");
  EXPECT_EQ(pathTypeName(gpuToNet(a, 0, 1).type), "PHB");
  EXPECT_EQ(pathTypeName(gpuToNet(a, 0, 2).type), "SYS");
  int g = a.system.gpuIndexOfRank(0);
  for (int n = 0; n < 4; ++n) EXPECT_EQ(a.gdrRead[g][n].mode != GdrMode::Disabled, a.netDevs[n] == 0);
  const SearchResult& intra = a.searches[0];
  EXPECT_EQ(intra.ring.nChannels, 1);
  EXPECT_FLOAT_EQ(intra.ring.bwIntra, 10.0f);
  EXPECT_EQ(pathTypeName(intra.ring.typeIntra), "SYS");
  const SearchResult& inter = a.searches[1];
  EXPECT_EQ(inter.ring.nChannels, 1);
  EXPECT_FLOAT_EQ(inter.ring.bwInter, 10.0f);
  EXPECT_EQ(pathTypeName(inter.ring.typeInter), "SYS");
  EXPECT_EQ(channelText(a, inter.ring, 0, true), "NET/0 0 1 2 3 4 5 6 7 NET/0");
  EXPECT_FLOAT_EQ(inter.tree.bwIntra, 7.0f);
}

}  // namespace
}  // namespace nns::topo::testing
