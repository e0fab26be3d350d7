// Shared helpers for the topology tests: loading the public machine files, completing them, reading results.
#pragma once

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "nns/topology/analysis.h"

namespace nns::topo::testing {

inline std::string dataPath(const std::string& file) {
  return std::string(NNS_TOPOLOGY_DATA_DIR) + "/" + file;
}
// Public files minimally changed to show one case each (tests/topology/data).
inline std::string casePath(const std::string& file) {
  return std::string(NNS_TOPOLOGY_CASES_DIR) + "/" + file;
}

// Loads a file, completes it like the EXPECTED harness did, runs the whole pipeline with NCCL's defaults (environment
// ignored) as rank 0 of a 16-rank (two-node) communicator; analyzeFile takes a file of tests/data/topologies.
inline Analysis analyzePath(const std::string& path, const CompletionOptions& fill, AnalysisOptions options = {}) {
  XmlDocument doc = readXmlFile(path);
  completeTopology(doc.root, fill);
  if (options.nRanks == 0) options.nRanks = 16;
  return analyze(std::move(doc), options);
}
inline Analysis analyzeFile(const std::string& file, const CompletionOptions& fill, AnalysisOptions options = {}) {
  return analyzePath(dataPath(file), fill, std::move(options));
}

inline std::vector<int> ints(const std::string& text) {
  std::istringstream in(text);
  std::vector<int> out;
  int v;
  while (in >> v) out.push_back(v);
  return out;
}

inline const Path& gpuToNet(const Analysis& a, int rank, int netDev) {
  const System& s = a.system;
  return s.node(GPU, s.gpuIndexOfRank(rank)).paths[NET][static_cast<std::size_t>(s.netIndexOfDev(netDev))];
}
inline const Path& netToGpu(const Analysis& a, int netDev, int rank) {
  const System& s = a.system;
  return s.node(NET, s.netIndexOfDev(netDev)).paths[GPU][static_cast<std::size_t>(s.gpuIndexOfRank(rank))];
}
inline const Path& gpuToGpu(const Analysis& a, int rank1, int rank2) {
  const System& s = a.system;
  return s.node(GPU, s.gpuIndexOfRank(rank1)).paths[GPU][static_cast<std::size_t>(s.gpuIndexOfRank(rank2))];
}
inline const Path& gpuToCpu(const Analysis& a, int rank, int cpuIndex) {
  const System& s = a.system;
  return s.node(GPU, s.gpuIndexOfRank(rank)).paths[CPU][static_cast<std::size_t>(cpuIndex)];
}

// Channel c of a graph as "NET/in r r r ... NET/out" (inter) or "r r r" (intra), the EXPECTED file's shape.
inline std::string channelText(const Analysis& a, const Graph& g, int c, bool inter) {
  int n = a.system.count(GPU);
  std::ostringstream o;
  if (inter) o << "NET/" << topoIdLocal(g.inter[static_cast<std::size_t>(2 * c)]) << ' ';
  for (int i = 0; i < n; ++i) o << (i ? " " : "") << g.intra[static_cast<std::size_t>(c * n + i)];
  if (inter) o << " NET/" << topoIdLocal(g.inter[static_cast<std::size_t>(2 * c + 1)]);
  return o.str();
}

inline std::string pathText(const Path& p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%s/%.2f", std::string(pathTypeName(p.type)).c_str(), p.bw);
  return buf;
}

}  // namespace nns::topo::testing
