// Malformed input: truncated files, wrong attributes, cycles, huge numbers; one clear error each, never a crash.
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>

#include "topology_test_util.h"

namespace nns::topo::testing {
namespace {

// Runs the whole pipeline on text; returns the error message, or "" when it loaded fine.
std::string loadError(const std::string& text) {
  try {
    XmlDocument doc = parseXml(text, "bad.xml");
    AnalysisOptions o;
    o.nRanks = 16;
    analyze(std::move(doc), o);
    return "";
  } catch (const TopologyError& e) {
    return e.what();
  }
}

std::string fileText(const std::string& name) {
  std::ifstream in(dataPath(name));
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

const std::string kCpu = "<cpu numaid=\"0\" arch=\"x86_64\" vendor=\"GenuineIntel\" familyid=\"6\" modelid=\"85\">";
std::string wrap(const std::string& body) {
  return "<system version=\"1\">\n" + kCpu + "\n" + body + "\n</cpu>\n</system>\n";
}
std::string gpuPci(const std::string& busId, const std::string& gpuAttrs, const std::string& inner = "") {
  return "<pci busid=\"" + busId + "\" class=\"0x030200\" link_speed=\"8 GT/s\" link_width=\"16\"><gpu " + gpuAttrs +
         ">" + inner + "</gpu></pci>";
}

TEST(TopologyMalformed, EveryTruncationGivesOneErrorOrAValidSystem) {
  std::string text = fileText("aws-p4d.24xlarge.xml");
  int errors = 0;
  for (std::size_t len = 0; len < text.size(); len += 37) {
    std::string cut = text.substr(0, len);
    std::string err = loadError(cut);
    if (!err.empty()) {
      ++errors;
      EXPECT_EQ(err.find('\n'), std::string::npos) << "error must be one line: " << err;
      EXPECT_EQ(err.rfind("bad.xml:", 0), 0u) << err;
    }
  }
  EXPECT_GT(errors, 0);
}

TEST(TopologyMalformed, TruncatedFileNamesTheLine) {
  std::string text = fileText("azure-ndv4.xml");
  std::string cut = text.substr(0, text.find("<pci busid=\"0001:00:00.0\"") + 10);
  EXPECT_NE(loadError(cut).find("bad.xml:12: malformed XML"), std::string::npos) << loadError(cut);
}

TEST(TopologyMalformed, NotXmlEmptyAndTwoRoots) {
  EXPECT_NE(loadError("").find("bad.xml:1: malformed XML"), std::string::npos) << loadError("");
  EXPECT_NE(loadError("hello").find("bad.xml:1"), std::string::npos) << loadError("hello");
  EXPECT_NE(loadError("<system version=\"1\"/><system version=\"1\"/>").find("more than one root"), std::string::npos);
  EXPECT_NE(loadError("<topology/>").find("root element is <topology>, expected <system>"), std::string::npos);
  EXPECT_NE(loadError("<system version=\"1\">text</system>").find("unexpected text"), std::string::npos);
}

TEST(TopologyMalformed, WrongAttributes) {
  EXPECT_NE(loadError("<system version=\"2\"/>").find("wrong version 2"), std::string::npos);
  EXPECT_NE(loadError("<system/>").find("missing required attribute version"), std::string::npos);
  EXPECT_NE(loadError("<system version=\"1\"><cpu numaid=\"zero\" arch=\"x86_64\"/></system>")
                .find("numaid=\"zero\" is not an integer"),
            std::string::npos);
  EXPECT_NE(
      loadError(wrap(gpuPci("0000:01:00.0", "dev=\"0\" rank=\"0\" gdr=\"1\""))).find("missing required attribute sm"),
      std::string::npos);
  EXPECT_NE(loadError(wrap("<pci busid=\"0000:01:00.0\" class=\"0x060400\" link_speed=\"8 GT/s\" link_width=\"-4\"/>"))
                .find("link_width=\"-4\" is invalid"),
            std::string::npos);
  EXPECT_NE(loadError(wrap("<pci busid=\"0000:01:00.0\" class=\"0x020000\" link_speed=\"\" link_width=\"16\"><nic><net "
                           "dev=\"x\"/></nic></pci>"))
                .find("dev=\"x\" is not an integer"),
            std::string::npos);
  // A <graphs> file given as a topology says so.
  EXPECT_NE(loadError(fileText("azure-ncv4-graph.xml")).find("this is a graph file"), std::string::npos);
  // Errors carry the element's line.
  EXPECT_NE(loadError("<system version=\"1\">\n\n<cpu numaid=\"0\"/>\n</system>").find("bad.xml:3: <cpu>"),
            std::string::npos);
}

TEST(TopologyMalformed, DuplicatesAreRejected) {
  std::string two = gpuPci("0000:01:00.0", "dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"1\"") +
                    gpuPci("0000:01:00.0", "dev=\"1\" sm=\"80\" rank=\"1\" gdr=\"1\"");
  EXPECT_NE(loadError(wrap(two)).find("duplicate node GPU/0-1000"), std::string::npos) << loadError(wrap(two));
  std::string sameRank = gpuPci("0000:01:00.0", "dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"1\"") +
                         gpuPci("0000:02:00.0", "dev=\"1\" sm=\"80\" rank=\"0\" gdr=\"1\"");
  EXPECT_NE(loadError(wrap(sameRank)).find("rank 0 is used by two GPUs"), std::string::npos);
}

TEST(TopologyMalformed, HugeNumbers) {
  EXPECT_NE(loadError("<system version=\"99999999999999999999999\"/>").find("out of range"), std::string::npos);
  EXPECT_NE(
      loadError("<system version=\"1\"><cpu numaid=\"4294967296\" arch=\"x86_64\"/></system>").find("out of range"),
      std::string::npos);
  EXPECT_NE(loadError(wrap(gpuPci("0000:01:00.0", "dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"1\"",
                                  "<nvlink target=\"0000:02:00.0\" count=\"100000000\" tclass=\"0x068000\"/>")))
                .find("count=100000000 is invalid"),
            std::string::npos);
  EXPECT_NE(loadError(wrap("<pci busid=\"0000:01:00.0\" class=\"0x060400\" link_speed=\"8 GT/s\" "
                           "link_width=\"99999999\"/>"))
                .find("is invalid"),
            std::string::npos);
  // A huge NIC speed is a valid number; it just gives a huge NET bandwidth, and nothing overflows.
  std::string fast = wrap("<nic><net dev=\"0\" speed=\"2147483647\" gdr=\"1\"/></nic>" +
                          gpuPci("0000:01:00.0", "dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"1\""));
  EXPECT_EQ(loadError(fast), "");
  EXPECT_NE(loadError(wrap("<nic><net dev=\"0\" latency=\"1e999\"/></nic>")).find("is not a finite number"),
            std::string::npos);
}

TEST(TopologyMalformed, NumbersBeyondAFloatAreNamed) {
  // A latency or bandwidth is kept as a float: 1e39 was taken (finite as a double), became inf, and a graph dump wrote
  // latencyinter="inf", which the reader then refused. Now the file's line says so; the largest float still loads and
  // its dump reads back.
  const std::string gpu = gpuPci("0000:01:00.0", "dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"1\"");
  for (const char* value : {"1e39", "-1e39", "3.5e38"})
    EXPECT_EQ(loadError(wrap("<nic><net dev=\"0\" gdr=\"1\" latency=\"" + std::string(value) + "\"/></nic>" + gpu)),
              "bad.xml:3: <net> attribute latency=\"" + std::string(value) +
                  "\" is out of range (a float, at most 3.40282e+38)");
  XmlDocument doc = parseXml(wrap("<nic><net dev=\"0\" gdr=\"1\" latency=\"3.4e38\"/></nic>" + gpu), "big.xml");
  AnalysisOptions o;
  o.nRanks = 16;
  Analysis a = analyze(std::move(doc), o);
  ASSERT_EQ(a.searches.size(), 2u);
  const Graph& ring = a.searches[1].ring;
  EXPECT_FLOAT_EQ(ring.latencyInter, 3.4e38f);
  XmlDocument dumped = parseXml(writeXml(graphsToXml(a.system, {&ring})), "dump.xml");
  std::vector<Graph> back = loadGraphXml(dumped, &a.system);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_NEAR(back[0].latencyInter, 3.4e38f, 1e33f);
  // The graph reader's speeds and latency likewise.
  for (const char* attr :
       {"speedintra=\"1e39\" speedinter=\"12\"", "speedintra=\"12\" speedinter=\"12\" latencyinter=\"1e300\""}) {
    XmlDocument graph = parseXml(std::string("<graphs version=\"1\">\n<graph id=\"0\" pattern=\"4\" crossnic=\"0\" "
                                             "nchannels=\"1\" typeintra=\"SYS\" typeinter=\"PIX\" "
                                             "samechannels=\"0\" ") +
                                     attr + "/></graphs>",
                                 "graph.xml");
    try {
      loadGraphXml(graph, nullptr);
      ADD_FAILURE() << attr << " was taken";
    } catch (const TopologyError& e) {
      EXPECT_NE(std::string(e.what()).find("graph.xml:2: <graph> attribute "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("is out of range (a float, at most 3.40282e+38)"), std::string::npos)
          << e.what();
    }
  }
}

TEST(TopologyMalformed, AGpuAndANicInOnePciAreNamed) {
  // NCCL connected only the NIC: the GPU's paths were DIS, and a second GPU made it "no CPU close to GPU/0-1000".
  std::string error =
      loadError(wrap(gpuPci("0000:01:00.0", "dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"1\"") +
                     "\n<pci busid=\"0000:02:00.0\" class=\"0x030200\" link_speed=\"8 GT/s\" link_width=\"16\">"
                     "<gpu dev=\"1\" sm=\"80\" rank=\"1\" gdr=\"1\"/>"
                     "<nic><net name=\"mlx5_0\" dev=\"0\" speed=\"100000\" gdr=\"1\"/></nic></pci>"));
  EXPECT_NE(error.find("bad.xml:4: <pci> holds both a <gpu> and a <nic>: NCCL would connect only the NIC"),
            std::string::npos)
      << error;
}

TEST(TopologyMalformed, AnAttributeGivenTwiceIsNamed) {
  // NCCL's reader takes the first and ignores the second; which one the author meant is unknown.
  std::string error = loadError(wrap(gpuPci("0000:01:00.0", "dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"1\" sm=\"90\"")));
  EXPECT_NE(error.find("bad.xml:3: <gpu> has attribute sm twice (\"80\" and \"90\")"), std::string::npos) << error;
  // Many attributes on one element are checked in linear time.
  std::string many = "<system version=\"1\"";
  for (int i = 0; i < 200000; ++i) many += " a" + std::to_string(i) + "=\"\"";
  many += " a7=\"x\"/>";
  auto start = std::chrono::steady_clock::now();
  error = loadError(many);
  EXPECT_NE(error.find("bad.xml:1: <system> has attribute a7 twice (\"\" and \"x\")"), std::string::npos) << error;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// NCCL's reader fails the whole file on a value of 254 characters or more; 253 still loads (the value is then only
// text NCCL does not read, a vendor string).
TEST(TopologyMalformed, AValueTooLongForNcclIsNamed) {
  const std::string text = wrap(gpuPci("0000:01:00.0", "dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"1\""));
  const size_t at = text.find("<system version=\"1\"") + std::strlen("<system version=\"1\"");
  std::string error = loadError(text.substr(0, at) + " vendor=\"" + std::string(254, 'v') + "\"" + text.substr(at));
  EXPECT_NE(error.find("bad.xml:1: <system> attribute vendor is 254 characters long; NCCL refuses a value of 254 or "
                       "more"),
            std::string::npos)
      << error;
  EXPECT_EQ(loadError(text.substr(0, at) + " vendor=\"" + std::string(253, 'v') + "\"" + text.substr(at)), "");
}

TEST(TopologyMalformed, MoreAttributesOrChildrenThanNcclsReaderTakesAreNamed) {
  // NCCL's reader holds 16 attributes per element and 640 children per element, and fails the file past them.
  const std::string text = wrap(gpuPci("0000:01:00.0", "dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"1\""));
  const size_t at = text.find("<system version=\"1\"") + std::strlen("<system version=\"1\"");
  auto withAttributes = [&](int extra) {
    std::string attrs;
    for (int i = 0; i < extra; ++i) attrs += " a" + std::to_string(i) + "=\"1\"";
    return text.substr(0, at) + attrs + text.substr(at);
  };
  EXPECT_EQ(loadError(withAttributes(15)), "");  // version and 15 more: 16
  std::string error = loadError(withAttributes(16));
  EXPECT_NE(error.find("bad.xml:1: <system> has 17 attributes; NCCL's XML reader takes at most 16"), std::string::npos)
      << error;
  auto withChildren = [&](int n) {
    std::string children;
    for (int i = 0; i < n; ++i) children += "<unknown/>\n";
    return text.substr(0, at) + ">" + children + text.substr(at + 1);
  };
  EXPECT_EQ(loadError(withChildren(639)), "");  // and the <cpu>: 640
  error = loadError(withChildren(640));
  EXPECT_NE(error.find("<system> (line 1) has more than 640 child elements"), std::string::npos) << error;
}

TEST(TopologyMalformed, GpuRanksOutsideTheRangeAreNamed) {
  // -1 read as "no peer" in the Ring and Trees lines; 2147483647 overflowed the ranks given to GPUs added after it.
  for (const char* rank : {"-1", "16777216", "2147483647"}) {
    std::string error =
        loadError(wrap(gpuPci("0000:01:00.0", std::string("dev=\"0\" sm=\"80\" gdr=\"1\" rank=\"") + rank + "\"")));
    EXPECT_NE(error.find("bad.xml:3: <gpu> rank " + std::string(rank) + " is outside 0..16777215"), std::string::npos)
        << error;
  }
}

TEST(TopologyMalformed, CompletionNumbersAfterTheFilesRanksAsTheReaderReadsThem) {
  // A rank written in hex (0x1) was read as 0 when numbering the added GPUs, so the added GPU took rank 1 twice and
  // the file was blamed at "line 0".
  std::string text = wrap(gpuPci("0000:01:00.0", "dev=\"0\" sm=\"80\" rank=\"0x1\" gdr=\"1\"") +
                          "<pci busid=\"0000:15:00.0\" class=\"0x030200\" link_speed=\"16 GT/s\" link_width=\"16\"/>");
  XmlDocument doc = parseXml(text, "partial.xml");
  CompletionOptions f;
  f.gpuSm = 80;
  EXPECT_EQ(completeTopology(doc.root, f), std::make_pair(1, 0));
  AnalysisOptions o;
  Analysis a = analyze(std::move(doc), o);
  ASSERT_EQ(a.gpuRanks.size(), 2u);
  EXPECT_EQ(a.gpuRanks[0] + a.gpuRanks[1], 1 + 2);  // the file's 0x1 and the added 2
}

TEST(TopologyMalformed, AttributesOutsideTheirRangeAreNamed) {
  const std::string gpu = "dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"1\"";
  auto netError = [&](const std::string& attrs) {
    return loadError(wrap("<nic><net dev=\"0\" " + attrs + "/></nic>" + gpuPci("0000:01:00.0", gpu)));
  };
  for (const auto& [attrs, expected] : std::vector<std::pair<std::string, std::string>>{
           {"gdr=\"5\"", "<net> attribute gdr=5 is outside 0..1"},
           {"coll=\"2\"", "<net> attribute coll=2 is outside 0..1"},
           {"maxconn=\"0\"", "<net> attribute maxconn=0 is outside 1..2147483647"},
           {"maxconn=\"-1\"", "<net> attribute maxconn=-1 is outside 1..2147483647"},
           {"port=\"-1\"", "<net> attribute port=-1 is outside 0..2147483647"},
           {"latency=\"-100\"", "<net> attribute latency=-100.000000 is negative"}})
    EXPECT_NE(netError(attrs).find(expected), std::string::npos) << attrs << ": " << netError(attrs);
  for (const auto& [attrs, expected] : std::vector<std::pair<std::string, std::string>>{
           {"dev=\"0\" sm=\"0\" rank=\"0\" gdr=\"1\"", "<gpu> attribute sm=0 is not a compute capability"},
           {"dev=\"0\" sm=\"-5\" rank=\"0\" gdr=\"1\"", "<gpu> attribute sm=-5 is not a compute capability"},
           {"dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"7\"", "<gpu> attribute gdr=7 is outside 0..1"},
           {"dev=\"-1\" sm=\"80\" rank=\"0\" gdr=\"1\"", "<gpu> attribute dev=-1 is outside 0..16777215"},
           {"dev=\"16777216\" sm=\"80\" rank=\"0\" gdr=\"1\"",
            "<gpu> attribute dev=16777216 is outside 0..16777215"}}) {
    std::string error = loadError(wrap(gpuPci("0000:01:00.0", attrs)));
    EXPECT_NE(error.find(expected), std::string::npos) << attrs << ": " << error;
  }
  std::string sameDev = gpuPci("0000:01:00.0", "dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"1\"") +
                        gpuPci("0000:02:00.0", "dev=\"0\" sm=\"80\" rank=\"1\" gdr=\"1\"");
  EXPECT_NE(loadError(wrap(sameDev)).find("dev 0 is used by two GPUs"), std::string::npos) << loadError(wrap(sameDev));
}

TEST(TopologyMalformed, AHugeGpuDevIsNamedNotOverflowed) {
  // A GPU's dev (its NVML index) picks its NIC: (dev + channel % netsPerGpu) % #NETs, bit-mirrored first when #NETs is
  // a power of two. dev 2147483647 with 3 NETs overflowed that sum on channel 1 and read before the NET list (ASan:
  // heap-buffer-overflow in localGpuOfNet; a release build printed "NET 1 0 0 1"). It is the file's mistake, named.
  std::string error;
  try {
    analyze(readXmlFile(casePath("gpu-dev-2147483647.xml")), {});
  } catch (const TopologyError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("gpu-dev-2147483647.xml:5: <gpu> attribute dev=2147483647 is outside 0..16777215"),
            std::string::npos)
      << error;
  // The largest dev taken picks NICs by NCCL's formula on every channel, and owns the NETs it picks first.
  std::ifstream in(casePath("gpu-dev-2147483647.xml"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.replace(text.find("2147483647"), 10, "16777215");
  AnalysisOptions o;
  o.channels = kMaxChannels;
  Analysis a = analyze(parseXml(text, "dev-max.xml"), o);
  ASSERT_EQ(a.localNets.size(), 1u);
  for (int c = 0; c < kMaxChannels; ++c)
    EXPECT_EQ(a.localNets[0][static_cast<std::size_t>(c)].netDev, (16777215 + c % 3) % 3) << "channel " << c;
  EXPECT_EQ(a.netLocalGpuRank, ints("0 0 0"));
  // Completion numbers the GPUs it adds after the file's: past the range, the leaf it was added to is named.
  XmlDocument doc = parseXml(wrap(gpuPci("0000:01:00.0", "dev=\"16777215\" sm=\"80\" rank=\"0\" gdr=\"1\"") +
                                  "\n<pci busid=\"0000:02:00.0\" class=\"0x030200\" link_speed=\"8 GT/s\" "
                                  "link_width=\"16\"/>"),
                             "bad.xml");
  CompletionOptions f;
  f.gpuSm = 80;
  completeTopology(doc.root, f);
  error.clear();
  try {
    analyze(std::move(doc), {});
  } catch (const TopologyError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("bad.xml:4: <gpu> attribute dev=16777216 is outside 0..16777215"), std::string::npos) << error;
}

TEST(TopologyMalformed, ABusIdThatIsNotOneIsNamed) {
  for (const char* busId : {"zzzz", "", "0000:17:00.0x", ":."}) {
    std::string error = loadError(wrap(gpuPci(busId, "dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"1\"")));
    EXPECT_NE(error.find("bad.xml:3: <pci> busid=\"" + std::string(busId) + "\" is not a PCI bus id"),
              std::string::npos)
        << error;
  }
}

TEST(TopologyMalformed, BusIdsEqualInTheirKeptDigitsNameTheLength) {
  // 15 hex digits each, differing only in the first: the 56-bit id keeps the last 14, so both are one node.
  std::string text = gpuPci("1000:000000:17:00.0", "dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"1\"") +
                     gpuPci("2000:000000:17:00.0", "dev=\"1\" sm=\"80\" rank=\"1\" gdr=\"1\"");
  std::string error = loadError(wrap(text));
  EXPECT_NE(
      error.find("<pci> duplicate node GPU/0-17000 (busid=\"2000:000000:17:00.0\" has 15 hex digits; NCCL's node id "
                 "keeps the last 14 of the first 16"),
      std::string::npos)
      << error;
  // An ordinary duplicate says nothing of digits.
  error = loadError(wrap(gpuPci("0000:17:00.0", "dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"1\"") +
                         gpuPci("0000:17:00.0", "dev=\"1\" sm=\"80\" rank=\"1\" gdr=\"1\"")));
  EXPECT_NE(error.find("<pci> duplicate node GPU/0-17000"), std::string::npos) << error;
  EXPECT_EQ(error.find("hex digits"), std::string::npos) << error;
}

TEST(TopologyMalformed, AOneSidedNvLinkNamesItsLine) {
  std::string text = gpuPci("0000:01:00.0", "dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"1\"",
                            "<nvlink target=\"0000:02:00.0\" count=\"12\" tclass=\"0x030200\"/>") +
                     gpuPci("0000:02:00.0", "dev=\"1\" sm=\"80\" rank=\"1\" gdr=\"1\"");
  std::string error = loadError(wrap(text));
  EXPECT_NE(error.find("bad.xml:3: <nvlink> links GPU 0000:01:00.0 to GPU 0000:02:00.0, which lists no <nvlink> back"),
            std::string::npos)
      << error;
}

TEST(TopologyMalformed, AOneSidedPciLinkNamesItsLine) {
  // Two switches under one CPU, the first linking the second, which lists no <pcilink> back.
  auto sw = [](const std::string& busId, const std::string& inner) {
    return "<pci busid=\"" + busId +
           "\" class=\"0x060400\" vendor=\"0x1000\" device=\"0xc030\" subsystem_vendor=\"0x1000\" "
           "subsystem_device=\"0x100b\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\">" +
           inner + "</pci>";
  };
  std::string text = sw("0000:10:00.0", "<pcilink target=\"0000:20:00.0\"/>" +
                                            gpuPci("0000:11:00.0", "dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"1\"")) +
                     sw("0000:20:00.0", gpuPci("0000:21:00.0", "dev=\"1\" sm=\"80\" rank=\"1\" gdr=\"1\""));
  std::string error = loadError(wrap(text));
  EXPECT_NE(
      error.find(
          ":3: <pcilink> links PCI switch 0000:10:00.0 to PCI switch 0000:20:00.0, which lists no <pcilink> back"),
      std::string::npos)
      << error;
}

TEST(TopologyMalformed, TooManyNodesOfOneType) {
  // Two ports per NIC: 641 NICs under one <cpu> would be past NCCL's 640 children per element first.
  std::string nets;
  for (int i = 0; i <= kMaxNodesPerType; i += 2)
    nets += "<nic><net dev=\"" + std::to_string(i) + "\"/><net dev=\"" + std::to_string(i + 1) + "\"/></nic>";
  EXPECT_NE(loadError(wrap(nets)).find("more than 640 NET nodes"), std::string::npos) << loadError(wrap(nets));
}

TEST(TopologyMalformed, DeepNestingIsBounded) {
  std::string text = "<system version=\"1\">" + kCpu;
  for (int i = 0; i < 200; ++i) text += "<pci busid=\"0000:01:00." + std::to_string(i % 8) + "\" class=\"0x060400\">";
  for (int i = 0; i < 200; ++i) text += "</pci>";
  text += "</cpu></system>";
  EXPECT_NE(loadError(text).find("nested deeper than"), std::string::npos) << loadError(text);
}

TEST(TopologyMalformed, LinkCyclesTerminate) {
  // pcilinks both ways between two switches, NVLinks in a triangle and to the GPU itself: the widest-path
  // relaxation and the search must terminate and give sane types.
  auto sw = [](int n, const std::string& other, const std::string& gpu) {
    return "<pci busid=\"0000:0" + std::to_string(n) +
           ":00.0\" class=\"0x060400\" vendor=\"0x1000\" device=\"0xc030\" subsystem_vendor=\"0x1000\" "
           "subsystem_device=\"0x0000\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\"><pcilink target=\"" +
           other + "\"/>" + gpu + "</pci>";
  };
  auto nvl = [](const std::string& target) {
    return "<nvlink target=\"" + target + "\" count=\"2\" tclass=\"0x030200\"/>";
  };
  std::string g1 = gpuPci("0000:11:00.0", "dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"1\"",
                          nvl("0000:12:00.0") + nvl("0000:11:00.0") + nvl("0000:13:00.0"));
  std::string g2 =
      gpuPci("0000:12:00.0", "dev=\"1\" sm=\"80\" rank=\"1\" gdr=\"1\"", nvl("0000:13:00.0") + nvl("0000:11:00.0"));
  std::string g3 =
      gpuPci("0000:13:00.0", "dev=\"2\" sm=\"80\" rank=\"2\" gdr=\"1\"", nvl("0000:11:00.0") + nvl("0000:12:00.0"));
  std::string text = wrap(sw(1, "0000:02:00.0", g1 + g2) + sw(2, "0000:01:00.0", g3));
  auto start = std::chrono::steady_clock::now();
  XmlDocument doc = parseXml(text, "cycle.xml");
  Analysis a = analyze(std::move(doc), {});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(pathTypeName(gpuToGpu(a, 0, 2).type), "NVL");
  EXPECT_FALSE(a.searches.empty());
}

TEST(TopologyMalformed, NonexistentFileIsOneError) {
  try {
    readXmlFile("/nonexistent/topo.xml");
    FAIL();
  } catch (const TopologyError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/topo.xml: cannot open"), std::string::npos);
  }
}

TEST(TopologyMalformed, NranksBelowTheGpuRanksIsOneError) {
  // The 8 GPUs of p4d have ranks 0..7: a 4-rank communicator cannot hold them (it was taken as "the network is used").
  CompletionOptions f;
  f.gpuSm = 80;
  f.nicSpeedMbps = 100000;
  AnalysisOptions o;
  o.nRanks = 4;
  try {
    analyzeFile("aws-p4d.24xlarge.xml", f, o);
    FAIL();
  } catch (const TopologyError& e) {
    EXPECT_NE(std::string(e.what()).find("--nranks 4: the topology has a GPU with rank 7"), std::string::npos)
        << e.what();
  }
  o.nRanks = 8;
  EXPECT_FALSE(analyzeFile("aws-p4d.24xlarge.xml", f, o).trim.inter);
}

TEST(TopologyMalformed, DevicesOutsideACpuAreNamed) {
  // NCCL only reads <cpu> under <system> and <pci>/<nic> under <cpu>: a NIC or GPU placed elsewhere would silently
  // vanish from the machine (0 NETs, "the network is used" with nothing to use).
  const std::string net = "<net name=\"x\" dev=\"0\" speed=\"100000\" port=\"0\" gdr=\"1\"/>";
  std::string nicUnderSystem = "<system version=\"1\">\n" + kCpu + "</cpu>\n<nic>" + net + "</nic>\n</system>\n";
  EXPECT_NE(loadError(nicUnderSystem).find("bad.xml:3: <nic> directly under <system> is not read by NCCL"),
            std::string::npos)
      << loadError(nicUnderSystem);
  std::string pciUnderSystem =
      "<system version=\"1\">\n" + gpuPci("0000:01:00.0", "dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"1\"") + "\n</system>\n";
  EXPECT_NE(loadError(pciUnderSystem).find("bad.xml:2: <pci> directly under <system> is not read by NCCL"),
            std::string::npos)
      << loadError(pciUnderSystem);
  std::string netUnderCpu = wrap(net);
  EXPECT_NE(loadError(netUnderCpu).find("bad.xml:3: <net> directly under <cpu> is not read by NCCL"), std::string::npos)
      << loadError(netUnderCpu);
  std::string gpuUnderCpu = wrap("<gpu dev=\"0\" sm=\"80\" rank=\"0\" gdr=\"1\"/>");
  EXPECT_NE(loadError(gpuUnderCpu).find("bad.xml:3: <gpu> directly under <cpu> is not read by NCCL"), std::string::npos)
      << loadError(gpuUnderCpu);
  // A virtual NIC (<nic> in a <cpu>) is fine.
  EXPECT_EQ(loadError(wrap("<nic>" + net + "</nic>")), "");
  // Inside a switch only <pci> (and <pcilink>): NCCL reads any other child as a <pci> and fails on its missing class;
  // the NET below was left out, and the tool said the machine had none.
  const std::string netInSwitch =
      wrap("<pci busid=\"0000:16:00.0\" class=\"0x060400\" link_speed=\"16.0 GT/s PCIe\" link_width=\"16\">\n" + net +
           "\n</pci>");
  EXPECT_NE(loadError(netInSwitch).find("bad.xml:4: <net> inside a PCI switch's <pci> is not read by NCCL"),
            std::string::npos)
      << loadError(netInSwitch);
}

TEST(TopologyMalformed, DirectoryIsNamedAsOne) {
  // NCCL_TOPO_FILE pointing at a directory reached the size check ("larger than 16777216 bytes").
  try {
    readXmlFile(NNS_TOPOLOGY_DATA_DIR);
    FAIL();
  } catch (const TopologyError& e) {
    EXPECT_NE(std::string(e.what()).find(std::string(NNS_TOPOLOGY_DATA_DIR) + ": is a directory, not a topology file"),
              std::string::npos)
        << e.what();
  }
}

TEST(TopologyMalformed, PipeIsReadLikeAFile) {
  // --topo-file <(ssh host cat dump.xml) hands the tool a pipe, which cannot seek; the size limit still holds.
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  std::string text = fileText("azure-ncv4.xml");
  std::thread writer([&] {
    std::size_t off = 0;
    while (off < text.size()) {
      ssize_t n = write(fds[1], text.data() + off, text.size() - off);
      if (n <= 0) break;
      off += static_cast<std::size_t>(n);
    }
    close(fds[1]);
  });
  std::string path = "/proc/self/fd/" + std::to_string(fds[0]);
  XmlDocument doc;
  EXPECT_NO_THROW(doc = readXmlFile(path));
  writer.join();
  close(fds[0]);
  EXPECT_EQ(buildSystem(doc).count(GPU), 4);
}

}  // namespace
}  // namespace nns::topo::testing
