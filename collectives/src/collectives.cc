// collectives.cc: the public collective calls: argument checks, the one-rank cases, the algorithm choice, channel
// split, and running the schedules' plans on the communicator's progress thread.
#include <sched.h>
#include <strings.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "arguments.hpp"
#include "nccl_net/sdk/result.hpp"
#include "nns/core/loader.hpp"
#include "schedule.hpp"

namespace nns::coll {

using detail::Call;

namespace {

// The argument checks as exceptions (the C API returns the same texts).
void checkArguments(ncclDataType_t type, const void* send, const void* recv, size_t count, ncclRedOp_t op,
                    size_t blocks, detail::Layout layout, int rank) {
  if (std::string problem = detail::argumentProblem(type, send, recv, count, op, blocks, layout, rank);
      !problem.empty())
    throw core::ArgumentError(problem);
}

void checkRoot(const Communicator& comm, int root) {
  if (root < 0 || root >= comm.size())
    throw core::ArgumentError("root " + std::to_string(root) + " is not a rank of this communicator of " +
                              std::to_string(comm.size()));
}

// Part c of `count` elements split over the channels (contiguous, the first parts one element longer).
std::pair<size_t, size_t> channelPart(size_t count, int channels, int c) {
  size_t base = count / channels, extra = count % channels;
  size_t first = c * base + std::min<size_t>(c, extra);
  return {first, base + (static_cast<size_t>(c) < extra ? 1 : 0)};
}

// A collective of count 0 is a no-op, as in NCCL (whose enqueue drops it): nothing to compare or move, and no peer
// to wait for, so a rank may make it alone. On a failed communicator it fails as every call does.
bool isNoOp(const Communicator& comm, size_t count) {
  if (count != 0) return false;
  comm.throwIfFailed();
  return true;
}

// The slots must be memory the kernel layer can read: GPU slots (GPU Direct) serve GPU buffers only; host slots that
// are not pinned serve host buffers only.
void checkPlacement(const Communicator& comm, KernelLayer& kernels) {
  if (kernels.onDevice() && !comm.slotsDeviceReadable())
    throw core::ArgumentError("GPU buffers on a communicator whose slots the GPU cannot read (" +
                              comm.slotMemoryDescription() +
                              "): make it with CommOptions::slotMemory = nns::cuda::chooseSlotMemory");
  if (!kernels.onDevice() && !comm.slotsHostReadable())
    throw core::ArgumentError("host buffers on a communicator whose slots are GPU memory (" +
                              comm.slotMemoryDescription() + ")");
}

// GPU kernels load and store each element as its own type, which the GPU requires at a multiple of its size: a
// misaligned element faults (cudaErrorMisalignedAddress), a sticky error that leaves the process's CUDA context
// unusable. So a reduction's GPU buffers are refused here, before anything runs (the host layer takes any address),
// as is a plain host buffer beside a GPU one (an illegal address, as sticky).
// So is a GPU buffer on another GPU than GPU Direct slots: the kernels run on the buffer's GPU and read the slots,
// another GPU's memory, which faults without peer access (as sticky). NCCL binds a communicator to one GPU too.
// The other collectives only copy (cudaMemcpyAsync), which takes any address. nullptr: a buffer the call ignores.
void checkDeviceBuffers(const Communicator& comm, const KernelLayer& kernels, ncclDataType_t type, size_t count,
                        const void* send, const void* recv) {
  if (!kernels.onDevice() || count == 0) return;
  const size_t es = typeSize(type);
  const int slotsGpu = comm.slotsGpu();
  for (auto [name, buffer] : {std::pair{"send", send}, std::pair{"receive", recv}}) {
    // A plain host buffer beside a GPU one: the layer is the GPU's, whose kernels fault on pageable host memory.
    if (buffer != nullptr && !kernels.reaches(buffer))
      throw core::ArgumentError(std::string("the ") + name +
                                " buffer is plain host memory, which this call's GPU kernels cannot reach: a "
                                "reduction on GPU buffers needs both in GPU memory (or in host memory pinned or "
                                "registered with CUDA)");
    if (const int gpu = buffer != nullptr && slotsGpu >= 0 ? kernels.gpuOf(buffer) : -1; gpu >= 0 && gpu != slotsGpu)
      throw core::ArgumentError(std::string("the ") + name + " buffer is on GPU " + std::to_string(gpu) +
                                ", and this communicator's slots are GPU " + std::to_string(slotsGpu) +
                                "'s memory (GPU Direct), which kernels on GPU " + std::to_string(gpu) +
                                " cannot read without peer access: make the communicator with GPU " +
                                std::to_string(gpu) + " current (cudaSetDevice), or use buffers on GPU " +
                                std::to_string(slotsGpu));
    if (reinterpret_cast<uintptr_t>(buffer) % es == 0) continue;
    char text[200];
    std::snprintf(text, sizeof(text),
                  "the %s buffer %p is not aligned to its %s elements: GPU buffers must start at a multiple of the "
                  "element size (%zu bytes)",
                  name, buffer, typeName(type), es);
    throw core::ArgumentError(text);
  }
}

// Working memory where the kernel layer's buffers live, the communicator's: on the GPU of `near` (one of the
// operation's buffers) for the GPU layer, else in host memory. Freed with the communicator (a GPU layer's own, kept
// per thread, held the largest reduce-scatter's input on every calling thread until it ended).
unsigned char* workspace(Communicator& comm, KernelLayer& kernels, size_t bytes, const void* near) {
  return static_cast<unsigned char*>(kernels.onDevice() ? comm.deviceScratch(bytes, near) : comm.scratch(bytes));
}

// Premultiplied sums, as NCCL runs them (ncclDevPreMulSum): each rank's input times a scalar of the type, then
// summed. A premultiplied-sum op brings its scalar; a floating-point avg is one with 1/n (avgScalar), so the sum
// stays in range wherever the average is (float16 60000 over 2 ranks is 60000, not the infinity of its sum). An
// integer avg sums, then divides (ncclDevSumPostDiv: the schedules' finalize).
struct Premultiplier {
  const void* scalar = nullptr;  // null: no premultiplication
  unsigned char avg[8] = {};     // avg's scalar, when it is the one
  Premultiplier(const ReduceOp& op, ncclDataType_t type, int ranks) {
    if (op.premultiplied)
      scalar = op.scalar;
    else if (op.op == ncclAvg && avgScalar(type, ranks, avg))
      scalar = avg;
  }
  explicit operator bool() const { return scalar != nullptr; }
};

// The rings premultiply piece by piece as their own elements meet the received ones (Call::scalar), as NCCL's
// kernels do on their first read; the tree, recursive doubling, the chains and one rank premultiply the whole input
// into `scaled` (count elements) first, and the call becomes that sum: one more pass over the input, on sizes (the
// tree's and doubling's) that stay in cache.
void premultiplyInput(Call& call, const Premultiplier& by, void* scaled, size_t count) {
  call.kernels->premultiply(scaled, call.in, count, call.type, by.scalar);
  call.in = static_cast<const unsigned char*>(scaled);
  call.op = ncclSum;
}

void premultiplyInRing(Call& call, const Premultiplier& by, unsigned char* pieceScratch,
                       unsigned char* blockScratch = nullptr) {
  call.scalar = by.scalar;
  call.op = ncclSum;
  call.pieceScratch = pieceScratch;
  call.blockScratch = blockScratch;
}

// What the op is called in errors and in NNS_CHECK_CALLS's comparison.
const char* reduceOpName(const ReduceOp& op) {
  return op.premultiplied ? "premulsum" : opName(op.op);
}

// A premultiplied sum's scalar is required (the rest of the op is checked with the arguments).
void checkScalar(const ReduceOp& op) {
  if (op.premultiplied && op.scalar == nullptr) throw core::ArgumentError("a premultiplied sum without its scalar");
}

size_t envBytes(const char* name, size_t fallback);  // below

Call makeCall(const Communicator& comm, const void* send, void* recv, ncclDataType_t type, ncclRedOp_t op,
              KernelLayer& kernels) {
  checkPlacement(comm, kernels);
  // NNS_PIECE_BYTES is used inside the operation (pieceFor), where a malformed value would fail the communicator for
  // good, on every rank: read here first, so that it is refused at the call and the communicator stays usable.
  envBytes("NNS_PIECE_BYTES", 0);
  return Call{static_cast<const unsigned char*>(send), static_cast<unsigned char*>(recv), type, op, &kernels};
}

// What the ranks must agree on for NNS_CHECK_CALLS (Communicator::submit with a call), and what the operation's
// errors name: the call's name, count and type, and the op, root or algorithm where the call has one.
core::CallInfo describeCall(const char* name, size_t count, ncclDataType_t type, const char* op = nullptr,
                            int root = -1, const char* algorithm = nullptr) {
  return core::CallInfo{name, count, typeName(type), op, root, algorithm};
}

size_t envBytes(const char* name, size_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  unsigned long long value = std::strtoull(text, &end, 10);
  // strtoull would take "-1" for the largest count.
  if (end == text || *end != '\0' || errno != 0 || std::strchr(text, '-') != nullptr)
    throw core::CommError(std::string(name) + "=" + text + " is not a byte count", ncclInvalidUsage);
  return value;
}

// The pipeline piece for a schedule that forwards `bytes` per hop: about 1/`depth` of it so that several pieces are
// in flight along a path, at least `minimum` (per-message costs), at most a slot; a multiple of 64 bytes (as slots
// are), so no piece splits an element. $NNS_PIECE_BYTES fixes it (rounded the same way).
size_t pieceFor(const Communicator& comm, size_t bytes, size_t depth, size_t minimum) {
  const size_t slot = comm.options().slotBytes;
  size_t piece = envBytes("NNS_PIECE_BYTES", 0);
  if (piece == 0) piece = std::max(minimum, (bytes / depth + 4095) / 4096 * 4096);
  piece = std::min(piece, slot);
  piece -= piece % 64;
  return piece == 0 ? slot : piece;
}

// Whether schedules send on received pieces from their slots (Plan::forward) instead of staging them again: for
// host buffers, with at least two slots (a forward holds one), unless what would be forwarded is the output `out`
// and it is registered (the plugin then reads and writes it in place already; no `out`: partial results, which
// live in working memory otherwise). GPU kernel layers keep staging: their slots may be memory the kernels should
// not write. A local choice: what goes on the wire is the same either way.
bool forwardFromSlots(Communicator& comm, const KernelLayer& kernels, const void* out = nullptr, size_t bytes = 0) {
  return !kernels.onDevice() && comm.options().slots >= 2 && (out == nullptr || !comm.registered(out, bytes));
}

// A call's host buffers lent to its operation as registered (Communicator::registerForCall), before its plan is
// built: where the plugin's registration costs nothing, its sends then leave from them and its plain-copy receives
// land in them, not copied through the slots. A local choice, as forwardFromSlots: the wire is the same. GPU kernel
// layers stage through host slots or use GPU slots, which this is not for.
void lendBuffers(Communicator& comm, const KernelLayer& kernels,
                 std::initializer_list<std::pair<const void*, size_t>> buffers) {
  if (kernels.onDevice()) return;
  for (auto [data, bytes] : buffers)
    if (data != nullptr && bytes > 0) comm.registerForCall(data, bytes);  // a buffer this rank does not have: none
}

// Elements per block in one round of a ring whose pieces are `piece` bytes: half the slots' pieces, so a rank's
// forwards never hold all its slots (Plan::forward). Every rank cuts the same rounds whether it forwards or not,
// since they decide the segments on the wire; 0 (one round) with a single slot.
size_t roundElements(const Communicator& comm, size_t piece, size_t elementSize) {
  const int slots = comm.options().slots;
  return slots < 2 ? 0 : piece / elementSize * static_cast<size_t>(slots / 2);
}

// Calls step(first, count) for consecutive rounds of at most `round` elements over [first, first + count).
template <class Step>
void inRounds(size_t first, size_t count, size_t round, Step&& step) {
  if (round == 0 || count <= round) {
    step(first, count);
    return;
  }
  for (size_t done = 0; done < count; done += round) step(first + done, std::min(round, count - done));
}

}  // namespace

const char* algorithmName(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::Ring: return "ring";
    case Algorithm::Tree: return "tree";
    case Algorithm::Doubling: return "doubling";
    case Algorithm::CollNet: return "collnet";
    default: return "auto";
  }
}

bool parseAlgorithm(const char* text, Algorithm* algorithm) {
  if (strcasecmp(text, "rd") == 0) {
    *algorithm = Algorithm::Doubling;
    return true;
  }
  for (Algorithm a : {Algorithm::Auto, Algorithm::Ring, Algorithm::Tree, Algorithm::Doubling, Algorithm::CollNet}) {
    if (strcasecmp(text, algorithmName(a)) == 0) {
      *algorithm = a;
      return true;
    }
  }
  return false;
}

AllReduceLimits allReduceLimits(const Communicator& comm) {
  return {envBytes("NNS_DOUBLING_MAX_BYTES", comm.size() == 2 ? kTwoRankDoublingMaxBytes : kDefaultDoublingMaxBytes),
          envBytes("NNS_TREE_MAX_BYTES", kDefaultTreeMaxBytes), kTreeMinRanks};
}

namespace {
// $NNS_ALGO (Auto when unset or empty); a malformed value is a CommError (ncclInvalidUsage).
Algorithm algorithmFromEnv() {
  Algorithm fromEnv = Algorithm::Auto;
  if (const char* env = std::getenv("NNS_ALGO"); env != nullptr && *env != '\0' && !parseAlgorithm(env, &fromEnv))
    throw core::CommError(std::string("NNS_ALGO=") + env + ": ring, tree, doubling, collnet or auto", ncclInvalidUsage);
  return fromEnv;
}

// chooseAllReduce, saying whether the collNet was chosen by NCCL_COLLNET_ENABLE (a choice Auto may take back where
// the collNet cannot serve the call) rather than by name.
Algorithm chooseAllReduce(const Communicator& comm, size_t bytes, Algorithm requested, bool* collNetByEnable);
}  // namespace

Algorithm chooseAllReduce(const Communicator& comm, size_t bytes, Algorithm requested) {
  bool byEnable = false;
  return chooseAllReduce(comm, bytes, requested, &byEnable);
}

namespace {
Algorithm chooseAllReduce(const Communicator& comm, size_t bytes, Algorithm requested, bool* collNetByEnable) {
  *collNetByEnable = false;
  // An enum value cast from an integer that names no algorithm ran as the tree and was called "auto" in messages.
  if (requested != Algorithm::Auto && requested != Algorithm::Ring && requested != Algorithm::Tree &&
      requested != Algorithm::Doubling && requested != Algorithm::CollNet)
    throw core::ArgumentError("algorithm " + std::to_string(static_cast<int>(requested)) +
                              " is none of Auto, Ring, Tree, Doubling, CollNet");
  // Every knob is read at every call, whichever of them decides: a malformed one is refused at once, not first on the
  // day a size or rank count reaches it.
  const Algorithm fromEnv = algorithmFromEnv();
  const AllReduceLimits limits = allReduceLimits(comm);
  if (requested != Algorithm::Auto) return requested;
  if (fromEnv != Algorithm::Auto) return fromEnv;
  if (collNetEnabled()) {
    *collNetByEnable = true;
    return Algorithm::CollNet;
  }
  return bySize(comm, bytes, limits);
}

// Why no collNet can take this call ("" when one could): the call's own properties, alike on every rank, so known
// before anything moves.
std::string callRefusal(KernelLayer& kernels, const ReduceOp* op) {
  if (kernels.onDevice()) return "the collNet path takes host buffers, and these are GPU memory";
  if (op != nullptr && op->premultiplied) return "a premultiplied sum is no op a collNet reduces";
  return "";
}

// The collNet for `collective` ("allreduce", "allgather" or "reducescatter"), connected at the first such call on
// every rank at once (they all run this call); nullptr with `why` where it cannot take the call. Decided on what
// every rank's collNet said (Communicator::collNet), so every rank answers alike. `perRank`: the elements each rank
// puts in an operation at most, set when the link is returned.
Communicator::CollNetLink* collNetFor(Communicator& comm, const char* collective, ncclDataType_t type,
                                      const ReduceOp* op, size_t* perRank, std::string* why) {
  Communicator::CollNetLink* link = comm.collNet(why);
  if (link == nullptr) return nullptr;
  const bool gathers = std::strcmp(collective, "allgather") == 0,
             scatters = std::strcmp(collective, "reducescatter") == 0;
  if ((gathers && !link->allGather) || (scatters && !link->reduceScatter)) {
    const char* call = gathers ? "iallgather" : "ireducescatter";
    const int without = gathers ? link->withoutAllGather : link->withoutReduceScatter;
    *why = (without != comm.rank()
                ? "rank " + std::to_string(without) + "'s collNet"
                : link->coll->name() + std::string(" (ncclCollNet_v") + std::to_string(link->coll->version()) + ")") +
           " has no " + call + " (ncclCollNet_v8 and later may have one)";
    return nullptr;
  }
  if (op != nullptr && !link->canReduce(type, op->op)) {
    *why = link->coll->name() + std::string("'s reduceSupport says no to this type and op");
    return nullptr;
  }
  // An all-gather's or a reduce-scatter's operation holds every rank's part in one slot.
  const size_t ranks = gathers || scatters ? static_cast<size_t>(comm.size()) : 1;
  *perRank = link->slotBytes / typeSize(type) / ranks;
  if (*perRank == 0) {
    *why = "the collNet's " + std::to_string(link->slotBytes) + "-byte slots hold no element from each of " +
           std::to_string(ranks) + " ranks";
    return nullptr;
  }
  return link;
}

// `count` elements through the collNet in parts of `perPart` at most, each in a slot pair, with as many parts in
// flight as there are pairs (NCCL's proxy keeps NCCL_STEPS), completed in order. stage(slot, first, elements) copies
// a part into the send slot, once; post(slot, first, elements, &request) posts it (a NULL request is "not now": posted
// again on the next round, as NCCL's proxy does); finish(slot, first, elements) copies its result out of the receive
// slot. Registered calls stage and finish nothing: their parts are windows of the call's own buffers. No allocation:
// the parts in flight are kept in a fixed array.
template <class Stage, class Post, class Finish>
void throughCollNet(Communicator& comm, Communicator::CollNetLink& link, const char* collective, size_t count,
                    size_t perPart, Stage stage, Post post, Finish finish) {
  struct Part {
    size_t first = 0, elements = 0;
    void* request = nullptr;
  };
  std::array<Part, NCCL_NET_MAX_REQUESTS> parts;
  const size_t slots = std::min(link.sendSlots.size(), parts.size());
  size_t next = 0, head = 0, inFlight = 0;
  bool staged = false;                                     // the next part is in its send slot already
  const std::string call = std::string("i") + collective;  // the plugin's call (within the short-string buffer)
  auto deadline = std::chrono::steady_clock::now() + comm.options().timeout;
  while (next < count || inFlight > 0) {
    comm.stopIfAborted();  // nnsCommAbort from another thread ends the call at once, as on the ring
    bool moved = false;
    while (next < count && inFlight < slots) {
      const size_t slot = (head + inFlight) % slots;
      const size_t elements = std::min(perPart, count - next);
      if (!staged) stage(slot, next, elements);
      staged = true;
      void* request = nullptr;
      comm.checkCollNet(post(slot, next, elements, &request), call.c_str());
      if (request == nullptr) break;
      parts[slot] = {next, elements, request};
      next += elements;
      ++inFlight;
      staged = false;
      moved = true;
    }
    if (inFlight > 0) {
      int done = 0, size = 0;
      comm.checkCollNet(link.coll->test(parts[head].request, &done, &size), "test");
      if (done != 0) {
        finish(head, parts[head].first, parts[head].elements);
        head = (head + 1) % slots;
        --inFlight;
        moved = true;
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (moved) {
      deadline = now + comm.options().timeout;
      comm.noteProgress();
      continue;
    }
    // The other ranks' processes (and, with the star example, the rank that reduces) need the core more than a
    // busy test loop does: with more ranks than cores, spinning held each part for a whole time slice (4 ms).
    sched_yield();
    if (now > deadline) {
      throw core::CommError("rank " + std::to_string(comm.rank()) + ": " + collective + " through the collNet: no " +
                                "part completed within " + std::to_string(comm.options().timeout.count()) + " ms (" +
                                std::to_string(next) + " of " + std::to_string(count) + " elements posted)",
                            ncclRemoteError);
    }
  }
}

// A call's host buffers registered with the collNet for the call (NCCL's registered path), deregistered when it
// ends, even by an exception: `outer`, and `inner` unless it lies inside `outer` (in place), where outer's
// registration serves both. A regMr that fails leaves neither registered (held() false): the rank then stages the
// same windows through its slots (as NCCL's proxy does a buffer it could not register), since the other ranks post
// theirs as agreed; said at WARN the first time on the communicator, at INFO after.
class CollNetCallBuffers {
 public:
  CollNetCallBuffers(Communicator& comm, Communicator::CollNetLink& link, const void* outer, size_t outerBytes,
                     const void* inner, size_t innerBytes)
      : link_(link) {
    ncclResult_t result = link.coll->regMr(link.comm, const_cast<void*>(outer), outerBytes, NCCL_PTR_HOST, &outer_);
    size_t failedBytes = outerBytes;
    const auto* o = static_cast<const unsigned char*>(outer);
    const auto* i = static_cast<const unsigned char*>(inner);
    if (result == ncclSuccess && i >= o && i + innerBytes <= o + outerBytes) {
      inner_ = outer_;
      held_ = innerInOuter_ = true;
      return;
    }
    if (result == ncclSuccess) {
      result = link.coll->regMr(link.comm, const_cast<void*>(inner), innerBytes, NCCL_PTR_HOST, &inner_);
      held_ = result == ncclSuccess;
      if (held_) return;
      failedBytes = innerBytes;
      (void)link.coll->deregMr(link.comm, outer_);
    }
    outer_ = inner_ = nullptr;
    const bool first = !link.registrationFailed;
    link.registrationFailed = true;
    core::hostLogger(
        first ? NCCL_LOG_WARN : NCCL_LOG_INFO, NCCL_COLL | NCCL_NET, __FILE__, __LINE__,
        "rank %d: collNet %s regMr of a call's buffer (%zu bytes) returned %s: this rank stages the call's "
        "windows through its slots, as it does each call whose buffers it cannot register (the other ranks "
        "are unaffected)",
        comm.rank(), link.coll->name(), failedBytes, nccl_net::sdk::resultName(result));
  }
  ~CollNetCallBuffers() {
    if (!held_) return;
    if (!innerInOuter_) (void)link_.coll->deregMr(link_.comm, inner_);
    (void)link_.coll->deregMr(link_.comm, outer_);
  }
  CollNetCallBuffers(const CollNetCallBuffers&) = delete;
  CollNetCallBuffers& operator=(const CollNetCallBuffers&) = delete;
  bool held() const { return held_; }  // not outer_ != nullptr: a collNet may hand back a NULL mhandle
  void* outer() const { return outer_; }
  void* inner() const { return inner_; }

 private:
  Communicator::CollNetLink& link_;
  void* outer_ = nullptr;
  void* inner_ = nullptr;
  bool held_ = false;
  bool innerInOuter_ = false;  // not inner_ == outer_: two registrations may both have a NULL mhandle
};

// Whether a call whose every rank puts in `bytes` goes through the collNet from its own buffers: the same answer on
// every rank (the link's registersCalls was agreed, and every rank has the same `bytes`).
bool registersCall(const Communicator::CollNetLink& link, size_t bytes) {
  return link.registersCalls && bytes >= Communicator::kCallRegistrationMinBytes;
}

// Where a rank's part of a window starts inside its block [begin, begin + blockSize) when the window starts at
// `offset` (the same unit): NCCL's proxy points sendData (all-gather) and recvData (reduce-scatter) there, at the
// window's start where it lies inside the block, else at the block's start.
size_t firstInWindow(size_t begin, size_t blockSize, size_t offset) {
  return offset > begin && offset < begin + blockSize ? offset - begin : 0;
}

void collNetAllReduce(Communicator& comm, Communicator::CollNetLink& link, KernelLayer& kernels, const void* send,
                      void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, size_t perPart) {
  const size_t es = typeSize(type);
  auto* in = static_cast<unsigned char*>(const_cast<void*>(send));
  auto* out = static_cast<unsigned char*>(recv);
  if (registersCall(link, count * es)) {
    const CollNetCallBuffers registered(comm, link, recv, count * es, send, count * es);
    if (registered.held()) {
      throughCollNet(
          comm, link, "allreduce", count, perPart, [](size_t, size_t, size_t) {},
          [&](size_t, size_t first, size_t elements, void** request) {
            return link.coll->iallreduce(link.comm, in + first * es, out + first * es, elements, type, op,
                                         registered.inner(), registered.outer(), request);
          },
          [](size_t, size_t, size_t) {});
      return;
    }
  }
  // Copied through the slots: also where this rank could not register the call's buffers (the same parts).
  throughCollNet(
      comm, link, "allreduce", count, perPart,
      [&](size_t slot, size_t first, size_t elements) {
        kernels.copy(link.sendSlots[slot], in + first * es, elements * es);
      },
      [&](size_t slot, size_t, size_t elements, void** request) {
        return link.coll->iallreduce(link.comm, link.sendSlots[slot], link.recvSlots[slot], elements, type, op,
                                     link.mhandle, link.mhandle, request);
      },
      [&](size_t slot, size_t first, size_t elements) {
        kernels.copy(out + first * es, link.recvSlots[slot], elements * es);
      });
}

// Copied through the slots, each operation gathers the full window: `perRank` elements of every rank's block, rank
// by rank, in the receive slot (one part). Registered, the operations walk the output in windows of a slot, each
// rank's sendData at its first byte inside the window, as NCCL's proxy posts them.
void collNetAllGather(Communicator& comm, Communicator::CollNetLink& link, KernelLayer& kernels, const void* send,
                      void* recv, size_t sendCount, ncclDataType_t type, size_t perRank) {
  const size_t es = typeSize(type), n = static_cast<size_t>(comm.size()), block = sendCount * es;
  auto* in = static_cast<unsigned char*>(const_cast<void*>(send));
  auto* out = static_cast<unsigned char*>(recv);
  std::array<ncclNetSGE_v12_t, NCCL_NET_MAX_REQUESTS> receive{};  // kept until the part completes
  if (registersCall(link, block)) {
    const CollNetCallBuffers registered(comm, link, recv, n * block, send, block);
    const size_t mine = static_cast<size_t>(comm.rank()) * block;
    if (registered.held()) {
      throughCollNet(
          comm, link, "allgather", n * sendCount, link.slotBytes / es, [](size_t, size_t, size_t) {},
          [&](size_t slot, size_t first, size_t elements, void** request) {
            const size_t offset = first * es, bytes = elements * es;
            receive[slot] = {registered.outer(), out + offset, bytes};
            return link.coll->iallgather(link.comm, in + firstInWindow(mine, block, offset), 1, &receive[slot], block,
                                         offset, bytes, registered.inner(), request);
          },
          [](size_t, size_t, size_t) {});
      return;
    }
    // The same windows staged: this rank's bytes inside each in its send slot, the window gathered in its receive
    // slot and copied out.
    throughCollNet(
        comm, link, "allgather", n * sendCount, link.slotBytes / es,
        [&](size_t slot, size_t first, size_t elements) {
          const size_t from = std::max(first * es, mine), to = std::min((first + elements) * es, mine + block);
          if (from < to) kernels.copy(link.sendSlots[slot], in + (from - mine), to - from);
        },
        [&](size_t slot, size_t first, size_t elements, void** request) {
          receive[slot] = {link.mhandle, link.recvSlots[slot], elements * es};
          return link.coll->iallgather(link.comm, link.sendSlots[slot], 1, &receive[slot], block, first * es,
                                       elements * es, link.mhandle, request);
        },
        [&](size_t slot, size_t first, size_t elements) {
          kernels.copy(out + first * es, link.recvSlots[slot], elements * es);
        });
    return;
  }
  throughCollNet(
      comm, link, "allgather", sendCount, perRank,
      [&](size_t slot, size_t first, size_t elements) {
        kernels.copy(link.sendSlots[slot], in + first * es, elements * es);
      },
      [&](size_t slot, size_t, size_t elements, void** request) {
        receive[slot] = {link.mhandle, link.recvSlots[slot], n * elements * es};
        return link.coll->iallgather(link.comm, link.sendSlots[slot], 1, &receive[slot], elements * es, 0,
                                     n * elements * es, link.mhandle, request);
      },
      [&](size_t slot, size_t first, size_t elements) {
        for (size_t r = 0; r < n; ++r)
          kernels.copy(out + (r * sendCount + first) * es, link.recvSlots[slot] + r * elements * es, elements * es);
      });
}

// Copied through the slots, each operation reduces the full window: `perRank` elements of every rank's block r, rank
// by rank, in the send slot (one part); this rank gets its block's. Registered, the operations walk the input in
// windows of a slot, each rank's recvData at its first element inside the window, as NCCL's proxy posts them.
void collNetReduceScatter(Communicator& comm, Communicator::CollNetLink& link, KernelLayer& kernels, const void* send,
                          void* recv, size_t recvCount, ncclDataType_t type, ncclRedOp_t op, size_t perRank) {
  const size_t es = typeSize(type), n = static_cast<size_t>(comm.size());
  const auto* in = static_cast<const unsigned char*>(send);
  auto* out = static_cast<unsigned char*>(recv);
  std::array<ncclNetSGE_v12_t, NCCL_NET_MAX_REQUESTS> input{};  // kept until the part completes
  if (registersCall(link, recvCount * es)) {
    const CollNetCallBuffers registered(comm, link, send, n * recvCount * es, recv, recvCount * es);
    const size_t mine = static_cast<size_t>(comm.rank()) * recvCount;
    if (registered.held()) {
      throughCollNet(
          comm, link, "reducescatter", n * recvCount, link.slotBytes / es, [](size_t, size_t, size_t) {},
          [&](size_t slot, size_t first, size_t elements, void** request) {
            input[slot] = {registered.outer(), const_cast<unsigned char*>(in) + first * es, elements * es};
            return link.coll->ireducescatter(link.comm, 1, &input[slot],
                                             out + firstInWindow(mine, recvCount, first) * es, recvCount * es,
                                             first * es, elements * es, type, op, registered.inner(), request);
          },
          [](size_t, size_t, size_t) {});
      return;
    }
    // The same windows staged: each window of the input in the send slot, this rank's part of the result in its
    // receive slot and copied out.
    throughCollNet(
        comm, link, "reducescatter", n * recvCount, link.slotBytes / es,
        [&](size_t slot, size_t first, size_t elements) {
          kernels.copy(link.sendSlots[slot], in + first * es, elements * es);
        },
        [&](size_t slot, size_t first, size_t elements, void** request) {
          input[slot] = {link.mhandle, link.sendSlots[slot], elements * es};
          return link.coll->ireducescatter(link.comm, 1, &input[slot], link.recvSlots[slot], recvCount * es, first * es,
                                           elements * es, type, op, link.mhandle, request);
        },
        [&](size_t slot, size_t first, size_t elements) {
          const size_t from = std::max(first, mine), to = std::min(first + elements, mine + recvCount);
          if (from < to) kernels.copy(out + (from - mine) * es, link.recvSlots[slot], (to - from) * es);
        });
    return;
  }
  throughCollNet(
      comm, link, "reducescatter", recvCount, perRank,
      [&](size_t slot, size_t first, size_t elements) {
        for (size_t r = 0; r < n; ++r)
          kernels.copy(link.sendSlots[slot] + r * elements * es, in + (r * recvCount + first) * es, elements * es);
      },
      [&](size_t slot, size_t, size_t elements, void** request) {
        input[slot] = {link.mhandle, link.sendSlots[slot], n * elements * es};
        return link.coll->ireducescatter(link.comm, 1, &input[slot], link.recvSlots[slot], elements * es, 0,
                                         n * elements * es, type, op, link.mhandle, request);
      },
      [&](size_t slot, size_t first, size_t elements) {
        kernels.copy(out + first * es, link.recvSlots[slot], elements * es);
      });
}

// How an all-gather or a reduce-scatter goes: the ring, or through the collNet by name (`algorithm`, else
// NNS_ALGO=collnet) or by NCCL_COLLNET_ENABLE=1 (where Auto falls back to the ring). Any other NNS_ALGO means the
// ring, their only other algorithm; an explicit tree or doubling is the caller's error.
enum class Route { Ring, CollNetByName, CollNetByEnable };
Route chooseRoute(const char* collective, Algorithm requested) {
  if (requested != Algorithm::Auto && requested != Algorithm::Ring && requested != Algorithm::CollNet) {
    const bool named = requested == Algorithm::Tree || requested == Algorithm::Doubling;
    throw core::ArgumentError(
        std::string(collective) + " runs as the ring or through the collNet, not " +
        (named ? algorithmName(requested) : "algorithm " + std::to_string(static_cast<int>(requested))));
  }
  const Algorithm fromEnv = algorithmFromEnv();
  const bool enabled = collNetEnabled();  // read at every call, like every knob
  if (requested == Algorithm::CollNet) return Route::CollNetByName;
  if (requested == Algorithm::Ring) return Route::Ring;
  if (fromEnv == Algorithm::CollNet) return Route::CollNetByName;
  if (fromEnv != Algorithm::Auto) return Route::Ring;
  return enabled ? Route::CollNetByEnable : Route::Ring;
}

// The route once the call's own properties are known: by name, a call no collNet can take is the caller's error
// before anything moves; by NCCL_COLLNET_ENABLE, it takes the ring.
Route checkRoute(Route route, Communicator& comm, const char* collective, KernelLayer& kernels, const ReduceOp* op) {
  if (route == Route::Ring) return route;
  const std::string refusal = callRefusal(kernels, op);
  if (refusal.empty()) return route;
  if (route == Route::CollNetByEnable) return Route::Ring;
  throw core::ArgumentError("rank " + std::to_string(comm.rank()) + ": " + collective +
                            " through the collNet: " + refusal);
}

// Inside the operation, on every rank at once: `collective` through the collNet where `route` says so and every
// rank's collNet takes the call, run(link, perRank). True when the call is done: it ran, or (by name) the collNet
// cannot take it, said in `refused` (the caller's error, thrown once the operation has left: the communicator stays
// usable). False: the call takes the other path (by NCCL_COLLNET_ENABLE).
template <class Run>
bool ranThroughCollNet(Communicator& comm, Route route, const char* collective, ncclDataType_t type, const ReduceOp* op,
                       std::string* refused, Run run) {
  if (route == Route::Ring) return false;
  std::string why;
  size_t perRank = 0;
  if (Communicator::CollNetLink* link = collNetFor(comm, collective, type, op, &perRank, &why)) {
    run(*link, perRank);
    return true;
  }
  if (route == Route::CollNetByEnable) return false;
  *refused = "rank " + std::to_string(comm.rank()) + ": " + collective + " through the collNet: " + why;
  return true;
}
}  // namespace

bool collNetEnabled() {
  const char* env = std::getenv("NCCL_COLLNET_ENABLE");
  if (env == nullptr || *env == '\0' || std::strcmp(env, "0") == 0) return false;
  if (std::strcmp(env, "1") == 0) return true;
  throw core::CommError(std::string("NCCL_COLLNET_ENABLE=") + env + ": 0 or 1", ncclInvalidUsage);
}

Algorithm bySize(const Communicator& comm, size_t bytes, const AllReduceLimits& limits) {
  // Latency first: recursive doubling's log2(n) exchanges beat the tree's 2 log2(n) hops and the ring's 2(n-1) for
  // small messages; the tree moves half the data per tree with log-depth latency; the ring uses every link fully
  // both ways, which wins for large messages.
  if (bytes <= limits.doublingMaxBytes) return Algorithm::Doubling;
  if (comm.size() >= limits.treeMinRanks && bytes <= limits.treeMaxBytes) return Algorithm::Tree;
  return Algorithm::Ring;
}

void allReduce(Communicator& comm, const void* send, void* recv, size_t count, ncclDataType_t type, ReduceOp op,
               KernelLayer& kernels, Algorithm algorithm) {
  checkScalar(op);
  checkArguments(type, send, recv, count, op.op, 1, detail::Layout::kSame, comm.rank());
  checkDeviceBuffers(comm, kernels, type, count, send, recv);
  const size_t es = typeSize(type);
  const int n = comm.size();
  Call call = makeCall(comm, send, recv, type, op.op, kernels);
  bool collNetByEnable = false;
  Algorithm chosen = chooseAllReduce(comm, count * es, algorithm, &collNetByEnable);
  Route route = Route::Ring;  // through the collNet, or not
  if (chosen == Algorithm::CollNet) {
    route =
        checkRoute(collNetByEnable ? Route::CollNetByEnable : Route::CollNetByName, comm, "allreduce", kernels, &op);
    if (route == Route::Ring) chosen = bySize(comm, count * es, allReduceLimits(comm));
  }
  if (isNoOp(comm, count)) return;
  std::string refused;
  comm.submit(describeCall("allreduce", count, type, reduceOpName(op), -1, algorithmName(chosen)), [&] {
    if (ranThroughCollNet(comm, route, "allreduce", type, &op, &refused, [&](auto& link, size_t perPart) {
          collNetAllReduce(comm, link, kernels, send, recv, count, type, op.op, perPart);
        }))
      return;
    if (chosen == Algorithm::CollNet) chosen = bySize(comm, count * es, allReduceLimits(comm));
    const Premultiplier scale(op, type, n);
    if (scale && (n == 1 || chosen != Algorithm::Ring)) {
      // Into the output, and the rest runs in place there.
      premultiplyInput(call, scale, recv, count);
      if (n == 1) return;
    }
    if (n == 1) {
      kernels.copy(recv, send, count * es);
      if (op.op == ncclAvg) kernels.divide(recv, count, type, 1);
      return;
    }
    lendBuffers(comm, kernels, {{call.in, count * es}, {recv, count * es}});
    if (chosen == Algorithm::Ring) {
      core::Plan& plan = comm.newPlan();
      // Whole blocks up to a slot (512 KiB) per message measured best on loopback TCP for 2 and 4 ranks from 256 KiB
      // to 16 MiB (performance.md): the per-message cost (system calls, TCP segments) outweighs a deeper pipeline.
      const size_t piece = pieceFor(comm, count * es / n / comm.channels(), 1, 32 * 1024);
      plan.setPieceBytes(piece);
      const bool forward = forwardFromSlots(comm, kernels, recv, count * es);
      if (scale)
        premultiplyInRing(call, scale, forward ? workspace(comm, kernels, comm.options().slotBytes, send) : nullptr);
      // Rounds of whole pieces per block (equal blocks, so the rounds stay the same on every rank); the last takes
      // the rest.
      const size_t round = static_cast<size_t>(n) * roundElements(comm, piece, es);
      for (int c = 0; c < comm.channels(); ++c) {
        auto [first, part] = channelPart(count, comm.channels(), c);
        inRounds(first, part, round, [&](size_t from, size_t elements) {
          detail::ringAllReduce(comm, plan, call, from, elements, c, forward);
        });
      }
      comm.run(plan);
      return;
    }
    if (chosen == Algorithm::Doubling) {
      auto* work = workspace(comm, kernels, (detail::doublingRounds(n) + 1) * count * es, send);
      core::Plan& plan = comm.newPlan();
      unsigned char* results[Communicator::kMaxChannels];  // per channel: where its result is, if not the output
      for (int c = 0; c < comm.channels(); ++c) {
        auto [first, part] = channelPart(count, comm.channels(), c);
        results[c] = detail::doublingAllReduce(comm, plan, call, first, part, count, work, c);
      }
      comm.run(plan);
      for (int c = 0; c < comm.channels(); ++c) {
        auto [first, part] = channelPart(count, comm.channels(), c);
        if (results[c] != nullptr) kernels.copy(static_cast<unsigned char*>(recv) + first * es, results[c], part * es);
      }
      return;
    }
    // Double binary tree: half of the data (per channel) goes up and down each tree, both at once.
    TreeLinks trees[2];
    doubleBinaryTree(n, comm.rank(), trees);
    core::Plan& plan = comm.newPlan();
    const size_t piece = pieceFor(comm, count * es / 2 / comm.channels(), 8, 32 * 1024);
    plan.setPieceBytes(piece);
    for (int c = 0; c < comm.channels(); ++c) {
      auto [first, part] = channelPart(count, comm.channels(), c);
      for (int t = 0; t < 2; ++t) {
        auto [offset, half] = channelPart(part, 2, t);
        detail::treeAllReduce(comm, plan, call, trees[t], first + offset, half, c);
      }
    }
    comm.run(plan);
  });
  if (!refused.empty()) throw core::ArgumentError(refused);
}

void allGather(Communicator& comm, const void* send, void* recv, size_t sendCount, ncclDataType_t type,
               KernelLayer& kernels, Algorithm algorithm) {
  checkArguments(type, send, recv, sendCount, ncclSum, comm.size(), detail::Layout::kGather, comm.rank());
  const size_t es = typeSize(type);
  const Call call = makeCall(comm, send, recv, type, ncclSum, kernels);
  const Route route = checkRoute(chooseRoute("allgather", algorithm), comm, "allgather", kernels, nullptr);
  if (isNoOp(comm, sendCount)) return;
  std::string refused;
  const char* shown = route == Route::Ring ? nullptr : "collnet";
  comm.submit(describeCall("allgather", sendCount, type, nullptr, -1, shown), [&] {
    if (ranThroughCollNet(comm, route, "allgather", type, nullptr, &refused, [&](auto& link, size_t perRank) {
          collNetAllGather(comm, link, kernels, send, recv, sendCount, type, perRank);
        }))
      return;
    kernels.copy(static_cast<unsigned char*>(recv) + comm.rank() * sendCount * es, send, sendCount * es);
    if (comm.size() == 1) return;
    lendBuffers(comm, kernels, {{recv, comm.size() * sendCount * es}, {send, sendCount * es}});
    core::Plan& plan = comm.newPlan();
    const bool forward = forwardFromSlots(comm, kernels, recv, comm.size() * sendCount * es);
    const size_t round = roundElements(comm, comm.options().slotBytes, es);
    for (int c = 0; c < comm.channels(); ++c) {
      auto [first, part] = channelPart(sendCount, comm.channels(), c);
      inRounds(first, part, round, [&](size_t from, size_t elements) {
        detail::ringAllGather(comm, plan, call, sendCount, from, elements, c, forward);
      });
    }
    comm.run(plan);
  });
  if (!refused.empty()) throw core::ArgumentError(refused);
}

void reduceScatter(Communicator& comm, const void* send, void* recv, size_t recvCount, ncclDataType_t type, ReduceOp op,
                   KernelLayer& kernels, Algorithm algorithm) {
  checkScalar(op);
  checkArguments(type, send, recv, recvCount, op.op, comm.size(), detail::Layout::kScatter, comm.rank());
  checkDeviceBuffers(comm, kernels, type, recvCount, send, recv);
  const size_t es = typeSize(type);
  Call call = makeCall(comm, send, recv, type, op.op, kernels);
  const Route route = checkRoute(chooseRoute("reducescatter", algorithm), comm, "reducescatter", kernels, &op);
  if (isNoOp(comm, recvCount)) return;
  std::string refused;
  const char* shown = route == Route::Ring ? nullptr : "collnet";
  comm.submit(describeCall("reducescatter", recvCount, type, reduceOpName(op), -1, shown), [&] {
    if (ranThroughCollNet(comm, route, "reducescatter", type, &op, &refused, [&](auto& link, size_t perRank) {
          collNetReduceScatter(comm, link, kernels, send, recv, recvCount, type, op.op, perRank);
        }))
      return;
    const int n = comm.size();
    const Premultiplier scale(op, type, n);
    if (n == 1) {
      if (scale) return premultiplyInput(call, scale, recv, recvCount);
      kernels.copy(recv, send, recvCount * es);
      if (op.op == ncclAvg) kernels.divide(recv, recvCount, type, 1);
      return;
    }
    lendBuffers(comm, kernels, {{send, n * recvCount * es}, {recv, recvCount * es}});
    // Working memory: partial sums unless they are forwarded from the slots; for avg then the premultiplied first
    // sends (an output's worth) and, forwarding, a piece's worth (premultiplyInRing).
    const bool forward = forwardFromSlots(comm, kernels);
    const size_t partialBytes = forward ? 0 : n * recvCount * es, blockBytes = recvCount * es;
    const size_t pieceBytes = forward ? comm.options().slotBytes : 0;
    const size_t workBytes = partialBytes + (scale ? blockBytes + pieceBytes : 0);
    auto* memory = workBytes == 0 ? nullptr : workspace(comm, kernels, workBytes, send);
    auto* work = forward ? nullptr : memory;
    if (scale)
      premultiplyInRing(call, scale, forward ? memory + partialBytes + blockBytes : nullptr, memory + partialBytes);
    const size_t round = roundElements(comm, comm.options().slotBytes, es);
    core::Plan& plan = comm.newPlan();
    for (int c = 0; c < comm.channels(); ++c) {
      auto [first, part] = channelPart(recvCount, comm.channels(), c);
      inRounds(first, part, round, [&](size_t from, size_t elements) {
        detail::ringReduceScatter(comm, plan, call, recvCount, from, elements, work, c, forward);
      });
    }
    comm.run(plan);
  });
  if (!refused.empty()) throw core::ArgumentError(refused);
}

void broadcast(Communicator& comm, const void* send, void* recv, size_t count, ncclDataType_t type, int root,
               KernelLayer& kernels) {
  checkRoot(comm, root);
  checkArguments(type, comm.rank() == root ? send : recv, recv, count, ncclSum, 1,
                 comm.rank() == root ? detail::Layout::kSame : detail::Layout::kOne, comm.rank());
  const Call call = makeCall(comm, send, recv, type, ncclSum, kernels);
  if (isNoOp(comm, count)) return;
  comm.submit(describeCall("broadcast", count, type, nullptr, root), [&] {
    if (comm.rank() == root) kernels.copy(recv, send, count * typeSize(type));
    if (comm.size() == 1) return;
    lendBuffers(comm, kernels,
                {{recv, count * typeSize(type)}, {comm.rank() == root ? send : nullptr, count * typeSize(type)}});
    core::Plan& plan = comm.newPlan();
    const bool forward = forwardFromSlots(comm, kernels, recv, count * typeSize(type));
    for (int c = 0; c < comm.channels(); ++c) {
      auto [first, part] = channelPart(count, comm.channels(), c);
      detail::chainBroadcast(comm, plan, call, root, first, part, c, forward);
    }
    comm.run(plan);
  });
}

void reduce(Communicator& comm, const void* send, void* recv, size_t count, ncclDataType_t type, ReduceOp op, int root,
            KernelLayer& kernels) {
  checkRoot(comm, root);
  checkScalar(op);
  checkArguments(type, send, comm.rank() == root ? recv : send, count, op.op, 1,
                 comm.rank() == root ? detail::Layout::kSame : detail::Layout::kOne, comm.rank());
  checkDeviceBuffers(comm, kernels, type, count, send, comm.rank() == root ? recv : nullptr);
  const size_t es = typeSize(type);
  Call call = makeCall(comm, send, recv, type, op.op, kernels);
  if (isNoOp(comm, count)) return;
  comm.submit(describeCall("reduce", count, type, reduceOpName(op), root), [&] {
    const Premultiplier scale(op, type, comm.size());
    const bool isRoot = comm.rank() == root;
    if (comm.size() == 1) {
      if (scale) return premultiplyInput(call, scale, recv, count);
      kernels.copy(recv, send, count * es);
      if (op.op == ncclAvg) kernels.divide(recv, count, type, 1);
      return;
    }
    lendBuffers(comm, kernels, {{send, count * es}, {isRoot ? recv : nullptr, isRoot ? count * es : 0}});
    // Only the ranks between the chain's ends pass partial results on: from the slots, or from `work`. A
    // premultiplied input goes to the root's output (the root then reduces in place) or after `work`.
    const bool forward = forwardFromSlots(comm, kernels);
    const bool needsWork = !isRoot && !forward;
    const size_t workBytes = ((needsWork ? 1 : 0) + (scale && !isRoot ? 1 : 0)) * count * es;
    auto* memory = workBytes == 0 ? nullptr : workspace(comm, kernels, workBytes, send);
    auto* work = needsWork ? memory : nullptr;
    if (scale) premultiplyInput(call, scale, isRoot ? recv : memory + (needsWork ? count * es : 0), count);
    core::Plan& plan = comm.newPlan();
    for (int c = 0; c < comm.channels(); ++c) {
      auto [first, part] = channelPart(count, comm.channels(), c);
      detail::chainReduce(comm, plan, call, root, first, part, work, c, forward);
    }
    comm.run(plan);
  });
}

namespace {

// A group's receives must not overlap its other operations' buffers (sends may share theirs): the sends read while
// the receives write, piece by piece, so an overlap corrupted the data with no error on any rank. Sorted by address
// and swept once, in storage kept per thread (a group may hold thousands of operations). `pairs[i]` numbers the
// sends to this rank and its receives from itself in the order they meet (the k-th send with the k-th receive), -1
// for the others: only a pair on the very same memory (a copy onto itself) may overlap. Any other overlap among them
// is refused too: the copies run one after another, so a swap (send A, receive B, send B, receive A) read what an
// earlier copy had already overwritten.
void checkP2POverlaps(std::span<const P2POp> ops, std::span<const int> pairs, int rank) {
  struct Range {
    uintptr_t start, end;
    const P2POp* op;
    int pair;
  };
  thread_local std::vector<Range> ranges;
  ranges.clear();
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    const size_t bytes = op.count * typeSize(op.type);
    const auto start = reinterpret_cast<uintptr_t>(op.buffer);
    if (bytes > 0) ranges.push_back({start, start + bytes, &op, pairs[i]});
  }
  if (ranges.size() < 2) return;
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.start < b.start; });
  const Range* furthest = nullptr;      // of the ranges so far, the one reaching furthest
  const Range* furthestRecv = nullptr;  // likewise among the receives
  auto describe = [](const Range& r) {
    char text[96];
    std::snprintf(text, sizeof(text), "%s %s rank %d at %p (%zu bytes)",
                  r.op->kind == P2POp::Recv ? "a receive" : "a send", r.op->kind == P2POp::Recv ? "from" : "to",
                  r.op->peer, reinterpret_cast<void*>(r.start), static_cast<size_t>(r.end - r.start));
    return std::string(text);
  };
  // A send to this rank and the receive from this rank it pairs with, on the very same memory: a copy onto itself.
  auto inPlaceToSelf = [](const Range& a, const Range& b) {
    return a.pair >= 0 && a.pair == b.pair && a.start == b.start && a.end == b.end;
  };
  for (const Range& r : ranges) {
    const Range* other = r.op->kind == P2POp::Recv ? furthest : furthestRecv;
    if (other != nullptr && other->end > r.start && !inPlaceToSelf(*other, r))
      throw core::ArgumentError("rank " + std::to_string(rank) + ": " + describe(*other) + " and " + describe(r) +
                                " overlap in one group; a receive's buffer must not overlap another operation's");
    if (furthest == nullptr || r.end > furthest->end) furthest = &r;
    if (r.op->kind == P2POp::Recv && (furthestRecv == nullptr || r.end > furthestRecv->end)) furthestRecv = &r;
  }
}

}  // namespace

void sendRecv(Communicator& comm, std::span<const P2POp> ops, KernelLayer& kernels) {
  checkPlacement(comm, kernels);
  // Sends to this rank are matched with its receives from itself, in order, by a copy: a mismatch is this rank's own
  // error, found before anything moves, so the communicator stays usable.
  std::vector<const P2POp*> selfSends, selfRecvs;
  thread_local std::vector<int> pairs;  // per operation: its pair's number among the copies to itself, else -1
  pairs.assign(ops.size(), -1);
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    checkArguments(op.type, op.buffer, op.buffer, op.count, ncclSum, 1, detail::Layout::kOne, comm.rank());
    if (op.peer < 0 || op.peer >= comm.size())
      throw core::ArgumentError("peer " + std::to_string(op.peer) + " is not a rank of this communicator of " +
                                std::to_string(comm.size()));
    if (op.peer != comm.rank()) continue;
    auto& mine = op.kind == P2POp::Send ? selfSends : selfRecvs;
    pairs[i] = static_cast<int>(mine.size());
    mine.push_back(&op);
  }
  checkP2POverlaps(ops, pairs, comm.rank());
  if (selfSends.size() != selfRecvs.size())
    throw core::ArgumentError("rank " + std::to_string(comm.rank()) + ": " + std::to_string(selfSends.size()) +
                              " sends to itself but " + std::to_string(selfRecvs.size()) +
                              " receives from itself (each needs its match in the same group of operations: "
                              "nnsGroupStart/nnsGroupEnd in the C API)");
  for (size_t i = 0; i < selfSends.size(); ++i) {
    size_t sendBytes = selfSends[i]->count * typeSize(selfSends[i]->type);
    size_t recvBytes = selfRecvs[i]->count * typeSize(selfRecvs[i]->type);
    if (sendBytes != recvBytes)
      throw core::ArgumentError("rank " + std::to_string(comm.rank()) + ": a send to itself of " +
                                std::to_string(sendBytes) + " bytes meets a receive of " + std::to_string(recvBytes));
  }
  // Its errors name the call, as a collective's do: the operation and peer of a single one, else the group's size.
  core::CallInfo call;
  call.pointToPoint = true;
  if (ops.size() == 1) {
    call.name = ops[0].kind == P2POp::Send ? "send" : "recv";
    call.count = ops[0].count;
    call.type = typeName(ops[0].type);
    call.peer = ops[0].peer;
  } else {
    call.name = "send/recv group";
    call.operations = ops.size();
  }
  comm.submit(call, [&] {
    for (const auto& op : ops)
      if (op.peer != comm.rank()) lendBuffers(comm, kernels, {{op.buffer, op.count * typeSize(op.type)}});
    core::Plan& plan = comm.newPlan();
    plan.setEndMarks(true);  // each receive's size is checked against its send's, not only piece by piece
    for (const auto& op : ops) {
      const size_t bytes = op.count * typeSize(op.type);
      if (op.peer == comm.rank()) continue;
      if (op.kind == P2POp::Send) {
        plan.send(op.peer, comm.p2pChannel(), op.buffer, bytes);
      } else {
        auto* target = static_cast<unsigned char*>(op.buffer);
        plan.recv(
            op.peer, comm.p2pChannel(), bytes,
            [target, &kernels](size_t offset, const void* piece, size_t len) {
              kernels.copy(target + offset, piece, len);
            },
            {}, target);
      }
    }
    for (size_t i = 0; i < selfSends.size(); ++i)
      kernels.copy(selfRecvs[i]->buffer, selfSends[i]->buffer, selfSends[i]->count * typeSize(selfSends[i]->type));
    comm.run(plan);
  });
}

void send(Communicator& comm, const void* buffer, size_t count, ncclDataType_t type, int peer, KernelLayer& kernels) {
  const P2POp op{P2POp::Send, peer, const_cast<void*>(buffer), count, type};
  sendRecv(comm, std::span(&op, 1), kernels);
}

void recv(Communicator& comm, void* buffer, size_t count, ncclDataType_t type, int peer, KernelLayer& kernels) {
  const P2POp op{P2POp::Recv, peer, buffer, count, type};
  sendRecv(comm, std::span(&op, 1), kernels);
}

namespace detail {

std::string argumentProblem(ncclDataType_t type, const void* send, const void* recv, size_t count, ncclRedOp_t op,
                            size_t blocks, Layout layout, int rank) {
  const size_t es = typeSize(type);
  if (es == 0) return "data type " + std::to_string(static_cast<int>(type)) + " is not supported";
  if (op != ncclSum && op != ncclProd && op != ncclMax && op != ncclMin && op != ncclAvg)
    return "reduction op " + std::to_string(static_cast<int>(op)) + " is not supported";
  // No buffer is larger than a process's address space: 2^57 bytes with x86-64's 5-level paging, less elsewhere
  // (a count below PTRDIFF_MAX but past it was reported as the two buffers overlapping).
  constexpr auto kLargestBuffer = static_cast<size_t>(std::min<uint64_t>(uint64_t{1} << 57, PTRDIFF_MAX));
  if (count > kLargestBuffer / es / blocks)
    return "a count of " + std::to_string(count) + " elements of " + std::to_string(es) + " bytes" +
           (blocks > 1 ? " times " + std::to_string(blocks) + " ranks" : "") + " is more bytes than a buffer can hold";
  if (count == 0) return "";
  if (send == nullptr || recv == nullptr)
    return send == recv      ? "the buffer is NULL"
           : send == nullptr ? "the send buffer is NULL"
                             : "the receive buffer is NULL";
  if (layout == Layout::kOne) return "";
  // Each buffer's range, and where the send buffer starts in the in-place form.
  const size_t block = count * es;
  const auto s = reinterpret_cast<uintptr_t>(send), r = reinterpret_cast<uintptr_t>(recv);
  const size_t sendBytes = layout == Layout::kScatter ? block * blocks : block;
  const size_t recvBytes = layout == Layout::kGather ? block * blocks : block;
  const size_t offset = static_cast<size_t>(rank) * block;
  const bool inPlace = layout == Layout::kSame ? s == r : layout == Layout::kGather ? s == r + offset : r == s + offset;
  if (inPlace || s + sendBytes <= r || r + recvBytes <= s) return "";
  const char* form = layout == Layout::kSame     ? "sendbuff == recvbuff"
                     : layout == Layout::kGather ? "sendbuff == recvbuff + rank x sendcount"
                                                 : "recvbuff == sendbuff + rank x recvcount";
  return "the send and receive buffers overlap (by " +
         std::to_string(std::min(s + sendBytes, r + recvBytes) - std::max(s, r)) + " bytes) without being in place (" +
         form + ")";
}

}  // namespace detail

}  // namespace nns::coll
