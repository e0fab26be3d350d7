// nccl_net/sdk/collnet.hpp: write one in-network-collectives class against ncclCollNet_v12; export every version.
//
// A vendor class `Coll` provides (ncclCollNet_v12 semantics, all return ncclResult_t):
//
//   static constexpr const char kName[] = "mycoll";
//   init(const nccl_net::sdk::InitArgs& args, void** ctx)
//   devices(int* ndev), getProperties(int dev, ncclNetProperties_v12_t* props)
//   listen(void* ctx, int dev, void* handle, void** listenComm)
//   connect(void* handles[], int nranks, int rank, void* listenComm, void** collComm)
//   reduceSupport(ncclDataType_t dataType, ncclRedOp_t redOp, int* supported)
//   regMr(void* collComm, void* data, size_t size, int type, void** mhandle), deregMr(void* collComm, void* mhandle)
//   iallreduce(void* collComm, void* sendData, void* recvData, size_t count, ncclDataType_t, ncclRedOp_t,
//              void* sendMhandle, void* recvMhandle, void** request)
//   test(void* request, int* done, nccl_net::sdk::CompletedSizes& sizes)
//   closeColl(void* collComm), closeListen(void* listenComm)
//
// optionally iallgather / ireducescatter (with ncclNetSGE_v12_t parts), regMrDmaBuf, iflush, makeVDevice, finalize.
// NCCL_NET_SDK_EXPORT_COLLNET(Coll) emits ncclCollNetPlugin_v6 .. ncclCollNetPlugin_v12.
#pragma once

#include "plugin.hpp"

NCCL_NET_SDK_NAMESPACE_BEGIN
namespace detail {

// Most scatter-gather parts one iallgather/ireducescatter may carry through an old (v8..v11) table; the SGEs are
// copied into a stack array of v12's, so the data path stays allocation-free.
inline constexpr int kMaxSgeParts = 256;

template <class Coll>
struct CollEntry {
  static Coll& coll() { return NetState<Coll>::instance(); }

  static ncclResult_t initCtx(int version, void** ctx, uint64_t commId, ncclDebugLogger_t logger) {
    return guard("collnet init", [&] {
      setLogger(logger);
      NCCL_NET_SDK_REQUIRE(ctx != nullptr, ncclInternalError, "collnet init: ctx out-pointer is NULL");
      InitArgs args;
      args.abiVersion = version;
      args.commId = commId;
      *ctx = nullptr;
      void* own = nullptr;
      NCCL_NET_CHECK(coll().init(args, &own));
      *ctx = contextToken(coll(), own);  // the host holds a token per init
      return ncclSuccess;
    });
  }
  static ncclResult_t initLegacy(int version, ncclDebugLogger_t logger) {
    return guard("collnet init", [&] { return NetState<Coll>::legacyInit(version, logger, nullptr); });
  }

  static ncclResult_t listenCtx(void* ctx, int dev, void* handle, void** listenComm) {
    void* own = nullptr;
    NCCL_NET_CHECK(
        guard("collnet listen", [&] { return resolveContext("collnet listen", vendorTag<Coll>(), ctx, &own); }));
    return listenOwn(own, dev, handle, listenComm);
  }
  static ncclResult_t listenLegacy(int dev, void* handle, void** listenComm) {
    void* own = nullptr;
    NCCL_NET_CHECK(
        guard("collnet listen", [&] { return NetState<Coll>::legacyContext(NCCL_NET_TRAFFIC_CLASS_UNDEF, &own); }));
    return listenOwn(own, dev, handle, listenComm);
  }
  static ncclResult_t listenOwn(void* own, int dev, void* handle, void** listenComm) {
    return guard("collnet listen", [&] {
      NCCL_NET_SDK_REQUIRE(handle != nullptr && listenComm != nullptr, ncclInternalError,
                           "collnet listen: handle or listenComm is NULL");
      NCCL_NET_CHECK(checkDevice<Coll>("collnet listen", dev));
      *listenComm = nullptr;
      return coll().listen(own, dev, handle, listenComm);
    });
  }

  static ncclResult_t connect(void* handles[], int nranks, int rank, void* listenComm, void** collComm) {
    return guard("collnet connect", [&] {
      NCCL_NET_SDK_REQUIRE(handles != nullptr && collComm != nullptr && listenComm != nullptr, ncclInternalError,
                           "collnet connect: handles, listenComm or collComm is NULL");
      NCCL_NET_SDK_REQUIRE(nranks > 0 && rank >= 0 && rank < nranks, ncclInternalError,
                           "collnet connect: rank %d of %d", rank, nranks);
      *collComm = nullptr;
      return coll().connect(handles, nranks, rank, listenComm, collComm);
    });
  }

  static ncclResult_t reduceSupport(ncclDataType_t dataType, ncclRedOp_t redOp, int* supported) {
    return guard("reduceSupport", [&] {
      NCCL_NET_SDK_REQUIRE(supported != nullptr, ncclInternalError, "reduceSupport: supported is NULL");
      *supported = 0;
      // User-created ops (>= ncclNumOps) and unknown types are never supported by a network. The host is C: read
      // the raw values, since an out-of-range value is not a valid C++ ncclDataType_t.
      int type = 0;
      int op = 0;
      std::memcpy(&type, &dataType, sizeof(type));
      std::memcpy(&op, &redOp, sizeof(op));
      if (op < 0 || op >= ncclNumOps || type < 0 || type >= ncclNumTypes) return ncclSuccess;
      return coll().reduceSupport(dataType, redOp, supported);
    });
  }

  static ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
    return guard("collnet regMr", [&] {
      NCCL_NET_SDK_REQUIRE(comm != nullptr && mhandle != nullptr, ncclInternalError,
                           "collnet regMr: collComm or mhandle is NULL");
      return coll().regMr(comm, data, size, type, mhandle);
    });
  }
  static ncclResult_t regMrInt(void* comm, void* data, int size, int type, void** mhandle) {
    size_t bytes = 0;
    NCCL_NET_CHECK(intSizeToSize("collnet regMr", size, &bytes));
    return regMr(comm, data, bytes, type, mhandle);
  }
  static ncclResult_t regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                                  void** mhandle) {
    return guard("collnet regMrDmaBuf", [&]() -> ncclResult_t {
      NCCL_NET_SDK_REQUIRE(comm != nullptr && mhandle != nullptr, ncclInternalError,
                           "collnet regMrDmaBuf: collComm or mhandle is NULL");
      if constexpr (has_regMrDmaBuf_v<Coll>) {
        return coll().regMrDmaBuf(comm, data, size, type, offset, fd, mhandle);
      } else {
        (void)data, (void)size, (void)type, (void)offset, (void)fd;
        NCCL_NET_WARN(
            "collnet regMrDmaBuf: this plugin has no DMA-BUF registration (its devices do not say NCCL_PTR_DMABUF)");
        return ncclInvalidUsage;
      }
    });
  }
  static ncclResult_t deregMr(void* comm, void* mhandle) {
    return guard("collnet deregMr", [&] {
      NCCL_NET_SDK_REQUIRE(comm != nullptr, ncclInternalError, "collnet deregMr: collComm is NULL");
      return coll().deregMr(comm, mhandle);
    });
  }

  static ncclResult_t iallreduce(void* comm, void* sendData, void* recvData, size_t count, ncclDataType_t dataType,
                                 ncclRedOp_t redOp, void* sendMhandle, void* recvMhandle, void** request) {
    return guard("iallreduce", [&] {
      NCCL_NET_SDK_REQUIRE(comm != nullptr && request != nullptr, ncclInternalError,
                           "iallreduce: collComm or request is NULL");
      *request = nullptr;
      return coll().iallreduce(comm, sendData, recvData, count, dataType, redOp, sendMhandle, recvMhandle, request);
    });
  }
  static ncclResult_t iallreduceInt(void* comm, void* sendData, void* recvData, int count, ncclDataType_t dataType,
                                    ncclRedOp_t redOp, void* sendMhandle, void* recvMhandle, void** request) {
    size_t wide = 0;
    NCCL_NET_CHECK(intSizeToSize("iallreduce", count, &wide));
    return iallreduce(comm, sendData, recvData, wide, dataType, redOp, sendMhandle, recvMhandle, request);
  }

  static ncclResult_t iallgather(void* comm, void* sendData, int nRecvParts, ncclNetSGE_v12_t* recvParts,
                                 size_t bytesPerRank, size_t windowOffset, size_t windowBytes, void* sendMhandle,
                                 void** request) {
    return guard("iallgather", [&] {
      NCCL_NET_SDK_REQUIRE(comm != nullptr && request != nullptr && recvParts != nullptr && nRecvParts > 0,
                           ncclInternalError, "iallgather: NULL argument or %d parts", nRecvParts);
      *request = nullptr;
      return coll().iallgather(comm, sendData, nRecvParts, recvParts, bytesPerRank, windowOffset, windowBytes,
                               sendMhandle, request);
    });
  }
  static ncclResult_t ireducescatter(void* comm, int nSendParts, ncclNetSGE_v12_t* sendParts, void* recvData,
                                     size_t bytesPerRank, size_t windowOffset, size_t windowBytes,
                                     ncclDataType_t dataType, ncclRedOp_t redOp, void* recvMhandle, void** request) {
    return guard("ireducescatter", [&] {
      NCCL_NET_SDK_REQUIRE(comm != nullptr && request != nullptr && sendParts != nullptr && nSendParts > 0,
                           ncclInternalError, "ireducescatter: NULL argument or %d parts", nSendParts);
      *request = nullptr;
      return coll().ireducescatter(comm, nSendParts, sendParts, recvData, bytesPerRank, windowOffset, windowBytes,
                                   dataType, redOp, recvMhandle, request);
    });
  }
  // Scatter-gather lists as v12's: v8 entries carry uint32_t sizes (widened here); v9..v11 declare structs of their own
  // with v12's layout, copied too (reading them as ncclNetSGE_v12_t would read one type through another).
  template <class Sge>
  static ncclResult_t widenSges(const char* function, int n, const Sge* in, ncclNetSGE_v12_t* out) {
    NCCL_NET_SDK_REQUIRE(in != nullptr && n > 0 && n <= kMaxSgeParts, ncclInternalError,
                         "%s: %d scatter-gather parts, expected 1..%d", function, n, kMaxSgeParts);
    for (int i = 0; i < n; ++i) out[i] = ncclNetSGE_v12_t{in[i].mhandle, in[i].address, in[i].size};
    return ncclSuccess;
  }
  template <class Sge>
  static ncclResult_t iallgatherOld(void* comm, void* sendData, int nRecvParts, Sge* recvParts, size_t bytesPerRank,
                                    size_t windowOffset, size_t windowBytes, void* sendMhandle, void** request) {
    ncclNetSGE_v12_t parts[kMaxSgeParts];
    NCCL_NET_CHECK(widenSges("iallgather", nRecvParts, recvParts, parts));
    return iallgather(comm, sendData, nRecvParts, parts, bytesPerRank, windowOffset, windowBytes, sendMhandle, request);
  }
  template <class Sge>
  static ncclResult_t ireducescatterOld(void* comm, int nSendParts, Sge* sendParts, void* recvData, size_t bytesPerRank,
                                        size_t windowOffset, size_t windowBytes, ncclDataType_t dataType,
                                        ncclRedOp_t redOp, void* recvMhandle, void** request) {
    ncclNetSGE_v12_t parts[kMaxSgeParts];
    NCCL_NET_CHECK(widenSges("ireducescatter", nSendParts, sendParts, parts));
    return ireducescatter(comm, nSendParts, parts, recvData, bytesPerRank, windowOffset, windowBytes, dataType, redOp,
                          recvMhandle, request);
  }

  static ncclResult_t iflush(void* comm, void* data, int size, void* mhandle, void** request) {
    return guard("collnet iflush", [&]() -> ncclResult_t {
      NCCL_NET_SDK_REQUIRE(comm != nullptr && request != nullptr, ncclInternalError,
                           "collnet iflush: collComm or request is NULL");
      *request = nullptr;
      if constexpr (has_iflush_v<Coll>) {
        return coll().iflush(comm, data, size, mhandle, request);
      } else {
        (void)comm, (void)data, (void)size, (void)mhandle;
        return ncclSuccess;  // host memory only (enforced by getProperties): nothing to flush
      }
    });
  }

  static ncclResult_t test(void* request, int* done, int* size) {
    return guard("collnet test", [&] {
      NCCL_NET_SDK_REQUIRE(request != nullptr && done != nullptr, ncclInternalError,
                           "collnet test: request or done is NULL");
      CompletedSizes completed(size, 1);  // one size: a collective request is never grouped
      *done = 0;
      NCCL_NET_CHECK(coll().test(request, done, completed));
      int index = 0;
      NCCL_NET_SDK_REQUIRE(!completed.badIndex(&index), ncclInternalError,
                           "collnet test: the plugin set size %d; a collective has only size 0", index);
      NCCL_NET_SDK_REQUIRE(!completed.overflowed(), ncclInvalidUsage,
                           "collnet test: completed size %zu exceeds INT_MAX, which test() cannot report",
                           completed.overflowBytes());
      return ncclSuccess;
    });
  }
  static ncclResult_t closeColl(void* comm) {
    return guard("closeColl", [&] {
      NCCL_NET_SDK_REQUIRE(comm != nullptr, ncclInternalError, "closeColl: collComm is NULL");
      return coll().closeColl(comm);
    });
  }
  static ncclResult_t closeListen(void* comm) {
    return guard("collnet closeListen", [&] {
      NCCL_NET_SDK_REQUIRE(comm != nullptr, ncclInternalError, "collnet closeListen: listenComm is NULL");
      return coll().closeListen(comm);
    });
  }
};

// ---- compile-time checks of the vendor class (as NetClassCheck in plugin.hpp)
// ----------------------------------------
template <class Coll>
struct CollClassCheck {
  using S = ExactSize;
  using I = ExactInt;
  static constexpr bool kNamed = has_kName<Coll>::value;
  static constexpr bool kNameConstant = !kNamed || has_constant_kName<Coll>::value;
  static constexpr bool kNameNonEmpty = !nameIsEmpty<Coll>();
  static constexpr bool kConstructible = std::is_default_constructible_v<Coll>;
  static constexpr bool kInit = callable_init<Coll, TypeList<void(const InitArgs&, ExactPointer<void**>)>>::value;
  static constexpr bool kDevices = callable_devices<Coll, TypeList<void(ExactPointer<int*>)>>::value;
  static constexpr bool kGetProperties =
      callable_getProperties<Coll, TypeList<void(I, ExactPointer<ncclNetProperties_v12_t*>)>>::value;
  static constexpr bool kListen = callable_listen<Coll, TypeList<void(void*, I, void*, ExactPointer<void**>)>>::value;
  static constexpr bool kConnect =
      callable_connect<Coll, TypeList<void(ExactPointer<void**>, I, I, void*, ExactPointer<void**>)>>::value;
  static constexpr bool kReduceSupport =
      callable_reduceSupport<Coll, TypeList<void(ncclDataType_t, ncclRedOp_t, ExactPointer<int*>)>>::value;
  static constexpr bool kRegMr = callable_regMr<Coll, TypeList<void(void*, void*, S, I, ExactPointer<void**>)>>::value;
  static constexpr bool kDeregMr = callable_deregMr<Coll, TypeList<void(void*, void*)>>::value;
  static constexpr bool kIallreduce =
      callable_iallreduce<Coll, TypeList<void(void*, void*, void*, S, ncclDataType_t, ncclRedOp_t, void*, void*,
                                              ExactPointer<void**>)>>::value;
  static constexpr bool kTest = callable_test<Coll, TypeList<void(void*, ExactPointer<int*>, CompletedSizes&)>>::value;
  static constexpr bool kCloseColl = callable_closeColl<Coll, TypeList<void(void*)>>::value;
  static constexpr bool kCloseListen = callable_closeListen<Coll, TypeList<void(void*)>>::value;
  // Optional methods: checked only when the class declares one.
  static constexpr bool kIallgather =
      !has_iallgather_v<Coll> ||
      callable_iallgather<Coll, TypeList<void(void*, void*, I, InputPointer<ncclNetSGE_v12_t*>, S, S, S, void*,
                                              ExactPointer<void**>)>>::value;
  static constexpr bool kIreducescatter =
      !has_ireducescatter_v<Coll> ||
      callable_ireducescatter<Coll, TypeList<void(void*, I, InputPointer<ncclNetSGE_v12_t*>, void*, S, S, S,
                                                  ncclDataType_t, ncclRedOp_t, void*, ExactPointer<void**>)>>::value;
  static constexpr bool kRegMrDmaBuf =
      !has_regMrDmaBuf_v<Coll> ||
      callable_regMrDmaBuf<Coll, TypeList<void(void*, void*, S, I, ExactOffset, I, ExactPointer<void**>)>>::value;
  static constexpr bool kIflush =
      !has_iflush_v<Coll> || callable_iflush<Coll, TypeList<void(void*, void*, I, void*, ExactPointer<void**>)>>::value;
  static constexpr bool kMakeVDevice =
      !has_makeVDevice_v<Coll> ||
      callable_makeVDevice<Coll, TypeList<void(ExactPointer<int*>, InputPointer<ncclNetVDeviceProps_v12_t*>)>>::value;
  static constexpr bool kFinalize = !has_finalize_v<Coll> || callable_finalize<Coll, TypeList<void(void*)>>::value;

  static constexpr bool value = kNamed && kNameConstant && kNameNonEmpty && kConstructible && kInit && kDevices &&
                                kGetProperties && kListen && kConnect && kReduceSupport && kRegMr && kDeregMr &&
                                kIallreduce && kTest && kCloseColl && kCloseListen && kIallgather && kIreducescatter &&
                                kRegMrDmaBuf && kIflush && kMakeVDevice && kFinalize &&
                                SpelledRight<Coll, false>::value;
};

// Stands in for a class that failed CollClassCheck, so that only the static_asserts are reported.
struct InvalidColl {
  static constexpr const char kName[] = "invalid";
  ncclResult_t init(const InitArgs&, void**) { return ncclInternalError; }
  ncclResult_t devices(int*) { return ncclInternalError; }
  ncclResult_t getProperties(int, ncclNetProperties_v12_t*) { return ncclInternalError; }
  ncclResult_t listen(void*, int, void*, void**) { return ncclInternalError; }
  ncclResult_t connect(void**, int, int, void*, void**) { return ncclInternalError; }
  ncclResult_t reduceSupport(ncclDataType_t, ncclRedOp_t, int*) { return ncclInternalError; }
  ncclResult_t regMr(void*, void*, size_t, int, void**) { return ncclInternalError; }
  ncclResult_t deregMr(void*, void*) { return ncclInternalError; }
  ncclResult_t iallreduce(void*, void*, void*, size_t, ncclDataType_t, ncclRedOp_t, void*, void*, void**) {
    return ncclInternalError;
  }
  ncclResult_t test(void*, int*, CompletedSizes&) { return ncclInternalError; }
  ncclResult_t closeColl(void*) { return ncclInternalError; }
  ncclResult_t closeListen(void*) { return ncclInternalError; }
};

template <class Coll>
constexpr bool reportCollClass() {
  using C = CollClassCheck<Coll>;
  static_assert(C::kNamed,
                "NCCL_NET_SDK_EXPORT_COLLNET: Coll has no public kName: add `static constexpr const char kName[] = "
                "\"yourname\";`");
  static_assert(C::kNameConstant,
                "NCCL_NET_SDK_EXPORT_COLLNET: Coll::kName is not a static constant string: declare it `static "
                "constexpr const char kName[] = \"yourname\";`");
  static_assert(C::kNameNonEmpty, "NCCL_NET_SDK_EXPORT_COLLNET: Coll::kName is empty");
  static_assert(C::kConstructible,
                "NCCL_NET_SDK_EXPORT_COLLNET: Coll is not default-constructible: the SDK makes the one instance on "
                "first use");
  static_assert(C::kInit,
                "NCCL_NET_SDK_EXPORT_COLLNET: Coll has no public init(const nccl_net::sdk::InitArgs& args, void** ctx) "
                "returning ncclResult_t");
  static_assert(C::kDevices,
                "NCCL_NET_SDK_EXPORT_COLLNET: Coll has no public devices(int* ndev) returning ncclResult_t");
  static_assert(
      C::kGetProperties,
      "NCCL_NET_SDK_EXPORT_COLLNET: Coll has no public getProperties(int dev, ncclNetProperties_v12_t* props) "
      "returning ncclResult_t");
  static_assert(
      C::kListen,
      "NCCL_NET_SDK_EXPORT_COLLNET: Coll has no public listen(void* ctx, int dev, void* handle, void** listenComm) "
      "returning ncclResult_t");
  static_assert(C::kConnect,
                "NCCL_NET_SDK_EXPORT_COLLNET: Coll has no public connect(void* handles[], int nranks, int rank, void* "
                "listenComm, void** collComm) returning ncclResult_t");
  static_assert(
      C::kReduceSupport,
      "NCCL_NET_SDK_EXPORT_COLLNET: Coll has no public reduceSupport(ncclDataType_t dataType, ncclRedOp_t redOp, "
      "int* supported) returning ncclResult_t");
  static_assert(
      C::kRegMr,
      "NCCL_NET_SDK_EXPORT_COLLNET: Coll has no public regMr(void* collComm, void* data, size_t size, int type, "
      "void** mhandle) returning ncclResult_t (size is size_t, not int)");
  static_assert(C::kDeregMr,
                "NCCL_NET_SDK_EXPORT_COLLNET: Coll has no public deregMr(void* collComm, void* mhandle) returning "
                "ncclResult_t");
  static_assert(
      C::kIallreduce,
      "NCCL_NET_SDK_EXPORT_COLLNET: Coll has no public iallreduce(void* collComm, void* sendData, void* recvData, "
      "size_t count, ncclDataType_t dataType, ncclRedOp_t redOp, void* sendMhandle, void* recvMhandle, "
      "void** request) returning ncclResult_t (count is size_t, not int)");
  static_assert(C::kTest,
                "NCCL_NET_SDK_EXPORT_COLLNET: Coll has no public test(void* request, int* done, "
                "nccl_net::sdk::CompletedSizes& sizes) returning ncclResult_t");
  static_assert(C::kCloseColl,
                "NCCL_NET_SDK_EXPORT_COLLNET: Coll has no public closeColl(void* collComm) returning ncclResult_t");
  static_assert(C::kCloseListen,
                "NCCL_NET_SDK_EXPORT_COLLNET: Coll has no public closeListen(void* listenComm) returning ncclResult_t");
  static_assert(
      C::kIallgather,
      "NCCL_NET_SDK_EXPORT_COLLNET: Coll::iallgather is not a public iallgather(void* collComm, void* sendData, int "
      "nRecvParts, ncclNetSGE_v12_t* recvParts, size_t bytesPerRank, size_t windowOffset, size_t "
      "windowBytes, void* sendMhandle, void** request) returning ncclResult_t");
  static_assert(C::kIreducescatter,
                "NCCL_NET_SDK_EXPORT_COLLNET: Coll::ireducescatter is not a public ireducescatter(void* collComm, int "
                "nSendParts, ncclNetSGE_v12_t* sendParts, void* recvData, size_t bytesPerRank, size_t windowOffset, "
                "size_t windowBytes, ncclDataType_t dataType, ncclRedOp_t redOp, void* recvMhandle, void** request) "
                "returning ncclResult_t");
  static_assert(
      C::kRegMrDmaBuf,
      "NCCL_NET_SDK_EXPORT_COLLNET: Coll::regMrDmaBuf is not a public regMrDmaBuf(void* collComm, void* data, size_t "
      "size, int type, uint64_t offset, int fd, void** mhandle) returning ncclResult_t");
  static_assert(
      C::kIflush,
      "NCCL_NET_SDK_EXPORT_COLLNET: Coll::iflush is not a public iflush(void* collComm, void* data, int size, void* "
      "mhandle, void** request) returning ncclResult_t");
  static_assert(
      C::kMakeVDevice,
      "NCCL_NET_SDK_EXPORT_COLLNET: Coll::makeVDevice is not a public makeVDevice(int* d, ncclNetVDeviceProps_v12_t* "
      "props) returning ncclResult_t");
  static_assert(
      C::kFinalize,
      "NCCL_NET_SDK_EXPORT_COLLNET: Coll::finalize is not a public finalize(void* ctx) returning ncclResult_t");
  reportSpelling<Coll, false>();
  return C::value;
}
template <class Coll>
using CheckedColl = std::conditional_t<reportCollClass<Coll>(), Coll, InvalidColl>;

template <class Coll>
struct CollNetTables {
  using E = CollEntry<Coll>;
  using N = NetEntry<Coll>;  // devices, getProperties, makeVDevice and finalize are shared with ncclNet

  static constexpr ncclCollNet_v12_t v12 = {
      Coll::kName,
      [](void** ctx, uint64_t commId, ncclDebugLogger_t logger) { return E::initCtx(12, ctx, commId, logger); },
      N::devices,
      N::template getProperties<12, ncclNetProperties_v12_t>,
      E::listenCtx,
      E::connect,
      E::reduceSupport,
      E::regMr,
      E::regMrDmaBuf,
      E::deregMr,
      E::iallreduce,
      NCCL_NET_SDK_OPTIONAL(has_iallgather_v<Coll>, E::iallgather),
      NCCL_NET_SDK_OPTIONAL(has_ireducescatter_v<Coll>, E::ireducescatter),
      E::iflush,
      E::test,
      E::closeColl,
      E::closeListen,
      NCCL_NET_SDK_OPTIONAL(has_makeVDevice_v<Coll>, N::template makeVDevice<ncclNetVDeviceProps_v12_t>),
      N::finalize,
  };
  static constexpr ncclCollNet_v11_t v11 = {
      Coll::kName,
      [](void** ctx, uint64_t commId, ncclDebugLogger_t logger) { return E::initCtx(11, ctx, commId, logger); },
      N::devices,
      N::template getProperties<11, ncclNetProperties_v11_t>,
      E::listenCtx,
      E::connect,
      E::reduceSupport,
      E::regMr,
      E::regMrDmaBuf,
      E::deregMr,
      E::iallreduce,
      NCCL_NET_SDK_OPTIONAL(has_iallgather_v<Coll>, E::template iallgatherOld<ncclNetSGE_v11_t>),
      NCCL_NET_SDK_OPTIONAL(has_ireducescatter_v<Coll>, E::template ireducescatterOld<ncclNetSGE_v11_t>),
      E::iflush,
      E::test,
      E::closeColl,
      E::closeListen,
      NCCL_NET_SDK_OPTIONAL(has_makeVDevice_v<Coll>, N::template makeVDevice<ncclNetVDeviceProps_v11_t>),
      N::finalize,
  };
  static constexpr ncclCollNet_v10_t v10 = {
      Coll::kName,
      [](ncclDebugLogger_t logger) { return E::initLegacy(10, logger); },
      N::devices,
      N::template getProperties<10, ncclNetProperties_v10_t>,
      E::listenLegacy,
      E::connect,
      E::reduceSupport,
      E::regMr,
      E::regMrDmaBuf,
      E::deregMr,
      E::iallreduce,
      NCCL_NET_SDK_OPTIONAL(has_iallgather_v<Coll>, E::template iallgatherOld<ncclNetSGE_v10_t>),
      NCCL_NET_SDK_OPTIONAL(has_ireducescatter_v<Coll>, E::template ireducescatterOld<ncclNetSGE_v10_t>),
      E::iflush,
      E::test,
      E::closeColl,
      E::closeListen,
      NCCL_NET_SDK_OPTIONAL(has_makeVDevice_v<Coll>, N::template makeVDevice<ncclNetVDeviceProps_v10_t>),
  };
  static constexpr ncclCollNet_v9_t v9 = {
      Coll::kName,
      [](ncclDebugLogger_t logger) { return E::initLegacy(9, logger); },
      N::devices,
      N::template getProperties<9, ncclNetProperties_v9_t>,
      E::listenLegacy,
      E::connect,
      E::reduceSupport,
      E::regMr,
      E::regMrDmaBuf,
      E::deregMr,
      E::iallreduce,
      NCCL_NET_SDK_OPTIONAL(has_iallgather_v<Coll>, E::template iallgatherOld<ncclNetSGE_v9_t>),
      NCCL_NET_SDK_OPTIONAL(has_ireducescatter_v<Coll>, E::template ireducescatterOld<ncclNetSGE_v9_t>),
      E::iflush,
      E::test,
      E::closeColl,
      E::closeListen,
      NCCL_NET_SDK_OPTIONAL(has_makeVDevice_v<Coll>, N::template makeVDevice<ncclNetVDeviceProps_v9_t>),
  };
  static constexpr ncclCollNet_v8_t v8 = {
      Coll::kName,
      [](ncclDebugLogger_t logger) { return E::initLegacy(8, logger); },
      N::devices,
      N::template getProperties<8, ncclNetProperties_v8_t>,
      E::listenLegacy,
      E::connect,
      E::reduceSupport,
      E::regMr,
      E::regMrDmaBuf,
      E::deregMr,
      E::iallreduceInt,
      NCCL_NET_SDK_OPTIONAL(has_iallgather_v<Coll>, E::template iallgatherOld<ncclNetSGE_v8_t>),
      NCCL_NET_SDK_OPTIONAL(has_ireducescatter_v<Coll>, E::template ireducescatterOld<ncclNetSGE_v8_t>),
      E::iflush,
      E::test,
      E::closeColl,
      E::closeListen,
  };
  static constexpr ncclCollNet_v7_t v7 = {
      Coll::kName,      [](ncclDebugLogger_t logger) { return E::initLegacy(7, logger); },
      N::devices,       N::template getProperties<7, ncclNetProperties_v7_t>,
      E::listenLegacy,  E::connect,
      E::reduceSupport, E::regMrInt,
      E::regMrDmaBuf,   E::deregMr,
      E::iallreduceInt, E::iflush,
      E::test,          E::closeColl,
      E::closeListen,
  };
  static constexpr ncclCollNet_v6_t v6 = {
      Coll::kName,      [](ncclDebugLogger_t logger) { return E::initLegacy(6, logger); },
      N::devices,       N::template getProperties<6, ncclNetProperties_v6_t>,
      E::listenLegacy,  E::connect,
      E::reduceSupport, E::regMrInt,
      E::regMrDmaBuf,   E::deregMr,
      E::iallreduceInt, E::iflush,
      E::test,          E::closeColl,
      E::closeListen,
  };
};

}  // namespace detail
NCCL_NET_SDK_NAMESPACE_END

#define NCCL_NET_SDK_EXPORT_COLLNET_VERSION(Coll, V) NCCL_NET_SDK_EXPORT_COLLNET_VERSION_(Coll, V)
// NOLINTBEGIN(bugprone-macro-parentheses): Coll is a type, a template argument here; (Coll) would not be one.
#define NCCL_NET_SDK_EXPORT_COLLNET_VERSION_(Coll, V)                                       \
  extern "C" NCCL_NET_SDK_EXPORT_SYMBOL const ncclCollNet_v##V##_t ncclCollNetPlugin_v##V = \
      ::nccl_net::sdk::detail::CollNetTables<::nccl_net::sdk::detail::CheckedColl<Coll>>::v##V;
// NOLINTEND(bugprone-macro-parentheses)

// Exports ncclCollNetPlugin_v6 .. ncclCollNetPlugin_v12 for the vendor class `Coll` (beside NCCL_NET_SDK_EXPORT).
#define NCCL_NET_SDK_EXPORT_COLLNET(Coll)       \
  NCCL_NET_SDK_EXPORT_COLLNET_VERSION(Coll, 12) \
  NCCL_NET_SDK_EXPORT_COLLNET_VERSION(Coll, 11) \
  NCCL_NET_SDK_EXPORT_COLLNET_VERSION(Coll, 10) \
  NCCL_NET_SDK_EXPORT_COLLNET_VERSION(Coll, 9)  \
  NCCL_NET_SDK_EXPORT_COLLNET_VERSION(Coll, 8)  \
  NCCL_NET_SDK_EXPORT_COLLNET_VERSION(Coll, 7)  \
  NCCL_NET_SDK_EXPORT_COLLNET_VERSION(Coll, 6)

// Both at once: ncclNetPlugin_v6..v12 for Net and ncclCollNetPlugin_v6..v12 for Coll.
#define NCCL_NET_SDK_EXPORT_WITH_COLLNET(Net, Coll) \
  NCCL_NET_SDK_EXPORT(Net)                          \
  NCCL_NET_SDK_EXPORT_COLLNET(Coll)
