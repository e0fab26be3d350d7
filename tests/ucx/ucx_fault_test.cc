// ucx_fault_test.cc: nns-ucx between two processes when one is killed mid-message: the survivor's test() must fail
// (not hang, not succeed) within a bound, in both directions, over UCX's tcp and shared-memory transports.
//
// Every process loads the plugin itself after fork and after setting UCX_TLS, so UCX reads the environment of the
// test (gtest_discover_tests runs each test in its own process).
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#define NNS_SOCKET_PLUGIN_PATH NNS_UCX_PLUGIN_PATH  // plugin_harness.hpp loads the plugin named by this macro
#include "../../tools/nccl-net-check/tcp_strangers.hpp"
#include "../socket/plugin_harness.hpp"

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
    kill(victim, SIGKILL);
    waitpid(victim, nullptr, 0);
  }
  auto killed = Clock::now();
  result = waitRequest(net, request, sizes, kBound);
  double seconds = std::chrono::duration<double>(Clock::now() - killed).count();
  if (victimCloses) {
    kill(victim, SIGKILL);
    waitpid(victim, nullptr, 0);
  }
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
