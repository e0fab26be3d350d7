// NIC fusion groups: XML ancestor-chain distances between NET devices and NCCL's greedy merge up to 4 per vNIC.
#include "nns/topology/fusion.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <sstream>

#include "nns/topology/model.h"

namespace nns::topo {

namespace {

bool chainTo(const XmlElement& node, const XmlElement& target, std::vector<const XmlElement*>& chain) {
  chain.push_back(&node);
  if (&node == &target) return true;
  for (const auto& c : node.children)
    if (chainTo(c, target, chain)) return true;
  chain.pop_back();
  return false;
}

void collectNets(const XmlElement& e, const std::string& source, std::vector<FusionDevice>& out) {
  if (e.name == "net" && e.hasAttr("dev")) {
    FusionDevice d;
    // Read as the system builder reads it (base auto-detected, the whole value a number): "0x1" is 1, not 0.
    const std::int64_t dev = parseIntAttr(e, "dev", source);
    if (dev < 0 || dev > INT32_MAX)
      throw TopologyError(source + ":" + std::to_string(e.line) + ": <net> attribute dev=" + std::to_string(dev) +
                          " is outside 0.." + std::to_string(INT32_MAX));
    d.dev = static_cast<int>(dev);
    if (const std::string* n = e.attr("name")) d.name = *n;
    d.net = &e;
    out.push_back(d);
  }
  for (const auto& c : e.children) collectNets(c, source, out);
}

bool differOnlyInFunction(const XmlElement& a, const XmlElement& b) {
  const std::string* ba = a.attr("busid");
  const std::string* bb = b.attr("busid");
  if (!ba || !bb || ba->size() != bb->size() || ba->empty()) return false;
  return ba->compare(0, ba->size() - 1, *bb, 0, bb->size() - 1) == 0;
}

// The <pci> element a <net> hangs off (parent of its <nic>), or nullptr.
const XmlElement* nicPciOf(const std::vector<const XmlElement*>& chain) {
  for (std::size_t i = chain.size(); i-- > 0;)
    if (chain[i]->name == "pci") return chain[i];
  return nullptr;
}

std::string levelName(int level) {
  return level == PATH_PORT ? "PORT" : std::string(pathTypeName(level));
}

}  // namespace

std::vector<FusionDevice> listNetDevices(const XmlElement& systemRoot, const std::string& sourceName) {
  std::vector<FusionDevice> out;
  collectNets(systemRoot, sourceName, out);
  return out;
}

int netDistance(const XmlElement& root, const XmlElement& a, const XmlElement& b) {
  std::vector<const XmlElement*> ca, cb;
  if (!chainTo(root, a, ca) || !chainTo(root, b, cb)) return PATH_DIS;
  std::size_t i = 0;
  while (i < ca.size() && i < cb.size() && ca[i] == cb[i]) ++i;
  if (i < ca.size() && i < cb.size() && differOnlyInFunction(*ca[i], *cb[i])) return PATH_PORT;
  if (i == 0) return PATH_DIS;
  const XmlElement* common = ca[i - 1];
  if (common->name == "system") return PATH_SYS;
  if (common->name == "cpu") return PATH_PHB;
  if (common->name == "nic" || common->name == "net") return PATH_PORT;
  if (common->name == "pci") {
    // PIX when the common switch is the direct parent of both NICs' PCI devices.
    ca.pop_back();
    cb.pop_back();
    const XmlElement* pa = nicPciOf(ca);
    const XmlElement* pb = nicPciOf(cb);
    auto parentOf = [&](const std::vector<const XmlElement*>& chain, const XmlElement* node) -> const XmlElement* {
      for (std::size_t k = 1; k < chain.size(); ++k)
        if (chain[k] == node) return chain[k - 1];
      return nullptr;
    };
    if (pa && pb && parentOf(ca, pa) == common && parentOf(cb, pb) == common) return PATH_PIX;
    return PATH_PXB;
  }
  return PATH_SYS;
}

std::vector<FusionGroup> computeFusionGroups(const XmlElement& root, int mergeLevel, const std::string& forceMerge,
                                             const std::string& sourceName, std::vector<std::string>* notes) {
  std::vector<FusionDevice> devs = listNetDevices(root, sourceName);
  // NCCL walks the physical devices by index, which need not be the order of the <net> elements in the file.
  std::stable_sort(devs.begin(), devs.end(),
                   [](const FusionDevice& a, const FusionDevice& b) { return a.dev < b.dev; });
  std::vector<bool> placed(devs.size(), false);
  std::vector<FusionGroup> groups;
  // As NCCL's parseStringList and matchIfList with exact names: "name" is every port of that device, "name:port" the
  // one port, the name ending at the first ':' and the port read with atoi ("01" is 1, "x" 0). A device's port is its
  // <net port> read as the builder reads it, 0 when absent (NCCL's default, and what the plugin reports there).
  auto matches = [&](const FusionDevice& d, const std::string& token) {
    const size_t colon = token.find(':');
    if (colon == std::string::npos) return token == d.name;
    const int port = static_cast<int>(parseOptionalIntAttr(*d.net, "port", sourceName).value_or(0));
    return token.compare(0, colon, d.name) == 0 && colon == d.name.size() &&
           port == std::atoi(token.c_str() + colon + 1);
  };
  if (!forceMerge.empty()) {
    std::stringstream groupsIn(forceMerge);
    std::string groupText;
    while (std::getline(groupsIn, groupText, ';')) {
      // NCCL's parser keeps the first kMaxDevsPerNic names of a group and drops the rest.
      std::stringstream namesIn(groupText);
      std::vector<std::string> names;
      int dropped = 0;
      for (std::string name; std::getline(namesIn, name, ',');) {
        if (name.empty() || name[0] == ':') continue;  // NCCL's parser skips one with no name before ':'
        if (names.size() < static_cast<std::size_t>(kMaxDevsPerNic)) {
          names.push_back(name);
        } else {
          ++dropped;
        }
      }
      if (names.empty()) continue;
      // Every device a name matches is in the group (a name without a port takes all its ports), and the count must
      // be the names', or NCCL refuses the variable.
      FusionGroup g;
      for (std::size_t i = 0; i < devs.size(); ++i) {
        bool matched = false;
        for (const std::string& name : names) matched = matched || matches(devs[i], name);
        if (!matched) continue;
        placed[i] = true;
        g.devs.push_back(devs[i].dev);
      }
      if (g.devs.size() != names.size())
        throw TopologyError("NCCL_NET_FORCE_MERGE group \"" + groupText + "\" matches " +
                            std::to_string(g.devs.size()) + " devices, " + std::to_string(names.size()) +
                            " requested (NCCL fails its init with \"Only matched " + std::to_string(g.devs.size()) +
                            " devices, " + std::to_string(names.size()) + " requested\"; a name without :port " +
                            "matches every port of the device)");
      g.reason = "forced by NCCL_NET_FORCE_MERGE";
      if (dropped > 0)
        g.reason += " (" + std::to_string(dropped) + " name(s) past the " + std::to_string(kMaxDevsPerNic) +
                    "th ignored, as NCCL's parser keeps " + std::to_string(kMaxDevsPerNic) + ")";
      if (g.devs.size() > 1) {
        groups.push_back(std::move(g));
      } else if (notes != nullptr) {
        // ncclTopoMakeVnic makes no vNIC of one device, and the device stays placed: not merged automatically.
        notes->push_back("NCCL_NET_FORCE_MERGE group \"" + groupText + "\" is one device (dev " +
                         std::to_string(g.devs[0]) + "): NCCL makes no vNIC of one device, and keeps it out of the " +
                         "automatic fusion (it is used as it is)");
      }
    }
  }
  if (mergeLevel <= PATH_LOC) return groups;
  for (std::size_t i = 0; i < devs.size(); ++i) {
    if (placed[i]) continue;
    placed[i] = true;
    FusionGroup g;
    g.devs.push_back(devs[i].dev);
    for (std::size_t j = i + 1; j < devs.size() && g.devs.size() < static_cast<std::size_t>(kMaxDevsPerNic); ++j) {
      if (placed[j]) continue;
      int d = netDistance(root, *devs[i].net, *devs[j].net);
      if (d <= mergeLevel) {
        placed[j] = true;
        g.devs.push_back(devs[j].dev);
        g.distance = std::max(g.distance, d);
      }
    }
    if (g.devs.size() > 1) {
      g.reason = "distance " + levelName(g.distance) + " <= NCCL_NET_MERGE_LEVEL " + levelName(mergeLevel) +
                 " (at most " + std::to_string(kMaxDevsPerNic) + " devices per vNIC)";
      groups.push_back(std::move(g));
    }
  }
  return groups;
}

}  // namespace nns::topo
