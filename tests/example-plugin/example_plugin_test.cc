// example_plugin_test.cc: dlopens libnccl-net-minimal.so and, through EVERY exported ncclNetPlugin_vN table, moves
// data between two processes; also checks the SDK's down-conversions and its answers to bad input.
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nccl_net/sdk/handle.hpp>

#include "versioned_table.hpp"

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kTimeout = std::chrono::seconds(20);

void* openPlugin() {
  static void* library = dlopen(NNS_MINIMAL_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  return library;
}

const std::vector<size_t> kSizes = {0, 1, 127, 4096, 65537, (3u << 20) + 5, (9u << 20) + 3};

unsigned char patternByte(size_t index, size_t size) {
  return static_cast<unsigned char>(index * 131 + size);
}

// Polls until the request completes, an error is returned, or kTimeout passes.
ncclResult_t waitFor(auto& net, void* request, int* size) {
  auto deadline = Clock::now() + kTimeout;
  int done = 0;
  while (!done) {
    ncclResult_t result = net.test(request, &done, size);
    if (result != ncclSuccess) return result;
    if (Clock::now() > deadline) return ncclTimeout;
  }
  return ncclSuccess;
}

// The sender side, run in a forked child: returns a process exit code (0 = every message sent and sized right).
template <int V>
int senderProcess(VersionedNet<V> net, unsigned char* handle) {
  void* sendComm = nullptr;
  auto deadline = Clock::now() + kTimeout;
  while (sendComm == nullptr) {
    if (net.connect(0, handle, &sendComm) != ncclSuccess) return 10;
    if (Clock::now() > deadline) return 11;
  }
  std::vector<unsigned char> buffer(kSizes.back());
  void* mhandle = nullptr;
  if (net.regMr(sendComm, buffer.data(), static_cast<RegSizeT<V>>(buffer.size()), &mhandle) != ncclSuccess) return 12;
  for (size_t size : kSizes) {
    for (size_t i = 0; i < size; ++i) buffer[i] = patternByte(i, size);
    void* request = nullptr;
    while (request == nullptr) {
      if (net.isend(sendComm, buffer.data(), static_cast<SizeT<V>>(size), 7, mhandle, &request) != ncclSuccess)
        return 13;
    }
    int reported = -1;
    if (waitFor(net, request, &reported) != ncclSuccess) return 14;
    if (reported != static_cast<int>(size)) return 15;
  }
  if (net.deregMr(sendComm, mhandle) != ncclSuccess) return 16;
  if (net.closeSend(sendComm) != ncclSuccess) return 17;
  return 0;
}

template <class VersionTag>
class EveryVersion : public ::testing::Test {};
template <int V>
using Version = std::integral_constant<int, V>;
using AllVersions =
    ::testing::Types<Version<6>, Version<7>, Version<8>, Version<9>, Version<10>, Version<11>, Version<12>>;
TYPED_TEST_SUITE(EveryVersion, AllVersions);

TYPED_TEST(EveryVersion, MovesDataBetweenTwoProcesses) {
  constexpr int V = TypeParam::value;
  void* library = openPlugin();
  ASSERT_NE(library, nullptr) << dlerror();
  auto* table = VersionedNet<V>::resolve(library);
  ASSERT_NE(table, nullptr) << "ncclNetPlugin_v" << V << " not exported";
  EXPECT_STREQ(table->name, "minimal");
  VersionedNet<V> net(table);
  ASSERT_EQ(net.init(nullptr), ncclSuccess);

  int ndev = 0;
  ASSERT_EQ(net.devices(&ndev), ncclSuccess);
  ASSERT_EQ(ndev, 1);
  typename VersionedNet<V>::Props props;
  std::memset(&props, 0xcc, sizeof(props));  // every field must be written by the SDK
  ASSERT_EQ(net.getProperties(0, &props), ncclSuccess);
  EXPECT_STREQ(props.name, "shm0");
  EXPECT_EQ(props.pciPath, nullptr);
  EXPECT_EQ(props.ptrSupport, NCCL_PTR_HOST);
  EXPECT_EQ(props.speed, 100000);
  EXPECT_EQ(props.maxRecvs, 1);
  EXPECT_EQ(props.maxComms, 1024);
  if constexpr (V >= 7) {
    EXPECT_EQ(props.netDeviceType, NCCL_NET_DEVICE_HOST);
  }
  if constexpr (V >= 8) {
    EXPECT_EQ(props.regIsGlobal, 0);
  }
  if constexpr (V >= 9) {
    EXPECT_EQ(props.forceFlush, 0);
    EXPECT_EQ(props.vProps.ndevs, 1);
    EXPECT_EQ(props.vProps.devs[0], 0);
    EXPECT_EQ(props.maxP2pBytes, NCCL_NET_DEFAULT_MAX_P2P_BYTES);
  }
  if constexpr (V >= 11) {
    EXPECT_EQ(props.maxMultiRequestSize, 1);
  }
  if constexpr (V >= 12) {
    EXPECT_EQ(props.railId, NCCL_NET_ID_UNDEF);
    EXPECT_EQ(props.planeId, NCCL_NET_ID_UNDEF);
  }

  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* listenComm = nullptr;
  ASSERT_EQ(net.listen(0, handle, &listenComm), ncclSuccess);
  ASSERT_NE(listenComm, nullptr);

  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(senderProcess<V>(net, handle));

  void* recvComm = nullptr;
  auto deadline = Clock::now() + kTimeout;
  while (recvComm == nullptr && Clock::now() < deadline) ASSERT_EQ(net.accept(listenComm, &recvComm), ncclSuccess);
  ASSERT_NE(recvComm, nullptr) << "accept did not complete";

  std::vector<unsigned char> buffer(kSizes.back() + 64);
  void* mhandle = nullptr;
  ASSERT_EQ(net.regMr(recvComm, buffer.data(), static_cast<RegSizeT<V>>(buffer.size()), &mhandle), ncclSuccess);
  for (size_t size : kSizes) {
    std::memset(buffer.data(), 0, buffer.size());
    void* request = nullptr;
    while (request == nullptr) {
      ASSERT_EQ(net.irecv(recvComm, buffer.data(), static_cast<SizeT<V>>(buffer.size()), 7, mhandle, &request),
                ncclSuccess);
    }
    int reported = -1;
    ASSERT_EQ(waitFor(net, request, &reported), ncclSuccess) << "size " << size;
    ASSERT_EQ(reported, static_cast<int>(size));
    size_t mismatches = 0;
    for (size_t i = 0; i < size; ++i) mismatches += buffer[i] != patternByte(i, size);
    ASSERT_EQ(mismatches, 0u) << "size " << size;
    EXPECT_EQ(buffer[size], 0) << "wrote past the message";
  }
  EXPECT_EQ(net.deregMr(recvComm, mhandle), ncclSuccess);
  EXPECT_EQ(net.closeRecv(recvComm), ncclSuccess);
  EXPECT_EQ(net.closeListen(listenComm), ncclSuccess);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "sender exit status " << status;
}

// Sizes of 2 GiB and more cannot pass through the int-sized v6..v8 calls: they arrive negative and must be refused.
template <class VersionTag>
class IntSizedVersion : public ::testing::Test {};
using IntSizedVersions = ::testing::Types<Version<6>, Version<7>, Version<8>>;
TYPED_TEST_SUITE(IntSizedVersion, IntSizedVersions);

TYPED_TEST(IntSizedVersion, OversizeMessageIsAnError) {
  constexpr int V = TypeParam::value;
  {
    VersionedNet<V> net(VersionedNet<V>::resolve(openPlugin()));
    ASSERT_EQ(net.init(nullptr), ncclSuccess);
    unsigned char handle[NCCL_NET_HANDLE_MAXSIZE];
    void* listenComm = nullptr;
    ASSERT_EQ(net.listen(0, handle, &listenComm), ncclSuccess);
    void* sendComm = nullptr;
    auto deadline = Clock::now() + kTimeout;
    void* recvComm = nullptr;
    while ((sendComm == nullptr || recvComm == nullptr) && Clock::now() < deadline) {
      if (sendComm == nullptr) {
        ASSERT_EQ(net.connect(0, handle, &sendComm), ncclSuccess);
      }
      if (recvComm == nullptr) {
        ASSERT_EQ(net.accept(listenComm, &recvComm), ncclSuccess);
      }
    }
    ASSERT_NE(sendComm, nullptr);
    ASSERT_NE(recvComm, nullptr);
    char byte = 0;
    const int wrapped = static_cast<int>(static_cast<unsigned>(3u << 30));  // 3 GiB seen through an int
    void* request = nullptr;
    EXPECT_EQ(net.isend(sendComm, &byte, wrapped, 0, nullptr, &request), ncclInternalError);
    EXPECT_EQ(request, nullptr);
    EXPECT_EQ(net.irecv(recvComm, &byte, wrapped, 0, nullptr, &request), ncclInternalError);
    if constexpr (V <= 7) {
      void* mhandle = nullptr;
      EXPECT_EQ(net.regMr(sendComm, &byte, wrapped, &mhandle), ncclInternalError);
    }
    EXPECT_EQ(net.closeSend(sendComm), ncclSuccess);
    EXPECT_EQ(net.closeRecv(recvComm), ncclSuccess);
    EXPECT_EQ(net.closeListen(listenComm), ncclSuccess);
  }
}

// ---- bad input through the newest table
// ------------------------------------------------------------------------------
class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    table = VersionedNet<12>::resolve(openPlugin());
    ASSERT_NE(table, nullptr);
    ASSERT_EQ(table->init(&ctx, 1, nullptr, nullptr, nullptr), ncclSuccess);  // a NULL logger is allowed
    ASSERT_EQ(table->listen(ctx, 0, handle, &listenComm), ncclSuccess);
  }
  void TearDown() override {
    if (listenComm != nullptr) table->closeListen(listenComm);
  }
  // Connects and accepts in this process; both sides of one connection.
  void connectPair(void** sendComm, void** recvComm) {
    auto deadline = Clock::now() + kTimeout;
    *sendComm = *recvComm = nullptr;
    while ((*sendComm == nullptr || *recvComm == nullptr) && Clock::now() < deadline) {
      if (*sendComm == nullptr) {
        ASSERT_EQ(table->connect(ctx, 0, handle, sendComm, nullptr), ncclSuccess);
      }
      if (*recvComm == nullptr) {
        ASSERT_EQ(table->accept(listenComm, recvComm, nullptr), ncclSuccess);
      }
    }
    ASSERT_NE(*sendComm, nullptr);
    ASSERT_NE(*recvComm, nullptr);
  }

  const ncclNet_v12_t* table = nullptr;
  void* ctx = nullptr;
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* listenComm = nullptr;
};

// A connect the host gave up (it finalized the ctx the connect was started under, which deletes the connect's state
// and so its segment) leaves an entry in the listener's mailbox: accept passes over it and goes on waiting, rather
// than failing the listen (it returned ncclSystemError); a later connect is accepted.
TEST_F(BadInput, AcceptPassesOverAConnectItsHostGaveUp) {
  void* abandonCtx = nullptr;
  ASSERT_EQ(table->init(&abandonCtx, 2, nullptr, nullptr, nullptr), ncclSuccess);
  unsigned char copy[NCCL_NET_HANDLE_MAXSIZE];
  std::memcpy(copy, handle, sizeof(copy));
  void* sendComm = nullptr;
  ASSERT_EQ(table->connect(abandonCtx, 0, copy, &sendComm, nullptr), ncclSuccess);
  ASSERT_EQ(sendComm, nullptr) << "the first call only starts the connect";
  ASSERT_EQ(table->finalize(abandonCtx), ncclSuccess);
  void* recvComm = nullptr;
  EXPECT_EQ(table->accept(listenComm, &recvComm, nullptr), ncclSuccess);
  EXPECT_EQ(recvComm, nullptr);
  void* recvPair = nullptr;
  connectPair(&sendComm, &recvPair);
  EXPECT_EQ(table->closeSend(sendComm), ncclSuccess);
  EXPECT_EQ(table->closeRecv(recvPair), ncclSuccess);
}

TEST_F(BadInput, CorruptHandleIsRejected) {
  unsigned char corrupt[NCCL_NET_HANDLE_MAXSIZE];
  std::memcpy(corrupt, handle, sizeof(corrupt));
  corrupt[20] ^= 0x40;  // one bit in the payload
  void* sendComm = nullptr;
  EXPECT_EQ(table->connect(ctx, 0, corrupt, &sendComm, nullptr), ncclInternalError);
  EXPECT_EQ(sendComm, nullptr);
}

TEST_F(BadInput, HandleFromAnotherPluginIsRejected) {
  struct OtherPayload {
    char address[32];
  } payload{};
  std::strcpy(payload.address, "10.0.0.1:4242");
  nccl_net::sdk::HandleCodec<OtherPayload> otherCodec(nccl_net::sdk::handleMagic("some-other-plugin"), 1);
  unsigned char foreign[NCCL_NET_HANDLE_MAXSIZE];
  ASSERT_EQ(otherCodec.encode(payload, foreign), ncclSuccess);
  void* sendComm = nullptr;
  EXPECT_EQ(table->connect(ctx, 0, foreign, &sendComm, nullptr), ncclInternalError);
  unsigned char zeros[NCCL_NET_HANDLE_MAXSIZE] = {};
  EXPECT_EQ(table->connect(ctx, 0, zeros, &sendComm, nullptr), ncclInternalError);
  EXPECT_EQ(sendComm, nullptr);
}

TEST_F(BadInput, NullAndOutOfRangeArgumentsAreErrors) {
  ncclNetProperties_v12_t props;
  EXPECT_EQ(table->getProperties(1, &props), ncclInternalError);
  EXPECT_EQ(table->getProperties(-1, &props), ncclInternalError);
  EXPECT_EQ(table->getProperties(0, nullptr), ncclInternalError);
  EXPECT_EQ(table->devices(nullptr), ncclInternalError);
  void* comm = nullptr;
  EXPECT_EQ(table->listen(ctx, 0, nullptr, &comm), ncclInternalError);
  EXPECT_EQ(table->listen(ctx, 3, handle, &comm), ncclInternalError);
  EXPECT_EQ(table->connect(ctx, 0, nullptr, &comm, nullptr), ncclInternalError);
  EXPECT_EQ(table->accept(nullptr, &comm, nullptr), ncclInternalError);
  int done = 0;
  EXPECT_EQ(table->test(nullptr, &done, nullptr), ncclInternalError);
  EXPECT_EQ(table->closeSend(nullptr), ncclInternalError);

  void* sendComm = nullptr;
  void* recvComm = nullptr;
  connectPair(&sendComm, &recvComm);
  void* request = nullptr;
  EXPECT_EQ(table->isend(sendComm, nullptr, 16, 0, nullptr, nullptr, &request), ncclInternalError);
  char byte = 0;
  void* data[1] = {&byte};
  size_t sizes[1] = {1};
  int tags[1] = {0};
  EXPECT_EQ(table->irecv(recvComm, 0, data, sizes, tags, nullptr, nullptr, &request), ncclInternalError);
  EXPECT_EQ(table->irecv(recvComm, 65, data, sizes, tags, nullptr, nullptr, &request), ncclInternalError);
  EXPECT_EQ(table->irecv(recvComm, 2, data, sizes, tags, nullptr, nullptr, &request), ncclInternalError)
      << "maxRecvs is 1";
  // A pointer that is not a live request (zeroed memory, so it is safe to read) is refused, not followed.
  alignas(64) unsigned char garbage[256] = {};
  EXPECT_EQ(table->test(garbage, &done, nullptr), ncclInternalError);
  void* mhandle = nullptr;
  EXPECT_EQ(table->regMr(sendComm, &byte, 1, NCCL_PTR_CUDA, &mhandle), ncclInternalError) << "host memory only";
  EXPECT_EQ(table->regMrDmaBuf(sendComm, &byte, 1, NCCL_PTR_CUDA, 0, -1, &mhandle), ncclInvalidUsage);
  EXPECT_EQ(table->closeSend(sendComm), ncclSuccess);
  EXPECT_EQ(table->closeRecv(recvComm), ncclSuccess);
}

TEST_F(BadInput, ReceiveSmallerThanMessageIsAnErrorNotATruncation) {
  void* sendComm = nullptr;
  void* recvComm = nullptr;
  connectPair(&sendComm, &recvComm);
  std::vector<char> message(100, 'x');
  std::vector<char> small(50, 0);
  void* sendRequest = nullptr;
  ASSERT_EQ(table->isend(sendComm, message.data(), message.size(), 3, nullptr, nullptr, &sendRequest), ncclSuccess);
  void* data[1] = {small.data()};
  size_t sizes[1] = {small.size()};
  int tags[1] = {3};
  void* recvRequest = nullptr;
  ASSERT_EQ(table->irecv(recvComm, 1, data, sizes, tags, nullptr, nullptr, &recvRequest), ncclSuccess);
  int done = 0;
  int size = 0;
  EXPECT_EQ(table->test(recvRequest, &done, &size), ncclInvalidUsage);
  EXPECT_EQ(done, 0);
  EXPECT_EQ(small[0], 0) << "nothing may be copied into a buffer that cannot hold the message";
  EXPECT_EQ(table->closeSend(sendComm), ncclSuccess);
  EXPECT_EQ(table->closeRecv(recvComm), ncclSuccess);
}

TEST_F(BadInput, PeerDeathMidTransferIsAnErrorWithinABoundedTime) {
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Post a message larger than the ring, push what fits, then stall until killed.
    void* sendComm = nullptr;
    while (sendComm == nullptr)
      if (table->connect(ctx, 0, handle, &sendComm, nullptr) != ncclSuccess) _exit(1);
    static std::vector<char> message(16u << 20, 'd');
    void* request = nullptr;
    while (request == nullptr) table->isend(sendComm, message.data(), message.size(), 0, nullptr, nullptr, &request);
    for (;;) pause();
  }
  void* recvComm = nullptr;
  auto deadline = Clock::now() + kTimeout;
  while (recvComm == nullptr && Clock::now() < deadline)
    ASSERT_EQ(table->accept(listenComm, &recvComm, nullptr), ncclSuccess);
  ASSERT_NE(recvComm, nullptr);
  std::vector<char> buffer(16u << 20);
  void* data[1] = {buffer.data()};
  size_t sizes[1] = {buffer.size()};
  int tags[1] = {0};
  void* request = nullptr;
  ASSERT_EQ(table->irecv(recvComm, 1, data, sizes, tags, nullptr, nullptr, &request), ncclSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  auto killed = Clock::now();
  ncclResult_t result = ncclSuccess;
  int done = 0;
  while (result == ncclSuccess && !done && Clock::now() - killed < std::chrono::seconds(5))
    result = table->test(request, &done, nullptr);
  EXPECT_EQ(result, ncclRemoteError);
  EXPECT_EQ(done, 0);
  EXPECT_LT(Clock::now() - killed, std::chrono::seconds(2)) << "peer death must surface within the check interval";
  EXPECT_EQ(table->closeRecv(recvComm), ncclSuccess);
}

// The plugin's segments in /dev/shm whose names start with `prefix` (without the leading '/').
std::vector<std::string> segments(const std::string& prefix) {
  std::vector<std::string> found;
  if (DIR* dir = opendir("/dev/shm")) {
    while (const dirent* entry = readdir(dir))
      if (std::strncmp(entry->d_name, prefix.c_str(), prefix.size()) == 0) found.emplace_back(entry->d_name);
    closedir(dir);
  }
  return found;
}

void makeOld(const std::string& segment) {
  struct timeval past[2] = {{time(nullptr) - 60, 0}, {time(nullptr) - 60, 0}};
  ASSERT_EQ(utimes(("/dev/shm/" + segment).c_str(), past), 0) << segment;
}

// A killed process never reaches closeListen, and its listener segment stayed in /dev/shm for good. Now the next
// init removes a segment whose owner is gone (no flock on it), and keeps one whose owner lives, even when old, and
// an unlocked one younger than its settling time (being created).
TEST_F(BadInput, SegmentsOfKilledProcessesAreRemovedAtTheNextInit) {
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    unsigned char childHandle[NCCL_NET_HANDLE_MAXSIZE];
    void* childListen = nullptr;
    if (table->listen(ctx, 0, childHandle, &childListen) != ncclSuccess) _exit(1);
    for (;;) pause();
  }
  const std::string dead = "nccl-net-minimal-listen-" + std::to_string(child) + "-";
  auto deadline = Clock::now() + kTimeout;
  while (segments(dead).empty() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ASSERT_EQ(segments(dead).size(), 1u) << "the killed listener's segment is left behind";
  makeOld(segments(dead)[0]);

  const std::string live = "nccl-net-minimal-listen-" + std::to_string(getpid()) + "-";
  ASSERT_FALSE(segments(live).empty()) << "this process's own listener";
  for (const auto& segment : segments(live)) makeOld(segment);

  const std::string young = "/nccl-net-minimal-listen-test-young-" + std::to_string(getpid());
  int fd = shm_open(young.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  close(fd);

  void* again = nullptr;
  ASSERT_EQ(table->init(&again, 1, nullptr, nullptr, nullptr), ncclSuccess);
  EXPECT_TRUE(segments(dead).empty()) << "the dead listener's segment is still there";
  EXPECT_FALSE(segments(live).empty()) << "a live listener's segment was removed";
  EXPECT_EQ(segments(young.substr(1)).size(), 1u) << "a segment being created was removed";
  shm_unlink(young.c_str());
}

}  // namespace
