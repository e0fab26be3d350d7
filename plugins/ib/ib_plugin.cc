// ib_plugin.cc: the "nns-ib" verbs plugin: RC QPs, a receiver-driven CTS FIFO, RDMA WRITE(+IMM) data, RDMA READ flush.
//
// How a message moves (NCCL's own IB transport works the same way; see README.md):
//   1. irecv writes one FIFO entry per grouped receive (address, size, rkey per device, tag, sequence) into the
//      sender's FIFO slot with an RDMA WRITE.
//   2. isend waits until its slot's entries are there, matches its tag, and once every entry of the slot has a send
//      it RDMA-WRITEs the data (split into chunks over the connection's QPs). Each QP that carried data ends with a
//      WRITE_WITH_IMM; QP 0's carries the sizes of the slot into the receiver's size record. The immediate value
//      names the slot and how many immediates the slot produces (and a single receive's size below 1 MiB, in which
//      case the size-record write is skipped).
//   3. The receiver completes the slot when all immediates arrived; the sizes come from its size record.
// Nothing on this path allocates or registers memory: requests come from fixed pools, work requests from
// per-comm arrays, and the FIFO/size records live in one block registered at connect time.
#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <nccl_net/sdk.hpp>
#include <nccl_net/sdk/socket.hpp>

#include "ib_devices.hpp"
#include "verbs_loader.hpp"

namespace {

namespace sdk = nccl_net::sdk;
using Clock = std::chrono::steady_clock;
using nns_ib::Port;
using nns_ib::Verbs;

constexpr int kSlots = NCCL_NET_MAX_REQUESTS;  // FIFO slots = receives in flight per comm
constexpr int kMaxRecvs = 8;                   // grouped receives per irecv (props.maxRecvs)
constexpr int kMaxQps = 32;                    // QPs per connection
constexpr int kMaxDevs = NCCL_NET_MAX_DEVS_PER_NIC;
constexpr int kRecvDepth = 2 * kSlots;  // receive WRs kept posted per QP (one immediate per slot per QP)
constexpr size_t kChunkAlign = 128;
// A work request's length is 32 bits and test() reports sizes as int: NCCL cuts its transfers at maxP2pBytes.
constexpr size_t kMaxMessageBytes = size_t{1} << 30;
constexpr int kSendPoolSize = kSlots * kMaxRecvs;
// Flushes a receive comm may have posted and not yet seen tested: as NCCL's plugin, room for every receive of every
// slot (a comm shared by many channels keeps a flush per step in flight on each; 64 was reachable there, and a
// flush without a request fails the job). Each takes one READ on each device's flush QP.
constexpr int kFlushDepth = kSlots * kMaxRecvs;
constexpr int kRecvPoolSize = kSlots + kFlushDepth;  // receives plus flushes
// The flush QP's send queue and CQ hold as many READs as there can be flush requests: with no receive outstanding,
// every request of the pool may be a flush (a queue only kFlushDepth deep failed the 257th with ENOMEM, or overran
// the CQ on a provider that gives more than asked).
constexpr int kFlushQueueDepth = kRecvPoolSize;
constexpr auto kSideChannelCheckInterval = std::chrono::milliseconds(100);
// How long requests may still complete after the peer's close was seen (see checkSideChannel).
constexpr auto kPeerClosedGrace = std::chrono::seconds(1);

// wr_id layout: the kind in the top byte, an index below.
constexpr uint64_t kWrData = 1ull << 56;  // sender: last WR of a slot on one QP; index = slot
constexpr uint64_t kWrFifo = 2ull << 56;  // receiver: FIFO entry write; index = slot
constexpr uint64_t kWrRecv = 3ull << 56;  // receiver: receive WR consumed by an immediate; index = QP
constexpr uint64_t kWrKindMask = 0xffull << 56;

// The immediate value of a slot's WRITE_WITH_IMMs: slot (5 bits), immediates the slot sends (6 bits), and for a single
// receive below 1 MiB its size (flag bit + 20 bits), which spares the size-record write (one packet less per message).
constexpr uint32_t kImmSizeFlag = 1u << 11;
constexpr size_t kImmMaxSize = (1u << 20) - 1;
static_assert(kSlots <= 32 && kMaxQps <= 63, "slot and immediate count must fit the immediate layout");
uint32_t encodeImmediate(int slot, int immediates, bool sizeInline, size_t size) {
  uint32_t imm = static_cast<uint32_t>(slot) | (static_cast<uint32_t>(immediates) << 5);
  if (sizeInline) imm |= kImmSizeFlag | (static_cast<uint32_t>(size) << 12);
  return imm;
}

// ---- parameters, read once at init
// ------------------------------------------------------------------------------------
struct Params {
  std::string hcaSpec;
  int gidIndex = -1;
  nns_ib::GidPreference gidPreference;
  int qpsPerConnection = 1;
  int timeout = 20;
  int retryCount = 7;
  int serviceLevel = 0;
  int trafficClass = 0;
  int pkeyIndex = 0;
  bool splitDataOnQps = true;
  size_t splitMinBytes = 16384;
  bool gdrFlushDisable = false;
  int peerTimeoutMs = 10000;
  int connectTimeoutMs = 120000;
  bool mergeDevices = false;
  // NCCL_IB_PCI_RELAXED_ORDERING: 0 off, 1 on, 2 on where libibverbs can ask for it (as NCCL).
  int relaxedOrdering = 2;
  // NCCL_IB_ADAPTIVE_ROUTING: negative (unset; NCCL's -2) by the link layer, on for InfiniBand and off for RoCE (as
  // NCCL); else 0 or 1.
  int adaptiveRouting = -1;
  size_t arThreshold = 8192;  // NCCL_IB_AR_THRESHOLD
  bool useInline = false;     // NCCL_IB_USE_INLINE: FIFO entries written inline

  // What discoverPorts chooses ports and GIDs by (currentGid too, per connection).
  nns_ib::DiscoveryOptions discovery() const {
    nns_ib::DiscoveryOptions options;
    options.hcaSpec = hcaSpec;
    options.gidIndex = gidIndex;
    options.gidPreference = gidPreference;
    return options;
  }

  static Params fromEnvironment() {
    Params p;
    const char* hca = std::getenv("NCCL_IB_HCA");
    p.hcaSpec = hca != nullptr ? hca : "";
    p.gidIndex = static_cast<int>(sdk::envInteger("NCCL_IB_GID_INDEX", -1, -1, 255));
    p.gidPreference = nns_ib::GidPreference::fromSettings(
        std::getenv("NCCL_IB_ADDR_FAMILY"), std::getenv("NCCL_IB_ADDR_RANGE"), std::getenv("NCCL_IB_ROCE_VERSION_NUM"));
    // NCCL's range is 1..128; past this plugin's kMaxQps a connection gets kMaxQps, not the default of 1.
    const long qps = sdk::envInteger("NCCL_IB_QPS_PER_CONNECTION", 1, 1, 128);
    if (qps > kMaxQps)
      NCCL_NET_WARN("NCCL_IB_QPS_PER_CONNECTION=%ld: this plugin spreads a connection over at most %d QPs; using %d",
                    qps, kMaxQps, kMaxQps);
    p.qpsPerConnection = static_cast<int>(std::min<long>(qps, kMaxQps));
    p.timeout = static_cast<int>(sdk::envInteger("NCCL_IB_TIMEOUT", 20, 1, 31));
    p.retryCount = static_cast<int>(sdk::envInteger("NCCL_IB_RETRY_CNT", 7, 0, 7));
    p.serviceLevel = static_cast<int>(sdk::envInteger("NCCL_IB_SL", 0, 0, 15));
    p.trafficClass = static_cast<int>(sdk::envInteger("NCCL_IB_TC", 0, 0, 255));
    p.pkeyIndex = static_cast<int>(sdk::envInteger("NCCL_IB_PKEY", 0, 0, 0xffff));
    p.splitDataOnQps = sdk::envInteger("NCCL_IB_SPLIT_DATA_ON_QPS", 1, 0, 1) != 0;
    p.splitMinBytes = static_cast<size_t>(sdk::envInteger("NNS_IB_SPLIT_MIN_BYTES", 16384, 128, 1L << 30));
    p.gdrFlushDisable = sdk::envInteger("NCCL_GDR_FLUSH_DISABLE", 0, 0, 1) != 0;
    p.peerTimeoutMs = static_cast<int>(sdk::envInteger("NNS_IB_PEER_TIMEOUT_MS", 10000, 0, 3600 * 1000));
    p.connectTimeoutMs = static_cast<int>(sdk::envInteger("NNS_IB_CONNECT_TIMEOUT_MS", 120000, 1000, 3600 * 1000));
    p.mergeDevices = sdk::envInteger("NNS_IB_MERGE_DEVICES", 0, 0, 1) != 0;
    p.relaxedOrdering = static_cast<int>(sdk::envInteger("NCCL_IB_PCI_RELAXED_ORDERING", 2, 0, 2));
    p.adaptiveRouting = static_cast<int>(sdk::envInteger("NCCL_IB_ADAPTIVE_ROUTING", -1, -2, 1));
    p.arThreshold = static_cast<size_t>(sdk::envInteger("NCCL_IB_AR_THRESHOLD", 8192, 0, 1L << 40));
    p.useInline = sdk::envInteger("NCCL_IB_USE_INLINE", 0, 0, 1) != 0;
    return p;
  }
};

// ---- wire formats --------------------------------------------------------------------------------------------------
// One posted receive as the receiver describes it to the sender (64 bytes; `idx` last so it lands last).
struct FifoEntry {
  uint64_t addr;
  uint64_t size;
  uint32_t rkeys[kMaxDevs];  // the receive buffer's rkey on each of the receiver's devices
  uint32_t nreqs;            // receives grouped in this slot
  int32_t tag;
  uint64_t idx;  // sequence + 1 when the entry is valid
};
static_assert(sizeof(FifoEntry) == 64, "FIFO entries are 64 bytes");

// Registered once per comm: the sender's FIFO and size staging, the receiver's FIFO staging, size record and the
// flush target.
struct ControlBlock {
  FifoEntry fifo[kSlots][kMaxRecvs];     // sender: written remotely by the receiver
  FifoEntry staging[kSlots][kMaxRecvs];  // receiver: what irecv RDMA-writes into the sender's FIFO
  uint64_t sizes[kSlots][kMaxRecvs];     // sender: staging; receiver: written remotely by the sender
  uint64_t flushTarget[kMaxDevs];        // receiver: RDMA READ destination of iflush
};

struct QpWire {
  uint32_t qpn;
  uint32_t device;  // index into the owner's comm devices
  uint16_t lid;
  uint8_t linkLayer;
  uint8_t mtu;
  uint8_t gid[16];
  uint32_t reserved;
};

// Exchanged over the TCP side channel, sender first.
struct ConnectInfo {
  uint32_t magic;
  uint32_t nqps;
  uint32_t ndevs;
  // The sender's path settings, which the receiver adopts (as NCCL's IB does) so that its FIFO writes and ACKs travel
  // in the same traffic class / service level as the data. Valid when kPathSettings is set in `flags`.
  uint16_t trafficClass;
  uint8_t serviceLevel;
  uint8_t flags;
  QpWire qps[kMaxQps];
  uint64_t controlAddr;  // sender: its FIFO; receiver: its size record
  uint32_t controlRkey;  // on the device of QP 0
  uint32_t ready;
  char deviceName[64];
};
constexpr uint32_t kConnectMagic = sdk::handleMagic("nns-ib-connect-v1");
constexpr uint8_t kPathSettings = 1;

struct HandlePayload {
  sdk::SocketAddress address;
  uint32_t ndevs;  // physical devices behind the listening device (so the connector sizes its QP set)
  uint32_t reserved;
};
constexpr sdk::HandleCodec<HandlePayload> kHandleCodec(sdk::handleMagic("nns-ib"), 1);

// ---- devices as the plugin exposes them: physical ports, then fused vNICs
// ----------------------------------------------
struct NetDevice {
  std::string name;
  std::vector<int> ports;    // indices into the port table: where QPs and memory registrations go
  std::vector<int> members;  // what getProperties lists in vProps: itself, or the devices a vNIC fuses
  bool fused = false;        // made by makeVDevice (cannot be fused again)
};

struct Context {
  int trafficClass;
};

struct MemoryHandle;
struct Request;

struct CommDevice {
  Port* port = nullptr;
  // The port's GID as this comm found it (nns_ib::currentGid): RoCE addresses may change after init.
  int gidIndex = 0;
  ibv_gid gid{};
  ibv_cq* cq = nullptr;
  ibv_mr* controlMr = nullptr;
  // Receiver, once a GPU buffer was registered. regMr may run on another thread than the one driving the comm (NCCL
  // registers from its proxy service thread while the progress thread tests), so they are published atomically:
  // the CQ first, then the QP, which iflush takes as "ready".
  std::atomic<ibv_cq*> flushCq{nullptr};
  std::atomic<ibv_qp*> flushQp{nullptr};
};

struct QpSlot {
  ibv_qp* qp = nullptr;
  int device = 0;  // local comm device
  uint32_t remoteDevice = 0;
};

struct Comm {
  bool isSender = false;
  int trafficClass = 0;  // of every QP of the comm: the sender's choice, adopted by the receiver
  int serviceLevel = 0;
  int ndevs = 0;
  CommDevice devs[kMaxDevs];
  int nqps = 0;
  QpSlot qps[kMaxQps];
  int fd = -1;  // TCP side channel: kept open so a dead peer is noticed
  std::string peer;
  ControlBlock* control = nullptr;
  uint64_t remoteControlAddr = 0;
  uint32_t remoteControlRkey = 0;
  // Set once, by the thread driving the comm; read by deregMr from any thread.
  std::atomic<bool> failed{false};
  ncclResult_t failure = ncclSuccess;  // written before `failed`
  // Why the comm must fail, set by a deregMr (any thread) of a handle that pending requests use; the thread driving
  // the comm fails it at its next call. Only the first cause is kept.
  std::atomic<std::string*> poison{nullptr};
  // The first asynchronous event that broke one of its QPs or CQs (their context is the comm): the event type + 1 in
  // the high half, the QP number (0 for a CQ) in the low; 0 for none. Written by whichever thread reads the event,
  // before it acknowledges it (the QP or CQ, so the comm, cannot be destroyed until then).
  std::atomic<uint64_t> asyncFatal{0};
  Clock::time_point lastSideChannelCheck = Clock::now();
  Clock::time_point peerClosedSeen{};  // when the side channel first read EOF; the epoch before
  // Sender: each QP's writes of a slot carrying more than NCCL_IB_AR_THRESHOLD bytes end in a separate zero-byte
  // WRITE_WITH_IMM, so the immediate never rides a large write an adaptively routed fabric may deliver in pieces.
  bool adaptiveRouting = false;
  bool announcedImplicit = false;  // the INFO line about buffers without a handle was said (once per comm)
  // Receiver: FIFO writes up to this many bytes go inline (NCCL_IB_USE_INLINE; what QP 0 was granted).
  uint32_t fifoInlineBytes = 0;
  int pending = 0;  // requests handed out and not yet completed by test()
  // Buffers a caller passed without a memory handle, each registered for its one request and deregistered when
  // test() completes it (or at close). NCCL always registers (regMr) before isend/irecv, so it never takes this path;
  // tools and tests that skip regMr do.
  std::vector<MemoryHandle*> implicitRegistrations;
  // Guards what regMr/deregMr touch from whichever thread calls them: `registrations`, `retired` and the creation of
  // the flush QPs. Never taken on the data path.
  std::mutex registrationMutex;
  // What regMr/regMrDmaBuf handed out and deregMr has not taken back: closing the comm orphans them (their comm
  // becomes NULL), so a deregMr after the close does not read the freed comm.
  std::vector<MemoryHandle*> registrations;
  // Handles deregistered while pending requests used them: their MRs are gone, their structs stay until close (a
  // request may still read their keys).
  std::vector<MemoryHandle*> retired;
};

struct MemoryHandle {
  static constexpr uint32_t kMagic = 0x6e6d6869;         // "nmhi"
  static constexpr uint32_t kRetiredMagic = 0x6e6d6878;  // "nmhx": deregistered while in use, kept until close
  uint32_t magic = kMagic;
  Comm* comm = nullptr;
  int type = NCCL_PTR_HOST;
  int ndevs = 0;
  ibv_mr* mrs[kMaxDevs] = {};
  // The keys of `mrs`, which the data path reads (never the ibv_mr itself, which deregMr frees).
  uint32_t lkeys[kMaxDevs] = {};
  uint32_t rkeys[kMaxDevs] = {};
  uintptr_t begin = 0, end = 0;  // registered range
  // Requests posted with this handle that test() has not completed: counted by the thread driving the comm, read by
  // deregMr on any thread (NCCL deregisters from another thread than the one that tests).
  mutable std::atomic<int> users{0};
};

struct Request {
  static constexpr uint32_t kMagic = 0x6e697271;  // "niqr"
  enum Kind { kSend, kRecv, kFlush };
  uint32_t magic = kMagic;
  Kind kind = kSend;
  Comm* comm = nullptr;
  int slot = 0;
  int nreqs = 0;
  size_t size = 0;                        // send
  unsigned char* data = nullptr;          // send
  const MemoryHandle* mhandle = nullptr;  // send
  // receive: each grouped buffer's handle; flush: the handle read back in [0]. deregMr of one of them (or of a
  // send's mhandle) before the request is done fails the comm.
  const MemoryHandle* mhandles[kMaxRecvs] = {};
  // Which of its handles implicitRegistration made for this request alone (bit r: mhandles[r], bit 0 for a send's
  // mhandle), released with it. Kept here rather than read from the handles: once test() has dropped their counts, a
  // caller's own handle may be freed by a deregMr on another thread.
  uint32_t implicitMask = 0;
  bool done = false;
  int pendingReads = 0;  // flush
};

struct SendSlot {
  int nreqs = 0;  // 0: not yet matched
  int matched = 0;
  Request* reqs[kMaxRecvs] = {};
  int pendingCompletions = 0;
};

struct SendComm : Comm {
  uint64_t sequence = 0;  // next FIFO slot to consume
  uint64_t roundRobin = 0;
  SendSlot slots[kSlots];
  sdk::RequestPool<Request, kSendPoolSize> requests;
  // Work requests of one slot, per QP (never allocated on the data path).
  ibv_send_wr wrs[kMaxQps][kMaxRecvs + 2];
  ibv_sge sges[kMaxQps][kMaxRecvs + 2];
  int wrCount[kMaxQps] = {};
};

struct RecvSlot {
  Request* request = nullptr;
  int immediatesExpected = 0;
  int immediatesReceived = 0;
  bool fifoWritten = false;
  bool sizeInline = false;  // the size came in the immediate; the size record was not written
  size_t inlineSize = 0;
};

struct RecvComm : Comm {
  uint64_t sequence = 0;
  RecvSlot slots[kSlots];
  sdk::RequestPool<Request, kRecvPoolSize> requests;
};

// ---- the plugin-wide state
// ---------------------------------------------------------------------------------------------
struct Global {
  std::mutex mutex;
  bool initialised = false;
  std::string initError;
  const Verbs* verbs = nullptr;
  Params params;
  std::vector<nns_ib::Hca*> hcas;
  std::deque<Port> ports;         // stable addresses: comms point at them
  std::deque<NetDevice> devices;  // physical ports first, then vNICs
  bool gdr = false;
  bool nvidiaDriver = false;
  // User buffers are registered with IBV_ACCESS_RELAXED_ORDERING (never the control block: a FIFO entry's `idx`
  // must land after the rest of it). Cleared for good when a device refuses the flag.
  std::atomic<bool> relaxedOrdering{false};
  pid_t owner = 0;                // the process whose HCA contexts these are (see reopenAfterFork)
  std::atomic<int> liveComms{0};  // send/recv comms not yet closed
};
// A plain pointer (trivially destructible), so no static destructor runs before a late call into the plugin.
Global*& globalSlot() {
  static Global* g = nullptr;
  return g;
}
Global& global() {
  Global*& g = globalSlot();
  if (g == nullptr) g = new Global;
  return *g;
}
const Verbs& verbs() {
  return *global().verbs;
}
const Params& params() {
  return global().params;
}

// A verbs context belongs to the process that opened it: the kernel refuses commands a forked child sends through
// the parent's context (EACCES). NCCL never forks after init, but tools do (a conformance harness forks each rule's
// peer after init), so a child re-opens every HCA and PD on its first listen/connect/accept. Comms and memory
// registrations of the parent stay unusable in the child; the parent's own are untouched.
ncclResult_t reopenAfterFork();

std::string errnoText(int error) {
  return std::string(std::strerror(error)) + " (errno " + std::to_string(error) + ")";
}

// Marks the comm failed, logs once (unless the cause was logged where it happened), and tells the peer by shutting
// the side channel down. Only the thread driving the comm calls it.
ncclResult_t fail(Comm* comm, ncclResult_t code, const std::string& what, bool warn = true) {
  if (!comm->failed.load(std::memory_order_relaxed)) {
    comm->failure = code;
    comm->failed.store(true, std::memory_order_release);
    if (warn)
      NCCL_NET_WARN("%s with peer %s: %s", comm->isSender ? "send" : "receive", comm->peer.c_str(), what.c_str());
    if (comm->fd >= 0) shutdown(comm->fd, SHUT_RDWR);
  }
  return comm->failure;
}

ncclResult_t failedResult(Comm* comm) {
  NCCL_NET_WARN("%s comm with peer %s already failed", comm->isSender ? "send" : "receive", comm->peer.c_str());
  return comm->failure;
}

// What every call on a comm checks first: a failure, or a cause a deregMr on another thread left for it.
bool unusable(const Comm* comm) {
  return comm->failed.load(std::memory_order_relaxed) || comm->poison.load(std::memory_order_relaxed) != nullptr;
}
ncclResult_t unusableResult(Comm* comm) {
  if (comm->failed.load(std::memory_order_relaxed)) return failedResult(comm);
  const std::string* cause = comm->poison.load(std::memory_order_acquire);
  return fail(comm, ncclInvalidUsage, *cause, /*warn=*/false);  // deregMr logged it
}

// A request takes each distinct handle it uses once, and gives them back when test() completes it.
void countUsers(const MemoryHandle* const* handles, int n, int delta) {
  for (int r = 0; r < n; ++r) {
    const MemoryHandle* mh = handles[r];
    if (mh == nullptr || std::find(handles, handles + r, mh) != handles + r) continue;
    mh->users.fetch_add(delta, std::memory_order_acq_rel);
  }
}

// Deregisters and frees a registration made for one request of a caller without a memory handle.
void freeImplicit(const MemoryHandle* mh) {
  for (int d = 0; d < mh->ndevs; ++d)
    if (mh->mrs[d] != nullptr) verbs().deregMr(mh->mrs[d]);
  delete mh;
}

// Frees the registrations among `handles` that implicitRegistration made for their request alone (bit r of `mask`:
// handles[r]), once it is done or was never posted. The others, the caller's own, are not looked at.
void releaseImplicit(Comm* comm, const MemoryHandle* const* handles, int n, uint32_t mask) {
  for (int r = 0; r < n; ++r) {
    if ((mask >> r & 1) == 0) continue;
    std::erase(comm->implicitRegistrations, handles[r]);
    freeImplicit(handles[r]);
  }
}

ncclResult_t reopenAfterFork() {
  Global& g = global();
  std::lock_guard<std::mutex> lock(g.mutex);
  if (g.owner == getpid()) return ncclSuccess;
  int count = 0;
  ibv_device** list = verbs().getDeviceList(&count);
  if (list == nullptr) {
    NCCL_NET_WARN("re-opening HCAs in forked process %d: ibv_get_device_list: %s", static_cast<int>(getpid()),
                  std::strerror(errno));
    return ncclSystemError;
  }
  ncclResult_t result = ncclSuccess;
  for (nns_ib::Hca* hca : g.hcas) {
    // Re-opened already by an attempt that failed on a later HCA: opening it again would leak this one.
    if (hca->owner.load(std::memory_order_acquire) == getpid()) continue;
    ibv_context* context = nullptr;
    for (int i = 0; i < count && context == nullptr; ++i)
      if (hca->name == verbs().getDeviceName(list[i])) context = verbs().openDevice(list[i]);
    const bool eventsReadable = context != nullptr && nns_ib::makeAsyncEventsNonBlocking(context);
    ibv_pd* pd = context != nullptr ? verbs().allocPd(context) : nullptr;
    if (pd == nullptr) {
      NCCL_NET_WARN("re-opening %s in forked process %d failed: %s", hca->name.c_str(), static_cast<int>(getpid()),
                    std::strerror(errno));
      if (context != nullptr) verbs().closeDevice(context);  // a later attempt opens it afresh
      result = ncclSystemError;
      break;
    }
    // The parent's context and PD are left alone: releasing them from here would be refused as well.
    hca->context = context;
    hca->pd = pd;
    hca->eventsReadable.store(eventsReadable, std::memory_order_release);
    hca->owner.store(getpid(), std::memory_order_release);  // its events are this process's to read now
  }
  verbs().freeDeviceList(list);
  if (result == ncclSuccess) {
    NCCL_NET_INFO(NCCL_INIT | NCCL_NET, "process %d forked after init: re-opened %zu HCA(s)",
                  static_cast<int>(getpid()), g.hcas.size());
    g.owner = getpid();
  }
  return result;
}

// ---- QP setup -------------------------------------------------------------------------------------------------------
// `inlineBytes`: what the QP should accept inline (0 for none); a device that refuses it gets one FIFO entry's worth,
// then none. *grantedInline (when given) receives what it has.
// `remoteRead`: the QP answers RDMA READs (the flush QP, which reads through itself); data QPs take RDMA WRITEs only,
// as NCCL's, so a peer cannot read this process's registered memory through them.
ibv_qp* createQp(Comm* comm, Port* port, ibv_cq* cq, int maxSendWr, int maxRecvWr, bool remoteRead, std::string* error,
                 uint32_t inlineBytes = 0, uint32_t* grantedInline = nullptr) {
  ibv_qp_init_attr init{};
  init.qp_context = comm;  // where an asynchronous event naming this QP is told (drainAsyncEvents)
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  int maxWr = port->hca->attr.max_qp_wr;
  init.cap.max_send_wr = static_cast<uint32_t>(std::min(maxSendWr, maxWr));
  init.cap.max_recv_wr = static_cast<uint32_t>(std::min(maxRecvWr, maxWr));
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  ibv_qp* qp = nullptr;
  for (uint32_t wanted : {inlineBytes, std::min<uint32_t>(inlineBytes, sizeof(FifoEntry)), 0u}) {
    init.cap.max_inline_data = wanted;
    qp = verbs().createQp(port->hca->pd, &init);
    if (qp != nullptr || wanted == 0) break;
  }
  if (grantedInline != nullptr) *grantedInline = qp != nullptr ? init.cap.max_inline_data : 0;
  if (qp == nullptr) {
    *error = "ibv_create_qp on " + port->name + ": " + errnoText(errno);
    return nullptr;
  }
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = static_cast<uint16_t>(params().pkeyIndex);
  attr.port_num = static_cast<uint8_t>(port->port);
  attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | (remoteRead ? IBV_ACCESS_REMOTE_READ : 0);
  int rc = verbs().modifyQp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (rc != 0) {
    *error = "ibv_modify_qp to INIT on " + port->name + ": " + errnoText(rc);
    verbs().destroyQp(qp);
    return nullptr;
  }
  return qp;
}

QpWire describeQp(ibv_qp* qp, int device, const CommDevice& dev) {
  QpWire wire{};
  wire.qpn = qp->qp_num;
  wire.device = static_cast<uint32_t>(device);
  wire.lid = dev.port->attr.lid;
  wire.linkLayer = dev.port->attr.link_layer;
  wire.mtu = static_cast<uint8_t>(dev.port->attr.active_mtu);
  std::memcpy(wire.gid, dev.gid.raw, 16);
  return wire;
}

// INIT -> RTR -> RTS towards `remote`.
bool connectQp(ibv_qp* qp, const CommDevice& dev, const QpWire& remote, int trafficClass, int serviceLevel,
               std::string* error) {
  const Port* port = dev.port;
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = static_cast<ibv_mtu>(std::min<int>(port->attr.active_mtu, remote.mtu));
  attr.dest_qp_num = remote.qpn;
  attr.rq_psn = 0;
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = 12;
  attr.ah_attr.port_num = static_cast<uint8_t>(port->port);
  attr.ah_attr.sl = static_cast<uint8_t>(serviceLevel);
  if (port->isEthernet()) {
    attr.ah_attr.is_global = 1;
    std::memcpy(attr.ah_attr.grh.dgid.raw, remote.gid, 16);
    attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(dev.gidIndex);
    attr.ah_attr.grh.hop_limit = 255;
    attr.ah_attr.grh.traffic_class = static_cast<uint8_t>(trafficClass);
  } else {
    attr.ah_attr.dlid = remote.lid;
  }
  int rc = verbs().modifyQp(qp, &attr,
                            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (rc != 0) {
    *error =
        "ibv_modify_qp to RTR on " + port->name + " (remote QP " + std::to_string(remote.qpn) + "): " + errnoText(rc);
    return false;
  }
  attr = ibv_qp_attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = static_cast<uint8_t>(params().timeout);
  attr.retry_cnt = static_cast<uint8_t>(params().retryCount);
  attr.rnr_retry = 7;
  attr.sq_psn = 0;
  attr.max_rd_atomic = 1;
  rc = verbs().modifyQp(
      qp, &attr,
      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
  if (rc != 0) {
    *error = "ibv_modify_qp to RTS on " + port->name + ": " + errnoText(rc);
    return false;
  }
  return true;
}

void destroyComm(Comm* comm) {
  {
    std::lock_guard<std::mutex> lock(comm->registrationMutex);
    for (MemoryHandle* mh : comm->registrations) mh->comm = nullptr;
    for (MemoryHandle* mh : comm->retired) delete mh;  // their MRs went at deregMr
  }
  for (MemoryHandle* mh : comm->implicitRegistrations) freeImplicit(mh);  // of requests never completed
  for (int i = 0; i < comm->nqps; ++i)
    if (comm->qps[i].qp != nullptr) verbs().destroyQp(comm->qps[i].qp);
  for (int d = 0; d < comm->ndevs; ++d) {
    CommDevice& dev = comm->devs[d];
    if (ibv_qp* qp = dev.flushQp.load()) verbs().destroyQp(qp);
    if (ibv_cq* cq = dev.flushCq.load()) verbs().destroyCq(cq);
    if (dev.cq != nullptr) verbs().destroyCq(dev.cq);
    if (dev.controlMr != nullptr) verbs().deregMr(dev.controlMr);
  }
  if (comm->fd >= 0) close(comm->fd);
  delete comm->poison.load();
  std::free(comm->control);
  --global().liveComms;
  if (comm->isSender) {
    delete static_cast<SendComm*>(comm);
  } else {
    delete static_cast<RecvComm*>(comm);
  }
}

// CQs, the control block and `nqps` QPs (QP i on local device i % ndevs), all in INIT.
bool buildComm(Comm* comm, const NetDevice& device, int nqps, std::string* error) {
  comm->ndevs = static_cast<int>(device.ports.size());
  comm->nqps = nqps;
  void* control = nullptr;
  if (posix_memalign(&control, 4096, sizeof(ControlBlock)) != 0) {
    *error = "cannot allocate the control block";
    return false;
  }
  std::memset(control, 0, sizeof(ControlBlock));
  comm->control = static_cast<ControlBlock*>(control);
  int qpsPerDevice = (nqps + comm->ndevs - 1) / comm->ndevs;
  // Per slot and QP: a write per grouped receive, the size record, and with adaptive routing a zero-byte immediate.
  int sendDepth = kSlots * (kMaxRecvs + 2) + kSlots;
  for (int d = 0; d < comm->ndevs; ++d) {
    CommDevice& dev = comm->devs[d];
    dev.port = &global().ports[device.ports[d]];
    if (!nns_ib::currentGid(verbs(), *dev.port, params().discovery(), &dev.gidIndex, &dev.gid, error)) return false;
    if (dev.gidIndex != dev.port->gidIndex || std::memcmp(dev.gid.raw, dev.port->gid.raw, 16) != 0)
      NCCL_NET_INFO(NCCL_NET, "%s: GID %d %s for this connection (at init: GID %d %s): its addresses changed",
                    dev.port->name.c_str(), dev.gidIndex, nns_ib::gidText(dev.gid).c_str(), dev.port->gidIndex,
                    nns_ib::gidText(dev.port->gid).c_str());
    int cqDepth = std::min(qpsPerDevice * (kRecvDepth + sendDepth), dev.port->hca->attr.max_cqe);
    dev.cq = verbs().createCq(dev.port->hca->context, cqDepth, comm, nullptr, 0);
    if (dev.cq == nullptr) {
      *error = "ibv_create_cq(" + std::to_string(cqDepth) + ") on " + dev.port->name + ": " + errnoText(errno);
      return false;
    }
    dev.controlMr = verbs().regMr(dev.port->hca->pd, comm->control, sizeof(ControlBlock),
                                  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    if (dev.controlMr == nullptr) {
      *error = "ibv_reg_mr of the control block on " + dev.port->name + ": " + errnoText(errno);
      return false;
    }
  }
  for (int i = 0; i < nqps; ++i) {
    QpSlot& slot = comm->qps[i];
    slot.device = i % comm->ndevs;
    CommDevice& dev = comm->devs[slot.device];
    // The receiver's QP 0 writes the FIFO entries: inline when asked (NCCL_IB_USE_INLINE), as much as it takes.
    bool fifoQp = !comm->isSender && i == 0 && params().useInline;
    slot.qp = createQp(comm, dev.port, dev.cq, sendDepth, comm->isSender ? 1 : kRecvDepth, false, error,
                       fifoQp ? kMaxRecvs * sizeof(FifoEntry) : 0, fifoQp ? &comm->fifoInlineBytes : nullptr);
    if (slot.qp == nullptr) return false;
  }
  if (comm->isSender) {
    // As NCCL: on by default where every port of the comm is InfiniBand (RoCE fabrics do not route adaptively).
    bool infiniband = true;
    for (int d = 0; d < comm->ndevs; ++d) infiniband &= !comm->devs[d].port->isEthernet();
    comm->adaptiveRouting = params().adaptiveRouting >= 0 ? params().adaptiveRouting == 1 : infiniband;
  }
  return true;
}

void describeComm(const Comm* comm, ConnectInfo* info, uint64_t controlAddr) {
  std::memset(info, 0, sizeof(*info));
  info->magic = kConnectMagic;
  info->nqps = static_cast<uint32_t>(comm->nqps);
  info->ndevs = static_cast<uint32_t>(comm->ndevs);
  info->trafficClass = static_cast<uint16_t>(comm->trafficClass);
  info->serviceLevel = static_cast<uint8_t>(comm->serviceLevel);
  info->flags = kPathSettings;
  for (int i = 0; i < comm->nqps; ++i)
    info->qps[i] = describeQp(comm->qps[i].qp, comm->qps[i].device, comm->devs[comm->qps[i].device]);
  info->controlAddr = controlAddr;
  info->controlRkey = comm->devs[comm->qps[0].device].controlMr->rkey;
  std::snprintf(info->deviceName, sizeof(info->deviceName), "%s", comm->devs[0].port->name.c_str());
}

bool connectAllQps(Comm* comm, const ConnectInfo& remote, std::string* error) {
  for (int i = 0; i < comm->nqps; ++i) {
    QpSlot& slot = comm->qps[i];
    slot.remoteDevice = remote.qps[i].device;
    // An InfiniBand port and an Ethernet (RoCE) one cannot reach each other: said now, not as a transition or retry
    // error later (as NCCL refuses "incompatible devices").
    const Port* local = comm->devs[slot.device].port;
    if (remote.qps[i].linkLayer != local->attr.link_layer) {
      *error = "QP " + std::to_string(i) + ": local port " + local->name + " is " +
               (local->isEthernet() ? "Ethernet (RoCE)" : "InfiniBand") + ", the peer's is " +
               (remote.qps[i].linkLayer == IBV_LINK_LAYER_ETHERNET ? "Ethernet (RoCE)" : "InfiniBand") +
               ": select ports of one link layer on both sides (NCCL_IB_HCA)";
      return false;
    }
    if (!connectQp(slot.qp, comm->devs[slot.device], remote.qps[i], comm->trafficClass, comm->serviceLevel, error))
      return false;
  }
  return true;
}

bool validRemoteInfo(const ConnectInfo& info, std::string* error) {
  if (info.magic != kConnectMagic) {
    *error = "the peer sent connection info with a wrong magic (not an nns-ib peer, or another plugin version)";
    return false;
  }
  if (info.nqps < 1 || info.nqps > kMaxQps || info.ndevs < 1 || info.ndevs > kMaxDevs) {
    *error = "the peer sent " + std::to_string(info.nqps) + " QPs over " + std::to_string(info.ndevs) +
             " devices, outside 1.." + std::to_string(kMaxQps) + " / 1.." + std::to_string(kMaxDevs);
    return false;
  }
  if ((info.flags & kPathSettings) != 0 && (info.trafficClass > 255 || info.serviceLevel > 15)) {
    *error = "the peer asked for traffic class " + std::to_string(info.trafficClass) + " / service level " +
             std::to_string(info.serviceLevel) + ", outside 0..255 / 0..15";
    return false;
  }
  for (uint32_t i = 0; i < info.nqps; ++i) {
    if (info.qps[i].device >= info.ndevs) {
      *error = "the peer's QP " + std::to_string(i) + " names device " + std::to_string(info.qps[i].device);
      return false;
    }
  }
  return true;
}

bool postReceives(RecvComm* comm, int qpIndex, int count, std::string* error) {
  for (int i = 0; i < count; ++i) {
    ibv_recv_wr wr{};
    wr.wr_id = kWrRecv | static_cast<uint64_t>(qpIndex);
    wr.num_sge = 0;
    ibv_recv_wr* bad = nullptr;
    int rc = ibv_post_recv(comm->qps[qpIndex].qp, &wr, &bad);
    if (rc != 0) {
      *error = "ibv_post_recv on QP " + std::to_string(comm->qps[qpIndex].qp->qp_num) + ": " + errnoText(rc);
      return false;
    }
  }
  return true;
}

// A QP connected to itself, for iflush's RDMA READ (the read completing proves earlier PCIe writes landed). Called
// by regMr (any thread) under the comm's registrationMutex; the thread driving the comm sees the CQ and QP only once
// they are ready.
bool ensureFlushQps(RecvComm* comm, std::string* error) {
  for (int d = 0; d < comm->ndevs; ++d) {
    CommDevice& dev = comm->devs[d];
    if (dev.flushQp.load(std::memory_order_relaxed) != nullptr) continue;
    ibv_cq* cq = verbs().createCq(dev.port->hca->context, kFlushQueueDepth, static_cast<Comm*>(comm), nullptr, 0);
    if (cq == nullptr) {
      *error = "ibv_create_cq for the flush QP on " + dev.port->name + ": " + errnoText(errno);
      return false;
    }
    ibv_qp* qp = createQp(comm, dev.port, cq, kFlushQueueDepth, 1, true, error);
    if (qp == nullptr || !connectQp(qp, dev, describeQp(qp, d, dev), comm->trafficClass, comm->serviceLevel, error)) {
      // Nothing half-made is published.
      if (qp != nullptr) verbs().destroyQp(qp);
      verbs().destroyCq(cq);
      return false;
    }
    dev.flushCq.store(cq, std::memory_order_release);
    dev.flushQp.store(qp, std::memory_order_release);
  }
  return true;
}

// ---- progress -------------------------------------------------------------------------------------------------------
std::string qpWhere(const Comm* comm, uint32_t qpNum) {
  char hex[16];
  std::snprintf(hex, sizeof(hex), "0x%x", qpNum);
  for (int i = 0; i < comm->nqps; ++i)
    if (comm->qps[i].qp->qp_num == qpNum)
      return "QP " + std::to_string(i) + " (" + hex + ") on " + comm->devs[comm->qps[i].device].port->name;
  for (int d = 0; d < comm->ndevs; ++d)
    if (ibv_qp* flush = comm->devs[d].flushQp.load(std::memory_order_acquire);
        flush != nullptr && flush->qp_num == qpNum)
      return std::string("the flush QP (") + hex + ") on " + comm->devs[d].port->name;
  return std::string("QP ") + hex;
}

ncclResult_t completionError(Comm* comm, const ibv_wc& wc) {
  return fail(
      comm, ncclRemoteError,
      "completion error " + nns_ib::completionStatusText(verbs(), wc.status) + ", vendor error 0x" +
          [&] {
            char hex[16];
            std::snprintf(hex, sizeof(hex), "%x", wc.vendor_err);
            return std::string(hex);
          }() +
          " on " + qpWhere(comm, wc.qp_num));
}

// ---- asynchronous events
// An HCA reports a port going down or up, a QP or CQ in error and a device failure on its async_fd. NCCL reads them
// on a thread per HCA; here async_fd is non-blocking and read by the calls of comms waiting on that HCA (at most every
// kSideChannelCheckInterval per comm), so no thread outlives a dlclose or is lost across a fork. Each event is logged
// with libibverbs' name for it; a QP or CQ error is written into the comm that owns the QP or CQ (its context) before
// the event is acknowledged, and a device error into the HCA, and the comms fail with it named at their next check
// (a QP in error also fails its posted work requests, which the completion path reports).

// Reads the HCA's pending events, if no other thread is reading them and this process opened the context.
void drainAsyncEvents(nns_ib::Hca* hca) {
  if (hca->owner.load(std::memory_order_acquire) != getpid() || !hca->eventsReadable.load(std::memory_order_acquire))
    return;
  std::unique_lock<std::mutex> lock(hca->events, std::try_to_lock);
  if (!lock.owns_lock()) return;
  ibv_async_event event{};
  while (verbs().getAsyncEvent(hca->context, &event) == 0) {
    const ibv_event_type type = event.event_type;
    uint32_t qpNum = 0;
    int port = 0;
    Comm* owner = nullptr;
    bool fatal = false;
    switch (type) {
      case IBV_EVENT_QP_FATAL:
      case IBV_EVENT_QP_REQ_ERR:
      case IBV_EVENT_QP_ACCESS_ERR:
        qpNum = event.element.qp->qp_num;
        owner = static_cast<Comm*>(event.element.qp->qp_context);
        fatal = true;
        break;
      case IBV_EVENT_CQ_ERR:
        owner = static_cast<Comm*>(event.element.cq->cq_context);
        fatal = true;
        break;
      case IBV_EVENT_DEVICE_FATAL:
        hca->deviceFatal.store(true, std::memory_order_release);
        fatal = true;
        break;
      case IBV_EVENT_PORT_ACTIVE:
      case IBV_EVENT_PORT_ERR:
        port = static_cast<int>(event.element.port_num);
        if (port > 0 && port < nns_ib::Hca::kTrackedPorts) {
          int64_t since = 0;
          if (type == IBV_EVENT_PORT_ACTIVE)
            hca->portDownSinceNs[port].store(0, std::memory_order_release);
          else  // the first of several port errors dates the outage
            hca->portDownSinceNs[port].compare_exchange_strong(since, Clock::now().time_since_epoch().count());
        }
        break;
      case IBV_EVENT_LID_CHANGE:
      case IBV_EVENT_PKEY_CHANGE:
      case IBV_EVENT_GID_CHANGE:
      case IBV_EVENT_SM_CHANGE:
      case IBV_EVENT_CLIENT_REREGISTER: port = static_cast<int>(event.element.port_num); break;
      // QP and SRQ progress events: communication established, last WQE, SQ drained, SRQ limit, path migration.
      default: break;
    }
    if (owner != nullptr) {
      uint64_t none = 0;
      owner->asyncFatal.compare_exchange_strong(none, (static_cast<uint64_t>(type) + 1) << 32 | qpNum);
    }
    verbs().ackAsyncEvent(&event);  // from here the QP, CQ and comm may be gone: only the copies above are used
    const char* name = verbs().eventTypeStr(type);
    char where[96];
    if (type == IBV_EVENT_QP_FATAL || type == IBV_EVENT_QP_REQ_ERR || type == IBV_EVENT_QP_ACCESS_ERR)
      std::snprintf(where, sizeof(where), "QP 0x%x on %s", qpNum, hca->name.c_str());
    else if (type == IBV_EVENT_CQ_ERR)
      std::snprintf(where, sizeof(where), "a CQ on %s", hca->name.c_str());
    else if (port > 0)
      std::snprintf(where, sizeof(where), "%s port %d", hca->name.c_str(), port);
    else
      std::snprintf(where, sizeof(where), "%s", hca->name.c_str());
    if (type == IBV_EVENT_COMM_EST || type == IBV_EVENT_SQ_DRAINED || type == IBV_EVENT_QP_LAST_WQE_REACHED)
      NCCL_NET_INFO(NCCL_NET, "asynchronous event %s (%s)", name, where);
    else
      NCCL_NET_WARN("asynchronous event %s (%s)%s", name, where, fatal ? ": the comms using it fail" : "");
  }
}

// How long a port of a comm may stay down while the comm waits: twice the QP's retry bound (4.096 us x 2^timeout x
// (retries + 1)), plus a second. A working HCA has failed every work request posted on that port by then; this bounds
// the waits it has nothing to fail (a receive whose message was never sent, with the peer alive) and a provider that
// never fails them (soft-RoCE's send path can stall for good when the link drops).
std::chrono::nanoseconds portDownBound() {
  const double retrySeconds = 4.096e-6 * std::ldexp(1.0, params().timeout) * (params().retryCount + 1);
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(2 * retrySeconds + 1));
}

// Fails the comm if an asynchronous event broke one of its QPs or CQs, or the device of one of its ports, or one of
// its ports has been down past portDownBound().
ncclResult_t checkAsyncFailures(Comm* comm) {
  for (int d = 0; d < comm->ndevs; ++d) {
    const nns_ib::Port* port = comm->devs[d].port;
    nns_ib::Hca* hca = port->hca;
    drainAsyncEvents(hca);
    if (hca->deviceFatal.load(std::memory_order_acquire))
      return fail(comm, ncclSystemError,
                  "asynchronous event " + std::string(verbs().eventTypeStr(IBV_EVENT_DEVICE_FATAL)) + " (" + hca->name +
                      ") with " + std::to_string(comm->pending) + " request(s) pending");
    if (port->port <= 0 || port->port >= nns_ib::Hca::kTrackedPorts) continue;
    const int64_t downSince = hca->portDownSinceNs[port->port].load(std::memory_order_acquire);
    if (downSince == 0) continue;
    const auto down = Clock::now().time_since_epoch() - std::chrono::nanoseconds(downSince);
    const auto bound = portDownBound();
    if (down <= bound) continue;
    // Asked once more, the port itself has the last word: an up event this process never read (it went to a
    // parent before a fork, say) must not fail a comm.
    ibv_port_attr attr{};
    if (verbs().queryPort(hca->context, static_cast<uint8_t>(port->port), &attr) == 0 &&
        attr.state == IBV_PORT_ACTIVE) {
      hca->portDownSinceNs[port->port].store(0, std::memory_order_release);
      continue;
    }
    char what[160];
    std::snprintf(what, sizeof(what), "port %d of %s down for %.1f s (bound %.1f s) with %d request(s) pending",
                  port->port, hca->name.c_str(), std::chrono::duration<double>(down).count(),
                  std::chrono::duration<double>(bound).count(), comm->pending);
    return fail(comm, ncclRemoteError, what);
  }
  const uint64_t code = comm->asyncFatal.load(std::memory_order_acquire);
  if (code == 0) return ncclSuccess;
  const auto type = static_cast<ibv_event_type>((code >> 32) - 1);
  char what[64];
  if (type == IBV_EVENT_CQ_ERR)
    std::snprintf(what, sizeof(what), "one of its CQs");
  else
    std::snprintf(what, sizeof(what), "its QP 0x%x", static_cast<uint32_t>(code));
  return fail(comm, ncclSystemError,
              "asynchronous event " + std::string(verbs().eventTypeStr(type)) + " on " + what + " with " +
                  std::to_string(comm->pending) + " request(s) pending");
}

// Notices a peer that closed or lost the side channel while requests wait (verbs alone cannot tell that a receiver
// which posted nothing is gone), and the HCA's asynchronous events. Rate-limited: a syscall per test() would cost
// more than the data path.
// A peer closes as soon as its last request completes, and that close can be read here before the completion of
// this side's matching request: the caller polled an empty CQ, was descheduled, and the CQE (or, for a send, the ACK
// behind it) came in while the peer closed. So with requests pending, a close fails the comm only once they have had
// kPeerClosedGrace to complete; the callers keep polling meanwhile. With none pending it fails the comm at once.
ncclResult_t checkSideChannel(Comm* comm) {
  auto now = Clock::now();
  if (now - comm->lastSideChannelCheck < kSideChannelCheckInterval) return ncclSuccess;
  comm->lastSideChannelCheck = now;
  NCCL_NET_CHECK(checkAsyncFailures(comm));
  char byte;
  ssize_t got = recv(comm->fd, &byte, 1, MSG_DONTWAIT | MSG_PEEK);
  if (got == 0) {
    if (comm->peerClosedSeen == Clock::time_point{}) comm->peerClosedSeen = now;
    if (comm->pending > 0 && now - comm->peerClosedSeen < kPeerClosedGrace) return ncclSuccess;
    return fail(comm, ncclRemoteError,
                "the peer closed the connection (process exited or failed) with " + std::to_string(comm->pending) +
                    " request(s) pending");
  }
  if (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
    return fail(comm, ncclRemoteError,
                "side channel to the peer failed (" + errnoText(errno) + ") with " + std::to_string(comm->pending) +
                    " request(s) pending: peer dead or unreachable");
  return ncclSuccess;
}

ncclResult_t progressSend(SendComm* comm) {
  ibv_wc wcs[16];
  bool any = false;
  for (int d = 0; d < comm->ndevs; ++d) {
    int n = ibv_poll_cq(comm->devs[d].cq, 16, wcs);
    if (n < 0) return fail(comm, ncclSystemError, "ibv_poll_cq on " + comm->devs[d].port->name + " failed");
    for (int i = 0; i < n; ++i) {
      if (wcs[i].status != IBV_WC_SUCCESS) return completionError(comm, wcs[i]);
      any = true;
      if ((wcs[i].wr_id & kWrKindMask) != kWrData) continue;
      SendSlot& slot = comm->slots[wcs[i].wr_id & 0xffff];
      if (--slot.pendingCompletions > 0) continue;
      for (int r = 0; r < slot.nreqs; ++r) slot.reqs[r]->done = true;
      slot = SendSlot{};
    }
  }
  if (!any && comm->pending > 0) return checkSideChannel(comm);
  return ncclSuccess;
}

ncclResult_t progressRecv(RecvComm* comm) {
  ibv_wc wcs[16];
  bool any = false;
  for (int d = 0; d < comm->ndevs; ++d) {
    int n = ibv_poll_cq(comm->devs[d].cq, 16, wcs);
    if (n < 0) return fail(comm, ncclSystemError, "ibv_poll_cq on " + comm->devs[d].port->name + " failed");
    for (int i = 0; i < n; ++i) {
      const ibv_wc& wc = wcs[i];
      if (wc.status != IBV_WC_SUCCESS) return completionError(comm, wc);
      any = true;
      uint64_t kind = wc.wr_id & kWrKindMask;
      if (kind == kWrFifo) {
        RecvSlot& slot = comm->slots[wc.wr_id & 0xffff];
        slot.fifoWritten = true;
      } else if (kind == kWrRecv) {
        uint32_t imm = ntohl(wc.imm_data);
        RecvSlot& slot = comm->slots[imm & 31];
        slot.immediatesExpected = static_cast<int>((imm >> 5) & 63);
        if ((imm & kImmSizeFlag) != 0) {
          slot.sizeInline = true;
          slot.inlineSize = imm >> 12;
        }
        ++slot.immediatesReceived;
        std::string error;
        if (!postReceives(comm, static_cast<int>(wc.wr_id & 0xffff), 1, &error))
          return fail(comm, ncclSystemError, error);
      }
    }
    if (ibv_cq* flushCq = comm->devs[d].flushCq.load(std::memory_order_acquire)) {
      n = ibv_poll_cq(flushCq, 16, wcs);
      if (n < 0)
        return fail(comm, ncclSystemError, "ibv_poll_cq on the flush CQ of " + comm->devs[d].port->name + " failed");
      for (int i = 0; i < n; ++i) {
        if (wcs[i].status != IBV_WC_SUCCESS) return completionError(comm, wcs[i]);
        any = true;
        auto* request = reinterpret_cast<Request*>(wcs[i].wr_id);
        if (--request->pendingReads == 0) request->done = true;
      }
    }
  }
  for (RecvSlot& slot : comm->slots) {
    if (slot.request != nullptr && slot.fifoWritten && slot.immediatesExpected > 0 &&
        slot.immediatesReceived >= slot.immediatesExpected)
      slot.request->done = true;
  }
  if (!any && comm->pending > 0) return checkSideChannel(comm);
  return ncclSuccess;
}

// Posts every write of a fully matched FIFO slot: data chunks, then on every QP that carried data a final
// WRITE_WITH_IMM (QP 0's carries the slot's sizes into the receiver's size record).
ncclResult_t postSlot(SendComm* comm, int slotIndex) {
  SendSlot& slot = comm->slots[slotIndex];
  const FifoEntry* entries = comm->control->fifo[slotIndex];
  uint64_t* sizes = comm->control->sizes[slotIndex];
  for (int q = 0; q < comm->nqps; ++q) comm->wrCount[q] = 0;
  auto addWrite = [&](int q, uint64_t local, uint32_t length, uint32_t lkey, uint64_t remote, uint32_t rkey) {
    int k = comm->wrCount[q]++;
    ibv_sge& sge = comm->sges[q][k];
    sge.addr = local;
    sge.length = length;
    sge.lkey = lkey;
    ibv_send_wr& wr = comm->wrs[q][k];
    std::memset(&wr, 0, sizeof(wr));
    wr.sg_list = length > 0 ? &sge : nullptr;
    wr.num_sge = length > 0 ? 1 : 0;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.wr.rdma.remote_addr = remote;
    wr.wr.rdma.rkey = rkey;
  };
  // With splitting, an entry is cut into at most nqps chunks of >= NNS_IB_SPLIT_MIN_BYTES (128-byte aligned) on
  // consecutive QPs, starting one QP further each slot (a fused vNIC's small messages, one chunk each, then take
  // every NIC in turn instead of all going through the first); without, each entry goes whole to the next QP in
  // round-robin order. A QP gets at most one chunk per entry, so kMaxRecvs data WRs, the size record and a zero-byte
  // immediate fit its row of `wrs`.
  const int splitStart =
      params().splitDataOnQps ? static_cast<int>(comm->roundRobin++ % static_cast<uint64_t>(comm->nqps)) : 0;
  for (int r = 0; r < slot.nreqs; ++r) {
    const Request* request = slot.reqs[r];
    size_t size = request->size;
    sizes[r] = size;
    if (size == 0) continue;
    int chunks = 1;
    int firstQp;
    if (params().splitDataOnQps) {
      size_t wanted = std::max<size_t>(1, size / params().splitMinBytes);  // every chunk at least the minimum
      chunks = static_cast<int>(std::min<size_t>(wanted, static_cast<size_t>(comm->nqps)));
      firstQp = (splitStart + r) % comm->nqps;
    } else {
      firstQp = static_cast<int>(comm->roundRobin++ % static_cast<uint64_t>(comm->nqps));
    }
    size_t chunk = (size + chunks - 1) / chunks;
    chunk = (chunk + kChunkAlign - 1) / kChunkAlign * kChunkAlign;
    for (int c = 0; c < chunks; ++c) {
      size_t offset = static_cast<size_t>(c) * chunk;
      if (offset >= size) break;
      size_t length = std::min(chunk, size - offset);
      int q = (firstQp + c) % comm->nqps;
      const QpSlot& qp = comm->qps[q];
      addWrite(q, reinterpret_cast<uint64_t>(request->data + offset), static_cast<uint32_t>(length),
               request->mhandle->lkeys[qp.device], entries[r].addr + offset, entries[r].rkeys[qp.remoteDevice]);
    }
  }
  // QP 0 finishes with the sizes (into the receiver's size record, slot by slot), unless a single size rides in the
  // immediate, which any QP's may carry; then QP 0 needs a write (a zero-length one) only if no QP carried data.
  // Every QP with writes turns its last one into the immediate.
  const QpSlot& qp0 = comm->qps[0];
  bool sizeInline = slot.nreqs == 1 && slot.reqs[0]->size <= kImmMaxSize;
  uint64_t sizeRecord = comm->remoteControlAddr + static_cast<uint64_t>(slotIndex) * kMaxRecvs * sizeof(uint64_t);
  if (!sizeInline) {
    addWrite(0, reinterpret_cast<uint64_t>(sizes), static_cast<uint32_t>(slot.nreqs * sizeof(uint64_t)),
             comm->devs[qp0.device].controlMr->lkey, sizeRecord, comm->remoteControlRkey);
  } else if (std::all_of(comm->wrCount, comm->wrCount + comm->nqps, [](int count) { return count == 0; })) {
    addWrite(0, 0, 0, 0, sizeRecord, comm->remoteControlRkey);
  }
  // Adaptive routing: past the threshold, a QP whose last write carries data gets a zero-byte one for the immediate.
  if (comm->adaptiveRouting) {
    size_t slotBytes = 0;
    for (int r = 0; r < slot.nreqs; ++r) slotBytes += slot.reqs[r]->size;
    if (slotBytes > params().arThreshold) {
      for (int q = 0; q < comm->nqps; ++q) {
        int count = comm->wrCount[q];
        if (count > 0 && comm->sges[q][count - 1].length > 0) addWrite(q, 0, 0, 0, sizeRecord, comm->remoteControlRkey);
      }
    }
  }
  int immediates = 0;
  for (int q = 0; q < comm->nqps; ++q)
    if (comm->wrCount[q] > 0) ++immediates;
  uint32_t imm = htonl(encodeImmediate(slotIndex, immediates, sizeInline, slot.reqs[0]->size));
  slot.pendingCompletions = immediates;
  for (int q = 0; q < comm->nqps; ++q) {
    int count = comm->wrCount[q];
    if (count == 0) continue;
    for (int k = 0; k + 1 < count; ++k) comm->wrs[q][k].next = &comm->wrs[q][k + 1];
    ibv_send_wr& last = comm->wrs[q][count - 1];
    last.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    last.imm_data = imm;
    last.send_flags = IBV_SEND_SIGNALED;
    last.wr_id = kWrData | static_cast<uint64_t>(slotIndex);
    ibv_send_wr* bad = nullptr;
    int rc = ibv_post_send(comm->qps[q].qp, &comm->wrs[q][0], &bad);
    if (rc != 0)
      return fail(comm, ncclSystemError,
                  "ibv_post_send of " + std::to_string(count) + " write(s) on " +
                      qpWhere(comm, comm->qps[q].qp->qp_num) + ": " + errnoText(rc));
  }
  return ncclSuccess;
}

// Loads a value the NIC writes by DMA: the compiler must not cache it, and reads after it must not move before it.
template <class T>
T loadAcquire(const T* address) {
  return __atomic_load_n(address, __ATOMIC_ACQUIRE);
}

// ---- connection establishment
// -----------------------------------------------------------------------------------------
struct ListenComm {
  int fd = -1;
  int dev = 0;
  // Accepted connections on their way to a comm, each at its own stage: a stranger that says nothing holds up no one.
  std::vector<struct PendingAccept*> pending;
};

// Exchanges raw bytes in one direction without blocking.
struct Transfer {
  size_t offset = 0;
  sdk::IoStatus send(int fd, const void* data, size_t size, int* error) {
    return sdk::sendSome(fd, data, size, &offset, error);
  }
  sdk::IoStatus recv(int fd, void* data, size_t size, int* error) {
    return sdk::recvSome(fd, data, size, &offset, error);
  }
};

struct PendingConnect {
  enum Stage { kConnecting, kSendInfo, kRecvInfo, kSendReady } stage = kConnecting;
  sdk::TcpConnector connector;
  // The whole handshake's, not just the TCP connect's: a listener that accepts and never answers must not hold a
  // connect (and its QPs and CQs) forever.
  Clock::time_point deadline{};
  int dev = 0;
  int trafficClass = 0;
  uint32_t remoteDevs = 1;
  SendComm* comm = nullptr;
  ConnectInfo local{};
  ConnectInfo remote{};
  Transfer transfer;

  ~PendingConnect() {
    if (comm != nullptr) destroyComm(comm);  // a connect that failed, or that the host gave up
  }
};

struct PendingAccept {
  enum Stage { kRecvInfo, kSendInfo, kRecvReady } stage = kRecvInfo;
  RecvComm* comm = nullptr;
  int fd = -1;
  std::string peerAddress;
  Clock::time_point since = Clock::now();
  bool identified = false;  // its connection info was valid: an nns-ib sender, whose failure fails the accept
  ConnectInfo local{};
  ConnectInfo remote{};
  uint32_t ready = 0;
  Transfer transfer;
};

// Where a connect that ran out of time was stuck, for its WARN.
std::string pendingConnectWhere(const PendingConnect* p) {
  switch (p->stage) {
    case PendingConnect::kConnecting:
      return "the TCP connect did not complete" +
             (p->connector.error().empty() ? std::string() : " (last error: " + p->connector.error() + ")");
    case PendingConnect::kSendInfo: return "the listener did not take our QP info";
    case PendingConnect::kRecvInfo:
      return "the listener accepted the TCP connection but sent no QP info (not an nns-ib listener, or its process "
             "stopped calling accept)";
    case PendingConnect::kSendReady: return "the listener did not take our ready";
  }
  return "";
}

std::string ioFailure(sdk::IoStatus status, int error) {
  return status == sdk::IoStatus::kClosed ? std::string("the peer closed the connection") : errnoText(error);
}

}  // namespace

// NCCL dlcloses a plugin when its last communicator is finalized and may load it again later: close the HCAs then,
// or every load/unload cycle would leak device file descriptors. Comms still open (a caller that skipped close*)
// keep them alive until the process exits.
struct ReleaseOnUnload {
  ~ReleaseOnUnload() {
    Global* g = globalSlot();
    if (g == nullptr || g->liveComms.load() != 0) return;
    for (nns_ib::Hca* hca : g->hcas) {
      if (g->verbs != nullptr && g->owner == getpid()) {
        if (hca->pd != nullptr) g->verbs->deallocPd(hca->pd);
        if (hca->context != nullptr) g->verbs->closeDevice(hca->context);
      }
      delete hca;
    }
    delete g;
    globalSlot() = nullptr;
  }
};
ReleaseOnUnload releaseOnUnload;

// ---- the plugin class
// ---------------------------------------------------------------------------------------------------
class IbNet {
 public:
  // Not "IB": NCCL's built-in IB transport is named "IB", and NCCL_NET selects by name (case-insensitively), so a
  // plugin called IB would be indistinguishable from the internal one.
  static constexpr const char kName[] = "nns-ib";

  ncclResult_t init(const sdk::InitArgs& args, void** ctx) {
    sdk::setLogPrefix("NET/nns-ib");
    Global& g = global();
    std::lock_guard<std::mutex> lock(g.mutex);
    if (!g.initialised) {
      g.initialised = true;
      g.params = Params::fromEnvironment();
      g.verbs = nns_ib::loadVerbs(&g.initError);
      // It returns an errno value; it fails once a device was opened in this process (by the host's own IB
      // transport, say), which made the choice already: nothing is left to do here.
      if (int rc = g.verbs != nullptr && g.verbs->forkInit != nullptr ? g.verbs->forkInit() : 0; rc != 0)
        NCCL_NET_INFO(NCCL_INIT | NCCL_NET, "ibv_fork_init: %s (devices opened before this plugin's init?)",
                      std::strerror(rc));
      if (g.verbs != nullptr) {
        nns_ib::DiscoveryOptions options = g.params.discovery();
        for (const std::string& problem : options.gidPreference.problems)
          NCCL_NET_WARN("%s; the default is used", problem.c_str());
        std::vector<Port> found = nns_ib::discoverPorts(*g.verbs, options, &g.hcas, &g.initError);
        g.gdr = nns_ib::gdrKernelSupport();
        // Relaxed ordering needs IBVERBS_1.8's ibv_reg_mr_iova2 to reach the provider; mode 1 asks for it even
        // so, which can only be said, not done, without it.
        int ro = g.params.relaxedOrdering;
        g.relaxedOrdering = ro != 0 && g.verbs->regMrIova2 != nullptr;
        if (ro == 1 && g.verbs->regMrIova2 == nullptr)
          NCCL_NET_WARN(
              "NCCL_IB_PCI_RELAXED_ORDERING=1, but libibverbs has no ibv_reg_mr_iova2 (rdma-core < 28): "
              "relaxed ordering off");
        NCCL_NET_INFO(NCCL_INIT | NCCL_NET, "relaxed ordering %s (NCCL_IB_PCI_RELAXED_ORDERING=%d%s)",
                      g.relaxedOrdering ? "on" : "off", ro,
                      ro != 0 && !g.relaxedOrdering ? ", no ibv_reg_mr_iova2" : "");
        g.nvidiaDriver = nns_ib::nvidiaDriverPresent();
        g.owner = getpid();
        for (Port& port : found) {
          g.ports.push_back(port);
          int index = static_cast<int>(g.ports.size() - 1);
          if (!g.params.mergeDevices) g.devices.push_back(NetDevice{port.name, {index}, {index}, false});
          // Merged (NNS_IB_MERGE_DEVICES), the ports become one device below: each is named by its port index.
          NCCL_NET_INFO(NCCL_INIT | NCCL_NET, "%s %d: %s port %d, %s, GID %d %s (%s), %d Mbps, %s",
                        g.params.mergeDevices ? "port" : "device", index, port.hca->name.c_str(), port.port,
                        port.isEthernet() ? "RoCE" : "InfiniBand", port.gidIndex, nns_ib::gidText(port.gid).c_str(),
                        port.gidType.c_str(), port.speedMbps,
                        port.pciPath.empty() ? "no PCI path" : port.pciPath.c_str());
        }
        if (g.params.mergeDevices && !g.ports.empty()) {
          // One device over every selected port (at most kMaxDevs): for hosts whose NCCL predates makeVDevice
          // (ncclNet_v8 and older) and for tools that drive device 0 only.
          NetDevice merged;
          for (size_t p = 0; p < g.ports.size() && p < static_cast<size_t>(kMaxDevs); ++p) {
            merged.ports.push_back(static_cast<int>(p));
            merged.name += (p > 0 ? "+" : "") + g.ports[p].name;
          }
          if (g.ports.size() > static_cast<size_t>(kMaxDevs))
            NCCL_NET_WARN("NNS_IB_MERGE_DEVICES: %zu ports selected, merging the first %d", g.ports.size(), kMaxDevs);
          merged.members = {0};
          g.devices.push_back(merged);
          NCCL_NET_INFO(NCCL_INIT | NCCL_NET, "NNS_IB_MERGE_DEVICES: device 0 is %s", merged.name.c_str());
        }
      }
    }
    if (g.devices.empty()) {
      NCCL_NET_WARN("init failed: %s", g.initError.c_str());
      return ncclSystemError;
    }
    int trafficClass = g.params.trafficClass;
    if (args.trafficClass != NCCL_NET_TRAFFIC_CLASS_UNDEF) {
      if (args.trafficClass >= 0 && args.trafficClass <= 255) {
        trafficClass = args.trafficClass;
      } else {
        NCCL_NET_WARN("init: the communicator's traffic class %d is outside 0..255; using NCCL_IB_TC (%d)",
                      args.trafficClass, trafficClass);
      }
    }
    *ctx = new Context{trafficClass};
    return ncclSuccess;
  }

  ncclResult_t finalize(void* ctx) {
    delete static_cast<Context*>(ctx);
    return ncclSuccess;
  }

  ncclResult_t devices(int* ndev) {
    Global& g = global();
    std::lock_guard<std::mutex> lock(g.mutex);
    *ndev = static_cast<int>(g.devices.size());
    return ncclSuccess;
  }

  ncclResult_t getProperties(int dev, ncclNetProperties_v12_t* props) {
    Global& g = global();
    std::lock_guard<std::mutex> lock(g.mutex);
    NetDevice& device = g.devices[static_cast<size_t>(dev)];
    const Port& first = g.ports[static_cast<size_t>(device.ports[0])];
    props->name = const_cast<char*>(device.name.c_str());
    props->pciPath = first.pciPath.empty() ? nullptr : const_cast<char*>(first.pciPath.c_str());
    props->guid = first.guid;
    int ptrSupport = NCCL_PTR_HOST;
    bool cuda = g.gdr, dmabuf = g.nvidiaDriver;
    int speed = 0;
    for (int p : device.ports) {
      const Port& port = g.ports[static_cast<size_t>(p)];
      dmabuf = dmabuf && port.hca->dmabufSupported;
      speed += port.speedMbps;
    }
    if (cuda) ptrSupport |= NCCL_PTR_CUDA;
    if (dmabuf) ptrSupport |= NCCL_PTR_DMABUF;
    props->ptrSupport = ptrSupport;
    props->regIsGlobal = 0;
    props->forceFlush = 0;
    props->speed = speed > 0 ? speed : 10000;
    props->port = first.port;
    props->latency = 0;
    // A connection of this device takes max(QPs per connection, ports) QPs, counted against the HCA with the fewest
    // (a fused device's ports may share one HCA).
    int maxQps = first.hca->attr.max_qp;
    for (int p : device.ports) maxQps = std::min(maxQps, g.ports[static_cast<size_t>(p)].hca->attr.max_qp);
    props->maxComms =
        maxQps / std::min(kMaxQps, std::max({1, g.params.qpsPerConnection, static_cast<int>(device.ports.size())}));
    props->maxRecvs = kMaxRecvs;
    props->netDeviceType = NCCL_NET_DEVICE_HOST;
    props->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
    props->vProps.ndevs = static_cast<int>(device.members.size());
    for (size_t i = 0; i < device.members.size(); ++i) props->vProps.devs[i] = device.members[i];
    props->maxP2pBytes = kMaxMessageBytes;
    props->maxCollBytes = 512ull << 20;  // NCCL's MAX_COLLNET_SIZE; no collNet here
    props->maxMultiRequestSize = 1;
    return ncclSuccess;
  }

  ncclResult_t makeVDevice(int* d, ncclNetVDeviceProps_v12_t* props) {
    Global& g = global();
    std::lock_guard<std::mutex> lock(g.mutex);
    NetDevice fused;
    fused.fused = true;
    for (int i = 0; i < props->ndevs; ++i) {
      int dev = props->devs[i];
      if (dev < 0 || dev >= static_cast<int>(g.devices.size()) || g.devices[static_cast<size_t>(dev)].fused) {
        NCCL_NET_WARN("makeVDevice: device %d is not a device of this plugin, or is a vNIC already", dev);
        return ncclInternalError;
      }
      for (int port : g.devices[static_cast<size_t>(dev)].ports) {
        if (std::find(fused.ports.begin(), fused.ports.end(), port) != fused.ports.end()) {
          NCCL_NET_WARN("makeVDevice: device %d listed twice (or shares port %s with another)", dev,
                        g.ports[static_cast<size_t>(port)].name.c_str());
          return ncclInternalError;
        }
        fused.ports.push_back(port);
      }
      fused.members.push_back(dev);
      fused.name += (i > 0 ? "+" : "") + g.devices[static_cast<size_t>(dev)].name;
    }
    if (fused.ports.size() > static_cast<size_t>(kMaxDevs)) {
      NCCL_NET_WARN("makeVDevice: %zu ports, at most %d per vNIC", fused.ports.size(), kMaxDevs);
      return ncclInternalError;
    }
    // One link layer per vNIC, as NCCL requires: an InfiniBand port and a RoCE one do not stripe to one peer.
    for (int port : fused.ports) {
      const Port& first = g.ports[static_cast<size_t>(fused.ports[0])];
      const Port& other = g.ports[static_cast<size_t>(port)];
      if (other.attr.link_layer != first.attr.link_layer) {
        NCCL_NET_WARN(
            "makeVDevice: %s is %s and %s is %s: a vNIC fuses ports of one link layer (select them with "
            "NCCL_IB_HCA)",
            first.name.c_str(), first.isEthernet() ? "Ethernet (RoCE)" : "InfiniBand", other.name.c_str(),
            other.isEthernet() ? "Ethernet (RoCE)" : "InfiniBand");
        return ncclInvalidUsage;
      }
    }
    g.devices.push_back(fused);
    *d = static_cast<int>(g.devices.size() - 1);
    NCCL_NET_INFO(NCCL_INIT | NCCL_NET, "vNIC %d fuses %s", *d, fused.name.c_str());
    return ncclSuccess;
  }

  ncclResult_t listen(void* /*ctx*/, int dev, void* handle, void** listenComm) {
    NCCL_NET_CHECK(reopenAfterFork());
    auto interfaces = sdk::findInterfaces("NCCL_SOCKET_IFNAME", "NCCL_SOCKET_FAMILY", 1);
    if (interfaces.empty()) {
      NCCL_NET_WARN("listen: no network interface for the side channel (check NCCL_SOCKET_IFNAME)");
      return ncclSystemError;
    }
    sdk::SocketAddress bound{};
    std::string error;
    int fd = sdk::listenTcp(interfaces[0].address, 128, &bound, &error);
    if (fd < 0) {
      NCCL_NET_WARN("listen on %s (%s): %s", interfaces[0].name.c_str(), interfaces[0].address.toString().c_str(),
                    error.c_str());
      return ncclSystemError;
    }
    HandlePayload payload{};
    payload.address = bound;
    {
      std::lock_guard<std::mutex> lock(global().mutex);
      payload.ndevs = static_cast<uint32_t>(global().devices[static_cast<size_t>(dev)].ports.size());
    }
    ncclResult_t result = kHandleCodec.encode(payload, handle);
    if (result != ncclSuccess) {
      close(fd);
      return result;
    }
    *listenComm = new ListenComm{fd, dev, {}};
    return ncclSuccess;
  }

  ncclResult_t connect(void* ctx, int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v12_t** /*devComm*/) {
    NCCL_NET_CHECK(reopenAfterFork());
    using Stage = sdk::ConnectStage<PendingConnect>;
    PendingConnect* pending = Stage::get(handle);
    if (pending == nullptr) {
      HandlePayload payload;
      NCCL_NET_CHECK(kHandleCodec.decode(handle, &payload));
      auto fresh = std::make_unique<PendingConnect>();
      fresh->dev = dev;
      fresh->remoteDevs = payload.ndevs;
      fresh->trafficClass = ctx != nullptr ? static_cast<Context*>(ctx)->trafficClass : params().trafficClass;
      fresh->connector.start(payload.address, sdk::SocketAddress{},
                             std::chrono::milliseconds(params().connectTimeoutMs), std::chrono::milliseconds(50));
      // Set after the connector's own (same length), so a TCP connect that never completes reports its last error.
      fresh->deadline = Clock::now() + std::chrono::milliseconds(params().connectTimeoutMs);
      pending = Stage::adopt(handle, std::move(fresh));  // the SDK frees it if the host gives this connect up
    }
    std::string error;
    ncclResult_t result = connectStep(pending, &error);
    bool connected = result == ncclSuccess && error.empty() && pending->stage == PendingConnect::kSendReady &&
                     pending->transfer.offset == sizeof(uint32_t);
    if (result == ncclSuccess && error.empty() && !connected && Clock::now() > pending->deadline) {
      error = "no connection within " + std::to_string(params().connectTimeoutMs) +
              " ms (NNS_IB_CONNECT_TIMEOUT_MS): " + pendingConnectWhere(pending);
      result = ncclRemoteError;
    }
    if (result != ncclSuccess || !error.empty()) {
      NCCL_NET_WARN("connect to %s: %s", pending->connector.remote().toString().c_str(), error.c_str());
      Stage::take(handle);  // its destructor destroys the half-made comm
      return result != ncclSuccess ? result : ncclSystemError;
    }
    if (connected) {
      SendComm* comm = std::exchange(pending->comm, nullptr);
      Stage::take(handle);
      if (comm->adaptiveRouting) {
        NCCL_NET_INFO(NCCL_NET,
                      "connected to %s with %d QP(s); adaptive routing: writes of over %zu bytes end in a zero-byte "
                      "write with immediate",
                      comm->peer.c_str(), comm->nqps, params().arThreshold);
      } else {
        NCCL_NET_INFO(NCCL_NET, "connected to %s with %d QP(s)", comm->peer.c_str(), comm->nqps);
      }
      *sendComm = comm;
    }
    return ncclSuccess;
  }

  // Takes every connection waiting on the listen socket, then moves each pending one on. What has not identified
  // itself as an nns-ib sender (wrong magic, malformed or truncated info, nothing within the connect timeout) is a
  // stranger: a port scanner, a stale process of another job. It is dropped with a WARN, and accept goes on. A
  // failure after a valid identification is a real peer's and fails the accept, as before.
  ncclResult_t accept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v12_t** /*devComm*/) {
    NCCL_NET_CHECK(reopenAfterFork());
    auto* listen = static_cast<ListenComm*>(listenComm);
    std::string error;
    for (;;) {
      int fd = -1;
      sdk::SocketAddress peer{};
      sdk::IoStatus status = sdk::acceptTcp(listen->fd, &fd, &peer, &error);
      if (status == sdk::IoStatus::kWouldBlock) break;
      if (status != sdk::IoStatus::kDone) {
        NCCL_NET_WARN("accept: %s", error.c_str());
        return ncclSystemError;
      }
      sdk::setDeadPeerTimeout(fd, params().peerTimeoutMs);
      auto* p = new PendingAccept;
      p->fd = fd;
      p->peerAddress = peer.toString();
      listen->pending.push_back(p);
    }
    const auto timeout = std::chrono::milliseconds(params().connectTimeoutMs);
    for (size_t i = 0; i < listen->pending.size();) {
      PendingAccept* p = listen->pending[i];
      bool finished = false;
      error.clear();
      ncclResult_t result = acceptStep(listen, p, &finished, &error);
      // An identified sender gets the same bound for the whole handshake: its own connect gives up after
      // NNS_IB_CONNECT_TIMEOUT_MS from before our accept, so waiting longer for its ready could only wait for a
      // process that is stopped or gone without closing the socket.
      if (result == ncclSuccess && error.empty() && !finished && Clock::now() - p->since > timeout) {
        if (p->identified) {
          error = "identified itself but did not finish the handshake within " +
                  std::to_string(params().connectTimeoutMs) + " ms (NNS_IB_CONNECT_TIMEOUT_MS)";
          result = ncclRemoteError;
        } else {
          error = "sent no connection info within " + std::to_string(params().connectTimeoutMs) +
                  " ms (NNS_IB_CONNECT_TIMEOUT_MS)";
        }
      }
      if (result == ncclSuccess && error.empty() && !finished) {
        ++i;
        continue;
      }
      listen->pending.erase(listen->pending.begin() + static_cast<long>(i));
      if (finished && result == ncclSuccess) {
        *recvComm = p->comm;
        std::string inlined;
        if (p->comm->fifoInlineBytes > 0)
          inlined = "; FIFO entries inline up to " + std::to_string(p->comm->fifoInlineBytes) + " bytes";
        NCCL_NET_INFO(NCCL_NET, "accepted %s with %d QP(s)%s", p->comm->peer.c_str(), p->comm->nqps, inlined.c_str());
        delete p;
        return ncclSuccess;
      }
      const bool stranger = !p->identified;
      if (stranger) {
        NCCL_NET_WARN("accept: dropping connection from %s: %s", p->peerAddress.c_str(), error.c_str());
      } else {
        NCCL_NET_WARN("accept from %s: %s", p->peerAddress.c_str(), error.c_str());
      }
      discardPending(p);
      if (!stranger) return result != ncclSuccess ? result : ncclSystemError;
    }
    return ncclSuccess;
  }

  // regMr and deregMr may run on another thread than the one driving the comm (NCCL's proxy service thread registers
  // while its progress thread tests): they touch only the handle, the comm's registration lists and the flush QPs,
  // and never poll the comm.
  ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
    NCCL_NET_CHECK(registerMemory(static_cast<Comm*>(comm), data, size, type, -1, 0, mhandle));
    keepRegistration(static_cast<Comm*>(comm), static_cast<MemoryHandle*>(*mhandle));
    return ncclSuccess;
  }

  ncclResult_t regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle) {
    NCCL_NET_CHECK(registerMemory(static_cast<Comm*>(comm), data, size, type, fd, offset, mhandle));
    keepRegistration(static_cast<Comm*>(comm), static_cast<MemoryHandle*>(*mhandle));
    return ncclSuccess;
  }

  ncclResult_t deregMr(void* /*comm*/, void* mhandle) {
    auto* mh = static_cast<MemoryHandle*>(mhandle);
    if (mh == nullptr) return ncclSuccess;
    if (mh->magic != MemoryHandle::kMagic) {
      NCCL_NET_WARN("deregMr: %p is not a memory handle of this plugin", mhandle);
      return ncclInternalError;
    }
    // A pending request still reads the handle (a grouped send posts its writes only once the whole group is there)
    // or has its buffer in the NIC's hands. Releasing it anyway is what an abort needs (NCCL deregisters, then
    // closes, and stops freeing at the first error), so the MRs go at once (the NIC can no longer touch the memory)
    // and the comm fails at its next call with the cause logged here: it posts nothing more, its pending requests
    // return the error, and the peer learns through the side channel, instead of a completion error far from the
    // cause. The handle's struct stays with the comm until close, since such a request may still read its keys.
    Comm* owner = mh->comm;
    int users = mh->users.load(std::memory_order_acquire);
    // In use: the struct is kept until close even when the comm has already failed, since a request that completed
    // before the failure still drops its use of the handle in test().
    bool inUse = owner != nullptr && users > 0;
    bool busy = inUse && !owner->failed.load(std::memory_order_acquire);
    if (busy) {
      char what[256];
      std::snprintf(what, sizeof(what),
                    "deregMr of memory handle %p (%zu bytes at %p) while %d pending request(s) use it: the comm is "
                    "unusable from here on",
                    mhandle, static_cast<size_t>(mh->end - mh->begin), reinterpret_cast<void*>(mh->begin), users);
      NCCL_NET_WARN("%s with peer %s: %s", owner->isSender ? "send" : "receive", owner->peer.c_str(), what);
      auto* cause = new std::string(what);
      std::string* none = nullptr;
      if (!owner->poison.compare_exchange_strong(none, cause, std::memory_order_acq_rel)) delete cause;
    }
    if (owner != nullptr) {
      std::lock_guard<std::mutex> lock(owner->registrationMutex);
      auto& list = owner->registrations;
      list.erase(std::remove(list.begin(), list.end(), mh), list.end());
      if (inUse) owner->retired.push_back(mh);
    }
    for (int d = 0; d < mh->ndevs; ++d)
      if (mh->mrs[d] != nullptr) verbs().deregMr(mh->mrs[d]);
    if (inUse) {
      mh->magic = MemoryHandle::kRetiredMagic;
      for (ibv_mr*& mr : mh->mrs) mr = nullptr;
    } else {
      mh->magic = 0;
      delete mh;
    }
    return ncclSuccess;
  }

  // Whether [data, data + size) leaves the registration it came with (logged). Posted anyway, the NIC refused the
  // access only when the work ran: a local protection error on the sender, a remote access error on the peer when a
  // receive buffer overran its handle, both ncclRemoteError, blaming the network for the caller's mistake. A handle
  // that is not one of this plugin's is refused where it is used.
  static bool outsideHandle(const char* call, const void* data, size_t size, const void* mhandle) {
    const auto* mh = static_cast<const MemoryHandle*>(mhandle);
    if (size == 0 || mh == nullptr || mh->magic != MemoryHandle::kMagic) return false;
    const auto begin = reinterpret_cast<uintptr_t>(data);
    if (begin >= mh->begin && begin <= mh->end && size <= mh->end - begin) return false;
    NCCL_NET_WARN("%s: %zu bytes at %p lie outside memory handle %p (%zu bytes at %p)", call, size, data, mhandle,
                  static_cast<size_t>(mh->end - mh->begin), reinterpret_cast<void*>(mh->begin));
    return true;
  }

  ncclResult_t isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* /*phandle*/,
                     void** request) {
    auto* comm = static_cast<SendComm*>(sendComm);
    if (unusable(comm)) return unusableResult(comm);
    if (size > kMaxMessageBytes) {
      NCCL_NET_WARN("isend: %zu bytes exceeds maxP2pBytes (%zu): split the message", size, kMaxMessageBytes);
      return ncclInternalError;
    }
    if (outsideHandle("isend", data, size, mhandle)) return ncclInvalidUsage;
    int slotIndex = static_cast<int>(comm->sequence % kSlots);
    SendSlot& slot = comm->slots[slotIndex];
    // Every NULL answer below goes through checkSideChannel: NCCL retries isend until it gets a request, and a
    // receiver that died before posting leaves no request for test() to fail, so only the side channel tells.
    if (slot.pendingCompletions > 0) {
      NCCL_NET_CHECK(progressSend(comm));  // this slot's previous round has not completed locally yet
      if (slot.pendingCompletions > 0) return checkSideChannel(comm);
    }
    const FifoEntry* entries = comm->control->fifo[slotIndex];
    uint64_t expected = comm->sequence + 1;
    if (loadAcquire(&entries[0].idx) != expected) return checkSideChannel(comm);  // receiver has not posted yet
    if (slot.nreqs == 0) {
      uint32_t nreqs = loadAcquire(&entries[0].nreqs);
      if (nreqs < 1 || nreqs > kMaxRecvs)
        return fail(comm, ncclInternalError,
                    "FIFO slot " + std::to_string(slotIndex) + " announces " + std::to_string(nreqs) +
                        " receives (corrupt FIFO entry)");
      slot.nreqs = static_cast<int>(nreqs);
    }
    for (int r = 1; r < slot.nreqs; ++r)
      if (loadAcquire(&entries[r].idx) != expected) return checkSideChannel(comm);  // rest of the slot in flight
    int match = -1;
    for (int r = 0; r < slot.nreqs; ++r) {
      if (slot.reqs[r] == nullptr && entries[r].tag == tag) {
        match = r;
        break;
      }
    }
    if (match < 0) return checkSideChannel(comm);  // no receive with this tag in the current slot (yet)
    if (size > entries[match].size)
      return fail(comm, ncclInvalidUsage,
                  "message of " + std::to_string(size) + " bytes (tag " + std::to_string(tag) +
                      ") exceeds the receive buffer the peer posted (" + std::to_string(entries[match].size) +
                      " bytes)");
    // Taken before a registration for a buffer without a handle, which a NULL answer here would leak.
    Request* req = comm->requests.acquire();
    if (req == nullptr) return checkSideChannel(comm);
    // Nothing is read for 0 bytes: the handle is neither used nor looked at (it may be anything, even freed).
    auto* mh = size > 0 ? static_cast<const MemoryHandle*>(mhandle) : nullptr;
    const bool implicit = size > 0 && mh == nullptr;
    if (implicit) mh = implicitRegistration(comm, data, size);
    if (size > 0 && (mh == nullptr || mh->magic != MemoryHandle::kMagic || mh->comm != comm)) {
      comm->requests.release(req);
      if (mhandle == nullptr)
        NCCL_NET_WARN("isend: %zu bytes at %p without a memory handle could not be registered here", size, data);
      else
        NCCL_NET_WARN("isend: %zu bytes with memory handle %p, which is not registered on this comm", size, mhandle);
      return ncclInternalError;
    }
    req->kind = Request::kSend;
    req->comm = comm;
    req->slot = slotIndex;
    req->size = size;
    req->data = static_cast<unsigned char*>(data);
    req->mhandle = mh;
    req->implicitMask = implicit ? 1 : 0;
    countUsers(&req->mhandle, 1, +1);
    slot.reqs[match] = req;
    ++comm->pending;
    if (++slot.matched == slot.nreqs) {
      ++comm->sequence;
      NCCL_NET_CHECK(postSlot(comm, slotIndex));
    }
    *request = req;
    return ncclSuccess;
  }

  ncclResult_t irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** /*phandles*/,
                     void** request) {
    auto* comm = static_cast<RecvComm*>(recvComm);
    if (unusable(comm)) return unusableResult(comm);
    if (n > kMaxRecvs) {
      NCCL_NET_WARN("irecv: %d grouped receives, this plugin advertises maxRecvs %d", n, kMaxRecvs);
      return ncclInternalError;
    }
    for (int r = 0; r < n && mhandles != nullptr; ++r)
      if (outsideHandle("irecv", data[r], sizes[r], mhandles[r])) return ncclInvalidUsage;
    int slotIndex = static_cast<int>(comm->sequence % kSlots);
    RecvSlot& slot = comm->slots[slotIndex];
    if (slot.request != nullptr) return ncclSuccess;  // kSlots receives in flight
    // Taken before a registration for a buffer without a handle, which a NULL answer here would leak.
    Request* req = comm->requests.acquire();
    if (req == nullptr) return ncclSuccess;
    const MemoryHandle* handles[kMaxRecvs] = {};
    uint32_t implicitMask = 0;
    for (int r = 0; r < n; ++r) {
      // A 0-byte receive's handle is neither used nor looked at, as for isend.
      auto* mh = mhandles != nullptr && sizes[r] > 0 ? static_cast<const MemoryHandle*>(mhandles[r]) : nullptr;
      if (sizes[r] > 0 && mh == nullptr) {
        mh = implicitRegistration(comm, data[r], sizes[r]);
        if (mh != nullptr) implicitMask |= 1u << r;
      }
      handles[r] = mh;
      if (sizes[r] > 0 && (mh == nullptr || mh->magic != MemoryHandle::kMagic || mh->comm != comm)) {
        if (mhandles == nullptr || mhandles[r] == nullptr)
          NCCL_NET_WARN("irecv: receive %d of %zu bytes at %p without a memory handle could not be registered here", r,
                        sizes[r], data[r]);
        else
          NCCL_NET_WARN("irecv: receive %d of %zu bytes with memory handle %p, which is not registered on this comm", r,
                        sizes[r], mhandles[r]);
        releaseImplicit(comm, handles, r, implicitMask);
        comm->requests.release(req);
        return ncclInternalError;
      }
    }
    req->kind = Request::kRecv;
    req->comm = comm;
    req->slot = slotIndex;
    req->nreqs = n;
    for (int r = 0; r < n; ++r) req->mhandles[r] = handles[r];
    req->implicitMask = implicitMask;
    FifoEntry* staging = comm->control->staging[slotIndex];
    for (int r = 0; r < n; ++r) {
      const MemoryHandle* mh = handles[r];
      FifoEntry& entry = staging[r];
      std::memset(&entry, 0, sizeof(entry));
      entry.addr = reinterpret_cast<uint64_t>(data[r]);
      entry.size = sizes[r];
      for (int d = 0; d < comm->ndevs && mh != nullptr; ++d) entry.rkeys[d] = mh->rkeys[d];
      entry.nreqs = static_cast<uint32_t>(n);
      entry.tag = tags[r];
      entry.idx = comm->sequence + 1;
    }
    slot = RecvSlot{};
    slot.request = req;
    const QpSlot& qp0 = comm->qps[0];
    ibv_sge sge{};
    sge.addr = reinterpret_cast<uint64_t>(staging);
    sge.length = static_cast<uint32_t>(n * sizeof(FifoEntry));
    sge.lkey = comm->devs[qp0.device].controlMr->lkey;
    ibv_send_wr wr{};
    wr.wr_id = kWrFifo | static_cast<uint64_t>(slotIndex);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    if (sge.length <= comm->fifoInlineBytes) wr.send_flags |= IBV_SEND_INLINE;
    wr.wr.rdma.remote_addr = comm->remoteControlAddr + static_cast<uint64_t>(slotIndex) * kMaxRecvs * sizeof(FifoEntry);
    wr.wr.rdma.rkey = comm->remoteControlRkey;
    // Counted before the post, as isend counts before it posts: a deregMr of one of these buffers on another thread
    // meanwhile finds it in use, rather than freeing a handle this receive then counts on.
    countUsers(req->mhandles, n, +1);
    ibv_send_wr* bad = nullptr;
    int rc = ibv_post_send(qp0.qp, &wr, &bad);
    if (rc != 0) {
      countUsers(req->mhandles, n, -1);
      releaseImplicit(comm, handles, n, implicitMask);  // this receive's alone: no request will complete to free them
      slot = RecvSlot{};
      comm->requests.release(req);
      return fail(comm, ncclSystemError, "ibv_post_send of the FIFO entry: " + errnoText(rc));
    }
    ++comm->sequence;
    ++comm->pending;
    *request = req;
    return ncclSuccess;
  }

  ncclResult_t iflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) {
    auto* comm = static_cast<RecvComm*>(recvComm);
    if (unusable(comm)) return unusableResult(comm);
    if (params().gdrFlushDisable || mhandles == nullptr) return ncclSuccess;  // NULL request: nothing to wait for
    // Host memory written by the NIC is coherent; only GPU memory needs the read-back.
    int target = -1;
    for (int r = 0; r < n; ++r) {
      auto* mh = static_cast<const MemoryHandle*>(mhandles[r]);
      if (mh == nullptr || sizes[r] <= 0) continue;
      if (mh->magic != MemoryHandle::kMagic || mh->comm != comm) {
        NCCL_NET_WARN("iflush: receive %d of %d bytes with memory handle %p, which is not registered on this comm", r,
                      sizes[r], mhandles[r]);
        return ncclInternalError;
      }
      if (target < 0 && (mh->type & (NCCL_PTR_CUDA | NCCL_PTR_DMABUF)) != 0) target = r;
    }
    if (target < 0) return ncclSuccess;
    auto* mh = static_cast<const MemoryHandle*>(mhandles[target]);
    for (int d = 0; d < comm->ndevs; ++d) {
      if (comm->devs[d].flushQp.load(std::memory_order_acquire) != nullptr) continue;
      NCCL_NET_WARN(
          "iflush: this comm has no flush QP on %s (regMr of the GPU buffer could not make it; its WARN "
          "says why)",
          comm->devs[d].port->name.c_str());
      return ncclInternalError;
    }
    // No request free: an error, never a NULL request, which would tell the caller the flush is complete (and it
    // would read GPU memory the NIC may still be writing), as NCCL's plugin fails to allocate one.
    Request* req = comm->requests.acquire();
    if (req == nullptr) {
      NCCL_NET_WARN("iflush: all %d requests of this comm are in use: the flush cannot be posted", kRecvPoolSize);
      return ncclInternalError;
    }
    req->kind = Request::kFlush;
    req->comm = comm;
    req->pendingReads = comm->ndevs;
    req->mhandles[0] = mh;
    // Counted before the posts, as irecv counts: the receive that used this buffer has completed, so a deregMr on
    // another thread could otherwise free the handle between a post and the count.
    countUsers(req->mhandles, 1, +1);
    for (int d = 0; d < comm->ndevs; ++d) {
      ibv_sge sge{};
      sge.addr = reinterpret_cast<uint64_t>(&comm->control->flushTarget[d]);
      sge.length = 1;
      sge.lkey = comm->devs[d].controlMr->lkey;
      ibv_send_wr wr{};
      wr.wr_id = reinterpret_cast<uint64_t>(req);
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.opcode = IBV_WR_RDMA_READ;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(data[target]);
      wr.wr.rdma.rkey = mh->rkeys[d];
      ibv_send_wr* bad = nullptr;
      int rc = ibv_post_send(comm->devs[d].flushQp.load(std::memory_order_acquire), &wr, &bad);
      if (rc != 0) {
        if (d == 0) {  // nothing posted: the request and the count are undone (later, reads in flight keep both)
          countUsers(req->mhandles, 1, -1);
          comm->requests.release(req);
        }
        return fail(comm, ncclSystemError, "ibv_post_send of the flush read: " + errnoText(rc));
      }
    }
    ++comm->pending;
    *request = req;
    return ncclSuccess;
  }

  ncclResult_t test(void* request, int* done, sdk::CompletedSizes& sizes) {
    auto* req = static_cast<Request*>(request);
    if (req->magic != Request::kMagic) {
      NCCL_NET_WARN("test: %p is not a live request of this plugin", request);
      return ncclInternalError;
    }
    Comm* comm = req->comm;
    if (!req->done) {
      // A request that completed before the comm failed is still reported as done.
      if (unusable(comm)) return unusableResult(comm);
      NCCL_NET_CHECK(comm->isSender ? progressSend(static_cast<SendComm*>(comm))
                                    : progressRecv(static_cast<RecvComm*>(comm)));
      if (!req->done) return ncclSuccess;
    }
    if (req->kind == Request::kSend) {
      if (!sizes.set(0, req->size)) return ncclSuccess;
    } else if (req->kind == Request::kRecv) {
      RecvSlot& slot = static_cast<RecvComm*>(comm)->slots[req->slot];
      const uint64_t* record = comm->control->sizes[req->slot];
      if (slot.sizeInline) {
        if (!sizes.set(0, slot.inlineSize)) return ncclSuccess;
      } else {
        for (int r = 0; r < req->nreqs; ++r)
          if (!sizes.set(r, loadAcquire(&record[r]))) return ncclSuccess;
      }
      slot = RecvSlot{};
    }
    *done = 1;
    --comm->pending;
    if (req->kind == Request::kSend) {
      countUsers(&req->mhandle, 1, -1);
      releaseImplicit(comm, &req->mhandle, 1, req->implicitMask);
    } else {
      countUsers(req->mhandles, req->kind == Request::kRecv ? req->nreqs : 1, -1);
      releaseImplicit(comm, req->mhandles, req->kind == Request::kRecv ? req->nreqs : 1, req->implicitMask);
    }
    req->magic = 0;
    if (comm->isSender) {
      static_cast<SendComm*>(comm)->requests.release(req);
    } else {
      static_cast<RecvComm*>(comm)->requests.release(req);
    }
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
    auto* listen = static_cast<ListenComm*>(listenComm);
    for (PendingAccept* p : listen->pending) discardPending(p);
    close(listen->fd);
    delete listen;
    return ncclSuccess;
  }

 private:
  static void keepRegistration(Comm* comm, MemoryHandle* mh) {
    std::lock_guard<std::mutex> lock(comm->registrationMutex);
    comm->registrations.push_back(mh);
  }

  static void discardPending(PendingAccept* p) {
    if (p->comm != nullptr) {
      destroyComm(p->comm);
    } else if (p->fd >= 0) {
      close(p->fd);
    }
    delete p;
  }

  static NetDevice deviceCopy(int dev) {
    std::lock_guard<std::mutex> lock(global().mutex);
    return global().devices[static_cast<size_t>(dev)];
  }

  // `registration(access flags)` with IBV_ACCESS_RELAXED_ORDERING while it is on. One refused (EINVAL, EOPNOTSUPP)
  // is asked again without the flag; only when that one succeeds was the flag the reason, and relaxed ordering goes
  // off for the process (a registration refused either way, a DMA-BUF one on a device without DMA-BUF, says nothing
  // about the flag).
  template <class Registration>
  static ibv_mr* registerRelaxed(const Port* port, Registration registration) {
    const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    if (!global().relaxedOrdering.load(std::memory_order_relaxed)) return registration(access);
    ibv_mr* mr = registration(access | IBV_ACCESS_RELAXED_ORDERING);
    if (mr != nullptr || (errno != EINVAL && errno != EOPNOTSUPP)) return mr;
    const int refused = errno;
    mr = registration(access);
    if (mr != nullptr && global().relaxedOrdering.exchange(false))
      NCCL_NET_INFO(NCCL_INIT | NCCL_NET, "%s refused a relaxed-ordering registration (%s): relaxed ordering off",
                    port->name.c_str(), errnoText(refused).c_str());
    return mr;
  }

  static ncclResult_t registerMemory(Comm* comm, void* data, size_t size, int type, int fd, uint64_t offset,
                                     void** mhandle) {
    auto mh = std::make_unique<MemoryHandle>();
    mh->comm = comm;
    mh->type = type;
    mh->ndevs = comm->ndevs;
    // 0 bytes: a handle without memory regions (the kernel refuses a region that covers no page, so regMr of a
    // page-aligned empty buffer failed while an odd one passed); the data path never reads a 0-byte buffer's handle,
    // and a buffer of any size is outside it.
    for (int d = 0; d < comm->ndevs && size > 0; ++d) {
      Port* port = comm->devs[d].port;
      ibv_mr* mr = nullptr;
      std::string dmabufError;
      if (fd >= 0) {
        if (verbs().regDmabufMr != nullptr) {
          mr = registerRelaxed(port, [&](int flags) {
            return verbs().regDmabufMr(port->hca->pd, offset, size, reinterpret_cast<uint64_t>(data), fd, flags);
          });
          if (mr == nullptr) dmabufError = errnoText(errno);
        } else {
          dmabufError = "libibverbs has no ibv_reg_dmabuf_mr";
        }
        // A refused dmabuf registration falls back to the address (works with nvidia-peermem loaded).
        if (mr == nullptr)
          NCCL_NET_INFO(NCCL_NET, "regMrDmaBuf on %s refused (%s); falling back to ibv_reg_mr", port->name.c_str(),
                        dmabufError.c_str());
      }
      if (mr == nullptr) {
        mr = registerRelaxed(port, [&](int flags) {
          // Only ibv_reg_mr_iova2 passes the optional flags on (ibv_reg_mr, called through a pointer, may not).
          if ((flags & IBV_ACCESS_RELAXED_ORDERING) != 0)
            return verbs().regMrIova2(port->hca->pd, data, size, reinterpret_cast<uint64_t>(data),
                                      static_cast<unsigned>(flags));
          return verbs().regMr(port->hca->pd, data, size, flags);
        });
      }
      if (mr == nullptr) {
        int error = errno;
        NCCL_NET_WARN("regMr of %zu bytes at %p (type %d) on %s failed: %s%s%s", size, data, type, port->name.c_str(),
                      errnoText(error).c_str(),
                      dmabufError.empty() ? "" : "; dmabuf registration also failed: ", dmabufError.c_str());
        for (int k = 0; k < d; ++k) verbs().deregMr(mh->mrs[k]);
        return ncclSystemError;
      }
      mh->mrs[d] = mr;
      mh->lkeys[d] = mr->lkey;
      mh->rkeys[d] = mr->rkey;
    }
    if (!comm->isSender && (type & (NCCL_PTR_CUDA | NCCL_PTR_DMABUF)) != 0) {
      std::string error;
      bool ready;
      {
        std::lock_guard<std::mutex> lock(comm->registrationMutex);
        ready = ensureFlushQps(static_cast<RecvComm*>(comm), &error);
      }
      if (!ready) {
        NCCL_NET_WARN("regMr: cannot create the flush QP: %s", error.c_str());
        for (int d = 0; d < comm->ndevs; ++d)
          if (mh->mrs[d] != nullptr) verbs().deregMr(mh->mrs[d]);
        return ncclSystemError;
      }
    }
    mh->begin = reinterpret_cast<uintptr_t>(data);
    mh->end = mh->begin + size;
    *mhandle = mh.release();
    return ncclSuccess;
  }

  // A registration of [data, data + size) for one request of a caller that passed no memory handle, over the
  // buffer's whole pages (which are mapped, since the buffer lies in them). Never reused for a later request: the
  // buffer may have been freed and mapped again at the same address meanwhile, and a registration pins the pages it
  // was made on, so a reused one would move the old pages' bytes and lose the new ones.
  static const MemoryHandle* implicitRegistration(Comm* comm, void* data, size_t size) {
    auto begin = reinterpret_cast<uintptr_t>(data);
    if (!comm->announcedImplicit) {
      comm->announcedImplicit = true;
      NCCL_NET_INFO(NCCL_NET,
                    "a buffer came without a memory handle: registering it for its request alone (NCCL always "
                    "calls regMr first; this path serves tools and costs a registration per message)");
    }
    uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    uintptr_t first = begin / page * page;
    uintptr_t last = (begin + size + page - 1) / page * page;
    void* handle = nullptr;
    if (registerMemory(comm, reinterpret_cast<void*>(first), last - first, NCCL_PTR_HOST, -1, 0, &handle) !=
        ncclSuccess)
      return nullptr;  // registerMemory's WARN says why
    auto* mh = static_cast<MemoryHandle*>(handle);
    comm->implicitRegistrations.push_back(mh);
    return mh;
  }

  // One non-blocking step of connect(). A non-empty *error ends the attempt.
  static ncclResult_t connectStep(PendingConnect* p, std::string* error) {
    int ioError = 0;
    sdk::IoStatus status;
    switch (p->stage) {
      case PendingConnect::kConnecting: {
        status = p->connector.progress();
        if (status == sdk::IoStatus::kWouldBlock) return ncclSuccess;
        if (status != sdk::IoStatus::kDone) {
          *error = p->connector.error();
          return ncclSystemError;
        }
        NetDevice device = deviceCopy(p->dev);
        auto* comm = new SendComm;
        comm->isSender = true;
        comm->trafficClass = p->trafficClass;
        comm->serviceLevel = params().serviceLevel;
        ++global().liveComms;
        comm->fd = p->connector.release();
        p->comm = comm;
        sdk::setDeadPeerTimeout(comm->fd, params().peerTimeoutMs);
        int nqps = std::max(
            {params().qpsPerConnection, static_cast<int>(device.ports.size()), static_cast<int>(p->remoteDevs)});
        nqps = std::min(nqps, kMaxQps);
        if (!buildComm(comm, device, nqps, error)) return ncclSystemError;
        describeComm(comm, &p->local, reinterpret_cast<uint64_t>(comm->control->fifo));
        p->stage = PendingConnect::kSendInfo;
        p->transfer = Transfer{};
      }
        [[fallthrough]];
      case PendingConnect::kSendInfo:
        status = p->transfer.send(p->comm->fd, &p->local, sizeof(p->local), &ioError);
        if (status == sdk::IoStatus::kWouldBlock) return ncclSuccess;
        if (status != sdk::IoStatus::kDone) {
          *error = "sending QP info: " + ioFailure(status, ioError);
          return ncclSystemError;
        }
        p->stage = PendingConnect::kRecvInfo;
        p->transfer = Transfer{};
        [[fallthrough]];
      case PendingConnect::kRecvInfo: {
        status = p->transfer.recv(p->comm->fd, &p->remote, sizeof(p->remote), &ioError);
        if (status == sdk::IoStatus::kWouldBlock) return ncclSuccess;
        if (status != sdk::IoStatus::kDone) {
          *error = "receiving the peer's QP info: " + ioFailure(status, ioError);
          return ncclRemoteError;
        }
        if (!validRemoteInfo(p->remote, error)) return ncclRemoteError;
        if (p->remote.nqps != static_cast<uint32_t>(p->comm->nqps)) {
          *error = "the peer answered with " + std::to_string(p->remote.nqps) + " QPs for our " +
                   std::to_string(p->comm->nqps);
          return ncclRemoteError;
        }
        SendComm* comm = p->comm;
        p->remote.deviceName[sizeof(p->remote.deviceName) - 1] = '\0';
        comm->peer = p->connector.remote().toString() + " (" + p->remote.deviceName + ")";
        comm->remoteControlAddr = p->remote.controlAddr;
        comm->remoteControlRkey = p->remote.controlRkey;
        if (!connectAllQps(comm, p->remote, error)) return ncclSystemError;
        p->stage = PendingConnect::kSendReady;
        p->transfer = Transfer{};
        p->local.ready = 1;
      }
        [[fallthrough]];
      case PendingConnect::kSendReady:
        status = p->transfer.send(p->comm->fd, &p->local.ready, sizeof(uint32_t), &ioError);
        if (status == sdk::IoStatus::kWouldBlock) return ncclSuccess;
        if (status != sdk::IoStatus::kDone) {
          *error = "sending ready: " + ioFailure(status, ioError);
          return ncclRemoteError;
        }
        return ncclSuccess;
    }
    return ncclSuccess;
  }

  static ncclResult_t acceptStep(ListenComm* listen, PendingAccept* p, bool* finished, std::string* error) {
    int ioError = 0;
    sdk::IoStatus status;
    switch (p->stage) {
      case PendingAccept::kRecvInfo: {
        status = p->transfer.recv(p->fd, &p->remote, sizeof(p->remote), &ioError);
        if (status == sdk::IoStatus::kWouldBlock) return ncclSuccess;
        if (status != sdk::IoStatus::kDone) {
          *error = "before identifying itself: " + ioFailure(status, ioError);
          return ncclRemoteError;
        }
        if (!validRemoteInfo(p->remote, error)) return ncclRemoteError;
        p->identified = true;
        NetDevice device = deviceCopy(listen->dev);
        auto* comm = new RecvComm;
        comm->isSender = false;
        const bool senderChose = (p->remote.flags & kPathSettings) != 0;  // older senders leave it 0
        comm->trafficClass = senderChose ? p->remote.trafficClass : params().trafficClass;
        comm->serviceLevel = senderChose ? p->remote.serviceLevel : params().serviceLevel;
        ++global().liveComms;
        comm->fd = p->fd;
        p->fd = -1;
        p->comm = comm;
        p->remote.deviceName[sizeof(p->remote.deviceName) - 1] = '\0';
        comm->peer = p->peerAddress + " (" + p->remote.deviceName + ")";
        comm->remoteControlAddr = p->remote.controlAddr;
        comm->remoteControlRkey = p->remote.controlRkey;
        if (!buildComm(comm, device, static_cast<int>(p->remote.nqps), error)) return ncclSystemError;
        if (!connectAllQps(comm, p->remote, error)) return ncclSystemError;
        for (int q = 0; q < comm->nqps; ++q)
          if (!postReceives(comm, q, kRecvDepth, error)) return ncclSystemError;
        describeComm(comm, &p->local, reinterpret_cast<uint64_t>(comm->control->sizes));
        p->stage = PendingAccept::kSendInfo;
        p->transfer = Transfer{};
      }
        [[fallthrough]];
      case PendingAccept::kSendInfo:
        status = p->transfer.send(p->comm->fd, &p->local, sizeof(p->local), &ioError);
        if (status == sdk::IoStatus::kWouldBlock) return ncclSuccess;
        if (status != sdk::IoStatus::kDone) {
          *error = "sending QP info: " + ioFailure(status, ioError);
          return ncclRemoteError;
        }
        p->stage = PendingAccept::kRecvReady;
        p->transfer = Transfer{};
        [[fallthrough]];
      case PendingAccept::kRecvReady:
        // The sender's QPs reach RTR before it says ready, so our first FIFO write cannot hit a QP in INIT.
        status = p->transfer.recv(p->comm->fd, &p->ready, sizeof(p->ready), &ioError);
        if (status == sdk::IoStatus::kWouldBlock) return ncclSuccess;
        if (status != sdk::IoStatus::kDone) {
          *error = "waiting for the peer's ready: " + ioFailure(status, ioError);
          return ncclRemoteError;
        }
        if (p->ready != 1) {  // our connect sends 1: anything else is not one of our peers, or a corrupt stream
          *error = "the peer's ready word is " + std::to_string(p->ready) + ", not 1: not an nns-ib peer";
          return ncclRemoteError;
        }
        *finished = true;
        return ncclSuccess;
    }
    return ncclSuccess;
  }
};

NCCL_NET_SDK_EXPORT(IbNet)
