// Runs the topology pipeline in NCCL's order and renders its decisions as text, NCCL log lines and Graphviz DOT.
#include "nns/topology/analysis.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <sstream>
#include <tuple>

namespace nns::topo {

namespace {

std::string fmt(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* format, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, format);
  std::vsnprintf(buf, sizeof buf, format, ap);
  va_end(ap);
  return buf;
}

std::string pn(int type) {
  return std::string(pathTypeName(type));
}

std::string devList(std::vector<int> devs) {
  std::sort(devs.begin(), devs.end());
  std::string out;
  for (std::size_t i = 0; i < devs.size();) {
    std::size_t j = i;
    while (j + 1 < devs.size() && devs[j + 1] == devs[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j > i ? fmt("%d-%d", devs[i], devs[j]) : std::to_string(devs[i]);
    i = j + 1;
  }
  return out.empty() ? "-" : out;
}

// PCI leaves of a GPU (0x03) or NIC (0x02) class that nothing was added to: what NCCL fills in from NVML and the
// net plugin, and what a partial file needs --gpu-sm / --nic-speed for.
void countBareLeaves(const XmlElement& e, int& gpus, int& nics) {
  if (e.name == "pci" && !e.child("gpu") && !e.child("nic") && !e.child("pci")) {
    if (const std::string* cls = e.attr("class")) {
      if (cls->rfind("0x03", 0) == 0) ++gpus;
      if (cls->rfind("0x02", 0) == 0) ++nics;
    }
  }
  for (const auto& c : e.children) countBareLeaves(c, gpus, nics);
}

}  // namespace

Analysis analyze(XmlDocument doc, const AnalysisOptions& options) {
  Analysis a;
  a.sourceName = doc.sourceName;
  a.settings = options.settings;
  a.system = buildSystem(doc);
  a.xml = std::move(doc.root);
  System& sys = a.system;
  const TopoSettings& st = options.settings;
  computePaths(sys, st);
  if (sys.count(GPU) == 0) {
    a.trim.reason = "no GPU in the topology: nothing to trim, no decisions or searches";
  } else {
    int rank = options.rank >= 0 ? options.rank : sys.node(GPU, 0).gpu.rank;
    if (sys.gpuIndexOfRank(rank) < 0) throw TopologyError("--rank " + std::to_string(rank) + ": no GPU has that rank");
    // Every GPU of the file is a rank of the communicator: a smaller communicator is a contradiction, not a reason to
    // use the network. Without --nranks: twice the GPUs (another node as large), and at least every rank + 1.
    int maxRank = -1;
    for (const Node& g : sys.nodes[GPU]) maxRank = std::max(maxRank, g.gpu.rank);
    int nRanks = options.nRanks > 0 ? options.nRanks : std::max(2 * sys.count(GPU), maxRank + 1);
    if (options.nRanks > 0 && maxRank >= nRanks)
      throw TopologyError("--nranks " + std::to_string(nRanks) + ": the topology has a GPU with rank " +
                          std::to_string(maxRank));
    a.trim = trimSystem(sys, st, rank, nRanks);
    if (a.trim.inter && sys.count(NET) == 0)
      a.trim.reason += "; but the topology has no NET: no network decisions or search";
  }
  a.fusion = computeFusionGroups(a.xml, st.netMergeLevel, options.forceMerge, a.sourceName, &a.fusionNotes);
  a.fusingPlugin = options.fusingPlugin;
  a.pluginMakesVNics = options.pluginMakesVNics;
  int ng = sys.count(GPU), nn = sys.count(NET);
  for (int g = 0; g < ng; ++g) a.gpuRanks.push_back(sys.node(GPU, g).gpu.rank);
  for (int n = 0; n < nn; ++n) a.netDevs.push_back(sys.node(NET, n).net.dev);
  a.p2p.assign(static_cast<std::size_t>(ng), {});
  for (int g = 0; g < ng; ++g)
    for (int p = 0; p < ng; ++p)
      a.p2p[static_cast<std::size_t>(g)].push_back(
          checkP2p(sys, st, a.gpuRanks[static_cast<std::size_t>(g)], a.gpuRanks[static_cast<std::size_t>(p)]));
  if (nn > 0) {
    a.gdrRead.assign(static_cast<std::size_t>(ng), {});
    a.gdrWrite.assign(static_cast<std::size_t>(ng), {});
    a.localNets.assign(static_cast<std::size_t>(ng), {});
    for (int g = 0; g < ng; ++g) {
      int rank = a.gpuRanks[static_cast<std::size_t>(g)];
      for (int n = 0; n < nn; ++n) {
        a.gdrRead[static_cast<std::size_t>(g)].push_back(
            checkGdr(sys, st, rank, a.netDevs[static_cast<std::size_t>(n)], true));
        a.gdrWrite[static_cast<std::size_t>(g)].push_back(
            checkGdr(sys, st, rank, a.netDevs[static_cast<std::size_t>(n)], false));
        if (sys.node(GPU, g).paths[NET][static_cast<std::size_t>(n)].type == PATH_PXN)
          a.pxn.push_back({rank, a.netDevs[static_cast<std::size_t>(n)],
                           intermediateRank(sys, rank, a.netDevs[static_cast<std::size_t>(n)])});
      }
      for (int c = 0; c < std::max(1, options.channels); ++c)
        a.localNets[static_cast<std::size_t>(g)].push_back(localNet(sys, st, rank, c));
    }
    LocalNetIndex owners(sys, st);
    for (int n = 0; n < nn; ++n) {
      int owner = owners.localGpuOfNet(n);
      a.netLocalGpuRank.push_back(owner >= 0 ? sys.node(GPU, owner).gpu.rank : -1);
    }
  }
  if (options.search && ng > 0) {
    bool savedInter = sys.inter;
    std::vector<bool> modes{false};
    if (nn > 0) modes.push_back(true);
    for (bool inter : modes) {
      sys.inter = inter;
      searchInit(sys);
      SearchResult r;
      r.inter = inter;
      r.maxBw = sys.maxBw;
      r.totalBw = sys.totalBw;
      r.ring.id = 0;
      r.ring.pattern = PATTERN_RING;
      r.ring.minChannels = 1;
      r.ring.maxChannels = kMaxChannels / 2;
      computeGraph(sys, st, r.ring);
      r.tree.id = 1;
      r.tree.pattern = PATTERN_BALANCED_TREE;
      r.tree.minChannels = r.tree.maxChannels = r.ring.nChannels;
      computeGraph(sys, st, r.tree);
      a.searches.push_back(std::move(r));
    }
    sys.inter = savedInter;
  }
  searchInit(sys);  // maxBw/totalBw of the trimmed system, as NCCL prints it
  return a;
}

std::vector<std::string> systemLogLines(const System& sys) {
  std::vector<std::string> out;
  out.push_back(fmt("=== System : maxBw %2.1f totalBw %2.1f ===", sys.maxBw, sys.totalBw));
  struct Printer {
    const System& sys;
    std::vector<std::string>& out;
    void rec(int type, int index, int prevType, int prevIndex, const std::string& prefix, int depth) {
      const Node& n = sys.node(type, index);
      std::string line = prefix + sys.idString(type, index);
      if (type == GPU)
        line += fmt(" (%d)", n.gpu.rank);
      else if (type == CPU)
        line += fmt(" (%d/%d/%d)", static_cast<int>(n.cpu.arch), static_cast<int>(n.cpu.vendor),
                    ncclCpuModelCode(n.cpu.model));
      else if (type == PCI)
        line += fmt(" (%llx)", static_cast<unsigned long long>(n.pciDevice));
      out.push_back(line);
      if (depth > 64) return;
      std::string pad(prefix.size(), ' ');
      for (const Link& l : n.links) {
        if (l.type == LINK_LOC) {
          out.push_back(pad + fmt("+ %s[%2.1f] - ", std::string(linkTypeName(l.type)).c_str(), l.bw) +
                        sys.idString(l.remType, l.remIndex));
        } else if (l.type != LINK_PCI || !(l.remType == prevType && l.remIndex == prevIndex)) {
          std::string head = pad + fmt("+ %s[%2.1f] - ", std::string(linkTypeName(l.type)).c_str(), l.bw);
          if (l.type == LINK_PCI) {
            rec(l.remType, l.remIndex, type, index, head, depth + 1);
          } else if (l.remType == NET) {
            const NetInfo& net = sys.node(NET, l.remIndex).net;
            out.push_back(
                head + sys.idString(NET, l.remIndex) +
                fmt(" (%d/%llx/%d/%f)", net.coll, static_cast<unsigned long long>(net.asic), net.port, net.bw));
          } else {
            out.push_back(head + sys.idString(l.remType, l.remIndex));
          }
        }
      }
    }
  } printer{sys, out};
  for (int c = 0; c < sys.count(CPU); ++c) printer.rec(CPU, c, -1, -1, "", 0);
  out.push_back("==========================================");
  return out;
}

std::vector<std::string> pathLogLines(const System& sys) {
  std::vector<std::string> out;
  for (int type : {GPU, NET}) {
    for (int i = 0; i < sys.count(type); ++i) {
      std::string line = sys.idString(type, i) + " :";
      for (int t = 0; t < kNodeTypeCount; ++t) {
        if (t == NIC || t == PCI) continue;
        const auto& paths = sys.node(type, i).paths[t];
        for (int j = 0; j < static_cast<int>(paths.size()); ++j) {
          const Path& p = paths[static_cast<std::size_t>(j)];
          line += sys.idString(t, j) + fmt(" (%d/%.1f/%s) ", p.count(), p.bw, pn(p.type).c_str());
        }
      }
      out.push_back(line);
    }
  }
  return out;
}

std::vector<std::string> transportLogLines(const Analysis& a, const std::string& netName) {
  std::vector<std::string> out;
  const System& sys = a.system;
  int n = sys.count(GPU);
  // Ring neighbours inside the node (channel 0 of the single-node ring): P2P when allowed (cuMem is NCCL's default
  // since 2.19, hence CUMEM), else shared memory through the CPU.
  if (!a.searches.empty() && a.searches[0].ring.nChannels > 0 && n > 1) {
    const Graph& ring = a.searches[0].ring;
    for (int i = 0; i < n; ++i) {
      int from = ring.intra[static_cast<std::size_t>(i)];
      int to = ring.intra[static_cast<std::size_t>((i + 1) % n)];
      P2pDecision d = checkP2p(sys, a.settings, from, to);
      int fromDev = sys.node(GPU, sys.gpuIndexOfRank(from)).gpu.dev;
      int toDev = sys.node(GPU, sys.gpuIndexOfRank(to)).gpu.dev;
      out.push_back(fmt("Channel 00/0 : %d[%d] -> %d[%d] via %s", from, fromDev, to, toDev,
                        d.p2p ? (d.read ? "P2P/CUMEM/read" : "P2P/CUMEM") : "SHM/direct/direct"));
    }
  }
  if (sys.count(NET) == 0) return out;
  for (int g = 0; g < n; ++g) {
    const Node& gpu = sys.node(GPU, g);
    int peer = gpu.gpu.rank + n;
    NetDevChoice send = netDevForPeer(sys, a.settings, gpu.gpu.rank, 0, gpu.gpu.dev);
    GdrDecision sendGdr = checkGdr(sys, a.settings, gpu.gpu.rank, send.netDev, true);
    out.push_back(fmt("Channel 00/0 : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s%s", gpu.gpu.rank, gpu.gpu.dev, peer,
                      gpu.gpu.dev, netName.c_str(), send.netDev,
                      send.proxyRank != gpu.gpu.rank ? fmt("(%d)", send.proxyRank).c_str() : "",
                      sendGdr.mode != GdrMode::Disabled ? "/GDRDMA" : "", sendGdr.mode == GdrMode::Pci ? "(PCI)" : ""));
    // Receives stay on our own local NIC: PXN only rewrites the GPU->NIC direction.
    int recvDev = localNet(sys, a.settings, gpu.gpu.rank, 0).netDev;
    GdrDecision recvGdr = checkGdr(sys, a.settings, gpu.gpu.rank, recvDev, false);
    out.push_back(fmt("Channel 00/0 : %d[%d] -> %d[%d] [receive] via NET/%s/%d%s%s", peer, gpu.gpu.dev, gpu.gpu.rank,
                      gpu.gpu.dev, netName.c_str(), recvDev, recvGdr.mode != GdrMode::Disabled ? "/GDRDMA" : "",
                      recvGdr.mode == GdrMode::Pci ? "(PCI)" : ""));
  }
  return out;
}

std::string formatSummary(const Analysis& a) {
  const System& sys = a.system;
  std::ostringstream o;
  int numa = sys.count(CPU);
  o << "Topology " << a.sourceName << (sys.name.empty() ? "" : " (" + sys.name + ")") << "\n";
  o << fmt("  %d GPU(s), %d NET(s) on %d NIC(s), %d NUMA node(s) (CPU), %d PCI switch(es), %d NVSwitch node(s)\n",
           sys.count(GPU), sys.count(NET), sys.count(NIC), numa, sys.count(PCI), sys.count(NVS));
  for (int c = 0; c < numa; ++c) {
    const CpuInfo& cpu = sys.node(CPU, c).cpu;
    static const char* kArch[] = {"unknown", "x86_64", "ppc64", "arm64"};
    static const char* kVendor[] = {"", " Intel", " AMD", " Zhaoxin"};
    o << fmt("  CPU numa %d: %s%s, affinity %s\n", cpu.numaId, kArch[static_cast<int>(cpu.arch)],
             kVendor[static_cast<int>(cpu.vendor)], cpu.affinity.empty() ? "-" : cpu.affinity.c_str());
  }
  o << "Trim: " << a.trim.reason << "\n";
  if (!a.trim.removedRanks.empty()) {
    o << "  removed ranks:";
    for (int r : a.trim.removedRanks) o << ' ' << r;
    o << "\n";
  }
  int bareGpus = 0, bareNics = 0;
  countBareLeaves(a.xml, bareGpus, bareNics);
  o << "\nGPUs (NCCL order):\n";
  if (sys.count(GPU) == 0) {
    if (bareGpus > 0)
      o << fmt("  none: %d GPU-class PCI device(s) have no <gpu> (NCCL adds it from NVML): give --gpu-sm\n", bareGpus);
    else
      o << "  none: no GPU in the topology\n";
  }
  for (int g = 0; g < sys.count(GPU); ++g) {
    const Node& n = sys.node(GPU, g);
    int c = localCpu(sys, g);
    o << fmt("  rank %d  dev %d  %s  sm %d  gdr %d  local CPU numa %d\n", n.gpu.rank, n.gpu.dev,
             sys.idString(GPU, g).c_str(), n.gpu.sm, n.gpu.gdr, c >= 0 ? sys.node(CPU, c).cpu.numaId : -1);
  }
  o << "\nNICs:\n";
  if (sys.count(NET) == 0) {
    if (bareNics > 0)
      o << fmt(
          "  none: %d NIC-class PCI device(s) have no <nic><net> (NCCL adds it from the net plugin): give "
          "--nic-speed\n",
          bareNics);
    else
      o << "  none: no NET in the topology\n";
  }
  for (int n = 0; n < sys.count(NET); ++n) {
    const NetInfo& net = sys.node(NET, n).net;
    const std::string pci = netBusId(sys, n);
    o << fmt("  dev %d  %-12s %s  %.1f GB/s  port %d  guid 0x%llx  gdr %d  maxconn %d  pci %s\n", net.dev,
             net.name.empty() ? "-" : net.name.c_str(), sys.idString(NET, n).c_str(), net.bw, net.port,
             static_cast<unsigned long long>(net.asic), net.gdr, net.maxChannels, pci.empty() ? "-" : pci.c_str());
  }
  if (!a.localNets.empty()) {
    o << "\nNIC used by each GPU (ncclTopoGetLocalNet, channels 0.." << a.localNets[0].size() - 1 << "):\n";
    for (int g = 0; g < sys.count(GPU); ++g) {
      const auto& choices = a.localNets[static_cast<std::size_t>(g)];
      o << fmt("  rank %d -> NET", a.gpuRanks[static_cast<std::size_t>(g)]);
      for (const auto& c : choices) o << ' ' << c.netDev;
      o << fmt("   local {%s} (%s)\n      why: %s\n", devList(choices[0].localNetDevs).c_str(),
               pn(choices[0].localPathType).c_str(), choices[0].reason.c_str());
    }
    o << "  NET owner GPU (ncclTopoGetLocalGpu):";
    for (std::size_t n = 0; n < a.netDevs.size(); ++n) o << fmt(" net%d->r%d", a.netDevs[n], a.netLocalGpuRank[n]);
    o << "\n\nGPU Direct RDMA (read = send side, write = receive side):\n";
    for (int g = 0; g < sys.count(GPU); ++g) {
      std::vector<int> rd, wr;
      for (std::size_t n = 0; n < a.netDevs.size(); ++n) {
        if (a.gdrRead[static_cast<std::size_t>(g)][n].mode != GdrMode::Disabled) rd.push_back(a.netDevs[n]);
        if (a.gdrWrite[static_cast<std::size_t>(g)][n].mode != GdrMode::Disabled) wr.push_back(a.netDevs[n]);
      }
      o << fmt("  rank %d: read {%s} write {%s}\n", a.gpuRanks[static_cast<std::size_t>(g)], devList(rd).c_str(),
               devList(wr).c_str());
      // One reason line per distinct reason keeps 8x8 machines readable; which GPU relays a PXN transfer is listed
      // in the PXN section, so it is left out here.
      auto shortReason = [](std::string why) {
        std::size_t relay = why.find(", done by PXN relay rank");
        if (relay != std::string::npos) {
          std::size_t end = why.find(',', relay + 2);
          why.replace(relay, end == std::string::npos ? std::string::npos : end - relay, ", done by the PXN relay");
        }
        return why;
      };
      std::map<std::string, std::vector<int>> reasons;
      for (std::size_t n = 0; n < a.netDevs.size(); ++n)
        reasons["read: " + shortReason(a.gdrRead[static_cast<std::size_t>(g)][n].reason)].push_back(a.netDevs[n]);
      for (std::size_t n = 0; n < a.netDevs.size(); ++n)
        reasons["write: " + shortReason(a.gdrWrite[static_cast<std::size_t>(g)][n].reason)].push_back(a.netDevs[n]);
      for (const auto& [why, devs] : reasons) o << "      nets " << devList(devs) << " " << why << "\n";
    }
    o << "\nPXN (GPU reaches a NIC through an NVLink peer):\n";
    if (a.pxn.empty()) o << "  none\n";
    std::map<int, std::vector<std::pair<int, int>>> byRank;
    for (const auto& p : a.pxn) byRank[p.rank].emplace_back(p.netDev, p.relayRank);
    for (const auto& [rank, list] : byRank) {
      o << fmt("  rank %d:", rank);
      for (const auto& [dev, relay] : list) o << fmt(" net %d via r%d;", dev, relay);
      o << "\n";
    }
    if (!a.pxn.empty())
      o << "      why: the GPU that owns the NIC reaches it at <= " << (a.settings.pxnC2c ? "P2C" : "PXB")
        << ", is NVLink-connected to us, and our own path is slower or worse than PXN\n";
  }
  o << "\nNIC fusion (vNIC groups at NCCL_NET_MERGE_LEVEL):\n";
  if (a.fusion.empty()) o << "  none (no two devices close enough)\n";
  for (const auto& f : a.fusion) {
    o << "  {";
    for (std::size_t i = 0; i < f.devs.size(); ++i) o << (i ? "," : "") << f.devs[i];
    o << "}: " << f.reason << "\n";
  }
  for (const auto& note : a.fusionNotes) o << "  note: " << note << "\n";
  if (!a.fusion.empty() && !a.fusingPlugin.empty() && !a.pluginMakesVNics)
    o << "  note: " << a.fusingPlugin
      << ", whose devices these are, cannot make virtual NICs (no makeVDevice):\n"
         "  NCCL uses the devices as listed, as shown here.\n";
  else if (!a.fusion.empty())
    o << "  note: NCCL fuses them only when the net plugin can make virtual NICs (makeVDevice: "
      << (a.fusingPlugin.empty() ? "NCCL's IB can, its Socket cannot"
                                 : a.fusingPlugin + ", whose devices these are, can")
      << ");\n"
         "  it then routes, decides GDR and PXN and searches rings on each vNIC as one NET of the summed speed. The\n"
         "  NETs, paths, decisions and graphs shown here are for the physical devices (not modelled: a vNIC's PCI\n"
         "  placement is the plugin's), which is NCCL's result with a plugin that cannot fuse.\n";
  if (sys.count(GPU) > 1) {
    o << "\nP2P between GPUs (p2p/read/intermediate rank):\n";
    std::map<std::string, std::vector<std::string>> groups;
    for (int g = 0; g < sys.count(GPU); ++g)
      for (int p = 0; p < sys.count(GPU); ++p) {
        if (g == p) continue;
        const auto& d = a.p2p[static_cast<std::size_t>(g)][static_cast<std::size_t>(p)];
        groups[fmt("%d/%d/%d  ", d.p2p, d.read, d.intermediateRank) + d.reason].push_back(
            fmt("%d->%d", a.gpuRanks[static_cast<std::size_t>(g)], a.gpuRanks[static_cast<std::size_t>(p)]));
      }
    for (const auto& [why, pairs] : groups) {
      o << "  " << why << "\n      pairs:";
      for (std::size_t i = 0; i < pairs.size(); ++i) {
        if (i == 16) {
          o << " ... (" << pairs.size() << " pairs)";
          break;
        }
        o << ' ' << pairs[i];
      }
      o << "\n";
    }
  }
  return o.str();
}

std::string formatPathMatrix(const Analysis& a) {
  const System& sys = a.system;
  std::ostringstream o;
  auto label = [&](int type, int i) {
    if (type == GPU) return fmt("r%d", sys.node(GPU, i).gpu.rank);
    if (type == NET) return fmt("net%d", sys.node(NET, i).net.dev);
    return fmt("cpu%d", sys.node(CPU, i).cpu.numaId);
  };
  std::vector<std::pair<int, int>> cols;
  for (int t : {GPU, NET, CPU})
    for (int i = 0; i < sys.count(t); ++i) cols.emplace_back(t, i);
  o << "Path matrix (row -> column: type/bandwidth GB/s)\n" << fmt("%-7s", "");
  for (auto [t, i] : cols) o << fmt(" %10s", label(t, i).c_str());
  o << "\n";
  for (int t : {GPU, NET}) {
    for (int i = 0; i < sys.count(t); ++i) {
      o << fmt("%-7s", label(t, i).c_str());
      for (auto [ct, ci] : cols) {
        const Path& p = sys.node(t, i).paths[ct][static_cast<std::size_t>(ci)];
        o << fmt(" %10s", (pn(p.type) + "/" + fmt("%.1f", p.type == PATH_DIS ? 0.0f : p.bw)).c_str());
      }
      o << "\n";
    }
  }
  return o.str();
}

std::string formatSearches(const Analysis& a, int rank, bool rankGiven) {
  const System& sys = a.system;
  std::ostringstream o;
  for (const auto& r : a.searches) {
    o << (r.inter ? "Search with the network (several nodes)" : "Search within one node")
      << fmt(": maxBw %.1f totalBw %.1f\n", r.maxBw, r.totalBw);
    for (const Graph* g : {&r.ring, &r.tree}) {
      o << "  " << patternName(g->pattern) << (g->fallback ? " (no path found: simple order fallback)" : "") << "\n";
      // The first attempts (where the search started) and the last (what decided it): a search that lowers its speed
      // down the whole list makes hundreds of them, a line of tens of thousands of characters. --json has them all.
      o << "    tried:";
      constexpr std::size_t kShownAtEachEnd = 6;
      const std::size_t count = g->attempts.size();
      for (std::size_t i = 0; i < count; ++i) {
        if (count > 2 * kShownAtEachEnd && i == kShownAtEachEnd) {
          o << fmt(" [... %zu more; --json lists every attempt]", count - 2 * kShownAtEachEnd);
          i = count - kShownAtEachEnd;
        }
        const SearchAttempt& at = g->attempts[i];
        o << fmt(" [%s %s/%s bw %g/%g same %d xnic %d -> best %d%s%s]", at.pass == 2 ? "p2" : "p1",
                 pn(at.typeIntra).c_str(), pn(at.typeInter).c_str(), at.bwIntra, at.bwInter, at.sameChannels,
                 at.crossNic, at.bestChannels, at.outcome.empty() ? "" : " ", at.outcome.c_str());
      }
      o << "\n";
      for (const auto& line : graphLogLines(sys, *g)) o << "    " << line << "\n";
      int n = sys.count(GPU);
      o << "    ranks:";
      for (int c = 0; c < g->nChannels; ++c) {
        o << "\n      ch" << c << ":";
        if (r.inter) o << " NET/" << topoIdLocal(g->inter[static_cast<std::size_t>(2 * c)]);
        for (int i = 0; i < n; ++i) o << ' ' << g->intra[static_cast<std::size_t>(c * n + i)];
        if (r.inter) o << " NET/" << topoIdLocal(g->inter[static_cast<std::size_t>(2 * c + 1)]);
      }
      o << "\n";
    }
    // NCCL prints these per rank: whose they are is said (they read as the whole job's otherwise).
    o << "  Ring/Trees lines for rank " << rank
      << (rankGiven ? fmt(" (--rank %d):\n", rank)
                    : " (the first GPU in NCCL's order; --rank R shows another rank's):\n");
    for (const auto& line : ringLogLines(sys, r.ring, rank)) o << "    " << line << "\n";
    o << "    " << treeLogLine(sys, r.tree, rank) << "\n";
    if (r.inter)
      o << "    (this node only: a channel's head (first GPU) also has a tree peer on another node, which depends on "
           "the node's index; NCCL prints that rank where -1 stands here, and Ring shows the other nodes as NET)\n";
  }
  return o.str();
}

std::string netBusId(const System& sys, int n) {
  if (!sys.node(NET, n).net.busId.empty()) return sys.node(NET, n).net.busId;
  for (const Link& link : sys.node(NET, n).links)
    if (link.remType == NIC) return sys.node(NIC, link.remIndex).busId;
  return "";
}

std::string terminalSafe(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if ((byte < 0x20 && c != '\n' && c != '\t') || byte == 0x7f) {
      out += fmt("\\x%02x", byte);
    } else {
      out += c;
    }
  }
  return out;
}

namespace {

// Text inside a dot double-quoted string: the quote and the backslash escaped, control bytes as \xNN (shown as such).
std::string dotQuoted(std::string_view text) {
  std::string out;
  for (char c : terminalSafe(text)) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::string formatDot(const Analysis& a) {
  const System& sys = a.system;
  std::ostringstream o;
  auto id = [&](int t, int i) { return fmt("%s_%d", std::string(nodeTypeName(t)).c_str(), i); };
  auto label = [&](int t, int i) {
    const Node& n = sys.node(t, i);
    switch (t) {
      case GPU: return fmt("GPU rank %d\\ndev %d sm %d\\n%s", n.gpu.rank, n.gpu.dev, n.gpu.sm, n.busId.c_str());
      case NET:
        return fmt("NET %d %s\\n%.1f GB/s gdr %d", n.net.dev, dotQuoted(n.net.name).c_str(), n.net.bw, n.net.gdr);
      case CPU: return fmt("CPU numa %d", n.cpu.numaId);
      case NIC: return fmt("NIC\\n%s", n.busId.empty() ? "(virtual)" : n.busId.c_str());
      case NVS: return std::string("NVSwitch");
      default: return fmt("PCI switch\\n%s", n.busId.c_str());
    }
  };
  static const char* kShape[] = {"box", "ellipse", "hexagon", "octagon", "component", "doublecircle"};
  static const char* kColor[] = {"#76b900", "#dddddd", "#9ecae1", "#fdd0a2", "#c6dbef", "#fcbba1"};
  o << "digraph topology {\n  rankdir=TB;\n  node [style=filled, fontname=\"Helvetica\", fontsize=10];\n"
    << "  edge [fontname=\"Helvetica\", fontsize=9];\n";
  o << "  label=\"" << dotQuoted(a.sourceName)
    << ": links (solid), NIC used by each GPU on channel 0 (dashed, path type)\";\n";
  for (int t = 0; t < kNodeTypeCount; ++t)
    for (int i = 0; i < sys.count(t); ++i)
      o << "  " << id(t, i) << " [label=\"" << label(t, i) << "\", shape=" << kShape[t] << ", fillcolor=\"" << kColor[t]
        << "\"];\n";
  if (sys.count(CPU) > 1) {
    o << "  { rank=same;";
    for (int c = 0; c < sys.count(CPU); ++c) o << ' ' << id(CPU, c) << ';';
    o << " }\n";
  }
  // One undirected edge per linked pair; bidirectional links have the same bandwidth both ways in NCCL's model.
  for (int t = 0; t < kNodeTypeCount; ++t)
    for (int i = 0; i < sys.count(t); ++i)
      for (const Link& l : sys.node(t, i).links) {
        // Draw each pair once, from the upper layer (CPU) down to the lower one (NET), so dot lays the tree out
        // top-down: CPU, switches, GPUs and NICs, then NETs and the NVSwitch.
        static const int kLayer[] = {2, 1, 3, 0, 2, 3};
        auto key = [&](int type, int index) { return std::make_tuple(kLayer[type], type, index); };
        if (key(l.remType, l.remIndex) < key(t, i)) continue;
        if (l.remType == t && l.remIndex == i) continue;
        static const char* kLinkColor[] = {"gray", "#76b900", "", "purple", "black", "", "", "", "", "red", "blue"};
        o << "  " << id(t, i) << " -> " << id(l.remType, l.remIndex) << " [dir=none, color=\"" << kLinkColor[l.type]
          << "\", label=\"" << linkTypeName(l.type) << fmt(" %.1f", l.bw) << "\"";
        if (l.type == LINK_NVL) o << ", penwidth=2";
        if (l.type == LINK_SYS) o << ", constraint=false";
        o << "];\n";
      }
  if (!a.localNets.empty())
    for (int g = 0; g < sys.count(GPU); ++g) {
      const auto& c = a.localNets[static_cast<std::size_t>(g)][0];
      const Path& p = sys.node(GPU, g).paths[NET][static_cast<std::size_t>(c.netIndex)];
      o << "  " << id(GPU, g) << " -> " << id(NET, c.netIndex)
        << " [style=dashed, color=\"#e6550d\", constraint=false, label=\"" << pn(p.type) << "\"];\n";
    }
  o << "}\n";
  return o.str();
}

}  // namespace nns::topo

namespace nns::topo {

XmlDocument makeSyntheticTopology(int gpus, int nics, int sockets) {
  // Each NIC sits with its share of the GPUs behind a PCI switch of its own: GPUs + 2 x NICs PCI nodes, which the
  // graph holds up to kMaxNodesPerType of (as NCCL_TOPO_MAX_NODES bounds NCCL's).
  if (gpus < 1 || nics < 1 || sockets < 1 || sockets > 64 || gpus + 2L * nics > kMaxNodesPerType)
    throw TopologyError(
        fmt("synthetic topology of %d GPUs, %d NICs and %d sockets: need at least one of each, at most "
            "64 sockets, and GPUs + 2 x NICs at most %d (a PCI device per GPU, a switch and a device "
            "per NIC; NCCL_TOPO_MAX_NODES)",
            gpus, nics, sockets, kMaxNodesPerType));
  XmlDocument doc;
  doc.sourceName = fmt("<synthetic %d GPUs %d NICs>", gpus, nics);
  doc.root.name = "system";
  doc.root.setAttr("version", "1");
  std::vector<XmlElement*> cpus;
  for (int s = 0; s < sockets; ++s) {
    XmlElement& cpu = doc.root.addChild("cpu");
    cpu.setAttr("numaid", std::to_string(s));
    cpu.setAttr("arch", "x86_64");
    cpu.setAttr("vendor", "GenuineIntel");
    cpu.setAttr("familyid", "6");
    cpu.setAttr("modelid", "143");
  }
  for (auto& c : doc.root.children) cpus.push_back(&c);
  auto pciAttrs = [](XmlElement& e, const std::string& busId, const char* cls) {
    e.setAttr("busid", busId);
    e.setAttr("class", cls);
    e.setAttr("link_speed", "32.0 GT/s PCIe");
    e.setAttr("link_width", "16");
  };
  int gpu = 0;
  for (int sw = 0; sw < nics; ++sw) {
    XmlElement& sBridge = cpus[static_cast<std::size_t>(sw * sockets / nics)]->addChild("pci");
    pciAttrs(sBridge, fmt("%04x:00:00.0", 0x100 + sw), "0x060400");
    int gpusHere = gpus / nics + (sw < gpus % nics ? 1 : 0);
    for (int k = 0; k < gpusHere; ++k, ++gpu) {
      XmlElement& p = sBridge.addChild("pci");
      pciAttrs(p, fmt("%04x:%02x:00.0", 0x1000 + gpu, 1), "0x030200");
      XmlElement& g = p.addChild("gpu");
      g.setAttr("dev", std::to_string(gpu));
      g.setAttr("sm", "90");
      g.setAttr("rank", std::to_string(gpu));
      g.setAttr("gdr", "1");
      XmlElement& nvl = g.addChild("nvlink");
      nvl.setAttr("target", "fffffff:ffff:ff");
      nvl.setAttr("count", "18");
      nvl.setAttr("tclass", "0x068000");
    }
    XmlElement& np = sBridge.addChild("pci");
    pciAttrs(np, fmt("%04x:%02x:00.0", 0x2000 + sw, 2), "0x020700");
    XmlElement& net = np.addChild("nic").addChild("net");
    net.setAttr("name", fmt("mlx5_%d", sw));
    net.setAttr("dev", std::to_string(sw));
    net.setAttr("speed", "400000");
    net.setAttr("port", "1");
    net.setAttr("guid", fmt("0x%x", 0x1000 + sw));
    net.setAttr("maxconn", "131072");
    net.setAttr("gdr", "1");
  }
  return doc;
}

}  // namespace nns::topo
