// ucx_plugin.cc: the "nns-ucx" NCCL net plugin: UCP tagged messages, one worker per comm, worker addresses exchanged
// over a non-blocking TCP side channel, peer failures surfaced through UCX's peer error handling.
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <ucp/api/ucp.h>
#include <nccl_net/sdk.hpp>

#include "ucx_devices.hpp"
#include "ucx_wire.hpp"

namespace nns_ucx {
namespace sdk = nccl_net::sdk;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kMaxRecvs = 8;             // grouped receives per irecv, as NCCL's IB transport
constexpr size_t kRequestsPerComm = 64;  // NCCL keeps at most NCCL_NET_MAX_REQUESTS (32) in flight per comm
constexpr int kListenBacklog = 512;

// ---- configuration (read once; every variable is documented in plugins/ucx/README.md)
// ------------------------------------------

// An integer setting of at least `minimum` (sdk::envInteger: a malformed one is reported and `fallback` used).
int envInt(const char* name, int fallback, int minimum) {
  return static_cast<int>(sdk::envInteger(name, fallback, minimum, 1000000000));
}

struct Config {
  enum class MemMap { kAuto, kAlways, kNever };
  int keepaliveMs;
  int connectTimeoutMs;
  int closeTimeoutMs;
  int lingerMs;  // how long a comm closed in order keeps its worker and endpoint for the peer (see Keeper)
  int retryIntervalMs;
  int deadPeerMs;
  int sharedMemorySpeedMbps;
  bool peerErrors;  // UCP_ERR_HANDLING_MODE_PEER on every endpoint (NNS_UCX_PEER_ERRORS=0: NONE)
  MemMap memMap;

  static const Config& get() {
    static const Config config = [] {
      Config c{};
      c.keepaliveMs = envInt("NNS_UCX_KEEPALIVE_MS", 1000, 1);
      c.connectTimeoutMs = envInt("NNS_UCX_CONNECT_TIMEOUT_MS", 30000, 1);
      c.closeTimeoutMs = envInt("NNS_UCX_CLOSE_TIMEOUT_MS", 500, 0);
      c.lingerMs = envInt("NNS_UCX_LINGER_MS", 5000, 0);
      c.retryIntervalMs = envInt("NNS_UCX_RETRY_INTERVAL_MS", 100, 1);
      c.deadPeerMs = envInt("NNS_UCX_DEAD_PEER_MS", 10000, 1000);
      c.sharedMemorySpeedMbps = envInt("NNS_UCX_SHM_SPEED_MBPS", 100000, 1);
      c.peerErrors = envInt("NNS_UCX_PEER_ERRORS", 1, 0) != 0;
      c.memMap = MemMap::kAuto;
      const char* map = std::getenv("NNS_UCX_MEM_MAP");
      if (map != nullptr && *map != '\0') {
        std::string value = map;
        if (value == "1" || value == "yes" || value == "always")
          c.memMap = MemMap::kAlways;
        else if (value == "0" || value == "no" || value == "never")
          c.memMap = MemMap::kNever;
        else if (value != "auto")
          NCCL_NET_WARN("NNS_UCX_MEM_MAP=%s is not auto, yes or no; using auto", map);
      }
      return c;
    }();
    return config;
  }
};

// ---- devices and per-process UCP contexts
// --------------------------------------------------------------------------

class DeviceTable {
 public:
  // A static object, not a leaked one: the plugin may be dlclose()d, and LeakSanitizer would then see a leak.
  static DeviceTable& get() {
    static DeviceTable table;
    return table;
  }

  void discoverOnce() {
    std::call_once(discovered_, [this] {
      std::string error;
      devices_ = discoverDevices(Config::get().sharedMemorySpeedMbps, &error);
      if (!error.empty()) NCCL_NET_WARN("device discovery: %s", error.c_str());
      enableSharedMemoryErrorHandling();
      std::string list;
      for (size_t i = 0; i < devices_.size(); ++i) {
        list += " [" + std::to_string(i) + "]" + devices_[i].name + "(";
        for (size_t t = 0; t < devices_[i].transports.size(); ++t) list += (t ? "," : "") + devices_[i].transports[t];
        list += ")";
      }
      if (!devices_.empty())
        NCCL_NET_INFO(NCCL_INIT | NCCL_NET, "UCX %s devices:%s", ucp_get_version_string(), list.c_str());
    });
  }
  int count() const { return static_cast<int>(devices_.size()); }
  const UcxDevice& device(int dev) const { return devices_[static_cast<size_t>(dev)]; }
  bool valid(int dev) const { return dev >= 0 && dev < count(); }

 private:
  // UCX 1.13's shared-memory transports take part in peer error handling only when UCX_POSIX_ERROR_HANDLING and
  // UCX_SYSV_ERROR_HANDLING say so (default "n"); without them UCX_TLS=sm leaves no transport for an endpoint in
  // UCP_ERR_HANDLING_MODE_PEER. Transport (UCT) options are read from the environment only (ucp_config_modify does
  // not reach them), so they are set there: once, in init (NCCL calls it under its plugin lock, before any proxy
  // thread), never over a value the user set, only when UCX selected a shared-memory transport (UCX would otherwise
  // warn about unused variables), and not at all with NNS_UCX_SHM_ERROR_HANDLING=0.
  void enableSharedMemoryErrorHandling() {
    if (envInt("NNS_UCX_SHM_ERROR_HANDLING", 1, 0) == 0 || !Config::get().peerErrors) return;
    bool sharedMemory = false;
    for (const UcxDevice& device : devices_) sharedMemory = sharedMemory || device.sharedMemoryTransports;
    if (!sharedMemory) return;
    setenv("UCX_POSIX_ERROR_HANDLING", "y", 0);
    setenv("UCX_SYSV_ERROR_HANDLING", "y", 0);
  }

  std::once_flag discovered_;
  std::vector<UcxDevice> devices_;  // fixed after discovery: no vNICs (UCX stripes over devices itself)
};

// One ucp_context per device and process, restricted to that device with NET_DEVICES so a comm on device d moves its
// bytes over d. Created on first use, not in init: NCCL's tools and our harness fork after init, and a UCP context
// (its shared-memory segments, sockets, async thread) does not survive into a forked child. A child notices the
// fork by its pid and leaves the parent's contexts untouched (they belong to the parent). It builds its own only where
// the parent held none at the fork: libucs runs one async thread per process, started by the first worker and
// counted, and a child inherits the count but not the thread. Its workers' events (a tcp connection to accept) were
// never handled: its comms connected, then no message ever arrived (a child forked while a closed comm lingered hung
// so). Such a child is refused instead, at listen, connect and accept.
struct DeviceContext {
  ucp_context_h handle = nullptr;
  int workers = 0;         // live comms and mapped registrations on it (under ContextTable's mutex): cleaned up when
                           // none is left
  bool mapMemory = false;  // regMr pins and registers with ucp_mem_map (RDMA devices, or NNS_UCX_MEM_MAP=yes)
};

class ContextTable {
 public:
  static ContextTable& get() {
    static ContextTable table;
    return table;
  }

  // ncclInvalidUsage, with a WARN naming `call`, in a process forked while its parent held a UCP context (see above);
  // ncclSuccess elsewhere.
  ncclResult_t usableHere(const char* call) {
    std::lock_guard<std::mutex> lock(mutex_);
    return usableLocked(call);
  }

  // The device's context, created on first use; every successful acquire is paired with a release.
  ncclResult_t acquire(int dev, DeviceContext** out) {
    std::lock_guard<std::mutex> lock(mutex_);
    NCCL_NET_CHECK(usableLocked("a comm's worker"));
    if (contexts_.size() <= static_cast<size_t>(dev)) contexts_.resize(static_cast<size_t>(dev) + 1);
    auto& slot = contexts_[static_cast<size_t>(dev)];
    if (!slot) {
      auto created = std::make_unique<DeviceContext>();
      NCCL_NET_CHECK(create(DeviceTable::get().device(dev), created.get()));
      slot = std::move(created);
    }
    ++slot->workers;
    *out = slot.get();
    return ncclSuccess;
  }

  // One more user of a context already acquired: a registration mapped on it, which may outlive its comm (ucp_cleanup
  // under a mapped region aborted the process in UCX's registration cache).
  void retain(DeviceContext* context) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++context->workers;
  }

  // The last comm of a context gone: clean the context up, so a process with no comms holds no UCX state (no async
  // thread, no sockets) and can fork a child that uses UCX afresh. NCCL keeps its comms for the communicator's life,
  // so this costs one ucp_init per communicator, not per connection.
  void release(DeviceContext* context) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (--context->workers > 0) return;
    for (auto& slot : contexts_) {
      if (slot.get() != context) continue;
      ucp_cleanup(slot->handle);
      slot.reset();
      return;
    }
    // Not among ours: a context inherited from the parent process; leave it alone.
  }

 private:
  static ncclResult_t modify(ucp_config_t* config, const char* name, const std::string& value) {
    ucs_status_t status = ucp_config_modify(config, name, value.c_str());
    if (status != UCS_OK) {
      NCCL_NET_WARN("ucp_config_modify(%s=%s): %s", name, value.c_str(), ucs_status_string(status));
      return ncclSystemError;
    }
    return ncclSuccess;
  }

  static ncclResult_t create(const UcxDevice& device, DeviceContext* context) {
    const Config& settings = Config::get();
    ucp_config_t* config = nullptr;
    ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
    if (status != UCS_OK) {
      NCCL_NET_WARN("ucp_config_read: %s", ucs_status_string(status));
      return ncclSystemError;
    }
    ncclResult_t result = ncclSuccess;
    if (!device.sharedMemory && result == ncclSuccess) result = modify(config, "NET_DEVICES", device.name);
    // Peer failures are found by UCX's keepalive; its 20 s default is too slow to be a useful error for NCCL.
    if (std::getenv("UCX_KEEPALIVE_INTERVAL") == nullptr && result == ncclSuccess)
      result = modify(config, "KEEPALIVE_INTERVAL", std::to_string(settings.keepaliveMs) + "ms");
    if (result != ncclSuccess) {
      ucp_config_release(config);
      return result;
    }
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    params.features = UCP_FEATURE_TAG;
    params.mt_workers_shared = 1;  // comms (workers) of one context are driven by different proxy threads
    status = ucp_init(&params, config, &context->handle);
    ucp_config_release(config);
    if (status != UCS_OK) {
      NCCL_NET_WARN("ucp_init for device %s: %s", device.name.c_str(), ucs_status_string(status));
      return ncclSystemError;
    }
    context->mapMemory =
        settings.memMap == Config::MemMap::kAlways || (settings.memMap == Config::MemMap::kAuto && device.rdma);
    NCCL_NET_INFO(NCCL_INIT | NCCL_NET, "UCP context for device %s (pid %d)%s", device.name.c_str(),
                  static_cast<int>(getpid()), context->mapMemory ? ", regMr maps memory" : "");
    return ncclSuccess;
  }

  // Under mutex_: first in a forked child, takes the parent's live contexts out of use; then refuses if there were any
  // (here or in an earlier generation: the inherited count of UCX's async thread never drops in this process).
  ncclResult_t usableLocked(const char* call) {
    const pid_t self = getpid();
    if (owner_ != self) {
      // Kept reachable on purpose (never cleaned up here): the parent's UCX objects are not ours to tear down.
      for (auto& context : contexts_) {
        if (!context) continue;
        abandoned_.push_back(std::move(context));
        if (forkedFrom_ == 0) forkedFrom_ = owner_;
      }
      contexts_.clear();
      owner_ = self;
    }
    if (forkedFrom_ == 0) return ncclSuccess;
    NCCL_NET_WARN(
        "%s: this process (pid %d) was forked from pid %d while that process held a UCP context (an open comm, a "
        "closed one still lingering, or a registration mapped on one); UCX does not carry across fork (the child "
        "inherits the count of UCX's async thread but not the thread), so comms here would connect and then never "
        "move a byte. Fork before the parent's first comm or after its last one is gone (a closed comm lingers until "
        "its peer closes, NNS_UCX_LINGER_MS at most; NNS_UCX_LINGER_MS=0 ends it at close)",
        call, static_cast<int>(self), static_cast<int>(forkedFrom_));
    return ncclInvalidUsage;
  }

  std::mutex mutex_;
  pid_t owner_ = getpid();
  pid_t forkedFrom_ = 0;  // the process whose live contexts this one inherited, if any
  std::vector<std::unique_ptr<DeviceContext>> contexts_;
  std::vector<std::unique_ptr<DeviceContext>> abandoned_;
};

uint64_t randomId() {
  static std::mutex mutex;
  static std::mt19937_64 generator{std::random_device{}() ^ (static_cast<uint64_t>(getpid()) << 32)};
  std::lock_guard<std::mutex> lock(mutex);
  uint64_t id = 0;
  while (id == 0) id = generator();
  return id;
}

// ---- handle and side-channel messages
// ------------------------------------------------------------------------------

// HandlePayload, Hello and Reply: ucx_wire.hpp.

// ---- comms, workers, requests
// --------------------------------------------------------------------------------------

struct Comm;

struct Request;
struct MemoryHandle;
struct SubRequest {
  Request* owner = nullptr;
  void* ucx = nullptr;             // the UCP request while in flight
  MemoryHandle* memory = nullptr;  // the registration whose memh UCX was given: held until the request is released
  bool done = false;
  ucs_status_t status = UCS_OK;
  size_t bytes = 0;
  size_t capacity = 0;
};

struct Request {
  static constexpr uint32_t kLiveMagic = 0x55435852u;  // "UCXR"
  uint32_t magic = kLiveMagic;
  Comm* comm = nullptr;
  bool isSend = false;
  int count = 0;
  SubRequest subs[kMaxRecvs];
  ~Request() { magic = 0; }
};

// What regMr hands out. A send or receive given its memh holds a reference until the request goes back to the pool, so
// a deregMr while one is in flight (NCCL's teardown after an abort deregisters before it closes the comm) leaves the
// unmapping to the last of them: UCX reads the memh when a rendezvous's data arrives, and found it unmapped.
struct MemoryHandle {
  void* base;
  size_t size;
  ucp_mem_h memh;                  // NULL when registration does not pay off for the device (tcp, shared memory)
  DeviceContext* context;          // retained while memh is mapped on it
  std::atomic<int> references{1};  // the registration's own, until deregMr, and one per request using memh
};

// Drops one reference; the last unmaps the region and frees the handle. Returns how the unmap went (UCS_OK when
// nothing was unmapped).
ucs_status_t unreference(MemoryHandle* memory) {
  if (memory->references.fetch_sub(1, std::memory_order_acq_rel) != 1) return UCS_OK;
  ucs_status_t status = UCS_OK;
  if (memory->memh != nullptr) {
    status = ucp_mem_unmap(memory->context->handle, memory->memh);
    if (status != UCS_OK) NCCL_NET_WARN("deregMr: ucp_mem_unmap: %s", ucs_status_string(status));
    ContextTable::get().release(memory->context);
  }
  delete memory;
  return status;
}

// A send or receive comm: its own worker and one endpoint to the peer's worker in peer error-handling mode. A receive
// comm's worker is progressed only by the thread that drives the comm, so its data path takes no lock; a send comm's
// is also progressed by the keeper thread while the comm is idle (see Keeper), so its calls hold callLock.
struct Comm {
  bool isSend;
  int dev;
  DeviceContext* context = nullptr;
  ucp_worker_h worker = nullptr;
  ucp_ep_h ep = nullptr;
  std::vector<char> address;  // this worker's address
  uint32_t connectionTag = 0;
  std::atomic<int> failure{UCS_OK};  // the first error UCX reported on the endpoint
  std::string peer;                  // side-channel address of the peer, for messages
  int sideFd = -1;                   // the side channel, kept open as a process-death detector (see checkSideChannel)
  bool peerClosed = false;           // the peer said goodbye on the side channel: its end closed in order
  bool peerReleased = false;         // then its side channel ended too: its worker is destroyed
  // A receive comm on which a grouped receive failed and its other receives were cancelled: their messages still
  // come, and would wait in the worker for the next receives of their tags, which would take them as their own. So
  // irecv takes no more (NCCL aborts on the first error; a host that goes on gets an error, not another's bytes).
  bool groupAbandoned = false;
  Clock::time_point peerClosedAt{};  // the goodbye, the last progress since, or the release: the close timeout's start
  std::atomic<bool> closed{false};   // NCCL closed it: it lingers (see Keeper), and a failure is no news
  Clock::time_point lingerUntil{};
  Clock::time_point nextSideCheck{};
  sdk::RequestPool<Request, kRequestsPerComm> requests;

  // A send comm open and registered with the Keeper: its worker is progressed by two threads, the owner's (isend,
  // test) and the keeper's (while the owner is idle), one at a time under callLock.
  std::mutex callLock;
  std::atomic<uint64_t> calls{0};  // the owner's isend and test calls: the keeper leaves a comm alone while they count
  uint64_t sends = 0;              // sends posted (under callLock)
  // A send was posted that the keeper has not seen handed to the kernel: set by the owner under callLock, cleared by
  // the keeper under callLock (or by close, under the keeper's lock, when nothing else runs on the comm).
  std::atomic<bool> owed{false};
  // The keeper's own, under its lock:
  std::atomic<bool> kept{false};  // registered as an open send comm (cleared by forget, or ~Keeper at exit)
  uint64_t seenCalls = 0;         // calls at the keeper's last look
  uint64_t flushedSends = 0;      // sends when flushRequest was posted
  ucs_status_ptr_t flushRequest = nullptr;

  explicit Comm(bool send, int device) : isSend(send), dev(device) {}
  uint64_t tagFor(int tag) const { return (static_cast<uint64_t>(connectionTag) << 32) | static_cast<uint32_t>(tag); }
};

// Returns a request whose subs UCX is done with to the pool, with the memory references its subs held.
void releaseRequest(Comm* comm, Request* req) {
  for (int i = 0; i < req->count; ++i)
    if (req->subs[i].memory != nullptr) (void)unreference(req->subs[i].memory);
  comm->requests.release(req);
}

void markFailed(Comm* comm, ucs_status_t status, const char* who) {
  int expected = UCS_OK;
  // A comm NCCL closed that lingers for its peer fails as a matter of course when the peer goes: not worth a WARN.
  if (comm->failure.compare_exchange_strong(expected, status) && !comm->closed.load())
    NCCL_NET_WARN("%s comm to %s: %s the peer failed: %s", comm->isSend ? "send" : "receive", comm->peer.c_str(), who,
                  ucs_status_string(status));
}

void onEndpointError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  markFailed(static_cast<Comm*>(arg), status, "UCX reported");
}

constexpr char kGoodbye = 'B';

// The second fault detector. UCX's peer error handling reports a dead peer per endpoint, but UCX 1.13's shared-memory
// keepalive does not fire for a sender whose receiver died while a rendezvous send waits on it (tests/ucx
// ucx_fault_test showed no error in 10 s). The side channel stays open for the comm's life: a comm closed in order
// writes a goodbye byte first (only when nothing of its own was pending), so end-of-stream without it means the peer
// process is gone (the kernel closed its socket) or closed mid-transfer. A dead host rather than a dead process is
// found by TCP keepalive on the socket (NNS_UCX_DEAD_PEER_MS). After a goodbye nothing more will come from the peer,
// and it will take nothing more: a request still incomplete NNS_UCX_CLOSE_TIMEOUT_MS after the goodbye, or after the
// last progress since (time for what the peer flushed before its goodbye to be progressed here), fails; a live peer
// that closed is otherwise invisible to UCX's shared-memory keepalive. The peer's comm may linger after its goodbye
// (see Keeper); its side channel ends once its worker is destroyed (releaseComm destroys the worker first). From then
// on nothing more can arrive, and progress no longer postpones the failure: this worker's own keepalive finds events
// too, and over shared memory, with NNS_UCX_CLOSE_TIMEOUT_MS at or above the keepalive interval, they held a receive
// posted after the peer's goodbye for ever. Checked from test() while a request is incomplete, at most every 50 ms.
void checkSideChannel(Comm* comm) {
  if (comm->sideFd < 0 || comm->failure.load() != UCS_OK) return;
  auto now = Clock::now();
  if (comm->peerClosed && now - comm->peerClosedAt >= std::chrono::milliseconds(Config::get().closeTimeoutMs)) {
    markFailed(comm, UCS_ERR_CONNECTION_RESET,
               "a request is still pending after the peer closed its comm (NNS_UCX_CLOSE_TIMEOUT_MS ago):");
    return;
  }
  if (comm->peerReleased || now < comm->nextSideCheck) return;
  comm->nextSideCheck = now + std::chrono::milliseconds(50);
  char byte = 0;
  ssize_t n = recv(comm->sideFd, &byte, 1, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (comm->peerClosed && n <= 0) {
    comm->peerReleased = true;
    comm->peerClosedAt = now;
    return;
  }
  if (n == 1 && byte == kGoodbye) {
    comm->peerClosed = true;
    comm->peerClosedAt = now;
    return;
  }
  if (n < 0) {
    // Named as the socket saw it: ETIMEDOUT is the keepalive finding a dead host or link, not a reset.
    const int error = errno;
    const std::string who = std::string("the side channel failed (") + std::strerror(error) +
                            (error == ETIMEDOUT ? ": no answer within NNS_UCX_DEAD_PEER_MS" : "") + "):";
    markFailed(comm, error == ETIMEDOUT ? UCS_ERR_ENDPOINT_TIMEOUT : UCS_ERR_CONNECTION_RESET, who.c_str());
    return;
  }
  markFailed(comm, UCS_ERR_CONNECTION_RESET,
             n == 0 ? "the side channel closed without a goodbye:" : "the side channel carried a stray byte:");
}

ncclResult_t createWorker(int dev, Comm* comm) {
  NCCL_NET_CHECK(ContextTable::get().acquire(dev, &comm->context));
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  params.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // NCCL may connect from one thread and progress from another
  ucs_status_t status = ucp_worker_create(comm->context->handle, &params, &comm->worker);
  if (status != UCS_OK) {
    NCCL_NET_WARN("ucp_worker_create: %s", ucs_status_string(status));
    ContextTable::get().release(comm->context);
    comm->context = nullptr;
    return ncclSystemError;
  }
  ucp_address_t* address = nullptr;
  size_t length = 0;
  status = ucp_worker_get_address(comm->worker, &address, &length);
  if (status != UCS_OK || length > kMaxWorkerAddressBytes) {
    NCCL_NET_WARN("ucp_worker_get_address: %s (%zu bytes)", ucs_status_string(status), length);
    if (status == UCS_OK) ucp_worker_release_address(comm->worker, address);
    return ncclSystemError;
  }
  const char* bytes = reinterpret_cast<const char*>(address);
  comm->address.assign(bytes, bytes + length);
  ucp_worker_release_address(comm->worker, address);
  return ncclSuccess;
}

ncclResult_t createEndpoint(Comm* comm, const std::vector<char>& remoteAddress) {
  ucp_ep_params_t params{};
  params.field_mask =
      UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(remoteAddress.data());
  // A dead peer fails the endpoint's requests instead of hanging them. NNS_UCX_PEER_ERRORS=0 trades that for speed
  // where UCX's peer mode is slow (its shared-memory transports), and a dead peer may then hang NCCL.
  params.err_mode = Config::get().peerErrors ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  params.err_handler.cb = onEndpointError;
  params.err_handler.arg = comm;
  ucs_status_t status = ucp_ep_create(comm->worker, &params, &comm->ep);
  if (status != UCS_OK) {
    NCCL_NET_WARN("ucp_ep_create to %s: %s", comm->peer.c_str(), ucs_status_string(status));
    return ncclSystemError;
  }
  return ncclSuccess;
}

// Drains the worker's pending events (bounded, so one busy comm cannot trap the caller).
void progress(Comm* comm) {
  for (int i = 0; i < 64 && ucp_worker_progress(comm->worker) != 0; ++i) {
  }
}

// Waits for a UCP request (ep close) with a deadline; frees it either way. Returns how it ended: UCS_OK, an error,
// or UCS_INPROGRESS when the deadline came first.
ucs_status_t waitRequest(Comm* comm, void* request, Clock::time_point deadline) {
  if (request == nullptr) return UCS_OK;
  if (UCS_PTR_IS_ERR(request)) return UCS_PTR_STATUS(request);
  ucs_status_t status = ucp_request_check_status(request);
  while (status == UCS_INPROGRESS && Clock::now() < deadline) {
    progress(comm);
    status = ucp_request_check_status(request);
  }
  ucp_request_free(request);
  return status;
}

// Closes the comm's endpoint: forced (nothing more will be delivered: requests were pending, or the peer failed or is
// gone) or flushing, waiting at most until `deadline`. False when the close did not finish in order.
bool closeEndpoint(Comm* comm, bool force, Clock::time_point deadline) {
  if (comm->ep == nullptr) return true;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  // UCX defines a forced close only for endpoints in peer error-handling mode: without it (NNS_UCX_PEER_ERRORS=0)
  // the close flushes, bounded by the deadline.
  param.flags = force && Config::get().peerErrors ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  bool ok = waitRequest(comm, ucp_ep_close_nbx(comm->ep, &param), deadline) == UCS_OK;
  comm->ep = nullptr;
  return ok;
}

// The end of every comm: waits (until `deadline`) for cancelled receives and failed sends to run their callbacks,
// destroys the worker while the comm's request slots still exist (a late UCX callback never writes to freed memory),
// gives the context back, writes the goodbye when `goodbye`, closes the side channel and deletes the comm.
void releaseComm(Comm* comm, bool goodbye, Clock::time_point deadline) {
  if (comm->worker != nullptr) {
    auto inFlight = [&] {
      bool any = false;
      comm->requests.forEachLive([&](Request& request) {
        for (int i = 0; i < request.count; ++i) any = any || request.subs[i].ucx != nullptr;
      });
      return any;
    };
    while (inFlight() && Clock::now() < deadline) progress(comm);
    ucp_worker_destroy(comm->worker);
    comm->worker = nullptr;
    // No UCX request of the comm exists now: the memory its requests still held can be unmapped.
    comm->requests.forEachLive([](Request& request) {
      for (int i = 0; i < request.count; ++i) {
        if (request.subs[i].memory != nullptr) (void)unreference(request.subs[i].memory);
        request.subs[i].memory = nullptr;
      }
    });
    ContextTable::get().release(comm->context);
  }
  if (comm->sideFd >= 0) {
    // Best effort: a full socket buffer or a dead peer only means the peer sees a failure instead of a goodbye.
    if (goodbye) (void)!send(comm->sideFd, &kGoodbye, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    close(comm->sideFd);
  }
  delete comm;
}

// True when the peer's comm is closed or gone, as far as the side channel and UCX tell: its goodbye (read now, or
// earlier by checkSideChannel), end-of-stream, a socket error, or a failure UCX reported. Never blocks.
bool peerGone(Comm* comm) {
  if (comm->peerClosed || comm->failure.load() != UCS_OK || comm->sideFd < 0) return true;
  char byte = 0;
  ssize_t n = recv(comm->sideFd, &byte, 1, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
  if (n == 1 && byte == kGoodbye) comm->peerClosed = true;
  return true;
}

// The keeper: one thread that moves the bytes of comms NCCL is not calling. Over tcp a send is complete when UCX has
// its bytes, in its own buffer or the socket's, not when the peer has them: what the socket had no room for stays in
// UCX's buffer, and only progress of the sender's worker writes it out. NCCL calls a comm only while it has requests
// pending on it, so two kinds of comms would strand bytes without this thread:
//
// Open send comms that went idle. A send reported done can still be partly in UCX's buffer when NCCL stops calling the
// comm (its peer was slower than it). Every connected send comm is registered here; a send marks it owed. Once the
// owner has made no call on it for a whole tick (1 ms), the thread takes its callLock (only if free: an owner that
// calls again waits at most for one flush post and one bounded progress, up to 64 polls of the worker) and progresses
// the worker, tick after tick, while a send is in flight (its protocol may need this worker: a rendezvous sends its
// data when the receiver asks), then posts an endpoint flush and goes on until the flush completes with no send posted
// since: then all that was sent is in the kernel, which delivers it by itself. Marking a comm owed takes no lock but
// the comm's own; only the first comm owed while none was takes the keeper's lock, to wake the thread. The flush never
// holds anyone up (unlike a flush inside test(), which made sends wait for receivers that were not being progressed). A
// comm with nothing owed costs nothing, and the thread sleeps while no comm is owed or lingering.
//
// Comms closed in order. A comm that destroyed its worker at once took with it what the peer had not yet progressed
// (the peer's endpoint then fails, "Connection refused" or "Endpoint timeout", and so do its receives). So a comm
// closed in order (nothing pending, no failure) whose peer is still open writes its goodbye at once, returns, and keeps
// its worker and endpoint here, progressed every tick, until the peer's side channel shows that the peer closed too
// (its goodbye, or end-of-stream) or failed, or NNS_UCX_LINGER_MS passed; only then are the endpoint (forced: nothing
// is left to deliver) and the worker destroyed. The peer closes its comm only once it is done with it (NCCL closes a
// receive comm after its last receive completed), so what was sent is delivered if the peer receives it within
// NNS_UCX_LINGER_MS. The second of two comms to close sees the first's goodbye and does not linger, so the first is
// released as soon as the second closes. Close never waits for the peer: NCCL may close every send comm before any
// receive comm, on both ranks, from one thread each.
//
// Why a thread rather than progress from the plugin's other calls: delivery must not depend on what the process does
// next (it may call the plugin no more, or wait in a barrier for its peer). The thread starts with the first comm
// registered. A process that exits waits for the lingering comms (the destructor joins the thread, which ends within
// NNS_UCX_LINGER_MS + NNS_UCX_CLOSE_TIMEOUT_MS), not for open ones; one that forks leaves all of them to the parent, as
// it does the UCP contexts (the keeper's locks are held across fork by pthread_atfork).
class Keeper {
 public:
  static Keeper& get() {
    static Keeper keeper;
    return keeper;
  }

  // Registers a send comm just connected. Without the thread (it could not start) nothing is registered, and an idle
  // comm's bytes wait for its next call, as before the keeper existed.
  void open(Comm* comm) {
    if (gone_.load()) return;  // connected during the process's exit: left unregistered
    std::lock_guard<std::mutex> lock(mutex_);
    adoptAfterFork();
    if (!start()) return;
    comm->kept = true;
    open_.push_back(comm);
  }

  // A send posted on a registered comm (the caller holds its callLock): the keeper looks at it once it is idle.
  void owe(Comm* comm) {
    if (comm->owed.load(std::memory_order_relaxed) || !comm->kept.load()) return;
    comm->owed.store(true, std::memory_order_relaxed);
    if (owed_.fetch_add(1, std::memory_order_relaxed) != 0) return;  // the thread is awake already
    // The thread may be asleep: wake it under its lock, so the wake cannot fall between its check and its wait.
    std::lock_guard<std::mutex> lock(mutex_);
    if (gone_.load()) return;  // ~Keeper ran between the check above and this lock: its wake_ is gone
    wake_->notify_one();
  }

  // Unregisters a comm being closed (one never registered is left alone), before close touches its worker. Once this
  // returns the thread no longer touches the comm: it works on open comms only while it holds mutex_.
  void forget(Comm* comm) {
    if (!comm->kept.load()) return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (!comm->kept.load()) return;  // ~Keeper unregistered it between the check above and this lock
    comm->kept = false;
    for (size_t i = 0; i < open_.size(); ++i) {
      if (open_[i] != comm) continue;
      open_.erase(open_.begin() + static_cast<long>(i));
      if (comm->owed.exchange(false)) owed_.fetch_sub(1, std::memory_order_relaxed);
      break;
    }
    // Freed, not waited for: UCX releases it when it completes (the close that follows completes or cancels it).
    if (comm->flushRequest != nullptr) ucp_request_free(comm->flushRequest);
    comm->flushRequest = nullptr;
  }

  // Takes a comm closed in order, its goodbye already written.
  void linger(Comm* comm) {
    if (gone_.load()) {  // closed during the process's exit, after the keeper: released now, as without a thread
      finish(comm, true);
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    adoptAfterFork();
    if (start()) {
      lingering_.push_back(comm);
      wake_->notify_one();
      return;
    }
    // No thread: release the comm now, as before lingering existed.
    std::lock_guard<std::mutex> tearing(teardown_);
    finish(comm, false);
  }

  // The thread, once started, waits (without polling) for comms until this destructor: a thread that ended by itself
  // and was never joined is a leak to a process that leaves by _exit (its forked children do), as TSan says.
  ~Keeper() {
    std::unique_lock<std::mutex> lock(mutex_);
    adoptAfterFork();
    bool started = started_;
    started_ = false;
    stopping_ = true;
    // A thread still inside a call on an open comm while static destructors run (the process exits under it) must
    // not reach this object once it is gone: its send comms are unregistered (as forget() does, but for their flush
    // requests, which such a thread may be progressing: UCX frees them with the process), so owe() and forget() leave
    // them alone and the thread, still finishing lingering comms, no longer progresses them; open() and linger() see
    // gone_, which outlives the object.
    for (Comm* comm : open_) {
      comm->kept = false;
      comm->owed = false;
    }
    open_.clear();
    owed_.store(0, std::memory_order_relaxed);
    gone_ = true;
    wake_->notify_one();
    lock.unlock();
    if (started) pthread_join(thread_, nullptr);  // bounded: every lingering comm ends by its linger deadline
    instance_ = nullptr;
  }

  Keeper(const Keeper&) = delete;
  Keeper& operator=(const Keeper&) = delete;

 private:
  Keeper() {
    // Built after what it uses, so destroyed (joined) before them at exit or unload.
    (void)Config::get();
    (void)ContextTable::get();
    instance_ = this;
    pthread_atfork(&Keeper::beforeFork, &Keeper::afterFork, &Keeper::afterForkInChild);
  }

  // Under mutex_: the thread, started on first use. False (after one warning) when it cannot be started.
  bool start() {
    if (started_) return true;
    if (stopping_) return false;
    started_ = pthread_create(&thread_, nullptr, &Keeper::main, this) == 0;
    if (!started_ && !warned_) {
      warned_ = true;
      NCCL_NET_WARN(
          "cannot start the thread that progresses idle and closed comms; closed comms close at once, and "
          "idle send comms move their last bytes only when called again");
    }
    return started_;
  }

  // Both locks: the keeper's, and the one the thread holds while it tears comms down (UCX calls, and the context
  // table's lock in releaseComm). A child forked in the middle of a teardown inherited the table's lock held by a
  // thread it does not have, and its first connect or accept waited for it for ever (and UCX's state half torn down).
  static void beforeFork() {
    if (instance_ == nullptr) return;
    instance_->mutex_.lock();
    instance_->teardown_.lock();
  }
  static void afterFork() {
    if (instance_ == nullptr) return;
    instance_->teardown_.unlock();
    instance_->mutex_.unlock();
  }
  // The child's copy of the condition variable counts the parent's thread, waiting in it, as a waiter that will never
  // leave: destroying it (the child's exit) waited for ever. The child gets a fresh one; the copy is left alone.
  static void afterForkInChild() {
    if (instance_ == nullptr) return;
    // Kept reachable (a leak checker at the child's exit counts them as held) and never destroyed.
    static auto* parentsWakes = new std::vector<std::condition_variable*>;
    parentsWakes->push_back(instance_->wake_.release());
    instance_->wake_ = std::make_unique<std::condition_variable>();
    instance_->teardown_.unlock();
    instance_->mutex_.unlock();
  }

  // In a forked child, the comms and the thread are the parent's: kept reachable, never touched.
  void adoptAfterFork() {
    if (owner_ == getpid()) return;
    for (Comm* comm : open_) comm->kept = false;  // the child's copies: owe() and forget() leave them alone
    abandoned_.insert(abandoned_.end(), lingering_.begin(), lingering_.end());
    abandoned_.insert(abandoned_.end(), open_.begin(), open_.end());
    // A fork between the thread's taking comms off the list and its finishing them (or after, before it cleared
    // ending_): the parent's thread tears them down (or did); the child's own thread must not finish them again.
    for (const auto& entry : ending_) abandoned_.push_back(entry.first);
    lingering_.clear();
    open_.clear();
    ending_.clear();
    owed_.store(0, std::memory_order_relaxed);
    started_ = false;  // the parent's thread does not exist here
    owner_ = getpid();
  }

  static void* main(void* self) {
    static_cast<Keeper*>(self)->run();
    return nullptr;
  }

  void run() {
    std::vector<std::pair<Comm*, bool>>& ending = ending_;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_->wait(lock,
                  [this] { return !lingering_.empty() || owed_.load(std::memory_order_relaxed) > 0 || stopping_; });
      if (stopping_ && lingering_.empty()) return;  // an exiting process waits for no open comm
      pushIdleSends();
      auto now = Clock::now();
      for (size_t i = 0; i < lingering_.size();) {
        Comm* comm = lingering_[i];
        progress(comm);
        bool gone = peerGone(comm);
        if (!gone && now < comm->lingerUntil) {
          ++i;
          continue;
        }
        ending.emplace_back(comm, gone);
        lingering_.erase(lingering_.begin() + static_cast<long>(i));
      }
      lock.unlock();  // ending comms are this thread's alone now; close() need not wait for their teardown
      {
        std::lock_guard<std::mutex> tearing(teardown_);  // a fork waits for it (beforeFork)
        for (const auto& [comm, gone] : ending) finish(comm, gone);
      }
      if (ending.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ending.clear();
      lock.lock();
    }
  }

  // Under mutex_: every owed send comm its owner left alone for a whole tick is progressed under its callLock (see
  // flushed()) and stops being owed once all it was given is out of UCX's hands.
  void pushIdleSends() {
    for (Comm* comm : open_) {
      uint64_t calls = comm->calls.load(std::memory_order_relaxed);
      if (calls != comm->seenCalls) {  // called since the last tick: its owner progresses it
        comm->seenCalls = calls;
        continue;
      }
      if (!comm->owed.load(std::memory_order_relaxed) || !comm->callLock.try_lock()) continue;
      if (flushed(comm)) {
        comm->owed.store(false, std::memory_order_relaxed);
        owed_.fetch_sub(1, std::memory_order_relaxed);
      }
      comm->callLock.unlock();
    }
  }

  // Under both locks: true once every send posted on the comm is complete and out of UCX's buffers (or the comm
  // failed, and test() reports that). A send UCX has not completed may need this worker for the rest of its protocol
  // (a rendezvous answering the receiver's request for the data, over sm without CMA: 64 KiB waited for ever while
  // the sender's owner tested nothing), so the worker is progressed until none is left, then flushed.
  static bool flushed(Comm* comm) {
    if (comm->ep == nullptr || comm->failure.load() != UCS_OK) {
      if (comm->flushRequest != nullptr) ucp_request_free(comm->flushRequest);
      comm->flushRequest = nullptr;
      return true;
    }
    progress(comm);
    if (comm->flushRequest == nullptr) {
      bool inFlight = false;
      comm->requests.forEachLive([&](Request& request) { inFlight = inFlight || request.subs[0].ucx != nullptr; });
      if (inFlight) return false;
      ucp_request_param_t param{};
      ucs_status_ptr_t request = ucp_ep_flush_nbx(comm->ep, &param);
      comm->flushedSends = comm->sends;
      if (request == nullptr || UCS_PTR_IS_ERR(request)) return true;  // done at once, or failed (test() reports it)
      comm->flushRequest = request;
    }
    if (ucp_request_check_status(comm->flushRequest) == UCS_INPROGRESS) return false;
    ucp_request_free(comm->flushRequest);
    comm->flushRequest = nullptr;
    return comm->flushedSends == comm->sends;  // else sends came since: the next idle tick looks again
  }

  static void finish(Comm* comm, bool peerGone) {
    if (!peerGone)
      NCCL_NET_INFO(NCCL_NET, "%s comm to %s: the peer did not close within NNS_UCX_LINGER_MS (%d ms); closing",
                    comm->isSend ? "send" : "receive", comm->peer.c_str(), Config::get().lingerMs);
    auto deadline = Clock::now() + std::chrono::milliseconds(Config::get().closeTimeoutMs);
    closeEndpoint(comm, true, deadline);
    releaseComm(comm, false, deadline);  // the goodbye went out at close
  }

  static inline Keeper* instance_ = nullptr;
  static inline std::atomic<bool> gone_{false};  // set by ~Keeper, under mutex_
  // Static, like gone_, so that a thread that saw a comm registered just before ~Keeper (the process exiting under it)
  // locks a live mutex and then sees the comm unregistered. std::mutex is constant-initialised and, with glibc,
  // trivially destroyed: it outlives every other static.
  static inline std::mutex mutex_;
  std::mutex teardown_;  // held while the thread closes comms (after mutex_ where both are taken)
  std::vector<Comm*> lingering_;
  std::vector<Comm*> open_;                    // send comms connected and not yet closed
  static inline std::atomic<size_t> owed_{0};  // how many of them are owed (static for owe() after ~Keeper)
  std::vector<Comm*> abandoned_;
  // The thread's comms being closed: comm, and whether its peer is gone (else its linger ran out). A member, not the
  // thread's local: a forked child has no such thread, and a leak checker at its exit took the buffer, reachable only
  // from the parent's thread's stack, for a leak.
  std::vector<std::pair<Comm*, bool>> ending_;
  // A comm was owed or added, or the destructor wants the thread to end. On the heap: a forked child replaces it.
  std::unique_ptr<std::condition_variable> wake_ = std::make_unique<std::condition_variable>();
  pthread_t thread_{};
  bool started_ = false;   // thread_ was created and not joined
  bool stopping_ = false;  // the destructor: end once no comm lingers
  bool warned_ = false;    // the thread could not be started, and a warning said so
  pid_t owner_ = getpid();
};

// The owner's side of callLock: held across an isend or test on a send comm, and counted for the keeper's idle test.
// A receive comm is never touched by the keeper and takes no lock.
class OwnerCall {
 public:
  explicit OwnerCall(Comm* comm) : comm_(comm->isSend ? comm : nullptr) {
    if (comm_ == nullptr) return;
    comm_->callLock.lock();
    comm_->calls.store(comm_->calls.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  ~OwnerCall() {
    if (comm_ != nullptr) comm_->callLock.unlock();
  }
  OwnerCall(const OwnerCall&) = delete;
  OwnerCall& operator=(const OwnerCall&) = delete;

 private:
  Comm* comm_;
};

// Tears a comm down without hanging: cancel what can be cancelled, close the endpoint (flushing when nothing is
// pending, forcing otherwise or when the flush outlives NNS_UCX_CLOSE_TIMEOUT_MS), then release it. A comm closed in
// order whose peer is still open lingers instead (see Keeper), and close returns at once.
void destroyComm(Comm* comm) {
  Keeper::get().forget(comm);
  bool clean = true;
  auto deadline = Clock::now() + std::chrono::milliseconds(Config::get().closeTimeoutMs);
  if (comm->worker != nullptr) {
    bool pending = false;
    comm->requests.forEachLive([&](Request& request) {
      for (int i = 0; i < request.count; ++i) {
        if (request.subs[i].ucx == nullptr) continue;
        pending = true;
        if (!request.isSend) ucp_request_cancel(comm->worker, request.subs[i].ucx);
      }
    });
    clean = !pending && comm->failure.load() == UCS_OK;
    if (clean && comm->ep != nullptr && Config::get().lingerMs > 0 && !peerGone(comm)) {
      comm->closed = true;
      comm->lingerUntil = Clock::now() + std::chrono::milliseconds(Config::get().lingerMs);
      (void)!send(comm->sideFd, &kGoodbye, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
      Keeper::get().linger(comm);
      return;
    }
    // The peer closed already (or lingering is off): a flush that did not finish (the peer did not progress in time,
    // or failed) may have dropped what UCX still held of completed sends: then the close is not in order, and the
    // peer gets no goodbye (its receives fail instead of waiting for data that will not come).
    if (!closeEndpoint(comm, !clean, deadline)) clean = false;
  }
  // The goodbye says the close was in order; a close with transfers pending (or after a failure) sends none, so the
  // peer's pending requests fail at once.
  releaseComm(comm, clean, deadline);
}

void onSendDone(void* ucx, ucs_status_t status, void* user) {
  auto* sub = static_cast<SubRequest*>(user);
  sub->status = status;
  sub->done = true;
  sub->ucx = nullptr;
  ucp_request_free(ucx);
}

void onRecvDone(void* ucx, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user) {
  auto* sub = static_cast<SubRequest*>(user);
  sub->status = status;
  // On truncation UCX still reports the length the sender sent (seen over tcp and sm, eager and rendezvous), which
  // test() names in its warning; the buffer's contents are not reported as received either way.
  if ((status == UCS_OK || status == UCS_ERR_MESSAGE_TRUNCATED) && info != nullptr) sub->bytes = info->length;
  sub->done = true;
  sub->ucx = nullptr;
  ucp_request_free(ucx);
}

// Cancels the first `posted` subs of a receive the caller never got (a grouped irecv that failed part-way) or no longer
// waits for (test() reported one of its subs failed) and returns it to the pool once no UCX callback can reach it. A
// sub that already matched a message cannot be cancelled and completes on its own, which NNS_UCX_CLOSE_TIMEOUT_MS
// bounds; one still in flight after that keeps the request live, and destroyComm deals with it (cancelling and waiting
// again before the worker goes).
void abandonReceives(Comm* comm, Request* req, int posted) {
  req->count = posted;
  for (int i = 0; i < posted; ++i)
    if (req->subs[i].ucx != nullptr) ucp_request_cancel(comm->worker, req->subs[i].ucx);
  auto inFlight = [&] {
    for (int i = 0; i < posted; ++i)
      if (req->subs[i].ucx != nullptr) return true;
    return false;
  };
  auto deadline = Clock::now() + std::chrono::milliseconds(Config::get().closeTimeoutMs);
  while (inFlight() && Clock::now() < deadline) progress(comm);
  if (!inFlight()) releaseRequest(comm, req);
}

ncclResult_t commFailed(Comm* comm, const char* what) {
  NCCL_NET_WARN("%s on the %s comm to %s: the connection failed earlier (%s)", what, comm->isSend ? "send" : "receive",
                comm->peer.c_str(), ucs_status_string(static_cast<ucs_status_t>(comm->failure.load())));
  return ncclRemoteError;
}

// Gives a send or receive the region's memh when it can use it, and holds the region for it until the request is
// released (releaseRequest, or releaseComm once the worker is gone).
void useMemoryHandle(const Comm* comm, void* mhandle, const void* data, size_t size, SubRequest* sub,
                     ucp_request_param_t* param) {
  auto* memory = static_cast<MemoryHandle*>(mhandle);
  if (memory == nullptr || memory->memh == nullptr) return;
  // Registered through another device's comm (another UCP context): its memh means nothing here; let UCX register.
  if (memory->context != comm->context) return;
  auto begin = static_cast<const char*>(data);
  auto base = static_cast<const char*>(memory->base);
  if (begin < base || begin + size > base + memory->size) return;  // outside the region: let UCX register
  memory->references.fetch_add(1, std::memory_order_relaxed);
  sub->memory = memory;
  param->op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
  param->memh = memory->memh;
}

// ---- connection establishment state
// --------------------------------------------------------------------------------

void closeIfOpen(int fd) {
  if (fd >= 0) close(fd);
}

struct PendingConnect {
  enum class Phase { kConnecting, kSending, kReceiving } phase = Phase::kConnecting;
  HandlePayload target{};
  Clock::time_point deadline{};
  sdk::TcpConnector connector;
  int fd = -1;
  std::vector<char> outgoing;  // Hello + our worker address
  size_t sent = 0;
  Reply reply{};
  size_t replyReceived = 0;
  std::vector<char> remoteAddress;
  size_t addressReceived = 0;
  Comm* comm = nullptr;

  ~PendingConnect() {
    closeIfOpen(fd);
    if (comm != nullptr) destroyComm(comm);
  }
};
using ConnectStage = sdk::ConnectStage<PendingConnect>;

// An accepted side-channel connection on its way to becoming a receive comm.
struct Incoming {
  int fd = -1;
  sdk::SocketAddress peer{};
  Clock::time_point since{};
  Hello hello{};
  size_t helloReceived = 0;
  std::vector<char> remoteAddress;
  size_t addressReceived = 0;
  Comm* comm = nullptr;        // created once the sender's address is in
  std::vector<char> outgoing;  // Reply + our worker address
  size_t sent = 0;
};

struct ListenComm {
  int dev = 0;
  uint64_t listenId = 0;
  int fd = -1;
  sdk::SocketAddress address{};
  std::vector<Incoming> incoming;
};

// Reads into `buffer` until `size` bytes are in; kWouldBlock while partial.
sdk::IoStatus readSome(int fd, void* buffer, size_t size, size_t* offset, std::string* error) {
  return sdk::recvSome(fd, buffer, size, offset, error);
}
sdk::IoStatus writeSome(int fd, const void* buffer, size_t size, size_t* offset, std::string* error) {
  return sdk::sendSome(fd, buffer, size, offset, error);
}
using sdk::failed;

}  // namespace

// ---- the plugin class
// ----------------------------------------------------------------------------------------------
class UcxNet {
 public:
  static constexpr const char kName[] = "nns-ucx";

  ncclResult_t init(const sdk::InitArgs& args, void** ctx) {
    sdk::setLogPrefix("NET/nns-ucx");
    DeviceTable::get().discoverOnce();
    const Config& config = Config::get();
    NCCL_NET_INFO(NCCL_INIT | NCCL_NET, "ncclNet_v%d over UCX %s; keepalive %d ms, connect timeout %d ms",
                  args.abiVersion, ucp_get_version_string(), config.keepaliveMs, config.connectTimeoutMs);
    *ctx = nullptr;  // UCP contexts are per device and process, held by the comms (see ContextTable)
    if (DeviceTable::get().count() == 0) return ncclSystemError;
    return ncclSuccess;
  }

  ncclResult_t devices(int* ndev) {
    *ndev = DeviceTable::get().count();
    return ncclSuccess;
  }

  ncclResult_t getProperties(int dev, ncclNetProperties_v12_t* props) {
    if (!DeviceTable::get().valid(dev)) return badDevice("getProperties", dev);
    const UcxDevice& device = DeviceTable::get().device(dev);
    props->name = const_cast<char*>(device.name.c_str());
    props->pciPath = device.pciPath.empty() ? nullptr : const_cast<char*>(device.pciPath.c_str());
    props->guid = device.guid;
    // Host memory only: the UCX this was written against (Debian's) has no CUDA transports, and GPU buffers would
    // also need an iflush that proves PCIe writes landed, which this plugin does not implement.
    props->ptrSupport = NCCL_PTR_HOST;
    props->regIsGlobal = 0;
    props->forceFlush = 0;
    props->speed = device.speedMbps;
    props->port = device.port;
    props->latency = 0;
    props->maxComms = 1024;  // one UCP worker per comm: bounded by what a process can hold, not by the wire
    props->maxRecvs = kMaxRecvs;
    return ncclSuccess;
  }

  ncclResult_t listen(void* /*ctx*/, int dev, void* handle, void** listenComm) {
    if (!DeviceTable::get().valid(dev)) return badDevice("listen", dev);
    NCCL_NET_CHECK(ContextTable::get().usableHere("listen"));
    const UcxDevice& device = DeviceTable::get().device(dev);
    auto listener = std::make_unique<ListenComm>();
    listener->dev = dev;
    listener->listenId = randomId();
    std::string error;
    listener->fd = sdk::listenTcp(device.sideChannel, kListenBacklog, &listener->address, &error);
    if (listener->fd < 0) {
      NCCL_NET_WARN("listen on device %d (%s): side channel: %s", dev, device.name.c_str(), error.c_str());
      return ncclSystemError;
    }
    HandlePayload payload{};  // zeroed padding too: the handle's bytes go to the peer as they are
    payload.listenId = listener->listenId;
    payload.sideChannel = listener->address;
    NCCL_NET_CHECK(kHandleCodec.encode(payload, handle));
    NCCL_NET_INFO(NCCL_NET, "listening on device %d (%s), side channel %s", dev, device.name.c_str(),
                  listener->address.toString().c_str());
    *listenComm = listener.release();
    return ncclSuccess;
  }

  ncclResult_t connect(void* /*ctx*/, int dev, void* handle, void** sendComm,
                       ncclNetDeviceHandle_v12_t** /*sendDevComm*/) {
    *sendComm = nullptr;
    if (!DeviceTable::get().valid(dev)) return badDevice("connect", dev);
    NCCL_NET_CHECK(ContextTable::get().usableHere("connect"));
    PendingConnect* pending = ConnectStage::get(handle);
    if (pending == nullptr) {
      auto fresh = std::make_unique<PendingConnect>();
      NCCL_NET_CHECK(kHandleCodec.decode(handle, &fresh->target));
      if (!fresh->target.sideChannel.valid()) {
        NCCL_NET_WARN("connect: the handle carries no valid address");
        return ncclInternalError;
      }
      const Config& config = Config::get();
      fresh->deadline = Clock::now() + std::chrono::milliseconds(config.connectTimeoutMs);
      fresh->comm = new Comm(true, dev);
      fresh->comm->peer = fresh->target.sideChannel.toString();
      NCCL_NET_CHECK(createWorker(dev, fresh->comm));
      Hello hello{kWireMagic, kWireVersion, fresh->target.listenId, static_cast<uint32_t>(fresh->comm->address.size()),
                  0};
      fresh->outgoing.resize(sizeof(hello));
      std::memcpy(fresh->outgoing.data(), &hello, sizeof(hello));
      fresh->outgoing.insert(fresh->outgoing.end(), fresh->comm->address.begin(), fresh->comm->address.end());
      fresh->connector.start(fresh->target.sideChannel, sdk::SocketAddress{},
                             std::chrono::milliseconds(config.connectTimeoutMs),
                             std::chrono::milliseconds(config.retryIntervalMs));
      pending = ConnectStage::adopt(handle, std::move(fresh));  // the SDK frees it if the host gives this connect up
    }
    ncclResult_t result = progressConnect(pending, sendComm);
    if (result != ncclSuccess || *sendComm != nullptr) ConnectStage::take(handle);  // and delete it
    return result;
  }

  ncclResult_t accept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v12_t** /*recvDevComm*/) {
    *recvComm = nullptr;
    NCCL_NET_CHECK(ContextTable::get().usableHere("accept"));
    auto* listener = static_cast<ListenComm*>(listenComm);
    for (;;) {
      Incoming incoming;
      std::string error;
      sdk::IoStatus status = sdk::acceptTcp(listener->fd, &incoming.fd, &incoming.peer, &error);
      if (status == sdk::IoStatus::kWouldBlock) break;
      if (status != sdk::IoStatus::kDone) {
        NCCL_NET_WARN("accept on %s: %s", listener->address.toString().c_str(), error.c_str());
        return ncclSystemError;
      }
      incoming.since = Clock::now();
      listener->incoming.push_back(std::move(incoming));
    }
    const auto timeout = std::chrono::milliseconds(Config::get().connectTimeoutMs);
    for (size_t i = 0; i < listener->incoming.size();) {
      Incoming& in = listener->incoming[i];
      std::string problem;
      bool local = false;
      bool complete = progressIncoming(listener, in, &problem, &local);
      if (problem.empty() && !complete && Clock::now() - in.since > timeout)
        problem = "did not complete the address exchange within NNS_UCX_CONNECT_TIMEOUT_MS";
      if (!problem.empty()) {
        const std::string peer = in.peer.toString();
        closeIfOpen(in.fd);
        if (in.comm != nullptr) destroyComm(in.comm);
        listener->incoming.erase(listener->incoming.begin() + static_cast<long>(i));
        // A failure of this side's own (no UCP worker: descriptors or memory run out) is this accept's error: the
        // sender's connect fails as the connection drops and will not come again, so accept answering "nothing yet"
        // would keep NCCL calling it for ever. What a peer sent wrong only drops that peer.
        if (local) {
          NCCL_NET_WARN("accept: could not take the connection from %s: %s", peer.c_str(), problem.c_str());
          return ncclSystemError;
        }
        NCCL_NET_WARN("accept: dropping connection from %s: %s", peer.c_str(), problem.c_str());
        continue;
      }
      if (!complete) {
        ++i;
        continue;
      }
      in.comm->sideFd = in.fd;
      sdk::setDeadPeerTimeout(in.fd, Config::get().deadPeerMs);
      *recvComm = in.comm;
      NCCL_NET_INFO(NCCL_NET, "accepted %s on device %d", in.comm->peer.c_str(), listener->dev);
      listener->incoming.erase(listener->incoming.begin() + static_cast<long>(i));
      return ncclSuccess;  // one comm per accept call, as NCCL expects
    }
    return ncclSuccess;
  }

  ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
    if (type != NCCL_PTR_HOST) {
      NCCL_NET_WARN("regMr: memory type %d is not supported; this plugin moves host memory only", type);
      return ncclInternalError;
    }
    auto* owner = static_cast<Comm*>(comm);
    std::unique_ptr<MemoryHandle> memory(new MemoryHandle{data, size, nullptr, owner->context});
    // Over RDMA, pinning and registering once here keeps registration off the data path. tcp and shared memory
    // register nothing (they copy, or use CMA), so mapping there would only cost time and pinned pages.
    if (owner->context->mapMemory && size > 0) {
      ucp_mem_map_params_t params{};
      params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
      params.address = data;
      params.length = size;
      ucs_status_t status = ucp_mem_map(owner->context->handle, &params, &memory->memh);
      if (status != UCS_OK) {
        NCCL_NET_WARN("regMr: ucp_mem_map(%p, %zu): %s", data, size, ucs_status_string(status));
        return ncclSystemError;
      }
      ContextTable::get().retain(owner->context);
    }
    *mhandle = memory.release();
    return ncclSuccess;
  }

  // A region a send or receive still uses is unmapped when the last of them is released (see MemoryHandle).
  ncclResult_t deregMr(void* /*comm*/, void* mhandle) {
    auto* memory = static_cast<MemoryHandle*>(mhandle);
    if (memory == nullptr) return ncclSuccess;
    return unreference(memory) == UCS_OK ? ncclSuccess : ncclSystemError;
  }

  ncclResult_t isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* /*phandle*/,
                     void** request) {
    *request = nullptr;
    auto* comm = static_cast<Comm*>(sendComm);
    OwnerCall call(comm);
    if (comm->failure.load() != UCS_OK) return commFailed(comm, "isend");
    Request* req = comm->requests.acquire();
    if (req == nullptr) return ncclSuccess;  // full: NCCL retries later
    req->comm = comm;
    req->isSend = true;
    req->count = 1;
    SubRequest& sub = req->subs[0];
    sub.owner = req;
    sub.bytes = size;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = onSendDone;
    param.user_data = &sub;
    useMemoryHandle(comm, mhandle, data, size, &sub, &param);
    ucs_status_ptr_t posted = ucp_tag_send_nbx(comm->ep, data, size, comm->tagFor(tag), &param);
    if (UCS_PTR_IS_ERR(posted)) {
      releaseRequest(comm, req);
      NCCL_NET_WARN("isend of %zu bytes to %s: %s", size, comm->peer.c_str(),
                    ucs_status_string(UCS_PTR_STATUS(posted)));
      return ncclRemoteError;
    }
    if (posted == nullptr) {
      sub.done = true;  // sent at once (small eager message): the buffer is free again
    } else {
      sub.ucx = posted;
    }
    ++comm->sends;
    Keeper::get().owe(comm);  // done or not, some of it may stay in UCX's buffer after the comm goes idle
    *request = req;
    return ncclSuccess;
  }

  ncclResult_t irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** /*phandles*/,
                     void** request) {
    *request = nullptr;
    auto* comm = static_cast<Comm*>(recvComm);
    if (n < 1 || n > kMaxRecvs) {
      NCCL_NET_WARN("irecv: %d grouped receives; this plugin takes 1 to %d (maxRecvs)", n, kMaxRecvs);
      return ncclInternalError;
    }
    if (comm->groupAbandoned) {
      NCCL_NET_WARN(
          "irecv on the receive comm to %s: a grouped receive failed on it earlier and the others of its "
          "group were cancelled, so a message of theirs could land here; it takes no more receives",
          comm->peer.c_str());
      return ncclInvalidUsage;
    }
    // A failed comm still takes receives: messages the peer sent before it went away may wait in the worker's
    // unexpected queue. test() reports an error for whatever does not arrive.
    Request* req = comm->requests.acquire();
    if (req == nullptr) return ncclSuccess;
    req->comm = comm;
    req->isSend = false;
    req->count = n;
    for (int i = 0; i < n; ++i) {
      SubRequest& sub = req->subs[i];
      sub.owner = req;
      sub.capacity = sizes[i];
      ucp_request_param_t param{};
      // Always through the callback, so a receive that matched an already-arrived message is handled like any other.
      param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
      param.cb.recv = onRecvDone;
      param.user_data = &sub;
      useMemoryHandle(comm, mhandles != nullptr ? mhandles[i] : nullptr, data[i], sizes[i], &sub, &param);
      ucs_status_ptr_t posted =
          ucp_tag_recv_nbx(comm->worker, data[i], sizes[i], comm->tagFor(tags[i]), ~static_cast<ucp_tag_t>(0), &param);
      if (UCS_PTR_IS_ERR(posted)) {
        if (sub.memory != nullptr) (void)unreference(sub.memory);  // never posted: abandonReceives takes 0..i-1
        sub.memory = nullptr;
        NCCL_NET_WARN("irecv %d/%d of %zu bytes: %s", i, n, sizes[i], ucs_status_string(UCS_PTR_STATUS(posted)));
        // The caller gets no request, so nothing would ever complete or free subs 0..i-1, and a message meant for
        // this group could land in one of them: fail the comm (NCCL aborts on the error) and take the subs back.
        markFailed(comm, UCS_PTR_STATUS(posted), "irecv could not post a receive, failing the comm as if");
        comm->groupAbandoned = true;
        abandonReceives(comm, req, i);
        return ncclSystemError;
      }
      // With NO_IMM_CMPL a receive that matched an arrived message has run onRecvDone (which freed the UCP request)
      // before ucp_tag_recv_nbx returned: keep no handle to it.
      if (!sub.done) sub.ucx = posted;
    }
    *request = req;
    return ncclSuccess;
  }

  ncclResult_t test(void* request, int* done, sdk::CompletedSizes& sizes) {
    *done = 0;
    auto* req = static_cast<Request*>(request);
    if (req->magic != Request::kLiveMagic || req->comm == nullptr || !req->comm->requests.owns(req)) {
      NCCL_NET_WARN("test: %p is not a live request of this plugin (already completed?)", request);
      return ncclInternalError;
    }
    Comm* comm = req->comm;
    OwnerCall call(comm);
    auto allDone = [req] {
      for (int i = 0; i < req->count; ++i)
        if (!req->subs[i].done) return false;
      return true;
    };
    // One progress call always (the worker may owe UCX work even when this request is done), then more only while
    // they find events and the request is still incomplete: stopping at completion saves a poll per message.
    // The first sub that completed with an error, or -1.
    auto firstFailed = [req] {
      for (int i = 0; i < req->count; ++i)
        if (req->subs[i].done && req->subs[i].status != UCS_OK) return i;
      return -1;
    };
    unsigned events = ucp_worker_progress(comm->worker);
    const bool progressed = events != 0;  // the loop below ends on a poll that found nothing
    bool all = allDone();
    for (int i = 0; i < 64 && !all && events != 0 && firstFailed() < 0; ++i) {
      events = ucp_worker_progress(comm->worker);
      all = allDone();
    }
    int failedSub = firstFailed();
    if (!all && failedSub < 0) {
      // After the peer's goodbye, what it sent before it is still arriving while progress finds events: the close
      // timeout counts from the last of them, not from the goodbye (a receive whose bytes were still coming failed).
      if (comm->peerClosed && !comm->peerReleased && progressed) comm->peerClosedAt = Clock::now();
      // The endpoint failed: what has not completed never will. The request stays live; close cleans it up.
      checkSideChannel(comm);
      if (comm->failure.load() != UCS_OK) return commFailed(comm, "test");
      return ncclSuccess;
    }
    if (failedSub >= 0) {
      // One failed sub fails the whole request, reported now: waiting for the others would hide it for as long as
      // one of their messages does not come (for ever if it never does). The others are cancelled, and the request
      // goes back to the pool once their callbacks ran (at most NNS_UCX_CLOSE_TIMEOUT_MS; one still in flight then
      // keeps it live, and close deals with it), so no later message lands in a buffer NCCL no longer owns.
      const SubRequest& sub = req->subs[failedSub];
      ncclResult_t result = ncclRemoteError;
      if (sub.status == UCS_ERR_MESSAGE_TRUNCATED) {
        if (sub.bytes > sub.capacity)
          NCCL_NET_WARN("test: receive %d of %d: the %zu-byte message is larger than the %zu-byte buffer posted for it",
                        failedSub, req->count, sub.bytes, sub.capacity);
        else
          NCCL_NET_WARN("test: receive %d of %d: the message is larger than the %zu-byte buffer posted for it",
                        failedSub, req->count, sub.capacity);
        result = ncclInvalidUsage;
      } else {
        NCCL_NET_WARN("test: %s %d of %d with %s: %s", req->isSend ? "send" : "receive", failedSub, req->count,
                      comm->peer.c_str(), ucs_status_string(sub.status));
      }
      if (all) {
        releaseRequest(comm, req);
      } else {
        comm->groupAbandoned = true;
        abandonReceives(comm, req, req->count);
      }
      return result;
    }
    for (int i = 0; i < req->count; ++i)
      if (!sizes.set(i, req->subs[i].bytes)) return ncclSuccess;  // the SDK reports the overflow
    releaseRequest(comm, req);
    *done = 1;
    return ncclSuccess;
  }

  ncclResult_t closeSend(void* sendComm) {
    destroyComm(static_cast<Comm*>(sendComm));
    return ncclSuccess;
  }
  ncclResult_t closeRecv(void* recvComm) {
    destroyComm(static_cast<Comm*>(recvComm));
    return ncclSuccess;
  }
  ncclResult_t closeListen(void* listenComm) {
    auto* listener = static_cast<ListenComm*>(listenComm);
    closeIfOpen(listener->fd);
    for (Incoming& in : listener->incoming) {
      closeIfOpen(in.fd);
      if (in.comm != nullptr) destroyComm(in.comm);
    }
    delete listener;
    return ncclSuccess;
  }

 private:
  static ncclResult_t badDevice(const char* call, int dev) {
    NCCL_NET_WARN("%s: device %d does not exist (%d devices)", call, dev, DeviceTable::get().count());
    return ncclInternalError;
  }

  static ncclResult_t connectFailed(PendingConnect* pending, const std::string& what) {
    NCCL_NET_WARN("connect to %s failed: %s", pending->target.sideChannel.toString().c_str(), what.c_str());
    return ncclRemoteError;
  }

  static ncclResult_t progressConnect(PendingConnect* p, void** sendComm) {
    std::string error;
    if (Clock::now() > p->deadline) {
      std::string last = p->connector.error().empty() ? "" : "; last error: " + p->connector.error();
      return connectFailed(p, "no answer within " + std::to_string(Config::get().connectTimeoutMs) +
                                  " ms (NNS_UCX_CONNECT_TIMEOUT_MS)" + last);
    }
    if (p->phase == PendingConnect::Phase::kConnecting) {
      sdk::IoStatus status = p->connector.progress();
      if (status == sdk::IoStatus::kWouldBlock) return ncclSuccess;
      if (status != sdk::IoStatus::kDone) return connectFailed(p, p->connector.error());
      p->fd = p->connector.release();
      p->phase = PendingConnect::Phase::kSending;
    }
    if (p->phase == PendingConnect::Phase::kSending) {
      sdk::IoStatus status = writeSome(p->fd, p->outgoing.data(), p->outgoing.size(), &p->sent, &error);
      if (failed(status)) return connectFailed(p, "sending our worker address: " + error);
      if (status != sdk::IoStatus::kDone) return ncclSuccess;
      p->phase = PendingConnect::Phase::kReceiving;
    }
    if (p->replyReceived < sizeof(p->reply)) {
      sdk::IoStatus status = readSome(p->fd, &p->reply, sizeof(p->reply), &p->replyReceived, &error);
      if (failed(status)) return connectFailed(p, "waiting for the listener's worker address: " + error);
      if (status != sdk::IoStatus::kDone) return ncclSuccess;
      if (p->reply.magic != kWireMagic || p->reply.addressBytes == 0 || p->reply.addressBytes > kMaxWorkerAddressBytes)
        return connectFailed(p, "the listener answered with a malformed reply (another plugin version?)");
      p->remoteAddress.resize(p->reply.addressBytes);
    }
    sdk::IoStatus status =
        readSome(p->fd, p->remoteAddress.data(), p->remoteAddress.size(), &p->addressReceived, &error);
    if (failed(status)) return connectFailed(p, "reading the listener's worker address: " + error);
    if (status != sdk::IoStatus::kDone) return ncclSuccess;
    Comm* comm = p->comm;
    comm->connectionTag = p->reply.connectionTag;
    NCCL_NET_CHECK(createEndpoint(comm, p->remoteAddress));
    p->comm = nullptr;
    comm->sideFd = p->fd;
    p->fd = -1;
    sdk::setDeadPeerTimeout(comm->sideFd, Config::get().deadPeerMs);
    Keeper::get().open(comm);
    NCCL_NET_INFO(NCCL_NET, "connected to %s (worker address %zu bytes)", comm->peer.c_str(), p->remoteAddress.size());
    *sendComm = comm;
    return ncclSuccess;
  }

  // Advances one side-channel exchange; true once the reply is fully written and the comm is ready. A problem is the
  // peer's unless *local says it is this side's own.
  static bool progressIncoming(ListenComm* listener, Incoming& in, std::string* problem, bool* local) {
    std::string error;
    if (in.helloReceived < sizeof(in.hello)) {
      sdk::IoStatus status = readSome(in.fd, &in.hello, sizeof(in.hello), &in.helloReceived, &error);
      if (failed(status)) *problem = "before identifying itself: " + error;
      if (status != sdk::IoStatus::kDone) return false;
      if (in.hello.magic != kWireMagic || in.hello.version != kWireVersion || in.hello.listenId != listener->listenId) {
        *problem = "not a connection for this listener (wrong magic, version or listen id)";
        return false;
      }
      if (in.hello.addressBytes == 0 || in.hello.addressBytes > kMaxWorkerAddressBytes) {
        *problem = "announced a worker address of " + std::to_string(in.hello.addressBytes) + " bytes";
        return false;
      }
      in.remoteAddress.resize(in.hello.addressBytes);
    }
    if (in.comm == nullptr) {
      sdk::IoStatus status =
          readSome(in.fd, in.remoteAddress.data(), in.remoteAddress.size(), &in.addressReceived, &error);
      if (failed(status)) *problem = "while sending its worker address: " + error;
      if (status != sdk::IoStatus::kDone) return false;
      auto* comm = new Comm(false, listener->dev);
      comm->peer = in.peer.toString();
      comm->connectionTag = static_cast<uint32_t>(randomId());
      in.comm = comm;
      // The receiver's own endpoint to the sender exists for one reason: UCX reports a dead peer per endpoint, and
      // a tagged receive belongs to no endpoint until a message matches it.
      if (createWorker(listener->dev, comm) != ncclSuccess) {
        *problem = "could not create its UCP worker (see above)";
        *local = true;
        return false;
      }
      if (createEndpoint(comm, in.remoteAddress) != ncclSuccess) {
        *problem = "could not create an endpoint to the worker address it sent (see above)";
        return false;
      }
      Reply reply{kWireMagic, comm->connectionTag, static_cast<uint32_t>(comm->address.size()), 0};
      in.outgoing.resize(sizeof(reply));
      std::memcpy(in.outgoing.data(), &reply, sizeof(reply));
      in.outgoing.insert(in.outgoing.end(), comm->address.begin(), comm->address.end());
    }
    sdk::IoStatus status = writeSome(in.fd, in.outgoing.data(), in.outgoing.size(), &in.sent, &error);
    if (failed(status)) *problem = "answering: " + error;
    return status == sdk::IoStatus::kDone;
  }
};

}  // namespace nns_ucx

NCCL_NET_SDK_EXPORT(nns_ucx::UcxNet)
