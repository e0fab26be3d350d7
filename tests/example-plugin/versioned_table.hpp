// versioned_table.hpp: calls one exported ncclNetPlugin_vN table through its own version's signatures (test code:
// the tests must exercise each version's struct as NCCL of that era would, not the SDK's newest view).
#pragma once

#include <dlfcn.h>

#include <cstddef>
#include <string>

#include <nccl_net/net.h>

// One line per version, as the table it is.
// clang-format off
template <int V> struct NetTable;
template <> struct NetTable<6> { using Type = ncclNet_v6_t; using Props = ncclNetProperties_v6_t; };
template <> struct NetTable<7> { using Type = ncclNet_v7_t; using Props = ncclNetProperties_v7_t; };
template <> struct NetTable<8> { using Type = ncclNet_v8_t; using Props = ncclNetProperties_v8_t; };
template <> struct NetTable<9> { using Type = ncclNet_v9_t; using Props = ncclNetProperties_v9_t; };
template <> struct NetTable<10> { using Type = ncclNet_v10_t; using Props = ncclNetProperties_v10_t; };
template <> struct NetTable<11> { using Type = ncclNet_v11_t; using Props = ncclNetProperties_v11_t; };
template <> struct NetTable<12> { using Type = ncclNet_v12_t; using Props = ncclNetProperties_v12_t; };
// clang-format on

// Sizes travel as int up to v8 and as size_t from v9: SizeT<V> is what isend/irecv take.
template <int V>
using SizeT = std::conditional_t<(V >= 9), size_t, int>;
template <int V>
using RegSizeT = std::conditional_t<(V >= 8), size_t, int>;

template <int V>
class VersionedNet {
 public:
  using Table = typename NetTable<V>::Type;
  using Props = typename NetTable<V>::Props;

  explicit VersionedNet(const Table* table) : t(table) {}

  static const Table* resolve(void* library) {
    std::string symbol = "ncclNetPlugin_v" + std::to_string(V);
    return static_cast<const Table*>(dlsym(library, symbol.c_str()));
  }

  ncclResult_t init(ncclDebugLogger_t logger) {
    if constexpr (V >= 11) {
      return t->init(&ctx, 0x1234, nullptr, logger, nullptr);
    } else if constexpr (V == 10) {
      return t->init(logger, nullptr);
    } else {
      return t->init(logger);
    }
  }
  ncclResult_t devices(int* ndev) { return t->devices(ndev); }
  ncclResult_t getProperties(int dev, Props* props) { return t->getProperties(dev, props); }
  ncclResult_t listen(int dev, void* handle, void** comm) {
    if constexpr (V >= 11)
      return t->listen(ctx, dev, handle, comm);
    else
      return t->listen(dev, handle, comm);
  }
  ncclResult_t connect(int dev, void* handle, void** comm) {
    if constexpr (V >= 11) {
      return t->connect(ctx, dev, handle, comm, nullptr);
    } else if constexpr (V == 10) {
      ncclNetCommConfig_v10_t config{NCCL_NET_TRAFFIC_CLASS_UNDEF};
      return t->connect(dev, &config, handle, comm, nullptr);
    } else if constexpr (V >= 7) {
      return t->connect(dev, handle, comm, nullptr);
    } else {
      return t->connect(dev, handle, comm);
    }
  }
  ncclResult_t accept(void* listenComm, void** comm) {
    if constexpr (V >= 7)
      return t->accept(listenComm, comm, nullptr);
    else
      return t->accept(listenComm, comm);
  }
  ncclResult_t regMr(void* comm, void* data, RegSizeT<V> size, void** mhandle) {
    return t->regMr(comm, data, size, NCCL_PTR_HOST, mhandle);
  }
  ncclResult_t deregMr(void* comm, void* mhandle) { return t->deregMr(comm, mhandle); }
  ncclResult_t isend(void* comm, void* data, SizeT<V> size, int tag, void* mhandle, void** request) {
    if constexpr (V >= 10)
      return t->isend(comm, data, size, tag, mhandle, nullptr, request);
    else
      return t->isend(comm, data, size, tag, mhandle, request);
  }
  ncclResult_t irecv(void* comm, void* data, SizeT<V> size, int tag, void* mhandle, void** request) {
    void* datas[1] = {data};
    SizeT<V> sizes[1] = {size};
    int tags[1] = {tag};
    void* mhandles[1] = {mhandle};
    if constexpr (V >= 10)
      return t->irecv(comm, 1, datas, sizes, tags, mhandles, nullptr, request);
    else
      return t->irecv(comm, 1, datas, sizes, tags, mhandles, request);
  }
  ncclResult_t test(void* request, int* done, int* size) { return t->test(request, done, size); }
  ncclResult_t closeSend(void* comm) { return t->closeSend(comm); }
  ncclResult_t closeRecv(void* comm) { return t->closeRecv(comm); }
  ncclResult_t closeListen(void* comm) { return t->closeListen(comm); }

  const Table* t;
  void* ctx = nullptr;
};
