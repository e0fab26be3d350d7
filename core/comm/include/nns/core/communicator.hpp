// nns/core/communicator.hpp: a communicator over any loaded net plugin: bootstrap, one plugin connection per peer,
// direction and channel (made when first needed), fixed registered slots per connection, a progress thread that
// runs pipelined transfer plans, and a sticky asynchronous error (like ncclCommGetAsyncError).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "nns/core/bootstrap.hpp"
#include "nns/core/loader.hpp"

namespace nns::core {

// Where a communicator's slots live and how bytes get into them. The default is host memory (memcpy). The CUDA layer
// supplies GPU memory (GPU Direct RDMA: the plugin reads and writes the GPU's memory, receives flushed where NCCL
// would) or pinned host memory (staging: copies between the GPU and the slots overlap the network).
class SlotMemory {
 public:
  virtual ~SlotMemory() = default;
  // One line for logs: where the slots are and why.
  virtual std::string describe() const = 0;
  virtual int ptrType() const = 0;           // what regMr is told: NCCL_PTR_HOST or NCCL_PTR_CUDA
  virtual void* allocate(size_t bytes) = 0;  // throws on failure
  virtual void release(void* memory) noexcept = 0;
  // Starts copying `bytes` from `src` (the user's buffer) into slot memory `dst`. Returns nullptr when the copy is
  // already complete, else a token to poll with copyDone (which releases it once it returns true).
  virtual void* startCopy(void* dst, const void* src, size_t bytes) = 0;
  virtual bool copyDone(void* token) = 0;
  // Received pieces must be flushed (iflush) before they are read (GPU Direct where NCCL would flush).
  virtual bool flushReceives() const { return false; }
  // Whether GPU kernels can read the slots (GPU memory, or mapped pinned host memory). Host code can read them when
  // ptrType() is NCCL_PTR_HOST.
  virtual bool deviceReadable() const { return false; }
  // The CUDA device whose own memory the slots are (GPU Direct), or -1 where they are host memory (pinned or not),
  // which a kernel on any GPU reads. A kernel on another GPU faults on them without peer access.
  virtual int gpu() const { return -1; }
  // Slots per connection when CommOptions::slots and $NNS_SLOTS leave it open: NCCL's eight steps. Host slots take
  // two (HostSlots): one core both moves and reduces their data, and every slot beyond double buffering only makes
  // the working set larger than its caches (docs/performance.md).
  virtual int defaultSlots() const { return 8; }
  // Working memory of at least `bytes` where GPU kernels work, on the device of `near` (a buffer of the operation),
  // owned by this slot memory and so by its communicator: grows, never shrinks, freed with it. nullptr: this slot
  // memory has none (host slots), and the communicator's host scratch serves.
  virtual void* deviceScratch(size_t /*bytes*/, const void* /*near*/) { return nullptr; }
};

struct CommOptions {
  std::string plugin;                   // NCCL_NET_PLUGIN semantics; empty: $NCCL_NET_PLUGIN if set, else "socket"
  std::vector<std::string> searchDirs;  // where to look for libnccl-net-*.so first
  size_t slotBytes = 512u << 10;        // the largest pipelined piece; $NNS_SLOT_BYTES overrides
  int slots = 0;                        // pieces in flight per connection (0: SlotMemory::defaultSlots); $NNS_SLOTS
  int channels = 1;                     // parallel rings / tree pairs, each on connections of its own; $NNS_NCHANNELS
  int device = 0;                       // the plugin device every connection uses; $NNS_NET_DEVICE overrides
  // No progress for this long (a dead or stuck rank) fails the operation; bootstrap waits use it too.
  // $NNS_COMM_TIMEOUT_MS overrides.
  std::chrono::milliseconds timeout{60000};
  // Every collective first compares its arguments across the ranks (one bootstrap all-gather per call, a debugging
  // aid like TORCH_DISTRIBUTED_DEBUG=DETAIL): a rank called with another count, type, op, root or algorithm is
  // refused by name on every rank instead of moving the wrong data. $NNS_CHECK_CALLS=1 turns it on.
  bool checkCalls = false;
  // Host buffers registered with the plugin for the length of each call (Communicator::registerForCall), so sends
  // leave from them and receives land in them instead of being copied through the slots: -1 when the plugin's
  // registration costs nothing (timed when the first connection is made), 1 always, 0 never. The same for the
  // collNet (CollNetLink::registersCalls), timed on its own registration. $NNS_CALL_REGISTRATION=0|1 overrides.
  int callRegistration = -1;
  // Chooses the slots' memory once the plugin is loaded (from its properties for `device`); unset or returning
  // nullptr: host memory.
  std::function<std::shared_ptr<SlotMemory>(Net& net, int device)> slotMemory;
};

// Thrown on any failure: a plugin error (with the call and result), a timeout (a dead or stuck rank), or a
// communicator that failed earlier (the error is sticky, as NCCL's asynchronous errors are). result() is the
// ncclResult_t it stands for (what the C API returns): a failed plugin call's own result, ncclInvalidUsage for a
// setting this rank cannot run with or that differs between the ranks, ncclSystemError for a set-up failure on this
// rank (no plugin, no device, no memory), ncclUnhandledCudaError for a CUDA call that failed (the kernel layer's),
// ncclRemoteError for a peer, a timeout or an earlier failure.
class CommError : public std::runtime_error {
 public:
  explicit CommError(const std::string& what, ncclResult_t result = ncclRemoteError)
      : std::runtime_error(what), result_(result) {}
  ncclResult_t result() const noexcept { return result_; }

 private:
  ncclResult_t result_;
};

// Thrown before anything is sent for an argument the call cannot take (a type, an op, a root, a peer, a NULL
// buffer, a count too large to address): the communicator stays usable.
class ArgumentError : public CommError {
 public:
  explicit ArgumentError(const std::string& what) : CommError(what, ncclInvalidArgument) {}
};

// What a call is: named in the errors of the operation that runs it ("rank 0, in allreduce(count 1024, float, sum,
// ring): ...", "rank 0, in recv(count 16, float, peer 4): ..."), and a collective's compared across the ranks with
// CommOptions::checkCalls. Literals and numbers only, so that describing a call costs nothing; text() builds the
// words when they are needed.
struct CallInfo {
  const char* name = nullptr;  // "allreduce"
  size_t count = 0;
  const char* type = nullptr;       // "float"
  const char* op = nullptr;         // where the call has one
  int root = -1;                    // where the call has one
  const char* algorithm = nullptr;  // where the call has one
  int peer = -1;                    // a send's or receive's
  // Send/recv: only the ranks it pairs make such a call, so it is never compared across the ranks (the others would
  // wait for it in the comparison's all-gather); `operations` > 1 is a group of that many, said in place of the
  // count ("send/recv group(3 operations)").
  bool pointToPoint = false;
  size_t operations = 0;
  std::string text() const;
};

// A callable taken by reference for the length of the call it is passed to (Communicator::submit): nothing is
// copied or allocated, whatever the callable captures.
class OperationRef {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::remove_cvref_t<F>, OperationRef>>>
  OperationRef(F&& operation)  // NOLINT(google-explicit-constructor): lambdas convert as they did to std::function
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(operation)))),
        invoke_([](void* object) { (*static_cast<std::remove_reference_t<F>*>(object))(); }) {}
  void operator()() const { invoke_(object_); }

 private:
  void* object_;
  void (*invoke_)(void*);
};

// A receive segment of a Plan: its flow and its place in that flow.
struct PlanRecvRef {
  int flow = -1;
  int segment = -1;
};

// Called with each received piece of a Plan's receive, in order: its byte offset in the segment, the slot holding
// it, its size. The handler may rewrite the piece in its slot (a partial reduction that Plan::forward() then sends
// on). Held in place: any callable of up to kBytes of trivially copyable state (pointers, sizes, references), such
// as a lambda capturing those; anything larger or owning memory is refused when it is compiled.
class PieceHandler {
 public:
  static constexpr size_t kBytes = 64;
  PieceHandler() = default;
  template <class F, class = std::enable_if_t<!std::is_same_v<std::remove_cvref_t<F>, PieceHandler>>>
  PieceHandler(F handler) {  // NOLINT(google-explicit-constructor): schedules pass lambdas
    static_assert(std::is_trivially_copyable_v<F> && std::is_trivially_destructible_v<F>,
                  "a piece handler holds only trivially copyable state (pointers, sizes, references)");
    static_assert(sizeof(F) <= kBytes, "a piece handler's state is at most PieceHandler::kBytes");
    static_assert(alignof(F) <= alignof(std::max_align_t), "a piece handler's state is aligned as scalars are");
    ::new (static_cast<void*>(state_)) F(handler);
    invoke_ = [](const void* state, size_t offset, void* piece, size_t bytes) {
      (*std::launder(static_cast<const F*>(state)))(offset, piece, bytes);
    };
  }
  explicit operator bool() const { return invoke_ != nullptr; }
  void operator()(size_t offset, void* piece, size_t bytes) const { invoke_(state_, offset, piece, bytes); }

 private:
  alignas(std::max_align_t) unsigned char state_[kBytes] = {};
  void (*invoke_)(const void*, size_t, void*, size_t) = nullptr;
};

// The receive segments a Plan segment waits on: at most kCapacity (a tree rank's two children and a forward's
// source need three); more is a schedule's bug, thrown as std::length_error.
class PlanRefs {
 public:
  static constexpr int kCapacity = 4;
  PlanRefs() = default;
  PlanRefs(std::initializer_list<PlanRecvRef> refs) {  // NOLINT(google-explicit-constructor): `{previous}`
    for (const PlanRecvRef& ref : refs) push_back(ref);
  }
  void push_back(PlanRecvRef ref) {
    if (size_ == kCapacity) throw std::length_error("a plan segment waits on more than PlanRefs::kCapacity receives");
    refs_[size_++] = ref;
  }
  const PlanRecvRef* begin() const { return refs_; }
  const PlanRecvRef* end() const { return refs_ + size_; }
  int size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  PlanRecvRef refs_[kCapacity];
  int size_ = 0;
};

// One pipelined step of a schedule: for each connection an ordered list of segments. Both ends of a connection
// describe the same segments in the same order (the schedules are symmetric), so both cut them into the same
// pieces. A segment can wait on receive segments of the same plan (of the same size): a send's piece i goes out,
// and a receive's piece i is handed to its handler, once piece i of each of them has been handed to its handler
// (the piece was reduced or copied into the buffer this one reads).
//
// A plan keeps its storage when it is cleared (Communicator::newPlan), and its handlers and dependencies are held
// in place, so a schedule built again on the same communicator allocates nothing once the largest plan was seen.
class Plan {
 public:
  using RecvRef = PlanRecvRef;
  using Refs = PlanRefs;
  using PieceHandler = core::PieceHandler;

  // `direct`: where the received bytes end up when the handler is a plain copy (offset for offset). When that
  // memory is registered with the communicator (registerBuffer), pieces are received straight into it and the
  // handler is not called; otherwise they land in a slot and go through the handler.
  RecvRef recv(int peer, int channel, size_t bytes, PieceHandler onPiece, Refs after = {}, void* direct = nullptr);
  // Sends from registered memory go out from it directly; from other memory through a slot. `stage`, if given, fills
  // the slot in place of the copy (called with the piece's offset, the slot and the piece's size: a send that
  // transforms as it stages, such as avg's premultiplication); it must write host memory, and is not called when
  // `data` is registered (it then goes out as it is).
  void send(int peer, int channel, const void* data, size_t bytes, Refs after = {}, PieceHandler stage = {});
  // Sends on what receive segment `from` got, each piece once its handler has run, straight from the slot it
  // arrived in (as the handler left it), so a forwarded piece is never copied; the slot is reused once the piece is
  // sent. From a receive straight into registered memory (`direct`), that memory is sent instead.
  // The slots a forward holds bound the schedule: on each connection, the pieces posted before this segment's piece
  // p, less those received before `from`'s piece p, must be fewer than the slots (else a transport whose sends
  // complete only once the receiver has posted, as RDMA's do, could deadlock the ring); run() checks it. A receive
  // kept in its slots is forwarded once.
  void forward(int peer, int channel, RecvRef from, Refs after = {});
  bool empty() const { return flowCount_ == 0; }
  // Empties the plan and keeps its storage for the next one.
  void clear();
  // Pieces smaller than a slot deepen the pipeline (a forwarded piece leaves sooner); both ends must choose the same
  // (schedules derive it from the message size). 0: a whole slot.
  void setPieceBytes(size_t bytes) { pieceBytes_ = bytes; }
  size_t pieceBytes() const { return pieceBytes_; }
  // Point-to-point plans, whose two ends are sized by two calls: a segment whose bytes fill its pieces exactly is
  // closed by a zero-byte piece, so a receive smaller or larger than its send fails on its own call ("received N
  // bytes ..., expected 0"). Without it a receive of whole pieces fewer than the send's completed, cut short, and its
  // send's remaining pieces went into the next receive. Both ends must say the same (sendRecv sets it).
  void setEndMarks(bool on) { endMarks_ = on; }

 private:
  friend class Communicator;
  struct Segment {
    const unsigned char* data = nullptr;  // send: where the bytes are read from; recv: the direct target or null
    size_t bytes = 0;
    PieceHandler onPiece;     // recv
    PieceHandler stage;       // send through a slot: fills it instead of a copy of `data`
    Refs after;               // receive segments this one waits on, piece by piece
    size_t pieces = 0;        // set when the plan runs
    size_t piecesDone = 0;    // recv: pieces handed to onPiece
    void* mhandle = nullptr;  // set when the plan runs: `data` is registered (no slot, no copy)
    RecvRef from;             // forward: the receive segment whose pieces this one sends on
    bool fromSlots = false;   // forward, set when the plan runs: from `from`'s slots (`mhandle` covers them)
    bool forwarded = false;   // recv, set when the plan runs: a forward sends its pieces from the slots
    size_t firstSlot = 0;     // recv: the connection's slot count when piece 0 was posted
  };
  struct Flow {
    int peer;
    int channel;
    bool sending;
    std::vector<Segment> segments;
  };
  int flowFor(int peer, int channel, bool sending);
  // The plan's flows: the first flowCount_ of flows_ (the rest are kept for their segments' storage).
  std::span<Flow> flows() { return {flows_.data(), flowCount_}; }
  std::vector<Flow> flows_;
  size_t flowCount_ = 0;
  size_t pieceBytes_ = 0;
  bool endMarks_ = false;
};

class Communicator {
 public:
  // The most channels (CommOptions::channels, $NNS_NCHANNELS) a communicator takes.
  static constexpr int kMaxChannels = 32;
  Communicator(const LaunchInfo& launch, const CommOptions& options);
  // Shuts the communicator down (shutdown()) and frees it. When shutdown() fails, the destructor cannot keep the
  // object for the progress thread that is still inside a plugin call, so that thread resumes in freed memory when
  // the call returns: a communicator on the heap is better shut down first and, if that fails, abandon()ed.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // Stops the progress thread, then closes every connection and finalizes the plugin: true once done (at once when
  // done before). False when an operation stays inside a plugin call for the timeout + 5 s more (a plugin whose
  // close waits for its peer, say): nothing is closed or freed then, and the call may be made again. Operations
  // submitted after a shutdown are refused. Safe to call from several threads at once: one closes, the others wait
  // for it (under the same bound).
  bool shutdown();
  // Keeps a communicator whose shutdown() failed allocated for the rest of the process, reachable (not a leak to a
  // leak checker): its progress thread resumes in it when the plugin call returns, then closes the connections and
  // the plugin (as shutdown() would) and ends.
  static void abandon(std::unique_ptr<Communicator> comm);

  int rank() const { return rank_; }
  int size() const { return size_; }
  int channels() const { return options_.channels; }
  // The channel of send/recv's connections, apart from the collectives' channels 0..channels()-1 (as NCCL keeps
  // point-to-point on connections of its own): a send no rank receives then waits there for a later receive from
  // this rank, and never slides into a collective's connection, where it would be taken for that collective's data.
  int p2pChannel() const { return options_.channels; }
  int next() const { return (rank_ + 1) % size_; }
  int prev() const { return (rank_ + size_ - 1) % size_; }
  const Net& net() const { return *net_; }
  const CommOptions& options() const { return options_; }
  Bootstrap& bootstrap() { return *bootstrap_; }
  // Where the slots live and why (SlotMemory::describe()).
  const std::string& slotMemoryDescription() const { return slotMemoryDescription_; }
  // The plugin devices this rank's connections use, as the plugin names them: "device 0 (lo, 10000 Mbps)", or
  // several, comma-separated, when the channels spread over devices.
  const std::string& devicesDescription() const { return devicesDescription_; }
  bool slotsHostReadable() const { return slotMemory_->ptrType() == NCCL_PTR_HOST; }
  bool slotsDeviceReadable() const { return slotMemory_->deviceReadable(); }
  int slotsGpu() const { return slotMemory_->gpu(); }  // SlotMemory::gpu

  // Runs `operation` with the communicator to itself and waits for it: on the calling thread when nothing else is
  // queued or running, otherwise on the progress thread in submission order. An exception there (a CommError from
  // run(), a plugin error) fails the communicator for good: every rank's later operations throw at once with the
  // first error.
  void submit(OperationRef operation);
  // The same for a call described by `call` (what this rank was asked to do), which the operation's errors name.
  // For a collective (not CallInfo::pointToPoint), with CommOptions::checkCalls every rank first all-gathers its
  // `call` on the thread that runs the
  // operation, right before it, so each call is compared with the call it meets on the other ranks even when
  // several threads share the communicator; when they differ, every rank throws ArgumentError naming each rank's
  // call, nothing moves, and the communicator stays usable. A rank that does not come fails the communicator after
  // the timeout.
  void submit(const CallInfo& call, OperationRef operation);
  // Moves everything `plan` describes, all connections at once, pieces pipelined, slots reused. Only inside an
  // operation given to submit(). Connections the plan needs that do not exist yet are made first.
  void run(Plan& plan);
  // An empty plan whose storage the communicator keeps from call to call: a schedule that builds it again moves
  // data without allocating. Only inside an operation given to submit(), one plan at a time (the next call empties
  // it).
  Plan& newPlan();
  // Scratch memory owned by the communicator (grows, never shrinks), for schedules that need a working copy.
  // Only inside an operation given to submit().
  void* scratch(size_t bytes);
  // The same on the GPU of `near` (SlotMemory::deviceScratch), for GPU buffers; throws CommError when the slot memory
  // has none (GPU buffers on a communicator made without GPU slot memory).
  void* deviceScratch(size_t bytes, const void* near);

  // Registers host memory for zero-copy transfers, like ncclCommRegister: sends from it and plain-copy receives
  // into it then skip the slots (and the copies through them). Each connection registers it with the plugin on
  // first use (regMr), so the cost is paid once per connection, not per call. The memory must stay valid until
  // deregisterBuffer (or the communicator's end). Returns the handle for deregisterBuffer. Any thread, not inside
  // an operation; throws CommError (a failed communicator) or ArgumentError (a NULL or empty buffer, a range past the
  // end of the address space, host memory not all mapped, a type that is neither below, GPU memory on a communicator
  // whose slots are not GPU memory).
  // `type` is what regMr is told: NCCL_PTR_HOST, or NCCL_PTR_CUDA for GPU memory, taken only where the slot memory is
  // GPU memory (GPU Direct: SlotMemory::ptrType() NCCL_PTR_CUDA), whose received pieces are flushed as NCCL would.
  void* registerBuffer(void* data, size_t bytes, int type = NCCL_PTR_HOST);
  // False when `handle` is not a live registration of this communicator (the communicator stays usable).
  bool deregisterBuffer(void* handle);
  // Whether [data, data + bytes) lies in one registered buffer (schedules that choose by it). Only inside an
  // operation given to submit().
  bool registered(const void* data, size_t bytes) const;
  // Lends host memory [data, data + bytes) to the running operation as if it were registered: the plugin registers it
  // on each connection's first use and deregisters it when the operation ends, and the operation's sends from it and
  // plain-copy receives into it skip the slots. Only where that is cheaper than the copies: when the plugin's
  // registration costs nothing (callRegistrationOn()), the slots are host memory, the buffer is at least
  // kCallRegistrationMinBytes and no registration covers it yet, up to kMaxCallRegistrations per operation. Returns
  // whether it lent it. Only inside an operation given to submit(), before the plan that should use it runs.
  bool registerForCall(const void* data, size_t bytes);
  static constexpr size_t kCallRegistrationMinBytes = 64 << 10;
  static constexpr size_t kMaxCallRegistrations = 8;
  // Whether registerForCall lends buffers: CommOptions::callRegistration or $NNS_CALL_REGISTRATION when set, else
  // decided when the first connection registers its slots, by whether a regMr/deregMr pair of as many bytes took
  // under 1 us (no pinning, no system call: TCP's). False until then.
  bool callRegistrationOn() const { return callRegistration_ == 1; }

  // The collNet beside the plugin's net (in-network reduction: NCCL's CollNet), as the collectives use it: one comm
  // over every rank, and `slots` pairs of host slots (send, receive) registered with it once. What it can do is what
  // every rank's collNet can: their answers were all-gathered when it connected, so every rank holds the same.
  static constexpr size_t kReducePairs = static_cast<size_t>(ncclNumTypes) * static_cast<size_t>(ncclNumOps);
  struct CollNetLink {
    CollNet* coll = nullptr;
    void* comm = nullptr;
    void* mhandle = nullptr;  // one registration covers every slot
    size_t slotBytes = 0;     // each slot's; no operation posted is larger (a multiple of 8, so of every type's size)
    std::vector<unsigned char*> sendSlots, recvSlots;
    std::array<unsigned char, kReducePairs> reduces{};     // [type][op]: 1 where every rank's reduceSupport said yes
    bool allGather = false;                                // every rank's collNet has iallgather (v8 and later)
    bool reduceScatter = false;                            // ... and ireducescatter
    int withoutAllGather = -1, withoutReduceScatter = -1;  // the first rank whose collNet lacks it, else -1
    // The smallest maxCollBytes of the ranks' devices (the slots are cut to it), and the first rank that has it.
    size_t maxBytes = SIZE_MAX;
    int maxBytesRank = -1;
    // Every rank registers a call's host buffers of kCallRegistrationMinBytes and more with the collNet for the call
    // and posts from and into them in windows of a slot (NCCL's registered path), instead of copying them through
    // the slots: CommOptions::callRegistration, else where a regMr/deregMr pair costs every rank nothing.
    bool registersCalls = false;
    bool registrationFailed = false;  // a call's regMr failed on this rank (said at WARN once, at INFO after)
    bool canReduce(ncclDataType_t type, ncclRedOp_t op) const {
      const int t = static_cast<int>(type), o = static_cast<int>(op);
      return t >= 0 && t < ncclNumTypes && o >= 0 && o < ncclNumOps && reduces[static_cast<size_t>(t * ncclNumOps + o)];
    }
  };
  // The collNet connected, at the first call: a collective step (every rank calls it at the same point, inside an
  // operation given to submit()). Every rank loads its collNet (init, device 0's properties: host memory is needed,
  // reduceSupport for every pair), then all-gathers its handle and what it supports, or why it has none, so all
  // agree: nullptr with `why` when any rank cannot use it. Once connected, they agree on registersCalls the same way.
  // Decided once: later calls answer at once, with no traffic. A connect that fails fails the communicator.
  CollNetLink* collNet(std::string* why);
  // Throws a CommError naming the collNet and `call` unless `result` is ncclSuccess.
  void checkCollNet(ncclResult_t result, const char* call);

  // The first error this communicator hit, or empty: what ncclCommGetAsyncError reports.
  std::string asyncError() const;
  // That error's code (CommError::result() of the failure that came first), ncclSuccess while there is none; every
  // later call on the failed communicator fails with it too.
  ncclResult_t asyncResult() const;
  // Throws that error (CommError "communicator failed earlier", with asyncResult()) once the communicator failed.
  void throwIfFailed() const;
  // Inside an operation: throws CommError "aborted: <the error>" (naming the call) once the communicator failed, from
  // this operation or an abort elsewhere. Checked on every pass of a polling loop, also on those that moved data, so
  // an operation that always finds something to do still stops at an abort.
  void stopIfAborted();
  // Inside an operation that moves data outside the communicator's own loop (through the collNet): says it moved, so
  // a caller queued behind it (whose wait gives up when nothing has progressed for 4 x the timeout + 30 s) waits on.
  void noteProgress();
  // Fails the communicator now (ncclCommAbort): closes every connection so peers see the error too. Nothing in a
  // process forked from the one that made it (the connections are the parent's; the copy's calls are refused).
  // `result` is the code asyncResult() reports when this is the first failure.
  void abort(const std::string& why, ncclResult_t result = ncclRemoteError);

 private:
  struct Slot {
    unsigned char* memory = nullptr;
    void* request = nullptr;
    void* copy = nullptr;  // a copy into this slot still running (SlotMemory::startCopy's token)
    bool staged = false;   // the piece at the head of the flow is in this slot (or on its way): post it
    bool held = false;     // recv: a handled piece that a forward has yet to send; the slot is not reposted until then
    Slot* source = nullptr;  // send: the receive slot this forwarded piece goes out from (released on completion)
    size_t bytes = 0;        // the piece this slot carries
    int arrivedBytes = 0;    // what test() reported for a piece kept waiting on its segment's dependencies
    int segment = 0;
    size_t offset = 0;
  };
  struct ConnKey {
    int peer, channel;
    bool sending;
    bool operator<(const ConnKey& o) const {
      return peer != o.peer ? peer < o.peer : channel != o.channel ? channel < o.channel : sending < o.sending;
    }
  };
  struct Connection {
    void* comm = nullptr;
    void* mhandle = nullptr;  // one registration covers every slot
    // Sending connections: their registration of a receiving connection's slots, for forwards (made on first use).
    std::map<ConnKey, void*> forwardHandles;
    std::vector<Slot> slots;
    unsigned char* memory = nullptr;  // from slotMemory_
  };
  struct Registration {
    uintptr_t begin = 0, end = 0;
    int type = NCCL_PTR_HOST;
    std::map<ConnKey, void*> mhandles;  // the plugin's handle per connection, made on first use
  };
  // The registration that [data, data + bytes) lies in, or null.
  Registration* covering(const void* data, size_t bytes) const;
  // The plugin handle of the registration covering [data, data + bytes) on `key`'s connection, or null.
  void* registeredHandle(const ConnKey& key, const void* data, size_t bytes);
  // Deregisters `registration`'s handles on their connections; `keepKeys`: the entries stay, with null handles.
  void deregister(Registration& registration, bool keepKeys = false);
  // The sending connection `sendKey`'s registration of the receiving connection `recvKey`'s slots (forwards).
  void* forwardHandle(const ConnKey& sendKey, const ConnKey& recvKey);

  // Throws a CommError naming the plugin, the call and the peer unless `result` is ncclSuccess. `inCall`: how long the
  // call took, said where it kept the thread a second or more (a connect or accept that waits for its peer).
  void check(ncclResult_t result, const char* call, int peer = -1, std::chrono::nanoseconds inCall = {});
  [[noreturn]] void fail(const std::string& what, ncclResult_t result = ncclRemoteError);
  void connectRing();  // connects the ring (constructor)
  // `watchBootstrap`: while every rank is on its way to the next all-gather (creation), a dead rank fails it early.
  void establish(const std::vector<ConnKey>& keys, bool watchBootstrap = false);
  void reserveRoomFor(size_t connections);  // raises the descriptor limit for as many connections to make
  void registerSlots(Connection& conn, bool sending, int peer);
  void closeConnections();
  // The end of a shutdown, by the one caller that set closing_: joins the progress thread (unless it is this one),
  // closes the connections, finalizes the plugin and marks the communicator shut down.
  void closeOnce();
  void releaseSlots(Connection& conn, std::chrono::steady_clock::time_point deadline);
  void flush(Connection& conn, void* data, int bytes, void* mhandle, int peer);
  void progressLoop();
  // Runs one operation (the caller holds busy_); an error fails the communicator unless `always`. Returns the error
  // and sets *result to its code (CommError::result()).
  std::string execute(OperationRef operation, bool always, ncclResult_t* result);
  void checkSameLayout();
  // submit(call, operation)'s comparison, inside the operation: throws ArgumentError when the ranks' calls differ.
  void checkSameCall(const std::string& call);
  uint64_t checkedCalls_ = 0;  // checkSameCall's sequence number
  // The collective whose operation runs now, for fail()'s message; set and read only by the thread running it.
  const CallInfo* runningCall_ = nullptr;
  // The handle `peer` sent this rank for `channel` (the stored copy), or null while it has not come.
  unsigned char* handleOf(int peer, int channel);
  // Listens for `peer`'s connection on `channel` and sends it the handle, once per connection.
  void offerListen(int peer, int channel);
  // Whether `peer` has said it connects to this rank on `channel` (it sends so once it has the handle, before its
  // first connect): this rank's accept waits for that.
  bool peerConnecting(int peer, int channel);
  // The bootstrap tag of that note: the channel's, with the top bit set.
  static constexpr uint32_t kConnectingTag = 0x80000000u;
  // A point-to-point failure of the bootstrap while making connections, as a CommError (see the definition).
  [[noreturn]] void failMakingConnections(const BootstrapError& e);
  bool watchingBootstrap_ = false;  // establish(..., watchBootstrap = true) is running
  bool collNetTried_ = false;       // the collNet loaded, or found unusable (collNetWhy_), under collNetMutex_
  bool collNetAgreed_ = false;      // collNet() has all-gathered every rank's answer (collNetConnected_ is the outcome)
  int deviceOf(int channel) const { return (options_.device + channel) % std::max(devices_, 1); }
  int connectionChannels() const { return options_.channels + 1; }  // the collectives' and p2pChannel()

  int rank_;
  int size_;
  CommOptions options_;
  std::unique_ptr<Bootstrap> bootstrap_;
  std::unique_ptr<Net> net_;
  void* ctx_ = nullptr;
  int devices_ = 1;
  bool flushReceives_ = false;      // SlotMemory::flushReceives, or a channel's device sets forceFlush (connectRing)
  std::vector<void*> listenComms_;  // [peer * channels + channel]: where that peer connects to this rank, until it has
  // The handles peers sent this rank, by (peer, channel), each kept where connect's calls find it again.
  std::map<std::pair<int, int>, std::array<unsigned char, NCCL_NET_HANDLE_MAXSIZE>> peerHandles_;
  std::set<std::pair<int, int>> connectingPeers_;  // (peer, channel) whose peerConnecting note has come
  std::map<ConnKey, Connection> connections_;
  std::vector<unsigned char> scratch_;
  // run()'s per-plan state, kept with its storage from call to call: each flow's connection and where its pieces
  // stand.
  struct Cursor {
    Connection* conn;
    size_t postSegment = 0, postPiece = 0;  // next piece to post
    size_t head = 0, tail = 0;              // slots posted / completed (mod slots)
    size_t released = 0;                    // slots free again: completed, and not held by a forward
  };
  std::vector<ConnKey> runKeys_;
  std::vector<Cursor> runCursors_;
  std::vector<size_t> runFlowStart_, runPiecesBefore_;
  Plan plan_;  // newPlan()'s
  // The collNet (collNet()): loaded under collNetMutex_ and connected at the first ask.
  void closeCollNet();
  void loadCollNetOnce();  // under collNetMutex_
  std::mutex collNetMutex_;
  std::array<unsigned char, kReducePairs> collNetSupport_{};  // this rank's reduceSupport, [type][op]
  std::string collNetWhy_;                                    // why this rank's collNet is unusable
  std::string collNetAgreedWhy_;                              // why collNet() gave no link: a rank's reason, or a close
  std::unique_ptr<CollNet> collNetPlugin_;
  void* collNetCtx_ = nullptr;
  void* collNetListen_ = nullptr;
  unsigned char* collNetMemory_ = nullptr;
  size_t collNetMemoryBytes_ = 0;
  size_t collNetMaxBytes_ = 0;  // device 0's maxCollBytes
  // Whether this rank would register calls' buffers with the connected collNet (CollNetLink::registersCalls), and why.
  bool collNetFreeRegistration(std::string* why);
  CollNetLink collNetLink_;
  std::vector<std::unique_ptr<Registration>> registrations_;  // changed only inside operations
  // registerForCall's, the first callRegistered_ live: kept from operation to operation with their connections' keys
  // (handles null between operations), so lending buffers allocates nothing once every connection has had one.
  std::vector<Registration> callRegistrations_;
  size_t callRegistered_ = 0;
  int callRegistration_ = -1;  // -1 until decided (decideCallRegistration), then 0 or 1
  int collNetConnected_ = 0;   // 1: collNetLink_ is live; -1: unusable on some rank, or closed (collNetWhy_)
  void decideCallRegistration(Connection& conn, size_t bytes, int peer);
  // Deregisters the lent buffers' handles (keeping their keys) and ends the loans; at each operation's end.
  void dropCallRegistrations();
  std::shared_ptr<SlotMemory> slotMemory_;
  std::string slotMemoryDescription_;
  std::string devicesDescription_;

  // The process that made this communicator. A process forked from it holds a copy whose connections are the
  // parent's (shared sockets, a plugin whose threads stayed behind): its calls are refused and its destructor frees
  // nothing that the parent uses.
  int creatorPid_;
  bool forkedCopy() const;

  // The progress thread and its queue: one operation at a time, in submission order. The handoff's mutex and
  // condition variables live on the heap so that a forked copy can leave them undestroyed: a condition variable
  // copied while the parent's progress thread waited on it counts that waiter, and destroying it waits forever.
  struct Handoff {
    std::mutex mutex;
    std::condition_variable wake;
    std::condition_variable done;
  };
  std::unique_ptr<Handoff> handoff_ = std::make_unique<Handoff>();
  std::thread progress_;
  std::mutex& mutex_ = handoff_->mutex;
  std::condition_variable& wake_ = handoff_->wake;
  std::condition_variable& done_ = handoff_->done;
  struct Task {
    explicit Task(OperationRef op, bool runAlways = false) : operation(op), always(runAlways) {}
    OperationRef operation;
    bool always = false;  // runs even on a failed communicator (the abort's close)
    bool done = false;
    std::string error;
    ncclResult_t result = ncclSuccess;  // error's code
    std::atomic<bool> finished{false};  // `done`, readable without the lock (the submitter's short spin)
    Task* next = nullptr;               // TaskQueue's link
  };
  // The queued tasks, linked through the tasks themselves (which live in their submitters' frames): queueing
  // allocates nothing.
  class TaskQueue {
   public:
    bool empty() const { return head_ == nullptr; }
    Task* front() const { return head_; }
    void pushBack(Task* task) {
      task->next = nullptr;
      (head_ == nullptr ? head_ : tail_->next) = task;
      tail_ = task;
    }
    void pushFront(Task* task) {
      task->next = head_;
      head_ = task;
      if (tail_ == nullptr) tail_ = task;
    }
    void popFront() {
      head_ = head_->next;
      if (head_ == nullptr) tail_ = nullptr;
    }
    // Takes `task` out of the queue; false when it is not queued (running, or done).
    bool remove(Task* task) {
      Task* previous = nullptr;
      for (Task* t = head_; t != nullptr; previous = t, t = t->next) {
        if (t != task) continue;
        (previous == nullptr ? head_ : previous->next) = t->next;
        if (tail_ == t) tail_ = previous;
        return true;
      }
      return false;
    }

   private:
    Task* head_ = nullptr;
    Task* tail_ = nullptr;
  };
  TaskQueue queue_;
  bool stopping_ = false;
  bool shutDown_ = false;       // shutdown() completed: the thread joined, the connections and the plugin closed
  bool closing_ = false;        // a caller (or the abandoned communicator's progress thread) is closing: closeOnce
  bool abandoned_ = false;      // abandon()ed: the progress thread closes everything as it returns
  bool progressEnded_ = false;  // the progress thread returned (shutdown() closes the connections itself next)
  bool busy_ = false;           // an operation is running (on the progress thread or inline on its caller's thread)
  bool inline_ = true;          // $NNS_PROGRESS_INLINE=0: every operation goes through the progress thread
  std::atomic<int> queued_{0};  // queue_.size(), readable without the lock (the progress thread's short spin)
  std::chrono::microseconds spin_{50};  // $NNS_PROGRESS_SPIN_US: how long each side polls before sleeping
  mutable std::mutex errorMutex_;
  std::string asyncError_;
  ncclResult_t asyncResult_ = ncclSuccess;
  std::atomic<bool> failed_{false};
  // When an operation of this communicator last moved data or started (steady_clock ticks): a queued caller gives up
  // when nothing has progressed for its bound, not when its own wait is that long (a long healthy operation ahead of
  // it, or its own on the progress thread, failed as stuck).
  std::atomic<int64_t> progressStamp_{0};
};

}  // namespace nns::core
