// ib_fake_verbs_test.cc: the nns-ib plugin's device discovery and init over a test double of libibverbs
// (fake_verbs.c), so they are tested on hosts without RDMA, where the real library lists no device. Each case runs
// ib_init_probe in a child process (the plugin reads its settings and discovers its devices once per process) with the
// double first on LD_LIBRARY_PATH, the fake devices in NNS_FAKE_VERBS and the case's NCCL_IB_* settings; the child
// prints the plugin's WARN/INFO lines, init's return code and each device's properties.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

extern char** environ;

namespace {

struct ProbeRun {
  bool exitedZero = false;  // the probe ran to its end (a crash or a malformed NNS_FAKE_VERBS does not)
  std::string output;       // everything it printed, for failure messages
  std::vector<std::string> warnings;
  int initReturned = -1;
  std::vector<std::string> devices;  // "name=... guid=0x... speed=... port=..." per device, in order (vNICs last)
  std::vector<int> vnics;            // what each makeVDevice the probe was asked for returned
};

bool startsWith(const std::string& text, const char* prefix) {
  return text.rfind(prefix, 0) == 0;
}

// Runs the probe with `settings` ("NAME=value") over the fake libibverbs in `fakeDir`. The child gets this process's
// environment (NNS_MUT included) less every NCCL_* and NNS_IB_* setting and any NNS_FAKE_VERBS, so only the case's
// settings count; without NNS_FAKE_VERBS among them the double lists no device.
// `arguments` go to the probe (vnic=A,B,... asks it for a vNIC of those devices).
ProbeRun runProbe(const std::vector<std::string>& settings, const char* fakeDir = NNS_FAKE_VERBS_DIR,
                  std::vector<std::string> arguments = {}) {
  std::vector<std::string> env;
  std::string libraryPath = std::string("LD_LIBRARY_PATH=") + fakeDir;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string text = *entry;
    if (startsWith(text, "NCCL_") || startsWith(text, "NNS_IB_") || startsWith(text, "NNS_FAKE_VERBS=")) continue;
    if (startsWith(text, "LD_LIBRARY_PATH=")) {
      libraryPath += ":" + text.substr(std::strlen("LD_LIBRARY_PATH="));
      continue;
    }
    env.push_back(text);
  }
  env.push_back(libraryPath);
  env.insert(env.end(), settings.begin(), settings.end());
  std::vector<char*> envp;
  for (std::string& text : env) envp.push_back(&text[0]);
  envp.push_back(nullptr);
  std::string probe = NNS_IB_INIT_PROBE;
  std::vector<char*> argv{&probe[0]};
  for (std::string& argument : arguments) argv.push_back(&argument[0]);
  argv.push_back(nullptr);

  ProbeRun run;
  int fds[2];
  if (pipe(fds) != 0) {
    run.output = "pipe failed";
    return run;
  }
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    alarm(30);  // kept across execve: a hung probe dies rather than hanging the test
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  close(fds[1]);
  char buffer[4096];
  ssize_t n;
  while ((n = read(fds[0], buffer, sizeof(buffer))) > 0) run.output.append(buffer, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) {
    run.output += "\n(fork or waitpid failed)";
    return run;
  }
  run.exitedZero = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!run.exitedZero) run.output += "\n(probe ended with wait status " + std::to_string(status) + ")";
  size_t start = 0;
  while (start < run.output.size()) {
    size_t end = run.output.find('\n', start);
    if (end == std::string::npos) end = run.output.size();
    std::string line = run.output.substr(start, end - start);
    start = end + 1;
    if (startsWith(line, "WARN ")) run.warnings.push_back(line.substr(5));
    if (startsWith(line, "init returned ")) run.initReturned = std::atoi(line.c_str() + 14);
    if (startsWith(line, "vnic=") && line.find(": returned ") != std::string::npos)
      run.vnics.push_back(std::atoi(line.c_str() + line.find(": returned ") + 11));
    if (startsWith(line, "device ")) {
      size_t colon = line.find(": ");
      if (colon != std::string::npos) run.devices.push_back(line.substr(colon + 2));
    }
  }
  return run;
}

bool warned(const ProbeRun& run, const std::string& text) {
  for (const std::string& warning : run.warnings)
    if (warning.find(text) != std::string::npos) return true;
  return false;
}

bool warnedAbout(const ProbeRun& run, const char* variable) {
  return warned(run, std::string(variable) + "=");
}

constexpr int kNcclSuccess = 0;
constexpr int kNcclSystemError = 2;
constexpr int kNcclInternalError = 3;
constexpr int kNcclInvalidUsage = 5;

// A port is named by its HCA alone when it is the HCA's only selected port ("mlx5_0"), and "hca:port" when the HCA has
// several ("mlx5_1:1", "mlx5_1:2"), as NCCL names its IB devices: the names key NICs in NCCL's topology and appear in
// its logs and in users' NCCL_IB_HCA settings. Each port is its own device, with its port number and speed.
TEST(IbFakeVerbs, ATwoPortHcaNamesEachPortByItsNumber) {
  ProbeRun run = runProbe({"NNS_FAKE_VERBS=mlx5_0;mlx5_1 ports=up,up/64/2"});
  ASSERT_TRUE(run.exitedZero) << run.output;
  EXPECT_EQ(run.initReturned, kNcclSuccess) << run.output;
  ASSERT_EQ(run.devices.size(), 3u) << run.output;
  EXPECT_TRUE(startsWith(run.devices[0], "name=mlx5_0 ")) << run.output;
  EXPECT_TRUE(startsWith(run.devices[1], "name=mlx5_1:1 ")) << run.output;
  EXPECT_TRUE(startsWith(run.devices[2], "name=mlx5_1:2 ")) << run.output;
  // EDR 4x is 100 Gb/s; HDR (64) 4x (2) is 200 Gb/s.
  EXPECT_NE(run.devices[1].find(" speed=100000 port=1"), std::string::npos) << run.output;
  EXPECT_NE(run.devices[2].find(" speed=200000 port=2"), std::string::npos) << run.output;
}

// A device's guid is the HCA's sys_image_guid (the ASIC's id, shared by the PCI functions of one card, so NCCL shares
// the card's bandwidth between them) and only where that is not set the node GUID, as NCCL's own IB transport does.
TEST(IbFakeVerbs, TheGuidIsTheSystemImageGuidWhenSetElseTheNodeGuid) {
  ProbeRun run = runProbe({"NNS_FAKE_VERBS=mlx5_0 node_guid=0x111 sys_image_guid=0xabc;mlx5_1 node_guid=0x222"});
  ASSERT_TRUE(run.exitedZero) << run.output;
  ASSERT_EQ(run.devices.size(), 2u) << run.output;
  EXPECT_NE(run.devices[0].find(" guid=0xabc "), std::string::npos) << run.output;
  EXPECT_NE(run.devices[1].find(" guid=0x222 "), std::string::npos) << run.output;
}

// Only active ports become devices: a port that is down cannot connect. The HCA's remaining port is then its only
// selected one, so it is named by the HCA alone.
TEST(IbFakeVerbs, ADownPortIsLeftOut) {
  ProbeRun run = runProbe({"NNS_FAKE_VERBS=mlx5_0 ports=down,up"});
  ASSERT_TRUE(run.exitedZero) << run.output;
  EXPECT_EQ(run.initReturned, kNcclSuccess) << run.output;
  ASSERT_EQ(run.devices.size(), 1u) << run.output;
  EXPECT_TRUE(startsWith(run.devices[0], "name=mlx5_0 ")) << run.output;
  EXPECT_NE(run.devices[0].find(" port=2"), std::string::npos) << run.output;
}

// When no port is usable, init's reason lists every port it saw and why each was left out, so a user can tell a link
// that is down from a port that NCCL_IB_HCA did not select.
TEST(IbFakeVerbs, PortsLeftOutAreListedWithTheirReason) {
  ProbeRun run = runProbe({"NNS_FAKE_VERBS=mlx5_0 ports=down;mlx5_1", "NCCL_IB_HCA==mlx5_0"});
  ASSERT_TRUE(run.exitedZero) << run.output;
  EXPECT_EQ(run.initReturned, kNcclSystemError) << run.output;
  EXPECT_TRUE(warned(run,
                     "init failed: no usable port among 2 RDMA device(s): mlx5_0:1(not active) "
                     "mlx5_1:1(not selected by NCCL_IB_HCA)"))
      << run.output;
}

// "=name" in NCCL_IB_HCA selects exactly that HCA: mlx5_1 is left out, although the HCA list names no other.
TEST(IbFakeVerbs, AnExactHcaListLeavesOtherHcasOut) {
  ProbeRun run = runProbe({"NNS_FAKE_VERBS=mlx5_0;mlx5_1", "NCCL_IB_HCA==mlx5_0"});
  ASSERT_TRUE(run.exitedZero) << run.output;
  EXPECT_EQ(run.initReturned, kNcclSuccess) << run.output;
  ASSERT_EQ(run.devices.size(), 1u) << run.output;
  EXPECT_TRUE(startsWith(run.devices[0], "name=mlx5_0 ")) << run.output;
}

// libibverbs loads but lists no device (no driver such as mlx5_ib or rdma_rxe): init says so in those words, which
// point the user at the driver, not at the library.
TEST(IbFakeVerbs, AnEmptyDeviceListSaysNoRdmaDeviceFound) {
  ProbeRun run = runProbe({});
  ASSERT_TRUE(run.exitedZero) << run.output;
  EXPECT_TRUE(warned(run, "init failed: no RDMA device found")) << run.output;
}

// Without a device init fails with ncclSystemError, what NCCL's own IB transport returns there: NCCL then goes on to
// its next network rather than treating the failure as an internal error.
TEST(IbFakeVerbs, InitWithoutAnyDeviceReturnsNcclSystemError) {
  ProbeRun run = runProbe({});
  ASSERT_TRUE(run.exitedZero) << run.output;
  EXPECT_EQ(run.initReturned, kNcclSystemError) << run.output;
}

// Where libibverbs.so.1 loads, init never blames the library: with no device the reason is the missing device, and
// with one init succeeds.
TEST(IbFakeVerbs, ALoadableLibibverbsIsNotReportedAsMissing) {
  ProbeRun none = runProbe({});
  ASSERT_TRUE(none.exitedZero) << none.output;
  EXPECT_FALSE(warned(none, "cannot load libibverbs")) << none.output;
  EXPECT_TRUE(warned(none, "no RDMA device")) << none.output;
  ProbeRun one = runProbe({"NNS_FAKE_VERBS=mlx5_0"});
  ASSERT_TRUE(one.exitedZero) << one.output;
  EXPECT_FALSE(warned(one, "cannot load libibverbs")) << one.output;
  EXPECT_EQ(one.initReturned, kNcclSuccess) << one.output;
}

// A libibverbs without an entry point the plugin needs (ibv_create_qp here) fails init, naming what is missing, even
// with a usable device: going on would crash at the first connection instead.
TEST(IbFakeVerbs, ALibibverbsLackingIbvCreateQpFailsInitNamingIt) {
  ProbeRun run = runProbe({"NNS_FAKE_VERBS=mlx5_0"}, NNS_FAKE_VERBS_NO_CREATE_QP_DIR);
  ASSERT_TRUE(run.exitedZero) << run.output;
  EXPECT_EQ(run.initReturned, kNcclSystemError) << run.output;
  EXPECT_TRUE(warned(run, "lacks ibv_create_qp")) << run.output;
  EXPECT_TRUE(run.devices.empty()) << run.output;
}

// A RoCE port whose GID table has no address (its netdev has no IP) is unusable: the GID chosen is index 0, and it is
// empty. A RoCE port with an IPv4-mapped GID is a device.
TEST(IbFakeVerbs, ARocePortWhoseGidsAreAllZeroIsLeftOutAtGidIndexZero) {
  ProbeRun empty = runProbe({"NNS_FAKE_VERBS=mlx5_0 link=roce gids=::|::|::"});
  ASSERT_TRUE(empty.exitedZero) << empty.output;
  EXPECT_EQ(empty.initReturned, kNcclSystemError) << empty.output;
  EXPECT_TRUE(warned(empty, "mlx5_0:1(GID index 0 empty: no IP address on the netdev?)")) << empty.output;
  ProbeRun addressed = runProbe({"NNS_FAKE_VERBS=mlx5_0 link=roce gids=::|::ffff:10.1.0.7"});
  ASSERT_TRUE(addressed.exitedZero) << addressed.output;
  EXPECT_EQ(addressed.initReturned, kNcclSuccess) << addressed.output;
  EXPECT_EQ(addressed.devices.size(), 1u) << addressed.output;
}

// NCCL_IB_TIMEOUT takes 1..31 and NCCL_IB_RETRY_CNT 0..7 (the verbs QP attribute ranges, as NCCL takes them): the
// ends are accepted without a warning, one past them is not.
TEST(IbFakeVerbs, TimeoutAndRetryCountAcceptTheirWholeRange) {
  ProbeRun ends = runProbe({"NNS_FAKE_VERBS=mlx5_0", "NCCL_IB_TIMEOUT=31", "NCCL_IB_RETRY_CNT=0"});
  ASSERT_TRUE(ends.exitedZero) << ends.output;
  EXPECT_FALSE(warnedAbout(ends, "NCCL_IB_TIMEOUT")) << ends.output;
  EXPECT_FALSE(warnedAbout(ends, "NCCL_IB_RETRY_CNT")) << ends.output;
  EXPECT_EQ(ends.initReturned, kNcclSuccess) << ends.output;
  ProbeRun past = runProbe({"NNS_FAKE_VERBS=mlx5_0", "NCCL_IB_TIMEOUT=32", "NCCL_IB_RETRY_CNT=8"});
  ASSERT_TRUE(past.exitedZero) << past.output;
  EXPECT_TRUE(warned(past, "NCCL_IB_TIMEOUT=32 is not an integer in [1, 31]")) << past.output;
  EXPECT_TRUE(warned(past, "NCCL_IB_RETRY_CNT=8 is not an integer in [0, 7]")) << past.output;
}

// An out-of-range knob is warned about and NCCL's default used instead: timeout 20, retry count 7, and GID index -1
// (chosen per port by address family, range and RoCE version), never a value of the plugin's own.
TEST(IbFakeVerbs, OutOfRangeKnobsFallBackToNcclsDefaults) {
  ProbeRun run =
      runProbe({"NNS_FAKE_VERBS=mlx5_0", "NCCL_IB_TIMEOUT=99", "NCCL_IB_RETRY_CNT=99", "NCCL_IB_GID_INDEX=999"});
  ASSERT_TRUE(run.exitedZero) << run.output;
  EXPECT_TRUE(warned(run, "NCCL_IB_TIMEOUT=99 is not an integer in [1, 31]; using 20")) << run.output;
  EXPECT_TRUE(warned(run, "NCCL_IB_RETRY_CNT=99 is not an integer in [0, 7]; using 7")) << run.output;
  EXPECT_TRUE(warned(run, "NCCL_IB_GID_INDEX=999 is not an integer in [-1, 255]; using -1")) << run.output;
  EXPECT_EQ(run.initReturned, kNcclSuccess) << run.output;
}

// A malformed NCCL_IB_ADDR_FAMILY is warned about at init and the default (AF_INET) used, as NCCL warns and goes on:
// silently ignoring it would leave the user believing the setting took effect.
TEST(IbFakeVerbs, AMalformedAddressFamilyIsWarnedAndTheDefaultUsed) {
  ProbeRun run = runProbe({"NNS_FAKE_VERBS=mlx5_0 link=roce", "NCCL_IB_ADDR_FAMILY=AF_INET4"});
  ASSERT_TRUE(run.exitedZero) << run.output;
  EXPECT_TRUE(warned(run, "NCCL_IB_ADDR_FAMILY=AF_INET4 is neither AF_INET nor AF_INET6; the default is used"))
      << run.output;
  EXPECT_EQ(run.initReturned, kNcclSuccess) << run.output;
}

// makeVDevice fuses ports into one device named by its members ("mlx5_0+mlx5_1"), up to the 8 a v12 vNIC carries;
// the vNIC is a device of its own after the physical ones, with the first port's properties.
TEST(IbFakeVerbs, AVNicFusesUpToEightPortsIntoOneDevice) {
  ProbeRun two = runProbe({"NNS_FAKE_VERBS=mlx5_0;mlx5_1"}, NNS_FAKE_VERBS_DIR, {"vnic=0,1"});
  ASSERT_TRUE(two.exitedZero) << two.output;
  ASSERT_EQ(two.vnics, std::vector<int>{kNcclSuccess}) << two.output;
  ASSERT_EQ(two.devices.size(), 3u) << two.output;
  EXPECT_TRUE(startsWith(two.devices[2], "name=mlx5_0+mlx5_1 ")) << two.output;
  ProbeRun eight = runProbe({"NNS_FAKE_VERBS=h0;h1;h2;h3;h4;h5;h6;h7"}, NNS_FAKE_VERBS_DIR, {"vnic=0,1,2,3,4,5,6,7"});
  ASSERT_TRUE(eight.exitedZero) << eight.output;
  EXPECT_EQ(eight.vnics, std::vector<int>{kNcclSuccess}) << eight.output;
  ASSERT_EQ(eight.devices.size(), 9u) << eight.output;
  EXPECT_TRUE(startsWith(eight.devices[8], "name=h0+h1+h2+h3+h4+h5+h6+h7 ")) << eight.output;
}

// A vNIC is made of physical devices only (a vNIC inside another would count its ports twice), and of one link layer:
// an InfiniBand port and a RoCE one cannot stripe one connection, as NCCL requires too. Each is refused by name.
TEST(IbFakeVerbs, AVNicOfAVNicOrOfMixedLinkLayersIsRefused) {
  ProbeRun nested = runProbe({"NNS_FAKE_VERBS=mlx5_0;mlx5_1;mlx5_2"}, NNS_FAKE_VERBS_DIR, {"vnic=0,1", "vnic=3,2"});
  ASSERT_TRUE(nested.exitedZero) << nested.output;
  EXPECT_EQ(nested.vnics, (std::vector<int>{kNcclSuccess, kNcclInternalError})) << nested.output;
  EXPECT_TRUE(warned(nested, "makeVDevice: device 3 is not a device of this plugin, or is a vNIC already"))
      << nested.output;
  ProbeRun mixed = runProbe({"NNS_FAKE_VERBS=mlx5_0;mlx5_1 link=roce"}, NNS_FAKE_VERBS_DIR, {"vnic=0,1"});
  ASSERT_TRUE(mixed.exitedZero) << mixed.output;
  EXPECT_EQ(mixed.vnics, std::vector<int>{kNcclInvalidUsage}) << mixed.output;
  EXPECT_TRUE(warned(mixed, "a vNIC fuses ports of one link layer")) << mixed.output;
  EXPECT_EQ(mixed.devices.size(), 2u) << mixed.output;
}

}  // namespace
