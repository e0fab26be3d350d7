// Path computation and NCCL's per-pair decisions: P2P, GDR, PXN, local NIC per GPU, trimming (paths.cc rules).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nns/topology/model.h"

namespace nns::topo {

// NCCL's environment knobs that change topology decisions. Defaults are NCCL 2.29's.
struct TopoSettings {
  int p2pLevel = -2;              // NCCL_P2P_LEVEL / NCCL_P2P_DISABLE; -2 = automatic
  bool nvbDisable = false;        // NCCL_NVB_DISABLE
  int netGdrLevel = -2;           // NCCL_NET_GDR_LEVEL; -2 = automatic (P2C with GDR_C2C, else PXB)
  int netGdrRead = -2;            // NCCL_NET_GDR_READ; -2 = automatic
  bool netGdrC2c = true;          // NCCL_NET_GDR_C2C
  bool pxnDisable = false;        // NCCL_PXN_DISABLE
  bool pxnC2c = true;             // NCCL_PXN_C2C
  int p2pPxnLevel = 2;            // NCCL_P2P_PXN_LEVEL
  int crossNic = 2;               // NCCL_CROSS_NIC
  int netMergeLevel = PATH_PORT;  // NCCL_NET_MERGE_LEVEL
  int netDevsPolicyMax = 0;       // NCCL_NETDEVS_POLICY: 0 = AUTO, -1 = ALL, n > 0 = MAX:n
  bool ignoreCpuAffinity = false;
  // What fromEnvironment read the way NCCL does but a user may not expect (a value NCCL replaces by its fallback).
  std::vector<std::string> notes;

  // Reads the NCCL_* variables above from the environment. Values NCCL takes leniently are taken the same way (with a
  // note): integers as C's strtol/strtoll with base 0 read them ("1x" is 1, "0x10" 16), an old integer level kept in
  // an int as NCCL keeps it (4294967296 is 0). A P2P or GDR level NCCL cannot read (which NCCL silently ignores), or
  // an old integer level that is negative in an int (which NCCL would index its table with), throws TopologyError.
  static TopoSettings fromEnvironment();
};

int mergePathType(int a, int b);

// Paths from every node to every CPU, GPU, NIC, NET and NVS, then NCCL's post-processing (P2P reroute, P2C, PXN,
// GDR reroute). Safe to call again after trimming.
void computePaths(System& sys, const TopoSettings& settings);
// Index of the CPU with the fewest hops from GPU g (first on ties), -1 when none.
int localCpu(const System& sys, int g);

struct TrimResult {
  std::vector<int> removedRanks;  // GPUs not in our rank's NVLink/PCI domain
  bool inter = false;             // the network is needed: fewer local GPUs than ranks
  std::string reason;
};
// Removes GPUs outside the domain of `rank`, sets sys.inter = (local GPUs != nRanks), recomputes paths.
TrimResult trimSystem(System& sys, const TopoSettings& settings, int rank, int nRanks);

struct P2pDecision {
  bool p2p = false;
  bool read = false;
  int intermediateRank = -1;
  int pathType = PATH_DIS;
  int level = PATH_PXB;
  std::string reason;
};
P2pDecision checkP2p(const System& sys, const TopoSettings& settings, int rank1, int rank2);

enum class GdrMode { Disabled, Default, Pci };
struct GdrDecision {
  GdrMode mode = GdrMode::Disabled;
  int distance = PATH_DIS;
  int level = PATH_P2C;
  int proxyRank = -1;  // PXN: the GPU that does the RDMA
  std::string reason;
  std::string ncclLog;  // NCCL's INFO line when it would print one
};
// read = true: the NIC reads GPU memory (send side); false: the NIC writes it (receive side).
GdrDecision checkGdr(const System& sys, const TopoSettings& settings, int rank, int netDev, bool read);
bool needsFlush(const System& sys, int rank, int netDev);

// NCCL's ncclTopoGetLocal: indices of result nodes with the best (bw, then type) path from (type, index).
std::vector<int> localNodes(const System& sys, int type, int index, int resultType, int* pathType = nullptr);
struct LocalNetChoice {
  int netDev = -1;
  int netIndex = -1;
  std::vector<int> localNetDevs;
  int localPathType = PATH_DIS;
  float localBw = 0;
  int netsPerGpu = 1;
  int mirroredIndex = 0;
  std::string reason;
};
// ncclTopoGetLocalNet: the NET a GPU (by rank) uses on a channel.
LocalNetChoice localNet(const System& sys, const TopoSettings& settings, int rank, int channel);
// ncclTopoGetLocalGpu: index of the GPU that "owns" a NET (first GPU whose local NET it is), -1 when none.
int localGpuOfNet(const System& sys, const TopoSettings& settings, int netIndex);

// localGpuOfNet for many NETs over the same paths: each GPU's local NETs and each NET's local GPUs (localNodes) are
// computed once, when first needed, and each NET's owner is kept until one of those lists changes. Asking for every
// NET and GPU pair, as computePaths' PXN step does, was localNet() per candidate GPU per question (hours at a few
// hundred GPUs and NETs). After a path from GPU g to a NET, or from NET n to a GPU, changes: gpuPathsChanged(g),
// netPathsChanged(n).
class LocalNetIndex {
 public:
  LocalNetIndex(const System& sys, const TopoSettings& settings);
  int localGpuOfNet(int netIndex);
  void gpuPathsChanged(int g);
  void netPathsChanged(int n);

 private:
  struct Lists {
    bool known = false;
    std::vector<int> nodes;
  };
  // all[index]: the `localType` nodes local to node (type, index), computed on first use.
  const std::vector<int>& lists(std::vector<Lists>& all, int type, int index, int localType);
  const std::vector<int>& netsOfGpu(int g);
  const std::vector<int>& gpusOfNet(int n);
  // The first channel (0..63) on which GPU g picks NET n, kMaxChannels when none.
  int firstChannel(int g, int n);

  const System& sys_;
  const TopoSettings& settings_;
  std::vector<Lists> gpuNets_, netGpus_;
  std::vector<int> owner_;
  std::vector<std::uint64_t> ownerGeneration_;
  std::uint64_t generation_ = 1;  // owners computed in an older generation are recomputed
};
// ncclTopoGetIntermediateRank: the relay GPU when the path to the NET is PXN, else the rank itself.
int intermediateRank(const System& sys, int rank, int netDev);

struct NetDevChoice {
  int netDev = -1;
  int proxyRank = -1;
  std::string reason;
};
// ncclTopoGetNetDev without a graph (p2p operations): the NIC and proxy rank used to reach peerRank's GPU with the
// same NVML index on another node.
NetDevChoice netDevForPeer(const System& sys, const TopoSettings& settings, int rank, int channel, int peerDev);

}  // namespace nns::topo
