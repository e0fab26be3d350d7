// nccl-net-info: what a cluster engineer runs first: which net plugins are found, which ABI versions each exports,
// which one is chosen and why, every device's properties, and the chosen plugin's collNet (versions, the one taken or
// why none, its devices). Human table by default, --json for machines.
#include <dirent.h>
#include <limits.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "nccl_net/sdk/result.hpp"
#include "nns/core/loader.hpp"
#include "nns/core/printable.hpp"
#include "nns/tools/executable_dir.hpp"
#include "nns/tools/guarded_main.hpp"
#include "nns/tools/guid_text.hpp"
#include "nns/tools/isolated_probe.hpp"
#include "nns/tools/parse_arguments.hpp"
#include "nns/tools/reduce_support.hpp"
#include "nns/tools/search_dirs.hpp"
#include "nns/tools/signal_state.hpp"

namespace {

using nlohmann::json;

std::string ptrSupportText(int bits) {
  std::string text;
  if (bits & NCCL_PTR_HOST) text += "HOST|";
  if (bits & NCCL_PTR_CUDA) text += "CUDA|";
  if (bits & NCCL_PTR_DMABUF) text += "DMABUF|";
  if (bits & ~(NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF)) text += "unknown|";
  if (text.empty()) return "none";
  text.pop_back();
  return text;
}

std::string deviceTypeText(ncclNetDeviceType type) {
  switch (type) {
    case NCCL_NET_DEVICE_HOST: return "HOST";
    case NCCL_NET_DEVICE_UNPACK: return "UNPACK";
    case NCCL_NET_DEVICE_GIN_PROXY: return "GIN_PROXY";
    case NCCL_NET_DEVICE_GIN_GDAKI: return "GIN_GDAKI";
    case NCCL_NET_DEVICE_GIN_GPI: return "GIN_GPI";
  }
  return "type " + std::to_string(static_cast<int>(type));
}

json versionsJson(const std::vector<int>& versions) {
  return json(versions);
}

std::string versionsText(const std::vector<int>& versions) {
  if (versions.empty()) return "none";
  std::string text;
  for (int v : versions) text += "v" + std::to_string(v) + " ";
  text.pop_back();
  return text;
}

// A float JSON can hold, or its text: nlohmann writes NaN and infinities as null, which read back as "not a number"
// and lost what the plugin said.
json finiteOrText(float value) {
  if (std::isfinite(value)) return value;
  return std::isnan(value) ? "nan" : value > 0 ? "inf" : "-inf";
}

// Link speed from Mb/s, exact: "100Gb/s", "2.5Gb/s", "100Mb/s", and "-5Mb/s" as the plugin said it.
std::string speedText(int mbps) {
  char text[32];
  if (mbps >= 1000)
    std::snprintf(text, sizeof(text), "%.6gGb/s", mbps / 1000.0);
  else
    std::snprintf(text, sizeof(text), "%dMb/s", mbps);
  return text;
}

json deviceJson(int dev, const ncclNetProperties_v12_t& p) {
  json vdevs = json::array();
  for (int i = 0; i < p.vProps.ndevs && i < NCCL_NET_MAX_DEVS_PER_NIC; ++i) vdevs.push_back(p.vProps.devs[i]);
  return json{{"dev", dev},
              {"name", p.name != nullptr ? nns::core::printable(p.name) : ""},
              {"pciPath", p.pciPath != nullptr ? json(nns::core::printable(p.pciPath)) : json(nullptr)},
              {"guid", p.guid},
              {"guidHex", nns::tools::guidText(p.guid)},
              {"speedMbps", p.speed},
              {"port", p.port},
              {"latencyUs", finiteOrText(p.latency)},
              {"maxComms", p.maxComms},
              {"maxRecvs", p.maxRecvs},
              {"ptrSupport", ptrSupportText(p.ptrSupport)},
              {"regIsGlobal", p.regIsGlobal},
              {"forceFlush", p.forceFlush},
              {"netDeviceType", deviceTypeText(p.netDeviceType)},
              {"netDeviceVersion", p.netDeviceVersion},
              {"maxP2pBytes", p.maxP2pBytes},
              {"maxCollBytes", p.maxCollBytes},
              {"maxMultiRequestSize", p.maxMultiRequestSize},
              {"railId", p.railId},
              {"planeId", p.planeId},
              {"vProps", vdevs}};
}

void printDevices(const json& devices);  // one line per device, below main

// What a probe's child printed, as its non-empty lines made printable ("output" in --json).
json outputLines(const std::string& text) {
  json lines = json::array();
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(nns::core::printable(line.c_str()));
  return lines;
}

// What a library or candidate printed while probed, one "printed:" line each, under its entry.
void printOutput(const json& entry) {
  if (!entry.contains("output")) return;
  for (const auto& line : entry["output"]) std::printf("    printed: %s\n", line.get<std::string>().c_str());
}

// Names, paths and reasons from the environment, the file system or a plugin, as the text output writes them: \xNN
// outside printable ASCII (as the header line writes NCCL_NET_PLUGIN), so that none can drive the terminal.
std::string shown(const std::string& text) {
  return nns::core::printable(text.c_str());
}
std::string shown(const json& text) {
  return shown(text.get<std::string>());
}

// Symbol names as the file has them may be any bytes: JSON takes UTF-8 only, and a terminal should not take escapes.
// The first 100 (sorted): a library that links a whole toolkit statically exports thousands; the count says how many.
json printableNames(const std::vector<std::string>& names) {
  constexpr size_t kListed = 100;
  json list = json::array();
  for (size_t i = 0; i < names.size() && i < kListed; ++i) list.push_back(nns::core::printable(names[i].c_str()));
  return list;
}

// What a library exports beyond NCCL's tables, when it exports anything more: a few names and the count, and what
// each kind does in a host's process.
void printLeakedSymbols(const json& library) {
  auto names = [](const json& list) { return nns::core::namesPreview(list.get<std::vector<std::string>>()); };
  const json& other = library.value("otherExports", json::array());
  const json& unique = library.value("uniqueExports", json::array());
  const size_t otherCount = library.value("otherExportsCount", other.size());  // the lists hold the first 100
  const size_t uniqueCount = library.value("uniqueExportsCount", unique.size());
  if (!other.empty())
    std::printf(
        "    also exports %zu other symbol(s) (%s): a host or library loaded first that defines one of these names "
        "takes its place in this plugin (interposition); build with -fvisibility=hidden and the SDK's "
        "version script\n",
        otherCount, names(other).c_str());
  if (!unique.empty())
    std::printf(
        "    %zu GNU-unique symbol(s) (%s): shared by every library of the process that has one, and dlclose "
        "cannot unload this plugin\n",
        uniqueCount, names(unique).c_str());
}

// The entries of `spec` NCCL skips without a word, each with why: those past the 14 it reads (NCCL_NET_MAX_PLUGINS
// less the two slots of its internal nets) and names of 255 characters or more (NCCL 2.30's src/plugin/net.cc).
// Which entries are kept is the loader's decision (`used`, from pluginSpecEntries); the ones it did not keep are
// found by walking the list against it, so the two cannot disagree on which entries NCCL tries.
json ignoredEntries(const std::string& spec, const std::vector<std::string>& used) {
  json ignored = json::array();
  if (strcasecmp(spec.c_str(), "none") == 0) return ignored;
  constexpr size_t kMaxEntries = NCCL_NET_MAX_PLUGINS - 2;
  std::stringstream stream(spec);
  std::string entry;
  size_t kept = 0;
  while (std::getline(stream, entry, ',')) {
    if (entry.empty()) continue;  // NCCL skips empty entries too ("a,,b"), and so does the loader
    if (kept < used.size() && entry == used[kept]) {
      ++kept;
    } else if (kept == used.size() && used.size() >= kMaxEntries) {
      ignored.push_back(
          {{"requested", entry},
           {"reason", "NCCL reads at most " + std::to_string(kMaxEntries) + " entries of NCCL_NET_PLUGIN"}});
    } else {
      ignored.push_back({{"requested", entry},
                         {"reason", "a name of " + std::to_string(entry.size()) +
                                        " characters, which NCCL skips (it takes names shorter than 255)"}});
    }
  }
  return ignored;
}

// The files the loader tries for `entry` only because this tool joined its own ../lib (`fallbackDirs`) to one of the
// entry's bare names: NCCL never looks there. A path the entry gives is the very file NCCL opens, even one in that
// directory.
std::vector<std::string> lastResortFiles(const std::string& entry, const std::vector<std::string>& fallbackDirs) {
  const std::vector<std::string> asNcclTries = nns::core::candidateFiles(entry, {});
  std::vector<std::string> own;
  for (const std::string& file : nns::core::candidateFiles(entry, {}, fallbackDirs))
    if (std::find(asNcclTries.begin(), asNcclTries.end(), file) == asNcclTries.end()) own.push_back(file);
  return own;
}

// What the loader runs for one candidate, named as one call: a crash or hang inside it is pinned to the exact call
// by probing the candidate again step by step (nns::tools::pinpointFailure).
constexpr const char* kLoaderProbe = "the loader's probe (dlopen, init, devices, getProperties(0), finalize)";
constexpr const char* kCollNetProbe = "the loader's collNet probe (ncclCollNet init, devices, finalize)";

// In the child: the loader on one list entry alone (its report, and the chosen plugin), then, when it loads, every
// device's properties and the collNet beside it, each call named before it is made.
// After a net's or collNet's init returned `result`: its devices and each one's properties, sent under `deviceKey`
// (a failure under `errorKey`), each call named with `prefix` first; then finalize.
template <class Plugin>
void probeDevices(nns::tools::ProbeChannel& channel, Plugin& plugin, void* ctx, ncclResult_t result,
                  const std::string& prefix, const char* deviceKey, const char* errorKey) {
  const bool initialised = result == ncclSuccess;  // a failed init gave no context to finalize
  int ndev = 0;
  if (result == ncclSuccess) {
    channel.call(prefix + "devices");
    result = plugin.devices(&ndev);
  }
  for (int dev = 0; result == ncclSuccess && dev < ndev; ++dev) {
    ncclNetProperties_v12_t props{};  // what a plugin leaves unwritten reads as 0 and NULL, not as stack bytes
    channel.call(prefix + "getProperties(" + std::to_string(dev) + ")");
    if (plugin.getProperties(dev, &props) == ncclSuccess) {
      channel.send({{deviceKey, deviceJson(dev, props)}});
    } else {
      channel.send({{deviceKey, {{"dev", dev}, {"error", "getProperties failed"}}}});
    }
  }
  if (result != ncclSuccess)
    channel.send({{errorKey, "init/devices returned " + std::to_string(static_cast<int>(result))}});
  if (!initialised) return;
  channel.call(prefix + "finalize");
  plugin.finalize(ctx);
}

// RDMA devices the kernel lists (NCCL's internal IB net takes its devices from there through libibverbs).
int countRdmaDevices() {
  DIR* dir = opendir("/sys/class/infiniband");
  if (dir == nullptr) return 0;
  int count = 0;
  while (const dirent* entry = readdir(dir))
    if (entry->d_name[0] != '.') ++count;
  closedir(dir);
  return count;
}

// Whether `dir` is on LD_LIBRARY_PATH (the same directory, after resolving links), where NCCL's dlopen looks; split
// as the dynamic linker splits it (an empty field is the working directory, ';' separates too).
bool onLibraryPath(const std::string& dir) {
  char wanted[PATH_MAX];
  if (realpath(dir.c_str(), wanted) == nullptr) return false;
  for (const std::string& entry : nns::core::libraryPathDirs()) {
    char resolved[PATH_MAX];
    if (realpath(entry.c_str(), resolved) != nullptr && std::strcmp(resolved, wanted) == 0) return true;
  }
  return false;
}

// Which ncclNet version each NCCL release series takes from a plugin exporting `exported`: the newest one it exports
// that the series knows (net-abi.md, section 1), 0 where it exports none the series knows (it cannot load it).
// Newest series first; consecutive series that take the same version are one entry ("2.13-2.29").
struct ReleaseChoice {
  std::string low, high;  // high "" : and later
  int version;
  std::string label() const { return high.empty() ? low + "+" : low == high ? low : low + "-" + high; }
};
std::vector<ReleaseChoice> takenByNcclRelease(const std::vector<int>& exported) {
  struct Series {
    const char *low, *high;
    int newest;
  };
  static const Series kSeries[] = {{"2.30", "", 12},    {"2.28", "2.29", 11}, {"2.26", "2.27", 10}, {"2.24", "2.25", 9},
                                   {"2.20", "2.23", 8}, {"2.19", "2.19", 7},  {"2.13", "2.18", 6}};
  std::vector<ReleaseChoice> taken;
  for (const Series& series : kSeries) {
    int best = 0;
    for (int v : exported)
      if (v >= 6 && v <= series.newest) best = std::max(best, v);
    if (!taken.empty() && taken.back().version == best)
      taken.back().low = series.low;
    else
      taken.push_back({series.low, series.high, best});
  }
  return taken;
}

// `dirs` come before the dynamic linker's search (-L), or with `lastResort` after it (this tool's own lib/: NCCL
// dlopen()s the bare name, so a copy on LD_LIBRARY_PATH or in the ld.so cache is the one it loads).
void probeCandidate(nns::tools::ProbeChannel& channel, const std::string& entry, const std::vector<std::string>& dirs,
                    bool lastResort) {
  nns::core::LoadOptions one;
  one.plugin = entry + ",";  // a list of one: an entry "none" is then a name to try, as within NCCL's list
  (lastResort ? one.fallbackDirs : one.searchDirs) = dirs;
  nns::core::LoadReport report;
  const nns::tools::SignalState signalsBefore = nns::tools::SignalState::now();
  channel.call(kLoaderProbe);
  auto net = nns::core::loadNet(one, &report);
  for (const auto& c : report.candidates) channel.send({{"candidate", nns::tools::candidateJson(c)}});
  if (net == nullptr) return;
  channel.send({{"chosen",
                 {{"name", nns::core::printable(net->name())},
                  {"path", net->path()},
                  {"version", net->version()},
                  {"makeVDevice", net->hasMakeVDevice()}}}});
  // The host's logger and the probe's comm id: this init takes the context of the loader's probe, as NCCL's first
  // communicator's does (init, devices, finalize: one communicator's whole life).
  void* ctx = nullptr;
  channel.call("init");
  ncclResult_t result = net->init(&ctx, 0, nullptr, nns::core::hostLogger, nullptr);
  probeDevices(channel, *net, ctx, result, "", "device", "deviceError");
  // What loading it and its init did to the process's signal handling (NCCL itself changes nothing there).
  json signalChanges = json::array();
  for (const auto& change : signalsBefore.changesIn(nns::tools::SignalState::now()))
    signalChanges.push_back({{"signal", change.signal}, {"before", change.before}, {"after", change.after}});
  channel.send({{"signalChanges", signalChanges}});

  // NCCL looks for a collNet in the chosen net's library only; without one (or with one that fails) it runs
  // without in-network collectives.
  nns::core::CollNetReport collReport;
  // What the library exports, sent before the probe runs any collNet code: a probe that crashes or hangs still
  // leaves the versions for the report.
  channel.send({{"collNetExported", versionsJson(nns::core::inspectLibrary(net->path(), false).collNetVersions)}});
  channel.call(kCollNetProbe);
  auto coll = nns::core::loadCollNet(*net, &collReport);
  channel.send({{"collNet",
                 {{"path", collReport.path},
                  {"exportedVersions", versionsJson(collReport.exportedVersions)},
                  {"chosenVersion", collReport.chosenVersion},
                  {"name", coll != nullptr ? json(nns::core::printable(coll->name())) : json(nullptr)},
                  {"rejectReason", collReport.rejectReason},
                  {"iallgather", coll != nullptr && coll->hasIallgather()},
                  {"ireducescatter", coll != nullptr && coll->hasIreducescatter()},
                  {"error", ""},
                  {"devices", json::array()}}}});
  if (coll == nullptr) return;
  void* collCtx = nullptr;
  channel.call("ncclCollNet init");
  result = coll->init(&collCtx, 0, nns::core::hostLogger);
  if (result == ncclSuccess) {
    // NCCL builds its CollNet support matrix from these answers: the pairs it may offload.
    std::vector<nns::tools::ReducePair> pairs;
    int failedType = 0, failedOp = 0;
    channel.call("ncclCollNet reduceSupport");
    const ncclResult_t asked = nns::tools::supportedPairs(
        [&](ncclDataType_t type, ncclRedOp_t op, int* supported) { return coll->reduceSupport(type, op, supported); },
        &pairs, &failedType, &failedOp);
    json list = json::array();
    for (const auto& p : pairs)
      list.push_back({{"type", nns::coll::typeName(static_cast<ncclDataType_t>(p.type))},
                      {"op", nns::coll::opName(static_cast<ncclRedOp_t>(p.op))}});
    channel.send({{"collReduces", list},
                  {"collReducesText", asked == ncclSuccess
                                          ? nns::tools::reducePairsText(pairs)
                                          : std::string("reduceSupport(") +
                                                nns::coll::typeName(static_cast<ncclDataType_t>(failedType)) + ", " +
                                                nns::coll::opName(static_cast<ncclRedOp_t>(failedOp)) + ") returned " +
                                                nccl_net::sdk::resultName(asked) + " (NCCL fails the communicator)"}});
  }
  probeDevices(channel, *coll, collCtx, result, "ncclCollNet ", "collDevice", "collError");
}

}  // namespace

int runTool(int argc, char** argv) {
  CLI::App app{"nccl-net-info: the net plugins NCCL would find, their ABI versions, and their devices"};
  std::string plugin;
  bool asJson = false;
  std::vector<std::string> dirs;
  int callTimeout = 10;
  auto* pluginOption = app.add_option("-p,--plugin", plugin,
                                      "plugin spec with NCCL_NET_PLUGIN semantics (default: $NCCL_NET_PLUGIN, "
                                      "else libnccl-net.so)");
  // As in nccl-net-check and nccl-net-perf, -L replaces the default: a folder of plugins given alone is listed alone.
  app.add_option("-L,--search-dir", dirs,
                 "directory searched for plugins, one per -L, repeatable; in place of the default (../lib beside "
                 "this tool)")
      ->allow_extra_args(false);
  app.add_flag("--json", asJson, "machine-readable output");
  app.add_option("--call-timeout", callTimeout,
                 "seconds one plugin call (or a library's loading) may take before the plugin is reported hung "
                 "(default 10)")
      ->transform(nns::tools::integerIn(1, 3600));
  if (int status = nns::tools::parseArguments(app, argc, argv); status >= 0) return status;
  // -p '' is NCCL_NET_PLUGIN set but empty (no external plugin), not "unset": the probes read it from there.
  if (pluginOption->count() > 0 && plugin.empty()) setenv("NCCL_NET_PLUGIN", "", 1);
  nns::tools::warnUnusableSearchDirs("nccl-net-info", dirs);
  const bool ownLib = dirs.empty();
  if (ownLib) dirs.push_back(nns::tools::libDirBesideExecutable());

  nns::core::LoadOptions options;
  options.plugin = plugin;
  (ownLib ? options.fallbackDirs : options.searchDirs) = dirs;
  const char* env = std::getenv("NCCL_NET_PLUGIN");
  std::string given = !plugin.empty() ? plugin : env != nullptr ? env : "";
  std::string spec = !given.empty()   ? given
                     : env != nullptr ? "(set but empty: no external plugin, as NCCL reads it)"
                                      : "(unset: libnccl-net.so)";
  const std::optional<std::string> netName = nns::core::requiredNetName(options);

  // A probe's child is in a process group of its own (a process the plugin forks is killed with it); one the tool
  // is ended during (Ctrl-C, `timeout`) is killed too.
  nns::tools::killProbeGroupsOnEndingSignals();
  // Every plugin is loaded and called in a child process of its own: one that crashes or hangs gets that verdict,
  // and the others are still listed. What each prints (its WARN lines: often the reason behind a rejection) is kept
  // with its library or candidate rather than left on stderr, where it would belong to none of them.
  json out;
  out["spec"] = spec;
  out["netName"] = netName ? json(*netName) : json(nullptr);
  out["searchDirs"] = dirs;
  out["searchDirsLast"] = ownLib;
  json found = json::array();
  for (const auto& path : nns::core::findPluginLibraries(dirs)) {
    auto probe = nns::tools::runIsolated(
        [&](nns::tools::ProbeChannel& channel) {
          channel.call(nns::tools::openCallName(path));
          auto exports = nns::core::inspectLibrary(path, true);
          channel.send({{"netVersions", versionsJson(exports.netVersions)},
                        {"collNetVersions", versionsJson(exports.collNetVersions)},
                        {"error", exports.error},
                        {"otherExports", printableNames(exports.symbols.other)},
                        {"otherExportsCount", exports.symbols.other.size()},
                        {"uniqueExports", printableNames(exports.symbols.unique)},
                        {"uniqueExportsCount", exports.symbols.unique.size()},
                        {"exportsError", exports.symbolsError}});
          // The verdict NCCL would reach on this library alone: loads (and through which version), or why not.
          nns::core::LoadOptions alone;
          alone.plugin = path;
          nns::core::LoadReport verdictReport;
          channel.call(kLoaderProbe);
          auto loaded = nns::core::loadNet(alone, &verdictReport);
          channel.send({{"verdict", loaded != nullptr ? "loads through ncclNet_v" + std::to_string(loaded->version())
                                    : verdictReport.candidates.empty()
                                        ? "not tried"
                                        : "rejected: " + verdictReport.candidates[0].rejectReason}});
        },
        callTimeout, true);
    json library = {{"path", path},
                    {"netVersions", json::array()},
                    {"collNetVersions", json::array()},
                    {"error", ""},
                    {"verdict", ""},
                    {"output", outputLines(probe.output)},
                    {"otherExports", json::array()},
                    {"otherExportsCount", 0},
                    {"uniqueExports", json::array()},
                    {"uniqueExportsCount", 0},
                    {"exportsError", ""}};
    for (const auto& record : probe.records)
      for (const auto& item : record.items()) library[item.key()] = item.value();
    if (!probe.failure.empty()) {
      library["verdict"] = probe.lastCall == kLoaderProbe
                               ? nns::tools::pinpointFailure(path, {}, probe.failure, callTimeout)
                               : probe.failure;
      library["crashed"] = probe.crashed;
      library["hung"] = probe.hung;
    }
    found.push_back(library);
  }
  out["found"] = found;

  // The candidates in NCCL's order, each alone in a child; the first that loads is chosen. One that crashes or hangs
  // ends the list, as it would end NCCL: the entries after it are listed as not tried.
  json candidates = json::array();
  json chosen = nullptr;
  json devices = json::array();
  std::string deviceError;
  json collNet = nullptr;
  json collNetExported = json::array();
  std::string stoppedAt;
  const std::vector<std::string> entries = nns::core::pluginSpecEntries(options);
  for (const auto& entry : entries) {
    if (chosen != nullptr) break;
    if (!stoppedAt.empty()) {
      candidates.push_back({{"requested", entry},
                            {"triedPaths", json::array()},
                            {"loadedPath", ""},
                            {"exportedVersions", json::array()},
                            {"chosenVersion", 0},
                            {"rejectReason", "not tried: NCCL would not get past " + stoppedAt},
                            {"notTried", true}});
      continue;
    }
    auto probe = nns::tools::runIsolated(
        [&](nns::tools::ProbeChannel& channel) { probeCandidate(channel, entry, dirs, ownLib); }, callTimeout, true);
    const json output = outputLines(probe.output);
    bool reported = false;
    for (const auto& record : probe.records) {
      if (record.contains("candidate")) {
        candidates.push_back(record["candidate"]);
        candidates.back()["output"] = output;  // the entry's one candidate: its loading, and its devices when chosen
        reported = true;
      }
      if (record.contains("chosen")) chosen = record["chosen"];
      if (record.contains("signalChanges") && chosen != nullptr) chosen["signalChanges"] = record["signalChanges"];
      if (record.contains("device")) devices.push_back(record["device"]);
      if (record.contains("deviceError")) deviceError = record["deviceError"].get<std::string>();
      if (record.contains("collNetExported")) collNetExported = record["collNetExported"];
      if (record.contains("collNet")) collNet = record["collNet"];
      if (record.contains("collDevice")) collNet["devices"].push_back(record["collDevice"]);
      if (record.contains("collError")) collNet["error"] = record["collError"];
      if (record.contains("collReduces")) {
        collNet["reduceSupport"] = record["collReduces"];
        collNet["reduces"] = record["collReducesText"];
      }
    }
    if (probe.failure.empty()) continue;
    if (!reported) {
      // The loader itself crashed or hung on this candidate: so would NCCL. Listed as the loader would have listed
      // it, from the same probe step by step.
      // In the loader's order: this tool's own ../lib last (LoadOptions::fallbackDirs), or the step-by-step probe
      // could open another copy than the loader did.
      const std::vector<std::string> none;
      auto pinpoint =
          nns::tools::pinpointCandidate(entry, ownLib ? none : dirs, probe.failure, callTimeout, ownLib ? dirs : none);
      candidates.push_back({{"requested", entry},
                            {"triedPaths", pinpoint.tried},
                            {"loadedPath", pinpoint.opened},
                            {"exportedVersions", pinpoint.exportedVersions},
                            {"chosenVersion", 0},
                            {"rejectReason", pinpoint.failure},
                            {"crashed", probe.crashed},
                            {"hung", probe.hung},
                            {"output", output}});
      stoppedAt = entry;
    } else if (probe.lastCall == kCollNetProbe) {
      // NCCL probes the collNet the same way, inside the init of the net it loaded: it would end there too, not run
      // without in-network collectives.
      collNet = {{"path", chosen.value("path", "")},
                 {"exportedVersions", collNetExported},
                 {"chosenVersion", 0},
                 {"name", nullptr},
                 {"rejectReason", probe.failure + "; NCCL runs the same probe when it loads the net, and would " +
                                      (probe.hung ? "hang" : "crash") + " there too"},
                 {"crashed", probe.crashed},
                 {"hung", probe.hung},
                 {"iallgather", false},
                 {"ireducescatter", false},
                 {"error", ""},
                 {"devices", json::array()}};
    } else if (collNet != nullptr) {
      collNet["error"] = probe.failure;
    } else if (chosen != nullptr) {
      deviceError = probe.failure;
    }
  }
  // What this tool's own answer assumes beyond NCCL: the library found in one of its search directories (NCCL only
  // dlopen()s the name), and the newest ncclNet version this host knows (NCCL 2.30's; older NCCL takes older ones).
  for (auto& c : candidates) {
    const std::string loaded = c.value("loadedPath", "");
    std::string toolDir;
    if (!loaded.empty() && c["requested"].get<std::string>().find('/') == std::string::npos)
      for (const auto& dir : dirs)
        if (loaded.rfind(dir + "/", 0) == 0 && !onLibraryPath(dir)) toolDir = dir;
    c["foundOnlyInToolSearchDir"] = toolDir.empty() ? json(nullptr) : json(toolDir);
    json releases = json::array();
    if (c["chosenVersion"].get<int>() != 0)
      for (const ReleaseChoice& r : takenByNcclRelease(c["exportedVersions"].get<std::vector<int>>()))
        releases.push_back({{"nccl", r.label()}, {"ncclNetVersion", r.version}});
    c["byNcclRelease"] = releases;
  }
  out["candidates"] = candidates;
  json ignored = ignoredEntries(given, entries);
  out["ignored"] = ignored;
  out["chosen"] = chosen;
  out["devices"] = devices;
  out["collNet"] = collNet;
  if (!deviceError.empty()) out["deviceError"] = deviceError;

  if (asJson) {
    std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    const bool collNetEnded = collNet != nullptr && (collNet.value("crashed", false) || collNet.value("hung", false));
    return chosen != nullptr && !collNetEnded ? 0 : 1;
  }

  // Where NCCL itself would have found the value: a configuration file (NCCL_CONF_FILE, ~/.nccl.conf or
  // /etc/nccl.conf), applied to the environment as NCCL applies it.
  // -p (even -p '', which is set but empty) replaced what a file set.
  const std::string pluginOrigin = pluginOption->count() == 0 ? nns::core::ncclConfOrigin("NCCL_NET_PLUGIN") : "";
  std::printf("NCCL_NET_PLUGIN: %s%s%s\n", shown(spec).c_str(),
              pluginOrigin.empty() ? "" : (" (from " + pluginOrigin + ")").c_str(),
              !spec.empty() && spec.back() == '\r'
                  ? " -- it ends in a carriage return (\\x0d): the file has Windows line endings, whose CR NCCL "
                    "keeps in the value, so it looks for a library of that name"
                  : "");
  const std::string netOrigin = nns::core::ncclConfOrigin("NCCL_NET");
  if (netName)
    std::printf("NCCL_NET: %s%s\n",
                netName->empty() ? "(set but empty: it matches no net, and NCCL fails)"
                                 : (shown(*netName) + " (only a net of that name is taken, ignoring case)").c_str(),
                netOrigin.empty() ? "" : (" (from " + netOrigin + ")").c_str());
  std::printf("search directories:");
  for (const auto& d : dirs) std::printf(" %s", shown(d).c_str());
  std::printf(ownLib ? " (a plugin named without a path is looked for here last, after the dynamic linker's search, "
                       "which is all NCCL does)\n\nPlugin libraries found:\n"
                     : " (looked in first, before the dynamic linker's search)\n\nPlugin libraries found:\n");
  if (found.empty()) std::printf("  (none)\n");
  for (const auto& f : found) {
    // A library dlopen refused exports nothing we could see: "none" would read as "looked, and found no table".
    const std::string exports = f["error"].get<std::string>().empty()
                                    ? "ncclNet " + versionsText(f["netVersions"].get<std::vector<int>>()) +
                                          "; ncclCollNet " + versionsText(f["collNetVersions"].get<std::vector<int>>())
                                    : std::string("exports unknown: it could not be opened");
    std::printf("  %s\n    %s\n    %s\n", shown(f["path"]).c_str(), exports.c_str(), shown(f["verdict"]).c_str());
    printLeakedSymbols(f);
    printOutput(f);
  }
  std::printf("\nCandidates, in the order NCCL tries them:\n");
  if (candidates.empty())
    std::printf(strcasecmp(spec.c_str(), "none") == 0 ? "  (none: NCCL_NET_PLUGIN=none, only NCCL's internal nets)\n"
                                                      : "  (none: the setting names no library)\n");
  for (const auto& c : candidates) {
    std::printf("  %s\n", shown(c["requested"]).c_str());
    const std::vector<std::string> own =
        ownLib ? lastResortFiles(c["requested"].get<std::string>(), dirs) : std::vector<std::string>{};
    for (const auto& p : c["triedPaths"]) {
      const std::string path = p.get<std::string>();
      const bool last = std::find(own.begin(), own.end(), path) != own.end();
      std::printf("    tried  %s%s\n", shown(p).c_str(),
                  last ? "  (this tool's last resort; NCCL does not look here)" : "");
    }
    if (!c["loadedPath"].get<std::string>().empty()) {
      // Where the dynamic linker's search resolved a bare name, the file it opened too.
      const std::string file = c.value("openedFile", "");
      const std::string where =
          !file.empty() && file != c["loadedPath"].get<std::string>() ? " (" + shown(file) + ")" : "";
      std::printf("    opened %s%s, exports ncclNet %s\n", shown(c["loadedPath"]).c_str(), where.c_str(),
                  versionsText(c["exportedVersions"].get<std::vector<int>>()).c_str());
    }
    if (!c["foundOnlyInToolSearchDir"].is_null())
      std::printf(
          "    (found in %s, a search directory of this tool's: NCCL, which dlopen()s the bare name, finds it\n"
          "    only if that directory is on LD_LIBRARY_PATH or in the ld.so cache, or if NCCL_NET_PLUGIN is its "
          "path)\n",
          shown(c["foundOnlyInToolSearchDir"]).c_str());
    if (c["chosenVersion"].get<int>() != 0) {
      std::printf("    CHOSEN through ncclNet_v%d (the newest it exports that NCCL 2.30 knows)\n",
                  c["chosenVersion"].get<int>());
      std::string byRelease;
      for (const auto& r : c["byNcclRelease"])
        byRelease += (byRelease.empty() ? "" : ", ") + r["nccl"].get<std::string>() +
                     (r["ncclNetVersion"].get<int>() > 0 ? " v" + std::to_string(r["ncclNetVersion"].get<int>())
                                                         : std::string(" cannot load it"));
      std::printf("    by NCCL release: %s\n", byRelease.c_str());
    } else if (c.value("notTried", false)) {
      std::printf("    %s\n", shown(c["rejectReason"]).c_str());
    } else if (c.value("crashed", false) || c.value("hung", false)) {
      std::printf("    %s: NCCL would %s here too\n", shown(c["rejectReason"]).c_str(),
                  c.value("crashed", false) ? "crash" : "hang");
    } else {
      std::printf("    rejected: %s\n", shown(c["rejectReason"]).c_str());
    }
    printOutput(c);
  }
  // One line per reason, naming its entries (a long name cut short).
  std::vector<std::pair<std::string, std::string>> ignoredByReason;  // reason, entries
  for (const auto& i : ignored) {
    std::string name = i["requested"].get<std::string>();
    if (name.size() > 60) name = name.substr(0, 57) + "...";  // cut before escaping: never inside a \xNN
    name = shown(name);
    const std::string reason = shown(i["reason"]);
    auto same =
        std::find_if(ignoredByReason.begin(), ignoredByReason.end(), [&](const auto& r) { return r.first == reason; });
    if (same == ignoredByReason.end()) {
      ignoredByReason.emplace_back(reason, name);
    } else {
      same->second += ", " + name;
    }
  }
  for (const auto& [reason, names] : ignoredByReason) std::printf("  ignored: %s: %s\n", names.c_str(), reason.c_str());
  if (chosen == nullptr) {
    if (stoppedAt.empty()) {
      // NCCL's internal IB net finds its devices under /sys/class/infiniband; with none it has no device, and NCCL
      // goes on to its Socket net (unless NCCL_NET asks for IB alone).
      const int rdmaDevices = countRdmaDevices();
      const std::string rdma = rdmaDevices > 0
                                   ? std::to_string(rdmaDevices) + " RDMA device(s) in /sys/class/infiniband"
                                   : "no RDMA device in /sys/class/infiniband";
      if (!netName) {
        std::printf("\nNo plugin loaded: NCCL would fall back to its internal %s (%s).\n",
                    rdmaDevices > 0 ? "IB net" : "Socket net", rdma.c_str());
      } else if (strcasecmp(netName->c_str(), "Socket") == 0) {
        std::printf("\nNo plugin loaded: NCCL would use its internal Socket net (NCCL_NET=%s).\n", netName->c_str());
      } else if (strcasecmp(netName->c_str(), "IB") == 0) {
        if (rdmaDevices > 0)
          std::printf("\nNo plugin loaded: NCCL would use its internal IB net (NCCL_NET=%s; %s).\n", netName->c_str(),
                      rdma.c_str());
        else
          std::printf(
              "\nNo plugin loaded, and NCCL_NET=%s asks for NCCL's internal IB net, but this machine has %s: NCCL "
              "would fail (\"Failed to initialize any NET plugin\").\n",
              netName->c_str(), rdma.c_str());
      } else {
        std::printf(
            "\nNo plugin loaded, and NCCL_NET=%s names neither internal net (IB, Socket): NCCL would fail "
            "(\"Failed to initialize any NET plugin\").\n",
            shown(*netName).c_str());
      }
    } else {
      std::printf("\nNo plugin loaded: NCCL would not get past %s.\n", shown(stoppedAt).c_str());
    }
    return 1;
  }
  std::printf("\nDevices of %s (ncclNet_v%d):\n", chosen["name"].get<std::string>().c_str(),
              chosen["version"].get<int>());
  if (!deviceError.empty()) std::printf("  %s\n", shown(deviceError).c_str());
  printDevices(devices);
  // NIC fusion: NCCL (2.23+, ncclNet_v9+) merges the ports of one NIC into a vNIC where the plugin can make one.
  const int version = chosen["version"].get<int>();
  if (chosen.value("makeVDevice", false))
    std::printf(
        "  NIC fusion: makeVDevice present: NCCL fuses devices as close as NCCL_NET_MERGE_LEVEL (default PORT: the\n"
        "  ports of one NIC; NCCL_NET_FORCE_MERGE names groups) into vNICs and uses those instead (nccl-net-topo\n"
        "  shows the groups)\n");
  else
    std::printf(
        "  NIC fusion: none: %s, so NCCL uses each device as listed\n",
        version < 9 ? ("ncclNet_v" + std::to_string(version) + " has no makeVDevice").c_str() : "makeVDevice is NULL");
  // A plugin (or its transport library) that installs signal handlers replaces the application's for the life of
  // every process NCCL loads it into.
  if (chosen.contains("signalChanges") && !chosen["signalChanges"].empty()) {
    std::vector<nns::tools::SignalChange> changes;
    for (const auto& c : chosen["signalChanges"]) changes.push_back({c["signal"], c["before"], c["after"]});
    std::printf(
        "  Signals: loading it and its init changed how the process handles signals, replacing the application's "
        "handlers\n  for the life of the process (NCCL changes none): %s\n",
        shown(nns::tools::signalChangesText(changes, changes.size())).c_str());
  } else if (chosen.contains("signalChanges")) {
    std::printf("  Signals: loading it and its init left every signal's handler and the mask as they were\n");
  }
  if (collNet == nullptr) return 0;  // the probe ended before the collNet's turn (the failure is above)

  std::printf("\nCollNet (in-network collectives) of %s:\n  exports ncclCollNet %s\n", shown(chosen["path"]).c_str(),
              versionsText(collNet["exportedVersions"].get<std::vector<int>>()).c_str());
  if (collNet["chosenVersion"].get<int>() == 0) {
    const bool ended = collNet.value("crashed", false) || collNet.value("hung", false);
    std::printf("  %s: %s\n", ended ? "FAILED" : "not used", shown(collNet["rejectReason"]).c_str());
    return ended ? 1 : 0;  // NCCL would end there, as with a net that crashes
  }
  std::printf("  CHOSEN %s through ncclCollNet_v%d (the newest it exports that NCCL 2.30 knows)\n",
              collNet["name"].get<std::string>().c_str(), collNet["chosenVersion"].get<int>());
  // NCCL offloads all-gather and reduce-scatter to the network only where the table has them (v8 and newer). But its
  // adapter for v8..v10 tables (src/plugin/net/net_v8.cc .. net_v10.cc) installs its own iallgather and
  // ireducescatter whatever the table holds, and NCCL's check for a NULL sees those: on several nodes, where it picks
  // CollNet for an all-gather or a reduce-scatter, the adapter calls the table's NULL.
  const bool gathers = collNet.value("iallgather", false), scatters = collNet.value("ireducescatter", false);
  const int collVersion = collNet["chosenVersion"].get<int>();
  const std::string missing = !gathers && !scatters ? "iallgather and ireducescatter are"
                              : !gathers            ? "iallgather is"
                                                    : "ireducescatter is";
  std::printf("  collectives: iallreduce%s%s%s\n", gathers ? ", iallgather" : "", scatters ? ", ireducescatter" : "",
              gathers && scatters ? ""
              : collVersion < 8   ? " (ncclCollNet_v6 and v7 have no all-gather or reduce-scatter)"
              : collVersion <= 10
                  ? (" (" + missing + " NULL in its table, but NCCL 2.30's adapter for ncclCollNet_v8..v10 calls " +
                     (gathers || scatters ? "it" : "them") +
                     " all the same: a job of several nodes that uses CollNet crashes there; give the entries, or "
                     "export ncclCollNet_v11 or newer, whose NULLs NCCL checks)")
                        .c_str()
                  : " (the rest are NULL in its table: NCCL does not offload them)");
  if (collNet.contains("reduces"))
    std::printf("  reduces: %s (reduceSupport: NCCL offloads only these types and ops)\n",
                shown(collNet["reduces"]).c_str());
  if (!collNet["error"].get<std::string>().empty()) std::printf("  %s\n", shown(collNet["error"]).c_str());
  printDevices(collNet["devices"]);
  return 0;
}

namespace {

// A byte count in the largest binary unit that divides it ("1 TiB", "512 MiB", "1000 B"): maxP2p and maxColl are
// mostly powers of two, whose 13 digits pushed the columns after them out of line. --json has the exact number.
std::string bytesText(size_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  size_t unit = 0;
  while (unit + 1 < std::size(kUnits) && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return std::to_string(bytes) + " " + kUnits[unit];
}

void printDevices(const json& devices) {
  std::printf("  %-3s %-14s %-9s %-7s %-5s %-4s %-8s %-16s %-17s %-6s %-5s %-8s %-11s %-11s %s\n", "dev", "name",
              "speed", "latency", "port", "recv", "maxComms", "guid", "ptrSupport", "regGlb", "flush", "devType",
              "maxP2p", "maxColl", "vProps / pciPath");
  for (const auto& d : devices) {
    if (d.contains("error")) {
      std::printf("  %-3d %s\n", d["dev"].get<int>(), d["error"].get<std::string>().c_str());
      continue;
    }
    std::string vprops;
    for (int v : d["vProps"]) vprops += std::to_string(v) + ",";
    if (!vprops.empty()) vprops.pop_back();
    std::string pci = d["pciPath"].is_null() ? "(virtual)" : d["pciPath"].get<std::string>();
    char latency[32];
    if (d["latencyUs"].is_number())
      std::snprintf(latency, sizeof(latency), "%.1f", d["latencyUs"].get<double>());
    else
      std::snprintf(latency, sizeof(latency), "%s", d["latencyUs"].get<std::string>().c_str());
    std::printf("  %-3d %-14s %-9s %-7s %-5d %-4d %-8d %-16llx %-17s %-6d %-5d %-8s %-11s %-11s {%s} %s\n",
                d["dev"].get<int>(), d["name"].get<std::string>().c_str(), speedText(d["speedMbps"].get<int>()).c_str(),
                latency, d["port"].get<int>(), d["maxRecvs"].get<int>(), d["maxComms"].get<int>(),
                static_cast<unsigned long long>(d["guid"].get<uint64_t>()), d["ptrSupport"].get<std::string>().c_str(),
                d["regIsGlobal"].get<int>(), d["forceFlush"].get<int>(), d["netDeviceType"].get<std::string>().c_str(),
                bytesText(d["maxP2pBytes"].get<size_t>()).c_str(), bytesText(d["maxCollBytes"].get<size_t>()).c_str(),
                vprops.c_str(), pci.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  return nns::tools::guardedMain("nccl-net-info", argc, argv, runTool);
}
