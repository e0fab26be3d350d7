// loader.cc: resolves NCCL_NET_PLUGIN as NCCL 2.30 does, probes ncclNetPlugin_v12..v6 (and ncclCollNetPlugin_v12..v6
// beside it) newest first and explains every candidate it rejects.
#include "nns/core/loader.hpp"

#include <dirent.h>
#include <dlfcn.h>
#include <link.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <utility>

#include "adapters.hpp"
#include "nccl_net/sdk/log.hpp"
#include "nccl_net/sdk/result.hpp"
#include "nns/core/printable.hpp"

namespace nns::core {

namespace {

// NCCL's configuration files, applied when the library loads and before any thread of ours runs (setenv beside
// another thread's getenv is a race), so that the loader, the topology and the plugins it loads see what NCCL would.
[[maybe_unused]] const bool kNcclConfApplied = [] {
  applyNcclConfFiles();
  return true;
}();

// The WARN lines a plugin logs while the loader probes it (its init, on this thread), kept for the rejection: "init
// returned ncclSystemError" says little without the plugin's own reason ("no usable network interface"), which
// otherwise reached only stderr. Logged as the SDK's stderr logger does, too; a plugin keeps its logger, and later
// calls (other threads, or after the probe) are only written out.
thread_local std::string* probeWarnings = nullptr;
// The loader's own WARNs about the plugin in that time (the adapters': a getProperties that wrote past its version's
// struct), which explain a refusal the plugin's result code alone ("returned ncclInternalError") does not.
thread_local std::string* probeAdapterWarnings = nullptr;

std::atomic<int> processLogRank{-1};
thread_local int threadLogRank = -1;

}  // namespace

void setProcessLogRank(int rank) {
  // A process of two ranks (communicators made on several threads, or a world and a part of it where the ranks
  // differ) has no rank of its own to name: threads without one of their own (a plugin's) say none (-2).
  int seen = -1;
  while (!processLogRank.compare_exchange_weak(seen, seen == -1 || seen == rank ? rank : -2)) {
  }
}
int setThreadLogRank(int rank) {
  return std::exchange(threadLogRank, rank);
}
int logRank() {
  return threadLogRank >= 0 ? threadLogRank : std::max(-1, processLogRank.load(std::memory_order_relaxed));
}

void hostLogger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  (void)flags, (void)file, (void)line;
  char message[1024];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(message, sizeof(message), fmt, args);
  va_end(args);
  if (probeWarnings != nullptr && (level == NCCL_LOG_WARN || level == NCCL_LOG_ABORT))
    *probeWarnings += (probeWarnings->empty() ? "" : "; ") + printable(message);
  // ABORT shows as WARN; the level is the engine's ($NNS_DEBUG, else $NCCL_DEBUG), as for its own lines.
  if ((level == NCCL_LOG_ABORT ? static_cast<int>(NCCL_LOG_WARN) : static_cast<int>(level)) > debugLevel()) return;
  const int rank = logRank();
  char label[24] = "";
  if (rank >= 0) std::snprintf(label, sizeof(label), "[rank %d] ", rank);
  std::fprintf(stderr, "%s%s %s\n", label, nccl_net::sdk::detail::levelTag(level), message);
}

namespace {

constexpr const char* kDefaultLibrary = "libnccl-net.so";  // NCCL's choice when NCCL_NET_PLUGIN is unset
constexpr size_t kMaxEntries = NCCL_NET_MAX_PLUGINS - 2;   // NCCL keeps two slots for its internal nets

bool isLibSoName(const std::string& name) {
  return name.size() >= 6 && name.rfind("lib", 0) == 0 && name.compare(name.size() - 3, 3, ".so") == 0;
}

// What `file` is when it is there and not a regular file (after links), else empty.
std::string notRegular(const std::string& file) {
  struct stat status {};
  if (stat(file.c_str(), &status) != 0 || S_ISREG(status.st_mode)) return "";
  const char* what = S_ISFIFO(status.st_mode) ? "a FIFO, not a library: not opened, as its open would wait for a writer"
                     : S_ISDIR(status.st_mode) ? "a directory, not a library"
                     : S_ISCHR(status.st_mode) ? "a character device, not a library: not opened, as a read may wait"
                     : S_ISBLK(status.st_mode) ? "a block device, not a library"
                                               : "not a regular file, not a library";
  return file + ": " + what;
}

// The file the dynamic linker opened for `file`: `file` itself when it is a path, else the directory its search
// found it in (RTLD_DI_ORIGIN, copied out by libc: reading the link map's own strings here raced, for TSan, with
// another thread's dlopen of the same library, under a lock of ld.so it does not see) and the name.
std::string openedFile(void* handle, const std::string& file) {
  if (file.find('/') != std::string::npos || file == kProgramItself) return file;
  char origin[PATH_MAX + 1] = {};
  if (dlinfo(handle, RTLD_DI_ORIGIN, origin) != 0 || origin[0] == '\0') return "";
  return std::string(origin) + "/" + file;
}

// The result's name; a code no NCCL names as "ncclResult_t N" (a plugin's own).
std::string resultText(ncclResult_t result) {
  const char* name = nccl_net::sdk::resultName(result);
  return std::strcmp(name, "unknown ncclResult_t") != 0 ? name
                                                        : "ncclResult_t " + std::to_string(static_cast<int>(result));
}

// NCCL's check before it assigns a net plugin to a communicator (net.cc's ncclNetCheckDeviceVersion): device 0 must
// be host-driven, or the UNPACK device at the one version NCCL's kernels speak. Empty when usable, else why not.
std::string deviceZeroUnusable(Net& net) {
  ncclNetProperties_v12_t props{};
  ncclResult_t result = net.getProperties(0, &props);
  if (result != ncclSuccess) return "getProperties(0) returned " + resultText(result);
  if (props.netDeviceType == NCCL_NET_DEVICE_HOST) return "";
  if (props.netDeviceType == NCCL_NET_DEVICE_UNPACK && props.netDeviceVersion == NCCL_NET_DEVICE_UNPACK_VERSION)
    return "";
  char reason[160];
  std::snprintf(reason, sizeof(reason),
                "device 0 has netDeviceType %d version 0x%x; NCCL takes HOST (0), or UNPACK (1) at version 0x%x only",
                static_cast<int>(props.netDeviceType), static_cast<unsigned>(props.netDeviceVersion),
                static_cast<unsigned>(NCCL_NET_DEVICE_UNPACK_VERSION));
  return reason;
}

std::vector<int> exportedVersions(void* handle, const char* prefix) {
  std::vector<int> versions;
  for (int version : knownNetVersions()) {
    std::string symbol = prefix + std::to_string(version);
    if (dlsym(handle, symbol.c_str()) != nullptr) versions.push_back(version);
  }
  return versions;
}

// The known versions' tables named `prefix`N that the library's file (`loadedPath`, as handed to dlopen) defines
// but does not export, as a reason: "defines ncclNetPlugin_v8 but does not export it (hidden or static): ...". ""
// when it defines none, or when that cannot be told (a stripped library, the program itself).
std::string unexportedTablesText(void* handle, const std::string& loadedPath, const std::string& prefix) {
  const std::string file = openedFile(handle, loadedPath);
  if (file.empty() || file == kProgramItself) return "";
  std::string names;
  size_t count = 0;
  for (int version : unexportedVersions(file, prefix)) {
    const auto& known = knownNetVersions();
    if (std::find(known.begin(), known.end(), version) == known.end()) continue;
    names += (names.empty() ? "" : ", ") + prefix + std::to_string(version);
    ++count;
  }
  if (count == 0) return "";
  const char* them = count == 1 ? "it" : "them";
  return "defines " + names + " but does not export " + them + " (hidden or static): mark " + them +
         " with NCCL_NET_EXPORT (nccl_net/export.h) or default visibility";
}

// Why a library with none of the known versions' symbols is refused: one that defines such a table without
// exporting it says so (exporting it is the fix); a plugin of an older or a newer ABI says so (rebuilding it, or a
// newer host, is the fix); anything else is not a net plugin.
std::string unknownVersionsText(void* handle, const std::string& loadedPath) {
  if (std::string hidden = unexportedTablesText(handle, loadedPath, "ncclNetPlugin_v"); !hidden.empty()) return hidden;
  std::vector<int> older, newer;
  for (int version = 1; version < knownNetVersions().back(); ++version)
    if (dlsym(handle, ("ncclNetPlugin_v" + std::to_string(version)).c_str()) != nullptr) older.push_back(version);
  for (int version = knownNetVersions().front() + 1; version <= knownNetVersions().front() + 8; ++version)
    if (dlsym(handle, ("ncclNetPlugin_v" + std::to_string(version)).c_str()) != nullptr) newer.push_back(version);
  auto list = [](const std::vector<int>& versions) {
    std::string text;
    for (int version : versions) text += (text.empty() ? "v" : ", v") + std::to_string(version);
    return text;
  };
  const std::string known =
      "v" + std::to_string(knownNetVersions().front()) + "..v" + std::to_string(knownNetVersions().back());
  if (!newer.empty())
    return "exports ncclNetPlugin " + list(newer) + ", newer than this host knows (" + known +
           "): a newer nccl-net-sdk (and NCCL) loads it" + (older.empty() ? "" : "; also " + list(older));
  if (!older.empty())
    return "exports ncclNetPlugin " + list(older) + " only, older than any version this host loads (" + known +
           "): rebuild the plugin against a newer net ABI";
  return "exports no ncclNetPlugin_" + known + ": not a net plugin";
}

}  // namespace

const std::vector<int>& knownNetVersions() {
  static const std::vector<int> versions{12, 11, 10, 9, 8, 7, 6};
  return versions;
}

std::vector<std::string> pluginSpecEntries(const LoadOptions& options) {
  std::string spec = options.plugin;
  if (spec.empty()) {
    const char* env = std::getenv("NCCL_NET_PLUGIN");
    if (env == nullptr) return {kDefaultLibrary};
    spec = env;  // set but empty: NCCL's list split finds no entry, as for "none"
  }
  if (strcasecmp(spec.c_str(), "none") == 0) return {};
  // As NCCL's strtok_r: split on commas, empty entries skipped, nothing trimmed.
  std::vector<std::string> entries;
  std::stringstream stream(spec);
  std::string entry;
  while (std::getline(stream, entry, ',') && entries.size() < kMaxEntries)
    if (!entry.empty() && entry.size() < 255) entries.push_back(entry);
  return entries;
}

std::string noPluginReason(const LoadOptions& options) {
  if (!pluginSpecEntries(options).empty()) return "";
  // Empty entries only when the setting is "none", empty or only commas; unset, it names the default library.
  const char* env = std::getenv("NCCL_NET_PLUGIN");
  const std::string value = !options.plugin.empty() ? options.plugin : env != nullptr ? env : "";
  const std::string setting = !options.plugin.empty() ? "the plugin setting \"" + value + "\" names"
                              : value.empty() ? "NCCL_NET_PLUGIN is set but empty, which NCCL reads as \"none\":"
                                              : "NCCL_NET_PLUGIN=" + value + " names";
  return setting + " no external plugin, so NCCL would run on its internal nets alone, which are not part of this SDK";
}

std::vector<std::string> candidateFiles(const std::string& entry, const std::vector<std::string>& searchDirs,
                                        const std::vector<std::string>& fallbackDirs) {
  if (!entry.empty() && entry.size() <= std::strlen("STATIC_PLUGIN") &&
      strncasecmp(entry.c_str(), "STATIC_PLUGIN", entry.size()) == 0)
    return {kProgramItself};
  std::vector<std::string> names{entry};
  if (entry.find('/') == std::string::npos && !isLibSoName(entry)) names.push_back("libnccl-net-" + entry + ".so");
  std::vector<std::string> tried;
  for (const auto& name : names) {
    if (name.find('/') == std::string::npos) {
      for (const auto& dir : searchDirs) tried.push_back(dir + "/" + name);
    }
    tried.push_back(name);
  }
  for (const auto& name : names)
    if (name.find('/') == std::string::npos)
      for (const auto& dir : fallbackDirs) tried.push_back(dir + "/" + name);
  return tried;
}

std::optional<std::string> requiredNetName(const LoadOptions& options) {
  if (options.netName || !options.readNcclNet) return options.netName;
  const char* env = std::getenv("NCCL_NET");
  return env != nullptr ? std::optional<std::string>(env) : std::nullopt;
}

void* openLibrary(const std::string& file, std::string* error) {
  if (file == kProgramItself) return dlopen(nullptr, RTLD_NOW | RTLD_LOCAL);
  std::string refused;
  if (file.find('/') != std::string::npos) {
    refused = notRegular(file);
  } else {
    // The first directory holding the name is the one the dynamic linker would open it from, when LD_LIBRARY_PATH
    // (as this process started with it) decides: RUNPATH, the cache and the default directories are not looked at.
    for (const std::string& dir : libraryPathDirs()) {
      std::string candidate = dir + "/" + file;
      if (access(candidate.c_str(), F_OK) != 0) continue;
      refused = notRegular(candidate);
      break;
    }
  }
  if (!refused.empty()) {
    if (error != nullptr) *error = refused;
    return nullptr;
  }
  dlerror();
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr && error != nullptr) {
    const char* text = dlerror();
    *error = text != nullptr ? text : file + ": dlopen failed";
  }
  return handle;
}

LibraryExports inspectLibrary(const std::string& path, bool withSymbols) {
  LibraryExports exports;
  exports.path = path;
  void* handle = openLibrary(path, &exports.error);
  if (handle == nullptr) return exports;
  exports.netVersions = exportedVersions(handle, "ncclNetPlugin_v");
  exports.collNetVersions = exportedVersions(handle, "ncclCollNetPlugin_v");
  if (!withSymbols) {
    dlclose(handle);
    return exports;
  }
  // The file the name resolved to (a bare name goes through the linker's search), read after the close.
  std::string file = path;
  if (link_map* map = nullptr;
      dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr && map->l_name[0] != '\0')
    file = map->l_name;
  dlclose(handle);
  readElfExports(file, &exports.symbols, &exports.symbolsError);
  return exports;
}

std::vector<std::string> findPluginLibraries(const std::vector<std::string>& dirs) {
  std::vector<std::string> searched = dirs;
  for (const std::string& dir : libraryPathDirs()) searched.push_back(dir);
  // A library reached twice (a directory listed twice, spelled differently, or a link) is listed once, under the
  // first name it was found by.
  std::set<std::string> found, seen;
  for (const auto& dir : searched) {
    DIR* directory = opendir(dir.c_str());
    if (directory == nullptr) continue;
    while (dirent* item = readdir(directory)) {
      std::string name = item->d_name;
      if (name.rfind("libnccl-net", 0) != 0 || name.size() <= 3 || name.compare(name.size() - 3, 3, ".so") != 0)
        continue;
      std::string path = dir + "/" + name;
      char resolved[PATH_MAX];
      if (seen.insert(realpath(path.c_str(), resolved) != nullptr ? resolved : path).second) found.insert(path);
    }
    closedir(directory);
  }
  return {found.begin(), found.end()};
}

namespace {
// dlopens `path` and finds `symbol`: the library (kept alive by whatever adapts the table) and the table, or
// nullptr with *error set.
const void* openTable(const std::string& path, const std::string& symbol, std::shared_ptr<detail::Library>* library,
                      std::string* error) {
  void* handle = openLibrary(path, error);
  if (handle == nullptr) {
    return nullptr;
  }
  *library = std::make_shared<detail::Library>(handle, path);
  const void* table = dlsym(handle, symbol.c_str());
  if (table == nullptr && error != nullptr) *error = path + " does not export " + symbol;
  return table;
}
}  // namespace

std::unique_ptr<Net> openNetVersion(const std::string& path, int version, std::string* error) {
  std::shared_ptr<detail::Library> library;
  const void* table = openTable(path, "ncclNetPlugin_v" + std::to_string(version), &library, error);
  if (table == nullptr) return nullptr;
  std::string defect;
  auto net = detail::makeNetAdapter(version, table, library, &defect);
  if (net == nullptr && error != nullptr) *error = "ncclNetPlugin_v" + std::to_string(version) + ": " + defect;
  return net;
}

std::unique_ptr<CollNet> openCollNetVersion(const std::string& path, int version, std::string* error) {
  std::shared_ptr<detail::Library> library;
  const void* table = openTable(path, "ncclCollNetPlugin_v" + std::to_string(version), &library, error);
  if (table == nullptr) return nullptr;
  std::string defect;
  auto coll = detail::makeCollNetAdapter(version, table, library, &defect);
  if (coll == nullptr && error != nullptr) *error = "ncclCollNetPlugin_v" + std::to_string(version) + ": " + defect;
  return coll;
}

std::vector<std::string> libraryPathDirs() {
  std::vector<std::string> dirs;
  const char* path = std::getenv("LD_LIBRARY_PATH");
  if (path == nullptr || *path == '\0') return dirs;
  std::string field;
  for (const char* p = path;; ++p) {
    if (*p == ':' || *p == ';' || *p == '\0') {
      dirs.push_back(field.empty() ? "." : field);
      field.clear();
      if (*p == '\0') break;
    } else {
      field += *p;
    }
  }
  return dirs;
}

namespace detail {
void noteAdapterWarning(const char* text) {
  if (probeAdapterWarnings != nullptr)
    *probeAdapterWarnings += (probeAdapterWarnings->empty() ? "" : "; ") + printable(text);
}
}  // namespace detail

namespace {

// Collects what a plugin logs as WARN (or ABORT) on this thread while it lives, for a rejection's reason; let go
// however the probe ends (a plugin's exception left the thread's pointer aimed at a dead string, which the next
// WARN logged on the thread wrote through).
class CapturedWarnings {
 public:
  CapturedWarnings() {
    probeWarnings = &text;
    probeAdapterWarnings = &adapters;
  }
  ~CapturedWarnings() {
    probeWarnings = nullptr;
    probeAdapterWarnings = nullptr;
  }
  CapturedWarnings(const CapturedWarnings&) = delete;
  CapturedWarnings& operator=(const CapturedWarnings&) = delete;
  // What a refusal gets: the loader's own finding first (the cause behind the result code), then the plugin's words.
  std::string reasons() const {
    std::string out;
    if (!adapters.empty()) out += ": " + adapters;
    if (!text.empty()) out += " (it logged: " + text + ")";
    return out;
  }
  std::string text, adapters;
};

// The context of a probe's successful init, kept for the first init that asks for what the probe asked (as in
// NCCL, where the first communicator's init is the one that checks the plugin), else finalized with the loaded
// plugin. Finalized at the probe and initialised again, a v11+ plugin saw init, finalize, init in one loaded copy,
// which NCCL (unloading it with its last communicator) never does: one that sets up its process state once
// (pthread_once) and frees it at its last finalize was left without it. An init that asks for something else
// (another comm id, a config, its own logger) gets a context of its own.
class KeptContext {
 public:
  KeptContext(void* ctx, uint64_t commId) : ctx_(ctx), commId_(commId) {}
  // Gives the kept context to an init for `commId` that asks for nothing else (`plain`); false: the init is the
  // plugin's to run.
  bool take(void** ctx, uint64_t commId, bool plain) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!kept_ || ctx == nullptr || commId != commId_ || !plain) return false;
    kept_ = false;
    *ctx = ctx_;
    return true;
  }
  // Finalizes the context unless an init took it (from a destructor: a plugin's exception has nowhere to go).
  template <class Finalize>
  void release(const Finalize& finalize) noexcept {
    if (!kept_) return;
    auto lifecycle = detail::lockPluginLifecycle();
    try {
      finalize(ctx_);
    } catch (...) {
    }
  }

 private:
  void* ctx_;
  uint64_t commId_;
  std::mutex mutex_;
  bool kept_ = true;
};

// The Net loadNet returns: the probe's context kept (KeptContext) for an init for the probe's comm id with no config,
// hostLogger and no profiler.
class ProbedNet final : public Net {
 public:
  ProbedNet(std::unique_ptr<Net> net, void* ctx, uint64_t commId) : net_(std::move(net)), kept_(ctx, commId) {}
  ~ProbedNet() override {
    kept_.release([this](void* ctx) { net_->finalize(ctx); });
  }
  ProbedNet(const ProbedNet&) = delete;
  ProbedNet& operator=(const ProbedNet&) = delete;

  const char* name() const override { return net_->name(); }
  int version() const override { return net_->version(); }
  const std::string& path() const override { return net_->path(); }
  ncclResult_t init(void** ctx, uint64_t commId, ncclNetCommConfig_v12_t* config, ncclDebugLogger_t logger,
                    ncclProfilerCallback_t profiler) override {
    if (kept_.take(ctx, commId, config == nullptr && logger == hostLogger && profiler == nullptr)) return ncclSuccess;
    return net_->init(ctx, commId, config, logger, profiler);
  }
  ncclResult_t devices(int* ndev) override { return net_->devices(ndev); }
  ncclResult_t getProperties(int dev, ncclNetProperties_v12_t* props) override {
    return net_->getProperties(dev, props);
  }
  ncclResult_t listen(void* ctx, int dev, void* handle, void** listenComm) override {
    return net_->listen(ctx, dev, handle, listenComm);
  }
  ncclResult_t connect(void* ctx, int dev, void* handle, void** sendComm,
                       ncclNetDeviceHandle_v12_t** sendDevComm) override {
    return net_->connect(ctx, dev, handle, sendComm, sendDevComm);
  }
  ncclResult_t accept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v12_t** recvDevComm) override {
    return net_->accept(listenComm, recvComm, recvDevComm);
  }
  ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle) override {
    return net_->regMr(comm, data, size, type, mhandle);
  }
  ncclResult_t regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                           void** mhandle) override {
    return net_->regMrDmaBuf(comm, data, size, type, offset, fd, mhandle);
  }
  ncclResult_t deregMr(void* comm, void* mhandle) override { return net_->deregMr(comm, mhandle); }
  ncclResult_t isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                     void** request) override {
    return net_->isend(sendComm, data, size, tag, mhandle, phandle, request);
  }
  ncclResult_t irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** phandles,
                     void** request) override {
    return net_->irecv(recvComm, n, data, sizes, tags, mhandles, phandles, request);
  }
  ncclResult_t iflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) override {
    return net_->iflush(recvComm, n, data, sizes, mhandles, request);
  }
  ncclResult_t test(void* request, int* done, int* sizes) override { return net_->test(request, done, sizes); }
  ncclResult_t closeSend(void* sendComm) override { return net_->closeSend(sendComm); }
  ncclResult_t closeRecv(void* recvComm) override { return net_->closeRecv(recvComm); }
  ncclResult_t closeListen(void* listenComm) override { return net_->closeListen(listenComm); }
  bool hasMakeVDevice() const override { return net_->hasMakeVDevice(); }
  ncclResult_t makeVDevice(int* d, ncclNetVDeviceProps_v12_t* props) override { return net_->makeVDevice(d, props); }
  bool hasSetNetAttr() const override { return net_->hasSetNetAttr(); }
  ncclResult_t setNetAttr(void* ctx, ncclNetAttr_v12_t* attr) override { return net_->setNetAttr(ctx, attr); }
  ncclResult_t finalize(void* ctx) override { return net_->finalize(ctx); }

 private:
  std::unique_ptr<Net> net_;
  KeptContext kept_;
};

// The CollNet loadCollNet returns: the probe's context kept (KeptContext) for an init for comm id 0 with hostLogger,
// as the net's. NCCL keeps a collNet's context with its communicator; finalized after the probe, a collNet that frees
// its state at its last finalize found it gone at the next init.
class ProbedCollNet final : public CollNet {
 public:
  ProbedCollNet(std::unique_ptr<CollNet> coll, void* ctx) : coll_(std::move(coll)), kept_(ctx, 0) {}
  ~ProbedCollNet() override {
    kept_.release([this](void* ctx) { coll_->finalize(ctx); });
  }
  ProbedCollNet(const ProbedCollNet&) = delete;
  ProbedCollNet& operator=(const ProbedCollNet&) = delete;

  const char* name() const override { return coll_->name(); }
  int version() const override { return coll_->version(); }
  const std::string& path() const override { return coll_->path(); }
  ncclResult_t init(void** ctx, uint64_t commId, ncclDebugLogger_t logger) override {
    if (kept_.take(ctx, commId, logger == hostLogger)) return ncclSuccess;
    return coll_->init(ctx, commId, logger);
  }
  ncclResult_t devices(int* ndev) override { return coll_->devices(ndev); }
  ncclResult_t getProperties(int dev, ncclNetProperties_v12_t* props) override {
    return coll_->getProperties(dev, props);
  }
  ncclResult_t listen(void* ctx, int dev, void* handle, void** listenComm) override {
    return coll_->listen(ctx, dev, handle, listenComm);
  }
  ncclResult_t connect(void* handles[], int nranks, int rank, void* listenComm, void** collComm) override {
    return coll_->connect(handles, nranks, rank, listenComm, collComm);
  }
  ncclResult_t reduceSupport(ncclDataType_t dataType, ncclRedOp_t redOp, int* supported) override {
    return coll_->reduceSupport(dataType, redOp, supported);
  }
  ncclResult_t regMr(void* collComm, void* data, size_t size, int type, void** mhandle) override {
    return coll_->regMr(collComm, data, size, type, mhandle);
  }
  ncclResult_t regMrDmaBuf(void* collComm, void* data, size_t size, int type, uint64_t offset, int fd,
                           void** mhandle) override {
    return coll_->regMrDmaBuf(collComm, data, size, type, offset, fd, mhandle);
  }
  ncclResult_t deregMr(void* collComm, void* mhandle) override { return coll_->deregMr(collComm, mhandle); }
  ncclResult_t iallreduce(void* collComm, void* sendData, void* recvData, size_t count, ncclDataType_t dataType,
                          ncclRedOp_t redOp, void* sendMhandle, void* recvMhandle, void** request) override {
    return coll_->iallreduce(collComm, sendData, recvData, count, dataType, redOp, sendMhandle, recvMhandle, request);
  }
  bool hasIallgather() const override { return coll_->hasIallgather(); }
  ncclResult_t iallgather(void* collComm, void* sendData, int nRecvParts, ncclNetSGE_v12_t* recvParts,
                          size_t bytesPerRank, size_t windowOffset, size_t windowBytes, void* sendMhandle,
                          void** request) override {
    return coll_->iallgather(collComm, sendData, nRecvParts, recvParts, bytesPerRank, windowOffset, windowBytes,
                             sendMhandle, request);
  }
  bool hasIreducescatter() const override { return coll_->hasIreducescatter(); }
  ncclResult_t ireducescatter(void* collComm, int nSendParts, ncclNetSGE_v12_t* sendParts, void* recvData,
                              size_t bytesPerRank, size_t windowOffset, size_t windowBytes, ncclDataType_t dataType,
                              ncclRedOp_t redOp, void* recvMhandle, void** request) override {
    return coll_->ireducescatter(collComm, nSendParts, sendParts, recvData, bytesPerRank, windowOffset, windowBytes,
                                 dataType, redOp, recvMhandle, request);
  }
  ncclResult_t iflush(void* collComm, void* data, int size, void* mhandle, void** request) override {
    return coll_->iflush(collComm, data, size, mhandle, request);
  }
  ncclResult_t test(void* request, int* done, int* size) override { return coll_->test(request, done, size); }
  ncclResult_t closeColl(void* collComm) override { return coll_->closeColl(collComm); }
  ncclResult_t closeListen(void* listenComm) override { return coll_->closeListen(listenComm); }
  bool hasMakeVDevice() const override { return coll_->hasMakeVDevice(); }
  ncclResult_t makeVDevice(int* d, ncclNetVDeviceProps_v12_t* props) override { return coll_->makeVDevice(d, props); }
  ncclResult_t finalize(void* ctx) override { return coll_->finalize(ctx); }

 private:
  std::unique_ptr<CollNet> coll_;
  KeptContext kept_;
};

// The nets and collNets rejected after their init succeeded, by dlopen handle and table, with the reason. NCCL disables
// such a plugin (or its collNet) and never initialises it again while it stays loaded; a later load here refuses it
// at once, where it called init again on the same loaded copy (a second init of a v6..v10 plugin, which has no
// finalize; an init after the finalize of a v11+ one that frees what it keeps there). A rejected net is never
// unloaded, so its record lasts; a collNet's library is its accepted net's, and NCCL forgets the collNet's state when
// it unloads that library with its last communicator: so is the record here, when the last Library of the handle
// unloads it (libraryUnloaded).
class DisabledLibraries {
 public:
  enum class Table { kNet, kCollNet };
  static void add(void* handle, Table table, const std::string& reason) {
    std::lock_guard<std::mutex> lock(mutex());
    reasons().emplace(std::make_pair(handle, table), reason);
  }
  static std::string reason(void* handle, Table table) {
    std::lock_guard<std::mutex> lock(mutex());
    auto found = reasons().find(std::make_pair(handle, table));
    return found != reasons().end() ? found->second : std::string();
  }
  static void forget(void* handle) {
    std::lock_guard<std::mutex> lock(mutex());
    reasons().erase(std::make_pair(handle, Table::kNet));
    reasons().erase(std::make_pair(handle, Table::kCollNet));
  }

 private:
  static std::mutex& mutex() {
    static auto* m = new std::mutex;  // never destroyed: a load may come from a static destructor
    return *m;
  }
  static std::map<std::pair<void*, Table>, std::string>& reasons() {
    static auto* r = new std::map<std::pair<void*, Table>, std::string>;
    return *r;
  }
};

// What a plugin's C entry point threw (a C++ plugin's bug: nothing may cross the C ABI), as a rejection's reason.
std::string thrownText(const char* call) {
  try {
    throw;
  } catch (const std::exception& e) {
    return std::string(call) + " threw an exception (" + printable(e.what()) + "), which no C entry point may";
  } catch (...) {
    return std::string(call) + " threw an exception, which no C entry point may";
  }
}

}  // namespace

std::unique_ptr<CollNet> loadCollNet(const Net& net, CollNetReport* report) {
  CollNetReport local;
  CollNetReport& out = report != nullptr ? *report : local;
  out = CollNetReport{};
  out.path = net.path();
  std::string error;
  void* handle = openLibrary(out.path, &error);  // the net's own library: already loaded
  if (handle == nullptr) {
    out.rejectReason = "could not open: " + error;
    return nullptr;
  }
  auto library = std::make_shared<detail::Library>(handle, out.path);
  out.exportedVersions = exportedVersions(handle, "ncclCollNetPlugin_v");
  if (out.exportedVersions.empty()) {
    const std::string hidden = unexportedTablesText(handle, out.path, "ncclCollNetPlugin_v");
    out.rejectReason = hidden.empty()
                           ? "exports no ncclCollNetPlugin_v12..v6: no collNet (NCCL runs without in-network "
                             "collectives)"
                           : hidden + "; as it is, NCCL finds no collNet and runs without in-network collectives";
    return nullptr;
  }
  if (const std::string disabled = DisabledLibraries::reason(handle, DisabledLibraries::Table::kCollNet);
      !disabled.empty()) {
    out.rejectReason =
        "disabled while its library stays loaded: an earlier load rejected this collNet after its init "
        "succeeded (" +
        disabled + "), and NCCL does not initialise it again";
    return nullptr;
  }
  int version = out.exportedVersions.front();
  std::string symbol = "ncclCollNetPlugin_v" + std::to_string(version);
  std::string defect;
  auto coll = detail::makeCollNetAdapter(version, dlsym(handle, symbol.c_str()), library, &defect);
  if (coll == nullptr) {
    out.rejectReason = symbol + ": " + defect;
    return nullptr;
  }
  // As NCCL does: init, then devices; a failure or no device disables collNet only (under the lifecycle lock). An
  // exception thrown through the C ABI rejects it as in loadNet, and what the plugin logs as WARN meanwhile is kept
  // with the reason, as there.
  auto lifecycle = detail::lockPluginLifecycle();
  void* ctx = nullptr;
  const std::string initCall = "init through ncclCollNet_v" + std::to_string(version);
  {
    CapturedWarnings warnings;
    try {
      const ncclResult_t result = coll->init(&ctx, 0, hostLogger);  // the net's logger: the plugin may keep one
      if (result != ncclSuccess) out.rejectReason = initCall + " returned " + resultText(result);
    } catch (...) {
      out.rejectReason = thrownText(initCall.c_str());
    }
    if (!out.rejectReason.empty()) {
      out.rejectReason += warnings.reasons();
      return nullptr;
    }
  }
  {
    CapturedWarnings warnings;
    try {
      int ndev = 0;
      const ncclResult_t result = coll->devices(&ndev);
      if (result != ncclSuccess || ndev <= 0)
        out.rejectReason = result != ncclSuccess ? "devices returned " + resultText(result) : "no devices";
    } catch (...) {
      out.rejectReason = thrownText("devices");
    }
    if (!out.rejectReason.empty()) out.rejectReason += warnings.reasons();
  }
  if (!out.rejectReason.empty()) {
    try {
      coll->finalize(ctx);
    } catch (...) {  // rejected already; its finalize's exception adds nothing
    }
    // Rejected after its init succeeded: disabled while the library stays loaded (the accepted net holds it).
    DisabledLibraries::add(handle, DisabledLibraries::Table::kCollNet, out.rejectReason);
    return nullptr;
  }
  out.chosenVersion = version;
  return std::make_unique<ProbedCollNet>(std::move(coll), ctx);
}

std::unique_ptr<Net> loadNet(const LoadOptions& options, LoadReport* report) {
  LoadReport local;
  LoadReport& out = report != nullptr ? *report : local;
  const std::optional<std::string> wanted = requiredNetName(options);
  for (const std::string& entry : pluginSpecEntries(options)) {
    CandidateReport candidate;
    candidate.requested = entry;
    void* handle = nullptr;
    std::string errors;
    for (const std::string& file : candidateFiles(entry, options.searchDirs, options.fallbackDirs)) {
      candidate.triedPaths.push_back(file);
      std::string error;
      handle = openLibrary(file, &error);
      if (handle != nullptr) {
        candidate.loadedPath = file;
        candidate.openedFile = openedFile(handle, file);
        break;
      }
      errors += (errors.empty() ? "" : "; ") + error;
    }
    if (handle == nullptr) {
      candidate.rejectReason = "could not open: " + errors;
      if (entry.find_first_of(" \t") == 0 || entry.find_last_of(" \t") == entry.size() - 1)
        candidate.rejectReason += " (the entry begins or ends with a space, which NCCL keeps as part of the name)";
      out.candidates.push_back(std::move(candidate));
      continue;
    }
    if (const std::string disabled = DisabledLibraries::reason(handle, DisabledLibraries::Table::kNet);
        !disabled.empty()) {
      dlclose(handle);  // this load's reference; the library stays loaded
      candidate.rejectReason = "disabled for this process: an earlier load rejected it after its init ran (" +
                               disabled + "), and NCCL does not initialise such a plugin again";
      out.candidates.push_back(std::move(candidate));
      continue;
    }
    auto library = std::make_shared<detail::Library>(handle, candidate.loadedPath);
    candidate.exportedVersions = exportedVersions(handle, "ncclNetPlugin_v");
    if (candidate.exportedVersions.empty()) {
      // The path only where the request did not name it already (a plugin name resolved by the search).
      candidate.rejectReason = (candidate.loadedPath != candidate.requested ? candidate.loadedPath + " " : "") +
                               unknownVersionsText(handle, candidate.loadedPath);
      out.candidates.push_back(std::move(candidate));
      continue;
    }
    int version = candidate.exportedVersions.front();
    std::string symbol = "ncclNetPlugin_v" + std::to_string(version);
    std::string defect;
    auto net = detail::makeNetAdapter(version, dlsym(handle, symbol.c_str()), library, &defect);
    if (net == nullptr) {
      candidate.rejectReason = symbol + ": " + defect;
      out.candidates.push_back(std::move(candidate));
      continue;
    }
    if (wanted && strcasecmp(wanted->c_str(), net->name()) != 0) {
      candidate.rejectReason = "its net is named \"" + printable(net->name()) + "\", and " +
                               (wanted->empty() ? std::string("NCCL_NET is set but empty, which matches no net")
                                                : "NCCL_NET=" + printable(wanted->c_str()) +
                                                      " takes only a net of that name (ignoring case)") +
                               ": skipped before init, as NCCL does";
      out.candidates.push_back(std::move(candidate));
      continue;
    }
    // As NCCL does: init, then devices; a failure or no device rejects the plugin and finalizes it. The whole probe
    // holds the plugins' lifecycle lock, as NCCL's holds its plugin mutex.
    auto lifecycle = detail::lockPluginLifecycle();
    void* ctx = nullptr;
    const std::string initCall = "init through ncclNet_v" + std::to_string(version);
    std::string refusal;
    bool initialised = false;
    {
      CapturedWarnings warnings;
      try {
        const ncclResult_t result = net->init(&ctx, options.commId, nullptr, hostLogger, nullptr);
        initialised = result == ncclSuccess;
        if (!initialised) refusal = initCall + " returned " + resultText(result);
      } catch (...) {
        refusal = thrownText(initCall.c_str());
      }
      if (!refusal.empty()) refusal += warnings.reasons();
    }
    // What it logs while listing its devices explains a rejection there as much as at init (the SDK's WARN that
    // GPU support needs an iflush, say): kept with the reason, not only on stderr.
    if (initialised) {
      CapturedWarnings warnings;
      const char* call = "devices";
      try {
        int ndev = 0;
        const ncclResult_t result = net->devices(&ndev);
        call = "getProperties";
        refusal = result != ncclSuccess ? "devices returned " + resultText(result)
                  : ndev <= 0           ? "no devices"
                                        : deviceZeroUnusable(*net);
      } catch (...) {
        refusal = thrownText(call);
      }
      if (!refusal.empty()) refusal += warnings.reasons();
      if (!refusal.empty()) {
        try {
          net->finalize(ctx);
        } catch (...) {  // rejected already; its finalize's exception adds nothing
        }
      }
    }
    if (!refusal.empty()) {
      // Rejected after its init succeeded (devices failed or listed none, device 0 unusable), a plugin stays loaded:
      // NCCL disables it and does not unload it (net.cc's init failure path; its device-version rejection leaves the
      // reference count below 0, so no unload there either), and what the init started (a v6..v10 plugin's threads,
      // with no finalize to stop them) must find its code mapped. One whose init failed started nothing to keep
      // running, and is unloaded: a later load (another communicator, after the environment was put right) then
      // starts it afresh, where a plugin that keeps what it found at its first init would fail again.
      if (initialised) {
        library->keepLoaded = true;
        DisabledLibraries::add(handle, DisabledLibraries::Table::kNet, refusal);
      }
      candidate.rejectReason = refusal;
      out.candidates.push_back(std::move(candidate));
      continue;
    }
    candidate.chosenVersion = version;
    out.candidates.push_back(std::move(candidate));
    return std::make_unique<ProbedNet>(std::move(net), ctx, options.commId);
  }
  return nullptr;
}

namespace detail {
void libraryUnloaded(void* handle) {
  DisabledLibraries::forget(handle);
}
}  // namespace detail

}  // namespace nns::core
