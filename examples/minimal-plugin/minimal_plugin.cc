// minimal_plugin.cc: the smallest complete NCCL net plugin built with the SDK: one shared-memory device that moves
// messages between processes on one host through a byte ring per connection.
//
// Read it top to bottom with README.md beside it. The SDK does the version work: this file implements the newest
// (v12) calls once, and NCCL_NET_SDK_EXPORT at the bottom exports ncclNetPlugin_v6 .. ncclNetPlugin_v12.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <random>
#include <utility>

#include <nccl_net/sdk.hpp>

namespace {

using Clock = std::chrono::steady_clock;
namespace sdk = nccl_net::sdk;

constexpr size_t kRingBytes = 4u << 20;  // per connection; a power of two
constexpr int kMaxPendingConnects = 16;  // connects a listener can queue before accept() picks them up
constexpr int kNameBytes = 64;           // shared-memory object names
constexpr auto kConnectTimeout = std::chrono::seconds(30);
constexpr auto kPeerCheckInterval = std::chrono::milliseconds(200);

// ---- shared-memory layouts (both processes map these) ------------------------------------------------------------

// One listener: a small mailbox where connectors drop the name of the connection segment they created.
struct ListenArea {
  std::atomic<uint64_t> reserved;  // slots claimed by connectors
  std::atomic<uint64_t> taken;     // slots consumed by accept()
  struct Slot {
    std::atomic<uint32_t> ready;
    char name[kNameBytes];
  } slots[kMaxPendingConnects];
};

// One connection, sender -> receiver: a single-producer single-consumer byte ring carrying framed messages.
struct alignas(64) ConnectionArea {
  alignas(64) std::atomic<uint64_t> head;  // bytes the sender has written
  alignas(64) std::atomic<uint64_t> tail;  // bytes the receiver has consumed
  alignas(64) std::atomic<uint32_t> accepted;
  std::atomic<uint32_t> senderClosed;
  std::atomic<uint32_t> receiverClosed;
  int32_t senderPid;
  int32_t receiverPid;
  alignas(64) unsigned char ring[kRingBytes];
};

// Every message starts with this frame in the ring, followed by `size` payload bytes.
struct MessageFrame {
  uint64_t size;
  int32_t tag;
  uint32_t reserved;
};

// ---- what travels in NCCL's 128-byte handle -------------------------------------------------------------------------
struct HandlePayload {
  char listenName[kNameBytes];
  int32_t listenerPid;
};
constexpr sdk::HandleCodec<HandlePayload> kHandleCodec(sdk::handleMagic("minimal-example"), 1);

std::string uniqueName(const char* kind) {
  static std::atomic<uint64_t> sequence{0};
  static const uint64_t salt = std::random_device{}();
  char name[kNameBytes];
  std::snprintf(name, sizeof(name), "/nccl-net-minimal-%s-%d-%llu-%08llx", kind, static_cast<int>(getpid()),
                static_cast<unsigned long long>(sequence++), static_cast<unsigned long long>(salt & 0xffffffffu));
  return name;
}

// Maps a shared-memory object; `create` makes a new zero-filled one. Returns nullptr and WARNs on failure. With
// `ownerFd`, the object stays open there with an flock held: the mark of a live owner (see removeOrphans).
// `missing`, when given, is set (and nothing said) when an existing segment was asked for and there is none.
void* mapShared(const std::string& name, size_t bytes, bool create, int* ownerFd = nullptr, bool* missing = nullptr) {
  int fd = shm_open(name.c_str(), create ? (O_CREAT | O_EXCL | O_RDWR) : O_RDWR, 0600);
  if (fd < 0) {
    if (missing != nullptr && !create && errno == ENOENT) {
      *missing = true;
      return nullptr;
    }
    NCCL_NET_WARN("shm_open %s failed: %s", name.c_str(), std::strerror(errno));
    return nullptr;
  }
  if (create && ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    NCCL_NET_WARN("ftruncate %s to %zu bytes failed: %s", name.c_str(), bytes, std::strerror(errno));
    close(fd);
    shm_unlink(name.c_str());
    return nullptr;
  }
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (memory == MAP_FAILED) {
    NCCL_NET_WARN("mmap %s (%zu bytes) failed: %s", name.c_str(), bytes, std::strerror(errno));
    close(fd);
    if (create) shm_unlink(name.c_str());
    return nullptr;
  }
  if (ownerFd != nullptr && flock(fd, LOCK_EX | LOCK_NB) == 0) {
    *ownerFd = fd;
  } else {
    if (ownerFd != nullptr) *ownerFd = -1;
    close(fd);
  }
  return memory;
}

// A process killed between creating a segment and unlinking it (its listener before closeListen, a connector
// before it was accepted) leaves the name in /dev/shm. Each owner holds an flock on its segment, which the kernel
// drops when the owner dies, whatever killed it; so at init, a segment of this plugin's that can be locked, and is
// older than a few seconds (one being created is not locked yet), has no owner left and is removed.
void removeOrphans() {
  constexpr const char kPrefix[] = "nccl-net-minimal-";
  constexpr time_t kSettleSeconds = 10;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return;
  while (const dirent* entry = readdir(dir)) {
    if (std::strncmp(entry->d_name, kPrefix, sizeof(kPrefix) - 1) != 0) continue;
    std::string name = std::string("/") + entry->d_name;
    int fd = shm_open(name.c_str(), O_RDWR, 0);
    if (fd < 0) continue;  // gone meanwhile, or another user's
    struct stat status {};
    if (fstat(fd, &status) == 0 && time(nullptr) - status.st_mtime > kSettleSeconds &&
        flock(fd, LOCK_EX | LOCK_NB) == 0)
      shm_unlink(name.c_str());
    close(fd);
  }
  closedir(dir);
}

// A peer that exited but was not reaped yet (a zombie) counts as dead.
bool processAlive(int pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE* stat = std::fopen(path, "r");
  if (stat == nullptr) return true;  // cannot tell: assume alive, the close flags still apply
  char state = '?';
  int fields = std::fscanf(stat, "%*d (%*[^)]) %c", &state);
  std::fclose(stat);
  return fields != 1 || (state != 'Z' && state != 'X');
}

// ---- plugin objects -------------------------------------------------------------------------------------------------
struct ListenComm {
  std::string name;
  ListenArea* area;
  int ownerFd;  // open, with the flock that marks a live owner
};

struct MemoryRegion {
  void* data;
  size_t size;
};

struct Comm;

struct Request {
  static constexpr uint32_t kMagic = 0x6d696e72;  // "minr": tells a live request from garbage
  uint32_t magic = kMagic;
  Comm* comm = nullptr;
  unsigned char* data = nullptr;
  size_t capacity = 0;  // receive: bytes posted; send: message size
  size_t size = 0;      // bytes of the message (receive: known once its frame arrived)
  size_t moved = 0;     // payload bytes copied so far
  int tag = 0;
  bool framed = false;  // frame written (send) or read (receive)
  bool done = false;
};

// A send or receive end of one connection. Requests complete in the order they were posted.
struct Comm {
  bool isSender;
  ConnectionArea* area;
  sdk::RequestPool<Request, NCCL_NET_MAX_REQUESTS> requests;
  Request* queue[NCCL_NET_MAX_REQUESTS];  // posted requests, oldest first
  int queued = 0;
  Clock::time_point lastPeerCheck = Clock::now();
};

// Copies between a linear buffer and the ring at byte position `position` (wrapping at the end).
void ringWrite(ConnectionArea* area, uint64_t position, const void* source, size_t bytes) {
  size_t offset = position & (kRingBytes - 1);
  size_t first = std::min(bytes, kRingBytes - offset);
  std::memcpy(area->ring + offset, source, first);
  std::memcpy(area->ring, static_cast<const unsigned char*>(source) + first, bytes - first);
}
void ringRead(const ConnectionArea* area, uint64_t position, void* target, size_t bytes) {
  size_t offset = position & (kRingBytes - 1);
  size_t first = std::min(bytes, kRingBytes - offset);
  std::memcpy(target, area->ring + offset, first);
  std::memcpy(static_cast<unsigned char*>(target) + first, area->ring, bytes - first);
}

// Moves as many bytes of the oldest send request as the ring has room for.
ncclResult_t progressSend(Comm* comm, Request* request) {
  ConnectionArea* area = comm->area;
  uint64_t head = area->head.load(std::memory_order_relaxed);
  uint64_t space = kRingBytes - (head - area->tail.load(std::memory_order_acquire));
  if (!request->framed) {
    if (space < sizeof(MessageFrame)) return ncclSuccess;
    MessageFrame frame{request->size, request->tag, 0};
    ringWrite(area, head, &frame, sizeof(frame));
    head += sizeof(frame);
    space -= sizeof(frame);
    request->framed = true;
  }
  size_t bytes = std::min<uint64_t>(space, request->size - request->moved);
  ringWrite(area, head, request->data + request->moved, bytes);
  request->moved += bytes;
  area->head.store(head + bytes, std::memory_order_release);
  request->done = request->moved == request->size;
  return ncclSuccess;
}

// Moves as many bytes of the oldest receive request as the ring holds.
ncclResult_t progressRecv(Comm* comm, Request* request) {
  ConnectionArea* area = comm->area;
  uint64_t tail = area->tail.load(std::memory_order_relaxed);
  uint64_t available = area->head.load(std::memory_order_acquire) - tail;
  if (!request->framed) {
    if (available < sizeof(MessageFrame)) return ncclSuccess;
    MessageFrame frame;
    ringRead(area, tail, &frame, sizeof(frame));
    if (frame.tag != request->tag) {
      NCCL_NET_WARN("message with tag %d arrived for a receive posted with tag %d (sender pid %d)", frame.tag,
                    request->tag, area->senderPid);
      return ncclInvalidUsage;
    }
    if (frame.size > request->capacity) {
      NCCL_NET_WARN("message of %llu bytes does not fit the %zu-byte receive buffer (sender pid %d)",
                    static_cast<unsigned long long>(frame.size), request->capacity, area->senderPid);
      return ncclInvalidUsage;
    }
    tail += sizeof(frame);
    available -= sizeof(frame);
    request->size = frame.size;
    request->framed = true;
  }
  size_t bytes = std::min<uint64_t>(available, request->size - request->moved);
  ringRead(area, tail, request->data + request->moved, bytes);
  request->moved += bytes;
  area->tail.store(tail + bytes, std::memory_order_release);
  request->done = request->moved == request->size;
  return ncclSuccess;
}

// Drives the comm's requests in posting order; fails if the peer closed or died while work is pending.
ncclResult_t progress(Comm* comm) {
  Request* blocked = nullptr;  // the first request that could not finish
  for (int i = 0; i < comm->queued && blocked == nullptr; ++i) {
    Request* r = comm->queue[i];
    if (r->done) continue;  // finished, waiting for test() to collect it
    NCCL_NET_CHECK(comm->isSender ? progressSend(comm, r) : progressRecv(comm, r));
    if (!r->done) blocked = r;
  }
  if (blocked == nullptr) return ncclSuccess;

  ConnectionArea* area = comm->area;
  int peer = comm->isSender ? area->receiverPid : area->senderPid;
  bool peerClosed = comm->isSender ? area->receiverClosed.load() : area->senderClosed.load();
  // A closed or dead sender may have left the rest of the message in the ring; fail only once it is drained.
  bool drained = comm->isSender || area->head.load(std::memory_order_acquire) == area->tail.load();
  if (peerClosed && drained) {
    NCCL_NET_WARN("peer pid %d closed the connection with a request pending", peer);
    return ncclRemoteError;
  }
  auto now = Clock::now();
  if (now - comm->lastPeerCheck > kPeerCheckInterval) {
    comm->lastPeerCheck = now;
    // Whether the ring is empty is read again after the peer is known dead: a sender can write its last message
    // and exit between the first read and the liveness check, and that message must still be delivered.
    if (!processAlive(peer) && (comm->isSender || area->head.load(std::memory_order_acquire) == area->tail.load())) {
      NCCL_NET_WARN("peer pid %d exited with a request pending", peer);
      return ncclRemoteError;
    }
  }
  return ncclSuccess;
}

ncclResult_t post(Comm* comm, void* data, size_t bytes, int tag, void** request) {
  Request* r = comm->requests.acquire();
  if (r == nullptr) return ncclSuccess;  // all NCCL_NET_MAX_REQUESTS in flight: *request stays NULL, NCCL retries
  r->comm = comm;
  r->data = static_cast<unsigned char*>(data);
  r->capacity = bytes;
  r->size = comm->isSender ? bytes : 0;
  r->tag = tag;
  comm->queue[comm->queued++] = r;
  *request = r;
  // Push a send's first bytes now (lower latency); a receive's problems (wrong tag, too small) surface in test().
  return comm->isSender ? progress(comm) : ncclSuccess;
}

ncclResult_t closeComm(Comm* comm) {
  if (comm->isSender) {
    comm->area->senderClosed.store(1);
  } else {
    comm->area->receiverClosed.store(1);
  }
  munmap(comm->area, sizeof(ConnectionArea));
  delete comm;
  return ncclSuccess;
}

// What connect() keeps between its calls (in the handle's connect stage). Its destructor releases what a connect that
// failed, or that the host gave up on, still holds: the SDK deletes a state the host abandoned (see ConnectStage).
struct PendingConnect {
  std::string name;
  ConnectionArea* area;
  Clock::time_point started;
  int ownerFd;  // held until accepted: the receiver unlinks the name then

  ~PendingConnect() {
    if (area != nullptr) {
      area->senderClosed.store(1);  // a receiver that accepted meanwhile sees the sender gone
      munmap(area, sizeof(ConnectionArea));
      shm_unlink(name.c_str());  // already gone if it was accepted
    }
    if (ownerFd >= 0) close(ownerFd);
  }
};

}  // namespace

// ---- the plugin class: one method per ncclNet_v12 call
// ----------------------------------------------------------------
class MinimalNet {
 public:
  static constexpr const char kName[] = "minimal";

  ncclResult_t init(const sdk::InitArgs& args, void** ctx) {
    sdk::setLogPrefix("NET/minimal");
    removeOrphans();
    NCCL_NET_INFO(NCCL_INIT | NCCL_NET, "initialised through ncclNet_v%d (shared memory, one device)", args.abiVersion);
    *ctx = nullptr;  // no per-communicator state
    return ncclSuccess;
  }

  ncclResult_t devices(int* ndev) {
    *ndev = 1;
    return ncclSuccess;
  }

  ncclResult_t getProperties(int /*dev*/, ncclNetProperties_v12_t* props) {
    // The SDK pre-filled safe defaults (railId/planeId -1, maxP2pBytes 1 GiB, vProps {dev}, ...).
    props->name = const_cast<char*>("shm0");
    props->pciPath = nullptr;  // not a PCI device
    props->guid = 0x6d696e696d616cull;
    props->ptrSupport = NCCL_PTR_HOST;
    props->speed = 100000;  // Mbps; shared memory is far faster than NCCL needs to know
    props->latency = 0;
    props->port = 0;
    props->maxComms = 1024;
    props->maxRecvs = 1;
    return ncclSuccess;
  }

  ncclResult_t listen(void* /*ctx*/, int /*dev*/, void* handle, void** listenComm) {
    std::string name = uniqueName("listen");
    int ownerFd = -1;
    auto* area = static_cast<ListenArea*>(mapShared(name, sizeof(ListenArea), true, &ownerFd));
    if (area == nullptr) return ncclSystemError;
    HandlePayload payload{};
    std::snprintf(payload.listenName, sizeof(payload.listenName), "%s", name.c_str());
    payload.listenerPid = getpid();
    NCCL_NET_CHECK(kHandleCodec.encode(payload, handle));
    *listenComm = new ListenComm{name, area, ownerFd};
    return ncclSuccess;
  }

  ncclResult_t connect(void* /*ctx*/, int /*dev*/, void* handle, void** sendComm,
                       ncclNetDeviceHandle_v12_t** /*sendDevComm*/) {
    using Stage = sdk::ConnectStage<PendingConnect>;
    PendingConnect* pending = Stage::get(handle);
    if (pending == nullptr) {
      HandlePayload payload;
      NCCL_NET_CHECK(kHandleCodec.decode(handle, &payload));
      payload.listenName[kNameBytes - 1] = '\0';
      NCCL_NET_CHECK(startConnect(payload, handle));
      return ncclSuccess;  // *sendComm stays NULL: NCCL calls again
    }
    if (pending->area->accepted.load(std::memory_order_acquire) == 0) {
      if (Clock::now() - pending->started < kConnectTimeout) return ncclSuccess;
      NCCL_NET_WARN("connect: %s was not accepted within %lld s", pending->name.c_str(),
                    static_cast<long long>(kConnectTimeout.count()));
      Stage::take(handle);  // deleted: unmapped, unlinked, closed
      return ncclRemoteError;
    }
    *sendComm = new Comm{true, std::exchange(pending->area, nullptr), {}, {}, 0, Clock::now()};
    Stage::take(handle);  // deleted: its ownerFd closed, the segment now the comm's
    return ncclSuccess;
  }

  ncclResult_t accept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v12_t** /*recvDevComm*/) {
    ListenArea* area = static_cast<ListenComm*>(listenComm)->area;
    uint64_t next = area->taken.load();
    auto& slot = area->slots[next % kMaxPendingConnects];
    if (next == area->reserved.load() || slot.ready.load(std::memory_order_acquire) == 0) {
      return ncclSuccess;  // nobody connected yet: *recvComm stays NULL, NCCL calls again
    }
    std::string name(slot.name, strnlen(slot.name, kNameBytes));
    slot.ready.store(0);
    area->taken.store(next + 1);
    bool gone = false;
    auto* connection = static_cast<ConnectionArea*>(mapShared(name, sizeof(ConnectionArea), false, nullptr, &gone));
    if (gone) {
      // The connector gave up before this accept came (its timeout, or its host finalized the ctx it connected
      // under) and removed its segment: not this listener's failure (NCCL would fail the listen on an error), so
      // the entry is passed over and accept goes on waiting.
      NCCL_NET_INFO(NCCL_NET, "accept: %s was given up by its connector; waiting for the next", name.c_str());
      return ncclSuccess;
    }
    shm_unlink(name.c_str());  // both sides have it mapped; nothing is left behind if either dies
    if (connection == nullptr) return ncclSystemError;
    connection->receiverPid = getpid();
    connection->accepted.store(1, std::memory_order_release);
    *recvComm = new Comm{false, connection, {}, {}, 0, Clock::now()};
    return ncclSuccess;
  }

  ncclResult_t regMr(void* /*comm*/, void* data, size_t size, int type, void** mhandle) {
    if (type != NCCL_PTR_HOST) {
      NCCL_NET_WARN("regMr: memory type %d is not supported; this plugin moves host memory only", type);
      return ncclInternalError;
    }
    *mhandle = new MemoryRegion{data, size};
    return ncclSuccess;
  }

  ncclResult_t deregMr(void* /*comm*/, void* mhandle) {
    delete static_cast<MemoryRegion*>(mhandle);
    return ncclSuccess;
  }

  ncclResult_t isend(void* sendComm, void* data, size_t size, int tag, void* /*mhandle*/, void* /*phandle*/,
                     void** request) {
    return post(static_cast<Comm*>(sendComm), data, size, tag, request);
  }

  ncclResult_t irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** /*mhandles*/,
                     void** /*phandles*/, void** request) {
    if (n != 1) {
      NCCL_NET_WARN("irecv: %d grouped receives requested, this plugin advertises maxRecvs 1", n);
      return ncclInternalError;
    }
    return post(static_cast<Comm*>(recvComm), data[0], sizes[0], tags[0], request);
  }

  ncclResult_t test(void* request, int* done, sdk::CompletedSizes& sizes) {
    auto* r = static_cast<Request*>(request);
    if (r->magic != Request::kMagic || !r->comm->requests.owns(r)) {
      NCCL_NET_WARN("test: %p is not a live request of this plugin", request);
      return ncclInternalError;
    }
    Comm* comm = r->comm;
    NCCL_NET_CHECK(progress(comm));
    if (!r->done) return ncclSuccess;
    if (!sizes.set(0, r->size)) return ncclSuccess;  // the SDK reports the overflow as an error
    *done = 1;
    int position = 0;
    while (comm->queue[position] != r) ++position;
    for (int i = position + 1; i < comm->queued; ++i) comm->queue[i - 1] = comm->queue[i];
    --comm->queued;
    r->magic = 0;
    comm->requests.release(r);
    return ncclSuccess;
  }

  ncclResult_t closeSend(void* sendComm) { return closeComm(static_cast<Comm*>(sendComm)); }
  ncclResult_t closeRecv(void* recvComm) { return closeComm(static_cast<Comm*>(recvComm)); }

  ncclResult_t closeListen(void* listenComm) {
    auto* listen = static_cast<ListenComm*>(listenComm);
    munmap(listen->area, sizeof(ListenArea));
    shm_unlink(listen->name.c_str());
    if (listen->ownerFd >= 0) close(listen->ownerFd);
    delete listen;
    return ncclSuccess;
  }

 private:
  // First connect() call: create the connection segment and leave its name in the listener's mailbox.
  static ncclResult_t startConnect(const HandlePayload& payload, void* handle) {
    auto* listen = static_cast<ListenArea*>(mapShared(payload.listenName, sizeof(ListenArea), false));
    if (listen == nullptr) {
      NCCL_NET_WARN("connect: no listener %s (listener pid %d gone, or a handle from another host?)",
                    payload.listenName, payload.listenerPid);
      return ncclSystemError;
    }
    uint64_t slotIndex = listen->reserved.load();
    do {
      if (slotIndex - listen->taken.load() >= kMaxPendingConnects) {
        munmap(listen, sizeof(ListenArea));
        return ncclSuccess;  // mailbox full: try again on the next call
      }
    } while (!listen->reserved.compare_exchange_weak(slotIndex, slotIndex + 1));

    std::string name = uniqueName("conn");
    int ownerFd = -1;
    auto* area = static_cast<ConnectionArea*>(mapShared(name, sizeof(ConnectionArea), true, &ownerFd));
    if (area == nullptr) {
      // Keep the slot protocol intact: publish an empty name that accept() will fail to open.
      listen->slots[slotIndex % kMaxPendingConnects].name[0] = '\0';
      listen->slots[slotIndex % kMaxPendingConnects].ready.store(1, std::memory_order_release);
      munmap(listen, sizeof(ListenArea));
      return ncclSystemError;
    }
    area->senderPid = getpid();
    auto& slot = listen->slots[slotIndex % kMaxPendingConnects];
    std::snprintf(slot.name, sizeof(slot.name), "%s", name.c_str());
    slot.ready.store(1, std::memory_order_release);
    munmap(listen, sizeof(ListenArea));
    // Kept by the SDK from here on: if the host stops calling connect, it deletes the state for us.
    sdk::ConnectStage<PendingConnect>::adopt(
        handle, std::unique_ptr<PendingConnect>(new PendingConnect{name, area, Clock::now(), ownerFd}));
    return ncclSuccess;
  }
};

#if defined(NNS_MINIMAL_NO_EXPORT)
// Built into a test double that exports tables of its own (tests/cuda/gdr_standin_plugin.cc).
#elif defined(NNS_MINIMAL_ONLY_VERSION)
// Test builds export one old version alone, so hosts' adapters for it can be exercised (tests/loader).
NCCL_NET_SDK_EXPORT_NET_VERSION(MinimalNet, NNS_MINIMAL_ONLY_VERSION)
#else
NCCL_NET_SDK_EXPORT(MinimalNet)
#endif
