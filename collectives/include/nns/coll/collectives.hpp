// nns/coll/collectives.hpp: ring collectives over a Communicator. Schedules only move pieces and call the kernel
// layer, so they do not know where buffers live. In-place when send == recv (as nccl.h defines it per call).
#pragma once

#include <cstddef>

#include "nns/coll/reduce.hpp"
#include "nns/core/communicator.hpp"

namespace nns::coll {

using core::Communicator;

void allReduce(Communicator& comm, const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
               KernelLayer& kernels = hostKernels());
// recv holds size() blocks of sendCount elements, in rank order.
void allGather(Communicator& comm, const void* send, void* recv, size_t sendCount, ncclDataType_t type,
               KernelLayer& kernels = hostKernels());
// send holds size() blocks of recvCount elements; rank r gets the reduction of block r.
void reduceScatter(Communicator& comm, const void* send, void* recv, size_t recvCount, ncclDataType_t type,
                   ncclRedOp_t op, KernelLayer& kernels = hostKernels());
void broadcast(Communicator& comm, const void* send, void* recv, size_t count, ncclDataType_t type, int root,
               KernelLayer& kernels = hostKernels());
void reduce(Communicator& comm, const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
            int root, KernelLayer& kernels = hostKernels());

}  // namespace nns::coll
