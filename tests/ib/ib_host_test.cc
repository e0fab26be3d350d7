// ib_host_test.cc: what the nns-ib plugin must do on a host without RDMA: load, export every ABI version, and fail
// init with a reason; plus NCCL_IB_HCA parsing. Needs no verbs device (runs in CI and on this machine).
#include <dlfcn.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <nccl_net/net.h>

#include "gid_choice.hpp"
#include "hca_filter.hpp"
#include "port_speed.hpp"

namespace {

std::vector<std::string>& warnings() {
  static std::vector<std::string> lines;
  return lines;
}
void collectWarnings(ncclDebugLogLevel level, unsigned long, const char*, int, const char* fmt, ...) {
  if (level != NCCL_LOG_WARN) return;
  char text[1024];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(text, sizeof(text), fmt, args);
  va_end(args);
  warnings().push_back(text);
}

void* plugin() {
  static void* library = dlopen(NNS_IB_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  return library;
}

bool hostHasActiveRdmaPort() {
  // The init test below expects a failure; on a host with a working verbs device it would (rightly) succeed.
  FILE* pipe = popen("ls /sys/class/infiniband 2>/dev/null | head -n 1", "r");
  if (pipe == nullptr) return false;
  char line[128] = {};
  bool any = std::fgets(line, sizeof(line), pipe) != nullptr;
  pclose(pipe);
  return any;
}

TEST(IbPluginHost, LoadsAndExportsEveryVersion) {
  ASSERT_NE(plugin(), nullptr) << dlerror();
  for (int v = 6; v <= 12; ++v) {
    std::string symbol = "ncclNetPlugin_v" + std::to_string(v);
    void* table = dlsym(plugin(), symbol.c_str());
    ASSERT_NE(table, nullptr) << symbol;
    // Every version's table starts with the name.
    EXPECT_STREQ(*static_cast<const char* const*>(table), "nns-ib") << symbol;
  }
}

TEST(IbPluginHost, DoesNotLinkLibibverbs) {
  // libibverbs is dlopen'ed at init, so the plugin loads where it is not installed.
  FILE* pipe = popen("ldd " NNS_IB_PLUGIN_PATH, "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char line[512];
  while (std::fgets(line, sizeof(line), pipe) != nullptr) output += line;
  pclose(pipe);
  EXPECT_EQ(output.find("libibverbs"), std::string::npos) << output;
}

TEST(IbPluginHost, InitFailsWithAReasonWithoutDevices) {
  if (hostHasActiveRdmaPort()) GTEST_SKIP() << "this host has RDMA devices; the VM test covers init there";
  auto* net = static_cast<const ncclNet_v12_t*>(dlsym(plugin(), "ncclNetPlugin_v12"));
  ASSERT_NE(net, nullptr);
  void* ctx = nullptr;
  warnings().clear();
  EXPECT_NE(net->init(&ctx, 1, nullptr, collectWarnings, nullptr), ncclSuccess);
  ASSERT_FALSE(warnings().empty());
  const std::string& why = warnings().back();
  EXPECT_NE(why.find("init failed"), std::string::npos) << why;
  // Either libibverbs is missing or no device exists: both say so.
  bool explained = why.find("libibverbs") != std::string::npos || why.find("no RDMA device") != std::string::npos ||
                   why.find("no usable port") != std::string::npos;
  EXPECT_TRUE(explained) << why;
  // A second init (NCCL calls init per communicator) fails the same way rather than crashing.
  EXPECT_NE(net->init(&ctx, 2, nullptr, collectWarnings, nullptr), ncclSuccess);
  // Legacy versions fail too.
  auto* v6 = static_cast<const ncclNet_v6_t*>(dlsym(plugin(), "ncclNetPlugin_v6"));
  ASSERT_NE(v6, nullptr);
  EXPECT_NE(v6->init(collectWarnings), ncclSuccess);
}

using nns_ib::HcaFilter;

TEST(IbHcaFilter, EmptySelectsEverything) {
  HcaFilter filter("");
  EXPECT_TRUE(filter.selects("mlx5_0", 1));
  EXPECT_TRUE(filter.selects("rxe1", 2));
  EXPECT_FALSE(filter.excludesEverything());
}

// NCCL matches an empty list against every device and then applies '^': "^" alone excludes everything.
TEST(IbHcaFilter, CaretAloneExcludesEverything) {
  for (const char* spec : {"^", "^=", "^,", "^ , "}) {
    HcaFilter filter(spec);
    EXPECT_FALSE(filter.selects("mlx5_0", 1)) << spec;
    EXPECT_FALSE(filter.selects("rxe1", 2)) << spec;
    EXPECT_TRUE(filter.excludesEverything()) << spec;
  }
  // Excluding only malformed entries excludes nothing (NCCL reads the bad port as 0, which no port has).
  HcaFilter malformed("^mlx5_0:x");
  EXPECT_TRUE(malformed.selects("mlx5_0", 1));
  EXPECT_FALSE(malformed.excludesEverything());
}

TEST(IbHcaFilter, PrefixMatchesByDefault) {
  HcaFilter filter("mlx5");
  EXPECT_TRUE(filter.selects("mlx5_0", 1));
  EXPECT_TRUE(filter.selects("mlx5_10", 2));
  EXPECT_FALSE(filter.selects("rxe0", 1));
  EXPECT_FALSE(filter.selects("mlx4_0", 1));
}

TEST(IbHcaFilter, ExactMatchWithEquals) {
  HcaFilter filter("=mlx5_1,rxe0");
  EXPECT_TRUE(filter.exact());
  EXPECT_TRUE(filter.selects("mlx5_1", 1));
  EXPECT_FALSE(filter.selects("mlx5_10", 1));
  EXPECT_TRUE(filter.selects("rxe0", 1));
  EXPECT_FALSE(filter.selects("rxe01", 1));
}

TEST(IbHcaFilter, PortRestrictsToOnePort) {
  HcaFilter filter("mlx5_0:1,mlx5_1:2");
  ASSERT_EQ(filter.entries().size(), 2u);
  EXPECT_EQ(filter.entries()[0].port, 1);
  EXPECT_TRUE(filter.selects("mlx5_0", 1));
  EXPECT_FALSE(filter.selects("mlx5_0", 2));
  EXPECT_FALSE(filter.selects("mlx5_1", 1));
  EXPECT_TRUE(filter.selects("mlx5_1", 2));
}

TEST(IbHcaFilter, CaretExcludes) {
  HcaFilter filter("^mlx5_0:1,rxe");
  EXPECT_TRUE(filter.excludes());
  EXPECT_FALSE(filter.selects("mlx5_0", 1));
  EXPECT_TRUE(filter.selects("mlx5_0", 2));
  EXPECT_FALSE(filter.selects("rxe0", 1));
  EXPECT_TRUE(filter.selects("mlx5_1", 1));
}

TEST(IbHcaFilter, CaretEqualsExcludesExactNames) {
  HcaFilter filter("^=rxe0");
  EXPECT_TRUE(filter.excludes());
  EXPECT_TRUE(filter.exact());
  EXPECT_FALSE(filter.selects("rxe0", 1));
  EXPECT_TRUE(filter.selects("rxe01", 1));
  EXPECT_TRUE(filter.selects("rxe1", 1));
}

TEST(IbHcaFilter, BadPortsAreReportedNotGuessed) {
  HcaFilter filter("mlx5_0:x,mlx5_1:0,mlx5_2:,:1,mlx5_3:2");
  ASSERT_EQ(filter.entries().size(), 1u);
  EXPECT_EQ(filter.entries()[0].name, "mlx5_3");
  EXPECT_EQ(filter.invalid().size(), 4u);
  EXPECT_FALSE(filter.selects("mlx5_0", 1));
}

// A list meant to select (no "^") whose every entry is malformed selects nothing, as NCCL's own parser ends up doing
// (a port it cannot read becomes 0, which no port has): never every HCA, which is the opposite of a restriction.
TEST(IbHcaFilter, AnIncludeListOfOnlyBadEntriesSelectsNothing) {
  HcaFilter filter("mlx5_0:x");
  EXPECT_EQ(filter.invalid().size(), 1u);
  EXPECT_FALSE(filter.selects("mlx5_0", 1));
  EXPECT_FALSE(filter.selects("rxe0", 1));
  EXPECT_FALSE(HcaFilter("=rxe0:0,rxe1:").selects("rxe1", 1));
  // Excluding only malformed entries excludes nothing.
  EXPECT_TRUE(HcaFilter("^mlx5_0:x").selects("mlx5_0", 1));
}

// A port is a number from 1 to 255 (ibv_query_port takes a uint8_t) and nothing after it: "mlx5_0:256" would wrap to
// port 0, and "mlx5_0:1x" is a typo, not port 1.
TEST(IbHcaFilter, APortIsOneTo255WithNothingAfterIt) {
  EXPECT_EQ(HcaFilter("mlx5_0:255").entries().size(), 1u);
  EXPECT_TRUE(HcaFilter("mlx5_0:255").selects("mlx5_0", 255));
  for (const char* bad : {"mlx5_0:256", "mlx5_0:1x", "mlx5_0:1 2"}) {
    HcaFilter filter(bad);
    EXPECT_TRUE(filter.entries().empty()) << bad;
    EXPECT_EQ(filter.invalid().size(), 1u) << bad;
    EXPECT_FALSE(filter.selects("mlx5_0", 1)) << bad;
  }
}

TEST(IbHcaFilter, EmptyEntriesAndSpacesAreIgnored) {
  HcaFilter filter(" mlx5_0 ,, rxe1:1 ");
  ASSERT_EQ(filter.entries().size(), 2u);
  EXPECT_TRUE(filter.selects("mlx5_0", 3));
  EXPECT_TRUE(filter.selects("rxe1", 1));
  EXPECT_FALSE(filter.selects("rxe1", 2));
}

// Port speeds: the verbs codes NCCL's table knows, and the kernel's rate text for what they cannot express (an XDR
// port reports its speed only in active_speed_ex, which the compat ibv_query_port does not fill).
TEST(IbPortSpeed, VerbsCodesAndTheKernelsRateText) {
  EXPECT_EQ(nns_ib::portSpeedMbps(128, 2), 400000);  // NDR x4
  EXPECT_EQ(nns_ib::portSpeedMbps(64, 2), 200000);   // HDR x4
  EXPECT_EQ(nns_ib::portSpeedMbps(0, 2), 0);         // unknown code: the caller asks sysfs
  // Every lane speed (SDR, DDR, QDR, FDR10, FDR, EDR, HDR, NDR) times every width (1x, 4x, 8x, 12x, 2x), as NCCL's
  // tables give them; a width code none of them is makes 0 too.
  const int speeds[][2] = {{1, 2500},   {2, 5000},   {4, 10000},  {8, 10000},
                           {16, 14000}, {32, 25000}, {64, 50000}, {128, 100000}};
  const int widths[][2] = {{1, 1}, {2, 4}, {4, 8}, {8, 12}, {16, 2}};
  for (const auto& [speed, lane] : speeds) {
    for (const auto& [width, lanes] : widths)
      EXPECT_EQ(nns_ib::portSpeedMbps(speed, width), lane * lanes) << "speed " << speed << ", width " << width;
    EXPECT_EQ(nns_ib::portSpeedMbps(speed, 3), 0) << "speed " << speed << ", width 3";
  }
  EXPECT_EQ(nns_ib::rateTextMbps("1000000 Gb/sec"), 1000000000);
  EXPECT_EQ(nns_ib::rateTextMbps("2000000 Gb/sec"), 0) << "past any port, and past an int of Mbps";
  EXPECT_EQ(nns_ib::rateTextMbps("800 Gb/sec (4X XDR)"), 800000);
  EXPECT_EQ(nns_ib::rateTextMbps("2.5 Gb/sec (1X SDR)"), 2500);
  EXPECT_EQ(nns_ib::rateTextMbps("100 Gb/sec (2X HDR)\n"), 100000);
  EXPECT_EQ(nns_ib::rateTextMbps("Unknown"), 0);
  EXPECT_EQ(nns_ib::rateTextMbps(""), 0);
  EXPECT_EQ(nns_ib::rateTextMbps("-5 Gb/sec"), 0);
}

}  // namespace

namespace {

// A RoCE port's GID table as `show_gids` lists a typical one: link-local v1/v2, two IPv4 addresses (v1/v2 each) and
// a global IPv6 address (v1/v2), with an empty entry between.
std::vector<nns_ib::GidEntry> typicalTable() {
  auto entry = [](int index, const char* address, int version) {
    nns_ib::GidEntry e;
    e.index = index;
    if (address != nullptr) {
      in6_addr raw{};
      EXPECT_EQ(inet_pton(AF_INET6, address, &raw), 1) << address;
      std::memcpy(e.raw, &raw, sizeof(e.raw));
    }
    e.roceVersion = version;
    return e;
  };
  return {entry(0, "fe80::ac0:ebff:fe3d:ca54", 1),
          entry(1, "fe80::ac0:ebff:fe3d:ca54", 2),
          entry(2, "::ffff:10.1.0.33", 1),
          entry(3, "::ffff:10.1.0.33", 2),
          entry(4, nullptr, 0),
          entry(5, "::ffff:192.168.7.5", 1),
          entry(6, "::ffff:192.168.7.5", 2),
          entry(7, "fd00:1::21", 1),
          entry(8, "fd00:1::21", 2)};
}

int chosen(const std::vector<nns_ib::GidEntry>& table, const char* family, const char* range, const char* version,
           bool* fitted = nullptr) {
  const auto preference = nns_ib::GidPreference::fromSettings(family, range, version);
  EXPECT_TRUE(preference.problems.empty()) << preference.problems.front();
  return nns_ib::chooseGid(table, preference, fitted);
}

}  // namespace

// NCCL_IB_ADDR_FAMILY, NCCL_IB_ADDR_RANGE and NCCL_IB_ROCE_VERSION_NUM choose the GID as in NCCL: family and range
// first, then routable before link-local, then the RoCE version, then the lowest index. They were not read: an
// IPv6-only RoCE fabric (AF_INET6) or a host with several subnets on one port (ADDR_RANGE) got the first IPv4 RoCE v2
// GID whatever they said.
TEST(IbGidChoice, FamilyRangeAndVersionAsNcclTakesThem) {
  const auto table = typicalTable();
  bool fitted = false;
  EXPECT_EQ(chosen(table, nullptr, nullptr, nullptr, &fitted), 3);  // NCCL's defaults: AF_INET, RoCE v2
  EXPECT_TRUE(fitted);
  EXPECT_EQ(chosen(table, "AF_INET", nullptr, "1"), 2);
  EXPECT_EQ(chosen(table, "AF_INET", "192.168.0.0/16", nullptr), 6);
  EXPECT_EQ(chosen(table, "AF_INET", "192.168.7.5/32", "1"), 5);
  EXPECT_EQ(chosen(table, "AF_INET6", nullptr, nullptr), 8);  // routable, not the link-local ones
  EXPECT_EQ(chosen(table, "AF_INET6", "fd00::/8", "1"), 7);
  EXPECT_EQ(chosen(table, "AF_INET6", "fe80::/10", nullptr, &fitted), 1) << "link-local only when asked for";
  EXPECT_FALSE(fitted) << "a link-local GID is never what the choice looks for";
  // Nothing in the range: the best other one, and the caller warns.
  EXPECT_EQ(chosen(table, "AF_INET", "172.16.0.0/12", nullptr, &fitted), 3);
  EXPECT_FALSE(fitted);
  // The family comes before the version: an IPv4 RoCE v1 GID beats an IPv6 RoCE v2 one (as NCCL's choice does).
  std::vector<nns_ib::GidEntry> v1Ipv4{table[2], table[8]};
  EXPECT_EQ(chosen(v1Ipv4, nullptr, nullptr, nullptr), 2);
  // Only link-local GIDs (no address on the netdev yet): the asked version's, not fitted.
  std::vector<nns_ib::GidEntry> linkLocal{table[0], table[1]};
  EXPECT_EQ(chosen(linkLocal, nullptr, nullptr, nullptr, &fitted), 1);
  EXPECT_FALSE(fitted);
  EXPECT_EQ(chosen({table[4]}, nullptr, nullptr, nullptr), -1) << "an empty table has no GID";
}

// The edges of the choice's classes: link-local is fe80::/10 (fe90:: is link-local, not routable); IPv4-mapped is
// ::ffff:a.b.c.d only (an IPv4-compatible ::a.b.c.d GID is IPv6); a /8 range covers every address whose first byte
// matches; and the RoCE version comes from the kernel's type text.
TEST(IbGidChoice, LinkLocalMappedAndRangeEdges) {
  auto entry = [](int index, const char* address, int version) {
    nns_ib::GidEntry e;
    e.index = index;
    in6_addr raw{};
    EXPECT_EQ(inet_pton(AF_INET6, address, &raw), 1) << address;
    std::memcpy(e.raw, &raw, sizeof(e.raw));
    e.roceVersion = version;
    return e;
  };
  EXPECT_EQ(chosen({entry(0, "fe90::1", 2), entry(1, "fd00::1", 1)}, "AF_INET6", nullptr, nullptr), 1)
      << "fe90::1 is link-local: the routable RoCE v1 GID comes first";
  EXPECT_EQ(chosen({entry(0, "::10.1.0.33", 2), entry(1, "::ffff:10.1.0.33", 1)}, nullptr, nullptr, nullptr), 1)
      << "::10.1.0.33 is not IPv4-mapped";
  bool fitted = false;
  EXPECT_EQ(chosen({entry(0, "::ffff:10.128.0.1", 2)}, "AF_INET", "10.0.0.0/8", nullptr, &fitted), 0);
  EXPECT_TRUE(fitted) << "10.128.0.1 is in 10.0.0.0/8";
  EXPECT_EQ(chosen({entry(0, "::ffff:11.0.0.1", 2)}, "AF_INET", "10.0.0.0/8", nullptr, &fitted), 0);
  EXPECT_FALSE(fitted) << "11.0.0.1 is not";
  EXPECT_EQ(nns_ib::roceVersionOfType("RoCE v2"), 2);
  EXPECT_EQ(nns_ib::roceVersionOfType("IB/RoCE v1"), 1);
  EXPECT_EQ(nns_ib::roceVersionOfType(""), 0);
  EXPECT_EQ(nns_ib::roceVersionOfType("RoCE v3"), 0);
}

TEST(IbGidChoice, MalformedSettingsAreNamedAndTheDefaultsKept) {
  auto preference = nns_ib::GidPreference::fromSettings("AF_INET4", "10.0.0.0/33", "3");
  ASSERT_EQ(preference.problems.size(), 3u);
  EXPECT_NE(preference.problems[0].find("NCCL_IB_ADDR_FAMILY=AF_INET4"), std::string::npos) << preference.problems[0];
  EXPECT_NE(preference.problems[1].find("NCCL_IB_ROCE_VERSION_NUM=3"), std::string::npos) << preference.problems[1];
  EXPECT_NE(preference.problems[2].find("NCCL_IB_ADDR_RANGE=10.0.0.0/33"), std::string::npos) << preference.problems[2];
  EXPECT_EQ(preference.family, AF_INET);
  EXPECT_EQ(preference.roceVersion, 2);
  EXPECT_FALSE(preference.hasRange);
  for (const char* range : {"10.0.0.0", "10.0.0.0/", "10.0.0/8", "fd00::/8", "10.0.0.0/8x", "10.0.0.0/-1"})
    EXPECT_EQ(nns_ib::GidPreference::fromSettings(nullptr, range, nullptr).problems.size(), 1u) << range;
  EXPECT_EQ(nns_ib::GidPreference::fromSettings("AF_INET6", "10.0.0.0/8", nullptr).problems.size(), 1u)
      << "an IPv4 range with AF_INET6";
  EXPECT_TRUE(nns_ib::GidPreference::fromSettings("AF_INET6", "fd00::/128", "1").problems.empty());
  EXPECT_TRUE(nns_ib::GidPreference::fromSettings("AF_INET", "0.0.0.0/0", "2").problems.empty());
}
