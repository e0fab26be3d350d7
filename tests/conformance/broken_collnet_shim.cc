// broken_collnet_shim.cc: a collNet with one bug picked at run time (NNS_PICKED_BUG), for the collnet-* rules' own
// tests. It forwards the net and the collNet of the real star example (NNS_REAL_PLUGIN) through their v12 tables and
// changes one thing, a mistake real collNets make:
//   collnet-min-as-max         iallreduce reduces min as max (an op table off by one)
//   collnet-support-unsupported reduceSupport says yes to float16 sum, which the data path refuses (the support
//                              matrix and the reduction code out of step)
//   collnet-four-in-flight     a fifth all-reduce posted before the first completes is refused (a queue of 4)
//   collnet-death-swallowed    test reports an operation done, with success, when the plugin found it failed (an
//                              error path that forgets to return the error)
//   collnet-leaked-descriptor  each comm opens a descriptor (a completion channel) that closeColl forgets
//   collnet-old-version-differs the v6 table (exported beside v12, as the real one's) names its device otherwise (an
//                              old table kept by hand that drifted from the new one)
//   collnet-parts-reversed     iallgather and ireducescatter walk a window's parts last to first (an SGE loop
//                              running backwards; a window of one part is right)
//   collnet-one-part-only      not a bug: iallgather and ireducescatter refuse several parts with ncclInvalidArgument
//                              (NCCL posts one), which the rules allow and say so
//   collnet-window-from-block-start iallgather reads sendData, and ireducescatter writes recvData, as the start of
//                              the rank's block where NCCL points it at the rank's first byte inside a window
//                              that starts inside the block (the star example's own reading of sendData before
//                              NCCL's was checked; full windows are right)
//   collnet-data-at-registration-start iallreduce reads and writes from the start of the registrations its handles
//                              name, not at sendData and recvData (an address taken from the memory key): right
//                              where a buffer is posted whole, wrong for NCCL's chunks of a registered buffer
//   collnet-without-iallgather not a bug: a v12 table without iallgather and ireducescatter (both optional), for
//                              the engine's tests of ranks whose collNets differ in what they have
//   collnet-registration-limit not a bug: regMr of more than 2 MiB fails with ncclSystemError (an adapter's largest
//                              memory region), for the engine's tests of a call whose buffers one rank cannot register
//   collnet-two-registrations  not a bug: a comm holds at most 2 registrations at once, a third regMr fails with
//                              ncclSystemError (an adapter whose table of memory regions is nearly full), for the
//                              engine's tests of a call whose second buffer a rank cannot register after its first
//   collnet-small-operations   not a bug: device 0's maxCollBytes is 64 KiB (a device whose operations are
//                              smaller than its peers'), for the engine's tests of ranks whose devices differ in it
//   collnet-coll-bytes-over-1tib device 0's maxCollBytes is 1 TiB + 1 (a bound taken as exclusive): NCCL
//                              refuses the collNet connection on anything above 1 TiB
//   collnet-slow-test          not a bug: each test call takes 0.1 s (an adapter whose completion poll is slow),
//                              for the engine's test of a call that keeps a caller queued behind it for long
//   collnet-init-crashes       init raises SIGSEGV (a crash in the collNet's setup), for nccl-net-info's report of
//                              a collNet that ends the process
//   collnet-output-cleared-first ireducescatter zeroes the rank's part of the window at recvData before it reads the
//                              window (an output used as the accumulator): wrong only in place, where that part is
//                              the rank's own input
#include <dlfcn.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include <nccl_net/net.h>

namespace {

void* library() {
  static void* handle = dlopen(NNS_REAL_PLUGIN, RTLD_NOW | RTLD_LOCAL);
  return handle;
}
const ncclNet_v12_t* realNet() {
  static auto* table = library() ? static_cast<const ncclNet_v12_t*>(dlsym(library(), "ncclNetPlugin_v12")) : nullptr;
  return table;
}
const ncclCollNet_v6_t* realCollV6() {
  static auto* table =
      library() ? static_cast<const ncclCollNet_v6_t*>(dlsym(library(), "ncclCollNetPlugin_v6")) : nullptr;
  return table;
}
const ncclCollNet_v12_t* realColl() {
  static auto* table =
      library() ? static_cast<const ncclCollNet_v12_t*>(dlsym(library(), "ncclCollNetPlugin_v12")) : nullptr;
  return table;
}

bool picked(const char* name) {
  const char* bug = std::getenv("NNS_PICKED_BUG");
  return bug != nullptr && std::strcmp(bug, name) == 0;
}

std::atomic<int> gPending{0};  // all-reduces posted and not yet completed, in this process

ncclResult_t netInit(void** ctx, uint64_t commId, ncclNetCommConfig_v12_t* config, ncclDebugLogger_t logger,
                     ncclProfilerCallback_t profiler) {
  if (realNet() == nullptr || realColl() == nullptr) return ncclSystemError;
  return realNet()->init(ctx, commId, config, logger, profiler);
}

ncclResult_t collInit(void** ctx, uint64_t commId, ncclDebugLogger_t logger) {
  if (realColl() == nullptr) return ncclSystemError;
  if (picked("collnet-init-crashes")) raise(SIGSEGV);
  return realColl()->init(ctx, commId, logger);
}

ncclResult_t reduceSupport(ncclDataType_t type, ncclRedOp_t op, int* supported) {
  ncclResult_t result = realColl()->reduceSupport(type, op, supported);
  if (result == ncclSuccess && picked("collnet-support-unsupported") && type == ncclFloat16 && op == ncclSum)
    *supported = 1;
  return result;
}

// Where each live registration starts (collnet-data-at-registration-start needs it), and how many each comm holds
// (collnet-two-registrations).
std::mutex gStartsMutex;
std::map<void*, void*> gStarts;
std::map<void*, int> gHeld;

ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  if (picked("collnet-registration-limit") && size > (2u << 20)) return ncclSystemError;
  std::lock_guard<std::mutex> lock(gStartsMutex);
  if (picked("collnet-two-registrations") && gHeld[comm] >= 2) return ncclSystemError;
  ncclResult_t result = realColl()->regMr(comm, data, size, type, mhandle);
  if (result == ncclSuccess) {
    gStarts[*mhandle] = data;
    ++gHeld[comm];
  }
  return result;
}

ncclResult_t deregMr(void* comm, void* mhandle) {
  std::lock_guard<std::mutex> lock(gStartsMutex);
  ncclResult_t result = realColl()->deregMr(comm, mhandle);
  if (result == ncclSuccess) {
    gStarts.erase(mhandle);
    --gHeld[comm];
  }
  return result;
}

void* registrationStart(void* mhandle, void* data) {
  std::lock_guard<std::mutex> lock(gStartsMutex);
  auto found = gStarts.find(mhandle);
  return found == gStarts.end() ? data : found->second;
}

ncclResult_t iallreduce(void* comm, void* sendData, void* recvData, size_t count, ncclDataType_t type, ncclRedOp_t op,
                        void* sendMhandle, void* recvMhandle, void** request) {
  if (picked("collnet-min-as-max") && op == ncclMin) op = ncclMax;
  if (picked("collnet-data-at-registration-start")) {
    sendData = registrationStart(sendMhandle, sendData);
    recvData = registrationStart(recvMhandle, recvData);
  }
  if (picked("collnet-four-in-flight") && gPending.load() >= 4) return ncclInternalError;
  ncclResult_t result =
      realColl()->iallreduce(comm, sendData, recvData, count, type, op, sendMhandle, recvMhandle, request);
  if (result == ncclSuccess && *request != nullptr) gPending.fetch_add(1);
  return result;
}

// The parts given to the real collNet, last first, where collnet-parts-reversed is picked (at most 8 parts: the
// rules pass 3).
struct Parts {
  ncclNetSGE_v12_t sge[8];
  ncclNetSGE_v12_t* reorder(int n, ncclNetSGE_v12_t* parts) {
    if (!picked("collnet-parts-reversed") || n < 2 || n > 8) return parts;
    for (int i = 0; i < n; ++i) sge[i] = parts[n - 1 - i];
    return sge;
  }
};

// Each comm's rank, from connect (collnet-window-from-block-start and collnet-output-cleared-first need it).
std::mutex gRanksMutex;
std::map<void*, int> gRanks;

// Where collnet-window-from-block-start is picked: taking `data` as the rank's block's start, its bytes in a window
// that starts inside the block are at data + (the window's offset inside the block), which the real one is handed.
void* fromBlockStart(void* comm, void* data, size_t bytesPerRank, size_t windowOffset) {
  if (!picked("collnet-window-from-block-start")) return data;
  std::lock_guard<std::mutex> lock(gRanksMutex);
  const size_t begin = bytesPerRank * static_cast<size_t>(gRanks[comm]);
  if (windowOffset > begin && windowOffset < begin + bytesPerRank)
    return static_cast<char*>(data) + (windowOffset - begin);
  return data;
}

ncclResult_t iallgather(void* comm, void* sendData, int nRecvParts, ncclNetSGE_v12_t* recvParts, size_t bytesPerRank,
                        size_t windowOffset, size_t windowBytes, void* sendMhandle, void** request) {
  sendData = fromBlockStart(comm, sendData, bytesPerRank, windowOffset);
  if (picked("collnet-one-part-only") && nRecvParts > 1) return ncclInvalidArgument;
  Parts parts;  // the real one copies the list at the post
  return realColl()->iallgather(comm, sendData, nRecvParts, parts.reorder(nRecvParts, recvParts), bytesPerRank,
                                windowOffset, windowBytes, sendMhandle, request);
}

ncclResult_t ireducescatter(void* comm, int nSendParts, ncclNetSGE_v12_t* sendParts, void* recvData,
                            size_t bytesPerRank, size_t windowOffset, size_t windowBytes, ncclDataType_t type,
                            ncclRedOp_t op, void* recvMhandle, void** request) {
  if (picked("collnet-one-part-only") && nSendParts > 1) return ncclInvalidArgument;
  recvData = fromBlockStart(comm, recvData, bytesPerRank, windowOffset);
  if (picked("collnet-output-cleared-first")) {
    std::lock_guard<std::mutex> lock(gRanksMutex);
    const size_t begin = bytesPerRank * static_cast<size_t>(gRanks[comm]);
    const size_t from = std::max(begin, windowOffset), to = std::min(begin + bytesPerRank, windowOffset + windowBytes);
    if (from < to) std::memset(recvData, 0, to - from);
  }
  Parts parts;
  return realColl()->ireducescatter(comm, nSendParts, parts.reorder(nSendParts, sendParts), recvData, bytesPerRank,
                                    windowOffset, windowBytes, type, op, recvMhandle, request);
}

ncclResult_t connect(void* handles[], int nranks, int rank, void* listenComm, void** collComm) {
  ncclResult_t result = realColl()->connect(handles, nranks, rank, listenComm, collComm);
  if (result == ncclSuccess && picked("collnet-leaked-descriptor")) (void)eventfd(0, EFD_CLOEXEC);
  if (result == ncclSuccess) {
    std::lock_guard<std::mutex> lock(gRanksMutex);
    gRanks[*collComm] = rank;
  }
  return result;
}

ncclResult_t closeColl(void* collComm) {
  {
    std::lock_guard<std::mutex> lock(gRanksMutex);
    gRanks.erase(collComm);
  }
  return realColl()->closeColl(collComm);
}

ncclResult_t getPropertiesV6(int dev, ncclNetProperties_v6_t* props) {
  ncclResult_t result = realCollV6()->getProperties(dev, props);
  if (result == ncclSuccess && picked("collnet-old-version-differs")) props->name = const_cast<char*>("star0-v6");
  return result;
}

ncclResult_t getProperties(int dev, ncclNetProperties_v12_t* props) {
  ncclResult_t result = realColl()->getProperties(dev, props);
  if (result == ncclSuccess && picked("collnet-small-operations")) props->maxCollBytes = 64 << 10;
  if (result == ncclSuccess && picked("collnet-coll-bytes-over-1tib"))
    props->maxCollBytes = size_t{NCCL_MAX_NET_SIZE_BYTES} + 1;
  return result;
}

ncclResult_t test(void* request, int* done, int* size) {
  if (picked("collnet-slow-test")) usleep(100 * 1000);
  ncclResult_t result = realColl()->test(request, done, size);
  if (result != ncclSuccess && picked("collnet-death-swallowed")) {
    *done = 1;
    result = ncclSuccess;
  }
  if (result != ncclSuccess || *done) gPending.fetch_sub(1);
  return result;
}

}  // namespace

extern "C" {
__attribute__((visibility("default"))) ncclNet_v12_t ncclNetPlugin_v12;
__attribute__((visibility("default"))) ncclCollNet_v12_t ncclCollNetPlugin_v12;
__attribute__((visibility("default"))) ncclCollNet_v6_t ncclCollNetPlugin_v6;
}

// Filled at load: the real tables with this shim's functions in the places its bugs live.
__attribute__((constructor)) static void fillTables() {
  if (realNet() == nullptr || realColl() == nullptr) {
    ncclNetPlugin_v12 = ncclNet_v12_t{};
    ncclNetPlugin_v12.name = "broken-collnet (no real plugin)";
    ncclNetPlugin_v12.init = netInit;
    return;
  }
  ncclNetPlugin_v12 = *realNet();
  ncclNetPlugin_v12.init = netInit;
  ncclCollNetPlugin_v12 = *realColl();
  ncclCollNetPlugin_v12.init = collInit;
  ncclCollNetPlugin_v12.reduceSupport = reduceSupport;
  ncclCollNetPlugin_v12.getProperties = getProperties;
  ncclCollNetPlugin_v12.iallreduce = iallreduce;
  ncclCollNetPlugin_v12.regMr = regMr;
  ncclCollNetPlugin_v12.deregMr = deregMr;
  ncclCollNetPlugin_v12.test = test;
  ncclCollNetPlugin_v12.connect = connect;
  ncclCollNetPlugin_v12.iallgather = iallgather;
  ncclCollNetPlugin_v12.closeColl = closeColl;
  ncclCollNetPlugin_v12.ireducescatter = ireducescatter;
  if (picked("collnet-without-iallgather")) {
    ncclCollNetPlugin_v12.iallgather = nullptr;
    ncclCollNetPlugin_v12.ireducescatter = nullptr;
  }
  if (realCollV6() != nullptr) {
    ncclCollNetPlugin_v6 = *realCollV6();
    ncclCollNetPlugin_v6.getProperties = getPropertiesV6;
  }
}
