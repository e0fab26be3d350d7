// NCCL's ring/tree graph search (search.cc): channels of GPUs (and NETs) that fit the links' bandwidth.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nns/topology/paths.h"

namespace nns::topo {

enum Pattern : int {
  PATTERN_BALANCED_TREE = 1,
  PATTERN_SPLIT_TREE = 2,
  PATTERN_TREE = 3,
  PATTERN_RING = 4,
  PATTERN_NVLS = 5,
  PATTERN_COLLNET_DIRECT = 6
};
std::string_view patternName(int pattern);

// One search attempt with its parameters and outcome: the "speeds tried" trail.
struct SearchAttempt {
  int pass = 1;
  int pattern = 0;
  int crossNic = 0;
  float bwIntra = 0, bwInter = 0;
  int typeIntra = 0, typeInter = 0;
  int sameChannels = 0;
  int minChannels = 0;
  int bestChannels = 0;  // best graph after this attempt
  std::string outcome;   // "PERFECT", "TIMEOUT" or ""
};

struct Graph {
  int id = 0;
  int pattern = PATTERN_RING;
  bool collNet = false;
  int minChannels = 1;
  int maxChannels = kMaxChannels / 2;
  // Results.
  int nChannels = 0;
  float bwIntra = 0, bwInter = 0;
  float latencyInter = 0;
  int typeIntra = PATH_LOC, typeInter = PATH_PIX;
  int sameChannels = 0;
  int crossNic = 0;
  int nHops = 0;
  std::vector<int> intra;           // ranks, nGpus per channel
  std::vector<std::int64_t> inter;  // NET ids, 2 per channel (in, out)
  bool fallback = false;            // no path found: simple order at 0.1 GB/s
  bool withNets = false;            // channels enter and leave through NETs (searched with the network, or a
                                    // graph file whose channels list <net> elements)
  std::vector<SearchAttempt> attempts;
  int sourceLine = 0;  // loaded from a graph file: its <graph> element's line

  int ranksAt(int channel, int step, int nGpus) const {
    return intra[static_cast<std::size_t>(channel * nGpus + step)];
  }
};

// Runs ncclTopoCompute for the graph's pattern, min/max channels on the current sys.inter setting.
// Link and NET bandwidths are reserved during the search and restored after it.
void computeGraph(System& sys, const TopoSettings& settings, Graph& graph);
// maxBw/totalBw (ncclTopoSearchInit) for the current sys.inter.
void searchInit(System& sys);

// NCCL log shapes: "Pattern 4, crossNic 0, nChannels 16, bw 40.000000/40.000000, type NVL/PIX, sameChannels 1" and
// one " 0 : NET/0-0 GPU/0-17000 ... NET/0-0" line per channel.
std::vector<std::string> graphLogLines(const System& sys, const Graph& graph);
// "Ring 00 : 7 -> 0 -> 1" per channel for one rank (intra-node order; inter-node neighbours print as NET).
std::vector<std::string> ringLogLines(const System& sys, const Graph& ring, int rank);
// "Trees [0] 1/-1/-1->0->-1 [1] ..." for one rank, from the tree graph's intra-node chains.
std::string treeLogLine(const System& sys, const Graph& tree, int rank);

// NCCL_GRAPH_FILE reading: graphs keyed by id, GPU devs mapped to ranks through the system's NVML indices. With
// crossNicSetting (NCCL_CROSS_NIC) 0, graphs with crossnic="1" are skipped, as NCCL skips them.
std::vector<Graph> loadGraphXml(const XmlDocument& doc, const System* sys, int crossNicSetting = 2);
XmlElement graphsToXml(const System& sys, const std::vector<const Graph*>& graphs);

}  // namespace nns::topo
