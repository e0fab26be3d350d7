// communicator.cc: connection setup over the plugin and the pipelined piece transfers under the collectives.
#include "nns/core/communicator.hpp"

#include <sched.h>

#include <cstring>

namespace nns::core {

namespace {
using Clock = std::chrono::steady_clock;

const char* resultName(ncclResult_t r) {
  static const char* names[] = {"ncclSuccess",         "ncclUnhandledCudaError", "ncclSystemError",
                                "ncclInternalError",   "ncclInvalidArgument",    "ncclInvalidUsage",
                                "ncclRemoteError",     "ncclInProgress",         "ncclTimeout"};
  return static_cast<int>(r) >= 0 && static_cast<int>(r) < 9 ? names[r] : "unknown ncclResult_t";
}
}  // namespace

void Communicator::check(ncclResult_t result, const char* call) {
  if (result != ncclSuccess)
    throw CommError("rank " + std::to_string(rank_) + ": " + net_->name() + " " + call + " returned " +
                    resultName(result));
}

Communicator::Communicator(const LaunchInfo& launch, const CommOptions& options)
    : rank_(launch.rank), size_(launch.size), options_(options) {
  bootstrap_ = std::make_unique<Bootstrap>(launch, options.timeout);
  LoadOptions load;
  const char* env = std::getenv("NCCL_NET_PLUGIN");
  load.plugin = !options.plugin.empty() ? options.plugin : env != nullptr ? env : "socket";
  load.searchDirs = options.searchDirs;
  LoadReport report;
  net_ = loadNet(load, &report);
  if (net_ == nullptr) {
    std::string why;
    for (const auto& c : report.candidates) why += "; " + c.requested + ": " + c.rejectReason;
    throw CommError("rank " + std::to_string(rank_) + ": no net plugin loaded" + why);
  }
  check(net_->init(&ctx_, 0x6e6e73, nullptr, nullptr, nullptr), "init");
  if (size_ == 1) return;

  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  check(net_->listen(ctx_, 0, handle, &listenComm_), "listen");
  auto handles = bootstrap_->allGather(std::string(reinterpret_cast<char*>(handle), sizeof(handle)));
  unsigned char nextHandle[NCCL_NET_HANDLE_MAXSIZE];
  std::memcpy(nextHandle, handles[next()].data(), sizeof(nextHandle));
  auto deadline = Clock::now() + options_.timeout;
  while (sendComm_ == nullptr || recvComm_ == nullptr) {
    if (sendComm_ == nullptr) check(net_->connect(ctx_, 0, nextHandle, &sendComm_, nullptr), "connect");
    if (recvComm_ == nullptr) check(net_->accept(listenComm_, &recvComm_, nullptr), "accept");
    if (Clock::now() > deadline) throw CommError("rank " + std::to_string(rank_) + ": ring connection timed out");
  }
  // Fixed slots, registered once: nothing is allocated or registered while collectives run.
  sendSlots_.resize(options_.slots);
  recvSlots_.resize(options_.slots);
  for (auto& slot : sendSlots_) {
    slot.memory.resize(options_.slotBytes);
    check(net_->regMr(sendComm_, slot.memory.data(), slot.memory.size(), NCCL_PTR_HOST, &slot.mhandle), "regMr");
  }
  for (auto& slot : recvSlots_) {
    slot.memory.resize(options_.slotBytes);
    check(net_->regMr(recvComm_, slot.memory.data(), slot.memory.size(), NCCL_PTR_HOST, &slot.mhandle), "regMr");
  }
  bootstrap_->barrier();
}

Communicator::~Communicator() {
  if (net_ == nullptr) return;
  for (auto& slot : sendSlots_)
    if (slot.mhandle != nullptr) net_->deregMr(sendComm_, slot.mhandle);
  for (auto& slot : recvSlots_)
    if (slot.mhandle != nullptr) net_->deregMr(recvComm_, slot.mhandle);
  if (sendComm_ != nullptr) net_->closeSend(sendComm_);
  if (recvComm_ != nullptr) net_->closeRecv(recvComm_);
  if (listenComm_ != nullptr) net_->closeListen(listenComm_);
  net_->finalize(ctx_);
}

void* Communicator::scratch(size_t bytes) {
  if (scratch_.size() < bytes) scratch_.resize(bytes);
  return scratch_.data();
}

void Communicator::exchange(const void* send, size_t sendBytes, size_t recvBytes, const PieceHandler& onPiece) {
  transfer(send, sendBytes, true, recvBytes, true, onPiece);
}

void Communicator::transfer(const void* send, size_t sendBytes, bool sending, size_t recvBytes, bool receiving,
                            const PieceHandler& onPiece) {
  const size_t piece = options_.slotBytes;
  const auto* source = static_cast<const unsigned char*>(send);
  // A zero-byte message still travels as one empty piece, so both sides agree on every step.
  size_t sendPieces = !sending ? 0 : sendBytes == 0 ? 1 : (sendBytes + piece - 1) / piece;
  size_t recvPieces = !receiving ? 0 : recvBytes == 0 ? 1 : (recvBytes + piece - 1) / piece;
  size_t sentPieces = 0, recvIndex = 0, sendDoneIndex = 0, recvDoneIndex = 0;
  auto deadline = Clock::now() + options_.timeout;
  const int slots = options_.slots;
  while (sendDoneIndex < sendPieces || recvDoneIndex < recvPieces) {
    bool progressed = false;
    // Post receives into free slots (slot = piece index mod slots, completed in order).
    while (recvIndex < recvPieces && recvIndex - recvDoneIndex < static_cast<size_t>(slots)) {
      Slot& slot = recvSlots_[recvIndex % slots];
      slot.offset = recvIndex * piece;
      slot.bytes = std::min(piece, recvBytes - std::min(recvBytes, slot.offset));
      void* data = slot.memory.data();
      size_t capacity = slot.memory.size();
      int tag = prev();
      check(net_->irecv(recvComm_, 1, &data, &capacity, &tag, &slot.mhandle, nullptr, &slot.request), "irecv");
      if (slot.request == nullptr) break;
      ++recvIndex;
      progressed = true;
    }
    while (sentPieces < sendPieces && sentPieces - sendDoneIndex < static_cast<size_t>(slots)) {
      Slot& slot = sendSlots_[sentPieces % slots];
      slot.offset = sentPieces * piece;
      slot.bytes = std::min(piece, sendBytes - std::min(sendBytes, slot.offset));
      if (slot.bytes > 0) std::memcpy(slot.memory.data(), source + slot.offset, slot.bytes);
      check(net_->isend(sendComm_, slot.memory.data(), slot.bytes, rank_, slot.mhandle, nullptr, &slot.request),
            "isend");
      if (slot.request == nullptr) break;
      ++sentPieces;
      progressed = true;
    }
    if (recvDoneIndex < recvIndex) {
      Slot& slot = recvSlots_[recvDoneIndex % slots];
      int done = 0, size = 0;
      check(net_->test(slot.request, &done, &size), "test(recv)");
      if (done) {
        if (static_cast<size_t>(size) != slot.bytes)
          throw CommError("rank " + std::to_string(rank_) + ": received " + std::to_string(size) + " bytes from rank " +
                          std::to_string(prev()) + ", expected " + std::to_string(slot.bytes));
        onPiece(slot.offset, slot.memory.data(), slot.bytes);
        ++recvDoneIndex;
        progressed = true;
      }
    }
    if (sendDoneIndex < sentPieces) {
      Slot& slot = sendSlots_[sendDoneIndex % slots];
      int done = 0, size = 0;
      check(net_->test(slot.request, &done, &size), "test(send)");
      if (done) {
        ++sendDoneIndex;
        progressed = true;
      }
    }
    if (progressed) {
      deadline = Clock::now() + options_.timeout;
    } else {
      if (Clock::now() > deadline)
        throw CommError("rank " + std::to_string(rank_) + ": no progress for " +
                        std::to_string(options_.timeout.count()) + " ms (rank " + std::to_string(prev()) + " or " +
                        std::to_string(next()) + " dead or stuck?)");
      sched_yield();
    }
  }
}

void Communicator::chain(size_t bytes, bool receive, bool forward, const void* source, const ForwardHandler& onPiece) {
  const size_t piece = options_.slotBytes;
  size_t pieces = bytes == 0 ? 1 : (bytes + piece - 1) / piece;
  const auto* src = static_cast<const unsigned char*>(source);
  for (size_t i = 0; i < pieces; ++i) {
    size_t offset = i * piece;
    size_t length = std::min(piece, bytes - std::min(bytes, offset));
    const void* outgoing = src != nullptr ? src + offset : nullptr;
    if (receive) {
      transfer(nullptr, 0, false, length, true,
               [&](size_t, const void* data, size_t n) { outgoing = onPiece(offset, data, n); });
    } else {
      outgoing = onPiece(offset, outgoing, length);
    }
    if (forward) transfer(outgoing, length, true, 0, false, nullptr);
  }
}

}  // namespace nns::core
