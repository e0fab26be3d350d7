// nns/coll/collectives.hpp: collectives over a Communicator: ring and double-binary-tree allreduce, ring allgather
// and reduce-scatter, pipelined chain broadcast and reduce, and grouped send/recv. Schedules only describe which
// pieces move where and call the kernel layer, so they do not know where buffers live. In-place when the input is
// the output (or the rank's block of it), as nccl.h defines it per call. Every call blocks until done, runs through
// Communicator::submit (on the calling thread, or on the progress thread behind another thread's call) and throws
// core::CommError on failure.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "nns/coll/reduce.hpp"
#include "nns/core/communicator.hpp"

namespace nns::coll {

using core::Communicator;

// CollNet: through the plugin's collNet (in-network reduction, NCCL's CollNet algorithm), for host buffers, the
// types and ops every rank's reduceSupport accepts, and (allgather, reducescatter) collNets with iallgather or
// ireducescatter. Chosen by name, or by Auto where NCCL_COLLNET_ENABLE=1 (as NCCL does); Auto falls back to its own
// choice where the collNet cannot take the call. By name, a call the collNet cannot take is an ArgumentError on every
// rank (the communicator stays usable): at once for what the call itself shows (GPU buffers, a premultiplied sum),
// else after the ranks have agreed, at the first call, on what their collNets do.
enum class Algorithm { Auto, Ring, Tree, Doubling, CollNet };
const char* algorithmName(Algorithm algorithm);
// "auto", "ring", "tree", "doubling" (recursive doubling; also "rd"), "collnet", any case.
bool parseAlgorithm(const char* text, Algorithm* algorithm);

// Auto: recursive doubling up to kDefaultDoublingMaxBytes, or kTwoRankDoublingMaxBytes on 2 ranks
// ($NNS_DOUBLING_MAX_BYTES for any count); then, from kTreeMinRanks ranks up, the double binary tree up to
// kDefaultTreeMaxBytes ($NNS_TREE_MAX_BYTES); the ring above. Measured with the socket plugin on loopback
// (docs/performance.md): at 4 ranks doubling wins to 32 KiB and the ring from 128 KiB, the tree never; at 2 ranks,
// where doubling is one exchange against the ring's two steps, doubling wins to 512 KiB; at 8 ranks the tree beats
// the ring at 32 KiB (the ring's 2(n-1) steps) but not at 256 KiB.
constexpr size_t kDefaultDoublingMaxBytes = 32 * 1024;
constexpr size_t kTwoRankDoublingMaxBytes = 512 * 1024;
constexpr size_t kDefaultTreeMaxBytes = 128 * 1024;
constexpr int kTreeMinRanks = 8;
// The limits Algorithm::Auto uses on `comm`, knobs applied (a malformed knob throws CommError, ncclInvalidUsage):
// recursive doubling up to doublingMaxBytes, then the tree up to treeMaxBytes where the communicator has treeMinRanks
// ranks or more, then the ring. What nccl-net-bench's header prints.
struct AllReduceLimits {
  size_t doublingMaxBytes;
  size_t treeMaxBytes;
  int treeMinRanks;
};
AllReduceLimits allReduceLimits(const Communicator& comm);
// What Algorithm::Auto resolves to for `bytes` on `comm`; an explicit request wins, then $NNS_ALGO, then
// NCCL_COLLNET_ENABLE=1 (CollNet), then the size. A value outside the enum is an ArgumentError.
Algorithm chooseAllReduce(const Communicator& comm, size_t bytes, Algorithm requested);
// Whether NCCL_COLLNET_ENABLE asks for the collNet: "1"; unset, empty or "0" do not; anything else is a CommError
// (ncclInvalidUsage).
bool collNetEnabled();
// What Algorithm::Auto picks by size alone: recursive doubling, the tree or the ring (`limits`: allReduceLimits).
Algorithm bySize(const Communicator& comm, size_t bytes, const AllReduceLimits& limits);

// A reduction: one of NCCL's ops (ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg), or NCCL's premultiplied sum
// (ncclRedOpCreatePreMulSum): each rank's input times that rank's own scalar, then summed. The scalar is one value
// of the call's type in host memory, read when the call runs.
struct ReduceOp {
  ncclRedOp_t op = ncclSum;
  const void* scalar = nullptr;
  bool premultiplied = false;
  ReduceOp(ncclRedOp_t builtIn) : op(builtIn) {}  // NOLINT(google-explicit-constructor): ncclSum and the others
  static ReduceOp preMulSum(const void* scalar) {
    ReduceOp sum(ncclSum);
    sum.scalar = scalar;
    sum.premultiplied = true;
    return sum;
  }
};

void allReduce(Communicator& comm, const void* send, void* recv, size_t count, ncclDataType_t type, ReduceOp op,
               KernelLayer& kernels = hostKernels(), Algorithm algorithm = Algorithm::Auto);
// recv holds size() blocks of sendCount elements, in rank order. `algorithm`: Auto, Ring or CollNet (the buffers
// registered with the collNet and walked in windows as NCCL's proxy walks them, or copied through its slots, a full
// window per operation); Auto is the ring unless $NNS_ALGO=collnet, or NCCL_COLLNET_ENABLE=1 where the collNet can
// take the call.
void allGather(Communicator& comm, const void* send, void* recv, size_t sendCount, ncclDataType_t type,
               KernelLayer& kernels = hostKernels(), Algorithm algorithm = Algorithm::Auto);
// send holds size() blocks of recvCount elements; rank r gets the reduction of block r. `algorithm` as allGather's.
void reduceScatter(Communicator& comm, const void* send, void* recv, size_t recvCount, ncclDataType_t type, ReduceOp op,
                   KernelLayer& kernels = hostKernels(), Algorithm algorithm = Algorithm::Auto);
void broadcast(Communicator& comm, const void* send, void* recv, size_t count, ncclDataType_t type, int root,
               KernelLayer& kernels = hostKernels());
void reduce(Communicator& comm, const void* send, void* recv, size_t count, ncclDataType_t type, ReduceOp op, int root,
            KernelLayer& kernels = hostKernels());

// Point to point, grouped like ncclGroupStart/End: every operation of the list progresses at once, so a rank may
// send to and receive from the same peers without deadlock. Operations with the same peer and direction are
// matched in list order on both sides; a rank may send to itself (matched with its own receives in order).
struct P2POp {
  enum Kind { Send, Recv } kind;
  int peer;
  void* buffer;  // const for sends
  size_t count;
  ncclDataType_t type;
};
void sendRecv(Communicator& comm, std::span<const P2POp> ops, KernelLayer& kernels = hostKernels());
// The same for a list written in place (`sendRecv(comm, {P2POp{...}, P2POp{...}})`).
inline void sendRecv(Communicator& comm, const std::vector<P2POp>& ops, KernelLayer& kernels = hostKernels()) {
  sendRecv(comm, std::span<const P2POp>(ops), kernels);
}
void send(Communicator& comm, const void* buffer, size_t count, ncclDataType_t type, int peer,
          KernelLayer& kernels = hostKernels());
void recv(Communicator& comm, void* buffer, size_t count, ncclDataType_t type, int peer,
          KernelLayer& kernels = hostKernels());

// NCCL's double binary tree over `size` ranks: tree 0 is an in-order binary tree, tree 1 the same tree mirrored
// (even size) or shifted by one (odd size), so a rank that is a leaf in one tree is inside the other. -1: none.
struct TreeLinks {
  int parent = -1;
  int children[2] = {-1, -1};
};
void doubleBinaryTree(int size, int rank, TreeLinks trees[2]);

}  // namespace nns::coll
