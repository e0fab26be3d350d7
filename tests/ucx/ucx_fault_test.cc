// ucx_fault_test.cc: nns-ucx between two processes when one is killed mid-message: the survivor's test() must fail
// (not hang, not succeed) within a bound, in both directions, over UCX's tcp and shared-memory transports. And a dead
// link rather than a dead process: two network-namespace hosts whose veth goes down mid-stream (UcxTwoHosts). And
// strangers on the side channel (UcxStrangers, UcxConnect): garbage, a stale or forged handle, a hostile hello or
// reply, a listener that never answers.
//
// Every process loads the plugin itself after fork and after setting UCX_TLS, so UCX reads the environment of the
// test (gtest_discover_tests runs each test in its own process).
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#define NNS_SOCKET_PLUGIN_PATH NNS_UCX_PLUGIN_PATH  // plugin_harness.hpp loads the plugin named by this macro
#include "../../tools/nccl-net-check/tcp_strangers.hpp"
#include "../socket/plugin_harness.hpp"
#include "ucx_wire.hpp"

namespace {

using namespace socket_test;
constexpr size_t kBytes = 64u << 20;  // above every eager threshold: the transfer needs both peers to the end
constexpr auto kBound = std::chrono::seconds(10);

struct Transport {
  const char* name;
  std::vector<std::pair<const char*, const char*>> env;
};

void applyEnv(const Transport& transport) {
  for (const auto& [key, value] : transport.env) setenv(key, value, 1);
}

bool writeAll(int fd, const void* data, size_t size) {
  return write(fd, data, size) == static_cast<ssize_t>(size);
}
bool readAll(int fd, void* data, size_t size) {
  size_t got = 0;
  while (got < size) {
    ssize_t n = read(fd, static_cast<char*>(data) + got, size - got);
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

// The child: the peer that will be killed. It listens (and receives nothing) or connects (and sends kBytes), reports
// its handle or readiness on `out`, then waits to be killed. With `closes`, it first waits for a byte on `in`, then
// closes its comm with the transfer still pending and stays alive.
[[noreturn]] void runVictim(const Transport& transport, bool victimReceives, bool closes, int in, int out) {
  applyEnv(transport);
  const ncclNet_v12_t* net = plugin();
  ncclResult_t result = ncclSuccess;
  void* ctx = net != nullptr ? initPlugin(net, &result) : nullptr;
  if (net == nullptr || result != ncclSuccess) _exit(2);
  static std::vector<unsigned char> buffer(kBytes, 7);
  if (victimReceives) {
    unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
    void* listenComm = nullptr;
    void* recvComm = nullptr;
    if (net->listen(ctx, 0, handle, &listenComm) != ncclSuccess || !writeAll(out, handle, sizeof(handle))) _exit(3);
    if (acceptUntilDone(net, listenComm, &recvComm) != ncclSuccess) _exit(4);
    // Posts no receive: the survivor's large send waits for one, with UCX's rendezvous under way.
    char ready = 'r', go = 0;
    if (!writeAll(out, &ready, 1)) _exit(7);
    if (closes && (!readAll(in, &go, 1) || net->closeRecv(recvComm) != ncclSuccess)) _exit(8);
  } else {
    unsigned char handle[NCCL_NET_HANDLE_MAXSIZE];
    void* sendComm = nullptr;
    void* request = nullptr;
    if (!readAll(in, handle, sizeof(handle)) || connectUntilDone(net, ctx, 0, handle, &sendComm) != ncclSuccess)
      _exit(5);
    if (postSend(net, sendComm, buffer.data(), kBytes, 1, &request) != ncclSuccess) _exit(6);
    char ready = 'r', go = 0;
    if (!writeAll(out, &ready, 1)) _exit(7);
    if (closes && (!readAll(in, &go, 1) || net->closeSend(sendComm) != ncclSuccess)) _exit(8);
  }
  for (;;) pause();
}

// Returns the survivor's verdict: the test() result and how long after the kill (or the peer's close) it came.
void runSurvivor(const Transport& transport, bool victimReceives, bool victimCloses = false) {
  int toVictim[2], fromVictim[2];
  ASSERT_EQ(pipe(toVictim), 0);
  ASSERT_EQ(pipe(fromVictim), 0);
  pid_t victim = fork();
  ASSERT_GE(victim, 0);
  if (victim == 0) runVictim(transport, victimReceives, victimCloses, toVictim[0], fromVictim[1]);
  // Kills the victim once, here or at any return: a failed assertion returns early, and a victim left alive waits for
  // ever and holds ctest's output open past the test's timeout.
  struct Reaper {
    pid_t pid;
    void reap() {
      if (pid <= 0) return;
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      pid = -1;
    }
    ~Reaper() { reap(); }
  } reaper{victim};
  applyEnv(transport);
  const ncclNet_v12_t* net = plugin();
  ASSERT_NE(net, nullptr) << dlerror();
  ncclResult_t result = ncclSuccess;
  void* ctx = initPlugin(net, &result);
  ASSERT_EQ(result, ncclSuccess);
  std::vector<unsigned char> buffer(kBytes, 1);
  void* comm = nullptr;
  void* listenComm = nullptr;
  void* request = nullptr;
  if (victimReceives) {
    unsigned char handle[NCCL_NET_HANDLE_MAXSIZE];
    ASSERT_TRUE(readAll(fromVictim[0], handle, sizeof(handle)));
    ASSERT_EQ(connectUntilDone(net, ctx, 0, handle, &comm), ncclSuccess);
    ASSERT_EQ(postSend(net, comm, buffer.data(), kBytes, 1, &request), ncclSuccess);
  } else {
    unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
    ASSERT_EQ(net->listen(ctx, 0, handle, &listenComm), ncclSuccess);
    ASSERT_TRUE(writeAll(toVictim[1], handle, sizeof(handle)));
    ASSERT_EQ(acceptUntilDone(net, listenComm, &comm), ncclSuccess);
    void* data = buffer.data();
    size_t size = kBytes;
    int tag = 1;
    ASSERT_EQ(postRecv(net, comm, 1, &data, &size, &tag, &request), ncclSuccess);
  }
  char ready = 0;
  ASSERT_TRUE(readAll(fromVictim[0], &ready, 1));
  // Progress a little so the transfer is surely under way, then kill the peer.
  int done = 0;
  int sizes[8] = {};
  for (int i = 0; i < 100 && !done; ++i) ASSERT_EQ(net->test(request, &done, sizes), ncclSuccess);
  ASSERT_FALSE(done) << "the transfer completed although the peer never did its part";
  if (victimCloses) {
    ASSERT_TRUE(writeAll(toVictim[1], "c", 1));
  } else {
    reaper.reap();
  }
  auto killed = Clock::now();
  result = waitRequest(net, request, sizes, kBound);
  double seconds = std::chrono::duration<double>(Clock::now() - killed).count();
  reaper.reap();
  const char* fate = victimCloses ? "closed its comm" : "died";
  // The sender's plugin progresses an idle comm's sends from its own thread (the keeper), so the whole message may
  // have left it before its close or death: a receive that then completes with every byte the sender's (7) lost
  // nothing, and there is no failure to report.
  if (result == ncclSuccess && !victimReceives && sizes[0] == static_cast<int>(kBytes) &&
      std::all_of(buffer.begin(), buffer.end(), [](unsigned char b) { return b == 7; })) {
    std::printf("%s, sender %s: the whole message had left it; the receive completed whole %.3f s after\n",
                transport.name, victimCloses ? "closed" : "killed", seconds);
    EXPECT_EQ(net->closeRecv(comm), ncclSuccess);
    EXPECT_EQ(net->closeListen(listenComm), ncclSuccess);
    return;
  }
  EXPECT_NE(result, ncclSuccess) << "a " << kBytes << "-byte transfer completed after its peer " << fate;
  EXPECT_NE(result, ncclTimeout) << "no error within " << kBound.count() << " s after the peer " << fate;
  std::printf("%s, %s %s: test() returned %d after %.3f s\n", transport.name, victimReceives ? "receiver" : "sender",
              victimCloses ? "closed" : "killed", result, seconds);
  EXPECT_TRUE(warnedAbout("failed")) << "the error was not explained in a WARN";
  if (victimReceives) {
    EXPECT_EQ(net->closeSend(comm), ncclSuccess);
  } else {
    EXPECT_EQ(net->closeRecv(comm), ncclSuccess);
    EXPECT_EQ(net->closeListen(listenComm), ncclSuccess);
  }
}

const Transport kTcp{"tcp", {{"UCX_TLS", "tcp"}, {"UCX_NET_DEVICES", "lo"}}};
const Transport kSharedMemory{"sm", {{"UCX_TLS", "sm"}}};

TEST(UcxFaults, TcpSenderSeesReceiverDeath) {
  runSurvivor(kTcp, true);
}
TEST(UcxFaults, TcpReceiverSeesSenderDeath) {
  runSurvivor(kTcp, false);
}
TEST(UcxFaults, SharedMemorySenderSeesReceiverDeath) {
  runSurvivor(kSharedMemory, true);
}
TEST(UcxFaults, SharedMemoryReceiverSeesSenderDeath) {
  runSurvivor(kSharedMemory, false);
}
// A peer that closes its comm with the transfer pending (NCCL aborting a communicator) but stays alive: UCX's
// shared-memory keepalive sees a live process, so only the side channel can tell.
TEST(UcxFaults, SharedMemorySenderSeesReceiverCloseWithTheSendPending) {
  runSurvivor(kSharedMemory, true, true);
}
TEST(UcxFaults, SharedMemoryReceiverSeesSenderCloseWithTheReceivePending) {
  runSurvivor(kSharedMemory, false, true);
}
TEST(UcxFaults, TcpReceiverSeesSenderCloseWithTheReceivePending) {
  runSurvivor(kTcp, false, true);
}

// ---- a dead link between two hosts: both processes stay alive
// -----------------------------------------------------------

// Network namespaces "hosts" A (vua0 10.202.0.1) and B (vub0 10.202.0.2) joined by one veth pair; the receiver runs
// in B, the sender in A, over UCX's tcp on the veth. Mid-transfer vua0 goes down: no FIN or RST ever arrives, and
// both processes live on, so each end must find the fault by itself. The detectors (README, Faults): UCX's keepalive
// (NNS_UCX_KEEPALIVE_MS) and the side channel's TCP keepalive, which fails its socket within NNS_UCX_DEAD_PEER_MS of
// silence (checked by test() every 50 ms). The bound is the latter plus 2 s of probe and timer granularity, as the
// socket plugin's TwoHosts.EveryLinkDownFailsBothEndsByThemselves.
constexpr int kDeadPeerMs = 2000;           // NNS_UCX_DEAD_PEER_MS in both children
constexpr int kKeepaliveMs = 1000;          // NNS_UCX_KEEPALIVE_MS in both children
constexpr size_t kStreamBytes = 64u << 20;  // each message of the stream: rendezvous, so it needs both ends to the end

// What a child tells the parent: when it saw the fault (the steady clock is shared by the processes), as what.
struct Detection {
  int64_t steadyNanoseconds;
  int32_t result;  // the ncclResult_t test(), isend or irecv returned; ncclTimeout: no error within 30 s
  char who;        // 's' sender, 'r' receiver
};

// One end of the stream, in `netns` on `device`: the receiver (listens, hands its handle out on `handleFd`) or the
// sender (reads the handle from `handleFd`). Moves kStreamBytes messages until a call fails or a message does not
// complete within 30 s; writes its role letter to `progressFd` once the first message is through, then a Detection.
int runStreamEnd(const std::string& netns, const char* device, bool receives, int handleFd, int progressFd) {
  int nsFd = open(("/var/run/netns/" + netns).c_str(), O_RDONLY | O_CLOEXEC);
  CHILD_CHECK(nsFd >= 0 && setns(nsFd, CLONE_NEWNET) == 0, 2, "entering netns %s", netns.c_str());
  close(nsFd);
  // As `ip netns exec`: a sysfs of the namespace's own, since UCX lists its tcp devices from /sys/class/net, and the
  // /sys mounted outside shows the host's interfaces, not vua0 or vub0.
  CHILD_CHECK(unshare(CLONE_NEWNS) == 0 && mount("", "/", nullptr, MS_SLAVE | MS_REC, nullptr) == 0 &&
                  umount2("/sys", MNT_DETACH) == 0 && mount(netns.c_str(), "/sys", "sysfs", 0, nullptr) == 0,
              2, "mounting the namespace's sysfs: %s", std::strerror(errno));
  setenv("UCX_TLS", "tcp", 1);
  setenv("UCX_NET_DEVICES", device, 1);  // the plugin offers it as device 0; its address carries the side channel
  unsetenv("UCX_KEEPALIVE_INTERVAL");
  setenv("NNS_UCX_DEAD_PEER_MS", std::to_string(kDeadPeerMs).c_str(), 1);
  setenv("NNS_UCX_KEEPALIVE_MS", std::to_string(kKeepaliveMs).c_str(), 1);
  const ncclNet_v12_t* net = plugin();
  CHILD_CHECK(net != nullptr, 3, "loading the plugin: %s", dlerror());
  ncclResult_t result = ncclSuccess;
  void* ctx = initPlugin(net, &result);
  CHILD_CHECK(result == ncclSuccess, 4, "init");
  int ndev = 0;
  CHILD_CHECK(net->devices(&ndev) == ncclSuccess && ndev == 1, 4, "one device expected, found %d", ndev);
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void *comm = nullptr, *listenComm = nullptr;
  if (receives) {
    CHILD_CHECK(net->listen(ctx, 0, handle, &listenComm) == ncclSuccess, 5, "listen");
    CHILD_CHECK(writeAll(handleFd, handle, sizeof(handle)), 5, "handing out the handle");
    CHILD_CHECK(acceptUntilDone(net, listenComm, &comm) == ncclSuccess, 6, "accept");
  } else {
    CHILD_CHECK(readWithin(handleFd, handle, sizeof(handle), 20000), 5, "no handle from the receiver");
    CHILD_CHECK(connectUntilDone(net, ctx, 0, handle, &comm) == ncclSuccess, 6, "connect");
  }
  static std::vector<unsigned char> buffer(kStreamBytes, 3);
  const char who = receives ? 'r' : 's';
  for (long index = 0;; ++index) {
    void* request = nullptr;
    int tag = 42, sizes[8] = {};
    if (receives) {
      void* data = buffer.data();
      size_t size = kStreamBytes;
      result = postRecv(net, comm, 1, &data, &size, &tag, &request);
    } else {
      result = postSend(net, comm, buffer.data(), kStreamBytes, tag, &request);
    }
    if (result == ncclSuccess) result = waitRequest(net, request, sizes, std::chrono::seconds(30));
    if (result == ncclSuccess) {
      if (index == 0) CHILD_CHECK(writeAll(progressFd, &who, 1), 7, "progress");
      continue;
    }
    Detection d{std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(),
                static_cast<int32_t>(result), who};
    CHILD_CHECK(writeAll(progressFd, &d, sizeof(d)), 8, "reporting the detection");
    std::fprintf(stderr, "%s: message %ld failed with %d\n", receives ? "receiver" : "sender", index, result);
    CHILD_CHECK(result != ncclTimeout, 9, "no error within 30 s");
    CHILD_CHECK(warnedAbout("10.202.0."), 10, "no WARN names the peer");
    // With the failed request in flight, as NCCL's abort: close must not wait for the unreachable peer.
    if (receives) {
      net->closeRecv(comm);
      net->closeListen(listenComm);
    } else {
      net->closeSend(comm);
    }
    return 0;
  }
}

class UcxTwoHosts : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
    const std::string base = "nns-ucx-" + std::to_string(getpid());
    hostA = base + "-a";
    hostB = base + "-b";
    if (!shell("ip netns add " + hostA)) GTEST_SKIP() << "`ip netns add` failed: no network-namespace support here";
    createdA = true;
    ASSERT_TRUE(shell("ip netns add " + hostB));
    createdB = true;
    ASSERT_TRUE(shell("ip link add vua0 netns " + hostA + " type veth peer name vub0 netns " + hostB));
    ASSERT_TRUE(shell("ip -n " + hostA + " addr add 10.202.0.1/24 dev vua0"));
    ASSERT_TRUE(shell("ip -n " + hostB + " addr add 10.202.0.2/24 dev vub0"));
    for (const std::string& host : {hostA, hostB}) ASSERT_TRUE(shell("ip -n " + host + " link set lo up"));
    ASSERT_TRUE(shell("ip -n " + hostA + " link set vua0 up"));
    ASSERT_TRUE(shell("ip -n " + hostB + " link set vub0 up"));
    // UCX takes only running interfaces, and a veth's carrier comes up a little after both ends are set up.
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    while (!shell("ip -n " + hostA + " link show vua0 | grep -q 'state UP'") ||
           !shell("ip -n " + hostB + " link show vub0 | grep -q 'state UP'")) {
      ASSERT_LT(Clock::now(), deadline) << "the veth pair did not come up";
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  void TearDown() override {
    for (pid_t& pid : children)  // an assertion that ended the test early leaves them running
      if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
        pid = -1;
      }
    if (createdA) shell("ip netns del " + hostA);  // deleting a namespace deletes its veth end too
    if (createdB) shell("ip netns del " + hostB);
    for (const std::string& host : {hostA, hostB}) {
      if (!host.empty()) {
        EXPECT_NE(access(("/var/run/netns/" + host).c_str(), F_OK), 0) << "namespace " << host << " is left";
      }
    }
  }
  pid_t spawn(const std::string& netns, const char* device, bool receives, int handleFd, int progressFd) {
    std::fflush(nullptr);
    pid_t pid = fork();
    if (pid == 0) _exit(runStreamEnd(netns, device, receives, handleFd, progressFd));
    return pid;
  }
  std::string hostA, hostB;
  bool createdA = false, createdB = false;
  pid_t children[2] = {-1, -1};
};

TEST_F(UcxTwoHosts, TcpLinkDownFailsBothEndsByThemselves) {
  int handle[2], progress[2];
  ASSERT_EQ(pipe2(handle, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(progress, O_CLOEXEC), 0);
  children[0] = spawn(hostB, "vub0", true, handle[1], progress[1]);
  ASSERT_GT(children[0], 0);
  children[1] = spawn(hostA, "vua0", false, handle[0], progress[1]);
  ASSERT_GT(children[1], 0);
  close(progress[1]);  // a child that exits early then shows as end-of-file, not as a wait to the timeout
  char marks[2];
  ASSERT_TRUE(readWithin(progress[0], marks, 2, 30000)) << "the transfer never got going";
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // well inside the stream
  const auto downAt = Clock::now();
  ASSERT_TRUE(shell("ip -n " + hostA + " link set vua0 down"));
  const long boundMs = kDeadPeerMs + 2000;
  bool seen[2] = {false, false};
  for (int i = 0; i < 2; ++i) {
    Detection d{};
    // Every child gives up on a message after 30 s: waiting a little longer tells a hang from a dead child.
    if (!readWithin(progress[0], &d, sizeof(d), 40000)) break;
    const Clock::time_point at{
        std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(d.steadyNanoseconds))};
    const long ms = std::chrono::duration_cast<std::chrono::milliseconds>(at - downAt).count();
    const char* end = d.who == 'r' ? "receiver" : "sender";
    seen[d.who == 'r' ? 0 : 1] = true;
    std::printf("%s: result %d %ld ms after the link went down (NNS_UCX_DEAD_PEER_MS=%d, NNS_UCX_KEEPALIVE_MS=%d)\n",
                end, d.result, ms, kDeadPeerMs, kKeepaliveMs);
    EXPECT_NE(d.result, ncclTimeout) << "the " << end << " saw no error within 30 s of the link going down";
    EXPECT_NE(d.result, ncclSuccess) << end;
    EXPECT_LT(ms, boundMs) << "the " << end << " saw the dead link only after " << ms << " ms";
  }
  EXPECT_TRUE(seen[0]) << "the receiver never reported";
  EXPECT_TRUE(seen[1]) << "the sender never reported";
  EXPECT_EQ(waitChild(children[0], std::chrono::seconds(20)), 0) << "receiver";
  children[0] = -1;
  EXPECT_EQ(waitChild(children[1], std::chrono::seconds(20)), 0) << "sender";
  children[1] = -1;
  for (int fd : {handle[0], handle[1], progress[0]}) close(fd);
}

// Strangers on the side channel's listen port (garbage, a truncated hello, silence) are dropped with a WARN while
// accept goes on; the real sender, connecting after them, gets through and moves data. The silent one goes once
// NNS_UCX_CONNECT_TIMEOUT_MS (1 s here) has passed. In one process, over tcp.
TEST(UcxStrangers, DroppedWhileRealSendersStillConnect) {
  applyEnv(kTcp);
  setenv("NNS_UCX_CONNECT_TIMEOUT_MS", "1000", 1);
  const ncclNet_v12_t* net = plugin();
  ASSERT_NE(net, nullptr) << dlerror();
  ncclResult_t result = ncclSuccess;
  void* ctx = initPlugin(net, &result);
  ASSERT_EQ(result, ncclSuccess);
  const auto before = nns::check::listeningSockets();
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void *listenComm = nullptr, *sendComm = nullptr, *recvComm = nullptr;
  ASSERT_EQ(net->listen(ctx, 0, handle, &listenComm), ncclSuccess);
  sockaddr_storage address{};
  ASSERT_TRUE(nns::check::newListeningSocket(before, &address)) << "the listen comm's side-channel port";
  nns::check::Strangers strangers;
  ASSERT_TRUE(nns::check::sendStrangers(address, 4096, &strangers));
  ASSERT_EQ(connectToListener(net, ctx, 0, handle, listenComm, &sendComm, &recvComm), ncclSuccess);
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  std::vector<unsigned char> source(100000), target(100000, 0);
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<unsigned char>(i * 13 + 5);
  void *sendRequest = nullptr, *recvRequest = nullptr;
  void* data = target.data();
  size_t size = target.size();
  int tag = 9, sizes[8] = {};
  ASSERT_EQ(postRecv(net, recvComm, 1, &data, &size, &tag, &recvRequest), ncclSuccess);
  ASSERT_EQ(postSend(net, sendComm, source.data(), source.size(), tag, &sendRequest), ncclSuccess);
  int sendDone = 0, recvDone = 0;
  while (!sendDone || !recvDone) {
    if (!sendDone) {
      ASSERT_EQ(net->test(sendRequest, &sendDone, nullptr), ncclSuccess);
    }
    if (!recvDone) {
      ASSERT_EQ(net->test(recvRequest, &recvDone, sizes), ncclSuccess);
    }
    ASSERT_LT(Clock::now(), deadline) << "the transfer did not finish";
  }
  EXPECT_EQ(sizes[0], static_cast<int>(source.size()));
  EXPECT_EQ(source, target);
  EXPECT_TRUE(warnedAbout("wrong magic"));
  EXPECT_TRUE(warnedAbout("before identifying itself"));
  EXPECT_TRUE(nns::check::closedByPeer(strangers.garbage, std::chrono::seconds(2)));
  EXPECT_TRUE(acceptUntilWarned(net, listenComm, "NNS_UCX_CONNECT_TIMEOUT_MS")) << "the silent stranger stayed";
  EXPECT_TRUE(nns::check::closedByPeer(strangers.silent, std::chrono::seconds(2)));
  close(strangers.garbage);
  close(strangers.silent);
  EXPECT_EQ(net->closeRecv(recvComm), ncclSuccess);
  EXPECT_EQ(net->closeSend(sendComm), ncclSuccess);
  EXPECT_EQ(net->closeListen(listenComm), ncclSuccess);
}

using nns_ucx::HandlePayload;
using nns_ucx::kHandleCodec;

// The plugin over tcp in this process, a listener on device 0, and its handle decoded: for the tests that forge a
// handle or a side-channel message from the real one, and for the connect that is never answered.
struct DecodedListener {
  const ncclNet_v12_t* net = nullptr;
  void* ctx = nullptr;
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* listenComm = nullptr;
  HandlePayload payload{};
};
void openDecodedListener(DecodedListener* listener) {
  applyEnv(kTcp);
  listener->net = plugin();
  ASSERT_NE(listener->net, nullptr) << dlerror();
  ncclResult_t result = ncclSuccess;
  listener->ctx = initPlugin(listener->net, &result);
  ASSERT_EQ(result, ncclSuccess);
  ASSERT_EQ(listener->net->listen(listener->ctx, 0, listener->handle, &listener->listenComm), ncclSuccess);
  ASSERT_EQ(kHandleCodec.decode(listener->handle, &listener->payload), ncclSuccess)
      << "the plugin's handle layout changed";
}

// A handle that names this listener's side channel but another listen id (a stale handle whose port a new listener
// took, or a peer holding another job's handle) is refused at the address exchange: accept drops the connection with a
// WARN and returns no comm, and the connect fails instead of joining a listener it was not meant for. The listener
// still takes the real handle's connection afterwards. In one process, over tcp.
TEST(UcxStrangers, AHandleWithAnotherListenIdIsRefused) {
  DecodedListener listener;
  ASSERT_NO_FATAL_FAILURE(openDecodedListener(&listener));
  const ncclNet_v12_t* net = listener.net;
  void* ctx = listener.ctx;
  void *listenComm = listener.listenComm, *sendComm = nullptr, *recvComm = nullptr;
  HandlePayload payload = listener.payload;
  payload.listenId ^= 0x5a5a5a5a5a5a5a5aull;
  unsigned char forged[NCCL_NET_HANDLE_MAXSIZE] = {};
  ASSERT_EQ(kHandleCodec.encode(payload, forged), ncclSuccess);

  ncclNetDeviceHandle_v12_t* devHandle = nullptr;
  ncclResult_t connected = ncclSuccess;
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (connected == ncclSuccess && sendComm == nullptr && Clock::now() < deadline) {
    connected = net->connect(ctx, 0, forged, &sendComm, &devHandle);
    ASSERT_EQ(net->accept(listenComm, &recvComm, &devHandle), ncclSuccess);
    ASSERT_EQ(recvComm, nullptr) << "accept took a connection made with another listener's id";
  }
  EXPECT_NE(connected, ncclSuccess) << "the connect with the forged handle did not fail";
  EXPECT_EQ(sendComm, nullptr) << "the connect with the forged handle yielded a comm";
  EXPECT_TRUE(warnedAbout("not a connection for this listener"));
  if (sendComm != nullptr) {
    EXPECT_EQ(net->closeSend(sendComm), ncclSuccess);
  }
  sendComm = nullptr;

  ASSERT_EQ(connectToListener(net, ctx, 0, listener.handle, listenComm, &sendComm, &recvComm), ncclSuccess);
  EXPECT_EQ(net->closeRecv(recvComm), ncclSuccess);
  EXPECT_EQ(net->closeSend(sendComm), ncclSuccess);
  EXPECT_EQ(net->closeListen(listenComm), ncclSuccess);
}

// A hello that carries this listener's id but announces a worker address larger than any UCX worker's (64 KiB at
// most: a corrupt or hostile peer) is dropped at once with a WARN naming the size: the listener neither allocates the
// announced bytes nor waits NNS_UCX_CONNECT_TIMEOUT_MS (30 s, the default, here) for them. In one process, over tcp.
TEST(UcxStrangers, AHelloAnnouncingAnOversizedWorkerAddressIsDropped) {
  DecodedListener listener;
  ASSERT_NO_FATAL_FAILURE(openDecodedListener(&listener));
  const ncclNet_v12_t* net = listener.net;
  void* listenComm = listener.listenComm;
  const HandlePayload& payload = listener.payload;
  sockaddr_storage address{};
  std::memcpy(&address, &payload.sideChannel.storage, payload.sideChannel.length());
  const int fd = nns::check::connectTcp(address);
  ASSERT_GE(fd, 0);
  const nns_ucx::Hello hello{nns_ucx::kWireMagic, nns_ucx::kWireVersion, payload.listenId,
                             nns_ucx::kMaxWorkerAddressBytes + 1, 0};
  ASSERT_EQ(send(fd, &hello, sizeof(hello), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(hello)));
  EXPECT_TRUE(acceptUntilWarned(net, listenComm,
                                "announced a worker address of " + std::to_string(hello.addressBytes) + " bytes"));
  EXPECT_TRUE(nns::check::closedByPeer(fd, std::chrono::seconds(2))) << "the listener kept the connection";
  close(fd);
  EXPECT_EQ(net->closeListen(listenComm), ncclSuccess);
}

// The connector's side of the same check: whatever answers at the handle's address with a reply that does not start
// with the wire magic (another service on a reused port, another plugin version) fails the connect with a WARN saying
// so, before its bytes reach UCX as a worker address. The "listener" is a plain socket of the test's own.
TEST(UcxStrangers, AReplyWithoutTheWireMagicFailsTheConnect) {
  DecodedListener listener;
  ASSERT_NO_FATAL_FAILURE(openDecodedListener(&listener));
  const ncclNet_v12_t* net = listener.net;
  void* ctx = listener.ctx;
  HandlePayload payload = listener.payload;
  void* listenComm = listener.listenComm;
  EXPECT_EQ(net->closeListen(listenComm), ncclSuccess);  // only its handle was wanted

  std::string error;
  const int server =
      nccl_net::sdk::listenTcp(nccl_net::sdk::SocketAddress::loopback(AF_INET), 4, &payload.sideChannel, &error);
  ASSERT_GE(server, 0) << error;
  unsigned char forged[NCCL_NET_HANDLE_MAXSIZE] = {};
  ASSERT_EQ(kHandleCodec.encode(payload, forged), ncclSuccess);

  void* sendComm = nullptr;
  ncclNetDeviceHandle_v12_t* devHandle = nullptr;
  int peer = -1;
  ncclResult_t connected = ncclSuccess;
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (connected == ncclSuccess && sendComm == nullptr && Clock::now() < deadline) {
    connected = net->connect(ctx, 0, forged, &sendComm, &devHandle);
    if (peer < 0) {
      pollfd p{server, POLLIN, 0};
      if (poll(&p, 1, 10) == 1) {
        peer = accept(server, nullptr, nullptr);
        // A reply-sized answer with a plausible address length, but not the plugin's magic; then 64 address bytes.
        const nns_ucx::Reply reply{0x12345678u, 1, 64, 0};
        std::vector<unsigned char> answer(sizeof(reply) + 64, 0x5a);
        std::memcpy(answer.data(), &reply, sizeof(reply));
        ASSERT_EQ(send(peer, answer.data(), answer.size(), MSG_NOSIGNAL), static_cast<ssize_t>(answer.size()));
      }
    }
  }
  EXPECT_GE(peer, 0) << "the connect never reached the test's socket";
  EXPECT_NE(connected, ncclSuccess) << "the connect did not fail";
  EXPECT_EQ(sendComm, nullptr);
  EXPECT_TRUE(warnedAbout("malformed reply")) << "the connect failed, but not on the reply's magic";
  if (sendComm != nullptr) {
    EXPECT_EQ(net->closeSend(sendComm), ncclSuccess);
  }
  if (peer >= 0) close(peer);
  close(server);
}

// A listener that never answers (its process stopped calling accept, or hangs): the kernel takes the side channel's
// connection and our worker address, and no reply ever comes. connect fails once NNS_UCX_CONNECT_TIMEOUT_MS (1 s here)
// has passed, naming the variable, instead of returning "not yet" for ever. In one process, over tcp.
TEST(UcxConnect, AListenerThatNeverAnswersFailsTheConnectWithinTheTimeout) {
  setenv("NNS_UCX_CONNECT_TIMEOUT_MS", "1000", 1);
  DecodedListener listener;
  ASSERT_NO_FATAL_FAILURE(openDecodedListener(&listener));
  const ncclNet_v12_t* net = listener.net;
  void *listenComm = listener.listenComm, *sendComm = nullptr;
  const auto start = Clock::now();
  EXPECT_NE(connectUntilDone(net, listener.ctx, 0, listener.handle, &sendComm, std::chrono::seconds(10)), ncclTimeout)
      << "connect still waits after 10 s for a listener that never answers";
  EXPECT_EQ(sendComm, nullptr);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(warnedAbout("NNS_UCX_CONNECT_TIMEOUT_MS"));
  if (sendComm != nullptr) {
    EXPECT_EQ(net->closeSend(sendComm), ncclSuccess);
  }
  EXPECT_EQ(net->closeListen(listenComm), ncclSuccess);
}

// The lowest descriptor numbers free in this process, `count` of them.
std::vector<int> freeDescriptors(size_t count) {
  std::vector<int> found;
  for (int fd = 0; found.size() < count; ++fd)
    if (fcntl(fd, F_GETFD) == -1 && errno == EBADF) found.push_back(fd);
  return found;
}

// A failure on the receiver's own side while accepting (here no UCP worker: RLIMIT_NOFILE lowered so that the
// accepted connection and accept's next look for one take the last two descriptors) is accept's error, with a WARN
// saying whose connection it could not take. accept answered "nothing yet" and dropped the connection, so NCCL kept
// calling it for ever while the sender's connect failed. In one process, over tcp.
TEST(UcxAccept, AWorkerThisSideCannotCreateFailsTheAccept) {
  DecodedListener listener;
  ASSERT_NO_FATAL_FAILURE(openDecodedListener(&listener));
  const ncclNet_v12_t* net = listener.net;
  void *listenComm = listener.listenComm, *sendComm = nullptr, *recvComm = nullptr;
  ncclNetDeviceHandle_v12_t* devHandle = nullptr;
  // The sender's hello and worker address go out once its TCP connect completes; it then waits for the reply.
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(net->connect(listener.ctx, 0, listener.handle, &sendComm, &devHandle), ncclSuccess);
    ASSERT_EQ(sendComm, nullptr);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(freeDescriptors(3)[2]);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  ncclResult_t accepted = ncclSuccess;
  for (const auto deadline = Clock::now() + std::chrono::seconds(5);
       accepted == ncclSuccess && recvComm == nullptr && Clock::now() < deadline;) {
    accepted = net->accept(listenComm, &recvComm, &devHandle);
  }
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_EQ(accepted, ncclSystemError);
  EXPECT_EQ(recvComm, nullptr);
  EXPECT_TRUE(warnedAbout("accept: could not take the connection from")) << "another failure than the worker's";
  EXPECT_TRUE(warnedAbout("could not create its UCP worker"));
  EXPECT_EQ(net->closeListen(listenComm), ncclSuccess);
}

// NNS_UCX_SIDE_IFNAME naming an interface that does not exist: init fails with a WARN naming the variable and the
// interface. It succeeded before, offering only the shared-memory "memory" device, so NCCL went on without a network.
TEST(UcxConfig, AMissingSideChannelInterfaceFailsInit) {
  unsetenv("UCX_TLS");  // UCX's default: tcp and shared memory
  unsetenv("UCX_NET_DEVICES");
  setenv("NNS_UCX_SIDE_IFNAME", "nns_no_such_if9", 1);
  const ncclNet_v12_t* net = plugin();
  ASSERT_NE(net, nullptr) << dlerror();
  ncclResult_t result = ncclSuccess;
  initPlugin(net, &result);
  EXPECT_NE(result, ncclSuccess) << "init succeeded with no side channel for the network devices";
  EXPECT_TRUE(warnedAbout("NNS_UCX_SIDE_IFNAME=nns_no_such_if9")) << "the WARN does not name the variable";
  int ndev = -1;
  if (net->devices(&ndev) == ncclSuccess) {
    EXPECT_EQ(ndev, 0) << "devices are offered although init failed";
  }
}

}  // namespace
