// nccl-net-check: the conformance harness a vendor runs against their plugin: one line per rule (PASS, FAIL or SKIP
// with the evidence), --json and --junit FILE, --netns to put the two sides in two network namespaces; exit status 1
// on any FAIL, 2 when the plugin does not load, 3 when --netns setup fails, 4 when --netns cannot run here.
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "harness.hpp"
#include "netns.hpp"
#include "nns/core/printable.hpp"
#include "nns/tools/guarded_main.hpp"
#include "nns/tools/isolated_probe.hpp"
#include "nns/tools/parse_arguments.hpp"

namespace {

constexpr int kExitNetnsSetupFailed = 3;
constexpr int kExitNetnsUnavailable = 4;

// The peers' copy of the plugin (--netns), kept in paths a signal handler can remove without allocating.
char gPeerCopyFile[PATH_MAX] = "";
char gPeerCopyDir[PATH_MAX] = "";

void removePeerCopy() {
  if (gPeerCopyFile[0] != '\0') unlink(gPeerCopyFile);
  if (gPeerCopyDir[0] != '\0') rmdir(gPeerCopyDir);
  gPeerCopyFile[0] = gPeerCopyDir[0] = '\0';
}

// Appends `text` to `out` (async-signal-safe pieces for onTerminate).
char* append(char* out, const char* end, const char* text) {
  while (*text != '\0' && out < end) *out++ = *text++;
  return out;
}

// Interrupted: say which rule was running, stop it, remove the namespaces and the copy, and go.
void onTerminate(int sig) {
  if (const char* rule = nns::check::runningRuleName(); rule != nullptr) {
    char text[256];
    char number[4] = {static_cast<char>('0' + sig / 10 % 10), static_cast<char>('0' + sig % 10), '\0', '\0'};
    char* end = text + sizeof(text) - 1;
    char* out = append(text, end, "nccl-net-check: interrupted by signal ");
    out = append(out, end, sig >= 10 ? number : number + 1);
    out = append(out, end, " in rule ");
    out = append(out, end, rule);
    out = append(out, end, "\n");
    (void)!write(STDERR_FILENO, text, static_cast<size_t>(out - text));
  }
  nns::check::killRunningRule();
  nns::check::removeNetnsFromSignalHandler();
  removePeerCopy();
  _exit(128 + sig);
}

// The file the dynamic linker opened for `loaded` (which may be a bare name it found on its path).
std::string realLibraryPath(const std::string& loaded) {
  void* handle = dlopen(loaded.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) return loaded;
  link_map* map = nullptr;
  std::string path = dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr ? map->l_name : loaded;
  dlclose(handle);
  return path;
}

// Copies the plugin into a fresh directory so that each peer opens a distinct instance (dlopen of the same file
// would return the already-initialised one). Empty on failure, with the reason in `error`.
std::string copyPluginForPeers(const std::string& path, std::string* error) {
  char dir[] = "/tmp/nccl-net-check-XXXXXX";
  if (mkdtemp(dir) == nullptr) {
    *error = std::string("mkdtemp: ") + std::strerror(errno);
    return "";
  }
  std::string copy = std::string(dir) + "/" + std::filesystem::path(path).filename().string();
  std::snprintf(gPeerCopyDir, sizeof(gPeerCopyDir), "%s", dir);
  std::error_code failed;
  std::filesystem::copy_file(path, copy, failed);
  if (failed) {
    *error = "copying " + path + " to " + copy + ": " + failed.message();
    removePeerCopy();
    return "";
  }
  std::snprintf(gPeerCopyFile, sizeof(gPeerCopyFile), "%s", copy.c_str());
  return copy;
}

std::string xmlEscape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string libDirBesideExecutable() {
  char path[PATH_MAX];
  ssize_t length = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (length <= 0) return "../lib";
  path[length] = '\0';
  std::string dir = std::string(path).substr(0, std::string(path).rfind('/')) + "/../lib";
  char resolved[PATH_MAX];
  return realpath(dir.c_str(), resolved) != nullptr ? resolved : dir;
}

}  // namespace

int runTool(int argc, char** argv) {
  CLI::App app{"nccl-net-check: conformance rules for an ncclNet plugin, each side in its own process"};
  nns::check::Options options;
  std::string plugin;
  bool asJson = false;
  bool list = false;
  std::string junit;
  app.add_option("plugin", plugin, "plugin name (libnccl-net-NAME.so) or path, NCCL_NET_PLUGIN semantics");
  app.add_option("-L,--search-dir", options.load.searchDirs, "directories searched for the plugin (default ../lib)");
  app.add_option("--rules", options.only, "run only these rules")->delimiter(',');
  // Zero or less would fail every rule as "hung" and blame the plugin for a typo.
  app.add_option("--call-timeout", options.callTimeoutSeconds, "seconds any one plugin call may take (default 5)")
      ->check(CLI::Range(1, 3600));
  app.add_option("--rule-timeout", options.ruleTimeoutSeconds, "seconds one rule may take (default 60)")
      ->check(CLI::Range(1, 24 * 3600));
  app.add_option("--peer-death-timeout", options.peerDeathSeconds,
                 "seconds a pending test may take to report a killed peer (default 30: an RDMA NIC's retry timeout)")
      ->check(CLI::Range(1, 3600));
  app.add_flag("--json", asJson, "machine-readable output");
  app.add_option("--junit", junit, "also write JUnit XML to this file");
  app.add_flag("--list", list, "list the rules and what each checks");
  bool netns = false;
  app.add_flag("--netns", netns,
               "run the two sides in two network namespaces joined by a veth pair (needs root and iproute2); "
               "sets NCCL_SOCKET_IFNAME and NNS_SOCKET_IFNAME to the veth names unless already set");
  if (int status = nns::tools::parseArguments(app, argc, argv); status >= 0) return status;

  if (list) {
    for (const auto& rule : nns::check::allRules()) std::printf("%-30s %s\n", rule.name, rule.checks);
    return 0;
  }
  if (plugin.empty()) {
    std::fprintf(stderr, "nccl-net-check: name a plugin, before --rules (which takes a list; see --help)\n");
    return 2;
  }
  for (const auto& wanted : options.only) {
    bool known = false;
    for (const auto& rule : nns::check::allRules()) known = known || wanted == rule.name;
    if (!known) {
      std::fprintf(stderr, "nccl-net-check: no rule named '%s' (--list shows them)\n", wanted.c_str());
      return 2;
    }
  }
  // The JUnit file is opened before any rule runs: a path that cannot be written is a bad argument, not a report
  // silently missing after a run that exits 0.
  std::ofstream xml;
  if (!junit.empty()) {
    xml.open(junit);
    if (!xml) {
      std::fprintf(stderr, "nccl-net-check: --junit %s: cannot write there: %s\n", junit.c_str(), std::strerror(errno));
      return 2;
    }
  }
  options.load.plugin = plugin;
  if (options.load.searchDirs.empty()) options.load.searchDirs.push_back(libDirBesideExecutable());
  // Loaded first in a child process, as each rule loads it again in its own: a plugin that crashes or hangs in its
  // constructors, init, devices or getProperties is reported as not loading, naming the call, and never takes the
  // harness down or holds it.
  constexpr const char* kLoaderProbe = "the loader's probe (dlopen, init, devices, getProperties(0), finalize)";
  std::string name, path, filePath;
  int version = 0;
  std::vector<nns::core::CandidateReport> rejected;
  std::string loadFailure, failedEntry;
  for (const auto& entry : nns::core::pluginSpecEntries(options.load)) {
    auto probe = nns::tools::runIsolated(
        [&](nns::tools::ProbeChannel& channel) {
          nns::core::LoadOptions one = options.load;
          one.plugin = entry + ",";  // a list of one, as the entry is within the list
          nns::core::LoadReport report;
          channel.call(kLoaderProbe);
          auto net = nns::core::loadNet(one, &report);
          for (const auto& c : report.candidates) channel.send({{"candidate", nns::tools::candidateJson(c)}});
          if (net != nullptr)
            channel.send({{"name", nns::core::printable(net->name())},
                          {"path", net->path()},
                          {"version", net->version()},
                          {"filePath", realLibraryPath(net->path())}});
        },
        options.callTimeoutSeconds);
    for (const auto& record : probe.records) {
      if (record.contains("candidate")) rejected.push_back(nns::tools::candidateFromJson(record["candidate"]));
      if (record.contains("version")) {
        name = record["name"].get<std::string>();
        path = record["path"].get<std::string>();
        version = record["version"].get<int>();
        filePath = record["filePath"].get<std::string>();
      }
    }
    if (version != 0) break;
    if (!probe.failure.empty()) {
      loadFailure =
          nns::tools::pinpointFailure(entry, options.load.searchDirs, probe.failure, options.callTimeoutSeconds);
      failedEntry = entry;
      break;  // NCCL would crash or hang here too: it tries no later entry
    }
  }
  if (version == 0) {
    std::fprintf(stderr, "nccl-net-check: %s did not load:\n", plugin.c_str());
    for (const auto& c : rejected) std::fprintf(stderr, "  %s: %s\n", c.requested.c_str(), c.rejectReason.c_str());
    if (!loadFailure.empty()) std::fprintf(stderr, "  %s: %s\n", failedEntry.c_str(), loadFailure.c_str());
    if (asJson) {  // still one JSON object on stdout, for a pipeline that parses it
      nlohmann::json candidates = nlohmann::json::array();
      for (const auto& c : rejected)
        candidates.push_back({{"requested", c.requested}, {"rejectReason", c.rejectReason}});
      if (!loadFailure.empty()) candidates.push_back({{"requested", failedEntry}, {"rejectReason", loadFailure}});
      nlohmann::json out = {{"plugin", plugin},
                            {"loaded", false},
                            {"candidates", candidates},
                            {"rules", nlohmann::json::array()},
                            {"passed", 0},
                            {"failed", 0},
                            {"skipped", 0}};
      std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    }
    return 2;
  }

  // Interrupted (Ctrl-C, a CI job's timeout): the rule in progress goes with the harness, with its peers (each rule
  // is a process group of its own, which a terminal's SIGINT does not reach), and --netns's namespaces are removed.
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, onTerminate);
  nns::check::NetnsPair namespaces;
  nlohmann::json netnsJson = nullptr;
  if (netns) {
    std::string reason = nns::check::NetnsPair::unavailableReason();
    if (!reason.empty()) {
      std::printf("nccl-net-check: --netns unavailable: %s\n", reason.c_str());
      return kExitNetnsUnavailable;
    }
    std::string error;
    bool unsupported = false;
    if (!namespaces.create(&error, &unsupported)) {
      if (unsupported) {
        std::printf("nccl-net-check: --netns unavailable: no network-namespace support here (%s)\n", error.c_str());
        return kExitNetnsUnavailable;
      }
      std::fprintf(stderr, "nccl-net-check: --netns setup failed: %s\n", error.c_str());
      return kExitNetnsSetupFailed;
    }
    options.peerLibrary = copyPluginForPeers(filePath, &error);
    if (options.peerLibrary.empty()) {
      std::fprintf(stderr, "nccl-net-check: --netns: %s\n", error.c_str());
      return kExitNetnsSetupFailed;
    }
    options.listenerNetns = namespaces.listenerNamespace();
    options.peerNetns = namespaces.peerNamespace();
    // Both veth ends share a prefix, so one value selects the right interface on either side.
    setenv("NCCL_SOCKET_IFNAME", namespaces.interfacePrefix().c_str(), 0);
    setenv("NNS_SOCKET_IFNAME", namespaces.interfacePrefix().c_str(), 0);
    netnsJson = {{"listener",
                  {{"namespace", namespaces.listenerNamespace()},
                   {"interface", namespaces.listenerInterface()},
                   {"address", nns::check::NetnsPair::kListenerAddress}}},
                 {"peer",
                  {{"namespace", namespaces.peerNamespace()},
                   {"interface", namespaces.peerInterface()},
                   {"address", nns::check::NetnsPair::kPeerAddress}}},
                 {"NCCL_SOCKET_IFNAME", std::getenv("NCCL_SOCKET_IFNAME")},
                 {"NNS_SOCKET_IFNAME", std::getenv("NNS_SOCKET_IFNAME")}};
  }

  if (!asJson) std::printf("nccl-net-check: %s (%s) through ncclNet_v%d\n", name.c_str(), path.c_str(), version);
  if (!asJson && netns)
    std::printf("netns: listener in %s (%s %s), peer in %s (%s %s), NCCL_SOCKET_IFNAME=%s NNS_SOCKET_IFNAME=%s\n",
                namespaces.listenerNamespace().c_str(), namespaces.listenerInterface().c_str(),
                nns::check::NetnsPair::kListenerAddress, namespaces.peerNamespace().c_str(),
                namespaces.peerInterface().c_str(), nns::check::NetnsPair::kPeerAddress,
                std::getenv("NCCL_SOCKET_IFNAME"), std::getenv("NNS_SOCKET_IFNAME"));
  // Each rule's line as soon as its verdict is known (a plugin that hangs in several rules holds the run for
  // minutes): on stdout in the text output, where the lines are the table; on stderr with --json, whose stdout is
  // the one object printed at the end.
  auto printLine = [](FILE* out, const nns::check::RuleResult& r) {
    std::fprintf(out, "%-4s %-30s %s (%.1f s)\n", nns::check::statusText(r.status), r.rule.c_str(), r.evidence.c_str(),
                 r.seconds);
    std::fflush(out);
  };
  auto results =
      nns::check::runRules(options, [&](const nns::check::RuleResult& r) { printLine(asJson ? stderr : stdout, r); });
  std::string trafficLine;
  if (netns) {
    uint64_t rx = 0, tx = 0;
    std::string error;
    char text[256];
    if (namespaces.listenerTraffic(&rx, &tx, &error)) {
      netnsJson["listenerRxBytes"] = rx;
      netnsJson["listenerTxBytes"] = tx;
      std::snprintf(text, sizeof(text), "netns: %s received %.1f MB and sent %.1f MB across the veth pair\n",
                    namespaces.listenerInterface().c_str(), rx / 1e6, tx / 1e6);
      trafficLine = text;
    } else {
      trafficLine = "netns: no traffic counters: " + error + "\n";
    }
  }
  removePeerCopy();
  namespaces.remove();
  int failed = 0, passed = 0, skipped = 0;
  nlohmann::json out = {{"plugin", name},     {"loaded", true},     {"path", path},
                        {"version", version}, {"netns", netnsJson}, {"rules", nlohmann::json::array()}};
  for (const auto& r : results) {
    failed += r.status == nns::check::Status::kFail;
    passed += r.status == nns::check::Status::kPass;
    skipped += r.status == nns::check::Status::kSkip;
    out["rules"].push_back({{"rule", r.rule},
                            {"status", nns::check::statusText(r.status)},
                            {"evidence", r.evidence},
                            {"seconds", r.seconds}});
  }
  if (asJson) {
    out["passed"] = passed;
    out["failed"] = failed;
    out["skipped"] = skipped;
    std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    std::printf("%s", trafficLine.c_str());
  }
  if (!junit.empty()) {
    xml << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite name=\"nccl-net-check " << xmlEscape(name)
        << "\" tests=\"" << results.size() << "\" failures=\"" << failed << "\" skipped=\"" << skipped << "\">\n";
    for (const auto& r : results) {
      xml << "  <testcase classname=\"" << xmlEscape(name) << "\" name=\"" << xmlEscape(r.rule) << "\" time=\""
          << r.seconds << "\">";
      if (r.status == nns::check::Status::kFail) xml << "<failure message=\"" << xmlEscape(r.evidence) << "\"/>";
      if (r.status == nns::check::Status::kSkip) xml << "<skipped message=\"" << xmlEscape(r.evidence) << "\"/>";
      xml << "</testcase>\n";
    }
    xml << "</testsuite>\n";
  }
  return failed > 0 ? 1 : 0;
}

int main(int argc, char** argv) {
  return nns::tools::guardedMain("nccl-net-check", argc, argv, runTool);
}
