// star_collnet.cc: a reference multi-rank collNet over TCP in which rank 0 plays the switch (a star): every other rank
// sends its contribution to rank 0, which reduces or gathers in rank order and sends each rank its result.
//
// It is an example to read, not a fast transport: a real in-network collNet does in its switch what rank 0 does here.
// Wire protocol (all on one TCP connection per non-root rank, host byte order: every rank is on one kind of host):
//   set-up:     rank r -> rank 0: Hello{magic, version, rank 0's listen id, r, nranks}; rank 0 -> r: the same,
//               once every rank has arrived (a connection whose Hello is wrong is dropped with a WARN and the wait
//               goes on).
//   operation:  rank r -> rank 0: WireHeader{magic, kind, sequence, payload bytes, window}, then the payload;
//               rank 0 -> rank r: r's result only (all-reduce: all of it; all-gather: r's window; reduce-scatter: r's
//               block). Operations run one at a time, in the order they were posted.
// Environment: NNS_STAR_IFNAME (else NCCL_SOCKET_IFNAME) and NCCL_SOCKET_FAMILY choose the listening interface, once
// per process; NNS_STAR_CONNECT_TIMEOUT (seconds, default 30) bounds connect, read at each init.
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <nccl_net/sdk.hpp>

namespace {

namespace sdk = nccl_net::sdk;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kWireMagic = sdk::handleMagic("star-coll-wire");
constexpr uint32_t kWireVersion = 1;
constexpr int kMaxParts = 256;  // scatter-gather parts per call (the SDK's own limit for old tables)
constexpr int kMaxPending = NCCL_NET_MAX_REQUESTS;
constexpr int kDeadPeerTimeoutMs = 30000;  // keepalive: a silent dead peer on an idle connection
constexpr long kDefaultConnectTimeoutS = 30;

struct StarHandle {
  sdk::SocketAddress address;  // rank 0's listener, for the others to connect to
  uint64_t listenId;           // random: a Hello names it, so a connection meant for another listener is refused
};
constexpr sdk::HandleCodec<StarHandle> kCodec(sdk::handleMagic("star-coll"), 1);

struct Hello {
  uint32_t magic;
  uint32_t version;
  uint64_t listenId;
  int32_t rank;
  int32_t nranks;
};

enum class Collective : uint32_t { kAllReduce = 1, kAllGather = 2, kReduceScatter = 3 };

struct WireHeader {
  uint32_t magic;
  uint32_t kind;  // collective | data type << 8 | op << 16: the ranks must all have posted the same
  uint64_t sequence;
  uint64_t payloadBytes;
  uint64_t windowOffset;  // all-gather, reduce-scatter: the part of the blocks in this operation (alike on all ranks)
  uint64_t windowBytes;
};

struct Context {
  int connectTimeoutS;
};
struct ListenComm {
  int fd;
  sdk::SocketAddress address;
  uint64_t listenId;
  int connectTimeoutS;
};
struct Region {
  const char* data;
  size_t size;
};

struct StarComm;

struct StarRequest {
  StarComm* comm = nullptr;
  Collective collective = Collective::kAllReduce;
  ncclDataType_t type = ncclInt8;
  ncclRedOp_t op = ncclSum;
  uint64_t sequence = 0;
  size_t payloadBytes = 0;  // this rank's contribution (all-gather: its bytes inside the window; else alike on all)
  size_t resultBytes = 0;   // what this rank receives: the size test() reports
  size_t bytesPerRank = 0;
  size_t windowOffset = 0;
  size_t windowBytes = 0;
  // The side given as scatter-gather parts (all-gather's output, reduce-scatter's input) is copied here, since the
  // host's array need not outlive the call; the other sides are one buffer each.
  iovec parts[kMaxParts];
  int nParts = 0;
  iovec input{};
  iovec output{};
  bool started = false;
  bool done = false;
  // A non-root rank's progress: header, then payload, then the result.
  int phase = 0;
  size_t offset = 0;
  WireHeader header{};

  const iovec* inputParts(int* n) const {
    *n = collective == Collective::kReduceScatter ? nParts : 1;
    return collective == Collective::kReduceScatter ? parts : &input;
  }
  const iovec* outputParts(int* n) const {
    *n = collective == Collective::kAllGather ? nParts : 1;
    return collective == Collective::kAllGather ? parts : &output;
  }
};

// Rank 0's view of one other rank (index 0 holds rank 0's own copy of a reduce-scatter input).
struct Peer {
  int fd = -1;
  std::string address;  // for WARNs
  WireHeader header{};
  size_t headerOffset = 0;
  size_t payloadOffset = 0;
  bool received = false;
  std::vector<char> staging;  // its contribution; grown only when an operation is larger than any before
  std::vector<iovec> result;  // where its result is read from (capacity nranks, reserved at connect)
  size_t sentOffset = 0;
  bool sent = false;
};

struct StarComm {
  int rank = 0;
  int nranks = 1;
  int rootFd = -1;                   // non-root ranks: the connection to rank 0
  std::string rootAddress;           // non-root ranks: rank 0's, for WARNs (getpeername fails once the peer is gone)
  std::vector<Peer> peers;           // rank 0: one per rank
  std::vector<const char*> sources;  // rank 0: reduction operands, one per rank
  std::vector<iovec> ownWindow;      // rank 0: its own all-gather window
  bool computed = false;             // rank 0: the current operation's result is ready to send
  sdk::RequestPool<StarRequest, kMaxPending> requests;
  std::array<StarRequest*, kMaxPending> queue{};  // posted and not complete, oldest first
  size_t head = 0;
  size_t pending = 0;
  uint64_t nextSequence = 0;
  bool failed = false;
  ncclResult_t failure = ncclSuccess;
  std::string failureText;

  ~StarComm() {
    if (rootFd >= 0) close(rootFd);
    for (Peer& peer : peers)
      if (peer.fd >= 0) close(peer.fd);
  }
};

size_t typeBytes(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;  // float16, bfloat16 and fp8 are left out to keep the example lean
  }
}
bool opSupported(ncclRedOp_t op) {
  return op == ncclSum || op == ncclProd || op == ncclMin || op == ncclMax;
}
bool reductionSupported(ncclDataType_t type, ncclRedOp_t op) {
  return typeBytes(type) != 0 && opSupported(op);
}

const char* collectiveName(Collective collective) {
  switch (collective) {
    case Collective::kAllReduce: return "all-reduce";
    case Collective::kAllGather: return "all-gather";
    case Collective::kReduceScatter: return "reduce-scatter";
  }
  return "?";
}

// ---- reduction ------------------------------------------------------------------------------------------------------

// Integers are combined in their unsigned type (wider than int where C would promote them), so overflow wraps as
// C's unsigned arithmetic does, for signed types too.
template <class T>
T combine(ncclRedOp_t op, T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
    if (op == ncclSum) return static_cast<T>(static_cast<U>(static_cast<W>(static_cast<U>(a)) + static_cast<U>(b)));
    if (op == ncclProd)
      return static_cast<T>(static_cast<U>(static_cast<W>(static_cast<U>(a)) * static_cast<W>(static_cast<U>(b))));
  } else {
    if (op == ncclSum) return a + b;
    if (op == ncclProd) return a * b;
  }
  if (op == ncclMin) return b < a ? b : a;
  return a < b ? b : a;  // ncclMax
}

// dst = sources[0] op sources[1] op ... in rank order. dst may be sources[0] (in place), never another source.
template <class T>
void reduceAs(char* dst, const char* const* sources, int nsources, size_t count, ncclRedOp_t op) {
  if (dst != sources[0] && count > 0) std::memmove(dst, sources[0], count * sizeof(T));
  for (int s = 1; s < nsources; ++s) {
    const char* source = sources[s];
    for (size_t i = 0; i < count; ++i) {
      T a, b;  // memcpy: host buffers need not be aligned for T
      std::memcpy(&a, dst + i * sizeof(T), sizeof(T));
      std::memcpy(&b, source + i * sizeof(T), sizeof(T));
      a = combine(op, a, b);
      std::memcpy(dst + i * sizeof(T), &a, sizeof(T));
    }
  }
}

void reduce(char* dst, const char* const* sources, int nsources, size_t count, ncclDataType_t type, ncclRedOp_t op) {
  switch (type) {
    case ncclInt8: return reduceAs<int8_t>(dst, sources, nsources, count, op);
    case ncclUint8: return reduceAs<uint8_t>(dst, sources, nsources, count, op);
    case ncclInt32: return reduceAs<int32_t>(dst, sources, nsources, count, op);
    case ncclUint32: return reduceAs<uint32_t>(dst, sources, nsources, count, op);
    case ncclInt64: return reduceAs<int64_t>(dst, sources, nsources, count, op);
    case ncclUint64: return reduceAs<uint64_t>(dst, sources, nsources, count, op);
    case ncclFloat32: return reduceAs<float>(dst, sources, nsources, count, op);
    case ncclFloat64: return reduceAs<double>(dst, sources, nsources, count, op);
    default: return;  // refused when posted
  }
}

// Copies the concatenation of `from` into the concatenation of `to` (as many bytes as the shorter holds); memmove,
// since an in-place all-gather's output holds its input.
void copyParts(const iovec* from, int nfrom, const iovec* to, int nto) {
  int f = 0, t = 0;
  size_t fo = 0, to_offset = 0;
  while (f < nfrom && t < nto) {
    size_t n = std::min(from[f].iov_len - fo, to[t].iov_len - to_offset);
    if (n > 0)
      std::memmove(static_cast<char*>(to[t].iov_base) + to_offset, static_cast<const char*>(from[f].iov_base) + fo, n);
    fo += n;
    to_offset += n;
    if (fo == from[f].iov_len) ++f, fo = 0;
    if (to_offset == to[t].iov_len) ++t, to_offset = 0;
  }
}

// ---- blocking helpers for connect, each bounded by a deadline -------------------------------------------------------

int millisecondsLeft(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 100));
}

// kDone, kClosed, kFailed (error text set), or kWouldBlock when the deadline passed first.
sdk::IoStatus transferBefore(bool sending, int fd, void* data, size_t size, Clock::time_point deadline,
                             std::string* error) {
  size_t offset = 0;
  for (;;) {
    sdk::IoStatus status =
        sending ? sdk::sendSome(fd, data, size, &offset, error) : sdk::recvSome(fd, data, size, &offset, error);
    if (status != sdk::IoStatus::kWouldBlock) return status;
    if (Clock::now() >= deadline) return status;
    sdk::waitForSocket(fd, sending ? POLLOUT : POLLIN, millisecondsLeft(deadline));
  }
}

uint64_t randomListenId() {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  std::random_device device;  // fresh per call: a forked child must not repeat its parent's ids
  uint64_t id = 0;
  while (id == 0) id = (static_cast<uint64_t>(device()) << 32) ^ device() ^ static_cast<uint64_t>(getpid());
  return id;
}

}  // namespace

class StarColl {
 public:
  static constexpr const char kName[] = "star";

  ncclResult_t init(const sdk::InitArgs& args, void** ctx) {
    sdk::setLogPrefix("NET/star");
    chooseInterfaceOnce();
    if (!interfaceFound_) {
      NCCL_NET_WARN("init: no usable network interface (%s=%s)", ifnameVariable_,
                    std::getenv(ifnameVariable_) != nullptr ? std::getenv(ifnameVariable_) : "<unset>");
      return ncclSystemError;
    }
    auto context = std::make_unique<Context>();
    context->connectTimeoutS =
        static_cast<int>(sdk::envInteger("NNS_STAR_CONNECT_TIMEOUT", kDefaultConnectTimeoutS, 1, 86400));
    NCCL_NET_INFO(NCCL_INIT | NCCL_NET,
                  "star collNet through ncclCollNet_v%d: rank 0 reduces for the others over TCP; listening on %s "
                  "(%s), connect timeout %d s",
                  args.abiVersion, interfaceName_.c_str(), interfaceAddress_.toString().c_str(),
                  context->connectTimeoutS);
    *ctx = context.release();
    return ncclSuccess;
  }
  ncclResult_t finalize(void* ctx) {
    delete static_cast<Context*>(ctx);
    return ncclSuccess;
  }

  ncclResult_t devices(int* ndev) {
    *ndev = 1;
    return ncclSuccess;
  }

  ncclResult_t getProperties(int /*dev*/, ncclNetProperties_v12_t* props) {
    props->name = const_cast<char*>("star0");
    props->pciPath = nullptr;
    props->guid = 0x7374617230ull;  // "star0"
    props->ptrSupport = NCCL_PTR_HOST;
    props->speed = 10000;
    props->latency = 0;
    props->port = 0;
    props->maxComms = 64;
    props->maxRecvs = 1;
    props->maxCollBytes = 512ull << 20;
    props->netDeviceType = NCCL_NET_DEVICE_HOST;
    return ncclSuccess;
  }

  ncclResult_t listen(void* ctx, int /*dev*/, void* handle, void** listenComm) {
    std::string error;
    sdk::SocketAddress bound{};
    int fd = sdk::listenTcp(interfaceAddress_, 128, &bound, &error);
    if (fd < 0) {
      NCCL_NET_WARN("listen on %s: %s", interfaceName_.c_str(), error.c_str());
      return ncclSystemError;
    }
    auto* context = static_cast<Context*>(ctx);
    auto listen = std::make_unique<ListenComm>(
        ListenComm{fd, bound, randomListenId(),
                   context != nullptr ? context->connectTimeoutS : static_cast<int>(kDefaultConnectTimeoutS)});
    if (ncclResult_t result = kCodec.encode(StarHandle{bound, listen->listenId}, handle); result != ncclSuccess) {
      close(fd);
      return result;
    }
    *listenComm = listen.release();
    return ncclSuccess;
  }

  // Blocking, bounded by the connect timeout: NCCL calls it once per rank, from its proxy thread, all ranks together.
  ncclResult_t connect(void* handles[], int nranks, int rank, void* listenComm, void** collComm) {
    auto* listen = static_cast<ListenComm*>(listenComm);
    std::vector<StarHandle> decoded(static_cast<size_t>(nranks));
    for (int r = 0; r < nranks; ++r) {
      if (handles[r] == nullptr || kCodec.decode(handles[r], &decoded[static_cast<size_t>(r)]) != ncclSuccess) {
        NCCL_NET_WARN("connect: the handle of rank %d of %d is not a star collNet handle", r, nranks);
        return ncclInvalidArgument;
      }
    }
    if (decoded[static_cast<size_t>(rank)].listenId != listen->listenId) {
      NCCL_NET_WARN("connect: handle %d (this rank's) names listener %llu, but this rank listens as %llu", rank,
                    static_cast<unsigned long long>(decoded[static_cast<size_t>(rank)].listenId),
                    static_cast<unsigned long long>(listen->listenId));
      return ncclInvalidArgument;
    }
    auto comm = std::make_unique<StarComm>();
    comm->rank = rank;
    comm->nranks = nranks;
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(listen->connectTimeoutS);
    if (nranks > 1) {
      ncclResult_t result = rank == 0 ? acceptRanks(*listen, comm.get(), deadline, listen->connectTimeoutS)
                                      : joinRoot(decoded[0], comm.get(), deadline, listen->connectTimeoutS);
      if (result != ncclSuccess) return result;
    }
    if (rank == 0) {
      comm->peers.resize(static_cast<size_t>(nranks));  // [0]: rank 0's own reduce-scatter input
      comm->sources.resize(static_cast<size_t>(nranks));
      comm->ownWindow.reserve(static_cast<size_t>(nranks));
      for (Peer& peer : comm->peers) peer.result.reserve(static_cast<size_t>(nranks));
    }
    *collComm = comm.release();
    return ncclSuccess;
  }

  ncclResult_t reduceSupport(ncclDataType_t dataType, ncclRedOp_t redOp, int* supported) {
    *supported = reductionSupported(dataType, redOp) ? 1 : 0;
    return ncclSuccess;
  }

  ncclResult_t regMr(void* /*collComm*/, void* data, size_t size, int type, void** mhandle) {
    if (type != NCCL_PTR_HOST) {
      NCCL_NET_WARN("regMr: memory type %d; the star collNet reduces host memory only (NCCL_PTR_HOST)", type);
      return ncclInvalidArgument;
    }
    *mhandle = new Region{static_cast<const char*>(data), size};
    return ncclSuccess;
  }
  ncclResult_t deregMr(void* /*collComm*/, void* mhandle) {
    delete static_cast<Region*>(mhandle);
    return ncclSuccess;
  }

  ncclResult_t iallreduce(void* collComm, void* sendData, void* recvData, size_t count, ncclDataType_t dataType,
                          ncclRedOp_t redOp, void* sendMhandle, void* recvMhandle, void** request) {
    auto* comm = static_cast<StarComm*>(collComm);
    NCCL_NET_CHECK(checkReduction("iallreduce", dataType, redOp));
    const size_t size = typeBytes(dataType);
    if (count > (SIZE_MAX / size)) {
      NCCL_NET_WARN("iallreduce: %zu elements of %zu bytes overflow size_t", count, size);
      return ncclInvalidArgument;
    }
    const size_t bytes = count * size;
    NCCL_NET_CHECK(checkRegion("iallreduce", "sendData", sendMhandle, sendData, bytes));
    NCCL_NET_CHECK(checkRegion("iallreduce", "recvData", recvMhandle, recvData, bytes));
    StarRequest* r = nullptr;
    NCCL_NET_CHECK(acquire(comm, "iallreduce", &r));
    r->collective = Collective::kAllReduce;
    r->type = dataType;
    r->op = redOp;
    r->payloadBytes = r->resultBytes = bytes;
    r->windowOffset = r->windowBytes = 0;  // the header's window: compared on rank 0, whatever a reused request held
    r->input = iovec{sendData, bytes};
    r->output = iovec{recvData, bytes};
    return post(comm, r, request);
  }

  // The gathered output is nranks * bytesPerRank bytes, rank r's block at r * bytesPerRank; this call delivers the
  // window [windowOffset, windowOffset + windowBytes) of it into recvParts, one part after another. As NCCL's proxy
  // posts it (src/transport/coll_net.cc), sendData points at this rank's first byte inside the window: its block's
  // start, or, where the window starts inside its block, that byte. Only this rank's bytes inside the window are
  // read, and every rank must post the same window.
  ncclResult_t iallgather(void* collComm, void* sendData, int nRecvParts, ncclNetSGE_v12_t* recvParts,
                          size_t bytesPerRank, size_t windowOffset, size_t windowBytes, void* sendMhandle,
                          void** request) {
    auto* comm = static_cast<StarComm*>(collComm);
    size_t outputBytes = 0;
    NCCL_NET_CHECK(
        checkWindow("iallgather", comm, nRecvParts, recvParts, bytesPerRank, windowOffset, windowBytes, &outputBytes));
    const size_t mine = inWindow(comm->rank, bytesPerRank, windowOffset, windowBytes);
    NCCL_NET_CHECK(checkRegion("iallgather", "sendData", sendMhandle, sendData, mine));
    StarRequest* r = nullptr;
    NCCL_NET_CHECK(acquire(comm, "iallgather", &r));
    r->collective = Collective::kAllGather;
    r->payloadBytes = mine;
    r->bytesPerRank = bytesPerRank;
    r->windowOffset = windowOffset;
    r->windowBytes = r->resultBytes = windowBytes;
    r->input = iovec{sendData, mine};
    copySges(recvParts, nRecvParts, r);
    return post(comm, r, request);
  }

  // sendParts carry the window [windowOffset, windowOffset + windowBytes) of this rank's input (nranks blocks of
  // bytesPerRank), the same window on every rank; rank r gets in recvData the reduction of its block's bytes inside
  // the window. As NCCL's proxy posts it (src/transport/coll_net.cc), recvData points at the rank's first byte inside
  // the window: its block's start, or the byte where the window starts inside its block. The window's edges and the
  // blocks are whole elements.
  ncclResult_t ireducescatter(void* collComm, int nSendParts, ncclNetSGE_v12_t* sendParts, void* recvData,
                              size_t bytesPerRank, size_t windowOffset, size_t windowBytes, ncclDataType_t dataType,
                              ncclRedOp_t redOp, void* recvMhandle, void** request) {
    auto* comm = static_cast<StarComm*>(collComm);
    NCCL_NET_CHECK(checkReduction("ireducescatter", dataType, redOp));
    size_t inputBytes = 0;
    NCCL_NET_CHECK(checkWindow("ireducescatter", comm, nSendParts, sendParts, bytesPerRank, windowOffset, windowBytes,
                               &inputBytes));
    const size_t element = typeBytes(dataType);
    if (bytesPerRank % element != 0 || windowOffset % element != 0 || windowBytes % element != 0) {
      NCCL_NET_WARN(
          "ireducescatter: %zu bytes per rank and the window of %zu bytes at %zu are not all whole numbers "
          "of %zu-byte elements",
          bytesPerRank, windowBytes, windowOffset, element);
      return ncclInvalidArgument;
    }
    const size_t mine = inWindow(comm->rank, bytesPerRank, windowOffset, windowBytes);
    NCCL_NET_CHECK(checkRegion("ireducescatter", "recvData", recvMhandle, recvData, mine));
    StarRequest* r = nullptr;
    NCCL_NET_CHECK(acquire(comm, "ireducescatter", &r));
    r->collective = Collective::kReduceScatter;
    r->type = dataType;
    r->op = redOp;
    r->payloadBytes = windowBytes;
    r->bytesPerRank = bytesPerRank;
    r->windowOffset = windowOffset;
    r->windowBytes = windowBytes;
    r->resultBytes = mine;
    r->output = iovec{recvData, mine};
    copySges(sendParts, nSendParts, r);
    return post(comm, r, request);
  }

  ncclResult_t test(void* request, int* done, sdk::CompletedSizes& sizes) {
    auto* r = static_cast<StarRequest*>(request);
    if (r->comm == nullptr || !r->comm->requests.owns(r)) {
      NCCL_NET_WARN("test: %p is not a live request of the star collNet", request);
      return ncclInvalidArgument;
    }
    StarComm* comm = r->comm;
    if (!r->done) {
      progress(comm);
      if (!r->done) {
        if (!comm->failed) return ncclSuccess;
        NCCL_NET_WARN("test: %s #%llu cannot complete: %s", collectiveName(r->collective),
                      static_cast<unsigned long long>(r->sequence), comm->failureText.c_str());
        return comm->failure;
      }
    }
    if (!sizes.set(0, r->resultBytes)) return ncclSuccess;  // the SDK reports the overflow
    *done = 1;
    r->comm = nullptr;
    comm->requests.release(r);
    return ncclSuccess;
  }

  // Requests still pending are abandoned with the comm.
  ncclResult_t closeColl(void* collComm) {
    delete static_cast<StarComm*>(collComm);
    return ncclSuccess;
  }
  ncclResult_t closeListen(void* listenComm) {
    auto* listen = static_cast<ListenComm*>(listenComm);
    close(listen->fd);
    delete listen;
    return ncclSuccess;
  }

 private:
  // ---- set-up ---------------------------------------------------------------------------------------------------

  // As NCCL chooses its socket interface, once per process: NNS_STAR_IFNAME, else NCCL_SOCKET_IFNAME, else automatic
  // (ib*, then anything but docker and lo, then docker, then lo).
  void chooseInterfaceOnce() {
    std::call_once(chosen_, [this] {
      ifnameVariable_ =
          sdk::interfaceSpecGiven(std::getenv("NNS_STAR_IFNAME")) ? "NNS_STAR_IFNAME" : "NCCL_SOCKET_IFNAME";
      bool unknownFamily = false;
      sdk::socketFamilyFromEnv("NCCL_SOCKET_FAMILY", &unknownFamily);
      if (unknownFamily)
        NCCL_NET_WARN("NCCL_SOCKET_FAMILY=%s is neither AF_INET nor AF_INET6; using both",
                      std::getenv("NCCL_SOCKET_FAMILY"));
      auto found = sdk::findInterfaces(ifnameVariable_, "NCCL_SOCKET_FAMILY", 1);
      if (found.empty()) return;
      interfaceFound_ = true;
      interfaceName_ = found[0].name;
      interfaceAddress_ = found[0].address;
    });
  }

  static void closeAll(std::vector<int>& fds) {
    for (int& fd : fds) {
      if (fd >= 0) close(fd);
      fd = -1;
    }
  }

  // Rank 0: accepts the other ranks' connections until all of them said Hello, dropping any stranger, then acks all.
  static ncclResult_t acceptRanks(const ListenComm& listen, StarComm* comm, Clock::time_point deadline, int timeoutS) {
    struct Incoming {
      int fd;
      sdk::SocketAddress peer;
      Hello hello;
      size_t offset;
    };
    const int nranks = comm->nranks;
    std::vector<Incoming> incoming;
    std::vector<int> fds(static_cast<size_t>(nranks), -1);
    int arrived = 1;
    auto giveUp = [&](ncclResult_t result) {
      for (Incoming& in : incoming) close(in.fd);
      closeAll(fds);
      return result;
    };
    while (arrived < nranks) {
      if (Clock::now() >= deadline) {
        std::string missing;
        for (int r = 1; r < nranks; ++r)
          if (fds[static_cast<size_t>(r)] < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        NCCL_NET_WARN("connect: rank 0 waited %d s (NNS_STAR_CONNECT_TIMEOUT) for %d rank(s); rank(s) %s never arrived",
                      timeoutS, nranks - 1, missing.c_str());
        return giveUp(ncclRemoteError);
      }
      std::vector<pollfd> waiting{{listen.fd, POLLIN, 0}};
      for (const Incoming& in : incoming) waiting.push_back({in.fd, POLLIN, 0});
      (void)poll(waiting.data(), waiting.size(), millisecondsLeft(deadline));
      for (;;) {
        int fd = -1;
        sdk::SocketAddress peer{};
        std::string error;
        sdk::IoStatus status = sdk::acceptTcp(listen.fd, &fd, &peer, &error);
        if (status == sdk::IoStatus::kWouldBlock) break;
        if (status != sdk::IoStatus::kDone) {
          NCCL_NET_WARN("connect: rank 0's listener on %s failed: %s", listen.address.toString().c_str(),
                        error.c_str());
          return giveUp(ncclSystemError);
        }
        incoming.push_back(Incoming{fd, peer, Hello{}, 0});
      }
      for (size_t i = 0; i < incoming.size();) {
        Incoming& in = incoming[i];
        std::string error;
        sdk::IoStatus status = sdk::recvSome(in.fd, &in.hello, sizeof(in.hello), &in.offset, &error);
        if (status == sdk::IoStatus::kWouldBlock) {
          ++i;
          continue;
        }
        std::string refusal = status == sdk::IoStatus::kDone ? helloRefusal(in.hello, listen, nranks, fds) : error;
        if (refusal.empty()) {
          fds[static_cast<size_t>(in.hello.rank)] = in.fd;
          ++arrived;
        } else {
          NCCL_NET_WARN("connect: rank 0 dropped a connection from %s: %s", in.peer.toString().c_str(),
                        refusal.c_str());
          close(in.fd);
        }
        incoming.erase(incoming.begin() + static_cast<long>(i));
      }
    }
    for (Incoming& in : incoming) close(in.fd);  // strangers still silent
    incoming.clear();
    for (int r = 1; r < nranks; ++r) {
      Hello ack{kWireMagic, kWireVersion, listen.listenId, r, nranks};
      std::string error = "timed out";
      int fd = fds[static_cast<size_t>(r)];
      if (transferBefore(true, fd, &ack, sizeof(ack), deadline, &error) != sdk::IoStatus::kDone) {
        NCCL_NET_WARN("connect: rank 0 could not answer rank %d (%s): %s", r, sdk::peerAddressOf(fd).toString().c_str(),
                      error.c_str());
        return giveUp(ncclRemoteError);
      }
    }
    comm->peers.resize(static_cast<size_t>(nranks));
    for (int r = 1; r < nranks; ++r) {
      comm->peers[static_cast<size_t>(r)].fd = fds[static_cast<size_t>(r)];
      comm->peers[static_cast<size_t>(r)].address = sdk::peerAddressOf(fds[static_cast<size_t>(r)]).toString();
      configureSocket(fds[static_cast<size_t>(r)]);
    }
    return ncclSuccess;
  }

  static std::string helloRefusal(const Hello& hello, const ListenComm& listen, int nranks,
                                  const std::vector<int>& fds) {
    if (hello.magic != kWireMagic || hello.version != kWireVersion) return "not a star collNet Hello";
    if (hello.listenId != listen.listenId) return "a Hello for another listener";
    if (hello.nranks != nranks)
      return "a Hello of rank " + std::to_string(hello.rank) + " of " + std::to_string(hello.nranks) +
             " ranks, but this communicator has " + std::to_string(nranks);
    if (hello.rank < 1 || hello.rank >= nranks)
      return "a Hello of rank " + std::to_string(hello.rank) + ", out of range";
    if (fds[static_cast<size_t>(hello.rank)] >= 0)
      return "a second Hello of rank " + std::to_string(hello.rank) + " (that rank is connected already)";
    return "";
  }

  // A non-root rank: connects to rank 0 (retrying within the deadline), says Hello, waits for rank 0's ack.
  static ncclResult_t joinRoot(const StarHandle& root, StarComm* comm, Clock::time_point deadline, int timeoutS) {
    comm->rootAddress = root.address.toString();
    const char* where = comm->rootAddress.c_str();
    sdk::TcpConnector connector;
    connector.start(root.address, sdk::SocketAddress{},
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                    std::chrono::milliseconds(100));
    for (;;) {
      sdk::IoStatus status = connector.progress();
      if (status == sdk::IoStatus::kDone) break;
      if (status != sdk::IoStatus::kWouldBlock) {
        NCCL_NET_WARN("connect: rank %d cannot reach rank 0 at %s: %s", comm->rank, where, connector.error().c_str());
        return connector.failedHere() ? ncclSystemError : ncclRemoteError;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    int fd = connector.release();
    Hello hello{kWireMagic, kWireVersion, root.listenId, comm->rank, comm->nranks};
    std::string error = "timed out";
    if (transferBefore(true, fd, &hello, sizeof(hello), deadline, &error) != sdk::IoStatus::kDone) {
      NCCL_NET_WARN("connect: rank %d could not send its Hello to rank 0 at %s: %s", comm->rank, where, error.c_str());
      close(fd);
      return ncclRemoteError;
    }
    Hello ack{};
    sdk::IoStatus status = transferBefore(false, fd, &ack, sizeof(ack), deadline, &error);
    if (status == sdk::IoStatus::kWouldBlock) {
      NCCL_NET_WARN(
          "connect: rank %d: rank 0 at %s did not answer within %d s (NNS_STAR_CONNECT_TIMEOUT): not every "
          "rank called connect",
          comm->rank, where, timeoutS);
    } else if (status != sdk::IoStatus::kDone) {
      NCCL_NET_WARN("connect: rank %d: rank 0 at %s ended the set-up (%s): see rank 0's WARN", comm->rank, where,
                    error.c_str());
    } else if (ack.magic != kWireMagic || ack.listenId != root.listenId || ack.rank != comm->rank ||
               ack.nranks != comm->nranks) {
      NCCL_NET_WARN("connect: rank %d: rank 0 at %s answered with something else than its ack", comm->rank, where);
      status = sdk::IoStatus::kFailed;
    }
    if (status != sdk::IoStatus::kDone) {
      close(fd);
      return ncclRemoteError;
    }
    configureSocket(fd);
    comm->rootFd = fd;
    return ncclSuccess;
  }

  static void configureSocket(int fd) {
    std::string error;
    if (!sdk::setDeadPeerTimeout(fd, kDeadPeerTimeoutMs, &error))
      NCCL_NET_WARN("dead-peer detection on an idle connection is off: %s", error.c_str());
  }

  // ---- posting ---------------------------------------------------------------------------------------------------

  static ncclResult_t checkReduction(const char* call, ncclDataType_t type, ncclRedOp_t op) {
    if (reductionSupported(type, op)) return ncclSuccess;
    NCCL_NET_WARN("%s: data type %d with op %d is not supported (reduceSupport says so)", call, static_cast<int>(type),
                  static_cast<int>(op));
    return ncclInvalidArgument;
  }

  // How many bytes of rank q's block lie in the window [offset, offset + bytes).
  static size_t inWindow(int q, size_t bytesPerRank, size_t offset, size_t bytes) {
    const size_t begin = static_cast<size_t>(q) * bytesPerRank;
    const size_t from = std::max(begin, offset), to = std::min(begin + bytesPerRank, offset + bytes);
    return from < to ? to - from : 0;
  }
  // What rank 0 receives from rank p for `r`: p's bytes in the window for an all-gather, else r's payload size.
  static size_t payloadOf(const StarRequest* r, int p) {
    return r->collective == Collective::kAllGather ? inWindow(p, r->bytesPerRank, r->windowOffset, r->windowBytes)
                                                   : r->payloadBytes;
  }

  static ncclResult_t checkRegion(const char* call, const char* what, void* mhandle, const void* data, size_t size) {
    if (mhandle == nullptr || size == 0) return ncclSuccess;
    auto* region = static_cast<const Region*>(mhandle);
    auto* begin = static_cast<const char*>(data);
    if (begin >= region->data && size <= region->size &&
        begin - region->data <= static_cast<ptrdiff_t>(region->size - size))
      return ncclSuccess;
    NCCL_NET_WARN("%s: %s %p + %zu bytes is not inside its registration %p + %zu bytes", call, what, data, size,
                  static_cast<const void*>(region->data), region->size);
    return ncclInvalidArgument;
  }

  // The window lies inside the nranks blocks (*totalBytes = nranks * bytesPerRank), and the parts carry it exactly.
  static ncclResult_t checkWindow(const char* call, const StarComm* comm, int nParts, const ncclNetSGE_v12_t* parts,
                                  size_t bytesPerRank, size_t windowOffset, size_t windowBytes, size_t* totalBytes) {
    if (nParts < 1 || nParts > kMaxParts) {
      NCCL_NET_WARN("%s: %d scatter-gather parts; this collNet takes 1..%d", call, nParts, kMaxParts);
      return ncclInvalidArgument;
    }
    if (bytesPerRank > SIZE_MAX / static_cast<size_t>(comm->nranks)) {
      NCCL_NET_WARN("%s: %d ranks of %zu bytes overflow size_t", call, comm->nranks, bytesPerRank);
      return ncclInvalidArgument;
    }
    *totalBytes = bytesPerRank * static_cast<size_t>(comm->nranks);
    if (windowOffset > *totalBytes || windowBytes > *totalBytes - windowOffset) {
      NCCL_NET_WARN("%s: the window of %zu bytes at %zu is not inside the %d x %zu bytes of every rank's blocks", call,
                    windowBytes, windowOffset, comm->nranks, bytesPerRank);
      return ncclInvalidArgument;
    }
    size_t carried = 0;
    for (int i = 0; i < nParts; ++i) {
      if (parts[i].size > 0 && parts[i].address == nullptr) {
        NCCL_NET_WARN("%s: part %d of %zu bytes has a NULL address", call, i, parts[i].size);
        return ncclInvalidArgument;
      }
      NCCL_NET_CHECK(checkRegion(call, "a part", parts[i].mhandle, parts[i].address, parts[i].size));
      carried += parts[i].size;
    }
    if (carried != windowBytes) {
      NCCL_NET_WARN("%s: %d part(s) of %zu bytes in all carry a window of %zu bytes", call, nParts, carried,
                    windowBytes);
      return ncclInvalidArgument;
    }
    return ncclSuccess;
  }

  static void copySges(const ncclNetSGE_v12_t* sges, int n, StarRequest* r) {
    for (int i = 0; i < n; ++i) r->parts[i] = iovec{sges[i].address, sges[i].size};
    r->nParts = n;
  }

  static ncclResult_t acquire(StarComm* comm, const char* call, StarRequest** request) {
    if (comm->failed) {
      NCCL_NET_WARN("%s: this communicator failed earlier: %s", call, comm->failureText.c_str());
      return comm->failure != ncclSuccess ? comm->failure : ncclInternalError;
    }
    *request = comm->requests.acquire();
    if (*request == nullptr) {
      NCCL_NET_WARN("%s: %d operations are pending on this communicator already, the most it holds", call, kMaxPending);
      return ncclInternalError;
    }
    return ncclSuccess;
  }

  static ncclResult_t post(StarComm* comm, StarRequest* r, void** request) {
    r->comm = comm;
    r->sequence = comm->nextSequence++;
    comm->queue[(comm->head + comm->pending) % kMaxPending] = r;
    ++comm->pending;
    *request = r;
    return ncclSuccess;
  }

  // ---- progress --------------------------------------------------------------------------------------------------

  // Runs the oldest operations as far as the sockets allow, without waiting; completes them in posting order.
  static void progress(StarComm* comm) {
    while (!comm->failed && comm->pending > 0) {
      StarRequest* r = comm->queue[comm->head];
      if (!r->started) start(comm, r);
      bool finished = comm->rank == 0 ? progressRoot(comm, r) : progressLeaf(comm, r);
      if (!finished) return;
      r->done = true;
      comm->head = (comm->head + 1) % kMaxPending;
      --comm->pending;
    }
  }

  static uint32_t kindOf(const StarRequest* r) {
    return static_cast<uint32_t>(r->collective) | static_cast<uint32_t>(r->type) << 8 |
           static_cast<uint32_t>(r->op) << 16;
  }

  static void start(StarComm* comm, StarRequest* r) {
    r->started = true;
    r->header = WireHeader{kWireMagic, kindOf(r), r->sequence, r->payloadBytes, r->windowOffset, r->windowBytes};
    r->phase = 0;
    r->offset = 0;
    if (comm->rank != 0) return;
    comm->computed = false;
    for (int p = 1; p < comm->nranks; ++p) {
      Peer& peer = comm->peers[static_cast<size_t>(p)];
      peer.headerOffset = peer.payloadOffset = peer.sentOffset = 0;
      peer.received = peer.sent = false;
      if (peer.staging.size() < payloadOf(r, p)) peer.staging.resize(payloadOf(r, p));
    }
    if (r->collective == Collective::kReduceScatter) {  // rank 0's own input, gathered from its parts, as block 0's
      Peer& self = comm->peers[0];
      if (self.staging.size() < r->payloadBytes) self.staging.resize(r->payloadBytes);
      iovec whole{self.staging.data(), r->payloadBytes};
      copyParts(r->parts, r->nParts, &whole, 1);
    }
  }

  static void fail(StarComm* comm, ncclResult_t result, const std::string& text) {
    comm->failed = true;
    comm->failure = result;
    comm->failureText = text;
    if (comm->rank == 0) {
      // Every other rank's pending operation must fail too, not only the dead rank's: end all the connections.
      for (Peer& peer : comm->peers)
        if (peer.fd >= 0) shutdown(peer.fd, SHUT_RDWR);
      NCCL_NET_WARN("rank 0: %s; closing the connections to every rank so that their operations fail too",
                    text.c_str());
    } else {
      shutdown(comm->rootFd, SHUT_RDWR);
      NCCL_NET_WARN("rank %d: %s", comm->rank, text.c_str());
    }
  }

  static void peerFailed(StarComm* comm, int rank, sdk::IoStatus status, const std::string& error) {
    const std::string& address = rank == 0 ? comm->rootAddress : comm->peers[static_cast<size_t>(rank)].address;
    std::string text = "rank " + std::to_string(rank) + " (" + address + "): " +
                       (status == sdk::IoStatus::kClosed ? std::string("connection closed by the peer") : error);
    fail(comm, ncclRemoteError, text);
  }

  // A non-root rank: header, payload, then the result.
  static bool progressLeaf(StarComm* comm, StarRequest* r) {
    int code = 0;
    std::string error;
    sdk::IoStatus status = sdk::IoStatus::kDone;
    if (r->phase == 0) {
      status = sdk::sendSome(comm->rootFd, &r->header, sizeof(r->header), &r->offset, &error);
      if (status == sdk::IoStatus::kDone) r->phase = 1, r->offset = 0;
    }
    if (r->phase == 1) {
      int n = 0;
      const iovec* in = r->inputParts(&n);
      status = sdk::sendSomeGather(comm->rootFd, in, n, &r->offset, &code);
      if (status == sdk::IoStatus::kDone) r->phase = 2, r->offset = 0;
    }
    if (r->phase == 2) {
      int n = 0;
      const iovec* out = r->outputParts(&n);
      status = sdk::recvSomeScatter(comm->rootFd, out, n, &r->offset, &code);
      if (status == sdk::IoStatus::kDone) return true;
    }
    if (sdk::failed(status)) peerFailed(comm, 0, status, error.empty() ? sdk::errnoText(code) : error);
    return false;
  }

  // Rank 0: takes in every rank's header and payload as bytes arrive, then computes, then sends every rank its part.
  static bool progressRoot(StarComm* comm, StarRequest* r) {
    bool allReceived = true;
    for (int p = 1; p < comm->nranks; ++p) {
      Peer& peer = comm->peers[static_cast<size_t>(p)];
      if (peer.received) continue;
      std::string error;
      sdk::IoStatus status = sdk::IoStatus::kDone;
      if (peer.headerOffset < sizeof(peer.header)) {
        status = sdk::recvSome(peer.fd, &peer.header, sizeof(peer.header), &peer.headerOffset, &error);
        if (status == sdk::IoStatus::kDone && !headerMatches(comm, p, r)) return false;
      }
      if (status == sdk::IoStatus::kDone)
        status = sdk::recvSome(peer.fd, peer.staging.data(), payloadOf(r, p), &peer.payloadOffset, &error);
      if (sdk::failed(status)) {
        peerFailed(comm, p, status, error);
        return false;
      }
      peer.received = status == sdk::IoStatus::kDone;
      allReceived = allReceived && peer.received;
    }
    if (!allReceived) return false;
    if (!comm->computed) compute(comm, r);
    bool allSent = true;
    for (int p = 1; p < comm->nranks; ++p) {
      Peer& peer = comm->peers[static_cast<size_t>(p)];
      if (peer.sent) continue;
      int code = 0;
      sdk::IoStatus status = sdk::sendSomeGather(peer.fd, peer.result.data(), static_cast<int>(peer.result.size()),
                                                 &peer.sentOffset, &code);
      if (sdk::failed(status)) {
        peerFailed(comm, p, status, sdk::errnoText(code));
        return false;
      }
      peer.sent = status == sdk::IoStatus::kDone;
      allSent = allSent && peer.sent;
    }
    if (!allSent) return false;
    if (r->collective == Collective::kAllGather) {  // after the sends: an in-place output may overlap the input
      windowParts(comm, r, &comm->ownWindow);
      copyParts(comm->ownWindow.data(), static_cast<int>(comm->ownWindow.size()), r->parts, r->nParts);
    }
    return true;
  }

  static bool headerMatches(StarComm* comm, int p, const StarRequest* r) {
    const WireHeader& got = comm->peers[static_cast<size_t>(p)].header;
    const bool sameWindow = got.windowOffset == r->windowOffset && got.windowBytes == r->windowBytes;
    if (got.magic == kWireMagic && got.kind == r->header.kind && got.sequence == r->sequence &&
        got.payloadBytes == payloadOf(r, p) && sameWindow)
      return true;
    char text[320];
    std::snprintf(text, sizeof(text),
                  "rank %d posted operation #%llu (kind 0x%x, %llu bytes, window %llu+%llu) while rank 0 runs #%llu "
                  "(%s, kind 0x%x, %zu bytes, window %zu+%zu): the ranks called different collectives",
                  p, static_cast<unsigned long long>(got.sequence), got.kind,
                  static_cast<unsigned long long>(got.payloadBytes), static_cast<unsigned long long>(got.windowOffset),
                  static_cast<unsigned long long>(got.windowBytes), static_cast<unsigned long long>(r->sequence),
                  collectiveName(r->collective), r->header.kind, payloadOf(r, p), r->windowOffset, r->windowBytes);
    fail(comm, ncclInternalError, text);
    return false;
  }

  // The pieces of r's all-gather window: rank 0's from its sendData, the others' from staging, each holding that
  // rank's bytes inside the window from their first.
  static void windowParts(StarComm* comm, const StarRequest* r, std::vector<iovec>* out) {
    out->clear();
    const size_t perRank = r->bytesPerRank, offset = r->windowOffset, end = r->windowOffset + r->windowBytes;
    for (int q = 0; q < comm->nranks; ++q) {
      const size_t begin = static_cast<size_t>(q) * perRank;
      const size_t from = std::max(begin, offset), to = std::min(begin + perRank, end);
      if (from >= to) continue;
      char* base = q == 0 ? static_cast<char*>(r->input.iov_base) : comm->peers[static_cast<size_t>(q)].staging.data();
      out->push_back(iovec{base, to - from});
    }
  }

  static void compute(StarComm* comm, StarRequest* r) {
    comm->computed = true;
    const int n = comm->nranks;
    for (int p = 1; p < n; ++p) comm->peers[static_cast<size_t>(p)].result.clear();
    switch (r->collective) {
      case Collective::kAllReduce: {
        const size_t element = typeBytes(r->type);  // checked when posted: never 0 here
        if (element == 0) break;
        comm->sources[0] = static_cast<const char*>(r->input.iov_base);
        for (int p = 1; p < n; ++p)
          comm->sources[static_cast<size_t>(p)] = comm->peers[static_cast<size_t>(p)].staging.data();
        reduce(static_cast<char*>(r->output.iov_base), comm->sources.data(), n, r->payloadBytes / element, r->type,
               r->op);
        for (int p = 1; p < n; ++p) comm->peers[static_cast<size_t>(p)].result.push_back(r->output);
        break;
      }
      case Collective::kReduceScatter: {
        const size_t element = typeBytes(r->type);  // checked when posted: never 0 here
        if (element == 0) break;
        // Every staging buffer holds its rank's window from the window's first byte; each block's part inside it is
        // reduced across the ranks and goes to that block's rank.
        const size_t block = r->bytesPerRank, offset = r->windowOffset, end = r->windowOffset + r->windowBytes;
        for (int b = 0; b < n; ++b) {
          const size_t from = std::max(static_cast<size_t>(b) * block, offset);
          const size_t to = std::min(static_cast<size_t>(b + 1) * block, end);
          if (from >= to) continue;
          for (int q = 0; q < n; ++q)
            comm->sources[static_cast<size_t>(q)] =
                comm->peers[static_cast<size_t>(q)].staging.data() + (from - offset);
          // Block b's result lands on rank 0's own copy of it (the first operand), or in recvData for block 0.
          char* dst = b == 0 ? static_cast<char*>(r->output.iov_base) : comm->peers[0].staging.data() + (from - offset);
          reduce(dst, comm->sources.data(), n, (to - from) / element, r->type, r->op);
          if (b > 0) comm->peers[static_cast<size_t>(b)].result.push_back(iovec{dst, to - from});
        }
        break;
      }
      case Collective::kAllGather:
        for (int p = 1; p < n; ++p) windowParts(comm, r, &comm->peers[static_cast<size_t>(p)].result);
        break;
    }
  }

  std::once_flag chosen_;
  bool interfaceFound_ = false;
  const char* ifnameVariable_ = "NCCL_SOCKET_IFNAME";
  std::string interfaceName_;
  sdk::SocketAddress interfaceAddress_{};
};

NCCL_NET_SDK_EXPORT_COLLNET(StarColl)
