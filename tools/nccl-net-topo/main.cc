// nccl-net-topo: shows NCCL's view of a machine (from a topology file or discovery): NICs, GDR, PXN, paths, rings.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "nns/core/loader.hpp"
#include "nns/core/nccl_conf.hpp"
#include "nns/core/net.hpp"
#include "nns/tools/executable_dir.hpp"
#include "nns/tools/guarded_main.hpp"
#include "nns/tools/guid_text.hpp"
#include "nns/tools/parse_arguments.hpp"
#include "nns/tools/search_dirs.hpp"
#include "nns/topology/analysis.h"
#include "nns/topology/discovery.h"

namespace {

using nns::topo::Analysis;
using nns::topo::TopologyError;
using json = nlohmann::ordered_json;

std::string pathName(int t) {
  return std::string(nns::topo::pathTypeName(t));
}

// A float as JSON shows it: the shortest decimal that reads back as the same float (0.1; widened to a double as it is,
// it printed as 0.10000000149011612).
double jsonFloat(float v) {
  char text[32];
  const auto [end, error] = std::to_chars(text, text + sizeof text, v);
  if (error != std::errc()) return v;
  *end = '\0';
  return std::strtod(text, nullptr);
}

json graphJson(const Analysis& a, const nns::topo::Graph& g, bool inter) {
  json j;
  j["pattern"] = std::string(nns::topo::patternName(g.pattern));
  j["nChannels"] = g.nChannels;
  j["bwIntra"] = jsonFloat(g.bwIntra);
  j["bwInter"] = jsonFloat(g.bwInter);
  j["typeIntra"] = pathName(g.typeIntra);
  j["typeInter"] = pathName(g.typeInter);
  j["sameChannels"] = g.sameChannels;
  j["crossNic"] = g.crossNic;
  j["fallback"] = g.fallback;
  int n = a.system.count(nns::topo::GPU);
  json channels = json::array();
  for (int c = 0; c < g.nChannels; ++c) {
    json ch;
    json ranks = json::array();
    for (int i = 0; i < n; ++i) ranks.push_back(g.intra[static_cast<std::size_t>(c * n + i)]);
    ch["ranks"] = ranks;
    if (inter) {
      ch["netIn"] = nns::topo::topoIdLocal(g.inter[static_cast<std::size_t>(2 * c)]);
      ch["netOut"] = nns::topo::topoIdLocal(g.inter[static_cast<std::size_t>(2 * c + 1)]);
    }
    channels.push_back(ch);
  }
  j["channels"] = channels;
  json tried = json::array();
  for (const auto& at : g.attempts)
    tried.push_back({{"pass", at.pass},
                     {"pattern", at.pattern},
                     {"bwIntra", jsonFloat(at.bwIntra)},
                     {"bwInter", jsonFloat(at.bwInter)},
                     {"typeIntra", pathName(at.typeIntra)},
                     {"typeInter", pathName(at.typeInter)},
                     {"sameChannels", at.sameChannels},
                     {"crossNic", at.crossNic},
                     {"bestChannels", at.bestChannels},
                     {"outcome", at.outcome}});
  j["tried"] = tried;
  return j;
}

json analysisJson(const Analysis& a, bool withPaths) {
  using namespace nns::topo;
  const System& sys = a.system;
  json j;
  j["source"] = a.sourceName;
  j["trim"] = {{"reason", a.trim.reason}, {"removedRanks", a.trim.removedRanks}, {"inter", a.trim.inter}};
  json cpus = json::array();
  for (int c = 0; c < sys.count(CPU); ++c)
    cpus.push_back({{"id", sys.idString(CPU, c)},
                    {"numaId", sys.node(CPU, c).cpu.numaId},
                    {"affinity", sys.node(CPU, c).cpu.affinity}});
  j["cpus"] = cpus;
  json gpus = json::array();
  for (int g = 0; g < sys.count(GPU); ++g) {
    const Node& n = sys.node(GPU, g);
    json gj = {{"rank", n.gpu.rank}, {"dev", n.gpu.dev}, {"id", sys.idString(GPU, g)},
               {"busId", n.busId},   {"sm", n.gpu.sm},   {"gdr", n.gpu.gdr}};
    if (!a.localNets.empty()) {
      json nets = json::array();
      for (const auto& c : a.localNets[static_cast<std::size_t>(g)]) nets.push_back(c.netDev);
      gj["netPerChannel"] = nets;
      gj["netReason"] = a.localNets[static_cast<std::size_t>(g)][0].reason;
      gj["localNets"] = a.localNets[static_cast<std::size_t>(g)][0].localNetDevs;
      json gdr = json::array();
      for (std::size_t n2 = 0; n2 < a.netDevs.size(); ++n2) {
        const auto& r = a.gdrRead[static_cast<std::size_t>(g)][n2];
        const auto& w = a.gdrWrite[static_cast<std::size_t>(g)][n2];
        gdr.push_back({{"net", a.netDevs[n2]},
                       {"read", r.mode != GdrMode::Disabled},
                       {"write", w.mode != GdrMode::Disabled},
                       {"pciMode", w.mode == GdrMode::Pci},
                       {"flushOnReceive", w.mode != GdrMode::Disabled && needsFlush(sys, n.gpu.rank, a.netDevs[n2])},
                       {"readReason", r.reason},
                       {"writeReason", w.reason}});
      }
      gj["gdrPerNet"] = gdr;
    }
    json p2p = json::array();
    for (int p = 0; p < sys.count(GPU); ++p) {
      const auto& d = a.p2p[static_cast<std::size_t>(g)][static_cast<std::size_t>(p)];
      p2p.push_back({{"peer", a.gpuRanks[static_cast<std::size_t>(p)]},
                     {"p2p", d.p2p},
                     {"read", d.read},
                     {"intermediateRank", d.intermediateRank},
                     {"path", pathName(d.pathType)},
                     {"reason", d.reason}});
    }
    gj["p2p"] = p2p;
    gpus.push_back(gj);
  }
  j["gpus"] = gpus;
  json nets = json::array();
  for (int n = 0; n < sys.count(NET); ++n) {
    const NetInfo& net = sys.node(NET, n).net;
    nets.push_back({{"dev", net.dev},
                    {"name", net.name},
                    {"id", sys.idString(NET, n)},
                    {"busId", nns::topo::netBusId(sys, n)},
                    {"bw", jsonFloat(net.bw)},
                    {"port", net.port},
                    {"guid", net.asic},
                    {"guidHex", nns::tools::guidText(net.asic)},
                    {"gdr", net.gdr},
                    {"maxconn", net.maxChannels},
                    {"ownerRank", a.netLocalGpuRank.empty() ? -1 : a.netLocalGpuRank[static_cast<std::size_t>(n)]}});
  }
  j["nets"] = nets;
  json pxn = json::array();
  for (const auto& p : a.pxn) pxn.push_back({{"rank", p.rank}, {"net", p.netDev}, {"relayRank", p.relayRank}});
  j["pxn"] = pxn;
  json fusion = json::array();
  for (const auto& f : a.fusion) fusion.push_back({{"devs", f.devs}, {"reason", f.reason}});
  j["fusion"] = fusion;
  if (withPaths) {  // --no-paths leaves them out of the JSON too
    json paths = json::object();
    for (int t : {GPU, NET}) {
      for (int i = 0; i < sys.count(t); ++i) {
        json row = json::object();
        for (int ct : {GPU, NET, CPU})
          for (int ci = 0; ci < sys.count(ct); ++ci) {
            const Path& p = sys.node(t, i).paths[ct][static_cast<std::size_t>(ci)];
            row[sys.idString(ct, ci)] = {{"type", pathName(p.type)}, {"bw", jsonFloat(p.bw)}, {"hops", p.count()}};
          }
        paths[sys.idString(t, i)] = row;
      }
    }
    j["paths"] = paths;
  }
  json searches = json::array();
  for (const auto& s : a.searches)
    searches.push_back({{"inter", s.inter},
                        {"maxBw", jsonFloat(s.maxBw)},
                        {"totalBw", jsonFloat(s.totalBw)},
                        {"ring", graphJson(a, s.ring, s.inter)},
                        {"tree", graphJson(a, s.tree, s.inter)}});
  j["searches"] = searches;
  return j;
}

// The NICs as a net plugin reports them (NCCL_NET_PLUGIN semantics), which is where NCCL takes its NETs from: the
// plugin's own variables (NCCL_IB_HCA, NCCL_SOCKET_IFNAME, ...) apply. Loaded in this process; `netName` becomes the
// plugin's name for the transport lines, and `makesVNics` whether it can fuse them (makeVDevice). Throws with the
// loader's reasons when no plugin loads or lists devices.
std::vector<nns::topo::NicInfo> pluginNics(const std::string& spec, const std::vector<std::string>& dirs,
                                           std::string* netName, bool* makesVNics) {
  nns::core::LoadOptions load;
  load.plugin = spec;
  // -L first; this tool's own lib/ last, after the dynamic linker's search, which is all NCCL does: a copy of the
  // plugin on LD_LIBRARY_PATH is the one whose NICs NCCL sees.
  if (dirs.empty())
    load.fallbackDirs = {nns::tools::libDirBesideExecutable()};
  else
    load.searchDirs = dirs;
  nns::core::LoadReport report;
  // What the plugin prints goes to stderr while it is called, so that --json and --dot stay what they say. The saved
  // stdout is close-on-exec: a helper process the plugin starts must not inherit it (a plugin starting a daemon at
  // init held a reader of this tool's output, `nccl-net-topo --json | ...`, until the daemon ended: 30 s).
  fflush(stdout);
  const int savedStdout = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
  dup2(STDERR_FILENO, STDOUT_FILENO);
  struct RestoreStdout {
    int saved;
    ~RestoreStdout() {
      fflush(stdout);
      if (saved >= 0) {
        dup2(saved, STDOUT_FILENO);
        close(saved);
      }
    }
  } restore{savedStdout};
  // Never unloaded: a plugin's own threads (an IB plugin's async-event thread) may outlive its finalize, and
  // unloading its code under them at exit would crash the tool after its output.
  nns::core::Net* net = nns::core::loadNet(load, &report).release();
  if (net == nullptr) {
    std::string why;
    for (const auto& c : report.candidates) why += "; " + c.requested + ": " + c.rejectReason;
    if (const std::string none = nns::core::noPluginReason(load); !none.empty()) why = ": " + none;
    throw std::runtime_error("--plugin " + spec + ": no net plugin loaded" + why);
  }
  void* ctx = nullptr;
  int ndev = 0;
  if (ncclResult_t r = net->init(&ctx, 0, nullptr, nullptr, nullptr); r != ncclSuccess)
    throw std::runtime_error("--plugin " + spec + ": " + net->name() + " init returned " + std::to_string(r));
  if (ncclResult_t r = net->devices(&ndev); r != ncclSuccess || ndev <= 0)
    throw std::runtime_error("--plugin " + spec + ": " + net->name() + " lists no device");
  std::vector<nns::topo::NicInfo> nics;
  for (int dev = 0; dev < ndev; ++dev) {
    ncclNetProperties_v12_t props{};
    if (ncclResult_t r = net->getProperties(dev, &props); r != ncclSuccess)
      throw std::runtime_error("--plugin " + spec + ": getProperties(" + std::to_string(dev) + ") returned " +
                               std::to_string(r));
    nns::topo::NicInfo nic;
    nic.name = props.name != nullptr ? props.name : "dev" + std::to_string(dev);
    nic.pciPath = props.pciPath != nullptr ? props.pciPath : "";
    nic.speedMbps = props.speed;
    nic.port = props.port;
    nic.guid = props.guid;
    nic.maxComms = props.maxComms;
    nic.latency = props.latency;
    if (!std::isfinite(props.latency) || props.latency < 0) {
      // NCCL carries it into its tuning; the paths and rings here do not depend on it.
      std::fprintf(stderr,
                   "nccl-net-topo: note: device %d (%s) reports a latency of %g us, not a finite number >= 0: taken "
                   "as 0 here (NCCL would sum it into its tuning model; nccl-net-check's properties-sane fails it)\n",
                   dev, nns::topo::terminalSafe(nic.name).c_str(), static_cast<double>(props.latency));
      nic.latency = 0;
    }
    nic.gpuDirect = (props.ptrSupport & (NCCL_PTR_CUDA | NCCL_PTR_DMABUF)) != 0;
    nics.push_back(nic);
  }
  net->finalize(ctx);  // what it said is copied: its name and PCI paths are ours now
  *netName = net->name();
  *makesVNics = net->hasMakeVDevice();
  // The file itself where the dynamic linker's search resolved a bare name (which copy NCCL would see).
  std::string file = net->path();
  for (const auto& candidate : report.candidates)
    if (candidate.chosenVersion != 0 && !candidate.openedFile.empty()) file = candidate.openedFile;
  std::fprintf(stderr, "nccl-net-topo: note: NICs from %s (ncclNet_v%d, %s): %d device(s)\n",
               nns::topo::terminalSafe(net->name()).c_str(), net->version(), nns::topo::terminalSafe(file).c_str(),
               ndev);
  return nics;
}

// A graph file naming one id twice: NCCL fills the search of that id from each such <graph> in turn, so the last
// one is what it runs; the tool prints them all, and says which one NCCL keeps. The graphs are those the loader took
// (ids read as NCCL reads them, "0" and "0x0" alike; a graph NCCL skips, crossnic=1 under NCCL_CROSS_NIC=0, is not
// there); the ids' spellings come from the file.
void noteDuplicateGraphIds(const nns::topo::XmlDocument& graphs, const std::vector<nns::topo::Graph>& loaded) {
  std::map<int, const std::string*> spellingAt;  // <graph> line -> its id as written
  for (const auto& graph : graphs.root.children)
    if (graph.name == "graph") spellingAt[graph.line] = graph.attr("id");
  struct Seen {
    std::vector<int> lines;
    std::set<std::string> spellings;
  };
  std::map<int, Seen> ids;
  for (const nns::topo::Graph& g : loaded) {
    Seen& seen = ids[g.id];
    seen.lines.push_back(g.sourceLine);
    if (const std::string* text = spellingAt[g.sourceLine]) seen.spellings.insert(*text);
  }
  for (const auto& [id, seen] : ids) {
    if (seen.lines.size() < 2) continue;
    std::string list, spelled;
    for (int line : seen.lines) list += (list.empty() ? "" : ", ") + std::to_string(line);
    if (seen.spellings.size() > 1) {
      for (const std::string& text : seen.spellings) spelled += (spelled.empty() ? "" : ", ") + ("\"" + text + "\"");
      spelled = "; written " + spelled;
    }
    std::fprintf(stderr,
                 "nccl-net-topo: note: %s has %zu graphs with id %d (lines %s%s): NCCL fills that search from each "
                 "in turn and runs the last (line %d); all are shown\n",
                 nns::topo::terminalSafe(graphs.sourceName).c_str(), seen.lines.size(), id, list.c_str(),
                 nns::topo::terminalSafe(spelled).c_str(), seen.lines.back());
  }
}

// The <pci> elements anywhere below e whose class begins with `prefix` ("0x03": GPU-class, "0x02": NIC-class), as
// NCCL's class table reads them.
int countPciOfClass(const nns::topo::XmlElement& e, const char* prefix) {
  int n = 0;
  if (e.name == "pci")
    if (const std::string* cls = e.attr("class"); cls != nullptr && cls->rfind(prefix, 0) == 0) ++n;
  for (const auto& c : e.children) n += countPciOfClass(c, prefix);
  return n;
}

// --fsroot given hwloc-gather-topology's tarball itself (as lstopo -i takes one): unpacked by tar into a directory
// of its own, removed when the tool ends; the tree is the one directory in it that holds sys/.
class UnpackedTree {
 public:
  explicit UnpackedTree(const std::string& tarball) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/nccl-net-topo-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr)
      throw TopologyError("cannot make a directory to unpack " + tarball + " in: " + std::strerror(errno));
    directory_ = pattern;
    pid_t pid = fork();
    if (pid == 0) {
      execlp("tar", "tar", "-xf", tarball.c_str(), "-C", directory_.c_str(), static_cast<char*>(nullptr));
      std::fprintf(stderr, "nccl-net-topo: cannot run tar: %s\n", std::strerror(errno));
      _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
      refuse(tarball +
             ": not a directory, and tar could not unpack it (--fsroot takes the directory hwloc-gather-topology's "
             "tarball unpacks to, or the tarball)");
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(directory_, ec))
      if (std::filesystem::is_directory(entry.path() / "sys", ec)) root_ = entry.path().string();
    if (root_.empty())
      refuse(tarball + ": the tarball holds no directory with sys/ in it (not hwloc-gather-topology's)");
  }
  UnpackedTree(const UnpackedTree&) = delete;
  UnpackedTree& operator=(const UnpackedTree&) = delete;
  ~UnpackedTree() {
    std::error_code ec;
    std::filesystem::remove_all(directory_, ec);
  }
  const std::string& root() const { return root_; }

 private:
  // Throws, removing what was unpacked first (no destructor runs for a constructor that throws).
  [[noreturn]] void refuse(const std::string& why) {
    std::error_code ec;
    std::filesystem::remove_all(directory_, ec);
    throw TopologyError(why);
  }
  std::string directory_, root_;
};

}  // namespace

int runTool(int argc, char** argv) {
  CLI::App app{"nccl-net-topo: NCCL's topology model of a machine, every decision with its reason"};
  std::string topoFile, dumpXml, dumpGraph, graphFile, netName = "IB";
  bool jsonOut = false, dotOut = false, ncclLog = false, noSearch = false, ignoreEnv = false, showPaths = true;
  nns::topo::CompletionOptions fill;
  nns::topo::AnalysisOptions opts;
  int benchIterations = 0;
  std::vector<int> synthetic;
  // Not checked here: a missing file or a directory is the reader's one-line error and exit status 1, as through
  // NCCL_TOPO_FILE (CLI11's check gave exit status 2 and another text for the same path).
  app.add_option("--topo-file", topoFile, "NCCL topology XML (NCCL_TOPO_FILE format); default: discover this machine");
  app.add_option("--synthetic", synthetic,
                 "use a synthetic machine: GPUS NICS, GPUs + 2 x NICs at most 640 (e.g. --synthetic 72 18)")
      ->expected(2)
      ->excludes("--topo-file");
  // Each value in its range: a 0 or negative one would otherwise read as "not given" (and the report would then ask
  // for the very option the user gave).
  app.add_option("--gpu-sm", fill.gpuSm, "add <gpu> with this sm to GPU-class PCI leaves (partial files, discovery)")
      ->transform(nns::tools::integerIn(1, 1000));
  app.add_option("--gpu-nvlinks", fill.gpuNvlinks, "NVLinks to an NVSwitch for each added GPU")
      ->transform(nns::tools::integerIn(0, 64));
  app.add_option("--gpu-gdr", fill.gpuGdr, "gdr attribute of added GPUs (0/1; default 1)")
      ->check(CLI::IsMember({0, 1}));
  app.add_option("--nic-speed", fill.nicSpeedMbps, "add <nic><net> with this speed (Mb/s) to NIC-class PCI leaves")
      ->transform(nns::tools::integerIn(1, 100000000));
  app.add_option("--nic-port", fill.nicPort, "port attribute of added NETs (default 0)")
      ->transform(nns::tools::integerIn(0, 255));
  app.add_option("--nic-maxconn", fill.nicMaxConn, "maxconn attribute of added NETs (default: none written, NCCL's 64)")
      ->transform(nns::tools::integerIn(1, 1 << 20));
  app.add_option("--nic-gdr", fill.nicGdr, "gdr attribute of added NETs (0/1; default 1)")
      ->check(CLI::IsMember({0, 1}));
  app.add_option("--rank", opts.rank, "our rank (trimming and per-rank Ring/Trees lines); default: first GPU")
      ->transform(nns::tools::integerIn(0, (1 << 24) - 1));
  app.add_option("--nranks", opts.nRanks, "communicator size; default: twice the local GPUs (multi-node)")
      ->transform(nns::tools::integerIn(1, 1 << 24));
  app.add_option("--channels", opts.channels, "channels shown for the NIC choice of each GPU")
      ->transform(nns::tools::integerIn(1, 64));
  auto* jsonFlag = app.add_flag("--json", jsonOut, "machine-readable output");
  auto* dotFlag = app.add_flag("--dot", dotOut, "Graphviz DOT of the graph and each GPU's NIC (render with dot -Tpng)")
                      ->excludes(jsonFlag);
  // The text additions have no place in JSON or DOT: refused there rather than silently dropped.
  app.add_flag("--nccl-log", ncclLog, "also print NCCL's own GRAPH log lines (system tree, paths, GDR, graphs)")
      ->excludes(jsonFlag)
      ->excludes(dotFlag);
  auto* netNameOption =
      app.add_option("--net-name", netName, "net plugin name in NCCL's transport lines (NET/<name>/<dev>)");
  std::string plugin;
  std::vector<std::string> pluginDirs;
  app.add_option("-p,--plugin", plugin,
                 "take this machine's NICs from this net plugin's devices (NCCL_NET_PLUGIN semantics), as NCCL "
                 "does, instead of /sys/class/net: the plugin's variables (NCCL_IB_HCA, ...) then apply")
      ->excludes("--topo-file")
      ->excludes("--synthetic");
  std::string fsRoot;
  app.add_option("--fsroot", fsRoot,
                 "discover another machine from a copy of its /sys and /proc: hwloc-gather-topology's tarball or the "
                 "directory it unpacks to (its NICs are the copy's /sys/class/net interfaces)")
      ->excludes("--topo-file")
      ->excludes("--synthetic")
      ->excludes("--plugin");
  app.add_option("-L,--search-dir", pluginDirs,
                 "directory searched first for --plugin, one per -L (default: ../lib beside this tool, searched "
                 "last, after the dynamic linker's search that NCCL makes)")
      ->allow_extra_args(false);
  app.add_flag("--no-search", noSearch, "skip the ring/tree searches");
  bool noPaths = false;
  app.add_flag("--no-paths", noPaths, "skip the path matrix (and, with --json, the \"paths\" object)");
  app.add_flag("--ignore-env", ignoreEnv, "ignore NCCL_* variables (P2P/GDR/PXN levels, CROSS_NIC, ...)");
  app.add_option("--dump-xml", dumpXml, "write the (completed) topology in NCCL_TOPO_DUMP_FILE format");
  app.add_option("--dump-graph", dumpGraph, "write the searched graphs in NCCL_GRAPH_DUMP_FILE format");
  // Not checked here either: a missing file is the reader's error, as through NCCL_GRAPH_FILE.
  app.add_option("--graph-file", graphFile, "read an NCCL_GRAPH_FILE and show its channels for this topology")
      ->excludes(jsonFlag)
      ->excludes(dotFlag);
  // --bench prints one timing line and nothing of the analysis: the options that shape or add to that output, or write
  // the searched graphs, are refused with it (--json printed the text line and exited 0; --dump-graph wrote nothing,
  // without a word). --dump-xml is kept: the topology is written before the runs.
  app.add_option("--bench", benchIterations, "time N runs of paths + decisions + search and print the mean")
      ->transform(nns::tools::integerIn(1, 1000000))
      ->excludes(jsonFlag)
      ->excludes(dotFlag)
      ->excludes("--nccl-log")
      ->excludes("--graph-file")
      ->excludes("--dump-graph");
  if (int status = nns::tools::parseArguments(app, argc, argv); status >= 0) return status;
  nns::tools::warnUnusableSearchDirs("nccl-net-topo", pluginDirs);
  showPaths = !noPaths;
  const bool bench = benchIterations > 0;
  // A failure from here on is one line on stderr and, with --json, a JSON object with the error on stdout, as
  // nccl-net-check and nccl-net-info print one (stdout was empty).
  auto fail = [&](const std::string& stderrLine, const std::string& error) {
    std::cerr << stderrLine << "\n";
    if (jsonOut) {
      const json out = {{"error", error}, {"exitStatus", 1}};
      std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    }
    return 1;
  };

  try {
    // NCCL's file variables stand in for the options, as they do for NCCL (an option given on the command line wins).
    std::string topoFileVariable, graphFileVariable;
    if (!ignoreEnv) {
      // NCCL reads its variables through its configuration files as well (a site's /etc/nccl.conf may name the
      // topology and graph files): applied first, and each one said.
      nns::core::applyNcclConfFiles();
      for (const auto& [name, file] : nns::core::ncclConfVariables())
        std::fprintf(stderr, "nccl-net-topo: note: %s=%s from %s (as NCCL reads it; --ignore-env ignores it)\n",
                     nns::topo::terminalSafe(name).c_str(),
                     nns::topo::terminalSafe(std::getenv(name.c_str()) ? std::getenv(name.c_str()) : "").c_str(),
                     nns::topo::terminalSafe(file).c_str());
      auto fromEnv = [](const char* name, std::string& target) {
        const char* v = std::getenv(name);
        if (target.empty() && v && *v) {
          target = v;
          return true;
        }
        return false;
      };
      // --synthetic, --plugin and --fsroot name the machine as --topo-file does: given on the command line, they win
      // over the variable (it used to replace --plugin without a word, and the plugin was never loaded).
      if (const char* v = std::getenv("NCCL_TOPO_FILE");
          v != nullptr && *v != '\0' && topoFile.empty() && (!plugin.empty() || !synthetic.empty() || !fsRoot.empty()))
        std::fprintf(stderr, "nccl-net-topo: note: NCCL_TOPO_FILE=%s is ignored: %s was given\n",
                     nns::topo::terminalSafe(v).c_str(),
                     !plugin.empty()   ? "--plugin"
                     : !fsRoot.empty() ? "--fsroot"
                                       : "--synthetic");
      else if (fromEnv("NCCL_TOPO_FILE", topoFile))
        topoFileVariable = topoFile;
      fromEnv("NCCL_TOPO_DUMP_FILE", dumpXml);
      // --bench searches again and again and keeps no graph to write: the variable is said to be left alone, as
      // --dump-graph is refused with --bench.
      if (const char* v = std::getenv("NCCL_GRAPH_DUMP_FILE"); bench && v != nullptr && *v != '\0')
        std::fprintf(stderr, "nccl-net-topo: note: NCCL_GRAPH_DUMP_FILE=%s is not written under --bench\n",
                     nns::topo::terminalSafe(v).c_str());
      else
        fromEnv("NCCL_GRAPH_DUMP_FILE", dumpGraph);
      // NCCL takes a graph file's channels in place of its own search whenever the file gives any for this system.
      if (const char* v = std::getenv("NCCL_GRAPH_FILE"); v != nullptr && *v != '\0' && graphFile.empty()) {
        if (jsonOut || dotOut || bench) {
          std::fprintf(stderr, "nccl-net-topo: note: NCCL_GRAPH_FILE=%s is not shown in %s output\n",
                       nns::topo::terminalSafe(v).c_str(), bench ? "--bench" : "--json or --dot");
        } else {
          graphFile = graphFileVariable = v;
        }
      }
    }
    if (!ignoreEnv) opts.settings = nns::topo::TopoSettings::fromEnvironment();
    for (const std::string& note : opts.settings.notes)
      std::fprintf(stderr, "nccl-net-topo: note: %s\n", nns::topo::terminalSafe(note).c_str());
    if (const char* fm = std::getenv("NCCL_NET_FORCE_MERGE"); fm && !ignoreEnv) opts.forceMerge = fm;
    opts.search = !noSearch;
    nns::topo::XmlDocument doc;
    nns::topo::DiscoveryReport discovery;
    bool discovered = false;
    if (!synthetic.empty()) {
      doc = nns::topo::makeSyntheticTopology(synthetic[0], synthetic[1]);
    } else if (!topoFile.empty()) {
      try {
        doc = nns::topo::readXmlFile(topoFile);
      } catch (const TopologyError& e) {
        // The path came from the environment, not the command line: said, or the error reads as a typo in an option
        // that was never given.
        if (topoFileVariable.empty()) throw;
        throw TopologyError(std::string(e.what()) + " (the path is NCCL_TOPO_FILE's; --ignore-env ignores it)");
      }
      // A graph file (NCCL_GRAPH_FILE) given for the topology: said with the option it belongs to (the model's error
      // only said what it is not).
      if (doc.root.name == "graphs")
        throw TopologyError(
            topoFile + ": root element <graphs>: this is a graph file (NCCL_GRAPH_FILE), not a topology " +
            "file; give it as --graph-file" +
            (topoFileVariable.empty() ? ", with the machine's topology file as --topo-file"
                                      : " or NCCL_GRAPH_FILE, with the machine's topology file as NCCL_TOPO_FILE or "
                                        "--topo-file (the path is NCCL_TOPO_FILE's; --ignore-env ignores it)"));
      // NCCL reads NCCL_TOPO_FILE into room for 256 elements and fails the file past them: no analysis here either.
      nns::topo::requireNcclNodeLimit(doc, nns::topo::kNcclMaxTopologyNodes, "NCCL_TOPO_XML_MAX_NODES", "topology");
    } else if (!plugin.empty()) {
      std::string pluginName;
      bool makesVNics = false;
      doc = nns::topo::discoverTopology(pluginNics(plugin, pluginDirs, &pluginName, &makesVNics), &discovery);
      if (netNameOption->count() == 0) netName = pluginName;
      opts.fusingPlugin = pluginName;
      opts.pluginMakesVNics = makesVNics;
      discovered = true;
    } else if (!fsRoot.empty()) {
      std::error_code ec;
      std::optional<UnpackedTree> unpacked;
      if (std::filesystem::is_regular_file(fsRoot, ec)) unpacked.emplace(fsRoot);
      const std::string& root = unpacked ? unpacked->root() : fsRoot;
      doc = nns::topo::discoverTopology(nns::topo::listSysfsNics((std::filesystem::path(root) / "sys").string()),
                                        &discovery, root);
      discovered = true;
    } else {
      // The plugin's variables select among its devices, which this listing does not know: said, with the way to
      // see what NCCL would.
      if (!ignoreEnv)
        for (const char* name : {"NCCL_NET_PLUGIN", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "UCX_NET_DEVICES"})
          if (const char* v = std::getenv(name); v != nullptr && *v != '\0')
            std::fprintf(stderr,
                         "nccl-net-topo: note: the NICs are /sys/class/net's interfaces, not a plugin's devices: "
                         "%s=%s is not applied (--plugin lists a plugin's devices, as NCCL takes them)\n",
                         name, nns::topo::terminalSafe(v).c_str());
      doc = nns::topo::discoverTopology(nns::topo::listSysfsNics(), &discovery);
      discovered = true;
    }
    if (doc.root.name == "system") {
      const auto [addedGpus, addedNets] = nns::topo::completeTopology(doc.root, fill);
      // The completion options only add the <gpu> and <nic><net> a partial file lacks: given for a file that lacks
      // none, they change nothing, which is said (they read like "what if" options).
      const auto given = [&](std::initializer_list<const char*> names) {
        for (const char* name : names)
          if (app.get_option(name)->count() > 0) return true;
        return false;
      };
      // Why: no device of that class at all (a machine or file without GPUs), or every one complete already; only a
      // file can be edited (discovery and --synthetic have none).
      const auto why = [&](const char* prefix, const char* device, const char* element, const char* edit) {
        if (countPciOfClass(doc.root, prefix) == 0)
          return std::string("no ") + device + "-class PCI device found" +
                 (!topoFile.empty() ? " in " + topoFile
                  : discovered && std::string(device) == "GPU"
                      ? " (discovery takes NVIDIA's display and 3D controllers, class 0x03, for GPUs)"
                      : "");
        return std::string("every ") + device + "-class PCI device here has its " + element +
               " already (they complete partial files" + (topoFile.empty() ? ")" : std::string("; ") + edit + ")");
      };
      if (addedGpus == 0 && given({"--gpu-sm", "--gpu-nvlinks", "--gpu-gdr"}))
        std::fprintf(
            stderr, "nccl-net-topo: note: the --gpu-* options changed nothing: %s\n",
            nns::topo::terminalSafe(fill.gpuSm == 0 ? "--gpu-nvlinks and --gpu-gdr describe the GPUs --gpu-sm adds"
                                                    : why("0x03", "GPU", "<gpu>", "edit the file to change a GPU"))
                .c_str());
      if (addedNets == 0 && given({"--nic-speed", "--nic-port", "--nic-maxconn", "--nic-gdr"}))
        std::fprintf(
            stderr, "nccl-net-topo: note: the --nic-* options changed nothing: %s\n",
            nns::topo::terminalSafe(fill.nicSpeedMbps == 0
                                        ? "--nic-port, --nic-maxconn and --nic-gdr describe the NETs --nic-speed adds"
                                        : why("0x02", "NIC", "<nic><net>", "edit the file to change a NIC"))
                .c_str());
      // NCCL learns a GPU's NVLinks from NVML, which a file cannot stand in for: GPUs added without --gpu-nvlinks
      // have none, and every GPU pair then goes through the CPU (SYS/PHB, no P2P, one slow ring), which reads like an
      // answer. Said, since an NVLink machine's file needs the links said too.
      if (addedGpus > 0 && fill.gpuNvlinks == 0)
        std::fprintf(stderr,
                     "nccl-net-topo: note: %d GPU(s) added by --gpu-sm with no NVLinks: on an NVLink machine give "
                     "--gpu-nvlinks N (links to an NVSwitch), or <nvlink target=... count=... tclass=\"0x030200\"> "
                     "elements in the file for GPU-to-GPU links (docs/topology.md); as it is, GPU pairs go through "
                     "the CPU\n",
                     addedGpus);
    }
    if (!dumpXml.empty()) nns::topo::writeXmlFile(doc.root, dumpXml);

    if (bench) {
      // Paths, trimming, decisions and both searches, from the parsed document each time.
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < benchIterations; ++i) {
        Analysis a = nns::topo::analyze(doc, opts);
        if (a.system.count(nns::topo::GPU) < 0) return 1;
      }
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      std::printf("%s: %d run(s), %.3f ms per run (paths + trim + decisions + ring/tree searches)\n",
                  nns::topo::terminalSafe(doc.sourceName).c_str(), benchIterations, ms / benchIterations);
      return 0;
    }

    Analysis a = nns::topo::analyze(std::move(doc), opts);
    // Read before anything is printed, so a graph file that does not fit this topology is the only output.
    std::vector<nns::topo::Graph> loadedGraphs;
    if (!graphFile.empty()) {
      nns::topo::XmlDocument graphDoc;
      try {
        graphDoc = nns::topo::readXmlFile(graphFile, "graph");
      } catch (const TopologyError& e) {
        if (graphFileVariable.empty()) throw;
        throw TopologyError(std::string(e.what()) + " (the path is NCCL_GRAPH_FILE's; --ignore-env ignores it)");
      }
      nns::topo::requireNcclNodeLimit(graphDoc, nns::topo::kNcclMaxGraphNodes, "NCCL_GRAPH_XML_MAX_NODES", "graph");
      loadedGraphs = nns::topo::loadGraphXml(graphDoc, &a.system, opts.settings.crossNic);
      noteDuplicateGraphIds(graphDoc, loadedGraphs);
    }
    // What the topology asks of NCCL that the engine leaves out (GIN devices).
    for (const std::string& note : a.system.notes)
      std::fprintf(stderr, "nccl-net-topo: note: %s\n", nns::topo::terminalSafe(note).c_str());
    int rank = opts.rank >= 0 ? opts.rank : (a.gpuRanks.empty() ? 0 : a.gpuRanks[0]);
    // The graphs NCCL would dump are those of the job the trim decided: the single-node search when every rank is
    // local, the one with the network otherwise (not simply the last search made).
    const nns::topo::SearchResult* dumped = nullptr;
    for (const auto& s : a.searches)
      if (s.inter == a.trim.inter) dumped = &s;
    if (!dumpGraph.empty() && dumped != nullptr) {
      nns::topo::writeXmlFile(nns::topo::graphsToXml(a.system, {&dumped->ring, &dumped->tree}), dumpGraph);
    } else if (!dumpGraph.empty()) {  // said, not skipped silently: a script would look for the file
      std::fprintf(stderr, "nccl-net-topo: no graph written to %s: %s\n", dumpGraph.c_str(),
                   noSearch             ? "--no-search skips the search"
                   : a.searches.empty() ? "nothing was searched (no GPUs)"
                                        : "the job needs the network and the topology has no NET to search with");
    }
    if (jsonOut) {
      json j = analysisJson(a, showPaths);
      if (discovered)
        j["discovery"] = {{"numaNodes", discovery.numaNodes},
                          {"cores", discovery.cpuCores},
                          {"processingUnits", discovery.processingUnits},
                          {"cpuVendor", discovery.cpuVendor},
                          {"cpuModel", discovery.cpuModelName},
                          {"notes", discovery.notes},
                          {"fsroot", fsRoot.empty() ? json(nullptr) : json(fsRoot)}};
      std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
      return 0;
    }
    if (dotOut) {
      std::cout << nns::topo::formatDot(a);
      return 0;
    }
    // Names come from the file (or the machine) as they are: printed through terminalSafe, a name holding an escape
    // sequence is shown, not run by the terminal.
    std::ostringstream out;
    if (discovered) {
      out << "Discovered " << (fsRoot.empty() ? "this machine" : nns::topo::terminalSafe(fsRoot))
          << " (hwloc + sysfs): " << discovery.numaNodes << " NUMA node(s), " << discovery.cpuCores << " core(s), "
          << discovery.processingUnits << " hardware thread(s), " << discovery.cpuVendor << " "
          << discovery.cpuModelName << "\n";
      for (const auto& note : discovery.notes) out << "  note: " << note << "\n";
      out << "\n";
    }
    if (!topoFileVariable.empty())
      out << "Reading the topology from NCCL_TOPO_FILE=" << topoFileVariable
          << " (no --topo-file given; --ignore-env ignores it)\n";
    out << nns::topo::formatSummary(a);
    if (showPaths) out << "\n" << nns::topo::formatPathMatrix(a);
    if (!a.searches.empty()) out << "\n" << nns::topo::formatSearches(a, rank, app.get_option("--rank")->count() > 0);
    if (!graphFile.empty()) {
      out << "\nGraphs from " << (graphFileVariable.empty() ? "" : "NCCL_GRAPH_FILE=") << graphFile
          << (graphFileVariable.empty() ? ":\n"
                                        : " (NCCL uses the channels it loads in place of the search above; "
                                          "--ignore-env ignores it):\n");
      if (opts.settings.crossNic == 0)
        out << "  (NCCL_CROSS_NIC=0: a graph with crossnic=\"1\" is skipped, as NCCL skips it)\n";
      for (const auto& g : loadedGraphs) {
        out << "  Search " << g.id << " : " << g.nChannels << " channels loaded from XML graph\n";
        // NCCL applies a graph only to its search of the same id: 0 ring, 1 tree, 2 CollNet chain, and higher ids
        // its CollNet direct and NVLS searches, which need a collNet or NVSwitch multicast.
        if (g.id != 0 && g.id != 1)
          out << "    (NCCL applies it only to its search with id " << g.id
              << ", CollNet or NVLS, which this tool does not search; 0 is the ring, 1 the tree)\n";
        for (const auto& line : nns::topo::graphLogLines(a.system, g)) out << "    " << line << "\n";
      }
    }
    if (ncclLog) {
      out << "\nNCCL log lines:\n";
      for (const auto& l : nns::topo::systemLogLines(a.system)) out << l << "\n";
      for (const auto& l : nns::topo::pathLogLines(a.system)) out << l << "\n";
      for (const auto& row : a.gdrRead)
        for (const auto& d : row)
          if (!d.ncclLog.empty()) out << d.ncclLog << "\n";
      for (const auto& l : nns::topo::transportLogLines(a, netName)) out << l << "\n";
    }
    std::cout << nns::topo::terminalSafe(out.str());
  } catch (const TopologyError& e) {
    return fail("nccl-net-topo: " + nns::topo::terminalSafe(e.what()), e.what());
  } catch (const std::exception& e) {
    // What else fails here (a plugin that does not load or list its devices for --plugin): as guardedMain says it.
    return fail("nccl-net-topo: error: " + nns::topo::terminalSafe(e.what()), e.what());
  }
  return 0;
}

int main(int argc, char** argv) {
  return nns::tools::guardedMain("nccl-net-topo", argc, argv, runTool);
}
