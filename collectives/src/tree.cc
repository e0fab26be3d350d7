// tree.cc: NCCL's double binary tree and the tree allreduce over it (reduce up, broadcast down, piece-pipelined).
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

void treeAllReduce(Communicator& comm, core::Plan& plan, const Call& call, const TreeLinks& tree, int phase,
                   size_t first, size_t count, int channel) {
  (void)comm;
  const size_t es = typeSize(call.type), bytes = count * es;
  unsigned char* out = call.out + first * es;
  if (phase == 0) {
    // The output already holds this rank's input; children's partial results are reduced into it as they arrive,
    // and each piece goes up once both children's pieces are in.
    std::vector<core::Plan::RecvRef> children;
    for (int child : tree.children) {
      if (child < 0) continue;
      children.push_back(plan.recv(child, channel, bytes, [=, &call](size_t offset, const void* piece, size_t len) {
        call.kernels->reduce(out + offset, piece, len / es, call.type, call.op);
      }));
    }
    if (tree.parent >= 0) plan.send(tree.parent, channel, out, bytes, std::move(children));
    return;
  }
  std::vector<core::Plan::RecvRef> fromParent;
  if (tree.parent >= 0)
    fromParent.push_back(plan.recv(tree.parent, channel, bytes, [=, &call](size_t offset, const void* piece, size_t len) {
      call.kernels->copy(out + offset, piece, len);
    }));
  for (int child : tree.children)
    if (child >= 0) plan.send(child, channel, out, bytes, fromParent);
}

}  // namespace detail
}  // namespace nns::coll
