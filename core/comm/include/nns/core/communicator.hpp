// nns/core/communicator.hpp: a communicator over any loaded net plugin: bootstrap, ring connections to both
// neighbours, fixed registered slots, and the piece-wise send/receive pipeline the collective schedules drive.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "nns/core/bootstrap.hpp"
#include "nns/core/loader.hpp"

namespace nns::core {

struct CommOptions {
  std::string plugin;                   // NCCL_NET_PLUGIN semantics; empty: $NCCL_NET_PLUGIN if set, else "socket"
  std::vector<std::string> searchDirs;  // where to look for libnccl-net-*.so first
  size_t slotBytes = 1u << 20;          // one pipelined piece
  int slots = 4;                        // pieces in flight per direction
  std::chrono::milliseconds timeout{60000};  // bootstrap and every transfer wait
};

// Thrown on any failure: a plugin error (with the call and result), a timeout (a dead or stuck rank).
class CommError : public std::runtime_error {
 public:
  explicit CommError(const std::string& what) : std::runtime_error(what) {}
};

class Communicator {
 public:
  Communicator(const LaunchInfo& launch, const CommOptions& options);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int next() const { return (rank_ + 1) % size_; }
  int prev() const { return (rank_ + size_ - 1) % size_; }
  const Net& net() const { return *net_; }
  Bootstrap& bootstrap() { return *bootstrap_; }

  // Called with each received piece: its byte offset in the message, the slot holding it, its size.
  using PieceHandler = std::function<void(size_t offset, const void* piece, size_t bytes)>;

  // Sends `sendBytes` from `send` to next() while receiving `recvBytes` from prev(), `slots` pieces in flight each
  // way, copying each outgoing piece into a registered slot. Either size may be 0.
  void exchange(const void* send, size_t sendBytes, size_t recvBytes, const PieceHandler& onPiece);

  // Chain step for rooted collectives: receive piece by piece from prev() (if `receive`), hand each to `onPiece`,
  // which returns the bytes to forward to next() (if `forward`).
  using ForwardHandler = std::function<const void*(size_t offset, const void* piece, size_t bytes)>;
  void chain(size_t bytes, bool receive, bool forward, const void* source, const ForwardHandler& onPiece);

  // Scratch memory owned by the communicator (grows, never shrinks), for schedules that need a working copy.
  void* scratch(size_t bytes);

 private:
  void check(ncclResult_t result, const char* call);
  void transfer(const void* send, size_t sendBytes, bool sending, size_t recvBytes, bool receiving,
                const PieceHandler& onPiece);

  struct Slot {
    std::vector<unsigned char> memory;
    void* mhandle = nullptr;
    void* request = nullptr;
    size_t offset = 0;
    size_t bytes = 0;
  };

  int rank_;
  int size_;
  CommOptions options_;
  std::unique_ptr<Bootstrap> bootstrap_;
  std::unique_ptr<Net> net_;
  void* ctx_ = nullptr;
  void* listenComm_ = nullptr;
  void* sendComm_ = nullptr;
  void* recvComm_ = nullptr;
  std::vector<Slot> sendSlots_;
  std::vector<Slot> recvSlots_;
  std::vector<unsigned char> scratch_;
};

}  // namespace nns::core
