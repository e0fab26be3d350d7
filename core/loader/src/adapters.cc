// adapters.cc: the per-version adapters from ncclNet_v6..v12 and ncclCollNet_v6..v12 tables to nns::core::Net and
// nns::core::CollNet (v12 semantics).
#include "adapters.hpp"

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "nccl_net/sdk/log.hpp"
#include "nns/core/loader.hpp"

namespace nns::core::detail {

Library::~Library() {
  if (handle == nullptr || keepLoaded) return;
  dlclose(handle);
  // The program itself (STATIC_PLUGIN) is never unloaded: what was recorded against it (a collNet disabled after its
  // init ran) stays. Its path is a placeholder no dlopen finds, so the test below took it as unloaded at once.
  if (path == nns::core::kProgramItself) return;
  // Another load (or the host) may still hold it; gone only when it can no longer be found without loading it.
  if (void* still = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD); still != nullptr)
    dlclose(still);
  else
    libraryUnloaded(handle);
}

namespace {

// A plugin before v11 is initialised once per process (its init has no context to give back): the first adapter
// calls it, the others find it done. The record is the loaded library's, one flag for each init function of its net
// and of its collNet: a plugin's old versions commonly share one init, which NCCL (loading one version) never calls
// twice, while the conformance harness opens several versions of one library. A version table with an init of its
// own is initialised on its own: keyed by the library alone, only the first table opened ran its init, and the
// others were used uninitialised. Each communicator loads the plugin and gets an
// adapter of its own, so a flag per adapter called a v6..v10 plugin's init once per communicator. The record lasts
// while an adapter of the library lives (net or collNet); with the last one the library may be unloaded, and a later
// load initialises it again, as NCCL does when its last communicator is gone.
class InitOnce {
 public:
  enum Kind { kNet = 0, kCollNet = 1 };
  InitOnce(const void* library, Kind kind) : library_(library), kind_(kind) {
    std::lock_guard<std::mutex> lock(mutex());
    ++libraries()[library_].adapters;
  }
  ~InitOnce() {
    std::lock_guard<std::mutex> lock(mutex());
    auto found = libraries().find(library_);
    if (found != libraries().end() && --found->second.adapters == 0) libraries().erase(found);
  }
  InitOnce(const InitOnce&) = delete;
  InitOnce& operator=(const InitOnce&) = delete;

  // Runs `init` unless this library's net (or collNet) init function `entry` has run already; a failed init is
  // tried again next time.
  template <class Init>
  ncclResult_t run(const void* entry, const Init& init) {
    std::lock_guard<std::mutex> lock(mutex());
    auto& initialised = libraries()[library_].initialised[kind_];
    if (initialised.count(entry) != 0) return ncclSuccess;
    const ncclResult_t result = init();
    if (result == ncclSuccess) initialised.insert(entry);
    return result;
  }

 private:
  struct Record {
    int adapters = 0;
    std::set<const void*> initialised[2];  // the init functions that have run, of the net and of the collNet
  };
  static std::mutex& mutex() {
    static std::mutex* m = new std::mutex;  // never destroyed: adapters may outlive static destruction
    return *m;
  }
  static std::map<const void*, Record>& libraries() {
    static auto* t = new std::map<const void*, Record>;
    return *t;
  }
  const void* library_;
  Kind kind_;
};

}  // namespace

std::unique_lock<std::recursive_mutex> lockPluginLifecycle() {
  static auto* m = new std::recursive_mutex;  // never destroyed: a plugin may be finalized during exit
  return std::unique_lock<std::recursive_mutex>(*m);
}

namespace {

// Each ABI version's table, collNet table and properties types.
template <int V>
struct Table;
#define NNS_LOADER_TABLE(V)                   \
  template <>                                 \
  struct Table<V> {                           \
    using Net = ncclNet_v##V##_t;             \
    using Coll = ncclCollNet_v##V##_t;        \
    using Props = ncclNetProperties_v##V##_t; \
  };
NNS_LOADER_TABLE(6)
NNS_LOADER_TABLE(7)
NNS_LOADER_TABLE(8)
NNS_LOADER_TABLE(9)
NNS_LOADER_TABLE(10)
NNS_LOADER_TABLE(11)
NNS_LOADER_TABLE(12)
#undef NNS_LOADER_TABLE

#define NNS_LOADER_CHECK(call)                              \
  do {                                                      \
    ncclResult_t check_result_ = (call);                    \
    if (check_result_ != ncclSuccess) return check_result_; \
  } while (0)

void warn(const char* plugin, const char* format, ...) __attribute__((format(printf, 2, 3)));
void warn(const char* plugin, const char* format, ...) {
  char text[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(text, sizeof(text), format, args);
  va_end(args);
  std::fprintf(stderr, "WARN NET/Loader : plugin %s: %s\n", plugin != nullptr ? plugin : "(unnamed)", text);
  noteAdapterWarning(text);
}

// The parameter types of a function-pointer type, to name each version's own SGE / vProps struct.
template <class F>
struct ArgsOf;
template <class R, class... A>
struct ArgsOf<R (*)(A...)> {
  using type = std::tuple<A...>;
};
template <class F>
using Args = typename ArgsOf<F>::type;
// The vProps argument of a table's makeVDevice.
template <class F>
using VDevicePropsOf = std::remove_pointer_t<std::tuple_element_t<1, Args<F>>>;

// A v12 vNIC device list in an older version's struct (at most NCCL_NET_MAX_DEVS_PER_NIC_V11 devices, which the
// caller checks).
template <class OldProps>
OldProps narrowVDeviceProps(const ncclNetVDeviceProps_v12_t& props) {
  OldProps old{};
  old.ndevs = props.ndevs;
  for (int i = 0; i < props.ndevs; ++i) old.devs[i] = props.devs[i];
  return old;
}

// The config handed to a plugin when the caller has none (the traffic class unset), shared: plugins only read it.
ncclNetCommConfig_v12_t& unsetConfig() {
  static ncclNetCommConfig_v12_t config{NCCL_NET_TRAFFIC_CLASS_UNDEF};
  return config;
}

// The profiler callback handed to a v10+ plugin when the caller has none: it records nothing and hands back no event
// (NCCL's own callback does the same when no profiler plugin is loaded).
ncclResult_t noProfiler(void** eHandle, int /*type*/, void* /*pHandle*/, int64_t /*pluginId*/, void* /*extData*/) {
  if (eHandle != nullptr) *eHandle = nullptr;
  return ncclSuccess;
}

// regMr and regMrDmaBuf as every net and collNet version has them: v6..v7 take an int size (a larger one is an
// error, never a truncation); regMrDmaBuf may be absent.
template <int V, class TableT>
ncclResult_t adaptRegMr(const TableT* t, const char* abi, void* comm, void* data, size_t size, int type,
                        void** mhandle) {
  if constexpr (V >= 8) {
    return t->regMr(comm, data, size, type, mhandle);
  } else {
    if (size > static_cast<size_t>(INT_MAX)) {
      warn(t->name, "regMr of %zu bytes does not fit %s_v%d's int size", size, abi, V);
      return ncclInternalError;
    }
    return t->regMr(comm, data, static_cast<int>(size), type, mhandle);
  }
}

template <class TableT>
ncclResult_t adaptRegMrDmaBuf(const TableT* t, const char* abi, void* comm, void* data, size_t size, int type,
                              uint64_t offset, int fd, void** mhandle) {
  if (t->regMrDmaBuf == nullptr) {
    warn(t->name, "%s table has no regMrDmaBuf", abi);
    return ncclInvalidUsage;
  }
  return t->regMrDmaBuf(comm, data, size, type, offset, fd, mhandle);
}

// Calls an ncclNet_vN or ncclCollNet_vN getProperties and fills the v12 view, with what version V lacks filled the
// way NCCL 2.30 fills it (net-abi.md §5.3). ncclNet and ncclCollNet share the properties struct of each version.
// A virtual NIC's count beyond the version's list (`most`) would name devices the plugin never wrote (zeros:
// device 0): an error.
// `plugin` is the table's name, `abi` "ncclNet" or "ncclCollNet".
ncclResult_t checkVNicSize(const char* plugin, const char* abi, int dev, int ndevs, int version, int most) {
  if (ndevs >= 0 && ndevs <= most) return ncclSuccess;
  warn(plugin, "device %d reports a virtual NIC of %d devices; %s_v%d lists at most %d", dev, ndevs, abi, version,
       most);
  return ncclInternalError;
}

// getProperties writes into a struct of ncclNet_vV's size followed by a guard: a plugin that fills another
// version's (larger) struct through this version's table would overwrite the caller's stack in NCCL, which passes
// exactly that size; here it is a clear error instead of a corrupted caller or a misread field.
template <class Props>
struct GuardedProps {
  static constexpr unsigned char kPattern = 0xa5;
  Props props;
  unsigned char guard[128];
  GuardedProps() {
    std::memset(&props, 0, sizeof(props));
    std::memset(guard, kPattern, sizeof(guard));
  }
  bool overrun() const {
    return std::any_of(std::begin(guard), std::end(guard), [](unsigned char b) { return b != kPattern; });
  }
};

template <int V, class GetProperties>
ncclResult_t readProperties(const char* plugin, const char* abi, GetProperties getProperties, int dev,
                            ncclNetProperties_v12_t* out) {
  using Props = typename Table<V>::Props;
  GuardedProps<Props> guarded;
  ncclResult_t result = getProperties(dev, &guarded.props);
  if (result != ncclSuccess) return result;
  if (guarded.overrun()) {
    warn(plugin,
         "getProperties(%d) wrote past the end of ncclNetProperties_v%d (%zu bytes): it fills "
         "another version's struct through %s_v%d's table",
         dev, V, sizeof(Props), abi, V);
    return ncclInternalError;
  }
  if constexpr (V == 12) {
    *out = guarded.props;
    return checkVNicSize(plugin, abi, dev, out->vProps.ndevs, V, NCCL_NET_MAX_DEVS_PER_NIC);
  } else {
    const Props& in = guarded.props;
    std::memset(out, 0, sizeof(*out));
    out->name = in.name;
    out->pciPath = in.pciPath;
    out->guid = in.guid;
    out->ptrSupport = in.ptrSupport;
    out->speed = in.speed;
    out->port = in.port;
    out->latency = in.latency;
    out->maxComms = in.maxComms;
    out->maxRecvs = in.maxRecvs;
    out->railId = NCCL_NET_ID_UNDEF;
    out->planeId = NCCL_NET_ID_UNDEF;
    if constexpr (V >= 7) {
      out->netDeviceType = in.netDeviceType;
      out->netDeviceVersion = in.netDeviceVersion;
    } else {
      out->netDeviceType = NCCL_NET_DEVICE_HOST;
      out->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
    }
    if constexpr (V >= 8) out->regIsGlobal = in.regIsGlobal;
    if constexpr (V >= 9) {
      out->forceFlush = in.forceFlush;
      if (ncclResult_t checked = checkVNicSize(plugin, abi, dev, in.vProps.ndevs, V, NCCL_NET_MAX_DEVS_PER_NIC_V11);
          checked != ncclSuccess)
        return checked;
      out->vProps.ndevs = in.vProps.ndevs;
      for (int i = 0; i < in.vProps.ndevs && i < NCCL_NET_MAX_DEVS_PER_NIC_V11; ++i)
        out->vProps.devs[i] = in.vProps.devs[i];
      out->maxP2pBytes = in.maxP2pBytes;
      out->maxCollBytes = in.maxCollBytes;
    } else {
      out->vProps.ndevs = 1;
      out->vProps.devs[0] = dev;
      out->maxP2pBytes = kLegacyMaxP2pBytes;
      out->maxCollBytes = kLegacyMaxCollBytes;
    }
    if constexpr (V >= 11) {
      out->maxMultiRequestSize = in.maxMultiRequestSize;
    } else {
      out->maxMultiRequestSize = 1;
    }
    return ncclSuccess;
  }
}

template <int V>
class NetAdapter final : public Net {
  using T = typename Table<V>::Net;

 public:
  NetAdapter(const T* table, std::shared_ptr<Library> library)
      : t_(table), library_(std::move(library)), initOnce_(library_->handle, InitOnce::kNet) {}

  const char* name() const override { return t_->name; }
  int version() const override { return V; }
  const std::string& path() const override { return library_->path; }

  ncclResult_t init(void** ctx, uint64_t commId, ncclNetCommConfig_v12_t* config, ncclDebugLogger_t logger,
                    ncclProfilerCallback_t profiler) override {
    auto lifecycle = lockPluginLifecycle();
    // NCCL always passes a logger, a config and a profiler callback, and plugins keep and use them: a caller without
    // them gets the SDK's stderr logger, a config with the traffic class unset and a profiler that records nothing.
    if (logger == nullptr) logger = nccl_net::sdk::stderrLogger;
    if (profiler == nullptr) profiler = noProfiler;
    const bool unset = config == nullptr;
    if (unset) config = &unsetConfig();
    if constexpr (V == 12) {
      return t_->init(ctx, commId, config, logger, profiler);
    } else if constexpr (V == 11) {
      return t_->init(ctx, commId, reinterpret_cast<ncclNetCommConfig_v11_t*>(config), logger, profiler);
    } else {
      // Before v11 a plugin is initialised once per process; the ctx is the host's own record of the config,
      // which v10's connect takes.
      (void)commId;
      const ncclResult_t result = initOnce_.run(reinterpret_cast<const void*>(t_->init), [&] {
        if constexpr (V == 10) {
          return t_->init(logger, profiler);
        } else {
          (void)profiler;
          return t_->init(logger);
        }
      });
      if (result != ncclSuccess) return result;
      if (ctx != nullptr) *ctx = unset ? &unsetConfig() : new ncclNetCommConfig_v12_t(*config);
      return ncclSuccess;
    }
  }

  ncclResult_t devices(int* ndev) override { return t_->devices(ndev); }

  ncclResult_t getProperties(int dev, ncclNetProperties_v12_t* out) override {
    return readProperties<V>(t_->name, "ncclNet", t_->getProperties, dev, out);
  }

  ncclResult_t listen(void* ctx, int dev, void* handle, void** listenComm) override {
    if constexpr (V >= 11) {
      return t_->listen(ctx, dev, handle, listenComm);
    } else {
      (void)ctx;
      return t_->listen(dev, handle, listenComm);
    }
  }

  ncclResult_t connect(void* ctx, int dev, void* handle, void** sendComm,
                       ncclNetDeviceHandle_v12_t** sendDevComm) override {
    if constexpr (V >= 11) {
      return t_->connect(ctx, dev, handle, sendComm, sendDevComm);
    } else if constexpr (V == 10) {
      return t_->connect(dev, static_cast<ncclNetCommConfig_v10_t*>(ctx), handle, sendComm, sendDevComm);
    } else if constexpr (V >= 7) {
      (void)ctx;
      return t_->connect(dev, handle, sendComm, sendDevComm);
    } else {
      (void)ctx, (void)sendDevComm;
      return t_->connect(dev, handle, sendComm);
    }
  }

  ncclResult_t accept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v12_t** recvDevComm) override {
    if constexpr (V >= 7) {
      return t_->accept(listenComm, recvComm, recvDevComm);
    } else {
      (void)recvDevComm;
      return t_->accept(listenComm, recvComm);
    }
  }

  ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle) override {
    return adaptRegMr<V>(t_, "ncclNet", comm, data, size, type, mhandle);
  }

  ncclResult_t regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                           void** mhandle) override {
    return adaptRegMrDmaBuf(t_, "ncclNet", comm, data, size, type, offset, fd, mhandle);
  }

  ncclResult_t deregMr(void* comm, void* mhandle) override { return t_->deregMr(comm, mhandle); }

  ncclResult_t isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                     void** request) override {
    if constexpr (V >= 10) {
      return t_->isend(sendComm, data, size, tag, mhandle, phandle, request);
    } else if constexpr (V == 9) {
      (void)phandle;
      return t_->isend(sendComm, data, size, tag, mhandle, request);
    } else {
      (void)phandle;
      if (size > kLegacyMaxP2pBytes) {
        warn(t_->name, "isend of %zu bytes exceeds the %zu-byte limit of ncclNet_v%d's int sizes", size,
             kLegacyMaxP2pBytes, V);
        return ncclInternalError;
      }
      return t_->isend(sendComm, data, static_cast<int>(size), tag, mhandle, request);
    }
  }

  ncclResult_t irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** phandles,
                     void** request) override {
    if constexpr (V >= 10) {
      // NCCL always passes an array of n profiler handles (NULL entries when no profiler runs), and plugins index
      // it unchecked: a caller without handles gets such an array rather than NULL.
      if (phandles == nullptr && n > 0) {
        constexpr int kOnStack = 64;  // NCCL groups at most NCCL_PROXY_MAX_SUBS (64) receives
        void* none[kOnStack] = {};
        if (n <= kOnStack) return t_->irecv(recvComm, n, data, sizes, tags, mhandles, none, request);
        std::vector<void*> many(static_cast<size_t>(n), nullptr);
        return t_->irecv(recvComm, n, data, sizes, tags, mhandles, many.data(), request);
      }
      return t_->irecv(recvComm, n, data, sizes, tags, mhandles, phandles, request);
    } else if constexpr (V == 9) {
      (void)phandles;
      return t_->irecv(recvComm, n, data, sizes, tags, mhandles, request);
    } else {
      (void)phandles;
      constexpr int kMaxRecvs = 64;
      if (n < 1 || n > kMaxRecvs) {
        warn(t_->name, "irecv of %d grouped receives (1..%d)", n, kMaxRecvs);
        return ncclInternalError;
      }
      int narrow[kMaxRecvs];
      for (int i = 0; i < n; ++i) {
        if (sizes[i] > kLegacyMaxP2pBytes) {
          warn(t_->name, "irecv of %zu bytes exceeds the %zu-byte limit of ncclNet_v%d's int sizes", sizes[i],
               kLegacyMaxP2pBytes, V);
          return ncclInternalError;
        }
        narrow[i] = static_cast<int>(sizes[i]);
      }
      *request = nullptr;  // these versions know no "optional completion" hint in *request
      return t_->irecv(recvComm, n, data, narrow, tags, mhandles, request);
    }
  }

  // NCCL calls iflush only after GPU-direct receives, so a host-only plugin may leave it NULL.
  ncclResult_t iflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) override {
    if (t_->iflush == nullptr) return absent("iflush");
    return t_->iflush(recvComm, n, data, sizes, mhandles, request);
  }
  ncclResult_t test(void* request, int* done, int* sizes) override { return t_->test(request, done, sizes); }
  ncclResult_t closeSend(void* sendComm) override { return t_->closeSend(sendComm); }
  ncclResult_t closeRecv(void* recvComm) override { return t_->closeRecv(recvComm); }
  ncclResult_t closeListen(void* listenComm) override { return t_->closeListen(listenComm); }

  bool hasMakeVDevice() const override {
    if constexpr (V >= 9) return t_->makeVDevice != nullptr;
    return false;
  }
  ncclResult_t makeVDevice(int* d, ncclNetVDeviceProps_v12_t* props) override {
    auto lifecycle = lockPluginLifecycle();
    if constexpr (V >= 9) {
      if (t_->makeVDevice == nullptr) return absent("makeVDevice");
      if constexpr (V == 12) {
        return t_->makeVDevice(d, props);
      } else {
        if (props->ndevs > NCCL_NET_MAX_DEVS_PER_NIC_V11) {
          warn(t_->name, "a vNIC of %d devices does not fit ncclNet_v%d (at most %d)", props->ndevs, V,
               NCCL_NET_MAX_DEVS_PER_NIC_V11);
          return ncclInvalidUsage;
        }
        auto old = narrowVDeviceProps<VDevicePropsOf<decltype(t_->makeVDevice)>>(*props);
        return t_->makeVDevice(d, &old);
      }
    } else {
      (void)d, (void)props;
      return absent("makeVDevice");
    }
  }

  bool hasSetNetAttr() const override {
    if constexpr (V >= 11) return t_->setNetAttr != nullptr;
    return false;
  }
  ncclResult_t setNetAttr(void* ctx, ncclNetAttr_v12_t* attr) override {
    if constexpr (V >= 11) {
      if (t_->setNetAttr == nullptr) return absent("setNetAttr");
      if constexpr (V == 11) {
        return t_->setNetAttr(ctx, reinterpret_cast<ncclNetAttr_v11_t*>(attr));
      } else {
        return t_->setNetAttr(ctx, attr);
      }
    } else {
      (void)ctx, (void)attr;
      return absent("setNetAttr");
    }
  }

  ncclResult_t finalize(void* ctx) override {
    auto lifecycle = lockPluginLifecycle();
    if constexpr (V >= 11) {
      return t_->finalize(ctx);
    } else {
      if (ctx != &unsetConfig()) delete static_cast<ncclNetCommConfig_v12_t*>(ctx);
      return ncclSuccess;
    }
  }

 private:
  ncclResult_t absent(const char* function) {
    warn(t_->name, "has no %s (ncclNet_v%d)", function, V);
    return ncclInvalidUsage;
  }

  const T* t_;
  std::shared_ptr<Library> library_;
  InitOnce initOnce_;  // after library_: the record goes before the library may be unloaded
};

// One adapter per ncclCollNet_vN: the v12 view of a collNet, filled as NCCL 2.30's src/plugin/net/net_vN.cc do.
template <int V>
class CollNetAdapter final : public CollNet {
  using T = typename Table<V>::Coll;

 public:
  CollNetAdapter(const T* table, std::shared_ptr<Library> library)
      : t_(table), library_(std::move(library)), initOnce_(library_->handle, InitOnce::kCollNet) {}

  const char* name() const override { return t_->name; }
  int version() const override { return V; }
  const std::string& path() const override { return library_->path; }

  ncclResult_t init(void** ctx, uint64_t commId, ncclDebugLogger_t logger) override {
    auto lifecycle = lockPluginLifecycle();
    if (logger == nullptr) logger = nccl_net::sdk::stderrLogger;  // as the net's init
    if constexpr (V >= 11) {
      return t_->init(ctx, commId, logger);
    } else {
      // Before v11 a collNet is initialised once per process and has no per-communicator context.
      (void)commId;
      const ncclResult_t result =
          initOnce_.run(reinterpret_cast<const void*>(t_->init), [&] { return t_->init(logger); });
      if (result != ncclSuccess) return result;
      if (ctx != nullptr) *ctx = nullptr;
      return ncclSuccess;
    }
  }

  ncclResult_t devices(int* ndev) override { return t_->devices(ndev); }

  ncclResult_t getProperties(int dev, ncclNetProperties_v12_t* out) override {
    ncclResult_t result = readProperties<V>(t_->name, "ncclCollNet", t_->getProperties, dev, out);
    if constexpr (V == 7 || V == 8) {
      // NCCL's v7 and v8 collNet adapters do not copy the device type (its v8 net adapter does): a collNet is a
      // host-driven device there.
      out->netDeviceType = NCCL_NET_DEVICE_HOST;
      out->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
    }
    return result;
  }

  ncclResult_t listen(void* ctx, int dev, void* handle, void** listenComm) override {
    if constexpr (V >= 11) {
      return t_->listen(ctx, dev, handle, listenComm);
    } else {
      (void)ctx;
      return t_->listen(dev, handle, listenComm);
    }
  }

  ncclResult_t connect(void* handles[], int nranks, int rank, void* listenComm, void** collComm) override {
    return t_->connect(handles, nranks, rank, listenComm, collComm);
  }
  ncclResult_t reduceSupport(ncclDataType_t dataType, ncclRedOp_t redOp, int* supported) override {
    return t_->reduceSupport(dataType, redOp, supported);
  }

  ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle) override {
    return adaptRegMr<V>(t_, "ncclCollNet", comm, data, size, type, mhandle);
  }
  ncclResult_t regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                           void** mhandle) override {
    return adaptRegMrDmaBuf(t_, "ncclCollNet", comm, data, size, type, offset, fd, mhandle);
  }
  ncclResult_t deregMr(void* comm, void* mhandle) override { return t_->deregMr(comm, mhandle); }

  ncclResult_t iallreduce(void* comm, void* sendData, void* recvData, size_t count, ncclDataType_t dataType,
                          ncclRedOp_t redOp, void* sendMhandle, void* recvMhandle, void** request) override {
    if constexpr (V >= 9) {
      return t_->iallreduce(comm, sendData, recvData, count, dataType, redOp, sendMhandle, recvMhandle, request);
    } else {
      if (count > kLegacyMaxP2pBytes) {
        warn(t_->name, "iallreduce of %zu elements exceeds the limit of ncclCollNet_v%d's int count", count, V);
        return ncclInternalError;
      }
      return t_->iallreduce(comm, sendData, recvData, static_cast<int>(count), dataType, redOp, sendMhandle,
                            recvMhandle, request);
    }
  }

  bool hasIallgather() const override {
    if constexpr (V >= 8) return t_->iallgather != nullptr;
    return false;
  }
  ncclResult_t iallgather(void* comm, void* sendData, int nRecvParts, ncclNetSGE_v12_t* recvParts, size_t bytesPerRank,
                          size_t windowOffset, size_t windowBytes, void* sendMhandle, void** request) override {
    if constexpr (V >= 8) {
      if (t_->iallgather == nullptr) return absent("iallgather");
      if constexpr (V >= 9) {
        using Sge = std::remove_pointer_t<std::tuple_element_t<3, Args<decltype(t_->iallgather)>>>;
        static_assert(sizeof(Sge) == sizeof(ncclNetSGE_v12_t), "v9..v11 SGEs have the v12 layout");
        return t_->iallgather(comm, sendData, nRecvParts, reinterpret_cast<Sge*>(recvParts), bytesPerRank, windowOffset,
                              windowBytes, sendMhandle, request);
      } else {
        ncclNetSGE_v8_t part;
        NNS_LOADER_CHECK(narrowSge("iallgather", nRecvParts, recvParts, &part));
        return t_->iallgather(comm, sendData, 1, &part, bytesPerRank, windowOffset, windowBytes, sendMhandle, request);
      }
    } else {
      (void)comm, (void)sendData, (void)nRecvParts, (void)recvParts, (void)bytesPerRank, (void)windowOffset;
      (void)windowBytes, (void)sendMhandle, (void)request;
      return absent("iallgather");
    }
  }

  bool hasIreducescatter() const override {
    if constexpr (V >= 8) return t_->ireducescatter != nullptr;
    return false;
  }
  ncclResult_t ireducescatter(void* comm, int nSendParts, ncclNetSGE_v12_t* sendParts, void* recvData,
                              size_t bytesPerRank, size_t windowOffset, size_t windowBytes, ncclDataType_t dataType,
                              ncclRedOp_t redOp, void* recvMhandle, void** request) override {
    if constexpr (V >= 8) {
      if (t_->ireducescatter == nullptr) return absent("ireducescatter");
      if constexpr (V >= 9) {
        using Sge = std::remove_pointer_t<std::tuple_element_t<2, Args<decltype(t_->ireducescatter)>>>;
        static_assert(sizeof(Sge) == sizeof(ncclNetSGE_v12_t), "v9..v11 SGEs have the v12 layout");
        return t_->ireducescatter(comm, nSendParts, reinterpret_cast<Sge*>(sendParts), recvData, bytesPerRank,
                                  windowOffset, windowBytes, dataType, redOp, recvMhandle, request);
      } else {
        ncclNetSGE_v8_t part;
        NNS_LOADER_CHECK(narrowSge("ireducescatter", nSendParts, sendParts, &part));
        return t_->ireducescatter(comm, 1, &part, recvData, bytesPerRank, windowOffset, windowBytes, dataType, redOp,
                                  recvMhandle, request);
      }
    } else {
      (void)comm, (void)nSendParts, (void)sendParts, (void)recvData, (void)bytesPerRank, (void)windowOffset;
      (void)windowBytes, (void)dataType, (void)redOp, (void)recvMhandle, (void)request;
      return absent("ireducescatter");
    }
  }

  ncclResult_t iflush(void* comm, void* data, int size, void* mhandle, void** request) override {
    if (t_->iflush == nullptr) return absent("iflush");
    return t_->iflush(comm, data, size, mhandle, request);
  }
  ncclResult_t test(void* request, int* done, int* size) override { return t_->test(request, done, size); }
  ncclResult_t closeColl(void* comm) override { return t_->closeColl(comm); }
  ncclResult_t closeListen(void* comm) override { return t_->closeListen(comm); }

  bool hasMakeVDevice() const override {
    if constexpr (V >= 9) return t_->makeVDevice != nullptr;
    return false;
  }
  ncclResult_t makeVDevice(int* d, ncclNetVDeviceProps_v12_t* props) override {
    auto lifecycle = lockPluginLifecycle();
    if constexpr (V >= 9) {
      if (t_->makeVDevice == nullptr) return absent("makeVDevice");
      if constexpr (V == 12) {
        return t_->makeVDevice(d, props);
      } else {
        if (props->ndevs > NCCL_NET_MAX_DEVS_PER_NIC_V11) {
          warn(t_->name, "a collNet vNIC of %d devices does not fit ncclCollNet_v%d (at most %d)", props->ndevs, V,
               NCCL_NET_MAX_DEVS_PER_NIC_V11);
          return ncclInvalidUsage;
        }
        auto old = narrowVDeviceProps<VDevicePropsOf<decltype(t_->makeVDevice)>>(*props);
        return t_->makeVDevice(d, &old);
      }
    } else {
      (void)d, (void)props;
      return absent("makeVDevice");
    }
  }

  ncclResult_t finalize(void* ctx) override {
    auto lifecycle = lockPluginLifecycle();
    if constexpr (V >= 11) {
      return t_->finalize(ctx);
    } else {
      (void)ctx;
      return ncclSuccess;
    }
  }

 private:
  // v8 carries one scatter-gather part with a 32-bit size; NCCL refuses anything else there (ncclInternalError).
  ncclResult_t narrowSge(const char* function, int n, const ncclNetSGE_v12_t* parts, ncclNetSGE_v8_t* out) {
    if (n != 1 || parts == nullptr || parts[0].size > kLegacyMaxCollBytes) {
      warn(t_->name, "%s through ncclCollNet_v8 takes one part of at most %zu bytes (got %d part(s), %zu bytes)",
           function, kLegacyMaxCollBytes, n, parts != nullptr && n > 0 ? parts[0].size : size_t{0});
      return ncclInternalError;
    }
    *out = ncclNetSGE_v8_t{parts[0].mhandle, parts[0].address, static_cast<uint32_t>(parts[0].size)};
    return ncclSuccess;
  }
  ncclResult_t absent(const char* function) {
    warn(t_->name, "collNet has no %s (ncclCollNet_v%d)", function, V);
    return ncclInvalidUsage;
  }

  const T* t_;
  std::shared_ptr<Library> library_;
  InitOnce initOnce_;  // after library_: the record goes before the library may be unloaded
};

}  // namespace

namespace {

// Whether `address` lies in a loaded segment that holds code (executable): an assembler label in .text, which has no
// symbol type or size to tell it from a table. A real table, function pointers the dynamic linker fills in, is in
// data (.data.rel.ro).
bool inCode(const void* address) {
  struct Search {
    uintptr_t address;
    bool executable = false;
  } search{reinterpret_cast<uintptr_t>(address)};
  dl_iterate_phdr(
      [](dl_phdr_info* object, size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        for (int i = 0; i < object->dlpi_phnum; ++i) {
          const ElfW(Phdr)& segment = object->dlpi_phdr[i];
          const uintptr_t begin = object->dlpi_addr + segment.p_vaddr;
          if (segment.p_type != PT_LOAD || s->address < begin || s->address - begin >= segment.p_memsz) continue;
          s->executable = (segment.p_flags & PF_X) != 0;
          return 1;
        }
        return 0;
      },
      &search);
  return search.executable;
}

// Whether `text` is a NUL-terminated string this process can read, within `limit` bytes: its bytes are written into a
// pipe one at a time, which answers EFAULT where reading one would fault (a table's name pointer that is not NULL but
// aims at no mapping, 0x10, crashed the first printf of it). A pipe, not process_vm_readv: that call is in the
// debugging group a sandbox's system call filter may kill the process for. One byte at a time, not past the NUL: a
// larger write read past the end of the string (AddressSanitizer's global-buffer-overflow on a string literal).
bool readableString(const char* text, size_t limit) {
  int fds[2];
  // Blocking is no matter: one byte goes into the empty pipe at a time, and is read back at once.
  if (pipe(fds) != 0) return true;  // cannot tell: taken as readable, as before this check
  bool readable = false;
  for (size_t i = 0; i < limit; ++i) {
    if (write(fds[1], text + i, 1) != 1) {
      readable = errno != EFAULT;  // only EFAULT says the memory is not there
      break;
    }
    char byte = 1;
    if (read(fds[0], &byte, 1) != 1) {
      readable = true;  // cannot tell
      break;
    }
    if (byte == '\0') {
      readable = true;
      break;
    }
  }
  close(fds[0]);
  close(fds[1]);
  return readable;
}

// What a table's exported symbol is, when the library's symbol table says: a function, an object smaller than the
// table, or a label in code is refused before a byte of it is read as function pointers. An object of the table's
// size is a table wherever it lies: a const table in a program that is not position-independent (STATIC_PLUGIN) is
// in .rodata, which shares the code's executable segment under gold, -z noseparate-code, or on aarch64.
std::string symbolDefect(const void* table, size_t tableBytes, const char* typeName) {
  std::string inCodeDefect =
      inCode(table) ? std::string("it lies in the library's code, not its data: no ") + typeName : "";
  Dl_info info{};
  void* entry = nullptr;
  if (dladdr1(table, &info, &entry, RTLD_DL_SYMENT) == 0 || entry == nullptr || info.dli_saddr != table)
    return inCodeDefect;
  const auto* symbol = static_cast<const ElfW(Sym)*>(entry);
  const int type = ELF64_ST_TYPE(symbol->st_info);
  if (type == STT_FUNC || type == STT_GNU_IFUNC) return std::string("it is a function, not an ") + typeName;
  if (type == STT_OBJECT && symbol->st_size == sizeof(void*))
    return std::string("it is a pointer-sized object, not an ") + typeName + " (" + std::to_string(tableBytes) +
           " bytes): a pointer to the table? NCCL reads the exported symbol as the table itself";
  if (type == STT_OBJECT && symbol->st_size != 0 && symbol->st_size < tableBytes)
    return "it is a " + std::to_string(symbol->st_size) + "-byte object; an " + typeName + " has " +
           std::to_string(tableBytes) + " (built against another version's header?)";
  if (type == STT_OBJECT && symbol->st_size != 0) return "";
  return inCodeDefect;
}

// One required entry of a table: where it is (to list the missing ones in table order), whether it is set, its name.
struct Entry {
  const void* field;
  bool present;
  const char* name;
};
template <class F>
Entry entry(const F& field, const char* name) {
  return {&field, field != nullptr, name};
}

// Why the ncclNet or ncclCollNet (`kind`) table at `table` must not be used, or "". Required are the entries NCCL 2.30
// calls without a NULL check (net-abi.md §5.5): those every table of both kinds has, plus the kind's own (`own(t)`).
// One of them NULL crashes NCCL at its first use, so the table is refused, and probing does not go on to older
// versions, since NCCL would not either.
template <int V, class T, class Own>
std::string tableDefect(const void* table, const char* kind, Own own) {
  const std::string typeName = std::string(kind) + "_v" + std::to_string(V) + "_t";
  if (std::string symbol = symbolDefect(table, sizeof(T), typeName.c_str()); !symbol.empty()) return symbol;
  const T& t = *static_cast<const T*>(table);
  std::vector<Entry> entries{
      entry(t.init, "init"),       entry(t.devices, "devices"), entry(t.getProperties, "getProperties"),
      entry(t.listen, "listen"),   entry(t.connect, "connect"), entry(t.regMr, "regMr"),
      entry(t.deregMr, "deregMr"), entry(t.test, "test"),       entry(t.closeListen, "closeListen")};
  if constexpr (V >= 11) entries.push_back(entry(t.finalize, "finalize"));
  for (const Entry& e : own(t)) entries.push_back(e);
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return std::less<const void*>()(a.field, b.field); });
  std::string text = t.name == nullptr ? "its name is NULL" : "";
  if (t.name != nullptr && !readableString(t.name, 4096)) {
    char where[32];
    std::snprintf(where, sizeof(where), "%p", static_cast<const void*>(t.name));
    text = std::string("its name (at ") + where +
           ") is not a string this process can read (no memory there, or no end within 4096 bytes): refused here; "
           "NCCL would take the plugin and crash when it first reads the name, to log it (NCCL_DEBUG=INFO) or to "
           "compare it with NCCL_NET";
  }
  std::string list;
  int missing = 0;
  for (const Entry& e : entries) {
    if (e.present) continue;
    list += (list.empty() ? "" : ", ") + std::string(e.name);
    ++missing;
  }
  if (missing == 0) return text;
  return text + (text.empty() ? "" : "; ") + list + (missing == 1 ? " is NULL" : " are NULL") +
         ", which NCCL calls without a check";
}

template <int V>
std::string netDefect(const void* table) {
  return tableDefect<V, typename Table<V>::Net>(table, "ncclNet", [](const auto& t) {
    return std::vector<Entry>{entry(t.accept, "accept"), entry(t.isend, "isend"), entry(t.irecv, "irecv"),
                              entry(t.closeSend, "closeSend"), entry(t.closeRecv, "closeRecv")};
  });
}

template <int V>
std::string collNetDefect(const void* table) {
  return tableDefect<V, typename Table<V>::Coll>(table, "ncclCollNet", [](const auto& t) {
    return std::vector<Entry>{entry(t.reduceSupport, "reduceSupport"), entry(t.iallreduce, "iallreduce"),
                              entry(t.closeColl, "closeColl")};
  });
}

template <template <int> class Adapter, class Base>
std::unique_ptr<Base> makeChecked(int version, const void* table, std::shared_ptr<Library> library, std::string* defect,
                                  bool coll) {
  auto check = [&]<int V>() -> std::unique_ptr<Base> {
    std::string why = coll ? collNetDefect<V>(table) : netDefect<V>(table);
    if (!why.empty()) {
      if (defect != nullptr) *defect = std::move(why);
      return nullptr;
    }
    using T = std::conditional_t<std::is_base_of_v<Net, Base>, typename Table<V>::Net, typename Table<V>::Coll>;
    return std::make_unique<Adapter<V>>(static_cast<const T*>(table), std::move(library));
  };
  switch (version) {
    case 12: return check.template operator()<12>();
    case 11: return check.template operator()<11>();
    case 10: return check.template operator()<10>();
    case 9: return check.template operator()<9>();
    case 8: return check.template operator()<8>();
    case 7: return check.template operator()<7>();
    case 6: return check.template operator()<6>();
    default:
      if (defect != nullptr) *defect = "version " + std::to_string(version) + " is not one this host knows";
      return nullptr;
  }
}

}  // namespace

std::unique_ptr<Net> makeNetAdapter(int version, const void* table, std::shared_ptr<Library> library,
                                    std::string* defect) {
  return makeChecked<NetAdapter, Net>(version, table, std::move(library), defect, false);
}

std::unique_ptr<CollNet> makeCollNetAdapter(int version, const void* table, std::shared_ptr<Library> library,
                                            std::string* defect) {
  return makeChecked<CollNetAdapter, CollNet>(version, table, std::move(library), defect, true);
}

}  // namespace nns::core::detail
