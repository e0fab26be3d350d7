// doubling.cc: recursive-doubling allreduce for small messages: log2(n) pairwise exchanges of the whole message,
// the latency-optimal schedule (MPI libraries and Gloo use it below a few KiB; NCCL's GPUs have no equivalent
// need). Ranks beyond the largest power of two first fold their data into a partner and get the result back.
#include "schedule.hpp"

namespace nns::coll::detail {

int doublingRounds(int n) {
  int rounds = 0;
  while ((2 << rounds) <= n) ++rounds;
  return rounds;
}

unsigned char* doublingAllReduce(Communicator& comm, core::Plan& plan, const Call& call, size_t first, size_t count,
                                 size_t totalCount, unsigned char* work, int channel) {
  const int n = comm.size(), r = comm.rank();
  const int rounds = doublingRounds(n), extra = n - (1 << rounds);
  const size_t es = typeSize(call.type), bytes = count * es;
  // Every round's result has a buffer of its own (rounds + 1 of them: the fold, then one per round), so no buffer
  // is written while a send may still read it.
  auto buffer = [&](int k) { return work + (static_cast<size_t>(k) * totalCount + first) * es; };
  const unsigned char* in = call.in + first * es;
  unsigned char* out = call.out + first * es;
  if (r < 2 * extra && r % 2 == 0) {
    // Folded: hand the input to the odd neighbour, receive the result from it.
    plan.send(r + 1, channel, in, bytes);
    plan.recv(
        r + 1, channel, bytes,
        [=, &call](size_t offset, const void* piece, size_t len) { call.kernels->copy(out + offset, piece, len); }, {},
        out);
    return nullptr;
  }
  const int virtualRank = r < 2 * extra ? r / 2 : r - extra;
  auto realRank = [extra](int v) { return v < extra ? 2 * v + 1 : v + extra; };
  const unsigned char* current = in;
  core::Plan::Refs currentReady;
  // One pass per received piece: target = source op piece (piece op source where the partner is the lower rank),
  // and for avg the last one divides. Both partners of an exchange put the lower rank's data first, so both compute
  // the same bits even where an op's result depends on the order (max and min with a NaN or a signed zero): every
  // rank ends with the same result, as after a ring or a tree.
  auto reduceInto = [&](unsigned char* target, const unsigned char* source, bool last, bool sourceFirst = true) {
    return [=, &call](size_t offset, const void* piece, size_t len) {
      const void* mine = source + offset;
      call.kernels->reduceInto(target + offset, sourceFirst ? mine : piece, sourceFirst ? piece : mine, len / es,
                               call.type, call.op);
      if (last && call.op == ncclAvg) call.kernels->divide(target + offset, len / es, call.type, n);
    };
  };
  if (r < 2 * extra) {
    unsigned char* folded = buffer(0);
    currentReady = {plan.recv(r - 1, channel, bytes, reduceInto(folded, current, rounds == 0))};
    current = folded;
  }
  for (int k = 0; k < rounds; ++k) {
    const int partner = realRank(virtualRank ^ (1 << k));
    plan.send(partner, channel, current, bytes, currentReady);
    // Out of place, the last round writes the output itself. In place it may not: the output is the input, which
    // an earlier send (to another partner) may not have read yet when this round's pieces arrive.
    const bool last = k == rounds - 1;
    unsigned char* next = last && call.in != call.out ? out : buffer(k + 1);
    const bool lower = (virtualRank & (1 << k)) == 0;
    currentReady = {plan.recv(partner, channel, bytes, reduceInto(next, current, last, lower), currentReady)};
    current = next;
  }
  if (r < 2 * extra) plan.send(r - 1, channel, current, bytes, currentReady);
  return current == out ? nullptr : const_cast<unsigned char*>(current);
}

}  // namespace nns::coll::detail
