// one_rank_collnet.cc: a collNet for the loader's tests, built into one library with the minimal net plugin: it
// really reduces, for a communicator of one rank (the all-reduce of one contribution is that contribution), and
// answers anything larger with ncclInvalidUsage and a WARN saying why; its all-gather and reduce-scatter (v8 and newer
// tables) are that one rank's too. In-network reduction needs switch hardware
// this project cannot run; this is the smallest collNet whose results can be checked.
//
// NNS_COLLNET_ONLY_VERSION=N exports ncclCollNetPlugin_vN alone (beside the minimal net's NNS_MINIMAL_ONLY_VERSION), so
// a plugin of that era can be loaded; otherwise v6..v12. NNS_TEST_COLLNET_DEVICES (read at devices()) overrides the
// device count, so a collNet with no device can be shown rejected; NNS_TEST_COLLNET_DEVICE_TYPE=unpack (read at
// getProperties) makes its device an UNPACK one, which hosts of v7 and v8 collNets take for a host device.
// NNS_COLLNET_WITHOUT_GATHERS leaves iallgather and ireducescatter out (NULL in every table).
#include <cstdlib>
#include <cstring>
#include <memory>

#include <nccl_net/sdk.hpp>

namespace {

namespace sdk = nccl_net::sdk;

struct OneRankHandle {
  uint64_t listenId;
};
constexpr sdk::HandleCodec<OneRankHandle> kCodec(sdk::handleMagic("one-rank-coll"), 1);

struct ListenComm {
  uint64_t listenId;
};
struct CollComm;
struct CollRequest {
  CollComm* comm = nullptr;
  size_t bytes = 0;
};
struct CollComm {
  sdk::RequestPool<CollRequest, NCCL_NET_MAX_REQUESTS> requests;
};
struct Region {
  void* data;
  size_t size;
};

size_t typeBytes(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
  }
}

}  // namespace

class OneRankColl {
 public:
  static constexpr const char kName[] = "one-rank-coll";

  ncclResult_t init(const sdk::InitArgs& args, void** ctx) {
    sdk::setLogPrefix("NET/one-rank-coll");
    NCCL_NET_INFO(NCCL_INIT | NCCL_NET, "one-rank collNet initialised through ncclCollNet_v%d", args.abiVersion);
    *ctx = nullptr;
    return ncclSuccess;
  }

  ncclResult_t devices(int* ndev) {
    const char* forced = std::getenv("NNS_TEST_COLLNET_DEVICES");
    *ndev = forced != nullptr ? std::atoi(forced) : 1;
    return ncclSuccess;
  }

  ncclResult_t getProperties(int /*dev*/, ncclNetProperties_v12_t* props) {
    props->name = const_cast<char*>("coll0");
    props->pciPath = nullptr;
    props->guid = 0x636f6c6c30ull;
    props->ptrSupport = NCCL_PTR_HOST;
    props->speed = 100000;
    props->maxComms = 1;
    props->maxCollBytes = 512ull << 20;
    if (const char* type = std::getenv("NNS_TEST_COLLNET_DEVICE_TYPE");
        type != nullptr && std::strcmp(type, "unpack") == 0) {
      props->netDeviceType = NCCL_NET_DEVICE_UNPACK;
      props->netDeviceVersion = NCCL_NET_DEVICE_UNPACK_VERSION;
    }
    return ncclSuccess;
  }

  ncclResult_t listen(void* /*ctx*/, int /*dev*/, void* handle, void** listenComm) {
    static uint64_t nextId = 1;
    auto listen = std::make_unique<ListenComm>(ListenComm{nextId++});
    NCCL_NET_CHECK(kCodec.encode(OneRankHandle{listen->listenId}, handle));
    *listenComm = listen.release();
    return ncclSuccess;
  }

  ncclResult_t connect(void* handles[], int nranks, int rank, void* listenComm, void** collComm) {
    if (nranks != 1) {
      NCCL_NET_WARN("connect: this collNet reduces for one rank only; asked for rank %d of %d", rank, nranks);
      return ncclInvalidUsage;
    }
    OneRankHandle peer;
    NCCL_NET_CHECK(kCodec.decode(handles[0], &peer));
    if (peer.listenId != static_cast<ListenComm*>(listenComm)->listenId) {
      NCCL_NET_WARN("connect: handle of listener %llu, but this rank listens as %llu",
                    static_cast<unsigned long long>(peer.listenId),
                    static_cast<unsigned long long>(static_cast<ListenComm*>(listenComm)->listenId));
      return ncclInvalidArgument;
    }
    *collComm = new CollComm;
    return ncclSuccess;
  }

  ncclResult_t reduceSupport(ncclDataType_t dataType, ncclRedOp_t /*redOp*/, int* supported) {
    *supported = typeBytes(dataType) != 0;  // the SDK already answered 0 for user-defined ops
    return ncclSuccess;
  }

  ncclResult_t regMr(void* /*collComm*/, void* data, size_t size, int type, void** mhandle) {
    if (type != NCCL_PTR_HOST) {
      NCCL_NET_WARN("regMr: memory type %d; this collNet reduces host memory only", type);
      return ncclInvalidArgument;
    }
    *mhandle = new Region{data, size};
    return ncclSuccess;
  }
  ncclResult_t deregMr(void* /*collComm*/, void* mhandle) {
    delete static_cast<Region*>(mhandle);
    return ncclSuccess;
  }

  ncclResult_t iallreduce(void* collComm, void* sendData, void* recvData, size_t count, ncclDataType_t dataType,
                          ncclRedOp_t /*redOp*/, void* /*sendMhandle*/, void* /*recvMhandle*/, void** request) {
    size_t bytes = count * typeBytes(dataType);
    if (typeBytes(dataType) == 0) {
      NCCL_NET_WARN("iallreduce: data type %d is not supported", static_cast<int>(dataType));
      return ncclInvalidArgument;
    }
    // Sum, product, max, min and average of a single contribution are that contribution.
    return post(collComm, bytes, request, [&] {
      if (bytes > 0 && sendData != recvData) std::memmove(recvData, sendData, bytes);
    });
  }

#ifndef NNS_COLLNET_WITHOUT_GATHERS
  // One rank's all-gather is its own contribution (bytesPerRank bytes). The call moves the window [windowOffset,
  // windowOffset + windowBytes) of the result (all ranks' bytes, rank by rank) into recvParts, one part after another.
  // As NCCL calls it, sendData points at this rank's bytes of the window already (its buffer + windowOffset %
  // bytesPerRank when the window starts in this rank's part), so one rank copies from sendData as it is.
  ncclResult_t iallgather(void* collComm, void* sendData, int nRecvParts, ncclNetSGE_v12_t* recvParts,
                          size_t bytesPerRank, size_t windowOffset, size_t windowBytes, void* /*sendMhandle*/,
                          void** request) {
    NCCL_NET_CHECK(checkWindow("iallgather", nRecvParts, recvParts, bytesPerRank, windowOffset, windowBytes));
    return post(collComm, windowBytes, request, [&] {
      const char* from = static_cast<const char*>(sendData);
      for (int i = 0; i < nRecvParts; ++i) {
        if (recvParts[i].size > 0) std::memcpy(recvParts[i].address, from, recvParts[i].size);
        from += recvParts[i].size;
      }
    });
  }

  // One rank's reduce-scatter is its own input, whose block (all of it) is the result: sendParts carry the window
  // [windowOffset, windowOffset + windowBytes) of the input, and recvData is where the window's part of this rank's
  // block goes (NCCL passes it positioned, as sendData above).
  ncclResult_t ireducescatter(void* collComm, int nSendParts, ncclNetSGE_v12_t* sendParts, void* recvData,
                              size_t bytesPerRank, size_t windowOffset, size_t windowBytes, ncclDataType_t dataType,
                              ncclRedOp_t /*redOp*/, void* /*recvMhandle*/, void** request) {
    if (typeBytes(dataType) == 0) {
      NCCL_NET_WARN("ireducescatter: data type %d is not supported", static_cast<int>(dataType));
      return ncclInvalidArgument;
    }
    NCCL_NET_CHECK(checkWindow("ireducescatter", nSendParts, sendParts, bytesPerRank, windowOffset, windowBytes));
    return post(collComm, windowBytes, request, [&] {
      char* to = static_cast<char*>(recvData);
      for (int i = 0; i < nSendParts; ++i) {
        if (sendParts[i].size > 0) std::memcpy(to, sendParts[i].address, sendParts[i].size);
        to += sendParts[i].size;
      }
    });
  }
#endif

  ncclResult_t test(void* request, int* done, sdk::CompletedSizes& sizes) {
    auto* r = static_cast<CollRequest*>(request);
    if (r->comm == nullptr || !r->comm->requests.owns(r)) {
      NCCL_NET_WARN("test: %p is not a live request of this collNet", request);
      return ncclInvalidArgument;
    }
    if (!sizes.set(0, r->bytes)) return ncclSuccess;  // the SDK reports the overflow as an error
    *done = 1;                                        // a one-rank reduction is complete as soon as it is posted
    CollComm* comm = r->comm;
    r->comm = nullptr;
    comm->requests.release(r);
    return ncclSuccess;
  }

  ncclResult_t closeColl(void* collComm) {
    delete static_cast<CollComm*>(collComm);
    return ncclSuccess;
  }
  ncclResult_t closeListen(void* listenComm) {
    delete static_cast<ListenComm*>(listenComm);
    return ncclSuccess;
  }

 private:
  // The parts hold the window exactly, and the window lies within one rank's bytes.
  static ncclResult_t checkWindow(const char* call, int nParts, const ncclNetSGE_v12_t* parts, size_t bytesPerRank,
                                  size_t windowOffset, size_t windowBytes) {
    size_t total = 0;
    for (int i = 0; i < nParts; ++i) total += parts[i].size;
    if (windowOffset > bytesPerRank || windowBytes > bytesPerRank - windowOffset || total != windowBytes) {
      NCCL_NET_WARN("%s: a window of %zu bytes at %zu in %zu bytes per rank, carried by %d part(s) of %zu bytes", call,
                    windowBytes, windowOffset, bytesPerRank, nParts, total);
      return ncclInvalidArgument;
    }
    return ncclSuccess;
  }
  // A request done at once: `move` does the one rank's work.
  template <class Move>
  static ncclResult_t post(void* collComm, size_t bytes, void** request, const Move& move) {
    auto* comm = static_cast<CollComm*>(collComm);
    CollRequest* r = comm->requests.acquire();
    if (r == nullptr) return ncclSuccess;  // all requests in flight: *request stays NULL, the host retries
    move();
    r->comm = comm;
    r->bytes = bytes;
    *request = r;
    return ncclSuccess;
  }
};

#ifdef NNS_COLLNET_ONLY_VERSION
NCCL_NET_SDK_EXPORT_COLLNET_VERSION(OneRankColl, NNS_COLLNET_ONLY_VERSION)
#else
NCCL_NET_SDK_EXPORT_COLLNET(OneRankColl)
#endif
