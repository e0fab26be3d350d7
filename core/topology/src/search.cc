// Recursive channel search with bandwidth reservation, relaxation order and speed arrays of NCCL's search.cc.
#include "nns/topology/search.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <map>

namespace nns::topo {

std::string_view patternName(int pattern) {
  switch (pattern) {
    case PATTERN_BALANCED_TREE: return "BALANCED_TREE";
    case PATTERN_SPLIT_TREE: return "SPLIT_TREE";
    case PATTERN_TREE: return "TREE";
    case PATTERN_RING: return "RING";
    case PATTERN_NVLS: return "NVLS";
    case PATTERN_COLLNET_DIRECT: return "COLLNET_DIRECT";
    default: return "?";
  }
}

namespace {

constexpr float kSpeedIntra[] = {40.0f, 30.0f, 20.0f, 18.0f, 15.0f, 12.0f, 10.0f, 9.0f, 7.0f, 6.0f, 5.0f, 4.0f, 3.0f};
constexpr float kSpeedInter[] = {48.0f, 30.0f, 28.0f, 24.0f, 20.0f, 18.0f, 15.0f, 12.0f, 10.0f, 9.0f,
                                 7.0f,  6.0f,  5.0f,  4.0f,  3.0f,  2.4f,  1.2f,  0.24f, 0.12f};
constexpr float kSm90SpeedIntra[] = {60.0f, 50.0f, 40.0f, 30.0f, 24.0f, 20.0f, 15.0f, 12.0f, 11.0f, 6.0f, 3.0f};
constexpr float kSm90SpeedInter[] = {48.0f, 45.0f, 42.0f, 40.0f, 30.0f, 24.0f, 22.0f, 20.0f, 17.5f,
                                     15.0f, 12.0f, 6.0f,  3.0f,  2.4f,  1.2f,  0.24f, 0.12f};
constexpr float kSm100SpeedIntra[] = {90.0f, 80.0f, 70.0f, 60.0f, 50.0f, 45.0f,
                                      40.0f, 30.0f, 24.0f, 20.0f, 19.0f, 18.0f};
constexpr float kSm100SpeedInter[] = {96.0f, 80.0f, 48.0f, 45.1f, 42.0f, 40.0f, 30.0f, 24.0f, 22.0f, 20.0f,
                                      17.5f, 15.0f, 12.0f, 6.0f,  3.0f,  2.4f,  1.2f,  0.24f, 0.12f};

constexpr int kSearchGlobalTimeout = 1 << 19;
constexpr int kSearchTimeout = 1 << 14;
constexpr int kSearchTimeoutTree = 1 << 14;
constexpr int kSearchTimeoutSameChannels = 1 << 8;
constexpr int kForcedOrderPci = 1;
constexpr int kForcedOrderReplay = 2;

// Float bookkeeping on link bandwidths drifts; NCCL rounds every subtraction to 1/1000.
void subRound(float& a, float b) {
  a = std::round((a - b) * 1000.0f) / 1000.0f;
}

bool useNet(const System& sys) {
  return sys.inter && sys.count(NET) > 0;
}

struct GpuScore {
  int g;
  int startIndex;
  int intraNhops;
  int intraBw;
  int interNhops;
  int interPciBw;
  int interBw;
};

int gpuPciBw(const System& sys, int g) {
  const Node& gpu = sys.node(GPU, g);
  for (const Link& l : gpu.links) {
    if (l.type != LINK_PCI) continue;
    for (const Link& back : sys.node(l.remType, l.remIndex).links)
      if (back.remType == GPU && back.remIndex == g) return static_cast<int>(std::min(l.bw, back.bw));
  }
  return -1;
}

class Searcher {
 public:
  Searcher(System& sys, const TopoSettings& settings) : sys_(sys), settings_(settings) {}

  void compute(Graph& graph);

 private:
  System& sys_;
  const TopoSettings& settings_;

  int ngpus() const { return sys_.count(GPU); }

  // Moves along the precomputed path reserving bw on each link; returns the steps that fit.
  int followPath(const Path& path, const Node& start, int maxSteps, float bw) {
    float pciBw = bw;
    for (const Link* l : path.links) {
      const Node& n = sys_.node(l->remType, l->remIndex);
      // P2P through an Intel root complex costs 20% more PCI bandwidth.
      if (n.type == CPU && path.type == PATH_PHB && start.type == GPU && n.cpu.arch == CpuArch::X86 &&
          n.cpu.vendor == CpuVendor::Intel)
        pciBw = bw * 6 / 5;
    }
    const Node* node = &start;
    for (int step = 0; step < maxSteps; ++step) {
      Link* link = path.links[static_cast<std::size_t>(step)];
      Node& rem = sys_.node(link->remType, link->remIndex);
      Link* revLink = nullptr;
      float fwBw = link->type == LINK_PCI ? pciBw : bw;
      float revBw = 0;
      auto findRev = [&]() {
        int fromType = node->type;
        for (Link& rl : rem.links) {
          if (rl.type != link->type || rl.remType != fromType) continue;
          if (&sys_.node(rl.remType, rl.remIndex) == node) return &rl;
        }
        throw TopologyError("search: no reverse link");
      };
      // Pre-Ampere GPUs also spend bandwidth on the reverse link when receiving from a non-GPU.
      if (rem.type == GPU && rem.gpu.sm < 80 && start.type != GPU) {
        if (!revLink) revLink = findRev();
        revBw += fwBw / 8;
      }
      if (rem.type == CPU && rem.cpu.arch == CpuArch::Power && link->type == LINK_NVL) {
        if (!revLink) revLink = findRev();
        revBw += fwBw;
      }
      // revBw is non-zero only once revLink is found.
      const bool usesReverse = revBw != 0 && revLink != nullptr;
      if (link->bw < fwBw || (usesReverse && revLink->bw < revBw)) return step;
      subRound(link->bw, fwBw);
      if (usesReverse) subRound(revLink->bw, revBw);
      node = &rem;
    }
    return maxSteps;
  }

  // Tries to go from (type1, index1) to (type2, index2); returns the destination index or -1 when it does not fit.
  bool followTopoPath(Graph& g, int type1, int index1, int type2, int index2, float mult) {
    if (type1 == -1) return true;
    Node& node1 = sys_.node(type1, index1);
    const Path& path = node1.paths[type2][static_cast<std::size_t>(index2)];
    const Path& revPath = sys_.node(type2, index2).paths[type1][static_cast<std::size_t>(index1)];
    bool intra = (type1 == GPU || type1 == NVS) && (type2 == GPU || type2 == NVS);
    float bw = intra ? g.bwIntra : g.bwInter;
    int type = intra ? g.typeIntra : g.typeInter;
    if (path.type == PATH_NET || path.type == PATH_DIS) return false;
    if (mult == 1 && path.type > type) return false;
    if (mult == 1 &&
        (g.pattern == PATTERN_BALANCED_TREE || g.pattern == PATTERN_TREE || g.pattern == PATTERN_SPLIT_TREE) &&
        revPath.type > type)
      return false;
    bw *= mult;
    int step = followPath(path, node1, path.count(), bw);
    if (step < path.count()) {
      followPath(path, node1, step, -bw);
      return false;
    }
    g.nHops += static_cast<int>(mult) * path.count();
    return true;
  }

  int netIndexOfId(std::int64_t id) const {
    int n = sys_.indexOf(NET, id);
    if (n < 0) throw TopologyError("search: unknown NET id");
    return n;
  }

  void searchParams(int pattern, int& backToNet, int& backToFirstRank) const {
    if (useNet(sys_)) {
      backToNet = pattern == PATTERN_RING ? ngpus() - 1 : pattern == PATTERN_SPLIT_TREE ? 1 : 0;
      backToFirstRank = -1;
    } else {
      backToNet = -1;
      backToFirstRank = pattern == PATTERN_RING ? ngpus() - 1 : -1;
    }
  }

  int replayGpu(const Graph& g, int step) const {
    int nextRank = g.intra[static_cast<std::size_t>((g.nChannels - 1) * ngpus() + step + 1)];
    int idx = sys_.gpuIndexOfRank(nextRank);
    if (idx < 0) throw TopologyError("search: replay rank not found");
    return idx;
  }

  int compareGraphs(const Graph& g, const Graph& ref) const {
    if (g.nChannels < g.minChannels) return 0;
    if (g.pattern == PATTERN_NVLS) {
      int copy = 0;
      if (g.nChannels > ref.nChannels && g.nChannels <= ngpus()) copy = 1;
      if (g.nChannels * g.bwInter > ref.nChannels * ref.bwInter) copy = 1;
      return copy;
    }
    if (g.nChannels * g.bwIntra > ref.nChannels * ref.bwIntra) return 1;
    if (g.nChannels * g.bwIntra < ref.nChannels * ref.bwIntra) return 0;
    return g.pattern == ref.pattern && g.crossNic == ref.crossNic && g.nHops < ref.nHops;
  }

  // Each GPU's preferred NETs, GPU by GPU: its local NET for channel 0, 1, ... until the rotation comes back to the
  // first. NCCL orders them GPU first, channel second (its ncclTopoPrefNetsGpuFirst) only across hosts of a
  // multi-node NVLink system, which a topology file of one host never is.
  void prefNetsChannelFirst(int gpu, std::vector<int>& nets) const {
    for (int g = 0; g < ngpus(); ++g) {
      if (gpu != -1 && gpu != g) continue;
      std::vector<int> local;
      for (int c = 0; c < kMaxChannels; ++c) {
        int n = localNet(sys_, settings_, sys_.node(GPU, g).gpu.rank, c).netIndex;
        if (!local.empty() && n == local[0]) break;
        local.push_back(n);
      }
      for (int n : local)
        if (std::find(nets.begin(), nets.end(), n) == nets.end()) nets.push_back(n);
    }
  }

  // NETs to try: those each GPU prefers (its local NET per channel), then the others by increasing path type.
  const std::vector<int>& selectNets(int typeInter, int gpu) {
    // Paths do not change during a search, so the list only depends on (typeInter, gpu): computing it once per key
    // takes the local-NET scans out of the recursion.
    auto key = std::make_pair(typeInter, gpu);
    auto it = netCache_.find(key);
    if (it != netCache_.end()) return it->second;
    std::vector<int>& nets = netCache_[key];
    prefNetsChannelFirst(gpu, nets);
    for (int t = 0; t <= typeInter; ++t) {
      for (int g = 0; g < ngpus(); ++g) {
        if (gpu != -1 && gpu != g) continue;
        const auto& paths = sys_.node(GPU, g).paths[NET];
        for (int n = 0; n < sys_.count(NET) && n < kMaxChannels; ++n)
          if (paths[static_cast<std::size_t>(n)].type == t && std::find(nets.begin(), nets.end(), n) == nets.end())
            nets.push_back(n);
      }
    }
    return nets;
  }
  std::map<std::pair<int, int>, std::vector<int>> netCache_;

  std::vector<int> nextGpuSort(const Graph& g, int gpu, int sortNet) const {
    const std::uint64_t flag = 1ULL << g.nChannels;
    const auto& paths = sys_.node(GPU, gpu).paths[GPU];
    const std::vector<Path>* netPaths = nullptr;
    if (sortNet)
      netPaths = &sys_.node(NET, netIndexOfId(g.inter[static_cast<std::size_t>(g.nChannels * 2)])).paths[GPU];
    int n = ngpus();
    auto candidate = [&](int idx) {
      return paths[static_cast<std::size_t>(idx)].count() != 0 && !(sys_.node(GPU, idx).used & flag);
    };
    if (sys_.count(NVS)) {
      // With an NVSwitch, talking to few peers is best: only the index neighbours are tried, the one moved to the
      // front last first. The score order does not change which of them are tried, so no sort is needed.
      int prevGpu = (gpu - 1 + n) % n;
      int nextGpu = (gpu + 1) % n;
      std::vector<int> firstGpus;
      if (g.pattern == PATTERN_RING)
        firstGpus = {nextGpu, prevGpu};
      else if (g.pattern == PATTERN_SPLIT_TREE || g.pattern == PATTERN_BALANCED_TREE)
        firstGpus = {prevGpu, nextGpu};
      else
        firstGpus = {nextGpu};
      if (nextGpu == prevGpu && firstGpus.size() == 2) firstGpus.resize(1);
      std::vector<int> next;
      for (int fg : firstGpus)
        if (fg != gpu && candidate(fg)) next.insert(next.begin(), fg);
      return next;
    }
    std::vector<GpuScore> scores;
    scores.reserve(static_cast<std::size_t>(n));
    for (int i = 1; i < n; ++i) {
      int idx = (gpu + i) % n;
      const Path& p = paths[static_cast<std::size_t>(idx)];
      if (p.count() == 0) continue;
      if (sys_.node(GPU, idx).used & flag) continue;
      GpuScore s{idx, i, p.count(), static_cast<int>(p.bw), 0, 0, 0};
      if (netPaths) {
        const Path& np = (*netPaths)[static_cast<std::size_t>(idx)];
        s.interNhops = np.count();
        s.interPciBw = gpuPciBw(sys_, idx);
        s.interBw = static_cast<int>(np.bw);
      }
      scores.push_back(s);
    }
    // startIndex is unique, so the order is total and an unstable sort gives the same result as qsort.
    std::sort(scores.begin(), scores.end(), [](const GpuScore& a, const GpuScore& b) {
      if (a.interBw != b.interBw) return a.interBw > b.interBw;
      if (a.interPciBw != b.interPciBw) return a.interPciBw > b.interPciBw;
      if (a.interNhops != b.interNhops) return a.interNhops < b.interNhops;
      if (a.intraBw != b.intraBw) return a.intraBw > b.intraBw;
      if (a.intraNhops != b.intraNhops) return a.intraNhops < b.intraNhops;
      return a.startIndex < b.startIndex;
    });
    std::vector<int> next;
    bool sameIntra = true;
    for (const auto& s : scores)
      if (s.intraBw != scores[0].intraBw || s.intraNhops != scores[0].intraNhops) sameIntra = false;
    if (sortNet == -1 && sameIntra)
      for (auto it = scores.rbegin(); it != scores.rend(); ++it) next.push_back(it->g);
    else
      for (const auto& s : scores) next.push_back(s.g);

    return next;
  }

  void tryGpu(Graph& g, Graph& save, int step, int backToNet, int backToFirstRank, int forcedOrder, int& time, int type,
              int index, int gpu) {
    const std::uint64_t flag = 1ULL << g.nChannels;
    if (!followTopoPath(g, type, index, GPU, gpu, 1)) return;
    Node& node = sys_.node(GPU, gpu);
    node.used ^= flag;
    recGpu(g, save, gpu, step, backToNet, backToFirstRank, forcedOrder, time);
    node.used ^= flag;
    followTopoPath(g, type, index, GPU, gpu, -1);
  }

  void recGpu(Graph& g, Graph& save, int gpu, int step, int backToNet, int backToFirstRank, int forcedOrder,
              int& time) {
    if (time <= 0) return;
    --time;
    int n = ngpus();
    if (step == n) {
      ++g.nChannels;
      if (compareGraphs(g, save)) {
        std::vector<SearchAttempt> keep = std::move(save.attempts);
        save = g;
        save.attempts = std::move(keep);
        if (g.nChannels == g.maxChannels) time = -1;
      }
      if (g.nChannels < g.maxChannels) searchRec(g, save, time);
      --g.nChannels;
      return;
    }
    g.intra[static_cast<std::size_t>(g.nChannels * n + step)] = sys_.node(GPU, gpu).gpu.rank;
    if (step == backToNet) {
      if (!useNet(sys_)) return;
      int startNet = netIndexOfId(g.inter[static_cast<std::size_t>(g.nChannels * 2)]);
      const NetInfo& start = sys_.node(NET, startNet).net;
      for (int netIdx : selectNets(g.typeInter, gpu)) {
        const Node& net = sys_.node(NET, netIdx);
        if (g.pattern == PATTERN_TREE && net.id != sys_.node(NET, startNet).id) continue;  // trees are symmetric
        if (g.pattern == PATTERN_RING && g.crossNic == 2) {
          if ((g.nChannels & 1) && net.id != g.inter[static_cast<std::size_t>((g.nChannels - 1) * 2)]) continue;
        } else if (g.crossNic == 0 && (net.net.asic != start.asic || net.net.port != start.port)) {
          continue;
        }
        int nextBackToNet = -1;
        float bwInterSave = g.bwInter;
        if (g.pattern == PATTERN_BALANCED_TREE) {
          // Balanced tree: half of the NET traffic on each of the first two GPUs.
          if (step == 0)
            nextBackToNet = 1;
          else if (net.id != g.inter[static_cast<std::size_t>(g.nChannels * 2 + 1)])
            continue;
          g.bwInter /= 2;
        }
        bool ok = followTopoPath(g, GPU, gpu, NET, netIdx, 1);
        g.bwInter = bwInterSave;
        if (ok) {
          g.inter[static_cast<std::size_t>(g.nChannels * 2 + 1)] = net.id;
          recGpu(g, save, gpu, step, nextBackToNet, backToFirstRank, forcedOrder, time);
          if (g.pattern == PATTERN_BALANCED_TREE) g.bwInter /= 2;
          followTopoPath(g, GPU, gpu, NET, netIdx, -1);
          g.bwInter = bwInterSave;
        }
      }
    } else if (step < n - 1) {
      std::vector<int> next;
      if (forcedOrder == kForcedOrderPci)
        next = {step + 1};
      else if (forcedOrder == kForcedOrderReplay)
        next = {replayGpu(g, step)};
      else
        next = nextGpuSort(g, gpu, backToNet == -1 ? 0 : backToNet == step + 1 ? 1 : -1);
      for (int nx : next) tryGpu(g, save, step + 1, backToNet, backToFirstRank, forcedOrder, time, GPU, gpu, nx);
    } else if (step == backToFirstRank) {
      int p = sys_.gpuIndexOfRank(g.intra[static_cast<std::size_t>(g.nChannels * n)]);
      if (followTopoPath(g, GPU, gpu, GPU, p, 1)) {
        recGpu(g, save, p, step + 1, backToNet, -1, forcedOrder, time);
        followTopoPath(g, GPU, gpu, GPU, p, -1);
      }
    } else {
      recGpu(g, save, gpu, n, -1, -1, forcedOrder, time);
    }
  }

  void recNet(Graph& g, Graph& save, int backToNet, int backToFirstRank, int& time) {
    const int bw = static_cast<int>(g.bwInter);  // NCCL keeps this one as an int
    const std::vector<int> nets = selectNets(g.typeInter, -1);
    int netCount = static_cast<int>(nets.size());
    for (int i = 0; i < netCount; ++i) {
      int n = nets[static_cast<std::size_t>((g.nChannels + i) % netCount)];
      Node& net = sys_.node(NET, n);
      if (g.collNet && net.net.coll == 0) continue;
      if (net.net.bw < static_cast<float>(bw)) continue;
      if (g.pattern == PATTERN_RING && g.crossNic == 2 && (g.nChannels & 1) &&
          net.id != g.inter[static_cast<std::size_t>((g.nChannels - 1) * 2 + 1)])
        continue;
      g.inter[static_cast<std::size_t>(g.nChannels * 2)] = net.id;
      g.latencyInter = net.net.latency;
      std::uint64_t asic = net.net.asic;
      int port = net.net.port;
      // The NET bandwidth is shared by every NET on the same ASIC port.
      for (auto& other : sys_.nodes[NET])
        if (other.net.asic == asic && other.net.port == port) other.net.bw -= static_cast<float>(bw);
      if (g.nChannels > 0 && g.sameChannels == 1) {
        tryGpu(g, save, 0, backToNet, backToFirstRank, kForcedOrderReplay, time, NET, n, replayGpu(g, -1));
      } else {
        if (g.nChannels == 0 && sys_.count(NVS) == 0) {
          // PCI order first as a reference, on a small budget of its own.
          int t = 1 << 10;
          tryGpu(g, save, 0, backToNet, backToFirstRank, kForcedOrderPci, t, NET, n, 0);
          if (t == -1) time = -1;
        }
        int pathType = PATH_DIS;
        std::vector<int> gpus = localNodes(sys_, NET, n, GPU, &pathType);
        if (pathType != PATH_DIS)
          for (int gi : gpus) tryGpu(g, save, 0, backToNet, backToFirstRank, 0, time, NET, n, gi);
      }
      for (auto& other : sys_.nodes[NET])
        if (other.net.asic == asic && other.net.port == port) other.net.bw += static_cast<float>(bw);
    }
  }

  void searchRec(Graph& g, Graph& save, int& time) {
    int backToNet, backToFirstRank;
    searchParams(g.pattern, backToNet, backToFirstRank);
    if (useNet(sys_)) {
      recNet(g, save, backToNet, backToFirstRank, time);
      return;
    }
    if (g.nChannels == 0)
      tryGpu(g, save, 0, backToNet, backToFirstRank, kForcedOrderPci, time, -1, -1, 0);
    else
      tryGpu(g, save, 0, backToNet, backToFirstRank, kForcedOrderReplay, time, -1, -1, replayGpu(g, -1));
    if (g.sameChannels == 0 || g.nChannels == 0)
      for (int gi = 0; gi < ngpus(); ++gi) tryGpu(g, save, 0, backToNet, backToFirstRank, 0, time, -1, -1, gi);
  }

  void minMaxPath(int type, int& minPath, int& maxPath) const {
    minPath = PATH_DIS;
    maxPath = PATH_LOC;
    for (int i = 0; i < ngpus(); ++i) {
      const auto& paths = sys_.node(GPU, i).paths[type];
      for (int j = 0; j < sys_.count(type); ++j) {
        if (type == GPU && i == j) continue;
        minPath = std::min(minPath, paths[static_cast<std::size_t>(j)].type);
        maxPath = std::max(maxPath, paths[static_cast<std::size_t>(j)].type);
      }
    }
  }

  void dupChannels(Graph& g, int ccMin) const {
    if (g.nChannels == 0 || g.pattern == PATTERN_NVLS) return;
    if (g.bwIntra < 25.0f) return;
    if (ccMin > 80 && g.bwIntra < 50.0f && g.nChannels > 4) return;
    int dup = std::min(g.nChannels * 2, g.maxChannels);
    int n = ngpus();
    for (int c = g.nChannels; c < dup; ++c) {
      for (int i = 0; i < n; ++i)
        g.intra[static_cast<std::size_t>(c * n + i)] = g.intra[static_cast<std::size_t>((c - g.nChannels) * n + i)];
      for (int i = 0; i < 2; ++i)
        g.inter[static_cast<std::size_t>(c * 2 + i)] = g.inter[static_cast<std::size_t>((c - g.nChannels) * 2 + i)];
    }
    int factor = (dup + g.nChannels - 1) / g.nChannels;
    g.bwIntra /= static_cast<float>(factor);
    g.bwInter /= static_cast<float>(factor);
    g.nChannels = dup;
  }
};

bool splitNvLink(const System& sys) {
  // NCCL's domains, as NCCL computes them: each GPU ends with the domain of the last lower-indexed GPU that has an
  // NVL path to it (not a union over chains), then the domains of more than one GPU are counted.
  const int n = sys.count(GPU);
  std::vector<int> domain(static_cast<std::size_t>(n));
  for (int g = 0; g < n; ++g) domain[static_cast<std::size_t>(g)] = g;
  for (int g = 0; g < n; ++g)
    for (int p = g + 1; p < n; ++p)
      if (sys.node(GPU, g).paths[GPU][static_cast<std::size_t>(p)].type == PATH_NVL)
        domain[static_cast<std::size_t>(p)] = domain[static_cast<std::size_t>(g)];
  int islands = 0;
  for (int d = 0; d < n; ++d)
    if (std::count(domain.begin(), domain.end(), d) > 1) ++islands;
  return islands == 2;
}

void Searcher::compute(Graph& graph) {
  int n = ngpus();
  bool net = useNet(sys_);
  // As ncclTopoCompute: decided by the NET count and the pattern alone, also for a single-node search (NCCL 2.29 keeps
  // the NETs then), where the crossNic=2 step is one more attempt before the speed is lowered.
  int crossNic = (sys_.count(NET) > 1 && (graph.pattern == PATTERN_RING || graph.pattern == PATTERN_BALANCED_TREE ||
                                          graph.pattern == PATTERN_SPLIT_TREE))
                     ? settings_.crossNic
                     : 0;
  graph.crossNic = crossNic == 1 ? 1 : 0;
  graph.bwIntra = graph.bwInter = 0;
  graph.latencyInter = 0;
  graph.nChannels = 0;
  graph.nHops = 0;
  graph.fallback = false;
  graph.withNets = net;
  graph.attempts.clear();
  graph.intra.assign(static_cast<std::size_t>(kMaxChannels * std::max(n, 1)), -1);
  graph.inter.assign(static_cast<std::size_t>(kMaxChannels * 2), 0);
  int minTypeIntra = PATH_LOC, minTypeInter = PATH_PIX, maxTypeIntra = PATH_SYS, maxTypeInter = PATH_SYS;
  if (n > 1) minMaxPath(GPU, minTypeIntra, maxTypeIntra);
  if (net) {
    minMaxPath(NET, minTypeInter, maxTypeInter);
    maxTypeIntra = maxTypeInter;
  }
  int ccMin = 1 << 30;
  for (const auto& g : sys_.nodes[GPU]) ccMin = std::min(ccMin, g.gpu.sm);
  // Before Hopper the balanced tree may need to come back to its NET over the CPU (PHB, SYS) even where every GPU has a
  // closer NET: NCCL lets the inter-node type rise to SYS then (the intra-node limit stays the NETs' worst type).
  if (ccMin < 90) maxTypeInter = PATH_SYS;
  graph.typeIntra = minTypeIntra;
  graph.typeInter = minTypeInter;
  int trySameChannels = graph.pattern == PATTERN_NVLS ? 0 : 1;
  graph.sameChannels = trySameChannels;
  if (n == 0) return;
  const CpuInfo* cpu0 = sys_.count(CPU) ? &sys_.node(CPU, 0).cpu : nullptr;
  bool amd = cpu0 && cpu0->arch == CpuArch::X86 && cpu0->vendor == CpuVendor::Amd;
  if (graph.pattern == PATTERN_NVLS || graph.pattern == PATTERN_COLLNET_DIRECT)
    throw TopologyError(std::string("search pattern ") + std::string(patternName(graph.pattern)) +
                        " is not implemented (ring and tree patterns are)");
  if (n == 1 && graph.pattern != PATTERN_RING) graph.pattern = PATTERN_TREE;
  // Two NVLink islands joined by a slower link (two sockets over QPI): the tree needs two channels there, and the ring
  // must have as many as the tree, so the ring search starts at two (NCCL's ncclTopoSplitNvLink).
  if (graph.pattern == PATTERN_RING && splitNvLink(sys_) && graph.maxChannels >= 2 && graph.minChannels == 1)
    graph.minChannels = 2;

  Graph tmp = graph;
  const float* speeds;
  int nspeeds;
  if (!net) {
    speeds = ccMin >= 100 ? kSm100SpeedIntra : ccMin >= 90 ? kSm90SpeedIntra : kSpeedIntra;
    nspeeds = ccMin >= 100  ? std::size(kSm100SpeedIntra)
              : ccMin >= 90 ? std::size(kSm90SpeedIntra)
                            : std::size(kSpeedIntra);
  } else {
    speeds = ccMin >= 100 ? kSm100SpeedInter : ccMin >= 90 ? kSm90SpeedInter : kSpeedInter;
    nspeeds = ccMin >= 100  ? std::size(kSm100SpeedInter)
              : ccMin >= 90 ? std::size(kSm90SpeedInter)
                            : std::size(kSpeedInter);
  }
  int pass = 1;
  int speedIndex = 0;
  float maxBw = sys_.maxBw;
  float totalBw = sys_.totalBw;
  if (n > 1 && graph.pattern != PATTERN_RING) totalBw *= static_cast<float>(n * 1.0 / (n - 1));
  while ((speeds[speedIndex] > maxBw || speeds[speedIndex] * static_cast<float>(graph.minChannels) > totalBw) &&
         speedIndex < nspeeds - 1)
    ++speedIndex;
  tmp.bwIntra = tmp.bwInter = speeds[speedIndex];
  std::int64_t globalTimeout = kSearchGlobalTimeout;
  int time = 0;

  for (;;) {
    // search:
    time = tmp.sameChannels              ? kSearchTimeoutSameChannels
           : tmp.pattern == PATTERN_TREE ? kSearchTimeoutTree
                                         : kSearchTimeout;
    tmp.nChannels = 0;
    globalTimeout -= time;
    searchRec(tmp, graph, time);
    SearchAttempt attempt{pass,
                          tmp.pattern,
                          tmp.crossNic,
                          tmp.bwIntra,
                          tmp.bwInter,
                          tmp.typeIntra,
                          tmp.typeInter,
                          tmp.sameChannels,
                          tmp.minChannels,
                          graph.nChannels,
                          time == 0    ? "TIMEOUT"
                          : time == -1 ? "PERFECT"
                                       : ""};
    graph.attempts.push_back(attempt);

    const bool done = time == -1 || graph.nChannels * graph.bwInter >= sys_.totalBw;
    if (!done && pass == 1) {
      if (tmp.sameChannels == 1 && !(amd && tmp.typeIntra == PATH_SYS)) {
        tmp.sameChannels = 0;
        continue;
      }
      tmp.sameChannels = trySameChannels;
      if (time != -1)
        globalTimeout += time;
      else
        globalTimeout = kSearchGlobalTimeout;
      // Out of time with a solution in hand: on to pass 2 with it; else relax the next constraint.
      if (globalTimeout >= 0 || graph.nChannels == 0) {
        if (ccMin >= 90 && tmp.pattern == PATTERN_BALANCED_TREE) {
          tmp.pattern = PATTERN_TREE;
          continue;
        }
        tmp.pattern = graph.pattern;
        int maxIntra = net ? tmp.typeInter : maxTypeIntra;
        if (tmp.typeIntra < maxIntra && (graph.nChannels == 0 || tmp.typeIntra < graph.typeIntra)) {
          tmp.typeIntra += 1;
          if (tmp.typeIntra < PATH_DIS) continue;
        }
        tmp.typeIntra = minTypeIntra;
        if (net && tmp.typeInter < maxTypeInter &&
            (graph.nChannels == 0 || tmp.typeInter < graph.typeInter || tmp.typeInter < PATH_PXN)) {
          tmp.typeInter += 1;
          if (tmp.typeInter < PATH_DIS) continue;
        }
        tmp.typeInter = minTypeInter;
        if (crossNic == 2 && tmp.crossNic == 0 &&
            (graph.pattern == PATTERN_RING || graph.pattern == PATTERN_BALANCED_TREE)) {
          tmp.crossNic = 2;
          continue;
        }
        tmp.crossNic = crossNic == 1 ? 1 : 0;
        if (speedIndex < nspeeds - 1 && (graph.nChannels == 0 || speeds[speedIndex + 1] / graph.bwInter > .49f)) {
          tmp.bwInter = tmp.bwIntra = speeds[++speedIndex];
          continue;
        }
        speedIndex = 0;
        while (speeds[speedIndex] > maxBw && speedIndex < nspeeds - 1) ++speedIndex;
        tmp.bwIntra = tmp.bwInter = speeds[speedIndex];
      }
    }
    // done: move to pass 2 from the solution found.
    if (pass == 1) {
      time = -1;
      dupChannels(graph, ccMin);
      std::vector<SearchAttempt> keep = std::move(graph.attempts);
      tmp = graph;
      graph.attempts = std::move(keep);
      speedIndex = 0;
      while (speeds[speedIndex] > graph.bwInter && speedIndex < nspeeds - 1) ++speedIndex;
      tmp.bwIntra = tmp.bwInter = speeds[speedIndex];
      tmp.minChannels = graph.nChannels;
      pass = 2;
    }
    if (pass == 2) {
      // See whether the channels found still fit at a higher speed.
      if (time != 0 && speedIndex > 0) {
        if (graph.pattern == PATTERN_RING) {
          tmp.bwIntra = tmp.bwInter = speeds[--speedIndex];
          continue;
        }
        if (tmp.bwIntra == graph.bwIntra && tmp.bwIntra < tmp.bwInter * 2) {
          tmp.bwIntra = speeds[--speedIndex];
          continue;
        }
      }
      break;
    }
  }

  if (graph.nChannels == 0 && !graph.collNet) {
    // NCCL: "Could not find a path for pattern %d, falling back to simple order".
    graph.fallback = true;
    for (int i = 0; i < n; ++i) graph.intra[static_cast<std::size_t>(i)] = sys_.node(GPU, i).gpu.rank;
    graph.inter[0] = graph.inter[1] = 0;
    if (net) {
      std::vector<int> first = selectNets(PATH_SYS, 0);
      std::vector<int> last = selectNets(PATH_SYS, n - 1);
      if (!first.empty()) graph.inter[0] = sys_.node(NET, first[0]).id;
      if (!last.empty()) graph.inter[1] = sys_.node(NET, last[0]).id;
    }
    graph.bwIntra = graph.bwInter = 0.1f;
    graph.typeIntra = graph.typeInter = PATH_SYS;
    graph.nChannels = 1;
  }
}

float maxPathBw(const System& sys, int g, int type) {
  float best = 0;
  for (const Path& p : sys.node(GPU, g).paths[type])
    if (p.count() != 0) best = std::max(best, p.bw);
  return best;
}

float totalGpuBw(const System& sys, int g) {
  float nvl = 0, pci = 0;
  for (const Link& l : sys.node(GPU, g).links) {
    if (l.type == LINK_NVL) nvl += l.bw;
    if (l.type == LINK_PCI) pci = l.bw;
  }
  return std::max(pci, nvl);
}

}  // namespace

void searchInit(System& sys) {
  sys.maxBw = 0;
  sys.totalBw = 0;
  bool net = useNet(sys);
  if (!net && sys.count(GPU) == 1) {
    sys.maxBw = sys.totalBw = LOC_BW;
    return;
  }
  for (int g = 0; g < sys.count(GPU); ++g) {
    sys.maxBw = std::max(sys.maxBw, maxPathBw(sys, g, net ? NET : GPU));
    sys.totalBw = std::max(sys.totalBw, totalGpuBw(sys, g));
  }
}

void computeGraph(System& sys, const TopoSettings& settings, Graph& graph) {
  if (sys.count(GPU) > 63) {
    // The search marks used GPUs per channel in a 64-bit mask and the channel count is capped at 64; systems larger
    // than NCCL's per-node limits are searched with the same rules but fewer channels available.
  }
  for (auto& g : sys.nodes[GPU]) g.used = 0;
  Searcher s(sys, settings);
  s.compute(graph);
}

namespace {
std::string fmtf(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string fmtf(const char* format, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, format);
  std::vsnprintf(buf, sizeof buf, format, ap);
  va_end(ap);
  return buf;
}
std::string idText(const char* type, std::int64_t id) {
  return fmtf("%s/%x-%llx", type, topoIdSystem(id), static_cast<unsigned long long>(topoIdLocal(id)));
}
}  // namespace

std::vector<std::string> graphLogLines(const System& sys, const Graph& g) {
  std::vector<std::string> out;
  out.push_back(fmtf("Pattern %d, crossNic %d, nChannels %d, bw %f/%f, type %s/%s, sameChannels %d", g.pattern,
                     g.crossNic, g.nChannels, g.bwIntra, g.bwInter, std::string(pathTypeName(g.typeIntra)).c_str(),
                     std::string(pathTypeName(g.typeInter)).c_str(), g.sameChannels));
  int n = sys.count(GPU);
  bool net = g.withNets;
  for (int c = 0; c < g.nChannels; ++c) {
    std::string line = fmtf("%2d :", c);
    // Appending piecewise: GCC 12 at -O3 raises a false -Wrestrict on `" " + std::string` temporaries.
    if (net) line.append(" ").append(idText("NET", g.inter[static_cast<std::size_t>(2 * c)]));
    for (int i = 0; i < n; ++i) {
      std::size_t at = static_cast<std::size_t>(c * n + i);
      int idx = at < g.intra.size() ? sys.gpuIndexOfRank(g.intra[at]) : -1;
      line.append(" ").append(idx >= 0 ? sys.idString(GPU, idx) : std::string("GPU/?"));
    }
    if (net) line.append(" ").append(idText("NET", g.inter[static_cast<std::size_t>(2 * c + 1)]));
    out.push_back(line);
  }
  return out;
}

std::vector<std::string> ringLogLines(const System& sys, const Graph& ring, int rank) {
  std::vector<std::string> out;
  int n = sys.count(GPU);
  bool net = ring.withNets;
  for (int c = 0; c < ring.nChannels; ++c) {
    int pos = -1;
    for (int i = 0; i < n; ++i)
      if (ring.intra[static_cast<std::size_t>(c * n + i)] == rank) pos = i;
    if (pos < 0) continue;
    auto at = [&](int i) { return ring.intra[static_cast<std::size_t>(c * n + i)]; };
    std::string prev = pos > 0 ? std::to_string(at(pos - 1)) : net ? "NET" : std::to_string(at(n - 1));
    std::string next = pos < n - 1 ? std::to_string(at(pos + 1)) : net ? "NET" : std::to_string(at(0));
    out.push_back(fmtf("Ring %02d : %s -> %d -> %s", c, prev.c_str(), rank, next.c_str()));
  }
  return out;
}

std::string treeLogLine(const System& sys, const Graph& tree, int rank) {
  std::string line = "Trees";
  int n = sys.count(GPU);
  for (int c = 0; c < tree.nChannels; ++c) {
    int pos = -1;
    for (int i = 0; i < n; ++i)
      if (tree.intra[static_cast<std::size_t>(c * n + i)] == rank) pos = i;
    if (pos < 0) continue;
    // Intra-node chain: the parent is the previous GPU, the child the next; the head's parent is the network
    // (another node) in multi-node runs, printed as -1 here because remote ranks depend on the node count.
    int up = pos > 0 ? tree.intra[static_cast<std::size_t>(c * n + pos - 1)] : -1;
    int down = pos < n - 1 ? tree.intra[static_cast<std::size_t>(c * n + pos + 1)] : -1;
    line += fmtf(" [%d] %d/-1/-1->%d->%d", c, down, rank, up);
  }
  return line;
}

std::vector<Graph> loadGraphXml(const XmlDocument& doc, const System* sys, int crossNicSetting) {
  const XmlElement& root = doc.root;
  const std::string& src = doc.sourceName;
  if (root.name != "graphs")
    throw TopologyError(src + ":" + std::to_string(root.line) + ": root element is <" + root.name +
                        ">, expected <graphs>");
  if (parseIntAttr(root, "version", src) != 1)
    throw TopologyError(src + ":" + std::to_string(root.line) + ": graph XML has wrong version (expected 1)");
  std::vector<Graph> out;
  // NCCL's graph dictionary (kvDictLinkType) has these names only: no C2C, no integer levels.
  auto typeOf = [&](const XmlElement& e, const char* key) {
    static constexpr std::pair<std::string_view, int> kGraphTypes[] = {
        {"LOC", PATH_LOC}, {"NVL", PATH_NVL}, {"NVB", PATH_NVB}, {"PIX", PATH_PIX}, {"PXB", PATH_PXB},
        {"P2C", PATH_P2C}, {"PXN", PATH_PXN}, {"PHB", PATH_PHB}, {"SYS", PATH_SYS}};
    const std::string& v = requireAttr(e, key, src);
    for (const auto& [name, type] : kGraphTypes)
      if (v == name) return type;
    throw TopologyError(src + ":" + std::to_string(e.line) + ": " + key + "=\"" + v +
                        "\" is not a graph path type (LOC NVL NVB PIX PXB P2C PXN PHB SYS)");
  };
  for (const auto& ge : root.children) {
    if (ge.name != "graph") continue;
    Graph g;
    auto intOf = [&](const char* key) {
      std::int64_t v = parseIntAttr(ge, key, src);
      if (v < 0 || v > (1 << 20))
        throw TopologyError(src + ":" + std::to_string(ge.line) + ": " + key + " out of range");
      return static_cast<int>(v);
    };
    auto lineOf = [&](const XmlElement& e) { return src + ":" + std::to_string(e.line) + ": "; };
    g.id = intOf("id");
    g.sourceLine = ge.line;
    g.pattern = intOf("pattern");
    // NCCL_TOPO_PATTERN_BALANCED_TREE (1) .. COLLNET_DIRECT (6); crossnic is 0, 1 or 2 (NCCL_CROSS_NIC's values).
    if (g.pattern < 1 || g.pattern > 6)
      throw TopologyError(lineOf(ge) + "pattern=" + std::to_string(g.pattern) +
                          " is no NCCL search pattern (1 balanced tree .. 4 ring, 5 NVLS, 6 CollNet direct)");
    g.crossNic = intOf("crossnic");
    if (g.crossNic > 2) throw TopologyError(lineOf(ge) + "crossnic=" + std::to_string(g.crossNic) + " (0, 1 or 2)");
    // NCCL_CROSS_NIC=0 forbids changing NICs: NCCL skips a graph that was searched with crossnic=1.
    if (crossNicSetting == 0 && g.crossNic == 1) continue;
    int declared = intOf("nchannels");
    if (declared > kMaxChannels)
      throw TopologyError(lineOf(ge) + "nchannels=" + std::to_string(declared) + ": NCCL holds at most " +
                          std::to_string(kMaxChannels) + " channels (MAXCHANNELS) and would write past them");
    auto floatOf = [&](const char* key) {
      auto v = parseOptionalFloatAttr(ge, key, src);
      if (!v) throw TopologyError(src + ":" + std::to_string(ge.line) + ": <graph> is missing " + key);
      return *v;
    };
    g.bwIntra = floatOf("speedintra");
    g.bwInter = floatOf("speedinter");
    for (const auto& [key, bw] : {std::pair<const char*, float>{"speedintra", g.bwIntra}, {"speedinter", g.bwInter}})
      if (!(bw >= 0))
        throw TopologyError(lineOf(ge) + key + "=" + fmtf("%g", static_cast<double>(bw)) +
                            ": a bandwidth in GB/s, 0 or more");
    g.latencyInter = parseOptionalFloatAttr(ge, "latencyinter", src).value_or(0.0f);
    g.typeIntra = typeOf(ge, "typeintra");
    g.typeInter = typeOf(ge, "typeinter");
    g.sameChannels = intOf("samechannels");
    int width = 0;
    std::vector<std::vector<int>> channels;
    std::vector<std::int64_t> inter;
    for (const auto& ch : ge.children) {
      if (ch.name != "channel") continue;
      std::vector<int> ranks;
      std::vector<std::int64_t> nets;
      for (const auto& item : ch.children) {
        if (item.name != "gpu" && item.name != "net") continue;
        // NCCL reads dev with strtol(..., 16); a value that is not hexadecimal would silently become 0 there.
        const std::string& devText = requireAttr(item, "dev", src);
        char* end = nullptr;
        errno = 0;
        std::int64_t dev = std::strtoll(devText.c_str(), &end, 16);
        if (devText.empty() || *end != '\0' || errno == ERANGE || dev < 0)
          throw TopologyError(src + ":" + std::to_string(item.line) + ": <" + item.name + "> dev=\"" + devText +
                              "\" is not a hexadecimal number");
        if (item.name == "gpu") {
          // dev is the GPU's whole id, NCCL_TOPO_ID(system, NVML index), compared as such (NCCL: "dev not found"):
          // 100000000 is no GPU, not GPU 0 of another reading.
          const std::int64_t local = topoIdLocal(dev);
          int rank = -1;
          if (sys) {
            for (const auto& gpu : sys->nodes[GPU])
              if (makeTopoId(topoIdSystem(gpu.id), gpu.gpu.dev) == dev) rank = gpu.gpu.rank;
          } else if (local < kMaxRanks) {
            rank = static_cast<int>(local);
          }
          if (rank < 0)
            throw TopologyError(src + ":" + std::to_string(item.line) + ": <gpu> dev=\"" + devText + "\" is " +
                                (sys ? "no GPU of this topology (NCCL: dev not found)"
                                     : "not a GPU id (NVML index 0.." + std::to_string(kMaxRanks - 1) + ")"));
          if (std::find(ranks.begin(), ranks.end(), rank) != ranks.end())
            throw TopologyError(lineOf(item) + "<gpu> dev=\"" + devText +
                                "\" is listed twice in one channel (a ring or chain visits each GPU once)");
          ranks.push_back(rank);
        } else if (item.name == "net") {
          // A NET's whole id (NCCL_TOPO_ID(system, dev)), looked up among the topology's NETs as NCCL does.
          if (sys && std::none_of(sys->nodes[NET].begin(), sys->nodes[NET].end(),
                                  [dev](const auto& net) { return net.id == dev; }))
            throw TopologyError(lineOf(item) + "<net> dev=\"" + devText +
                                "\" is no NET of this topology (NCCL: net not found)");
          nets.push_back(dev);
        }
      }
      // A channel holds one rank per GPU of the system (NCCL indexes intra[c * nGpus + i]): a graph searched on
      // another machine would be read across channel boundaries.
      if (sys && static_cast<int>(ranks.size()) != sys->count(GPU))
        throw TopologyError(src + ":" + std::to_string(ch.line) + ": <channel> lists " + std::to_string(ranks.size()) +
                            " GPU(s), the topology has " + std::to_string(sys->count(GPU)));
      if (width == 0) width = static_cast<int>(ranks.size());
      if (static_cast<int>(ranks.size()) != width)
        throw TopologyError(src + ":" + std::to_string(ch.line) + ": channels have different GPU counts");
      // NCCL stores each <net> in turn (inter[c * 2 + n++]): one leaves the exit slot to an earlier value, a third
      // runs into the next channel's entry (or past the array on the last channel).
      if (!nets.empty() && nets.size() != 2)
        throw TopologyError(
            src + ":" + std::to_string(ch.line) + ": <channel> lists " + std::to_string(nets.size()) +
            " <net>(s); a channel lists none, or two (the NET it enters by, then the one it leaves by)");
      if (!nets.empty()) g.withNets = true;
      inter.push_back(nets.empty() ? 0 : nets[0]);
      inter.push_back(nets.empty() ? 0 : nets[1]);
      channels.push_back(std::move(ranks));
    }
    if (static_cast<int>(channels.size()) != declared)
      throw TopologyError(src + ":" + std::to_string(ge.line) + ": nchannels=" + std::to_string(declared) + " but " +
                          std::to_string(channels.size()) + " <channel> elements");
    g.nChannels = declared;
    for (auto& ch : channels) g.intra.insert(g.intra.end(), ch.begin(), ch.end());
    g.inter = std::move(inter);
    out.push_back(std::move(g));
  }
  return out;
}

XmlElement graphsToXml(const System& sys, const std::vector<const Graph*>& graphs) {
  XmlElement root;
  root.name = "graphs";
  root.setAttr("version", "1");
  int n = sys.count(GPU);
  for (const Graph* g : graphs) {
    bool net = g->withNets;
    XmlElement& ge = root.addChild("graph");
    ge.setAttr("id", std::to_string(g->id));
    ge.setAttr("pattern", std::to_string(g->pattern));
    ge.setAttr("crossnic", std::to_string(g->crossNic));
    ge.setAttr("nchannels", std::to_string(g->nChannels));
    ge.setAttr("speedintra", fmtf("%g", g->bwIntra));
    ge.setAttr("speedinter", fmtf("%g", g->bwInter));
    ge.setAttr("latencyinter", fmtf("%g", g->latencyInter));
    ge.setAttr("typeintra", std::string(pathTypeName(g->typeIntra)));
    ge.setAttr("typeinter", std::string(pathTypeName(g->typeInter)));
    ge.setAttr("samechannels", std::to_string(g->sameChannels));
    for (int c = 0; c < g->nChannels; ++c) {
      XmlElement& ch = ge.addChild("channel");
      if (net)
        ch.addChild("net").setAttr(
            "dev", fmtf("%llx", static_cast<unsigned long long>(g->inter[static_cast<std::size_t>(2 * c)])));
      for (int i = 0; i < n; ++i) {
        int idx = sys.gpuIndexOfRank(g->intra[static_cast<std::size_t>(c * n + i)]);
        const Node& gpu = sys.node(GPU, idx);
        ch.addChild("gpu").setAttr(
            "dev", fmtf("%llx", static_cast<unsigned long long>(makeTopoId(topoIdSystem(gpu.id), gpu.gpu.dev))));
      }
      if (net)
        ch.addChild("net").setAttr(
            "dev", fmtf("%llx", static_cast<unsigned long long>(g->inter[static_cast<std::size_t>(2 * c + 1)])));
    }
  }
  return root;
}

}  // namespace nns::topo
