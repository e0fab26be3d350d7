// nns_api.cc: the C API of nns/nns.h over the C++ communicator and collectives: argument checks, error codes,
// the per-thread last error, and group queues.
#include "nns/nns.h"

#include <nccl_net/sdk_version.h>

#include <arpa/inet.h>
#include <dlfcn.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "arguments.hpp"
#include "nccl_net/sdk/log.hpp"
#include "nccl_net/sdk/socket.hpp"
#include "nns/coll/collectives.hpp"
#include "nns/core/bootstrap.hpp"

namespace {
// The numbers of premultiplied sums (op ncclNumOps + i), given out for the whole process rather than per
// communicator: numbered per communicator, an op made on one and passed to another met the other's op of the same
// number there, whose scalar was used without an error. The lowest free number goes first; a destroyed op's number
// is given again, as in NCCL, and so are a destroyed communicator's: an op kept from it may then meet a newer
// communicator's op of that number (a use after destroy, which NCCL does not catch either).
std::mutex gOpNumbersMutex;
std::vector<bool> gOpNumbersTaken;
long takeOpNumber() {
  std::lock_guard<std::mutex> lock(gOpNumbersMutex);
  const auto free = std::find(gOpNumbersTaken.begin(), gOpNumbersTaken.end(), false);
  const long index = free - gOpNumbersTaken.begin();
  if (free == gOpNumbersTaken.end()) {
    gOpNumbersTaken.push_back(true);
  } else {
    *free = true;
  }
  return index;
}
void releaseOpNumber(long index) {
  std::lock_guard<std::mutex> lock(gOpNumbersMutex);
  gOpNumbersTaken[static_cast<size_t>(index)] = false;
}
}  // namespace

struct nnsComm {
  std::unique_ptr<nns::core::Communicator> comm;
  int holds = 0;  // API calls using it now (liveMutex)
  // nnsCommFinalize was called: operations (collectives, sends, receives, splits) are refused from then on; the
  // queries, registrations and nnsCommDestroy/nnsCommAbort still take it.
  std::atomic<bool> finalized{false};
  // Premultiplied sums made on this communicator by nnsRedOpCreatePreMulSum: op ncclNumOps + i is ops[i]
  // (opsMutex), i a process-wide number.
  struct PreMulSum {
    ncclDataType_t type = ncclFloat32;
    uint64_t value = 0;             // ncclScalarHostImmediate: the scalar, copied at creation
    const void* pointer = nullptr;  // ncclScalarDevice: where it is read when a collective runs
  };
  std::mutex opsMutex;
  std::map<long, PreMulSum> ops;
  nnsComm() = default;
  nnsComm(const nnsComm&) = delete;
  nnsComm& operator=(const nnsComm&) = delete;
  ~nnsComm() {
    for (const auto& entry : ops) releaseOpNumber(entry.first);
  }
};

// libnns is released with the SDK: its version code is the SDK's (nccl_net/sdk_version.h).
static_assert(NNS_VERSION_CODE == NCCL_NET_SDK_VERSION, "nns.h's NNS_VERSION_CODE must follow nccl_net/sdk_version.h");

namespace {

using nns::coll::P2POp;
using nns::core::CommError;

thread_local std::string lastError;
thread_local int groupDepth = 0;
// The first call refused inside the current group (nnsGroupEnd returns it once the group's other operations ran).
thread_local ncclResult_t groupRefusal = ncclSuccess;
thread_local std::string groupRefusalText;

// Whether refusals and failures are also written to stderr: as NCCL's WARN lines, when the debug level asked for is
// WARN or above it (INFO, ABORT, TRACE): $NNS_DEBUG's where it names a level, else $NCCL_DEBUG's, as for every other
// line (NNS_DEBUG=VERSION keeps them off whatever NCCL_DEBUG says). By default (neither names a level) the caller has
// the code and nnsGetLastError only: a refusal it expects and handles is not the program's output.
bool warnLines() {
  for (const char* name : {"NNS_DEBUG", "NCCL_DEBUG"})
    if (const int level = nccl_net::sdk::detail::debugLevelOf(std::getenv(name)); level >= 0)
      return level >= NCCL_LOG_WARN;
  return false;
}

// Set while a call that joins the current group runs (a collective, a send or receive, a communicator's creation):
// only its refusals are the group's, returned again by nnsGroupEnd. A query that fails inside a group (nnsCommCount
// on a handle still being made, nnsGetVersion(NULL)) is its own call's error: it failed a group whose operations all
// ran, and a caller took communicators that were made for failed ones.
thread_local bool inGroupOperation = false;
struct GroupOperation {
  GroupOperation() { inGroupOperation = true; }
  ~GroupOperation() { inGroupOperation = false; }
  GroupOperation(const GroupOperation&) = delete;
  GroupOperation& operator=(const GroupOperation&) = delete;
};

ncclResult_t failWith(ncclResult_t result, const std::string& what) {
  lastError = what;
  if (groupDepth > 0 && inGroupOperation && groupRefusal == ncclSuccess) {
    groupRefusal = result;
    groupRefusalText = what;
  }
  if (warnLines()) std::fprintf(stderr, "NNS WARN %s\n", what.c_str());
  return result;
}

// Runs `body`, turning exceptions into the error code of their kind (CommError::result(): an argument refused
// before anything moved is an invalid argument, a failed plugin call the plugin's own result, a setting this rank
// cannot run with invalid usage, a peer or a timeout a remote error); anything else is a system error.
ncclResult_t guarded(nns::core::OperationRef body) {
  try {
    body();
    return ncclSuccess;
  } catch (const CommError& e) {
    return failWith(e.result(), e.what());
  } catch (const std::exception& e) {
    return failWith(ncclSystemError, e.what());
  }
}

// The communicators made and not yet destroyed: a handle used after nnsCommDestroy (or destroyed twice) is refused
// instead of read after it was freed (see releaseHandle for why its memory is not reused at once).
std::mutex liveMutex;
std::condition_variable released;  // a Hold ended
std::unordered_set<const nnsComm*> liveComms;
// Communicators asked for in a group whose creation failed at nnsGroupEnd: the caller holds the handle (NCCL's then
// goes to ncclCommAbort or ncclCommDestroy), so it stays allocated, refused by every call but those two, which free
// it. Freed at once, a later communicator could get its address and be destroyed through the stale handle.
// Each keeps its creation's result, which nnsCommGetAsyncError reports.
std::unordered_map<const nnsComm*, ncclResult_t> failedComms;
// Communicators asked for in a group whose nnsGroupEnd has not made them yet, on whichever thread: another thread (a
// watchdog polling nnsCommGetAsyncError) learns that they are in progress rather than "not a live one".
std::unordered_set<const nnsComm*> makingComms;
// Communicators retired by nnsCommDestroy or nnsCommAbort and waiting for the calls still holding them: an abort from
// another thread (a watchdog) still fails them, so that the destroy stops waiting for calls stuck in a dead job.
std::unordered_set<const nnsComm*> retiringComms;

bool beingMade(const nnsComm* comm) {
  std::lock_guard<std::mutex> lock(liveMutex);
  return makingComms.count(comm) != 0;
}

// Ends a handle: its communicator goes now, the handle's own few bytes only after kKeptHandles later ones. Freed at
// once, malloc gave the next communicator the same address (every time), so a stale handle, destroyed twice or used
// after nnsCommDestroy, was that new communicator: accepted, or destroying it.
constexpr size_t kKeptHandles = 4096;
// Frees the handle and shuts its communicator down; false when a plugin call on the communicator's progress thread
// did not return (Communicator::shutdown()), which leaves the communicator abandoned, allocated for that thread.
bool releaseHandle(nnsComm_t comm) {
  bool shutDown = true;
  if (comm->comm != nullptr && !comm->comm->shutdown()) {
    nns::core::Communicator::abandon(std::move(comm->comm));
    shutDown = false;
  }
  comm->comm.reset();
  {  // its premultiplied sums' numbers are free now, not when the handle's bytes go (4096 destroys later)
    std::lock_guard<std::mutex> lock(comm->opsMutex);
    for (const auto& entry : comm->ops) releaseOpNumber(entry.first);
    comm->ops.clear();
  }
  static auto* kept = new std::deque<nnsComm_t>;  // never destroyed: a handle may be released during exit
  nnsComm_t oldest = nullptr;
  {
    std::lock_guard<std::mutex> lock(liveMutex);
    kept->push_back(comm);
    if (kept->size() > kKeptHandles) {
      oldest = kept->front();
      kept->pop_front();
    }
  }
  delete oldest;
  return shutDown;
}

// Frees `comm` when it is a failed one (true), under liveMutex.
bool freeFailed(nnsComm_t comm) {
  {
    std::lock_guard<std::mutex> lock(liveMutex);
    if (failedComms.erase(comm) == 0) return false;
  }
  releaseHandle(comm);
  return true;
}

// An API call's hold on a live communicator, for as long as the call uses it. nnsCommDestroy and nnsCommAbort take
// the handle out of the live set at once (later calls are refused) and free it once no call holds it: an abort from
// another thread (a watchdog, as with ncclCommAbort) fails the operations in progress and waits for their calls to
// return, instead of freeing the communicator under them (a use after free before).
class Hold {
 public:
  explicit Hold(nnsComm_t comm) {
    std::lock_guard<std::mutex> lock(liveMutex);
    if (comm == nullptr || liveComms.count(comm) == 0) return;
    comm_ = comm;
    ++comm_->holds;
  }
  ~Hold() {
    if (comm_ == nullptr) return;
    std::lock_guard<std::mutex> lock(liveMutex);
    if (--comm_->holds == 0) released.notify_all();
  }
  Hold(const Hold&) = delete;
  Hold& operator=(const Hold&) = delete;
  explicit operator bool() const { return comm_ != nullptr; }

 private:
  nnsComm_t comm_ = nullptr;
};

// Takes `comm` out of the live set; false when it was not in it.
bool retire(const nnsComm* comm) {
  std::lock_guard<std::mutex> lock(liveMutex);
  if (liveComms.erase(comm) == 0) return false;
  retiringComms.insert(comm);
  return true;
}

// How long nnsCommDestroy and nnsCommAbort wait, in all, for the calls still holding a communicator.
std::chrono::steady_clock::time_point retireDeadline(nnsComm_t comm) {
  return std::chrono::steady_clock::now() + comm->comm->options().timeout * 4 + std::chrono::seconds(60);
}

// Frees a retired communicator once the calls still holding it have returned. They are bounded by the operations'
// own timeouts (an aborted one fails at once); a call that outlives even the margin here (a plugin call that never
// returns) leaves the communicator allocated rather than freed under it. `deadline` is the whole call's: an abort's
// own wait for a stuck plugin call counts in it (the two waits one after the other took 8 x the timeout + 90 s).
ncclResult_t freeRetired(nnsComm_t comm, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(liveMutex);
  if (!released.wait_until(lock, deadline, [comm] { return comm->holds == 0; })) {
    lastError = "a call on this communicator did not return; it is left allocated";
    return ncclInternalError;
  }
  retiringComms.erase(comm);  // with the lock that saw no holder: no abort can take hold of it from here on
  lock.unlock();
  if (!releaseHandle(comm)) {
    lastError =
        "a plugin call on the communicator's progress thread has not returned: the handle is freed, the "
        "communicator left allocated (its connections close if the call returns)";
    return ncclInternalError;
  }
  return ncclSuccess;
}

struct PendingInit;
bool isPending(nnsComm_t comm);

ncclResult_t notLive(nnsComm_t comm) {
  bool failed = false;
  {
    std::lock_guard<std::mutex> lock(liveMutex);
    failed = failedComms.count(comm) != 0;
  }
  return failWith(ncclInvalidArgument,
                  comm == nullptr   ? "the communicator is NULL"
                  : isPending(comm) ? "the communicator is made at the nnsGroupEnd of the group it was asked for in: "
                                      "use it after that"
                  : beingMade(comm) ? "the communicator is being made by the nnsGroupEnd of another thread's group: "
                                      "use it (or nnsCommAbort it) once that has returned"
                  : failed          ? "the communicator's creation failed at nnsGroupEnd: only nnsCommDestroy or "
                                      "nnsCommAbort takes it now (to free it)"
                                    : "the communicator is not a live one (destroyed already?)");
}
// An operation on a communicator nnsCommFinalize was called on (ncclInvalidUsage), or ncclSuccess.
ncclResult_t refuseFinalized(nnsComm_t comm) {
  if (!comm->finalized.load(std::memory_order_acquire)) return ncclSuccess;
  return failWith(ncclInvalidUsage,
                  "nnsCommFinalize was called on this communicator: no operation may follow it, only nnsCommDestroy "
                  "(or nnsCommAbort)");
}

ncclResult_t checkCall(const Hold& hold, nnsComm_t comm, void* stream, ncclDataType_t type) {
  if (!hold) return notLive(comm);
  if (ncclResult_t r = refuseFinalized(comm); r != ncclSuccess) return r;
  if (stream != nullptr) return failWith(ncclInvalidArgument, "streams are not supported: pass NULL (calls block)");
  if (nns::coll::typeSize(type) == 0)
    return failWith(ncclInvalidArgument, "unknown data type " + std::to_string(static_cast<int>(type)));
  return ncclSuccess;
}

// The collectives' own argument checks (detail::argumentProblem, the same texts), made at the call: inside a group
// the call is only queued, and a bad argument found at nnsGroupEnd would skip this rank's other queued operations,
// which the other ranks still run (they would wait for it until the timeout and fail). NCCL refuses a bad argument
// at the call too. `blocks`: count-sized blocks in the largest buffer (the ranks, for all-gather's output and
// reduce-scatter's input); `layout`: how the two buffers relate (for the overlap check).
ncclResult_t checkArguments(nnsComm_t comm, ncclDataType_t type, const void* send, const void* recv, size_t count,
                            ncclRedOp_t op, size_t blocks, nns::coll::detail::Layout layout) {
  std::string problem =
      nns::coll::detail::argumentProblem(type, send, recv, count, op, blocks, layout, comm->comm->rank());
  return problem.empty() ? ncclSuccess : failWith(ncclInvalidArgument, problem);
}

ncclResult_t checkRank(nnsComm_t comm, int rank, const char* what) {
  const int size = comm->comm->size();
  if (rank < 0 || rank >= size)
    return failWith(ncclInvalidArgument, std::string(what) + " " + std::to_string(rank) +
                                             " is not a rank of this communicator of " + std::to_string(size));
  return ncclSuccess;
}

// An operation as its call described it, run at once or queued in a group: data, not a closure, so that neither
// allocates (a group's queue keeps its storage from group to group). At nnsGroupEnd a communicator's point-to-point
// operations are merged into one sendRecv so they progress together.
struct Operation {
  enum Kind { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kPointToPoint } kind;
  nnsComm_t comm;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  int root = 0;
  P2POp p2p{};  // kPointToPoint
  // A premultiplied sum (op is then ncclSum): its scalar as the call found it, copied (a queued call keeps it
  // if the op is destroyed before nnsGroupEnd, as NCCL copies op state at enqueue) or, for ncclScalarDevice, where
  // it is read when the collective runs.
  bool premultiplied = false;
  uint64_t scalarValue = 0;
  const void* scalarPointer = nullptr;

  nns::coll::ReduceOp reduceOp() const {
    if (!premultiplied) return op;
    return nns::coll::ReduceOp::preMulSum(scalarPointer != nullptr ? scalarPointer : &scalarValue);
  }
};
thread_local std::vector<Operation> groupQueue;
// nnsGroupEnd's own: the group being run, the communicators in it and their sends and receives (storage kept).
thread_local std::vector<Operation> groupRunning;
thread_local std::vector<nnsComm_t> groupComms;
thread_local std::vector<P2POp> groupP2P;

// The op a reducing call names, into `o`: a built-in one as it is; a premultiplied sum made on this communicator for
// this datatype as a sum with its scalar. Anything else is refused at the call, as NCCL does.
ncclResult_t resolveOp(nnsComm_t comm, ncclRedOp_t op, ncclDataType_t type, Operation* o) {
  o->op = op;
  if (static_cast<int>(op) >= 0 && op < ncclNumOps) return ncclSuccess;
  std::lock_guard<std::mutex> lock(comm->opsMutex);
  const auto found = comm->ops.find(static_cast<long>(op) - ncclNumOps);
  if (found == comm->ops.end())
    return failWith(ncclInvalidArgument, "reduction op " + std::to_string(static_cast<int>(op)) +
                                             " is neither a built-in op nor one made on this communicator");
  const nnsComm::PreMulSum& made = found->second;
  if (made.type != type)
    return failWith(ncclInvalidArgument, "reduction op " + std::to_string(static_cast<int>(op)) + " was made for " +
                                             nns::coll::typeName(made.type) + ", not for " + nns::coll::typeName(type));
  o->op = ncclSum;
  o->premultiplied = true;
  o->scalarValue = made.value;
  o->scalarPointer = made.pointer;
  return ncclSuccess;
}

void runCollective(const Operation& o) {
  nns::core::Communicator& comm = *o.comm->comm;
  switch (o.kind) {
    case Operation::kAllReduce: nns::coll::allReduce(comm, o.send, o.recv, o.count, o.type, o.reduceOp()); break;
    case Operation::kBroadcast: nns::coll::broadcast(comm, o.send, o.recv, o.count, o.type, o.root); break;
    case Operation::kReduce: nns::coll::reduce(comm, o.send, o.recv, o.count, o.type, o.reduceOp(), o.root); break;
    case Operation::kAllGather: nns::coll::allGather(comm, o.send, o.recv, o.count, o.type); break;
    case Operation::kReduceScatter:
      nns::coll::reduceScatter(comm, o.send, o.recv, o.count, o.type, o.reduceOp());
      break;
    case Operation::kPointToPoint: nns::coll::sendRecv(comm, std::span(&o.p2p, 1)); break;
  }
}

ncclResult_t enqueueOrRun(const Operation& operation) {
  if (groupDepth > 0) {
    groupQueue.push_back(operation);
    return ncclSuccess;
  }
  return guarded([&] { runCollective(operation); });
}

// The address other ranks reach this host at: the bootstrap's choice for a rank's own address (hostAddress: what
// NCCL_SOCKET_IFNAME selects, else an interface neither loopback nor a container's or VM's bridge, else such a bridge
// or veth; never link-local), IPv4, as nnsGetUniqueId's root listens on IPv4. 127.0.0.1 when there is none (a host
// alone); "" when NCCL_SOCKET_IFNAME selects none: its loopback stand-in would send every other host's ranks to their
// own loopback, to fail at their timeout.
std::string firstIPv4() {
  const char* spec = std::getenv("NCCL_SOCKET_IFNAME");
  const bool filtered = spec != nullptr && *spec != '\0';
  sockaddr_storage address{};
  socklen_t length = 0;
  if (!nns::core::hostAddress(AF_INET, &address, &length, nullptr)) return filtered ? "" : "127.0.0.1";
  char text[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&address)->sin_addr, text, sizeof(text));
  return text;
}

// A free port, listened on from now and kept for this process's rank 0 (keepRootListener): a port only looked up
// and let go could be taken by another program before rank 0 listens. -1 with errno on failure.
int listenOnFreePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  socklen_t length = sizeof(address);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 || listen(fd, SOMAXCONN) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const int error = errno;
    close(fd);
    errno = error;
    return -1;
  }
  nns::core::keepRootListener(fd);
  return ntohs(address.sin_port);
}

// A unique id made with a port nnsGetUniqueId picked ends in a random value, as ncclUniqueId carries one: the id's
// ranks form their own job at the bootstrap, so a rank holding a stale id (of a job that ended, whose port a later
// id got) is turned away instead of joining the later job. The address text comes first, NUL-terminated.
constexpr size_t kIdNonceAt = NNS_UNIQUE_ID_BYTES - 16;
constexpr char kIdNonceTag[8] = {'n', 'n', 's', '-', 'i', 'd', '1', '\0'};

uint64_t randomNonce() {
  uint64_t value = 0;
  if (getrandom(&value, sizeof(value), 0) == static_cast<ssize_t>(sizeof(value))) return value;
  try {
    std::random_device device;  // getrandom is missing (a kernel before 3.17) or was interrupted
    return (static_cast<uint64_t>(device()) << 32) ^ device();
  } catch (const std::exception&) {  // no entropy source at all: the clock and the process, still unlike another id's
    return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
           (static_cast<uint64_t>(getpid()) << 40);
  }
}

// Plugins are installed beside libnns.so: look there first, then where dlopen looks.
std::string libraryDir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&nnsGetVersion), &info) == 0 || info.dli_fname == nullptr) return ".";
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// Communicators asked for inside the current group: made together at nnsGroupEnd, as NCCL makes them, so one thread
// can create a rank of each (made one by one, the first would wait for the others' ranks until its timeout).
struct PendingInit {
  nnsComm_t comm;
  nns::core::LaunchInfo launch;
};
thread_local std::vector<PendingInit> pendingInits;

bool isPending(nnsComm_t comm) {
  return std::any_of(pendingInits.begin(), pendingInits.end(), [comm](const PendingInit& p) { return p.comm == comm; });
}

// A rank 0 that failed before its bootstrap took nnsGetUniqueId's port lets it go (kept, it listened for the life of
// the process).
void releaseUnusedRoot(const nns::core::LaunchInfo& launch) {
  if (launch.rank == 0 && launch.rootPort > 0) nns::core::releaseRootListener(launch.rootPort);
}

// Builds the communicator behind `holder`; made live (usable by the API) when that succeeds.
ncclResult_t buildComm(nnsComm* holder, const nns::core::LaunchInfo& launch) {
  nns::core::CommOptions options;
  options.searchDirs = {libraryDir()};
  ncclResult_t result = guarded([&] { holder->comm = std::make_unique<nns::core::Communicator>(launch, options); });
  if (result == ncclSuccess) {
    std::lock_guard<std::mutex> lock(liveMutex);
    liveComms.insert(holder);
  } else {
    releaseUnusedRoot(launch);
  }
  return result;
}

ncclResult_t makeComm(nnsComm_t* out, const nns::core::LaunchInfo& launch) {
  auto holder = std::make_unique<nnsComm>();
  if (groupDepth > 0) {
    *out = holder.release();
    pendingInits.push_back(PendingInit{*out, launch});
    std::lock_guard<std::mutex> lock(liveMutex);
    makingComms.insert(*out);
    return ncclSuccess;
  }
  ncclResult_t result = buildComm(holder.get(), launch);
  if (result == ncclSuccess) *out = holder.release();
  return result;
}

// Runs body(i) for each i in [0, count) on a thread of its own and joins them. An index whose thread cannot start (a
// process at its thread limit, no memory) goes to unstarted(i, why) and the others still run: the std::system_error
// escaped the C API before and ended the process.
template <class Body, class Unstarted>
void onThreads(size_t count, const Body& body, const Unstarted& unstarted) {
  std::vector<std::thread> threads;
  for (size_t i = 0; i < count; ++i) {
    try {
      threads.emplace_back([&body, i] { body(i); });
    } catch (const std::exception& e) {
      unstarted(i, std::string("could not start a thread for it: ") + e.what());
    }
  }
  for (auto& thread : threads) thread.join();
}

// At the outermost nnsGroupEnd: the group's communicators, each on a thread of its own (their bootstraps wait for
// each other). One that fails is freed; its handle is then refused as not live. The first failure is returned.
ncclResult_t makePendingComms() {
  std::vector<PendingInit> inits;
  inits.swap(pendingInits);
  if (inits.empty()) return ncclSuccess;
  // Each result stays an error until its communicator is built. Should anything below throw (no memory), every handle
  // still being made is settled before the exception leaves: a built one is live, the others failed (refused by every
  // call but nnsCommDestroy/nnsCommAbort, which free them), never left "in progress" for good.
  std::vector<ncclResult_t> results;
  struct Settle {
    const std::vector<PendingInit>& inits;
    const std::vector<ncclResult_t>& results;
    ~Settle() {
      std::lock_guard<std::mutex> lock(liveMutex);
      for (size_t i = 0; i < inits.size(); ++i) {
        if (makingComms.erase(inits[i].comm) == 0) continue;
        if (i >= results.size() || results[i] != ncclSuccess)
          failedComms.emplace(inits[i].comm, i < results.size() ? results[i] : ncclSystemError);
      }
    }
  } settle{inits, results};
  results.assign(inits.size(), ncclSystemError);
  std::vector<std::string> errors(inits.size());
  onThreads(
      inits.size(),
      [&](size_t i) {
        results[i] = buildComm(inits[i].comm, inits[i].launch);
        if (results[i] != ncclSuccess) errors[i] = lastError;  // this thread's own
      },
      [&](size_t i, const std::string& why) {
        results[i] = ncclSystemError;
        errors[i] = "communicator rank " + std::to_string(inits[i].launch.rank) + ": " + why;
        releaseUnusedRoot(inits[i].launch);
      });
  ncclResult_t first = ncclSuccess;
  for (size_t i = 0; i < inits.size(); ++i) {
    if (results[i] == ncclSuccess) continue;
    if (first == ncclSuccess) {
      first = results[i];
      lastError = errors[i];
    }
  }
  return first;
}

// nnsGroupEnd's work (below the C API, which catches what it throws).
ncclResult_t groupEnd();

}  // namespace

extern "C" {

ncclResult_t nnsGetVersion(int* version) {
  if (version == nullptr) return failWith(ncclInvalidArgument, "version is NULL");
  *version = NNS_VERSION_CODE;
  return ncclSuccess;
}

namespace {

// nnsGetUniqueId's work; without `fixedRootAllowed` (a split's new communicators, several at once) the root is always
// a port of this process's own, whatever NNS_ROOT_ADDR or NCCL_COMM_ID say.
ncclResult_t makeUniqueId(nnsUniqueId* uniqueId, bool fixedRootAllowed) {
  std::string address;
  bool pickedPort = false;
  // nccl-net-run's NNS_ROOT_ADDR is its job's rendezvous, which nnsCommInitFromEnv uses; an id made inside that job
  // is for another communicator (a sub-communicator whose root can be any rank, several at once), so it gets a port
  // of its own, as under torchrun or mpirun.
  // NCCL_COMM_ID, ncclGetUniqueId's fixed root, is read the same way where NNS_ROOT_ADDR is not set (or is the
  // launcher's).
  const char* launcher = std::getenv("NNS_LAUNCHER");
  const bool launchersRoot = launcher != nullptr && std::strcmp(launcher, "nccl-net-run") == 0;
  const char* ownRoot = launchersRoot || !fixedRootAllowed ? nullptr : std::getenv("NNS_ROOT_ADDR");
  const char* ncclRoot = fixedRootAllowed ? std::getenv("NCCL_COMM_ID") : nullptr;
  const bool ownRootSet = ownRoot != nullptr && *ownRoot != '\0';
  const char* rootVariable = ownRootSet ? "NNS_ROOT_ADDR" : "NCCL_COMM_ID";
  if (const char* root = ownRootSet ? ownRoot : ncclRoot; root != nullptr && *root != '\0') {
    address = root;
    std::string host, why;
    int port = 0;
    if (!nns::core::parseRootAddress(address, &host, &port, &why))
      return failWith(ncclInvalidUsage, std::string(rootVariable) +
                                            " must be host:port (port 1..65535) or [IPv6]:port, not \"" + address +
                                            "\": " + why);
  } else {
    const std::string host = firstIPv4();
    if (host.empty())
      return failWith(ncclSystemError, std::string("no interface that is up with an IPv4 address matches "
                                                   "NCCL_SOCKET_IFNAME=") +
                                           std::getenv("NCCL_SOCKET_IFNAME") +
                                           " (an IPv6 root: NNS_ROOT_ADDR=[address]:port on every rank)");
    int port = listenOnFreePort();
    if (port < 0)
      return failWith(ncclSystemError, std::string("no free port for the bootstrap: ") + std::strerror(errno));
    address = host + ":" + std::to_string(port);
    pickedPort = true;
  }
  if (address.size() >= kIdNonceAt) return failWith(ncclInvalidArgument, std::string(rootVariable) + " is too long");
  std::memset(uniqueId->internal, 0, sizeof(uniqueId->internal));
  std::memcpy(uniqueId->internal, address.c_str(), address.size());
  if (!pickedPort) return ncclSuccess;  // a fixed root: the same id on every rank that makes one, as NCCL_COMM_ID's
  uint64_t nonce = 0;
  while (nonce == 0) nonce = randomNonce();
  std::memcpy(uniqueId->internal + kIdNonceAt, kIdNonceTag, sizeof(kIdNonceTag));
  std::memcpy(uniqueId->internal + kIdNonceAt + sizeof(kIdNonceTag), &nonce, sizeof(nonce));
  return ncclSuccess;
}

// Lets go the port an id made here holds for a rank 0 that will not come.
void releaseUnusedRootOf(const nnsUniqueId& id) {
  nns::core::LaunchInfo launch;
  std::string why;
  launch.rank = 0;
  if (nns::core::parseRootAddress(std::string(id.internal, strnlen(id.internal, sizeof(id.internal))), &launch.rootHost,
                                  &launch.rootPort, &why))
    releaseUnusedRoot(launch);
}

}  // namespace

ncclResult_t nnsGetUniqueId(nnsUniqueId* uniqueId) {
  if (uniqueId == nullptr) return failWith(ncclInvalidArgument, "uniqueId is NULL");
  return makeUniqueId(uniqueId, true);
}

ncclResult_t nnsCommInitRank(nnsComm_t* comm, int nranks, nnsUniqueId commId, int rank) {
  GroupOperation joining;
  std::string address(commId.internal, strnlen(commId.internal, sizeof(commId.internal)));
  nns::core::LaunchInfo launch;
  std::string why;
  const bool parsed = nns::core::parseRootAddress(address, &launch.rootHost, &launch.rootPort, &why);
  // A rank 0 refused here will not listen on the id's port: nnsGetUniqueId's listener is let go (kept, it stayed
  // open for the life of the process, one more descriptor per refused call).
  launch.rank = rank;
  auto refuse = [&](const std::string& text) {
    if (parsed) releaseUnusedRoot(launch);
    return failWith(ncclInvalidArgument, text);
  };
  if (comm == nullptr) return refuse("comm is NULL");
  *comm = nullptr;  // on any failure, as ncclCommInitRank leaves it
  if (nranks < 1 || nranks > nns::core::kMaxRanks || rank < 0 || rank >= nranks)
    return refuse(nranks < 1 ? "nranks " + std::to_string(nranks) + ": at least 1"
                  : nranks > nns::core::kMaxRanks
                      ? "nranks " + std::to_string(nranks) + ": at most " + std::to_string(nns::core::kMaxRanks)
                      : "rank " + std::to_string(rank) + " is not in 0.." + std::to_string(nranks - 1) + " (nranks " +
                            std::to_string(nranks) + ")");
  if (!parsed)
    return failWith(ncclInvalidArgument, "the unique id holds no host:port (\"" + address + "\": " + why +
                                             "; was it made by nnsGetUniqueId?)");
  launch.size = nranks;
  launch.source = "nnsCommInitRank";
  if (std::memcmp(commId.internal + kIdNonceAt, kIdNonceTag, sizeof(kIdNonceTag)) == 0)
    std::memcpy(&launch.idNonce, commId.internal + kIdNonceAt + sizeof(kIdNonceTag), sizeof(launch.idNonce));
  return makeComm(comm, launch);
}

ncclResult_t nnsCommInitAll(nnsComm_t* comms, int ndev, const int* devlist) {
  if (comms == nullptr) return failWith(ncclInvalidArgument, "comms is NULL");
  if (ndev < 1 || ndev > nns::core::kMaxRanks)
    return failWith(ncclInvalidArgument,
                    "ndev " + std::to_string(ndev) + ": 1.." + std::to_string(nns::core::kMaxRanks));
  // Every handle NULL on any failure, as nns.h says, also on the refusals below (they were left as the caller had
  // them, and a caller that destroyed them after a failure destroyed what its array held).
  for (int i = 0; i < ndev; ++i) comms[i] = nullptr;
  if (groupDepth > 0)
    return failWith(ncclInvalidUsage, "nnsCommInitAll inside a group: call it outside (it is a group of its own)");
  if (devlist != nullptr) {
    for (int i = 0; i < ndev; ++i) {
      if (devlist[i] < 0)
        return failWith(ncclInvalidArgument, "devlist[" + std::to_string(i) + "] is " + std::to_string(devlist[i]));
      for (int j = 0; j < i; ++j)
        if (devlist[j] == devlist[i])
          return failWith(ncclInvalidUsage, "devlist[" + std::to_string(j) + "] and devlist[" + std::to_string(i) +
                                                "] are both device " + std::to_string(devlist[i]) +
                                                ": one rank per device, as ncclCommInitAll takes them");
    }
  }
  // All ranks are in this process: the root is a port of its own, whatever NNS_ROOT_ADDR or NCCL_COMM_ID say.
  nnsUniqueId id;
  if (const ncclResult_t r = makeUniqueId(&id, false); r != ncclSuccess) return r;
  nnsGroupStart();
  for (int i = 0; i < ndev; ++i) nnsCommInitRank(&comms[i], ndev, id, i);  // queued: made together at the end
  const ncclResult_t made = nnsGroupEnd();
  if (made == ncclSuccess) return ncclSuccess;
  // All or nothing, as ncclCommInitAll: the ranks made are destroyed and every handle is NULL again.
  const std::string why = lastError;
  for (int i = 0; i < ndev; ++i) {
    if (comms[i] != nullptr) nnsCommDestroy(comms[i]);
    comms[i] = nullptr;
  }
  return failWith(made, "nnsCommInitAll: " + why);
}

ncclResult_t nnsCommInitFromEnv(nnsComm_t* comm) {
  GroupOperation joining;
  if (comm == nullptr) return failWith(ncclInvalidArgument, "comm is NULL");
  *comm = nullptr;
  nns::core::LaunchInfo launch;
  std::string error;
  if (!nns::core::launchInfoFromEnvironment(&launch, &error)) return failWith(ncclInvalidUsage, error);
  return makeComm(comm, launch);
}

ncclResult_t nnsCommSplit(nnsComm_t comm, int color, int key, nnsComm_t* newcomm, void* config) {
  // This rank's own argument error. With a live communicator it still takes part in the exchange below, flagged, so
  // that every rank fails at once instead of waiting out the timeout for a rank that never came.
  std::string refused;
  if (newcomm == nullptr)
    refused = "newcomm is NULL";
  else if (config != nullptr)
    refused = "config is not NULL: nnsCommSplit takes no ncclConfig_t (pass NULL)";
  else if (color < 0 && color != NNS_SPLIT_NOCOLOR)
    refused = "color " + std::to_string(color) + ": >= 0 or NNS_SPLIT_NOCOLOR";
  if (newcomm != nullptr) *newcomm = nullptr;
  if (groupDepth > 0)  // the exchange cannot run inside a group
    return failWith(ncclInvalidUsage, "nnsCommSplit inside a group: call it outside (one thread per rank)");
  int size = 0, rank = 0;
  ncclResult_t known = nnsCommCount(comm, &size);
  if (known == ncclSuccess) known = nnsCommUserRank(comm, &rank);
  if (known != ncclSuccess) return refused.empty() ? known : failWith(ncclInvalidArgument, refused);
  // Every rank's color, key and refusal flag; then the ids that each new communicator's rank 0 makes (empty from the
  // others).
  constexpr size_t kFields = 3;
  std::vector<int32_t> choices(kFields * static_cast<size_t>(size));
  const int32_t mine[kFields] = {color, key, refused.empty() ? 0 : 1};
  if (ncclResult_t r = nnsAllGather(mine, choices.data(), kFields, ncclInt32, comm, nullptr); r != ncclSuccess)
    return r;
  if (!refused.empty()) return failWith(ncclInvalidArgument, refused + " (the other ranks' nnsCommSplit fail too)");
  for (int r = 0; r < size; ++r) {
    const int32_t* theirs = &choices[kFields * static_cast<size_t>(r)];
    if (theirs[2] == 0) continue;
    const bool badColor = theirs[0] < 0 && theirs[0] != NNS_SPLIT_NOCOLOR;
    const std::string what = badColor ? "color " + std::to_string(theirs[0]) : "newcomm NULL or a config";
    return failWith(ncclInvalidUsage, "nnsCommSplit: rank " + std::to_string(r) + "'s call was refused (" + what +
                                          "; see that rank's error), so no rank makes a communicator");
  }
  std::vector<int> members;  // this rank's new communicator, in new rank order
  for (int r = 0; r < size; ++r)
    if (color != NNS_SPLIT_NOCOLOR && choices[kFields * static_cast<size_t>(r)] == color) members.push_back(r);
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
    return choices[kFields * static_cast<size_t>(a) + 1] < choices[kFields * static_cast<size_t>(b) + 1];
  });
  const int newRank = static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin());
  nnsUniqueId id;
  std::memset(&id, 0, sizeof(id));
  ncclResult_t made = ncclSuccess;
  std::string why;
  if (!members.empty() && newRank == 0) {
    made = makeUniqueId(&id, false);
    if (made != ncclSuccess) {
      why = lastError;
      std::memset(&id, 0, sizeof(id));
    }
  }
  std::vector<nnsUniqueId> ids(static_cast<size_t>(size));
  if (ncclResult_t r = nnsAllGather(&id, ids.data(), sizeof(id), ncclInt8, comm, nullptr); r != ncclSuccess) {
    if (made == ncclSuccess && !members.empty() && newRank == 0) releaseUnusedRootOf(id);
    return r;
  }
  if (made != ncclSuccess) return failWith(made, "nnsCommSplit: the new communicator's unique id: " + why);
  if (members.empty()) return ncclSuccess;  // NNS_SPLIT_NOCOLOR
  const nnsUniqueId& rootsId = ids[static_cast<size_t>(members[0])];
  if (rootsId.internal[0] == '\0')
    return failWith(ncclSystemError, "nnsCommSplit: rank " + std::to_string(members[0]) +
                                         ", the new communicator's rank 0, could not make its unique id");
  return nnsCommInitRank(newcomm, static_cast<int>(members.size()), rootsId, newRank);
}

ncclResult_t nnsCommFinalize(nnsComm_t comm) {
  Hold hold(comm);
  if (!hold) return notLive(comm);
  if (comm->finalized.exchange(true, std::memory_order_acq_rel))
    return failWith(ncclInvalidUsage, "nnsCommFinalize was called on this communicator already");
  const ncclResult_t failed = comm->comm->asyncResult();
  if (failed != ncclSuccess) return failWith(failed, "communicator failed earlier: " + comm->comm->asyncError());
  return ncclSuccess;
}

// NULL is a no-op, as in ncclCommDestroy and ncclCommAbort: cleanup code may run for a communicator never made.
ncclResult_t nnsCommDestroy(nnsComm_t comm) {
  if (comm == nullptr || freeFailed(comm)) return ncclSuccess;
  if (!retire(comm)) return notLive(comm);
  return freeRetired(comm, retireDeadline(comm));
}

ncclResult_t nnsCommAbort(nnsComm_t comm) {
  if (comm == nullptr || freeFailed(comm)) return ncclSuccess;
  if (!retire(comm)) {
    // Being destroyed (or aborted) by another thread, which waits for the calls in progress: they fail now, and that
    // thread frees it. Held meanwhile, so it cannot be freed under this abort.
    bool retiring = false;
    {
      std::lock_guard<std::mutex> lock(liveMutex);
      retiring = retiringComms.count(comm) != 0;
      if (retiring) ++comm->holds;
    }
    if (!retiring) return notLive(comm);  // (it takes the lock itself)
    comm->comm->abort("aborted by nnsCommAbort");
    std::lock_guard<std::mutex> lock(liveMutex);
    if (--comm->holds == 0) released.notify_all();
    return ncclSuccess;
  }
  const auto deadline = retireDeadline(comm);
  comm->comm->abort("aborted by nnsCommAbort");
  return freeRetired(comm, deadline);
}

ncclResult_t nnsCommGetAsyncError(nnsComm_t comm, ncclResult_t* asyncError) {
  Hold hold(comm);
  if (!hold && asyncError != nullptr && beingMade(comm)) {
    *asyncError = ncclInProgress;  // its group's nnsGroupEnd is making it, on this thread or another
    return ncclSuccess;
  }
  if (!hold && asyncError != nullptr) {
    // Its creation failed at nnsGroupEnd: that is its error, as NCCL reports a failed non-blocking init (a watchdog
    // polling for the end of ncclInProgress otherwise never saw one).
    std::lock_guard<std::mutex> lock(liveMutex);
    if (auto failed = failedComms.find(comm); failed != failedComms.end()) {
      *asyncError = failed->second;
      return ncclSuccess;
    }
  }
  if (!hold) return notLive(comm);
  if (asyncError == nullptr) return failWith(ncclInvalidArgument, "comm or asyncError is NULL");
  *asyncError = comm->comm->asyncResult();
  return ncclSuccess;
}

ncclResult_t nnsCommRegister(const nnsComm_t comm, void* buff, size_t size, void** handle) {
  Hold hold(comm);
  if (!hold) return notLive(comm);
  if (buff == nullptr || size == 0 || handle == nullptr)
    return failWith(ncclInvalidArgument, "comm, buff or handle is NULL, or size is 0");
  return guarded([&] { *handle = comm->comm->registerBuffer(buff, size); });
}

ncclResult_t nnsCommDeregister(const nnsComm_t comm, void* handle) {
  Hold hold(comm);
  if (!hold) return notLive(comm);
  if (handle == nullptr) return failWith(ncclInvalidArgument, "comm or handle is NULL");
  bool found = true;
  if (ncclResult_t r = guarded([&] { found = comm->comm->deregisterBuffer(handle); }); r != ncclSuccess) return r;
  return found ? ncclSuccess : failWith(ncclInvalidArgument, "handle is not a registration of this communicator");
}

ncclResult_t nnsCommCount(const nnsComm_t comm, int* count) {
  Hold hold(comm);
  if (!hold) return notLive(comm);
  if (count == nullptr) return failWith(ncclInvalidArgument, "comm or count is NULL");
  *count = comm->comm->size();
  return ncclSuccess;
}

ncclResult_t nnsRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                     ncclScalarResidence_t residence, nnsComm_t comm) {
  Hold hold(comm);
  if (!hold) return notLive(comm);
  if (op == nullptr || scalar == nullptr) return failWith(ncclInvalidArgument, "op or scalar is NULL");
  const size_t bytes = nns::coll::typeSize(datatype);
  if (bytes == 0)
    return failWith(ncclInvalidArgument, "unknown data type " + std::to_string(static_cast<int>(datatype)));
  if (residence != ncclScalarHostImmediate && residence != ncclScalarDevice)
    return failWith(ncclInvalidArgument, "scalar residence " + std::to_string(static_cast<int>(residence)) +
                                             " is neither ncclScalarHostImmediate nor ncclScalarDevice");
  nnsComm::PreMulSum made;
  made.type = datatype;
  if (residence == ncclScalarHostImmediate)
    std::memcpy(&made.value, scalar, bytes);
  else
    made.pointer = scalar;
  std::lock_guard<std::mutex> lock(comm->opsMutex);
  const long index = takeOpNumber();
  if (index > static_cast<long>(ncclMaxRedOp) - ncclNumOps) {
    releaseOpNumber(index);
    return failWith(ncclInvalidUsage, "no reduction op number left (" + std::to_string(index) + " ops made and alive)");
  }
  comm->ops[index] = made;
  *op = static_cast<ncclRedOp_t>(ncclNumOps + static_cast<int>(index));
  return ncclSuccess;
}

ncclResult_t nnsRedOpDestroy(ncclRedOp_t op, nnsComm_t comm) {
  Hold hold(comm);
  if (!hold) return notLive(comm);
  if (static_cast<int>(op) >= 0 && op < ncclNumOps)
    return failWith(ncclInvalidArgument, std::string("reduction op ") + nns::coll::opName(op) +
                                             " is built in: only ops made by nnsRedOpCreatePreMulSum are destroyed");
  std::lock_guard<std::mutex> lock(comm->opsMutex);
  const auto found = comm->ops.find(static_cast<long>(op) - ncclNumOps);
  if (found == comm->ops.end())
    return failWith(ncclInvalidArgument,
                    "reduction op " + std::to_string(static_cast<int>(op)) + " was not made on this communicator");
  releaseOpNumber(found->first);
  comm->ops.erase(found);
  return ncclSuccess;
}

ncclResult_t nnsCommUserRank(const nnsComm_t comm, int* rank) {
  Hold hold(comm);
  if (!hold) return notLive(comm);
  if (rank == nullptr) return failWith(ncclInvalidArgument, "comm or rank is NULL");
  *rank = comm->comm->rank();
  return ncclSuccess;
}

const char* nnsGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error (see nnsGetLastError)";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument (see nnsGetLastError)";
    case ncclInvalidUsage: return "invalid usage (see nnsGetLastError)";
    case ncclRemoteError: return "remote process exited, a network error occurred or an operation timed out";
    case ncclInProgress: return "operation in progress";
    case ncclTimeout: return "timeout";
    default: return "unknown result code";
  }
}

namespace {
// What nnsGetLastError hands out, as NCCL's ncclGetLastError does: a fixed buffer of the thread's, so that a pointer
// the caller keeps stays a string (it pointed into lastError, which the next failing call's longer text reallocated: a
// read after free for a caller that saved the text, cleaned up, then logged it).
thread_local char handedOutError[4096];
const char* handOut(const std::string& text) {
  constexpr size_t kRoom = sizeof(handedOutError) - 1;
  constexpr char kCut[] = " [...]";
  if (text.size() <= kRoom) {
    std::memcpy(handedOutError, text.data(), text.size());
    handedOutError[text.size()] = '\0';
  } else {
    std::memcpy(handedOutError, text.data(), kRoom - (sizeof(kCut) - 1));
    std::memcpy(handedOutError + kRoom - (sizeof(kCut) - 1), kCut, sizeof(kCut));
  }
  return handedOutError;
}
}  // namespace

const char* nnsGetLastError(nnsComm_t comm) {
  // The calling thread's last error, as NCCL's; and where this thread has none, a failed communicator's own: a
  // watchdog thread that polls nnsCommGetAsyncError made no failing call itself, and got "" for the why.
  if (!lastError.empty() || comm == nullptr) return handOut(lastError);
  Hold hold(comm);
  return handOut(hold && comm->comm->asyncResult() != ncclSuccess ? comm->comm->asyncError() : std::string());
}

ncclResult_t nnsAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                          nnsComm_t comm, void* stream) {
  GroupOperation joining;
  Hold hold(comm);
  if (ncclResult_t r = checkCall(hold, comm, stream, datatype); r != ncclSuccess) return r;
  Operation operation{Operation::kAllReduce, comm, sendbuff, recvbuff, count, datatype};
  if (ncclResult_t r = resolveOp(comm, op, datatype, &operation); r != ncclSuccess) return r;
  if (ncclResult_t r =
          checkArguments(comm, datatype, sendbuff, recvbuff, count, operation.op, 1, nns::coll::detail::Layout::kSame);
      r != ncclSuccess)
    return r;
  return enqueueOrRun(operation);
}

ncclResult_t nnsBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                          nnsComm_t comm, void* stream) {
  GroupOperation joining;
  Hold hold(comm);
  if (ncclResult_t r = checkCall(hold, comm, stream, datatype); r != ncclSuccess) return r;
  if (ncclResult_t r = checkRank(comm, root, "root"); r != ncclSuccess) return r;
  const bool isRoot = comm->comm->rank() == root;  // only the root reads sendbuff
  if (ncclResult_t r = checkArguments(comm, datatype, isRoot ? sendbuff : recvbuff, recvbuff, count, ncclSum, 1,
                                      isRoot ? nns::coll::detail::Layout::kSame : nns::coll::detail::Layout::kOne);
      r != ncclSuccess)
    return r;
  return enqueueOrRun({Operation::kBroadcast, comm, sendbuff, recvbuff, count, datatype, ncclSum, root});
}

ncclResult_t nnsReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                       int root, nnsComm_t comm, void* stream) {
  GroupOperation joining;
  Hold hold(comm);
  if (ncclResult_t r = checkCall(hold, comm, stream, datatype); r != ncclSuccess) return r;
  if (ncclResult_t r = checkRank(comm, root, "root"); r != ncclSuccess) return r;
  const bool isRoot = comm->comm->rank() == root;  // only the root writes recvbuff
  Operation operation{Operation::kReduce, comm, sendbuff, recvbuff, count, datatype, ncclSum, root};
  if (ncclResult_t r = resolveOp(comm, op, datatype, &operation); r != ncclSuccess) return r;
  if (ncclResult_t r = checkArguments(comm, datatype, sendbuff, isRoot ? recvbuff : sendbuff, count, operation.op, 1,
                                      isRoot ? nns::coll::detail::Layout::kSame : nns::coll::detail::Layout::kOne);
      r != ncclSuccess)
    return r;
  return enqueueOrRun(operation);
}

ncclResult_t nnsAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                          nnsComm_t comm, void* stream) {
  GroupOperation joining;
  Hold hold(comm);
  if (ncclResult_t r = checkCall(hold, comm, stream, datatype); r != ncclSuccess) return r;
  if (ncclResult_t r = checkArguments(comm, datatype, sendbuff, recvbuff, sendcount, ncclSum,
                                      static_cast<size_t>(comm->comm->size()), nns::coll::detail::Layout::kGather);
      r != ncclSuccess)
    return r;
  return enqueueOrRun({Operation::kAllGather, comm, sendbuff, recvbuff, sendcount, datatype});
}

ncclResult_t nnsReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                              ncclRedOp_t op, nnsComm_t comm, void* stream) {
  GroupOperation joining;
  Hold hold(comm);
  if (ncclResult_t r = checkCall(hold, comm, stream, datatype); r != ncclSuccess) return r;
  Operation operation{Operation::kReduceScatter, comm, sendbuff, recvbuff, recvcount, datatype};
  if (ncclResult_t r = resolveOp(comm, op, datatype, &operation); r != ncclSuccess) return r;
  if (ncclResult_t r = checkArguments(comm, datatype, sendbuff, recvbuff, recvcount, operation.op,
                                      static_cast<size_t>(comm->comm->size()), nns::coll::detail::Layout::kScatter);
      r != ncclSuccess)
    return r;
  return enqueueOrRun(operation);
}

ncclResult_t nnsSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, nnsComm_t comm,
                     void* stream) {
  GroupOperation joining;
  Hold hold(comm);
  if (ncclResult_t r = checkCall(hold, comm, stream, datatype); r != ncclSuccess) return r;
  if (ncclResult_t r = checkRank(comm, peer, "peer"); r != ncclSuccess) return r;
  if (ncclResult_t r =
          checkArguments(comm, datatype, sendbuff, sendbuff, count, ncclSum, 1, nns::coll::detail::Layout::kOne);
      r != ncclSuccess)
    return r;
  return enqueueOrRun({.kind = Operation::kPointToPoint,
                       .comm = comm,
                       .p2p = {P2POp::Send, peer, const_cast<void*>(sendbuff), count, datatype}});
}

ncclResult_t nnsRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, nnsComm_t comm, void* stream) {
  GroupOperation joining;
  Hold hold(comm);
  if (ncclResult_t r = checkCall(hold, comm, stream, datatype); r != ncclSuccess) return r;
  if (ncclResult_t r = checkRank(comm, peer, "peer"); r != ncclSuccess) return r;
  if (ncclResult_t r =
          checkArguments(comm, datatype, recvbuff, recvbuff, count, ncclSum, 1, nns::coll::detail::Layout::kOne);
      r != ncclSuccess)
    return r;
  return enqueueOrRun(
      {.kind = Operation::kPointToPoint, .comm = comm, .p2p = {P2POp::Recv, peer, recvbuff, count, datatype}});
}

ncclResult_t nnsGroupStart(void) {
  if (groupDepth++ == 0) {
    groupRefusal = ncclSuccess;
    groupRefusalText.clear();
  }
  return ncclSuccess;
}

ncclResult_t nnsGroupEnd(void) {
  try {
    return groupEnd();
  } catch (const std::exception& e) {  // no memory for the group's own bookkeeping
    // The group's operations are dropped, not left to run at the next group's end (their buffers may be gone).
    groupQueue.clear();
    groupRunning.clear();
    return failWith(ncclSystemError, std::string("nnsGroupEnd: ") + e.what());
  }
}

}  // extern "C"

namespace {

ncclResult_t groupEnd() {
  if (groupDepth == 0) return failWith(ncclInvalidUsage, "nnsGroupEnd without nnsGroupStart");
  if (--groupDepth > 0) return ncclSuccess;
  // Communicators made in the group come first (an operation on one was refused at its call: not live yet); the
  // operations queued on others still run, as their peers run theirs, and a failed init is returned after them.
  const ncclResult_t made = makePendingComms();
  const std::string madeError = made != ncclSuccess ? lastError : "";
  // The queue is swapped with an empty one that keeps its storage, and so is the list of communicators: a group
  // allocates nothing once groups of its size were run on this thread.
  groupRunning.swap(groupQueue);
  groupQueue.clear();
  const std::vector<Operation>& queue = groupRunning;
  // Per communicator: all its sends and receives first, as one exchange that progresses together (NCCL runs them
  // beside the group's collectives and orders neither against the other; run in call order, a collective between a
  // send and its receive deadlocked both ranks once the send outgrew the socket buffers), then its collectives in
  // call order. After an error the communicator's remaining operations are skipped.
  std::vector<nnsComm_t>& comms = groupComms;
  comms.clear();
  for (const auto& q : queue)
    if (std::find(comms.begin(), comms.end(), q.comm) == comms.end()) comms.push_back(q.comm);
  struct Outcome {
    ncclResult_t result = ncclSuccess;
    std::string error;
  };
  // `p2p`: where the communicator's sends and receives are gathered (this thread's storage, or a thread's own).
  auto runComm = [&queue](nnsComm_t comm, std::vector<P2POp>& p2p) {
    Outcome outcome;
    Hold hold(comm);
    if (!hold) {
      outcome.result = notLive(comm);
      outcome.error = lastError;
      return outcome;
    }
    p2p.clear();
    for (const auto& q : queue)
      if (q.comm == comm && q.kind == Operation::kPointToPoint) p2p.push_back(q.p2p);
    // Sends and receives refused as a whole (buffers that overlap, sends to itself without their receives: what only
    // the whole group shows) moved nothing and leave the communicator usable: its collectives still run, as their
    // peers run theirs, and the refusal is returned after them (as a refusal at a call is).
    Outcome refusal;
    if (!p2p.empty()) {
      outcome.result = guarded([&] {
        try {
          nns::coll::sendRecv(*comm->comm, std::span<const P2POp>(p2p));
        } catch (const nns::core::ArgumentError& e) {
          refusal = Outcome{e.result(), e.what()};
        }
      });
    }
    for (const auto& q : queue) {
      if (q.comm != comm || q.kind == Operation::kPointToPoint || outcome.result != ncclSuccess) continue;
      outcome.result = guarded([&] { runCollective(q); });
    }
    if (outcome.result != ncclSuccess) {
      outcome.error = lastError;
    } else if (refusal.result != ncclSuccess) {
      outcome.result = failWith(refusal.result, refusal.error);
      outcome.error = lastError;
    }
    return outcome;
  };
  // One thread may drive several communicators in one group (one per rank it holds, as with NCCL): their
  // operations wait on each other, so each communicator then runs on a thread of its own. One communicator (the
  // usual case) runs on this thread.
  Outcome failure;  // the first communicator's failure, if any
  if (comms.size() == 1) {
    failure = runComm(comms[0], groupP2P);
  } else if (comms.size() > 1) {
    std::vector<Outcome> outcomes(comms.size());
    onThreads(
        comms.size(),
        [&](size_t i) {
          std::vector<P2POp> p2p;
          outcomes[i] = runComm(comms[i], p2p);
        },
        [&](size_t i, const std::string& why) {
          outcomes[i] = Outcome{ncclSystemError, why};
        });
    for (auto& outcome : outcomes) {
      if (outcome.result == ncclSuccess) continue;
      failure = std::move(outcome);
      break;
    }
  }
  groupRunning.clear();
  if (made != ncclSuccess) {
    lastError = madeError;
    return made;
  }
  if (failure.result != ncclSuccess) {
    lastError = failure.error;
    return failure.result;
  }
  // A call refused at the call still makes the group incomplete, as NCCL's ncclGroupEnd returns the group's first
  // error: a caller that checks only nnsGroupEnd learns of it too (the other operations ran, so the peers did not
  // wait for them).
  if (groupRefusal != ncclSuccess) {
    lastError = "a call in this group was refused (its other operations ran): " + groupRefusalText;
    return groupRefusal;
  }
  return ncclSuccess;
}

}  // namespace
