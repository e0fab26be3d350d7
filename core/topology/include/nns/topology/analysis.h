// The whole pipeline (load, complete, build, paths, trim, decisions, searches) and its human-readable outputs.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "nns/topology/fusion.h"
#include "nns/topology/model.h"
#include "nns/topology/paths.h"
#include "nns/topology/search.h"

namespace nns::topo {

struct AnalysisOptions {
  TopoSettings settings;
  int rank = -1;           // our rank for trimming and per-rank logs; -1: the first GPU's rank
  int nRanks = 0;          // communicator size; 0: twice the local GPU count (a multi-node job)
  bool search = true;      // run ring and tree searches
  int channels = 4;        // channels shown for NIC choices
  std::string forceMerge;  // NCCL_NET_FORCE_MERGE
  // The net plugin the NICs came from, and whether it can fuse them (makeVDevice); empty: not known (a file, sysfs).
  std::string fusingPlugin;
  bool pluginMakesVNics = false;
};

struct PxnRelay {
  int rank = -1;
  int netDev = -1;
  int relayRank = -1;
};

struct SearchResult {
  bool inter = false;
  float maxBw = 0, totalBw = 0;
  Graph ring, tree;
};

struct Analysis {
  std::string sourceName;
  TopoSettings settings;
  XmlElement xml;  // the (completed) topology, as it would be dumped
  System system;
  TrimResult trim;
  std::vector<int> gpuRanks;                           // in system (NCCL sorted) order
  std::vector<int> netDevs;                            // in system order
  std::vector<std::vector<P2pDecision>> p2p;           // [gpu][gpu] by system index
  std::vector<std::vector<GdrDecision>> gdrRead;       // [gpu][net] send side
  std::vector<std::vector<GdrDecision>> gdrWrite;      // [gpu][net] receive side
  std::vector<std::vector<LocalNetChoice>> localNets;  // [gpu][channel]
  std::vector<int> netLocalGpuRank;                    // [net] owner GPU rank, -1 when none
  std::vector<PxnRelay> pxn;                           // every GPU->NET path of type PXN
  std::vector<FusionGroup> fusion;
  std::vector<std::string> fusionNotes;  // forced groups NCCL makes no vNIC of (one device)
  std::string fusingPlugin;              // AnalysisOptions' (the report says whether NCCL would fuse the groups)
  bool pluginMakesVNics = false;
  std::vector<SearchResult> searches;  // single node (inter=0), then multi-node (inter=1) when there are NETs
};

// Runs the pipeline on a topology document (which it completes in place when options ask for it).
Analysis analyze(XmlDocument doc, const AnalysisOptions& options);

// NCCL log shapes.
std::vector<std::string> systemLogLines(const System& sys);  // "=== System : maxBw ..." tree
std::vector<std::string> pathLogLines(const System& sys);    // "GPU/0-17000 :GPU/0-17000 (0/5000.0/LOC) ..."

// NCCL's transport lines for a p2p send/receive on channel 0 to the GPU with the same NVML index on the next node
// (ranks numbered node by node): "Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/1(2)/GDRDMA".
std::vector<std::string> transportLogLines(const Analysis& a, const std::string& netName = "IB");

// Human outputs.
std::string formatSummary(const Analysis& a);
std::string formatPathMatrix(const Analysis& a);
// The Ring/Trees lines are those of `rank`, under a heading naming it: rankGiven says it came from --rank (else it is
// the first GPU in NCCL's order, the default).
std::string formatSearches(const Analysis& a, int rank, bool rankGiven = false);
std::string formatDot(const Analysis& a);  // names quoted for dot: a '"' or '\\' in them cannot end a label

// `text` for a terminal: a control byte (an escape sequence's ESC, a carriage return, ...) is written as \xNN, so
// that names read from a topology file are shown as they are and cannot rewrite the screen. Newlines and tabs stay.
std::string terminalSafe(std::string_view text);
// The PCI bus id of the NIC that NET `n` hangs off ("" when it has none: a virtual NIC made by fusion): what tells a
// cluster engineer which physical port "NET 2" is (its number follows the file's or the plugin's device order).
std::string netBusId(const System& sys, int n);

}  // namespace nns::topo

namespace nns::topo {

// A synthetic machine for scale tests: `sockets` Intel SPR CPUs, `nics` PCIe Gen5 switches spread over them, GPUs
// spread over the switches (one NIC per switch), every GPU sm90 with 18 NVLinks to one NVSwitch.
XmlDocument makeSyntheticTopology(int gpus, int nics, int sockets = 2);

}  // namespace nns::topo
