// Widest-path computation per base node and NCCL's P2P/GDR/PXN/local-NIC decisions over those paths.
#include "nns/topology/paths.h"

#include <strings.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace nns::topo {

namespace {

std::string fmt(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* format, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, format);
  std::vsnprintf(buf, sizeof buf, format, ap);
  va_end(ap);
  return buf;
}

std::string nameOf(int pathType) {
  return std::string(pathTypeName(pathType));
}

// A level variable as NCCL's ncclGetLevel reads it: a level name, else, when it starts with a digit, the integer
// strtol(str, NULL, 0) reads from its start (pre-2.4 numbering; the base is C's: "1x" is 1, PIX, "0x3" is 3, PHB, "09"
// is 0, LOC), kept in an int as NCCL keeps it (4294967296 is 0 there), said in `notes` when the text is not that
// integer plainly written. Anything else NCCL cannot read: an error naming the levels (NCCL ignores such a value
// without a word and keeps its default), and so is an integer that is negative in an int (2147483648), with which
// NCCL would read its table of old levels out of range.
int envLevel(const char* name, int fallback, std::vector<std::string>& notes) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  for (int t = PATH_LOC; t <= PATH_SYS; ++t)
    if (pathTypeName(t) == v) return t;
  if (v[0] >= '0' && v[0] <= '9') {
    static constexpr int kOldLevels[] = {PATH_LOC, PATH_PIX, PATH_PXB, PATH_PHB, PATH_SYS, PATH_SYS};
    const long read = std::strtol(v, nullptr, 0);
    // NCCL's `int oldLevel = strtol(...)`: the low 32 bits, two's complement (as C++20 defines the conversion).
    const int old = static_cast<int>(static_cast<std::uint32_t>(static_cast<unsigned long>(read)));
    const std::string readText =
        std::to_string(read) + (read == old ? "" : ", into an int, where it is " + std::to_string(old));
    if (old < 0)
      throw TopologyError(std::string(name) + "=" + v + ": NCCL reads the integer it starts with, " + readText +
                          " (strtol with base 0, kept in an int): a negative old level, with which NCCL would read "
                          "its table of old levels (0..5) out of range; give a level name (LOC NVL NVB C2C PIX PXB "
                          "P2C PXN PHB SYS) or 0..5");
    const int level = kOldLevels[std::min(old, 5)];
    if (std::to_string(old) != v)
      notes.push_back(std::string(name) + "=" + v + ": NCCL reads the integer it starts with, " + readText + " (" +
                      nameOf(level) + "), as C's strtol with base 0 reads it (0x.. hex, a leading 0 octal), " +
                      "and so does this tool");
    return level;
  }
  throw TopologyError(std::string(name) + "=" + v +
                      ": unknown level (LOC NVL NVB C2C PIX PXB P2C PXN PHB SYS, upper case, or NCCL's old integers "
                      "0..5). NCCL itself silently ignores a value it cannot read and uses its default, so this "
                      "setting has no effect there; refused here so that the mistake is seen");
}

// An integer variable as NCCL's parameters (NCCL_PARAM, ncclLoadParam) are read: strtoll(str, NULL, 0), the integer
// the value starts with ("1x" is 1, "0x10" is 16, "010" is 8, "yes" is 0: strtoll finds no digits), NCCL's default
// only when it is out of range. A value that is not plainly an integer is said in `notes`.
std::int64_t envInt(const char* name, std::int64_t fallback, std::vector<std::string>& notes) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v, &end, 0);
  if (errno != 0) {
    notes.push_back(std::string(name) + "=" + v + " is out of range: NCCL uses its default (" +
                    std::to_string(fallback) + "), and so does this tool");
    return fallback;
  }
  if (end == v)
    notes.push_back(std::string(name) + "=" + v +
                    " does not start with an integer: NCCL reads 0 (strtoll finds no digits), and so does this tool");
  else if (*end != '\0')
    notes.push_back(std::string(name) + "=" + v + ": NCCL reads the integer it starts with, " + std::to_string(x) +
                    ", and so does this tool");
  return x;
}

}  // namespace

TopoSettings TopoSettings::fromEnvironment() {
  TopoSettings s;
  // NCCL_P2P_DISABLE is ncclGetLevel's own read, not a parameter: `int disable = strtol(str, NULL, 0)`, disabled when
  // that is 1 ("1x" disables, "0x1" too); out-of-range values are no error there (C's conversion to int).
  const char* p2pDisable = std::getenv("NCCL_P2P_DISABLE");
  const int disable = p2pDisable ? static_cast<int>(std::strtol(p2pDisable, nullptr, 0)) : 0;
  if (p2pDisable && disable == 1 && std::strcmp(p2pDisable, "1") != 0)
    s.notes.push_back(std::string("NCCL_P2P_DISABLE=") + p2pDisable +
                      ": NCCL reads the integer it starts with, 1 (P2P disabled), and so does this tool");
  if (disable == 1)
    s.p2pLevel = PATH_LOC;
  else
    s.p2pLevel = envLevel("NCCL_P2P_LEVEL", -2, s.notes);
  // NCCL keeps some parameters in an int (C's conversion, modulo 2^32) and tests others as they are (64 bits).
  s.nvbDisable = envInt("NCCL_NVB_DISABLE", 0, s.notes) != 0;  // NCCL tests the value for non-zero
  s.netGdrLevel = envLevel("NCCL_NET_GDR_LEVEL", -2, s.notes);
  s.netGdrRead = static_cast<int>(envInt("NCCL_NET_GDR_READ", -2, s.notes));
  s.netGdrC2c = envInt("NCCL_NET_GDR_C2C", 1, s.notes) != 0;
  s.pxnDisable = static_cast<int>(envInt("NCCL_PXN_DISABLE", 0, s.notes)) == 1;
  s.pxnC2c = envInt("NCCL_PXN_C2C", 1, s.notes) != 0;
  s.p2pPxnLevel = static_cast<int>(envInt("NCCL_P2P_PXN_LEVEL", 2, s.notes));
  s.crossNic = static_cast<int>(envInt("NCCL_CROSS_NIC", 2, s.notes));
  if (const char* m = std::getenv("NCCL_NET_MERGE_LEVEL")) {
    // As NCCL reads it: the first of its names the value begins with (case matters), else LOC, which fuses nothing.
    static constexpr std::pair<const char*, int> kNames[] = {{"LOC", PATH_LOC}, {"PORT", PATH_PORT}, {"PIX", PATH_PIX},
                                                             {"PXB", PATH_PXB}, {"P2C", PATH_P2C},   {"PXN", PATH_PXN},
                                                             {"PHB", PATH_PHB}, {"SYS", PATH_SYS}};
    s.netMergeLevel = -1;
    for (const auto& [name, level] : kNames)
      if (std::strncmp(m, name, std::strlen(name)) == 0) {
        s.netMergeLevel = level;
        if (std::strlen(m) != std::strlen(name))
          s.notes.push_back(std::string("NCCL_NET_MERGE_LEVEL=") + m + " begins with " + name + ": NCCL takes " + name +
                            ", and so does this tool");
        break;
      }
    if (s.netMergeLevel < 0) {
      s.netMergeLevel = PATH_LOC;
      s.notes.push_back(std::string("NCCL_NET_MERGE_LEVEL=") + m +
                        " begins with none of LOC PORT PIX PXB P2C PXN PHB SYS: NCCL takes LOC (no fusion), and so "
                        "does this tool");
    }
  }
  if (const char* p = std::getenv("NCCL_NETDEVS_POLICY")) {
    // As NCCL reads it: AUTO, ALL or MAX:<n> with n > 0, ignoring case; anything else is AUTO.
    if (strcasecmp(p, "ALL") == 0) {
      s.netDevsPolicyMax = -1;
    } else if (strncasecmp(p, "MAX:", 4) == 0 && std::atoi(p + 4) > 0) {
      s.netDevsPolicyMax = std::atoi(p + 4);
    } else {
      s.netDevsPolicyMax = 0;
      if (strcasecmp(p, "AUTO") != 0)
        s.notes.push_back(std::string("NCCL_NETDEVS_POLICY=") + p +
                          " is not AUTO, ALL or MAX:<n> with n > 0: NCCL takes AUTO, and so does this tool");
    }
  }
  return s;
}

int mergePathType(int a, int b) {
  if ((a == PATH_PHB && b == PATH_C2C) || (a == PATH_C2C && b == PATH_PHB)) return PATH_P2C;
  return std::max(a, b);
}

namespace {

Path& pathOf(System& sys, int type, int index, int baseType, int baseIndex) {
  return sys.node(type, index).paths[baseType][static_cast<std::size_t>(baseIndex)];
}

// Level-by-level relaxation from the base node: each node keeps the widest path to the base, but never one with
// more hops than a path it already has. Paths do not go through GPUs except one NVLink GPU->GPU relay (NVB).
void setPaths(System& sys, const TopoSettings& settings, int baseType, int baseIndex) {
  const std::size_t nBase = static_cast<std::size_t>(sys.count(baseType));
  for (auto& nodes : sys.nodes)
    for (auto& n : nodes)
      if (n.paths[baseType].size() != nBase) n.paths[baseType].assign(nBase, Path{});
  Path& basePath = pathOf(sys, baseType, baseIndex, baseType, baseIndex);
  basePath.links.clear();
  basePath.bw = LOC_BW;
  basePath.type = PATH_LOC;

  std::vector<std::pair<int, int>> frontier{{baseType, baseIndex}}, next;
  // Whether a node is already in `next`, per type and index (a search of `next` made this quadratic in the nodes).
  std::vector<std::vector<char>> queued(sys.nodes.size());
  for (std::size_t t = 0; t < sys.nodes.size(); ++t) queued[t].assign(sys.nodes[t].size(), 0);
  while (!frontier.empty()) {
    // The frontier is what the last level queued.
    for (auto [type, index] : frontier) queued[static_cast<std::size_t>(type)][static_cast<std::size_t>(index)] = 0;
    next.clear();
    for (auto [type, index] : frontier) {
      Node& node = sys.node(type, index);
      for (Link& link : node.links) {
        Path& path = node.paths[baseType][static_cast<std::size_t>(baseIndex)];
        Node& rem = sys.node(link.remType, link.remIndex);
        Path& remPath = rem.paths[baseType][static_cast<std::size_t>(baseIndex)];
        float bw = std::min(path.bw, link.bw);
        bool isBase = type == baseType && index == baseIndex;
        if (!isBase && type == GPU &&
            (settings.nvbDisable || link.type != LINK_NVL || link.remType != GPU || path.count() > 1))
          continue;
        if ((remPath.bw == 0 || remPath.count() > path.count()) && remPath.bw < bw) {
          Link* reverse = nullptr;
          for (Link& rl : rem.links)
            if (rl.remType == type && rl.remIndex == index && rl.type == link.type) {
              reverse = &rl;
              break;
            }
          if (!reverse)
            throw TopologyError("no reverse link from " + sys.idString(link.remType, link.remIndex) + " to " +
                                sys.idString(type, index) + " (links must exist in both directions)");
          std::vector<Link*> links;
          links.reserve(path.links.size() + 1);
          links.push_back(reverse);
          links.insert(links.end(), path.links.begin(), path.links.end());
          remPath.links = std::move(links);
          remPath.bw = bw;
          // The hop's type, with NCCL's refinements: the NIC->NET hop does not count, switch->switch is PXB,
          // a PCI hop touching a CPU is PHB, and an NVLink hop after an NVLink hop through a GPU is NVB.
          int t = link.type == LINK_NET ? PATH_LOC : link.type;
          if (type == PCI && link.remType == PCI) t = PATH_PXB;
          if (link.type == LINK_PCI && (type == CPU || link.remType == CPU)) t = PATH_PHB;
          if (type == GPU && path.type == PATH_NVL && t == PATH_NVL && remPath.count() > 1) t = PATH_NVB;
          remPath.type = std::max(path.type, t);
          char& inNext = queued[static_cast<std::size_t>(link.remType)][static_cast<std::size_t>(link.remIndex)];
          if (!inNext) {
            inNext = 1;
            next.emplace_back(link.remType, link.remIndex);
          }
        }
      }
    }
    std::swap(frontier, next);
  }
}

// Reroutes the path (t1,i1) -> (t2,i2) through (tx,ix): path(1->x) + path(x->2).
void addInterStep(System& sys, int tx, int ix, int t1, int i1, int t2, int i2) {
  Node& src = sys.node(t1, i1);
  Node& mid = sys.node(tx, ix);
  const Path& first = src.paths[tx][static_cast<std::size_t>(ix)];
  const Path& second = mid.paths[t2][static_cast<std::size_t>(i2)];
  Path merged;
  merged.links = first.links;
  merged.links.insert(merged.links.end(), second.links.begin(), second.links.end());
  merged.type = tx == GPU ? PATH_PXN : mergePathType(first.type, second.type);
  merged.bw = std::min(first.bw, second.bw);
  src.paths[t2][static_cast<std::size_t>(i2)] = std::move(merged);
}

const Path& gpuPath(const System& sys, int g, int type, int index) {
  return sys.node(GPU, g).paths[type][static_cast<std::size_t>(index)];
}

int cpuTypeVendorAmd(const System& sys) {
  if (sys.count(CPU) == 0) return 0;
  const CpuInfo& c = sys.node(CPU, 0).cpu;
  return c.arch == CpuArch::X86 && c.vendor == CpuVendor::Amd;
}

bool isPow2(int v) {
  return v > 0 && (v & (v - 1)) == 0;
}
int mirrorBits(int val, int pow2) {
  int mirror = 0;
  for (int b = 1, mb = (pow2 >> 1); b < pow2; b <<= 1, mb >>= 1)
    if (val & b) mirror |= mb;
  return mirror;
}

}  // namespace

int localCpu(const System& sys, int g) {
  int best = -1, minHops = 0;
  const auto& paths = sys.node(GPU, g).paths[CPU];
  for (int c = 0; c < static_cast<int>(paths.size()); ++c) {
    int hops = paths[static_cast<std::size_t>(c)].count();
    if (hops > 0 && (minHops == 0 || hops < minHops)) {
      best = c;
      minHops = hops;
    }
  }
  return best;
}

std::vector<int> localNodes(const System& sys, int type, int index, int resultType, int* pathType) {
  std::vector<int> out;
  const auto& paths = sys.node(type, index).paths[resultType];
  float maxBw = 0;
  int minType = PATH_DIS;
  if (pathType) *pathType = PATH_DIS;
  for (int i = 0; i < static_cast<int>(paths.size()); ++i) {
    const Path& p = paths[static_cast<std::size_t>(i)];
    if (p.bw > maxBw || (p.bw == maxBw && p.type < minType)) {
      maxBw = p.bw;
      minType = p.type;
      if (pathType) *pathType = minType;
      out.clear();
    }
    if (p.bw == maxBw && p.type == minType) out.push_back(i);
  }
  return out;
}

LocalNetChoice localNet(const System& sys, const TopoSettings& settings, int rank, int channel) {
  LocalNetChoice c;
  int g = sys.gpuIndexOfRank(rank);
  if (g < 0) throw TopologyError("rank " + std::to_string(rank) + " is not a GPU of this system");
  std::vector<int> nets = localNodes(sys, GPU, g, NET, &c.localPathType);
  if (nets.empty()) throw TopologyError("no path from GPU rank " + std::to_string(rank) + " to any NET");
  c.localBw = gpuPath(sys, g, NET, nets[0]).bw;
  for (int n : nets) c.localNetDevs.push_back(sys.node(NET, n).net.dev);
  std::vector<int> gpus = localNodes(sys, NET, nets[0], GPU);
  int count = static_cast<int>(nets.size());
  int localGpuCount = std::max<int>(1, static_cast<int>(gpus.size()));
  if (settings.netDevsPolicyMax == 0)
    c.netsPerGpu = (count + localGpuCount - 1) / localGpuCount;
  else if (settings.netDevsPolicyMax < 0)
    c.netsPerGpu = count;
  else
    c.netsPerGpu = std::min(settings.netDevsPolicyMax, count);
  // NCCL's int arithmetic, in 64 bits: dev + channel stays non-negative for any dev and channel the caller gives.
  int idx = sys.node(GPU, g).gpu.dev;
  if (isPow2(count)) idx = mirrorBits(idx, count);
  c.mirroredIndex = idx;
  const std::int64_t pick = static_cast<std::int64_t>(idx) + channel % c.netsPerGpu;
  c.netIndex = nets[static_cast<std::size_t>(pick % count)];
  c.netDev = sys.node(NET, c.netIndex).net.dev;
  std::string share = settings.netDevsPolicyMax == 0
                          ? fmt("ceil(%d/%d), NCCL_NETDEVS_POLICY=AUTO", count, localGpuCount)
                      : settings.netDevsPolicyMax < 0 ? std::string("NCCL_NETDEVS_POLICY=ALL")
                                                      : fmt("NCCL_NETDEVS_POLICY=MAX:%d", settings.netDevsPolicyMax);
  std::string start = isPow2(count)
                          ? fmt("dev %d bit-mirrored over %d = %d", sys.node(GPU, g).gpu.dev, count, c.mirroredIndex)
                          : fmt("dev %d", sys.node(GPU, g).gpu.dev);
  c.reason =
      fmt("%d NET(s) at the best bw %.1f/%s from this GPU, shared by %d GPU(s) -> %d net(s) per GPU (%s); "
          "index = %s, + (channel %d %% %d = %d) = %lld, mod %d -> NET %d",
          count, c.localBw, nameOf(c.localPathType).c_str(), localGpuCount, c.netsPerGpu, share.c_str(), start.c_str(),
          channel, c.netsPerGpu, channel % c.netsPerGpu, static_cast<long long>(pick), count, c.netDev);
  return c;
}

int localGpuOfNet(const System& sys, const TopoSettings& settings, int netIndex) {
  return LocalNetIndex(sys, settings).localGpuOfNet(netIndex);
}

LocalNetIndex::LocalNetIndex(const System& sys, const TopoSettings& settings)
    : sys_(sys),
      settings_(settings),
      gpuNets_(static_cast<std::size_t>(sys.count(GPU))),
      netGpus_(static_cast<std::size_t>(sys.count(NET))),
      owner_(static_cast<std::size_t>(sys.count(NET)), -1),
      ownerGeneration_(static_cast<std::size_t>(sys.count(NET)), 0) {}

const std::vector<int>& LocalNetIndex::lists(std::vector<Lists>& all, int type, int index, int localType) {
  Lists& l = all[static_cast<std::size_t>(index)];
  if (!l.known) {
    l.nodes = localNodes(sys_, type, index, localType);
    l.known = true;
  }
  return l.nodes;
}

const std::vector<int>& LocalNetIndex::netsOfGpu(int g) {
  return lists(gpuNets_, GPU, g, NET);
}

const std::vector<int>& LocalNetIndex::gpusOfNet(int n) {
  return lists(netGpus_, NET, n, GPU);
}

void LocalNetIndex::gpuPathsChanged(int g) {
  Lists& l = gpuNets_[static_cast<std::size_t>(g)];
  if (!l.known) return;  // no owner was computed from it
  std::vector<int> now = localNodes(sys_, GPU, g, NET);
  if (now != l.nodes) {
    l.nodes = std::move(now);
    ++generation_;
  }
}

void LocalNetIndex::netPathsChanged(int n) {
  Lists& l = netGpus_[static_cast<std::size_t>(n)];
  if (!l.known) return;
  std::vector<int> now = localNodes(sys_, NET, n, GPU);
  if (now != l.nodes) {
    l.nodes = std::move(now);
    ++generation_;
  }
}

int LocalNetIndex::firstChannel(int g, int n) {
  // localNet()'s choice on channel c is nets[(index + c % netsPerGpu) % count]: the first c that lands on n.
  const std::vector<int>& nets = netsOfGpu(g);
  if (nets.empty())
    throw TopologyError("no path from GPU rank " + std::to_string(sys_.node(GPU, g).gpu.rank) + " to any NET");
  const auto at = std::lower_bound(nets.begin(), nets.end(), n);  // localNodes lists indices in increasing order
  if (at == nets.end() || *at != n) return kMaxChannels;
  const int count = static_cast<int>(nets.size());
  const int localGpuCount = std::max<int>(1, static_cast<int>(gpusOfNet(nets[0]).size()));
  int netsPerGpu = 0;
  if (settings_.netDevsPolicyMax == 0)
    netsPerGpu = (count + localGpuCount - 1) / localGpuCount;
  else if (settings_.netDevsPolicyMax < 0)
    netsPerGpu = count;
  else
    netsPerGpu = std::min(settings_.netDevsPolicyMax, count);
  int index = sys_.node(GPU, g).gpu.dev;
  if (isPow2(count)) index = mirrorBits(index, count);
  const std::int64_t position = at - nets.begin();
  // The smallest k >= 0 with (index + k) % count == position; channel c picks offset c % netsPerGpu, which is k
  // first at c = k when k < netsPerGpu.
  const std::int64_t k = ((position - index) % count + count) % count;
  return k < std::min(netsPerGpu, kMaxChannels) ? static_cast<int>(k) : kMaxChannels;
}

int LocalNetIndex::localGpuOfNet(int netIndex) {
  const auto n = static_cast<std::size_t>(netIndex);
  if (ownerGeneration_[n] == generation_) return owner_[n];
  // ncclTopoGetLocalGpu: for channel c = 0..63, the first of the NET's local GPUs (in order) whose NET on c is this
  // one, i.e. the GPU with the smallest first channel, the earlier one on ties.
  int best = -1, bestChannel = kMaxChannels;
  for (int g : gpusOfNet(netIndex)) {
    int c = firstChannel(g, netIndex);
    if (c < bestChannel) {
      best = g;
      bestChannel = c;
    }
  }
  owner_[n] = best;
  ownerGeneration_[n] = generation_;
  return best;
}

int intermediateRank(const System& sys, int rank, int netDev) {
  int g = sys.gpuIndexOfRank(rank);
  int n = sys.netIndexOfDev(netDev);
  if (g < 0 || n < 0) return rank;
  const Path& p = gpuPath(sys, g, NET, n);
  if (p.type != PATH_PXN) return rank;
  // Walk from the start skipping NVSwitches; the first other node is the relay GPU.
  int curType = GPU, curIndex = g;
  for (const Link* l : p.links) {
    curType = l->remType;
    curIndex = l->remIndex;
    if (curType != NVS) break;
  }
  if (curType != GPU) throw TopologyError("PXN path of rank " + std::to_string(rank) + " does not start at a GPU");
  return sys.node(GPU, curIndex).gpu.rank;
}

P2pDecision checkP2p(const System& sys, const TopoSettings& settings, int rank1, int rank2) {
  P2pDecision d;
  int g1 = sys.gpuIndexOfRank(rank1), g2 = sys.gpuIndexOfRank(rank2);
  if (g1 < 0 || g2 < 0) {
    d.reason = "GPU not in this system";
    return d;
  }
  const Path& path = gpuPath(sys, g1, GPU, g2);
  if (path.count() == 2 && path.links[0]->remType == GPU)
    d.intermediateRank = sys.node(GPU, path.links[0]->remIndex).gpu.rank;
  d.pathType = path.type;
  std::string levelWhy = "default level PXB (no P2P across a CPU host bridge)";
  d.level = PATH_PXB;
  if (cpuTypeVendorAmd(sys) && sys.count(GPU) <= 2) {
    d.level = PATH_SYS;
    levelWhy = "level SYS (AMD CPU and at most 2 GPUs)";
  }
  if (settings.p2pLevel != -2) {
    d.level = settings.p2pLevel;
    levelWhy = "user level " + nameOf(d.level) + " (NCCL_P2P_LEVEL/NCCL_P2P_DISABLE)";
  }
  d.p2p = path.type <= d.level;
  if (path.type == PATH_NVL) {
    const Node& a = sys.node(GPU, g1);
    const Node& b = sys.node(GPU, g2);
    d.read = a.gpu.sm == b.gpu.sm && a.gpu.sm == 80;
  }
  d.reason = fmt("path %s %s %s: %s", nameOf(path.type).c_str(), d.p2p ? "<=" : ">", levelWhy.c_str(),
                 d.p2p ? "P2P" : "no P2P, traffic goes through the CPU");
  if (d.read) d.reason += "; P2P read (NVLink between two sm80 GPUs)";
  if (d.intermediateRank != -1) d.reason += "; relayed by rank " + std::to_string(d.intermediateRank) + " (NVB)";
  return d;
}

GdrDecision checkGdr(const System& sys, const TopoSettings& settings, int rank, int netDev, bool read) {
  GdrDecision d;
  int g = sys.gpuIndexOfRank(rank);
  int n = sys.netIndexOfDev(netDev);
  if (g < 0 || n < 0) {
    d.reason = "GPU or NET not in this system";
    return d;
  }
  const Node& gpu = sys.node(GPU, g);
  const Node& net = sys.node(NET, n);
  if (net.net.gdr == 0) {
    d.reason = "the NIC does not support GPU memory (gdr=0)";
    return d;
  }
  if (gpu.gpu.gdr == 0) {
    d.reason = "the GPU does not support GPU Direct RDMA (gdr=0)";
    return d;
  }
  if (read) {
    if (settings.netGdrRead == 0) {
      d.reason = "GDR reads disabled by NCCL_NET_GDR_READ=0";
      return d;
    }
    if (settings.netGdrRead < 0 && gpu.gpu.sm < 80) {
      bool nvlink = sys.count(GPU) == 1;
      for (int i = 0; i < sys.count(GPU) && !nvlink; ++i)
        if (i != g && gpuPath(sys, g, GPU, i).type == PATH_NVL) nvlink = true;
      if (!nvlink) {
        d.reason = "pre-Ampere GPU (sm < 80) without NVLink: reads stay off to keep PCI free for other flows";
        return d;
      }
    }
  }
  d.level = settings.netGdrC2c ? PATH_P2C : PATH_PXB;
  std::string levelWhy = settings.netGdrC2c ? "the default" : "NCCL_NET_GDR_C2C=0";
  if (settings.netGdrLevel != -2) {
    d.level = settings.netGdrLevel;
    levelWhy = "NCCL_NET_GDR_LEVEL";
  }
  d.distance = gpuPath(sys, g, NET, n).type;
  int gg = g;
  std::string pxn;
  if (d.distance == PATH_PXN) {
    d.proxyRank = intermediateRank(sys, rank, netDev);
    gg = sys.gpuIndexOfRank(d.proxyRank);
    d.distance = gpuPath(sys, gg, NET, n).type;
  }
  // NCCL's ids in these lines are decimal (%ld), and the relay's part is " using PXN via GPU/s-l, " in both lines.
  auto idDec = [&](int type, int index) {
    const Node& x = sys.node(type, index);
    return fmt("%s/%d-%lld", std::string(nodeTypeName(type)).c_str(), topoIdSystem(x.id),
               static_cast<long long>(topoIdLocal(x.id)));
  };
  if (gg != g) pxn = " using PXN via " + idDec(GPU, gg) + ", ";
  if (d.distance > d.level) {
    d.reason =
        fmt("distance %s > level %s (%s)", nameOf(d.distance).c_str(), nameOf(d.level).c_str(), levelWhy.c_str());
    d.ncclLog = fmt("GPU Direct RDMA Disabled for %s (rank %d) - %s (%sdistance %d > %d)", idDec(GPU, g).c_str(), rank,
                    idDec(NET, n).c_str(), pxn.c_str(), d.distance, d.level);
    return d;
  }
  int c = localCpu(sys, gg);
  d.mode =
      (c >= 0 && gpuPath(sys, gg, CPU, c).type == PATH_C2C && d.distance != PATH_P2C) ? GdrMode::Pci : GdrMode::Default;
  d.reason =
      fmt("distance %s <= level %s (%s)%s%s", nameOf(d.distance).c_str(), nameOf(d.level).c_str(), levelWhy.c_str(),
          d.proxyRank >= 0 ? (", done by PXN relay rank " + std::to_string(d.proxyRank)).c_str() : "",
          d.mode == GdrMode::Pci ? ", PCI BAR mapping forced (GPU reaches its CPU by C2C)" : "");
  d.ncclLog = fmt("GPU Direct RDMA Enabled for %s (rank %d) - %s (%sdistance %d <= %d, read %d, mode %s)",
                  idDec(GPU, g).c_str(), rank, idDec(NET, n).c_str(), pxn.c_str(), d.distance, d.level, read ? 1 : 0,
                  d.mode == GdrMode::Pci ? "PCI" : "Default");
  return d;
}

bool needsFlush(const System& sys, int rank, int netDev) {
  int g = sys.gpuIndexOfRank(rank);
  int n = sys.netIndexOfDev(netDev);
  if (g < 0 || n < 0) return false;
  if (sys.node(GPU, g).gpu.sm < 90) return true;
  int c = localCpu(sys, g);
  return gpuPath(sys, g, NET, n).type <= PATH_PXB && c >= 0 && gpuPath(sys, g, CPU, c).type == PATH_C2C;
}

void computePaths(System& sys, const TopoSettings& settings) {
  sys.clearPaths();
  // Paths to every base node of these types; each base is independent of the others.
  for (int type : {CPU, GPU, NIC, NET, NVS})
    for (int i = 0; i < sys.count(type); ++i) setPaths(sys, settings, type, i);
  // Make sure every node has (possibly empty) tables for every type, even with no base of that type.
  for (auto& nodes : sys.nodes)
    for (auto& n : nodes)
      for (int type : {CPU, GPU, NIC, NET, NVS})
        if (n.paths[type].size() != static_cast<std::size_t>(sys.count(type)))
          n.paths[type].assign(static_cast<std::size_t>(sys.count(type)), Path{});

  // 1. GPU pairs without P2P go through the destination's local CPU.
  for (int g = 0; g < sys.count(GPU); ++g) {
    for (int p = 0; p < sys.count(GPU); ++p) {
      P2pDecision d = checkP2p(sys, settings, sys.node(GPU, p).gpu.rank, sys.node(GPU, g).gpu.rank);
      if (!d.p2p) {
        int c = localCpu(sys, g);
        if (c < 0) throw TopologyError("no CPU close to " + sys.idString(GPU, g));
        addInterStep(sys, CPU, c, GPU, p, GPU, g);
      }
    }
  }
  // 2. A GPU on C2C whose NIC reaches the same CPU over PCI gets the P2C type for its closest NETs.
  for (int g = 0; g < sys.count(GPU); ++g) {
    int c = localCpu(sys, g);
    if (c < 0) continue;
    for (int n : localNodes(sys, GPU, g, NET)) {
      if (mergePathType(gpuPath(sys, g, CPU, c).type, sys.node(NET, n).paths[CPU][static_cast<std::size_t>(c)].type) ==
          PATH_P2C) {
        Path& gn = pathOf(sys, GPU, g, NET, n);
        gn.type = std::min<int>(PATH_P2C, gn.type);
        Path& ng = pathOf(sys, NET, n, GPU, g);
        ng.type = std::min<int>(PATH_P2C, ng.type);
      }
    }
  }
  // 3. PXN, then 4. GDR fallback, per NET and GPU in NCCL's order (later decisions see earlier rewrites). NCCL asks
  // for the NET's owner again for every GPU; the index gives the same answer without recomputing it unless a rewrite
  // changed a GPU's local NETs or a NET's local GPUs.
  LocalNetIndex owners(sys, settings);
  for (int n = 0; n < sys.count(NET); ++n) {
    for (int g = 0; g < sys.count(GPU); ++g) {
      if (!settings.pxnDisable) {
        int peer = owners.localGpuOfNet(n);
        if (peer != g && peer != -1) {
          int pxnType = settings.pxnC2c ? PATH_P2C : PATH_PXB;
          const Path& peerNet = gpuPath(sys, peer, NET, n);
          const Path& gNet = gpuPath(sys, g, NET, n);
          if (peerNet.type <= pxnType && gpuPath(sys, peer, GPU, g).type <= PATH_NVL &&
              topoIdSystem(sys.node(GPU, peer).id) == topoIdSystem(sys.node(GPU, g).id) &&
              (peerNet.bw > gNet.bw || gNet.type > PATH_PXN)) {
            addInterStep(sys, GPU, peer, GPU, g, NET, n);
            owners.gpuPathsChanged(g);
          }
        }
      }
      if (gpuPath(sys, g, NET, n).type < PATH_PHB) {
        GdrDecision gdr = checkGdr(sys, settings, sys.node(GPU, g).gpu.rank, sys.node(NET, n).net.dev, false);
        if (gdr.mode == GdrMode::Disabled) {
          int c = localCpu(sys, g);
          if (c < 0) throw TopologyError("no CPU close to " + sys.idString(GPU, g));
          addInterStep(sys, CPU, c, NET, n, GPU, g);
          addInterStep(sys, CPU, c, GPU, g, NET, n);
          owners.netPathsChanged(n);
          owners.gpuPathsChanged(g);
        }
      }
    }
  }
}

TrimResult trimSystem(System& sys, const TopoSettings& settings, int rank, int nRanks) {
  TrimResult r;
  int ngpus = sys.count(GPU);
  std::vector<int> domains(static_cast<std::size_t>(ngpus));
  std::vector<std::int64_t> ids(static_cast<std::size_t>(ngpus));
  int myDomain = 0;
  for (int g = 0; g < ngpus; ++g) {
    domains[static_cast<std::size_t>(g)] = g;
    ids[static_cast<std::size_t>(g)] = sys.node(GPU, g).id;
    for (int p = 0; p < g; ++p)
      if (gpuPath(sys, g, GPU, p).type < PATH_NET)
        domains[static_cast<std::size_t>(g)] =
            std::min(domains[static_cast<std::size_t>(g)], domains[static_cast<std::size_t>(p)]);
    if (sys.node(GPU, g).gpu.rank == rank) myDomain = domains[static_cast<std::size_t>(g)];
  }
  for (int i = 0; i < ngpus; ++i) {
    if (domains[static_cast<std::size_t>(i)] == myDomain) continue;
    int g = sys.indexOf(GPU, ids[static_cast<std::size_t>(i)]);
    r.removedRanks.push_back(sys.node(GPU, g).gpu.rank);
    sys.removeNode(GPU, g);
  }
  sys.inter = sys.count(GPU) != nRanks;
  r.inter = sys.inter;
  r.reason = fmt("%d GPU(s) reachable from rank %d without the network, %d removed; %d local GPU(s) %s %d rank(s): %s",
                 sys.count(GPU), rank, static_cast<int>(r.removedRanks.size()), sys.count(GPU),
                 sys.inter ? "!=" : "==", nRanks, sys.inter ? "the network is used" : "single node, no network");
  computePaths(sys, settings);
  return r;
}

NetDevChoice netDevForPeer(const System& sys, const TopoSettings& settings, int rank, int channel, int peerDev) {
  NetDevChoice c;
  LocalNetChoice mine = localNet(sys, settings, rank, channel);
  c.netDev = mine.netDev;
  c.proxyRank = rank;
  c.reason = "own local NIC";
  int pxnLevel = settings.pxnDisable ? 0 : settings.p2pPxnLevel;
  if (settings.crossNic != 0 && pxnLevel == 0) return c;
  // The GPU on our node with the peer's NVML index (the first, as NCCL's ncclTopoDevToRank): the NIC it would use is
  // the one on the peer's rail.
  int equivalent = -1;
  for (int g = 0; g < sys.count(GPU) && equivalent < 0; ++g)
    if (sys.node(GPU, g).gpu.dev == peerDev) equivalent = g;
  if (equivalent < 0) return c;
  int railNet = localNet(sys, settings, sys.node(GPU, equivalent).gpu.rank, channel).netDev;
  if (settings.crossNic == 0) {  // then the PXN levels below still choose a proxy, as in NCCL
    c.netDev = railNet;
    c.reason = "NCCL_CROSS_NIC=0: the NIC of the peer's rail";
  }
  int g = sys.gpuIndexOfRank(rank);
  int n = sys.netIndexOfDev(railNet);
  if (pxnLevel == 1) {
    if (gpuPath(sys, g, NET, n).type <= PATH_PXN) {
      c.netDev = railNet;
      c.proxyRank = intermediateRank(sys, rank, railNet);
      c.reason = "PXN level 1: the rail NIC is reachable with a path <= PXN";
    }
  } else if (pxnLevel == 2) {
    int owner = localGpuOfNet(sys, settings, n);
    if (owner >= 0) {
      int maxType = settings.pxnC2c ? PATH_P2C : PATH_PXB;
      if (gpuPath(sys, owner, GPU, g).type <= PATH_NVL && gpuPath(sys, owner, NET, n).type <= maxType) {
        c.netDev = railNet;
        c.proxyRank = sys.node(GPU, owner).gpu.rank;
        c.reason = owner == g ? "the rail NIC is our own"
                              : "PXN: rank " + std::to_string(c.proxyRank) +
                                    " owns the rail NIC and is NVLink-connected to us";
      }
    }
  }
  return c;
}

}  // namespace nns::topo
