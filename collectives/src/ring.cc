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

int mod(int a, int n) { return ((a % n) + n) % n; }

}  // namespace

// One ring over elements [first, first + count) on `channel`, added to `plan`. Step s of the reduce-scatter sends
// block r-s and reduces block r-s-1 arriving from the previous rank; the all-gather then forwards the finished
// blocks. The block sent at step s+1 is the block received at step s, so each send segment waits on the previous
// receive segment piece by piece: the whole allreduce is one pipeline, with no barrier between steps.
void ringAllReduce(Communicator& comm, core::Plan& plan, const Call& call, size_t first, size_t count, int channel) {
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
      plan.send(comm.next(), channel, in(sendBlock), bytes(sendBlock));
    } else {
      plan.send(comm.next(), channel, out(sendBlock), bytes(sendBlock), {previous});
    }
    unsigned char* target = out(recvBlock);
    const unsigned char* own = in(recvBlock);
    const bool last = s == n - 2;
    previous = plan.recv(comm.prev(), channel, bytes(recvBlock), [=, &call](size_t offset, const void* piece, size_t len) {
      // out = own op piece (own is out itself in place), then, for avg, the finished block is divided.
      call.kernels->reduceInto(target + offset, own + offset, piece, len / es, call.type, call.op);
      if (last && call.op == ncclAvg) call.kernels->divide(target + offset, len / es, call.type, n);
    });
  }
  for (int s = 0; s < n - 1; ++s) {
    const int sendBlock = mod(r + 1 - s, n), recvBlock = mod(r - s, n);
    plan.send(comm.next(), channel, out(sendBlock), bytes(sendBlock), {previous});
    unsigned char* target = out(recvBlock);
    previous = plan.recv(
        comm.prev(), channel, bytes(recvBlock),
        [=, &call](size_t offset, const void* piece, size_t len) { call.kernels->copy(target + offset, piece, len); },
        {}, target);
  }
}

void ringAllGather(Communicator& comm, core::Plan& plan, const Call& call, size_t blockCount, size_t first,
                   size_t count, int channel) {
  // Block b of the output lives at b * blockCount; this channel moves elements [first, first + count) of each.
  const int n = comm.size(), r = comm.rank();
  const size_t es = typeSize(call.type);
  auto out = [&](int b) { return call.out + (b * blockCount + first) * es; };
  core::Plan::RecvRef previous;
  for (int s = 0; s < n - 1; ++s) {
    const int sendBlock = mod(r - s, n), recvBlock = mod(r - s - 1, n);
    if (s == 0) {
      plan.send(comm.next(), channel, call.in + first * es, count * es);
    } else {
      plan.send(comm.next(), channel, out(sendBlock), count * es, {previous});
    }
    unsigned char* target = out(recvBlock);
    previous = plan.recv(
        comm.prev(), channel, count * es,
        [=, &call](size_t offset, const void* piece, size_t len) { call.kernels->copy(target + offset, piece, len); },
        {}, target);
  }
}

void ringReduceScatter(Communicator& comm, core::Plan& plan, const Call& call, size_t blockCount, size_t first,
                       size_t count, unsigned char* work, int channel) {
  // Step s sends block r-s-1 (the rank's own input at s = 0, the partial sum received at s-1 after that) and
  // reduces block r-s-2; the last step's block is r itself, reduced straight into the output. Partial sums live in
  // `work` (blockCount elements per block), never in the input, so the input stays untouched.
  const int n = comm.size(), r = comm.rank();
  const size_t es = typeSize(call.type);
  auto in = [&](int b) { return call.in + (b * blockCount + first) * es; };
  auto partial = [&](int b) { return work + (b * blockCount + first) * es; };
  core::Plan::RecvRef previous;
  for (int s = 0; s < n - 1; ++s) {
    const int sendBlock = mod(r - s - 1, n), recvBlock = mod(r - s - 2, n);
    if (s == 0) {
      plan.send(comm.next(), channel, in(sendBlock), count * es);
    } else {
      plan.send(comm.next(), channel, partial(sendBlock), count * es, {previous});
    }
    const bool last = s == n - 2;
    unsigned char* target = last ? call.out + first * es : partial(recvBlock);
    const unsigned char* own = in(recvBlock);
    previous = plan.recv(comm.prev(), channel, count * es, [=, &call](size_t offset, const void* piece, size_t len) {
      call.kernels->reduceInto(target + offset, own + offset, piece, len / es, call.type, call.op);
      if (last && call.op == ncclAvg) call.kernels->divide(target + offset, len / es, call.type, n);
    });
  }
}

void chainBroadcast(Communicator& comm, core::Plan& plan, const Call& call, int root, size_t first, size_t count,
                    int channel) {
  // Ranks in ring order from the root; each forwards piece by piece what it received.
  const int n = comm.size(), position = mod(comm.rank() - root, n);
  const size_t es = typeSize(call.type);
  unsigned char* out = call.out + first * es;
  if (position == 0) {
    plan.send(comm.next(), channel, call.in + first * es, count * es);
    return;
  }
  auto received = plan.recv(
      comm.prev(), channel, count * es,
      [=, &call](size_t offset, const void* piece, size_t len) { call.kernels->copy(out + offset, piece, len); }, {},
      out);
  if (position < n - 1) plan.send(comm.next(), channel, out, count * es, {received});
}

void chainReduce(Communicator& comm, core::Plan& plan, const Call& call, int root, size_t first, size_t count,
                 unsigned char* work, int channel) {
  // The chain starts after the root and ends at it: each rank adds its input to the partial result and passes it on.
  const int n = comm.size(), position = mod(comm.rank() - root - 1, n);
  const bool isRoot = comm.rank() == root;
  const size_t es = typeSize(call.type);
  const unsigned char* own = call.in + first * es;
  if (position == 0) {
    plan.send(comm.next(), channel, own, count * es);
    return;
  }
  unsigned char* target = (isRoot ? call.out : work) + first * es;
  auto received = plan.recv(comm.prev(), channel, count * es, [=, &call](size_t offset, const void* piece, size_t len) {
    call.kernels->reduceInto(target + offset, own + offset, piece, len / es, call.type, call.op);
    if (isRoot && call.op == ncclAvg) call.kernels->divide(target + offset, len / es, call.type, n);
  });
  if (!isRoot) plan.send(comm.next(), channel, target, count * es, {received});
}

}  // namespace nns::coll::detail
