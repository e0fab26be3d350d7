// libFuzzer target: any bytes through the XML reader, system builder, path computation and (small) searches.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "nns/topology/fusion.h"
#include "nns/topology/paths.h"
#include "nns/topology/search.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace nns::topo;
  try {
    XmlDocument doc = parseXml(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.xml");
    if (doc.root.name == "graphs") {
      loadGraphXml(doc, nullptr);
      // Against a real (two-GPU, one-NIC) system too, and printed: channels are indexed by the system's GPU count.
      static const System twoGpus = buildSystem(parseXml(
          "<system version=\"1\"><cpu numaid=\"0\" arch=\"x86_64\" vendor=\"GenuineIntel\" familyid=\"6\" "
          "modelid=\"85\"><pci busid=\"0000:01:00.0\" class=\"0x030200\" link_speed=\"8 GT/s\" link_width=\"16\">"
          "<gpu dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"1\"/></pci><pci busid=\"0000:02:00.0\" class=\"0x030200\" "
          "link_speed=\"8 GT/s\" link_width=\"16\"><gpu dev=\"1\" sm=\"80\" rank=\"1\" gdr=\"1\"/></pci>"
          "<nic><net name=\"n\" dev=\"0\" speed=\"100000\"/></nic></cpu></system>",
          "two-gpus.xml"));
      for (const Graph& g : loadGraphXml(doc, &twoGpus)) (void)graphLogLines(twoGpus, g);
      return 0;
    }
    // What is written reads back as what was read: writing again gives the same text.
    const std::string written = writeXml(doc.root);
    if (writeXml(parseXml(written, "written.xml").root) != written) abort();
    computeFusionGroups(doc.root, PATH_SYS);
    System sys = buildSystem(doc);
    // Path tables grow with the square of the node count; the fuzzer's job is the reader and the rules, so very
    // large (valid) systems stop here to keep each input fast.
    for (const auto& nodes : sys.nodes)
      if (nodes.size() > 64) return 0;
    TopoSettings settings;
    computePaths(sys, settings);
    if (sys.count(GPU) == 0) return 0;
    trimSystem(sys, settings, sys.node(GPU, 0).gpu.rank, 2 * sys.count(GPU));
    for (int n = 0; n < sys.count(NET); ++n)
      checkGdr(sys, settings, sys.node(GPU, 0).gpu.rank, sys.node(NET, n).net.dev, true);
    // The search's cost grows with the GPU count; small systems keep each input fast.
    if (sys.count(GPU) <= 4) {
      searchInit(sys);
      Graph ring;
      computeGraph(sys, settings, ring);
    }
  } catch (const TopologyError&) {
    // One clear error is the expected outcome for malformed input.
  }
  return 0;
}
