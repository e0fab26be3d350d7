// ring.cc: ring allreduce (reduce-scatter then all-gather), all-gather, reduce-scatter, and chain broadcast/reduce.
#include <algorithm>

#include "nns/coll/collectives.hpp"

namespace nns::coll {

namespace {

// Block b of `count` elements split over n ranks: the first count % n blocks get one element more.
struct Blocks {
  size_t count;
  int n;
  size_t offset(int b) const { return b * (count / n) + std::min<size_t>(b, count % n); }
  size_t length(int b) const { return count / n + (static_cast<size_t>(b) < count % n ? 1 : 0); }
};

unsigned char* at(void* base, size_t elements, size_t elementSize) {
  return static_cast<unsigned char*>(base) + elements * elementSize;
}

void checkType(ncclDataType_t type) {
  if (typeSize(type) == 0 || type == ncclFloat8e4m3 || type == ncclFloat8e5m2)
    throw core::CommError(std::string("data type ") + std::to_string(static_cast<int>(type)) +
                          " is not supported by the host kernels");
}

}  // namespace

void allReduce(Communicator& comm, const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
               KernelLayer& kernels) {
  checkType(type);
  const size_t es = typeSize(type);
  const int n = comm.size(), r = comm.rank();
  kernels.copy(recv, send, count * es);
  if (n > 1) {
    Blocks blocks{count, n};
    // Reduce-scatter: after n-1 steps this rank holds the full reduction of block r+1.
    for (int s = 0; s < n - 1; ++s) {
      int sendBlock = (r - s + n) % n, recvBlock = (r - s - 1 + 2 * n) % n;
      unsigned char* target = at(recv, blocks.offset(recvBlock), es);
      comm.exchange(at(recv, blocks.offset(sendBlock), es), blocks.length(sendBlock) * es,
                    blocks.length(recvBlock) * es, [&](size_t offset, const void* piece, size_t bytes) {
                      kernels.reduce(target + offset, piece, bytes / es, type, op);
                    });
    }
    int owned = (r + 1) % n;
    if (op == ncclAvg) kernels.divide(at(recv, blocks.offset(owned), es), blocks.length(owned), type, n);
    // All-gather of the reduced blocks.
    for (int s = 0; s < n - 1; ++s) {
      int sendBlock = (r + 1 - s + n) % n, recvBlock = (r - s + n) % n;
      unsigned char* target = at(recv, blocks.offset(recvBlock), es);
      comm.exchange(at(recv, blocks.offset(sendBlock), es), blocks.length(sendBlock) * es,
                    blocks.length(recvBlock) * es, [&](size_t offset, const void* piece, size_t bytes) {
                      kernels.copy(target + offset, piece, bytes);
                    });
    }
  } else if (op == ncclAvg) {
    kernels.divide(recv, count, type, 1);
  }
}

void allGather(Communicator& comm, const void* send, void* recv, size_t sendCount, ncclDataType_t type,
               KernelLayer& kernels) {
  checkType(type);
  const size_t es = typeSize(type), block = sendCount * es;
  const int n = comm.size(), r = comm.rank();
  kernels.copy(at(recv, r * sendCount, es), send, block);
  for (int s = 0; s < n - 1; ++s) {
    int sendBlock = (r - s + n) % n, recvBlock = (r - s - 1 + n) % n;
    unsigned char* target = at(recv, recvBlock * sendCount, es);
    comm.exchange(at(recv, sendBlock * sendCount, es), block, block,
                  [&](size_t offset, const void* piece, size_t bytes) { kernels.copy(target + offset, piece, bytes); });
  }
}

void reduceScatter(Communicator& comm, const void* send, void* recv, size_t recvCount, ncclDataType_t type,
                   ncclRedOp_t op, KernelLayer& kernels) {
  checkType(type);
  const size_t es = typeSize(type), block = recvCount * es;
  const int n = comm.size(), r = comm.rank();
  // A working copy, so the input stays untouched and in-place (recv inside send) works.
  void* work = comm.scratch(block * n);
  kernels.copy(work, send, block * n);
  for (int s = 0; s < n - 1; ++s) {
    int sendBlock = (r - s - 1 + n) % n, recvBlock = (r - s - 2 + 2 * n) % n;
    unsigned char* target = at(work, recvBlock * recvCount, es);
    comm.exchange(at(work, sendBlock * recvCount, es), block, block,
                  [&](size_t offset, const void* piece, size_t bytes) {
                    kernels.reduce(target + offset, piece, bytes / es, type, op);
                  });
  }
  kernels.copy(recv, at(work, r * recvCount, es), block);
  if (op == ncclAvg) kernels.divide(recv, recvCount, type, n);
}

void broadcast(Communicator& comm, const void* send, void* recv, size_t count, ncclDataType_t type, int root,
               KernelLayer& kernels) {
  checkType(type);
  const size_t bytes = count * typeSize(type);
  const int n = comm.size(), position = (comm.rank() - root + n) % n;
  if (n == 1 || position == 0) kernels.copy(recv, send, bytes);
  if (n == 1) return;
  auto* out = static_cast<unsigned char*>(recv);
  comm.chain(bytes, position > 0, position < n - 1, position == 0 ? recv : nullptr,
             [&](size_t offset, const void* piece, size_t length) -> const void* {
               if (position > 0) kernels.copy(out + offset, piece, length);
               return out + offset;
             });
}

void reduce(Communicator& comm, const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
            int root, KernelLayer& kernels) {
  checkType(type);
  const size_t es = typeSize(type), bytes = count * es;
  const int n = comm.size(), position = (comm.rank() - root - 1 + 2 * n) % n;  // the root comes last
  if (n == 1) {
    kernels.copy(recv, send, bytes);
    if (op == ncclAvg) kernels.divide(recv, count, type, 1);
    return;
  }
  const bool isRoot = comm.rank() == root;
  auto* partial = static_cast<unsigned char*>(isRoot ? recv : comm.scratch(bytes));
  const auto* own = static_cast<const unsigned char*>(send);
  comm.chain(bytes, position > 0, !isRoot, position == 0 ? send : nullptr,
             [&](size_t offset, const void* piece, size_t length) -> const void* {
               if (position == 0) return own + offset;  // the chain starts with this rank's data
               // partial = own op piece; in place (the root's recv is its send) own already sits in partial.
               kernels.copy(partial + offset, own + offset, length);
               kernels.reduce(partial + offset, piece, length / es, type, op);
               return partial + offset;
             });
  if (isRoot && op == ncclAvg) kernels.divide(recv, count, type, n);
}

}  // namespace nns::coll
