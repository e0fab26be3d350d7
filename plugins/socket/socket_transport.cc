// socket_transport.cc: the socket plugin's data path: messages over a control socket plus striped data sockets.
#include "socket_transport.hpp"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <new>

namespace nns_socket {

namespace {

// How long a helper thread sleeps in poll() before looking at its queues and the stop flag again.
constexpr int kHelperPollMs = 100;

// Helper threads pay off only with cores to spare: each one needs a core of its own beside the ranks' threads. With
// fewer usable CPUs than this, the calling thread drives the data sockets itself (on 2 cores, handing pieces to
// helpers halved an allreduce's bandwidth; performance.md).
constexpr int kMinCpusForHelpers = 4;

int countUsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return CPU_COUNT(&set);
}

bool isSet(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0';
}

// One of NCCL's integer variables, parsed as NCCL parses its parameters (strtoll, base 0). False when it is unset or
// empty, and with a WARN when it is not an integer: NCCL then keeps its default, and so does the caller.
bool ncclInteger(const char* name, long* value, const char* fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return false;
  char* end = nullptr;
  errno = 0;
  *value = std::strtol(text, &end, 0);
  if (end == text || *end != '\0' || errno != 0) {
    NCCL_NET_WARN("%s=%s is not an integer; using %s, as NCCL does", name, text, fallback);
    return false;
  }
  return true;
}

// NCCL's value for "choose for me", the default of NCCL_SOCKET_NTHREADS and NCCL_NSOCKS_PERTHREAD.
constexpr long kNcclAutomatic = -2;

// A count of NCCL's socket transport (NCCL_SOCKET_NTHREADS, NCCL_NSOCKS_PERTHREAD) as NCCL reads it: unset or -2 is
// automatic (NCCL picks by NIC vendor; here `automatic`, this plugin's own choice), another negative value is not
// defined (WARN, automatic), above `cap` is `cap` (with a WARN where `warnAboveCap`: NCCL's thread maximum; the
// sockets have no limit of their own, threads x sockets being cut to 64 later). *none: an explicit 0, with which NCCL
// opens no data sockets at all (this plugin's own NNS_SOCKET_NTHREADS=0 means the calling thread drives them).
int ncclCount(const char* name, int automatic, int cap, bool warnAboveCap, bool* none) {
  long value = kNcclAutomatic;
  *none = false;
  if (!ncclInteger(name, &value, "the automatic choice")) return automatic;
  if (value == kNcclAutomatic) return automatic;
  if (value < 0) {
    NCCL_NET_WARN(
        "%s=%ld is negative and not -2 (automatic), which NCCL does not define; using the automatic choice "
        "(%d)",
        name, value, automatic);
    return automatic;
  }
  if (value > cap) {
    if (warnAboveCap) NCCL_NET_WARN("%s=%ld is more than NCCL's maximum; using %d, as NCCL does", name, value, cap);
    return cap;
  }
  *none = value == 0;
  return static_cast<int>(value);
}
int ncclThreads(int automatic, bool* none) {
  return ncclCount("NCCL_SOCKET_NTHREADS", automatic, kMaxHelperThreads, true, none);
}
// Not capped at 64 here (only against int overflow): the check of threads x sockets below cuts it, with a WARN, also
// where no helper thread runs (capped here silently, 100 became 64 without a word).
int ncclSocketsPerThread(bool* none) {
  return ncclCount("NCCL_NSOCKS_PERTHREAD", 1, 1 << 20, false, none);
}

// SO_SNDBUF / SO_RCVBUF: ours (0 = the kernel's default, else 1 .. 1 GiB), else NCCL's NCCL_SOCKET_SNDBUF /
// NCCL_SOCKET_RCVBUF with NCCL's meaning: a positive value is set, anything else (NCCL's default is -1) leaves the
// kernel's default.
int socketBuffer(const char* ours, const char* nccls) {
  if (isSet(ours)) return static_cast<int>(sdk::envInteger(ours, 0, 0, 1L << 30));
  long value = 0;
  if (!ncclInteger(nccls, &value, "the kernel's default")) return 0;
  if (value <= 0) return 0;
  if (value > INT_MAX) {
    NCCL_NET_WARN("%s=%ld does not fit setsockopt's int; using the kernel's default", nccls, value);
    return 0;
  }
  return static_cast<int>(value);
}

}  // namespace

const Config& Config::get() {
  static const Config config = [] {
    Config c{};
    c.usableCpus = countUsableCpus();
    // NCCL's own socket transport's variables stand in for ours when ours are unset, with the meaning NCCL gives
    // them: a job tuned for it (AWS's NCCL_SOCKET_NTHREADS / NCCL_NSOCKS_PERTHREAD) gets the same sockets here.
    const bool ourThreads = isSet("NNS_SOCKET_NTHREADS");
    const bool ourSockets = isSet("NNS_SOCKET_NSOCKS_PERTHREAD");
    c.threadsVariable = ourThreads ? "NNS_SOCKET_NTHREADS" : "NCCL_SOCKET_NTHREADS";
    c.socketsVariable = ourSockets ? "NNS_SOCKET_NSOCKS_PERTHREAD" : "NCCL_NSOCKS_PERTHREAD";
    const int automaticThreads = c.usableCpus >= kMinCpusForHelpers ? 2 : 0;
    bool noThreads = false, noSockets = false;  // NCCL's explicit 0s: no data sockets
    c.helperThreads = ourThreads
                          ? static_cast<int>(sdk::envInteger(c.threadsVariable, automaticThreads, 0, kMaxHelperThreads))
                          : ncclThreads(automaticThreads, &noThreads);
    c.socketsPerThread = ourSockets ? static_cast<int>(sdk::envInteger(c.socketsVariable, 1, 0, kMaxDataSockets))
                                    : ncclSocketsPerThread(&noSockets);
    if (noThreads || noSockets) {
      c.socketsPerThread = 0;  // everything travels on the control socket, as with NCCL's transport
    } else if (c.helperThreads > 0 && c.socketsPerThread == 0) {
      c.socketsPerThread = 1;  // our 0 sockets per thread with helpers: a helper needs a socket to drive
    }
    if (c.dataSockets() > kMaxDataSockets) {
      if (c.helperThreads > 0)
        NCCL_NET_WARN("%s x %s = %d exceeds %d sockets; using %d per thread", c.threadsVariable, c.socketsVariable,
                      c.dataSockets(), kMaxDataSockets, kMaxDataSockets / c.helperThreads);
      else
        NCCL_NET_WARN("%s=%d exceeds %d sockets; using %d", c.socketsVariable, c.socketsPerThread, kMaxDataSockets,
                      kMaxDataSockets);
      c.socketsPerThread = kMaxDataSockets / std::max(1, c.helperThreads);
    }
    // Grouped receives make NCCL share comms between local ranks, whose eager sends can then run further ahead of
    // each other than the unexpected-message limit holds, which stalls the stream (README.md, "Grouped receives").
    c.maxRecvs = static_cast<int>(sdk::envInteger("NNS_SOCKET_MAX_RECVS", 1, 1, kMaxRecvs));
    c.inlineBytes = static_cast<size_t>(sdk::envInteger("NNS_SOCKET_INLINE_BYTES", 64 << 10, 0, 1L << 30));
    c.minChunkBytes = static_cast<size_t>(sdk::envInteger("NNS_SOCKET_MIN_CHUNK_BYTES", 64 << 10, 4096, 1L << 30));
    c.deadPeerTimeoutMs = static_cast<int>(sdk::envInteger("NNS_SOCKET_TIMEOUT_MS", 10000, 1000, 3600 * 1000));
    c.connectTimeoutMs = static_cast<int>(sdk::envInteger("NNS_SOCKET_CONNECT_TIMEOUT_MS", 30000, 100, 3600 * 1000));
    c.retryIntervalMs = static_cast<int>(sdk::envInteger("NNS_SOCKET_RETRY_INTERVAL_MS", 100, 1, 60 * 1000));
    c.sendBufferBytes = socketBuffer("NNS_SOCKET_SNDBUF", "NCCL_SOCKET_SNDBUF");
    c.receiveBufferBytes = socketBuffer("NNS_SOCKET_RCVBUF", "NCCL_SOCKET_RCVBUF");
    c.unexpectedBytes = static_cast<size_t>(sdk::envInteger("NNS_SOCKET_UNEXPECTED_BYTES", 64L << 20, 0, 1L << 40));
    return c;
  }();
  return config;
}

ChunkPlan planChunks(size_t size, int sockets, size_t minChunkBytes, uint32_t sequence) {
  size_t even = (size + static_cast<size_t>(sockets) - 1) / static_cast<size_t>(sockets);
  // Rotate the first socket so messages smaller than sockets x minChunkBytes still spread over all of them.
  return ChunkPlan{std::max(even, minChunkBytes), static_cast<int>(sequence % static_cast<uint32_t>(sockets))};
}

// ---- data sockets and their helper threads
// ---------------------------------------------------------------------------

// Zero bytes that pad frames and chunks to kWireAlign (only ever read).
alignas(kWireAlign) const unsigned char kZeros[kWireAlign] = {};

sdk::IoStatus DataSocket::drive(int* error) {
  for (ChunkTask* task = tasks.front(); task != nullptr; task = tasks.front()) {
    const size_t before = task->done;
    unsigned char* pad = sending ? const_cast<unsigned char*>(kZeros) : padding;
    const iovec parts[3] = {{pad, task->lead}, {task->data, task->size}, {pad, task->trail}};
    sdk::IoStatus status = sending ? sdk::sendSomeGather(fd, parts, 3, &task->done, error)
                                   : sdk::recvSomeScatter(fd, parts, 3, &task->done, error);
    if (sending && task->done != before) stall.progressed();
    if (status == sdk::IoStatus::kWouldBlock && sending) {
      stall.blocked();
      if (stall.peerGone(fd, Config::get().deadPeerTimeoutMs)) {
        *error = ETIMEDOUT;
        return sdk::IoStatus::kFailed;
      }
    }
    if (status != sdk::IoStatus::kDone) return status;
    // Free the ring slot before publishing completion: once `pending` hits zero the request (and, through a new
    // post, this ring) may be reused at once.
    std::atomic<size_t>* pending = task->pending;
    size_t bytes = task->size;
    tasks.pop();
    pending->fetch_sub(bytes, std::memory_order_release);
  }
  return sdk::IoStatus::kDone;
}

HelperThread::HelperThread(Comm* comm, std::vector<DataSocket*> sockets)
    : comm_(comm), sockets_(std::move(sockets)), wakeFd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  try {
    thread_ = std::thread([this] { run(); });
  } catch (...) {  // no thread (EAGAIN at a thread limit): no destructor will close the eventfd
    if (wakeFd_ >= 0) close(wakeFd_);
    throw;
  }
}

HelperThread::~HelperThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wakeup_.notify_one();
  thread_.join();
  if (wakeFd_ >= 0) close(wakeFd_);
}

void HelperThread::wake() {
  // Taking the mutex orders this wake-up after the waiter's predicate check, so it cannot be lost.
  { std::lock_guard<std::mutex> lock(mutex_); }
  wakeup_.notify_one();
  // The helper may be in poll() for other sockets of its own rather than on the condition variable.
  const uint64_t one = 1;
  if (wakeFd_ >= 0) (void)!write(wakeFd_, &one, sizeof(one));
}

bool HelperThread::hasWork() const {
  for (const DataSocket* socket : sockets_)
    if (!socket->tasks.empty()) return true;
  return false;
}

void HelperThread::run() {
  pollfd waiters[kMaxDataSockets + 1];
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // After a failure the comm is dead: stop touching its sockets and wait to be closed.
      wakeup_.wait(lock, [&] { return stopping_ || (comm_->failure() == ncclSuccess && hasWork()); });
      if (stopping_) return;
    }
    int blocked = 0;
    for (DataSocket* socket : sockets_) {
      if (socket->tasks.empty()) continue;
      int error = 0;
      sdk::IoStatus status = socket->drive(&error);
      if (status == sdk::IoStatus::kWouldBlock) {
        waiters[blocked++] = pollfd{socket->fd, static_cast<short>(socket->sending ? POLLOUT : POLLIN), 0};
      } else if (status != sdk::IoStatus::kDone) {
        comm_->failSocket(*socket, status, error);
        break;
      }
    }
    if (blocked == 0) continue;
    if (wakeFd_ >= 0) waiters[blocked++] = pollfd{wakeFd_, POLLIN, 0};
    poll(waiters, static_cast<nfds_t>(blocked), kHelperPollMs);
    uint64_t wakes = 0;
    if (wakeFd_ >= 0) (void)!read(wakeFd_, &wakes, sizeof(wakes));  // emptied: the next pass looks at every socket
  }
}

// ---- Comm
// -------------------------------------------------------------------------------------------------------------

Comm::Comm(bool sending, int controlFd, const std::vector<int>& dataFds, const Welcome& parameters, std::string peer)
    : sending_(sending),
      controlFd_(controlFd),
      inlineBytes_(parameters.inlineBytes),
      minChunkBytes_(parameters.minChunkBytes),
      peer_(std::move(peer)) {
  const Config& config = Config::get();
  for (int fd : dataFds) {
    auto socket = std::make_unique<DataSocket>();
    socket->fd = fd;
    socket->sending = sending;
    dataSockets_.push_back(std::move(socket));
  }
  int threads = std::min<int>(config.helperThreads, static_cast<int>(dataSockets_.size()));
  helperOfSocket_.assign(dataSockets_.size(), -1);
  try {
    for (int t = 0; t < threads; ++t) {
      std::vector<DataSocket*> mine;
      for (size_t s = static_cast<size_t>(t); s < dataSockets_.size(); s += static_cast<size_t>(threads)) {
        mine.push_back(dataSockets_[s].get());
        helperOfSocket_[s] = t;
      }
      helpers_.push_back(std::make_unique<HelperThread>(this, std::move(mine)));
    }
  } catch (...) {
    // No thread to be had (a process or container at its thread limit): the helpers started are stopped and
    // joined; the sockets stay the caller's, which closes them.
    stopHelpers();
    throw;
  }
}

void Comm::stopHelpers() {
  // Unblock and stop the helpers before the sockets and requests they use go away; pending requests simply die,
  // and the errors the shutdown causes in the helpers are ours, not the peer's: no WARN for them.
  if (closing_.exchange(true, std::memory_order_acq_rel)) return;
  shutdown(controlFd_, SHUT_RDWR);
  for (auto& socket : dataSockets_) shutdown(socket->fd, SHUT_RDWR);
  helpers_.clear();
}

Comm::~Comm() {
  stopHelpers();
  close(controlFd_);
  for (auto& socket : dataSockets_) close(socket->fd);
}

void Comm::fail(ncclResult_t result, const std::string& what) {
  std::lock_guard<std::mutex> lock(failureMutex_);
  if (failure_.load(std::memory_order_relaxed) != ncclSuccess) return;
  if (closing_.load(std::memory_order_acquire)) return;
  NCCL_NET_WARN("%s with peer %s: %s", sending_ ? "send" : "receive", peer_.c_str(), what.c_str());
  failure_.store(result, std::memory_order_release);
}

void Comm::failSocket(const DataSocket& socket, sdk::IoStatus status, int error) {
  size_t index = 0;
  while (index < dataSockets_.size() && dataSockets_[index].get() != &socket) ++index;
  sdk::SocketAddress local = sdk::localAddressOf(socket.fd);
  std::string where = "data socket " + std::to_string(index) + " (local " + local.toString() + ")";
  if (status == sdk::IoStatus::kClosed) {
    fail(ncclRemoteError, where + ": the peer closed the connection in the middle of a message");
  } else if (error == ETIMEDOUT) {
    fail(ncclRemoteError, where + ": no answer from the peer for " + std::to_string(Config::get().deadPeerTimeoutMs) +
                              " ms (peer or link down)");
  } else {
    fail(ncclRemoteError, where + ": " + sdk::errnoText(error));
  }
}

bool Comm::queueChunks(unsigned char* data, size_t size, uint32_t sequence, uint32_t lead,
                       std::atomic<size_t>* pending) {
  int sockets = static_cast<int>(dataSockets_.size());
  ChunkPlan plan = planChunks(size, sockets, minChunkBytes_, sequence);
  bool wake[kMaxHelperThreads] = {};
  size_t offset = 0;
  for (int k = 0; offset < size; ++k) {
    size_t index = static_cast<size_t>((plan.firstSocket + k) % sockets);
    size_t bytes = std::min(plan.chunkBytes, size - offset);
    // Cannot fail: each message queues at most one piece per socket and requests are bounded by the pools.
    const uint32_t chunkLead = static_cast<uint32_t>((lead + offset) % kWireAlign);
    const auto trail = static_cast<uint32_t>(padToUnit(chunkLead + bytes));
    if (!dataSockets_[index]->tasks.push(ChunkTask{data + offset, bytes, chunkLead, trail, 0, pending})) return false;
    offset += bytes;
    int helper = helperOfSocket_[index];
    if (helper >= 0) wake[helper] = true;
  }
  // Wake only after every piece is queued: a helper woken earlier could drain its first socket, find the next one
  // still empty and go back to sleep before that socket's piece arrives.
  for (size_t helper = 0; helper < helpers_.size(); ++helper)
    if (wake[helper]) helpers_[helper]->wake();
  return true;
}

void Comm::driveDataSocketsInline() {
  if (!helpers_.empty()) return;
  for (auto& socket : dataSockets_) {
    if (socket->tasks.empty()) continue;
    int error = 0;
    sdk::IoStatus status = socket->drive(&error);
    if (status == sdk::IoStatus::kClosed || status == sdk::IoStatus::kFailed) {
      failSocket(*socket, status, error);
      return;
    }
  }
}

// ---- SendComm
// ---------------------------------------------------------------------------------------------------------

// The helpers hold pointers into this comm's requests: stop them before the request pool is destroyed.
SendComm::~SendComm() {
  stopHelpers();
}

ncclResult_t SendComm::post(void* data, size_t size, int tag, void** request) {
  if (failure() != ncclSuccess) return failure();
  // A receiver that closed its comm takes no more messages, but the kernel still takes the writes after its close: a
  // send posted then was reported complete and lost (the next one failed). Its close is looked for before a post, as
  // often as test() looks (every kLivenessCheckInterval: a look at each post cost 1.3 us of an 8-byte message's 9.5).
  if (auto now = Clock::now(); now - lastLivenessCheck_ >= kLivenessCheckInterval) {
    lastLivenessCheck_ = now;
    char byte;
    if (recv(controlFd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
      fail(ncclRemoteError, "the receiver closed the connection before this send was posted");
      return failure();
    }
  }
  SendRequest* r = requests_.acquire();
  if (r == nullptr) return ncclSuccess;  // every slot in flight: *request stays NULL and NCCL retries later
  r->header.isSend = true;
  r->header.comm = this;
  r->data = static_cast<unsigned char*>(data);
  r->size = size;
  r->wire = MessageHeader{size, tag, nextSequence_++, leadOf(data), {}};
  if (!isInline(size)) {
    r->pendingBytes.store(size, std::memory_order_relaxed);
    if (!queueChunks(r->data, size, r->wire.sequence, r->wire.lead, &r->pendingBytes)) {
      fail(ncclInternalError, "a data socket's task queue overflowed");
      return ncclInternalError;
    }
  }
  controlQueue_[(controlHead_ + controlCount_) % kMaxSendRequests] = r;
  ++controlCount_;
  *request = r;
  // Write the header (and a small payload) now: a message should not wait for the next test() to leave. A failure
  // found here belongs to the request just handed out: its test() reports it.
  progress();
  return ncclSuccess;
}

ncclResult_t SendComm::progress() {
  while (controlCount_ > 0) {
    SendRequest* r = controlQueue_[controlHead_];
    const bool payloadInline = isInline(r->size);
    const ControlFrame frame = controlFrame(r->wire, payloadInline);
    auto* zeros = const_cast<unsigned char*>(kZeros);
    const iovec parts[4] = {{&r->wire, sizeof(MessageHeader)},
                            {zeros, frame.gap},
                            {r->data, payloadInline ? r->size : 0},
                            {zeros, frame.tail}};
    int error = 0;
    const size_t before = r->controlOffset;
    sdk::IoStatus status = sdk::sendSomeGather(controlFd_, parts, 4, &r->controlOffset, &error);
    if (r->controlOffset != before) controlStall_.progressed();
    if (status == sdk::IoStatus::kWouldBlock) {
      controlStall_.blocked();
      if (!controlStall_.peerGone(controlFd_, Config::get().deadPeerTimeoutMs)) break;
      status = sdk::IoStatus::kFailed;
      error = ETIMEDOUT;
    }
    if (status != sdk::IoStatus::kDone) {
      fail(ncclRemoteError,
           "control socket: " + (error == ETIMEDOUT ? "no answer from the peer for " +
                                                          std::to_string(Config::get().deadPeerTimeoutMs) + " ms"
                                                    : sdk::errnoText(error)));
      return failure();
    }
    r->controlDone = true;
    controlHead_ = (controlHead_ + 1) % kMaxSendRequests;
    --controlCount_;
  }
  driveDataSocketsInline();
  return failure();
}

// The receiver never writes on the control socket, so anything readable there is its close or a socket error. A
// sender stuck behind a dead link learns this way that the receiver gave up, without waiting for TCP's own timers.
// A close is not a failure at once where helper threads drive the data sockets: a helper that wrote a send's last
// bytes counts them just after its write, and a receiver may take the message whole and close in between (a rank's
// last receive; the helper descheduled there on a loaded host). That send is complete, and its test must say so. A
// helper whose bytes the receiver did not take meets the receiver's reset at its next write and fails the comm
// itself; what is still pending kReceiverClosedGrace after the close fails it here. Without helpers the counts are
// this thread's own, and exact when it looks.
ncclResult_t SendComm::checkReceiverAlive() {
  auto now = Clock::now();
  if (now - lastLivenessCheck_ < kLivenessCheckInterval) return ncclSuccess;
  lastLivenessCheck_ = now;
  char byte;
  ssize_t got = recv(controlFd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (got == 0) {
    if (!receiverClosedAt_) receiverClosedAt_ = now;
    if (helpers_.empty() || now - *receiverClosedAt_ >= kReceiverClosedGrace)
      fail(ncclRemoteError, "the receiver closed the connection with sends pending");
  }
  if (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
    fail(ncclRemoteError, "control socket: " + sdk::errnoText(errno));
  if (got > 0) fail(ncclInternalError, "unexpected bytes from the receiver on the control socket");
  return failure();
}

ncclResult_t SendComm::test(SendRequest* r, int* done, sdk::CompletedSizes& sizes) {
  NCCL_NET_CHECK(progress());
  if (!r->controlDone || r->pendingBytes.load(std::memory_order_acquire) != 0) return checkReceiverAlive();
  if (!sizes.set(0, r->size)) return ncclSuccess;  // the SDK turns the overflow into an error
  *done = 1;
  r->header.magic = 0;
  requests_.release(r);
  return ncclSuccess;
}

// ---- RecvComm
// ---------------------------------------------------------------------------------------------------------

RecvComm::~RecvComm() {
  stopHelpers();
}

ncclResult_t RecvComm::post(int n, void** data, size_t* sizes, int* tags, void** request) {
  if (failure() != ncclSuccess) return failure();
  const int maxRecvs = Config::get().maxRecvs;
  if (n > maxRecvs) {
    NCCL_NET_WARN(
        "irecv: %d grouped receives refused: this plugin advertises maxRecvs %d (NNS_SOCKET_MAX_RECVS, 1 .. %d)", n,
        maxRecvs, kMaxRecvs);
    return ncclInternalError;
  }
  RecvRequest* r = requests_.acquire();
  if (r == nullptr) return ncclSuccess;  // NCCL_NET_MAX_REQUESTS in flight: NCCL retries later
  r->header.isSend = false;
  r->header.comm = this;
  r->count = n;
  r->unmatched = n;
  for (int i = 0; i < n; ++i)
    r->slots[i] = RecvSlot{static_cast<unsigned char*>(data[i]), sizes[i], tags[i], 0, false, nullptr};
  posted_[postedCount_++] = r;
  *request = r;
  // A failure found here belongs to the request just handed out: its test() reports it.
  claimUnexpected(r);
  progress();
  return ncclSuccess;
}

void RecvComm::claimUnexpected(RecvRequest* r) {
  for (int s = 0; s < r->count && !unexpected_.empty(); ++s) {
    RecvSlot& slot = r->slots[s];
    auto message = std::find_if(unexpected_.begin(), unexpected_.end(),
                                [&](const std::unique_ptr<UnexpectedMessage>& m) { return m->tag == slot.tag; });
    if (message == unexpected_.end()) continue;
    if ((*message)->size > slot.capacity) {
      fail(ncclInvalidUsage, "message of " + std::to_string((*message)->size) + " bytes (tag " +
                                 std::to_string(slot.tag) + ") is larger than the " + std::to_string(slot.capacity) +
                                 "-byte receive buffer posted for it");
      return;
    }
    slot.matched = true;
    slot.size = (*message)->size;
    --r->unmatched;
    r->pendingBytes.fetch_add(slot.size, std::memory_order_relaxed);
    slot.unexpected = std::move(*message);
    unexpected_.erase(message);
  }
  copyArrivedUnexpected(r);
}

void RecvComm::copyArrivedUnexpected(RecvRequest* r) {
  for (int s = 0; s < r->count; ++s) {
    RecvSlot& slot = r->slots[s];
    if (slot.unexpected == nullptr || slot.unexpected->pendingBytes.load(std::memory_order_acquire) != 0) continue;
    if (slot.size > 0) std::memcpy(slot.data, slot.unexpected->data.get(), slot.size);
    unexpectedBytes_ -= slot.size;
    --unexpectedCount_;
    slot.unexpected.reset();
    r->pendingBytes.fetch_sub(slot.size, std::memory_order_relaxed);
  }
}

bool RecvComm::anyUnmatchedSlot() const {
  for (int i = 0; i < postedCount_; ++i)
    if (posted_[i]->unmatched > 0) return true;
  return false;
}

// Gives the header just read to the first unmatched slot with its tag, oldest receive first.
ncclResult_t RecvComm::matchHeader(bool* matched) {
  *matched = false;
  for (int i = 0; i < postedCount_; ++i) {
    RecvRequest* r = posted_[i];
    for (int s = 0; s < r->count; ++s) {
      RecvSlot& slot = r->slots[s];
      if (slot.matched || slot.tag != header_.tag) continue;
      if (header_.size > slot.capacity) {
        // The rest of the stream can no longer be delimited: the comm is unusable, which fail() records.
        fail(ncclInvalidUsage, "message of " + std::to_string(header_.size) + " bytes (tag " +
                                   std::to_string(header_.tag) + ") is larger than the " +
                                   std::to_string(slot.capacity) + "-byte receive buffer posted for it");
        return failure();
      }
      slot.matched = true;
      slot.size = header_.size;
      --r->unmatched;
      *matched = true;
      return receivePayload(slot.data, header_.size, &r->pendingBytes);
    }
  }
  return ncclSuccess;  // no receive has room for this tag
}

ncclResult_t RecvComm::receivePayload(unsigned char* data, size_t size, std::atomic<size_t>* pending) {
  ++expectedSequence_;
  const ControlFrame frame = controlFrame(header_, isInline(size));
  tailLeft_ = frame.tail;
  if (size == 0) return ncclSuccess;
  pending->fetch_add(size, std::memory_order_relaxed);
  if (isInline(size)) {
    gapLeft_ = frame.gap;
    inlinePending_ = pending;
    inlineData_ = data;
    inlineSize_ = size;
    inlineOffset_ = 0;
  } else if (!queueChunks(data, size, header_.sequence, header_.lead, pending)) {
    fail(ncclInternalError, "a data socket's task queue overflowed");
  }
  return failure();
}

bool RecvComm::roomForUnexpected() const {
  const size_t limit = Config::get().unexpectedBytes;
  return limit > 0 && unexpectedCount_ < kMaxUnexpectedMessages && header_.size <= limit &&
         unexpectedBytes_ <= limit - header_.size;
}

ncclResult_t RecvComm::keepUnexpected(bool* kept) {
  *kept = false;
  if (!roomForUnexpected()) {
    // Claimed messages that arrived since their receive was last tested still count: copy them out first.
    for (int i = 0; i < postedCount_; ++i) copyArrivedUnexpected(posted_[i]);
  }
  if (!roomForUnexpected()) {
    if (!warnedUnexpectedLimit_) {
      warnedUnexpectedLimit_ = true;
      NCCL_NET_WARN(
          "receive with peer %s: a %zu-byte message with tag %d has no posted receive, and %zu earlier ones (%zu "
          "bytes) are held for theirs; reading pauses until a receive for tag %d is posted or held ones are "
          "delivered (NNS_SOCKET_UNEXPECTED_BYTES=%zu)",
          peer().c_str(), static_cast<size_t>(header_.size), header_.tag, unexpectedCount_, unexpectedBytes_,
          header_.tag, Config::get().unexpectedBytes);
    }
    return ncclSuccess;
  }
  UnexpectedMessage* target = nullptr;
  try {
    auto message = std::make_unique<UnexpectedMessage>();
    message->tag = header_.tag;
    message->size = header_.size;
    if (header_.size > 0) message->data = std::make_unique_for_overwrite<unsigned char[]>(header_.size);
    target = message.get();
    unexpected_.push_back(std::move(message));
  } catch (const std::bad_alloc&) {
    fail(ncclSystemError, "no memory for a " + std::to_string(header_.size) + "-byte unexpected message (tag " +
                              std::to_string(header_.tag) + ")");
    return failure();
  }
  unexpectedBytes_ += header_.size;
  ++unexpectedCount_;
  *kept = true;
  return receivePayload(target->data.get(), target->size, &target->pendingBytes);
}

// Fills bytes [*offset, size) of `target` from the control stream: bytes already staged first, then the socket.
// A header is read with one recv of up to kStageBytes, so a small message's payload (and the next headers) usually
// arrive in the same system call; a payload is otherwise read straight into the posted buffer.
sdk::IoStatus RecvComm::readControl(void* target, size_t size, size_t* offset, bool readAhead, int* error) {
  auto* bytes = static_cast<unsigned char*>(target);
  size_t staged = stageEnd_ - stageBegin_;
  if (staged > 0) {
    size_t take = std::min(staged, size - *offset);
    std::memcpy(bytes + *offset, stage_ + stageBegin_, take);
    *offset += take;
    stageBegin_ += take;
  }
  if (*offset == size) return sdk::IoStatus::kDone;
  if (!readAhead) return sdk::recvSome(controlFd_, target, size, offset, error);
  stageBegin_ = stageEnd_ = 0;
  ssize_t received;
  do {
    received = ::recv(controlFd_, stage_, kStageBytes, MSG_DONTWAIT);
  } while (received < 0 && errno == EINTR);
  if (received == 0) return sdk::IoStatus::kClosed;
  if (received < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return sdk::IoStatus::kWouldBlock;
    *error = errno;
    return sdk::IoStatus::kFailed;
  }
  stageEnd_ = static_cast<size_t>(received);
  size_t take = std::min(stageEnd_, size - *offset);
  std::memcpy(bytes + *offset, stage_, take);
  *offset += take;
  stageBegin_ = take;
  return *offset == size ? sdk::IoStatus::kDone : sdk::IoStatus::kWouldBlock;
}

sdk::IoStatus RecvComm::skipControl(size_t* remaining, int* error) {
  unsigned char dropped[kWireAlign];
  size_t offset = 0;
  sdk::IoStatus status = readControl(dropped, std::min(*remaining, sizeof(dropped)), &offset, true, error);
  *remaining -= offset;
  return status;
}

ncclResult_t RecvComm::failControlRead(sdk::IoStatus status, int error, const char* what) {
  if (status == sdk::IoStatus::kClosed) {
    fail(ncclRemoteError, std::string("the peer closed the connection ") + what);
  } else {
    fail(ncclRemoteError,
         "control socket: " + (error == ETIMEDOUT ? "no answer from the peer for " +
                                                        std::to_string(Config::get().deadPeerTimeoutMs) + " ms"
                                                  : sdk::errnoText(error)));
  }
  return failure();
}

ncclResult_t RecvComm::progress() {
  for (;;) {
    int error = 0;
    if (inlinePending_ != nullptr) {
      sdk::IoStatus status = sdk::IoStatus::kDone;
      if (gapLeft_ > 0) status = skipControl(&gapLeft_, &error);
      if (status == sdk::IoStatus::kDone) status = readControl(inlineData_, inlineSize_, &inlineOffset_, false, &error);
      if (status == sdk::IoStatus::kWouldBlock) break;
      if (status != sdk::IoStatus::kDone) return failControlRead(status, error, "in the middle of a message");
      inlinePending_->fetch_sub(inlineSize_, std::memory_order_release);
      inlinePending_ = nullptr;
      continue;
    }
    if (tailLeft_ > 0) {
      sdk::IoStatus status = skipControl(&tailLeft_, &error);
      if (status == sdk::IoStatus::kWouldBlock) break;
      if (status != sdk::IoStatus::kDone) return failControlRead(status, error, "in the middle of a message");
      continue;
    }
    if (!anyUnmatchedSlot()) break;  // nothing to receive into: leave the stream in the kernel
    if (headerOffset_ < sizeof(MessageHeader)) {
      sdk::IoStatus status = readControl(&header_, sizeof(header_), &headerOffset_, true, &error);
      if (status == sdk::IoStatus::kWouldBlock) break;
      if (status != sdk::IoStatus::kDone) return failControlRead(status, error, "while a receive was posted");
    }
    if (header_.sequence != expectedSequence_ || header_.lead >= kWireAlign) {
      fail(ncclInternalError, "message sequence " + std::to_string(header_.sequence) + " (payload lead " +
                                  std::to_string(header_.lead) + ") where " + std::to_string(expectedSequence_) +
                                  " (lead below " + std::to_string(kWireAlign) + ") was due: the stream is corrupt");
      return failure();
    }
    bool taken = false;
    NCCL_NET_CHECK(matchHeader(&taken));
    if (!taken) NCCL_NET_CHECK(keepUnexpected(&taken));
    if (!taken) break;
    headerOffset_ = 0;
  }
  driveDataSocketsInline();
  return failure();
}

ncclResult_t RecvComm::test(RecvRequest* r, int* done, sdk::CompletedSizes& sizes) {
  NCCL_NET_CHECK(progress());
  copyArrivedUnexpected(r);
  if (r->unmatched > 0 || r->pendingBytes.load(std::memory_order_acquire) != 0) return failure();
  for (int i = 0; i < r->count; ++i)
    if (!sizes.set(i, r->slots[i].size)) return ncclSuccess;  // the SDK turns the overflow into an error
  *done = 1;
  int position = 0;
  while (posted_[position] != r) ++position;
  for (int i = position + 1; i < postedCount_; ++i) posted_[i - 1] = posted_[i];
  --postedCount_;
  r->header.magic = 0;
  requests_.release(r);
  return ncclSuccess;
}

}  // namespace nns_socket
