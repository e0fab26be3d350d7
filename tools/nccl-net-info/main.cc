// nccl-net-info: what a cluster engineer runs first: which net plugins are found, which ABI versions each exports,
// which one is chosen and why, every device's properties, and the chosen plugin's collNet (versions, the one taken or
// why none, its devices). Human table by default, --json for machines.
#include <limits.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nns/core/loader.hpp"
#include "nns/core/printable.hpp"
#include "nns/tools/guarded_main.hpp"

namespace {

using nlohmann::json;

std::string executableDir() {
  char path[PATH_MAX];
  ssize_t length = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (length <= 0) return ".";
  path[length] = '\0';
  std::string text(path);
  return text.substr(0, text.rfind('/'));
}

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

json deviceJson(int dev, const ncclNetProperties_v12_t& p) {
  json vdevs = json::array();
  for (int i = 0; i < p.vProps.ndevs && i < NCCL_NET_MAX_DEVS_PER_NIC; ++i) vdevs.push_back(p.vProps.devs[i]);
  return json{{"dev", dev},
              {"name", p.name != nullptr ? nns::core::printable(p.name) : ""},
              {"pciPath", p.pciPath != nullptr ? json(nns::core::printable(p.pciPath)) : json(nullptr)},
              {"guid", p.guid},
              {"speedMbps", p.speed},
              {"port", p.port},
              {"latencyUs", p.latency},
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

}  // namespace

int runTool(int argc, char** argv) {
  CLI::App app{"nccl-net-info: the net plugins NCCL would find, their ABI versions, and their devices"};
  std::string plugin;
  bool asJson = false;
  std::vector<std::string> dirs;
  app.add_option("-p,--plugin", plugin,
                 "plugin spec with NCCL_NET_PLUGIN semantics (default: $NCCL_NET_PLUGIN, "
                 "else libnccl-net.so)");
  app.add_option("-L,--search-dir", dirs, "extra directories searched for plugins (default: ../lib beside this tool)");
  app.add_flag("--json", asJson, "machine-readable output");
  CLI11_PARSE(app, argc, argv);
  if (dirs.empty()) {
    char resolved[PATH_MAX];
    std::string lib = executableDir() + "/../lib";
    dirs.push_back(realpath(lib.c_str(), resolved) != nullptr ? resolved : lib);
  }

  nns::core::LoadOptions options;
  options.plugin = plugin;
  options.searchDirs = dirs;
  const char* env = std::getenv("NCCL_NET_PLUGIN");
  std::string spec = !plugin.empty() ? plugin : env != nullptr ? env : "(unset: libnccl-net.so)";

  json out;
  out["spec"] = spec;
  out["searchDirs"] = dirs;
  json found = json::array();
  for (const auto& path : nns::core::findPluginLibraries(dirs)) {
    auto exports = nns::core::inspectLibrary(path);
    // The verdict NCCL would reach on this library alone: loads (and through which version), or why not.
    nns::core::LoadOptions alone;
    alone.plugin = path;
    nns::core::LoadReport verdictReport;
    auto loaded = nns::core::loadNet(alone, &verdictReport);
    std::string verdict = loaded != nullptr ? "loads through ncclNet_v" + std::to_string(loaded->version())
                          : verdictReport.candidates.empty() ? "not tried"
                                                             : "rejected: " + verdictReport.candidates[0].rejectReason;
    found.push_back({{"path", path},
                     {"netVersions", versionsJson(exports.netVersions)},
                     {"collNetVersions", versionsJson(exports.collNetVersions)},
                     {"error", exports.error},
                     {"verdict", verdict}});
  }
  out["found"] = found;

  nns::core::LoadReport report;
  auto net = nns::core::loadNet(options, &report);
  json candidates = json::array();
  for (const auto& c : report.candidates) {
    candidates.push_back({{"requested", c.requested},
                          {"triedPaths", c.triedPaths},
                          {"loadedPath", c.loadedPath},
                          {"exportedVersions", versionsJson(c.exportedVersions)},
                          {"chosenVersion", c.chosenVersion},
                          {"rejectReason", c.rejectReason}});
  }
  out["candidates"] = candidates;

  json devices = json::array();
  std::string deviceError;
  if (net != nullptr) {
    void* ctx = nullptr;
    ncclResult_t result = net->init(&ctx, 0, nullptr, nullptr, nullptr);
    int ndev = 0;
    if (result == ncclSuccess) result = net->devices(&ndev);
    for (int dev = 0; result == ncclSuccess && dev < ndev; ++dev) {
      ncclNetProperties_v12_t props;
      if (net->getProperties(dev, &props) == ncclSuccess) {
        devices.push_back(deviceJson(dev, props));
      } else {
        devices.push_back({{"dev", dev}, {"error", "getProperties failed"}});
      }
    }
    if (result != ncclSuccess) deviceError = "init/devices returned " + std::to_string(static_cast<int>(result));
    net->finalize(ctx);
    out["chosen"] = {{"name", nns::core::printable(net->name())}, {"path", net->path()}, {"version", net->version()}};
  } else {
    out["chosen"] = nullptr;
  }
  out["devices"] = devices;

  // NCCL looks for a collNet in the chosen net's library only; without one (or with one that fails) it runs
  // without in-network collectives.
  json collNet = nullptr;
  if (net != nullptr) {
    nns::core::CollNetReport collReport;
    auto coll = nns::core::loadCollNet(*net, &collReport);
    json collDevices = json::array();
    std::string collError;
    if (coll != nullptr) {
      void* ctx = nullptr;
      ncclResult_t result = coll->init(&ctx, 0, nullptr);
      int ndev = 0;
      if (result == ncclSuccess) result = coll->devices(&ndev);
      for (int dev = 0; result == ncclSuccess && dev < ndev; ++dev) {
        ncclNetProperties_v12_t props;
        if (coll->getProperties(dev, &props) == ncclSuccess) {
          collDevices.push_back(deviceJson(dev, props));
        } else {
          collDevices.push_back({{"dev", dev}, {"error", "getProperties failed"}});
        }
      }
      if (result != ncclSuccess) collError = "init/devices returned " + std::to_string(static_cast<int>(result));
      coll->finalize(ctx);
    }
    collNet = {{"path", collReport.path},
               {"exportedVersions", versionsJson(collReport.exportedVersions)},
               {"chosenVersion", collReport.chosenVersion},
               {"name", coll != nullptr ? json(nns::core::printable(coll->name())) : json(nullptr)},
               {"rejectReason", collReport.rejectReason},
               {"error", collError},
               {"devices", collDevices}};
  }
  out["collNet"] = collNet;

  if (asJson) {
    std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return net != nullptr ? 0 : 1;
  }

  std::printf("NCCL_NET_PLUGIN: %s\nsearch directories:", spec.c_str());
  for (const auto& d : dirs) std::printf(" %s", d.c_str());
  std::printf("\n\nPlugin libraries found:\n");
  if (found.empty()) std::printf("  (none)\n");
  for (const auto& f : found) {
    std::printf("  %s\n    ncclNet %s; ncclCollNet %s\n    %s\n", f["path"].get<std::string>().c_str(),
                versionsText(f["netVersions"].get<std::vector<int>>()).c_str(),
                versionsText(f["collNetVersions"].get<std::vector<int>>()).c_str(),
                f["verdict"].get<std::string>().c_str());
  }
  std::printf("\nCandidates, in the order NCCL tries them:\n");
  if (report.candidates.empty()) std::printf("  (none: NCCL_NET_PLUGIN=none, only NCCL's internal nets)\n");
  for (const auto& c : report.candidates) {
    std::printf("  %s\n", c.requested.c_str());
    for (const auto& p : c.triedPaths) std::printf("    tried  %s\n", p.c_str());
    if (!c.loadedPath.empty())
      std::printf("    opened %s, exports ncclNet %s\n", c.loadedPath.c_str(),
                  versionsText(c.exportedVersions).c_str());
    if (c.chosenVersion != 0) {
      std::printf("    CHOSEN through ncclNet_v%d (the newest it exports that this host knows)\n", c.chosenVersion);
    } else {
      std::printf("    rejected: %s\n", c.rejectReason.c_str());
    }
  }
  if (net == nullptr) {
    std::printf("\nNo plugin loaded: NCCL would fall back to its internal IB/Socket nets.\n");
    return 1;
  }
  std::printf("\nDevices of %s (ncclNet_v%d):\n", nns::core::printable(net->name()).c_str(), net->version());
  if (!deviceError.empty()) std::printf("  %s\n", deviceError.c_str());
  printDevices(devices);

  std::printf("\nCollNet (in-network collectives) of %s:\n  exports ncclCollNet %s\n", net->path().c_str(),
              versionsText(collNet["exportedVersions"].get<std::vector<int>>()).c_str());
  if (collNet["chosenVersion"].get<int>() == 0) {
    std::printf("  not used: %s\n", collNet["rejectReason"].get<std::string>().c_str());
    return 0;
  }
  std::printf("  CHOSEN %s through ncclCollNet_v%d (the newest it exports that this host knows)\n",
              collNet["name"].get<std::string>().c_str(), collNet["chosenVersion"].get<int>());
  if (!collNet["error"].get<std::string>().empty()) std::printf("  %s\n", collNet["error"].get<std::string>().c_str());
  printDevices(collNet["devices"]);
  return 0;
}

namespace {

void printDevices(const json& devices) {
  std::printf("  %-3s %-14s %-9s %-7s %-5s %-4s %-8s %-8s %-17s %-6s %-5s %-8s %-11s %-11s %s\n", "dev", "name",
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
    std::printf("  %-3d %-14s %-9s %-7.1f %-5d %-4d %-8d %-8llx %-17s %-6d %-5d %-8s %-11zu %-11zu {%s} %s\n",
                d["dev"].get<int>(), d["name"].get<std::string>().c_str(),
                (std::to_string(d["speedMbps"].get<int>() / 1000) + "Gb/s").c_str(), d["latencyUs"].get<double>(),
                d["port"].get<int>(), d["maxRecvs"].get<int>(), d["maxComms"].get<int>(),
                static_cast<unsigned long long>(d["guid"].get<uint64_t>()), d["ptrSupport"].get<std::string>().c_str(),
                d["regIsGlobal"].get<int>(), d["forceFlush"].get<int>(), d["netDeviceType"].get<std::string>().c_str(),
                d["maxP2pBytes"].get<size_t>(), d["maxCollBytes"].get<size_t>(), vprops.c_str(), pci.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  return nns::tools::guardedMain("nccl-net-info", argc, argv, runTool);
}
