// nccl-net-check: the conformance harness a vendor runs against their plugin: one line per rule (PASS, FAIL or SKIP
// with the evidence), --json and --junit FILE; exit status 1 on any FAIL, 2 when the plugin does not load.
#include <limits.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "harness.hpp"

namespace {

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

int main(int argc, char** argv) {
  CLI::App app{"nccl-net-check: conformance rules for an ncclNet plugin, each side in its own process"};
  nns::check::Options options;
  std::string plugin;
  bool asJson = false;
  bool list = false;
  std::string junit;
  app.add_option("plugin", plugin, "plugin name (libnccl-net-NAME.so) or path, NCCL_NET_PLUGIN semantics");
  app.add_option("-L,--search-dir", options.load.searchDirs, "directories searched for the plugin (default ../lib)");
  app.add_option("--rules", options.only, "run only these rules")->delimiter(',');
  app.add_option("--call-timeout", options.callTimeoutSeconds, "seconds any one plugin call may take (default 5)");
  app.add_option("--rule-timeout", options.ruleTimeoutSeconds, "seconds one rule may take (default 60)");
  app.add_option("--peer-death-timeout", options.peerDeathSeconds,
                 "seconds a pending test may take to report a killed peer (default 30: an RDMA NIC's retry timeout)")
      ->check(CLI::Range(1, 3600));
  app.add_flag("--json", asJson, "machine-readable output");
  app.add_option("--junit", junit, "also write JUnit XML to this file");
  app.add_flag("--list", list, "list the rules and what each checks");
  CLI11_PARSE(app, argc, argv);

  if (list) {
    for (const auto& rule : nns::check::allRules()) std::printf("%-30s %s\n", rule.name, rule.checks);
    return 0;
  }
  if (plugin.empty()) {
    std::fprintf(stderr, "nccl-net-check: name a plugin (see --help)\n");
    return 2;
  }
  options.load.plugin = plugin;
  if (options.load.searchDirs.empty()) options.load.searchDirs.push_back(libDirBesideExecutable());
  nns::core::LoadReport report;
  auto net = nns::core::loadNet(options.load, &report);
  if (net == nullptr) {
    std::fprintf(stderr, "nccl-net-check: %s did not load:\n", plugin.c_str());
    for (const auto& c : report.candidates) std::fprintf(stderr, "  %s: %s\n", c.requested.c_str(), c.rejectReason.c_str());
    return 2;
  }
  std::string name = net->name();
  std::string path = net->path();
  int version = net->version();
  net.reset();  // each rule loads the plugin in its own process

  if (!asJson) std::printf("nccl-net-check: %s (%s) through ncclNet_v%d\n", name.c_str(), path.c_str(), version);
  auto results = nns::check::runRules(options);
  int failed = 0, passed = 0, skipped = 0;
  nlohmann::json out = {{"plugin", name}, {"path", path}, {"version", version}, {"rules", nlohmann::json::array()}};
  for (const auto& r : results) {
    failed += r.status == nns::check::Status::kFail;
    passed += r.status == nns::check::Status::kPass;
    skipped += r.status == nns::check::Status::kSkip;
    out["rules"].push_back({{"rule", r.rule}, {"status", nns::check::statusText(r.status)}, {"evidence", r.evidence},
                            {"seconds", r.seconds}});
    if (!asJson)
      std::printf("%-4s %-30s %s (%.1f s)\n", nns::check::statusText(r.status), r.rule.c_str(), r.evidence.c_str(),
                  r.seconds);
  }
  if (asJson) {
    out["passed"] = passed;
    out["failed"] = failed;
    out["skipped"] = skipped;
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  }
  if (!junit.empty()) {
    std::ofstream xml(junit);
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
