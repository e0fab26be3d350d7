// ring.cc: ring allreduce (reduce-scatter then all-gather), all-gather and reduce-scatter, each one pipelined plan
// per channel; chain broadcast and reduce.
#include <algorithm>

#include "schedule.hpp"

namespace nns::coll::detail {

namespace {

// Block b of `count` elements split over n parts: the first count % n blocks get one element more.
struct Blocks {
  size_t count;
  int n;
  size_t offset(int b) const { return b * (count / n) + std::min<size_t>(b, count % n); }
  size_t length(int b) const { return count / n + (static_cast<size_t>(b) < count % n ? 1 : 0); }
};

int mod(int a, int n) {
  return ((a % n) + n) % n;
}

// Sends this rank's own elements [own, own + bytes) unreduced, premultiplied for a premultiplied sum: as each piece is
// staged into its slot (no pass of its own), or, when the plugin would send it from registered memory or the slots
// are for a GPU layer, into `scaled` first and sent from there.
void sendOwn(Communicator& comm, core::Plan& plan, const Call& call, int channel, const unsigned char* own,
             size_t bytes, unsigned char* scaled) {
  if (call.scalar == nullptr) return plan.send(comm.next(), channel, own, bytes);
  if (!call.kernels->onDevice() && !comm.registered(own, bytes)) {
    return plan.send(comm.next(), channel, own, bytes, {}, [own, &call](size_t offset, void* slot, size_t len) {
      call.kernels->premultiply(slot, own + offset, len / typeSize(call.type), call.type, call.scalar);
    });
  }
  call.kernels->premultiply(scaled, own, bytes / typeSize(call.type), call.type, call.scalar);
  plan.send(comm.next(), channel, scaled, bytes);
}

// A received piece reduced with this rank's own elements: into `target` + offset when given, else in the piece's
// slot itself (piece op own; every op is commutative), for a forward to send on. Returns where the result is.
void* reduceReceived(const Call& call, unsigned char* target, const unsigned char* own, size_t offset, void* piece,
                     size_t len) {
  const size_t count = len / typeSize(call.type);
  if (call.scalar != nullptr) {
    // Own elements premultiplied first, into the target or beside the piece (still in cache), then the piece added.
    void* scaled = target != nullptr ? target + offset : call.pieceScratch;
    call.kernels->premultiply(scaled, own + offset, count, call.type, call.scalar);
    void* result = target != nullptr ? scaled : piece;
    call.kernels->reduce(result, result == piece ? scaled : piece, count, call.type, call.op);
    return result;
  }
  if (target == nullptr) {
    call.kernels->reduceInto(piece, piece, own + offset, count, call.type, call.op);
    return piece;
  }
  call.kernels->reduceInto(target + offset, own + offset, piece, count, call.type, call.op);
  return target + offset;
}

}  // namespace

// One ring over elements [first, first + count) on `channel`, added to `plan`. Step s of the reduce-scatter sends
// block r-s and reduces block r-s-1 arriving from the previous rank; the all-gather then forwards the finished
// blocks. The block sent at step s+1 is the block received at step s, so each send segment waits on the previous
// receive segment piece by piece: the whole allreduce is one pipeline, with no barrier between steps.
//
// With `forward`, what a step sends on is never staged: each piece is reduced in the slot it arrived in (partial
// sums do not go through the output) and sent on from there, and the all-gather forwards received slots as they
// are. Per rank and round, only its own first block is copied into a slot and only finished blocks out of one: n+1
// block copies where staging every send took 3(n-1). A forward holds its slot until sent, so a block may span at
// most slots-1 pieces (the caller cuts the message into rounds).
void ringAllReduce(Communicator& comm, core::Plan& plan, const Call& call, size_t first, size_t count, int channel,
                   bool forward) {
  const int n = comm.size(), r = comm.rank();
  const size_t es = typeSize(call.type);
  const Blocks blocks{count, n};
  auto in = [&](int b) { return call.in + (first + blocks.offset(b)) * es; };
  auto out = [&](int b) { return call.out + (first + blocks.offset(b)) * es; };
  auto bytes = [&](int b) { return blocks.length(b) * es; };
  core::Plan::RecvRef previous;
  for (int s = 0; s < n - 1; ++s) {
    const int sendBlock = mod(r - s, n), recvBlock = mod(r - s - 1, n);
    if (s == 0) {
      // Premultiplied, if at all, into its place in the output: only the all-gather writes there, each piece once
      // the reduction this send starts has come round the ring.
      sendOwn(comm, plan, call, channel, in(sendBlock), bytes(sendBlock), out(sendBlock));
    } else if (forward) {
      plan.forward(comm.next(), channel, previous);
    } else {
      plan.send(comm.next(), channel, out(sendBlock), bytes(sendBlock), {previous});
    }
    unsigned char* target = out(recvBlock);
    const unsigned char* own = in(recvBlock);
    const bool last = s == n - 2;
    // Into the output (own is the output itself in place), or with `forward` in the piece's slot, the finished
    // block then copied to the output too; for avg the finished block is divided.
    previous = plan.recv(comm.prev(), channel, bytes(recvBlock), [=, &call](size_t offset, void* piece, size_t len) {
      void* result = reduceReceived(call, forward ? nullptr : target, own, offset, piece, len);
      if (!last) return;
      if (call.op == ncclAvg) call.kernels->divide(result, len / es, call.type, n);
      if (forward) call.kernels->copy(target + offset, piece, len);
    });
  }
  for (int s = 0; s < n - 1; ++s) {
    const int sendBlock = mod(r + 1 - s, n), recvBlock = mod(r - s, n);
    if (forward) {
      plan.forward(comm.next(), channel, previous);
    } else {
      plan.send(comm.next(), channel, out(sendBlock), bytes(sendBlock), {previous});
    }
    unsigned char* target = out(recvBlock);
    previous = plan.recv(
        comm.prev(), channel, bytes(recvBlock),
        [=, &call](size_t offset, void* piece, size_t len) { call.kernels->copy(target + offset, piece, len); }, {},
        target);
  }
}

void ringAllGather(Communicator& comm, core::Plan& plan, const Call& call, size_t blockCount, size_t first,
                   size_t count, int channel, bool forward) {
  // Block b of the output lives at b * blockCount; this channel moves elements [first, first + count) of each.
  const int n = comm.size(), r = comm.rank();
  const size_t es = typeSize(call.type);
  auto out = [&](int b) { return call.out + (b * blockCount + first) * es; };
  core::Plan::RecvRef previous;
  for (int s = 0; s < n - 1; ++s) {
    const int sendBlock = mod(r - s, n), recvBlock = mod(r - s - 1, n);
    if (s == 0) {
      plan.send(comm.next(), channel, call.in + first * es, count * es);
    } else if (forward) {
      plan.forward(comm.next(), channel, previous);
    } else {
      plan.send(comm.next(), channel, out(sendBlock), count * es, {previous});
    }
    unsigned char* target = out(recvBlock);
    previous = plan.recv(
        comm.prev(), channel, count * es,
        [=, &call](size_t offset, void* piece, size_t len) { call.kernels->copy(target + offset, piece, len); }, {},
        target);
  }
}

void ringReduceScatter(Communicator& comm, core::Plan& plan, const Call& call, size_t blockCount, size_t first,
                       size_t count, unsigned char* work, int channel, bool forward) {
  // Step s sends block r-s-1 (the rank's own input at s = 0, the partial sum received at s-1 after that) and
  // reduces block r-s-2; the last step's block is r itself, reduced straight into the output. Partial sums live in
  // `work` (blockCount elements per block), or with `forward` in the slots they arrived in, never in the input, so
  // the input stays untouched.
  const int n = comm.size(), r = comm.rank();
  const size_t es = typeSize(call.type);
  auto in = [&](int b) { return call.in + (b * blockCount + first) * es; };
  auto partial = [&](int b) { return work + (b * blockCount + first) * es; };
  core::Plan::RecvRef previous;
  for (int s = 0; s < n - 1; ++s) {
    const int sendBlock = mod(r - s - 1, n), recvBlock = mod(r - s - 2, n);
    if (s == 0) {
      // Premultiplied, if at all, into working memory: the last step writes the output meanwhile.
      sendOwn(comm, plan, call, channel, in(sendBlock), count * es,
              call.blockScratch == nullptr ? nullptr : call.blockScratch + first * es);
    } else if (forward) {
      plan.forward(comm.next(), channel, previous);
    } else {
      plan.send(comm.next(), channel, partial(sendBlock), count * es, {previous});
    }
    const bool last = s == n - 2;
    unsigned char* target = last ? call.out + first * es : forward ? nullptr : partial(recvBlock);
    const unsigned char* own = in(recvBlock);
    previous = plan.recv(comm.prev(), channel, count * es, [=, &call](size_t offset, void* piece, size_t len) {
      void* result = reduceReceived(call, target, own, offset, piece, len);
      if (last && call.op == ncclAvg) call.kernels->divide(result, len / es, call.type, n);
    });
  }
}

void chainBroadcast(Communicator& comm, core::Plan& plan, const Call& call, int root, size_t first, size_t count,
                    int channel, bool forward) {
  // Ranks in ring order from the root; each forwards piece by piece what it received (from the slot it arrived in,
  // with `forward`).
  const int n = comm.size(), position = mod(comm.rank() - root, n);
  const size_t es = typeSize(call.type);
  unsigned char* out = call.out + first * es;
  if (position == 0) {
    plan.send(comm.next(), channel, call.in + first * es, count * es);
    return;
  }
  auto received = plan.recv(
      comm.prev(), channel, count * es,
      [=, &call](size_t offset, void* piece, size_t len) { call.kernels->copy(out + offset, piece, len); }, {}, out);
  if (position == n - 1) return;
  if (forward) {
    plan.forward(comm.next(), channel, received);
  } else {
    plan.send(comm.next(), channel, out, count * es, {received});
  }
}

void chainReduce(Communicator& comm, core::Plan& plan, const Call& call, int root, size_t first, size_t count,
                 unsigned char* work, int channel, bool forward) {
  // The chain starts after the root and ends at it: each rank adds its input to the partial result and passes it on
  // (from `work`, or with `forward` from the slot the partial result arrived in).
  const int n = comm.size(), position = mod(comm.rank() - root - 1, n);
  const bool isRoot = comm.rank() == root;
  const size_t es = typeSize(call.type);
  const unsigned char* own = call.in + first * es;
  if (position == 0) {
    plan.send(comm.next(), channel, own, count * es);
    return;
  }
  unsigned char* target = isRoot ? call.out + first * es : forward ? nullptr : work + first * es;
  auto received = plan.recv(comm.prev(), channel, count * es, [=, &call](size_t offset, void* piece, size_t len) {
    void* result = reduceReceived(call, target, own, offset, piece, len);
    if (isRoot && call.op == ncclAvg) call.kernels->divide(result, len / es, call.type, n);
  });
  if (isRoot) return;
  if (forward) {
    plan.forward(comm.next(), channel, received);
  } else {
    plan.send(comm.next(), channel, target, count * es, {received});
  }
}

}  // namespace nns::coll::detail
