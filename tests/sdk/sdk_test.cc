// sdk_test.cc: unit tests of the plugin SDK: handle codec, connect stage, request pool, logging, and the
// down-conversions of NCCL_NET_SDK_EXPORT, driven through in-process test-double plugin classes.
#include <dirent.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nccl_net/sdk.hpp>

namespace sdk = nccl_net::sdk;
using sdk::detail::NetTables;

namespace {

// ---- a host logger that records what the plugin said
// -----------------------------------------------------------------
std::vector<std::string>& logLines() {
  static std::vector<std::string> lines;
  return lines;
}
void recordingLogger(ncclDebugLogLevel level, unsigned long, const char*, int, const char* fmt, ...) {
  char text[2048];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(text, sizeof(text), fmt, args);
  va_end(args);
  logLines().push_back(std::string(level == NCCL_LOG_WARN ? "WARN " : "INFO ") + text);
}
bool logged(const std::string& needle) {
  for (const auto& line : logLines())
    if (line.find(needle) != std::string::npos) return true;
  return false;
}

// ---- test doubles: vendor classes that record how the SDK called them
// ---------------------------------------------------
struct Calls {
  int inits = 0;
  int lastTrafficClass = -100;
  int lastAbi = 0;
  uint64_t lastCommId = 0;
  size_t lastSendSize = 0;
  size_t lastRecvSizes[4] = {};
  void* lastPhandle = reinterpret_cast<void*>(0x1);
  size_t reportSize = 0;  // what test() reports
  int vdevs = 1;          // ndevs getProperties reports
  bool throwInListen = false;
  bool optionalCompletion = false;  // recvCompletionOptional() in the last irecv
  size_t maxP2pBytes = 0;           // what getProperties reports, where not 0
  size_t maxCollBytes = 0;
  bool noName = false;  // getProperties leaves the name NULL
};
Calls calls;

// Test double: a plugin class with every mandatory call and no optional one.
struct RecordingNet {
  static constexpr const char kName[] = "recording";
  ncclResult_t init(const sdk::InitArgs& args, void** ctx) {
    ++calls.inits;
    calls.lastTrafficClass = args.trafficClass;
    calls.lastAbi = args.abiVersion;
    calls.lastCommId = args.commId;
    *ctx = reinterpret_cast<void*>(static_cast<intptr_t>(1000 + calls.inits));
    return ncclSuccess;
  }
  ncclResult_t devices(int* ndev) {
    *ndev = 9;
    return ncclSuccess;
  }
  ncclResult_t getProperties(int dev, ncclNetProperties_v12_t* props) {
    props->name = calls.noName ? nullptr : const_cast<char*>("rec0");
    if (calls.maxP2pBytes != 0) props->maxP2pBytes = calls.maxP2pBytes;
    if (calls.maxCollBytes != 0) props->maxCollBytes = calls.maxCollBytes;
    props->speed = 200000 + dev;
    props->maxRecvs = 8;
    props->forceFlush = 1;
    props->vProps.ndevs = calls.vdevs;
    for (int i = 0; i < std::min(calls.vdevs, NCCL_NET_MAX_DEVS_PER_NIC_V12); ++i) props->vProps.devs[i] = i;
    return ncclSuccess;
  }
  ncclResult_t listen(void* ctx, int, void*, void** listenComm) {
    if (calls.throwInListen) throw std::runtime_error("listen exploded");
    *listenComm = ctx;
    return ncclSuccess;
  }
  ncclResult_t connect(void* ctx, int, void*, void** sendComm, ncclNetDeviceHandle_v12_t**) {
    *sendComm = ctx;  // lets the test see which ctx connect got
    return ncclSuccess;
  }
  ncclResult_t accept(void*, void** recvComm, ncclNetDeviceHandle_v12_t**) {
    *recvComm = reinterpret_cast<void*>(0x2);
    return ncclSuccess;
  }
  ncclResult_t regMr(void*, void*, size_t, int, void** mhandle) {
    *mhandle = reinterpret_cast<void*>(0x3);
    return ncclSuccess;
  }
  ncclResult_t deregMr(void*, void*) { return ncclSuccess; }
  ncclResult_t isend(void*, void*, size_t size, int, void*, void* phandle, void** request) {
    calls.lastSendSize = size;
    calls.lastPhandle = phandle;
    *request = reinterpret_cast<void*>(0x4);
    return ncclSuccess;
  }
  ncclResult_t irecv(void*, int n, void**, size_t* sizes, int*, void**, void**, void** request) {
    calls.optionalCompletion = sdk::recvCompletionOptional();
    for (int i = 0; i < n && i < 4; ++i) calls.lastRecvSizes[i] = sizes[i];
    *request = reinterpret_cast<void*>(0x5);
    return ncclSuccess;
  }
  ncclResult_t test(void*, int* done, sdk::CompletedSizes& sizes) {
    if (!sizes.set(0, calls.reportSize)) return ncclSuccess;
    *done = 1;
    return ncclSuccess;
  }
  ncclResult_t closeSend(void*) { return ncclSuccess; }
  ncclResult_t closeRecv(void*) { return ncclSuccess; }
  ncclResult_t closeListen(void*) { return ncclSuccess; }
};

// Test double: claims GPU memory support without an iflush, which the SDK must refuse.
struct GpuWithoutFlushNet : RecordingNet {
  static constexpr const char kName[] = "gpu-no-flush";
  ncclResult_t getProperties(int, ncclNetProperties_v12_t* props) {
    props->name = const_cast<char*>("gpu0");
    props->ptrSupport = NCCL_PTR_HOST | NCCL_PTR_CUDA;
    return ncclSuccess;
  }
};

// Test double: provides the optional calls.
struct FullNet : RecordingNet {
  static constexpr const char kName[] = "full";
  ncclResult_t makeVDevice(int* d, ncclNetVDeviceProps_v12_t* props) {
    *d = 100 + props->ndevs;
    return ncclSuccess;
  }
  ncclResult_t setNetAttr(void*, ncclNetAttr_v12_t* attr) {
    lastOp = attr->op;
    return ncclSuccess;
  }
  ncclResult_t finalize(void* ctx) {
    finalized = ctx;
    return ncclSuccess;
  }
  static inline uint32_t lastOp = 0;
  static inline void* finalized = nullptr;
};

// Test double: optional calls declared as an overload set and as a member template, which `&T::member` cannot name.
struct OverloadedNet : RecordingNet {
  static constexpr const char kName[] = "overloaded";
  ncclResult_t getDeviceMr(void*, void*, void** dptrMhandle) {
    *dptrMhandle = reinterpret_cast<void*>(0x51);
    return ncclSuccess;
  }
  ncclResult_t getDeviceMr(void*, void*, void** dptrMhandle) const {
    *dptrMhandle = reinterpret_cast<void*>(0x52);
    return ncclSuccess;
  }
  template <class Attr>
  ncclResult_t setNetAttr(void*, Attr* attr) {
    lastOp = attr->op;
    return ncclSuccess;
  }
  static inline uint32_t lastOp = 0;
};

// Test double: the same in a final class, where no probe can derive from the class to find the name.
struct FinalOverloadedNet final : RecordingNet {
  static constexpr const char kName[] = "final-overloaded";
  ncclResult_t getDeviceMr(void*, void*, void** dptrMhandle) {
    *dptrMhandle = reinterpret_cast<void*>(0x61);
    return ncclSuccess;
  }
  ncclResult_t getDeviceMr(void*, void*, void** dptrMhandle) const {
    *dptrMhandle = reinterpret_cast<void*>(0x62);
    return ncclSuccess;
  }
  template <class Handle>
  ncclResult_t irecvConsumed(void*, int n, Handle*) {
    consumed = n;
    return ncclSuccess;
  }
  static inline int consumed = 0;
};

// Test double: says DMA-BUF without a regMrDmaBuf to register through.
struct DmaBufWithoutRegistrationNet : RecordingNet {
  static constexpr const char kName[] = "dmabuf-no-reg";
  ncclResult_t getProperties(int, ncclNetProperties_v12_t* props) {
    props->name = const_cast<char*>("dmabuf0");
    props->ptrSupport = NCCL_PTR_HOST | NCCL_PTR_DMABUF;
    return ncclSuccess;
  }
  ncclResult_t iflush(void*, int, void**, int*, void**, void** request) {
    *request = nullptr;
    return ncclSuccess;
  }
};

// Test double: counts devices() calls; reports a size at the index `sizeIndex` in test.
struct CountingNet : RecordingNet {
  static constexpr const char kName[] = "counting";
  ncclResult_t devices(int* ndev) {
    ++devicesCalls;
    *ndev = ndevs;
    return ncclSuccess;
  }
  ncclResult_t test(void*, int* done, sdk::CompletedSizes& sizes) {
    if (!sizes.set(sizeIndex, 5)) return ncclSuccess;
    *done = 1;
    return ncclSuccess;
  }
  static inline int devicesCalls = 0;
  static inline int ndevs = 2;
  static inline int sizeIndex = 0;
};

// Test double: a connect that goes on until told to finish; its states count their deletions.
struct StagedConnect {
  static inline int deleted = 0;
  ~StagedConnect() { ++deleted; }
};
// Test double: its devices are UNPACK devices (receives land in bounce buffers for NCCL's kernels to finish).
struct UnpackNet : RecordingNet {
  static constexpr const char kName[] = "unpack";
  ncclResult_t getProperties(int dev, ncclNetProperties_v12_t* props) {
    const ncclResult_t result = RecordingNet::getProperties(dev, props);
    props->netDeviceType = NCCL_NET_DEVICE_UNPACK;
    props->netDeviceVersion = NCCL_NET_DEVICE_UNPACK_VERSION;
    return result;
  }
};

struct StagingNet : RecordingNet {
  static constexpr const char kName[] = "staging";
  ncclResult_t connect(void*, int, void* handle, void** sendComm, ncclNetDeviceHandle_v12_t**) {
    using Stage = sdk::ConnectStage<StagedConnect>;
    if (Stage::get(handle) == nullptr) {
      Stage::adopt(handle, std::make_unique<StagedConnect>());
    } else if (finishNext) {
      Stage::take(handle);
      *sendComm = reinterpret_cast<void*>(0x3);
    }
    return ncclSuccess;
  }
  static inline bool finishNext = false;
};

// Test double: no per-communicator state, its init leaving ctx NULL (as the socket, UCX and minimal plugins do).
struct NullContextNet : StagingNet {
  static constexpr const char kName[] = "null-context";
  ncclResult_t init(const sdk::InitArgs&, void** ctx) {
    *ctx = nullptr;
    return ncclSuccess;
  }
  ncclResult_t connect(void* ctx, int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v12_t** devComm) {
    seen = ctx;
    return StagingNet::connect(ctx, dev, handle, sendComm, devComm);
  }
  ncclResult_t finalize(void* ctx) {
    seen = ctx;
    return ncclSuccess;
  }
  static inline void* seen = reinterpret_cast<void*>(0x1);  // the ctx the last connect or finalize was given
};

// Test double: every property field a value of its own, so a field a version has and the SDK left out shows.
struct EveryFieldNet : RecordingNet {
  static constexpr const char kName[] = "every-field";
  ncclResult_t getProperties(int dev, ncclNetProperties_v12_t* props) {
    props->name = const_cast<char*>("all0");
    props->pciPath = const_cast<char*>("/sys/devices/pci0000:00/0000:00:02.0");
    props->guid = 0x1122334455667788ull;
    props->regIsGlobal = 1;
    props->forceFlush = 1;
    props->speed = 400000 + dev;
    props->port = 2;
    props->latency = 1.5f;
    props->maxComms = 4242;
    props->maxRecvs = 6;
    props->netDeviceVersion = 7;
    props->maxP2pBytes = size_t{1} << 20;
    props->maxCollBytes = size_t{1} << 21;
    props->maxMultiRequestSize = 4;
    return ncclSuccess;
  }
};

// Test double: its listen throws what `thrown` says: 0 std::bad_alloc, 1 an int.
struct ThrowingNet : RecordingNet {
  static constexpr const char kName[] = "throwing";
  ncclResult_t listen(void*, int, void*, void**) {
    if (thrown == 0) throw std::bad_alloc();
    throw 42;
  }
  static inline int thrown = 0;
};

}  // namespace

// ---- handle codec
// -----------------------------------------------------------------------------------------------------
struct Address {
  uint32_t ip;
  uint16_t port;
  uint64_t id;
};
constexpr sdk::HandleCodec<Address> kCodec(sdk::handleMagic("test-plugin"), 3);

// One version, three spellings: the numbers, the code a plugin tests with #if, and the string the tools print; and
// CMake's project version, read from the same header.
TEST(SdkVersion, TheHeaderTheCodeAndTheProjectAgree) {
  const std::string parts = std::to_string(NCCL_NET_SDK_VERSION_MAJOR) + "." +
                            std::to_string(NCCL_NET_SDK_VERSION_MINOR) + "." +
                            std::to_string(NCCL_NET_SDK_VERSION_PATCH);
  EXPECT_EQ(parts, NCCL_NET_SDK_VERSION_STRING);
  EXPECT_EQ(parts, NNS_PROJECT_VERSION);
  EXPECT_EQ(NCCL_NET_SDK_VERSION,
            NCCL_NET_SDK_VERSION_MAJOR * 10000 + NCCL_NET_SDK_VERSION_MINOR * 100 + NCCL_NET_SDK_VERSION_PATCH);
}

TEST(HandleCodec, RoundTrips) {
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE];
  std::memset(handle, 0xee, sizeof(handle));
  Address in{0x7f000001, 4242, 0x1122334455667788ull};
  ASSERT_EQ(kCodec.encode(in, handle), ncclSuccess);
  Address out{};
  ASSERT_EQ(kCodec.decode(handle, &out), ncclSuccess);
  EXPECT_EQ(out.ip, in.ip);
  EXPECT_EQ(out.port, in.port);
  EXPECT_EQ(out.id, in.id);
  EXPECT_LE(kCodec.kEncodedSize, NCCL_NET_HANDLE_MAXSIZE - sdk::kConnectStageBytes);
}

TEST(HandleCodec, RejectsEveryKindOfBadHandle) {
  sdk::setLogger(recordingLogger);
  unsigned char good[NCCL_NET_HANDLE_MAXSIZE];
  ASSERT_EQ(kCodec.encode(Address{1, 2, 3}, good), ncclSuccess);
  Address out{};
  for (size_t byte = 0; byte < kCodec.kEncodedSize; ++byte) {
    unsigned char bad[NCCL_NET_HANDLE_MAXSIZE];
    std::memcpy(bad, good, sizeof(bad));
    bad[byte] ^= 0x01;
    EXPECT_NE(kCodec.decode(bad, &out), ncclSuccess) << "a flipped bit in byte " << byte << " went unnoticed";
  }
  logLines().clear();
  constexpr sdk::HandleCodec<Address> otherPlugin(sdk::handleMagic("other-plugin"), 3);
  unsigned char foreign[NCCL_NET_HANDLE_MAXSIZE];
  ASSERT_EQ(otherPlugin.encode(Address{1, 2, 3}, foreign), ncclSuccess);
  EXPECT_EQ(kCodec.decode(foreign, &out), ncclInternalError);
  EXPECT_TRUE(logged("a handle from another plugin"));
  constexpr sdk::HandleCodec<Address> newerBuild(sdk::handleMagic("test-plugin"), 4);
  unsigned char newer[NCCL_NET_HANDLE_MAXSIZE];
  ASSERT_EQ(newerBuild.encode(Address{1, 2, 3}, newer), ncclSuccess);
  EXPECT_EQ(kCodec.decode(newer, &out), ncclInvalidUsage);
  EXPECT_TRUE(logged("version 4"));
  EXPECT_EQ(kCodec.decode(nullptr, &out), ncclInternalError);
  EXPECT_EQ(kCodec.encode(Address{}, nullptr), ncclInternalError);
}

// The checksum catches corruption, not a writer that fills the header differently: a handle whose reserved field or
// length is not what encode() writes is refused though its checksum matches its bytes.
TEST(HandleCodec, AReservedFieldOrLengthEncodeNeverWritesIsRefusedWithAMatchingChecksum) {
  sdk::setLogger(recordingLogger);
  unsigned char good[NCCL_NET_HANDLE_MAXSIZE];
  ASSERT_EQ(kCodec.encode(Address{1, 2, 3}, good), ncclSuccess);
  auto forge = [&](auto change, unsigned char* out) {
    std::memcpy(out, good, NCCL_NET_HANDLE_MAXSIZE);
    sdk::HandleHeader header;
    std::memcpy(&header, out, sizeof(header));
    change(header);
    header.checksum = 0;
    uint32_t hash = sdk::fnv1a(reinterpret_cast<const unsigned char*>(&header), sizeof(header));
    header.checksum = sdk::fnv1a(out + sizeof(header), sizeof(Address), hash);
    std::memcpy(out, &header, sizeof(header));
  };
  Address out{};
  unsigned char forged[NCCL_NET_HANDLE_MAXSIZE];
  forge([](sdk::HandleHeader& header) { (void)header; }, forged);
  ASSERT_EQ(kCodec.decode(forged, &out), ncclSuccess) << "the forging itself is right";
  logLines().clear();
  forge([](sdk::HandleHeader& header) { header.reserved = 1; }, forged);
  EXPECT_EQ(kCodec.decode(forged, &out), ncclInternalError);
  EXPECT_TRUE(logged("reserved field 0x1, expected 0"));
  forge([](sdk::HandleHeader& header) { header.length = sizeof(Address) - 1; }, forged);
  EXPECT_EQ(kCodec.decode(forged, &out), ncclInternalError);
  EXPECT_TRUE(logged("connection handle length"));
}

// encode() leaves nothing of what the buffer held: the connect stage's tail is zero, so get() finds no state there.
TEST(HandleCodec, EncodeZeroesEveryByteAfterThePayloadTheConnectStageIncluded) {
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE];
  std::memset(handle, 0xee, sizeof(handle));
  ASSERT_EQ(kCodec.encode(Address{1, 2, 3}, handle), ncclSuccess);
  for (size_t byte = kCodec.kEncodedSize; byte < NCCL_NET_HANDLE_MAXSIZE; ++byte)
    EXPECT_EQ(handle[byte], 0) << "byte " << byte;
}

TEST(ConnectStage, StoresStateOnlyInAHandleThatCarriesIt) {
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE];
  ASSERT_EQ(kCodec.encode(Address{1, 2, 3}, handle), ncclSuccess);
  using Stage = sdk::ConnectStage<int>;
  EXPECT_EQ(Stage::get(handle), nullptr) << "encode() must leave no stage";
  int* state = Stage::adopt(handle, std::make_unique<int>(5));
  EXPECT_EQ(Stage::get(handle), state);
  Address out{};
  EXPECT_EQ(kCodec.decode(handle, &out), ncclSuccess) << "the stage lives outside the checksummed payload";
  handle[NCCL_NET_HANDLE_MAXSIZE - 1] ^= 0x10;  // damage the stage's id
  EXPECT_EQ(Stage::get(handle), nullptr);
  handle[NCCL_NET_HANDLE_MAXSIZE - 1] ^= 0x10;
  std::unique_ptr<int> owned = Stage::take(handle);
  EXPECT_EQ(owned.get(), state) << "take() hands the state back";
  EXPECT_EQ(Stage::get(handle), nullptr);
  EXPECT_EQ(Stage::take(handle), nullptr);
}

// A tail with a well-formed check word that names no state the SDK keeps (a stale copy of a handle, or a peer's
// bytes forged to look like one) is not followed to its pointer.
TEST(ConnectStage, ATailNamingNoKeptStateIsNotFollowed) {
  using Stage = sdk::ConnectStage<int>;
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  int onStack = 7;
  Stage::set(handle, &onStack);
  unsigned char stale[NCCL_NET_HANDLE_MAXSIZE];
  std::memcpy(stale, handle, sizeof(stale));
  EXPECT_EQ(Stage::get(stale), &onStack);
  Stage::clear(handle);  // set() and clear(): SDK 0.1's spelling, which leaves the state the caller's
  EXPECT_EQ(Stage::get(stale), nullptr);
  EXPECT_EQ(Stage::take(stale), nullptr);
  // A state taken and freed, and a new one that may land at the same address: the stale tail still names nothing.
  Stage::adopt(handle, std::make_unique<int>(1));
  std::memcpy(stale, handle, sizeof(stale));
  Stage::take(handle);
  int* fresh = Stage::adopt(handle, std::make_unique<int>(2));
  EXPECT_EQ(Stage::get(stale), nullptr) << "a tail outlived its state (address reused: "
                                        << (reinterpret_cast<uintptr_t>(fresh) ==
                                            *reinterpret_cast<const uintptr_t*>(stale + NCCL_NET_HANDLE_MAXSIZE - 16))
                                        << ")";
  EXPECT_EQ(sdk::ConnectStage<long>::get(handle), nullptr) << "a state is found only as the type it was kept as";
  Stage::take(handle);
}

// take() ends the stage: the handle's tail is zero again, as encode() left it.
TEST(ConnectStage, TakeZeroesTheHandlesTail) {
  using Stage = sdk::ConnectStage<int>;
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  Stage::adopt(handle, std::make_unique<int>(3));
  ASSERT_NE(Stage::take(handle), nullptr);
  for (size_t byte = NCCL_NET_HANDLE_MAXSIZE - sdk::kConnectStageBytes; byte < NCCL_NET_HANDLE_MAXSIZE; ++byte)
    EXPECT_EQ(handle[byte], 0) << "byte " << byte;
}

// ncclNet cannot cancel a connect: a host that gives up frees the handle. The SDK deletes what such connects left
// when the host finalizes their ctx; connects under a NULL ctx (a host that passes none) wait for the plugin's unload.
TEST(ConnectStage, TheSdkFreesTheStatesOfConnectsTheHostGaveUp) {
  const auto& table = NetTables<StagingNet>::v12;
  void *ctxA = nullptr, *ctxB = nullptr;
  ASSERT_EQ(table.init(&ctxA, 1, nullptr, recordingLogger, nullptr), ncclSuccess);
  ASSERT_EQ(table.init(&ctxB, 2, nullptr, recordingLogger, nullptr), ncclSuccess);
  unsigned char a1[NCCL_NET_HANDLE_MAXSIZE] = {}, a2[NCCL_NET_HANDLE_MAXSIZE] = {};
  unsigned char b[NCCL_NET_HANDLE_MAXSIZE] = {}, none[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* sendComm = nullptr;
  StagingNet::finishNext = false;
  for (int call = 0; call < 2; ++call) {  // the second call finds each stage again
    ASSERT_EQ(table.connect(ctxA, 0, a1, &sendComm, nullptr), ncclSuccess);
    ASSERT_EQ(table.connect(ctxA, 0, a2, &sendComm, nullptr), ncclSuccess);
    ASSERT_EQ(table.connect(ctxB, 0, b, &sendComm, nullptr), ncclSuccess);
    ASSERT_EQ(table.connect(nullptr, 0, none, &sendComm, nullptr), ncclSuccess);
    EXPECT_EQ(sendComm, nullptr);
  }
  using Stage = sdk::ConnectStage<StagedConnect>;
  const int before = StagedConnect::deleted;
  sdk::setLogger(recordingLogger);
  logLines().clear();
  EXPECT_EQ(table.finalize(ctxA), ncclSuccess);
  EXPECT_EQ(StagedConnect::deleted, before + 2) << "both of ctx A's abandoned connects";
  EXPECT_TRUE(logged("finalize: freed 2 connect(s) the host left unfinished"));
  EXPECT_EQ(Stage::get(a1), nullptr) << "a freed state is never followed";
  // A finalized ctx is refused by name, never followed: NCCL finalizes each communicator's context once.
  EXPECT_EQ(table.finalize(ctxA), ncclInvalidUsage);
  EXPECT_TRUE(logged("finalize: ctx 0x"));
  EXPECT_EQ(table.connect(ctxA, 0, a1, &sendComm, nullptr), ncclInvalidUsage);
  EXPECT_EQ(StagedConnect::deleted, before + 2);

  StagingNet::finishNext = true;  // ctx B's connect completes: the plugin took its state back and deleted it
  ASSERT_EQ(table.connect(ctxB, 0, b, &sendComm, nullptr), ncclSuccess);
  EXPECT_EQ(sendComm, reinterpret_cast<void*>(0x3));
  EXPECT_EQ(StagedConnect::deleted, before + 3);
  EXPECT_EQ(table.finalize(ctxB), ncclSuccess);
  EXPECT_EQ(StagedConnect::deleted, before + 3) << "nothing of B's was left";

  EXPECT_EQ(table.finalize(nullptr), ncclSuccess);
  EXPECT_NE(Stage::get(none), nullptr) << "a NULL ctx's stage outlives another communicator's finalize";
  Stage::take(none);
  EXPECT_EQ(StagedConnect::deleted, before + 4);
  StagingNet::finishNext = false;
}

// A plugin whose init leaves ctx NULL (or returns the same object every time) still has each communicator's abandoned
// connects freed at that communicator's finalize: the host holds a token of the SDK's per init, and the plugin is
// handed what its init returned.
TEST(ConnectStage, EachInitIsItsOwnEvenForAPluginWithoutContexts) {
  const auto& table = NetTables<NullContextNet>::v12;
  void *ctx1 = nullptr, *ctx2 = nullptr;
  ASSERT_EQ(table.init(&ctx1, 1, nullptr, recordingLogger, nullptr), ncclSuccess);
  ASSERT_EQ(table.init(&ctx2, 2, nullptr, recordingLogger, nullptr), ncclSuccess);
  EXPECT_NE(ctx1, nullptr);
  EXPECT_NE(ctx1, ctx2);
  unsigned char h1[NCCL_NET_HANDLE_MAXSIZE] = {}, h2[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* sendComm = nullptr;
  StagingNet::finishNext = false;
  ASSERT_EQ(table.connect(ctx1, 0, h1, &sendComm, nullptr), ncclSuccess);
  EXPECT_EQ(NullContextNet::seen, nullptr) << "the plugin is handed the NULL its init returned";
  ASSERT_EQ(table.connect(ctx2, 0, h2, &sendComm, nullptr), ncclSuccess);
  const int before = StagedConnect::deleted;
  NullContextNet::seen = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(table.finalize(ctx1), ncclSuccess);
  EXPECT_EQ(NullContextNet::seen, nullptr);
  EXPECT_EQ(StagedConnect::deleted, before + 1) << "the first communicator's connect, not the second's";
  EXPECT_NE(sdk::ConnectStage<StagedConnect>::get(h2), nullptr);
  EXPECT_EQ(table.finalize(ctx2), ncclSuccess);
  EXPECT_EQ(StagedConnect::deleted, before + 2);
  // A ctx that no init returned is refused by name, not handed to the plugin.
  sdk::setLogger(recordingLogger);
  logLines().clear();
  unsigned char h3[NCCL_NET_HANDLE_MAXSIZE] = {};
  EXPECT_EQ(table.connect(reinterpret_cast<void*>(0x77), 0, h3, &sendComm, nullptr), ncclInternalError);
  EXPECT_TRUE(logged("connect: ctx 0x77 is not one this plugin's init returned"));
}

// NCCL makes and finalizes a context per communicator: a finalized one is refused by name and takes no memory (each
// used to stay listed, about 100 bytes per communicator for the life of the plugin).
TEST(ConnectStage, FinalizedContextsAreRefusedAndTakeNoMemory) {
  const auto& table = NetTables<NullContextNet>::v12;
  auto& tokens = sdk::detail::ContextTokens::instance();
  const size_t before = tokens.liveCount();
  std::vector<void*> finalized;
  for (int i = 0; i < 1000; ++i) {
    void* ctx = nullptr;
    ASSERT_EQ(table.init(&ctx, i, nullptr, recordingLogger, nullptr), ncclSuccess);
    EXPECT_EQ(tokens.liveCount(), before + 1);
    ASSERT_EQ(table.finalize(ctx), ncclSuccess);
    finalized.push_back(ctx);
  }
  EXPECT_EQ(tokens.liveCount(), before);
  sdk::setLogger(recordingLogger);
  logLines().clear();
  EXPECT_EQ(table.finalize(finalized.front()), ncclInvalidUsage);
  EXPECT_EQ(table.finalize(finalized.back()), ncclInvalidUsage);
  EXPECT_TRUE(logged("finalize: ctx 0x"));
  // An address the host has (its own object, this plugin's) is no token, whatever the tokens made so far; nor is a
  // live token's number under another table's salt (bits 36..47: another SDK-built plugin's token).
  int hostObject = 0;
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* sendComm = nullptr;
  EXPECT_EQ(table.connect(&hostObject, 0, handle, &sendComm, nullptr), ncclInternalError);
  void* live = nullptr;
  ASSERT_EQ(table.init(&live, 1, nullptr, recordingLogger, nullptr), ncclSuccess);
  void* otherSalt = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(live) ^ (uintptr_t{1} << 40));
  logLines().clear();
  EXPECT_EQ(table.connect(otherSalt, 0, handle, &sendComm, nullptr), ncclInternalError);
  EXPECT_TRUE(logged("is not one this plugin's init returned"));
  EXPECT_EQ(table.finalize(live), ncclSuccess);
}

// A token of this table's shape whose number no init has reached yet is no ctx this plugin's init returned (not one
// finalized already): ncclInternalError, with its name.
TEST(ConnectStage, ATokenNumberNoInitReachedIsUnknownNotFinalized) {
  const auto& table = NetTables<NullContextNet>::v12;
  void* live = nullptr;
  ASSERT_EQ(table.init(&live, 1, nullptr, recordingLogger, nullptr), ncclSuccess);
  void* ahead = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(live) + 1000);
  sdk::setLogger(recordingLogger);
  logLines().clear();
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* sendComm = nullptr;
  EXPECT_EQ(table.connect(ahead, 0, handle, &sendComm, nullptr), ncclInternalError);
  EXPECT_TRUE(logged("is not one this plugin's init returned"));
  EXPECT_FALSE(logged("was finalized already"));
  EXPECT_EQ(table.finalize(live), ncclSuccess);
}

// A forked child inherits the parent's kept states but never finds, takes or deletes them: they hold the parent's
// resources (a segment, QPs, a UCX worker).
TEST(ConnectStage, AForkedChildLeavesItsParentsStatesAlone) {
  using Stage = sdk::ConnectStage<StagedConnect>;
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  StagedConnect* state = Stage::adopt(handle, std::make_unique<StagedConnect>());
  const int before = StagedConnect::deleted;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int failures = 0;
    failures += Stage::get(handle) != nullptr;
    failures += Stage::take(handle) != nullptr;
    failures += StagedConnect::deleted != before;
    _exit(failures);
  }
  int status = -1;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  EXPECT_EQ(Stage::get(handle), state) << "still the parent's";
  Stage::take(handle);
}

// During process exit, after the plugin's statics closed (a host's own static tearing down a communicator late), the
// entry points still work and nothing is followed: checked in a child, whose closing leaves this process's alone.
TEST(ConnectStage, CallsAfterThePluginClosedStaySafe) {
  const auto& table = NetTables<StagingNet>::v12;
  void* ctx = nullptr;
  ASSERT_EQ(table.init(&ctx, 9, nullptr, recordingLogger, nullptr), ncclSuccess);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    sdk::detail::ConnectStageRegistry::instance().close();
    sdk::detail::ContextTokens::instance().close();
    unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
    void* sendComm = nullptr;
    int failures = 0;
    failures += table.connect(ctx, 0, handle, &sendComm, nullptr) != ncclSuccess;  // adopts: not kept any more
    failures += sdk::ConnectStage<StagedConnect>::get(handle) != nullptr;
    failures += table.finalize(ctx) != ncclSuccess;
    _exit(failures);
  }
  int status = -1;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  EXPECT_EQ(table.finalize(ctx), ncclSuccess);
}

// ---- unloading ---------------------------------------------------------------------------------------------------
// NCCL dlcloses a plugin after its last communicator; v6..v10 have no finalize, so the contexts the SDK made for them
// (one per traffic class a v10 connect asked for) are finalized as the library goes.
TEST(Unload, ContextsMadeForHostsWithoutFinalizeAreFinalizedAtDlclose) {
  void* library = dlopen(NNS_SDK_UNLOAD_TEST_PLUGIN, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(library, nullptr) << dlerror();
  const auto* v10 = static_cast<const ncclNet_v10_t*>(dlsym(library, "ncclNetPlugin_v10"));
  ASSERT_NE(v10, nullptr);
  logLines().clear();
  ASSERT_EQ(v10->init(recordingLogger, nullptr), ncclSuccess);
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* plain = nullptr;
  void* classThree = nullptr;
  ncclNetCommConfig_v10_t three{3};
  ASSERT_EQ(v10->connect(0, nullptr, handle, &plain, nullptr), ncclSuccess);
  ASSERT_EQ(v10->connect(0, &three, handle, &classThree, nullptr), ncclSuccess);
  EXPECT_NE(plain, classThree);
  EXPECT_FALSE(logged("sdk-unload-test: finalize"));
  ASSERT_EQ(dlclose(library), 0);
  EXPECT_TRUE(logged("sdk-unload-test: finalize of the context for traffic class -1"));
  EXPECT_TRUE(logged("sdk-unload-test: finalize of the context for traffic class 3"));
}

// During exit, once the plugin's objects are being destroyed, a late call (a host's static tearing down a
// communicator) is refused by name rather than run on a destroyed object; the legacy contexts were finalized first.
// In a child, whose exit leaves this process alone; the handler registered before the plugin's first use runs after
// the plugin's statics are destroyed.
struct ExitNet : RecordingNet {
  static constexpr const char kName[] = "exit";
  ncclResult_t finalize(void*) {
    ++finalized;
    return ncclSuccess;
  }
  static inline int finalized = 0;
};
void silentLogger(ncclDebugLogLevel, unsigned long, const char*, int, const char*, ...) {}
void lateCallAtExit() {
  int ndev = 0;
  const ncclResult_t late = NetTables<ExitNet>::v12.devices(&ndev);
  _exit(ExitNet::finalized == 2 && late == ncclInvalidUsage ? 0 : 10 + ExitNet::finalized);
}
TEST(Unload, ACallDuringExitAfterThePluginsObjectsWentIsRefused) {
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::atexit(lateCallAtExit);
    if (NetTables<ExitNet>::v10.init(silentLogger, nullptr) != ncclSuccess) _exit(2);
    unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
    void* comm = nullptr;
    ncclNetCommConfig_v10_t five{5};
    if (NetTables<ExitNet>::v10.connect(0, &five, handle, &comm, nullptr) != ncclSuccess) _exit(3);
    std::exit(0);
  }
  int status = -1;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

// ---- request pool
// -----------------------------------------------------------------------------------------------------
TEST(RequestPool, FixedCapacityAndOwnership) {
  struct Request {
    int value;
  };
  sdk::RequestPool<Request, 4> pool;
  std::vector<Request*> taken;
  for (int i = 0; i < 4; ++i) {
    Request* r = pool.acquire(Request{i});
    ASSERT_NE(r, nullptr);
    EXPECT_TRUE(pool.owns(r));
    taken.push_back(r);
  }
  EXPECT_EQ(pool.acquire(), nullptr) << "full pool means retry later, not allocate";
  EXPECT_EQ(pool.inUse(), 4u);
  Request outsider{7};
  EXPECT_FALSE(pool.owns(&outsider));
  EXPECT_FALSE(pool.release(&outsider));
  EXPECT_FALSE(pool.owns(reinterpret_cast<char*>(taken[1]) + 1)) << "a pointer into the middle of a slot";
  EXPECT_TRUE(pool.release(taken[2]));
  EXPECT_FALSE(pool.owns(taken[2])) << "a released request is stale";
  EXPECT_FALSE(pool.release(taken[2])) << "double release";
  int visited = 0;
  pool.forEachLive([&](Request&) { ++visited; });
  EXPECT_EQ(visited, 3);
  EXPECT_NE(pool.acquire(), nullptr);
}

// The address just past the last slot is no request of the pool's (nor is anything beyond it).
TEST(RequestPool, TheAddressJustPastTheLastSlotIsNotOwned) {
  struct Request {
    int value;
  };
  sdk::RequestPool<Request, 2> pool;
  ASSERT_NE(pool.acquire(Request{1}), nullptr);
  Request* last = pool.acquire(Request{2});
  ASSERT_NE(last, nullptr);
  EXPECT_TRUE(pool.owns(last));
  EXPECT_FALSE(pool.owns(last + 1));
  EXPECT_FALSE(pool.release(last + 1));
  EXPECT_EQ(pool.inUse(), 2u);
}

// A constructor that throws leaves the slot free and nothing live (the slot was marked live first, and the pool's
// destructor then destroyed an object never made).
struct Fussy {
  explicit Fussy(bool fail) {
    if (fail) throw std::runtime_error("no");
    ++made;
  }
  ~Fussy() { ++destroyed; }
  static inline int made = 0;
  static inline int destroyed = 0;
};
TEST(RequestPool, AThrowingConstructorLeavesThePoolAsItWas) {
  Fussy::made = 0;
  Fussy::destroyed = 0;
  {
    sdk::RequestPool<Fussy, 2> pool;
    EXPECT_THROW(pool.acquire(true), std::runtime_error);
    EXPECT_EQ(pool.inUse(), 0u);
    int visited = 0;
    pool.forEachLive([&](Fussy&) { ++visited; });
    EXPECT_EQ(visited, 0);
    ASSERT_NE(pool.acquire(false), nullptr);
    ASSERT_NE(pool.acquire(false), nullptr);
    EXPECT_EQ(pool.acquire(false), nullptr) << "both slots are usable";
  }
  EXPECT_EQ(Fussy::made, 2);
  EXPECT_EQ(Fussy::destroyed, 2);
}

// ---- logging
// ----------------------------------------------------------------------------------------------------------
TEST(Logging, NullLoggerFallsBackToStderrAndHostLoggerGetsPrefix) {
  sdk::detail::loggerSlot().store(nullptr);  // as before any init
  sdk::setLogPrefix("NET/test");
  testing::internal::CaptureStderr();
  NCCL_NET_WARN("before init %d", 1);
  NCCL_NET_INFO(NCCL_NET, "info is quiet without NCCL_DEBUG=INFO");
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "WARN NET/test : before init 1\n");

  sdk::setLogger(nullptr);  // a NULL logger from init changes nothing
  sdk::setLogger(recordingLogger);
  logLines().clear();
  testing::internal::CaptureStderr();
  NCCL_NET_WARN("value %d", 42);
  err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(logged("WARN NET/test : value 42"));
  EXPECT_TRUE(err.empty()) << "with a host logger nothing goes to stderr";
}

// Every init since v11 passes the host's logger: the first one stays, whatever a later init passes.
TEST(Logging, TheFirstHostLoggerStaysWhenALaterInitPassesAnother) {
  sdk::detail::loggerSlot().store(nullptr);
  sdk::setLogger(recordingLogger);
  sdk::setLogger(silentLogger);
  EXPECT_EQ(sdk::logger(), &recordingLogger);
}

// ABORT lines reach stderr without a host logger wherever WARN lines do (NCCL's ABORT is above INFO, not below WARN).
TEST(Logging, AbortLinesReachStderrWhereWarnLinesDo) {
  if (!sdk::detail::stderrShows(NCCL_LOG_WARN)) GTEST_SKIP() << "NCCL_DEBUG hides WARN lines here";
  testing::internal::CaptureStderr();
  sdk::stderrLogger(NCCL_LOG_ABORT, 0, __FILE__, __LINE__, "fatal %d", 3);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "ABORT fatal 3\n");
}

// ---- environment settings
// ----------------------------------------------------------------------------------------------------------
TEST(Environment, IntegersAreWholeAndInRangeOrReportedAndDefaulted) {
  sdk::setLogger(recordingLogger);
  struct Case {
    const char* text;
    long expected;
    bool warned;
  };
  const Case cases[] = {{"", 7, false},
                        {"12", 12, false},
                        {"0x10", 16, false},
                        {"-3", -3, false},
                        {"4x", 7, true},
                        {"abc", 7, true},
                        {"21", 7, true},
                        {"-4", 7, true},
                        {"1.5", 7, true},
                        {" 5", 5, false},
                        {"99999999999999999999", 7, true}};
  for (const Case& c : cases) {
    setenv("NNS_SDK_TEST_SETTING", c.text, 1);
    logLines().clear();
    EXPECT_EQ(sdk::envInteger("NNS_SDK_TEST_SETTING", 7, -3, 20), c.expected) << "\"" << c.text << "\"";
    EXPECT_EQ(logged("NNS_SDK_TEST_SETTING=" + std::string(c.text) + " is not an integer in [-3, 20]; using 7"),
              c.warned)
        << "\"" << c.text << "\"";
  }
  unsetenv("NNS_SDK_TEST_SETTING");
  EXPECT_EQ(sdk::envInteger("NNS_SDK_TEST_SETTING", 7, -3, 20), 7) << "unset";
}

// Both ends of the range are in it; and a number strtol cannot hold is reported even where the range is all of long
// (strtol then returns LONG_MAX, inside the range).
TEST(Environment, TheRangesEndsAreInItAndAnOverflowIsReportedWhateverTheRange) {
  sdk::setLogger(recordingLogger);
  setenv("NNS_SDK_TEST_SETTING", "20", 1);
  EXPECT_EQ(sdk::envInteger("NNS_SDK_TEST_SETTING", 7, -3, 20), 20);
  setenv("NNS_SDK_TEST_SETTING", "-3", 1);
  EXPECT_EQ(sdk::envInteger("NNS_SDK_TEST_SETTING", 7, -3, 20), -3);
  setenv("NNS_SDK_TEST_SETTING", "99999999999999999999", 1);
  logLines().clear();
  EXPECT_EQ(sdk::envInteger("NNS_SDK_TEST_SETTING", 7, LONG_MIN, LONG_MAX), 7);
  EXPECT_TRUE(logged("NNS_SDK_TEST_SETTING=99999999999999999999 is not an integer"));
  setenv("NNS_SDK_TEST_SETTING", "-99999999999999999999", 1);
  EXPECT_EQ(sdk::envInteger("NNS_SDK_TEST_SETTING", 7, LONG_MIN, LONG_MAX), 7);
  unsetenv("NNS_SDK_TEST_SETTING");
}

// ---- down-conversions through the exported tables
// ------------------------------------------------------------------------
TEST(Export, PropertiesAreDowngradedFieldByField) {
  calls.vdevs = 1;
  ncclNetProperties_v6_t v6;
  ASSERT_EQ(NetTables<RecordingNet>::v6.getProperties(2, &v6), ncclSuccess);
  EXPECT_STREQ(v6.name, "rec0");
  EXPECT_EQ(v6.speed, 200002);
  EXPECT_EQ(v6.maxRecvs, 8);
  ncclNetProperties_v9_t v9;
  ASSERT_EQ(NetTables<RecordingNet>::v9.getProperties(0, &v9), ncclSuccess);
  EXPECT_EQ(v9.maxP2pBytes, NCCL_NET_DEFAULT_MAX_P2P_BYTES);
  EXPECT_EQ(v9.vProps.ndevs, 1);
  EXPECT_EQ(v9.forceFlush, 1);
  ncclNetProperties_v11_t v11;
  ASSERT_EQ(NetTables<RecordingNet>::v11.getProperties(0, &v11), ncclSuccess);
  EXPECT_EQ(v11.forceFlush, 1);
  ncclNetProperties_v12_t v12;
  ASSERT_EQ(NetTables<RecordingNet>::v12.getProperties(0, &v12), ncclSuccess);
  EXPECT_EQ(v12.railId, -1);
  EXPECT_EQ(v12.maxMultiRequestSize, 1);
}

// Each version's struct gets every field it has (EveryFieldNet sets each to a value of its own).
template <int V, class Props, class Table>
void expectEveryField(const Table& table) {
  Props p;
  std::memset(&p, 0xa5, sizeof(p));
  ASSERT_EQ(table.getProperties(1, &p), ncclSuccess) << "v" << V;
  EXPECT_STREQ(p.name, "all0") << "v" << V;
  EXPECT_STREQ(p.pciPath, "/sys/devices/pci0000:00/0000:00:02.0") << "v" << V;
  EXPECT_EQ(p.guid, 0x1122334455667788ull) << "v" << V;
  EXPECT_EQ(p.ptrSupport, NCCL_PTR_HOST) << "v" << V;
  EXPECT_EQ(p.speed, 400001) << "v" << V;
  EXPECT_EQ(p.port, 2) << "v" << V;
  EXPECT_EQ(p.latency, 1.5f) << "v" << V;
  EXPECT_EQ(p.maxComms, 4242) << "v" << V;
  EXPECT_EQ(p.maxRecvs, 6) << "v" << V;
  if constexpr (V >= 7) {
    EXPECT_EQ(p.netDeviceType, NCCL_NET_DEVICE_HOST) << "v" << V;
    EXPECT_EQ(p.netDeviceVersion, 7) << "v" << V;
  }
  if constexpr (V >= 8) {
    EXPECT_EQ(p.regIsGlobal, 1) << "v" << V;
  }
  if constexpr (V >= 9) {
    EXPECT_EQ(p.forceFlush, 1) << "v" << V;
    EXPECT_EQ(p.vProps.ndevs, 1) << "v" << V;
    EXPECT_EQ(p.vProps.devs[0], 1) << "v" << V;
    EXPECT_EQ(p.maxP2pBytes, size_t{1} << 20) << "v" << V;
    EXPECT_EQ(p.maxCollBytes, size_t{1} << 21) << "v" << V;
  }
  if constexpr (V >= 11) {
    EXPECT_EQ(p.maxMultiRequestSize, 4) << "v" << V;
  }
}
TEST(Export, EveryPropertyFieldAVersionHasReachesItsStruct) {
  expectEveryField<6, ncclNetProperties_v6_t>(NetTables<EveryFieldNet>::v6);
  expectEveryField<7, ncclNetProperties_v7_t>(NetTables<EveryFieldNet>::v7);
  expectEveryField<8, ncclNetProperties_v8_t>(NetTables<EveryFieldNet>::v8);
  expectEveryField<9, ncclNetProperties_v9_t>(NetTables<EveryFieldNet>::v9);
  expectEveryField<10, ncclNetProperties_v10_t>(NetTables<EveryFieldNet>::v10);
  expectEveryField<11, ncclNetProperties_v11_t>(NetTables<EveryFieldNet>::v11);
  expectEveryField<12, ncclNetProperties_v12_t>(NetTables<EveryFieldNet>::v12);
}

// ncclNet_v6 has no device type, and its hosts take every device as HOST: an UNPACK device is refused there, and
// given its type from v7 on.
TEST(Export, AnUnpackDeviceIsRefusedToV6) {
  calls.vdevs = 1;
  ncclNetProperties_v6_t v6;
  EXPECT_EQ(NetTables<UnpackNet>::v6.getProperties(0, &v6), ncclInternalError);
  ncclNetProperties_v7_t v7;
  ASSERT_EQ(NetTables<UnpackNet>::v7.getProperties(0, &v7), ncclSuccess);
  EXPECT_EQ(v7.netDeviceType, NCCL_NET_DEVICE_UNPACK);
  EXPECT_EQ(v7.netDeviceVersion, NCCL_NET_DEVICE_UNPACK_VERSION);
}

TEST(Export, AVNicIsShownToAVersionOnlyUpToTheDevicesItCarries) {
  calls.vdevs = 8;
  ncclNetProperties_v12_t v12;
  EXPECT_EQ(NetTables<RecordingNet>::v12.getProperties(0, &v12), ncclSuccess);
  EXPECT_EQ(v12.vProps.ndevs, 8);
  ncclNetProperties_v11_t v11;
  EXPECT_EQ(NetTables<RecordingNet>::v11.getProperties(0, &v11), ncclInternalError);
  // v9 to v11 carry four: the fourth fits, one more does not.
  calls.vdevs = 4;
  ASSERT_EQ(NetTables<RecordingNet>::v11.getProperties(0, &v11), ncclSuccess);
  EXPECT_EQ(v11.vProps.ndevs, 4);
  EXPECT_EQ(v11.vProps.devs[3], 3);
  calls.vdevs = 5;
  EXPECT_EQ(NetTables<RecordingNet>::v11.getProperties(0, &v11), ncclInternalError);
  ncclNetProperties_v9_t v9;
  EXPECT_EQ(NetTables<RecordingNet>::v9.getProperties(0, &v9), ncclInternalError);
  calls.vdevs = 1;
}

// v12 hands the plugin's own struct to NCCL: a count past devs[8] would have it read maxP2pBytes as devices.
TEST(Export, AVPropsCountOutsideOneToEightIsRefusedInEveryVersion) {
  for (int vdevs : {0, -1, 9}) {
    calls.vdevs = vdevs;
    ncclNetProperties_v12_t v12;
    EXPECT_EQ(NetTables<RecordingNet>::v12.getProperties(0, &v12), ncclInternalError) << vdevs << " devices";
    ncclNetProperties_v6_t v6;
    EXPECT_EQ(NetTables<RecordingNet>::v6.getProperties(0, &v6), ncclInternalError) << vdevs << " devices";
  }
  calls.vdevs = 1;
}

TEST(Export, LegacyInitIsOnceAndV10ConfigSelectsAContextPerTrafficClass) {
  int before = calls.inits;
  ASSERT_EQ(NetTables<RecordingNet>::v10.init(recordingLogger, nullptr), ncclSuccess);
  ASSERT_EQ(NetTables<RecordingNet>::v10.init(recordingLogger, nullptr), ncclSuccess);
  EXPECT_EQ(calls.inits, before + 1);
  EXPECT_EQ(calls.lastAbi, 10);
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* defaultComm = nullptr;
  void* tc5Comm = nullptr;
  void* tc5Again = nullptr;
  ncclNetCommConfig_v10_t tc5{5};
  ASSERT_EQ(NetTables<RecordingNet>::v10.connect(0, nullptr, handle, &defaultComm, nullptr), ncclSuccess);
  ASSERT_EQ(NetTables<RecordingNet>::v10.connect(0, &tc5, handle, &tc5Comm, nullptr), ncclSuccess);
  EXPECT_EQ(calls.lastTrafficClass, 5);
  ASSERT_EQ(NetTables<RecordingNet>::v10.connect(0, &tc5, handle, &tc5Again, nullptr), ncclSuccess);
  EXPECT_NE(defaultComm, tc5Comm) << "traffic class 5 gets its own context";
  EXPECT_EQ(tc5Comm, tc5Again);
  EXPECT_EQ(calls.inits, before + 2);
}

TEST(Export, V11InitPassesCommIdAndConfig) {
  void* ctx = nullptr;
  ncclNetCommConfig_v11_t config{3};
  ASSERT_EQ(NetTables<RecordingNet>::v11.init(&ctx, 77, &config, recordingLogger, nullptr), ncclSuccess);
  EXPECT_EQ(calls.lastTrafficClass, 3);
  EXPECT_EQ(calls.lastAbi, 11);
  EXPECT_NE(ctx, nullptr);
}

// The communicator's hash reaches the class's init from v11 on (v12's and v11's tables).
TEST(Export, InitPassesTheCommIdFromV11On) {
  void* ctx = nullptr;
  ASSERT_EQ(NetTables<RecordingNet>::v12.init(&ctx, 0xabcdef12345ull, nullptr, recordingLogger, nullptr), ncclSuccess);
  EXPECT_EQ(calls.lastCommId, 0xabcdef12345ull);
  EXPECT_EQ(NetTables<RecordingNet>::v12.finalize(ctx), ncclSuccess);
  ASSERT_EQ(NetTables<RecordingNet>::v11.init(&ctx, 0x5566ull, nullptr, recordingLogger, nullptr), ncclSuccess);
  EXPECT_EQ(calls.lastCommId, 0x5566ull);
  EXPECT_EQ(NetTables<RecordingNet>::v11.finalize(ctx), ncclSuccess);
}

// Size 0 is a size: an empty message or registration passes through the int-sized versions (v6..v8) as 0.
TEST(Export, AnEmptyMessageOrRegistrationPassesThroughTheIntSizedVersions) {
  char byte = 0;
  void* request = nullptr;
  calls.lastSendSize = 99;
  ASSERT_EQ(NetTables<RecordingNet>::v8.isend(reinterpret_cast<void*>(1), &byte, 0, 0, nullptr, &request), ncclSuccess);
  EXPECT_EQ(calls.lastSendSize, 0u);
  int sizes[1] = {0};
  void* data[1] = {&byte};
  int tags[1] = {0};
  calls.lastRecvSizes[0] = 99;
  ASSERT_EQ(NetTables<RecordingNet>::v7.irecv(reinterpret_cast<void*>(1), 1, data, sizes, tags, nullptr, &request),
            ncclSuccess);
  EXPECT_EQ(calls.lastRecvSizes[0], 0u);
  void* mhandle = nullptr;
  EXPECT_EQ(NetTables<RecordingNet>::v6.regMr(reinterpret_cast<void*>(1), &byte, 0, NCCL_PTR_HOST, &mhandle),
            ncclSuccess);
}

// NCCL groups up to NCCL_PROXY_MAX_SUBS = 64 receives in one irecv: 64 is taken in every version, 65 refused.
TEST(Export, AGroupedReceiveOfSixtyFourIsTakenAndOfSixtyFiveRefused) {
  char byte = 0;
  void* data[65];
  size_t sizes[65];
  int intSizes[65];
  int tags[65];
  for (int i = 0; i < 65; ++i) {
    data[i] = &byte;
    sizes[i] = 1;
    intSizes[i] = 1;
    tags[i] = i;
  }
  void* request = nullptr;
  const auto& v12 = NetTables<RecordingNet>::v12;
  EXPECT_EQ(v12.irecv(reinterpret_cast<void*>(1), 64, data, sizes, tags, nullptr, nullptr, &request), ncclSuccess);
  EXPECT_EQ(v12.irecv(reinterpret_cast<void*>(1), 65, data, sizes, tags, nullptr, nullptr, &request),
            ncclInternalError);
  const auto& v8 = NetTables<RecordingNet>::v8;
  EXPECT_EQ(v8.irecv(reinterpret_cast<void*>(1), 64, data, intSizes, tags, nullptr, &request), ncclSuccess);
  EXPECT_EQ(v8.irecv(reinterpret_cast<void*>(1), 65, data, intSizes, tags, nullptr, &request), ncclInternalError);
}

TEST(Export, IntSizesWidenAndPhandleIsNullBeforeV10) {
  void* request = nullptr;
  char byte = 0;
  ASSERT_EQ(NetTables<RecordingNet>::v8.isend(reinterpret_cast<void*>(1), &byte, 1234, 0, nullptr, &request),
            ncclSuccess);
  EXPECT_EQ(calls.lastSendSize, 1234u);
  EXPECT_EQ(calls.lastPhandle, nullptr);
  int sizes[2] = {10, INT_MAX};
  void* data[2] = {&byte, &byte};
  int tags[2] = {0, 1};
  ASSERT_EQ(NetTables<RecordingNet>::v7.irecv(reinterpret_cast<void*>(1), 2, data, sizes, tags, nullptr, &request),
            ncclSuccess);
  EXPECT_EQ(calls.lastRecvSizes[1], static_cast<size_t>(INT_MAX));
  sizes[1] = -1;
  EXPECT_EQ(NetTables<RecordingNet>::v7.irecv(reinterpret_cast<void*>(1), 2, data, sizes, tags, nullptr, &request),
            ncclInternalError);
}

// NCCL passes NCCL_NET_OPTIONAL_RECV_COMPLETION in *request for LL/LL128 receives: the class can ask for the hint,
// and *request it sees is cleared either way.
TEST(Export, TheOptionalRecvCompletionHintReachesTheClass) {
  char byte = 0;
  void* data[1] = {&byte};
  size_t sizes[1] = {1};
  int tags[1] = {0};
  void* request = reinterpret_cast<void*>(NCCL_NET_OPTIONAL_RECV_COMPLETION);
  ASSERT_EQ(
      NetTables<RecordingNet>::v12.irecv(reinterpret_cast<void*>(1), 1, data, sizes, tags, nullptr, nullptr, &request),
      ncclSuccess);
  EXPECT_TRUE(calls.optionalCompletion);
  EXPECT_EQ(request, reinterpret_cast<void*>(0x5)) << "the class's own request";
  request = nullptr;
  ASSERT_EQ(
      NetTables<RecordingNet>::v12.irecv(reinterpret_cast<void*>(1), 1, data, sizes, tags, nullptr, nullptr, &request),
      ncclSuccess);
  EXPECT_FALSE(calls.optionalCompletion);
}

// ncclNet_v6..v8 define no hint: a value left in *request by such a host is not taken for one.
TEST(Export, TheOptionalRecvCompletionHintIsNotReadBeforeV9) {
  char byte = 0;
  void* data[1] = {&byte};
  int sizes[1] = {1};
  int tags[1] = {0};
  void* request = reinterpret_cast<void*>(NCCL_NET_OPTIONAL_RECV_COMPLETION);
  ASSERT_EQ(NetTables<RecordingNet>::v8.irecv(reinterpret_cast<void*>(1), 1, data, sizes, tags, nullptr, &request),
            ncclSuccess);
  EXPECT_FALSE(calls.optionalCompletion);
  EXPECT_EQ(request, reinterpret_cast<void*>(0x5));
}

// A send test() could never report is refused at isend, before the plugin moves a byte.
TEST(Export, ASendAboveIntMaxIsRefusedAtIsend) {
  sdk::setLogger(recordingLogger);
  logLines().clear();
  calls.lastSendSize = 0;
  char byte = 0;
  void* request = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(NetTables<RecordingNet>::v12.isend(reinterpret_cast<void*>(1), &byte, (3ull << 30), 0, nullptr, nullptr,
                                               &request),
            ncclInternalError);
  EXPECT_EQ(calls.lastSendSize, 0u) << "the class must not see it";
  EXPECT_TRUE(logged("exceeds INT_MAX"));
  EXPECT_EQ(NetTables<RecordingNet>::v12.isend(reinterpret_cast<void*>(1), &byte, static_cast<size_t>(INT_MAX), 0,
                                               nullptr, nullptr, &request),
            ncclSuccess);
  EXPECT_EQ(calls.lastSendSize, static_cast<size_t>(INT_MAX));
}

TEST(Export, CompletedSizeAboveIntMaxIsAnErrorNotATruncation) {
  sdk::setLogger(recordingLogger);
  logLines().clear();
  calls.reportSize = (3ull << 30);
  int done = 0;
  int size = 0;
  EXPECT_EQ(NetTables<RecordingNet>::v12.test(reinterpret_cast<void*>(4), &done, &size), ncclInvalidUsage);
  EXPECT_EQ(done, 0);
  EXPECT_TRUE(logged("exceeds INT_MAX"));
  calls.reportSize = 99;
  EXPECT_EQ(NetTables<RecordingNet>::v12.test(reinterpret_cast<void*>(4), &done, &size), ncclSuccess);
  EXPECT_EQ(done, 1);
  EXPECT_EQ(size, 99);
  EXPECT_EQ(NetTables<RecordingNet>::v12.test(reinterpret_cast<void*>(4), &done, nullptr), ncclSuccess)
      << "NCCL passes NULL sizes for flush requests";
}

// INT_MAX itself is what test()'s int holds: reported as it is.
TEST(Export, ACompletedSizeOfExactlyIntMaxIsReported) {
  calls.reportSize = static_cast<size_t>(INT_MAX);
  int done = 0;
  int size = 0;
  EXPECT_EQ(NetTables<RecordingNet>::v12.test(reinterpret_cast<void*>(4), &done, &size), ncclSuccess);
  EXPECT_EQ(done, 1);
  EXPECT_EQ(size, INT_MAX);
  calls.reportSize = 0;
}

TEST(Export, ExceptionsBecomeAnErrorAndOneWarn) {
  sdk::setLogger(recordingLogger);
  logLines().clear();
  calls.throwInListen = true;
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* listenComm = nullptr;
  EXPECT_EQ(NetTables<RecordingNet>::v12.listen(nullptr, 0, handle, &listenComm), ncclInternalError);
  EXPECT_TRUE(logged("listen: unexpected exception: listen exploded"));
  calls.throwInListen = false;
}

// Out of memory is the host's ncclSystemError; anything else thrown, a non-standard exception included, an
// ncclInternalError; each with its WARN.
TEST(Export, OutOfMemoryIsASystemErrorAndANonStandardExceptionAnInternalOne) {
  sdk::setLogger(recordingLogger);
  logLines().clear();
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* listenComm = nullptr;
  ThrowingNet::thrown = 0;
  EXPECT_EQ(NetTables<ThrowingNet>::v12.listen(nullptr, 0, handle, &listenComm), ncclSystemError);
  EXPECT_TRUE(logged("listen: out of memory"));
  ThrowingNet::thrown = 1;
  EXPECT_EQ(NetTables<ThrowingNet>::v12.listen(nullptr, 0, handle, &listenComm), ncclInternalError);
  EXPECT_TRUE(logged("listen: unexpected non-standard exception"));
}

TEST(Export, OptionalCallsAreNullWhenAbsentAndWiredWhenPresent) {
  EXPECT_EQ(NetTables<RecordingNet>::v12.makeVDevice, nullptr);
  EXPECT_EQ(NetTables<RecordingNet>::v12.setNetAttr, nullptr);
  EXPECT_EQ(NetTables<RecordingNet>::v12.getDeviceMr, nullptr);
  EXPECT_EQ(NetTables<RecordingNet>::v12.irecvConsumed, nullptr);
  EXPECT_NE(NetTables<RecordingNet>::v12.finalize, nullptr) << "NCCL calls finalize without a NULL check";
  EXPECT_EQ(NetTables<RecordingNet>::v12.finalize(nullptr), ncclSuccess);
  void* request = reinterpret_cast<void*>(0x9);
  EXPECT_EQ(NetTables<RecordingNet>::v12.iflush(reinterpret_cast<void*>(1), 1, nullptr, nullptr, nullptr, &request),
            ncclSuccess);
  EXPECT_EQ(request, nullptr) << "a host-only plugin's flush completes at once";

  ASSERT_NE(NetTables<FullNet>::v12.makeVDevice, nullptr);
  ASSERT_NE(NetTables<FullNet>::v9.makeVDevice, nullptr);
  ncclNetVDeviceProps_v9_t props9{2, {0, 1, 0, 0}};
  int d = 0;
  EXPECT_EQ(NetTables<FullNet>::v9.makeVDevice(&d, &props9), ncclSuccess);
  EXPECT_EQ(d, 102);
  ncclNetVDeviceProps_v12_t tooMany{9, {}};
  EXPECT_EQ(NetTables<FullNet>::v12.makeVDevice(&d, &tooMany), ncclInternalError);
  ncclNetVDeviceProps_v12_t badDev{2, {0, 42}};
  EXPECT_EQ(NetTables<FullNet>::v12.makeVDevice(&d, &badDev), ncclInternalError);
  ncclNetAttr_v11_t attr{};
  attr.op = 7;
  ASSERT_NE(NetTables<FullNet>::v11.setNetAttr, nullptr);
  EXPECT_EQ(NetTables<FullNet>::v11.setNetAttr(nullptr, &attr), ncclSuccess);
  EXPECT_EQ(FullNet::lastOp, 7u);
  void* ctx = nullptr;
  ASSERT_EQ(NetTables<FullNet>::v12.init(&ctx, 1, nullptr, recordingLogger, nullptr), ncclSuccess);
  EXPECT_EQ(NetTables<FullNet>::v12.finalize(ctx), ncclSuccess);
  EXPECT_EQ(FullNet::finalized, reinterpret_cast<void*>(static_cast<intptr_t>(1000 + calls.inits)))
      << "finalize gets the ctx the plugin's init returned";
  EXPECT_EQ(NetTables<FullNet>::v8.getDeviceMr, nullptr);
}

// A virtual device of as many physical devices as the version's props carry (4 before v12, 8 in v12) is made.
TEST(Export, AVirtualDeviceOfAsManyDevicesAsTheVersionCarriesIsMade) {
  int d = 0;
  ncclNetVDeviceProps_v9_t four{4, {0, 1, 2, 3}};
  EXPECT_EQ(NetTables<FullNet>::v9.makeVDevice(&d, &four), ncclSuccess);
  EXPECT_EQ(d, 104);
  ncclNetVDeviceProps_v11_t fourAgain{4, {3, 2, 1, 0}};
  EXPECT_EQ(NetTables<FullNet>::v11.makeVDevice(&d, &fourAgain), ncclSuccess);
  EXPECT_EQ(d, 104);
  ncclNetVDeviceProps_v12_t eight{8, {0, 1, 2, 3, 4, 5, 6, 7}};
  EXPECT_EQ(NetTables<FullNet>::v12.makeVDevice(&d, &eight), ncclSuccess);
  EXPECT_EQ(d, 108);
}

// An optional call declared as an overload set or a template is found (it was exported as NULL without a word).
TEST(Export, OptionalCallsDeclaredAsOverloadsOrTemplatesAreFound) {
  ASSERT_NE(NetTables<OverloadedNet>::v12.getDeviceMr, nullptr);
  void* dptr = nullptr;
  EXPECT_EQ(NetTables<OverloadedNet>::v12.getDeviceMr(reinterpret_cast<void*>(1), nullptr, &dptr), ncclSuccess);
  EXPECT_EQ(dptr, reinterpret_cast<void*>(0x51));
  EXPECT_EQ(NetTables<OverloadedNet>::v12.getDeviceMr(reinterpret_cast<void*>(1), nullptr, nullptr), ncclInternalError);
  ASSERT_NE(NetTables<OverloadedNet>::v12.setNetAttr, nullptr);
  ncclNetAttr_v12_t attr{};
  attr.op = 9;
  EXPECT_EQ(NetTables<OverloadedNet>::v12.setNetAttr(nullptr, &attr), ncclSuccess);
  EXPECT_EQ(OverloadedNet::lastOp, 9u);
  EXPECT_EQ(NetTables<OverloadedNet>::v12.irecvConsumed, nullptr) << "still NULL when not declared at all";
}

// In a final class too: the probe that finds overloads derives from the class, so they were exported as NULL.
TEST(Export, OptionalOverloadsAndTemplatesOfAFinalClassAreFound) {
  ASSERT_NE(NetTables<FinalOverloadedNet>::v12.getDeviceMr, nullptr);
  void* dptr = nullptr;
  EXPECT_EQ(NetTables<FinalOverloadedNet>::v12.getDeviceMr(reinterpret_cast<void*>(1), nullptr, &dptr), ncclSuccess);
  EXPECT_EQ(dptr, reinterpret_cast<void*>(0x61));
  ASSERT_NE(NetTables<FinalOverloadedNet>::v12.irecvConsumed, nullptr);
  EXPECT_EQ(NetTables<FinalOverloadedNet>::v12.irecvConsumed(reinterpret_cast<void*>(1), 3, reinterpret_cast<void*>(2)),
            ncclSuccess);
  EXPECT_EQ(FinalOverloadedNet::consumed, 3);
  EXPECT_EQ(NetTables<FinalOverloadedNet>::v12.setNetAttr, nullptr) << "still NULL when not declared at all";
}

// irecvConsumed of no receive at all is refused before the class sees it; 1 to 64 are passed on.
TEST(Export, IrecvConsumedOfNoReceiveIsRefused) {
  const auto& v12 = NetTables<FinalOverloadedNet>::v12;
  FinalOverloadedNet::consumed = -1;
  EXPECT_EQ(v12.irecvConsumed(reinterpret_cast<void*>(1), 0, reinterpret_cast<void*>(2)), ncclInternalError);
  EXPECT_EQ(FinalOverloadedNet::consumed, -1) << "the class must not see it";
  EXPECT_EQ(v12.irecvConsumed(reinterpret_cast<void*>(1), 64, reinterpret_cast<void*>(2)), ncclSuccess);
  EXPECT_EQ(FinalOverloadedNet::consumed, 64);
  EXPECT_EQ(v12.irecvConsumed(reinterpret_cast<void*>(1), 65, reinterpret_cast<void*>(2)), ncclInternalError);
}

TEST(Export, DmaBufWithoutRegMrDmaBufIsRefused) {
  sdk::setLogger(recordingLogger);
  logLines().clear();
  ncclNetProperties_v12_t props;
  EXPECT_EQ(NetTables<DmaBufWithoutRegistrationNet>::v12.getProperties(0, &props), ncclInternalError);
  EXPECT_TRUE(logged("says NCCL_PTR_DMABUF but the plugin has no regMrDmaBuf"));
}

// devices() is asked again only for an index beyond what it last said (NCCL calls it only on its init path, under
// its lock; the SDK's checks run on proxy threads); a virtual device made since is still found.
TEST(Export, DeviceChecksDoNotCallDevicesForKnownIndices) {
  int ndev = 0;
  ASSERT_EQ(NetTables<CountingNet>::v12.devices(&ndev), ncclSuccess);
  ASSERT_EQ(ndev, 2);
  const int before = CountingNet::devicesCalls;
  ncclNetProperties_v12_t props;
  for (int i = 0; i < 10; ++i) ASSERT_EQ(NetTables<CountingNet>::v12.getProperties(i % 2, &props), ncclSuccess);
  EXPECT_EQ(CountingNet::devicesCalls, before);
  CountingNet::ndevs = 3;  // a virtual device made since
  EXPECT_EQ(NetTables<CountingNet>::v12.getProperties(2, &props), ncclSuccess);
  EXPECT_EQ(CountingNet::devicesCalls, before + 1);
  EXPECT_EQ(NetTables<CountingNet>::v12.getProperties(3, &props), ncclInternalError);
  CountingNet::ndevs = 2;
}

// A size set outside the host's room (a send's test gets one int in NCCL, a receive's 64) is an error, not a write
// past it.
TEST(Export, ASizeSetOutsideTheHostsRoomIsAnError) {
  sdk::setLogger(recordingLogger);
  logLines().clear();
  int sizes[64];
  int done = 0;
  CountingNet::sizeIndex = 64;
  EXPECT_EQ(NetTables<CountingNet>::v12.test(reinterpret_cast<void*>(4), &done, sizes), ncclInternalError);
  EXPECT_TRUE(logged("the plugin set the size of receive 64, outside 0..63"));
  CountingNet::sizeIndex = -1;
  EXPECT_EQ(NetTables<CountingNet>::v12.test(reinterpret_cast<void*>(4), &done, sizes), ncclInternalError);
  CountingNet::sizeIndex = 63;
  EXPECT_EQ(NetTables<CountingNet>::v12.test(reinterpret_cast<void*>(4), &done, sizes), ncclSuccess);
  EXPECT_EQ(sizes[63], 5);
  CountingNet::sizeIndex = 0;
}

TEST(Export, GpuSupportWithoutIflushIsRefused) {
  ncclNetProperties_v12_t props;
  sdk::setLogger(recordingLogger);
  logLines().clear();
  EXPECT_EQ(NetTables<GpuWithoutFlushNet>::v12.getProperties(0, &props), ncclInternalError);
  EXPECT_TRUE(logged("supports GPU memory but the plugin has no iflush"));
}

// A device whose plugin leaves guid alone is a card of its own (guid = its index, as NCCL's socket transport says), in
// every version: with 0 for all, NCCL took two such NICs for ports of one card and counted one NIC's bandwidth.
TEST(Export, DefaultGuidIsTheDeviceIndex) {
  ncclNetProperties_v12_t props;
  ncclNetProperties_v6_t old;
  for (int dev : {0, 1}) {
    ASSERT_EQ(NetTables<RecordingNet>::v12.getProperties(dev, &props), ncclSuccess);
    EXPECT_EQ(props.guid, static_cast<uint64_t>(dev));
    EXPECT_EQ(props.port, 0);
    ASSERT_EQ(NetTables<RecordingNet>::v6.getProperties(dev, &old), ncclSuccess);
    EXPECT_EQ(old.guid, static_cast<uint64_t>(dev));
  }
}

// Limits NCCL acts on are checked as it checks them, and kept to what test() can report: a limit above INT_MAX (NCCL's
// own plugins say 1 TiB) is cut to NCCL's default with a word in the log, since the SDK's isend refuses a message
// above INT_MAX (the SDK's own default was 1 TiB, so NCCL could post a message that failed). No name, or a
// maxCollBytes of 0, is refused.
TEST(Export, PropertiesLimitsAreWhatTestCanReport) {
  sdk::setLogger(recordingLogger);
  ncclNetProperties_v12_t props;
  ASSERT_EQ(NetTables<RecordingNet>::v12.getProperties(0, &props), ncclSuccess);
  EXPECT_EQ(props.maxP2pBytes, NCCL_NET_DEFAULT_MAX_P2P_BYTES);
  EXPECT_EQ(props.maxCollBytes, NCCL_NET_DEFAULT_MAX_COLL_BYTES);
  calls.maxP2pBytes = NCCL_MAX_NET_SIZE_BYTES;
  calls.maxCollBytes = size_t{INT_MAX};
  logLines().clear();
  ASSERT_EQ(NetTables<RecordingNet>::v12.getProperties(0, &props), ncclSuccess);
  EXPECT_EQ(props.maxP2pBytes, NCCL_NET_DEFAULT_MAX_P2P_BYTES);
  EXPECT_EQ(props.maxCollBytes, size_t{INT_MAX});
  EXPECT_TRUE(logged("maxP2pBytes 1099511627776 is above INT_MAX, which test() cannot report; using 1073741824"));
  calls.maxP2pBytes = 0;
  calls.maxCollBytes = NCCL_MAX_NET_SIZE_BYTES + 1;
  EXPECT_EQ(NetTables<RecordingNet>::v12.getProperties(0, &props), ncclInternalError);
  EXPECT_TRUE(logged("maxCollBytes 1099511627777 outside (0, 1 TiB]"));
  calls.maxCollBytes = 0;
  calls.noName = true;
  EXPECT_EQ(NetTables<RecordingNet>::v12.getProperties(0, &props), ncclInternalError);
  EXPECT_TRUE(logged("device 0 has no name"));
  calls.noName = false;
}

// ---- collNet: in-network collectives need switch hardware (SHARP-class) that cannot run here, so the SDK's collNet
// conversions are checked against a test double.
namespace {
struct CollCalls {
  size_t lastCount = 0;
  size_t lastPartSizes[3] = {};
  int lastParts = 0;
  void* lastPartMhandles[3] = {};
  void* lastPartAddresses[3] = {};
  int reduceQueries = 0;
  int testIndex = 0;  // the size index test() sets
};
CollCalls collCalls;

// Test double: records what the SDK passes through each collNet call.
struct RecordingColl {
  static constexpr const char kName[] = "recording-coll";
  ncclResult_t init(const sdk::InitArgs&, void** ctx) {
    *ctx = reinterpret_cast<void*>(0x10);
    return ncclSuccess;
  }
  ncclResult_t devices(int* ndev) {
    *ndev = 1;
    return ncclSuccess;
  }
  ncclResult_t getProperties(int, ncclNetProperties_v12_t* props) {
    props->name = const_cast<char*>("coll0");
    return ncclSuccess;
  }
  ncclResult_t listen(void* ctx, int, void*, void** listenComm) {
    *listenComm = ctx;
    return ncclSuccess;
  }
  ncclResult_t connect(void**, int, int, void*, void** collComm) {
    *collComm = reinterpret_cast<void*>(0x11);
    return ncclSuccess;
  }
  ncclResult_t reduceSupport(ncclDataType_t, ncclRedOp_t op, int* supported) {
    ++collCalls.reduceQueries;
    *supported = op == ncclSum;
    return ncclSuccess;
  }
  ncclResult_t regMr(void*, void*, size_t, int, void** mhandle) {
    *mhandle = reinterpret_cast<void*>(0x12);
    return ncclSuccess;
  }
  ncclResult_t deregMr(void*, void*) { return ncclSuccess; }
  ncclResult_t iallreduce(void*, void*, void*, size_t count, ncclDataType_t, ncclRedOp_t, void*, void*,
                          void** request) {
    collCalls.lastCount = count;
    *request = reinterpret_cast<void*>(0x13);
    return ncclSuccess;
  }
  ncclResult_t iallgather(void*, void*, int n, ncclNetSGE_v12_t* parts, size_t, size_t, size_t, void*, void** request) {
    collCalls.lastParts = n;
    for (int i = 0; i < n && i < 3; ++i) {
      collCalls.lastPartSizes[i] = parts[i].size;
      collCalls.lastPartMhandles[i] = parts[i].mhandle;
      collCalls.lastPartAddresses[i] = parts[i].address;
    }
    *request = reinterpret_cast<void*>(0x14);
    return ncclSuccess;
  }
  ncclResult_t test(void*, int* done, sdk::CompletedSizes& sizes) {
    if (!sizes.set(collCalls.testIndex, 64)) return ncclSuccess;
    *done = 1;
    return ncclSuccess;
  }
  ncclResult_t closeColl(void*) { return ncclSuccess; }
  ncclResult_t closeListen(void*) { return ncclSuccess; }
};
using Coll = sdk::detail::CollNetTables<RecordingColl>;
}  // namespace

TEST(CollNetExport, TablesPerVersionWithOptionalCollectives) {
  void* ctx = nullptr;
  ASSERT_EQ(Coll::v12.init(&ctx, 5, recordingLogger), ncclSuccess);
  EXPECT_NE(ctx, nullptr) << "the host holds the SDK's token for the ctx";
  unsigned char listenHandle[NCCL_NET_HANDLE_MAXSIZE];
  void* ownComm = nullptr;
  ASSERT_EQ(Coll::v12.listen(ctx, 0, listenHandle, &ownComm), ncclSuccess);
  EXPECT_EQ(ownComm, reinterpret_cast<void*>(0x10)) << "listen gets the ctx the plugin's init returned";
  void* netCtx = nullptr;
  ASSERT_EQ(NetTables<RecordingNet>::v12.init(&netCtx, 6, nullptr, recordingLogger, nullptr), ncclSuccess);
  EXPECT_EQ(Coll::v12.listen(netCtx, 0, listenHandle, &ownComm), ncclInternalError)
      << "the ncclNet's ctx is not the collNet's";
  EXPECT_EQ(NetTables<RecordingNet>::v12.finalize(netCtx), ncclSuccess);
  EXPECT_NE(Coll::v12.iallgather, nullptr);
  EXPECT_EQ(Coll::v12.ireducescatter, nullptr) << "absent in the class, so NULL in the table";
  EXPECT_EQ(Coll::v12.makeVDevice, nullptr);
  ASSERT_EQ(Coll::v6.init(recordingLogger), ncclSuccess);
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* listenComm = nullptr;
  ASSERT_EQ(Coll::v6.listen(0, handle, &listenComm), ncclSuccess);
  EXPECT_EQ(listenComm, reinterpret_cast<void*>(0x10)) << "legacy listen gets the process-wide context";
  ncclNetProperties_v7_t props;
  ASSERT_EQ(Coll::v7.getProperties(0, &props), ncclSuccess);
  EXPECT_STREQ(props.name, "coll0");
}

TEST(CollNetExport, CountsAndScatterGatherPartsWiden) {
  void* request = nullptr;
  ASSERT_EQ(Coll::v8.iallreduce(reinterpret_cast<void*>(1), nullptr, nullptr, 1000, ncclFloat32, ncclSum, nullptr,
                                nullptr, &request),
            ncclSuccess);
  EXPECT_EQ(collCalls.lastCount, 1000u);
  EXPECT_EQ(Coll::v7.iallreduce(reinterpret_cast<void*>(1), nullptr, nullptr, -4, ncclFloat32, ncclSum, nullptr,
                                nullptr, &request),
            ncclInternalError);
  ncclNetSGE_v8_t parts[3] = {{nullptr, nullptr, 10}, {nullptr, nullptr, 20}, {nullptr, nullptr, 4000000000u}};
  ASSERT_EQ(Coll::v8.iallgather(reinterpret_cast<void*>(1), nullptr, 3, parts, 10, 0, 30, nullptr, &request),
            ncclSuccess);
  EXPECT_EQ(collCalls.lastParts, 3);
  EXPECT_EQ(collCalls.lastPartSizes[2], 4000000000u);
  EXPECT_EQ(Coll::v8.iallgather(reinterpret_cast<void*>(1), nullptr, 0, parts, 10, 0, 30, nullptr, &request),
            ncclInternalError);
  // v9..v11 have v12's layout in types of their own: copied (not read through a cast), with the same bounds.
  ncclNetSGE_v11_t parts11[2] = {{nullptr, nullptr, 7}, {nullptr, nullptr, 5000000000ull}};
  ASSERT_EQ(Coll::v11.iallgather(reinterpret_cast<void*>(1), nullptr, 2, parts11, 10, 0, 30, nullptr, &request),
            ncclSuccess);
  EXPECT_EQ(collCalls.lastParts, 2);
  EXPECT_EQ(collCalls.lastPartSizes[1], 5000000000ull);
  EXPECT_EQ(Coll::v11.iallgather(reinterpret_cast<void*>(1), nullptr, 0, parts11, 10, 0, 30, nullptr, &request),
            ncclInternalError);
}

TEST(CollNetExport, ReduceSupportNeverClaimsUserOpsOrUnknownTypes) {
  int supported = -1;
  int before = collCalls.reduceQueries;
  ASSERT_EQ(Coll::v12.reduceSupport(ncclFloat32, static_cast<ncclRedOp_t>(ncclNumOps + 3), &supported), ncclSuccess);
  EXPECT_EQ(supported, 0);
  ASSERT_EQ(Coll::v12.reduceSupport(static_cast<ncclDataType_t>(40), ncclSum, &supported), ncclSuccess);
  EXPECT_EQ(supported, 0);
  EXPECT_EQ(collCalls.reduceQueries, before) << "the plugin is not even asked";
  ASSERT_EQ(Coll::v12.reduceSupport(ncclFloat32, ncclSum, &supported), ncclSuccess);
  EXPECT_EQ(supported, 1);
  int done = 0;
  int size = 0;
  ASSERT_EQ(Coll::v12.test(reinterpret_cast<void*>(0x13), &done, &size), ncclSuccess);
  EXPECT_EQ(size, 64);
}

// The first value past the known ops and types is as unknown as any other: the plugin is not asked.
TEST(CollNetExport, ReduceSupportStopsAtTheFirstUnknownOpAndType) {
  int supported = -1;
  const int before = collCalls.reduceQueries;
  ASSERT_EQ(Coll::v12.reduceSupport(ncclFloat32, static_cast<ncclRedOp_t>(ncclNumOps), &supported), ncclSuccess);
  EXPECT_EQ(supported, 0);
  ASSERT_EQ(Coll::v12.reduceSupport(static_cast<ncclDataType_t>(ncclNumTypes), ncclSum, &supported), ncclSuccess);
  EXPECT_EQ(supported, 0);
  EXPECT_EQ(collCalls.reduceQueries, before) << "the plugin is not even asked";
  ASSERT_EQ(Coll::v12.reduceSupport(static_cast<ncclDataType_t>(ncclNumTypes - 1), ncclSum, &supported), ncclSuccess);
  EXPECT_EQ(collCalls.reduceQueries, before + 1) << "the last known type is asked about";
}

// A rank is one of 0..nranks-1: rank == nranks is refused before the class sees it.
TEST(CollNetExport, ConnectRefusesARankOutsideTheCommunicator) {
  void* handles[4] = {};
  void* collComm = nullptr;
  EXPECT_EQ(Coll::v12.connect(handles, 4, 4, reinterpret_cast<void*>(1), &collComm), ncclInternalError);
  EXPECT_EQ(collComm, nullptr);
  EXPECT_EQ(Coll::v12.connect(handles, 4, 3, reinterpret_cast<void*>(1), &collComm), ncclSuccess);
  EXPECT_EQ(collComm, reinterpret_cast<void*>(0x11));
}

// Through an old table, 256 scatter-gather parts are taken (257 refused), each with its handle, address and size.
TEST(CollNetExport, OldTablesCarryUpTo256PartsWithTheirHandlesAndAddresses) {
  static ncclNetSGE_v8_t parts[257];
  static char buffers[257];
  for (int i = 0; i < 257; ++i)
    parts[i] = {reinterpret_cast<void*>(static_cast<uintptr_t>(0x1000 + i)), &buffers[i], static_cast<uint32_t>(i)};
  void* request = nullptr;
  ASSERT_EQ(Coll::v8.iallgather(reinterpret_cast<void*>(1), nullptr, 256, parts, 1, 0, 256, nullptr, &request),
            ncclSuccess);
  EXPECT_EQ(collCalls.lastParts, 256);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(collCalls.lastPartMhandles[i], parts[i].mhandle) << "part " << i;
    EXPECT_EQ(collCalls.lastPartAddresses[i], parts[i].address) << "part " << i;
    EXPECT_EQ(collCalls.lastPartSizes[i], static_cast<size_t>(i)) << "part " << i;
  }
  EXPECT_EQ(Coll::v8.iallgather(reinterpret_cast<void*>(1), nullptr, 257, parts, 1, 0, 257, nullptr, &request),
            ncclInternalError);
  ncclNetSGE_v11_t parts11[1] = {{reinterpret_cast<void*>(0x77), &buffers[0], 9}};
  ASSERT_EQ(Coll::v11.iallgather(reinterpret_cast<void*>(1), nullptr, 1, parts11, 1, 0, 9, nullptr, &request),
            ncclSuccess);
  EXPECT_EQ(collCalls.lastPartMhandles[0], reinterpret_cast<void*>(0x77));
  EXPECT_EQ(collCalls.lastPartAddresses[0], &buffers[0]);
}

// A collective's test() has one size (NCCL passes a single int): a size set at index 1 is an error, not a write past
// the host's int.
TEST(CollNetExport, ACollectivesTestHasRoomForOneSizeOnly) {
  int sizes[2] = {0, -7};
  int done = 0;
  collCalls.testIndex = 1;
  EXPECT_EQ(Coll::v12.test(reinterpret_cast<void*>(0x13), &done, sizes), ncclInternalError);
  EXPECT_EQ(sizes[1], -7);
  collCalls.testIndex = 0;
  EXPECT_EQ(Coll::v12.test(reinterpret_cast<void*>(0x13), &done, sizes), ncclSuccess);
  EXPECT_EQ(sizes[0], 64);
}

// A collNet flush refuses a NULL collComm as every other collNet call does (it was handed to the class); without an
// iflush of the class's, a flush on a real comm completes at once with no request.
TEST(CollNetExport, AFlushWithoutACommIsRefused) {
  sdk::setLogger(recordingLogger);
  logLines().clear();
  char byte = 0;
  void* request = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(Coll::v12.iflush(nullptr, &byte, 1, nullptr, &request), ncclInternalError);
  EXPECT_TRUE(logged("collnet iflush: collComm or request is NULL"));
  EXPECT_EQ(Coll::v12.iflush(reinterpret_cast<void*>(0x11), &byte, 1, nullptr, &request), ncclSuccess);
  EXPECT_EQ(request, nullptr);
}

// ---- sysfs helpers, on this machine's real /sys
// ---------------------------------------------------------------------------
TEST(Sysfs, VirtualDevicesHaveNoPciPathAndFallbackSpeed) {
  EXPECT_EQ(sdk::pciPathOfNetDevice("lo"), "") << "loopback is not a PCI device";
  EXPECT_EQ(sdk::pciPathOfNetDevice("no-such-interface"), "");
  EXPECT_EQ(sdk::netDeviceSpeedMbps("lo", 12345), 12345) << "lo reports no speed";
  EXPECT_EQ(sdk::netDeviceSpeedMbps("no-such-interface", 777), 777);
  EXPECT_FALSE(sdk::readSysfsLong("/sys/class/net/lo/no-such-attribute").has_value());
  auto mtu = sdk::readSysfsLong("/sys/class/net/lo/mtu");
  ASSERT_TRUE(mtu.has_value());
  EXPECT_GT(*mtu, 0);
}

// A value that is no number is no value (it read as 0); a number is read with its trailing newline.
TEST(Sysfs, AFileThatHoldsNoNumberHasNoValue) {
  char path[] = "/tmp/nns-sysfs-test-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  auto write = [&](const char* text) {
    FILE* file = std::fopen(path, "w");
    ASSERT_NE(file, nullptr);
    std::fputs(text, file);
    std::fclose(file);
  };
  write("unknown\n");
  EXPECT_FALSE(sdk::readSysfsLong(path).has_value());
  write("25000\n");
  EXPECT_EQ(sdk::readSysfsLong(path), std::optional<long>(25000));
  write("0x10 \n");
  EXPECT_EQ(sdk::readSysfsString(path), std::optional<std::string>("0x10"));
  EXPECT_EQ(sdk::readSysfsLong(path), std::optional<long>(16));
  unlink(path);
}

TEST(Sysfs, PciBusIdShape) {
  EXPECT_TRUE(sdk::isPciBusId("0000:3b:00.0"));
  EXPECT_TRUE(sdk::isPciBusId("000a:ff:1f.7"));
  EXPECT_TRUE(sdk::isPciBusId("10000:01:00.0")) << "a domain above 0xffff (Intel VMD) prints with five digits";
  EXPECT_TRUE(sdk::isPciBusId("ffffffff:01:00.0"));
  EXPECT_FALSE(sdk::isPciBusId("100000000:01:00.0")) << "a domain is 32 bits";
  EXPECT_FALSE(sdk::isPciBusId("000:01:00.0"));
  EXPECT_FALSE(sdk::isPciBusId("10000:01:00:0"));
  EXPECT_FALSE(sdk::isPciBusId("virtio0"));
  EXPECT_FALSE(sdk::isPciBusId("0000:3b:00"));
  EXPECT_FALSE(sdk::isPciBusId("0000-3b:00.0"));
  EXPECT_FALSE(sdk::isPciBusId("pci0000:00"));
}

TEST(Sysfs, PhysicalNicsResolveToAPciFunction) {
  // Every interface with a device link on a PCI bus must resolve to a path ending in a bus id (virtio NICs walk up
  // from ".../0000:00:03.0/virtio0").
  int checked = 0;
  std::vector<std::string> interfaces;  // every interface of this machine, whatever its naming scheme
  if (DIR* dir = opendir("/sys/class/net"); dir != nullptr) {
    while (const dirent* entry = readdir(dir))
      if (entry->d_name[0] != '.') interfaces.emplace_back(entry->d_name);
    closedir(dir);
  }
  for (const std::string& ifname : interfaces) {
    std::string link = "/sys/class/net/" + ifname + "/device";
    char resolved[PATH_MAX];
    if (realpath(link.c_str(), resolved) == nullptr) continue;
    std::string target(resolved);
    if (target.find("/pci") == std::string::npos) continue;
    std::string path = sdk::pciPathOfNetDevice(ifname);
    ASSERT_FALSE(path.empty()) << ifname << " -> " << target;
    EXPECT_TRUE(sdk::isPciBusId(path.substr(path.rfind('/') + 1))) << path;
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "no PCI network interface on this machine";
}

// A size above INT_MAX cannot be reported, so set() refuses it; but where the host asked for no sizes (a flush's
// test passes NULL), there is nothing to report, and refusing failed the test() of a flush over 2 GiB.
TEST(CompletedSizesTest, ASizeNobodyAskedForCannotOverflow) {
  const size_t huge = size_t{3} << 30;
  sdk::CompletedSizes none(nullptr);
  EXPECT_TRUE(none.set(0, huge));
  EXPECT_FALSE(none.overflowed());
  int sizes[sdk::kMaxGroupedRecvs] = {};
  sdk::CompletedSizes some(sizes);
  EXPECT_FALSE(some.set(0, huge));
  EXPECT_TRUE(some.overflowed());
  EXPECT_EQ(some.overflowBytes(), huge);
}
