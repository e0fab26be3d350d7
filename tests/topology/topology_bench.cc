// Google Benchmark of the topology pipeline: the largest public file and a synthetic 72-GPU, 18-NIC machine.
#include <benchmark/benchmark.h>

#include "nns/topology/analysis.h"

namespace {

using namespace nns::topo;

XmlDocument ndv4() {
  XmlDocument doc = readXmlFile(std::string(NNS_TOPOLOGY_DATA_DIR) + "/azure-ndv4.xml");
  CompletionOptions f;
  f.gpuSm = 80;
  f.gpuNvlinks = 12;
  f.nicSpeedMbps = 200000;
  f.nicPort = 1;
  f.nicMaxConn = 131072;
  completeTopology(doc.root, f);
  return doc;
}

XmlDocument p4d() {
  XmlDocument doc = readXmlFile(std::string(NNS_TOPOLOGY_DATA_DIR) + "/aws-p4d.24xlarge.xml");
  CompletionOptions f;
  f.gpuSm = 80;
  f.gpuNvlinks = 12;
  f.nicSpeedMbps = 100000;
  f.nicMaxConn = 1024;
  completeTopology(doc.root, f);
  return doc;
}

// Paths + trimming + every decision + ring and tree searches for one node and for several nodes.
void pipeline(benchmark::State& state, const XmlDocument& doc) {
  AnalysisOptions options;
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores): Google Benchmark's loop
    Analysis a = analyze(doc, options);
    benchmark::DoNotOptimize(a.searches.size());
  }
}

// Reference in the same run: only reading and parsing the file (what any tool has to do before modelling anything).
void BM_Ndv4ParseOnly(benchmark::State& state) {
  std::string path = std::string(NNS_TOPOLOGY_DATA_DIR) + "/azure-ndv4.xml";
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores): Google Benchmark's loop
    XmlDocument doc = readXmlFile(path);
    benchmark::DoNotOptimize(doc.root.children.size());
  }
}

void BM_Ndv4Pipeline(benchmark::State& state) {
  pipeline(state, ndv4());
}
void BM_P4dPipeline(benchmark::State& state) {
  pipeline(state, p4d());
}
void BM_Synthetic72x18Pipeline(benchmark::State& state) {
  pipeline(state, makeSyntheticTopology(72, 18));
}

void BM_Synthetic72x18Paths(benchmark::State& state) {
  XmlDocument doc = makeSyntheticTopology(72, 18);
  System sys = buildSystem(doc);
  TopoSettings settings;
  for (auto _ : state) computePaths(sys, settings);  // NOLINT(clang-analyzer-deadcode.DeadStores)
}

}  // namespace

BENCHMARK(BM_Ndv4ParseOnly)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Ndv4Pipeline)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_P4dPipeline)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Synthetic72x18Pipeline)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Synthetic72x18Paths)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
