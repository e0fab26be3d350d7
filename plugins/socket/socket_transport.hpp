// socket_transport.hpp: the socket plugin's knobs, wire formats and data path (send/receive comms, helper threads).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nccl_net/sdk.hpp>

namespace nns_socket {

namespace sdk = nccl_net::sdk;
using Clock = std::chrono::steady_clock;

inline constexpr const char kPluginName[] = "nns-socket";
inline constexpr int kMaxRecvs = 8;           // grouped receives per irecv at most (NNS_SOCKET_MAX_RECVS)
inline constexpr int kMaxHelperThreads = 16;  // per comm, as NCCL's socket transport
inline constexpr int kMaxDataSockets = 64;    // per comm, as NCCL's socket transport
inline constexpr int kMaxDeviceChildren = NCCL_NET_MAX_DEVS_PER_NIC;
// NCCL keeps at most NCCL_NET_MAX_REQUESTS requests per comm, each up to kMaxRecvs messages; a sender sees them as
// single-message isends, so it needs room for all of them.
inline constexpr size_t kMaxSendRequests = NCCL_NET_MAX_REQUESTS * kMaxRecvs;
inline constexpr size_t kMaxRecvRequests = NCCL_NET_MAX_REQUESTS;
// Messages a receiver reads before any receive has room for them (see UnexpectedMessage), at most.
inline constexpr size_t kMaxUnexpectedMessages = kMaxSendRequests;
inline constexpr size_t kMaxMessagesInFlight = kMaxSendRequests + kMaxUnexpectedMessages;

// ---- knobs (environment variables, read once; documented in README.md)
// ------------------------------------------------
struct Config {
  int helperThreads;     // NNS_SOCKET_NTHREADS, else NCCL_SOCKET_NTHREADS (default: 2 with 4+ usable CPUs, else 0)
  int usableCpus;        // CPUs this process may run on, when the configuration was read
  int socketsPerThread;  // NNS_SOCKET_NSOCKS_PERTHREAD, else NCCL_NSOCKS_PERTHREAD
  const char* threadsVariable;  // which of the two set helperThreads (or would have)
  const char* socketsVariable;  // likewise for socketsPerThread
  int maxRecvs;                 // NNS_SOCKET_MAX_RECVS: the advertised maxRecvs, 1 .. kMaxRecvs
  size_t inlineBytes;           // NNS_SOCKET_INLINE_BYTES: messages up to this size travel whole on the control socket
  size_t minChunkBytes;         // NNS_SOCKET_MIN_CHUNK_BYTES: smallest piece of a message given to one data socket
  int deadPeerTimeoutMs;        // NNS_SOCKET_TIMEOUT_MS
  int connectTimeoutMs;         // NNS_SOCKET_CONNECT_TIMEOUT_MS
  int retryIntervalMs;          // NNS_SOCKET_RETRY_INTERVAL_MS
  int sendBufferBytes;          // NNS_SOCKET_SNDBUF, else NCCL_SOCKET_SNDBUF (0 = kernel default)
  int receiveBufferBytes;       // NNS_SOCKET_RCVBUF, else NCCL_SOCKET_RCVBUF (0 = kernel default)
  size_t unexpectedBytes;       // NNS_SOCKET_UNEXPECTED_BYTES: memory a receive comm may hold for unexpected messages

  // With NCCL's variables, 0 threads or 0 sockets per thread mean no data sockets: Config::get() sets
  // socketsPerThread to 0 then.
  int dataSockets() const { return helperThreads > 0 ? helperThreads * socketsPerThread : socketsPerThread; }
  static const Config& get();
};

// ---- wire formats ---------------------------------------------------------------------------------------------------
// Version 2 frames messages on 64-byte boundaries (kWireAlign); version 1 did not, and the two cannot talk.
inline constexpr uint32_t kWireMagic = sdk::handleMagic("nns-socket/wire/2");

// The connection handle a listen gives out.
struct HandlePayload {
  uint64_t listenId;                  // random; a connector proves with it that it holds this listener's handle
  sdk::SocketAddress controlAddress;  // where the listener waits for control sockets
};
inline constexpr sdk::HandleCodec<HandlePayload> kHandleCodec(sdk::handleMagic(kPluginName), 1);

enum SocketRole : uint32_t { kControlSocket = 1, kDataSocket = 2 };

// First bytes on every socket a connector opens: which listener it is for, which sender, and which socket.
struct Hello {
  uint32_t magic;
  uint32_t role;       // SocketRole
  uint64_t listenId;   // the random id from the listener's handle
  uint64_t senderId;   // random per connect(), groups a sender's sockets on a shared listener
  uint32_t dataIndex;  // data sockets: 0 .. dataSockets-1
  uint32_t reserved;
};

// The listener's answer on the control socket: how many data sockets, where to open them, and how to cut messages.
struct Welcome {
  uint32_t magic;
  uint32_t dataSockets;
  uint64_t inlineBytes;
  uint64_t minChunkBytes;
  uint32_t addressCount;
  uint32_t reserved;
  sdk::SocketAddress addresses[kMaxDeviceChildren];  // one listening address per child interface
};

// Precedes every message on the control socket; the payload follows it there when size <= inlineBytes.
struct MessageHeader {
  uint64_t size;
  int32_t tag;
  uint32_t sequence;  // catches a desynchronised stream instead of delivering garbage
  uint32_t lead;      // the payload's address mod kWireAlign on the sender: the zero bytes that precede it (below)
  uint32_t reserved[3];
};
static_assert(sizeof(MessageHeader) == 32);

// Payload bytes land in the kernel's socket buffers at the offset their source has, mod kWireAlign.
//
// Why: the kernel copies a send into pages it fills in order, for all of a thread's TCP sockets together (the
// thread's page fragment), and on the AMD Zen 5 core this was measured on its `rep movsb` copy was up to twice as
// slow when the destination lay 1 to 63 bytes past the source, mod 4096. A 16-byte header sent just before a
// page-aligned payload put every large send of a 2-rank allreduce there (performance.md, "Framing on 64-byte
// boundaries"). So every send this plugin makes is a whole number of kWireAlign-byte units, which keeps the thread's
// offset at a multiple of kWireAlign, and each payload is preceded by as many zero bytes as its address lies past a
// multiple of kWireAlign:
// - the control socket carries frames: header, `gap` zero bytes, the inline payload (if any), `tail` zero bytes;
// - a data socket carries each chunk of a message as `lead` zero bytes, the chunk, `trail` zero bytes.
// The receiver derives every pad from the header, so it reads them without a round trip.
inline constexpr size_t kWireAlign = 64;

inline uint32_t leadOf(const void* data) {
  return static_cast<uint32_t>(reinterpret_cast<uintptr_t>(data) % kWireAlign);
}
// Zero bytes after `bytes` that end a unit of kWireAlign.
inline size_t padToUnit(size_t bytes) {
  return (kWireAlign - bytes % kWireAlign) % kWireAlign;
}

struct ControlFrame {
  size_t gap;   // zero bytes between the header and an inline payload
  size_t tail;  // zero bytes after the payload (or the header) that end the frame
};
inline ControlFrame controlFrame(const MessageHeader& header, bool payloadInline) {
  const size_t payload = payloadInline ? header.size : 0;
  const size_t gap = payload == 0 ? 0 : (header.lead + kWireAlign - sizeof(MessageHeader) % kWireAlign) % kWireAlign;
  return ControlFrame{gap, padToUnit(sizeof(MessageHeader) + gap + payload)};
}

// How a message of `size` bytes is cut over `sockets` data sockets; both ends compute the same pieces.
struct ChunkPlan {
  size_t chunkBytes;
  int firstSocket;
};
ChunkPlan planChunks(size_t size, int sockets, size_t minChunkBytes, uint32_t sequence);

// ---- the data path
// ----------------------------------------------------------------------------------------------------

// A piece of a message moved by one data socket, framed by `lead` and `trail` zero bytes (kWireAlign); `done` counts
// the framed bytes moved. `pending` is the owning request's outstanding byte count, which `size` is part of.
struct ChunkTask {
  unsigned char* data;
  size_t size;
  uint32_t lead;
  uint32_t trail;
  size_t done;
  std::atomic<size_t>* pending;
};

// Single-producer (the thread calling isend/irecv/test) single-consumer (the socket's driver) queue.
class TaskRing {
 public:
  static constexpr size_t kCapacity = kMaxMessagesInFlight;
  bool push(const ChunkTask& task) {
    size_t tail = tail_.load(std::memory_order_relaxed);
    if (tail - head_.load(std::memory_order_acquire) >= kCapacity) return false;
    tasks_[tail % kCapacity] = task;
    tail_.store(tail + 1, std::memory_order_release);
    return true;
  }
  ChunkTask* front() {
    size_t head = head_.load(std::memory_order_relaxed);
    if (head == tail_.load(std::memory_order_acquire)) return nullptr;
    return &tasks_[head % kCapacity];
  }
  void pop() { head_.store(head_.load(std::memory_order_relaxed) + 1, std::memory_order_release); }
  bool empty() const { return head_.load(std::memory_order_acquire) == tail_.load(std::memory_order_acquire); }

 private:
  std::atomic<size_t> head_{0};
  std::atomic<size_t> tail_{0};
  ChunkTask tasks_[kCapacity];
};

// How long a socket's sends have made no progress. A stall of the dead-peer timeout is a dead peer or link only if
// the peer also stopped answering (sdk::peerStoppedAnswering); a slow receiver is waited for.
class SendStall {
 public:
  void progressed() { stalled_ = false; }
  void blocked() {
    if (stalled_) return;
    stalled_ = true;
    since_ = Clock::now();
  }
  bool peerGone(int fd, int timeoutMs) const {
    return stalled_ && Clock::now() - since_ >= std::chrono::milliseconds(timeoutMs) &&
           sdk::peerStoppedAnswering(fd, timeoutMs);
  }

 private:
  bool stalled_ = false;
  Clock::time_point since_{};
};

struct DataSocket {
  int fd = -1;
  bool sending = false;
  TaskRing tasks;
  SendStall stall;                      // sending sockets only
  unsigned char padding[kWireAlign]{};  // receiving sockets read a chunk's lead and trail here
  // Moves bytes of queued tasks until the queue is empty (kDone) or the socket would block. *error on failure: a
  // sending socket whose peer stopped answering for the dead-peer timeout fails with ETIMEDOUT.
  sdk::IoStatus drive(int* error);
};

class Comm;

// Drives a few data sockets of one comm with blocking-free IO and poll(); sleeps when none has work.
class HelperThread {
 public:
  HelperThread(Comm* comm, std::vector<DataSocket*> sockets);
  ~HelperThread();
  void wake();

 private:
  void run();
  bool hasWork() const;
  Comm* comm_;
  std::vector<DataSocket*> sockets_;
  std::mutex mutex_;
  std::condition_variable wakeup_;
  bool stopping_ = false;
  // Written by wake() and polled beside the blocked sockets: work queued on another socket of this helper while it
  // waits in poll() for the blocked ones wakes it (it waited out kHelperPollMs before). -1: no eventfd to be had.
  int wakeFd_ = -1;
  std::thread thread_;
};

// What a send and a receive comm share: the sockets, the helper threads and the first failure.
class Comm {
 public:
  Comm(bool sending, int controlFd, const std::vector<int>& dataFds, const Welcome& parameters, std::string peer);
  virtual ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  // Records the first failure (later ones are consequences) and WARNs it with the peer's address.
  void fail(ncclResult_t result, const std::string& what);
  ncclResult_t failure() const { return failure_.load(std::memory_order_acquire); }
  const std::string& peer() const { return peer_; }
  // Reports a data socket error from whichever thread drove it.
  void failSocket(const DataSocket& socket, sdk::IoStatus status, int error);

 protected:
  // Queues a message's pieces on the data sockets (after `pending` was raised by `size`); `lead` is the header's.
  bool queueChunks(unsigned char* data, size_t size, uint32_t sequence, uint32_t lead, std::atomic<size_t>* pending);
  // Without helper threads the caller's thread drives the data sockets here.
  void driveDataSocketsInline();
  // Shuts the sockets down and joins the helpers; the derived comms call it first, as their requests die first.
  void stopHelpers();
  bool isInline(size_t size) const { return dataSockets_.empty() || size <= inlineBytes_; }

  const bool sending_;
  const int controlFd_;
  const size_t inlineBytes_;
  const size_t minChunkBytes_;
  std::vector<std::unique_ptr<DataSocket>> dataSockets_;
  std::vector<int> helperOfSocket_;

 private:
  const std::string peer_;
  std::atomic<ncclResult_t> failure_{ncclSuccess};
  std::atomic<bool> closing_{false};
  std::mutex failureMutex_;

 protected:
  // Last: destroyed (joined) first, while the state the helpers read (failure_, the sockets) still exists, also when
  // the constructor throws.
  std::vector<std::unique_ptr<HelperThread>> helpers_;
};

struct RequestHeader {
  static constexpr uint32_t kLiveMagic = 0x6e6e7372;  // "nnsr"
  uint32_t magic = kLiveMagic;
  bool isSend = false;
  Comm* comm = nullptr;
};

struct SendRequest {
  RequestHeader header;
  unsigned char* data = nullptr;
  size_t size = 0;
  MessageHeader wire{};
  size_t controlOffset = 0;  // bytes of header (+ inline payload) written to the control socket
  bool controlDone = false;
  std::atomic<size_t> pendingBytes{0};  // bytes still owned by data sockets
};

// A message whose header arrived while no posted receive had an unfilled buffer for its tag (MPI's "unexpected
// message"). It is read into memory of its own, so that the messages behind it keep flowing, and the next receive
// posted for its tag takes it. NCCL's shared comms need this: the local ranks sharing one comm send on their own
// schedules, and the receiver posts one grouped receive per step, so one rank's later steps can come before
// another's first.
struct UnexpectedMessage {
  int32_t tag = 0;
  size_t size = 0;
  std::unique_ptr<unsigned char[]> data;
  std::atomic<size_t> pendingBytes{0};  // still being read from the sockets
};

struct RecvSlot {
  unsigned char* data;
  size_t capacity;
  int tag;
  size_t size;
  bool matched;
  std::unique_ptr<UnexpectedMessage> unexpected;  // matched to an unexpected message: copied in once it is whole
};

struct RecvRequest {
  RequestHeader header;
  int count = 0;
  int unmatched = 0;  // slots whose message header has not arrived
  RecvSlot slots[kMaxRecvs];
  std::atomic<size_t> pendingBytes{0};
};

class SendComm : public Comm {
 public:
  SendComm(int controlFd, const std::vector<int>& dataFds, const Welcome& parameters, std::string peer)
      : Comm(true, controlFd, dataFds, parameters, std::move(peer)) {}
  ~SendComm() override;
  ncclResult_t post(void* data, size_t size, int tag, void** request);
  ncclResult_t test(SendRequest* request, int* done, sdk::CompletedSizes& sizes);
  bool owns(const void* request) const { return requests_.owns(request); }

 private:
  ncclResult_t progress();
  ncclResult_t checkReceiverAlive();
  SendStall controlStall_;
  static constexpr auto kLivenessCheckInterval = std::chrono::milliseconds(10);
  // How long, after the receiver's close was seen, the helper threads have to count bytes they wrote
  // (checkReceiverAlive).
  static constexpr auto kReceiverClosedGrace = std::chrono::milliseconds(1000);
  Clock::time_point lastLivenessCheck_ = Clock::now();
  std::optional<Clock::time_point> receiverClosedAt_;
  sdk::RequestPool<SendRequest, kMaxSendRequests> requests_;
  SendRequest* controlQueue_[kMaxSendRequests];  // waiting for their header on the control socket, oldest first
  size_t controlHead_ = 0;
  size_t controlCount_ = 0;
  uint32_t nextSequence_ = 0;
};

class RecvComm : public Comm {
 public:
  RecvComm(int controlFd, const std::vector<int>& dataFds, const Welcome& parameters, std::string peer)
      : Comm(false, controlFd, dataFds, parameters, std::move(peer)) {}
  ~RecvComm() override;
  ncclResult_t post(int n, void** data, size_t* sizes, int* tags, void** request);
  ncclResult_t test(RecvRequest* request, int* done, sdk::CompletedSizes& sizes);
  bool owns(const void* request) const { return requests_.owns(request); }

 private:
  ncclResult_t progress();
  sdk::IoStatus readControl(void* target, size_t size, size_t* offset, bool readAhead, int* error);
  // Reads and drops `*remaining` (< kWireAlign) bytes of the control stream, a frame's padding.
  sdk::IoStatus skipControl(size_t* remaining, int* error);
  // Fails the comm for a control-stream read that ended in `status` (kClosed or kFailed) while `what`.
  ncclResult_t failControlRead(sdk::IoStatus status, int error, const char* what);
  bool anyUnmatchedSlot() const;
  ncclResult_t matchHeader(bool* matched);
  // Reads the payload of the message whose header was just taken into `data` (inline or over the data sockets).
  ncclResult_t receivePayload(unsigned char* data, size_t size, std::atomic<size_t>* pending);
  // Takes the header just read as an unexpected message; *kept false while the limits leave no room for it.
  ncclResult_t keepUnexpected(bool* kept);
  bool roomForUnexpected() const;
  // Gives a newly posted receive's buffers the unexpected messages with their tags, oldest first.
  void claimUnexpected(RecvRequest* r);
  // Copies the claimed unexpected messages that have arrived whole into their buffers.
  void copyArrivedUnexpected(RecvRequest* r);
  sdk::RequestPool<RecvRequest, kMaxRecvRequests> requests_;
  RecvRequest* posted_[kMaxRecvRequests];  // oldest first
  int postedCount_ = 0;
  MessageHeader header_{};
  size_t headerOffset_ = 0;
  uint32_t expectedSequence_ = 0;
  // Control-stream bytes read ahead of need (see readControl).
  static constexpr size_t kStageBytes = 1024;
  unsigned char stage_[kStageBytes];
  size_t stageBegin_ = 0;
  size_t stageEnd_ = 0;
  // Unexpected messages no receive has claimed yet, oldest first; bytes and count of every one not yet copied out.
  std::deque<std::unique_ptr<UnexpectedMessage>> unexpected_;
  size_t unexpectedBytes_ = 0;
  size_t unexpectedCount_ = 0;
  bool warnedUnexpectedLimit_ = false;
  // The padding of the frame being read: before its inline payload, and after it (or after the header).
  size_t gapLeft_ = 0;
  size_t tailLeft_ = 0;
  // An inline payload being read from the control socket, and the byte count that learns of its arrival.
  std::atomic<size_t>* inlinePending_ = nullptr;
  unsigned char* inlineData_ = nullptr;
  size_t inlineSize_ = 0;
  size_t inlineOffset_ = 0;
};

}  // namespace nns_socket
