// tree.cc: NCCL's double binary tree and the tree allreduce over it (reduce up, broadcast down, piece-pipelined).
#include <memory>

#include "schedule.hpp"

namespace nns::coll {

namespace {

// In-order binary tree over 0..n-1: a rank's lowest set bit says its height; rank 0 is the root with one child.
TreeLinks binaryTree(int n, int rank) {
  TreeLinks links;
  int bit = 1;
  while (bit < n && (bit & rank) == 0) bit <<= 1;
  if (rank == 0) {
    if (n > 1) links.children[1] = bit >> 1;  // bit is the first power of two >= n
    return links;
  }
  int up = (rank ^ bit) | (bit << 1);
  links.parent = up < n ? up : rank ^ bit;
  int low = bit >> 1;
  if (low == 0) return links;
  links.children[0] = rank - low;
  int right = rank + low;
  while (low > 0 && right >= n) {
    low >>= 1;
    right = rank + low;
  }
  links.children[1] = low > 0 ? right : -1;
  return links;
}

}  // namespace

void doubleBinaryTree(int size, int rank, TreeLinks trees[2]) {
  trees[0] = binaryTree(size, rank);
  // Tree 1 runs the same shape over relabelled ranks: mirrored when size is even (leaves of tree 0, the odd ranks,
  // become inner ranks), shifted by one when it is odd.
  auto toVirtual = [size](int r) { return size % 2 == 0 ? size - 1 - r : (r - 1 + size) % size; };
  auto fromVirtual = [size](int v) { return v < 0 ? -1 : size % 2 == 0 ? size - 1 - v : (v + 1) % size; };
  TreeLinks shape = binaryTree(size, toVirtual(rank));
  trees[1].parent = fromVirtual(shape.parent);
  trees[1].children[0] = fromVirtual(shape.children[0]);
  trees[1].children[1] = fromVirtual(shape.children[1]);
}

namespace detail {

void treeAllReduce(Communicator& comm, core::Plan& plan, const Call& call, const TreeLinks& tree, size_t first,
                   size_t count, int channel) {
  // One plan for both directions: each piece of the output becomes this rank's input combined with its children's
  // partial results as they arrive, goes up once both children's piece is in, and comes back down from the parent
  // into the same place. The root's pieces turn around as soon as they are complete, so the broadcast of the first
  // pieces overlaps the reduction of the later ones.
  const size_t es = typeSize(call.type), bytes = count * es;
  const unsigned char* in = call.in + first * es;
  unsigned char* out = call.out + first * es;
  const int children = (tree.children[0] >= 0) + (tree.children[1] >= 0);
  const bool root = tree.parent < 0;
  const int n = comm.size();
  // The first child's piece combines the input with it into the output (one pass, no copy of the input
  // beforehand); the second child's piece waits for the first's and adds to that, so a float sum is always
  // (input + first) + second, the same in every run (whichever arrived first was added first, and a rounding could
  // differ from run to run). For avg the root divides once the last child's piece is in.
  core::Plan::Refs fromChildren;
  for (int child : tree.children) {
    if (child < 0) continue;
    const bool first = fromChildren.empty(), last = fromChildren.size() + 1 == children;
    fromChildren.push_back(plan.recv(
        child, channel, bytes,
        [=, &call](size_t offset, const void* data, size_t len) {
          if (first) {
            call.kernels->reduceInto(out + offset, in + offset, data, len / es, call.type, call.op);
          } else {
            call.kernels->reduce(out + offset, data, len / es, call.type, call.op);
          }
          if (root && last && call.op == ncclAvg) call.kernels->divide(out + offset, len / es, call.type, n);
        },
        first ? core::Plan::Refs{} : fromChildren));
  }
  core::Plan::Refs down = fromChildren;
  if (!root) {
    // A leaf sends its input as it is; an inner rank sends what its children's shares made of it.
    plan.send(tree.parent, channel, children == 0 ? in : out, bytes, fromChildren);
    // Straight into the output when it is registered: the parent's piece can only arrive after this rank's piece
    // went up, so it never overwrites bytes a send still reads.
    down = {plan.recv(
        tree.parent, channel, bytes,
        [=, &call](size_t offset, const void* data, size_t len) { call.kernels->copy(out + offset, data, len); }, {},
        out)};
  }
  for (int child : tree.children)
    if (child >= 0) plan.send(child, channel, out, bytes, down);
}

}  // namespace detail
}  // namespace nns::coll
