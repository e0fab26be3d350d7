// arguments.hpp: the collectives' argument checks, one text per refusal, shared by the C++ calls (which throw
// ArgumentError) and the C API (which refuses at the call with ncclInvalidArgument, before a group queues it).
#pragma once

#include <cstddef>
#include <string>

#include "nns/coll/reduce.hpp"  // ncclDataType_t, ncclRedOp_t, typeSize

namespace nns::coll::detail {

// How a call's two buffers relate, for the overlap check: the same size, in place when they are one (allreduce, and
// broadcast and reduce on the root); all-gather's send block inside its receive buffer, in place at rank x count;
// reduce-scatter's receive block inside its send buffer, in place at rank x count; or one buffer only (send, recv,
// and broadcast and reduce off the root, where the other is not read).
enum class Layout { kSame, kGather, kScatter, kOne };

// Why the call cannot take these arguments, or "": an unknown type or op, a count whose bytes (times `blocks`
// count-sized blocks in the largest buffer) no buffer can hold, a NULL buffer, or buffers that overlap without being
// the call's in-place form (nccl.h leaves that undefined; here it would reduce or copy over data not yet sent).
std::string argumentProblem(ncclDataType_t type, const void* send, const void* recv, size_t count, ncclRedOp_t op,
                            size_t blocks, Layout layout, int rank);

}  // namespace nns::coll::detail
