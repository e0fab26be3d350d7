// ib_verbs_test.cc: the nns-ib plugin on real verbs (soft-RoCE in the rxe VM: rxe0 on veth0, rxe1 on veth1): two
// processes through every ABI version, random sizes with grouped receives on one device, across two and through a
// fused vNIC, the RDMA READ flush, and faults (link down mid-transfer, peer killed, a receiver closed before posting,
// handshakes that never finish) ending in an error in bounded time, while a peer that closes right after its last
// message fails nothing.
// Skips where the host has no RDMA device (run it through tests/ib/rxe-vm/run-rxe-vm.sh).
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "../../tools/nccl-net-check/tcp_strangers.hpp"
#include "../example-plugin/versioned_table.hpp"
#include "../support/peek_hook_double.hpp"
#include "two_process.hpp"

namespace {

using namespace nns_ib_pair;
using Env = std::vector<std::pair<std::string, std::string>>;

bool haveDevices(int wanted) {
  int count = 0;
  for (const char* name : {"rxe0", "rxe1"})
    if (access((std::string("/sys/class/infiniband/") + name).c_str(), F_OK) == 0) ++count;
  return count >= wanted;
}
#define REQUIRE_RXE(n) \
  if (!haveDevices(n)) \
  GTEST_SKIP() << "needs " << (n) << " rxe device(s) (rxe0, rxe1): run tests/ib/rxe-vm/run-rxe-vm.sh"

// Short QP timeouts keep fault detection quick (4.096 us * 2^14 = 67 ms per try, 7 retries).
Env baseEnv(const std::string& hca) {
  Env env{{"NCCL_IB_TIMEOUT", "14"}, {"NCCL_IB_RETRY_CNT", "7"}, {"NNS_IB_PEER_TIMEOUT_MS", "3000"}};
  if (!hca.empty()) env.emplace_back("NCCL_IB_HCA", hca);
  return env;
}
// baseEnv with one variable set otherwise (the later setting wins: the children set them in order).
Env baseEnvWith(const std::string& hca, const char* name, const char* value) {
  Env env = baseEnv(hca);
  env.emplace_back(name, value);
  return env;
}

unsigned char patternByte(size_t index, uint64_t seed) {
  return static_cast<unsigned char>((index * 2654435761u + seed * 40503u) >> 7);
}

#define CHILD_CHECK(call)                                                                        \
  do {                                                                                           \
    ncclResult_t result_ = (call);                                                               \
    if (result_ != ncclSuccess) {                                                                \
      std::fprintf(stderr, "ib-test: %s failed with %d at line %d\n", #call, result_, __LINE__); \
      return 10;                                                                                 \
    }                                                                                            \
  } while (0)
#define CHILD_EXPECT(cond, ...)                                    \
  do {                                                             \
    if (!(cond)) {                                                 \
      std::fprintf(stderr, "ib-test: check failed: " __VA_ARGS__); \
      std::fprintf(stderr, " (line %d)\n", __LINE__);              \
      return 11;                                                   \
    }                                                              \
  } while (0)

// Loads the plugin and opens one side of a connection on device 0: the receiver listens and accepts (its listen comm
// in `listenComm`), the sender connects. 0, or the CHILD_ code of what failed.
int openSide(const Channel& channel, bool receiver, Peer* peer, void** comm, void** listenComm) {
  CHILD_EXPECT(peer->load(NNS_IB_PLUGIN_PATH), "load: %s", peer->error.c_str());
  if (receiver) {
    CHILD_CHECK(peer->acceptFrom(channel, 0, comm, listenComm));
  } else {
    CHILD_CHECK(peer->connectTo(channel, 0, comm));
  }
  return 0;
}

// ---- devices
// ---------------------------------------------------------------------------------------------------------- Runs
// `body` in a child with `env` (the plugin reads its environment once, at init).
int inChild(const Env& env, const std::function<int()>& body) {
  PairResult r = runPair(
      env, [&](const Channel&) { return body(); }, {}, [](const Channel&) { return 0; }, std::chrono::seconds(60));
  return r.timedOut ? -2 : r.first;
}

TEST(IbVerbs, DevicesDescribeEveryActivePort) {
  REQUIRE_RXE(2);
  int status = inChild(baseEnv(""), [] {
    Peer peer;
    CHILD_EXPECT(peer.load(NNS_IB_PLUGIN_PATH), "load: %s", peer.error.c_str());
    int ndev = 0;
    CHILD_CHECK(peer.net->devices(&ndev));
    CHILD_EXPECT(ndev == 2, "%d devices, expected rxe0 and rxe1", ndev);
    for (int d = 0; d < ndev; ++d) {
      ncclNetProperties_v12_t props{};
      CHILD_CHECK(peer.net->getProperties(d, &props));
      std::printf(
          "ib-test: device %d: name %s port %d speed %d Mbps guid 0x%llx ptrSupport 0x%x pciPath %s "
          "maxRecvs %d maxComms %d\n",
          d, props.name, props.port, props.speed, static_cast<unsigned long long>(props.guid), props.ptrSupport,
          props.pciPath != nullptr ? props.pciPath : "(none: virtual device)", props.maxRecvs, props.maxComms);
      CHILD_EXPECT(std::strcmp(props.name, d == 0 ? "rxe0" : "rxe1") == 0, "device %d is %s", d, props.name);
      CHILD_EXPECT(props.port == 1 && props.speed > 0 && props.guid != 0, "port/speed/guid of %s", props.name);
      // soft-RoCE: no GPU, and rxe refuses dmabuf registration, so host memory only.
      CHILD_EXPECT(props.ptrSupport == NCCL_PTR_HOST, "ptrSupport 0x%x", props.ptrSupport);
      CHILD_EXPECT(props.maxRecvs == 8 && props.vProps.ndevs == 1 && props.vProps.devs[0] == d, "maxRecvs/vProps");
      CHILD_EXPECT(props.railId == -1 && props.planeId == -1 && props.maxP2pBytes > 0, "v12 fields");
    }
    // Automatic GID choice on RoCE: the RoCE v2 entry carrying the IPv4 address (index 1 on rxe).
    CHILD_EXPECT(informedAbout("GID 1 ::ffff:10.0.0.1 (RoCE v2)"), "rxe0 did not get GID 1 (RoCE v2, IPv4-mapped)");
    int fused = peer.fuse({0, 1});
    CHILD_EXPECT(fused == 2, "makeVDevice gave %d", fused);
    CHILD_CHECK(peer.net->devices(&ndev));
    CHILD_EXPECT(ndev == 3, "devices() after makeVDevice: %d", ndev);
    ncclNetProperties_v12_t props{};
    CHILD_CHECK(peer.net->getProperties(fused, &props));
    CHILD_EXPECT(std::strcmp(props.name, "rxe0+rxe1") == 0 && props.vProps.ndevs == 2, "vNIC %s", props.name);
    return 0;
  });
  EXPECT_EQ(status, 0);
}

TEST(IbVerbs, HcaFilterAndGidIndexFromEnvironment) {
  REQUIRE_RXE(2);
  Env env = baseEnv("^=rxe0");
  env.emplace_back("NCCL_IB_GID_INDEX", "0");
  int status = inChild(env, [] {
    Peer peer;
    CHILD_EXPECT(peer.load(NNS_IB_PLUGIN_PATH), "load: %s", peer.error.c_str());
    int ndev = 0;
    CHILD_CHECK(peer.net->devices(&ndev));
    ncclNetProperties_v12_t props{};
    CHILD_CHECK(peer.net->getProperties(0, &props));
    CHILD_EXPECT(ndev == 1 && std::strcmp(props.name, "rxe1") == 0, "^=rxe0 left %d device(s), first %s", ndev,
                 props.name);
    CHILD_EXPECT(informedAbout("GID 0 fe80:"), "NCCL_IB_GID_INDEX=0 not honoured");
    return 0;
  });
  EXPECT_EQ(status, 0);
  status = inChild(baseEnv("=rxe9"), [] {
    Peer peer;
    CHILD_EXPECT(!peer.load(NNS_IB_PLUGIN_PATH), "init succeeded with NCCL_IB_HCA==rxe9");
    CHILD_EXPECT(warnedAbout("not selected by NCCL_IB_HCA"), "the init failure does not say why");
    return 0;
  });
  EXPECT_EQ(status, 0);
}

// ---- every ABI version, between two processes ----------------------------------------------------------------------
template <int V>
int versionedSide(const Channel& channel, bool receiver) {
  void* library = dlopen(NNS_IB_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  CHILD_EXPECT(library != nullptr, "dlopen: %s", dlerror());
  auto* table = VersionedNet<V>::resolve(library);
  CHILD_EXPECT(table != nullptr, "no ncclNetPlugin_v%d", V);
  VersionedNet<V> net(table);
  CHILD_CHECK(net.init(logger));
  int ndev = 0;
  CHILD_CHECK(net.devices(&ndev));
  CHILD_EXPECT(ndev >= 1, "no device");
  typename VersionedNet<V>::Props props{};
  CHILD_CHECK(net.getProperties(0, &props));
  CHILD_EXPECT(std::strcmp(props.name, "rxe0") == 0, "device 0 is %s", props.name);
  CHILD_EXPECT((props.ptrSupport & NCCL_PTR_HOST) != 0, "no host pointers");
  const size_t sizes[] = {0, 1, 4096, 100000, 1 << 20};
  const size_t capacity = 1 << 20;
  std::vector<unsigned char> buffer(capacity);
  void* comm = nullptr;
  void* listenComm = nullptr;
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  auto deadline = Clock::now() + std::chrono::seconds(60);
  if (receiver) {
    CHILD_CHECK(net.listen(0, handle, &listenComm));
    CHILD_EXPECT(channel.send(handle, sizeof(handle)), "handle");
    while (comm == nullptr && Clock::now() < deadline) CHILD_CHECK(net.accept(listenComm, &comm));
  } else {
    CHILD_EXPECT(channel.recv(handle, sizeof(handle)), "handle");
    while (comm == nullptr && Clock::now() < deadline) CHILD_CHECK(net.connect(0, handle, &comm));
  }
  CHILD_EXPECT(comm != nullptr, "no connection within 60 s");
  void* mh = nullptr;
  CHILD_CHECK(net.regMr(comm, buffer.data(), static_cast<RegSizeT<V>>(capacity), &mh));
  for (size_t round = 0; round < sizeof(sizes) / sizeof(sizes[0]); ++round) {
    size_t size = sizes[round];
    void* request = nullptr;
    if (receiver) {
      std::memset(buffer.data(), 0, capacity);
      while (request == nullptr && Clock::now() < deadline)
        CHILD_CHECK(net.irecv(comm, buffer.data(), static_cast<SizeT<V>>(capacity), 7, mh, &request));
    } else {
      for (size_t i = 0; i < size; ++i) buffer[i] = patternByte(i, round + V);
      while (request == nullptr && Clock::now() < deadline)
        CHILD_CHECK(net.isend(comm, buffer.data(), static_cast<SizeT<V>>(size), 7, mh, &request));
    }
    CHILD_EXPECT(request != nullptr, "could not post round %zu", round);
    int done = 0, reported = -1;
    while (!done && Clock::now() < deadline) CHILD_CHECK(net.test(request, &done, &reported));
    CHILD_EXPECT(done, "round %zu did not complete", round);
    CHILD_EXPECT(reported == static_cast<int>(size), "v%d round %zu: size %d reported, %zu sent", V, round, reported,
                 size);
    if (receiver) {
      for (size_t i = 0; i < size; ++i)
        CHILD_EXPECT(buffer[i] == patternByte(i, round + V), "v%d byte %zu of %zu differs", V, i, size);
    }
  }
  char sync = 0;
  channel.sendValue(sync);
  channel.recvValue(&sync);
  CHILD_CHECK(net.deregMr(comm, mh));
  CHILD_CHECK(receiver ? net.closeRecv(comm) : net.closeSend(comm));
  if (listenComm != nullptr) CHILD_CHECK(net.closeListen(listenComm));
  return 0;
}

template <int V>
void checkVersion() {
  PairResult r = runPair(
      baseEnv("=rxe0"), [](const Channel& c) { return versionedSide<V>(c, true); }, baseEnv("=rxe0"),
      [](const Channel& c) { return versionedSide<V>(c, false); }, std::chrono::seconds(90));
  EXPECT_FALSE(r.timedOut) << "ncclNet_v" << V;
  EXPECT_EQ(r.first, 0) << "receiver through ncclNet_v" << V;
  EXPECT_EQ(r.second, 0) << "sender through ncclNet_v" << V;
}

TEST(IbVerbs, TransfersThroughEveryAbiVersion) {
  REQUIRE_RXE(1);
  checkVersion<6>();
  checkVersion<7>();
  checkVersion<8>();
  checkVersion<9>();
  checkVersion<10>();
  checkVersion<11>();
  checkVersion<12>();
}

// ---- random sizes with grouped receives -----------------------------------------------------------------------------
struct IntegrityPlan {
  bool fuse = false;
  int rounds = 40;
  int window = 4;  // rounds in flight
  size_t maxBytes = 192 * 1024;
  int maxReceives = 8;  // grouped receives per round: 1..maxReceives
  uint64_t seed = 1;
  // INFO lines each side's plugin must have logged once connected (the settings it runs with), and INFO lines it must
  // not have logged by the end.
  std::vector<std::string> senderSays, receiverSays, senderNeverSays, receiverNeverSays;
};

// One round: n grouped receives with posted capacities and the (smaller or equal) sizes the sender sends.
struct Round {
  int n;
  size_t capacity[8];
  size_t size[8];
  int tag[8];
};

std::vector<Round> makeRounds(const IntegrityPlan& plan) {
  std::mt19937_64 random(plan.seed);
  std::vector<Round> rounds(static_cast<size_t>(plan.rounds));
  for (Round& round : rounds) {
    round.n = 1 + static_cast<int>(random() % static_cast<uint64_t>(plan.maxReceives));
    for (int r = 0; r < round.n; ++r) {
      round.capacity[r] = random() % (plan.maxBytes + 1);
      round.size[r] = random() % 4 == 0 ? round.capacity[r] : random() % (round.capacity[r] + 1);
      round.tag[r] = 100 + r;
    }
  }
  return rounds;
}

int integritySide(const Channel& channel, const IntegrityPlan& plan, bool receiver) {
  Peer peer;
  CHILD_EXPECT(peer.load(NNS_IB_PLUGIN_PATH), "load: %s", peer.error.c_str());
  int dev = 0;
  if (plan.fuse) {
    int ndev = 0;
    peer.net->devices(&ndev);
    CHILD_EXPECT(ndev >= 2, "fusing needs two devices, have %d", ndev);
    dev = receiver ? peer.fuse({1, 0}) : peer.fuse({0, 1});
    CHILD_EXPECT(dev >= 2, "makeVDevice failed");
    ncclNetProperties_v12_t props{};
    CHILD_CHECK(peer.net->getProperties(dev, &props));
    CHILD_EXPECT(props.vProps.ndevs == 2, "vNIC lists %d devices", props.vProps.ndevs);
  }
  void *comm = nullptr, *listenComm = nullptr;
  if (receiver) {
    CHILD_CHECK(peer.acceptFrom(channel, dev, &comm, &listenComm));
  } else {
    CHILD_CHECK(peer.connectTo(channel, dev, &comm));
  }
  for (const std::string& line : receiver ? plan.receiverSays : plan.senderSays)
    CHILD_EXPECT(informedAbout(line), "the %s logged no \"%s\"", receiver ? "receiver" : "sender", line.c_str());
  std::vector<Round> rounds = makeRounds(plan);
  CHILD_EXPECT(plan.window > 0, "a window of %d rounds", plan.window);
  size_t stride = plan.maxBytes + 64;
  size_t total = stride * 8 * static_cast<size_t>(plan.window);
  auto* buffer =
      static_cast<unsigned char*>(mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  void* mh = nullptr;
  CHILD_CHECK(peer.net->regMr(comm, buffer, total, NCCL_PTR_HOST, &mh));
  auto slice = [&](int round, int r) {
    return buffer + (static_cast<size_t>(round % plan.window) * 8 + static_cast<size_t>(r)) * stride;
  };
  uint64_t bytesMoved = 0;
  auto start = Clock::now();
  if (receiver) {
    std::vector<void*> requests(static_cast<size_t>(plan.rounds), nullptr);
    int posted = 0;
    for (int done = 0; done < plan.rounds; ++done) {
      while (posted < plan.rounds && posted < done + plan.window) {
        const Round& round = rounds[static_cast<size_t>(posted)];
        void* data[8];
        size_t sizes[8];
        int tags[8];
        void* mhs[8];
        for (int r = 0; r < round.n; ++r) {
          data[r] = slice(posted, r);
          std::memset(data[r], 0xee, round.capacity[r]);
          sizes[r] = round.capacity[r];
          tags[r] = round.tag[r];
          mhs[r] = mh;
        }
        CHILD_CHECK(peer.postRecv(comm, round.n, data, sizes, tags, mhs, &requests[static_cast<size_t>(posted)]));
        ++posted;
      }
      const Round& round = rounds[static_cast<size_t>(done)];
      int reported[64] = {};
      CHILD_CHECK(peer.wait(requests[static_cast<size_t>(done)], reported));
      for (int r = 0; r < round.n; ++r) {
        CHILD_EXPECT(reported[r] == static_cast<int>(round.size[r]), "round %d recv %d: size %d, sent %zu", done, r,
                     reported[r], round.size[r]);
        const unsigned char* got = slice(done, r);
        for (size_t i = 0; i < round.size[r]; ++i)
          CHILD_EXPECT(got[i] == patternByte(i, static_cast<uint64_t>(done * 8 + r)),
                       "round %d recv %d byte %zu of %zu differs", done, r, i, round.size[r]);
        bytesMoved += round.size[r];
      }
    }
  } else {
    // Sends each round's messages in reverse tag order, so the plugin must match by tag.
    std::vector<std::vector<void*>> requests(static_cast<size_t>(plan.rounds));
    int posted = 0;
    for (int done = 0; done < plan.rounds; ++done) {
      while (posted < plan.rounds && posted < done + plan.window) {
        const Round& round = rounds[static_cast<size_t>(posted)];
        for (int r = round.n - 1; r >= 0; --r) {
          unsigned char* data = slice(posted, r);
          for (size_t i = 0; i < round.size[r]; ++i) data[i] = patternByte(i, static_cast<uint64_t>(posted * 8 + r));
          void* request = nullptr;
          CHILD_CHECK(peer.postSend(comm, data, round.size[r], round.tag[r], mh, &request));
          requests[static_cast<size_t>(posted)].push_back(request);
        }
        ++posted;
      }
      size_t k = 0;
      for (void* request : requests[static_cast<size_t>(done)]) {
        const Round& round = rounds[static_cast<size_t>(done)];
        int reported = -1;
        CHILD_CHECK(peer.wait(request, &reported));
        size_t r = static_cast<size_t>(round.n) - 1 - k++;
        CHILD_EXPECT(reported == static_cast<int>(round.size[r]), "send size %d, expected %zu", reported,
                     round.size[r]);
      }
    }
  }
  if (receiver) {
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("ib-test: integrity %s: %d rounds, %llu bytes verified in %.2f s\n", plan.fuse ? "fused" : "plain",
                plan.rounds, static_cast<unsigned long long>(bytesMoved), seconds);
  }
  for (const std::string& line : receiver ? plan.receiverNeverSays : plan.senderNeverSays)
    CHILD_EXPECT(!informedAbout(line), "the %s logged \"%s\"", receiver ? "receiver" : "sender", line.c_str());
  char sync = 0;
  channel.sendValue(sync);
  channel.recvValue(&sync);
  CHILD_CHECK(peer.net->deregMr(comm, mh));
  CHILD_CHECK(receiver ? peer.net->closeRecv(comm) : peer.net->closeSend(comm));
  if (listenComm != nullptr) CHILD_CHECK(peer.net->closeListen(listenComm));
  return 0;
}

void checkIntegrity(const Env& receiverEnv, const Env& senderEnv, const IntegrityPlan& plan) {
  PairResult r = runPair(
      receiverEnv, [&](const Channel& c) { return integritySide(c, plan, true); }, senderEnv,
      [&](const Channel& c) { return integritySide(c, plan, false); }, std::chrono::seconds(120));
  EXPECT_FALSE(r.timedOut);
  EXPECT_EQ(r.first, 0) << "receiver";
  EXPECT_EQ(r.second, 0) << "sender";
}

TEST(IbVerbs, RandomSizesGroupedReceivesOneDevice) {
  REQUIRE_RXE(1);
  IntegrityPlan plan;
  plan.seed = 11;
  checkIntegrity(baseEnv("=rxe0"), baseEnv("=rxe0"), plan);
}

TEST(IbVerbs, RandomSizesGroupedReceivesOneDeviceFourQps) {
  REQUIRE_RXE(1);
  IntegrityPlan plan;
  plan.seed = 12;
  Env env = baseEnv("=rxe0");
  env.emplace_back("NCCL_IB_QPS_PER_CONNECTION", "4");
  checkIntegrity(env, env, plan);
}

// NCCL takes up to 128 QPs per connection; past this plugin's 32 a connection gets 32 (it took the default, 1), with
// a WARN saying so.
TEST(IbVerbs, QpsPerConnectionPastThePluginsCapGetsTheCap) {
  REQUIRE_RXE(1);
  IntegrityPlan plan;
  plan.seed = 17;
  plan.rounds = 8;
  Env env = baseEnv("=rxe0");
  env.emplace_back("NCCL_IB_QPS_PER_CONNECTION", "64");
  plan.senderSays = {"with 32 QP(s)"};
  plan.receiverSays = plan.senderSays;
  checkIntegrity(env, env, plan);
}

// NCCL's three data-path options, forced on (soft-RoCE is RoCE, where adaptive routing is off by default): every
// slot over 4 KiB ends each QP's writes with a zero-byte immediate, FIFO entries go inline, user buffers are
// registered with relaxed ordering. Four QPs, so the immediate count per slot varies.
TEST(IbVerbs, RandomSizesWithAdaptiveRoutingInlineFifoAndRelaxedOrdering) {
  REQUIRE_RXE(1);
  IntegrityPlan plan;
  plan.seed = 15;
  Env env = baseEnv("=rxe0");
  for (auto setting : {std::pair<const char*, const char*>{"NCCL_IB_QPS_PER_CONNECTION", "4"},
                       {"NCCL_IB_ADAPTIVE_ROUTING", "1"},
                       {"NCCL_IB_AR_THRESHOLD", "4096"},
                       {"NCCL_IB_USE_INLINE", "1"},
                       {"NCCL_IB_PCI_RELAXED_ORDERING", "1"}})
    env.emplace_back(setting.first, setting.second);
  plan.senderSays = {"adaptive routing: writes of over 4096 bytes end in a zero-byte write with immediate",
                     "relaxed ordering on (NCCL_IB_PCI_RELAXED_ORDERING=1)"};
  plan.receiverSays = {"FIFO entries inline up to", "relaxed ordering on (NCCL_IB_PCI_RELAXED_ORDERING=1)"};
  plan.senderNeverSays = plan.receiverNeverSays = {"refused a relaxed-ordering registration"};
  checkIntegrity(env, env, plan);
}

// By default on RoCE: no adaptive routing, no inline FIFO writes, relaxed ordering where libibverbs has
// ibv_reg_mr_iova2 (Debian 12's has).
TEST(IbVerbs, DefaultsOnRoceLeaveAdaptiveRoutingAndInlineOff) {
  REQUIRE_RXE(1);
  IntegrityPlan plan;
  plan.seed = 16;
  plan.rounds = 8;
  plan.senderSays = {"relaxed ordering on (NCCL_IB_PCI_RELAXED_ORDERING=2)"};
  plan.receiverSays = plan.senderSays;
  plan.senderNeverSays = {"adaptive routing", "refused a relaxed-ordering registration"};
  plan.receiverNeverSays = {"FIFO entries inline", "refused a relaxed-ordering registration"};
  checkIntegrity(baseEnv("=rxe0"), baseEnv("=rxe0"), plan);
}

TEST(IbVerbs, RandomSizesGroupedReceivesAcrossTwoDevices) {
  REQUIRE_RXE(2);
  IntegrityPlan plan;
  plan.seed = 13;
  checkIntegrity(baseEnv("=rxe1"), baseEnv("=rxe0"), plan);
}

long sentPackets(const char* device) {
  FILE* file =
      std::fopen((std::string("/sys/class/infiniband/") + device + "/ports/1/hw_counters/sent_pkts").c_str(), "r");
  if (file == nullptr) return -1;
  long packets = -1;
  if (std::fscanf(file, "%ld", &packets) != 1) packets = -1;
  std::fclose(file);
  return packets;
}

// Runs `plan` through the fused vNIC (both sides on rxe0+rxe1) and gives the packets each device sent meanwhile;
// false (said on stdout) where rxe has no hw_counters to tell.
bool fusedIntegrityPackets(const IntegrityPlan& plan, long* sent0, long* sent1) {
  long before0 = sentPackets("rxe0"), before1 = sentPackets("rxe1");
  checkIntegrity(baseEnv(""), baseEnv(""), plan);
  long after0 = sentPackets("rxe0"), after1 = sentPackets("rxe1");
  if (before0 < 0 || before1 < 0) {
    std::printf("ib-test: no rxe hw_counters/sent_pkts; cannot check that the vNIC used both devices\n");
    return false;
  }
  *sent0 = after0 - before0;
  *sent1 = after1 - before1;
  return true;
}

TEST(IbVerbs, RandomSizesGroupedReceivesThroughFusedVnic) {
  REQUIRE_RXE(2);
  IntegrityPlan plan;
  plan.seed = 14;
  plan.fuse = true;
  long sent0 = 0, sent1 = 0;
  if (!fusedIntegrityPackets(plan, &sent0, &sent1)) return;
  // ~11 MB crossed the vNIC: each port must have carried a real share, not a few control packets.
  std::printf("ib-test: fused vNIC sent %ld packets on rxe0 and %ld on rxe1\n", sent0, sent1);
  EXPECT_GT(sent0, 1000) << "rxe0 carried almost nothing of the fused traffic";
  EXPECT_GT(sent1, 1000) << "rxe1 carried almost nothing of the fused traffic";
}

// Single receives of at most 8 KiB make one chunk each (below NNS_IB_SPLIT_MIN_BYTES): the fused vNIC still spreads
// them over both devices, a slot on each in turn (they all went through rxe0 before).
TEST(IbVerbs, SmallMessagesThroughFusedVnicTakeBothDevices) {
  REQUIRE_RXE(2);
  IntegrityPlan plan;
  plan.seed = 18;
  plan.fuse = true;
  plan.rounds = 400;
  plan.maxReceives = 1;
  plan.maxBytes = 8192;
  long sent0 = 0, sent1 = 0;
  if (!fusedIntegrityPackets(plan, &sent0, &sent1)) return;
  std::printf("ib-test: fused vNIC, small messages: %ld packets on rxe0 and %ld on rxe1\n", sent0, sent1);
  // Both sides' acknowledgements count too: with every message on rxe0, rxe1 still sent about a third (800 of 2495).
  EXPECT_GT(sent1 * 5, (sent0 + sent1) * 2) << "rxe1 carried under 40% of the small messages' packets";
  EXPECT_GT(sent0 * 5, (sent0 + sent1) * 2) << "rxe0 carried under 40% of the small messages' packets";
}

// ---- iflush
// -----------------------------------------------------------------------------------------------------------
int flushSide(const Channel& channel, bool receiver) {
  Peer peer;
  void *comm = nullptr, *listenComm = nullptr;
  if (int failed = openSide(channel, receiver, &peer, &comm, &listenComm)) return failed;
  std::vector<unsigned char> host(8192), device(8192);
  void *hostMh = nullptr, *deviceMh = nullptr;
  CHILD_CHECK(peer.net->regMr(comm, host.data(), host.size(), NCCL_PTR_HOST, &hostMh));
  // soft-RoCE has no GPU; memory registered as NCCL_PTR_CUDA still takes the GPU flush path (a real RDMA READ on the
  // loopback QP), which is what this checks. It goes through regMrDmaBuf with a memfd: rxe refuses dmabuf MRs
  // (EOPNOTSUPP), so this also proves the fallback to ibv_reg_mr of the address.
  int fd = memfd_create("nns-ib-dmabuf-stand-in", MFD_CLOEXEC);
  CHILD_EXPECT(fd >= 0, "memfd_create failed");
  CHILD_CHECK(peer.net->regMrDmaBuf(comm, device.data(), device.size(), NCCL_PTR_CUDA, 0, fd, &deviceMh));
  close(fd);
  CHILD_EXPECT(informedAbout("falling back to ibv_reg_mr"), "regMrDmaBuf did not report its fallback");
  // A DMA-BUF registration refused with or without the relaxed-ordering flag says nothing about the flag.
  CHILD_EXPECT(!informedAbout("refused a relaxed-ordering registration"),
               "rxe's refusal of DMA-BUF turned relaxed ordering off");
  for (int round = 0; round < 2; ++round) {
    void* mh = round == 0 ? hostMh : deviceMh;
    unsigned char* data = round == 0 ? host.data() : device.data();
    void* request = nullptr;
    int size = 0;
    if (receiver) {
      void* datas[1] = {data};
      size_t sizes[1] = {4096};
      int tags[1] = {3};
      CHILD_CHECK(peer.postRecv(comm, 1, datas, sizes, tags, &mh, &request));
      CHILD_CHECK(peer.wait(request, &size));
      int flushSizes[1] = {size};
      void* flush = nullptr;
      CHILD_CHECK(peer.net->iflush(comm, 1, datas, flushSizes, &mh, &flush));
      bool disabled = std::getenv("NCCL_GDR_FLUSH_DISABLE") != nullptr;
      if (round == 0 || disabled) {
        CHILD_EXPECT(flush == nullptr, "iflush of host memory (or with NCCL_GDR_FLUSH_DISABLE) returned a request");
      } else {
        CHILD_EXPECT(flush != nullptr, "iflush of a CUDA-registered buffer returned no request");
        CHILD_CHECK(peer.wait(flush, nullptr));
        std::printf("ib-test: flush RDMA READ completed\n");
        // Something that is not a memory handle of this comm is refused, as isend/irecv refuse it, not read.
        std::vector<unsigned char> garbage(512, 0xff);
        void* bogus = garbage.data();
        flush = nullptr;
        CHILD_EXPECT(peer.net->iflush(comm, 1, datas, flushSizes, &bogus, &flush) == ncclInternalError,
                     "iflush accepted a pointer that is not a memory handle");
        CHILD_EXPECT(flush == nullptr && warnedAbout("iflush: receive 0"), "no WARN named the bad handle");
        // Flushes posted without waiting use up the comm's requests: the one that finds none fails, never returns
        // a NULL request (which means "flush complete", and the caller would read memory still being written).
        std::vector<void*> flushes;
        ncclResult_t result = ncclSuccess;
        for (int i = 0; i < 1000 && result == ncclSuccess; ++i) {
          void* more = nullptr;
          result = peer.net->iflush(comm, 1, datas, flushSizes, &mh, &more);
          if (result == ncclSuccess) {
            CHILD_EXPECT(more != nullptr, "iflush %d of a CUDA-registered buffer returned a NULL request", i);
            flushes.push_back(more);
          }
        }
        CHILD_EXPECT(result == ncclInternalError && warnedAbout("the flush cannot be posted"),
                     "iflush with no request free returned %d after %zu flushes", static_cast<int>(result),
                     flushes.size());
        for (void* pending : flushes) CHILD_CHECK(peer.wait(pending, nullptr));
        std::printf("ib-test: %zu flushes in flight, the next refused\n", flushes.size());
      }
      for (int i = 0; i < 4096; ++i) CHILD_EXPECT(data[i] == static_cast<unsigned char>(i * 7), "byte %d", i);
    } else {
      for (int i = 0; i < 4096; ++i) data[i] = static_cast<unsigned char>(i * 7);
      CHILD_CHECK(peer.postSend(comm, data, 4096, 3, mh, &request));
      CHILD_CHECK(peer.wait(request, &size));
    }
  }
  // A 0-byte message's handle is not looked at: a pointer to anything (here bytes of 0x5a) is neither read nor
  // written (the request's use count was kept in it until test() before).
  {
    std::vector<unsigned char> garbage(512, 0x5a);
    void* bogus = garbage.data();
    void* request = nullptr;
    if (receiver) {
      void* datas[1] = {host.data()};
      size_t sizes[1] = {0};
      int tags[1] = {9};
      CHILD_CHECK(peer.postRecv(comm, 1, datas, sizes, tags, &bogus, &request));
    } else {
      CHILD_CHECK(peer.postSend(comm, host.data(), 0, 9, bogus, &request));
    }
    for (unsigned char byte : garbage) CHILD_EXPECT(byte == 0x5a, "a 0-byte request wrote into its handle");
    int size = -1;
    CHILD_CHECK(peer.wait(request, &size));
    CHILD_EXPECT(size == 0, "a 0-byte message arrived as %d bytes", size);
  }
  char sync = 0;
  channel.sendValue(sync);
  channel.recvValue(&sync);
  CHILD_CHECK(peer.net->deregMr(comm, hostMh));
  CHILD_CHECK(peer.net->deregMr(comm, deviceMh));
  CHILD_CHECK(receiver ? peer.net->closeRecv(comm) : peer.net->closeSend(comm));
  return 0;
}

TEST(IbVerbs, FlushReadsBackGpuRegisteredBuffersOnly) {
  REQUIRE_RXE(1);
  for (bool disable : {false, true}) {
    Env env = baseEnv("=rxe0");
    if (disable) env.emplace_back("NCCL_GDR_FLUSH_DISABLE", "1");
    PairResult r = runPair(
        env, [](const Channel& c) { return flushSide(c, true); }, env,
        [](const Channel& c) { return flushSide(c, false); }, std::chrono::seconds(60));
    EXPECT_FALSE(r.timedOut);
    EXPECT_EQ(r.first, 0) << "receiver, NCCL_GDR_FLUSH_DISABLE=" << disable;
    EXPECT_EQ(r.second, 0) << "sender";
  }
}

// ---- faults
// ----------------------------------------------------------------------------------------------------------- Streams
// until an error; exit 0 when an error came within `boundSeconds` of the first failure signal and named the peer, 20
// when the stream finished without any error, 21 when it hung past the bound.
// Each side tells `streaming` when its first message is through; the parent injects the fault once both have. (Faults
// timed from the fork assumed both sides were streaming by then, which a slow sanitized run need not meet: see the
// port test below.)
struct StreamingSignal {
  int fds[2] = {-1, -1};
  StreamingSignal() {
    if (pipe(fds) != 0) fds[0] = fds[1] = -1;
  }
  ~StreamingSignal() {
    for (int fd : fds)
      if (fd >= 0) close(fd);
  }
  StreamingSignal(const StreamingSignal&) = delete;
  StreamingSignal& operator=(const StreamingSignal&) = delete;
  void tell() const {
    if (!Channel{fds[1]}.sendValue(char{1}))
      std::fprintf(stderr, "ib-test: could not tell the parent the stream runs\n");
  }
  // Waits until both sides have told (then lets them stream a moment more); fails the test after `timeout`.
  void waitForBoth(std::chrono::seconds timeout) const {
    const auto deadline = Clock::now() + timeout;
    int told = 0;
    for (char byte = 0; told < 2; ++told) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (!Channel{fds[0]}.recvValue(&byte, static_cast<int>(left))) break;
    }
    if (told < 2) ADD_FAILURE() << "only " << told << " of the 2 sides streamed within " << timeout.count() << " s";
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
};

int streamUntilError(const Channel& channel, bool receiver, const char* dev, double boundSeconds,
                     const StreamingSignal& streaming) {
  Peer peer;
  void *comm = nullptr, *listenComm = nullptr;
  if (int failed = openSide(channel, receiver, &peer, &comm, &listenComm)) return failed;
  const size_t bytes = 256 * 1024;
  const int window = 4;
  std::vector<unsigned char> buffer(bytes * window);
  void* mh = nullptr;
  CHILD_CHECK(peer.net->regMr(comm, buffer.data(), buffer.size(), NCCL_PTR_HOST, &mh));
  std::vector<void*> inflight(window, nullptr);
  auto start = Clock::now();
  auto lastCompletion = Clock::now();
  ncclResult_t error = ncclSuccess;
  long completed = 0;
  while (error == ncclSuccess) {
    for (int w = 0; w < window && error == ncclSuccess; ++w) {
      void*& request = inflight[static_cast<size_t>(w)];
      void* slice = buffer.data() + static_cast<size_t>(w) * bytes;
      if (request == nullptr) {
        if (receiver) {
          size_t size = bytes;
          int tag = 5;
          error = peer.net->irecv(comm, 1, &slice, &size, &tag, &mh, nullptr, &request);
        } else {
          error = peer.net->isend(comm, slice, bytes, 5, mh, nullptr, &request);
        }
      }
      if (request != nullptr && error == ncclSuccess) {
        int done = 0, sizes[8] = {};
        error = peer.net->test(request, &done, sizes);
        if (done) {
          request = nullptr;
          if (++completed == 1) streaming.tell();
          lastCompletion = Clock::now();
        }
      }
    }
    double stalled = std::chrono::duration<double>(Clock::now() - lastCompletion).count();
    if (error == ncclSuccess && stalled > boundSeconds) {
      std::printf("ib-test: %s on %s: no completion and no error for %.1f s (hang)\n", receiver ? "receiver" : "sender",
                  dev, stalled);
      return 21;
    }
    if (std::chrono::duration<double>(Clock::now() - start).count() > 120) return 20;
  }
  double detection = std::chrono::duration<double>(Clock::now() - lastCompletion).count();
  std::printf("ib-test: %s on %s: error %d after %ld transfers, %.2f s after the last completion\n",
              receiver ? "receiver" : "sender", dev, static_cast<int>(error), completed, detection);
  CHILD_EXPECT(warnedAbout("peer 10.0.0."), "no WARN named the peer");
  return 0;
}

// ---- strangers on the listen port ----------------------------------------------------------------------------------
// What reaches the listen port without identifying itself as an nns-ib sender (garbage, a truncated info, nothing
// at all) is dropped with a WARN while accept goes on; the real sender, which connects after them, gets through and
// moves data. The silent one goes once NNS_IB_CONNECT_TIMEOUT_MS (1 s here) has passed.
int strangersReceiver(const Channel& channel) {
  Peer peer;
  CHILD_EXPECT(peer.load(NNS_IB_PLUGIN_PATH), "load: %s", peer.error.c_str());
  const auto before = nns::check::listeningSockets();
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void *listenComm = nullptr, *comm = nullptr;
  CHILD_CHECK(peer.net->listen(peer.ctx, 0, handle, &listenComm));
  sockaddr_storage address{};
  CHILD_EXPECT(nns::check::newListeningSocket(before, &address), "no single new listening socket for the listen comm");
  nns::check::Strangers strangers;
  CHILD_EXPECT(nns::check::sendStrangers(address, 4096, &strangers), "could not play the strangers");
  CHILD_EXPECT(channel.send(handle, sizeof(handle)), "handle");
  ncclNetDeviceHandle_v12_t* devHandle = nullptr;
  auto deadline = Clock::now() + std::chrono::seconds(60);
  while (comm == nullptr && Clock::now() < deadline) CHILD_CHECK(peer.net->accept(listenComm, &comm, &devHandle));
  CHILD_EXPECT(comm != nullptr, "the real sender did not get through");
  std::vector<unsigned char> buffer(100000, 0);
  void* mh = nullptr;
  CHILD_CHECK(peer.net->regMr(comm, buffer.data(), buffer.size(), NCCL_PTR_HOST, &mh));
  void* data[1] = {buffer.data()};
  size_t sizes[1] = {buffer.size()};
  int tags[1] = {9};
  void* mhs[1] = {mh};
  void* request = nullptr;
  CHILD_CHECK(peer.postRecv(comm, 1, data, sizes, tags, mhs, &request));
  int received = -1;
  CHILD_CHECK(peer.wait(request, &received));
  CHILD_EXPECT(received == static_cast<int>(buffer.size()), "received %d bytes", received);
  for (size_t i = 0; i < buffer.size(); ++i) CHILD_EXPECT(buffer[i] == patternByte(i, 9), "byte %zu differs", i);
  CHILD_EXPECT(warnedAbout("dropping connection from"), "no WARN names the strangers");
  CHILD_EXPECT(warnedAbout("wrong magic"), "the garbage was not reported as such");
  CHILD_EXPECT(warnedAbout("before identifying itself"), "the truncated info was not reported");
  CHILD_EXPECT(nns::check::closedByPeer(strangers.garbage, std::chrono::seconds(2)),
               "the garbage sender is still connected");
  void* none = nullptr;
  deadline = Clock::now() + std::chrono::seconds(10);
  while (!warnedAbout("sent no connection info") && Clock::now() < deadline) {
    CHILD_CHECK(peer.net->accept(listenComm, &none, &devHandle));
    CHILD_EXPECT(none == nullptr, "a stranger became a receive comm");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHILD_EXPECT(warnedAbout("sent no connection info"), "the silent stranger was never dropped");
  CHILD_EXPECT(nns::check::closedByPeer(strangers.silent, std::chrono::seconds(2)),
               "the silent stranger is still connected");
  close(strangers.garbage);
  close(strangers.silent);
  char sync = 0;
  channel.sendValue(sync);
  CHILD_CHECK(peer.net->deregMr(comm, mh));
  CHILD_CHECK(peer.net->closeRecv(comm));
  CHILD_CHECK(peer.net->closeListen(listenComm));
  return 0;
}

int strangersSender(const Channel& channel) {
  Peer peer;
  CHILD_EXPECT(peer.load(NNS_IB_PLUGIN_PATH), "load: %s", peer.error.c_str());
  void* comm = nullptr;
  CHILD_CHECK(peer.connectTo(channel, 0, &comm));
  std::vector<unsigned char> buffer(100000);
  for (size_t i = 0; i < buffer.size(); ++i) buffer[i] = patternByte(i, 9);
  void* mh = nullptr;
  CHILD_CHECK(peer.net->regMr(comm, buffer.data(), buffer.size(), NCCL_PTR_HOST, &mh));
  void* request = nullptr;
  CHILD_CHECK(peer.postSend(comm, buffer.data(), buffer.size(), 9, mh, &request));
  CHILD_CHECK(peer.wait(request, nullptr));
  char sync = 0;
  CHILD_EXPECT(channel.recvValue(&sync), "the receiver did not finish");
  CHILD_CHECK(peer.net->deregMr(comm, mh));
  CHILD_CHECK(peer.net->closeSend(comm));
  return 0;
}

TEST(IbVerbs, StrangersOnTheListenPortAreDroppedAndRealSendersStillConnect) {
  REQUIRE_RXE(1);
  Env env = baseEnv("=rxe0");
  env.emplace_back("NNS_IB_CONNECT_TIMEOUT_MS", "1000");
  PairResult r = runPair(env, strangersReceiver, baseEnv("=rxe0"), strangersSender, std::chrono::seconds(90));
  EXPECT_FALSE(r.timedOut);
  EXPECT_EQ(r.first, 0) << "receiver";
  EXPECT_EQ(r.second, 0) << "sender";
}

// ---- peers that go away or never answer ----------------------------------------------------------------------------
// The receiver closes its comm before posting any receive (its process lives on): the sender's retried isend, which
// has no request for test() to fail, must still report the dead peer, within the side channel's 100 ms check plus
// slack for the VM.
int closingReceiver(const Channel& channel) {
  Peer peer;
  CHILD_EXPECT(peer.load(NNS_IB_PLUGIN_PATH), "load: %s", peer.error.c_str());
  void *comm = nullptr, *listenComm = nullptr;
  CHILD_CHECK(peer.acceptFrom(channel, 0, &comm, &listenComm));
  CHILD_CHECK(peer.net->closeRecv(comm));
  char closed = 1;
  CHILD_EXPECT(channel.sendValue(closed), "could not tell the sender");
  char done = 0;
  CHILD_EXPECT(channel.recvValue(&done), "the sender did not finish");
  CHILD_CHECK(peer.net->closeListen(listenComm));
  return 0;
}

int senderOfClosedReceiver(const Channel& channel) {
  Peer peer;
  CHILD_EXPECT(peer.load(NNS_IB_PLUGIN_PATH), "load: %s", peer.error.c_str());
  void* comm = nullptr;
  CHILD_CHECK(peer.connectTo(channel, 0, &comm));
  std::vector<unsigned char> buffer(4096);
  void* mh = nullptr;
  CHILD_CHECK(peer.net->regMr(comm, buffer.data(), buffer.size(), NCCL_PTR_HOST, &mh));
  char closed = 0;
  CHILD_EXPECT(channel.recvValue(&closed), "the receiver did not close");
  auto start = Clock::now();
  ncclResult_t result = ncclSuccess;
  void* request = nullptr;
  while (result == ncclSuccess && request == nullptr && Clock::now() - start < std::chrono::seconds(10)) {
    result = peer.net->isend(comm, buffer.data(), buffer.size(), 1, mh, nullptr, &request);
    sched_yield();
  }
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("ib-test: isend to a closed receiver: result %d, request %p after %.3f s\n", static_cast<int>(result),
              request, seconds);
  CHILD_EXPECT(request == nullptr, "isend handed out a request although the receiver posted nothing");
  CHILD_EXPECT(result == ncclRemoteError, "isend kept answering NULL for %.1f s (result %d)", seconds,
               static_cast<int>(result));
  CHILD_EXPECT(seconds < 2.0, "the dead receiver was noticed only after %.2f s", seconds);
  CHILD_EXPECT(warnedAbout("the peer closed the connection"), "no WARN explained the error");
  char done = 1;
  channel.sendValue(done);
  CHILD_CHECK(peer.net->deregMr(comm, mh));
  CHILD_CHECK(peer.net->closeSend(comm));
  return 0;
}

TEST(IbVerbs, IsendAfterTheReceiverClosedFailsWithinBound) {
  REQUIRE_RXE(1);
  PairResult r =
      runPair(baseEnv("=rxe0"), closingReceiver, baseEnv("=rxe0"), senderOfClosedReceiver, std::chrono::seconds(60));
  EXPECT_FALSE(r.timedOut);
  EXPECT_EQ(r.first, 0) << "receiver";
  EXPECT_EQ(r.second, 0) << "sender";
}

int openFds() {
  int count = 0;
  for (int fd = 0; fd < 4096; ++fd)
    if (fcntl(fd, F_GETFD) != -1) ++count;
  return count;
}

// Connects to a listen comm whose owner never calls accept: the kernel completes the TCP handshake from the listen
// backlog, so only the handshake's own deadline can end the connect. NNS_IB_CONNECT_TIMEOUT_MS is 1 s here.
int connectToSilentListener() {
  Peer peer;
  CHILD_EXPECT(peer.load(NNS_IB_PLUGIN_PATH), "load: %s", peer.error.c_str());
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* listenComm = nullptr;
  CHILD_CHECK(peer.net->listen(peer.ctx, 0, handle, &listenComm));
  const int fdsBefore = openFds();
  void* comm = nullptr;
  ncclNetDeviceHandle_v12_t* devHandle = nullptr;
  ncclResult_t result = ncclSuccess;
  auto start = Clock::now();
  while (result == ncclSuccess && comm == nullptr && Clock::now() - start < std::chrono::seconds(30)) {
    result = peer.net->connect(peer.ctx, 0, handle, &comm, &devHandle);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("ib-test: connect to a listener that never accepts: result %d, comm %p after %.2f s\n",
              static_cast<int>(result), comm, seconds);
  CHILD_EXPECT(comm == nullptr, "connected although nobody accepted");
  CHILD_EXPECT(result != ncclSuccess, "connect still pending after %.1f s", seconds);
  CHILD_EXPECT(seconds >= 0.9 && seconds < 5.0, "connect failed after %.2f s, not after NNS_IB_CONNECT_TIMEOUT_MS",
               seconds);
  CHILD_EXPECT(warnedAbout("NNS_IB_CONNECT_TIMEOUT_MS"), "no WARN named the timeout");
  CHILD_EXPECT(openFds() == fdsBefore, "the failed connect left %d descriptor(s) open", openFds() - fdsBefore);
  CHILD_CHECK(peer.net->closeListen(listenComm));
  return 0;
}

TEST(IbVerbs, ConnectToAListenerThatNeverAnswersFailsAfterConnectTimeout) {
  REQUIRE_RXE(1);
  Env env = baseEnv("=rxe0");
  env.emplace_back("NNS_IB_CONNECT_TIMEOUT_MS", "1000");
  EXPECT_EQ(inChild(env, connectToSilentListener), 0);
}

// A sender that identified itself and then stopped (its process stopped calling connect): accept must not wait for
// its "ready" forever but fail after NNS_IB_CONNECT_TIMEOUT_MS (1 s here). One process: connect is driven until its
// info is in the socket, then only accept.
int acceptFromStalledSender() {
  Peer peer;
  CHILD_EXPECT(peer.load(NNS_IB_PLUGIN_PATH), "load: %s", peer.error.c_str());
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void *listenComm = nullptr, *sendComm = nullptr, *recvComm = nullptr;
  CHILD_CHECK(peer.net->listen(peer.ctx, 0, handle, &listenComm));
  ncclNetDeviceHandle_v12_t* devHandle = nullptr;
  for (auto until = Clock::now() + std::chrono::milliseconds(200); Clock::now() < until;) {
    CHILD_CHECK(peer.net->connect(peer.ctx, 0, handle, &sendComm, &devHandle));
    CHILD_EXPECT(sendComm == nullptr, "connected without accept");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ncclResult_t result = ncclSuccess;
  auto start = Clock::now();
  while (result == ncclSuccess && recvComm == nullptr && Clock::now() - start < std::chrono::seconds(30)) {
    result = peer.net->accept(listenComm, &recvComm, &devHandle);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("ib-test: accept from a sender that stopped after identifying: result %d, comm %p after %.2f s\n",
              static_cast<int>(result), recvComm, seconds);
  CHILD_EXPECT(recvComm == nullptr, "accepted a sender that never said ready");
  CHILD_EXPECT(result == ncclRemoteError, "accept still pending after %.1f s (result %d)", seconds,
               static_cast<int>(result));
  CHILD_EXPECT(seconds < 5.0, "accept failed only after %.2f s", seconds);
  CHILD_EXPECT(warnedAbout("did not finish the handshake"), "no WARN explained the failed accept");
  // Whatever the abandoned connect makes of it now (an error, or a comm the first transfer would fail), it ends.
  result = ncclSuccess;
  for (auto until = Clock::now() + std::chrono::seconds(10);
       result == ncclSuccess && sendComm == nullptr && Clock::now() < until;)
    result = peer.net->connect(peer.ctx, 0, handle, &sendComm, &devHandle);
  CHILD_EXPECT(result != ncclSuccess || sendComm != nullptr, "the abandoned connect never ended");
  if (sendComm != nullptr) CHILD_CHECK(peer.net->closeSend(sendComm));
  CHILD_CHECK(peer.net->closeListen(listenComm));
  return 0;
}

TEST(IbVerbs, AcceptFromASenderThatStopsAfterIdentifyingFailsAfterConnectTimeout) {
  REQUIRE_RXE(1);
  Env env = baseEnv("=rxe0");
  env.emplace_back("NNS_IB_CONNECT_TIMEOUT_MS", "1000");
  EXPECT_EQ(inChild(env, acceptFromStalledSender), 0);
}

// ---- what an RDMA engineer tries before deploying: truncation in a grouped receive, registrations that are
// unaligned, odd-sized, overlapping or still in use, many connections, closing with requests in flight
// ------------------

// Waits for one byte from the other side (a step of the scenario), false after 60 s.
bool awaitStep(const Channel& channel) {
  char step = 0;
  return channel.recvValue(&step);
}
void signalStep(const Channel& channel) {
  char step = 1;
  channel.sendValue(step);
}

// A grouped receive of 8 with mixed capacities, one of which the sender overfills: the sender's isend for that one
// fails (never a truncation), and the receiver, whose grouped request can then never complete, fails within a bound
// instead of waiting forever, while the sender's process lives on.
constexpr size_t kTruncCapacity[8] = {0, 1, 7, 4096, 65536, 100, 3, 65536};
constexpr size_t kTruncSize[8] = {0, 1, 5, 4096, 1000, 101, 3, 65536};  // the sixth exceeds its 100-byte buffer

int truncationReceiver(const Channel& channel) {
  Peer peer;
  CHILD_EXPECT(peer.load(NNS_IB_PLUGIN_PATH), "load: %s", peer.error.c_str());
  void *comm = nullptr, *listenComm = nullptr;
  CHILD_CHECK(peer.acceptFrom(channel, 0, &comm, &listenComm));
  std::vector<unsigned char> buffer(8 * 65536 + 64);
  void* mh = nullptr;
  CHILD_CHECK(peer.net->regMr(comm, buffer.data(), buffer.size(), NCCL_PTR_HOST, &mh));
  void* data[8];
  size_t sizes[8];
  int tags[8];
  void* mhs[8];
  for (int r = 0; r < 8; ++r) {
    data[r] = buffer.data() + static_cast<size_t>(r) * 65536;
    sizes[r] = kTruncCapacity[r];
    tags[r] = 40 + r;
    mhs[r] = mh;
  }
  void* request = nullptr;
  CHILD_CHECK(peer.postRecv(comm, 8, data, sizes, tags, mhs, &request));
  signalStep(channel);
  auto start = Clock::now();
  int reported[64] = {};
  ncclResult_t result = peer.wait(request, reported, std::chrono::seconds(20));
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("ib-test: grouped receive with a truncated member: result %d after %.2f s\n", static_cast<int>(result),
              seconds);
  signalStep(channel);  // the sender may go now
  CHILD_EXPECT(result != ncclSuccess, "the grouped receive completed although one message did not fit");
  CHILD_EXPECT(result != ncclTimeout, "the grouped receive neither completed nor failed within 20 s");
  CHILD_EXPECT(seconds < 5.0, "the receiver learned of the failure only after %.2f s", seconds);
  peer.net->deregMr(comm, mh);
  peer.net->closeRecv(comm);
  peer.net->closeListen(listenComm);
  return 0;
}

int truncationSender(const Channel& channel) {
  Peer peer;
  CHILD_EXPECT(peer.load(NNS_IB_PLUGIN_PATH), "load: %s", peer.error.c_str());
  void* comm = nullptr;
  CHILD_CHECK(peer.connectTo(channel, 0, &comm));
  std::vector<unsigned char> buffer(65536 + 64, 0x5a);
  void* mh = nullptr;
  CHILD_CHECK(peer.net->regMr(comm, buffer.data(), buffer.size(), NCCL_PTR_HOST, &mh));
  CHILD_EXPECT(awaitStep(channel), "the receiver did not post");
  ncclResult_t result = ncclSuccess;
  int r = 0;
  for (; r < 8 && result == ncclSuccess; ++r) {
    void* request = nullptr;
    result = peer.postSend(comm, buffer.data(), kTruncSize[r], 40 + r, mh, &request);
  }
  std::printf("ib-test: sends into a grouped receive: message %d ended with %d\n", r - 1, static_cast<int>(result));
  CHILD_EXPECT(r - 1 == 5 && result == ncclInvalidUsage, "message %d ended with %d, expected message 5 refused", r - 1,
               static_cast<int>(result));
  CHILD_EXPECT(warnedAbout("exceeds the receive buffer"), "no WARN named the sizes");
  CHILD_EXPECT(awaitStep(channel), "the receiver did not finish");
  peer.net->deregMr(comm, mh);
  peer.net->closeSend(comm);
  return 0;
}

TEST(IbVerbs, GroupedReceiveWithATruncatedMemberFailsBothSides) {
  REQUIRE_RXE(1);
  PairResult r =
      runPair(baseEnv("=rxe0"), truncationReceiver, baseEnv("=rxe0"), truncationSender, std::chrono::seconds(90));
  EXPECT_FALSE(r.timedOut);
  EXPECT_EQ(r.first, 0) << "receiver";
  EXPECT_EQ(r.second, 0) << "sender";
}

// Registrations at odd addresses with odd sizes, overlapping ones, and a zero-byte one; data sent from and received
// into them lands byte-exact, and a completed request tested again is an error. Then deregMr of a handle that a
// pending request still uses, on each side (a second connection for the receiver's case): the handle is released
// (an abort deregisters with requests in flight and must get on to close), and the comm fails at once with a WARN
// naming the cause, so the pending request returns ncclInvalidUsage and the peer fails within a bound, where
// before the sender read the freed handle when it posted the grouped writes.
int oddRegistrationSide(const Channel& channel, bool receiver) {
  Peer peer;
  void *comm = nullptr, *listenComm = nullptr;
  if (int failed = openSide(channel, receiver, &peer, &comm, &listenComm)) return failed;
  const size_t total = 3 * 4096 + 123;
  auto* buffer = static_cast<unsigned char*>(std::malloc(total));
  CHILD_EXPECT(buffer != nullptr, "malloc");
  // a: [3, 3 + 1001), b: [500, 500 + 6001) overlapping a, c: [4097, 4097 + 7) inside b
  void *a = nullptr, *b = nullptr, *c = nullptr, *empty = nullptr;
  CHILD_CHECK(peer.net->regMr(comm, buffer + 3, 1001, NCCL_PTR_HOST, &a));
  CHILD_CHECK(peer.net->regMr(comm, buffer + 500, 6001, NCCL_PTR_HOST, &b));
  CHILD_CHECK(peer.net->regMr(comm, buffer + 4097, 7, NCCL_PTR_HOST, &c));
  // 0 bytes, at an odd address and at a page-aligned one (which the kernel's ibv_reg_mr refused: EINVAL).
  static unsigned char page[8192] __attribute__((aligned(4096)));
  for (unsigned char* at : {buffer + 11, page}) {
    CHILD_CHECK(peer.net->regMr(comm, at, 0, NCCL_PTR_HOST, &empty));
    CHILD_CHECK(peer.net->deregMr(comm, empty));
  }
  // A buffer outside the handle it comes with is refused at the call (ncclInvalidUsage), nothing posted: posted, it
  // failed at completion as a local protection error here or a remote access error on the peer (ncclRemoteError).
  void* outside = nullptr;
  if (receiver) {
    void* data = buffer + 3 + 1000;
    size_t size = 2;  // one byte past a's end
    int tag = 99;
    CHILD_EXPECT(peer.net->irecv(comm, 1, &data, &size, &tag, &a, nullptr, &outside) == ncclInvalidUsage,
                 "irecv of a buffer outside its handle was not refused");
  } else {
    CHILD_EXPECT(peer.net->isend(comm, buffer + 2, 10, 99, a, nullptr, &outside) == ncclInvalidUsage,
                 "isend of a buffer outside its handle was not refused");
  }
  CHILD_EXPECT(outside == nullptr, "a refused call gave a request");
  struct Piece {
    unsigned char* data;
    size_t size;
    void* mh;
  };
  // Each message goes from/to a different registration; the receiver's pieces mirror the sender's.
  const Piece pieces[3] = {{buffer + 3, 1001, a}, {buffer + 700, 5801, b}, {buffer + 4097, 7, c}};
  for (int round = 0; round < 3; ++round) {
    const Piece& piece = pieces[round];
    void* request = nullptr;
    if (receiver) {
      std::memset(buffer, 0xee, total);
      void* data = piece.data;
      size_t size = piece.size;
      int tag = round;
      void* mh = piece.mh;
      CHILD_CHECK(peer.postRecv(comm, 1, &data, &size, &tag, &mh, &request));
    } else {
      for (size_t i = 0; i < piece.size; ++i) piece.data[i] = patternByte(i, static_cast<uint64_t>(round) + 77);
      CHILD_CHECK(peer.postSend(comm, piece.data, piece.size, round, piece.mh, &request));
    }
    int reported[64] = {};
    CHILD_CHECK(peer.wait(request, reported));
    CHILD_EXPECT(reported[0] == static_cast<int>(piece.size), "round %d: size %d reported, %zu sent", round,
                 reported[0], piece.size);
    int again = 0;
    CHILD_EXPECT(peer.net->test(request, &again, reported) != ncclSuccess, "a completed request tested again passed");
    if (receiver) {
      for (size_t i = 0; i < piece.size; ++i)
        CHILD_EXPECT(piece.data[i] == patternByte(i, static_cast<uint64_t>(round) + 77), "round %d byte %zu differs",
                     round, i);
      CHILD_EXPECT(piece.data[-1] == 0xee && piece.data[piece.size] == 0xee, "round %d wrote outside its buffer",
                   round);
    }
  }
  // The sender deregisters b while its first send of a grouped receive of two uses it (the slot is not complete, so
  // nothing is posted yet).
  void* request = nullptr;
  int reported[64] = {};
  auto start = Clock::now();
  if (receiver) {
    void* data[2] = {buffer + 3, buffer + 4097};
    size_t sizes[2] = {1001, 7};
    int tags[2] = {1, 2};
    void* mhs[2] = {a, c};
    CHILD_CHECK(peer.postRecv(comm, 2, data, sizes, tags, mhs, &request));
    signalStep(channel);
    ncclResult_t result = peer.wait(request, reported, std::chrono::seconds(20));
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("ib-test: receive whose sender deregistered a busy handle: result %d after %.2f s\n",
                static_cast<int>(result), seconds);
    CHILD_EXPECT(result == ncclRemoteError && seconds < 5.0, "the receive ended with %d after %.2f s",
                 static_cast<int>(result), seconds);
  } else {
    CHILD_EXPECT(awaitStep(channel), "the receiver did not post");
    CHILD_CHECK(peer.postSend(comm, buffer + 700, 1001, 1, b, &request));
    CHILD_CHECK(peer.net->deregMr(comm, b));  // released, and the comm fails
    CHILD_EXPECT(warnedAbout("while 1 pending request(s) use it"), "no WARN named the busy deregMr");
    void* second = nullptr;
    ncclResult_t next = peer.net->isend(comm, buffer + 4097, 7, 2, c, nullptr, &second);
    int done = 0;
    ncclResult_t tested = peer.net->test(request, &done, reported);
    std::printf("ib-test: after deregMr of a busy handle: isend %d, test %d\n", static_cast<int>(next),
                static_cast<int>(tested));
    CHILD_EXPECT(next == ncclInvalidUsage && second == nullptr, "the next isend returned %d", static_cast<int>(next));
    CHILD_EXPECT(tested == ncclInvalidUsage && done == 0, "the pending send's test returned %d",
                 static_cast<int>(tested));
  }
  if (!receiver) CHILD_CHECK(peer.net->deregMr(comm, a));
  if (receiver) CHILD_CHECK(peer.net->deregMr(comm, a));
  if (receiver) CHILD_CHECK(peer.net->deregMr(comm, b));
  CHILD_CHECK(peer.net->deregMr(comm, c));
  CHILD_CHECK(receiver ? peer.net->closeRecv(comm) : peer.net->closeSend(comm));
  // The receiver deregisters the buffer of its posted receive, on a second connection.
  comm = nullptr;
  void* listen2 = nullptr;
  if (receiver) {
    CHILD_CHECK(peer.acceptFrom(channel, 0, &comm, &listen2));
  } else {
    CHILD_CHECK(peer.connectTo(channel, 0, &comm));
  }
  void* d = nullptr;
  CHILD_CHECK(peer.net->regMr(comm, buffer, 4096, NCCL_PTR_HOST, &d));
  request = nullptr;
  start = Clock::now();
  ncclResult_t result;
  if (receiver) {
    void* data = buffer;
    size_t size = 4096;
    int tag = 5;
    CHILD_CHECK(peer.postRecv(comm, 1, &data, &size, &tag, &d, &request));
    CHILD_CHECK(peer.net->deregMr(comm, d));
    CHILD_EXPECT(warnedAbout("while 1 pending request(s) use it"), "no WARN named the busy deregMr");
    signalStep(channel);
    result = peer.wait(request, reported, std::chrono::seconds(20));
    CHILD_EXPECT(result == ncclInvalidUsage, "the receive whose buffer was deregistered returned %d",
                 static_cast<int>(result));
  } else {
    CHILD_EXPECT(awaitStep(channel), "the receiver did not post");
    result = peer.postSend(comm, buffer, 4096, 5, d, &request, std::chrono::seconds(20));
    if (result == ncclSuccess) result = peer.wait(request, reported, std::chrono::seconds(20));
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("ib-test: send to a receiver that deregistered its buffer: result %d after %.2f s\n",
                static_cast<int>(result), seconds);
    CHILD_EXPECT(result != ncclSuccess && result != ncclTimeout && seconds < 5.0, "the send ended with %d after %.2f s",
                 static_cast<int>(result), seconds);
    CHILD_CHECK(peer.net->deregMr(comm, d));
  }
  signalStep(channel);
  CHILD_EXPECT(awaitStep(channel), "the peer did not finish");
  CHILD_CHECK(receiver ? peer.net->closeRecv(comm) : peer.net->closeSend(comm));
  if (listenComm != nullptr) CHILD_CHECK(peer.net->closeListen(listenComm));
  if (listen2 != nullptr) CHILD_CHECK(peer.net->closeListen(listen2));
  std::free(buffer);
  return 0;
}

// Runs side(c, true) as the receiver and side(c, false) as the sender, both on rxe0, and expects both to pass.
void expectBothSidesPass(int (*side)(const Channel&, bool receiver), std::chrono::seconds limit) {
  PairResult r = runPair(
      baseEnv("=rxe0"), [side](const Channel& c) { return side(c, true); }, baseEnv("=rxe0"),
      [side](const Channel& c) { return side(c, false); }, limit);
  EXPECT_FALSE(r.timedOut);
  EXPECT_EQ(r.first, 0) << "receiver";
  EXPECT_EQ(r.second, 0) << "sender";
}

TEST(IbVerbs, OddOverlappingAndBusyRegistrations) {
  REQUIRE_RXE(1);
  expectBothSidesPass(oddRegistrationSide, std::chrono::seconds(90));
}

// A caller that skips regMr (NCCL never does; tools do) gets each buffer registered for its request alone, so a
// buffer freed and mapped again at the same address between two messages is read and written where it is now. A
// registration kept from the first message pinned the old pages: the receiver's new buffer stayed unwritten and the
// sender's new bytes were never read, while both requests completed.
constexpr size_t kRemappedBytes = 1 << 20;

unsigned char* mapAgainAt(void* address) {
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | (address != nullptr ? MAP_FIXED_NOREPLACE : 0);
  void* mapped = mmap(address, kRemappedBytes, PROT_READ | PROT_WRITE, flags, -1, 0);
  return mapped == MAP_FAILED ? nullptr : static_cast<unsigned char*>(mapped);
}

int remappedBufferSide(const Channel& channel, bool receiver) {
  Peer peer;
  void *comm = nullptr, *listenComm = nullptr;
  if (int failed = openSide(channel, receiver, &peer, &comm, &listenComm)) return failed;
  void* address = nullptr;
  for (int round = 0; round < 3; ++round) {
    unsigned char* buffer = mapAgainAt(address);
    CHILD_EXPECT(buffer != nullptr && (address == nullptr || buffer == address), "could not map %p again", address);
    address = buffer;
    const auto fill = static_cast<unsigned char>(0x11 * (round + 1));
    std::memset(buffer, receiver ? 0 : fill, kRemappedBytes);
    void* request = nullptr;
    if (receiver) {
      void* data = buffer;
      size_t size = kRemappedBytes;
      int tag = round;
      CHILD_CHECK(peer.postRecv(comm, 1, &data, &size, &tag, nullptr, &request));
    } else {
      CHILD_CHECK(peer.postSend(comm, buffer, kRemappedBytes, round, nullptr, &request));
    }
    int sizes[64] = {};
    CHILD_CHECK(peer.wait(request, sizes));
    if (receiver) {
      CHILD_EXPECT(sizes[0] == static_cast<int>(kRemappedBytes), "round %d: received %d bytes", round, sizes[0]);
      size_t wrong = 0;
      for (size_t i = 0; i < kRemappedBytes; ++i) wrong += buffer[i] != fill ? 1 : 0;
      CHILD_EXPECT(wrong == 0, "round %d: %zu of %zu bytes are not the sender's 0x%02x (the first is 0x%02x)", round,
                   wrong, kRemappedBytes, fill, buffer[0]);
    }
    munmap(buffer, kRemappedBytes);
  }
  if (receiver) {
    signalStep(channel);
    CHILD_CHECK(peer.net->closeRecv(comm));
    CHILD_CHECK(peer.net->closeListen(listenComm));
  } else {
    CHILD_EXPECT(awaitStep(channel), "the receiver did not finish");
    CHILD_CHECK(peer.net->closeSend(comm));
  }
  return 0;
}

TEST(IbVerbs, BuffersWithoutAHandleAreUsedWhereTheyAreNow) {
  REQUIRE_RXE(1);
  expectBothSidesPass(remappedBufferSide, std::chrono::seconds(60));
}

// 64 connections between two processes, used interleaved: each carries only its own messages.
constexpr int kManyComms = 64;
int manyCommsSide(const Channel& channel, bool receiver) {
  Peer peer;
  CHILD_EXPECT(peer.load(NNS_IB_PLUGIN_PATH), "load: %s", peer.error.c_str());
  std::vector<void*> comms(kManyComms, nullptr), listens(kManyComms, nullptr), mhs(kManyComms, nullptr);
  auto start = Clock::now();
  for (int i = 0; i < kManyComms; ++i) {
    if (receiver) {
      CHILD_CHECK(peer.acceptFrom(channel, 0, &comms[i], &listens[i]));
    } else {
      CHILD_CHECK(peer.connectTo(channel, 0, &comms[i]));
    }
  }
  double connectSeconds = std::chrono::duration<double>(Clock::now() - start).count();
  const size_t bytes = 8192;
  std::vector<unsigned char> buffer(bytes * kManyComms);
  for (int i = 0; i < kManyComms; ++i)
    CHILD_CHECK(
        peer.net->regMr(comms[i], buffer.data() + static_cast<size_t>(i) * bytes, bytes, NCCL_PTR_HOST, &mhs[i]));
  for (int round = 0; round < 3; ++round) {
    std::vector<void*> requests(kManyComms, nullptr);
    // Posted in an order that differs per round, so no connection can lean on another's progress.
    for (int k = 0; k < kManyComms; ++k) {
      int i = (k * 37 + round * 11) % kManyComms;
      unsigned char* data = buffer.data() + static_cast<size_t>(i) * bytes;
      size_t size = bytes - static_cast<size_t>(i) * 17 - static_cast<size_t>(round);
      if (receiver) {
        std::memset(data, 0, bytes);
        void* d = data;
        size_t capacity = bytes;
        int tag = i;
        void* mh = mhs[i];
        CHILD_CHECK(peer.net->irecv(comms[i], 1, &d, &capacity, &tag, &mh, nullptr, &requests[i]));
        CHILD_EXPECT(requests[i] != nullptr, "comm %d could not post its receive", i);
      } else {
        for (size_t b = 0; b < size; ++b) data[b] = patternByte(b, static_cast<uint64_t>(i * 3 + round));
        CHILD_CHECK(peer.postSend(comms[i], data, size, i, mhs[i], &requests[i]));
      }
    }
    for (int i = kManyComms - 1; i >= 0; --i) {
      int reported[64] = {};
      CHILD_CHECK(peer.wait(requests[i], reported));
      size_t size = bytes - static_cast<size_t>(i) * 17 - static_cast<size_t>(round);
      CHILD_EXPECT(reported[0] == static_cast<int>(size), "comm %d round %d: size %d, expected %zu", i, round,
                   reported[0], size);
      if (receiver) {
        const unsigned char* data = buffer.data() + static_cast<size_t>(i) * bytes;
        for (size_t b = 0; b < size; ++b)
          CHILD_EXPECT(data[b] == patternByte(b, static_cast<uint64_t>(i * 3 + round)),
                       "comm %d round %d byte %zu is another's", i, round, b);
      }
    }
  }
  if (receiver) std::printf("ib-test: %d connections in %.2f s, 3 rounds each verified\n", kManyComms, connectSeconds);
  signalStep(channel);
  CHILD_EXPECT(awaitStep(channel), "the peer did not finish");
  for (int i = 0; i < kManyComms; ++i) {
    CHILD_CHECK(peer.net->deregMr(comms[i], mhs[i]));
    CHILD_CHECK(receiver ? peer.net->closeRecv(comms[i]) : peer.net->closeSend(comms[i]));
    if (listens[i] != nullptr) CHILD_CHECK(peer.net->closeListen(listens[i]));
  }
  return 0;
}

TEST(IbVerbs, SixtyFourConnectionsCarryOnlyTheirOwnMessages) {
  REQUIRE_RXE(1);
  expectBothSidesPass(manyCommsSide, std::chrono::seconds(120));
}

// The sender closes its comm with sends in flight and receives still waiting for it: closeSend returns, and the
// receiver's pending receive fails within a bound (the sender's process lives on, so only the close tells).
int closingSender(const Channel& channel) {
  Peer peer;
  CHILD_EXPECT(peer.load(NNS_IB_PLUGIN_PATH), "load: %s", peer.error.c_str());
  void* comm = nullptr;
  CHILD_CHECK(peer.connectTo(channel, 0, &comm));
  std::vector<unsigned char> buffer(1 << 20, 0x33);
  void* mh = nullptr;
  CHILD_CHECK(peer.net->regMr(comm, buffer.data(), buffer.size(), NCCL_PTR_HOST, &mh));
  CHILD_EXPECT(awaitStep(channel), "the receiver did not post");
  for (int i = 0; i < 2; ++i) {
    void* request = nullptr;
    CHILD_CHECK(peer.postSend(comm, buffer.data(), buffer.size(), 9, mh, &request));
  }
  // Closed with the sends possibly in flight; the registration outlives the comm and is released after it.
  CHILD_CHECK(peer.net->closeSend(comm));
  CHILD_CHECK(peer.net->deregMr(comm, mh));
  CHILD_EXPECT(awaitStep(channel), "the receiver did not finish");
  return 0;
}

int receiverOfClosingSender(const Channel& channel) {
  Peer peer;
  CHILD_EXPECT(peer.load(NNS_IB_PLUGIN_PATH), "load: %s", peer.error.c_str());
  void *comm = nullptr, *listenComm = nullptr;
  CHILD_CHECK(peer.acceptFrom(channel, 0, &comm, &listenComm));
  std::vector<unsigned char> buffer(4 << 20);
  void* mh = nullptr;
  CHILD_CHECK(peer.net->regMr(comm, buffer.data(), buffer.size(), NCCL_PTR_HOST, &mh));
  void* requests[4] = {};
  for (int i = 0; i < 4; ++i) {
    void* data = buffer.data() + (static_cast<size_t>(i) << 20);
    size_t size = 1 << 20;
    int tag = 9;
    CHILD_CHECK(peer.postRecv(comm, 1, &data, &size, &tag, &mh, &requests[i]));
  }
  signalStep(channel);
  auto start = Clock::now();
  ncclResult_t result = ncclSuccess;
  int reported[64] = {};
  for (int i = 0; i < 4 && result == ncclSuccess; ++i)
    result = peer.wait(requests[i], reported, std::chrono::seconds(20));
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("ib-test: receives of a sender that closed: result %d after %.2f s\n", static_cast<int>(result), seconds);
  signalStep(channel);
  CHILD_EXPECT(result != ncclSuccess && result != ncclTimeout, "the receives ended with %d", static_cast<int>(result));
  CHILD_EXPECT(seconds < 10.0, "the closed sender was noticed only after %.2f s", seconds);
  peer.net->deregMr(comm, mh);
  CHILD_CHECK(peer.net->closeRecv(comm));
  CHILD_CHECK(peer.net->closeListen(listenComm));
  return 0;
}

TEST(IbVerbs, CloseSendWithRequestsInFlightFailsTheReceiverWithinBound) {
  REQUIRE_RXE(1);
  PairResult r =
      runPair(baseEnv("=rxe0"), receiverOfClosingSender, baseEnv("=rxe0"), closingSender, std::chrono::seconds(90));
  EXPECT_FALSE(r.timedOut);
  EXPECT_EQ(r.first, 0) << "receiver";
  EXPECT_EQ(r.second, 0) << "sender";
}

// ---- a peer that closes right after its last message ---------------------------------------------------------------
// A rank closes its comms as soon as its last request completes, so the other side may see that close on the side
// channel before the completion of its own last request: it polled an empty CQ, was descheduled (on a loaded host),
// and then peeked. The peek double (peek_hook_double.hpp) holds the first peek made while the request is pending until
// the peer has finished and closed, which makes that order certain. The request finished on both ends, so it must
// complete, not fail with "the peer closed the connection". `seer` is the side whose peek is held.
constexpr size_t kLastMessageBytes = 16 << 20;  // long enough on the wire for the first test() to find it pending
constexpr int kOrderMissed = 12;  // the seer's exit: its first test() found the request complete, so no peek was held

struct LastMessageEnd {
  Peer peer;
  void *comm = nullptr, *listenComm = nullptr, *mh = nullptr, *request = nullptr;
  std::vector<unsigned char> buffer = std::vector<unsigned char>(kLastMessageBytes);
};

// Connects and registers, and the receiver posts its receive.
int openLastMessageEnd(const Channel& channel, bool receiver, LastMessageEnd* end) {
  if (int failed = openSide(channel, receiver, &end->peer, &end->comm, &end->listenComm)) return failed;
  const ncclNet_v12_t* net = end->peer.net;
  if (!receiver)
    for (size_t i = 0; i < end->buffer.size(); ++i) end->buffer[i] = patternByte(i, 23);
  CHILD_CHECK(net->regMr(end->comm, end->buffer.data(), end->buffer.size(), NCCL_PTR_HOST, &end->mh));
  if (receiver) {
    void* data = end->buffer.data();
    size_t size = end->buffer.size();
    int tag = 23;
    CHILD_CHECK(end->peer.postRecv(end->comm, 1, &data, &size, &tag, &end->mh, &end->request));
  }
  return 0;
}

// The side that finishes first: completes its request and closes its comm at once, then says so.
int closeAfterLastMessage(const Channel& channel, bool receiver) {
  LastMessageEnd end;
  if (int failed = openLastMessageEnd(channel, receiver, &end)) return failed;
  if (receiver) {
    signalStep(channel);  // posted
  } else {
    CHILD_EXPECT(awaitStep(channel), "the receiver did not get ready");
    CHILD_CHECK(end.peer.postSend(end.comm, end.buffer.data(), end.buffer.size(), 23, end.mh, &end.request));
  }
  CHILD_CHECK(end.peer.wait(end.request, nullptr, std::chrono::seconds(20)));
  if (receiver) {
    CHILD_CHECK(end.peer.net->closeRecv(end.comm));
  } else {
    CHILD_CHECK(end.peer.net->closeSend(end.comm));
  }
  CHILD_CHECK(end.peer.net->deregMr(end.comm, end.mh));
  signalStep(channel);  // closed
  CHILD_EXPECT(awaitStep(channel), "the other side did not finish");
  if (end.listenComm != nullptr) CHILD_CHECK(end.peer.net->closeListen(end.listenComm));
  return 0;
}

// The side whose first peek is held until the other has closed.
int seeTheCloseBeforeTheCompletion(const Channel& channel, bool receiver) {
  LastMessageEnd end;
  if (int failed = openLastMessageEnd(channel, receiver, &end)) return failed;
  if (!receiver) {
    CHILD_EXPECT(awaitStep(channel), "the receiver did not post");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // its FIFO entry lands; the 100 ms check falls due
    CHILD_CHECK(end.peer.postSend(end.comm, end.buffer.data(), end.buffer.size(), 23, end.mh, &end.request));
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the side channel's 100 ms check falls due
  }
  armPeekHook([&channel] { awaitStep(channel); });  // until the other side has finished and closed
  if (receiver) signalStep(channel);                // the sender may send
  auto start = Clock::now();
  ncclResult_t result = end.peer.wait(end.request, nullptr, std::chrono::seconds(20));
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const bool held = peekHooksRun.load() > 0;
  if (!held) awaitStep(channel);  // the other side's "closed", which the held peek would have taken
  std::printf("ib-test: %s whose peer closed right after it: result %d after %.2f s (peek held: %s)\n",
              receiver ? "receive" : "send", static_cast<int>(result), seconds, held ? "yes" : "no");
  signalStep(channel);
  CHILD_EXPECT(result == ncclSuccess, "the %s that completed on the peer failed with %d", receiver ? "receive" : "send",
               static_cast<int>(result));
  if (receiver)
    for (size_t i = 0; i < end.buffer.size(); ++i)
      CHILD_EXPECT(end.buffer[i] == patternByte(i, 23), "byte %zu of the message is wrong", i);
  CHILD_CHECK(end.peer.net->deregMr(end.comm, end.mh));
  if (receiver) {
    CHILD_CHECK(end.peer.net->closeRecv(end.comm));
    CHILD_CHECK(end.peer.net->closeListen(end.listenComm));
  } else {
    CHILD_CHECK(end.peer.net->closeSend(end.comm));
  }
  return held ? 0 : kOrderMissed;
}

// Runs the pair until the held peek happened (at most 3 times): a sender descheduled between its isend and its first
// test() on a loaded host finds the write complete there, and nothing was tested.
void expectTheCloseSeenFirstPasses(bool seerReceives) {
  const Env receiverEnv = baseEnv(seerReceives ? "=rxe0" : "=rxe1");
  for (int attempt = 1;; ++attempt) {
    PairResult r = runPair(
        receiverEnv,
        [=](const Channel& c) {
          return seerReceives ? seeTheCloseBeforeTheCompletion(c, true) : closeAfterLastMessage(c, true);
        },
        baseEnv("=rxe0"),
        [=](const Channel& c) {
          return seerReceives ? closeAfterLastMessage(c, false) : seeTheCloseBeforeTheCompletion(c, false);
        },
        std::chrono::seconds(60));
    const int seer = seerReceives ? r.first : r.second;
    if (!r.timedOut && seer == kOrderMissed && attempt < 3) continue;
    EXPECT_FALSE(r.timedOut);
    EXPECT_NE(seer, kOrderMissed) << "3 times the first test() found the request complete: the order was never tested";
    EXPECT_EQ(r.first, 0) << "receiver";
    EXPECT_EQ(r.second, 0) << "sender";
    return;
  }
}

TEST(IbVerbs, ASendWhoseReceiverClosedRightAfterTakingItCompletes) {
  REQUIRE_RXE(2);
  expectTheCloseSeenFirstPasses(false);
}

TEST(IbVerbs, AReceiveWhoseSenderClosedRightAfterSendingCompletes) {
  REQUIRE_RXE(1);
  expectTheCloseSeenFirstPasses(true);
}

// ---- traffic class: the communicator's, in both directions ---------------------------------------------------------
// The sender's communicator asks for traffic class 104 (ncclNetCommConfig_t::trafficClass); the receiver's has none
// and NCCL_IB_TC is unset there. As in NCCL's IB, the connection must use the sender's class both ways: the
// receiver's FIFO writes and ACKs travel in it too (on a RoCE fabric where only that class is lossless, the other
// direction would otherwise run in a lossy one). Seen on the wire: the IP TOS byte of every RoCE v2 packet on veth0.
struct RoceTosCounts {
  std::map<std::string, std::map<int, long>> bySource;  // source address -> TOS -> packets
};

// Sniffs RoCE v2 (UDP 4791) packets on `interface` until `stop`; needs root (the VM's tests run as root).
void sniffRoceTos(const char* interface, const std::atomic<bool>& stop, RoceTosCounts* counts, std::string* error) {
  // ETH_P_ALL: only taps of every protocol see what the interface sends, not just what it receives.
  int fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
  if (fd < 0) {
    *error = std::string("AF_PACKET socket: ") + std::strerror(errno);
    return;
  }
  sockaddr_ll address{};
  address.sll_family = AF_PACKET;
  address.sll_protocol = htons(ETH_P_ALL);
  address.sll_ifindex = static_cast<int>(if_nametoindex(interface));
  if (address.sll_ifindex == 0 || bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    *error = std::string("bind to ") + interface + ": " + std::strerror(errno);
    close(fd);
    return;
  }
  unsigned char frame[2048];
  while (!stop.load()) {
    pollfd waiter{fd, POLLIN, 0};
    if (poll(&waiter, 1, 50) <= 0) continue;
    ssize_t n = recv(fd, frame, sizeof(frame), 0);
    if (n < 14 + 20 + 8 || frame[12] != 0x08 || frame[13] != 0x00) continue;  // IPv4 frames only
    const unsigned char* ip = frame + 14;
    size_t headerBytes = static_cast<size_t>(ip[0] & 0x0f) * 4;
    if (ip[9] != 17 || static_cast<size_t>(n) < 14 + headerBytes + 8) continue;
    const unsigned char* udp = ip + headerBytes;
    if (((udp[2] << 8) | udp[3]) != 4791) continue;
    char source[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, ip + 12, source, sizeof(source));
    ++counts->bySource[source][ip[1]];
  }
  close(fd);
}

// One message of the whole `buffer` (registered as `mh`) with `tag`, sent or received and waited for; the sizes test
// reported land in `sizes` (room for 64). 0, or the CHILD_ code of what failed.
int moveOneMessage(Peer& peer, void* comm, bool receiver, std::vector<unsigned char>& buffer, void* mh, int tag,
                   int* sizes) {
  void* request = nullptr;
  if (receiver) {
    void* data = buffer.data();
    size_t size = buffer.size();
    CHILD_CHECK(peer.postRecv(comm, 1, &data, &size, &tag, &mh, &request));
  } else {
    CHILD_CHECK(peer.postSend(comm, buffer.data(), buffer.size(), tag, mh, &request));
  }
  CHILD_CHECK(peer.wait(request, sizes));
  return 0;
}

// Both sides say they are done; then `mh` is deregistered and the comms closed. 0, or the CHILD_ code of what failed.
int closeAfterThePeer(const Channel& channel, Peer& peer, bool receiver, void* comm, void* listenComm, void* mh) {
  signalStep(channel);
  CHILD_EXPECT(awaitStep(channel), "the peer did not finish");
  CHILD_CHECK(peer.net->deregMr(comm, mh));
  CHILD_CHECK(receiver ? peer.net->closeRecv(comm) : peer.net->closeSend(comm));
  if (listenComm != nullptr) CHILD_CHECK(peer.net->closeListen(listenComm));
  return 0;
}

int trafficClassSide(const Channel& channel, bool receiver) {
  void* library = dlopen(NNS_IB_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  CHILD_EXPECT(library != nullptr, "dlopen: %s", dlerror());
  Peer peer;
  peer.net = static_cast<const ncclNet_v12_t*>(dlsym(library, "ncclNetPlugin_v12"));
  CHILD_EXPECT(peer.net != nullptr, "no ncclNetPlugin_v12");
  ncclNetCommConfig_v12_t config{};
  config.trafficClass = receiver ? NCCL_NET_TRAFFIC_CLASS_UNDEF : 104;
  CHILD_CHECK(peer.net->init(&peer.ctx, 0x1c, &config, logger, nullptr));
  void *comm = nullptr, *listenComm = nullptr;
  if (receiver) {
    CHILD_CHECK(peer.acceptFrom(channel, 0, &comm, &listenComm));
  } else {
    CHILD_CHECK(peer.connectTo(channel, 0, &comm));
  }
  std::vector<unsigned char> buffer(65536, 0x42);
  void* mh = nullptr;
  CHILD_CHECK(peer.net->regMr(comm, buffer.data(), buffer.size(), NCCL_PTR_HOST, &mh));
  for (int round = 0; round < 20; ++round) {
    int reported[64] = {};
    if (int failed = moveOneMessage(peer, comm, receiver, buffer, mh, 3, reported)) return failed;
  }
  return closeAfterThePeer(channel, peer, receiver, comm, listenComm, mh);
}

TEST(IbVerbs, TheSendersTrafficClassAppliesToBothDirections) {
  REQUIRE_RXE(2);
  if (std::getenv("NNS_IB_TEST_IN_VM") == nullptr) GTEST_SKIP() << "sniffs veth0: only inside the rxe VM";
  std::atomic<bool> stop{false};
  RoceTosCounts counts;
  std::string sniffError;
  std::thread sniffer(sniffRoceTos, "veth0", std::cref(stop), &counts, &sniffError);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // Receiver on rxe1 (10.0.0.2), sender on rxe0 (10.0.0.1): both directions cross veth0.
  PairResult r = runPair(
      baseEnv("=rxe1"), [](const Channel& c) { return trafficClassSide(c, true); }, baseEnv("=rxe0"),
      [](const Channel& c) { return trafficClassSide(c, false); }, std::chrono::seconds(90));
  stop = true;
  sniffer.join();
  ASSERT_TRUE(sniffError.empty()) << sniffError;
  EXPECT_FALSE(r.timedOut);
  EXPECT_EQ(r.first, 0) << "receiver";
  EXPECT_EQ(r.second, 0) << "sender";
  for (const char* source : {"10.0.0.1", "10.0.0.2"}) {
    const auto& byTos = counts.bySource[source];
    std::string seen;
    for (const auto& [tos, packets] : byTos) seen += " tos " + std::to_string(tos) + ": " + std::to_string(packets);
    std::printf("ib-test: RoCE packets from %s:%s\n", source, seen.c_str());
    EXPECT_FALSE(byTos.empty()) << "no RoCE packet from " << source << " seen on veth0";
    for (const auto& [tos, packets] : byTos)
      EXPECT_EQ(tos, 104) << packets << " RoCE packet(s) from " << source << " in traffic class " << tos;
  }
}

void runCommand(const std::string& command) {
  int status = std::system(command.c_str());
  if (status != 0) std::fprintf(stderr, "ib-test: '%s' exited %d\n", command.c_str(), status);
}

// Brings veth0 back up with the policy route the kernel dropped with it, and waits (10 s at most) until rxe0's port
// is active again: the processes of whatever runs next skip a port that is not, as NCCL does, and find no device.
void restoreVeth0() {
  runCommand("/sbin/ip link set veth0 up");
  runCommand("/sbin/ip route replace 10.0.0.2 dev veth0 src 10.0.0.1 table 100");
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  std::string state;
  while (Clock::now() < deadline) {
    std::ifstream file("/sys/class/infiniband/rxe0/ports/1/state");  // "4: ACTIVE"
    std::getline(file, state);
    if (state.find("ACTIVE") != std::string::npos) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::fprintf(stderr, "ib-test: rxe0 port 1 is '%s' 10 s after veth0 came back up\n", state.c_str());
}

// rxe0's GID table holds ::ffff:10.0.0.<host> (as sysfs writes it), or `timeout` passed.
bool rxe0HasIpv4Gid(int host, std::chrono::seconds timeout) {
  char wanted[64];
  std::snprintf(wanted, sizeof(wanted), "0000:0000:0000:0000:0000:ffff:0a00:%04x", host);
  const auto deadline = Clock::now() + timeout;
  do {
    for (int index = 0; index < 16; ++index) {
      std::ifstream file("/sys/class/infiniband/rxe0/ports/1/gids/" + std::to_string(index));
      std::string gid;
      if (std::getline(file, gid) && gid == wanted) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (Clock::now() < deadline);
  return false;
}

// veth0 from 10.0.0.<from> to 10.0.0.<to>, with the policy routes that keep traffic between the two rxe devices on
// the veth wire (guest.sh) following the address.
void moveVeth0Address(int from, int to) {
  const std::string a = "10.0.0." + std::to_string(from), b = "10.0.0." + std::to_string(to);
  // Deleted first: deleting a primary address deletes the secondaries of its subnet with it.
  runCommand("/sbin/ip addr del " + a + "/24 dev veth0");
  runCommand("/sbin/ip addr add " + b + "/24 dev veth0");
  runCommand("/sbin/ip route replace 10.0.0.2 dev veth0 src " + b + " table 100");
  runCommand("/sbin/ip rule del pref 10 iif lo to " + a + " lookup 101");
  runCommand("/sbin/ip rule add pref 10 iif lo to " + b + " lookup 101");
  runCommand("/sbin/ip route del " + a + " dev veth1 table 101");
  runCommand("/sbin/ip route replace " + b + " dev veth1 src 10.0.0.2 table 101");
}

// A RoCE port's address moved after the plugin's init (a DHCP renewal, an address added by hand): the GID chosen at
// init named an address the host no longer had, and every later connection's packets went to it and were lost (the
// QP's retries ran out). Each connection now chooses its GID again, as NCCL does.
TEST(IbVerbs, ARoceAddressMovedAfterInitIsTheNextConnections) {
  REQUIRE_RXE(2);
  if (std::getenv("NNS_IB_TEST_IN_VM") == nullptr) GTEST_SKIP() << "readdresses veth0: only inside the rxe VM";
  ASSERT_TRUE(rxe0HasIpv4Gid(1, std::chrono::seconds(5))) << "rxe0 has no GID for 10.0.0.1";
  auto side = [](const Channel& channel, bool receiver) {
    Peer peer;
    CHILD_EXPECT(peer.load(NNS_IB_PLUGIN_PATH), "load: %s", peer.error.c_str());
    if (!receiver) {
      moveVeth0Address(1, 3);
      CHILD_EXPECT(rxe0HasIpv4Gid(3, std::chrono::seconds(10)), "rxe0 has no GID for 10.0.0.3 10 s after the move");
    }
    void *comm = nullptr, *listenComm = nullptr;
    if (receiver) {
      CHILD_CHECK(peer.acceptFrom(channel, 0, &comm, &listenComm));
    } else {
      CHILD_CHECK(peer.connectTo(channel, 0, &comm));
    }
    std::vector<unsigned char> buffer(65536);
    for (size_t i = 0; i < buffer.size(); ++i) buffer[i] = receiver ? 0 : patternByte(i, 3);
    void* mh = nullptr;
    CHILD_CHECK(peer.net->regMr(comm, buffer.data(), buffer.size(), NCCL_PTR_HOST, &mh));
    int sizes[64] = {};
    if (int failed = moveOneMessage(peer, comm, receiver, buffer, mh, 5, sizes)) return failed;
    if (receiver) {
      size_t wrong = 0;
      for (size_t i = 0; i < buffer.size(); ++i) wrong += buffer[i] != patternByte(i, 3) ? 1 : 0;
      CHILD_EXPECT(sizes[0] == 65536 && wrong == 0, "received %d bytes, %zu of them wrong", sizes[0], wrong);
    }
    return closeAfterThePeer(channel, peer, receiver, comm, listenComm, mh);
  };
  PairResult r = runPair(
      baseEnv("=rxe1"), [&](const Channel& c) { return side(c, true); }, baseEnv("=rxe0"),
      [&](const Channel& c) { return side(c, false); }, std::chrono::seconds(60));
  moveVeth0Address(3, 1);
  EXPECT_TRUE(rxe0HasIpv4Gid(1, std::chrono::seconds(10))) << "rxe0 has no GID for 10.0.0.1 again";
  EXPECT_FALSE(r.timedOut);
  EXPECT_EQ(r.first, 0) << "receiver";
  EXPECT_EQ(r.second, 0) << "sender";
}

TEST(IbVerbs, ReceiverKilledMidTransferFailsSenderWithinBound) {
  REQUIRE_RXE(2);
  pid_t receiverPid = 0;
  StreamingSignal streaming;
  PairResult r = runPair(
      baseEnv("=rxe1"),
      [&](const Channel& c) {
        streamUntilError(c, true, "rxe1", 30, streaming);
        return 0;
      },
      baseEnv("=rxe0"), [&](const Channel& c) { return streamUntilError(c, false, "rxe0", 20, streaming); },
      std::chrono::seconds(60), &receiverPid, nullptr,
      [&] {
        // Once the stream runs, kill the receiver outright (no close, no goodbye).
        streaming.waitForBoth(std::chrono::seconds(60));
        kill(receiverPid, SIGKILL);
      });
  EXPECT_FALSE(r.timedOut);
  EXPECT_EQ(r.second, 0) << "the sender must fail with an error naming the peer within 20 s (20: no error, 21: hang)";
}

TEST(IbVerbs, SenderKilledMidTransferFailsReceiverWithinBound) {
  REQUIRE_RXE(2);
  pid_t senderPid = 0;
  StreamingSignal streaming;
  PairResult r = runPair(
      baseEnv("=rxe1"), [&](const Channel& c) { return streamUntilError(c, true, "rxe1", 20, streaming); },
      baseEnv("=rxe0"),
      [&](const Channel& c) {
        streamUntilError(c, false, "rxe0", 30, streaming);
        return 0;
      },
      std::chrono::seconds(60), nullptr, &senderPid,
      [&] {
        streaming.waitForBoth(std::chrono::seconds(60));
        kill(senderPid, SIGKILL);
      });
  EXPECT_FALSE(r.timedOut);
  EXPECT_EQ(r.first, 0) << "the receiver must fail with an error naming the peer within 20 s (20: no error, 21: hang)";
}

TEST(IbVerbs, LinkDownMidTransferFailsWithinBound) {
  REQUIRE_RXE(2);
  if (std::getenv("NNS_IB_TEST_IN_VM") == nullptr) GTEST_SKIP() << "brings veth0 down: only inside the rxe VM";
  StreamingSignal streaming;
  PairResult r = runPair(
      baseEnv("=rxe1"), [&](const Channel& c) { return streamUntilError(c, true, "rxe1", 25, streaming); },
      baseEnv("=rxe0"), [&](const Channel& c) { return streamUntilError(c, false, "rxe0", 25, streaming); },
      std::chrono::seconds(90), nullptr, nullptr,
      [&] {
        streaming.waitForBoth(std::chrono::seconds(60));
        runCommand("/sbin/ip link set veth0 down");
      });
  restoreVeth0();
  EXPECT_FALSE(r.timedOut);
  EXPECT_EQ(r.first, 0) << "receiver: 20 = no error, 21 = hang past the bound";
  EXPECT_EQ(r.second, 0) << "sender: 20 = no error, 21 = hang past the bound";
}

// A link that goes down while both sides wait with no work request on the wire: the HCA has nothing to fail, the side
// channel (over loopback here) stays up, and the peer is alive. The receiver waits on a receive the sender has no
// message for (tag 6), the sender on a receive for its tag 5. Each fails by the port-down bound (twice the QP retry
// bound plus a second: 2.07 s at timeout 14), naming the port, instead of waiting for good; the side channel's
// keepalive, which would find the lost link too, is set past the test's end. The bound also covers soft-RoCE's send
// path, which can stall without an error when the link drops: LinkDownMidTransferFailsWithinBound's receiver hung
// once in CI (under ASan), and 1 run in 24 here with the VM slowed by two busy loops on the host.
TEST(IbVerbs, APortDownPastItsBoundFailsCommsThatWaitWithNothingOnTheWire) {
  REQUIRE_RXE(2);
  if (std::getenv("NNS_IB_TEST_IN_VM") == nullptr) GTEST_SKIP() << "brings veth0 down: only inside the rxe VM";
  // Waits on `request` (or on isend's NULL answers) until an error; returns the seconds from the link going down
  // (told by the sender over the channel, or measured by it) to the error, or -1 past 20 s.
  auto waitForError = [](const Peer& peer, const Channel& c, bool receiver, void* comm, void* request, void* mh,
                         unsigned char* data, Clock::time_point downAt) {
    bool told = !receiver;
    ncclResult_t result = ncclSuccess;
    const auto until = Clock::now() + std::chrono::seconds(30);
    while (result == ncclSuccess && Clock::now() < until) {
      if (!told) {
        pollfd waiter{c.fd, POLLIN, 0};
        char down = 0;
        if (poll(&waiter, 1, 0) == 1 && c.recvValue(&down)) told = true, downAt = Clock::now();
      }
      if (receiver) {
        int done = 0, sizes[1] = {};
        result = peer.net->test(request, &done, sizes);
        if (done) return -2.0;  // nothing was sent for this receive
      } else {
        void* sent = nullptr;
        result = peer.net->isend(comm, data, 64, 5, mh, nullptr, &sent);
        if (sent != nullptr) return -2.0;  // the receiver posted tag 6 only
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (result == ncclSuccess || !told) return -1.0;
    return std::chrono::duration<double>(Clock::now() - downAt).count();
  };
  auto env = [](const char* hca) { return baseEnvWith(hca, "NNS_IB_PEER_TIMEOUT_MS", "60000"); };
  // Each side's error came by the bound (-1: never, -2: its request completed or its send was accepted), naming
  // the port.
  auto failedByTheBound = [](double seconds, const char* side, const char* port) {
    std::printf("ib-test: %s failed %.2f s after the link went down\n", side, seconds);
    CHILD_EXPECT(seconds >= 1.9 && seconds < 10, "%s failed %.2f s after the link went down, not by the 2.07 s bound",
                 side, seconds);
    CHILD_EXPECT(warnedAbout(std::string("port 1 of ") + port + " down for"), "no WARN named the port that was down");
    return 0;
  };
  PairResult r = runPair(
      env("=rxe1"),
      [&](const Channel& c) {
        Peer peer;
        void *comm = nullptr, *listenComm = nullptr;
        if (int failed = openSide(c, true, &peer, &comm, &listenComm)) return failed;
        std::vector<unsigned char> buffer(4096);
        void* mh = nullptr;
        CHILD_CHECK(peer.net->regMr(comm, buffer.data(), buffer.size(), NCCL_PTR_HOST, &mh));
        void* data = buffer.data();
        size_t size = buffer.size();
        int tag = 5;
        void* request = nullptr;
        int done = 0, sizes[1] = {};
        CHILD_CHECK(peer.net->irecv(comm, 1, &data, &size, &tag, &mh, nullptr, &request));
        for (auto until = Clock::now() + std::chrono::seconds(20); !done && Clock::now() < until;)
          CHILD_CHECK(peer.net->test(request, &done, sizes));
        CHILD_EXPECT(done && sizes[0] == 64, "the first message did not arrive");
        tag = 6;
        CHILD_CHECK(peer.net->irecv(comm, 1, &data, &size, &tag, &mh, nullptr, &request));
        char posted = 1;
        CHILD_EXPECT(c.sendValue(posted), "could not tell the sender");
        double seconds = waitForError(peer, c, true, comm, request, mh, nullptr, Clock::now());
        return failedByTheBound(seconds, "receiver on rxe1", "rxe1");
      },
      env("=rxe0"),
      [&](const Channel& c) {
        Peer peer;
        void* comm = nullptr;
        if (int failed = openSide(c, false, &peer, &comm, nullptr)) return failed;
        std::vector<unsigned char> buffer(4096, 7);
        void* mh = nullptr;
        CHILD_CHECK(peer.net->regMr(comm, buffer.data(), buffer.size(), NCCL_PTR_HOST, &mh));
        void* request = nullptr;
        for (auto until = Clock::now() + std::chrono::seconds(20); request == nullptr && Clock::now() < until;)
          CHILD_CHECK(peer.net->isend(comm, buffer.data(), 64, 5, mh, nullptr, &request));
        int done = 0, sizes[1] = {};
        for (auto until = Clock::now() + std::chrono::seconds(20); request != nullptr && !done && Clock::now() < until;)
          CHILD_CHECK(peer.net->test(request, &done, sizes));
        CHILD_EXPECT(done, "the first message was not sent");
        char posted = 0;
        CHILD_EXPECT(c.recvValue(&posted), "the receiver never posted its second receive");
        // Its FIFO entry (an RDMA WRITE) has landed here once isend sees the slot; give its ACK time to get back.
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        runCommand("/sbin/ip link set veth0 down");
        const auto downAt = Clock::now();
        char down = 1;
        CHILD_EXPECT(c.sendValue(down), "could not tell the receiver");
        double seconds = waitForError(peer, c, false, comm, nullptr, mh, buffer.data(), downAt);
        return failedByTheBound(seconds, "sender on rxe0", "rxe0");
      },
      std::chrono::seconds(90));
  restoreVeth0();
  EXPECT_TRUE(rxe0HasIpv4Gid(1, std::chrono::seconds(10))) << "rxe0 has no GID for 10.0.0.1 again";
  EXPECT_FALSE(r.timedOut);
  EXPECT_EQ(r.first, 0) << "receiver";
  EXPECT_EQ(r.second, 0) << "sender";
}

// The HCA's asynchronous events are read by the calls of a comm that waits (no thread of their own): a port that
// goes down and comes back is logged both times while a sender waits for its receiver, which posts nothing.
// The sender flaps veth0 itself once both sides hold their comm. The test first flapped it 2 s after the fork, from the
// parent, and failed once under ASan in CI (where the VM ran at half this machine's speed) with no output kept: a
// connection not made by then is the likely cause, and no longer possible.
TEST(IbVerbs, APortGoingDownAndUpIsLoggedAsAsynchronousEvents) {
  REQUIRE_RXE(2);
  if (std::getenv("NNS_IB_TEST_IN_VM") == nullptr) GTEST_SKIP() << "brings veth0 down: only inside the rxe VM";
  // A QP timeout of 16 puts the port-down bound (see the test above) at 5.3 s, well past the 1 s flap.
  auto env = [](const char* hca) { return baseEnvWith(hca, "NCCL_IB_TIMEOUT", "16"); };
  PairResult r = runPair(
      env("=rxe1"),
      [](const Channel& c) {
        Peer peer;
        CHILD_EXPECT(peer.load(NNS_IB_PLUGIN_PATH), "load: %s", peer.error.c_str());
        void *comm = nullptr, *listenComm = nullptr;
        CHILD_CHECK(peer.acceptFrom(c, 0, &comm, &listenComm));
        char accepted = 1;
        CHILD_EXPECT(c.sendValue(accepted), "could not tell the sender the comm is accepted");
        char done = 0;
        c.recvValue(&done);  // the sender says when it has seen both events, or gave up
        CHILD_CHECK(peer.net->closeRecv(comm));
        CHILD_CHECK(peer.net->closeListen(listenComm));
        return 0;
      },
      env("=rxe0"),
      [](const Channel& c) {
        Peer peer;
        CHILD_EXPECT(peer.load(NNS_IB_PLUGIN_PATH), "load: %s", peer.error.c_str());
        void* comm = nullptr;
        CHILD_CHECK(peer.connectTo(c, 0, &comm));
        std::vector<unsigned char> buffer(4096);
        void* mh = nullptr;
        CHILD_CHECK(peer.net->regMr(comm, buffer.data(), buffer.size(), NCCL_PTR_HOST, &mh));
        char accepted = 0;
        CHILD_EXPECT(c.recvValue(&accepted), "the receiver never said it accepted the comm");
        std::thread flap([] {
          runCommand("/sbin/ip link set veth0 down");
          std::this_thread::sleep_for(std::chrono::seconds(1));
          restoreVeth0();
        });
        const char* down = "port error (rxe0 port 1)";
        const char* up = "port active (rxe0 port 1)";
        // The receiver posts nothing: each isend answers "not yet" and looks at the events at most every 100 ms.
        const auto until = Clock::now() + std::chrono::seconds(20);
        void* request = nullptr;
        ncclResult_t sent = ncclSuccess;
        while (sent == ncclSuccess && request == nullptr && Clock::now() < until &&
               !(warnedAbout(down) && warnedAbout(up))) {
          sent = peer.net->isend(comm, buffer.data(), 64, 1, mh, nullptr, &request);
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        flap.join();
        char done = 1;
        c.sendValue(done);
        CHILD_EXPECT(sent == ncclSuccess, "isend failed with %d while the port went down and up", sent);
        CHILD_EXPECT(request == nullptr, "a send completed with no receive posted");
        CHILD_EXPECT(warnedAbout(std::string("asynchronous event ") + down), "no WARN for the port going down");
        CHILD_EXPECT(warnedAbout(std::string("asynchronous event ") + up), "no WARN for the port coming back");
        CHILD_CHECK(peer.net->deregMr(comm, mh));
        CHILD_CHECK(peer.net->closeSend(comm));
        return 0;
      },
      std::chrono::seconds(60));
  EXPECT_FALSE(r.timedOut);
  EXPECT_EQ(r.first, 0) << "receiver";
  EXPECT_EQ(r.second, 0) << "sender: 11 = an event not logged within 20 s";
}

}  // namespace
