// nns/cuda/slot_memory.hpp: where a communicator that moves GPU buffers keeps its slots, chosen as NCCL chooses GPU
// Direct RDMA, and the one-line reason for the choice.
#pragma once

#include <memory>
#include <string>

#include "nns/core/communicator.hpp"

namespace nns::cuda {

// For CommOptions::slotMemory. GPU memory on the current CUDA device, registered with the plugin as NCCL_PTR_CUDA,
// when the plugin's net device says it can read and write it (ptrSupport has NCCL_PTR_CUDA) and $NNS_GDR is not
// "0"; received pieces are then flushed with iflush before the GPU reads them where NCCL would flush (the device's
// forceFlush property, $NNS_NET_FORCE_FLUSH=1, a GPU of compute capability below 9.0, or one attached to its CPU by
// C2C, whatever the NIC's distance). Otherwise pinned host memory (cudaHostAlloc, mapped: the kernels read received
// pieces in place), and the GPU's copy engine moves each outgoing piece into its slot while earlier pieces are on the
// wire. Copies run on a stream of their own.
// The choice and its reason are written to stderr when $NNS_DEBUG or $NCCL_DEBUG is INFO, and are what
// Communicator::slotMemoryDescription() returns. Throws core::CommError without a usable CUDA device, and with
// ncclInvalidUsage when $NNS_GDR or $NNS_NET_FORCE_FLUSH is set to anything but 0 or 1 (checked first, on any machine).
std::shared_ptr<core::SlotMemory> chooseSlotMemory(core::Net& net, int netDevice);

}  // namespace nns::cuda
