// schedule.hpp: what the schedule builders share: one collective call's arguments and the plan builders that add
// its transfers, per channel, to a core::Plan.
#pragma once

#include "nns/coll/collectives.hpp"

namespace nns::coll::detail {

struct Call {
  const unsigned char* in;
  unsigned char* out;
  ncclDataType_t type;
  ncclRedOp_t op;
  KernelLayer* kernels;
  // A premultiplied sum in the rings (a premultiplied-sum op, or floating-point avg: NCCL's ncclDevPreMulSum, op
  // then sum): this rank's own elements enter the sum multiplied by *scalar piece by piece as they meet a received
  // piece, and a block sent unreduced is premultiplied as it is staged; null otherwise.
  const void* scalar = nullptr;
  // Working memory for that: a piece's worth (host slots) where a forwarded piece's own elements are premultiplied,
  // and, for reduce-scatter, the elements of its first sends (indexed as the output).
  unsigned char* pieceScratch = nullptr;
  unsigned char* blockScratch = nullptr;
};

// `forward`: partial sums and gathered blocks go on from the slots they arrived in (plain host buffers); each
// block of [first, first + count) must then span fewer pieces than the communicator has slots.
void ringAllReduce(Communicator& comm, core::Plan& plan, const Call& call, size_t first, size_t count, int channel,
                   bool forward);
// The same for the ring all-gather and reduce-scatter (where `count` is what each block spans) and the chains
// (`work` is then unused: partial results stay in the slots).
void ringAllGather(Communicator& comm, core::Plan& plan, const Call& call, size_t blockCount, size_t first,
                   size_t count, int channel, bool forward);
void ringReduceScatter(Communicator& comm, core::Plan& plan, const Call& call, size_t blockCount, size_t first,
                       size_t count, unsigned char* work, int channel, bool forward);
void chainBroadcast(Communicator& comm, core::Plan& plan, const Call& call, int root, size_t first, size_t count,
                    int channel, bool forward);
void chainReduce(Communicator& comm, core::Plan& plan, const Call& call, int root, size_t first, size_t count,
                 unsigned char* work, int channel, bool forward);
// Tree allreduce of elements [first, first + count) over one tree: a reduce towards the root and the broadcast
// back down, in one plan.
void treeAllReduce(Communicator& comm, core::Plan& plan, const Call& call, const TreeLinks& tree, size_t first,
                   size_t count, int channel);

// Recursive doubling over elements [first, first + count); `work` holds (doublingRounds(n) + 1) buffers of
// `totalCount` elements. Returns where this rank's result is once the plan has run (to be copied to the output),
// or nullptr when the plan delivers it to the output itself.
int doublingRounds(int n);
unsigned char* doublingAllReduce(Communicator& comm, core::Plan& plan, const Call& call, size_t first, size_t count,
                                 size_t totalCount, unsigned char* work, int channel);

}  // namespace nns::coll::detail
