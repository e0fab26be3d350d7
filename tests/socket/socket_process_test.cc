// socket_process_test.cc: the nns-socket plugin between two processes: over loopback with several knob settings and
// IPv6, across two network-namespace "hosts" joined by two veth pairs (plain and fused), and under faults: kill -9
// of either peer and `ip link set down` of one fused link mid-transfer, each ending in an error within a bound.
//
// The test process itself never loads the plugin: every child forks from a single-threaded parent, enters its
// namespace and sets its environment before the plugin reads it.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "plugin_harness.hpp"

namespace {

using namespace socket_test;
using Env = std::vector<std::pair<std::string, std::string>>;

constexpr int kDeadPeerTimeoutMs = 2000;  // NNS_SOCKET_TIMEOUT_MS in every child

// ---- processes and pipes
// ----------------------------------------------------------------------------------------------

struct Pipe {
  int read = -1, write = -1;
  Pipe() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) == 0) {
      read = fds[0];
      write = fds[1];
    }
  }
  ~Pipe() {
    if (read >= 0) close(read);
    if (write >= 0) close(write);
  }
};

bool writeAll(int fd, const void* data, size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  while (size > 0) {
    ssize_t written = ::write(fd, bytes, size);
    if (written <= 0) return false;
    bytes += written;
    size -= static_cast<size_t>(written);
  }
  return true;
}

pid_t spawn(const std::function<int()>& body) {
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) _exit(body());
  return pid;
}

// ---- what a child does
// ------------------------------------------------------------------------------------------------

struct Role {
  std::string netns;          // empty: stay in this namespace
  Env env;                    // set before the plugin reads its environment
  bool fuse = false;          // fuse devices 0 and 1 into one vNIC and use it
  std::vector<size_t> sizes;  // messages to move; empty: move 64 MiB messages until an error (fault tests)
  std::string peerText;       // the fault WARN must contain this
  std::vector<std::string> stripeInterfaces;  // receiver: each must carry a fair share of the bytes
};

unsigned long long receivedBytesOf(const std::string& interfaceName) {
  std::ifstream dev("/proc/self/net/dev");  // follows this process's network namespace, unlike /sys/class/net
  std::string line;
  while (std::getline(dev, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(0, name.find_first_not_of(' '));
    if (name != interfaceName) continue;
    std::istringstream fields(line.substr(colon + 1));
    unsigned long long bytes = 0;
    fields >> bytes;
    return bytes;
  }
  return 0;
}

// Enters the namespace, sets the environment, loads and initialises the plugin, and picks the device.
int setUpChild(const Role& role, const ncclNet_v12_t** net, void** ctx, int* dev) {
  if (!role.netns.empty()) {
    int fd = open(("/var/run/netns/" + role.netns).c_str(), O_RDONLY | O_CLOEXEC);
    CHILD_CHECK(fd >= 0 && setns(fd, CLONE_NEWNET) == 0, 2, "entering netns %s", role.netns.c_str());
    close(fd);
  }
  for (const auto& [name, value] : role.env) setenv(name.c_str(), value.c_str(), 1);
  *net = plugin();
  CHILD_CHECK(*net != nullptr, 3, "loading the plugin");
  ncclResult_t result;
  *ctx = initPlugin(*net, &result);
  CHILD_CHECK(result == ncclSuccess, 4, "init");
  *dev = 0;
  if (role.fuse) {
    int ndev = 0;
    (*net)->devices(&ndev);
    CHILD_CHECK(ndev == 2, 5, "two interfaces expected, found %d", ndev);
    ncclNetProperties_v12_t child{};
    CHILD_CHECK((*net)->getProperties(0, &child) == ncclSuccess, 5, "properties");
    ncclNetVDeviceProps_v12_t fused{};
    fused.ndevs = 2;
    fused.devs[0] = 0;
    fused.devs[1] = 1;
    CHILD_CHECK((*net)->makeVDevice(dev, &fused) == ncclSuccess, 6, "makeVDevice");
    (*net)->devices(&ndev);
    CHILD_CHECK(ndev == 3 && *dev == 2, 6, "the vNIC is device 2 of 3 (got %d of %d)", *dev, ndev);
    ncclNetProperties_v12_t props{};
    CHILD_CHECK((*net)->getProperties(*dev, &props) == ncclSuccess, 6, "vNIC properties");
    CHILD_CHECK(props.vProps.ndevs == 2 && props.vProps.devs[0] == 0 && props.vProps.devs[1] == 1, 7, "vProps");
    CHILD_CHECK(props.speed == 2 * child.speed, 7, "speed %d is the sum of 2 x %d", props.speed, child.speed);
  }
  return 0;
}

// A fault test's child tells the parent when it saw the fault (the monotonic clock is the same in every process), so
// the bound is checked on detection, not on how long the child takes to tear down.
struct Detection {
  int64_t steadyNanoseconds;
  int64_t who;
};
void reportDetection(int progressOut, char who) {
  Detection d{std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(), who};
  writeAll(progressOut, &d, sizeof(d));
}

int receiverMain(const Role& role, int handleOut, int progressOut) {
  const ncclNet_v12_t* net;
  void* ctx;
  int dev;
  if (int code = setUpChild(role, &net, &ctx, &dev)) return code;
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* listenComm = nullptr;
  CHILD_CHECK(net->listen(ctx, dev, handle, &listenComm) == ncclSuccess, 10, "listen");
  CHILD_CHECK(writeAll(handleOut, handle, sizeof(handle)), 10, "handing out the handle");
  void* recvComm = nullptr;
  CHILD_CHECK(acceptUntilDone(net, listenComm, &recvComm) == ncclSuccess, 11, "accept");

  std::vector<unsigned long long> before;
  for (const std::string& name : role.stripeInterfaces) before.push_back(receivedBytesOf(name));
  size_t largest = role.sizes.empty() ? size_t{64} << 20 : 1;
  for (size_t size : role.sizes) largest = std::max(largest, size);
  std::vector<unsigned char> buffer(largest);
  size_t total = 0;
  for (size_t index = 0; role.sizes.empty() || index < role.sizes.size(); ++index) {
    size_t size = role.sizes.empty() ? largest : role.sizes[index];
    void* data[1] = {buffer.data()};
    size_t capacities[1] = {largest};
    int tags[1] = {42};
    void* request = nullptr;
    ncclResult_t result = postRecv(net, recvComm, 1, data, capacities, tags, &request);
    int received = -1;
    if (result == ncclSuccess) result = waitRequest(net, request, &received, std::chrono::seconds(30));
    if (role.sizes.empty()) {  // fault test: run until the fault shows
      if (result == ncclSuccess) {
        if (index == 0) CHILD_CHECK(writeAll(progressOut, "r", 1), 12, "progress");
        continue;
      }
      reportDetection(progressOut, 'r');
      CHILD_CHECK(result == ncclRemoteError, 13, "fault reported as %d, not ncclRemoteError", result);
      CHILD_CHECK(warnedAbout(role.peerText), 14, "no WARN names the peer %s", role.peerText.c_str());
      net->closeRecv(recvComm);  // with the failed request still in flight
      net->closeListen(listenComm);
      return 0;
    }
    CHILD_CHECK(result == ncclSuccess, 15, "receive of %zu bytes: result %d", size, result);
    CHILD_CHECK(received == static_cast<int>(size), 16, "size %d reported for %zu", received, size);
    for (size_t i = 0; i < size; ++i)
      CHILD_CHECK(buffer[i] == patternByte(i, size), 17, "byte %zu of a %zu-byte message", i, size);
    total += size;
  }
  for (size_t i = 0; i < role.stripeInterfaces.size(); ++i) {
    unsigned long long carried = receivedBytesOf(role.stripeInterfaces[i]) - before[i];
    std::fprintf(stderr, "%s carried %llu of %zu payload bytes\n", role.stripeInterfaces[i].c_str(), carried, total);
    CHILD_CHECK(carried > total / 4, 18, "interface %s carried only %llu of %zu bytes",
                role.stripeInterfaces[i].c_str(), carried, total);
  }
  CHILD_CHECK(net->closeRecv(recvComm) == ncclSuccess && net->closeListen(listenComm) == ncclSuccess, 19, "close");
  return 0;
}

int senderMain(const Role& role, int handleIn, int progressOut) {
  const ncclNet_v12_t* net;
  void* ctx;
  int dev;
  if (int code = setUpChild(role, &net, &ctx, &dev)) return code;
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE];
  CHILD_CHECK(readWithin(handleIn, handle, sizeof(handle), 20000), 20, "no handle from the receiver");
  void* sendComm = nullptr;
  CHILD_CHECK(connectUntilDone(net, ctx, dev, handle, &sendComm) == ncclSuccess, 21, "connect");
  size_t largest = role.sizes.empty() ? size_t{64} << 20 : 1;
  for (size_t size : role.sizes) largest = std::max(largest, size);
  std::vector<unsigned char> buffer(largest);
  for (size_t index = 0; role.sizes.empty() || index < role.sizes.size(); ++index) {
    size_t size = role.sizes.empty() ? largest : role.sizes[index];
    // Fault tests resend one size: fill once, so the loop's time is the plugin's (a fill is slow under TSan).
    if (!role.sizes.empty() || index == 0)
      for (size_t i = 0; i < size; ++i) buffer[i] = patternByte(i, size);
    void* request = nullptr;
    ncclResult_t result = postSend(net, sendComm, buffer.data(), size, 42, &request);
    int sent = -1;
    if (result == ncclSuccess) result = waitRequest(net, request, &sent, std::chrono::seconds(30));
    if (role.sizes.empty()) {
      if (result == ncclSuccess) {
        if (index == 0) CHILD_CHECK(writeAll(progressOut, "s", 1), 22, "progress");
        continue;
      }
      reportDetection(progressOut, 's');
      CHILD_CHECK(result == ncclRemoteError, 23, "fault reported as %d, not ncclRemoteError", result);
      CHILD_CHECK(warnedAbout(role.peerText), 24, "no WARN names the peer %s", role.peerText.c_str());
      net->closeSend(sendComm);
      return 0;
    }
    CHILD_CHECK(result == ncclSuccess && sent == static_cast<int>(size), 25, "send of %zu bytes: result %d", size,
                result);
  }
  CHILD_CHECK(net->closeSend(sendComm) == ncclSuccess, 26, "closeSend");
  return 0;
}

// Milliseconds from `since` until the latest of `count` children reported detecting the fault; -1 if one did not.
long detectionMs(int progressIn, int count, Clock::time_point since) {
  long latest = 0;
  for (int i = 0; i < count; ++i) {
    Detection d{};
    if (!readWithin(progressIn, &d, sizeof(d), 20000)) return -1;
    Clock::time_point at{std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(d.steadyNanoseconds))};
    latest = std::max<long>(latest, std::chrono::duration_cast<std::chrono::milliseconds>(at - since).count());
  }
  return latest;
}

struct Pair {
  pid_t receiver = -1, sender = -1;
  Pipe handle, progress;
  void start(const Role& receiverRole, const Role& senderRole) {
    receiver = spawn([&] { return receiverMain(receiverRole, handle.write, progress.write); });
    sender = spawn([&] { return senderMain(senderRole, handle.read, progress.write); });
  }
};

Env withCommon(Env env) {
  env.emplace_back("NNS_SOCKET_TIMEOUT_MS", std::to_string(kDeadPeerTimeoutMs));
  env.emplace_back("NNS_SOCKET_CONNECT_TIMEOUT_MS", "10000");
  return env;
}

const std::vector<size_t> kSizes = {0, 1, 4097, 65536, 65537, (size_t{3} << 20) + 1, (size_t{32} << 20) + 7};

// ---- loopback
// -----------------------------------------------------------------------------------------------------------

struct LoopbackCase {
  const char* name;
  Env env;
};
void PrintTo(const LoopbackCase& c, std::ostream* out) {
  *out << c.name;
}

class SocketTwoProcessLoopback : public ::testing::TestWithParam<LoopbackCase> {};

TEST_P(SocketTwoProcessLoopback, MovesEverySize) {
  Env env = withCommon(GetParam().env);
  env.emplace_back("NCCL_SOCKET_IFNAME", "lo");
  Role role{"", env, false, kSizes, "", {}};
  Pair pair;
  pair.start(role, role);
  // Hang guards, not a speed check: under TSan beside another test this took up to 10 s of 30.
  EXPECT_EQ(waitChild(pair.sender, std::chrono::seconds(90)), 0) << "sender";
  EXPECT_EQ(waitChild(pair.receiver, std::chrono::seconds(90)), 0) << "receiver";
}

INSTANTIATE_TEST_SUITE_P(
    Knobs, SocketTwoProcessLoopback,
    ::testing::Values(
        LoopbackCase{"Defaults", {}},
        // The default on machines with 4 or more CPUs; the default on smaller ones (this CI's) has no helpers.
        LoopbackCase{"TwoHelperThreads", {{"NNS_SOCKET_NTHREADS", "2"}}},
        LoopbackCase{"CallerDrivesTwoSockets", {{"NNS_SOCKET_NTHREADS", "0"}, {"NNS_SOCKET_NSOCKS_PERTHREAD", "2"}}},
        LoopbackCase{"ControlSocketOnly", {{"NNS_SOCKET_NTHREADS", "0"}, {"NNS_SOCKET_NSOCKS_PERTHREAD", "0"}}},
        LoopbackCase{"FourThreadsEightSockets",
                     {{"NNS_SOCKET_NTHREADS", "4"},
                      {"NNS_SOCKET_NSOCKS_PERTHREAD", "2"},
                      {"NNS_SOCKET_MIN_CHUNK_BYTES", "4096"},
                      {"NNS_SOCKET_INLINE_BYTES", "0"}}},
        LoopbackCase{"IPv6", {{"NCCL_SOCKET_FAMILY", "AF_INET6"}}},
        // Socket buffers shrunk after the handshake leave the receive window out of step with the scale negotiated
        // at connect time: a message then crawls at a few KiB per 200 ms, or stalls into the dead-peer timeout.
        LoopbackCase{"SmallSocketBuffers", {{"NNS_SOCKET_SNDBUF", "8192"}, {"NNS_SOCKET_RCVBUF", "8192"}}}),
    [](const ::testing::TestParamInfo<LoopbackCase>& info) { return std::string(info.param.name); });

// Kills one peer with SIGKILL once 64 MiB messages flow; the survivor's pending test must fail with
// ncclRemoteError, naming the peer, well within the dead-peer timeout (the kernel closes the dead peer's sockets).
void killMidTransfer(bool killSender) {
  Env env = withCommon({{"NCCL_SOCKET_IFNAME", "lo"}});
  Role role{"", env, false, {}, "127.0.0.1:", {}};
  Pair pair;
  pair.start(role, role);
  char mark[2];
  ASSERT_TRUE(readWithin(pair.progress.read, mark, 2, 20000)) << "the transfer never started";
  pid_t victim = killSender ? pair.sender : pair.receiver;
  pid_t survivor = killSender ? pair.receiver : pair.sender;
  kill(victim, SIGKILL);
  waitChild(victim, std::chrono::seconds(5));
  // Measured from the victim's death (its sockets are closed by then): tearing down a large (sanitizer) process
  // after SIGKILL can take seconds, which is not the plugin's latency.
  auto deadAt = Clock::now();  // reaped: within waitChild's 5 ms polling of the death
  long detected = detectionMs(pair.progress.read, 1, deadAt);
  EXPECT_EQ(waitChild(survivor, std::chrono::seconds(15)), 0) << "the survivor did not report the fault as expected";
  EXPECT_GE(detected, 0) << "the survivor never saw the fault";
  // The kernel closes a killed process's sockets: the survivor sees it at once, long before the dead-peer timeout.
  EXPECT_LT(detected, kDeadPeerTimeoutMs) << "fault seen after " << detected << " ms";
  std::printf("peer death seen after %ld ms\n", detected);
}

TEST(SocketFaults, KillSenderMidTransfer) {
  killMidTransfer(true);
}
TEST(SocketFaults, KillReceiverMidTransfer) {
  killMidTransfer(false);
}

// ---- two hosts: network namespaces joined by two veth pairs
// ------------------------------------------------------------

// Host A (namespace ...-a) has vna0 10.201.0.1 and vna1 10.201.1.1; host B has vnb0 10.201.0.2 and vnb1 10.201.1.2.
class TwoHosts : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
    std::string base = "nns-socket-" + std::to_string(getpid());
    hostA = base + "-a";
    hostB = base + "-b";
    if (!shell("ip netns add " + hostA)) GTEST_SKIP() << "`ip netns add` failed: no network-namespace support here";
    created = true;
    ASSERT_TRUE(shell("ip netns add " + hostB));
    for (int link = 0; link < 2; ++link) {
      std::string a = "vna" + std::to_string(link), b = "vnb" + std::to_string(link);
      std::string subnet = "10.201." + std::to_string(link) + ".";
      ASSERT_TRUE(shell("ip link add " + a + " netns " + hostA + " type veth peer name " + b + " netns " + hostB));
      ASSERT_TRUE(shell("ip -n " + hostA + " addr add " + subnet + "1/24 dev " + a));
      ASSERT_TRUE(shell("ip -n " + hostB + " addr add " + subnet + "2/24 dev " + b));
      ASSERT_TRUE(shell("ip -n " + hostA + " link set " + a + " up"));
      ASSERT_TRUE(shell("ip -n " + hostB + " link set " + b + " up"));
    }
    ASSERT_TRUE(shell("ip -n " + hostA + " link set lo up"));
    ASSERT_TRUE(shell("ip -n " + hostB + " link set lo up"));
  }
  void TearDown() override {
    if (!created) return;
    shell("ip netns del " + hostA);  // deleting a namespace deletes its veth ends too
    shell("ip netns del " + hostB);
  }
  Role receiverRole(bool fuse, std::vector<size_t> sizes) {
    std::vector<std::string> stripes;
    if (fuse && !sizes.empty()) stripes = {"vnb0", "vnb1"};
    return Role{hostB, withCommon({{"NCCL_SOCKET_IFNAME", "vnb"}}), fuse, std::move(sizes), "10.201.", stripes};
  }
  Role senderRole(bool fuse, std::vector<size_t> sizes) {
    return Role{hostA, withCommon({{"NCCL_SOCKET_IFNAME", "vna"}}), fuse, std::move(sizes), "10.201.", {}};
  }
  std::string hostA, hostB;
  bool created = false;
};

// Host A has lo, vna0 and vna1. Each selection runs in its own child (the plugin reads its environment once).
TEST_F(TwoHosts, InterfaceSelectionFollowsNcclSocketIfname) {
  struct Case {
    const char* ifname;  // nullptr: unset
    std::vector<std::string> expected;
    const char* nnsIfname = nullptr;  // NNS_SOCKET_IFNAME, which wins over NCCL_SOCKET_IFNAME when set (not empty)
  };
  const std::vector<Case> cases = {
      {nullptr, {"vna0", "vna1"}},  // automatic: loopback only when nothing else is up
      {"vna", {"vna0", "vna1"}},    // prefix
      {"=vna1", {"vna1"}},          // exact
      {"=vna", {}},                 // exact names only: no interface is called "vna"
      {"^vna1", {"lo", "vna0"}},    // exclusion keeps everything else, loopback included
      {"lo", {"lo"}},               // asked for
      {"vna", {"vna1"}, "=vna1"},   // the plugin's own variable wins
      {"=vna1", {"vna1"}, ""},      // an empty one is unset, not "automatic"
  };
  for (const Case& c : cases) {
    pid_t child = spawn([&] {
      int fd = open(("/var/run/netns/" + hostA).c_str(), O_RDONLY | O_CLOEXEC);
      CHILD_CHECK(fd >= 0 && setns(fd, CLONE_NEWNET) == 0, 2, "entering netns");
      close(fd);
      if (c.ifname != nullptr) {
        setenv("NCCL_SOCKET_IFNAME", c.ifname, 1);
      } else {
        unsetenv("NCCL_SOCKET_IFNAME");
      }
      if (c.nnsIfname != nullptr) setenv("NNS_SOCKET_IFNAME", c.nnsIfname, 1);
      const ncclNet_v12_t* net = plugin();
      CHILD_CHECK(net != nullptr, 3, "loading the plugin");
      void* ctx = nullptr;
      ncclResult_t result = net->init(&ctx, 1, nullptr, collectingLogger, nullptr);
      if (c.expected.empty()) {
        CHILD_CHECK(result != ncclSuccess, 4, "init must fail when no interface matches");
        CHILD_CHECK(warnedAbout("no usable network interface"), 4, "a WARN says why");
        return 0;
      }
      CHILD_CHECK(result == ncclSuccess, 4, "init");
      int ndev = 0;
      net->devices(&ndev);
      std::vector<std::string> names;
      for (int d = 0; d < ndev; ++d) {
        ncclNetProperties_v12_t props{};
        net->getProperties(d, &props);
        names.push_back(props.name);
      }
      std::sort(names.begin(), names.end());
      std::string seen;
      for (const std::string& name : names) seen += name + " ";
      CHILD_CHECK(names == c.expected, 5, "NCCL_SOCKET_IFNAME=%s selected %s", c.ifname ? c.ifname : "<unset>",
                  seen.c_str());
      return 0;
    });
    EXPECT_EQ(waitChild(child, std::chrono::seconds(20)), 0)
        << "NCCL_SOCKET_IFNAME=" << (c.ifname ? c.ifname : "<unset>");
  }
}

TEST_F(TwoHosts, MovesEverySizeOverOneInterface) {
  Pair pair;
  pair.start(receiverRole(false, kSizes), senderRole(false, kSizes));
  // Hang guards, not a speed check: under TSan beside another test this took up to 10 s of 30.
  EXPECT_EQ(waitChild(pair.sender, std::chrono::seconds(90)), 0) << "sender";
  EXPECT_EQ(waitChild(pair.receiver, std::chrono::seconds(90)), 0) << "receiver";
}

TEST_F(TwoHosts, FusedDeviceStripesOverBothInterfaces) {
  std::vector<size_t> sizes = kSizes;
  for (int i = 0; i < 4; ++i) sizes.push_back(size_t{16} << 20);
  Pair pair;
  pair.start(receiverRole(true, sizes), senderRole(true, sizes));
  EXPECT_EQ(waitChild(pair.sender, std::chrono::seconds(120)), 0) << "sender";
  EXPECT_EQ(waitChild(pair.receiver, std::chrono::seconds(120)), 0) << "receiver";
}

// One of the two fused links goes down mid-transfer: no FIN or RST ever arrives, so only the dead-peer timeout
// (a stalled send with nothing acknowledged, and keepalive) can end the wait; both ends must fail within it plus a
// few probe intervals.
TEST_F(TwoHosts, LinkDownMidTransferFailsBothEnds) {
  Pair pair;
  pair.start(receiverRole(true, {}), senderRole(true, {}));
  char mark[2];
  ASSERT_TRUE(readWithin(pair.progress.read, mark, 2, 20000)) << "the transfer never started";
  auto downAt = Clock::now();
  ASSERT_TRUE(shell("ip -n " + hostA + " link set vna1 down"));
  long detected = detectionMs(pair.progress.read, 2, downAt);
  EXPECT_EQ(waitChild(pair.sender, std::chrono::seconds(20)), 0) << "sender";
  EXPECT_EQ(waitChild(pair.receiver, std::chrono::seconds(20)), 0) << "receiver";
  EXPECT_GE(detected, 0) << "an end never saw the fault";
  // The documented bound (README): NNS_SOCKET_TIMEOUT_MS plus up to 2 s of keepalive/retransmission granularity.
  EXPECT_LT(detected, kDeadPeerTimeoutMs + 2000) << "faults seen after " << detected << " ms";
  std::printf("link down seen by both ends after %ld ms (NNS_SOCKET_TIMEOUT_MS=%d)\n", detected, kDeadPeerTimeoutMs);
}

// The same over one device with both links down: nothing either end sends can reach the other, so each must see the
// fault by itself (its stalled sends, keepalive). Over the fused pair the link left up carried the receiver's close
// to the sender, and a sender that never checked for a stall still failed in time.
TEST_F(TwoHosts, EveryLinkDownFailsBothEndsByThemselves) {
  Pair pair;
  pair.start(receiverRole(false, {}), senderRole(false, {}));
  char mark[2];
  ASSERT_TRUE(readWithin(pair.progress.read, mark, 2, 20000)) << "the transfer never started";
  auto downAt = Clock::now();
  ASSERT_TRUE(shell("ip -n " + hostA + " link set vna0 down && ip -n " + hostA + " link set vna1 down"));
  long detected = detectionMs(pair.progress.read, 2, downAt);
  EXPECT_EQ(waitChild(pair.sender, std::chrono::seconds(20)), 0) << "sender";
  EXPECT_EQ(waitChild(pair.receiver, std::chrono::seconds(20)), 0) << "receiver";
  EXPECT_GE(detected, 0) << "an end never saw the fault";
  EXPECT_LT(detected, kDeadPeerTimeoutMs + 2000) << "faults seen after " << detected << " ms";
  std::printf("every link down seen by both ends after %ld ms (NNS_SOCKET_TIMEOUT_MS=%d)\n", detected,
              kDeadPeerTimeoutMs);
}

}  // namespace
