// broken_shim.cc: deliberately broken plugins for the harness's own tests. Each build forwards to the real minimal
// example plugin (NNS_REAL_PLUGIN) through its ncclNetPlugin_v12 table and injects ONE bug (NNS_BUG_*), so the
// harness must name the rule it breaks. Each bug imitates a mistake real plugins make; the comment at each says which.
// One build is no bug at all: NNS_NCCL_LIKE behaves as strictly as NCCL lets a plugin (NCCL's own IB plugin reads
// the mhandle and the irecv's profiler handles unchecked, writes *devComm unconditionally and leaves a send's size
// unset, as this one leaves a 0-byte receive's, which NCCL zeroes first; vendor code prints from init), and the harness
// must pass it on every rule. Another is a legitimate limit, not a bug: NNS_SMALL_MESSAGES takes messages of at most 4
// KiB and says so (maxCollBytes, maxP2pBytes), as a transport with a small MTU and no segmentation of its own would;
// hosts must cut their messages to fit. And NNS_SLOW_REGISTRATION takes 50 us per regMr, as a plugin that pins memory
// does (the collective engine then keeps copying through its slots instead of registering each call's buffers).
#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nccl_net/net.h>

namespace {

const ncclNet_v12_t* real() {
  static const ncclNet_v12_t* table = [] {
    void* library = dlopen(NNS_REAL_PLUGIN, RTLD_NOW | RTLD_LOCAL);
    return library ? static_cast<const ncclNet_v12_t*>(dlsym(library, "ncclNetPlugin_v12")) : nullptr;
  }();
  return table;
}

#ifdef NNS_BUG_LEAKED_COMM_FD
// Each receive comm gets an eventfd at accept (for a progress thread to wake on); closeRecv frees the comm and
// forgets the descriptor. Harmless per comm, fatal after a few hundred communicators.
std::map<void*, int> gWakeFds;
#endif

#ifdef NNS_BUG_LEAKED_ABANDONED_CONNECT
// A connect in progress holds a side-channel socket of its own (an eventfd stands for it here), kept by the handle's
// address, as NCCL's own plugins keep theirs in the handle; only the connect's completion or failure closes it. A
// host that gives up on the connect (ncclNet cannot cancel one) and finalizes its context leaves it open for good.
std::mutex gConnectingLock;
std::map<void*, int> gConnecting;
#endif

#ifdef NNS_BUG_LEAKED_PER_MESSAGE
// Each send gets a 1 KiB descriptor (a copy of the header and a gather list, for a retransmit); a completed send's
// descriptor moves to a "done" list meant to be recycled by the next isend, which allocates a new one instead.
struct SendDescriptor {
  unsigned char header[1024];
};
std::mutex gDescriptorsLock;
std::map<void*, std::unique_ptr<SendDescriptor>> gInFlight;
std::vector<std::unique_ptr<SendDescriptor>> gDone;
#endif

#ifdef NNS_SMALL_MESSAGES
constexpr size_t kLargestMessage = 4096;
#endif

#ifdef NNS_BUG_LIMITED_REQUESTS
// The receive pool was sized with the v6-era limit (NCCL_NET_MAX_REQUESTS_V6 = 8) instead of NCCL_NET_MAX_REQUESTS
// (32): a 9th receive in flight is refused although NCCL may post 32.
std::set<void*> gPendingRecvs;
#endif

#ifdef NNS_BUG_LEAKED_MHANDLE
// regMr builds a per-page descriptor table (as an RDMA plugin does for its translation entries); deregMr frees the
// registration but forgets the table.
struct PageDescriptor {
  uint64_t address;
  uint64_t dmaAddress;
  uint64_t reserved[6];
};
struct Registration {
  void* realHandle;
  PageDescriptor* pages;
};
#endif

#ifdef NNS_BUG_READS_DEREGISTERED
// regMr keeps each registration's record (the real handle, as an RDMA plugin keeps its keys and page list) in a page
// of its own, which deregMr unmaps; a receive keeps the record of its buffer and reads it when it completes (to count
// the region's completions). A deregMr while the receive is pending, as NCCL's teardown after an abort does, leaves
// the completion reading an unmapped page.
struct PagedRegistration {
  void* realHandle;
  uint64_t completions;
};
constexpr size_t kRecordBytes = 4096;
std::mutex gPagedMutex;
std::map<void*, PagedRegistration*> gRecvRecords;  // receive request -> the record of its first buffer
void* realOfPaged(void* mhandle) {
  return mhandle != nullptr ? static_cast<PagedRegistration*>(mhandle)->realHandle : nullptr;
}
#endif

#ifdef NNS_BUG_CRASH_ON_CLOSE
// Each receive comm has a completion page where posted receives get a slot; closeRecv unmaps the page first and
// then "cancels" the pending receives by writing into their slots.
struct RecvState {
  uint32_t* completionPage;
  std::vector<void*> pending;
};
std::map<void*, RecvState> gRecvStates;
constexpr size_t kPageBytes = 4096;
#endif

#ifdef NNS_BUG_ZERO_BYTE_ELIDED
// 0-byte sends are "optimised away": completed locally, never put on the wire, so the receiver's 0-byte receive
// takes the next message instead.
std::set<void*> gElidedSends;
#endif

#ifdef NNS_BUG_TAGS_IGNORED
// The wire header carries no tag: a grouped receive (this build advertises maxRecvs 8) fills its buffers in arrival
// order, whatever their tags.
constexpr int kMaxRecvs = 8;
struct GroupRequest {
  int n;
  void* parts[kMaxRecvs];
  int sizes[kMaxRecvs];
  bool done[kMaxRecvs];
};
std::set<GroupRequest*> gGroups;
#endif

#ifdef NNS_BUG_NULL_REQUEST_FOREVER
// A "pool exhausted" flag set when isend runs out of requests, and never cleared when test frees them.
bool gSendPoolExhausted = false;
#endif

#ifdef NNS_BUG_NULL_REQUEST_BUT_SENT
// A send queue whose "full" check runs after the enqueue: every fifth isend queues the message and then answers
// NULL ("not now"), so the host's retry sends it a second time. The request the host never got is completed here.
std::mutex gOrphansLock;
std::vector<void*> gOrphanSends;
int gSendCalls = 0;
#endif

#ifdef NNS_BUG_DIES_IN_CONNECT
// Not a plugin's mistake: a test double for a rank that dies (a crash, the OOM killer) while its communicator makes
// its connections, a moment nothing real can be timed to hit. The process whose NNS_RANK is $NNS_TEST_DYING_RANK ends
// at its first connect or accept, whichever comes first: after its handles went out, and 200 ms later, so that the
// ranks connecting to it have begun to (none is accepted), as a rank dying there leaves them.
void dieIfDyingRank() {
  if (const char* dying = std::getenv("NNS_TEST_DYING_RANK"), *rank = std::getenv("NNS_RANK");
      dying != nullptr && rank != nullptr && std::strcmp(dying, rank) == 0) {
    usleep(200000);
    _exit(3);
  }
}
#endif

#ifdef NNS_BUG_BLOCKING_CLOSE_LISTEN
// Each listener has a helper thread blocked in accept(2) on a side socket; closeListen joins it without waking it
// (no shutdown of the socket), so closeListen never returns.
struct ListenHelper {
  int fd;
  std::thread thread;
};
std::map<void*, ListenHelper*> gListenHelpers;
#endif

#ifdef NNS_BUG_STRANGER_FAILS_ACCEPT
// Connection set-up runs over a TCP side channel (as RDMA plugins do). accept takes whatever connects to it, reads
// its first bytes, and fails the accept when they are not the plugin's magic: a port scanner or a stale process of
// another job then aborts the communicator being built. (nns-ib had this until its accept learned to drop strangers.)
constexpr uint32_t kSideMagic = 0x6e6e7321;
std::map<void*, int> gSideChannels;
#endif

#ifdef NNS_BUG_GLOBAL_RECV_COMM
// The connection lives in a global, written for one connection per pair of processes: irecv posts on the most
// recently accepted comm, whichever comm it is given.
void* gLastRecvComm = nullptr;
#endif

#ifdef NNS_BUG_RECV_NEEDS_LISTENER
// Each listener owns an epoll instance that the connections it accepts wait on (one wait for all of them), and a
// receive comm waits through its listener's: closeListen closes that descriptor, and every comm the listener accepted
// then fails its next irecv (EBADF). A host that keeps listeners open to the end never sees it; NCCL closes each
// listener as soon as its accept has returned a comm.
std::mutex gEpollLock;
std::map<void*, int> gListenerEpoll;  // listen comm -> its epoll descriptor
std::map<void*, int> gRecvEpoll;      // recv comm -> its listener's epoll descriptor
#endif

#ifdef NNS_BUG_CLOSE_DROPS_QUEUED
// An eager protocol with a send queue: a send completes once it is copied into the plugin's queue, and a progress
// thread puts each message on the wire 200 ms after it was queued (a batching interval: its first pass is then never
// early enough to empty a queue a sender closes at once). closeSend frees the queue with
// whatever it still holds, and returns: the last messages of a rank that destroys its communicator as soon as its
// sends completed never leave. Every other rule keeps the sender's comm open until its messages were received.
struct QueuedSend {
  std::vector<unsigned char> bytes;
  size_t size = 0;
  int tag = 0;
  void* mhandle = nullptr;
  void* request = nullptr;
  std::chrono::steady_clock::time_point queued = std::chrono::steady_clock::now();
};
struct SendQueue {
  std::deque<std::unique_ptr<QueuedSend>> waiting;
  std::vector<std::unique_ptr<QueuedSend>> onWire;
};
std::mutex gQueueLock;  // over every call into the real plugin for a send comm: the progress thread calls it too
std::map<void*, SendQueue> gSendQueues;
std::map<void*, size_t> gEagerSends;                   // the requests isend gave: complete, with their size
std::map<void*, SendQueue>* gParentsQueues = nullptr;  // in a forked child: the parent's queues, never touched
bool gPacerRunning = false;
void paceQueues() {  // under gQueueLock
  for (auto& [comm, queue] : gSendQueues) {
    for (auto it = queue.onWire.begin(); it != queue.onWire.end();) {
      int done = 0, size = 0;
      if (real()->test((*it)->request, &done, &size) != ncclSuccess || done) {
        real()->deregMr(comm, (*it)->mhandle);
        it = queue.onWire.erase(it);
      } else {
        ++it;
      }
    }
    const auto due = std::chrono::steady_clock::now() - std::chrono::milliseconds(200);
    while (!queue.waiting.empty() && queue.waiting.front()->queued <= due) {
      QueuedSend& send = *queue.waiting.front();
      if (send.mhandle == nullptr &&
          real()->regMr(comm, send.bytes.data(), send.bytes.size(), NCCL_PTR_HOST, &send.mhandle) != ncclSuccess)
        break;
      if (real()->isend(comm, send.bytes.data(), send.size, send.tag, send.mhandle, nullptr, &send.request) !=
              ncclSuccess ||
          send.request == nullptr)
        break;
      queue.onWire.push_back(std::move(queue.waiting.front()));
      queue.waiting.pop_front();
    }
  }
}
void startPacer() {  // under gQueueLock
  if (gPacerRunning) return;
  gPacerRunning = true;
  static bool atFork = [] {
    // A fork while the pacer holds the lock would leave the child's copy locked for good, and the child has no pacer.
    pthread_atfork([] { gQueueLock.lock(); }, [] { gQueueLock.unlock(); },
                   [] {
                     // The child has no pacer, and the queued sends are the parent's comms' (another writer on
                     // their rings): left to the parent, without a call into the plugin.
                     gParentsQueues = new std::map<void*, SendQueue>(std::move(gSendQueues));
                     gSendQueues.clear();
                     gEagerSends.clear();
                     gQueueLock.unlock();
                     gPacerRunning = false;
                   });
    return true;
  }();
  (void)atFork;
  std::thread([] {
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(gQueueLock);
        paceQueues();
      }
      usleep(10000);
    }
  }).detach();
}
#endif

#ifdef NNS_BUG_HANDLE_UNCHECKED
// The handle is a bare socket address, no magic: connect cannot tell a foreign handle from a listener that is not up
// yet, and retries "connecting" to it until a connect timeout of minutes runs out.
#endif

#ifdef NNS_BUG_OFFSET_IN_REGION_IGNORED
// Receives address memory through their registration (an RDMA plugin building a remote address from the region's
// start): a receive into a registered buffer lands at the start of the region, wherever in it `data` points. NCCL
// registers a whole buffer once and receives into slots at offsets within it.
std::map<void*, void*> gRegionStart;  // mhandle -> the address regMr was given
#endif

#ifdef NNS_BUG_REGISTRATION_CACHE_UNCOUNTED
// A registration cache shared by the device's comms (an RDMA plugin keeps one, since pinning is slow), keyed by
// address and length, with no reference count: a second regMr of the same memory, on any comm, gets the first one's
// region, and the first deregMr releases it under every holder. Their later transfers then fail as a NIC fails them,
// with a protection error. NCCL registers one buffer on several comms and deregisters them one by one.
struct CachedRegion {
  void* real;  // the real plugin's mhandle, made on `comm`
  void* comm;
  bool live;
};
std::mutex gCacheMutex;
std::map<std::pair<void*, size_t>, CachedRegion*> gCache;
// A region whose memory key is gone: the real plugin would fail the transfer (a local protection error).
bool releasedRegion(void* mhandle) {
  std::lock_guard<std::mutex> lock(gCacheMutex);
  return mhandle != nullptr && !static_cast<CachedRegion*>(mhandle)->live;
}
void* realOfCached(void* mhandle) {
  return mhandle != nullptr ? static_cast<CachedRegion*>(mhandle)->real : nullptr;
}
#endif

#if defined(NNS_BUG_BLOCKING_CLOSE_RECV) || defined(NNS_BUG_BLOCKING_CLOSE_SEND) || \
    defined(NNS_BUG_LEAKED_PENDING_CLOSE)
// close "drains" the comm first, so that no completion can land in memory it is about to free: it tests every
// request still pending on the comm until each one completes or fails. That returns only when the peer finishes
// them or goes away; NCCL closes comms with requests in flight when it aborts a communicator, and a peer that is
// alive but idle (hung, or aborting too) then holds the close forever.
// One process may hold several comms on several threads (two ranks of a test): the maps are shared, so locked.
std::mutex gPendingMutex;
std::map<void*, std::set<void*>> gPendingByComm;  // comm -> its pending requests
std::map<void*, void*> gCommOfRequest;            // request -> its comm
void notePosted(void* comm, void* request) {
  std::lock_guard<std::mutex> lock(gPendingMutex);
  gPendingByComm[comm].insert(request);
  gCommOfRequest[request] = comm;
}
void noteFinished(void* request) {
  std::lock_guard<std::mutex> lock(gPendingMutex);
  auto found = gCommOfRequest.find(request);
  if (found == gCommOfRequest.end()) return;
  gPendingByComm[found->second].erase(request);
  gCommOfRequest.erase(found);
}
#ifndef NNS_BUG_LEAKED_PENDING_CLOSE
void drainPending(void* comm) {
  std::set<void*> requests;
  {
    std::lock_guard<std::mutex> lock(gPendingMutex);
    auto pending = gPendingByComm.find(comm);
    if (pending == gPendingByComm.end()) return;
    requests = std::move(pending->second);
    gPendingByComm.erase(pending);
    for (void* request : requests) gCommOfRequest.erase(request);
  }
  // Waited for without the lock: another comm's calls go on meanwhile (the peer's close is what ends this one).
  for (void* request : requests) {
    int done = 0, size = 0;
    while (real()->test(request, &done, &size) == ncclSuccess && !done) usleep(1000);
  }
}
#endif
#endif

#ifdef NNS_BUG_LEAKED_PENDING_CLOSE
// Each receive comm maps a shared staging window at accept. closeRecv unmaps it only when no receive is pending: with
// some pending it "frees it once they are done, when the NIC can no longer write there", which never comes once the
// comm is closed. NCCL's abort closes comms with receives pending, job after job.
std::map<void*, void*> gStagingWindows;  // comm -> its window
constexpr size_t kStagingBytes = 64u << 10;
#endif

#ifdef NNS_BUG_SIZE_FIELD_30_BITS
// The wire header packs two flag bits beside a 30-bit size: a message of 1 GiB or more goes out with its size
// modulo 2^30.
constexpr size_t kSizeFieldMask = (size_t{1} << 30) - 1;
#endif

#ifdef NNS_BUG_SHARED_REQUEST_POOL
// "One pool is simpler": every comm's requests come from one process-wide free list with no lock (the SDK's
// RequestPool is one per comm). NCCL drives comms from several proxy threads at once: two threads that post together
// can take the same slot, and one comm's test then reports (and frees) the other comm's request.
struct PooledRequest {
  void* real;
};
constexpr int kPoolSlots = 256;
PooledRequest gPoolSlots[kPoolSlots];
int gFreeSlots[kPoolSlots];
int gFreeCount = [] {
  for (int i = 0; i < kPoolSlots; ++i) gFreeSlots[i] = kPoolSlots - 1 - i;
  return kPoolSlots;
}();
PooledRequest* acquirePooled() {
  if (gFreeCount <= 0) return nullptr;
  int index = gFreeSlots[gFreeCount - 1];
  std::this_thread::yield();  // a statistics hook, say: it widens the window the missing lock leaves open
  gFreeCount = gFreeCount - 1;
  return &gPoolSlots[index];
}
void releasePooled(PooledRequest* request) {
  if (gFreeCount < kPoolSlots) gFreeSlots[gFreeCount++] = static_cast<int>(request - gPoolSlots);
}
#endif

#ifdef NNS_BUG_SECOND_DEVICE_UNREACHABLE
// A second port is counted and described, but the table of listen addresses was filled for the first device only
// (an off-by-one in the interface scan): listen on device 1 fails. NCCL uses every NIC the plugin lists.
int gRealDevices = 0;
#endif

#if defined(NNS_BUG_VDEVICE_NOT_COUNTED) || defined(NNS_BUG_VDEVICE_VPROPS_SELF) || defined(NNS_BUG_VDEVICE_UNCHECKED)
#define NNS_VDEVICES 1
// vNICs (makeVDevice) over the minimal plugin's devices: each vNIC listens and connects through its first part, is
// named after its parts ("shm0+shm1") and as fast as their sum. One bug each:
// - VDEVICE_NOT_COUNTED: the vNICs live in a table of their own that devices() does not count (written as if NCCL
//   used the index makeVDevice hands back; it counts devices() instead, and never sees the vNIC);
// - VDEVICE_VPROPS_SELF: every device's vProps lists the device itself, vNICs included (written once, for the
//   physical ports), so NCCL cannot tell what a vNIC fuses nor place it;
// - VDEVICE_UNCHECKED: the device list is trusted (NCCL only names devices it was given): a vNIC of no devices is
//   made, and one of a device that does not exist too, its part read from past the device table when used.
std::mutex gVirtualLock;
std::deque<std::vector<int>> gVirtualParts;  // vNIC k is device (real devices + k)
std::deque<std::string> gVirtualNames;       // stable storage: NCCL keeps the name pointers

int realDeviceCount() {
  int n = 0;
  return real()->devices(&n) == ncclSuccess ? n : 0;
}
// The physical device a device index stands for (a vNIC's first part), or the index as given.
int physicalDevice(int dev) {
  const int physical = realDeviceCount();
  std::lock_guard<std::mutex> lock(gVirtualLock);
  const size_t k = static_cast<size_t>(dev - physical);
  if (dev < physical || k >= gVirtualParts.size() || gVirtualParts[k].empty()) return dev;
  return gVirtualParts[k][0];
}
ncclResult_t makeVDevice(int* d, ncclNetVDeviceProps_v12_t* props) {
  const int physical = realDeviceCount();
#ifndef NNS_BUG_VDEVICE_UNCHECKED
  if (props->ndevs < 1 || props->ndevs > NCCL_NET_MAX_DEVS_PER_NIC) return ncclInvalidUsage;
  for (int i = 0; i < props->ndevs; ++i)
    if (props->devs[i] < 0 || props->devs[i] >= physical) return ncclInvalidUsage;
#endif
  std::vector<int> parts;
  std::string name;
  for (int i = 0; i < std::min(props->ndevs, NCCL_NET_MAX_DEVS_PER_NIC); ++i) {
    parts.push_back(props->devs[i]);
    ncclNetProperties_v12_t part{};
    const bool known = props->devs[i] >= 0 && props->devs[i] < physical &&
                       real()->getProperties(props->devs[i], &part) == ncclSuccess && part.name != nullptr;
    if (i > 0) name += '+';
    name += known ? std::string(part.name) : "dev" + std::to_string(props->devs[i]);
  }
  std::lock_guard<std::mutex> lock(gVirtualLock);
  gVirtualParts.push_back(parts);
  gVirtualNames.push_back(name);
  *d = physical + static_cast<int>(gVirtualParts.size()) - 1;
  return ncclSuccess;
}
// A vNIC's properties: its first part's, with its own name, speed and parts.
ncclResult_t virtualProperties(int dev, ncclNetProperties_v12_t* props) {
  const int physical = realDeviceCount();
  std::vector<int> parts;
  {
    std::lock_guard<std::mutex> lock(gVirtualLock);
    const size_t k = static_cast<size_t>(dev - physical);
    if (k >= gVirtualParts.size()) return ncclInvalidArgument;
    parts = gVirtualParts[k];
    props->name = const_cast<char*>(gVirtualNames[k].c_str());  // (char*: the v12 field is not const)
  }
  char* name = props->name;
  ncclNetProperties_v12_t part{};
  if (parts.empty() || real()->getProperties(parts[0], &part) != ncclSuccess) return ncclInternalError;
  *props = part;
  props->name = name;
  props->guid = 0x7600 + static_cast<uint64_t>(dev);
  props->speed = 0;
  for (int p : parts) {
    ncclNetProperties_v12_t each{};
    if (real()->getProperties(p, &each) == ncclSuccess) props->speed += each.speed;
  }
#ifdef NNS_BUG_VDEVICE_VPROPS_SELF
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
#else
  props->vProps.ndevs = static_cast<int>(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) props->vProps.devs[i] = parts[i];
#endif
  return ncclSuccess;
}
#define NNS_MAKE_VDEVICE makeVDevice
#else
#define NNS_MAKE_VDEVICE nullptr
#endif

#ifdef NNS_BUG_FINALIZE_FREES_SHARED
// Process-wide state (a device table, as most plugins keep) made by the first init and freed by any finalize: fine
// while NCCL called init once per process, wrong since ncclNet_v11, where each communicator has a context of its
// own and is finalized alone. The contexts still alive then fail their next listen or connect.
struct SharedState {
  int devices = 0;
};
SharedState* gShared = nullptr;
ncclResult_t sharedGone(const char* call) {
  std::fprintf(stderr, "WARN %s: %s: no device table (released)\n", NNS_BUG_NAME, call);
  return ncclInternalError;
}
#endif

#ifdef NNS_BUG_MAXRECVS_OVERCLAIM
// The device advertises the hardware's 16 sub-receives per grouped irecv, but the grouped path was written with
// fixed arrays of 8 and refuses more. (Built over the socket plugin, whose grouped receives go up to 8.)
constexpr int kAdvertisedRecvs = 16, kHandledRecvs = 8;
#endif

#if defined(NNS_BUG_PROPERTIES_REFUSED) || defined(NNS_BUG_CONNECT_FAILS)
ncclDebugLogger_t gLogger = nullptr;
#endif
#ifdef NNS_BUG_HANDLE_INDEX_ONLY
// The handle NCCL ships carries only a slot number in a table of this process's, which keeps the real one (a plugin
// that put a pointer to its listen state in the handle): it connects from this process and its forks, from no other.
constexpr uint32_t kIndexMagic = 0x1d0c5107;
std::mutex gHandleTableMutex;
std::vector<std::vector<unsigned char>> gHandleTable;  // by slot: the real plugin's handle
// The connector's copy of the real handle, per shipped handle (the real plugin may keep connect state in it).
std::map<void*, std::vector<unsigned char>> gConnectHandles;
void* realHandleOf(void* shipped) {
  std::lock_guard<std::mutex> lock(gHandleTableMutex);
  if (auto found = gConnectHandles.find(shipped); found != gConnectHandles.end()) return found->second.data();
  uint32_t magic = 0, slot = 0;
  std::memcpy(&magic, shipped, sizeof(magic));
  std::memcpy(&slot, static_cast<char*>(shipped) + 4, sizeof(slot));
  if (magic != kIndexMagic || slot >= gHandleTable.size()) return nullptr;
  return (gConnectHandles[shipped] = gHandleTable[slot]).data();
}
#endif
#ifdef NNS_BUG_CHUNKS_SWAPPED
// A receive of 8 KiB or more completes with its first two 4 KiB chunks in each other's place (a NIC or a
// reassembly that put two segments back in the wrong order): sizes, completions and every byte's value are right,
// only where they landed is not. A data pattern that repeats within 4 KiB cannot see it.
struct SwapTarget {
  int n = 0;
  void* data[8] = {};
  size_t sizes[8] = {};
};
std::mutex gSwapMutex;
std::map<void*, SwapTarget> gSwapTargets;  // by request
#endif
#ifdef NNS_BUG_GROUPED_TRUNCATION
// Grouped receives (n > 1) land in bounce buffers of at least 1 MiB, and test copies into the caller's buffers what
// fits and reports that as the size: a message larger than its buffer is cut to fit and completes (a size check
// written for one-buffer receives only, as the path of a message taken aside for a later receive can be). Over the
// socket plugin with grouped receives on (NNS_SOCKET_MAX_RECVS=8).
struct Bounced {
  int n = 0;
  void* user[8] = {};
  size_t posted[8] = {};
  std::vector<unsigned char> bounce[8];
};
std::mutex gBouncedMutex;
std::map<void*, std::unique_ptr<Bounced>> gBounced;  // by request; freed at exit with the map
#endif

#ifdef NNS_BUG_SEND_DONE_BEFORE_READ
// "Completion at post", as an RDMA plugin that signals a send's completion when its work request is queued: a
// send's test reports done at once, while the NIC (a progress thread here, driving the real send) still reads the
// user's buffer. NCCL rewrites that buffer (a FIFO slot) as soon as test says done, so the receiver gets bytes of the
// next message. Only sends larger than the room in the connection show it (the real plugin copies what fits at isend).
std::mutex gEarlyLock;                // over every real call of a send: the progress thread makes them too
std::map<void*, size_t> gEarlySends;  // requests isend gave, not yet reported, with their size
std::vector<void*> gStillReading;     // real sends reported done whose bytes are still being read
bool gEarlyThread = false;
void driveStillReading() {  // under gEarlyLock
  for (auto it = gStillReading.begin(); it != gStillReading.end();) {
    int done = 0, size = 0;
    if (real()->test(*it, &done, &size) != ncclSuccess || done)
      it = gStillReading.erase(it);
    else
      ++it;
  }
}
void startEarlyThread() {  // under gEarlyLock
  if (gEarlyThread) return;
  gEarlyThread = true;
  static bool atFork = [] {
    pthread_atfork([] { gEarlyLock.lock(); }, [] { gEarlyLock.unlock(); },
                   [] {
                     gStillReading.clear();  // the parent's
                     gEarlySends.clear();
                     gEarlyThread = false;
                     gEarlyLock.unlock();
                   });
    return true;
  }();
  (void)atFork;
  std::thread([] {
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(gEarlyLock);
        driveStillReading();
      }
      usleep(200);
    }
  }).detach();
}
#endif

#ifdef NNS_BUG_SEND_BUFFER_SCRIBBLED
// The send path stamps its sequence number into the first 8 bytes of the user's send buffer once the send is done
// (a debugging aid left on, or a header written in place to save a gather entry and never restored). NCCL sends from
// buffers it still reads: a user's const sendbuff, an in-place collective's output.
std::mutex gScribbleLock;
std::map<void*, std::pair<unsigned char*, size_t>> gScribbleSends;  // send request -> its buffer
uint64_t gScribbleSequence = 0x5e00;
#endif

#if defined(NNS_BUG_RECV_WRITES_PAST_BUFFER) || defined(NNS_BUG_RECV_DONE_BEFORE_DATA) || \
    defined(NNS_BUG_LARGE_MESSAGE_SHIFTED) || defined(NNS_BUG_GROUPED_SIZES_FIRST_ONLY)
// The receives in flight: their buffers, posted sizes and comm, for the bugs that act at a receive's completion.
struct PostedRecv {
  void* comm = nullptr;
  int n = 0;
  unsigned char* data[8] = {};
  size_t posted[8] = {};
};
std::mutex gPostedLock;
std::map<void*, PostedRecv> gPostedRecvs;
void notePostedRecv(void* comm, int n, void** data, size_t* sizes, void* request) {
  if (request == nullptr || n < 1 || n > 8) return;
  PostedRecv posted{comm, n, {}, {}};
  for (int i = 0; i < n; ++i) posted.data[i] = static_cast<unsigned char*>(data[i]), posted.posted[i] = sizes[i];
  std::lock_guard<std::mutex> lock(gPostedLock);
  gPostedRecvs[request] = posted;
}
// The receive `request` was, once its test ended it (done or failed); false for a send.
bool takePostedRecv(void* request, PostedRecv* out) {
  std::lock_guard<std::mutex> lock(gPostedLock);
  auto found = gPostedRecvs.find(request);
  if (found == gPostedRecvs.end()) return false;
  *out = found->second;
  gPostedRecvs.erase(found);
  return true;
}
#endif

#ifdef NNS_BUG_RECV_DONE_BEFORE_DATA
// The completion is reported before the last bytes of the message are in the buffer (a completion polled before the
// data's last write is visible: a missing fence, or a flush skipped): the last 64 bytes land at the plugin's
// next call. NCCL hands the buffer to the GPU, or to the user, as soon as test says done.
struct LateTail {
  unsigned char* at;
  std::vector<unsigned char> bytes;
};
std::vector<LateTail> gLateTails;  // under gPostedLock
void landLateTails() {             // at the plugin's next receive or test: too late for the host, which read the buffer
  std::lock_guard<std::mutex> lock(gPostedLock);
  for (auto& tail : gLateTails) std::memcpy(tail.at, tail.bytes.data(), tail.bytes.size());
  gLateTails.clear();
}
#endif

#ifdef NNS_BUG_SEND_STALLS_WHEN_IDLE
// Sends are copied into the plugin's queue and complete at once (an eager protocol: the user's buffer is free), but
// nothing moves the queue except the plugin's own calls: there is no progress thread, and the queue drains a little
// at each isend, irecv and test (and wholly at closeSend). NCCL's proxy stops calling the plugin once its operations
// are done: the last messages of a step stay queued until the next collective, which waits for them.
struct StalledSend {
  std::vector<unsigned char> bytes;
  size_t size = 0;
  int tag = 0;
  void* mhandle = nullptr;
  void* request = nullptr;
};
std::mutex gStallLock;
std::map<void*, std::deque<std::unique_ptr<StalledSend>>> gStalled;  // send comm -> its queue, oldest first
std::map<void*, size_t> gStallRequests;                              // requests isend gave (complete), with size
// One pass over every queue: test the real sends on the wire, post what waits (in order). Under gStallLock.
void driveStalled() {
  for (auto& [comm, queue] : gStalled) {
    for (auto& send : queue) {
      if (send->request == nullptr) {
        if (send->mhandle == nullptr &&
            real()->regMr(comm, send->bytes.data(), send->bytes.size(), NCCL_PTR_HOST, &send->mhandle) != ncclSuccess)
          break;
        if (real()->isend(comm, send->bytes.data(), send->size, send->tag, send->mhandle, nullptr, &send->request) !=
                ncclSuccess ||
            send->request == nullptr)
          break;
      }
    }
    while (!queue.empty() && queue.front()->request != nullptr) {
      int done = 0, size = 0;
      ncclResult_t tested = real()->test(queue.front()->request, &done, &size);
      if (tested == ncclSuccess && !done) break;
      real()->deregMr(comm, queue.front()->mhandle);
      queue.pop_front();
    }
  }
}
#endif

#ifdef NNS_BUG_COMM_IDS_NEVER_REUSED
// Each connection gets an 8-bit id from a counter that never takes back the ids of closed connections (a wire header
// with an 8-bit connection field): the 256th receive comm the process ever accepts fails, however few are open. A
// job that builds communicators again and again (splits, one per pipeline stage) gets there.
std::atomic<int> gConnectionIds{0};
#endif

#ifdef NNS_BUG_OVERLAP_REG_REFUSED
// Registrations are kept per comm in an interval map that refuses a range overlapping one already registered (written
// for NCCL's own buffers, which never overlap). NCCL also registers user buffers (ncclCommRegister, user-buffer
// registration of p2p and collectives), which overlap each other and its own.
std::mutex gRangesLock;
std::map<void*, std::pair<void*, std::pair<uintptr_t, uintptr_t>>> gRanges;  // mhandle -> comm, [begin, end)
#endif

#ifdef NNS_BUG_CONNECT_RESTARTS
// connect keeps its in-progress state in a local, not in the handle's tail: each call that returns "not yet" forgets
// the attempt it started, and the next call starts another. The listener then holds one connection per call (NCCL
// calls connect until it returns a comm), accept hands out the first, and the connector's comm is the last.
#endif

#ifdef NNS_BUG_ISEND_BLOCKS
// A rendezvous send done synchronously: isend waits inside the call until the message has left (the receiver posted
// its receive and took the data), and returns a request that is complete already. NCCL's one proxy thread is then
// held in isend, and stops driving every other comm (the receive the peer's send waits on): a ring deadlocks.
std::mutex gFinishedLock;
std::map<void*, size_t> gFinishedSends;  // requests isend gave (complete), with their size
#endif

#ifdef NNS_BUG_IRECV_NULL_BUT_POSTED
// The receive side of NULL_REQUEST_BUT_SENT: a receive queue whose "full" check runs after the post. Every fifth irecv
// posts the receive and then answers NULL ("not now"): the host posts it again, and the receive it never got takes
// the next message into the buffer, the host's own the one after. The lost requests are collected here.
std::mutex gRecvOrphansLock;
std::vector<std::pair<void*, void*>> gRecvOrphans;  // comm, request
int gRecvCalls = 0;
#endif

ncclResult_t init(void** ctx, uint64_t commId, ncclNetCommConfig_v12_t* config, ncclDebugLogger_t logger,
                  ncclProfilerCallback_t profiler) {
  if (real() == nullptr) {
    std::fprintf(stderr, "WARN %s: cannot open %s: %s\n", NNS_BUG_NAME, NNS_REAL_PLUGIN, dlerror());
    return ncclSystemError;
  }
#ifdef NNS_BUG_CRASH_IN_INIT
  // A NULL dereference on a host without the hardware the plugin expects: NCCL dies in ncclNetPluginInit.
  raise(SIGSEGV);
#endif
#ifdef NNS_BUG_HANG_IN_INIT
  // init waits for a device or daemon that never answers: NCCL hangs in ncclNetPluginInit.
  for (;;) pause();
#endif
#ifdef NNS_BUG_FINALIZE_FREES_SHARED
  if (gShared == nullptr) gShared = new SharedState{1};
#endif
#ifdef NNS_BUG_FORKED_HELPER
  // Not a bug under NCCL: a monitor process forked at init without an exec, which keeps every descriptor of the
  // process open, close-on-exec or not, for as long as it lives (here up to 5 minutes). nccl-net-check read the
  // verdict pipe until end of file once the rule's process had ended, and so waited for this helper.
  // Its standard streams go to /dev/null, as a daemon's do (held, the test runner's output pipe stayed open).
  if (fork() == 0) {
    int null = open("/dev/null", O_RDWR);
    for (int fd : {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO}) dup2(null, fd);
    for (int i = 0; i < 300; ++i) sleep(1);
    _exit(0);
  }
#endif
#if defined(NNS_BUG_PROPERTIES_REFUSED) || defined(NNS_BUG_CONNECT_FAILS)
  gLogger = logger;
#endif
#ifdef NNS_NCCL_LIKE
  std::printf("%s: init on stdout\n", NNS_BUG_NAME);  // harmless under NCCL; must not spoil nccl-net-check --json
  std::fflush(stdout);
  // A helper process started at init, as a plugin starts a daemon of its own: it inherits every descriptor not
  // marked close-on-exec, and must not hold a tool's pipes open (nccl-net-check read every rule as hung, and each
  // nccl-net-info probe waited out its timeout). Once per process; it ends by itself.
  // Its standard streams go to /dev/null, as a daemon's do (held, a test runner's output pipe stays open until it
  // ends).
  static const bool helperStarted = [] {
    posix_spawn_file_actions_t streams;
    posix_spawn_file_actions_init(&streams);
    for (int fd : {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO})
      posix_spawn_file_actions_addopen(&streams, fd, "/dev/null", fd == STDIN_FILENO ? O_RDONLY : O_WRONLY, 0);
    pid_t helper = 0;
    char name[] = "sleep", seconds[] = "30";
    char* argv[] = {name, seconds, nullptr};
    const bool started = posix_spawnp(&helper, "sleep", &streams, nullptr, argv, environ) == 0;
    posix_spawn_file_actions_destroy(&streams);
    return started;
  }();
  (void)helperStarted;
#endif
  return real()->init(ctx, commId, config, logger, profiler);
}
ncclResult_t devices(int* ndev) {
#ifdef NNS_BUG_SECOND_DEVICE_UNREACHABLE
  ncclResult_t counted = real()->devices(ndev);
  gRealDevices = *ndev;
  *ndev += 1;
  return counted;
#endif
#ifdef NNS_BUG_CRASH_IN_PROPERTIES
  // A second device counted but never set up: its properties are read through a NULL table entry.
  ncclResult_t counted = real()->devices(ndev);
  *ndev += 1;
  return counted;
#elif defined(NNS_VDEVICES) && !defined(NNS_BUG_VDEVICE_NOT_COUNTED)
  ncclResult_t counted = real()->devices(ndev);
  std::lock_guard<std::mutex> lock(gVirtualLock);
  *ndev += static_cast<int>(gVirtualParts.size());
  return counted;
#else
  return real()->devices(ndev);
#endif
}
ncclResult_t getProperties(int dev, ncclNetProperties_v12_t* props) {
#ifdef NNS_BUG_PROPERTIES_REFUSED
  // Its device is listed but cannot be described (a port whose link is down, say): it says why in a WARN and fails.
  if (gLogger != nullptr)
    gLogger(NCCL_LOG_WARN, NCCL_NET, __FILE__, __LINE__, "NET/%s : port %d of device %d has no link", NNS_BUG_NAME, 1,
            dev);
  return ncclInternalError;
#endif
#ifdef NNS_BUG_CRASH_IN_PROPERTIES
  if (dev > 0) raise(SIGSEGV);
#endif
#ifdef NNS_BUG_SECOND_DEVICE_UNREACHABLE
  if (dev >= gRealDevices && dev > 0) {  // the extra port: described like the first, under a name of its own
    ncclResult_t described = real()->getProperties(0, props);
    static char name[64];
    std::snprintf(name, sizeof(name), "%s-port%d", props->name != nullptr ? props->name : "dev", dev);
    props->name = name;
    return described;
  }
#endif
#ifdef NNS_VDEVICES
  if (dev >= realDeviceCount()) return virtualProperties(dev, props);
#endif
  ncclResult_t result = real()->getProperties(dev, props);
#ifdef NNS_BUG_PROPERTIES_DRIFT
  // The guid is minted at each call from a counter (meant to run once per device, at init): every getProperties
  // describes a NIC NCCL has never seen. NCCL reads a device's properties at topology detection and again when it
  // connects, in each process, and keys the NIC by them (ports of one NIC share a guid).
  static std::atomic<uint64_t> minted{0};
  if (result == ncclSuccess) props->guid = 0x6e6e730000000000ull + ++minted;
#endif
#ifdef NNS_BUG_REG_IS_GLOBAL_GARBAGE
  props->regIsGlobal = 10000;  // another field's value, as from a struct of another version filled through this one
#endif
#ifdef NNS_SMALL_MESSAGES
  props->maxCollBytes = kLargestMessage;
  props->maxP2pBytes = kLargestMessage;
#endif
#ifdef NNS_BUG_MAXRECVS_OVERCLAIM
  props->maxRecvs = kAdvertisedRecvs;
#endif
#ifdef NNS_BUG_TAGS_IGNORED
  props->maxRecvs = kMaxRecvs;
#endif
#ifdef NNS_BUG_DANGLING_NAME
  // The name put together in a local std::string and its c_str() handed out: short, so it lives in the string object
  // on this call's stack frame, and reads right until the caller's next calls use that stack again.
  if (result == ncclSuccess) {
    std::string local = "shm" + std::to_string(dev) + "-port1";
    props->name = local.data();  // (char*: the v12 field is not const)
  }
#endif
#ifdef NNS_BUG_NAN_LATENCY
  // A latency computed from a measurement that never ran: 0.0 / 0.0. NCCL sums latencies into its model.
  if (result == ncclSuccess) props->latency = std::numeric_limits<float>::quiet_NaN();
#endif
#ifdef NNS_BUG_SPEED_IN_GBPS
  // Gb/s and nanoseconds where NCCL reads Mb/s and microseconds: values NCCL accepts (so no rule fails), that rank
  // a 100 Gb/s NIC as 100 Mb/s. properties-sane notes them.
  props->speed = 100;
  props->latency = 5000;
#endif
#ifdef NNS_BUG_INSANE_PROPERTIES
  // A port from an old raw-table plugin to v12: it clears the struct and fills only the fields v8 had, leaving
  // maxP2pBytes, vProps, maxMultiRequestSize and railId/planeId at 0.
  ncclNetProperties_v12_t v8Fields = *props;
  std::memset(props, 0, sizeof(*props));
  props->name = v8Fields.name;
  props->pciPath = v8Fields.pciPath;
  props->guid = v8Fields.guid;
  props->ptrSupport = v8Fields.ptrSupport;
  props->regIsGlobal = v8Fields.regIsGlobal;
  props->speed = v8Fields.speed;
  props->port = v8Fields.port;
  props->latency = v8Fields.latency;
  props->maxComms = v8Fields.maxComms;
  props->maxRecvs = v8Fields.maxRecvs;
  props->netDeviceType = v8Fields.netDeviceType;
  props->netDeviceVersion = v8Fields.netDeviceVersion;
#endif
#ifdef NNS_BUG_EMPTY_NAME
  // The name is "": what a pointer into a temporary std::string often reads as once the string is gone. NCCL keys
  // NICs by name, and its logs would show nothing.
  if (result == ncclSuccess) props->name = const_cast<char*>("");
#endif
#ifdef NNS_BUG_GARBLED_NAME
  // The name points at bytes that are not text: a buffer filled by a raw copy of a firmware string, say. A 0xff
  // byte is never valid UTF-8, and 0x07 rings the terminal's bell.
  static char garbled[8][24];
  if (result == ncclSuccess && dev >= 0 && dev < 8) {
    std::snprintf(garbled[dev], sizeof(garbled[dev]), "shm\xff\x07%d", dev);
    props->name = garbled[dev];
  }
#endif
  return result;
}

#if defined(NNS_BUG_STRANGER_FAILS_ACCEPT) || defined(NNS_BUG_BLOCKING_CLOSE_LISTEN)
// A listening TCP socket on 127.0.0.1 (an ephemeral port), as a plugin's side channel; -1 on failure.
int sideListener(int flags) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | flags, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 && ::listen(fd, 4) == 0)
    return fd;
  if (fd >= 0) close(fd);
  return -1;
}
#endif

ncclResult_t listen(void* ctx, int dev, void* handle, void** listenComm) {
#ifdef NNS_VDEVICES
  dev = physicalDevice(dev);
#endif
#ifdef NNS_BUG_FINALIZE_FREES_SHARED
  if (gShared == nullptr) return sharedGone("listen");
#endif
#ifdef NNS_BUG_SECOND_DEVICE_UNREACHABLE
  if (dev >= gRealDevices && dev > 0) {
    std::fprintf(stderr, "WARN %s: listen: no address for device %d\n", NNS_BUG_NAME, dev);
    return ncclSystemError;
  }
#endif
#ifdef NNS_BUG_HANDLE_UNWRITTEN
  // The address goes into a handle of the plugin's own, which is never copied into the one NCCL ships.
  unsigned char own[NCCL_NET_HANDLE_MAXSIZE];
  handle = own;
#endif
  ncclResult_t result = real()->listen(ctx, dev, handle, listenComm);
#ifdef NNS_BUG_HANDLE_INDEX_ONLY
  if (result == ncclSuccess) {
    std::lock_guard<std::mutex> lock(gHandleTableMutex);
    auto* bytes = static_cast<unsigned char*>(handle);
    gHandleTable.emplace_back(bytes, bytes + NCCL_NET_HANDLE_MAXSIZE);
    const auto slot = static_cast<uint32_t>(gHandleTable.size() - 1);
    std::memset(bytes, 0, NCCL_NET_HANDLE_MAXSIZE);
    std::memcpy(bytes, &kIndexMagic, sizeof(kIndexMagic));
    std::memcpy(bytes + 4, &slot, sizeof(slot));
  }
#endif
#ifdef NNS_BUG_HANDLE_OVERFLOW
  std::memset(static_cast<char*>(handle) + NCCL_NET_HANDLE_MAXSIZE, 0x42, 16);  // 144-byte handle
#endif
#ifdef NNS_BUG_STRANGER_FAILS_ACCEPT
  if (result == ncclSuccess) {
    int fd = sideListener(SOCK_NONBLOCK);
    if (fd < 0) return ncclSystemError;
    gSideChannels[*listenComm] = fd;
  }
#endif
#ifdef NNS_BUG_RECV_NEEDS_LISTENER
  if (result == ncclSuccess) {
    const int epoll = epoll_create1(EPOLL_CLOEXEC);
    if (epoll < 0) return ncclSystemError;
    std::lock_guard<std::mutex> lock(gEpollLock);
    gListenerEpoll[*listenComm] = epoll;
  }
#endif
#ifdef NNS_BUG_BLOCKING_CLOSE_LISTEN
  if (result == ncclSuccess) {
    int fd = sideListener(0);
    if (fd < 0) return ncclSystemError;
    auto* helper = new ListenHelper{fd, {}};
    helper->thread = std::thread([fd] {
      int peer = accept(fd, nullptr, nullptr);  // blocks until someone connects to the side socket: nobody does
      if (peer >= 0) close(peer);
    });
    gListenHelpers[*listenComm] = helper;
  }
#endif
  return result;
}
#ifdef NNS_BUG_EXIT_IN_SEND_TEST
std::atomic<bool> gConnected{false};  // this process made a send comm: it is the sending side
#endif
ncclResult_t connect(void* ctx, int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v12_t** devComm) {
#ifdef NNS_VDEVICES
  dev = physicalDevice(dev);
#endif
#ifdef NNS_BUG_HANDLE_INDEX_ONLY
  handle = realHandleOf(handle);
  if (handle == nullptr) {
    std::fprintf(stderr, "WARN %s: connect: the handle names no listener of this process\n", NNS_BUG_NAME);
    return ncclInvalidArgument;
  }
#endif
#ifdef NNS_BUG_CONNECT_FAILS
  // listen wrote a raw address where connect expects its own encoding (or the two disagree about the handle's
  // layout): every connect fails at once, with a WARN, and the listener waits for a connection that never comes.
  if (gLogger != nullptr)
    gLogger(NCCL_LOG_WARN, NCCL_NET, __FILE__, __LINE__, "NET/%s : connect: the handle is not one of ours",
            NNS_BUG_NAME);
  return ncclInvalidArgument;
#endif
#ifdef NNS_BUG_EXIT_IN_SEND_TEST
  ncclResult_t connected = real()->connect(ctx, dev, handle, sendComm, devComm);
  if (connected == ncclSuccess && *sendComm != nullptr) gConnected = true;
  return connected;
#endif
#ifdef NNS_NCCL_LIKE
  *devComm = nullptr;  // NCCL's proxy always passes a place for it
#endif
#ifdef NNS_BUG_FINALIZE_FREES_SHARED
  if (gShared == nullptr) return sharedGone("connect");
#endif
#ifdef NNS_BUG_BLOCKING_CONNECT
  for (;;) {  // waits for the peer to accept instead of returning NULL (a socket connect left in blocking mode)
    ncclResult_t result = real()->connect(ctx, dev, handle, sendComm, devComm);
    if (result != ncclSuccess || *sendComm != nullptr) return result;
    usleep(1000);
  }
#else
#ifdef NNS_BUG_DIES_IN_CONNECT
  dieIfDyingRank();
#endif
#ifdef NNS_BUG_LEAKED_ABANDONED_CONNECT
  // A connect starts on a handle whose tail (the real plugin's connect stage) is still zero.
  static const unsigned char kZeroTail[16] = {};
  const bool fresh =
      std::memcmp(static_cast<unsigned char*>(handle) + NCCL_NET_HANDLE_MAXSIZE - 16, kZeroTail, 16) == 0;
#endif
  ncclResult_t result = real()->connect(ctx, dev, handle, sendComm, devComm);
#ifdef NNS_BUG_LEAKED_ABANDONED_CONNECT
  {
    std::lock_guard<std::mutex> lock(gConnectingLock);
    if (result == ncclSuccess && *sendComm == nullptr) {
      if (fresh) gConnecting[handle] = eventfd(0, EFD_CLOEXEC);  // a new connect: whatever was kept here is forgotten
    } else if (auto connecting = gConnecting.find(handle); connecting != gConnecting.end()) {
      close(connecting->second);
      gConnecting.erase(connecting);
    }
  }
#endif
#ifdef NNS_BUG_CONNECT_RESTARTS
  if (result == ncclSuccess &&
      *sendComm == nullptr)  // the attempt's state (the tail) forgotten: the next call restarts
    std::memset(static_cast<unsigned char*>(handle) + NCCL_NET_HANDLE_MAXSIZE - 16, 0, 16);
#endif
#ifdef NNS_BUG_HANDLE_UNCHECKED
  if (result == ncclInternalError) {
    *sendComm = nullptr;  // "not yet": the listener may still come up
    return ncclSuccess;
  }
#endif
  return result;
#endif
}
#ifdef NNS_BUG_COMM_LIMIT
constexpr int kCommTable = 8;
std::atomic<int> gOpenRecvComms{0};
#endif
ncclResult_t accept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v12_t** devComm) {
#ifdef NNS_NCCL_LIKE
  *devComm = nullptr;
#endif
#ifdef NNS_BUG_DIES_IN_CONNECT
  dieIfDyingRank();
#endif
#ifdef NNS_BUG_BLOCKING_ACCEPT
  // $NNS_TEST_ACCEPT_STUCK (a test double, set by a test once its communicator is made): an accept that never
  // returns, for a caller whose own call is stuck inside the plugin.
  while (std::getenv("NNS_TEST_ACCEPT_STUCK") != nullptr) sleep(1000);
  for (;;) {  // waits for a connection instead of returning NULL
    ncclResult_t result = real()->accept(listenComm, recvComm, devComm);
    if (result != ncclSuccess || *recvComm != nullptr) return result;
    usleep(1000);
  }
#else
#ifdef NNS_BUG_STRANGER_FAILS_ACCEPT
  auto side = gSideChannels.find(listenComm);
  if (side != gSideChannels.end()) {
    int peer = accept4(side->second, nullptr, nullptr, SOCK_CLOEXEC);
    if (peer >= 0) {
      uint32_t magic = 0;
      timeval wait{0, 200000};
      setsockopt(peer, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
      ssize_t got = recv(peer, &magic, sizeof(magic), MSG_WAITALL);
      close(peer);
      if (got == static_cast<ssize_t>(sizeof(magic)) && magic != kSideMagic) return ncclRemoteError;
    }
  }
#endif
#ifdef NNS_BUG_COMM_LIMIT
  // A fixed table of 8 receive comms behind a maxComms of 1024 (copied from the reference plugin it started from):
  // NCCL's 16 to 64 channels per peer run out of it.
  if (gOpenRecvComms.load() >= kCommTable) {
    std::fprintf(stderr, "WARN %s: accept: all %d comm slots in use\n", NNS_BUG_NAME, kCommTable);
    return ncclSystemError;
  }
#endif
#ifdef NNS_BUG_COMM_IDS_NEVER_REUSED
  if (gConnectionIds.load() >= 255) {
    std::fprintf(stderr, "WARN %s: accept: no connection id left (255 handed out)\n", NNS_BUG_NAME);
    return ncclSystemError;
  }
#endif
  ncclResult_t result = real()->accept(listenComm, recvComm, devComm);
#ifdef NNS_BUG_COMM_LIMIT
  if (result == ncclSuccess && *recvComm != nullptr) ++gOpenRecvComms;
#endif
#ifdef NNS_BUG_COMM_IDS_NEVER_REUSED
  if (result == ncclSuccess && *recvComm != nullptr) ++gConnectionIds;
#endif
#ifdef NNS_BUG_LEAKED_COMM_FD
  if (result == ncclSuccess && *recvComm != nullptr) gWakeFds[*recvComm] = eventfd(0, EFD_CLOEXEC);
#endif
#ifdef NNS_BUG_LEAKED_PENDING_CLOSE
  if (result == ncclSuccess && *recvComm != nullptr) {
    void* window = mmap(nullptr, kStagingBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (window == MAP_FAILED) return ncclSystemError;
    std::lock_guard<std::mutex> lock(gPendingMutex);
    gStagingWindows[*recvComm] = window;
  }
#endif
#ifdef NNS_BUG_LEAKED_COMM_MAPPING
  // Each receive comm maps a shared staging window at accept that closeRecv never unmaps (the munmap forgotten): no
  // descriptor is left behind, only memory, 64 KiB per comm here (an RDMA plugin's would be megabytes).
  if (result == ncclSuccess && *recvComm != nullptr &&
      mmap(nullptr, 64u << 10, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0) == MAP_FAILED)
    return ncclSystemError;
#endif
#ifdef NNS_BUG_GLOBAL_RECV_COMM
  if (result == ncclSuccess && *recvComm != nullptr) gLastRecvComm = *recvComm;
#endif
#ifdef NNS_BUG_RECV_NEEDS_LISTENER
  if (result == ncclSuccess && *recvComm != nullptr) {
    std::lock_guard<std::mutex> lock(gEpollLock);
    gRecvEpoll[*recvComm] = gListenerEpoll.at(listenComm);
  }
#endif
#ifdef NNS_BUG_CRASH_ON_CLOSE
  if (result == ncclSuccess && *recvComm != nullptr) {
    void* page = mmap(nullptr, kPageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) return ncclSystemError;
    gRecvStates[*recvComm] = RecvState{static_cast<uint32_t*>(page), {}};
  }
#endif
  return result;
#endif
}
#ifdef NNS_NCCL_LIKE
// Each live registration's range, as an RDMA NIC's memory region bounds what its key reaches: a send or receive
// outside the region its handle names fails there (a local protection error), and so it does here. A handle
// deregistered twice or never given is an error too, and so is a comm closed with handles still registered on it:
// NCCL deregisters each before it closes the comm, and a plugin may free the comm's protection domain at close.
struct Region {
  const unsigned char* data;
  size_t size;
  void* comm;
};
std::mutex gRegionsMutex;
std::map<void*, Region> gRegions;
void recordRegion(void* comm, void* mhandle, const void* data, size_t size) {
  std::lock_guard<std::mutex> lock(gRegionsMutex);
  gRegions[mhandle] = {static_cast<const unsigned char*>(data), size, comm};
}
// Before a close: the handles still registered on `comm`, deregistered here (so the real plugin frees them), and
// whether there were none.
bool noRegionsLeft(const char* call, void* comm) {
  std::vector<void*> left;
  {
    std::lock_guard<std::mutex> lock(gRegionsMutex);
    for (auto it = gRegions.begin(); it != gRegions.end();) {
      if (it->second.comm != comm) {
        ++it;
        continue;
      }
      left.push_back(it->first);
      it = gRegions.erase(it);
    }
  }
  for (void* mhandle : left) real()->deregMr(comm, mhandle);
  if (left.empty()) return true;
  std::fprintf(stderr, "WARN %s: %s with %zu memory handle(s) still registered on the comm\n", NNS_BUG_NAME, call,
               left.size());
  return false;
}
bool withinRegion(const char* call, void* mhandle, const void* data, size_t size) {
  if (size == 0) return true;  // nothing read or written
  std::lock_guard<std::mutex> lock(gRegionsMutex);
  auto region = gRegions.find(mhandle);
  const auto* bytes = static_cast<const unsigned char*>(data);
  if (region != gRegions.end() && bytes >= region->second.data && size <= region->second.size &&
      static_cast<size_t>(bytes - region->second.data) <= region->second.size - size)
    return true;
  if (region == gRegions.end())
    std::fprintf(stderr, "WARN %s: %s with a memory handle that is not registered\n", NNS_BUG_NAME, call);
  else
    std::fprintf(stderr, "WARN %s: %s of %zu bytes at %p outside its handle's region (%zu bytes at %p)\n", NNS_BUG_NAME,
                 call, size, data, region->second.size, static_cast<const void*>(region->second.data));
  return false;
}
#endif
ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
#ifdef NNS_BUG_READS_DEREGISTERED
  {
    void* realHandle = nullptr;
    ncclResult_t registered = real()->regMr(comm, data, size, type, &realHandle);
    if (registered != ncclSuccess) return registered;
    void* page = mmap(nullptr, kRecordBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) {
      real()->deregMr(comm, realHandle);
      return ncclSystemError;
    }
    *mhandle = new (page) PagedRegistration{realHandle, 0};
    return ncclSuccess;
  }
#endif
#ifdef NNS_BUG_CLOSE_DROPS_QUEUED
  {
    std::lock_guard<std::mutex> lock(gQueueLock);
    return real()->regMr(comm, data, size, type, mhandle);
  }
#endif
#ifdef NNS_BUG_LEAKED_MHANDLE
  void* realHandle = nullptr;
  ncclResult_t result = real()->regMr(comm, data, size, type, &realHandle);
  if (result != ncclSuccess) return result;
  size_t pages = (size + 4095) / 4096;
  auto* registration = new Registration{realHandle, new PageDescriptor[pages]};
  for (size_t i = 0; i < pages; ++i)
    registration->pages[i] = PageDescriptor{reinterpret_cast<uint64_t>(data) + i * 4096, 0, {}};
  *mhandle = registration;
  return ncclSuccess;
#elif defined(NNS_BUG_REGISTRATION_CACHE_UNCOUNTED)
  std::lock_guard<std::mutex> lock(gCacheMutex);
  auto cached = gCache.find({data, size});
  if (cached != gCache.end()) {
    *mhandle = cached->second;  // the bug: no reference taken
    return ncclSuccess;
  }
  void* realHandle = nullptr;
  ncclResult_t result = real()->regMr(comm, data, size, type, &realHandle);
  if (result != ncclSuccess) return result;
  auto* region = new CachedRegion{realHandle, comm, true};
  gCache[{data, size}] = region;
  *mhandle = region;
  return ncclSuccess;
#else
#ifdef NNS_SLOW_REGISTRATION
  // 50 us per registration, as a plugin that pins and maps pages takes (ibv_reg_mr of 1 MiB: tens of microseconds
  // and more).
  for (const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
       std::chrono::steady_clock::now() < until;) {
  }
#endif
#ifdef NNS_BUG_OVERLAP_REG_REFUSED
  const auto begin = reinterpret_cast<uintptr_t>(data), end = begin + size;
  {
    std::lock_guard<std::mutex> lock(gRangesLock);
    for (const auto& [handle, range] : gRanges)
      if (range.first == comm && begin < range.second.second && range.second.first < end) {
        std::fprintf(stderr, "WARN %s: regMr of %zu bytes at %p overlaps a registration of this comm\n", NNS_BUG_NAME,
                     size, data);
        return ncclSystemError;
      }
  }
#endif
  ncclResult_t result = real()->regMr(comm, data, size, type, mhandle);
#ifdef NNS_BUG_REGISTRATION_LEAKS_HEAP
  // A per-registration record (1 KB: a page list, a cache entry) allocated here and never freed by deregMr: 2 MB over
  // 2000 registrations, which resident memory alone does not show.
  if (result == ncclSuccess) {
    static std::vector<char*>* records = new std::vector<char*>;
    records->push_back(static_cast<char*>(std::malloc(1000)));
    std::memset(records->back(), 1, 1000);
  }
#endif
#ifdef NNS_BUG_OVERLAP_REG_REFUSED
  if (result == ncclSuccess) {
    std::lock_guard<std::mutex> lock(gRangesLock);
    gRanges[*mhandle] = {comm, {begin, end}};
  }
#endif
#ifdef NNS_BUG_OFFSET_IN_REGION_IGNORED
  if (result == ncclSuccess) gRegionStart[*mhandle] = data;
#endif
#ifdef NNS_NCCL_LIKE
  if (result == ncclSuccess) recordRegion(comm, *mhandle, data, size);
#endif
  return result;
#endif
}
ncclResult_t regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle) {
  ncclResult_t result = real()->regMrDmaBuf(comm, data, size, type, offset, fd, mhandle);
#ifdef NNS_NCCL_LIKE
  if (result == ncclSuccess) recordRegion(comm, *mhandle, data, size);
#endif
  return result;
}
#ifdef NNS_BUG_LEAKED_MHANDLE
void* realMhandle(void* mhandle) {
  return mhandle != nullptr ? static_cast<Registration*>(mhandle)->realHandle : nullptr;
}
#endif
ncclResult_t deregMr(void* comm, void* mhandle) {
#ifdef NNS_BUG_READS_DEREGISTERED
  {
    auto* record = static_cast<PagedRegistration*>(mhandle);
    ncclResult_t result = real()->deregMr(comm, record->realHandle);
    munmap(record, kRecordBytes);  // the bug: a pending receive still holds it
    return result;
  }
#endif
#ifdef NNS_BUG_CLOSE_DROPS_QUEUED
  {
    std::lock_guard<std::mutex> lock(gQueueLock);
    return real()->deregMr(comm, mhandle);
  }
#endif
#ifdef NNS_BUG_LEAKED_MHANDLE
  auto* registration = static_cast<Registration*>(mhandle);
  ncclResult_t result = real()->deregMr(comm, registration->realHandle);
  delete registration;  // registration->pages is never freed
  return result;
#elif defined(NNS_BUG_REGISTRATION_CACHE_UNCOUNTED)
  (void)comm;
  std::lock_guard<std::mutex> lock(gCacheMutex);
  auto* region = static_cast<CachedRegion*>(mhandle);
  if (!region->live) return ncclSuccess;  // released already, by another holder's deregMr
  region->live = false;                   // kept (never reused), so a stale handle reads as released
  for (auto it = gCache.begin(); it != gCache.end(); ++it)
    if (it->second == region) {
      gCache.erase(it);
      break;
    }
  return real()->deregMr(region->comm, region->real);
#else
#ifdef NNS_BUG_OVERLAP_REG_REFUSED
  {
    std::lock_guard<std::mutex> lock(gRangesLock);
    gRanges.erase(mhandle);
  }
#endif
#ifdef NNS_BUG_OFFSET_IN_REGION_IGNORED
  gRegionStart.erase(mhandle);
#endif
#ifdef NNS_NCCL_LIKE
  {
    std::lock_guard<std::mutex> lock(gRegionsMutex);
    if (gRegions.erase(mhandle) == 0) {
      std::fprintf(stderr, "WARN %s: deregMr of a memory handle that is not registered\n", NNS_BUG_NAME);
      return ncclInvalidArgument;
    }
  }
#endif
  return real()->deregMr(comm, mhandle);
#endif
}
#if defined(NNS_NCCL_LIKE) || defined(NNS_BUG_SEND_TEST_WRITES_SIZES)
std::mutex gSendsMutex;
std::set<void*> gSends;  // send requests in flight: their test leaves the size alone
#endif
#if defined(NNS_BUG_SEND_STALLS_WHEN_IDLE) || defined(NNS_BUG_ISEND_BLOCKS) || defined(NNS_BUG_CLOSE_DROPS_QUEUED)
// Sends the shim reports complete itself (queued or finished inside isend): a request of its own, kept in `completed`
// with its size until test reports it done and frees it. Under the lock that guards `completed`.
void* completedRequest(std::map<void*, size_t>& completed, size_t size) {
  auto* request = new char;
  completed[request] = size;
  return request;
}
bool reportCompleted(std::map<void*, size_t>& completed, void* request, int* done, int* sizes) {
  auto found = completed.find(request);
  if (found == completed.end()) return false;
  *done = 1;
  if (sizes != nullptr) sizes[0] = static_cast<int>(found->second);
  delete static_cast<char*>(request);
  completed.erase(found);
  return true;
}
#endif
ncclResult_t isend(void* comm, void* data, size_t size, int tag, void* mhandle, void* phandle, void** request) {
#ifdef NNS_BUG_SEND_DONE_BEFORE_READ
  {
    std::lock_guard<std::mutex> lock(gEarlyLock);
    startEarlyThread();
    ncclResult_t result = real()->isend(comm, data, size, tag, mhandle, phandle, request);
    if (result == ncclSuccess && *request != nullptr) gEarlySends[*request] = size;
    return result;
  }
#endif
#ifdef NNS_BUG_SEND_BUFFER_SCRIBBLED
  {
    ncclResult_t result = real()->isend(comm, data, size, tag, mhandle, phandle, request);
    if (result == ncclSuccess && *request != nullptr) {
      std::lock_guard<std::mutex> lock(gScribbleLock);
      gScribbleSends[*request] = {static_cast<unsigned char*>(data), size};
    }
    return result;
  }
#endif
#ifdef NNS_BUG_SEND_STALLS_WHEN_IDLE
  {
    (void)mhandle, (void)phandle;
    std::lock_guard<std::mutex> lock(gStallLock);
    auto send = std::make_unique<StalledSend>();
    send->bytes.assign(static_cast<unsigned char*>(data), static_cast<unsigned char*>(data) + size);
    send->bytes.resize(std::max<size_t>(size, 1));
    send->size = size;
    send->tag = tag;
    gStalled[comm].push_back(std::move(send));
    *request = completedRequest(gStallRequests, size);
    driveStalled();
    return ncclSuccess;
  }
#endif
#ifdef NNS_BUG_ISEND_BLOCKS
  {
    ncclResult_t result = real()->isend(comm, data, size, tag, mhandle, phandle, request);
    if (result != ncclSuccess || *request == nullptr) return result;
    int done = 0, sent = 0;
    while ((result = real()->test(*request, &done, &sent)) == ncclSuccess && !done) usleep(100);
    if (result != ncclSuccess) return result;
    std::lock_guard<std::mutex> lock(gFinishedLock);
    *request = completedRequest(gFinishedSends, size);
    return ncclSuccess;
  }
#endif
#ifdef NNS_BUG_CLOSE_DROPS_QUEUED
  {
    (void)mhandle, (void)phandle;
    std::lock_guard<std::mutex> lock(gQueueLock);
    auto send = std::make_unique<QueuedSend>();
    send->bytes.assign(static_cast<unsigned char*>(data), static_cast<unsigned char*>(data) + size);
    send->bytes.resize(std::max<size_t>(size, 1));
    send->size = size;
    send->tag = tag;
    gSendQueues[comm].waiting.push_back(std::move(send));
    *request = completedRequest(gEagerSends, size);
    startPacer();
    return ncclSuccess;
  }
#endif
#ifdef NNS_NCCL_LIKE
  if (mhandle == nullptr) {  // NCCL always passes the handle regMr gave; its IB plugin reads the lkey from it
    std::fprintf(stderr, "WARN %s: isend without a memory handle\n", NNS_BUG_NAME);
    return ncclInvalidArgument;
  }
  if (!withinRegion("isend", mhandle, data, size)) return ncclInvalidArgument;
  ncclResult_t sent = real()->isend(comm, data, size, tag, mhandle, phandle, request);
  if (sent == ncclSuccess && *request != nullptr) {
    std::lock_guard<std::mutex> lock(gSendsMutex);
    gSends.insert(*request);
  }
  return sent;
#endif
#ifdef NNS_BUG_LEAKED_MHANDLE
  mhandle = realMhandle(mhandle);
#endif
#ifdef NNS_BUG_READS_DEREGISTERED
  mhandle = realOfPaged(mhandle);
#endif
#ifdef NNS_BUG_REGISTRATION_CACHE_UNCOUNTED
  if (releasedRegion(mhandle)) {
    std::fprintf(stderr, "WARN %s: isend: local protection error (the region's memory key was released)\n",
                 NNS_BUG_NAME);
    return ncclSystemError;
  }
  mhandle = realOfCached(mhandle);
#endif
#ifdef NNS_SMALL_MESSAGES
  if (size > kLargestMessage) {
    std::fprintf(stderr, "WARN %s: isend of %zu bytes: messages are at most %zu (maxP2pBytes, maxCollBytes)\n",
                 NNS_BUG_NAME, size, kLargestMessage);
    return ncclInvalidArgument;
  }
#endif
#ifdef NNS_BUG_ZERO_BYTE_ELIDED
  if (size == 0) {
    *request = new char;  // a request of our own, completed by test at once
    gElidedSends.insert(*request);
    return ncclSuccess;
  }
#endif
#ifdef NNS_BUG_TAGS_IGNORED
  tag = 0;
#endif
#ifdef NNS_BUG_SIZE_FIELD_30_BITS
  size &= kSizeFieldMask;
#endif
#ifdef NNS_BUG_NULL_REQUEST_BUT_SENT
  {
    std::lock_guard<std::mutex> lock(gOrphansLock);
    for (auto it = gOrphanSends.begin(); it != gOrphanSends.end();) {
      int done = 0, sent = 0;
      if (real()->test(*it, &done, &sent) != ncclSuccess || done != 0)
        it = gOrphanSends.erase(it);
      else
        ++it;
    }
    ncclResult_t result = real()->isend(comm, data, size, tag, mhandle, phandle, request);
    if (result == ncclSuccess && *request != nullptr && ++gSendCalls % 5 == 0) {
      gOrphanSends.push_back(*request);
      *request = nullptr;
    }
    return result;
  }
#elif defined(NNS_BUG_NULL_REQUEST_FOREVER)
  if (gSendPoolExhausted) {
    *request = nullptr;
    return ncclSuccess;
  }
  ncclResult_t result = real()->isend(comm, data, size, tag, mhandle, phandle, request);
  if (result == ncclSuccess && *request == nullptr) gSendPoolExhausted = true;
  return result;
#elif defined(NNS_BUG_SHARED_REQUEST_POOL)
  PooledRequest* pooled = acquirePooled();
  *request = nullptr;
  if (pooled == nullptr) return ncclSuccess;  // pool empty: "try again"
  ncclResult_t result = real()->isend(comm, data, size, tag, mhandle, phandle, &pooled->real);
  if (result != ncclSuccess || pooled->real == nullptr)
    releasePooled(pooled);
  else
    *request = pooled;
  return result;
#elif defined(NNS_BUG_BLOCKING_CLOSE_SEND)
  ncclResult_t result = real()->isend(comm, data, size, tag, mhandle, phandle, request);
  if (result == ncclSuccess && *request != nullptr) notePosted(comm, *request);
  return result;
#elif defined(NNS_BUG_LEAKED_PER_MESSAGE)
  ncclResult_t result = real()->isend(comm, data, size, tag, mhandle, phandle, request);
  if (result == ncclSuccess && *request != nullptr) {
    std::lock_guard<std::mutex> lock(gDescriptorsLock);
    gInFlight[*request] = std::make_unique<SendDescriptor>();
  }
  return result;
#elif defined(NNS_BUG_SEND_TEST_WRITES_SIZES)
  ncclResult_t result = real()->isend(comm, data, size, tag, mhandle, phandle, request);
  if (result == ncclSuccess && *request != nullptr) {
    std::lock_guard<std::mutex> lock(gSendsMutex);
    gSends.insert(*request);
  }
  return result;
#else
  return real()->isend(comm, data, size, tag, mhandle, phandle, request);
#endif
}
#ifdef NNS_NCCL_LIKE
void* volatile gLastProfilerHandle = nullptr;
#endif
ncclResult_t irecv(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** phandles,
                   void** request) {
#ifdef NNS_BUG_SEND_STALLS_WHEN_IDLE
  {
    std::lock_guard<std::mutex> lock(gStallLock);
    driveStalled();
  }
#endif
#ifdef NNS_BUG_RECV_DONE_BEFORE_DATA
  landLateTails();
#endif
#ifdef NNS_BUG_UNALIGNED_RECV
  // The receive's address goes into a descriptor field in units of 8 bytes (its low 3 bits dropped): a receive into
  // an address that is not 8-byte aligned lands up to 7 bytes before it. NCCL receives into slots at any offset of
  // a registered buffer, and into user buffers at any address.
  void* alignedDown[64];
  if (n >= 1 && n <= 64) {
    for (int i = 0; i < n; ++i)
      alignedDown[i] = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(data[i]) & ~uintptr_t{7});
    data = alignedDown;
  }
#endif
#ifdef NNS_BUG_RECV_NEEDS_LISTENER
  {
    std::lock_guard<std::mutex> lock(gEpollLock);
    auto epoll = gRecvEpoll.find(comm);
    epoll_event event{};
    if (epoll != gRecvEpoll.end() && epoll_wait(epoll->second, &event, 1, 0) < 0) {
      std::fprintf(stderr, "WARN %s: irecv: waiting on the connection's events: %s\n", NNS_BUG_NAME,
                   std::strerror(errno));
      return ncclSystemError;
    }
  }
#endif
#ifdef NNS_BUG_HINT_LEFT_IN_REQUEST
  // A "not now" path that returns before writing *request: harmless while hosts passed NULL there, but NCCL 2.24+
  // passes the optional-completion hint (0x1) before LL receives, and then tests (void*)0x1.
  if (*request == reinterpret_cast<void*>(NCCL_NET_OPTIONAL_RECV_COMPLETION)) return ncclSuccess;
#endif
#ifdef NNS_NCCL_LIKE
  for (int i = 0; i < n; ++i)
    if (mhandles == nullptr || mhandles[i] == nullptr) {
      std::fprintf(stderr, "WARN %s: irecv %d of %d without a memory handle\n", NNS_BUG_NAME, i, n);
      return ncclInvalidArgument;
    }
  for (int i = 0; i < n; ++i)
    if (!withinRegion("irecv", mhandles[i], data[i], sizes[i])) return ncclInvalidArgument;
  // The profiler handles read unchecked, as NCCL's IB plugin does: NCCL always passes an array of n (its entries
  // NULL without a profiler).
  for (int i = 0; i < n; ++i) gLastProfilerHandle = phandles[i];
#endif
#ifdef NNS_SMALL_MESSAGES
  for (int i = 0; i < n; ++i)
    if (sizes[i] > kLargestMessage) {
      std::fprintf(stderr, "WARN %s: irecv of %zu bytes: messages are at most %zu (maxP2pBytes, maxCollBytes)\n",
                   NNS_BUG_NAME, sizes[i], kLargestMessage);
      return ncclInvalidArgument;
    }
#endif
#ifdef NNS_BUG_RECV_SIZE_IGNORED
  // The posted sizes ignored (taken as 1 GiB): a larger message is written whole past the end of the buffer, into
  // whatever the host keeps there (its heap).
  size_t unchecked[64];
  if (n >= 1 && n <= 64) {
    for (int i = 0; i < n; ++i) unchecked[i] = size_t{1} << 30;
    sizes = unchecked;
  }
#endif
#ifdef NNS_BUG_SIZE_ROUNDED_UP
  // The posted sizes rounded up to a 64-byte line (a size check done in the NIC's units): a message up to 63 bytes
  // larger than the buffer is taken, and written past its end.
  size_t rounded[64];
  if (n >= 1 && n <= 64) {
    for (int i = 0; i < n; ++i) rounded[i] = (sizes[i] + 63) & ~size_t{63};
    sizes = rounded;
  }
#endif
#ifdef NNS_BUG_DATA_DROPPED
  // Receives of 4 KiB or more land in a bounce buffer that is never copied out (a staging copy forgotten): sizes and
  // completions are right, the caller's buffer keeps whatever it held. One buffer for all: what lands there is lost.
  constexpr size_t kBounceBytes = 16u << 20;
  // Static storage, not the heap: a host that unloads the plugin at exit (the communicator does) would leave a heap
  // block that only this library pointed to, which LeakSanitizer reports.
  static char bounce[kBounceBytes];
  // NNS_BUG_POISON=1: the caller's buffer gets all-ones bytes instead of keeping what it held (a NIC writing the
  // wrong data), which is NaN in every floating-point type: a check must count a NaN as wrong.
  static const bool poison = std::getenv("NNS_BUG_POISON") != nullptr && std::getenv("NNS_BUG_POISON")[0] == '1';
  // NNS_BUG_DROP_AFTER=N: the process's first N such receives are copied out, the later ones lost (a copy-out done
  // on the bounce buffer's first uses only): a check must not take what an early run left for a later run's result.
  static const long deliverFirst =
      std::getenv("NNS_BUG_DROP_AFTER") != nullptr ? std::strtol(std::getenv("NNS_BUG_DROP_AFTER"), nullptr, 10) : 0;
  static std::atomic<long> staged{0};
  void* bounced[64];
  if (n >= 1 && n <= 64) {
    for (int i = 0; i < n; ++i) {
      bool lost = sizes[i] >= 4096 && sizes[i] <= kBounceBytes && staged.fetch_add(1) >= deliverFirst;
      if (lost && poison) std::memset(data[i], 0xff, sizes[i]);
      bounced[i] = lost ? bounce : data[i];
    }
    data = bounced;
  }
#endif
#ifdef NNS_BUG_OFFSET_IN_REGION_IGNORED
  void* atRegionStart[64];
  if (mhandles != nullptr && n >= 1 && n <= 64) {
    for (int i = 0; i < n; ++i) {
      auto region = gRegionStart.find(mhandles[i]);
      atRegionStart[i] = region != gRegionStart.end() ? region->second : data[i];
    }
    data = atRegionStart;
  }
#endif
#ifdef NNS_BUG_REGISTRATION_CACHE_UNCOUNTED
  void* unwrappedRegions[64];
  if (mhandles != nullptr && n >= 1 && n <= 64) {
    for (int i = 0; i < n; ++i) {
      if (releasedRegion(mhandles[i])) {
        std::fprintf(stderr, "WARN %s: irecv: local protection error (the region's memory key was released)\n",
                     NNS_BUG_NAME);
        return ncclSystemError;
      }
      unwrappedRegions[i] = realOfCached(mhandles[i]);
    }
    mhandles = unwrappedRegions;
  }
#endif
#ifdef NNS_BUG_LEAKED_MHANDLE
  void* unwrapped[64];
  for (int i = 0; mhandles != nullptr && i < n && i < 64; ++i) unwrapped[i] = realMhandle(mhandles[i]);
  if (mhandles != nullptr) mhandles = unwrapped;
#endif
#ifdef NNS_BUG_READS_DEREGISTERED
  auto* record = mhandles != nullptr && n >= 1 ? static_cast<PagedRegistration*>(mhandles[0]) : nullptr;
  void* unpaged[64];
  for (int i = 0; mhandles != nullptr && i < n && i < 64; ++i) unpaged[i] = realOfPaged(mhandles[i]);
  if (mhandles != nullptr) mhandles = unpaged;
#endif
#ifdef NNS_BUG_LIMITED_REQUESTS
  if (gPendingRecvs.size() >= NCCL_NET_MAX_REQUESTS_V6) {
    *request = nullptr;
    return ncclSuccess;
  }
#endif
#ifdef NNS_BUG_TAGS_IGNORED
  (void)tags, (void)phandles;  // the bug: the tags never reach the wire
  if (n < 1 || n > kMaxRecvs) return ncclInvalidArgument;
  auto group = std::make_unique<GroupRequest>(GroupRequest{n, {}, {}, {}});
  for (int i = 0; i < n; ++i) {
    int anyTag = 0;
    void* part = nullptr;
    ncclResult_t result =
        real()->irecv(comm, 1, &data[i], &sizes[i], &anyTag, mhandles ? &mhandles[i] : nullptr, nullptr, &part);
    if (result != ncclSuccess || part == nullptr) {
      // Parts already posted cannot be withdrawn: fail the call rather than pretend.
      std::fprintf(stderr, "WARN %s: grouped irecv part %d of %d could not be posted\n", NNS_BUG_NAME, i, n);
      return result != ncclSuccess ? result : ncclInternalError;
    }
    group->parts[i] = part;
  }
  gGroups.insert(group.get());
  *request = group.release();
  return ncclSuccess;
#else
#ifdef NNS_BUG_GLOBAL_RECV_COMM
  if (gLastRecvComm != nullptr) comm = gLastRecvComm;
#endif
#ifdef NNS_BUG_MAXRECVS_OVERCLAIM
  if (n > kHandledRecvs) {
    std::fprintf(stderr, "WARN %s: irecv: %d receives in one group, at most %d\n", NNS_BUG_NAME, n, kHandledRecvs);
    return ncclInternalError;
  }
#endif
#ifdef NNS_BUG_GROUPED_TRUNCATION
  if (n >= 2 && n <= 8) {
    auto bounced = std::make_unique<Bounced>();
    bounced->n = n;
    void* landing[8];
    size_t room[8];
    for (int i = 0; i < n; ++i) {
      bounced->user[i] = data[i];
      bounced->posted[i] = sizes[i];
      bounced->bounce[i].resize(std::max<size_t>(sizes[i], size_t{1} << 20));
      landing[i] = bounced->bounce[i].data();
      room[i] = bounced->bounce[i].size();
    }
    ncclResult_t result = real()->irecv(comm, n, landing, room, tags, mhandles, phandles, request);
    if (result == ncclSuccess && *request != nullptr) {
      std::lock_guard<std::mutex> lock(gBouncedMutex);
      gBounced[*request] = std::move(bounced);
    }
    return result;
  }
#endif
#ifdef NNS_BUG_SHARED_REQUEST_POOL
  PooledRequest* pooled = acquirePooled();
  *request = nullptr;
  if (pooled == nullptr) return ncclSuccess;
  ncclResult_t pooledResult = real()->irecv(comm, n, data, sizes, tags, mhandles, phandles, &pooled->real);
  if (pooledResult != ncclSuccess || pooled->real == nullptr)
    releasePooled(pooled);
  else
    *request = pooled;
  return pooledResult;
#endif
#ifdef NNS_BUG_IRECV_NULL_BUT_POSTED
  {
    std::lock_guard<std::mutex> lock(gRecvOrphansLock);
    for (auto it = gRecvOrphans.begin(); it != gRecvOrphans.end();) {
      int done = 0, received[NCCL_NET_MAX_REQUESTS] = {};
      if (it->first == comm && (real()->test(it->second, &done, received) != ncclSuccess || done != 0))
        it = gRecvOrphans.erase(it);
      else
        ++it;
    }
    ncclResult_t posted = real()->irecv(comm, n, data, sizes, tags, mhandles, phandles, request);
    if (posted == ncclSuccess && *request != nullptr && ++gRecvCalls % 5 == 0) {
      gRecvOrphans.emplace_back(comm, *request);
      *request = nullptr;
    }
    return posted;
  }
#endif
  ncclResult_t result = real()->irecv(comm, n, data, sizes, tags, mhandles, phandles, request);
#if defined(NNS_BUG_RECV_WRITES_PAST_BUFFER) || defined(NNS_BUG_RECV_DONE_BEFORE_DATA) || \
    defined(NNS_BUG_LARGE_MESSAGE_SHIFTED) || defined(NNS_BUG_GROUPED_SIZES_FIRST_ONLY)
  if (result == ncclSuccess && *request != nullptr) notePostedRecv(comm, n, data, sizes, *request);
#endif
#ifdef NNS_BUG_CHUNKS_SWAPPED
  if (result == ncclSuccess && *request != nullptr && n >= 1 && n <= 8) {
    SwapTarget target;
    target.n = n;
    for (int i = 0; i < n; ++i) target.data[i] = data[i], target.sizes[i] = sizes[i];
    std::lock_guard<std::mutex> lock(gSwapMutex);
    gSwapTargets[*request] = target;
  }
#endif
#ifdef NNS_BUG_LIMITED_REQUESTS
  if (result == ncclSuccess && *request != nullptr) gPendingRecvs.insert(*request);
#endif
#ifdef NNS_BUG_READS_DEREGISTERED
  if (result == ncclSuccess && *request != nullptr && record != nullptr) {
    std::lock_guard<std::mutex> lock(gPagedMutex);
    gRecvRecords[*request] = record;
  }
#endif
#if defined(NNS_BUG_BLOCKING_CLOSE_RECV) || defined(NNS_BUG_LEAKED_PENDING_CLOSE)
  if (result == ncclSuccess && *request != nullptr) notePosted(comm, *request);
#endif
#ifdef NNS_BUG_CRASH_ON_CLOSE
  if (result == ncclSuccess && *request != nullptr) {
    RecvState& state = gRecvStates[comm];
    state.completionPage[state.pending.size() % (kPageBytes / sizeof(uint32_t))] = 1;  // slot: posted
    state.pending.push_back(*request);
  }
#endif
  return result;
#endif
}
ncclResult_t iflush(void* comm, int n, void** data, int* sizes, void** mhandles, void** request) {
  return real()->iflush(comm, n, data, sizes, mhandles, request);
}
ncclResult_t test(void* request, int* done, int* sizes) {
#ifdef NNS_BUG_SEND_DONE_BEFORE_READ
  {
    std::lock_guard<std::mutex> lock(gEarlyLock);
    if (auto early = gEarlySends.find(request); early != gEarlySends.end()) {
      const size_t size = early->second;
      gEarlySends.erase(early);
      ncclResult_t tested = real()->test(request, done, sizes);
      if (tested != ncclSuccess) return tested;
      if (!*done) gStillReading.push_back(request);  // the bug: reported done while its bytes are still being read
      *done = 1;
      if (sizes != nullptr) sizes[0] = static_cast<int>(size);
      return ncclSuccess;
    }
  }
#endif
#ifdef NNS_BUG_SEND_BUFFER_SCRIBBLED
  {
    ncclResult_t tested = real()->test(request, done, sizes);
    if (tested != ncclSuccess || *done) {
      std::lock_guard<std::mutex> lock(gScribbleLock);
      if (auto send = gScribbleSends.find(request); send != gScribbleSends.end()) {
        if (tested == ncclSuccess && send->second.second >= sizeof(gScribbleSequence))
          std::memcpy(send->second.first, &gScribbleSequence, sizeof(gScribbleSequence));
        ++gScribbleSequence;
        gScribbleSends.erase(send);
      }
    }
    return tested;
  }
#endif
#ifdef NNS_BUG_SEND_STALLS_WHEN_IDLE
  {
    std::lock_guard<std::mutex> lock(gStallLock);
    driveStalled();
    if (reportCompleted(gStallRequests, request, done, sizes)) return ncclSuccess;
  }
#endif
#ifdef NNS_BUG_ISEND_BLOCKS
  {
    std::lock_guard<std::mutex> lock(gFinishedLock);
    if (reportCompleted(gFinishedSends, request, done, sizes)) return ncclSuccess;
  }
#endif
#ifdef NNS_BUG_TEST_BLOCKS
  // test waits for the request to finish (a blocking poll of the completion queue, written for a thread per request):
  // NCCL's one proxy thread is held in the first request it tests, and stops driving every other comm, among them
  // the one whose progress the awaited request needs.
  {
    ncclResult_t tested;
    while ((tested = real()->test(request, done, sizes)) == ncclSuccess && !*done) usleep(100);
    return tested;
  }
#endif
#ifdef NNS_BUG_RECV_DONE_BEFORE_DATA
  landLateTails();
#endif
#ifdef NNS_BUG_READS_DEREGISTERED
  {
    ncclResult_t tested = real()->test(request, done, sizes);
    if (tested != ncclSuccess || *done) {
      PagedRegistration* record = nullptr;
      {
        std::lock_guard<std::mutex> lock(gPagedMutex);
        if (auto found = gRecvRecords.find(request); found != gRecvRecords.end()) {
          record = found->second;
          gRecvRecords.erase(found);
        }
      }
      if (record != nullptr && tested == ncclSuccess) ++record->completions;  // SIGSEGV once deregMr unmapped it
    }
    return tested;
  }
#endif
#ifdef NNS_BUG_CLOSE_DROPS_QUEUED
  {
    std::lock_guard<std::mutex> lock(gQueueLock);
    if (reportCompleted(gEagerSends, request, done, sizes)) return ncclSuccess;
  }
#endif
#ifdef NNS_NCCL_LIKE
  bool isSend;
  {
    std::lock_guard<std::mutex> lock(gSendsMutex);
    isSend = gSends.count(request) == 1;
  }
  if (isSend) {  // NCCL never reads a send's size, and NCCL's IB plugin fills sizes for receives only
    int unused = 0;
    ncclResult_t tested = real()->test(request, done, &unused);
    if (tested != ncclSuccess || *done) {
      std::lock_guard<std::mutex> lock(gSendsMutex);
      gSends.erase(request);
    }
    return tested;
  }
  // A receive's sizes: one for each of its maxRecvs (8) possible receives, whatever its n, as NCCL hands test room for
  // 64 (NCCL_PROXY_MAX_SUBS) on every receive. A harness that passed one int had its stack overwritten.
  if (sizes != nullptr) {
    int room[64];
    for (int& size : room) size = -1;
    ncclResult_t tested = real()->test(request, done, room);
    // A 0-byte receive's size is left alone: NCCL zeroes the sizes before each receive's test.
    for (int i = 0; i < 8; ++i)
      if (!(*done && room[i] == 0)) sizes[i] = room[i];
    return tested;
  }
#endif
#ifdef NNS_BUG_SEND_TEST_WRITES_SIZES
  // One completion path for sends and receives, which fills a size for each of the maxRecvs (8) a request may hold:
  // for a send, NCCL passes a single int, and the other seven land on its stack.
  {
    std::unique_lock<std::mutex> lock(gSendsMutex);
    if (gSends.count(request) == 1) {
      lock.unlock();
      int size = -1;
      ncclResult_t tested = real()->test(request, done, &size);
      if (tested == ncclSuccess && *done && sizes != nullptr)
        for (int i = 0; i < 8; ++i) sizes[i] = size;
      if (tested != ncclSuccess || *done) {
        lock.lock();
        gSends.erase(request);
      }
      return tested;
    }
  }
#endif
#ifdef NNS_BUG_LEAKED_PER_MESSAGE
  ncclResult_t leakResult = real()->test(request, done, sizes);
  if (leakResult != ncclSuccess || *done) {
    std::lock_guard<std::mutex> lock(gDescriptorsLock);
    auto descriptor = gInFlight.find(request);
    if (descriptor != gInFlight.end()) {
      gDone.push_back(std::move(descriptor->second));
      gInFlight.erase(descriptor);
    }
  }
  return leakResult;
#endif
#ifdef NNS_BUG_SHARED_REQUEST_POOL
  auto* pooled = static_cast<PooledRequest*>(request);
  ncclResult_t pooledResult = real()->test(pooled->real, done, sizes);
  if (pooledResult != ncclSuccess || *done) releasePooled(pooled);
  return pooledResult;
#endif
#ifdef NNS_BUG_ZERO_BYTE_ELIDED
  if (gElidedSends.erase(request) == 1) {
    delete static_cast<char*>(request);
    *done = 1;
    if (sizes != nullptr) sizes[0] = 0;
    return ncclSuccess;
  }
#endif
#ifdef NNS_BUG_TAGS_IGNORED
  auto* group = static_cast<GroupRequest*>(request);
  if (gGroups.count(group) == 1) {
    *done = 0;
    bool all = true;
    for (int i = 0; i < group->n; ++i) {
      if (group->done[i]) continue;
      int partDone = 0;
      ncclResult_t result = real()->test(group->parts[i], &partDone, &group->sizes[i]);
      if (result != ncclSuccess) return result;
      group->done[i] = partDone != 0;
      all = all && group->done[i];
    }
    if (!all) return ncclSuccess;
    for (int i = 0; sizes != nullptr && i < group->n; ++i) sizes[i] = group->sizes[i];
    gGroups.erase(group);
    delete group;
    *done = 1;
    return ncclSuccess;
  }
#endif
#ifdef NNS_BUG_LOST_COMPLETION
  // Under load the 100th completion is never reported (a completion-queue entry dropped): that request, and any
  // later one the plugin's pool puts at the same address, stays "not done" forever.
  static void* lost = nullptr;
  static int completions = 0;
  if (request == lost) {
    *done = 0;
    return ncclSuccess;
  }
#endif
  ncclResult_t result = real()->test(request, done, sizes);
#if defined(NNS_BUG_RECV_WRITES_PAST_BUFFER) || defined(NNS_BUG_RECV_DONE_BEFORE_DATA) || \
    defined(NNS_BUG_LARGE_MESSAGE_SHIFTED) || defined(NNS_BUG_GROUPED_SIZES_FIRST_ONLY)
  if (PostedRecv posted; (result != ncclSuccess || *done) && takePostedRecv(request, &posted) &&
                         result == ncclSuccess && sizes != nullptr) {
    for (int i = 0; i < posted.n; ++i) {
      const size_t size = static_cast<size_t>(std::max(sizes[i], 0));
      unsigned char* bytes = posted.data[i];
      (void)bytes, (void)size;
#ifdef NNS_BUG_RECV_WRITES_PAST_BUFFER
      // The NIC writes whole 64-byte lines: the bytes from the message's end to the next 64-byte boundary are
      // written too (zeros), past the posted buffer when the message fills it. NCCL receives into user buffers of
      // exactly the message's size (user-buffer registration), and into slots packed one after the other.
      if (size > 0) std::memset(bytes + size, 0, ((size + 63) & ~size_t{63}) - size);
#endif
#ifdef NNS_BUG_RECV_DONE_BEFORE_DATA
      if (size >= 64) {
        LateTail tail{bytes + size - 64, std::vector<unsigned char>(bytes + size - 64, bytes + size)};
        std::memset(tail.at, 0, 64);  // not there yet: what the buffer held (zeros, here)
        std::lock_guard<std::mutex> lock(gPostedLock);
        gLateTails.push_back(std::move(tail));
      }
#endif
#ifdef NNS_BUG_LARGE_MESSAGE_SHIFTED
      // Messages over 4 MiB go by a rendezvous path in 4 MiB chunks whose second chunk is placed one byte early: the
      // byte at 4 MiB is lost and every later byte lands one place before its own.
      constexpr size_t kChunk = 4u << 20;
      if (size > kChunk + 1) std::memmove(bytes + kChunk, bytes + kChunk + 1, size - kChunk - 1);
#endif
#ifdef NNS_BUG_GROUPED_SIZES_FIRST_ONLY
      // The completion carries one size: each receive of a group is reported with the first one's size.
      if (i > 0) sizes[i] = sizes[0];
#endif
    }
  }
#endif
#ifdef NNS_BUG_CHUNKS_SWAPPED
  if (result != ncclSuccess || *done) {
    SwapTarget target;
    {
      std::lock_guard<std::mutex> lock(gSwapMutex);
      if (auto found = gSwapTargets.find(request); found != gSwapTargets.end()) {
        target = found->second;
        gSwapTargets.erase(found);
      }
    }
    for (int i = 0; result == ncclSuccess && sizes != nullptr && i < target.n; ++i) {
      if (sizes[i] < 8192 || static_cast<size_t>(sizes[i]) > target.sizes[i]) continue;
      auto* bytes = static_cast<unsigned char*>(target.data[i]);
      std::swap_ranges(bytes, bytes + 4096, bytes + 4096);
    }
  }
#endif
#ifdef NNS_BUG_GROUPED_TRUNCATION
  if (result != ncclSuccess || *done) {
    std::unique_ptr<Bounced> bounced;
    {
      std::lock_guard<std::mutex> lock(gBouncedMutex);
      if (auto found = gBounced.find(request); found != gBounced.end()) {
        bounced = std::move(found->second);
        gBounced.erase(found);
      }
    }
    for (int i = 0; bounced != nullptr && result == ncclSuccess && sizes != nullptr && i < bounced->n; ++i) {
      const size_t kept = std::min(static_cast<size_t>(std::max(sizes[i], 0)), bounced->posted[i]);
      std::memcpy(bounced->user[i], bounced->bounce[i].data(), kept);
      sizes[i] = static_cast<int>(kept);
    }
  }
#endif
#ifdef NNS_BUG_LOST_COMPLETION
  if (result == ncclSuccess && *done && ++completions == 100) {
    lost = request;
    *done = 0;
  }
#endif
#ifdef NNS_BUG_SILENT_TRUNCATION
  if (result == ncclInvalidUsage) {  // hides the "does not fit" error and reports a completed receive
    *done = 1;
    return ncclSuccess;
  }
#endif
#ifdef NNS_BUG_PEER_DEATH_HIDDEN
  if (result == ncclRemoteError) {  // "the peer may come back": a remote error is treated as not done yet
    *done = 0;
    return ncclSuccess;
  }
#endif
#ifdef NNS_BUG_TEST_TIMES_OUT
  // A watchdog whose limit is read as 0 (a unit mix-up): every request is given up at its first test with NCCL 2.30's
  // ncclTimeout, done or not (a request not yet done only there made the bug depend on timing: a 0-byte receive that
  // had arrived before its first test passed). The harness must report the plugin's code, not its own deadline.
  if (result == ncclSuccess) return ncclTimeout;
#endif
#ifdef NNS_BUG_CRASH_IN_TEST
  if (*done) raise(SIGSEGV);
#endif
#ifdef NNS_BUG_EXIT_IN_TEST
  // A fatal-error path that calls exit() instead of returning an error: the host process ends without a word.
  if (*done) std::exit(1);
#endif
#ifdef NNS_BUG_EXIT_IN_SEND_TEST
  // The same, on the sending side only (the harness's peer process). NNS_SHIM_EXIT_STATUS picks the status: one the
  // harness also uses for its own exits (3: a call that timed out) must still read as the plugin's exit.
  if (*done && gConnected) {
    const char* status = std::getenv("NNS_SHIM_EXIT_STATUS");
    std::exit(status != nullptr ? std::atoi(status) : 1);
  }
#endif
#ifdef NNS_BUG_WRONG_SIZES
  if (*done && sizes != nullptr && sizes[0] > 1) sizes[0] -= 1;
#endif
#ifdef NNS_BUG_LIMITED_REQUESTS
  if (result == ncclSuccess && *done) gPendingRecvs.erase(request);
#endif
#if defined(NNS_BUG_BLOCKING_CLOSE_RECV) || defined(NNS_BUG_BLOCKING_CLOSE_SEND) || \
    defined(NNS_BUG_LEAKED_PENDING_CLOSE)
  if (result != ncclSuccess || *done) noteFinished(request);
#endif
#ifdef NNS_BUG_CRASH_ON_CLOSE
  if (result == ncclSuccess && *done) {
    for (auto& [comm, state] : gRecvStates) std::erase(state.pending, request);
  }
#endif
  return result;
}
ncclResult_t closeSend(void* comm) {
#ifdef NNS_BUG_SEND_DONE_BEFORE_READ
  {
    std::lock_guard<std::mutex> lock(gEarlyLock);
    for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
         !gStillReading.empty() && std::chrono::steady_clock::now() < until;)
      driveStillReading();
  }
#endif
#ifdef NNS_BUG_SEND_STALLS_WHEN_IDLE
  {
    std::lock_guard<std::mutex> lock(gStallLock);
    for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
         !gStalled[comm].empty() && std::chrono::steady_clock::now() < until;)
      driveStalled();
    for (auto& send : gStalled[comm])
      if (send->mhandle != nullptr) real()->deregMr(comm, send->mhandle);
    gStalled.erase(comm);
  }
#endif
#ifdef NNS_BUG_CLOSE_DROPS_QUEUED
  {
    std::lock_guard<std::mutex> lock(gQueueLock);
    if (auto queue = gSendQueues.find(comm); queue != gSendQueues.end()) {
      for (auto& send : queue->second.onWire) real()->deregMr(comm, send->mhandle);
      for (auto& send : queue->second.waiting)
        if (send->mhandle != nullptr) real()->deregMr(comm, send->mhandle);
      gSendQueues.erase(queue);  // what is still queued is dropped, not sent
    }
    return real()->closeSend(comm);
  }
#endif
#ifdef NNS_BUG_BLOCKING_CLOSE_SEND
  drainPending(comm);
#endif
#ifdef NNS_NCCL_LIKE
  if (!noRegionsLeft("closeSend", comm)) {
    (void)real()->closeSend(comm);
    return ncclInvalidUsage;
  }
#endif
#ifdef NNS_BUG_CLOSE_SEND_FAILS
  // Closes, then reports a failure of its own teardown (a flush or a goodbye it could not send) on a healthy comm:
  // NCCL fails the communicator's destroy on it.
  (void)real()->closeSend(comm);
  return ncclInternalError;
#else
  return real()->closeSend(comm);
#endif
}
ncclResult_t closeRecv(void* comm) {
#ifdef NNS_BUG_COMM_LIMIT
  --gOpenRecvComms;
#endif
#ifdef NNS_BUG_CRASH_ON_CLOSE
  auto state = gRecvStates.find(comm);
  if (state != gRecvStates.end()) {
    munmap(state->second.completionPage, kPageBytes);  // released too early ...
    ncclResult_t result = real()->closeRecv(comm);
    for (size_t i = 0; i < state->second.pending.size(); ++i)
      state->second.completionPage[i % (kPageBytes / sizeof(uint32_t))] = 2;  // ... then written: cancelled
    gRecvStates.erase(state);
    return result;
  }
#endif
#ifdef NNS_BUG_BLOCKING_CLOSE_RECV
  drainPending(comm);
#endif
#ifdef NNS_NCCL_LIKE
  if (!noRegionsLeft("closeRecv", comm)) {
    (void)real()->closeRecv(comm);
    return ncclInvalidUsage;
  }
#endif
#ifdef NNS_BUG_LEAKED_PENDING_CLOSE
  {
    std::lock_guard<std::mutex> lock(gPendingMutex);
    auto pending = gPendingByComm.find(comm);
    if (auto window = gStagingWindows.find(comm); window != gStagingWindows.end()) {
      if (pending == gPendingByComm.end() || pending->second.empty()) munmap(window->second, kStagingBytes);
      gStagingWindows.erase(window);  // with receives pending, "later": never
    }
    if (pending != gPendingByComm.end()) {
      for (void* request : pending->second) gCommOfRequest.erase(request);
      gPendingByComm.erase(pending);
    }
  }
#endif
#ifdef NNS_BUG_LEAKED_COMM_FD
  gWakeFds.erase(comm);  // the descriptor is not closed
#endif
#ifdef NNS_BUG_RECV_NEEDS_LISTENER
  {
    std::lock_guard<std::mutex> lock(gEpollLock);
    gRecvEpoll.erase(comm);
  }
#endif
  return real()->closeRecv(comm);
}
ncclResult_t closeListen(void* comm) {
  ncclResult_t result = real()->closeListen(comm);
#ifdef NNS_BUG_RECV_NEEDS_LISTENER
  {
    std::lock_guard<std::mutex> lock(gEpollLock);
    auto epoll = gListenerEpoll.find(comm);
    if (epoll != gListenerEpoll.end()) {
      close(epoll->second);  // under the comms it accepted, which still wait on it
      gListenerEpoll.erase(epoll);
    }
  }
#endif
#ifdef NNS_BUG_STRANGER_FAILS_ACCEPT
  auto side = gSideChannels.find(comm);
  if (side != gSideChannels.end()) {
    close(side->second);
    gSideChannels.erase(side);
  }
#endif
#ifdef NNS_BUG_BLOCKING_CLOSE_LISTEN
  auto helper = gListenHelpers.find(comm);
  if (helper != gListenHelpers.end()) {
    helper->second->thread.join();  // never returns: nothing wakes the accept(2) (a shutdown(fd) is missing)
    close(helper->second->fd);
    delete helper->second;
    gListenHelpers.erase(helper);
  }
#endif
  return result;
}
ncclResult_t finalize(void* ctx) {
#ifdef NNS_BUG_FINALIZE_FREES_SHARED
  delete gShared;
  gShared = nullptr;
#endif
  return real()->finalize(ctx);
}

#ifdef NNS_BUG_OLD_VERSION_DIFFERS
// The v6..v8 tables of this plugin are kept by hand beside the v12 one, and its getProperties reports speed in
// Gb/s where the newer versions report Mb/s: an NCCL that loads v8 sees a 1000x slower NIC.
const ncclNet_v8_t* realV8() {
  static const ncclNet_v8_t* table = [] {
    void* library = dlopen(NNS_REAL_PLUGIN, RTLD_NOW | RTLD_LOCAL);
    return library ? static_cast<const ncclNet_v8_t*>(dlsym(library, "ncclNetPlugin_v8")) : nullptr;
  }();
  return table;
}
ncclResult_t legacyInit(ncclDebugLogger_t logger) {
  return realV8() ? realV8()->init(logger) : ncclSystemError;
}
ncclResult_t legacyGetProperties(int dev, ncclNetProperties_v8_t* props) {
  ncclResult_t result = realV8()->getProperties(dev, props);
  // NNS_OLD_VERSION_FIELD: the hand-kept table drifts in another field the harness compares instead.
  if (const char* field = std::getenv("NNS_OLD_VERSION_FIELD"); field != nullptr && std::strcmp(field, "maxComms") == 0)
    props->maxComms += 1;
  else if (field != nullptr && std::strcmp(field, "latency") == 0)
    props->latency += 1;
  else
    props->speed /= 1000;
  return result;
}
#endif

#if defined(NNS_BUG_OLD_VERSION_P2P_ZERO) || defined(NNS_BUG_V11_PROPS_OVERRUN) || defined(NNS_LEGACY_INIT_ONCE)
// The real plugin's own table of an older version, which the bug (or legacy-init-once's init) replaces one function
// of.
template <class Table>
const Table* realTable(const char* symbol) {
  void* library = dlopen(NNS_REAL_PLUGIN, RTLD_NOW | RTLD_LOCAL);
  return library ? static_cast<const Table*>(dlsym(library, symbol)) : nullptr;
}
#endif
#ifdef NNS_BUG_OLD_VERSION_P2P_ZERO
// A hand-kept v10 table whose getProperties never set maxP2pBytes (zeroed struct): the v12 one is right, so only
// an NCCL that loads v10 (2.26, 2.27) meets it, and refuses every connection.
const ncclNet_v10_t* realV10() {
  static const ncclNet_v10_t* table = realTable<ncclNet_v10_t>("ncclNetPlugin_v10");
  return table;
}
ncclResult_t v10GetProperties(int dev, ncclNetProperties_v10_t* props) {
  ncclResult_t result = realV10()->getProperties(dev, props);
  props->maxP2pBytes = 0;
  return result;
}
#endif
#ifdef NNS_BUG_V11_PROPS_OVERRUN
// The v11 table points at the v12 getProperties (one function "for every version"): it writes a 128-byte
// ncclNetProperties_v12_t into the 112-byte v11 struct NCCL passes, over NCCL's stack, and its vProps where v11 has
// maxP2pBytes.
const ncclNet_v11_t* realV11() {
  static const ncclNet_v11_t* table = realTable<ncclNet_v11_t>("ncclNetPlugin_v11");
  return table;
}
ncclResult_t v11GetProperties(int dev, ncclNetProperties_v11_t* props) {
  return getProperties(dev, reinterpret_cast<ncclNetProperties_v12_t*>(props));
}
#endif

}  // namespace

#ifdef NNS_BUG_LEAKS_SYMBOLS
// Built without the SDK's flags (default visibility, no version script), as a plugin whose build started from a
// library template does: its own helper is exported (the host's `shimLogLine`, if it had one, would run in its place)
// and, under GCC, a function-local static of an inline function is a GNU-unique symbol that keeps dlclose from
// unloading it. Neither changes what the plugin does; symbols-stay-private names both.
__attribute__((visibility("default"))) int shimLogLine(int level) {
  return level + 1;
}
__attribute__((visibility("default"))) inline int& shimLogLevel() {
  static int level = 0;
  return level;
}
__attribute__((visibility("default"))) int shimRaiseLogLevel() {
  return ++shimLogLevel();
}
#endif

#ifdef NNS_LEGACY_INIT_ONCE
namespace {
// Not a bug: beside ncclNet_v12, the tables kept for NCCL 2.23-2.27 (v10, v9), each version's init a wrapper of one
// common init that refuses a second call, as NCCL loads one version and calls its init once per process. The real
// plugin's own v10 and v9 tables move the data.
int gCommonInits = 0;
const ncclNet_v10_t* realV10() {
  static const ncclNet_v10_t* table = realTable<ncclNet_v10_t>("ncclNetPlugin_v10");
  return table;
}
const ncclNet_v9_t* realV9() {
  static const ncclNet_v9_t* table = realTable<ncclNet_v9_t>("ncclNetPlugin_v9");
  return table;
}
ncclResult_t commonInit(int version, ncclDebugLogger_t logger, ncclProfilerCallback_t profiler) {
  if (++gCommonInits > 1) return ncclInvalidUsage;  // "already initialised"
  if (version == 10) return realV10() != nullptr ? realV10()->init(logger, profiler) : ncclSystemError;
  return realV9() != nullptr ? realV9()->init(logger) : ncclSystemError;
}
// Two wrappers, two functions: the loader runs an old table's init once per function, as NCCL runs the one it loads.
ncclResult_t initV10(ncclDebugLogger_t logger, ncclProfilerCallback_t profiler) {
  return commonInit(10, logger, profiler);
}
ncclResult_t initV9(ncclDebugLogger_t logger) {
  // For the harness's own test of a crash in a version's process (NNS_SHIM_V9_INIT_CRASHES set).
  if (std::getenv("NNS_SHIM_V9_INIT_CRASHES") != nullptr) raise(SIGSEGV);
  // And of a call that never returns there (NNS_SHIM_V9_INIT_HANGS set): the watchdog's verdict comes back.
  if (std::getenv("NNS_SHIM_V9_INIT_HANGS") != nullptr)
    for (;;) pause();
  return commonInit(9, logger, nullptr);
}
}  // namespace
extern "C" {
__attribute__((visibility("default"))) ncclNet_v10_t ncclNetPlugin_v10 = {};
__attribute__((visibility("default"))) ncclNet_v9_t ncclNetPlugin_v9 = {};
}
__attribute__((constructor)) void fillTables() {
  // For the harness's tests of a crash or a hang while its fresh copy of the plugin loads (NNS_SHIM_COPY_LOAD_CRASHES
  // or NNS_SHIM_COPY_LOAD_HANGS set): only the copy every-version-agrees makes (".../versions/"), so the rule's own
  // load goes through.
  Dl_info self{};
  if (dladdr(reinterpret_cast<void*>(&fillTables), &self) && self.dli_fname != nullptr &&
      std::strstr(self.dli_fname, "/versions/") != nullptr) {
    if (std::getenv("NNS_SHIM_COPY_LOAD_CRASHES") != nullptr) raise(SIGSEGV);
    if (std::getenv("NNS_SHIM_COPY_LOAD_HANGS") != nullptr)
      for (;;) pause();
  }
  if (realV10() != nullptr) ncclNetPlugin_v10 = *realV10();
  if (realV9() != nullptr) ncclNetPlugin_v9 = *realV9();
  ncclNetPlugin_v10.name = ncclNetPlugin_v9.name = NNS_BUG_NAME;
  ncclNetPlugin_v10.init = initV10;
  ncclNetPlugin_v9.init = initV9;
}
#endif

#ifdef NNS_PICKED_BUGS
// broken-picked (and broken-picked-socket, over the socket plugin): one plugin for the bugs no other broken plugin
// here has, the one bug picked at run time by NNS_PICKED_BUG. Each is one a check catches that nothing
// else here exercised: a field NCCL refuses, a corrupted last byte, a size misreported by a send, a call slow but
// not blocked, a limit just under NCCL's, a descriptor or mapping leaked where the existing leaks were not, a
// descriptor a started program inherits, signal handlers installed at init, an error hidden, raised where a NULL
// request belongs, or turned into a completion. Five serve nccl-net-perf's tests: a slow network (slow-receives, no
// bug), more than NCCL's 32 requests in flight an error (over-32-requests-error, no bug either), a group's last size
// one short, a receive's sizes left unwritten, every irecv refused. And: a regMr that fails on send comms (isend takes
// the NULL handle), two ports whose fusion makeVDevice refuses (vdevice-refused, ncclInvalidUsage: no bug) or fails
// (vdevice-fails, ncclInternalError), a grouped receive's sizes packed over its 0-byte entries, a flush request
// whose test writes sizes[0] (NCCL passes NULL there), a large send's test that loops until the send is out, and a
// receive's sizes reported as the sizes it was posted with.
namespace {
bool pickedBug(const char* name) {
  static const char* bug = std::getenv("NNS_PICKED_BUG");
  return bug != nullptr && std::strcmp(bug, name) == 0;
}
std::mutex gPickedLock;
struct PickedRecv {
  std::vector<void*> data;
  std::vector<size_t> capacity;  // each buffer's posted size
  bool late;                     // posted over 0.2 s after its comm was accepted
  std::chrono::steady_clock::time_point posted;
};
std::map<void*, PickedRecv> gPickedRecvs;                             // receive request -> what it was posted with
std::map<void*, std::chrono::steady_clock::time_point> gPickedComms;  // receive comm -> when accept returned it
std::map<void*, size_t> gPickedSends;                                 // send request -> its size
std::vector<void*> gPickedKept;                                       // per-message-leak's records, never freed
std::atomic<int> gPickedConnects{0}, gPickedAccepts{0}, gPickedIsends{0}, gPickedRegistrations{0};
char gPickedNobody;  // the comm accept-from-nobody and zero-handle-comm hand out
// comm-channel-inheritable: each comm gets a completion channel of its own (an eventfd) made without EFD_CLOEXEC,
// closed with its comm: no leak, but every program the process starts meanwhile inherits it.
std::map<void*, int> gPickedChannels;
void openPickedChannel(void* comm) {  // gPickedLock held
  if (pickedBug("comm-channel-inheritable") && comm != nullptr) gPickedChannels[comm] = eventfd(0, 0);
}
void closePickedChannel(void* comm) {  // gPickedLock held
  if (auto channel = gPickedChannels.find(comm); channel != gPickedChannels.end()) {
    if (channel->second >= 0) close(channel->second);
    gPickedChannels.erase(channel);
  }
}
// send-ring-4 and recv-ring-4: send (or receive) descriptors from a ring of 4 taken in turn, with no check that the
// one taken is free (the depth the vendor's own test kept in flight): the 5th in flight is handed the 1st's
// descriptor, whose test then answers for the 5th. The overwritten operation is still driven to its end (the NIC
// completes it all the same). As NCCL's own IB plugin, a send's test writes no size (NCCL reads none).
struct RingRequest {
  void* comm = nullptr;
  void* real = nullptr;  // nullptr: nothing pending (done): test says done
};
struct Ring {
  RingRequest slots[4];
  unsigned next = 0;
  std::vector<std::pair<void*, void*>> overwritten;  // (comm, real request) of operations whose slot was retaken
  void* take(void* comm, void* real) {
    RingRequest& slot = slots[next++ % 4];
    if (slot.real != nullptr) overwritten.emplace_back(slot.comm, slot.real);
    slot = {comm, real};
    return &slot;
  }
  bool holds(void* request) const { return request >= &slots[0] && request <= &slots[3]; }
  void forget(void* comm) {
    std::erase_if(overwritten, [comm](const auto& entry) { return entry.first == comm; });
    for (RingRequest& slot : slots)
      if (slot.comm == comm) slot = {};
  }
};
Ring gSendRing, gRecvRing;
// registration-cache-stale: registrations kept in a cache keyed by comm, address and length past deregMr (lazy
// deregistration, nothing watching munmap), and handed back by a later regMr of the same range. What such a
// registration pins are the pages the buffer had when it was made, no longer the buffer's once it was unmapped and
// mapped again: modelled by a copy of the buffer taken at deregMr, through which data then moves (a receive lands
// in it, a send reads it). registration-cache-stale-sends: the same, with receives moving through the buffer's
// own pages (so the stale send is what shows).
bool staleRegistrations() {
  return pickedBug("registration-cache-stale") || pickedBug("registration-cache-stale-sends");
}
struct CachedRegistration {
  void* comm;
  void* real;
  unsigned char* base;
  size_t size;
  bool live = true;
  std::vector<unsigned char> pages;  // empty while the buffer's own pages are the registered ones
};
std::vector<std::unique_ptr<CachedRegistration>> gRegistrationCache;
CachedRegistration* cachedRegistration(void* mhandle) {
  for (auto& entry : gRegistrationCache)
    if (entry.get() == mhandle) return entry.get();
  return nullptr;
}
// Where the registration `mhandle` moves the bytes of `data`: into its pinned copy once it went stale.
void* throughRegistration(void* mhandle, void* data) {
  CachedRegistration* entry = cachedRegistration(mhandle);
  if (entry == nullptr || entry->pages.empty()) return data;
  return entry->pages.data() + (static_cast<unsigned char*>(data) - entry->base);
}
void* realHandle(void* mhandle) {
  CachedRegistration* entry = cachedRegistration(mhandle);
  return entry != nullptr ? entry->real : mhandle;
}
void dropCachedRegistrations(void* comm) {
  std::erase_if(gRegistrationCache, [comm](const auto& entry) {
    if (entry->comm == comm) deregMr(comm, entry->real);
    return entry->comm == comm;
  });
}
constexpr auto kSlowReceive = std::chrono::milliseconds(50);  // slow-receives: no receive done sooner

// crash-handler-at-init: init installs a SIGSEGV and a SIGTERM handler of the plugin's own (a vendor's crash
// reporter that prints a backtrace and a clean-stop hook), replacing the application's. signal-blocked-at-init: init
// blocks SIGUSR1 in the calling thread (meant for the helper thread it starts, which inherits the mask) and leaves it
// blocked, so the application's thread no longer takes it.
void pickedCrashHandler(int signal) {
  static const char kText[] = "plugin: fatal signal\n";
  (void)!write(2, kText, sizeof(kText) - 1);
  ::signal(signal, SIG_DFL);
  raise(signal);
}
ncclResult_t pickedInit(void** ctx, uint64_t commId, ncclNetCommConfig_v12_t* config, ncclDebugLogger_t logger,
                        ncclProfilerCallback_t profiler) {
  if (pickedBug("crash-handler-at-init"))
    for (int signal : {SIGSEGV, SIGTERM}) ::signal(signal, pickedCrashHandler);
  if (pickedBug("signal-blocked-at-init")) {  // blocked for a helper thread to inherit, and never unblocked
    sigset_t blocked;
    sigemptyset(&blocked);
    sigaddset(&blocked, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &blocked, nullptr);
  }
  return init(ctx, commId, config, logger, profiler);
}
// vdevice-refused and vdevice-fails: a second port (the first one's properties under a name of its own) and a
// makeVDevice that will not fuse the two: with ncclInvalidUsage, NCCL's refusal (ports of another link layer, as
// NCCL's IB plugin refuses them; not a bug), or with ncclInternalError (a fusion that broke: a bug).
bool pickedSecondPort() {
  return pickedBug("vdevice-refused") || pickedBug("vdevice-fails");
}
ncclResult_t pickedMakeVDevice(int* d, ncclNetVDeviceProps_v12_t* props) {
  int physical = 0;
  if (devices(&physical) != ncclSuccess) return ncclInternalError;
  ++physical;  // the second port
  if (props->ndevs < 1 || props->ndevs > NCCL_NET_MAX_DEVS_PER_NIC) return ncclInvalidUsage;
  for (int i = 0; i < props->ndevs; ++i)
    if (props->devs[i] < 0 || props->devs[i] >= physical) return ncclInvalidUsage;
  *d = -1;
  return pickedBug("vdevice-refused") ? ncclInvalidUsage : ncclInternalError;
}
ncclResult_t pickedDevices(int* ndev) {
  const ncclResult_t result = devices(ndev);
  if (result == ncclSuccess && (pickedBug("duplicate-name") || pickedSecondPort()))
    *ndev += 1;  // a second port, described as the first
  return result;
}
ncclResult_t pickedGetProperties(int dev, ncclNetProperties_v12_t* props) {
  int real = 1;
  const bool secondPort =
      (pickedBug("duplicate-name") || pickedSecondPort()) && devices(&real) == ncclSuccess && dev >= real;
  if (secondPort) dev = 0;
  const ncclResult_t result = getProperties(dev, props);
  if (secondPort && pickedSecondPort() && result == ncclSuccess) {
    static std::string name = std::string(props->name != nullptr ? props->name : "dev") + "-port2";
    props->name = name.data();
    props->guid += 1;
  }
  if (pickedBug("pci-path-missing")) props->pciPath = const_cast<char*>("/sys/devices/pci0000:00/0000:00:1f.7");
  if (pickedBug("max-recvs-65")) props->maxRecvs = 65;
  if (pickedBug("p2p-over-1tib")) props->maxP2pBytes = size_t{NCCL_MAX_NET_SIZE_BYTES} + 1;
  if (pickedBug("multi-request-0")) props->maxMultiRequestSize = 0;
  if (pickedBug("rail-id-2")) props->railId = -2;
  return result;
}
// regmr-fails-on-send-comms: registrations hang off the receive side's table (written for a receiver-driven
// transport); regMr looks the comm up there and fails on a send comm, and isend copies through a bounce buffer and
// never reads its handle. NCCL registers its send buffers when it connects and fails the connection on the error.
std::set<void*> gPickedSendComms;
ncclResult_t pickedConnect(void* ctx, int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v12_t** devComm) {
  const auto* bytes = static_cast<const unsigned char*>(handle);
  if (pickedBug("zero-handle-comm") && std::all_of(bytes, bytes + NCCL_NET_HANDLE_MAXSIZE, [](auto b) { return !b; })) {
    *sendComm = &gPickedNobody;
    return ncclSuccess;
  }
  if (pickedBug("slow-first-call") && gPickedConnects++ == 0) usleep(1300000);
  const ncclResult_t result = connect(ctx, dev, handle, sendComm, devComm);
  if (pickedBug("send-comm-fd") && result == ncclSuccess && *sendComm != nullptr) (void)eventfd(0, EFD_CLOEXEC);
  if (result == ncclSuccess) {
    std::lock_guard<std::mutex> lock(gPickedLock);
    openPickedChannel(*sendComm);
    if (*sendComm != nullptr) gPickedSendComms.insert(*sendComm);
  }
  return result;
}
ncclResult_t pickedAccept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v12_t** devComm) {
  if (pickedBug("slow-first-call") && gPickedAccepts++ == 0) usleep(1300000);
  std::lock_guard<std::mutex> lock(gPickedLock);
  if (pickedBug("comm-table-32") && gPickedComms.size() >= 32) return ncclSystemError;  // a table of 32 comms
  const ncclResult_t result = accept(listenComm, recvComm, devComm);
  if (result == ncclSuccess && *recvComm != nullptr) gPickedComms[*recvComm] = std::chrono::steady_clock::now();
  if (pickedBug("accept-from-nobody") && result == ncclSuccess && *recvComm == nullptr) *recvComm = &gPickedNobody;
  if (result == ncclSuccess) openPickedChannel(*recvComm);
  return result;
}
ncclResult_t pickedRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  if (pickedBug("regmr-fails-on-send-comms")) {
    std::lock_guard<std::mutex> lock(gPickedLock);
    if (gPickedSendComms.count(comm) != 0) {
      std::fprintf(stderr, "WARN %s: regMr: comm %p is not a receive comm\n", NNS_BUG_NAME, comm);
      return ncclSystemError;
    }
  }
  if (staleRegistrations()) {
    std::lock_guard<std::mutex> lock(gPickedLock);
    for (auto& entry : gRegistrationCache)
      if (!entry->live && entry->comm == comm && entry->base == data && entry->size == size) {
        entry->live = true;
        *mhandle = entry.get();
        return ncclSuccess;
      }
    void* real = nullptr;
    const ncclResult_t result = regMr(comm, data, size, type, &real);
    if (result != ncclSuccess) return result;
    gRegistrationCache.push_back(std::make_unique<CachedRegistration>(
        CachedRegistration{comm, real, static_cast<unsigned char*>(data), size, true, {}}));
    *mhandle = gRegistrationCache.back().get();
    return ncclSuccess;
  }
  const ncclResult_t result = regMr(comm, data, size, type, mhandle);
  if (result == ncclSuccess && pickedBug("registration-fd") && gPickedRegistrations++ % 8 == 0)
    (void)eventfd(0, EFD_CLOEXEC);
  if (result == ncclSuccess && pickedBug("registration-mapping"))
    (void)mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return result;
}
ncclResult_t pickedDeregMr(void* comm, void* mhandle) {
  if (staleRegistrations()) {
    std::lock_guard<std::mutex> lock(gPickedLock);
    if (CachedRegistration* entry = cachedRegistration(mhandle); entry != nullptr) {
      entry->live = false;  // kept, and its pages with it: they hold what the buffer held now
      if (entry->pages.empty()) {
        // Read where the buffer may be gone already (NCCL frees buffers before it deregisters them): zeros then.
        entry->pages.assign(entry->size, 0);
        iovec to{entry->pages.data(), entry->size}, from{entry->base, entry->size};
        (void)process_vm_readv(getpid(), &to, 1, &from, 1, 0);
      }
      return ncclSuccess;
    }
  }
  return deregMr(comm, mhandle);
}
ncclResult_t pickedIsend(void* comm, void* data, size_t size, int tag, void* mhandle, void* phandle, void** request) {
  if (pickedBug("isend-error-once") && ++gPickedIsends == 5) return ncclInternalError;  // "full", said as an error
  {
    std::lock_guard<std::mutex> lock(gPickedLock);
    if (pickedBug("over-32-requests-error") && gPickedSends.size() >= NCCL_NET_MAX_REQUESTS) return ncclInvalidUsage;
    if (staleRegistrations()) {
      data = throughRegistration(mhandle, data);
      mhandle = realHandle(mhandle);
    }
  }
  const ncclResult_t result = isend(comm, data, size, tag, mhandle, phandle, request);
  std::lock_guard<std::mutex> lock(gPickedLock);
  if (pickedBug("send-ring-4") && result == ncclSuccess && *request != nullptr) {
    *request = gSendRing.take(comm, *request);
    return result;
  }
  if (result == ncclSuccess && *request != nullptr) gPickedSends[*request] = size;
  if (result == ncclSuccess && pickedBug("per-message-leak")) gPickedKept.push_back(std::malloc(256));
  return result;
}
ncclResult_t pickedIrecv(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** phandles,
                         void** request) {
  std::lock_guard<std::mutex> lock(gPickedLock);
  // More requests in flight than NCCL ever posts (NCCL_NET_MAX_REQUESTS) are an error: strict, as a plugin may be.
  if (pickedBug("over-32-requests-error") && gPickedRecvs.size() >= NCCL_NET_MAX_REQUESTS) return ncclInvalidUsage;
  if (pickedBug("irecv-refused")) {  // "not now" for ever, with nothing in flight to wait for
    *request = nullptr;
    return ncclSuccess;
  }
  if (pickedBug("request-pool-31") && gPickedRecvs.size() >= 31) {  // a pool one short of NCCL_NET_MAX_REQUESTS
    *request = nullptr;
    return ncclSuccess;
  }
  std::vector<void*> targets(data, data + n), realHandles(mhandles, mhandles + n);
  for (int i = 0; i < n && staleRegistrations(); ++i) {
    if (pickedBug("registration-cache-stale"))
      targets[static_cast<size_t>(i)] = throughRegistration(mhandles[i], data[i]);
    realHandles[static_cast<size_t>(i)] = realHandle(mhandles[i]);
  }
  const ncclResult_t result = irecv(comm, n, targets.data(), sizes, tags, realHandles.data(), phandles, request);
  const auto accepted = gPickedComms.find(comm);
  const bool late = accepted != gPickedComms.end() &&
                    std::chrono::steady_clock::now() - accepted->second > std::chrono::milliseconds(200);
  if (result == ncclSuccess && *request != nullptr)
    gPickedRecvs[*request] = {std::vector<void*>(data, data + n), std::vector<size_t>(sizes, sizes + n), late,
                              std::chrono::steady_clock::now()};
  if (pickedBug("recv-ring-4") && result == ncclSuccess && *request != nullptr)
    *request = gRecvRing.take(comm, *request);
  return result;
}
// flush-test-writes-sizes: a flush gets a request of its own, completed through the receive's completion path,
// which writes sizes[0] (0 bytes flushed): NCCL tests a flush with sizes NULL.
std::set<void*> gPickedFlushes;
ncclResult_t pickedIflush(void* comm, int n, void** data, int* sizes, void** mhandles, void** request) {
  const ncclResult_t result = iflush(comm, n, data, sizes, mhandles, request);
  if (result == ncclSuccess && *request == nullptr && pickedBug("flush-test-writes-sizes")) {
    std::lock_guard<std::mutex> lock(gPickedLock);
    *request = new char;
    gPickedFlushes.insert(*request);
  }
  return result;
}
// send-test-drains-ring: the test of a send larger than the connection's ring (the minimal plugin's 4 MiB) loops
// until the whole message is in the ring ("finish what was started"), as the receiver drains it: fine while the
// receiver runs in another thread or process, a deadlock where each side sends and receives from one thread and
// both are inside such a test at once.
constexpr size_t kPickedRingBytes = 4u << 20;
ncclResult_t pickedTest(void* request, int* done, int* sizes) {
  {
    std::lock_guard<std::mutex> lock(gPickedLock);
    if (gPickedFlushes.erase(request) == 1) {
      delete static_cast<char*>(request);
      *done = 1;
      // The write through NULL, as an unsanitized plugin makes it: a SIGSEGV. Raised, not made: in the sanitized
      // builds UBSan or ASan would report the store first, and the tests take any such report for their failure.
      if (sizes == nullptr) raise(SIGSEGV);
      sizes[0] = 0;
      return ncclSuccess;
    }
  }
  if (pickedBug("send-test-drains-ring")) {
    bool large = false;
    {
      std::lock_guard<std::mutex> lock(gPickedLock);
      const auto send = gPickedSends.find(request);
      large = send != gPickedSends.end() && send->second > kPickedRingBytes;
      if (large) gPickedSends.erase(send);
    }
    if (large) {
      ncclResult_t result;
      while ((result = test(request, done, sizes)) == ncclSuccess && *done == 0) {
      }
      return result;
    }
  }
  // wait-fails-on-eintr: test first waits up to 0.1 ms on its completion channel (an eventfd here), and takes the
  // wait's EINTR (a signal caught meanwhile) for the channel's failure.
  if (pickedBug("wait-fails-on-eintr")) {
    static const int channel = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    pollfd ready{channel, POLLIN, 0};
    const timespec wait{0, 100000};
    if (ppoll(&ready, 1, &wait, nullptr) < 0) {
      std::fprintf(stderr, "WARN %s: waiting on the completion channel: %s\n", NNS_BUG_NAME, std::strerror(errno));
      return ncclSystemError;
    }
  }
  if (pickedBug("send-ring-4") || pickedBug("recv-ring-4")) {
    std::lock_guard<std::mutex> lock(gPickedLock);
    Ring& ring = pickedBug("send-ring-4") ? gSendRing : gRecvRing;
    std::erase_if(ring.overwritten, [](const auto& entry) {
      int finished = 0, unread[64];
      return test(entry.second, &finished, unread) != ncclSuccess || finished;
    });
    if (ring.holds(request)) {
      auto& slot = *static_cast<RingRequest*>(request);
      if (slot.real == nullptr) {
        *done = 1;
        return ncclSuccess;
      }
      int unread = 0;
      const bool send = &ring == &gSendRing;
      const ncclResult_t result = test(slot.real, done, send ? &unread : sizes);
      if (result != ncclSuccess || *done) {
        gPickedRecvs.erase(slot.real);
        slot.real = nullptr;
      }
      return result;
    }
  }
  if (pickedBug("slow-receives")) {  // a slow network, not a bug: no receive is done within 50 ms of its posting
    std::lock_guard<std::mutex> lock(gPickedLock);
    if (auto recv = gPickedRecvs.find(request);
        recv != gPickedRecvs.end() && std::chrono::steady_clock::now() - recv->second.posted < kSlowReceive) {
      *done = 0;
      return ncclSuccess;
    }
  }
  // size-unwritten: a receive's test that completes it leaves its sizes as they were (what the caller put there).
  std::vector<int> before;
  if (pickedBug("size-unwritten") && sizes != nullptr) {
    std::lock_guard<std::mutex> lock(gPickedLock);
    if (auto recv = gPickedRecvs.find(request); recv != gPickedRecvs.end())
      before.assign(sizes, sizes + recv->second.data.size());
  }
  ncclResult_t result = test(request, done, sizes);
  if (result == ncclSuccess && *done && !before.empty()) std::copy(before.begin(), before.end(), sizes);
  std::lock_guard<std::mutex> lock(gPickedLock);
  if (auto send = gPickedSends.find(request); send != gPickedSends.end() && (result != ncclSuccess || *done)) {
    if (result == ncclSuccess && sizes != nullptr && pickedBug("send-size"))
      sizes[0] = static_cast<int>(send->second) + 1;
    gPickedSends.erase(send);
  }
  auto recv = gPickedRecvs.find(request);
  if (recv == gPickedRecvs.end()) return result;
  // An error seen only once something arrived: a receive whose buffer still starts with 0 (the harness's peer-death
  // buffer, before any of the sender's 1s) waits on.
  if (result == ncclRemoteError && pickedBug("idle-death-hidden") &&
      *static_cast<unsigned char*>(recv->second.data[0]) == 0) {
    *done = 0;
    return ncclSuccess;
  }
  if (result == ncclRemoteError && pickedBug("death-completes")) {  // the dead peer's receive completes as 0 bytes
    *done = 1;
    if (sizes != nullptr) sizes[0] = 0;
    result = ncclSuccess;
  }
  // A message that was waiting when its receive came, too large for it: cut to fit on that path alone.
  if (result == ncclInvalidUsage && recv->second.late && pickedBug("late-truncation")) {
    *done = 1;
    if (sizes != nullptr) sizes[0] = static_cast<int>(recv->second.capacity[0]);
    result = ncclSuccess;
  }
  // posted-size-reported: a completed receive's sizes are the sizes its buffers were posted with, not what arrived
  // (the receive's descriptor read back instead of the completion's byte count): right whenever a message fills its
  // buffer, as every benchmark's does.
  if (result == ncclSuccess && *done && sizes != nullptr && pickedBug("posted-size-reported"))
    for (size_t i = 0; i < recv->second.capacity.size(); ++i) sizes[i] = static_cast<int>(recv->second.capacity[i]);
  if (result == ncclSuccess && *done && sizes != nullptr && pickedBug("last-byte"))
    for (size_t i = 0; i < recv->second.data.size(); ++i)
      if (sizes[i] > 0) static_cast<unsigned char*>(recv->second.data[i])[sizes[i] - 1] ^= 0x10;
  // The last receive of a group reported one byte short (an off-by-one on the group's last size), the others right.
  if (result == ncclSuccess && *done && sizes != nullptr && pickedBug("grouped-last-short") &&
      recv->second.data.size() > 1 && sizes[recv->second.data.size() - 1] > 0)
    sizes[recv->second.data.size() - 1] -= 1;
  // grouped-zero-sizes-packed: the completion record lists the sizes of the messages that carried bytes, in order (a
  // 0-byte message goes as a bare header and writes no record), and test copies the record to the front of sizes.
  if (result == ncclSuccess && *done && sizes != nullptr && pickedBug("grouped-zero-sizes-packed") &&
      recv->second.data.size() > 1) {
    const int n = static_cast<int>(recv->second.data.size());
    int packed = 0;
    for (int i = 0; i < n; ++i)
      if (sizes[i] > 0) sizes[packed++] = sizes[i];
    for (; packed < n; ++packed) sizes[packed] = 0;
  }
  if (result != ncclSuccess || *done) gPickedRecvs.erase(recv);
  return result;
}
ncclResult_t pickedCloseSend(void* comm) {
  {
    std::lock_guard<std::mutex> lock(gPickedLock);
    gSendRing.forget(comm);
    dropCachedRegistrations(comm);
    closePickedChannel(comm);
  }
  return comm == &gPickedNobody ? ncclSuccess : closeSend(comm);
}
ncclResult_t pickedCloseRecv(void* comm) {
  std::lock_guard<std::mutex> lock(gPickedLock);
  gPickedComms.erase(comm);
  gRecvRing.forget(comm);
  dropCachedRegistrations(comm);
  closePickedChannel(comm);
  return comm == &gPickedNobody ? ncclSuccess : closeRecv(comm);
}
}  // namespace
extern "C" {
__attribute__((visibility("default")))
ncclNet_v12_t ncclNetPlugin_v12 = {NNS_BUG_NAME, pickedInit,    pickedDevices,   pickedGetProperties,
                                   listen,       pickedConnect, pickedAccept,    pickedRegMr,
                                   regMrDmaBuf,  pickedDeregMr, pickedIsend,     pickedIrecv,
                                   pickedIflush, pickedTest,    pickedCloseSend, pickedCloseRecv,
                                   closeListen,  nullptr,       nullptr,         NNS_MAKE_VDEVICE,
                                   finalize,     nullptr};
}
// A makeVDevice only where a picked bug is about one (the other cases keep the minimal plugin's NULL: NCCL fuses
// nothing, and virtual-devices is skipped as before).
__attribute__((constructor)) void pickVDevice() {
  if (pickedSecondPort()) ncclNetPlugin_v12.makeVDevice = pickedMakeVDevice;
}
#else
extern "C" __attribute__((visibility("default"))) const ncclNet_v12_t ncclNetPlugin_v12 = {
    NNS_BUG_NAME, init,        devices,     getProperties, listen,  connect,          accept,
    regMr,        regMrDmaBuf, deregMr,     isend,         irecv,   iflush,           test,
    closeSend,    closeRecv,   closeListen, nullptr,       nullptr, NNS_MAKE_VDEVICE, finalize,
    nullptr};
#endif

#ifdef NNS_BUG_OLD_VERSION_DIFFERS
// Filled when the library is loaded: the real plugin's own v8 table with the hand-kept getProperties.
extern "C" {
__attribute__((visibility("default"))) ncclNet_v8_t ncclNetPlugin_v8 = {};
}
__attribute__((constructor)) void fillLegacyTable() {
  if (realV8() != nullptr) ncclNetPlugin_v8 = *realV8();
  ncclNetPlugin_v8.name = NNS_BUG_NAME;  // without the real table only init is set: it reports the missing library
  ncclNetPlugin_v8.init = legacyInit;
  ncclNetPlugin_v8.getProperties = legacyGetProperties;
}
#endif

#if defined(NNS_BUG_OLD_VERSION_P2P_ZERO) || defined(NNS_BUG_V11_PROPS_OVERRUN)
// Filled when the library is loaded from the real plugin's table, with the one function replaced.
#ifdef NNS_BUG_OLD_VERSION_P2P_ZERO
extern "C" {
__attribute__((visibility("default"))) ncclNet_v10_t ncclNetPlugin_v10 = {};
}
__attribute__((constructor)) void fillOlderTable() {
  if (realV10() != nullptr) ncclNetPlugin_v10 = *realV10();
  ncclNetPlugin_v10.name = NNS_BUG_NAME;
  ncclNetPlugin_v10.getProperties = v10GetProperties;
}
#else
extern "C" {
__attribute__((visibility("default"))) ncclNet_v11_t ncclNetPlugin_v11 = {};
}
__attribute__((constructor)) void fillOlderTable() {
  if (realV11() != nullptr) ncclNetPlugin_v11 = *realV11();
  ncclNetPlugin_v11.name = NNS_BUG_NAME;
  ncclNetPlugin_v11.getProperties = v11GetProperties;
}
#endif
#endif
