// XML reading and writing: NCCL's dump format byte for byte, and a lossless round trip of every machine file.
#include <filesystem>

#include "topology_test_util.h"

namespace nns::topo::testing {
namespace {

// A dump in NCCL_TOPO_DUMP_FILE's exact shape (2-space indent, attributes in order, leaves self-closed).
const char* kNcclDump =
    "<system version=\"1\">\n"
    "  <cpu host_hash=\"0x5e8ae3f2b1f1a3b3\" numaid=\"0\" affinity=\"0000ffff\" arch=\"x86_64\" "
    "vendor=\"GenuineIntel\" familyid=\"6\" modelid=\"143\">\n"
    "    <pci busid=\"0000:17:00.0\" class=\"0x030200\" vendor=\"0x10de\" device=\"0x2330\" "
    "subsystem_vendor=\"0x10de\" subsystem_device=\"0x16c1\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\">\n"
    "      <gpu dev=\"0\" sm=\"90\" rank=\"0\" gdr=\"1\">\n"
    "        <nvlink target=\"fffffff:ffff:ff\" count=\"18\" tclass=\"0x068000\"/>\n"
    "      </gpu>\n"
    "    </pci>\n"
    "    <pci busid=\"0000:18:00.0\" class=\"0x020700\" vendor=\"0x15b3\" device=\"0x1021\" "
    "subsystem_vendor=\"0x15b3\" subsystem_device=\"0x0023\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\">\n"
    "      <nic>\n"
    "        <net name=\"mlx5_0\" dev=\"0\" speed=\"400000\" port=\"1\" latency=\"0.000000\" "
    "guid=\"0xa87cb10003e1a258\" "
    "maxconn=\"131072\" gdr=\"1\"/>\n"
    "      </nic>\n"
    "    </pci>\n"
    "  </cpu>\n"
    "</system>\n";

bool sameTree(const XmlElement& a, const XmlElement& b) {
  if (a.name != b.name || a.attrs != b.attrs || a.children.size() != b.children.size()) return false;
  for (std::size_t i = 0; i < a.children.size(); ++i)
    if (!sameTree(a.children[i], b.children[i])) return false;
  return true;
}

TEST(TopologyXml, NcclDumpRoundTripsByteForByte) {
  XmlDocument doc = parseXml(kNcclDump, "dump.xml");
  EXPECT_EQ(writeXml(doc.root), kNcclDump);
  // Attribute order is kept, which NCCL's format relies on.
  EXPECT_EQ(doc.root.children[0].attrs[0].first, "host_hash");
  System s = buildSystem(doc);
  EXPECT_EQ(s.count(GPU), 1);
  EXPECT_EQ(s.node(NET, 0).net.asic, 0xa87cb10003e1a258ULL);
  EXPECT_FLOAT_EQ(s.node(NET, 0).net.bw, 50.0f);
}

TEST(TopologyXml, EveryMachineFileRoundTrips) {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(NNS_TOPOLOGY_DATA_DIR)) {
    if (entry.path().extension() != ".xml") continue;
    ++files;
    XmlDocument doc = readXmlFile(entry.path().string());
    std::string written = writeXml(doc.root);
    XmlDocument again = parseXml(written, "again");
    EXPECT_TRUE(sameTree(doc.root, again.root)) << entry.path();
    EXPECT_EQ(writeXml(again.root), written) << entry.path();  // writing is a fixed point
  }
  EXPECT_EQ(files, 6);
}

TEST(TopologyXml, CompletedPartialFileRoundTripsAndRebuildsTheSameSystem) {
  XmlDocument doc = readXmlFile(dataPath("azure-ndv4.xml"));
  CompletionOptions f;
  f.gpuSm = 80;
  f.gpuNvlinks = 12;
  f.nicSpeedMbps = 200000;
  EXPECT_EQ(completeTopology(doc.root, f), std::make_pair(8, 8));
  const std::string written = writeXml(doc.root);
  // Each added <net> has every attribute NCCL's dump writes (NCCL_TOPO_DUMP_FILE): a guid too.
  EXPECT_NE(written.find("<net name=\"net0\" dev=\"0\" speed=\"200000\" port=\"0\" latency=\"0.000000\" guid=\"0x0\""),
            std::string::npos)
      << written;
  XmlDocument again = parseXml(written, "again");
  System a = buildSystem(doc);
  System b = buildSystem(again);
  ASSERT_EQ(a.count(GPU), b.count(GPU));
  for (int t = 0; t < kNodeTypeCount; ++t) {
    ASSERT_EQ(a.count(t), b.count(t));
    for (int i = 0; i < a.count(t); ++i) {
      EXPECT_EQ(a.node(t, i).id, b.node(t, i).id);
      EXPECT_EQ(a.node(t, i).links.size(), b.node(t, i).links.size());
    }
  }
  // Completing twice adds nothing: the leaves now have their <gpu>/<nic>.
  EXPECT_EQ(completeTopology(again.root, f), std::make_pair(0, 0));
}

TEST(TopologyXml, EscapesSpecialCharacters) {
  XmlElement e;
  e.name = "net";
  e.setAttr("name", "a<b>&\"c\"");
  std::string text = writeXml(e);
  EXPECT_EQ(text, "<net name=\"a&lt;b&gt;&amp;&quot;c&quot;\"/>\n");
  EXPECT_EQ(*parseXml(text).root.attr("name"), "a<b>&\"c\"");
}

TEST(TopologyXml, ControlCharactersAreWrittenAsReferences) {
  // Raw, a newline or tab read back as a space (attribute normalisation) and ESC is no XML character.
  XmlElement e;
  e.name = "net";
  e.setAttr("name", "\x1b[31mRED\nx\ty\r");
  std::string text = writeXml(e);
  EXPECT_EQ(text, "<net name=\"&#27;[31mRED&#10;x&#9;y&#13;\"/>\n");
  EXPECT_EQ(*parseXml(text).root.attr("name"), "\x1b[31mRED\nx\ty\r");
}

TEST(TopologyXml, CommentsAndUnknownElementsAreTolerated) {
  // NCCL skips comments and ignores elements it has no handler for. (The <cpu> holds a NIC: one with nothing NCCL
  // keeps below it would be trimmed.)
  const char* text =
      "<!-- a machine -->\n<system version=\"1\" name=\"box\">\n  <extra what=\"ignored\"/>\n"
      "  <cpu numaid=\"0\" arch=\"arm64\">\n    <!-- nothing -->\n    <unknown/>\n"
      "    <nic><net name=\"eth0\" dev=\"0\"/></nic>\n  </cpu>\n</system>\n";
  System s = buildSystem(parseXml(text, "t.xml"));
  EXPECT_EQ(s.name, "box");
  EXPECT_EQ(s.count(CPU), 1);
  EXPECT_EQ(s.node(CPU, 0).cpu.arch, CpuArch::Arm);
}

}  // namespace
}  // namespace nns::topo::testing
