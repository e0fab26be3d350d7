// rules.cc: the conformance rules, each named after what it checks, and the process machinery that runs them.
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "collnet_rules.hpp"
#include "harness.hpp"
#include "nccl_net/sdk/result.hpp"
#include "netns.hpp"
#include "nns/core/printable.hpp"
#include "nns/tools/signal_state.hpp"
#include "tcp_strangers.hpp"

namespace nns::check {
namespace {

using Clock = std::chrono::steady_clock;
using core::Net;

// ---- per-call watchdog: a call that does not return in time ends the process with a verdict -----------------------
int gResultFd = -1;             // where the rule process writes its verdict
const char* gCurrentCall = "";  // the plugin call in progress
int gCallTimeout = 5;
int gPeerDeathSeconds = 30;  // how long a pending test may take to notice a dead peer
// How long one send or receive may take to complete: 30 s, or half the rule timeout where that is shorter, so that a
// rule names the message that never completed ("test still said 'not done' after N s") before its own timeout ends
// it as "hung" with no more said.
int gTransferWaitSeconds = 30;
int gCollRanks = 3;      // --coll-ranks: processes in each collNet collective
int gRuleSeconds = 60;   // --rule-timeout: a rule that runs long may stop itself a little before, saying how far it got
std::string gPeerNetns;  // --netns: the namespace peers enter
// The copy of the plugin peers open: every peer's with --netns, else handle-is-self-contained's.
std::string gPeerLibrary;
std::string gVersionsLibrary;  // every-version-agrees's fresh instance (Options::versionsLibrary)
// Set by handle-is-self-contained: its peer opens gPeerLibrary, a second instance of the plugin, as --netns's peers
// do, instead of going on with the instance of the rule process it was forked from.
bool gFreshPeer = false;
// --netns: the vNIC the rule made (virtual-devices), which a peer opening its own copy of the plugin makes again
// before it uses the rule's device, as every NCCL process fuses its own NICs.
bool gMadeVirtualDevice = false;
ncclNetVDeviceProps_v12_t gVirtualDevice{};
volatile sig_atomic_t gRunningRule = 0;  // process group of the rule in progress (the harness's parent process)
const char* volatile gRunningRuleName = nullptr;  // its name (a rules() entry's)
// The first basic rule (isBasicRule) that failed earlier in this run, or nullptr: set by runRules before it forks each
// rule's process. A later rule's failure is then most likely that rule's bug met again (a plugin whose test reported
// the posted size failed 25 rules, each with a hint of its own: EINTR, a lock, ids never reused), so the rules' own
// hints at a cause (ownHintsApply) give way to the line's "fix the first failing basic rule first".
const char* gEarlierBasicFailure = nullptr;
bool ownHintsApply() {
  return gEarlierBasicFailure == nullptr;
}

[[noreturn]] void harnessExit(int code);  // below

void onAlarm(int) {
  char text[256];
  int n = std::snprintf(text, sizeof(text), "FAIL|%s did not return within %d s (a blocking call)", gCurrentCall,
                        gCallTimeout);
  if (gResultFd >= 0 && n > 0) (void)!write(gResultFd, text, static_cast<size_t>(n));
  harnessExit(3);
}

// The plugin call each process of a rule is in, kept in memory shared with the harness (slot 0: the rule process,
// slot 1: its peer): a process the plugin kills cannot say where it was, so the harness reads it here.
// Atomic (lock-free, so plain shared memory and safe from a signal handler): comms-on-threads notes calls from
// several threads of one process, and the harness reads the notes while the processes write them.
struct CallNote {
  std::atomic<const char*> name;  // a string literal: the same address in the forked harness
  std::atomic<int> inProgress;
  // A pair's sender (openPair): 1 while its connect has not given it a comm, and the exit code it gives up with when
  // connect never does, though accept gave the rule one (openPair clears it when accept did not). Every later symptom
  // of the rule (receives that never complete) follows from that, so the verdict says it.
  std::atomic<int> pairConnecting;
  std::atomic<int> connectGaveUp;
  // 1 once the harness itself ends the process (harnessExit): an exit status it did not set came from the plugin, even
  // one that equals a harness code (a plugin's exit(3) is not a call that timed out).
  std::atomic<int> harnessExit;
  // A regMr that failed in this process (registerBuffer): its result (0: none) and the buffer's size, for the verdict
  // of a peer that ended on it.
  std::atomic<int> regMrFailed;
  std::atomic<size_t> regMrFailedBytes;
};
static_assert(std::atomic<const char*>::is_always_lock_free && std::atomic<int>::is_always_lock_free &&
              std::atomic<size_t>::is_always_lock_free);
CallNote* gCallNotes = nullptr;  // two slots, MAP_SHARED
CallNote* gMyNote = nullptr;     // this process's slot

// The process's exit when the harness ends it (a verdict's code, a watchdog's 3): marked first, so the harness tells
// it from an exit the plugin made with the same status. Async-signal-safe.
[[noreturn]] void harnessExit(int code) {
  if (gMyNote != nullptr) gMyNote->harnessExit.store(1, std::memory_order_relaxed);
  _exit(code);
}

void noteCall(const char* name, bool inProgress) {
  if (gMyNote == nullptr) return;
  gMyNote->name.store(name, std::memory_order_relaxed);
  gMyNote->inProgress.store(inProgress ? 1 : 0, std::memory_order_relaxed);
}

// " in test", " after test returned (...)", or "" when no call was noted.
// Defined when a sanitizer runtime is loaded (it then ends the process with an exit status on a crash it reports).
extern "C" size_t __sanitizer_get_current_allocated_bytes() __attribute__((weak));

// What an exit the harness did not make means: under a sanitizer also a crash it reported (and exited on).
const char* pluginExitedText() {
  return __sanitizer_get_current_allocated_bytes != nullptr
             ? "the plugin exited it, or crashed it and a sanitizer reported the crash"
             : "the plugin exited the process";
}

std::string whereText(const CallNote* note) {
  const char* name = note != nullptr ? note->name.load() : nullptr;
  if (name == nullptr) return "";
  if (note->inProgress.load() != 0) return std::string(" in ") + name;
  return std::string(" after ") + name + " returned (in a thread of the plugin, or on what it returned)";
}

// For a rule that hung: " (last plugin call: X)" when only the rule process made calls, else each side's last call,
// " (last plugin calls: listener/receiver: X; connector/sender: Y, still running)". In every rule but one the rule
// process listens, accepts and receives, and its peer connects and sends; `ruleSends` names the one where the rule
// process is the sender (receiver-death-is-an-error).
std::string lastCallsText(const CallNote* notes, bool ruleSends) {
  if (notes == nullptr) return "";
  auto call = [](const CallNote& note) {
    const char* name = note.name.load();
    return std::string(name != nullptr ? name : "none") + (note.inProgress.load() != 0 ? ", still running" : "");
  };
  if (notes[1].name.load() == nullptr)
    return notes[0].name.load() != nullptr ? " (last plugin call: " + call(notes[0]) + ")" : "";
  return std::string(" (last plugin calls: ") + (ruleSends ? "sender: " : "listener/receiver: ") + call(notes[0]) +
         (ruleSends ? "; receiver: " : "; connector/sender: ") + call(notes[1]) + ")";
}

// Calls that failed in this process (the rule's, or a peer's own since its fork), and the first breach of NCCL's
// calling contract seen beside the rule's own check, with the peer exit code that carries it to the harness. NCCL
// checks close and finalize results (a failed close fails the communicator's destroy), so a plugin whose healthy comm
// fails to close is told, even where the rule's own check passed; a close after an error (a peer that died, a
// truncation the rule provoked) may fail. Likewise a test() that writes more sizes than NCCL gives it room for.
// Guarded: comms-on-threads tests from several threads.
int gFailedCalls = 0;
std::mutex gContractMutex;
std::string gContractProblem;
int gContractCode = 0;
void noteContractProblem(int peerCode, const std::string& text) {
  std::lock_guard<std::mutex> lock(gContractMutex);
  if (!gContractProblem.empty()) return;
  gContractProblem = text;
  gContractCode = peerCode;
}
constexpr int kPeerCloseFailed = 52, kPeerSendSizesOverrun = 53, kPeerRecvSizesOverrun = 54;
std::string resultText(ncclResult_t result);
void noteResult(const char* name, ncclResult_t result) {
  if (result == ncclSuccess) return;
  const bool closing = std::strncmp(name, "close", 5) == 0 || std::strcmp(name, "finalize") == 0;
  if (closing && gFailedCalls == 0)
    noteContractProblem(kPeerCloseFailed, std::string(name) + " returned " + resultText(result) +
                                              " with no call failed before it (NCCL fails the communicator's "
                                              "destroy on it)");
  ++gFailedCalls;
}

// Around calls a rule makes in order to be refused (a foreign handle, a vNIC of nothing): their errors are the
// plugin's right, and do not excuse a close that fails later in the rule (a close may fail after a failed call).
class ExpectedRefusals {
 public:
  ExpectedRefusals() = default;
  ~ExpectedRefusals() { gFailedCalls = before_; }
  ExpectedRefusals(const ExpectedRefusals&) = delete;
  ExpectedRefusals& operator=(const ExpectedRefusals&) = delete;

 private:
  int before_ = gFailedCalls;
};

#define CALL(name, expr)                \
  ([&]() -> ncclResult_t {              \
    gCurrentCall = name;                \
    noteCall(name, true);               \
    alarm(gCallTimeout);                \
    ncclResult_t call_result_ = (expr); \
    alarm(0);                           \
    noteCall(name, false);              \
    noteResult(name, call_result_);     \
    return call_result_;                \
  }())

struct Verdict {
  Status status;
  std::string evidence;
};
Verdict pass(std::string evidence) {
  return {Status::kPass, std::move(evidence)};
}
Verdict skip(std::string evidence) {
  return {Status::kSkip, std::move(evidence)};
}
Verdict fail(const char* format, ...) __attribute__((format(printf, 1, 2)));
Verdict fail(const char* format, ...) {
  char text[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(text, sizeof(text), format, args);
  va_end(args);
  return {Status::kFail, text};
}

// A plugin's return code with its name: "6 (ncclRemoteError)".
std::string resultText(ncclResult_t result) {
  return std::to_string(static_cast<int>(result)) + " (" + nccl_net::sdk::resultName(result) + ")";
}

// The harness's own "the wait ran out" (or "the peer failed first"), as the waits below return it: no NCCL version
// defines this code (15, within the enum's range), so a plugin's own ncclTimeout (NCCL 2.30's 8) is reported as the
// plugin's, not read as the harness's deadline.
constexpr ncclResult_t kDeadline = static_cast<ncclResult_t>(15);

// What a wait (waitDone and the like) ended with: the harness's own deadline is kDeadline, any other code is test()'s.
std::string waitText(ncclResult_t result, int seconds) {
  if (result == kDeadline) return "test still said 'not done' after " + std::to_string(seconds) + " s";
  return "test returned " + resultText(result);
}
// Likewise for postSend/postRecv, whose deadline (10 s) runs while the plugin answers with a NULL request.
std::string postText(ncclResult_t result) {
  if (result == kDeadline) return "still a NULL request (not posted) after 10 s";
  return "returned " + resultText(result);
}

struct Context {
  Net* net;
  void* ctx;
  int dev;
  ncclNetProperties_v12_t props;
};

// ---- building blocks -------------------------------------------------------------------------------------------
// A message's bytes: each 8-byte word a hash of the whole seed and the word's offset, so no stretch of a message
// equals another stretch of it or of another message. The pattern before this one kept 8 bits of index * constant
// ^ seed and repeated every 256 bytes: a plugin delivering 4 KiB chunks in the wrong order, or message m's data for
// message m + 256, passed every data check.
uint64_t patternWord(size_t word, uint64_t seed) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + word + 0x632be59bd9b4e019ull;  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
unsigned char patternByte(size_t index, uint64_t seed) {
  return static_cast<unsigned char>(patternWord(index / 8, seed) >> (8 * (index % 8)));
}
void fill(unsigned char* buffer, size_t bytes, uint64_t seed) {
  for (size_t at = 0; at < bytes; at += 8) {
    const uint64_t word = patternWord(at / 8, seed);
    for (size_t k = 0; k < 8 && at + k < bytes; ++k) buffer[at + k] = static_cast<unsigned char>(word >> (8 * k));
  }
}
void fill(std::vector<unsigned char>& buffer, size_t bytes, uint64_t seed) {
  fill(buffer.data(), bytes, seed);
}
long firstMismatch(const unsigned char* buffer, size_t bytes, uint64_t seed) {
  for (size_t at = 0; at < bytes; at += 8) {
    const uint64_t word = patternWord(at / 8, seed);
    for (size_t k = 0; k < 8 && at + k < bytes; ++k)
      if (buffer[at + k] != static_cast<unsigned char>(word >> (8 * k))) return static_cast<long>(at + k);
  }
  return -1;
}
long firstMismatch(const std::vector<unsigned char>& buffer, size_t bytes, uint64_t seed) {
  return firstMismatch(buffer.data(), bytes, seed);
}

// A completed send's buffer: whether it still holds the message (a send only reads its buffer: NCCL sends from the
// user's const sendbuff and from in-place collectives' outputs), and then written over, as NCCL reuses a completed
// send's buffer (a FIFO slot) at once. A plugin still reading it (a send completed when posted, a NIC or a thread
// reading after) sends the new bytes, and the receiver sees them. From the end back, block by block: a late reader
// moves forward from where it is, and meets overwritten bytes however fast it goes.
bool intactThenOverwritten(std::vector<unsigned char>& buffer, size_t bytes, uint64_t seed) {
  constexpr size_t kBlock = 64 << 10;
  bool intact = true;
  for (size_t end = bytes; end > 0;) {
    const size_t begin = (end - 1) / kBlock * kBlock;
    for (size_t at = begin; at < end && intact; at += 8) {
      const uint64_t word = patternWord(at / 8, seed);
      for (size_t k = 0; k < 8 && at + k < end; ++k)
        if (buffer[at + k] != static_cast<unsigned char>(word >> (8 * k))) intact = false;
    }
    std::memset(buffer.data() + begin, 0xe5, end - begin);
    end = begin;
  }
  return intact;
}

// A receive's test that reported `reported` bytes for a message of `sent` into a buffer posted at `posted`: said with
// a guess when the size is the posted one, which a plugin that reads the receive's descriptor back instead of the
// completion's byte count reports (right for every message that fills its buffer, as a benchmark's do).
std::string sizeWrongText(int reported, size_t sent, size_t posted) {
  return "the receive's test reported " + std::to_string(reported) + " bytes, " + std::to_string(sent) + " were sent" +
         (posted != sent && reported == static_cast<long>(posted) ? " (the posted size, not the received one?)" : "");
}

// Why a received message is not the one sent: the size its test reported, else its first wrong byte ("" when neither).
// `buffer` is the receive's, posted at its size.
std::string receivedWrong(const std::vector<unsigned char>& buffer, int reported, size_t sent, uint64_t seed) {
  if (reported != static_cast<int>(sent)) return sizeWrongText(reported, sent, buffer.size());
  const long at = firstMismatch(buffer, sent, seed);
  return at < 0 ? std::string() : "wrong byte at offset " + std::to_string(at);
}

// Whether a sender's test reported a size other than `sent`. Its size starts at -1 and may stay so: the API says
// test reports the size sent, but NCCL never reads it on the send side, and NCCL's own IB plugin fills sizes for
// receives only. A size written wrong is still a bug (state crossed between requests, a wrapped counter).
bool sentSizeWrong(int reported, size_t sent) {
  return reported != -1 && reported != static_cast<int>(sent);
}

// Requests in flight (posted; not yet reported done or failed; their comm open), with their comm and kind. NCCL's
// proxy tests a send with one int for its size (sendProxyProgress's `int size`) and a receive with 64
// (NCCL_PROXY_MAX_SUBS), so test must know which it is to check what the plugin wrote. And a post that returns a
// request still in flight is a breach: NCCL keeps each request in a slot of its own and tests it until it is done,
// so it would test one operation for the other. Entries go when test says done or failed, or when their comm closes.
struct InFlight {
  void* comm;
  bool send;
};
std::mutex gRequestsMutex;
std::unordered_map<void*, InFlight> gRequests;  // request -> its comm and kind
constexpr int kPeerRequestReused = 57;

// The largest message device 0 takes (its maxP2pBytes; 0: none said): NCCL sends no larger one, so the harness does
// not either. A rule that would is stopped at its first such post (the plugin is not called; the post returns
// ncclInvalidArgument) and, unless it passed anyway, skipped with the size it needed: with fixed sizes of up to
// 256 MiB, the rules failed a plugin that says it takes 4 KiB messages for refusing larger ones.
size_t gLargestMessage = 0;
// The largest message the rule posted past gLargestMessage, in its process or a peer forked from it (shared memory:
// a peer's refused post ends the peer, whose exit the rule then reports as a failure of its own).
std::atomic<size_t>* gOversized = nullptr;
// Whether this process (the rule's, not a peer's) had a post stopped. A rule returns at its first failure, so its own
// stopped post precedes a failure caused by it; a peer's stopped post says nothing of when the rule failed (a peer
// runs ahead: the rule's check of an earlier message failed first, and was skipped with it, a false pass).
bool gOversizedHere = false;
bool oversized(int n, const size_t* sizes) {
  bool over = false;
  for (int i = 0; i < n; ++i) {
    if (gLargestMessage == 0 || sizes[i] <= gLargestMessage) continue;
    over = true;
    gOversizedHere = true;
    if (gOversized == nullptr) continue;
    for (size_t seen = gOversized->load(); seen < sizes[i] && !gOversized->compare_exchange_weak(seen, sizes[i]);) {
    }
  }
  return over;
}
// A failed rule's verdict: a skip when its own process posted a message past gLargestMessage; the failure, with a
// word on the stopped post, when only a peer did.
Verdict sizedVerdict(Verdict v) {
  if (gOversized == nullptr || gOversized->load() == 0 || v.status != Status::kFail) return v;
  const std::string limit = "device 0 takes at most " + std::to_string(gLargestMessage) + " (maxP2pBytes)";
  if (gOversizedHere)
    return skip("needs buffers of " + std::to_string(gOversized->load()) + " bytes; " + limit +
                ", and NCCL posts none larger");
  v.evidence +=
      " (the rule's peer was stopped before a post of " + std::to_string(gOversized->load()) + " bytes: " + limit + ")";
  return v;
}
// For a transfer on another device than 0: its own maxP2pBytes bounds the messages (NCCL cuts each connection's
// transfers to its device's limit), until the end of the scope.
class DeviceLimit {
 public:
  explicit DeviceLimit(size_t maxP2pBytes) : saved_(gLargestMessage) { gLargestMessage = maxP2pBytes; }
  ~DeviceLimit() { gLargestMessage = saved_; }
  DeviceLimit(const DeviceLimit&) = delete;
  DeviceLimit& operator=(const DeviceLimit&) = delete;

 private:
  size_t saved_;
};
// A size a rule wants, cut to what device 0 takes with `slack` bytes to spare (a receive posted larger than its
// message), so that the rule runs at a small maxP2pBytes rather than being skipped. At least 1.
size_t fitted(size_t wanted, size_t slack = 0) {
  if (gLargestMessage == 0 || wanted + slack <= gLargestMessage) return wanted;
  return gLargestMessage > slack + 1 ? gLargestMessage - slack : 1;
}
void notePosted(void* comm, void* request, bool send) {
  if (request == nullptr || request == reinterpret_cast<void*>(NCCL_NET_OPTIONAL_RECV_COMPLETION)) return;
  std::lock_guard<std::mutex> lock(gRequestsMutex);
  auto [entry, added] = gRequests.try_emplace(request, InFlight{comm, send});
  if (added) return;
  noteContractProblem(kPeerRequestReused,
                      std::string(send ? "isend" : "irecv") + " returned a request that the " +
                          (entry->second.send ? "send" : "receive") + " posted before it on " +
                          (entry->second.comm == comm ? "the same comm" : "another comm") +
                          " still held (test had not said it was done): NCCL tests each request until it is done, "
                          "so it would take one operation's completion for the other's");
  entry->second = {comm, send};
}

ncclResult_t irecvChecked(Net& net, void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                          void** request) {
  if (oversized(n, sizes)) return ncclInvalidArgument;
  const ncclResult_t result = net.irecv(comm, n, data, sizes, tags, mhandles, nullptr, request);
  if (result == ncclSuccess) notePosted(comm, *request, false);
  return result;
}

// isend, noting the request as a send's.
ncclResult_t isendNoted(Net& net, void* comm, void* data, size_t size, int tag, void* mhandle, void** request) {
  if (oversized(1, &size)) return ncclInvalidArgument;
  const ncclResult_t result = net.isend(comm, data, size, tag, mhandle, nullptr, request);
  if (result == ncclSuccess) notePosted(comm, *request, true);
  return result;
}
// A closed comm's requests are gone with it (NCCL's abort closes comms with requests in flight).
void forgetRequests(void* comm) {
  std::lock_guard<std::mutex> lock(gRequestsMutex);
  std::erase_if(gRequests, [comm](const auto& entry) { return entry.second.comm == comm; });
}

// test() as NCCL calls it: with room for 64 sizes, which NCCL hands every receive's test (a plugin may fill its
// maxRecvs worth whatever the receive's n: harmless in NCCL; given one int, it overwrote the harness's stack, and the
// verdict blamed the plugin for a hang or a leak), and a guard beyond. A send's test that writes past its one size,
// or a receive's past 64, is noted as a breach of NCCL's contract (it writes over NCCL's stack). The caller gets
// the first `count`. A receive's sizes read as NCCL reads them: NCCL zeroes them before each receive's test
// (recvProxyProgress), so one the plugin leaves unwritten is 0, right for a 0-byte message and wrong for any other;
// tSizeLeftUnwritten says which it was, for the evidence.
constexpr int kTestSizes = 64, kTestSizesGuard = 8;
constexpr int kUnwrittenSize = 0x5a5a5a5a;
thread_local bool tSizeLeftUnwritten = false;   // the last receive's test left one of its `count` sizes unwritten
thread_local uint64_t tSizesLeftUnwritten = 0;  // which ones (bit i: sizes[i])
ncclResult_t testSizes(Net& net, void* request, int* done, int* sizes, int count = 1) {
  bool send;
  {
    std::lock_guard<std::mutex> lock(gRequestsMutex);
    const auto entry = gRequests.find(request);
    send = entry != gRequests.end() && entry->second.send;
  }
  int room[kTestSizes + kTestSizesGuard];
  for (int i = 0; i < kTestSizes + kTestSizesGuard; ++i) room[i] = i < count && send ? sizes[i] : kUnwrittenSize;
  const ncclResult_t result = net.test(request, done, room);
  tSizeLeftUnwritten = false;
  tSizesLeftUnwritten = 0;
  for (int i = 0; i < count && !send; ++i)
    if (room[i] == kUnwrittenSize) {
      room[i] = 0;
      tSizeLeftUnwritten = tSizeLeftUnwritten || *done != 0;
      if (*done != 0) tSizesLeftUnwritten |= uint64_t{1} << i;
    }
  for (int i = send ? 1 : kTestSizes; i < kTestSizes + kTestSizesGuard; ++i) {
    if (room[i] == kUnwrittenSize) continue;
    noteContractProblem(send ? kPeerSendSizesOverrun : kPeerRecvSizesOverrun,
                        "test of a " + std::string(send ? "send" : "receive") + " wrote sizes[" + std::to_string(i) +
                            "] = " + std::to_string(room[i]) +
                            (send ? " (NCCL passes one int for a send's size: the rest lands on its stack)"
                                  : " (NCCL gives a receive's test room for 64: the rest lands on its stack)"));
    break;
  }
  if (result != ncclSuccess || *done != 0) {
    std::lock_guard<std::mutex> lock(gRequestsMutex);
    gRequests.erase(request);
  }
  for (int i = 0; i < count; ++i) sizes[i] = room[i];
  return result;
}

// Polls test() until done, an error, or `seconds`; returns the plugin's result or kDeadline. `size` holds `count`
// sizes (a grouped receive's).
ncclResult_t waitDone(Context& c, void* request, int* size, double seconds, int count = 1) {
  auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  int done = 0;
  while (!done) {
    ncclResult_t result = CALL("test", testSizes(*c.net, request, &done, size, count));
    if (result != ncclSuccess) return result;
    if (!done && Clock::now() > deadline) return kDeadline;
  }
  return ncclSuccess;
}

// Where connect and accept may write a device handle: NCCL's proxy always passes a place for it, and plugins write
// it without a NULL check (NULL is passed only by NCCL's legacy GDR probe). Per thread, as the rules' threads connect.
ncclNetDeviceHandle_v12_t** deviceHandleSlot() {
  thread_local ncclNetDeviceHandle_v12_t* handle = nullptr;
  return &handle;
}

// ---- registered buffers ------------------------------------------------------------------------------------------
// Every buffer a rule moves data through is registered (regMr, host memory) on the comm it travels on, and its handle
// goes with each isend and irecv, as NCCL does: NCCL's own IB plugin reads the handle without a NULL check, so a
// plugin built on it would crash on every rule given NULL. The handles are kept per comm and deregistered just before
// that comm closes (closeSendComm, closeRecvComm), as NCCL frees its buffers before its connections. Each buffer gets
// a registration of its own when it is made; none is looked up by address, so a freed buffer's registration is never
// handed out for a new buffer at the same address. Guarded by a mutex: comms-on-threads registers from threads.
std::mutex gRegistrationsMutex;
std::map<void*, std::vector<void*>> gRegistrations;  // comm -> its handles, oldest first

void rememberRegistration(void* comm, void* mhandle) {
  if (mhandle == nullptr) return;  // a plugin that needs no registration may answer NULL
  std::lock_guard<std::mutex> lock(gRegistrationsMutex);
  gRegistrations[comm].push_back(mhandle);
}

// A regMr that fails ends the rule that made it, as a FAIL naming the call, the size and the result: NCCL fails the
// connection (its buffers are registered when it connects) or the registration of the user's buffer on it, and moves
// no data. The harness went on with a NULL handle, and a plugin whose regMr failed (an unaligned address, a 1 GiB
// buffer, any on a send comm) passed every data rule when its isend and irecv took NULL. In the rule's own process the
// verdict is written at once; a peer ends with kPeerRegMrFailed and leaves the size and result in its call note, which
// the verdict then leads with. Within a RegistrationMayBeRefused scope (a registration NCCL would not make: on a comm
// whose peer has gone) a refusal is said on stderr and the rule goes on with a NULL handle.
constexpr int kPeerRegMrFailed = 58;
int gRegistrationMayBeRefused = 0;
class RegistrationMayBeRefused {
 public:
  RegistrationMayBeRefused() { ++gRegistrationMayBeRefused; }
  ~RegistrationMayBeRefused() { --gRegistrationMayBeRefused; }
  RegistrationMayBeRefused(const RegistrationMayBeRefused&) = delete;
  RegistrationMayBeRefused& operator=(const RegistrationMayBeRefused&) = delete;
};
std::string regMrFailedText(size_t bytes, int result) {
  return "regMr of a " + std::to_string(bytes) + "-byte host buffer returned " +
         resultText(static_cast<ncclResult_t>(result)) +
         " (NCCL fails the connection, or the buffer's registration, on a failed regMr: no data would move)";
}

// The handle of a new registration of [data, data + bytes) on `comm` (at least one byte: NCCL never registers
// none); a failure ends the rule (above).
void* registerBuffer(Context& c, void* comm, void* data, size_t bytes) {
  void* mhandle = nullptr;
  ncclResult_t result = CALL("regMr", c.net->regMr(comm, data, std::max<size_t>(bytes, 1), NCCL_PTR_HOST, &mhandle));
  if (result != ncclSuccess && gRegistrationMayBeRefused > 0) {
    std::fprintf(stderr, "nccl-net-check: regMr of a %zu-byte host buffer returned %s; going on with a NULL handle\n",
                 bytes, resultText(result).c_str());
    return nullptr;
  }
  if (result != ncclSuccess) {
    const std::string text = regMrFailedText(bytes, static_cast<int>(result));
    std::fprintf(stderr, "nccl-net-check: %s\n", text.c_str());
    if (gResultFd >= 0) {  // the rule's process (or one of its own, inOwnProcess): the verdict
      const std::string verdict = "FAIL|" + text;
      (void)!write(gResultFd, verdict.data(), verdict.size());
      harnessExit(0);
    }
    if (gMyNote != nullptr) {
      gMyNote->regMrFailedBytes.store(bytes);
      gMyNote->regMrFailed.store(static_cast<int>(result));
    }
    harnessExit(kPeerRegMrFailed);
  }
  rememberRegistration(comm, mhandle);
  return mhandle;
}

// One registration per buffer, in order.
std::vector<void*> registerBuffers(Context& c, void* comm, std::vector<std::vector<unsigned char>>& buffers) {
  std::vector<void*> handles;
  handles.reserve(buffers.size());
  for (auto& buffer : buffers) handles.push_back(registerBuffer(c, comm, buffer.data(), buffer.size()));
  return handles;
}

// The handles registered on `comm`, forgotten.
std::vector<void*> takeRegistrations(void* comm) {
  std::lock_guard<std::mutex> lock(gRegistrationsMutex);
  auto found = gRegistrations.find(comm);
  if (found == gRegistrations.end()) return {};
  std::vector<void*> handles = std::move(found->second);
  gRegistrations.erase(found);
  return handles;
}

void deregister(Context& c, void* comm, const std::vector<void*>& handles) {
  for (void* handle : handles)
    if (handle != nullptr) CALL("deregMr", c.net->deregMr(comm, handle));
}

// Deregisters `handles` of `comm` at once (nothing may be in flight on them), rather than at the comm's close: for
// helpers that many rules call over and over on one comm.
void deregisterNow(Context& c, void* comm, const std::vector<void*>& handles) {
  {
    std::lock_guard<std::mutex> lock(gRegistrationsMutex);
    if (auto found = gRegistrations.find(comm); found != gRegistrations.end())
      for (void* handle : handles)
        if (auto it = std::find(found->second.begin(), found->second.end(), handle); it != found->second.end())
          found->second.erase(it);
  }
  deregister(c, comm, handles);
}

// Every handle still registered on `comm`, newest first.
void deregisterAll(Context& c, void* comm) {
  std::vector<void*> handles = takeRegistrations(comm);
  std::reverse(handles.begin(), handles.end());
  deregister(c, comm, handles);
}

// closeSend and closeRecv after deregistering the comm's buffers.
ncclResult_t closeSendComm(Context& c, void* comm) {
  deregisterAll(c, comm);
  forgetRequests(comm);
  return CALL("closeSend", c.net->closeSend(comm));
}
ncclResult_t closeRecvComm(Context& c, void* comm) {
  deregisterAll(c, comm);
  forgetRequests(comm);
  return CALL("closeRecv", c.net->closeRecv(comm));
}

ncclResult_t postSend(Context& c, void* comm, void* data, size_t size, int tag, void* mhandle, void** request,
                      double seconds = 10) {
  auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  *request = nullptr;
  while (*request == nullptr) {
    ncclResult_t result = CALL("isend", isendNoted(*c.net, comm, data, size, tag, mhandle, request));
    if (result != ncclSuccess) return result;
    if (*request == nullptr && Clock::now() > deadline) return kDeadline;
  }
  return ncclSuccess;
}

ncclResult_t postRecv(Context& c, void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                      void** request, double seconds = 10) {
  auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  *request = nullptr;
  while (*request == nullptr) {
    ncclResult_t result = CALL("irecv", irecvChecked(*c.net, comm, n, data, sizes, tags, mhandles, request));
    if (result != ncclSuccess) return result;
    if (*request == nullptr && Clock::now() > deadline) return kDeadline;
  }
  return ncclSuccess;
}

// Like waitDone, but also watches the peer process: when it exits with a non-zero code before the request is done,
// returns kDeadline at once with the code in *peerCode and `peer` set to -1 (reaped).
ncclResult_t waitDoneWatchingPeer(Context& c, void* request, int* size, double seconds, pid_t& peer, int* peerCode) {
  auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  int done = 0;
  while (!done) {
    ncclResult_t result = CALL("test", testSizes(*c.net, request, &done, size));
    if (result != ncclSuccess) return result;
    if (done) break;
    int status = 0;
    if (peer > 0 && waitpid(peer, &status, WNOHANG) == peer) {
      peer = -1;
      *peerCode = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      if (*peerCode != 0) return kDeadline;
    }
    if (Clock::now() > deadline) return kDeadline;
  }
  return ncclSuccess;
}

constexpr int kPeerNetnsFailed = 50, kPeerReopenFailed = 51;  // 52-54: kPeerCloseFailed and the like, above
constexpr const char* kCopyDidNotOpen =
    "peer: its own copy of the plugin did not load or init (its stderr says why: a copy in a TMPDIR mounted noexec "
    "does not load)";
constexpr int kPeerHarnessFault = 55;  // an exception in the harness's own code
// A completed send's buffer no longer holds the message: the plugin wrote into memory it was only given to read.
constexpr int kPeerSendBufferChanged = 56;

// With --netns, turns the forked peer into a host of its own: it enters the peer namespace and swaps `c` (its copy
// of the rule's context) for a fresh instance of the plugin, through the same ABI version, initialised there.
int becomeFreshPeer(Context& c) {
  std::string error;
  if (!gPeerNetns.empty() && !enterNetns(gPeerNetns, &error)) {
    std::fprintf(stderr, "nccl-net-check peer: %s\n", error.c_str());
    return kPeerNetnsFailed;
  }
  auto net = core::openNetVersion(gPeerLibrary, c.net->version(), &error);
  void* ctx = nullptr;
  ncclNetProperties_v12_t props;
  int made = -1;
  ncclNetVDeviceProps_v12_t fused = gVirtualDevice;
  if (net == nullptr || CALL("init", net->init(&ctx, 0x6e6e73, nullptr, nullptr, nullptr)) != ncclSuccess ||
      (gMadeVirtualDevice && (CALL("makeVDevice", net->makeVDevice(&made, &fused)) != ncclSuccess || made != c.dev)) ||
      CALL("getProperties", net->getProperties(c.dev, &props)) != ncclSuccess) {
    std::fprintf(stderr, "nccl-net-check peer: %s%s%s: %s\n", gPeerLibrary.c_str(),
                 gPeerNetns.empty() ? "" : " in namespace ", gPeerNetns.c_str(),
                 net == nullptr ? error.c_str() : "init, makeVDevice or getProperties failed");
    return kPeerReopenFailed;
  }
  c = Context{net.release(), ctx, c.dev, props};  // lives until the peer exits
  return 0;
}

// ---- signals arriving at every thread -----------------------------------------------------------------------------
// A handler installed without SA_RESTART (as Python installs its handlers: PyTorch's DataLoader catches SIGCHLD in
// every training process), and a thread that sends the signal to every other thread of the process every `period`:
// a blocking call of the plugin's (read, recv, accept, epoll_wait, a completion channel's read) then returns EINTR
// at random moments. The thread makes no allocation nor takes a lock (open, getdents64, tgkill, nanosleep), so a
// fork beside it is safe. Its signals are counted.
std::atomic<long> gSignalsCaught{0};
void onStormSignal(int) {
  gSignalsCaught.fetch_add(1, std::memory_order_relaxed);
}
constexpr int kStormSignal = SIGCHLD;
constexpr auto kStormPeriod = std::chrono::microseconds(200);

class SignalStorm {
 public:
  SignalStorm() {
    struct sigaction action = {};
    action.sa_handler = onStormSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = 0;  // no SA_RESTART: interrupted calls return EINTR
    sigaction(kStormSignal, &action, &previous_);
    thread_ = std::thread([this] { run(); });
  }
  ~SignalStorm() {
    stop_.store(true);
    thread_.join();
    sigaction(kStormSignal, &previous_, nullptr);
  }
  SignalStorm(const SignalStorm&) = delete;
  SignalStorm& operator=(const SignalStorm&) = delete;

 private:
  // The process's threads (/proc/self/task) into `tids`, at most `capacity` of them.
  static int listThreads(pid_t* tids, int capacity) {
    const int fd = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return 0;
    int count = 0;
    alignas(8) char entries[4096];
    for (long got; count < capacity && (got = syscall(SYS_getdents64, fd, entries, sizeof(entries))) > 0;) {
      for (long at = 0; at < got && count < capacity;) {
        // struct linux_dirent64: d_ino (8), d_off (8), d_reclen (2), d_type (1), d_name
        unsigned short length = 0;
        std::memcpy(&length, entries + at + 16, sizeof(length));
        const char* name = entries + at + 19;
        if (name[0] >= '1' && name[0] <= '9') tids[count++] = static_cast<pid_t>(std::atol(name));
        at += length;
      }
    }
    close(fd);
    return count;
  }
  void run() {
    const pid_t pid = getpid();
    const auto self = static_cast<pid_t>(syscall(SYS_gettid));
    pid_t tids[256];
    int count = 0;
    for (unsigned tick = 0; !stop_.load(); ++tick) {
      if (tick % 50 == 0) count = listThreads(tids, 256);  // new helper threads join within 10 ms
      for (int i = 0; i < count; ++i)
        if (tids[i] != self) syscall(SYS_tgkill, pid, tids[i], kStormSignal);
      std::this_thread::sleep_for(kStormPeriod);
    }
  }
  struct sigaction previous_ = {};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};
// Set by signals-break-nothing: every peer started meanwhile runs a storm of its own from its first instruction, for
// its whole life (it leaves by _exit, the storm with it), and the rule process one from its first peer's start on
// (not before: a fork beside a thread kills the child under TSan once the child starts a thread of its own).
bool gPeersCatchSignals = false;
SignalStorm* gPeerStorm = nullptr;
std::unique_ptr<SignalStorm> gRuleStorm;

// ---- descriptors a program started from this process would inherit -----------------------------------------------
// The descriptors open now without FD_CLOEXEC, each with what /proc names it (socket:[...], anon_inode:[eventfd],
// /dev/infiniband/uverbs0, ...).
std::map<int, std::string> inheritableDescriptors() {
  std::map<int, std::string> out;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return out;
  const int own = dirfd(dir);
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    const int fd = std::atoi(entry->d_name);
    const int flags = fcntl(fd, F_GETFD);
    if (fd == own || flags < 0 || (flags & FD_CLOEXEC) != 0) continue;
    char target[256];
    const ssize_t length = readlinkat(own, entry->d_name, target, sizeof(target) - 1);
    out[fd] = length > 0 ? std::string(target, static_cast<size_t>(length)) : "?";
  }
  closedir(dir);
  return out;
}
// Those of `now` that `before` did not have (a number reused for something else counts), as "2: 7 (socket:[123]),
// 9 (anon_inode:[eventfd])", the first four named; empty when there are none.
std::string newInheritable(const std::map<int, std::string>& before, const std::map<int, std::string>& now) {
  std::string named;
  int count = 0;
  for (const auto& [fd, target] : now)
    if (auto was = before.find(fd); was == before.end() || was->second != target)
      if (++count <= 4) named += (named.empty() ? "" : ", ") + std::to_string(fd) + " (" + target + ")";
  if (count == 0) return "";
  return std::to_string(count) + ": " + named + (count > 4 ? " and " + std::to_string(count - 4) + " more" : "");
}

// signal-handlers-untouched's "before": the rule process's signal actions and mask before the plugin is loaded (after
// the harness's own SIGALRM and SIGPIPE settings).
nns::tools::SignalState gSignalsBeforeLoad;

// Set by descriptors-close-on-exec: each peer lists the inheritable descriptors it has at its start, and after its
// sends (its comm still open) writes the ones that appeared meanwhile to gDescriptorReportFd.
bool gPeerListsDescriptors = false;
int gDescriptorReportFd = -1;
std::map<int, std::string> gPeerDescriptorsAtStart;

// A peer process: runs `body` (which returns an exit code) with the per-call watchdog active.
pid_t startPeer(Context& c, const std::function<int()>& body) {
  std::fflush(nullptr);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives its rule process
    if (getppid() != parent) _exit(124);
    // Not the peer's to write, nor to hold open: the harness reads the verdict until the last writer is gone.
    if (gResultFd >= 0) close(gResultFd);
    gResultFd = -1;
    gRequests.clear();  // the rule process's, not this one's (one thread here: no lock)
    if (gPeersCatchSignals) gPeerStorm = new SignalStorm();
    if (gPeerListsDescriptors) gPeerDescriptorsAtStart = inheritableDescriptors();  // before a fresh instance's init
    if (gCallNotes != nullptr) {
      gMyNote = &gCallNotes[1];
      noteCall(nullptr, false);
      gMyNote->harnessExit.store(0, std::memory_order_relaxed);
      gMyNote->regMrFailed.store(0, std::memory_order_relaxed);
    }
    if (!gPeerNetns.empty() || gFreshPeer) {
      int code = becomeFreshPeer(c);
      if (code != 0) harnessExit(code);
    }
    int code = kPeerHarnessFault;
    // An exception must not unwind into the harness's main in this copy of it (its destructors would remove the
    // run's network namespaces and its error would read as the plugin's exit).
    try {
      code = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "nccl-net-check: peer: the harness failed (not the plugin): %s\n", e.what());
      harnessExit(kPeerHarnessFault);
    }
    // A request handed out twice is named even where the peer failed after it: what went wrong next (a completion
    // taken for another's) followed from it.
    if (!gContractProblem.empty() && (code == 0 || gContractCode == kPeerRequestReused)) {
      std::fprintf(stderr, "nccl-net-check: peer: %s\n", gContractProblem.c_str());
      code = gContractCode;
    }
    harnessExit(code);
  }
  if (gPeersCatchSignals && gRuleStorm == nullptr) gRuleStorm = std::make_unique<SignalStorm>();
  return pid;
}

// The peer's exit code, -signal if it died, or 124 if it did not finish within `seconds` (then it is killed).
int waitPeer(pid_t pid, double seconds) {
  auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return 124;
    }
    usleep(1000);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

bool fdReadable(int fd) {
  pollfd ready{fd, POLLIN, 0};
  return poll(&ready, 1, 0) == 1;
}

// The comm, or nullptr after `seconds` or an error (then in `*failed` when given). With a `stopFd`, also nullptr as
// soon as it is readable: the other side has failed and nothing will accept any more.
void* connectWithin(Context& c, void* handle, double seconds, ncclResult_t* failed = nullptr, int stopFd = -1) {
  void* sendComm = nullptr;
  auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (sendComm == nullptr && Clock::now() < deadline) {
    if (stopFd >= 0 && fdReadable(stopFd)) return nullptr;
    if (ncclResult_t result = CALL("connect", c.net->connect(c.ctx, c.dev, handle, &sendComm, deviceHandleSlot()));
        result != ncclSuccess) {
      if (failed != nullptr) *failed = result;
      return nullptr;
    }
  }
  return sendComm;
}

// A peer whose connect returned an error exits with this plus the result (the connector's own failure, named at once
// by the rule instead of as an accept that did not complete within 20 s).
constexpr int kPeerConnectFailed = 230;

// A connecting peer's exit code when connectWithin gave no comm: the result it returned, or 20 for a connect that did
// not complete in time ("did not complete within 20 s" for a connect refused at once sent vendors to their timeouts).
int connectFailureCode(ncclResult_t failed) {
  return failed != ncclSuccess ? kPeerConnectFailed + static_cast<int>(failed) : 20;
}

// The comm, or nullptr after `seconds` or an error (then in `*failed` when given). With `peer`, a connecting process
// that ends with a failure (exit code in `*peerCode`) ends the wait: nothing will connect any more. A peer reaped here
// (ended well or not) is set to -1: its pid may be another process's from then on, which a later kill would hit.
void* acceptWithin(Context& c, void* listenComm, double seconds, ncclResult_t* failed = nullptr, pid_t* peer = nullptr,
                   int* peerCode = nullptr) {
  void* recvComm = nullptr;
  auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (recvComm == nullptr && Clock::now() < deadline) {
    ncclResult_t result = CALL("accept", c.net->accept(listenComm, &recvComm, deviceHandleSlot()));
    if (result != ncclSuccess) {
      if (failed != nullptr) *failed = result;
      return nullptr;
    }
    int status = 0;
    if (recvComm == nullptr && peer != nullptr && *peer > 0 && peerCode != nullptr &&
        waitpid(*peer, &status, WNOHANG) == *peer) {
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      *peer = -1;
      if (code != 0) {
        *peerCode = code;
        return nullptr;
      }
      // ended well (its comm made and closed): the connection may still be accepted
    }
  }
  return recvComm;
}

// The usual shape: this process listens and receives, a peer process connects and runs `sender`.
struct Pair {
  void* listenComm = nullptr;
  void* recvComm = nullptr;
  pid_t peer = -1;
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
};

std::string peerText(int code);

// A receiver's failed verdict with the sending peer's own failure, when it ended with one (`code`, its exit code): a
// sender whose isend was refused for good gives up and closes its comm, and the receive then fails with
// ncclRemoteError or waits out its time, which named the receive alone and sent a vendor to its receive path.
Verdict withPeerFailure(Verdict v, int code) {
  if (v.status != Status::kFail || code == 0 || code == 124) return v;  // 124: still running, killed here
  v.evidence += " (the sending peer had failed: " + peerText(code) + ")";
  return v;
}

// `afterListen`, when given, runs between listen and the peer's start.
bool openPair(Context& c, Pair& pair, const std::function<int(void* sendComm)>& sender, std::string* why,
              const std::function<void()>& afterListen = {}) {
  if (ncclResult_t result = CALL("listen", c.net->listen(c.ctx, c.dev, pair.handle, &pair.listenComm));
      result != ncclSuccess) {
    *why = "listen returned " + resultText(result);
    return false;
  }
  if (afterListen) afterListen();
  pair.peer = startPeer(c, [&]() {
    ncclResult_t connectFailed = ncclSuccess;
    if (gMyNote != nullptr) gMyNote->pairConnecting.store(1);
    void* sendComm = connectWithin(c, pair.handle, 20, &connectFailed);
    if (gMyNote != nullptr) gMyNote->pairConnecting.store(0);
    if (sendComm == nullptr) {
      if (gMyNote != nullptr) gMyNote->connectGaveUp.store(connectFailureCode(connectFailed));
      return connectFailureCode(connectFailed);
    }
    int code = sender(sendComm);
    closeSendComm(c, sendComm);
    return code;
  });
  ncclResult_t failed = ncclSuccess;
  int peerCode = 0;
  pair.recvComm = acceptWithin(c, pair.listenComm, 20, &failed, &pair.peer, &peerCode);
  // Without a comm here the connecting process's failure is this call's to say (below), not a note on the verdict.
  auto forgetConnectNote = [] {
    if (gCallNotes == nullptr) return;
    gCallNotes[1].pairConnecting.store(0);
    gCallNotes[1].connectGaveUp.store(0);
  };
  if (pair.recvComm == nullptr && peerCode != 0) {  // reaped already
    forgetConnectNote();
    *why = "the connecting process ended first: " + peerText(peerCode);
    return false;
  }
  if (pair.recvComm == nullptr) {
    *why = failed != ncclSuccess ? "accept returned " + resultText(failed) + " before the sender got through"
                                 : "accept did not complete within 20 s";
    if (pair.peer > 0) {  // it would go on connecting to a listener that no longer accepts
      kill(pair.peer, SIGKILL);
      waitpid(pair.peer, nullptr, 0);
    }
    pair.peer = -1;
    forgetConnectNote();
    return false;
  }
  return true;
}

int closePair(Context& c, Pair& pair, double peerSeconds = 30) {
  int code = pair.peer > 0 ? waitPeer(pair.peer, peerSeconds) : 0;
  if (pair.recvComm != nullptr) closeRecvComm(c, pair.recvComm);
  if (pair.listenComm != nullptr) CALL("closeListen", c.net->closeListen(pair.listenComm));
  return code;
}

// Sends each (size, seed) message in order, 8 in flight at most; exit code 0 when all completed with the right size.
int sendMessages(Context& c, void* comm, const std::vector<std::pair<size_t, uint64_t>>& messages, int tag = 1) {
  size_t largest = 0;
  for (auto& m : messages) largest = std::max(largest, m.first);
  constexpr size_t kInFlight = 8;
  std::vector<std::vector<unsigned char>> buffers(kInFlight, std::vector<unsigned char>(std::max<size_t>(largest, 1)));
  std::vector<void*> mhandles = registerBuffers(c, comm, buffers);
  std::vector<void*> requests(kInFlight, nullptr);
  std::vector<size_t> sizes(kInFlight, 0);
  std::vector<uint64_t> seeds(kInFlight, 0);
  for (size_t i = 0; i < messages.size() + kInFlight; ++i) {
    size_t slot = i % kInFlight;
    if (requests[slot] != nullptr) {
      int size = -1;
      if (waitDone(c, requests[slot], &size, gTransferWaitSeconds) != ncclSuccess) return 30;
      if (sentSizeWrong(size, sizes[slot])) return 31;
      if (!intactThenOverwritten(buffers[slot], sizes[slot], seeds[slot])) return kPeerSendBufferChanged;
      requests[slot] = nullptr;
    }
    if (i >= messages.size()) continue;
    fill(buffers[slot], messages[i].first, messages[i].second);
    sizes[slot] = messages[i].first;
    seeds[slot] = messages[i].second;
    if (ncclResult_t posted =
            postSend(c, comm, buffers[slot].data(), messages[i].first, tag, mhandles[slot], &requests[slot]);
        posted != ncclSuccess)
      return posted == kDeadline ? 34 : 32;
  }
  deregisterNow(c, comm, mhandles);  // all done; after a failure they wait for closeSendComm
  return 0;
}

std::string peerText(int code);

// How receiveMessages failed, for the rules whose hint names a cause of their own: a signal taken for an error or a
// sender gone idle shows as a receive that fails or never completes, not as a size or a byte, which a plain transfer
// gets wrong too (signals-break-nothing blamed EINTR for a plugin reporting the posted size).
enum class ReceiveSymptom { kNone, kError, kNotDone, kWrongSize, kWrongByte };
ReceiveSymptom gReceiveSymptom = ReceiveSymptom::kNone;

// Receives the same messages in order into buffers of `capacity`, checking sizes and bytes. With `peer` (the sender's
// process), a sender that exits with an error while a receive waits ends the wait with its reason, not a timeout.
Verdict receiveMessages(Context& c, void* comm, const std::vector<std::pair<size_t, uint64_t>>& messages,
                        size_t capacity, int tag = 1, pid_t* peer = nullptr) {
  constexpr size_t kInFlight = 8;
  std::vector<std::vector<unsigned char>> buffers(kInFlight, std::vector<unsigned char>(capacity));
  std::vector<void*> mhandles = registerBuffers(c, comm, buffers);
  std::vector<void*> requests(kInFlight, nullptr);
  for (size_t i = 0; i < messages.size() + kInFlight; ++i) {
    size_t slot = i % kInFlight;
    if (requests[slot] != nullptr) {
      size_t index = i - kInFlight;
      int size = -1, peerCode = 0;
      ncclResult_t result = peer != nullptr
                                ? waitDoneWatchingPeer(c, requests[slot], &size, gTransferWaitSeconds, *peer, &peerCode)
                                : waitDone(c, requests[slot], &size, gTransferWaitSeconds);
      if (result != ncclSuccess)
        gReceiveSymptom = result == kDeadline ? ReceiveSymptom::kNotDone : ReceiveSymptom::kError;
      if (result != ncclSuccess && peerCode != 0)
        return fail("message %zu (%zu B) never arrived: the sender ended first: %s", index, messages[index].first,
                    peerText(peerCode).c_str());
      if (result != ncclSuccess)
        return fail("message %zu (%zu B): %s", index, messages[index].first,
                    waitText(result, gTransferWaitSeconds).c_str());
      if (size != static_cast<int>(messages[index].first)) {
        gReceiveSymptom = ReceiveSymptom::kWrongSize;
        return tSizeLeftUnwritten
                   ? fail(
                         "message %zu (%zu B): test completed the receive without reporting its size (sizes.set / "
                         "sizes[0] left unwritten: NCCL, which zeroes it first, would take the message as 0 bytes)",
                         index, messages[index].first)
                   : fail("message %zu: %s", index, sizeWrongText(size, messages[index].first, capacity).c_str());
      }
      long bad = firstMismatch(buffers[slot], messages[index].first, messages[index].second);
      if (bad >= 0) {
        gReceiveSymptom = ReceiveSymptom::kWrongByte;
        return fail("message %zu (%zu B): wrong byte at offset %ld", index, messages[index].first, bad);
      }
      requests[slot] = nullptr;
    }
    if (i >= messages.size()) continue;
    void* data = buffers[slot].data();
    size_t size = capacity;
    int tags[1] = {tag};
    if (ncclResult_t posted = postRecv(c, comm, 1, &data, &size, tags, &mhandles[slot], &requests[slot]);
        posted != ncclSuccess) {
      gReceiveSymptom = ReceiveSymptom::kError;
      return fail("irecv %zu: %s", i, postText(posted).c_str());
    }
  }
  deregisterNow(c, comm, mhandles);  // all done; after a failure they wait for closeRecvComm
  return pass("");
}

std::string peerText(int code) {
  if (code == 0) return "peer ok";
  if (code == 124) return "peer did not finish (killed)";
  // An exit the harness did not make, with any status: the plugin's (exit(), or a crash a sanitizer reported). The
  // statuses the harness gives its own meanings to (3, 20, 30-34, ...) would otherwise be read as those.
  if (const CallNote* note = gCallNotes != nullptr ? &gCallNotes[1] : nullptr;
      code > 0 && note != nullptr && note->harnessExit.load() == 0 && note->name.load() != nullptr)
    return std::string(pluginExitedText()) + whereText(note) + " (the peer's, exit code " + std::to_string(code) + ")";
  if (code < 0) {
    // Killed by a signal during a plugin call: the plugin crashed it (the rule process says the same of itself).
    const CallNote* note = gCallNotes != nullptr ? &gCallNotes[1] : nullptr;
    if (note != nullptr && note->name.load() != nullptr && note->inProgress.load() != 0)
      return "the plugin crashed the peer process (signal " + std::to_string(-code) + ")" + whereText(note);
    return "peer died with signal " + std::to_string(-code) + whereText(note);
  }
  if (code == 3) {
    const CallNote* note = gCallNotes != nullptr ? &gCallNotes[1] : nullptr;
    const char* name = note != nullptr ? note->name.load() : nullptr;
    if (name != nullptr && note->inProgress.load() != 0)
      return std::string("peer: ") + name + " did not return within " + std::to_string(gCallTimeout) +
             " s (a blocking call)";
    return "peer: a plugin call did not return in time";
  }
  if (code == 31) return "the sender's test reported a size other than the one it sent";
  if (code == 30) return "peer: a send did not complete (its test returned an error or said 'not done' too long)";
  if (code == 32) return "peer: isend returned an error";
  if (code == 34) return "peer: isend answered NULL ('not now') for 10 s with the receives posted";
  if (code == 20) return "peer: connect did not complete within 20 s";
  if (code > kPeerConnectFailed && code <= kPeerConnectFailed + static_cast<int>(ncclNumResults))
    return "peer: connect returned " + resultText(static_cast<ncclResult_t>(code - kPeerConnectFailed));
  if (code == kPeerNetnsFailed) return "peer: could not enter its network namespace";
  if (code == kPeerHarnessFault) return "peer: the harness itself failed there (its stderr says how), not the plugin";
  if (code == kPeerSendBufferChanged)
    return "peer: a completed send's buffer no longer held the message it sent (the plugin wrote into memory it "
           "was given to read: NCCL sends from the user's sendbuff and from in-place collectives' outputs)";
  if (code == kPeerReopenFailed) return kCopyDidNotOpen;
  if (code == kPeerRegMrFailed) {
    const CallNote* note = gCallNotes != nullptr ? &gCallNotes[1] : nullptr;
    if (note != nullptr && note->regMrFailed.load() != 0)
      return "peer: " + regMrFailedText(note->regMrFailedBytes.load(), note->regMrFailed.load());
    return "peer: a regMr failed (NCCL fails the connection on a failed regMr)";
  }
  if (code == kPeerCloseFailed)
    return "peer: a close (closeSend, closeListen) returned an error with no call failed before it (NCCL fails the "
           "communicator's destroy on it)";
  if (code == kPeerSendSizesOverrun)
    return "peer: test of a send wrote more than one size (NCCL passes one int for a send's size: the rest lands on "
           "its stack)";
  if (code == kPeerRecvSizesOverrun)
    return "peer: test of a receive wrote past 64 sizes (NCCL's room for a receive's sizes)";
  if (code == kPeerRequestReused)
    return "peer: a post returned a request that an earlier post still held (test had not said it was done): NCCL "
           "tests each request until it is done, so it would take one operation's completion for the other's";
  // The peer leaves only through _exit once its plugin calls returned: ended during one, the plugin ended it (exit(),
  // or under a sanitizer also a crash it reported), as the rule process's own verdict says for itself.
  const CallNote* note = gCallNotes != nullptr ? &gCallNotes[1] : nullptr;
  if (note != nullptr && note->name.load() != nullptr && note->inProgress.load() != 0)
    return std::string(pluginExitedText()) + whereText(note) + " (the peer's, exit code " + std::to_string(code) + ")";
  return "peer exit code " + std::to_string(code);
}

void overwriteFreedMemory();  // below

// A peer process sends `messages` (size, seed) and keeps its comm open until `receive` (this process's side, given
// the receive comm and the peer's pid) has returned, as NCCL closes comms only when the communicator goes: a plugin
// may rightly fail pending receives once the sender closed. The receiver's verdict, or the sender's failure. With
// `closeListenerAtAccept`, the listener is closed as soon as accept has returned the comm, and the memory it may have
// freed written over, before `receive` runs (NCCL's order); otherwise it stays open to the end.
Verdict sendAndReceive(Context& c, const std::vector<std::pair<size_t, uint64_t>>& messages,
                       const std::function<Verdict(void* recvComm, pid_t* peer)>& receive,
                       const std::function<void()>& afterListen = {}, bool closeListenerAtAccept = false) {
  Pair pair;
  std::string why;
  int checkedPipe[2];
  // Close-on-exec: none of the harness's descriptors is taken for the plugin's by descriptors-close-on-exec.
  if (pipe2(checkedPipe, O_CLOEXEC) != 0) return fail("pipe failed");
  if (!openPair(
          c, pair,
          [&](void* comm) {
            close(checkedPipe[1]);  // so a receiver that dies reads as a hang-up, not as silence
            int code = sendMessages(c, comm, messages);
            if (gPeerListsDescriptors && code == 0) {
              const std::string found = newInheritable(gPeerDescriptorsAtStart, inheritableDescriptors());
              (void)!write(gDescriptorReportFd, found.data(), found.size());
            }
            pollfd checked{checkedPipe[0], POLLIN, 0};
            while (poll(&checked, 1, 60000) < 0 && errno == EINTR) {  // signals-break-nothing's signals
            }
            return code;
          },
          &why, afterListen))
    return fail("%s", why.c_str());
  Verdict v = pass("");
  if (closeListenerAtAccept) {
    const ncclResult_t closed = CALL("closeListen", c.net->closeListen(pair.listenComm));
    pair.listenComm = nullptr;
    if (closed != ncclSuccess)
      v = fail("closeListen right after accept returned a comm returned %s", resultText(closed).c_str());
    else
      overwriteFreedMemory();
  }
  if (v.status == Status::kPass) {
    v = receive(pair.recvComm, &pair.peer);
    if (v.status == Status::kFail && closeListenerAtAccept)
      v.evidence = "with the listener closed once accept returned the comm, as NCCL's proxy closes it: " + v.evidence;
  }
  (void)!write(checkedPipe[1], "c", 1);
  // Once the receiver has failed, the sender's exit code says nothing more, and it may wait for ever on sends this
  // side stopped receiving: a second, not the 30 s a passing sender gets to finish (which outlasted a 30 s rule
  // timeout and turned the failure found into "hung").
  int code = closePair(c, pair, v.status == Status::kPass ? 30 : 1);
  close(checkedPipe[0]);
  close(checkedPipe[1]);
  if (v.status != Status::kPass) return withPeerFailure(v, code);
  if (code != 0) return fail("%s", peerText(code).c_str());
  return v;
}

// The messages received into `capacity`-byte buffers, sizes checked on both sides and every byte. Empty evidence on
// success.
// Where the device takes smaller messages (maxP2pBytes) than a rule's, those over it are left out and the buffers
// cut to the limit, so the rest still runs (the whole rule was skipped, and a small-message transport's sizes, bytes
// and other devices went unchecked); what was left out joins the verdict. A rule none of whose messages fit keeps
// them, and is skipped as before.
std::string gLeftOut;
Verdict transferChecked(Context& c, const std::vector<std::pair<size_t, uint64_t>>& messages, size_t capacity,
                        const std::function<void()>& afterListen = {}, bool closeListenerAtAccept = false) {
  std::vector<std::pair<size_t, uint64_t>> fitting;
  size_t largestLeftOut = 0;
  for (const auto& m : messages) {
    if (gLargestMessage == 0 || m.first <= gLargestMessage)
      fitting.push_back(m);
    else
      largestLeftOut = std::max(largestLeftOut, m.first);
  }
  if (fitting.empty() || largestLeftOut == 0) {
    fitting = messages;
  } else {
    const std::string note = std::to_string(messages.size() - fitting.size()) + " of " +
                             std::to_string(messages.size()) + " messages over maxP2pBytes " +
                             std::to_string(gLargestMessage) + " left out (the largest " +
                             std::to_string(largestLeftOut) + " B)";
    if (gLeftOut.find(note) == std::string::npos) gLeftOut += (gLeftOut.empty() ? "" : "; ") + note;
  }
  // The receives are posted no larger than the device takes, whether or not a message was left out (a 2 MiB buffer
  // for messages that all fit got the whole rule skipped at a limit of 1.5 MiB). A message that fits still fits.
  size_t largestKept = 0;
  for (const auto& m : fitting) largestKept = std::max(largestKept, m.first);
  if (gLargestMessage != 0 && capacity > gLargestMessage) capacity = std::max(gLargestMessage, largestKept);
  return sendAndReceive(
      c, fitting, [&](void* recvComm, pid_t* peer) { return receiveMessages(c, recvComm, fitting, capacity, 1, peer); },
      afterListen, closeListenerAtAccept);
}

// ---- the rules -------------------------------------------------------------------------------------------------
// Writes over the stack below the caller's frame and over heap blocks freed earlier (allocated again, filled, freed).
__attribute__((noinline)) void overwriteFreedMemory() {
  volatile unsigned char stack[64 << 10];
  for (size_t i = 0; i < sizeof(stack); ++i) stack[i] = 0x5a;
  std::vector<void*> blocks;
  for (size_t size = 16; size <= 4096; size += 16) {
    for (int k = 0; k < 4; ++k) {
      void* block = std::malloc(size);
      if (block == nullptr) continue;
      std::memset(block, 0x5a, size);
      blocks.push_back(block);
    }
  }
  for (void* block : blocks) std::free(block);
}

// One device's properties against what NCCL accepts: a fail naming the first field it refuses, or a pass. Run on
// the newest table's properties (properties-sane) and on every older table's (every-version-agrees): an NCCL that
// loads an older version takes that table's values.
Verdict deviceSane(int dev, const ncclNetProperties_v12_t& p) {
  if (p.name == nullptr) return fail("device %d: name is NULL (NCCL keys NICs by name)", dev);
  if (p.name[0] == '\0')
    return fail(
        "device %d: name \"\" is empty (NCCL keys NICs by name and logs them by it; a name pointing into a "
        "temporary string often reads as empty once it is gone)",
        dev);
  if (size_t bad = 0; !core::isPrintableText(p.name, &bad))
    return fail(
        "device %d: name \"%s\" has byte 0x%02x at %zu, not printable ASCII (NCCL writes names into its "
        "logs and topology XML as they are)",
        dev, core::printable(p.name).c_str(), static_cast<unsigned char>(p.name[bad]), bad);
  if (p.pciPath != nullptr && std::strncmp(p.pciPath, "/sys/", 5) != 0)
    return fail("device %d: pciPath %s is not a /sys path", dev, core::printable(p.pciPath).c_str());
  if (p.pciPath != nullptr && access(p.pciPath, F_OK) != 0)
    return fail("device %d: pciPath %s does not exist (%s): NCCL would not find the device in the topology", dev,
                core::printable(p.pciPath).c_str(), std::strerror(errno));
  if (!(p.ptrSupport & NCCL_PTR_HOST)) return fail("device %d: ptrSupport 0x%x lacks NCCL_PTR_HOST", dev, p.ptrSupport);
  if (p.maxComms <= 0 || p.maxRecvs < 1 || p.maxRecvs > 64)
    return fail(
        "device %d: maxComms %d, maxRecvs %d (maxComms at least 1, maxRecvs 1 to 64; values of other fields "
        "here mean the struct of another ABI version was filled)",
        dev, p.maxComms, p.maxRecvs);
  // A flag: NCCL reads any other value as true, and then takes one registration as valid on every comm.
  if (p.regIsGlobal != 0 && p.regIsGlobal != 1)
    return fail(
        "device %d: regIsGlobal %d, not 0 or 1 (the struct of another ABI version filled, its fields "
        "shifted?)",
        dev, p.regIsGlobal);
  if (!std::isfinite(p.latency) || p.latency < 0)
    return fail("device %d: latency %f (a finite number of microseconds, 0 or more)", dev, p.latency);
  if (p.maxP2pBytes == 0 || p.maxP2pBytes > NCCL_MAX_NET_SIZE_BYTES)
    return fail("device %d: maxP2pBytes %zu outside (0, 1 TiB] (NCCL refuses the connection)", dev, p.maxP2pBytes);
  if (p.vProps.ndevs < 1 || p.vProps.ndevs > NCCL_NET_MAX_DEVS_PER_NIC)
    return fail("device %d: vProps.ndevs %d", dev, p.vProps.ndevs);
  // NCCL 2.30 takes a v12 plugin's fields verbatim: these must be filled (-1 = undefined ids; 1 if unsure).
  if (p.maxMultiRequestSize < 1)
    return fail("device %d: maxMultiRequestSize %d (at least 1)", dev, p.maxMultiRequestSize);
  if (p.railId < NCCL_NET_ID_UNDEF || p.planeId < NCCL_NET_ID_UNDEF)
    return fail("device %d: railId %d / planeId %d (-1 when undefined)", dev, p.railId, p.planeId);
  if (p.netDeviceType != NCCL_NET_DEVICE_HOST &&
      !(p.netDeviceType == NCCL_NET_DEVICE_UNPACK && p.netDeviceVersion == NCCL_NET_DEVICE_UNPACK_VERSION))
    return fail("device %d: netDeviceType %d version %d is not one NCCL accepts for ncclNet", dev, p.netDeviceType,
                p.netDeviceVersion);
  return pass("");
}

Verdict propertiesSane(Context& c) {
  int ndev = 0;
  if (ncclResult_t result = CALL("devices", c.net->devices(&ndev)); result != ncclSuccess)
    return fail("devices returned %s", resultText(result).c_str());
  if (ndev <= 0) return fail("devices gave %d", ndev);
  std::set<std::string> names;
  std::vector<std::pair<const char*, std::string>> given;  // each device's name pointer and what it read then
  std::string summary;
  for (int dev = 0; dev < ndev; ++dev) {
    ncclNetProperties_v12_t p;
    if (ncclResult_t result = CALL("getProperties", c.net->getProperties(dev, &p)); result != ncclSuccess)
      return fail("getProperties(%d) returned %s", dev, resultText(result).c_str());
    if (p.name == nullptr || !names.insert(p.name).second)
      return fail("device %d: name %s is missing or not unique (NCCL keys NICs by name)", dev,
                  core::printable(p.name).c_str());
    if (Verdict sane = deviceSane(dev, p); sane.status != Status::kPass) return sane;
    summary += std::string(dev ? "; " : "") + core::printable(p.name) + " " + std::to_string(p.speed) +
               " Mbps maxRecvs " + std::to_string(p.maxRecvs);
    // Values NCCL accepts but that look like the wrong unit: said, not failed (a 100 Mb/s port exists). NCCL ranks
    // NICs and sizes channels by speed, so Gb/s in the Mb/s field makes a 100 Gb/s NIC read as 100 Mb/s.
    // NCCL takes a speed of 0 or less as 10 Gb/s (a port that cannot say): legal, and said.
    if (p.speed <= 0)
      summary += " (note: no speed: NCCL takes it as 10 Gb/s)";
    else if (p.speed < 1000)
      summary += " (note: under 1 Gb/s: is it Gb/s in the Mbps field?)";
    if (p.latency > 1000)
      summary += " (note: latency " + std::to_string(static_cast<long>(p.latency)) +
                 " us: is it nanoseconds in the microseconds field?)";
    given.emplace_back(p.name, p.name);
    // Asked again, the device must be the same one: NCCL reads a device's properties at topology detection and again
    // when it connects (and every rank of a node in its own process), and keys the NIC by them. (The name is judged
    // below, once the stack and heap were written over: a dangling one can read either way here.)
    ncclNetProperties_v12_t again;
    if (ncclResult_t result = CALL("getProperties", c.net->getProperties(dev, &again)); result != ncclSuccess)
      return fail("getProperties(%d) returned %s when called a second time", dev, resultText(result).c_str());
    const auto sameText = [](const char* a, const char* b) {
      return (a == nullptr) == (b == nullptr) && (a == nullptr || std::strcmp(a, b) == 0);
    };
    const char* changed = !sameText(p.pciPath, again.pciPath)                            ? "pciPath"
                          : p.guid != again.guid                                         ? "guid"
                          : p.ptrSupport != again.ptrSupport                             ? "ptrSupport"
                          : p.speed != again.speed                                       ? "speed"
                          : p.port != again.port                                         ? "port"
                          : p.maxComms != again.maxComms || p.maxRecvs != again.maxRecvs ? "maxComms or maxRecvs"
                          : p.regIsGlobal != again.regIsGlobal                           ? "regIsGlobal"
                          : p.maxP2pBytes != again.maxP2pBytes || p.maxCollBytes != again.maxCollBytes
                              ? "maxP2pBytes or maxCollBytes"
                          : p.netDeviceType != again.netDeviceType ? "netDeviceType"
                                                                   : nullptr;
    if (changed != nullptr)
      return fail(
          "device %d: a second getProperties gave another %s (guid 0x%llx then 0x%llx, speed %d then %d, ptrSupport "
          "0x%x then 0x%x): NCCL reads the properties at topology detection and again when it connects, and keys the "
          "NIC by them",
          dev, changed, static_cast<unsigned long long>(p.guid), static_cast<unsigned long long>(again.guid), p.speed,
          again.speed, p.ptrSupport, again.ptrSupport);
  }
  // NCCL keeps the pointers it is given: a name in a buffer the next call rewrites names every device the last one,
  // and a name in a temporary (a std::string of getProperties': its stack frame, or a heap block it freed) reads right
  // only until that memory is used again. So the stack and the heap are written over first, as the host's next calls
  // would (with one device, a dangling name passed: nothing rewrote it before the comparison).
  overwriteFreedMemory();
  for (int dev = 0; dev < ndev; ++dev) {
    const auto& [pointer, read] = given[static_cast<size_t>(dev)];
    if (read != pointer)
      return fail(
          "device %d: name \"%s\" became \"%s\" after getProperties of the later devices and other calls (NCCL "
          "keeps the pointer: each device's name must stay in memory of its own, not a temporary's)",
          dev, core::printable(read.c_str()).c_str(), core::printable(pointer).c_str());
  }
  return pass(std::to_string(ndev) + " device(s): " + summary);
}

Verdict listenHandleFits(Context& c) {
  unsigned char buffer[2 * NCCL_NET_HANDLE_MAXSIZE];
  std::memset(buffer, 0xa5, sizeof(buffer));
  void* listenComm = nullptr;
  if (ncclResult_t result = CALL("listen", c.net->listen(c.ctx, c.dev, buffer, &listenComm)); result != ncclSuccess)
    return fail("listen returned %s", resultText(result).c_str());
  if (listenComm == nullptr) return fail("listen returned no listenComm");
  CALL("closeListen", c.net->closeListen(listenComm));
  for (size_t i = NCCL_NET_HANDLE_MAXSIZE; i < sizeof(buffer); ++i)
    if (buffer[i] != 0xa5) return fail("listen wrote byte %zu of the handle (NCCL ships only 128)", i);
  const auto handleEnd = buffer + NCCL_NET_HANDLE_MAXSIZE;
  if (std::all_of(buffer, handleEnd, [](unsigned char b) { return b == 0xa5; }))
    return fail("listen wrote nothing into the handle: the peer's connect gets what the buffer held before");
  // All zero is legal, but it is also what a listen that clears the handle and never writes its address leaves:
  // said, for when the other rules' connects fail.
  const bool allZero = std::all_of(buffer, handleEnd, [](unsigned char b) { return b == 0; });
  return pass(std::string("listen wrote within the 128-byte handle") +
              (allZero ? " (note: all 128 bytes are zero: does listen fill in its address?)" : ""));
}

Verdict connectIsNonblocking(Context& c) {
  // The listener never accepts: connect must keep returning (NULL comm, or a comm) rather than wait for it.
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* listenComm = nullptr;
  if (ncclResult_t result = CALL("listen", c.net->listen(c.ctx, c.dev, handle, &listenComm)); result != ncclSuccess)
    return fail("listen returned %s", resultText(result).c_str());
  void* sendComm = nullptr;
  double slowest = 0;
  for (int i = 0; i < 50 && sendComm == nullptr; ++i) {
    auto start = Clock::now();
    if (CALL("connect", c.net->connect(c.ctx, c.dev, handle, &sendComm, deviceHandleSlot())) != ncclSuccess)
      return fail("connect returned an error while the peer had not accepted yet");
    slowest = std::max(slowest, std::chrono::duration<double>(Clock::now() - start).count());
  }
  if (slowest > 1.0) return fail("a connect call took %.2f s with no accept on the other side", slowest);
  // Complete the pair so the plugin can clean up: both sides progress together from here.
  // It must still complete: NCCL calls connect again and again before the peer accepts, and a connect that forgets
  // its attempt at each "not yet" (its state in a local, not in the handle) starts another one each call, while the
  // listener accepts the first: that connect never completes.
  void* recvComm = nullptr;
  ncclResult_t acceptResult = ncclSuccess, connectResult = ncclSuccess;
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while ((sendComm == nullptr || recvComm == nullptr) && Clock::now() < deadline) {
    if (recvComm == nullptr &&
        (acceptResult = CALL("accept", c.net->accept(listenComm, &recvComm, deviceHandleSlot()))) != ncclSuccess)
      break;
    if (sendComm == nullptr && (connectResult = CALL("connect", c.net->connect(c.ctx, c.dev, handle, &sendComm,
                                                                               deviceHandleSlot()))) != ncclSuccess)
      break;
  }
  const bool connected = sendComm != nullptr && recvComm != nullptr;
  if (sendComm != nullptr) closeSendComm(c, sendComm);
  if (recvComm != nullptr) closeRecvComm(c, recvComm);
  CALL("closeListen", c.net->closeListen(listenComm));
  if (!connected)
    return fail(
        "after 50 connect calls before accept, the connection was not made once the listener accepted: %s, %s "
        "(NCCL calls connect until it gives a comm, however long the peer takes to accept)",
        acceptResult != ncclSuccess ? ("accept returned " + resultText(acceptResult)).c_str()
        : recvComm != nullptr       ? "accept gave its comm"
                                    : "accept gave no comm within 10 s",
        connectResult != ncclSuccess ? ("connect returned " + resultText(connectResult)).c_str()
        : sendComm != nullptr        ? "connect gave its comm"
                                     : "connect gave no comm within 10 s");
  char text[96];
  std::snprintf(text, sizeof(text), "slowest connect call %.1f ms before accept", slowest * 1e3);
  return pass(text);
}

Verdict acceptIsNonblocking(Context& c) {
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* listenComm = nullptr;
  if (ncclResult_t result = CALL("listen", c.net->listen(c.ctx, c.dev, handle, &listenComm)); result != ncclSuccess)
    return fail("listen returned %s", resultText(result).c_str());
  double slowest = 0;
  for (int i = 0; i < 20; ++i) {
    void* recvComm = nullptr;
    auto start = Clock::now();
    const ncclResult_t result = CALL("accept", c.net->accept(listenComm, &recvComm, deviceHandleSlot()));
    slowest = std::max(slowest, std::chrono::duration<double>(Clock::now() - start).count());
    const char* wrong = result != ncclSuccess ? "accept returned an error"
                        : recvComm != nullptr ? "accept returned a comm although nobody connected"
                                              : nullptr;
    if (wrong != nullptr) {  // what it gave is closed all the same, so the plugin's closes are exercised too
      if (recvComm != nullptr) CALL("closeRecv", c.net->closeRecv(recvComm));
      CALL("closeListen", c.net->closeListen(listenComm));
      return fail("%s (call %d of 20: %s)", wrong, i + 1, resultText(result).c_str());
    }
  }
  CALL("closeListen", c.net->closeListen(listenComm));
  if (slowest > 1.0) return fail("an accept call took %.2f s with nobody connecting", slowest);
  char text[96];
  std::snprintf(text, sizeof(text), "20 accepts with nobody connecting, slowest %.1f ms", slowest * 1e3);
  return pass(text);
}

// Requests in flight per comm that NCCL may post through the table under test: NCCL_NET_MAX_REQUESTS (32) from v7,
// NCCL_NET_MAX_REQUESTS_V6 (8) through ncclNet_v6, whose plugins were made for NCCL 2.18 and before (the project's
// communicator gives a v6 plugin no more either). A v6 plugin sized for 8 failed both rules below for refusing a 9th.
int requestLimit(const Context& c) {
  return c.net->version() >= 7 ? NCCL_NET_MAX_REQUESTS : NCCL_NET_MAX_REQUESTS_V6;
}
const char* requestLimitName(const Context& c) {
  return c.net->version() >= 7 ? "NCCL_NET_MAX_REQUESTS" : "NCCL_NET_MAX_REQUESTS_V6, ncclNet_v6's";
}

Verdict maxRequestsInFlight(Context& c) {
  // NCCL keeps up to its request limit of receives posted per comm; they must all be accepted, then complete.
  const int kRequests = requestLimit(c);
  std::vector<std::pair<size_t, uint64_t>> messages;
  for (int i = 0; i < kRequests; ++i) messages.push_back({static_cast<size_t>(1000 + i), static_cast<uint64_t>(i)});
  Pair pair;
  std::string why;
  int goPipe[2];
  if (pipe(goPipe) != 0) return fail("pipe failed");
  if (!openPair(
          c, pair,
          [&](void* comm) {
            char go;
            if (read(goPipe[0], &go, 1) != 1) return 40;  // wait until every receive is posted
            return sendMessages(c, comm, messages);
          },
          &why))
    return fail("%s", why.c_str());
  std::vector<std::vector<unsigned char>> buffers(kRequests, std::vector<unsigned char>(4096));
  std::vector<void*> mhandles = registerBuffers(c, pair.recvComm, buffers);
  std::vector<void*> requests(kRequests, nullptr);
  int accepted = 0;
  for (int i = 0; i < kRequests; ++i) {
    void* data = buffers[i].data();
    size_t size = buffers[i].size();
    int tag = 1;
    // A NULL request is "not now", which NCCL retries: only one still refused after 2 s counts as the limit.
    for (auto deadline = Clock::now() + std::chrono::seconds(2); requests[i] == nullptr && Clock::now() < deadline;) {
      ncclResult_t posted =
          CALL("irecv", irecvChecked(*c.net, pair.recvComm, 1, &data, &size, &tag, &mhandles[i], &requests[i]));
      if (posted != ncclSuccess) return fail("irecv %d returned %s", i, resultText(posted).c_str());
    }
    if (requests[i] == nullptr) break;
    ++accepted;
  }
  (void)!write(goPipe[1], "g", 1);
  if (accepted < kRequests) {
    closePair(c, pair, 5);
    return fail("only %d of %d receives could be posted at once (%s)", accepted, kRequests, requestLimitName(c));
  }
  for (int i = 0; i < kRequests; ++i) {
    int size = -1;
    ncclResult_t result = waitDone(c, requests[i], &size, gTransferWaitSeconds);
    Verdict v = pass("");
    if (result != ncclSuccess)
      v = fail("receive %d: %s", i, waitText(result, gTransferWaitSeconds).c_str());
    else if (size != 1000 + i)
      v = fail("receive %d: test reported %d bytes, %d were sent", i, size, 1000 + i);
    else if (long bad = firstMismatch(buffers[i], size, i); bad >= 0)
      v = fail("receive %d (%d B): wrong byte at offset %ld", i, size, bad);
    if (v.status != Status::kPass) return withPeerFailure(v, closePair(c, pair, 1));
  }
  int code = closePair(c, pair);
  if (code != 0) return fail("%s", peerText(code).c_str());
  return pass(std::to_string(kRequests) + " receives (" + requestLimitName(c) +
              ") posted at once, all completed in order with the right sizes and bytes");
}

Verdict nullRequestMeansRetry(Context& c) {
  // The sender posts with nobody receiving until the plugin says "not now" (a NULL request; a receiver-driven RDMA
  // plugin may say so at once), or takes one beyond the request limit (requestLimit per comm, times maxRecvs on the
  // send side). NCCL never posts more than the limit, so the one beyond may also be refused with an error, as
  // NCCL's socket transport refuses it. Then the receiver posts its receives, the sender retries and posts 4 more,
  // never more than the limit in flight: everything accepted must complete. Each send carries its number (the k-th
  // accepted send carries k, and so does every refused attempt before it), and the receiver checks them in order: a
  // plugin that queued or sent a message and still answered NULL sends it twice once the host retries, which
  // identical messages hid.
  // maxRecvs as properties-sane bounds it (1..64): a garbage one overflowed the sizes below.
  const int kLimit = requestLimit(c) * std::clamp(c.props.maxRecvs, 1, 64);
  constexpr int kMore = 4;
  constexpr int kRetrySeconds = 10;  // a posted receive must let a refused send through well within this
  Pair pair;
  std::string why;
  int resultPipe[2], goPipe[2];
  if (pipe(resultPipe) != 0 || pipe(goPipe) != 0) return fail("pipe failed");
  if (!openPair(
          c, pair,
          [&](void* comm) {
            // One 16-byte message per send, numbered, each left alone while its send is in flight.
            std::vector<unsigned char> bytes(16 * static_cast<size_t>(kLimit + 1 + kMore), 7);
            void* mhandle = registerBuffer(c, comm, bytes.data(), bytes.size());
            auto message = [&](size_t k) {
              unsigned char* at = bytes.data() + 16 * k;
              const auto number = static_cast<uint32_t>(k);
              std::memcpy(at, &number, sizeof(number));
              return at;
            };
            std::vector<void*> requests;
            bool refused = false;
            for (int i = 0; i <= kLimit; ++i) {
              void* request = nullptr;
              if (CALL("isend", isendNoted(*c.net, comm, message(requests.size()), 16, 1, mhandle, &request)) !=
                  ncclSuccess) {
                refused = i < kLimit;  // an error for the one beyond the limit is the plugin's right
                break;
              }
              if (request == nullptr) break;
              requests.push_back(request);
            }
            int posted = static_cast<int>(requests.size());
            (void)!write(resultPipe[1], &posted, sizeof(posted));  // first: the receiver waits for it
            if (refused) return 41;
            char go;
            if (read(goPipe[0], &go, 1) != 1) return 40;
            // Retry as NCCL's proxy does: keep testing what is in flight while a new send is refused.
            size_t oldest = 0;
            auto deadline = Clock::now() + std::chrono::seconds(kRetrySeconds);
            for (int i = 0; i < kMore;) {
              void* request = nullptr;
              const bool full = requests.size() - oldest >= static_cast<size_t>(kLimit);
              if (!full && CALL("isend", isendNoted(*c.net, comm, message(requests.size()), 16, 1, mhandle,
                                                    &request)) != ncclSuccess)
                return 41;
              if (request != nullptr) {
                requests.push_back(request);
                ++i;
              } else if (oldest < requests.size()) {
                int done = 0, size = -1;
                if (CALL("test", testSizes(*c.net, requests[oldest], &done, &size)) != ncclSuccess) return 42;
                if (done && sentSizeWrong(size, 16)) return 42;
                if (done) ++oldest;
              }
              if (Clock::now() > deadline) return 43;
            }
            for (; oldest < requests.size(); ++oldest) {
              int size = -1;
              if (waitDone(c, requests[oldest], &size, gTransferWaitSeconds) != ncclSuccess || sentSizeWrong(size, 16))
                return 42;
            }
            return 0;
          },
          &why))
    return fail("%s", why.c_str());
  int posted = 0;
  pollfd wait{resultPipe[0], POLLIN, 0};
  if (poll(&wait, 1, 20000) != 1 || read(resultPipe[0], &posted, sizeof(posted)) != sizeof(posted)) {
    const int code = closePair(c, pair, 1);
    return fail("the sender did not report how many sends it could post%s",
                code != 0 && code != 124 ? (": " + peerText(code)).c_str() : "");
  }
  (void)!write(goPipe[1], "g", 1);
  std::vector<unsigned char> buffer(64);
  void* mhandle = registerBuffer(c, pair.recvComm, buffer.data(), buffer.size());
  int peerCode = 0;
  bool peerFailed = false;
  for (int i = 0; i < posted + kMore && !peerFailed; ++i) {
    void* request = nullptr;
    void* data = buffer.data();
    size_t size = buffer.size();
    int tag = 1;
    if (ncclResult_t posted = postRecv(c, pair.recvComm, 1, &data, &size, &tag, &mhandle, &request);
        posted != ncclSuccess)
      return fail("irecv %d: %s", i, postText(posted).c_str());
    int got = -1;
    // A sender that gave up explains a receive that never completes better than the receive's timeout does.
    ncclResult_t result = waitDoneWatchingPeer(c, request, &got, gTransferWaitSeconds, pair.peer, &peerCode);
    if (result != ncclSuccess && pair.peer > 0) {
      // The receive failed, perhaps because the sender gave up and closed: its exit code says so, if it has one.
      int status = 0;
      for (int tries = 0; tries < 200 && pair.peer > 0; ++tries, usleep(10000)) {
        if (waitpid(pair.peer, &status, WNOHANG) != pair.peer) continue;
        pair.peer = -1;
        peerCode = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      }
    }
    peerFailed = result != ncclSuccess && pair.peer < 0 && peerCode != 0;
    if (!peerFailed && (result != ncclSuccess || got != 16))
      return fail("receive %d: %s, size %d (16 bytes were sent)", i,
                  result == ncclSuccess ? "completed" : waitText(result, gTransferWaitSeconds).c_str(), got);
    uint32_t number = 0;
    std::memcpy(&number, buffer.data(), sizeof(number));
    if (!peerFailed && number != static_cast<uint32_t>(i)) {
      closePair(c, pair);
      return fail("receive %d carried send %u: %s", i, number,
                  number < static_cast<uint32_t>(i)
                      ? "a message went twice (isend answered NULL, \"not now\", after it had queued or sent it, so "
                        "the host's retry sent it again)"
                      : "messages were lost or reordered");
    }
  }
  int code = peerFailed ? peerCode : closePair(c, pair);
  if (peerFailed) closePair(c, pair);
  if (code == 43)
    return fail("after a NULL request, isend never accepted a send within %d s once receives were posted",
                kRetrySeconds);
  if (code != 0) return fail("%s", peerText(code).c_str());
  return pass(posted < kLimit ? "isend returned a NULL request after " + std::to_string(posted) +
                                    " in flight; retried sends were accepted once receives were posted; all completed"
                              : "accepted " + std::to_string(posted) + " sends in flight; all completed");
}

Verdict testReportsSizes(Context& c) {
  std::vector<std::pair<size_t, uint64_t>> messages{{1, 1},     {7, 2},        {4096, 3},          {8192, 6},
                                                    {65537, 4}, {1u << 20, 7}, {(1u << 20) + 3, 5}};
  Verdict v = transferChecked(c, messages, 2u << 20);
  return v.status == Status::kPass ? pass(
                                         "1, 7, 4096, 8192, 65537, 1 MiB and 1 MiB+3 bytes into 2 MiB buffers: every "
                                         "byte arrived and both sides reported the sent size")
                                   : v;
}

Verdict zeroByte(Context& c) {
  std::vector<std::pair<size_t, uint64_t>> messages{{0, 0}, {5, 9}, {0, 0}};
  Verdict v = transferChecked(c, messages, 64);
  return v.status == Status::kPass ? pass("0-byte messages complete with size 0, in order with others") : v;
}

// NCCL's proxy closes a listener as soon as its accept has returned a comm, and only then moves data on the comm;
// every other rule keeps its listener open to the end. A receive comm that still uses its listener's socket, event
// channel, queue or memory fails here (or reads memory written over since the close, which a sanitizer build names).
Verdict listenerClosedAfterAccept(Context& c) {
  std::mt19937_64 random(4242);
  std::vector<std::pair<size_t, uint64_t>> messages;
  for (int i = 0; i < 40; ++i) messages.push_back({i % 8 == 7 ? random() % (256u << 10) : random() % 5000, random()});
  messages.push_back({0, 0});
  Verdict v = transferChecked(c, messages, 256u << 10, {}, true);
  return v.status == Status::kPass
             ? pass(
                   "41 messages of 0 B .. 256 KiB received, every byte checked, after closeListen of the listener "
                   "that accepted the comm")
             : v;
}

// sends-outlive-the-sender's peer: posts every message (in order, each isend retried while it answers NULL) and tests
// them until all completed, then returns, and its caller closes the comm, finalizes the context (v11+: NCCL's destroy
// of a communicator) and exits. Writes one byte to `waitingFd` when 2 s pass with sends not completed: they wait for
// the receives (a receiver-driven plugin), which the receiver then posts.
int sendAllThenLeave(Context& c, void* comm, const std::vector<std::pair<size_t, uint64_t>>& messages, int waitingFd) {
  std::vector<std::vector<unsigned char>> buffers;
  for (const auto& m : messages) {
    buffers.emplace_back(std::max<size_t>(m.first, 1));
    fill(buffers.back(), m.first, m.second);
  }
  std::vector<void*> mhandles = registerBuffers(c, comm, buffers);
  std::vector<void*> requests(messages.size(), nullptr);
  std::vector<bool> completed(messages.size(), false);
  size_t posted = 0, done = 0;
  bool told = false;
  const auto start = Clock::now();
  while (done < messages.size()) {
    if (posted < messages.size()) {
      ncclResult_t result = CALL("isend", isendNoted(*c.net, comm, buffers[posted].data(), messages[posted].first, 1,
                                                     mhandles[posted], &requests[posted]));
      if (result != ncclSuccess) return 32;
      if (requests[posted] != nullptr) ++posted;
    }
    for (size_t i = 0; i < posted; ++i) {
      if (completed[i]) continue;
      int finished = 0, size = -1;
      if (CALL("test", testSizes(*c.net, requests[i], &finished, &size)) != ncclSuccess) return 30;
      if (!finished) continue;
      if (sentSizeWrong(size, messages[i].first)) return 31;
      completed[i] = true;
      ++done;
    }
    if (!told && done < messages.size() && Clock::now() - start > std::chrono::seconds(2)) {
      (void)!write(waitingFd, "w", 1);
      told = true;
    }
    if (Clock::now() - start > std::chrono::seconds(gTransferWaitSeconds) + std::chrono::seconds(2)) return 30;
  }
  return 0;
}

// A send's completion gives its buffer back to the host and says nothing of the data's arrival: a rank whose last
// sends completed destroys its communicator (closeSend, then finalize) and exits, while the next rank may not even
// have posted the receives yet (the last step of a ring, the end of a job). What the plugin accepted must still
// arrive; a close that drops what is queued or in the kernel's buffers (a reset sent for unread bytes, a queue freed
// with the comm) loses the last messages of a job that then fails only on its other ranks.
Verdict sendsOutliveTheSender(Context& c) {
  std::vector<std::pair<size_t, uint64_t>> messages;
  std::mt19937_64 random(777);
  for (size_t size : {size_t{0}, size_t{1}, size_t{100}, size_t{4096}, size_t{65539}, size_t{1} << 20, size_t{3},
                      size_t{70000}, size_t{512} << 10, size_t{8}, size_t{12345}, size_t{200000}})
    if (gLargestMessage == 0 || size <= gLargestMessage)
      messages.push_back({size, random()});
    else
      gLeftOut = "the messages over maxP2pBytes " + std::to_string(gLargestMessage) + " left out";
  size_t capacity = 1;
  for (const auto& m : messages) capacity = std::max(capacity, m.first);
  int waiting[2];
  if (pipe(waiting) != 0) return fail("pipe failed");
  Pair pair;
  std::string why;
  if (!openPair(
          c, pair,
          [&](void* comm) {
            close(waiting[0]);
            const int code = sendAllThenLeave(c, comm, messages, waiting[1]);
            if (code != 0) return code;
            int exitCode = closeSendComm(c, comm) == ncclSuccess ? 0 : kPeerCloseFailed;
            if (c.net->version() >= 11 && CALL("finalize", c.net->finalize(c.ctx)) != ncclSuccess)
              exitCode = kPeerCloseFailed;
            if (exitCode == 0 && !gContractProblem.empty()) exitCode = gContractCode;
            harnessExit(exitCode);  // as a rank exits after destroying its communicator (openPair would close it again)
          },
          &why)) {
    close(waiting[0]);
    close(waiting[1]);
    return fail("%s", why.c_str());
  }
  close(waiting[1]);
  // Until the sender has left (every send completed, the comm closed, the process gone) or says its sends wait for the
  // receives.
  bool receiverDriven = false;
  int code = 0;
  // pair.peer is -1 already when openPair's accept reaped a sender that had finished (0) before its comm was accepted.
  for (auto deadline = Clock::now() + std::chrono::seconds(gTransferWaitSeconds + 5); pair.peer > 0;) {
    int status = 0;
    if (waitpid(pair.peer, &status, WNOHANG) == pair.peer) {
      code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      pair.peer = -1;
      break;
    }
    pollfd said{waiting[0], POLLIN, 0};
    if (poll(&said, 1, 1) == 1 && (said.revents & POLLIN) != 0) {
      receiverDriven = true;
      break;
    }
    if (Clock::now() > deadline) break;
  }
  close(waiting[0]);
  Verdict v = pass("");
  if (code != 0) v = fail("the sender failed: %s", peerText(code).c_str());
  if (v.status == Status::kPass && !receiverDriven && pair.peer > 0)
    v = fail("the sender neither finished nor said its sends wait for receives within %d s", gTransferWaitSeconds + 5);
  if (v.status == Status::kPass) {
    // Registered once the sender has gone: NCCL registers on live comms only, and a plugin may refuse this one.
    std::unique_ptr<RegistrationMayBeRefused> mayBeRefused;
    if (pair.peer <= 0) mayBeRefused = std::make_unique<RegistrationMayBeRefused>();
    v = receiveMessages(c, pair.recvComm, messages, capacity, 1, pair.peer > 0 ? &pair.peer : nullptr);
    if (v.status == Status::kFail && !receiverDriven)
      v.evidence =
          "after the sender's sends completed and it closed its comm and exited, before any receive was "
          "posted: " +
          v.evidence;
  }
  const int peerCode = closePair(c, pair, v.status == Status::kPass ? 30 : 1);
  if (v.status != Status::kPass) return v;
  if (peerCode != 0) return fail("%s", peerText(peerCode).c_str());
  char text[300];
  std::snprintf(text, sizeof(text),
                receiverDriven ? "%zu messages (0 B .. %zu B): the sends waited for the receives (receiver-driven), "
                                 "and every message arrived whole with the sender closing as its sends completed"
                               : "%zu messages (0 B .. %zu B) arrived whole, received only after the sender's sends "
                                 "had completed and it had closed its comm and exited",
                messages.size(), capacity);
  return pass(text);
}

// optional-completion-hint's receiving side: a one-buffer receive posted with the hint, then one without it that
// must get the second message (`secondBytes` of seed `secondSeed`) whole.
Verdict receiveAfterTheHint(Context& c, void* recvComm, size_t secondBytes, uint64_t secondSeed) {
  std::vector<std::vector<unsigned char>> buffers(2, std::vector<unsigned char>(8192));
  std::vector<void*> mhandles = registerBuffers(c, recvComm, buffers);
  Verdict v = pass("");
  void* data = buffers[0].data();
  size_t size = buffers[0].size();
  int tag = 1;
  void* request = nullptr;
  int calls = 0;
  for (auto deadline = Clock::now() + std::chrono::seconds(10); request == nullptr && v.status == Status::kPass;) {
    request = reinterpret_cast<void*>(NCCL_NET_OPTIONAL_RECV_COMPLETION);  // before every call, as NCCL sets it
    ++calls;
    ncclResult_t result = CALL("irecv", irecvChecked(*c.net, recvComm, 1, &data, &size, &tag, &mhandles[0], &request));
    if (result != ncclSuccess) {
      v = fail("irecv given the optional-completion hint returned %s", resultText(result).c_str());
    } else if (request == reinterpret_cast<void*>(NCCL_NET_OPTIONAL_RECV_COMPLETION)) {
      v = fail(
          "irecv returned without writing *request, which still held NCCL's optional-completion hint (0x1, "
          "NCCL_NET_OPTIONAL_RECV_COMPLETION, set before LL receives): NCCL would test (void*)0x1; write NULL to be "
          "retried or a request");
    } else if (request == nullptr && Clock::now() > deadline) {
      v = fail("irecv given the optional-completion hint still gave a NULL request after 10 s (%d calls)", calls);
    }
  }
  if (v.status == Status::kPass) {
    int got = -1;
    if (ncclResult_t result = waitDone(c, request, &got, gTransferWaitSeconds); result != ncclSuccess)
      v = fail("the hinted receive: %s", waitText(result, gTransferWaitSeconds).c_str());
  }
  if (v.status == Status::kPass) {
    void* second = buffers[1].data();
    size_t capacity = buffers[1].size();
    void* next = nullptr;
    int got = -1;
    ncclResult_t result = postRecv(c, recvComm, 1, &second, &capacity, &tag, &mhandles[1], &next);
    if (result == ncclSuccess) result = waitDone(c, next, &got, gTransferWaitSeconds);
    if (result != ncclSuccess)
      v = fail("the receive after the hinted one: %s", waitText(result, gTransferWaitSeconds).c_str());
    else if (const std::string wrong = receivedWrong(buffers[1], got, secondBytes, secondSeed); !wrong.empty())
      v = fail("the receive after the hinted one, meant for the next message (%zu B): %s", secondBytes, wrong.c_str());
  }
  if (v.status != Status::kPass) return v;
  return pass("irecv wrote *request over NCCL's optional-completion hint (" + std::to_string(calls) +
              " call(s)), the hinted receive completed, and the next receive got the next message whole");
}

// NCCL sets *request to NCCL_NET_OPTIONAL_RECV_COMPLETION (0x1) before a one-buffer LL or LL128 receive of a v9+
// plugin: it learns of arrival from flags in the data and needs no exact completion. The plugin must still write
// *request, NULL to be retried or a request NCCL then tests; one that returns without writing it (a "busy" path
// that returns early) has NCCL test (void*)0x1. The hinted receive may complete early (the hint allows it), so its
// bytes and size are not judged; the receive after it, posted without the hint, must get the next message whole.
Verdict optionalCompletionHint(Context& c) {
  if (c.net->version() < 9)
    return skip("ncclNet_v" + std::to_string(c.net->version()) +
                ": hosts clear the hint before calling a plugin of this version");
  constexpr size_t kFirst = 1000, kSecond = 5000;
  return sendAndReceive(c, {{kFirst, 61}, {kSecond, 62}},
                        [&](void* recvComm, pid_t*) { return receiveAfterTheHint(c, recvComm, kSecond, 62); });
}

// A message larger than the posted receive must fail (NCCL never truncates), and nothing may land past the buffer:
// far larger, one byte larger (a size check rounded up to a word or line lets it through), and large (a plugin
// that only checks small receives, say).
constexpr int kSenderRefused = 100;  // truncation-is-an-error's sender exits with this + the plugin's result
// Whether the pair's peer ended through the harness (so its exit status is one of the harness's codes): a plugin's
// own exit(105) in the sender is not "the sender's isend returned 5".
bool peerExitIsTheHarnesss() {
  return gCallNotes != nullptr && gCallNotes[1].harnessExit.load() == 1;
}

Verdict truncationTakenAside(Context& c, size_t big, std::string* evidence);  // below

Verdict truncationIsAnError(Context& c) {
  struct Case {
    size_t sent, capacity;
    bool late = false;  // the receive posted 0.3 s after the send: a plugin that receives eagerly holds it by then
  };
  // The large case within maxP2pBytes: above it the harness refuses the send itself (oversized), and that refusal
  // read as the plugin's.
  const size_t large = std::min<size_t>(2u << 20, c.props.maxP2pBytes);
  // One byte over is tried both ways: a plugin that holds a message sent before its receive checks it on a path of
  // its own (an off-by-one there went unseen with 1000 bytes into 100 as its only case).
  const Case cases[] = {{1000, 100}, {101, 100}, {large, large / 2}, {1000, 100, true}, {101, 100, true}};
  // Watched bytes past the buffer: room for the whole message and 64 more, so a plugin that writes all of it lands
  // in memory of this rule's, which then names the overrun (a shorter guard let it corrupt the heap, and the rule
  // process died in a later free without a verdict).
  constexpr size_t kGuard = 64;
  std::string evidence;
  int ran = 0;
  for (const Case& k : cases) {
    if (k.sent > c.props.maxP2pBytes || k.capacity == 0) {
      if (k.capacity == 0) continue;  // maxP2pBytes 0 or 1: no message smaller than it to send
      evidence += (evidence.empty() ? "" : ", ") + std::to_string(k.sent) + " into " + std::to_string(k.capacity) +
                  ": not run (maxP2pBytes " + std::to_string(c.props.maxP2pBytes) + ")";
      continue;
    }
    Pair pair;
    std::string why;
    if (!openPair(
            c, pair,
            [&](void* comm) {
              static std::vector<unsigned char> big;  // may still be read until closeSend, after this returns
              big.assign(k.sent, 1);
              void* mhandle = registerBuffer(c, comm, big.data(), big.size());
              void* request = nullptr;
              // A sender that refuses the message (NCCL's IB plugin reads the posted size from the receiver and
              // fails isend or test with ncclInvalidUsage) says so by its exit code: kSenderRefused + the result.
              if (ncclResult_t result = postSend(c, comm, big.data(), big.size(), 1, mhandle, &request);
                  result != ncclSuccess)
                return result == kDeadline ? 0 : kSenderRefused + static_cast<int>(result);
              int size = -1;
              ncclResult_t result = waitDone(c, request, &size, 5);
              // It may fail once the receiver rejected the message too: the receiver's verdict comes first.
              return result == ncclSuccess || result == kDeadline ? 0 : kSenderRefused + static_cast<int>(result);
            },
            &why))
      return fail("%s", why.c_str());
    ++ran;
    std::vector<unsigned char> small(k.sent + kGuard, 0);
    void* data = small.data();
    size_t size = k.capacity;
    int tag = 1;
    void* mhandle = registerBuffer(c, pair.recvComm, small.data(), k.capacity);  // the guard bytes are not the buffer's
    void* request = nullptr;
    if (k.late) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ncclResult_t result = postRecv(c, pair.recvComm, 1, &data, &size, &tag, &mhandle, &request);
    int got = -1, peerCode = 0;
    if (result == ncclSuccess) result = waitDoneWatchingPeer(c, request, &got, 10, pair.peer, &peerCode);
    closePair(c, pair, 10);
    // Refused on the sending side (the receive then waits for a message that never comes, and NCCL, seeing the
    // sender's error, tears the communicator down): as good as a failed receive, if nothing was written.
    const bool senderRefused = result == kDeadline && peerCode > kSenderRefused && peerExitIsTheHarnesss();
    if (senderRefused) result = static_cast<ncclResult_t>(peerCode - kSenderRefused);
    size_t firstPast = small.size(), lastPast = 0;
    for (size_t i = k.capacity; i < small.size(); ++i) {
      if (small[i] == 0) continue;
      firstPast = std::min(firstPast, i);
      lastPast = i;
    }
    if (firstPast < small.size())
      return fail(
          "a %zu-byte message into a %zu-byte receive wrote past the buffer: bytes %zu..%zu after its start "
          "changed (the receive %s)",
          k.sent, k.capacity, firstPast, lastPast,
          result == ncclSuccess ? ("completed, size " + std::to_string(got)).c_str()
                                : ("returned " + resultText(result)).c_str());
    if (result == ncclSuccess)
      return fail("a %zu-byte message into a %zu-byte receive completed (size %d): silent truncation", k.sent,
                  k.capacity, got);
    if (result == kDeadline)
      return fail("a %zu-byte message into a %zu-byte receive never completed nor failed", k.sent, k.capacity);
    evidence += (evidence.empty() ? "" : ", ") + std::to_string(k.sent) + " into " + std::to_string(k.capacity) +
                (k.late ? " posted after it was sent" : "") + ": " +
                (senderRefused ? "the sender's isend or test returned " : "") + resultText(result);
  }
  if (ran == 0)
    return skip("maxP2pBytes " + std::to_string(c.props.maxP2pBytes) +
                " leaves no message larger than a receive buffer to send");
  if (c.props.maxRecvs >= 2) {
    // 1000 bytes, then one byte over: the held message's own size check, off by one, passed the first alone.
    for (size_t big : {size_t{1000}, size_t{101}}) {
      Verdict v = truncationTakenAside(c, big, &evidence);
      if (v.status != Status::kPass) return v;
    }
  }
  return pass("every oversized message failed, nothing written past the buffer (" + evidence + ")");
}

// truncation-is-an-error, for a message a plugin took aside (maxRecvs >= 2): NCCL's shared comms post one grouped
// receive per step, and a sender that runs ahead delivers a message before its step is posted (tags-out-of-step). A
// plugin that keeps such a message and copies it into the receive posted later must still refuse one larger than
// that receive; a check only on the path of receives posted first let the copy cut it to fit and complete.
// The sender: step 0's tag-1 message (1000 B), step 1's (`big` B, for a 100-byte receive) as far as isend takes it in
// 0.3 s, then step 0's tag-2 message (100 B), then step 1's. Exit 0 when step 0's went through; kSenderRefused + the
// result when the plugin refused step 1's tag-1 message (a receiver-driven one learns the 100 bytes).
constexpr size_t kAsideBig = 1000, kAsideSmall = 100;

int sendTakenAside(Context& c, void* comm, size_t big) {
  static std::vector<std::vector<unsigned char>> buffers;  // may be read until closeSend, after this returns
  const size_t sizes[4] = {kAsideBig, big, kAsideSmall, kAsideSmall};  // step 0 tag 1, step 1 tag 1, tag 2 ...
  const int tags[4] = {1, 1, 2, 2};
  buffers.assign(4, {});
  for (int m = 0; m < 4; ++m) buffers[static_cast<size_t>(m)].assign(sizes[m], static_cast<unsigned char>(0x51 + m));
  std::vector<void*> mhandles = registerBuffers(c, comm, buffers);
  void* requests[4] = {};
  auto send = [&](int m, double seconds) {
    return postSend(c, comm, buffers[static_cast<size_t>(m)].data(), sizes[m], tags[m],
                    mhandles[static_cast<size_t>(m)], &requests[m], seconds);
  };
  if (send(0, 10) != ncclSuccess) return 41;
  if (ncclResult_t result = send(1, 0.3); result != ncclSuccess && result != kDeadline)
    return kSenderRefused + static_cast<int>(result);
  if (send(2, 10) != ncclSuccess) return 41;
  if (requests[1] == nullptr)
    if (ncclResult_t result = send(1, 10); result != ncclSuccess)
      return result == kDeadline ? 45 : kSenderRefused + static_cast<int>(result);
  (void)send(3, 10);  // may be refused once the receiver failed step 1: its verdict comes first
  int size = -1;
  if (waitDone(c, requests[0], &size, 10) != ncclSuccess || waitDone(c, requests[2], &size, 10) != ncclSuccess)
    return 42;
  const ncclResult_t result = waitDone(c, requests[1], &size, 5);
  return result == ncclSuccess || result == kDeadline ? 0 : kSenderRefused + static_cast<int>(result);
}

Verdict truncationTakenAside(Context& c, size_t big, std::string* evidence) {
  Pair pair;
  std::string why;
  if (!openPair(
          c, pair, [&](void* comm) { return sendTakenAside(c, comm, big); }, &why))
    return fail("message taken aside: %s", why.c_str());
  constexpr size_t kGuard = 64;
  // Step 0: room for each message; step 1: tag 1's receive of 100 bytes, watched for kAsideBig + kGuard past it.
  std::vector<std::vector<unsigned char>> buffers = {
      std::vector<unsigned char>(2 * kAsideBig, 0), std::vector<unsigned char>(2 * kAsideBig, 0),
      std::vector<unsigned char>(kAsideBig + kGuard, 0), std::vector<unsigned char>(2 * kAsideBig, 0)};
  void* mhandles[4];
  for (size_t b = 0; b < 4; ++b)
    mhandles[b] = registerBuffer(c, pair.recvComm, buffers[b].data(), b == 2 ? kAsideSmall : buffers[b].size());
  auto post = [&](int step, void** request) {
    void* data[2] = {buffers[static_cast<size_t>(step * 2)].data(), buffers[static_cast<size_t>(step * 2 + 1)].data()};
    size_t sizes[2] = {step == 0 ? 2 * kAsideBig : kAsideSmall, 2 * kAsideBig};
    int tags[2] = {1, 2};
    void* handles[2] = {mhandles[step * 2], mhandles[step * 2 + 1]};
    return postRecv(c, pair.recvComm, 2, data, sizes, tags, handles, request);
  };
  void* request = nullptr;
  int got[2] = {-1, -1};
  ncclResult_t result = post(0, &request);
  if (result == ncclSuccess) result = waitDone(c, request, got, 10, 2);
  if (result != ncclSuccess || got[0] != static_cast<int>(kAsideBig) || got[1] != static_cast<int>(kAsideSmall)) {
    if (pair.peer > 0) kill(pair.peer, SIGKILL);
    closePair(c, pair, 1);
    return fail("message taken aside: step 0 (tags 1 and 2, %zu and %zu B) %s", kAsideBig, kAsideSmall,
                result != ncclSuccess
                    ? ("returned " + resultText(result)).c_str()
                    : ("reported sizes " + std::to_string(got[0]) + " and " + std::to_string(got[1])).c_str());
  }
  // Step 1, posted once step 0 is done: its tag-1 message (`big` B) was sent before this, for 100 bytes.
  int peerCode = 0;
  result = post(1, &request);
  bool done = false;
  for (auto deadline = Clock::now() + std::chrono::seconds(10); result == ncclSuccess && !done;) {
    int finished = 0;
    result = CALL("test", testSizes(*c.net, request, &finished, got, 2));
    done = finished != 0;
    int status = 0;
    if (!done && result == ncclSuccess && pair.peer > 0 && waitpid(pair.peer, &status, WNOHANG) == pair.peer) {
      pair.peer = -1;
      peerCode = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      if (peerCode != 0) result = kDeadline;
    }
    if (!done && result == ncclSuccess && Clock::now() > deadline) result = kDeadline;
  }
  closePair(c, pair, 10);
  const bool senderRefused = result == kDeadline && peerCode > kSenderRefused && peerExitIsTheHarnesss();
  if (senderRefused) result = static_cast<ncclResult_t>(peerCode - kSenderRefused);
  const auto& small = buffers[2];
  for (size_t i = kAsideSmall; i < small.size(); ++i)
    if (small[i] != 0)
      return fail(
          "message taken aside: step 1's %zu-byte message into its %zu-byte receive wrote past the buffer "
          "(byte %zu after its start changed)",
          big, kAsideSmall, i);
  if (done && result == ncclSuccess)
    return fail(
        "message taken aside: step 1's %zu-byte message, sent before its %zu-byte receive was posted, "
        "completed (size %d): silent truncation on the path of a message kept for a later receive",
        big, kAsideSmall, got[0]);
  if (result == kDeadline)
    return fail("message taken aside: step 1's %zu-byte message into its %zu-byte receive never completed nor failed%s",
                big, kAsideSmall, peerCode != 0 ? (" (" + peerText(peerCode) + ")").c_str() : "");
  *evidence += ", " + std::to_string(big) + " into 100 sent a step ahead of its grouped receive: " +
               std::string(senderRefused ? "the sender's isend or test returned " : "") + resultText(result);
  return pass("");
}

// The peer's side of a grouped receive, once `goFd` says the receive is posted: one message per entry of `sizes`,
// tag firstTag + k, its bytes filled from seedBase + k, posted in reverse tag order, then each waited for and its
// reported size checked as every other sender's is. 0, or the peer's exit code for what went wrong.
int sendInReverseTagOrder(Context& c, void* comm, int goFd, const std::vector<size_t>& sizes, int firstTag,
                          uint64_t seedBase) {
  char go;
  if (read(goFd, &go, 1) != 1) return 40;
  const int n = static_cast<int>(sizes.size());
  std::vector<std::vector<unsigned char>> buffers(n);
  for (int k = 0; k < n; ++k) buffers[k].resize(std::max<size_t>(sizes[k], 1));
  std::vector<void*> mhandles = registerBuffers(c, comm, buffers);
  std::vector<void*> requests(n, nullptr);
  for (int k = n - 1; k >= 0; --k) {
    fill(buffers[k], sizes[k], seedBase + k);
    if (postSend(c, comm, buffers[k].data(), sizes[k], firstTag + k, mhandles[k], &requests[k]) != ncclSuccess)
      return 41;
  }
  for (int k = 0; k < n; ++k) {
    int size = -1;
    if (waitDone(c, requests[k], &size, 20) != ncclSuccess) return 42;
    if (sentSizeWrong(size, sizes[k])) return 31;
  }
  return 0;
}

// One grouped irecv of `n` buffers (tags 10.., sizes 100*(k+1)+3) that the peer fills in reverse tag order. Empty
// evidence on success.
Verdict groupedReceive(Context& c, int n) {
  Pair pair;
  std::string why;
  int goPipe[2];
  if (pipe(goPipe) != 0) return fail("pipe failed");
  // The sender sends one message per tag, in reverse tag order, sizes differing per tag.
  if (!openPair(
          c, pair,
          [&](void* comm) {
            std::vector<size_t> sizes(n);
            for (int k = 0; k < n; ++k) sizes[k] = 100 * (k + 1) + 3;
            return sendInReverseTagOrder(c, comm, goPipe[0], sizes, 10, 50);
          },
          &why))
    return fail("%s", why.c_str());
  // 8 KiB: the largest message, at n = 64, is 6403 bytes.
  std::vector<std::vector<unsigned char>> buffers(n, std::vector<unsigned char>(8192));
  std::vector<void*> mhandles = registerBuffers(c, pair.recvComm, buffers);
  std::vector<void*> data(n);
  std::vector<size_t> sizes(n, 8192);
  std::vector<int> tags(n);
  for (int k = 0; k < n; ++k) {
    data[k] = buffers[k].data();
    tags[k] = 10 + k;
  }
  void* request = nullptr;
  ncclResult_t posted =
      postRecv(c, pair.recvComm, n, data.data(), sizes.data(), tags.data(), mhandles.data(), &request);
  if (posted != ncclSuccess && pair.peer > 0) kill(pair.peer, SIGKILL);  // its messages have no receive to go to
  (void)!write(goPipe[1], "g", 1);
  std::vector<int> got(64, -1);
  ncclResult_t result = posted == ncclSuccess ? waitDone(c, request, got.data(), 20, n) : posted;
  const uint64_t unwritten = tSizesLeftUnwritten;  // of the test that completed it
  int code = closePair(c, pair);
  close(goPipe[0]);
  close(goPipe[1]);
  if (posted != ncclSuccess)
    return fail("grouped irecv of %d: irecv %s (maxRecvs says %d)", n, postText(posted).c_str(), c.props.maxRecvs);
  if (result != ncclSuccess) return fail("grouped irecv of %d: %s", n, waitText(result, 20).c_str());
  for (int k = 0; k < n; ++k) {
    int expected = 100 * (k + 1) + 3;
    if (got[k] != expected && (unwritten >> k & 1) != 0)
      return fail(
          "receive %d (tag %d) of %d: test completed the grouped receive without reporting its size (sizes[%d] "
          "left unwritten: NCCL, which zeroes it first, would take the message as 0 bytes; %d were sent)",
          k, 10 + k, n, k, expected);
    if (got[k] != expected) return fail("receive %d (tag %d): size %d, expected %d", k, 10 + k, got[k], expected);
    if (firstMismatch(buffers[k], expected, 50 + k) >= 0)
      return fail("receive %d (tag %d): wrong bytes (matched by tag?)", k, 10 + k);
  }
  if (code != 0) return fail("%s", peerText(code).c_str());
  return pass("");
}

Verdict multiRecvTags(Context& c) {
  // At 8 (what NCCL groups in practice), then at maxRecvs when it is more: a device may advertise more sub-receives
  // than its grouped path handles (fixed arrays, 8-bit masks), and NCCL believes maxRecvs.
  int n = std::min(c.props.maxRecvs, 8);
  if (n < 2) return skip("maxRecvs is " + std::to_string(c.props.maxRecvs) + ": no grouped receives to check");
  Verdict v = groupedReceive(c, n);
  if (v.status != Status::kPass) return v;
  std::string counts = std::to_string(n);
  if (int most = std::min(c.props.maxRecvs, 64); most > n) {
    v = groupedReceive(c, most);
    if (v.status != Status::kPass) return v;
    counts += " and of " + std::to_string(most) + " (maxRecvs)";
  }
  return pass("irecv of " + counts + " tags, sent in reverse order: every buffer got its tag's message");
}

// One grouped receive of messages of `sent` sizes, a tag each (20 + k), sent in reverse tag order into buffers of
// 8 KiB: each buffer must get its tag's message, test() its size. Empty on success, else what was wrong.
std::string groupedReceiveOfSizes(Context& c, const std::vector<size_t>& sent, uint64_t seedBase) {
  const int n = static_cast<int>(sent.size());
  const size_t kCapacity = fitted(8192);  // no larger than device 0 takes (maxP2pBytes)
  Pair pair;
  std::string why;
  int goPipe[2];
  if (pipe(goPipe) != 0) return "pipe failed";
  if (!openPair(
          c, pair, [&](void* comm) { return sendInReverseTagOrder(c, comm, goPipe[0], sent, 20, seedBase); }, &why))
    return why;
  // Each buffer starts as bytes no message has, so a 0-byte receive that takes another's bytes shows.
  std::vector<std::vector<unsigned char>> buffers(n, std::vector<unsigned char>(kCapacity, 0xa7));
  std::vector<void*> mhandles = registerBuffers(c, pair.recvComm, buffers);
  std::vector<void*> data(n);
  std::vector<size_t> sizes(n, kCapacity);
  std::vector<int> tags(n);
  for (int k = 0; k < n; ++k) {
    data[k] = buffers[k].data();
    tags[k] = 20 + k;
  }
  void* request = nullptr;
  ncclResult_t posted =
      postRecv(c, pair.recvComm, n, data.data(), sizes.data(), tags.data(), mhandles.data(), &request);
  if (posted != ncclSuccess && pair.peer > 0) kill(pair.peer, SIGKILL);
  (void)!write(goPipe[1], "g", 1);
  std::vector<int> got(64, -1);
  ncclResult_t result = posted == ncclSuccess ? waitDone(c, request, got.data(), 20, n) : posted;
  const uint64_t unwritten = tSizesLeftUnwritten;
  std::string problem;
  if (posted != ncclSuccess)
    problem = "irecv " + postText(posted);
  else if (result != ncclSuccess)
    problem = waitText(result, 20);
  for (int k = 0; k < n && problem.empty(); ++k) {
    const std::string which = "receive " + std::to_string(k) + " (tag " + std::to_string(20 + k) + ", " +
                              std::to_string(sent[k]) + " B sent)";
    if (got[k] != static_cast<int>(sent[k]))
      problem = which + ": test reported " + std::to_string(got[k]) + " bytes" +
                ((unwritten >> k & 1) != 0 ? " (sizes[" + std::to_string(k) + "] left unwritten)" : "");
    else if (const long bad = firstMismatch(buffers[k], sent[k], seedBase + k); bad >= 0)
      problem = which + ": wrong byte at offset " + std::to_string(bad);
    else if (sent[k] == 0 && buffers[k][0] != 0xa7)
      problem = which + ": the buffer was written (another message's bytes landed in it)";
  }
  if (!problem.empty() && pair.peer > 0) kill(pair.peer, SIGKILL);
  const int code = closePair(c, pair, problem.empty() ? 30 : 1);
  close(goPipe[0]);
  close(goPipe[1]);
  if (problem.empty() && code != 0) problem = peerText(code);
  return problem;
}

std::string sizesText(const std::vector<size_t>& sizes) {
  std::string text;
  for (size_t size : sizes) text += (text.empty() ? "{" : ", ") + std::to_string(size);
  return text + "}";
}

Verdict groupedZeroByte(Context& c) {
  // NCCL groups the receives of one step from several peers (shared comms, PXN), and a peer with nothing to send in
  // that step sends 0 bytes: a grouped receive then holds 0-byte entries beside others. A plugin whose completion
  // record lists only the messages that carried bytes, or that lets a 0-byte message take the next buffer, reports
  // sizes to the wrong entries or fills the wrong buffer; the 0-byte rule (n = 1) does not show it.
  if (c.props.maxRecvs < 2)
    return skip("maxRecvs is " + std::to_string(c.props.maxRecvs) + ": no grouped receives to check");
  const int n = std::min(c.props.maxRecvs, 3);
  std::vector<std::vector<size_t>> groups;
  if (n >= 3)
    groups = {{0, 100, 0}, {4099, 0, 3}, {0, 0, 0}};
  else
    groups = {{0, 100}, {100, 0}, {0, 0}};
  for (auto& group : groups)
    for (size_t& size : group) size = std::min(size, fitted(size));
  std::string done;
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::string problem = groupedReceiveOfSizes(c, groups[g], 0x2e00 + 16 * g);
    if (!problem.empty()) return fail("grouped irecv of sizes %s: %s", sizesText(groups[g]).c_str(), problem.c_str());
    done += (done.empty() ? "" : ", ") + sizesText(groups[g]);
  }
  return pass("grouped receives of " + std::to_string(n) + " with 0-byte entries (" + done +
              ", sent in reverse tag order): every size and byte right, 0-byte buffers untouched");
}

// The exported table's iflush and regMrDmaBuf slots, read from the library itself: the loader's wrapper answers a
// NULL one with ncclInvalidUsage, which a plugin's own iflush may return too. Both slots sit at the same offsets in
// every version (v6..v12), so v6's struct reads them. `known` false when the table could not be found.
struct OptionalSlots {
  bool known = false;
  bool iflush = false;
  bool regMrDmaBuf = false;
};
OptionalSlots optionalSlots(const Context& c) {
  OptionalSlots slots;
  void* library = dlopen(c.net->path().c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (library == nullptr) return slots;
  const std::string symbol = "ncclNetPlugin_v" + std::to_string(c.net->version());
  if (const auto* table = static_cast<const ncclNet_v6_t*>(dlsym(library, symbol.c_str())); table != nullptr) {
    slots = {true, table->iflush != nullptr, table->regMrDmaBuf != nullptr};
  }
  dlclose(library);  // NOLOAD's reference only: the loader's keeps it loaded
  return slots;
}

Verdict iflushAfterReceive(Context& c) {
  // NCCL calls iflush after a completed receive into GPU memory (forceFlush, or a GPU and NIC that need it), and
  // reads a NULL request as "done"; otherwise it tests the request with sizes NULL (net.cc's flush path) until done.
  // Where the device says it takes GPU memory or must flush, NCCL calls the entries unchecked: a NULL iflush (or
  // regMrDmaBuf, for DMABUF) is a crash at the first GPU receive. Called here on host memory, as the table allows.
  const OptionalSlots slots = optionalSlots(c);
  const bool gpu = (c.props.ptrSupport & (NCCL_PTR_CUDA | NCCL_PTR_DMABUF)) != 0;
  char props[96];
  std::snprintf(props, sizeof(props), "ptrSupport 0x%x, forceFlush %d", c.props.ptrSupport, c.props.forceFlush);
  if (slots.known && !slots.iflush && (gpu || c.props.forceFlush != 0))
    return fail("device 0 says %s, but iflush is NULL: NCCL flushes %s with it, unchecked", props,
                c.props.forceFlush != 0 ? "every GPU receive" : "GPU receives where the GPU and NIC need it");
  if (slots.known && !slots.regMrDmaBuf && (c.props.ptrSupport & NCCL_PTR_DMABUF) != 0)
    return fail("device 0 says %s (DMABUF), but regMrDmaBuf is NULL: NCCL registers GPU buffers with it, unchecked",
                props);
  if (slots.known && !slots.iflush)
    return pass(std::string("iflush is NULL, and device 0 needs none (") + props +
                ": host memory only): NCCL never calls it");
  const size_t bytes = fitted(70000);
  constexpr uint64_t kSeed = 0x1f1a;
  std::string how;
  Verdict v = sendAndReceive(c, {{bytes, kSeed}}, [&](void* recvComm, pid_t* peer) -> Verdict {
    std::vector<unsigned char> buffer(bytes);
    void* mhandle = registerBuffer(c, recvComm, buffer.data(), buffer.size());
    void* data = buffer.data();
    size_t size = bytes;
    int tag = 1;
    void* request = nullptr;
    if (ncclResult_t posted = postRecv(c, recvComm, 1, &data, &size, &tag, &mhandle, &request); posted != ncclSuccess)
      return fail("irecv: %s", postText(posted).c_str());
    int got = -1, peerCode = 0;
    ncclResult_t result = waitDoneWatchingPeer(c, request, &got, gTransferWaitSeconds, *peer, &peerCode);
    if (result != ncclSuccess && peerCode != 0)
      return fail("the message never arrived: the sender ended first: %s", peerText(peerCode).c_str());
    if (result != ncclSuccess) return fail("the receive: %s", waitText(result, gTransferWaitSeconds).c_str());
    if (std::string wrong = receivedWrong(buffer, got, bytes, kSeed); !wrong.empty())
      return fail("before the flush: %s", wrong.c_str());
    // As NCCL: the receive's buffers, int sizes from its test, its handles.
    int sizes[1] = {got};
    void* flush = nullptr;
    if (ncclResult_t flushed = CALL("iflush", c.net->iflush(recvComm, 1, &data, sizes, &mhandle, &flush));
        flushed != ncclSuccess) {
      if (!slots.known && flushed == ncclInvalidUsage)
        return skip("iflush returned " + resultText(flushed) +
                    " (the harness could not read the table to tell a NULL iflush from a refusal)");
      return fail("iflush after a completed %zu-byte receive returned %s", bytes, resultText(flushed).c_str());
    }
    if (flush == nullptr) {
      how = "iflush after a completed " + std::to_string(bytes) + "-byte receive answered a NULL request (done)";
      return pass("");
    }
    int tests = 0;
    for (auto deadline = Clock::now() + std::chrono::seconds(gTransferWaitSeconds);;) {
      int done = 0;
      ++tests;
      // NCCL tests a flush with sizes NULL: a plugin that writes them crashes it (named by this call's note).
      const ncclResult_t tested =
          CALL("test of iflush's request (sizes NULL, as NCCL passes them)", c.net->test(flush, &done, nullptr));
      if (tested != ncclSuccess) return fail("test of iflush's request returned %s", resultText(tested).c_str());
      if (done != 0) break;
      if (Clock::now() > deadline)
        return fail("test of iflush's request still said 'not done' after %d s", gTransferWaitSeconds);
    }
    if (long bad = firstMismatch(buffer, bytes, kSeed); bad >= 0)
      return fail("the flush changed the received message: wrong byte at offset %ld", bad);
    how = "iflush after a completed " + std::to_string(bytes) + "-byte receive gave a request, done after " +
          std::to_string(tests) + " test(s) with sizes NULL, the message intact";
    return pass("");
  });
  if (v.status != Status::kPass) return v;
  return pass(how + " (" + props + ")");
}

// both-directions-one-thread: one side's half. It connects to `peerHandle` and accepts on `listenComm` in one loop
// (both sides connect before either accepts, as NCCL's ranks do), posts an isend of `bytes` (seed `sendSeed`) and
// then an irecv of as many, and drives both with test() from this one thread until both are done, posting again
// whatever was answered NULL, as NCCL's proxy does. Empty on success, else what went wrong; `seconds` bounds the
// transfer. The comms are left in *sendComm and *recvComm for the caller to close.
std::string exchangeBothWays(Context& c, void* listenComm, void* peerHandle, size_t bytes, uint64_t sendSeed,
                             uint64_t recvSeed, int seconds, void** sendComm, void** recvComm) {
  *sendComm = *recvComm = nullptr;
  for (auto deadline = Clock::now() + std::chrono::seconds(20); *sendComm == nullptr || *recvComm == nullptr;) {
    if (*sendComm == nullptr) {
      if (ncclResult_t result = CALL("connect", c.net->connect(c.ctx, c.dev, peerHandle, sendComm, deviceHandleSlot()));
          result != ncclSuccess)
        return "connect returned " + resultText(result);
    }
    if (*recvComm == nullptr) {
      if (ncclResult_t result = CALL("accept", c.net->accept(listenComm, recvComm, deviceHandleSlot()));
          result != ncclSuccess)
        return "accept returned " + resultText(result);
    }
    if (Clock::now() > deadline)
      return std::string("no connection within 20 s (") + (*sendComm == nullptr ? "connect" : "accept") +
             " still gave no comm, with this side connecting and accepting from one thread)";
  }
  std::vector<unsigned char> out(bytes), in(bytes, 0);
  fill(out, bytes, sendSeed);
  void* sendHandle = registerBuffer(c, *sendComm, out.data(), out.size());
  void* recvHandle = registerBuffer(c, *recvComm, in.data(), in.size());
  void* sendRequest = nullptr;
  void* recvRequest = nullptr;
  int sendDone = 0, recvDone = 0, sent = -1, received = -1;
  void* data = in.data();
  size_t capacity = bytes;
  int tag = 1;
  for (auto deadline = Clock::now() + std::chrono::seconds(seconds); !sendDone || !recvDone;) {
    if (sendRequest == nullptr) {
      if (ncclResult_t result =
              CALL("isend", isendNoted(*c.net, *sendComm, out.data(), bytes, tag, sendHandle, &sendRequest));
          result != ncclSuccess)
        return "isend returned " + resultText(result);
    }
    if (recvRequest == nullptr) {
      if (ncclResult_t result =
              CALL("irecv", irecvChecked(*c.net, *recvComm, 1, &data, &capacity, &tag, &recvHandle, &recvRequest));
          result != ncclSuccess)
        return "irecv returned " + resultText(result);
    }
    if (sendRequest != nullptr && !sendDone) {
      if (ncclResult_t result = CALL("test", testSizes(*c.net, sendRequest, &sendDone, &sent)); result != ncclSuccess)
        return "test of the send returned " + resultText(result);
    }
    if (recvRequest != nullptr && !recvDone) {
      if (ncclResult_t result = CALL("test", testSizes(*c.net, recvRequest, &recvDone, &received));
          result != ncclSuccess)
        return "test of the receive returned " + resultText(result);
    }
    if (Clock::now() > deadline) {
      auto state = [](void* request, int done) {
        return request == nullptr ? "not posted (NULL)" : done ? "done" : "not done";
      };
      return "after " + std::to_string(seconds) + " s the send was " + state(sendRequest, sendDone) +
             " and the receive " + state(recvRequest, recvDone) +
             ", both driven from one thread (a send that moves only while it is tested, or that waits for the "
             "other side to read before this side's receive can progress, deadlocks both sides)";
    }
  }
  if (sentSizeWrong(sent, bytes))
    return "the send's test reported " + std::to_string(sent) + " bytes, " + std::to_string(bytes) + " were sent";
  if (std::string wrong = receivedWrong(in, received, bytes, recvSeed); !wrong.empty()) return wrong;
  return "";
}

Verdict bothDirectionsOneThread(Context& c) {
  // NCCL's proxy drives all of a rank's connections from one thread, and a rank both sends to and receives from its
  // neighbours: it posts a step's send and its receive and tests them in turn. Every other rule moves data one way,
  // with each direction's side in a process of its own, which hides a plugin whose send can only finish while the
  // other side reads it (a test that loops until its send is out, a rendezvous waiting on a reply the peer's thread,
  // itself inside such a test, never sends). Here each side listens and connects, posts a large isend and then an
  // irecv, and tests both from one thread.
  const size_t bytes = fitted(size_t{16} << 20);
  constexpr uint64_t kRuleSeed = 0xb0d1, kPeerSeed = 0xb0d2;
  void* listenComm = nullptr;
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  if (ncclResult_t result = CALL("listen", c.net->listen(c.ctx, c.dev, handle, &listenComm)); result != ncclSuccess)
    return fail("listen returned %s", resultText(result).c_str());
  int handlePipe[2], textPipe[2], donePipe[2];
  if (pipe2(handlePipe, O_CLOEXEC) != 0 || pipe2(textPipe, O_CLOEXEC) != 0 || pipe2(donePipe, O_CLOEXEC) != 0)
    return fail("pipe failed");
  // The peer: its own listener, whose handle goes to this side, then the same half of the exchange. What went wrong
  // there comes back as text; it keeps its comms open until this side is done.
  const pid_t peer = startPeer(c, [&]() {
    void* peerListen = nullptr;
    unsigned char peerHandle[NCCL_NET_HANDLE_MAXSIZE] = {};
    if (CALL("listen", c.net->listen(c.ctx, c.dev, peerHandle, &peerListen)) != ncclSuccess) return 60;
    if (write(handlePipe[1], peerHandle, sizeof(peerHandle)) != static_cast<ssize_t>(sizeof(peerHandle))) return 60;
    void* sendComm = nullptr;
    void* recvComm = nullptr;
    const std::string problem = exchangeBothWays(c, peerListen, handle, bytes, kPeerSeed, kRuleSeed,
                                                 gTransferWaitSeconds, &sendComm, &recvComm);
    (void)!write(textPipe[1], problem.data(), problem.size());
    close(textPipe[1]);
    char doneByte;
    pollfd done{donePipe[0], POLLIN, 0};
    while (poll(&done, 1, 60000) < 0 && errno == EINTR) {
    }
    (void)!read(donePipe[0], &doneByte, 1);
    if (sendComm != nullptr) closeSendComm(c, sendComm);
    if (recvComm != nullptr) closeRecvComm(c, recvComm);
    CALL("closeListen", c.net->closeListen(peerListen));
    return problem.empty() ? 0 : 61;
  });
  close(textPipe[1]);
  unsigned char peerHandle[NCCL_NET_HANDLE_MAXSIZE];
  pollfd ready{handlePipe[0], POLLIN, 0};
  std::string problem;
  if (poll(&ready, 1, 20000) != 1 || read(handlePipe[0], peerHandle, sizeof(peerHandle)) != sizeof(peerHandle))
    problem = "the peer gave no listen handle within 20 s";
  void* sendComm = nullptr;
  void* recvComm = nullptr;
  if (problem.empty())
    problem = exchangeBothWays(c, listenComm, peerHandle, bytes, kRuleSeed, kPeerSeed, gTransferWaitSeconds, &sendComm,
                               &recvComm);
  // The peer's own account (it ran the same checks), once it has one: read until its end of the pipe closes.
  std::string peerProblem;
  char buffer[512];
  for (pollfd said{textPipe[0], POLLIN, 0}; poll(&said, 1, problem.empty() ? 30000 : 1000) == 1;) {
    const ssize_t n = read(textPipe[0], buffer, sizeof(buffer));
    if (n <= 0) break;
    peerProblem.append(buffer, static_cast<size_t>(n));
  }
  (void)!write(donePipe[1], "d", 1);
  const int code = waitPeer(peer, problem.empty() ? 30 : 1);
  if (sendComm != nullptr) closeSendComm(c, sendComm);
  if (recvComm != nullptr) closeRecvComm(c, recvComm);
  CALL("closeListen", c.net->closeListen(listenComm));
  for (int fd : {handlePipe[0], handlePipe[1], textPipe[0], donePipe[0], donePipe[1]}) close(fd);
  if (!problem.empty())
    return fail("this side: %s%s", problem.c_str(),
                !peerProblem.empty()                     ? ("; the peer: " + peerProblem).c_str()
                : code != 0 && code != 124 && code != 61 ? ("; " + peerText(code)).c_str()
                                                         : "");
  if (!peerProblem.empty()) return fail("the peer: %s", peerProblem.c_str());
  if (code != 0) return fail("%s", peerText(code).c_str());
  return pass("each side listened and connected, posted a " + std::to_string(bytes) +
              "-byte isend then an irecv and tested both from one thread: both messages arrived whole");
}

// NCCL shares one comm between the local ranks that send to the same peer (NCCL_NET_SHARED_COMMS, with PXN) and
// posts one grouped receive per step, a tag per rank, two steps ahead with eight ranks. The ranks send on their own
// schedules, so one rank's later steps may be sent before another's first. Here tag 1 sends as far ahead as the
// plugin lets it (until isend answers NULL, as a receiver-driven plugin does while the step's group is incomplete),
// and tag 2 sends one message per turn. A plugin that takes messages strictly in stream order stalls: tag 1's third
// message has no receive with room for it yet, and tag 2's first, behind it, never completes step 0.
constexpr int kOutOfStepSteps = 12;
constexpr int kOutOfStepDepth = 2;
size_t outOfStepSize(int step, int tagIndex) {
  // Small and large in turn, each posted 64 bytes larger (the large ones cut to what device 0 takes).
  return fitted(step % 2 == 0 ? 3000 : 150000, 65) + static_cast<size_t>(tagIndex);
}
uint64_t outOfStepSeed(int step, int tagIndex) {
  return 700 + static_cast<uint64_t>(step * 2 + tagIndex);
}

int sendOutOfStep(Context& c, void* comm) {
  constexpr int kMessages = kOutOfStepSteps * 2;
  std::vector<std::vector<unsigned char>> buffers(kMessages);
  for (int m = 0; m < kMessages; ++m) buffers[static_cast<size_t>(m)].resize(outOfStepSize(m / 2, m % 2));
  std::vector<void*> mhandles = registerBuffers(c, comm, buffers);
  std::vector<void*> requests(kMessages, nullptr);
  std::vector<int> done(kMessages, 0);
  int next[2] = {0, 0};
  auto deadline = Clock::now() + std::chrono::seconds(15);
  auto post = [&](int t) {  // 1: posted, 0: refused for now, -1: error
    int m = next[t] * 2 + t;
    auto& buffer = buffers[static_cast<size_t>(m)];
    fill(buffer, buffer.size(), outOfStepSeed(next[t], t));
    void* request = nullptr;
    if (CALL("isend", isendNoted(*c.net, comm, buffer.data(), buffer.size(), 1 + t, mhandles[static_cast<size_t>(m)],
                                 &request)) != ncclSuccess)
      return -1;
    if (request == nullptr) return 0;
    requests[static_cast<size_t>(m)] = request;
    ++next[t];
    return 1;
  };
  for (;;) {
    int posted = 1;
    while (next[0] < kOutOfStepSteps && (posted = post(0)) == 1) {
    }
    if (posted < 0) return 41;
    if (next[1] < kOutOfStepSteps && post(1) < 0) return 41;
    bool all = next[0] == kOutOfStepSteps && next[1] == kOutOfStepSteps;
    for (int m = 0; m < kMessages; ++m) {
      if (requests[static_cast<size_t>(m)] == nullptr || done[static_cast<size_t>(m)]) {
        all = all && done[static_cast<size_t>(m)];
        continue;
      }
      int size = -1;
      if (CALL("test", testSizes(*c.net, requests[static_cast<size_t>(m)], &done[static_cast<size_t>(m)], &size)) !=
          ncclSuccess)
        return 42;
      if (done[static_cast<size_t>(m)] && sentSizeWrong(size, buffers[static_cast<size_t>(m)].size())) return 44;
      all = all && done[static_cast<size_t>(m)];
    }
    if (all) return 0;
    if (Clock::now() > deadline) return 43;
  }
}

Verdict tagsOutOfStep(Context& c) {
  if (c.props.maxRecvs < 2)
    return skip("maxRecvs is " + std::to_string(c.props.maxRecvs) + ": NCCL shares no comm, nothing to check");
  Pair pair;
  std::string why;
  if (!openPair(
          c, pair, [&](void* comm) { return sendOutOfStep(c, comm); }, &why))
    return fail("%s", why.c_str());
  std::vector<std::vector<unsigned char>> buffers(kOutOfStepSteps * 2);
  for (int step = 0; step < kOutOfStepSteps; ++step)
    for (int t = 0; t < 2; ++t) buffers[static_cast<size_t>(step * 2 + t)].assign(outOfStepSize(step, t) + 64, 0);
  std::vector<void*> mhandles = registerBuffers(c, pair.recvComm, buffers);
  std::vector<void*> requests(kOutOfStepSteps, nullptr);
  auto deadline = Clock::now() + std::chrono::seconds(10);
  int posted = 0;
  std::string problem;
  for (int step = 0; step < kOutOfStepSteps && problem.empty(); ++step) {
    for (; posted < kOutOfStepSteps && posted < step + kOutOfStepDepth; ++posted) {
      void* data[2];
      size_t sizes[2];
      int tags[2] = {1, 2};
      void* handles[2];
      for (int t = 0; t < 2; ++t) {
        data[t] = buffers[static_cast<size_t>(posted * 2 + t)].data();
        sizes[t] = buffers[static_cast<size_t>(posted * 2 + t)].size();
        handles[t] = mhandles[static_cast<size_t>(posted * 2 + t)];
      }
      if (ncclResult_t result =
              postRecv(c, pair.recvComm, 2, data, sizes, tags, handles, &requests[static_cast<size_t>(posted)]);
          result != ncclSuccess) {
        problem = "grouped irecv of step " + std::to_string(posted) + ": " + postText(result);
        break;
      }
    }
    if (!problem.empty()) break;
    int got[2] = {-1, -1};
    double left = std::max(0.0, std::chrono::duration<double>(deadline - Clock::now()).count());
    ncclResult_t result = waitDone(c, requests[static_cast<size_t>(step)], got, left, 2);
    if (result == kDeadline) {
      problem = "step " + std::to_string(step) + " of " + std::to_string(kOutOfStepSteps) +
                " never completed within 10 s (tag 1's sends ran ahead of tag 2's, receives were posted " +
                std::to_string(kOutOfStepDepth) +
                " steps ahead: a message with no posted receive blocks the ones behind it)";
    } else if (result != ncclSuccess) {
      problem = "step " + std::to_string(step) + ": test returned " + resultText(result);
    }
    for (int t = 0; t < 2 && problem.empty(); ++t) {
      const auto& buffer = buffers[static_cast<size_t>(step * 2 + t)];
      const size_t expected = outOfStepSize(step, t);
      if (got[t] != static_cast<int>(expected))
        problem = "step " + std::to_string(step) + " tag " + std::to_string(1 + t) + ": size " +
                  std::to_string(got[t]) + ", expected " + std::to_string(expected);
      else if (firstMismatch(buffer, expected, outOfStepSeed(step, t)) >= 0)
        problem = "step " + std::to_string(step) + " tag " + std::to_string(1 + t) +
                  ": wrong bytes (another step's message of that tag?)";
    }
  }
  if (!problem.empty() && pair.peer > 0) kill(pair.peer, SIGKILL);
  int code = closePair(c, pair);
  if (!problem.empty()) return fail("%s", problem.c_str());
  if (code != 0) return fail("%s", peerText(code).c_str());
  return pass(std::to_string(kOutOfStepSteps) + " steps of a grouped receive of tags 1 and 2, posted " +
              std::to_string(kOutOfStepDepth) +
              " ahead, while tag 1 sent as far ahead as isend allowed: every message in its step, every byte right");
}

// The 1 GiB rule stamps every 4 KiB with an 8-byte value derived from its offset: a byte pattern that repeats
// would not show data landing at the wrong offset (a wrapped 32-bit offset, a chunk counter that overflows).
// Every 8-byte word carries its offset's stamp: with one every 4 KiB, a plugin that left the end of each chunk
// unwritten (96 stale bytes per 512 KiB) passed. 1 GiB is 2^27 words, about a second to write and to check.
constexpr size_t kStampEvery = 8;
uint64_t stampFor(size_t offset) {
  return (offset * 0x9e3779b97f4a7c15ull) ^ 0x6e6e73;
}
void stampAt(std::vector<unsigned char>& buffer, size_t offset) {
  uint64_t stamp = stampFor(offset);
  std::memcpy(&buffer[offset], &stamp, sizeof(stamp));
}
bool stampedAt(const std::vector<unsigned char>& buffer, size_t offset) {
  uint64_t stamp;
  std::memcpy(&stamp, &buffer[offset], sizeof(stamp));
  return stamp == stampFor(offset);
}

Verdict oneGibMessage(Context& c) {
  const auto ruleStarted = Clock::now();
  // What the rule may still wait for, ending a margin before --rule-timeout: a wait that runs out is then said as what
  // it waited for, not as a hung rule.
  auto secondsLeft = [&] {
    const double budget = gRuleSeconds - std::max(5, gRuleSeconds / 10);
    return std::max(1.0, budget - std::chrono::duration<double>(Clock::now() - ruleStarted).count());
  };
  constexpr size_t kBytes = 1ull << 30;
  if (c.props.maxP2pBytes < kBytes) return skip("maxP2pBytes " + std::to_string(c.props.maxP2pBytes) + " < 1 GiB");
  Pair pair;
  std::string why;
  if (!openPair(
          c, pair,
          [&](void* comm) {
            std::vector<unsigned char> big(kBytes);
            for (size_t i = 0; i < kBytes; i += kStampEvery) stampAt(big, i);
            void* mhandle = registerBuffer(c, comm, big.data(), kBytes);
            void* request = nullptr;
            if (postSend(c, comm, big.data(), kBytes, 1, mhandle, &request) != ncclSuccess) return 41;
            int size = -1;
            if (waitDone(c, request, &size, 60) != ncclSuccess) return 42;
            return sentSizeWrong(size, kBytes) ? 43 : 0;
          },
          &why))
    return fail("%s", why.c_str());
  std::vector<unsigned char> big(kBytes);
  void* data = big.data();
  size_t size = kBytes;
  int tag = 1;
  void* mhandle = registerBuffer(c, pair.recvComm, big.data(), kBytes);
  void* request = nullptr;
  auto start = Clock::now();
  ncclResult_t result = postRecv(c, pair.recvComm, 1, &data, &size, &tag, &mhandle, &request);
  int got = -1;
  const double waitSeconds = secondsLeft();
  int peerCode = 0;
  if (result == ncclSuccess) result = waitDoneWatchingPeer(c, request, &got, waitSeconds, pair.peer, &peerCode);
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  // Checked before the sender is waited for: a receive that completed before its data arrived leaves a sender that
  // may never finish, and waiting for it first let the rule's timeout say "hung" instead of what was wrong.
  std::string problem;
  if (result == kDeadline && peerCode != 0) {  // the sender ended (and was reaped) with a failure first
    problem = "1 GiB receive: the sender ended before it completed";
  } else if (result != ncclSuccess) {
    problem = "1 GiB receive: " + waitText(result, static_cast<int>(waitSeconds));
  } else if (got != static_cast<int>(kBytes)) {
    problem = "1 GiB receive reported " + std::to_string(got) + " bytes";
  } else {
    for (size_t i = 0; i < kBytes && problem.empty(); i += kStampEvery)
      if (!stampedAt(big, i))
        problem = "1 GiB receive: the 8 bytes at offset " + std::to_string(i) + " are not the ones sent there";
  }
  const bool killed = !problem.empty() && pair.peer > 0;
  if (killed) kill(pair.peer, SIGKILL);
  int code = closePair(c, pair, killed ? 1 : secondsLeft());
  // The sender's own failure, when it had one: reaped during the wait, or waited for here (not the kill's signal).
  const int peerFailure = peerCode != 0 ? peerCode : killed ? 0 : code;
  if (!problem.empty()) return withPeerFailure(fail("%s", problem.c_str()), peerFailure);
  if (code != 0) return fail("%s", peerText(code).c_str());
  char text[96];
  std::snprintf(text, sizeof(text), "1 GiB in %.2f s (%.2f GB/s), every 8-byte word's offset stamp checked", seconds,
                kBytes / seconds / 1e9);
  return pass(text);
}

Verdict randomSizesIntegrity(Context& c) {
  std::mt19937_64 random(12345);
  std::vector<std::pair<size_t, uint64_t>> messages;
  for (int i = 0; i < 300; ++i) {
    size_t size = random() % 4 == 0 ? random() % (4u << 20) : random() % 70000;
    messages.push_back({size, random()});
  }
  Verdict v = transferChecked(c, messages, 4u << 20);
  return v.status == Status::kPass ? pass("300 messages of random sizes up to 4 MiB, 8 in flight: every byte checked")
                                   : v;
}

// ---- sender-may-go-idle: what a completed send still holds moves without further calls -------------------------
// NCCL's proxy thread stops calling the plugin once its operations are done (it sleeps until the next one): a send
// reported done must reach the receiver with no more calls from the sender. A plugin that copies a send aside,
// completes it, and moves the copy only during its own later calls (no progress thread) delivers the last messages
// of a step only when the next collective calls it, and that collective waits for them: a hang. A large message
// (more than the transport takes in one call) and a small one after it, then a sender that makes no call until the
// receiver is done (sendAndReceive's sender).
Verdict senderMayGoIdle(Context& c) {
  std::vector<std::pair<size_t, uint64_t>> messages = {{size_t{64} << 20, 4242}, {100, 4343}};
  Verdict v = transferChecked(c, messages, size_t{64} << 20);
  // The idle sender is the cause to name only for a message that never completed: a wrong size or byte (or an
  // error) shows the same with a sender that keeps calling.
  if (v.status != Status::kPass && gReceiveSymptom == ReceiveSymptom::kNotDone && ownHintsApply())
    return fail(
        "%s (the sender made no plugin call once its sends had completed, as NCCL's proxy makes none once its "
        "operations are done: a send reported done must be delivered without more calls)",
        v.evidence.c_str());
  if (v.status != Status::kPass) return v;
  return pass("a 64 MiB and a 100-byte message arrived whole with the sender making no call once its sends completed");
}

// ---- signals-break-nothing: a signal caught by any thread fails no call and loses no byte --------------------------
// Processes that run NCCL catch signals: Python installs its handlers without SA_RESTART, and PyTorch's DataLoader
// catches SIGCHLD, which every worker's exit raises at whatever thread the kernel picks, NCCL's proxy thread and the
// plugin's own threads among them. A plugin whose blocking call (read, recv, accept, epoll_wait, a completion
// channel's read) takes EINTR for a failure fails the communicator; one that retries a connect after EINTR as if it
// had not started (EALREADY) never connects. Both processes catch a signal at every thread every 0.2 ms from before
// accept and connect to the end; the connection is made and messages of every size class arrive, bytes checked.
Verdict signalsBreakNothing(Context& c) {
  const std::vector<size_t> sizes = {0, 1, 100, 4096, 65537, size_t{1} << 20, (size_t{4} << 20) + 3};
  std::vector<std::pair<size_t, uint64_t>> messages;
  for (int i = 0; i < 140; ++i) messages.push_back({sizes[static_cast<size_t>(i) % sizes.size()], 9000u + i});
  gPeersCatchSignals = true;
  const long before = gSignalsCaught.load();
  Verdict v = transferChecked(c, messages, (size_t{4} << 20) + 3);
  gRuleStorm.reset();
  gPeersCatchSignals = false;
  const long caught = gSignalsCaught.load() - before;
  // EINTR is the cause to name for a call that failed or a message that never came (or a connection never made);
  // a wrong size or byte is what a plain transfer gets wrong too.
  const bool interruptedCall =
      gReceiveSymptom != ReceiveSymptom::kWrongSize && gReceiveSymptom != ReceiveSymptom::kWrongByte;
  if (v.status != Status::kPass)
    return fail(
        "%s (every thread of both processes caught a signal every 0.2 ms, its handler installed without "
        "SA_RESTART, as Python installs them: %ld caught here%s)",
        v.evidence.c_str(), caught, interruptedCall && ownHintsApply() ? "; a blocking call must retry on EINTR" : "");
  char text[200];
  std::snprintf(text, sizeof(text),
                "connected and 140 messages (0 B .. 4 MiB) arrived whole while every thread of both processes caught "
                "a signal every 0.2 ms (%ld here), without SA_RESTART",
                caught);
  return pass(text);
}

// ---- descriptors-close-on-exec: a program this process starts inherits none of the plugin's descriptors ----------
// Processes that run NCCL start programs: a launcher's health check, os.system and popen in a training script, a
// profiler's helper. A descriptor without close-on-exec goes to every program started: an inherited connection
// socket keeps the connection open when this process dies (its peer's pending test waits for the program to end,
// not for this process's death); an inherited listening socket keeps the port; an inherited verbs context keeps its
// queue pairs and pinned memory. A plugin makes its descriptors with SOCK_CLOEXEC, accept4(SOCK_CLOEXEC),
// EFD_CLOEXEC, O_CLOEXEC. Both sides list what appeared during their part and is open without FD_CLOEXEC while the
// comm lives: here listen, accept, regMr and receives; in the connecting process connect, regMr and sends, and init
// too where the connector is a fresh instance (a copy of the plugin's file; the rule process's init ran before any
// rule, where nothing can be told apart from the harness's own).
//
// One pair made and used with the lists taken: the transfer's verdict, what appeared here in `*here` and what
// appeared in the connector in `*there`.
Verdict listInheritedDescriptors(Context& c, bool freshPeer, std::string* here, std::string* there) {
  const std::vector<std::pair<size_t, uint64_t>> messages = {{3, 0x7e00}, {70000, 0x7e01}};
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) return fail("the harness could not make a pipe: %s", std::strerror(errno));
  const std::map<int, std::string> before = inheritableDescriptors();
  gPeerListsDescriptors = true;
  gDescriptorReportFd = report[1];
  gFreshPeer = freshPeer;
  Verdict v = sendAndReceive(c, messages, [&](void* recvComm, pid_t* peer) {
    Verdict received = receiveMessages(c, recvComm, messages, 70000, 1, peer);
    *here = newInheritable(before, inheritableDescriptors());
    return received;
  });
  gPeerListsDescriptors = false;
  gDescriptorReportFd = -1;
  gFreshPeer = false;
  close(report[1]);  // the peer has exited: what it wrote is in the pipe (the wait is for a process it left behind)
  char buffer[512];
  for (pollfd ready{report[0], POLLIN, 0}; poll(&ready, 1, 2000) > 0;) {
    const ssize_t n = read(report[0], buffer, sizeof(buffer));
    if (n <= 0) break;
    there->append(buffer, static_cast<size_t>(n));
  }
  close(report[0]);
  return v;
}

Verdict descriptorsCloseOnExec(Context& c) {
  std::string here, there;
  bool fresh = !gPeerLibrary.empty();
  Verdict v = listInheritedDescriptors(c, fresh, &here, &there);
  if (fresh && v.status != Status::kPass && v.evidence.find(kCopyDidNotOpen) != std::string::npos) {
    fresh = false;  // no second instance here (a TMPDIR mounted noexec): the forked connector's part, without init
    here.clear();
    there.clear();
    v = listInheritedDescriptors(c, fresh, &here, &there);
  }
  if (v.status != Status::kPass) return v;
  const std::string connector = fresh ? "a fresh instance connecting (init, connect, regMr, sends)"
                                      : "the connecting process (connect, regMr, sends)";
  if (!here.empty() || !there.empty()) {
    std::string found;
    if (!here.empty()) found = "listener and receiver (listen, accept, regMr, receives): " + here;
    if (!there.empty()) found += (found.empty() ? "" : "; ") + connector + ": " + there;
    return fail(
        "descriptors without close-on-exec, which every program this process starts (system(), popen, a "
        "launcher's helper) inherits and holds open after it dies: %s",
        found.c_str());
  }
  return pass("no descriptor opened here (listen, accept, regMr, receives) nor by " + connector +
              " lacks close-on-exec");
}

// ---- signal-handlers-untouched: the application's signal handlers stay its own -----------------------------------
// NCCL installs no signal handler and blocks no signal in the application's threads: the application's (Python's
// faulthandler, a JVM's own SIGSEGV handling, a crash reporter, a launcher's SIGTERM for a clean stop) stay in place.
// A plugin whose library or init installs handlers replaces them from the moment NCCL loads it until the process
// ends: a crash is then reported by the plugin's handler, or not at all, and a SIGHUP or SIGTERM meant to stop the
// job is caught. The rule process's signal actions and mask are taken before the plugin is loaded; after loading,
// init, a comm pair and two messages, every signal's action and the mask must be as they were (SIGPIPE and SIGALRM
// excepted: the harness sets them itself).
Verdict signalHandlersUntouched(Context& c) {
  Verdict v = transferChecked(c, {{3, 0x5150}, {70000, 0x5151}}, 70000);
  if (v.status != Status::kPass) return v;
  const auto changes = gSignalsBeforeLoad.changesIn(nns::tools::SignalState::now(), {SIGPIPE, SIGALRM});
  if (!changes.empty())
    return fail(
        "loading the plugin and its calls (init, listen, accept, transfers) changed how the process handles "
        "signals, for the life of the process: %s",
        nns::tools::signalChangesText(changes).c_str());
  return pass(
      "loading the plugin, init, a comm pair and 2 messages left every signal's action and the thread's mask "
      "as they were");
}

// A "Vm...:  N kB" line of /proc/self/status (VmRSS, VmSize, VmPin), or -1.
long statusKiB(const char* field) {
  FILE* status = std::fopen("/proc/self/status", "r");
  if (status == nullptr) return -1;
  const std::string format = std::string(field) + ": %ld kB";
  char line[256];
  long kib = -1;
  while (std::fgets(line, sizeof(line), status))
    if (std::sscanf(line, format.c_str(), &kib) == 1) break;
  std::fclose(status);
  return kib;
}
long residentKiB() {
  return statusKiB("VmRSS");
}

int procEntries(const char* directory);  // below

long long heapInUse();  // below, with messages-do-not-leak

Verdict regmrDeregBalance(Context& c) {
  Pair pair;
  std::string why;
  // The peer keeps its end connected until the pairs are done: NCCL registers only on live comms, and a plugin may
  // rightly refuse regMr on a comm whose peer has closed (the peer used to close at once).
  int donePipe[2];
  if (pipe(donePipe) != 0) return fail("pipe failed");
  if (!openPair(
          c, pair,
          [&](void*) {
            close(donePipe[1]);  // so a receiver that dies reads as a hang-up, not as silence
            pollfd done{donePipe[0], POLLIN, 0};
            poll(&done, 1, 120000);
            return 0;
          },
          &why)) {
    close(donePipe[0]);
    close(donePipe[1]);
    return fail("%s", why.c_str());
  }
  close(donePipe[0]);
  std::vector<unsigned char> buffer(1 << 20);
  // Resident memory alone missed what an RDMA plugin leaks when it forgets ibv_dereg_mr: pinned pages (VmPin), the
  // kernel objects behind a descriptor, address space mapped and never touched.
  // And the heap: a record malloc'd per registration and not freed hides in resident memory (4 KB a pair grew it by
  // 7.9 MiB of the 16 allowed). Measured after the first 100 pairs, so that pools reach their working size.
  constexpr int kPairs = 2000, kHeapWarmup = 100;
  constexpr long long kHeapBytesPerPair = 256;
  const long before = residentKiB(), sizeBefore = statusKiB("VmSize"), pinnedBefore = statusKiB("VmPin");
  const int fdsBefore = procEntries("/proc/self/fd");
  long long heapBefore = -1;
  for (int i = 0; i < kPairs; ++i) {
    if (i == kHeapWarmup) heapBefore = heapInUse();
    void* mhandle = nullptr;
    if (ncclResult_t result =
            CALL("regMr", c.net->regMr(pair.recvComm, buffer.data(), buffer.size(), NCCL_PTR_HOST, &mhandle));
        result != ncclSuccess)
      return fail("regMr %d returned %s", i, resultText(result).c_str());
    if (ncclResult_t result = CALL("deregMr", c.net->deregMr(pair.recvComm, mhandle)); result != ncclSuccess)
      return fail("deregMr %d returned %s", i, resultText(result).c_str());
  }
  const long grown = residentKiB() - before, sizeGrown = statusKiB("VmSize") - sizeBefore,
             pinnedGrown = statusKiB("VmPin") - pinnedBefore;
  const int fdsGrown = procEntries("/proc/self/fd") - fdsBefore;
  const long long heapAfter = heapInUse();
  const long long heapGrown = heapBefore >= 0 && heapAfter >= 0 ? heapAfter - heapBefore : 0;
  (void)!write(donePipe[1], "d", 1);
  closePair(c, pair);
  close(donePipe[1]);
  if (grown > 16 * 1024) return fail("2000 regMr/deregMr pairs grew the process by %ld KiB", grown);
  if (pinnedGrown > 16 * 1024) return fail("2000 regMr/deregMr pairs left %ld KiB pinned (VmPin)", pinnedGrown);
  if (fdsGrown > 16) return fail("2000 regMr/deregMr pairs left %d descriptors open", fdsGrown);
  if (sizeGrown > 256 * 1024)
    return fail("2000 regMr/deregMr pairs grew the address space by %ld KiB (mappings left behind)", sizeGrown);
  if (heapGrown > kHeapBytesPerPair * (kPairs - kHeapWarmup))
    return fail("%d regMr/deregMr pairs after %d grew the heap by %lld bytes (%lld a pair; %lld allowed)",
                kPairs - kHeapWarmup, kHeapWarmup, heapGrown, heapGrown / (kPairs - kHeapWarmup), kHeapBytesPerPair);
  return pass("2000 regMr/deregMr pairs of 1 MiB: resident memory grew " + std::to_string(grown) + " KiB, pinned " +
              std::to_string(pinnedGrown) + " KiB, address space " + std::to_string(sizeGrown) + " KiB, descriptors " +
              std::to_string(fdsGrown) +
              (heapBefore >= 0 ? ", heap " + std::to_string(heapGrown) + " bytes after the first 100" : ""));
}

// ---- messages-do-not-leak: the heap does not grow with the number of messages ----------------------------------
// A training job moves millions of messages through one connection. A request, header or completion record
// allocated per message and not freed on one of its paths (the send side that is done before the receiver answers,
// a record kept on a list nobody drains) runs a long job out of memory hours in. The heap in use is read on both
// sides after a warm-up that lets request pools grow to their working size, then halfway through many more messages,
// and at the end. The sender runs at most two batches ahead of the receiver: a transport that buffers unexpected
// messages (UCX over TCP completes sends at once) would otherwise hold as many as a slow receiver left unread.
// A pool keeps its high-water mark, and that mark can still rise after the warm-up: UCX over TCP holds a 64 KiB
// segment per unexpected message, and a receiver descheduled on a loaded host let ~130 of them pile up (8 MiB, once).
// Such a step lands in one half; a leak grows in both, so a side fails only when each half grew past half the limit.
constexpr int kLeakBatch = 64, kLeakWarmupBatches = 32, kLeakBatches = 320;
constexpr int kLeakMessages = kLeakBatch * kLeakBatches, kLeakWarmup = kLeakBatch * kLeakWarmupBatches;
constexpr long long kLeakLimitBytes = 2 << 20;

// The sanitizer runtimes' own count of live heap bytes (absent without a sanitizer, hence weak).
extern "C" size_t __sanitizer_get_current_allocated_bytes() __attribute__((weak));

// Bytes malloc has handed out and not had back, in every thread: the sanitizer's count under a sanitizer, else
// glibc's (arena and mmapped chunks, all arenas; mallinfo2 from glibc 2.33, mallinfo's int fields before). -1 when
// neither sees this process's allocations (another malloc replaces glibc's): a 64 KiB block allocated as a probe
// must show, in one of a few tries (a plugin thread freeing memory meanwhile can hide it once).
long long heapInUse() {
  if (__sanitizer_get_current_allocated_bytes != nullptr)
    return static_cast<long long>(__sanitizer_get_current_allocated_bytes());
  auto total = [] {
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 33)
    struct mallinfo2 m = mallinfo2();
    return static_cast<long long>(m.uordblks + m.hblkhd);
#else
    struct mallinfo m = mallinfo();
    return static_cast<long long>(static_cast<unsigned>(m.uordblks)) + static_cast<unsigned>(m.hblkhd);
#endif
  };
  void* (*volatile allocate)(size_t) = std::malloc;  // through a volatile pointer: not elided with its free
  for (int attempt = 0; attempt < 5; ++attempt) {
    long long before = total();
    void* probe = allocate(1 << 16);
    long long during = total();
    std::free(probe);
    if (probe != nullptr && during - before >= (1 << 16)) return total();
  }
  return -1;
}

// A side's heap growth over the measured messages, in two halves; `known` is false when the side did not report.
struct HeapGrowth {
  // The heap could not be read. Not -1: a heap that shrank over a half (frees of the warm-up's memory) is negative,
  // and was said as "not readable", which left that side unjudged.
  static constexpr long long kUnread = std::numeric_limits<long long>::min();
  bool known = false;
  long long first = kUnread, second = kUnread;
  bool readable() const { return known && first != kUnread && second != kUnread; }
  long long total() const { return first + second; }
  // A leak grows in both halves; a pool's one-time step in only one.
  bool leaks() const { return readable() && std::min(first, second) > kLeakLimitBytes / 2; }
  std::string text() const {
    if (!known) return "not reported";
    if (!readable()) return "not readable";
    return std::to_string(total()) + " B (" + std::to_string(first) + " + " + std::to_string(second) + ")";
  }
};

// Heap in use at three points (after the warm-up, halfway, at the end) as the growth of each half.
HeapGrowth heapGrowth(long long base, long long middle, long long end) {
  HeapGrowth g;
  g.known = true;
  if (base >= 0 && middle >= 0 && end >= 0) {
    g.first = middle - base;
    g.second = end - middle;
  }
  return g;
}

Verdict messagesDoNotLeak(Context& c) {
  if (heapInUse() < 0)
    return skip("this process's malloc is neither glibc's nor a sanitizer's: its heap in use cannot be read");
  std::mt19937_64 random(777);
  std::vector<std::vector<std::pair<size_t, uint64_t>>> batches(kLeakWarmupBatches + kLeakBatches);
  for (auto& batch : batches)
    for (int i = 0; i < kLeakBatch; ++i) batch.push_back({1 + random() % 4096, random()});
  constexpr int kMiddle = kLeakWarmupBatches + kLeakBatches / 2, kEnd = kLeakWarmupBatches + kLeakBatches;
  // The receiver acknowledges each batch over `ackPipe` (the sender waits for batch b-2's before it sends batch b);
  // the sender's growth comes back over `grownPipe`, and it keeps its comm until the receiver has checked everything.
  int grownPipe[2], checkedPipe[2], ackPipe[2];
  if (pipe(grownPipe) != 0 || pipe(checkedPipe) != 0 || pipe(ackPipe) != 0) return fail("pipe failed");
  Pair pair;
  std::string why;
  if (!openPair(
          c, pair,
          [&](void* comm) {
            close(grownPipe[0]);
            close(checkedPipe[1]);
            close(ackPipe[1]);
            auto sendBatches = [&](int from, int to) {
              for (int b = from; b < to; ++b) {
                char ack;
                pollfd acked{ackPipe[0], POLLIN, 0};
                if (b >= 2 && (poll(&acked, 1, 30000) != 1 || read(ackPipe[0], &ack, 1) != 1)) return 33;
                if (int code = sendMessages(c, comm, batches[b]); code != 0) return code;
              }
              return 0;
            };
            if (int code = sendBatches(0, kLeakWarmupBatches); code != 0) return code;
            const long long base = heapInUse();
            if (int code = sendBatches(kLeakWarmupBatches, kMiddle); code != 0) return code;
            const long long middle = heapInUse();
            if (int code = sendBatches(kMiddle, kEnd); code != 0) return code;
            const HeapGrowth grown = heapGrowth(base, middle, heapInUse());
            const long long halves[2] = {grown.first, grown.second};
            (void)!write(grownPipe[1], halves, sizeof(halves));
            pollfd checked{checkedPipe[0], POLLIN, 0};
            poll(&checked, 1, 60000);
            return 0;
          },
          &why))
    return fail("%s", why.c_str());
  close(grownPipe[1]);
  close(checkedPipe[0]);
  close(ackPipe[0]);
  Verdict v = pass("");
  auto receiveBatches = [&](int from, int to) {
    for (int b = from; b < to && v.status == Status::kPass; ++b) {
      v = receiveMessages(c, pair.recvComm, batches[b], 4096);
      (void)!write(ackPipe[1], "a", 1);
    }
  };
  receiveBatches(0, kLeakWarmupBatches);
  const long long base = heapInUse();
  receiveBatches(kLeakWarmupBatches, kMiddle);
  const long long middle = heapInUse();
  receiveBatches(kMiddle, kEnd);
  const HeapGrowth receiver = heapGrowth(base, middle, heapInUse());
  (void)!write(checkedPipe[1], "c", 1);
  HeapGrowth sender;
  long long halves[2];
  pollfd ready{grownPipe[0], POLLIN, 0};
  if (v.status == Status::kPass && poll(&ready, 1, 30000) == 1 &&
      read(grownPipe[0], halves, sizeof(halves)) == sizeof(halves)) {
    sender.known = true;
    sender.first = halves[0];
    sender.second = halves[1];
  }
  int code = closePair(c, pair, v.status == Status::kPass ? 30 : 1);
  for (int fd : {grownPipe[0], checkedPipe[1], ackPipe[1]}) close(fd);
  if (v.status != Status::kPass) return withPeerFailure(v, code);
  if (code != 0) return fail("%s", peerText(code).c_str());
  std::string measured = "heap grew " + receiver.text() + " on the receiver and " + sender.text() +
                         " on the sender over " + std::to_string(kLeakMessages) +
                         " messages of 1-4096 B (two halves), after " + std::to_string(kLeakWarmup) + " to warm up";
  if (!receiver.readable() && !sender.readable()) return skip(measured + ": neither side's heap could be read");
  if (receiver.leaks() || sender.leaks())
    return fail("%s: about %lld B left behind per message (limit: %lld B in each half)", measured.c_str(),
                std::max(receiver.leaks() ? receiver.total() : 0, sender.leaks() ? sender.total() : 0) / kLeakMessages,
                kLeakLimitBytes / 2);
  return pass(measured);
}

// ---- contexts-per-communicator: init per communicator, finalize per communicator (ncclNet_v11+) ------------------
// From ncclNet_v11 (NCCL 2.28) NCCL calls init for every communicator it makes, each getting a context of its own,
// and finalize with that context when the communicator is destroyed: several contexts live at once, they go one
// by one, and new ones come after. A plugin that keeps process-wide state (a device table, helper threads) must
// share it between contexts and release it only when the last one goes.
Verdict contextsPerCommunicator(Context& c) {
  if (c.net->version() < 11)
    return skip("ncclNet_v" + std::to_string(c.net->version()) +
                ": init is called once per process and there is no finalize before ncclNet_v11");
  const std::vector<std::pair<size_t, uint64_t>> messages{{5000, 41}, {70000, 42}};
  constexpr size_t kCapacity = 1 << 17;
  // The harness's own context stands for the first communicator; two more come and go beside it.
  void* second = nullptr;
  if (ncclResult_t result = CALL("init", c.net->init(&second, 0x6e6e74, nullptr, nullptr, nullptr));
      result != ncclSuccess)
    return fail("init for a second communicator, while the first's context lives, returned %s",
                resultText(result).c_str());
  Context two{c.net, second, c.dev, c.props};
  Verdict v = transferChecked(two, messages, kCapacity);
  if (v.status != Status::kPass) return fail("on a second context (init called twice): %s", v.evidence.c_str());
  v = transferChecked(c, messages, kCapacity);
  if (v.status != Status::kPass) return fail("on the first context beside a second: %s", v.evidence.c_str());
  if (ncclResult_t result = CALL("finalize", c.net->finalize(second)); result != ncclSuccess)
    return fail("finalize of the second context returned %s", resultText(result).c_str());
  v = transferChecked(c, messages, kCapacity);
  if (v.status != Status::kPass)
    return fail("on the first context after the second's finalize (NCCL destroys communicators one by one): %s",
                v.evidence.c_str());
  void* third = nullptr;
  if (ncclResult_t result = CALL("init", c.net->init(&third, 0x6e6e75, nullptr, nullptr, nullptr));
      result != ncclSuccess)
    return fail("init for a third communicator, after the second's finalize, returned %s", resultText(result).c_str());
  Context three{c.net, third, c.dev, c.props};
  v = transferChecked(three, messages, kCapacity);
  if (v.status != Status::kPass)
    return fail("on a third context, made after the second's finalize: %s", v.evidence.c_str());
  if (ncclResult_t result = CALL("finalize", c.net->finalize(third)); result != ncclSuccess)
    return fail("finalize of the third context returned %s", resultText(result).c_str());
  return pass(
      "a second context moved data beside the first; the first still did after the second's finalize, "
      "and a third made after that did too");
}

// ---- comm-lifecycle-leaks: communicators come and go, descriptors and threads do not pile up ------------------
// A long-lived process (a training job that builds process groups, NCCL's ncclCommSplit) opens and closes many
// connections through one plugin instance. A descriptor or helper thread left behind by each closed comm runs the
// process into its descriptor limit (1024 by default) after a few hundred communicators.
constexpr int kLifecycleWarmup = 5, kLifecycleCycles = 100;

// Entries of a /proc/self directory (fd or task), or -1.
int procEntries(const char* directory) {
  DIR* dir = opendir(directory);
  if (dir == nullptr) return -1;
  int count = 0;
  while (dirent* entry = readdir(dir))
    if (entry->d_name[0] != '.') ++count;
  closedir(dir);
  return count - (std::strcmp(directory, "/proc/self/fd") == 0 ? 1 : 0);  // opendir's own descriptor
}

// The process's shared memory mappings (lines of /proc/self/maps whose permissions end in 's'): a ring or window
// shared with a peer or a device that is never unmapped. Private ones are left out: they come and go with the
// allocator (a sanitizer's keeps freed memory mapped for a while). -1 when the file cannot be read.
int mappingCount() {
  FILE* maps = std::fopen("/proc/self/maps", "r");
  if (maps == nullptr) return -1;
  int shared = 0;
  char line[4096];
  while (std::fgets(line, sizeof(line), maps) != nullptr) {
    const char* perms = std::strchr(line, ' ');  // "start-end perms offset ..."
    if (perms != nullptr && std::strlen(perms) > 4 && perms[4] == 's') ++shared;
    while (std::strchr(line, '\n') == nullptr && std::fgets(line, sizeof(line), maps) != nullptr) {
    }  // the rest of an over-long line
  }
  std::fclose(maps);
  return shared;
}

struct ResourceCounts {
  int fds = 0, threads = 0, mappings = 0;
  static ResourceCounts now() { return {procEntries("/proc/self/fd"), procEntries("/proc/self/task"), mappingCount()}; }
};

// The growth from `base` to now; a helper thread may still be exiting when close returns, so growth is looked at
// again after a pause before it counts.
ResourceCounts lifecycleGrowth(const ResourceCounts& base) {
  ResourceCounts end = ResourceCounts::now();
  for (int settle = 0;
       settle < 10 && (end.fds > base.fds || end.threads > base.threads || end.mappings > base.mappings); ++settle) {
    usleep(50000);
    end = ResourceCounts::now();
  }
  return {end.fds - base.fds, end.threads - base.threads, end.mappings - base.mappings};
}

// Comms opened, used for one checked message and closed one after another (`warmup` + `cycles` of them); with
// `judgeGrowth`, the descriptors, threads and mappings the `cycles` after the warm-up left behind are judged too.
// With a `budget` (seconds; 0: none) no comm is opened once it is spent; `*made` gets the number of comms made.
Verdict cycleComms(Context& c, int warmup, int cycles, bool judgeGrowth, double budget = 0, int* made = nullptr) {
  const auto start = Clock::now();
  const int kTotal = warmup + cycles;
  auto sizeOf = [](int cycle) { return static_cast<size_t>(1 + (cycle * 131) % 4096); };
  // This process listens (a new listener per cycle, as NCCL listens per connection) and passes each handle to the
  // peer over `handles`; a 0 byte ends the run. The peer's growth comes back over `counts`.
  int handles[2], counts[2];
  if (pipe(handles) != 0) return fail("pipe failed");
  if (pipe(counts) != 0) return fail("pipe failed");
  pid_t peer = startPeer(c, [&]() {
    close(handles[1]);
    close(counts[0]);
    std::vector<unsigned char> buffer(4096);
    void* sendComm = nullptr;
    ResourceCounts base;
    for (int cycle = 0;; ++cycle) {
      unsigned char token[1 + NCCL_NET_HANDLE_MAXSIZE];
      pollfd next{handles[0], POLLIN, 0};
      bool more =
          poll(&next, 1, 60000) == 1 && read(handles[0], token, sizeof(token)) == sizeof(token) && token[0] == 1;
      // The previous comm closes only now, once the receiver has checked its message.
      if (sendComm != nullptr) closeSendComm(c, sendComm);
      sendComm = nullptr;
      if (cycle == warmup) base = ResourceCounts::now();
      if (!more) break;
      ncclResult_t connectFailed = ncclSuccess;
      // Told to stop while connecting (the listener's accept failed: its failure is the one to report): ends well.
      if ((sendComm = connectWithin(c, token + 1, 20, &connectFailed, handles[0])) == nullptr)
        return connectFailed == ncclSuccess && fdReadable(handles[0]) ? 0 : connectFailureCode(connectFailed);
      void* mhandle = registerBuffer(c, sendComm, buffer.data(), buffer.size());
      void* request = nullptr;
      fill(buffer, sizeOf(cycle), static_cast<uint64_t>(cycle) + 5);
      int size = -1;
      if (ncclResult_t posted = postSend(c, sendComm, buffer.data(), sizeOf(cycle), 1, mhandle, &request);
          posted != ncclSuccess)
        return posted == kDeadline ? 34 : 32;
      if (waitDone(c, request, &size, gTransferWaitSeconds) != ncclSuccess) return 30;
      if (sentSizeWrong(size, sizeOf(cycle))) return 31;
    }
    ResourceCounts grown = lifecycleGrowth(base);
    (void)!write(counts[1], &grown, sizeof(grown));
    return 0;
  });
  close(handles[0]);
  close(counts[1]);
  // Ends the peer (a 0 byte instead of a handle) and collects its growth and exit code.
  struct PeerEnd {
    int code = 0;
    bool reported = false;
    ResourceCounts grown{-1, -1};
  };
  auto endPeer = [&]() {
    PeerEnd e;
    unsigned char end[1 + NCCL_NET_HANDLE_MAXSIZE] = {};
    (void)!write(handles[1], end, sizeof(end));
    close(handles[1]);
    pollfd ready{counts[0], POLLIN, 0};
    e.reported = poll(&ready, 1, 30000) == 1 && read(counts[0], &e.grown, sizeof(e.grown)) == sizeof(e.grown);
    close(counts[0]);
    e.code = peer > 0 ? waitPeer(peer, 30) : 0;
    return e;
  };
  std::vector<unsigned char> buffer(4096);
  ResourceCounts base;
  for (int cycle = 0; cycle < kTotal; ++cycle) {
    if (budget > 0 && std::chrono::duration<double>(Clock::now() - start).count() > budget) break;
    if (cycle == warmup) base = ResourceCounts::now();
    unsigned char token[1 + NCCL_NET_HANDLE_MAXSIZE] = {1};
    void* listenComm = nullptr;
    if (ncclResult_t result = CALL("listen", c.net->listen(c.ctx, c.dev, token + 1, &listenComm));
        result != ncclSuccess) {
      endPeer();
      return fail("comm %d: listen returned %s", cycle + 1, resultText(result).c_str());
    }
    (void)!write(handles[1], token, sizeof(token));
    ncclResult_t failed = ncclSuccess;
    int peerCode = 0;
    void* recvComm = acceptWithin(c, listenComm, 20, &failed, &peer, &peerCode);
    Verdict step = pass("");
    if (recvComm == nullptr && peerCode != 0) {  // reaped: its connect failed, nothing will connect any more
      CALL("closeListen", c.net->closeListen(listenComm));
      close(handles[1]);
      close(counts[0]);
      return fail("comm %d: the connecting process ended first: %s", cycle + 1, peerText(peerCode).c_str());
    }
    if (recvComm == nullptr) {
      step = fail("comm %d: %s", cycle + 1,
                  failed != ncclSuccess ? ("accept returned " + resultText(failed)).c_str()
                                        : "accept did not complete within 20 s");
    } else {
      void* data = buffer.data();
      size_t capacity = buffer.size();
      int tag = 1, size = -1;
      void* mhandle = registerBuffer(c, recvComm, buffer.data(), buffer.size());
      void* request = nullptr;
      ncclResult_t result = postRecv(c, recvComm, 1, &data, &capacity, &tag, &mhandle, &request);
      if (result != ncclSuccess) {
        step = fail("comm %d: irecv %s", cycle + 1, postText(result).c_str());
      } else if ((result = waitDone(c, request, &size, gTransferWaitSeconds)) != ncclSuccess) {
        step = fail("comm %d: %s", cycle + 1, waitText(result, gTransferWaitSeconds).c_str());
      } else if (const std::string wrong = receivedWrong(buffer, size, sizeOf(cycle), static_cast<uint64_t>(cycle) + 5);
                 !wrong.empty()) {
        step = fail("comm %d: %s", cycle + 1, wrong.c_str());
      } else {
        // Then a receive nothing will match, pending at the close as NCCL's abort leaves them: the close must release
        // what the comm holds all the same (a plugin that frees a comm only once its requests are done never does).
        void* spare = nullptr;
        tag = 2;
        if ((result = CALL("irecv", irecvChecked(*c.net, recvComm, 1, &data, &capacity, &tag, &mhandle, &spare))) !=
            ncclSuccess)
          step = fail("comm %d: irecv after the checked message returned %s", cycle + 1, resultText(result).c_str());
      }
      closeRecvComm(c, recvComm);
    }
    CALL("closeListen", c.net->closeListen(listenComm));
    if (step.status != Status::kPass) return withPeerFailure(step, endPeer().code);
    if (made != nullptr) *made = cycle + 1;
  }
  ResourceCounts grown = lifecycleGrowth(base);
  PeerEnd peerEnd = endPeer();
  if (peerEnd.code != 0) return fail("%s", peerText(peerEnd.code).c_str());
  if (!peerEnd.reported) return fail("the peer did not report its descriptor and thread counts");
  if (!judgeGrowth) return pass("");
  const ResourceCounts& peerGrown = peerEnd.grown;
  // A descriptor or two may be opened lazily once (a cache, an event channel), a shared mapping or a few likewise (a
  // library's pool); a leak per comm shows as ~100.
  constexpr int kFdSlack = 2, kThreadSlack = 1, kMappingSlack = 24;
  char text[480];
  std::snprintf(text, sizeof(text),
                "%d comms opened, used for one message and closed (each receiver with a receive pending) after %d "
                "warm-up comms: descriptors %+d on the "
                "listener/receiver and %+d on the connector/sender, threads %+d and %+d, shared mappings %+d and %+d",
                cycles, warmup, grown.fds, peerGrown.fds, grown.threads, peerGrown.threads, grown.mappings,
                peerGrown.mappings);
  if (grown.fds > kFdSlack || peerGrown.fds > kFdSlack || grown.threads > kThreadSlack ||
      peerGrown.threads > kThreadSlack || grown.mappings > kMappingSlack || peerGrown.mappings > kMappingSlack)
    return fail("%s: about %.1f descriptors, %.1f threads and %.1f shared mappings left behind per closed comm", text,
                std::max(grown.fds, peerGrown.fds) / static_cast<double>(cycles),
                std::max(grown.threads, peerGrown.threads) / static_cast<double>(cycles),
                std::max(grown.mappings, peerGrown.mappings) / static_cast<double>(cycles));
  return pass(text);
}

Verdict commLifecycleLeaks(Context& c) {
  return cycleComms(c, kLifecycleWarmup, kLifecycleCycles, true);
}

// ---- many-comms-over-time: the comms of a long job, opened and closed one after another, keep connecting --------
// A job opens and closes comms for as long as it runs: NCCL makes a connection per channel and peer for every
// communicator, and jobs build communicators again and again (ncclCommSplit, a process group per pipeline stage,
// restarts after a fault). A plugin that hands each connection an id, a port, a QP number or a table slot and never
// takes back those of closed comms (a counter in a narrow field: 256 or 1024 of them) works for the first
// communicators and then fails every connect, with never more than a few comms open. comm-lifecycle-leaks' 105 do not
// reach that; 1100 pass a 10-bit counter, one comm open at a time. A plugin whose connections take long to make (UCX:
// 40-60 ms each on a loaded 2-CPU host) gets as many as 25 s allow, and the pass says how many that was.
constexpr int kReopenedComms = 1100;
constexpr double kReopenBudgetSeconds = 25;
Verdict manyCommsOverTime(Context& c) {
  const auto start = Clock::now();
  int made = 0;
  Verdict v = cycleComms(c, 0, kReopenedComms, false, kReopenBudgetSeconds, &made);
  // Ids never taken back show once comms before the failing one connected and moved their message: a failure at the
  // first comm is a plain transfer's.
  if (v.status != Status::kPass && made > 0 && ownHintsApply())
    return fail(
        "%s (comms opened and closed one after another, one open at a time: ids, ports or slots of closed comms "
        "must be reused, since a job opens and closes comms for as long as it runs)",
        v.evidence.c_str());
  if (v.status != Status::kPass) return v;
  char text[256];
  std::snprintf(
      text, sizeof(text), "%d comms opened, used for one checked message and closed one after another, in %.1f s%s",
      made, std::chrono::duration<double>(Clock::now() - start).count(),
      made < kReopenedComms ? " (note: the 25 s allowed ended before 1100: connections are slow to make)" : "");
  return pass(text);
}

// ---- abandoned-connects-are-released: a connect the host gives up leaves nothing behind after finalize (v11+) -------
// ncclNet has no call to cancel a connect. A host that gives up on one (its own timeout, a peer it knows to be dead,
// an abort) stops calling connect, frees the handle, closes its listeners and finalizes the communicator's context.
// What the plugin kept between connect calls (a socket, a half-made comm with its QPs, a shared-memory segment) must
// go then: a long-lived job that rebuilds its communicators after failures otherwise runs out of descriptors.
constexpr int kAbandonedConnects = 8;

Verdict abandonedConnectsAreReleased(Context& c) {
  if (c.net->version() < 11)
    return skip("ncclNet_v" + std::to_string(c.net->version()) +
                ": there is no finalize before ncclNet_v11, so nothing tells the plugin that the host gave up");
  // First one connection made and closed, and one round of connects given up, each under a context of its own: what
  // the plugin opens once on either path (a helper thread, a device, a cache, a timer) is then in the base.
  auto cycle = [&](void* ctx, bool accept, int* completed) -> Verdict {
    unsigned char handles[kAbandonedConnects][NCCL_NET_HANDLE_MAXSIZE];
    void* listenComms[kAbandonedConnects] = {};
    void* sendComms[kAbandonedConnects] = {};
    void* recvComms[kAbandonedConnects] = {};
    const int count = accept ? 1 : kAbandonedConnects;
    Verdict v = pass("");
    for (int i = 0; i < count && v.status == Status::kPass; ++i)
      if (ncclResult_t result = CALL("listen", c.net->listen(ctx, c.dev, handles[i], &listenComms[i]));
          result != ncclSuccess)
        v = fail("listen returned %s", resultText(result).c_str());
    // With accept, until the pair is made; without, 0.3 s of connect calls against listeners that never accept.
    const auto until = Clock::now() + std::chrono::milliseconds(accept ? 20000 : 300);
    bool pending = true;
    while (v.status == Status::kPass && pending && Clock::now() < until) {
      pending = false;
      for (int i = 0; i < count && v.status == Status::kPass; ++i) {
        if (sendComms[i] == nullptr &&
            CALL("connect", c.net->connect(ctx, c.dev, handles[i], &sendComms[i], deviceHandleSlot())) != ncclSuccess)
          v = fail("connect %d returned an error while its listener lived", i + 1);
        if (accept && recvComms[i] == nullptr &&
            CALL("accept", c.net->accept(listenComms[i], &recvComms[i], deviceHandleSlot())) != ncclSuccess)
          v = fail("accept returned an error");
        pending = pending || sendComms[i] == nullptr || (accept && recvComms[i] == nullptr);
      }
      usleep(10000);
    }
    if (v.status == Status::kPass && accept && pending) v = fail("the warm-up connection was not made within 20 s");
    for (int i = 0; i < count; ++i) {
      if (sendComms[i] != nullptr) {
        ++*completed;
        closeSendComm(c, sendComms[i]);
      }
      if (recvComms[i] != nullptr) closeRecvComm(c, recvComms[i]);
      std::memset(handles[i], 0, sizeof(handles[i]));  // the host frees the handle of a connect it gave up
      if (listenComms[i] != nullptr) CALL("closeListen", c.net->closeListen(listenComms[i]));
    }
    return v;
  };
  auto withContext = [&](uint64_t commId, bool accept, int* completed) -> Verdict {
    void* ctx = nullptr;
    if (ncclResult_t result = CALL("init", c.net->init(&ctx, commId, nullptr, nullptr, nullptr)); result != ncclSuccess)
      return fail("init for a communicator of its own returned %s", resultText(result).c_str());
    Verdict v = cycle(ctx, accept, completed);
    if (ncclResult_t result = CALL("finalize", c.net->finalize(ctx));
        result != ncclSuccess && v.status == Status::kPass)
      v = fail("finalize returned %s", resultText(result).c_str());
    return v;
  };
  int warmed = 0, completed = 0;
  if (Verdict v = withContext(0x6e6e76, true, &warmed); v.status != Status::kPass)
    return fail("warm-up: %s", v.evidence.c_str());
  if (Verdict v = withContext(0x6e6e77, false, &warmed); v.status != Status::kPass)
    return fail("warm-up: %s", v.evidence.c_str());
  const ResourceCounts base = ResourceCounts::now();
  if (Verdict v = withContext(0x6e6e78, false, &completed); v.status != Status::kPass) return v;
  if (completed == kAbandonedConnects)
    return skip("every connect completed without an accept on the other side: none was left pending to give up");
  const ResourceCounts grown = lifecycleGrowth(base);
  char text[320];
  std::snprintf(text, sizeof(text),
                "%d connect(s) given up unfinished (their listeners never accepted; then closeListen and finalize of "
                "their context): descriptors %+d, threads %+d, shared mappings %+d",
                kAbandonedConnects - completed, grown.fds, grown.threads, grown.mappings);
  // A descriptor or a mapping may still be made once on this path (as in comm-lifecycle-leaks); a leak shows per
  // connect given up, 8 or more.
  constexpr int kFdSlack = 2, kThreadSlack = 1, kMappingSlack = 4;
  if (grown.fds > kFdSlack || grown.threads > kThreadSlack || grown.mappings > kMappingSlack)
    return fail(
        "%s: ncclNet cannot cancel a connect, so what connect keeps between calls must be released when the "
        "host finalizes the context (the SDK's ConnectStage does this)",
        text);
  return pass(text);
}

// The verdict on one receive of `bytes` (sent from `sendOffset` of a buffer filled with `seed`'s pattern) posted at
// [recvOffset, recvOffset + posted) of a registered `buffer`: its wait's result, the size test reported, its bytes,
// and nothing else in `buffer` changed (`expected` is what it must hold, updated here). `what` names the receive.
Verdict checkLanded(const char* what, ncclResult_t result, int size, size_t bytes,
                    const std::vector<unsigned char>& buffer, std::vector<unsigned char>& expected, size_t sendOffset,
                    size_t recvOffset, size_t posted, uint64_t seed) {
  if (result != ncclSuccess) return fail("%s: %s", what, waitText(result, gTransferWaitSeconds).c_str());
  if (size != static_cast<int>(bytes)) return fail("%s: test reported %d bytes", what, size);
  for (size_t i = 0; i < bytes; ++i) expected[recvOffset + i] = patternByte(sendOffset + i, seed);
  auto changed = std::mismatch(buffer.begin(), buffer.end(), expected.begin());
  size_t at = static_cast<size_t>(changed.first - buffer.begin());
  if (at == buffer.size()) return pass("");
  if (at < recvOffset || at >= recvOffset + posted)
    return fail(
        "%s wrote byte %zu of the registered receive buffer, outside the posted [%zu, %zu): the offset of the data "
        "within its registration is not honoured",
        what, at, recvOffset, recvOffset + posted);
  return fail("%s: wrong byte at offset %zu of the message", what, at - recvOffset);
}

Verdict registeredBufferOffsets(Context& c) {
  // NCCL registers a whole buffer once (regMr) and sends and receives at offsets within it, passing the buffer's
  // mhandle with every call; the other rules register each buffer and send from its start. Each message here goes from
  // an offset of a registered send buffer into an offset of a registered receive buffer: its bytes must land at the
  // receive's offset, and nothing else in the receive buffer may change.
  struct Message {
    size_t sendOffset, recvOffset, bytes;
  };
  static const std::vector<Message> kMessages{
      {4096 * 3 + 17, 65536 + 5, 1000}, {100, 300001, 70000}, {500000, 12345, 1}, {0, 0, 4096}, {777, 900000, 0}};
  constexpr size_t kBuffer = 1 << 20, kSlack = 64;  // each receive is posted kSlack bytes larger than its message
  const std::vector<Message> messages = [] {        // no larger than device 0 takes
    std::vector<Message> cut = kMessages;
    for (Message& m : cut) m.bytes = fitted(m.bytes, kSlack);
    return cut;
  }();
  constexpr uint64_t kSeed = 77;
  constexpr unsigned char kUntouched = 0xee;
  Pair pair;
  std::string why;
  int checkedPipe[2];
  if (pipe(checkedPipe) != 0) return fail("pipe failed");
  if (!openPair(
          c, pair,
          [&](void* comm) {
            close(checkedPipe[1]);
            static std::vector<unsigned char> buffer(kBuffer);  // may be read until closeSend
            fill(buffer, kBuffer, kSeed);
            void* mhandle = nullptr;
            if (CALL("regMr", c.net->regMr(comm, buffer.data(), kBuffer, NCCL_PTR_HOST, &mhandle)) != ncclSuccess)
              return 44;
            int code = 0;
            for (const Message& m : messages) {
              void* request = nullptr;
              if (postSend(c, comm, buffer.data() + m.sendOffset, m.bytes, 1, mhandle, &request) != ncclSuccess) {
                code = 32;
                break;
              }
              int size = -1;
              if (waitDone(c, request, &size, gTransferWaitSeconds) != ncclSuccess) {
                code = 30;
                break;
              }
              if (sentSizeWrong(size, m.bytes)) {
                code = 31;
                break;
              }
            }
            pollfd checked{checkedPipe[0], POLLIN, 0};
            poll(&checked, 1, 60000);
            CALL("deregMr", c.net->deregMr(comm, mhandle));
            return code;
          },
          &why))
    return fail("%s", why.c_str());
  close(checkedPipe[0]);
  std::vector<unsigned char> buffer(kBuffer, kUntouched), expected(kBuffer, kUntouched);
  void* mhandle = nullptr;
  Verdict v = pass("");
  if (CALL("regMr", c.net->regMr(pair.recvComm, buffer.data(), kBuffer, NCCL_PTR_HOST, &mhandle)) != ncclSuccess)
    v = fail("regMr of the 1 MiB receive buffer failed");
  for (size_t k = 0; k < messages.size() && v.status == Status::kPass; ++k) {
    const Message& m = messages[k];
    void* data = buffer.data() + m.recvOffset;
    size_t posted = m.bytes + kSlack;
    int tag = 1;
    void* request = nullptr;
    int size = -1;
    ncclResult_t result = postRecv(c, pair.recvComm, 1, &data, &posted, &tag, &mhandle, &request);
    if (result == ncclSuccess) result = waitDone(c, request, &size, gTransferWaitSeconds);
    char what[160];
    std::snprintf(what, sizeof(what),
                  "message %zu (%zu B from offset %zu of the registered send buffer into offset %zu of the registered "
                  "receive buffer)",
                  k, m.bytes, m.sendOffset, m.recvOffset);
    v = checkLanded(what, result, size, m.bytes, buffer, expected, m.sendOffset, m.recvOffset, posted, kSeed);
  }
  (void)!write(checkedPipe[1], "c", 1);
  int code = waitPeer(pair.peer, v.status == Status::kPass ? 30 : 1);  // as transferChecked
  pair.peer = -1;
  close(checkedPipe[1]);
  if (mhandle != nullptr) CALL("deregMr", c.net->deregMr(pair.recvComm, mhandle));
  closePair(c, pair);
  if (v.status != Status::kPass) return v;
  if (code == 44) return fail("regMr of the sender's 1 MiB buffer failed");
  if (code != 0) return fail("%s", peerText(code).c_str());
  return pass(std::to_string(kMessages.size()) +
              " messages between offsets of two registered 1 MiB buffers, each call given the buffer's mhandle: "
              "every byte at its offset, nothing else written");
}

// ---- shared-registrations: one buffer registered several times, deregistered one by one -------------------------
// NCCL registers the same memory more than once: on each comm that moves it (a rank's send and receive comms, every
// channel's connection), again over the same range, and over overlapping ranges (the user buffers of several
// collectives, a part of a registered pool); each registration is deregistered when its owner goes, in any order.
// A plugin that caches registrations (an RDMA plugin does, per device, since pinning is slow) must count them: each
// stays valid until its own deregMr. Both sides make the same four registrations of a 1 MiB buffer and deregister
// them one by one between six messages, each message sent and received through one of those still held.
namespace shared {
constexpr size_t kBuffer = 1 << 20, kPart = 64 << 10, kPartBytes = 128 << 10, kSlack = 64;
constexpr uint64_t kSeed = 91;
enum Handle { kWholeOn0, kWholeOn1, kWholeOn0Again, kPartOn0, kHandles };
struct Registration {
  int comm;
  size_t offset, bytes;
  const char* what;
};
constexpr Registration kRegistrations[kHandles] = {
    {0, 0, kBuffer, "the whole buffer on comm 0"},
    {1, 0, kBuffer, "the whole buffer on comm 1"},
    {0, 0, kBuffer, "the whole buffer on comm 0 again"},
    {0, kPart, kPartBytes, "bytes [64 KiB, 192 KiB) on comm 0"},
};
struct Step {
  int deregBefore;  // the registration deregistered just before this step's message, or -1
  Handle handle;    // the one the message goes through, on its comm, on both sides
  size_t sendOffset, recvOffset, bytes;
};
constexpr Step kSteps[] = {
    {kWholeOn0, kWholeOn1, 100, 300001, 70000},       {-1, kWholeOn0Again, 4096 * 3 + 17, 12345, 5000},
    {-1, kPartOn0, kPart + 1000, kPart + 100, 50000}, {kWholeOn1, kWholeOn0Again, 500000, 900000, 100000},
    {-1, kPartOn0, 2 * kPart, 2 * kPart + 7, 60000},  {kWholeOn0Again, kPartOn0, 70000, 66000, 4096},
};
constexpr int kStepCount = sizeof(kSteps) / sizeof(kSteps[0]);
constexpr int kPeerRegFailed = 44, kPeerDeregFailed = 45, kPeerStepFailed = 60;  // + the step

// Registers the four on `comms` (regMr's result, and which one failed in *failed).
ncclResult_t registerAll(Context& c, void* const comms[2], unsigned char* buffer, void* handles[kHandles],
                         int* failed) {
  for (int h = 0; h < kHandles; ++h) {
    const Registration& r = kRegistrations[h];
    ncclResult_t result =
        CALL("regMr", c.net->regMr(comms[r.comm], buffer + r.offset, r.bytes, NCCL_PTR_HOST, &handles[h]));
    if (result != ncclSuccess) {
      *failed = h;
      return result;
    }
  }
  return ncclSuccess;
}

ncclResult_t deregister(Context& c, void* const comms[2], void* handles[kHandles], int h) {
  if (handles[h] == nullptr) return ncclSuccess;
  ncclResult_t result = CALL("deregMr", c.net->deregMr(comms[kRegistrations[h].comm], handles[h]));
  handles[h] = nullptr;
  return result;
}

// The peer: connects to both listeners and sends each step's message from its registration.
int sender(Context& c, unsigned char handlesIn[2][NCCL_NET_HANDLE_MAXSIZE], int checkedFd) {
  void* comms[2] = {};
  for (int i = 0; i < 2; ++i) {
    ncclResult_t connectFailed = ncclSuccess;
    if ((comms[i] = connectWithin(c, handlesIn[i], 20, &connectFailed)) == nullptr)
      return connectFailureCode(connectFailed);
  }
  static std::vector<unsigned char> buffer(kBuffer);  // may be read until closeSend
  fill(buffer, kBuffer, kSeed);
  void* handles[kHandles] = {};
  int failedHandle = -1, code = 0;
  if (registerAll(c, comms, buffer.data(), handles, &failedHandle) != ncclSuccess) code = kPeerRegFailed;
  for (int k = 0; k < kStepCount && code == 0; ++k) {
    const Step& s = kSteps[k];
    const size_t bytes = fitted(s.bytes, kSlack);  // each receive is posted kSlack larger
    if (s.deregBefore >= 0 && deregister(c, comms, handles, s.deregBefore) != ncclSuccess) {
      code = kPeerDeregFailed;
      break;
    }
    void* request = nullptr;
    int size = -1;
    if (postSend(c, comms[kRegistrations[s.handle].comm], buffer.data() + s.sendOffset, bytes, 1, handles[s.handle],
                 &request) != ncclSuccess ||
        waitDone(c, request, &size, gTransferWaitSeconds) != ncclSuccess)
      code = kPeerStepFailed + k;
    else if (sentSizeWrong(size, bytes))
      code = 31;
  }
  pollfd checked{checkedFd, POLLIN, 0};
  poll(&checked, 1, 60000);
  for (int h = 0; h < kHandles; ++h) deregister(c, comms, handles, h);
  for (void* comm : comms) closeSendComm(c, comm);
  return code;
}

// What was deregistered on each side before step `k`, for the evidence.
std::string deregisteredBefore(int k) {
  std::string text;
  for (int j = 0; j <= k; ++j)
    if (kSteps[j].deregBefore >= 0)
      text += std::string(text.empty() ? "" : ", ") + kRegistrations[kSteps[j].deregBefore].what;
  return text.empty() ? "nothing deregistered yet" : "after deregMr of " + text;
}

std::string peerStepText(int code) {
  if (code == kPeerRegFailed) return "the sender's regMr failed";
  if (code == kPeerDeregFailed) return "the sender's deregMr failed";
  if (code >= kPeerStepFailed && code < kPeerStepFailed + kStepCount) {
    const int k = code - kPeerStepFailed;
    return "the sender's step " + std::to_string(k) + " (isend or test through " +
           kRegistrations[kSteps[k].handle].what + ", " + deregisteredBefore(k) + ") failed";
  }
  return peerText(code);
}
}  // namespace shared

// ---- remapped-buffers-register-anew: a buffer unmapped and mapped again at its address gets a new registration ---
// Memory is unmapped and mapped again all the time (a caching allocator giving pages back, host buffers freed and
// allocated), and the new pages often come at the old address; NCCL deregisters the old buffer before it goes and
// registers the new one. A plugin that keeps registrations in a cache keyed by address and length past deregMr
// (lazy deregistration, without watching munmap) hands the NIC the old registration, whose pages it still pins but
// which are no longer the buffer's: a receive lands in them (the buffer keeps what it held), a send reads the bytes
// they held. Both sides, 3 rounds each: map 256 KiB (rounds 2 and 3 at round 1's address), write it, register it,
// move one message, deregister it, unmap it.
namespace remap {
constexpr int kRounds = 3;
constexpr int kPeerFailed = 61;  // the peer's own failure, its text sent over the report pipe
constexpr uint64_t kSeed = 7100;

// Fresh pages at `at` (anywhere for nullptr), or nullptr.
unsigned char* mapAt(void* at, size_t bytes) {
  void* mapped = mmap(at, bytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | (at != nullptr ? MAP_FIXED_NOREPLACE : 0), -1, 0);
  if (mapped == MAP_FAILED) return nullptr;
  if (at != nullptr && mapped != at) {  // a kernel without MAP_FIXED_NOREPLACE takes it as a hint
    munmap(mapped, bytes);
    return nullptr;
  }
  return static_cast<unsigned char*>(mapped);
}

std::string roundText(int round, const unsigned char* first, const unsigned char* now) {
  return "round " + std::to_string(round + 1) + " of " + std::to_string(kRounds) +
         (round > 0 && first == now ? " (a buffer mapped again at the address of the one unmapped before it)" : "");
}
}  // namespace remap

Verdict remappedBuffersRegisterAnew(Context& c) {
  using namespace remap;
  const size_t bytes = fitted(size_t{256} << 10);
  int report[2];
  if (pipe(report) != 0) return fail("pipe failed");
  Pair pair;
  std::string why;
  if (!openPair(
          c, pair,
          [&](void* comm) {
            close(report[0]);
            auto failed = [&](const std::string& text) {
              (void)!write(report[1], text.data(), text.size());
              return kPeerFailed;
            };
            unsigned char* first = nullptr;
            for (int round = 0; round < kRounds; ++round) {
              unsigned char* data = mapAt(first, bytes);
              if (data == nullptr) return failed("sender: could not map its buffer again at its old address");
              if (round == 0) first = data;
              fill(data, bytes, kSeed + static_cast<uint64_t>(round));
              void* mhandle = registerBuffer(c, comm, data, bytes);
              void* request = nullptr;
              int size = -1;
              if (ncclResult_t posted = postSend(c, comm, data, bytes, 1, mhandle, &request); posted != ncclSuccess)
                return failed("sender, " + roundText(round, first, data) + ": isend " + postText(posted));
              if (ncclResult_t result = waitDone(c, request, &size, gTransferWaitSeconds); result != ncclSuccess)
                return failed("sender, " + roundText(round, first, data) + ": " +
                              waitText(result, gTransferWaitSeconds));
              deregisterNow(c, comm, {mhandle});
              munmap(data, bytes);
            }
            return 0;
          },
          &why)) {
    close(report[0]);
    close(report[1]);
    return fail("%s", why.c_str());
  }
  close(report[1]);
  Verdict v = pass("");
  unsigned char* first = nullptr;
  for (int round = 0; round < kRounds && v.status == Status::kPass; ++round) {
    unsigned char* data = mapAt(first, bytes);
    if (data == nullptr) {
      v = skip("could not map a buffer again at the address of the one unmapped before it (MAP_FIXED_NOREPLACE)");
      break;
    }
    if (round == 0) first = data;
    std::memset(data, 0xa5, bytes);  // the pages are the process's own from here on (not the shared zero page)
    void* mhandle = registerBuffer(c, pair.recvComm, data, bytes);
    void* request = nullptr;
    void* target = data;
    size_t capacity = bytes;
    int tag = 1, size = -1;
    const std::string where = roundText(round, first, data);
    if (ncclResult_t posted = postRecv(c, pair.recvComm, 1, &target, &capacity, &tag, &mhandle, &request);
        posted != ncclSuccess) {
      v = fail("%s: irecv %s", where.c_str(), postText(posted).c_str());
    } else if (ncclResult_t result = waitDone(c, request, &size, gTransferWaitSeconds); result != ncclSuccess) {
      v = fail("%s: %s", where.c_str(), waitText(result, gTransferWaitSeconds).c_str());
    } else if (size != static_cast<int>(bytes)) {
      v = fail("%s: the receive's test reported %d bytes, %zu were sent", where.c_str(), size, bytes);
    } else if (const long at = firstMismatch(data, bytes, kSeed + static_cast<uint64_t>(round)); at >= 0) {
      const bool untouched = std::all_of(data, data + bytes, [](unsigned char b) { return b == 0xa5; });
      const bool older = round > 0 && firstMismatch(data, bytes, kSeed + static_cast<uint64_t>(round - 1)) < 0;
      v = fail("%s: wrong byte at offset %ld%s", where.c_str(), at,
               older       ? ": the buffer holds the previous round's message (the sender's registration still read "
                             "the pages it had before deregMr: a registration cache that outlived deregMr)"
               : untouched ? ": the buffer still holds what it held before the receive (it landed elsewhere: in the "
                             "pages a registration kept past deregMr?)"
                           : "");
    }
    deregisterNow(c, pair.recvComm, {mhandle});
    munmap(data, bytes);
  }
  char text[256] = {};
  const ssize_t got = read(report[0], text, sizeof(text) - 1);
  close(report[0]);
  int code = closePair(c, pair, v.status == Status::kPass ? 30 : 1);
  if (v.status != Status::kPass) return withPeerFailure(v, code == kPeerFailed ? 0 : code);
  if (code == kPeerFailed && got > 0 && std::strstr(text, "could not map") != nullptr) return skip(text);
  if (code == kPeerFailed) return fail("%s", got > 0 ? text : "the sender failed");
  if (code != 0) return fail("%s", peerText(code).c_str());
  char passed[200];
  std::snprintf(passed, sizeof(passed),
                "%d rounds each side of a %zu-byte buffer mapped, registered, used, deregistered and unmapped, the "
                "last %d at the first's address: every byte checked",
                kRounds, bytes, kRounds - 1);
  return pass(passed);
}

Verdict sharedRegistrations(Context& c) {
  using namespace shared;
  unsigned char handlesOut[2][NCCL_NET_HANDLE_MAXSIZE] = {};
  void *listenComms[2] = {}, *comms[2] = {};
  auto closeAll = [&]() {
    for (void* comm : comms)
      if (comm != nullptr) closeRecvComm(c, comm);
    for (void* comm : listenComms)
      if (comm != nullptr) CALL("closeListen", c.net->closeListen(comm));
  };
  for (int i = 0; i < 2; ++i)
    if (ncclResult_t result = CALL("listen", c.net->listen(c.ctx, c.dev, handlesOut[i], &listenComms[i]));
        result != ncclSuccess) {
      closeAll();
      return fail("listen %d of 2 returned %s", i + 1, resultText(result).c_str());
    }
  int checkedPipe[2];
  if (pipe(checkedPipe) != 0) return fail("pipe failed");
  pid_t peer = startPeer(c, [&]() {
    close(checkedPipe[1]);
    return sender(c, handlesOut, checkedPipe[0]);
  });
  close(checkedPipe[0]);
  Verdict v = pass("");
  int peerCode = 0;
  for (int i = 0; i < 2 && v.status == Status::kPass; ++i) {
    ncclResult_t failed = ncclSuccess;
    if ((comms[i] = acceptWithin(c, listenComms[i], 20, &failed, &peer, &peerCode)) == nullptr)
      v = fail("connection %d: %s", i,
               peerCode != 0           ? ("the connecting process ended first: " + peerText(peerCode)).c_str()
               : failed != ncclSuccess ? ("accept returned " + resultText(failed)).c_str()
                                       : "accept did not complete within 20 s");
  }
  std::vector<unsigned char> buffer(kBuffer, 0xee), expected(kBuffer, 0xee);
  void* handles[kHandles] = {};
  int failedHandle = -1;
  if (v.status == Status::kPass)
    if (ncclResult_t result = registerAll(c, comms, buffer.data(), handles, &failedHandle); result != ncclSuccess)
      v = fail("regMr of %s (after the ones before it) returned %s", kRegistrations[failedHandle].what,
               resultText(result).c_str());
  for (int k = 0; k < kStepCount && v.status == Status::kPass; ++k) {
    const Step& s = kSteps[k];
    if (s.deregBefore >= 0)
      if (ncclResult_t result = deregister(c, comms, handles, s.deregBefore); result != ncclSuccess) {
        v = fail("deregMr of %s returned %s", kRegistrations[s.deregBefore].what, resultText(result).c_str());
        break;
      }
    const size_t bytes = fitted(s.bytes, kSlack);
    char what[300];
    std::snprintf(what, sizeof(what), "step %d (%zu B into offset %zu through %s, %s)", k, bytes, s.recvOffset,
                  kRegistrations[s.handle].what, deregisteredBefore(k).c_str());
    void* data = buffer.data() + s.recvOffset;
    size_t posted = bytes + kSlack;
    int tag = 1, size = -1;
    void* request = nullptr;
    if (ncclResult_t result =
            postRecv(c, comms[kRegistrations[s.handle].comm], 1, &data, &posted, &tag, &handles[s.handle], &request);
        result != ncclSuccess) {
      v = fail("%s: irecv %s", what, postText(result).c_str());
      break;
    }
    ncclResult_t result = waitDoneWatchingPeer(c, request, &size, gTransferWaitSeconds, peer, &peerCode);
    if (result == kDeadline && peer < 0) {
      v = fail("%s: nothing arrived: %s", what, peerStepText(peerCode).c_str());
      break;
    }
    v = checkLanded(what, result, size, bytes, buffer, expected, s.sendOffset, s.recvOffset, posted, kSeed);
  }
  (void)!write(checkedPipe[1], "c", 1);
  int code = peer > 0 ? waitPeer(peer, v.status == Status::kPass ? 30 : 1) : peerCode;  // as transferChecked
  close(checkedPipe[1]);
  for (int h = 0; h < kHandles; ++h) deregister(c, comms, handles, h);
  closeAll();
  if (v.status != Status::kPass) return v;
  if (code != 0) return fail("%s", peerStepText(code).c_str());
  return pass(
      "one 1 MiB buffer registered 4 times on each side (on 2 comms, the same range twice on one, and an overlapping "
      "128 KiB part), deregistered one by one between 6 checked messages: each registration moved its bytes until "
      "its own deregMr");
}

Verdict closeWithRequestsInFlight(Context& c) {
  // NCCL closes comms with requests in flight when it aborts a communicator, while the peer may be alive and idle
  // (hung, or not aborting yet): each close must return then, not wait for the requests to finish. A close that
  // waits is caught by the call watchdog, which names the call.
  // 1. closeRecv with receives posted while the sender is connected, holds its comm open and sends nothing until
  //    the receiver has closed.
  //    Its connect must have completed first: accept may complete before connect does (UCX does), and a connect
  //    still in progress may rightly fail once the receiver is gone.
  Pair pair;
  std::string why;
  int goPipe[2];
  int connectedPipe[2];
  if (pipe(goPipe) != 0) return fail("pipe failed");
  if (pipe(connectedPipe) != 0) {
    close(goPipe[0]);
    close(goPipe[1]);
    return fail("pipe failed");
  }
  if (!openPair(
          c, pair,
          [&](void*) {
            close(goPipe[1]);  // a receiver that dies reads as a hang-up, not as silence
            close(connectedPipe[0]);
            (void)!write(connectedPipe[1], "c", 1);
            close(connectedPipe[1]);
            pollfd go{goPipe[0], POLLIN, 0};
            poll(&go, 1, 60000);
            return 0;  // closeSend follows, with nothing in flight
          },
          &why)) {
    for (int fd : {goPipe[0], goPipe[1], connectedPipe[0], connectedPipe[1]}) close(fd);
    return fail("%s", why.c_str());
  }
  close(goPipe[0]);
  close(connectedPipe[1]);
  pollfd connected{connectedPipe[0], POLLIN, 0};
  const bool senderConnected = poll(&connected, 1, 20000) == 1 && (connected.revents & POLLIN) != 0;
  close(connectedPipe[0]);
  if (!senderConnected) {
    (void)!write(goPipe[1], "g", 1);
    close(goPipe[1]);
    int code = closePair(c, pair, gCallTimeout + 10);
    return fail("accept completed, but the sender's connect did not within 20 s (%s)", peerText(code).c_str());
  }
  constexpr int kRecvs = 8;
  std::vector<std::vector<unsigned char>> buffers(kRecvs, std::vector<unsigned char>(64));
  std::vector<void*> mhandles = registerBuffers(c, pair.recvComm, buffers);
  int posted = 0;
  for (int i = 0; i < kRecvs; ++i) {
    void* data = buffers[i].data();
    size_t size = buffers[i].size();
    int tag = 1;
    void* request = nullptr;
    // The first may be put off for a while (a NULL request: "not now", which NCCL retries); a later NULL means the
    // plugin takes no more now, and what is posted is what gets closed in flight.
    ncclResult_t result =
        i == 0 ? postRecv(c, pair.recvComm, 1, &data, &size, &tag, &mhandles[i], &request, 2)
               : CALL("irecv", irecvChecked(*c.net, pair.recvComm, 1, &data, &size, &tag, &mhandles[i], &request));
    if (i == 0 && result == kDeadline) result = ncclSuccess;  // still NULL after 2 s: failed below
    if (result != ncclSuccess) {
      (void)!write(goPipe[1], "g", 1);
      close(goPipe[1]);
      closePair(c, pair);
      return fail("irecv %d returned %s with the sender connected and idle", i, resultText(result).c_str());
    }
    if (request == nullptr) break;
    ++posted;
  }
  ncclResult_t recvClosed = closeRecvComm(c, pair.recvComm);
  pair.recvComm = nullptr;
  (void)!write(goPipe[1], "g", 1);
  close(goPipe[1]);
  int idleCode = closePair(c, pair, gCallTimeout + 10);
  if (posted == 0)
    return fail("irecv took no receive on a fresh comm (a NULL request for 2 s): nothing to close in flight");
  if (recvClosed != ncclSuccess)
    return fail("closeRecv with %d receives posted, the sender alive and idle, returned %s", posted,
                resultText(recvClosed).c_str());
  if (idleCode != 0) return fail("the idle sender, after closeRecv: %s", peerText(idleCode).c_str());

  // 2. closeSend with sends posted to a receiver that posts no receives, holds its comm open, and waits for the
  //    sender to finish (so 8 MiB through a plugin's buffers stays in flight).
  Pair sendPair;
  constexpr int kSends = 8;
  if (!openPair(
          c, sendPair,
          [&](void* comm) {
            // Outlives the lambda: the plugin may read it until closeSend, which openPair calls after this returns.
            static std::vector<unsigned char> buffer(fitted(1 << 20), 3);
            void* mhandle = registerBuffer(c, comm, buffer.data(), buffer.size());
            for (int i = 0; i < kSends; ++i) {
              void* request = nullptr;
              if (CALL("isend", isendNoted(*c.net, comm, buffer.data(), buffer.size(), 1, mhandle, &request)) !=
                  ncclSuccess)
                return 41;
              if (request == nullptr) break;
            }
            return 0;  // closeSend follows with the sends in flight
          },
          &why))
    return fail("%s", why.c_str());
  int sendCode = waitPeer(sendPair.peer, gCallTimeout + 10);
  sendPair.peer = -1;
  ncclResult_t sendSideClosed = closeRecvComm(c, sendPair.recvComm);
  sendPair.recvComm = nullptr;
  closePair(c, sendPair);
  if (sendCode == 41) return fail("isend returned an error on a fresh comm");
  if (sendCode != 0)
    return fail("closeSend with sends in flight to a receiver that posts none: %s", peerText(sendCode).c_str());
  if (sendSideClosed != ncclSuccess)
    return fail("closeRecv after the sender closed with sends in flight returned %s",
                resultText(sendSideClosed).c_str());
  return pass("closeRecv with " + std::to_string(posted) +
              " receives posted (sender alive, idle) and closeSend with up to 8 sends of 1 MiB in flight (receiver "
              "alive, posting none) returned, no crash");
}

Verdict deregmrUnderAReceive(Context& c) {
  // NCCL's teardown after an abort deregisters a receive comm's buffers before it closes the comm (recvProxyFree),
  // with receives still posted, while the peer, not aborting yet, may still send into them. A plugin that keeps a
  // pointer to the registration in the pending receive and reads it when the message lands reads freed memory (a
  // crash, or a sanitizer report in a sanitizer build; nns-ucx let UCX read an unmapped memh). The receive may
  // complete with every byte right, fail (as a NIC fails a write into a deregistered region), or stay pending until
  // the close; reporting done with the wrong bytes or size, crashing, or a close that fails or blocks is a FAIL.
  const size_t kBytes = fitted(1u << 20);  // no larger than device 0 takes
  constexpr uint64_t kSeed = 0x64657267;
  int goPipe[2];
  if (pipe(goPipe) != 0) return fail("pipe failed");
  Pair pair;
  std::string why;
  if (!openPair(
          c, pair,
          [&](void* comm) {
            close(goPipe[1]);
            pollfd go{goPipe[0], POLLIN, 0};
            poll(&go, 1, 60000);  // the receiver deregistered its buffer (or died: a hang-up)
            close(goPipe[0]);
            static std::vector<unsigned char> message(kBytes);
            fill(message, kBytes, kSeed);
            void* mhandle = registerBuffer(c, comm, message.data(), kBytes);
            void* request = nullptr;
            if (postSend(c, comm, message.data(), kBytes, 1, mhandle, &request) != ncclSuccess) return 0;
            int size = -1;
            (void)waitDone(c, request, &size, gTransferWaitSeconds);  // any outcome: the receiver judges
            return 0;
          },
          &why)) {
    close(goPipe[0]);
    close(goPipe[1]);
    return fail("%s", why.c_str());
  }
  close(goPipe[0]);
  auto release = [&] {
    (void)!write(goPipe[1], "g", 1);
    close(goPipe[1]);
  };
  std::vector<unsigned char> buffer(kBytes, 0);
  void* mhandle = registerBuffer(c, pair.recvComm, buffer.data(), kBytes);
  void* data = buffer.data();
  size_t capacity = kBytes;
  int tag = 1;
  void* request = nullptr;
  if (ncclResult_t result = postRecv(c, pair.recvComm, 1, &data, &capacity, &tag, &mhandle, &request);
      result != ncclSuccess) {
    release();
    closePair(c, pair);
    return fail("irecv of 1 MiB on a fresh comm returned %s", resultText(result).c_str());
  }
  deregisterNow(c, pair.recvComm, {mhandle});
  release();
  int size = -1;
  const ncclResult_t result = waitDone(c, request, &size, gTransferWaitSeconds);
  std::string outcome;
  if (result == ncclSuccess) {
    if (std::string wrong = receivedWrong(buffer, size, kBytes, kSeed); !wrong.empty()) {
      closePair(c, pair, gCallTimeout + 10);
      return fail("the receive whose buffer was deregistered while it was pending reported done, but %s",
                  wrong.c_str());
    }
    outcome = "completed, every byte right";
  } else if (result == kDeadline) {
    outcome = "was still pending after " + std::to_string(gTransferWaitSeconds) + " s, and closed so";
  } else {
    outcome = "failed (" + resultText(result) + ")";
  }
  ncclResult_t closed = closeRecvComm(c, pair.recvComm);
  pair.recvComm = nullptr;
  int code = closePair(c, pair, gCallTimeout + 10);
  if (closed != ncclSuccess)
    return fail("closeRecv after the receive %s returned %s", outcome.c_str(), resultText(closed).c_str());
  if (code != 0) return fail("the sender: %s", peerText(code).c_str());
  return pass("a 1 MiB receive whose buffer was deregistered while it was pending, its message sent after, " + outcome +
              "; closeRecv returned");
}

// The message a peer dies in the middle of: 256 MiB, or the largest the device takes where that is less (a fixed
// 256 MiB made both peer-death rules a SKIP for any plugin with a smaller maxP2pBytes).
constexpr size_t kPeerDeathFullBytes = 256u << 20;
size_t peerDeathBytes() {
  return gLargestMessage > 0 ? std::min(kPeerDeathFullBytes, gLargestMessage) : kPeerDeathFullBytes;
}

Verdict peerDeathIsAnError(Context& c) {
  // The sender is killed with the receive pending, twice: once after posting a large message (it stops itself at
  // once, so the transfer is surely unfinished), once before posting anything (a plugin that watches for death only
  // while a message is arriving never notices). Each time the pending receive must fail (not complete, not hang).
  const size_t bytes = peerDeathBytes();
  std::string evidence;
  for (bool postsFirst : {true, false}) {
    Pair pair;
    std::string why;
    if (!openPair(
            c, pair,
            [&](void* comm) {
              if (postsFirst) {
                static std::vector<unsigned char> big(bytes, 1);
                void* mhandle = registerBuffer(c, comm, big.data(), big.size());
                void* request = nullptr;
                postSend(c, comm, big.data(), big.size(), 1, mhandle, &request);
              }
              raise(SIGSTOP);
              for (;;) pause();
              return 0;
            },
            &why))
      return fail("%s", why.c_str());
    std::vector<unsigned char> big(bytes);
    void* data = big.data();
    size_t size = big.size();
    int tag = 1;
    void* mhandle = registerBuffer(c, pair.recvComm, big.data(), big.size());
    void* request = nullptr;
    if (ncclResult_t posted = postRecv(c, pair.recvComm, 1, &data, &size, &tag, &mhandle, &request);
        posted != ncclSuccess)
      return fail("irecv: %s", postText(posted).c_str());
    int status = 0;
    if (waitpid(pair.peer, &status, WUNTRACED) != pair.peer || !WIFSTOPPED(status)) {
      pair.peer = -1;  // reaped: it ended instead
      return fail("the sender did not reach its stop: %s",
                  peerText(WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status)).c_str());
    }
    kill(pair.peer, SIGKILL);
    waitpid(pair.peer, nullptr, 0);
    pair.peer = -1;
    auto killed = Clock::now();
    int got = -1;
    ncclResult_t result = waitDone(c, request, &got, gPeerDeathSeconds);
    double seconds = std::chrono::duration<double>(Clock::now() - killed).count();
    closePair(c, pair);
    const char* when = postsFirst ? "mid-message" : "before it sent anything";
    // A path that moves the whole message at isend (a single copy into the receiver, an RDMA write that goes on
    // while the sending process is stopped) may have delivered it before the kill: every byte right is no failure,
    // and the case with nothing sent carries the verdict.
    if (result == ncclSuccess && postsFirst && got == static_cast<int>(bytes) &&
        std::all_of(big.begin(), big.end(), [](unsigned char b) { return b == 1; })) {
      evidence += (evidence.empty() ? "" : "; ") + std::string(
                                                       "the message was delivered in full before the sender "
                                                       "was killed (a single-copy or RDMA path)");
      continue;
    }
    if (result == ncclSuccess)
      return fail("a %zu-byte receive completed (size %d) although the sender was killed %s", bytes, got, when);
    if (result == kDeadline)
      return fail(
          "test still said 'not done' %d s after the peer's death (killed %s), never an error: the receive "
          "would hang NCCL",
          gPeerDeathSeconds, when);
    char text[128];
    std::snprintf(text, sizeof(text), "%s %.2f s after the sender was killed %s", resultText(result).c_str(), seconds,
                  when);
    evidence += (evidence.empty() ? "" : "; ") + std::string("test returned ") + text;
  }
  return pass(evidence);
}

Verdict receiverDeathIsAnError(Context& c) {
  // The other side of peer-death-is-an-error: the receiver dies before it posts a receive, while the sender has a
  // message it cannot deliver. Here the peer listens and accepts (the usual roles reversed) and stops itself; this
  // process connects and keeps posting a 256 MiB send (or maxP2pBytes) (isend, then test) for 0.2 s, kills the peer,
  // and goes on. isend or test must return an error within --peer-death-timeout. A receiver-driven plugin answers isend
  // with NULL until the receiver's ready-to-receive arrives, and NCCL retries it for ever: nothing else will tell it.
  const size_t bytes = peerDeathBytes();
  int handlePipe[2];
  if (pipe(handlePipe) != 0) return fail("pipe failed");
  pid_t peer = startPeer(c, [&]() {
    close(handlePipe[0]);
    unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
    void* listenComm = nullptr;
    if (CALL("listen", c.net->listen(c.ctx, c.dev, handle, &listenComm)) != ncclSuccess) return 20;
    if (write(handlePipe[1], handle, sizeof(handle)) != static_cast<ssize_t>(sizeof(handle))) return 21;
    if (acceptWithin(c, listenComm, 20) == nullptr) return 22;
    raise(SIGSTOP);
    for (;;) pause();
    return 0;
  });
  close(handlePipe[1]);
  auto killPeer = [&]() {
    if (peer <= 0) return;
    kill(peer, SIGKILL);
    waitpid(peer, nullptr, 0);
    peer = -1;
  };
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE];
  pollfd listened{handlePipe[0], POLLIN, 0};
  bool gotHandle = poll(&listened, 1, 20000) == 1 && read(handlePipe[0], handle, sizeof(handle)) == sizeof(handle);
  close(handlePipe[0]);
  if (!gotHandle) {
    int code = waitPeer(peer, 1);
    peer = -1;
    return fail("the peer (listener) did not hand over its handle: %s", peerText(code).c_str());
  }
  ncclResult_t connectFailed = ncclSuccess;
  void* sendComm = connectWithin(c, handle, 20, &connectFailed);
  if (sendComm == nullptr) {
    killPeer();
    if (connectFailed != ncclSuccess)
      return fail("connect to the peer's listener returned %s", resultText(connectFailed).c_str());
    return fail("connect to the peer's listener did not complete within 20 s");
  }
  // The peer stops once its accept returned.
  bool stopped = false;
  for (auto deadline = Clock::now() + std::chrono::seconds(20); !stopped && Clock::now() < deadline;) {
    int status = 0;
    pid_t got = waitpid(peer, &status, WNOHANG | WUNTRACED);
    if (got == peer && WIFSTOPPED(status)) stopped = true;
    if (got == peer && !WIFSTOPPED(status)) {
      peer = -1;
      closeSendComm(c, sendComm);
      return fail("the peer ended before it stopped (its accept did not complete: status %d)", status);
    }
    if (!stopped) usleep(1000);
  }
  if (!stopped) {
    killPeer();
    closeSendComm(c, sendComm);
    return fail("the peer's accept did not complete within 20 s");
  }
  std::vector<unsigned char> big(bytes, 1);
  void* mhandle = registerBuffer(c, sendComm, big.data(), big.size());
  void* request = nullptr;
  auto start = Clock::now();
  Clock::time_point killed{};
  int isends = 0, tests = 0, completed = 0;
  bool lastCompleted = false;
  Verdict verdict = pass("");
  for (;;) {
    ncclResult_t result;
    int done = 0, size = -1;
    if (request == nullptr) {
      ++isends;
      result = CALL("isend", isendNoted(*c.net, sendComm, big.data(), big.size(), 1, mhandle, &request));
    } else {
      ++tests;
      result = CALL("test", testSizes(*c.net, request, &done, &size));
    }
    // Judged by the receiver's state when the call returned: the kill below comes after.
    auto now = Clock::now();
    const bool alive = peer > 0;
    double since = alive ? 0.0 : std::chrono::duration<double>(now - killed).count();
    if (alive && now - start > std::chrono::milliseconds(200)) {
      killPeer();
      killed = Clock::now();
    }
    if (result != ncclSuccess) {
      char text[200];
      std::snprintf(text, sizeof(text),
                    "%s returned %s %.2f s after the receiver was killed (it had posted no receive)",
                    request == nullptr ? "isend" : "test", resultText(result).c_str(), since);
      verdict = alive ? fail("%s returned %s while the receiver was alive (stopped)",
                             request == nullptr ? "isend" : "test", resultText(result).c_str())
                      : pass(text);
      break;
    }
    lastCompleted = done != 0;
    if (done) {
      // A message the device caps below 256 MiB may complete eagerly (buffered on its way, as small messages are):
      // the next one is posted, and sends must start failing once the receiver is dead.
      if (bytes < kPeerDeathFullBytes) {
        ++completed;
        request = nullptr;
      } else {
        verdict = fail("a %zu-byte send completed (size %d) although its receiver never posted a receive%s", bytes,
                       size, alive ? "" : " and was killed");
        break;
      }
    }
    if (!alive && since > gPeerDeathSeconds) {
      if (lastCompleted) {
        verdict = fail(
            "sends of %zu bytes still completed %d s after the receiver's death (%d completed in all, none "
            "received), never an error: what NCCL sends to a dead rank is lost without a word",
            bytes, gPeerDeathSeconds, completed);
      } else if (request == nullptr) {
        verdict = fail(
            "isend still answered NULL ('not yet') %d s after the receiver's death (%d calls), never an "
            "error: NCCL would retry it for ever",
            gPeerDeathSeconds, isends);
      } else {
        verdict = fail(
            "test of the pending send still said 'not done' %d s after the receiver's death (%d calls), "
            "never an error: the send would hang NCCL",
            gPeerDeathSeconds, tests);
      }
      break;
    }
  }
  killPeer();
  closeSendComm(c, sendComm);
  return verdict;
}

// Appends to `text` what the pipe `fd` holds now, without waiting: after its writer's exit, a process the plugin
// forked (no exec, so close-on-exec spared the write end) may hold it open for good, and a blocking read then never
// returned.
void readWhatIsThere(int fd, std::string& text) {
  char buffer[1024];
  pollfd wait{fd, POLLIN, 0};
  ssize_t n;
  while (poll(&wait, 1, 0) > 0 && (wait.revents & POLLIN) != 0 && (n = read(fd, buffer, sizeof(buffer))) > 0)
    text.append(buffer, static_cast<size_t>(n));
}

// Runs `body` in a process of its own, forked from the rule's, and returns its verdict with what the body left for
// the rule's own (a post stopped at maxP2pBytes, messages left out, a breach of NCCL's calling contract). A call that
// does not return ends that process with the watchdog's verdict, as it ends a rule's; a crash or an exit of the
// plugin's own is named with the call it was in. The rule's timeout still bounds the whole (one process group).
Verdict inOwnProcess(const std::function<Verdict()>& body) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return fail("the harness could not make a pipe: %s", std::strerror(errno));
  std::fflush(nullptr);
  const pid_t rule = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int error = errno;
    close(fds[0]);
    close(fds[1]);
    return fail("the harness could not fork: %s", std::strerror(error));
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives the rule's process
    if (getppid() != rule) _exit(124);
    close(fds[0]);
    noteCall(nullptr, false);  // the rule's last call is not this process's: a crash before its first is named so
    // The rule's verdict pipe is not this process's to hold open (the harness reads it until the last writer is gone);
    // the watchdog writes here instead, should a call not return.
    if (gResultFd >= 0) close(gResultFd);
    gResultFd = fds[1];
    Verdict v{Status::kFail, ""};
    try {
      v = body();
    } catch (const std::exception& e) {
      v = fail("the harness itself failed (not the plugin): %s", e.what());
    }
    // The verdict as a rule's ("STATUS|evidence"), then, NUL-separated, what the rule's own verdict takes from it.
    std::string text = std::string(statusText(v.status)) + "|" + v.evidence;
    for (const std::string& field :
         {std::string(gOversizedHere ? "1" : "0"), gLeftOut, std::to_string(gContractCode), gContractProblem}) {
      text += '\0';
      text += field;
    }
    for (size_t done = 0; done < text.size();) {
      const ssize_t n = write(fds[1], text.data() + done, text.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    harnessExit(0);
  }
  close(fds[1]);
  // Read until the process has ended: a process the plugin forked may hold the pipe open for good.
  std::string text;
  char buffer[1024];
  int status = 0;
  bool reaped = false;
  for (pollfd wait{fds[0], POLLIN, 0};;) {
    if (poll(&wait, 1, 100) > 0) {
      const ssize_t n = read(fds[0], buffer, sizeof(buffer));
      if (n > 0) {
        text.append(buffer, static_cast<size_t>(n));
        continue;
      }
      break;  // end of file: the process is ending
    }
    if (waitpid(pid, &status, WNOHANG) == pid) {
      reaped = true;
      readWhatIsThere(fds[0], text);
      break;
    }
  }
  close(fds[0]);
  if (!reaped) waitpid(pid, &status, 0);
  // The process wrote this process's call note (slot 0): its mark of a harness exit is not this process's.
  const bool harnessEnded = gMyNote != nullptr && gMyNote->harnessExit.exchange(0) != 0;
  const size_t bar = text.find('|');
  if (bar == std::string::npos) {
    if (WIFSIGNALED(status))
      return fail("the plugin crashed the process (signal %d, %s)%s", WTERMSIG(status), strsignal(WTERMSIG(status)),
                  whereText(gMyNote).c_str());
    return fail("the process ended without a verdict (exit status %d)%s%s%s", WEXITSTATUS(status),
                harnessEnded ? "" : ": ", harnessEnded ? "" : pluginExitedText(),
                harnessEnded ? "" : whereText(gMyNote).c_str());
  }
  std::vector<std::string> fields;
  for (size_t start = 0;;) {
    const size_t end = text.find('\0', start);
    fields.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  const std::string head = fields[0].substr(0, bar);
  Verdict v{head == "PASS" ? Status::kPass : head == "SKIP" ? Status::kSkip : Status::kFail, fields[0].substr(bar + 1)};
  if (fields.size() == 5) {  // absent after the watchdog's verdict
    gOversizedHere = gOversizedHere || fields[1] == "1";
    if (!fields[2].empty() && gLeftOut.find(fields[2]) == std::string::npos)
      gLeftOut += (gLeftOut.empty() ? "" : "; ") + fields[2];
    if (!fields[4].empty()) noteContractProblem(std::atoi(fields[3].c_str()), fields[4]);
  }
  return v;
}

constexpr const char* kLoadingTheCopy = "dlopen (the plugin's constructors, on a fresh copy of its file)";
constexpr const char* kLoadingTheInstance = "dlopen (the rule's instance of the plugin)";

// Returns load() (a dlopen, and what follows it) run as a plugin call named `name`: with the watchdog, whose verdict
// names it, and the call note, so a constructor that crashes or hangs there is named as such.
template <class Load>
auto whileLoading(const char* name, Load&& load) {
  const char* before = gCurrentCall;
  gCurrentCall = name;
  noteCall(name, true);
  alarm(gCallTimeout);
  auto loaded = load();
  alarm(0);
  noteCall(name, false);
  gCurrentCall = before;
  return loaded;
}

// One exported version against the newest's properties, on `library` (`c` is the rule's newest table; `fresh`: the
// library is the fresh copy, not the rule's instance).
Verdict versionAgrees(Context& c, const std::string& library, bool fresh, int version) {
  std::string error;
  auto net = whileLoading(fresh ? kLoadingTheCopy : kLoadingTheInstance,
                          [&] { return core::openNetVersion(library, version, &error); });
  if (net == nullptr) return fail("%s", error.c_str());
  void* ctx = nullptr;
  if (ncclResult_t result = CALL("init", net->init(&ctx, 1, nullptr, nullptr, nullptr)); result != ncclSuccess)
    return fail("init returned %s", resultText(result).c_str());
  ncclNetProperties_v12_t p;
  if (ncclResult_t result = CALL("getProperties", net->getProperties(c.dev, &p)); result != ncclSuccess)
    return fail("getProperties returned %s", resultText(result).c_str());
  // An NCCL that loads this version takes this table's values (maxP2pBytes, vProps, ...) as the newest's are taken.
  if (Verdict sane = deviceSane(c.dev, p); sane.status != Status::kPass) return sane;
  // Compared as printed, so a NULL name is a difference, not a crash.
  const std::string name = core::printable(p.name), newestName = core::printable(c.props.name);
  if (name != newestName || p.speed != c.props.speed || p.ptrSupport != c.props.ptrSupport ||
      p.maxComms != c.props.maxComms || p.maxRecvs != c.props.maxRecvs || p.guid != c.props.guid)
    return fail(
        "reports %s %d Mbps ptr 0x%x maxComms %d maxRecvs %d guid 0x%llx, v%d reports %s %d Mbps ptr 0x%x maxComms "
        "%d maxRecvs %d guid 0x%llx",
        name.c_str(), p.speed, p.ptrSupport, p.maxComms, p.maxRecvs, static_cast<unsigned long long>(p.guid),
        c.net->version(), newestName.c_str(), c.props.speed, c.props.ptrSupport, c.props.maxComms, c.props.maxRecvs,
        static_cast<unsigned long long>(c.props.guid));
  // What NCCL places and tunes the NIC by (its PCI path in the topology, its port and latency), and from v8 on
  // whether a registration serves every comm: a table kept by hand for an old version drifts there as well.
  const std::string pciPath = core::printable(p.pciPath), newestPciPath = core::printable(c.props.pciPath);
  const bool bothHaveRegIsGlobal = version >= 8 && c.net->version() >= 8;
  if (pciPath != newestPciPath || p.port != c.props.port || !(p.latency == c.props.latency) ||
      (bothHaveRegIsGlobal && p.regIsGlobal != c.props.regIsGlobal))
    return fail(
        "reports pciPath %s port %d latency %g regIsGlobal %s, v%d reports pciPath %s port %d latency %g "
        "regIsGlobal %s",
        pciPath.c_str(), p.port, static_cast<double>(p.latency),
        bothHaveRegIsGlobal ? std::to_string(p.regIsGlobal).c_str() : "-", c.net->version(), newestPciPath.c_str(),
        c.props.port, static_cast<double>(c.props.latency),
        bothHaveRegIsGlobal ? std::to_string(c.props.regIsGlobal).c_str() : "-");
  if (std::strcmp(net->name(), c.net->name()) != 0)
    return fail("is named %s, not %s", core::printable(net->name()).c_str(), core::printable(c.net->name()).c_str());
  Context other{net.get(), ctx, c.dev, p};
  Verdict v = transferChecked(other, {{3, 1}, {70000, 2}}, 1 << 17);
  if (v.status != Status::kPass) return v;
  CALL("finalize", net->finalize(ctx));
  return v;
}

// Each version in a process of its own, on a fresh instance of the plugin (a copy of its file), as NCCL
// loads one version per process: a plugin whose old tables wrap one common init that refuses a second call, or share
// other once-only state, is right to fail a second table opened beside the first, and is not judged by that.
Verdict everyVersionAgrees(Context& c) {
  auto exports = core::inspectLibrary(c.net->path());
  bool fresh = !gVersionsLibrary.empty();
  std::string notLoaded;  // why the copy did not load, where it did not
  if (fresh) {
    // The copy lies in TMPDIR, which a host may mount noexec: a copy that does not load is the harness's limit, not
    // the plugin's failure, and the versions then run on the rule's instance, as without a copy.
    Verdict loads = inOwnProcess([&] {
      void* handle =
          whileLoading(kLoadingTheCopy, [&] { return dlopen(gVersionsLibrary.c_str(), RTLD_NOW | RTLD_LOCAL); });
      if (handle != nullptr) return pass("");
      const char* why = dlerror();
      return skip(why != nullptr ? why : "dlopen failed");
    });
    if (loads.status == Status::kFail) return {loads.status, "ncclNet: " + loads.evidence};
    if (loads.status == Status::kSkip) {
      fresh = false;
      notLoaded = loads.evidence;
    }
  }
  const std::string library = fresh ? gVersionsLibrary : c.net->path();
  std::string summary;
  for (int version : exports.netVersions) {
    Verdict v = inOwnProcess([&] { return versionAgrees(c, library, fresh, version); });
    // On the rule's instance, already initialised through the newest table, a plugin whose old inits refuse a second
    // call fails where NCCL would load it: the verdict says which instance it was, and why.
    if (v.status != Status::kPass)
      return {v.status,
              "ncclNet_v" + std::to_string(version) + ": " + v.evidence +
                  (notLoaded.empty() ? ""
                                     : " (on the rule's instance of the plugin: its fresh copy did not load: " +
                                           core::printable(notLoaded.c_str()) + ")")};
    // Appended piece by piece: GCC 12 at -O3 reports a false -Wrestrict on "v" + std::to_string(...).
    if (!summary.empty()) summary += ' ';
    summary += 'v';
    summary += std::to_string(version);
  }
  return pass("same name and properties, data moved through " + summary +
              (fresh               ? ", each in a process of its own"
               : notLoaded.empty() ? ", each in a process of its own on the rule's instance of the plugin (it could "
                                     "not be copied for a fresh one)"
                                   : ", each in a process of its own on the rule's instance of the plugin (its fresh "
                                     "copy did not load: " +
                                         core::printable(notLoaded.c_str()) + ")"));
}

// The plugin's file exports NCCL's tables and nothing of its own: where the host, or a library loaded before the
// plugin, defines one of the same names, the dynamic linker binds the plugin's own calls of it to that definition
// (interposition: the plugin then runs someone else's function), and a GNU-unique symbol (a function-local static or
// an inline variable under GCC) keeps dlclose from unloading the plugin, so the state of one NCCL load survives into
// the next. Read from the file the loader opened, as nccl-net-info does.
Verdict symbolsStayPrivate(Context& c) {
  auto exports = core::inspectLibrary(c.net->path(), true);
  if (!exports.error.empty()) return fail("the library did not open again: %s", exports.error.c_str());
  if (!exports.symbolsError.empty()) return skip("its dynamic symbols were not read: " + exports.symbolsError);
  const auto& other = exports.symbols.other;
  const auto& unique = exports.symbols.unique;
  std::string tables;
  for (int version : exports.netVersions) tables += " ncclNetPlugin_v" + std::to_string(version);
  for (int version : exports.collNetVersions) tables += " ncclCollNetPlugin_v" + std::to_string(version);
  if (other.empty() && unique.empty()) return pass("exports NCCL's tables only:" + tables);
  std::string text;
  if (!other.empty())
    text = std::to_string(other.size()) + " symbol(s) beyond NCCL's tables (" + core::namesPreview(other) +
           "): the host's or an earlier library's definitions of these names take their place inside the plugin";
  if (!unique.empty())
    text += (text.empty() ? "" : "; ") + std::to_string(unique.size()) + " GNU-unique symbol(s) (" +
            core::namesPreview(unique) + "): dlclose cannot unload the plugin";
  // Built whole, not through fail()'s 512 bytes: six names of up to 60 characters each.
  return {Status::kFail,
          "exports " + text + "; build with -fvisibility=hidden and the SDK's version script (plugin-exports.map)"};
}

Verdict everyCallReturns(Context& c) {
  // The watchdog guards every plugin call of every rule; this rule drives one full lifecycle under it.
  std::vector<std::pair<size_t, uint64_t>> messages{{10, 1}};
  Pair pair;
  std::string why;
  if (!openPair(
          c, pair, [&](void* comm) { return sendMessages(c, comm, messages); }, &why))
    return fail("%s", why.c_str());
  Verdict v = receiveMessages(c, pair.recvComm, messages, 64);  // registers its buffers; closeRecvComm deregisters
  int code = closePair(c, pair, v.status == Status::kPass ? 30 : 1);  // as transferChecked
  if (v.status != Status::kPass) return withPeerFailure(v, code);
  if (code != 0) return fail("%s", peerText(code).c_str());
  return pass("listen, connect, accept, regMr, isend, irecv, test, deregMr, close* each returned within " +
              std::to_string(gCallTimeout) + " s");
}

Verdict manyCommsAtOnce(Context& c) {
  // NCCL opens a connection per peer and channel (up to 64 channels), so two ranks hold many at once and use them
  // interleaved: as many as device 0 says it takes (maxComms), up to 64, each carrying only its own messages. Each
  // round posts one message on every connection before any is waited for; sizes and bytes differ per connection and
  // round. A plugin that fails past some count it does not advertise (a fixed table of comms) fails here.
  const int kComms = std::clamp(c.props.maxComms, 1, 64), kRounds = std::max(4, 96 / kComms);
  const int windowSeconds = 20 + kComms / 4;  // to connect, and to accept them all: more connections, more time
  // Sizes past device 0's maxP2pBytes wrap below it, so that they still differ.
  auto sizeOf = [](int comm, int round) {
    const auto wanted = static_cast<size_t>(1000 + 997 * comm + 7919 * round);
    return gLargestMessage == 0 || wanted <= gLargestMessage ? wanted : 1 + wanted % gLargestMessage;
  };
  auto seedOf = [](int comm, int round) { return static_cast<uint64_t>(100 * comm + round + 1); };
  size_t capacity = 1;
  for (int comm = 0; comm < kComms; ++comm)
    for (int round = 0; round < kRounds; ++round) capacity = std::max(capacity, sizeOf(comm, round));
  std::vector<std::array<unsigned char, NCCL_NET_HANDLE_MAXSIZE>> handles(kComms);
  std::vector<void*> listenComms(kComms, nullptr), recvComms(kComms, nullptr);
  auto closeAll = [&]() {
    for (void* comm : recvComms)
      if (comm != nullptr) closeRecvComm(c, comm);
    for (void* comm : listenComms)
      if (comm != nullptr) CALL("closeListen", c.net->closeListen(comm));
  };
  for (int i = 0; i < kComms; ++i)
    if (ncclResult_t result = CALL("listen", c.net->listen(c.ctx, c.dev, handles[i].data(), &listenComms[i]));
        result != ncclSuccess) {
      closeAll();
      return fail("listen %d of %d returned %s", i + 1, kComms, resultText(result).c_str());
    }
  int checkedPipe[2];
  if (pipe(checkedPipe) != 0) return fail("pipe failed");
  pid_t peer = startPeer(c, [&]() {
    close(checkedPipe[1]);
    std::vector<void*> sendComms(kComms, nullptr);
    for (int i = 0; i < kComms; ++i) {
      ncclResult_t connectFailed = ncclSuccess;
      if ((sendComms[i] = connectWithin(c, handles[i].data(), windowSeconds, &connectFailed)) == nullptr)
        return connectFailureCode(connectFailed);
    }
    std::vector<std::vector<unsigned char>> buffers(kComms, std::vector<unsigned char>(capacity));
    std::vector<void*> mhandles(kComms);
    for (int i = 0; i < kComms; ++i) mhandles[i] = registerBuffer(c, sendComms[i], buffers[i].data(), capacity);
    int code = 0;
    for (int round = 0; round < kRounds && code == 0; ++round) {
      std::vector<void*> requests(kComms, nullptr);
      for (int i = 0; i < kComms && code == 0; ++i) {
        fill(buffers[i], sizeOf(i, round), seedOf(i, round));
        if (ncclResult_t posted =
                postSend(c, sendComms[i], buffers[i].data(), sizeOf(i, round), 1, mhandles[i], &requests[i]);
            posted != ncclSuccess)
          code = posted == kDeadline ? 34 : 32;
      }
      for (int i = 0; i < kComms && code == 0; ++i) {
        int size = -1;
        if (waitDone(c, requests[i], &size, 10) != ncclSuccess)
          code = 30;
        else if (sentSizeWrong(size, sizeOf(i, round)))
          code = 31;
      }
    }
    pollfd checked{checkedPipe[0], POLLIN, 0};
    poll(&checked, 1, 60000);
    for (void* comm : sendComms)
      if (comm != nullptr) closeSendComm(c, comm);
    return code;
  });
  close(checkedPipe[0]);
  Verdict verdict = pass("");
  const auto acceptWindow = std::chrono::seconds(windowSeconds);
  auto deadline = Clock::now() + acceptWindow;
  for (int accepted = 0; accepted < kComms && verdict.status == Status::kPass;) {
    accepted = 0;
    for (int i = 0; i < kComms; ++i) {
      if (recvComms[i] != nullptr) {
        ++accepted;
        continue;
      }
      if (ncclResult_t result = CALL("accept", c.net->accept(listenComms[i], &recvComms[i], deviceHandleSlot()));
          result != ncclSuccess)
        verdict = fail("accept on listener %d returned %s", i, resultText(result).c_str());
      accepted += recvComms[i] != nullptr ? 1 : 0;
    }
    // A connecting process that failed (its connect returned an error) ends the wait: nothing will connect any more.
    if (int status = 0;
        accepted < kComms && verdict.status == Status::kPass && peer > 0 && waitpid(peer, &status, WNOHANG) == peer) {
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      peer = -1;
      if (code != 0)
        verdict = fail("only %d of %d connections were accepted: the connecting process ended first: %s", accepted,
                       kComms, peerText(code).c_str());
    }
    if (accepted < kComms && Clock::now() > deadline)
      verdict = fail("only %d of %d connections were accepted within %lld s (device 0's maxComms is %d)", accepted,
                     kComms, static_cast<long long>(acceptWindow.count()), c.props.maxComms);
  }
  std::vector<std::vector<unsigned char>> buffers(kComms, std::vector<unsigned char>(capacity));
  std::vector<void*> mhandles(kComms);
  for (int i = 0; i < kComms && verdict.status == Status::kPass; ++i)
    mhandles[i] = registerBuffer(c, recvComms[i], buffers[i].data(), capacity);
  for (int round = 0; round < kRounds && verdict.status == Status::kPass; ++round) {
    std::vector<void*> requests(kComms, nullptr);
    for (int i = 0; i < kComms && verdict.status == Status::kPass; ++i) {
      void* data = buffers[i].data();
      size_t size = capacity;
      int tag = 1;  // the same on every connection, as tags repeat across NCCL's connections
      if (ncclResult_t posted = postRecv(c, recvComms[i], 1, &data, &size, &tag, &mhandles[i], &requests[i]);
          posted != ncclSuccess)
        verdict = fail("irecv on connection %d, round %d: %s", i, round, postText(posted).c_str());
    }
    for (int i = 0; i < kComms && verdict.status == Status::kPass; ++i) {
      int size = -1;
      ncclResult_t result = waitDone(c, requests[i], &size, 10);
      if (result != ncclSuccess) {
        verdict = fail("connection %d, round %d: %s", i, round,
                       result == kDeadline ? "nothing arrived within 10 s" : waitText(result, 10).c_str());
      } else if (size != static_cast<int>(sizeOf(i, round)) || firstMismatch(buffers[i], size, seedOf(i, round)) >= 0) {
        // Whose message it was, when it was another connection's: the evidence of crossed connections.
        std::string whose;
        for (int j = 0; j < kComms && whose.empty(); ++j)
          for (int r = 0; r < kRounds && whose.empty(); ++r)
            if (size == static_cast<int>(sizeOf(j, r)) && firstMismatch(buffers[i], size, seedOf(j, r)) < 0)
              whose = ": it was connection " + std::to_string(j) + "'s message of round " + std::to_string(r);
        verdict = fail("connection %d, round %d: %s%s", i, round,
                       receivedWrong(buffers[i], size, sizeOf(i, round), seedOf(i, round)).c_str(), whose.c_str());
      }
    }
  }
  (void)!write(checkedPipe[1], "c", 1);
  // Failed already: the peer may be waiting in a connect the receiver no longer accepts; its verdict is not needed.
  int code = peer > 0 ? waitPeer(peer, verdict.status == Status::kPass ? 30 : 1) : 0;
  close(checkedPipe[1]);
  closeAll();
  if (verdict.status != Status::kPass) return withPeerFailure(verdict, code);
  if (code != 0) return fail("%s", peerText(code).c_str());
  return pass(std::to_string(kComms) + " connections between the same two processes (maxComms " +
              std::to_string(c.props.maxComms) + "), " + std::to_string(kRounds) + " rounds of one message each " +
              "posted on all at once: every message arrived on its own connection, sizes and bytes right");
}

// ---- comms-on-threads: each comm driven from a thread of its own ---------------------------------------------------
// NCCL has one proxy thread per GPU, each driving its own connections, and all of them share the process's one
// plugin instance; buffers are registered from yet another thread while they run. CALL's watchdog (alarm and
// gCurrentCall) is one per process, so the threads here watch their own calls: each publishes its call and deadline,
// and a watchdog thread ends the process, naming the thread's comm and call, when one overruns.
// Mostly small messages (many calls, so many chances for a race), every 16th up to 64 KiB.
constexpr int kThreadComms = 4, kThreadInFlight = 4;
int gThreadMessages = 30000;  // --thread-messages
constexpr size_t kThreadCapacity = 65536;
constexpr const char* kThreadsNote = "4 comms driven from 4 threads";
// The cause this rule looks for, where a failure does not name it: none once a basic rule failed earlier in the run,
// whose bug then fails this rule too (ownHintsApply).
const char* sharedStateHint() {
  return ownHintsApply() ? "; if the one-thread rules pass, state shared across comms without a lock?" : "";
}
const char* setupStateHint() {
  return ownHintsApply() ? "; if it fails only here, connection set-up state shared without a lock?" : "";
}
size_t threadMessageSize(int comm, int message) {
  size_t mix = 31 * static_cast<size_t>(message) + 977 * static_cast<size_t>(comm);
  return 1 + (message % 16 == 15 ? mix * 97 % kThreadCapacity : mix % 4096);
}
uint64_t threadMessageSeed(int comm, int message) {
  return 1000003ull * static_cast<uint64_t>(comm + 1) + static_cast<uint64_t>(message);
}

struct ThreadCall {
  std::string who;                         // "comm 2", "comm 0's registration thread"
  std::atomic<const char*> call{nullptr};  // a string literal
  std::atomic<int64_t> deadline{0};        // steady-clock nanoseconds; 0 while no call is in progress
};

int64_t steadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

template <class Call>
ncclResult_t watchedCall(ThreadCall& watch, const char* name, Call&& call) {
  watch.call = name;
  watch.deadline = steadyNanos() + int64_t{gCallTimeout} * 1000000000;
  noteCall(name, true);
  ncclResult_t result = call();
  noteCall(name, false);  // the process's note is its last call on any thread: "still running" only while it runs
  watch.deadline = 0;
  return result;
}

// Ends the process when a thread's call overruns: writes `prefix` + evidence to `fd` and exits 3 (as onAlarm does).
class ThreadWatchdog {
 public:
  ThreadWatchdog(std::vector<std::unique_ptr<ThreadCall>>& watches, int fd, const char* prefix)
      : watches_(watches), fd_(fd), prefix_(prefix), thread_([this] { run(); }) {}
  ~ThreadWatchdog() {
    stop_ = true;
    thread_.join();
  }

 private:
  void run() {
    while (!stop_) {
      usleep(20000);
      int64_t now = steadyNanos();
      for (auto& watch : watches_) {
        int64_t deadline = watch->deadline;
        if (deadline == 0 || now <= deadline) continue;
        char text[384];
        int n = std::snprintf(text, sizeof(text), "%s%s: %s did not return within %d s (%s; a blocking call)", prefix_,
                              watch->who.c_str(), watch->call.load(), gCallTimeout, kThreadsNote);
        if (fd_ >= 0 && n > 0) (void)!write(fd_, text, std::min(static_cast<size_t>(n), sizeof(text) - 1));
        harnessExit(3);
      }
    }
  }
  std::vector<std::unique_ptr<ThreadCall>>& watches_;
  int fd_;
  const char* prefix_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The first failure any thread reports; the others stop at their next step.
struct ThreadFailure {
  std::mutex mutex;
  std::string text;
  std::atomic<bool> stop{false};
  void report(const char* format, ...) __attribute__((format(printf, 2, 3))) {
    char buffer[512];
    va_list args;
    va_start(args, format);
    std::vsnprintf(buffer, sizeof(buffer), format, args);
    va_end(args);
    std::lock_guard<std::mutex> lock(mutex);
    if (text.empty()) text = buffer;
    stop = true;
  }
};

// How far a receiving thread got, read by the rule's main thread: a run that takes too long says whether traffic
// stopped or crawled (retransmissions, a starved progress path), which "hung" alone cannot tell.
struct ThreadProgress {
  std::atomic<int> completed{0};
  std::atomic<int64_t> longestWaitNanos{0};  // from a receive's post to the test that completed it
  std::atomic<int> longestWaitMessage{-1};
};

// Drives one comm from the calling thread: posts every message (isend, or a 1-buffer irecv of kThreadCapacity),
// kThreadInFlight at once, and checks each completion's size (and, receiving, its bytes). `progress` (receiving
// only, else nullptr) counts the completions.
void driveCommOnThread(Net* net, void* comm, int index, bool sending, ThreadCall& watch, ThreadFailure& failure,
                       ThreadProgress* progress) {
  std::vector<std::vector<unsigned char>> buffers(kThreadInFlight, std::vector<unsigned char>(kThreadCapacity));
  std::vector<void*> mhandles(kThreadInFlight, nullptr);
  for (int slot = 0; slot < kThreadInFlight; ++slot) {  // from this thread, as NCCL's proxy threads register
    ncclResult_t result = watchedCall(watch, "regMr", [&] {
      return net->regMr(comm, buffers[slot].data(), kThreadCapacity, NCCL_PTR_HOST, &mhandles[slot]);
    });
    if (result != ncclSuccess)
      return failure.report("comm %d: regMr of buffer %d returned %s (%s)", index, slot, resultText(result).c_str(),
                            kThreadsNote);
    rememberRegistration(comm, mhandles[slot]);  // deregistered when the comm closes
  }
  std::vector<void*> requests(kThreadInFlight, nullptr);
  std::vector<int64_t> posted(kThreadInFlight, 0);
  const char* testName = sending ? "test (isend)" : "test (irecv)";
  for (int i = 0; i < gThreadMessages + kThreadInFlight && !failure.stop; ++i) {
    int slot = i % kThreadInFlight;
    if (requests[slot] != nullptr) {
      int message = i - kThreadInFlight;
      size_t expected = threadMessageSize(index, message);
      auto deadline = Clock::now() + std::chrono::seconds(15);
      int done = 0, size = -1;
      while (!done && !failure.stop) {
        ncclResult_t result =
            watchedCall(watch, testName, [&] { return testSizes(*net, requests[slot], &done, &size); });
        if (result != ncclSuccess)
          return failure.report("comm %d message %d (%zu B): %s returned %s (%s%s)", index, message, expected, testName,
                                resultText(result).c_str(), kThreadsNote, sharedStateHint());
        if (done) break;
        if (Clock::now() > deadline)
          return failure.report("comm %d message %d (%zu B): %s still said 'not done' after 15 s (%s)", index, message,
                                expected, testName, kThreadsNote);
        std::this_thread::yield();
      }
      if (failure.stop) return;
      // A receive reported at its posted size is a plain transfer's bug (sizeWrongText), not state crossed.
      const bool postedSize = !sending && size == static_cast<int>(kThreadCapacity) && expected != kThreadCapacity;
      if (sending ? sentSizeWrong(size, expected) : size != static_cast<int>(expected))
        return failure.report("comm %d message %d: %s reported %d bytes, %zu were sent (%s%s)", index, message,
                              testName, size, expected, kThreadsNote,
                              postedSize ? "; the posted size, not the received one?" : sharedStateHint());
      if (progress != nullptr) {
        int64_t waited = steadyNanos() - posted[slot];
        if (waited > progress->longestWaitNanos) {
          progress->longestWaitNanos = waited;
          progress->longestWaitMessage = message;
        }
      }
      if (!sending) {
        long bad = firstMismatch(buffers[slot], expected, threadMessageSeed(index, message));
        if (bad >= 0) {
          // Another comm's message of about the same time, when it was one: the evidence of crossed state.
          std::string whose;
          for (int other = 0; other < kThreadComms && whose.empty(); ++other)
            for (int m = std::max(0, message - 64); m < message + 64 && m < gThreadMessages && whose.empty(); ++m)
              if (other != index && threadMessageSize(other, m) >= expected &&
                  firstMismatch(buffers[slot], expected, threadMessageSeed(other, m)) < 0)
                whose = ", the bytes of comm " + std::to_string(other) + "'s message " + std::to_string(m);
          return failure.report("comm %d message %d (%zu B): wrong byte at offset %ld%s (%s%s)", index, message,
                                expected, bad, whose.c_str(), kThreadsNote, sharedStateHint());
        }
      }
      requests[slot] = nullptr;
      if (progress != nullptr) ++progress->completed;
    }
    if (i >= gThreadMessages) continue;
    size_t size = threadMessageSize(index, i);
    auto deadline = Clock::now() + std::chrono::seconds(15);
    if (sending) fill(buffers[slot], size, threadMessageSeed(index, i));
    while (requests[slot] == nullptr && !failure.stop) {
      ncclResult_t result;
      if (sending) {
        result = watchedCall(watch, "isend", [&] {
          return isendNoted(*net, comm, buffers[slot].data(), size, 1, mhandles[slot], &requests[slot]);
        });
      } else {
        void* data = buffers[slot].data();
        size_t capacity = kThreadCapacity;
        int tag = 1;
        result = watchedCall(watch, "irecv", [&] {
          return irecvChecked(*net, comm, 1, &data, &capacity, &tag, &mhandles[slot], &requests[slot]);
        });
      }
      if (result != ncclSuccess)
        return failure.report("comm %d message %d: %s returned %s (%s)", index, i, sending ? "isend" : "irecv",
                              resultText(result).c_str(), kThreadsNote);
      if (requests[slot] == nullptr && Clock::now() > deadline)
        return failure.report("comm %d message %d: %s still gave a NULL request after 15 s (%s)", index, i,
                              sending ? "isend" : "irecv", kThreadsNote);
      if (requests[slot] == nullptr) std::this_thread::yield();
    }
    posted[slot] = steadyNanos();
  }
}

// Makes comm `index` from the calling thread, as NCCL's proxy threads make their connections at the same time: connect
// to `handle` (sending) or accept on `listenComm`, retried until a comm comes, an error, or 20 s. nullptr on failure
// (reported).
void* openCommOnThread(const Context& c, int index, bool sending, void* handle, void* listenComm, ThreadCall& watch,
                       ThreadFailure& failure) {
  void* comm = nullptr;
  for (auto deadline = Clock::now() + std::chrono::seconds(20); comm == nullptr && !failure.stop;) {
    ncclResult_t result =
        sending ? watchedCall(watch, "connect",
                              [&] { return c.net->connect(c.ctx, c.dev, handle, &comm, deviceHandleSlot()); })
                : watchedCall(watch, "accept", [&] { return c.net->accept(listenComm, &comm, deviceHandleSlot()); });
    if (result != ncclSuccess) {
      failure.report("comm %d: %s returned %s (%s%s)", index, sending ? "connect" : "accept",
                     resultText(result).c_str(), kThreadsNote, setupStateHint());
      return nullptr;
    }
    if (comm == nullptr && Clock::now() > deadline) {
      failure.report("comm %d: %s gave no comm within 20 s (%s)", index, sending ? "connect" : "accept", kThreadsNote);
      return nullptr;
    }
    if (comm == nullptr) std::this_thread::yield();
  }
  return comm;
}

// Registers and deregisters a private buffer on `comm` until `stop`, as NCCL's user thread registers buffers while the
// proxy threads run. Returns the number of pairs.
long registerOnThread(Net* net, void* comm, ThreadCall& watch, ThreadFailure& failure, std::atomic<bool>& stop) {
  std::vector<unsigned char> buffer(65536);
  long pairs = 0;
  while (!stop && !failure.stop) {
    void* mhandle = nullptr;
    ncclResult_t result = watchedCall(
        watch, "regMr", [&] { return net->regMr(comm, buffer.data(), buffer.size(), NCCL_PTR_HOST, &mhandle); });
    if (result != ncclSuccess) {
      failure.report("comm 0's registration thread: regMr %ld returned %s while the comms ran (%s)", pairs,
                     resultText(result).c_str(), kThreadsNote);
      break;
    }
    result = watchedCall(watch, "deregMr", [&] { return net->deregMr(comm, mhandle); });
    if (result != ncclSuccess) {
      failure.report("comm 0's registration thread: deregMr %ld returned %s while the comms ran (%s)", pairs,
                     resultText(result).c_str(), kThreadsNote);
      break;
    }
    ++pairs;
    usleep(200);
  }
  return pairs;
}

std::vector<std::unique_ptr<ThreadCall>> threadWatches() {
  std::vector<std::unique_ptr<ThreadCall>> watches;
  for (int i = 0; i <= kThreadComms; ++i) {
    watches.push_back(std::make_unique<ThreadCall>());
    watches.back()->who = i < kThreadComms ? "comm " + std::to_string(i) : "comm 0's registration thread";
  }
  return watches;
}

// A verdict written at once, without the rule's usual cleanup: after a failure here threads may have left the
// plugin's state broken, and closing comms or finalize could then hang or crash over the evidence.
[[noreturn]] void verdictNow(const Verdict& given) {
  Verdict v = sizedVerdict(given);
  if (v.status == Status::kPass && !gLeftOut.empty()) v.evidence += " (" + gLeftOut + ")";
  std::string text = std::string(statusText(v.status)) + "|" + v.evidence;
  (void)!write(gResultFd, text.data(), text.size());
  _exit(0);
}

// A run about to overrun the rule's time: how far the receiving threads got, and the longest wait for one message.
std::string slowText(const std::array<ThreadProgress, kThreadComms>& progress, int64_t seconds) {
  std::string counts;
  int slowest = 0;
  for (int i = 0; i < kThreadComms; ++i) {
    counts += (i ? ", " : "") + std::to_string(progress[static_cast<size_t>(i)].completed.load());
    if (progress[static_cast<size_t>(i)].longestWaitNanos > progress[static_cast<size_t>(slowest)].longestWaitNanos)
      slowest = i;
  }
  const ThreadProgress& worst = progress[static_cast<size_t>(slowest)];
  char text[400];
  std::snprintf(text, sizeof(text),
                "too slow: after %lld s the receiving threads had completed %s of %d messages each; the longest any "
                "completed receive waited was %.2f s (comm %d message %d) (%s)",
                static_cast<long long>(seconds), counts.c_str(), gThreadMessages, worst.longestWaitNanos / 1e9, slowest,
                worst.longestWaitMessage.load(), kThreadsNote);
  return text;
}

Verdict commsOnThreads(Context& c) {
  const int64_t started = steadyNanos();
  std::vector<std::array<unsigned char, NCCL_NET_HANDLE_MAXSIZE>> handles(kThreadComms);
  std::vector<void*> listenComms(kThreadComms, nullptr), recvComms(kThreadComms, nullptr);
  auto closeAll = [&]() {
    for (void* comm : recvComms)
      if (comm != nullptr) closeRecvComm(c, comm);
    for (void* comm : listenComms)
      if (comm != nullptr) CALL("closeListen", c.net->closeListen(comm));
  };
  for (int i = 0; i < kThreadComms; ++i)
    if (ncclResult_t result = CALL("listen", c.net->listen(c.ctx, c.dev, handles[i].data(), &listenComms[i]));
        result != ncclSuccess) {
      closeAll();
      return fail("listen %d of %d returned %s", i + 1, kThreadComms, resultText(result).c_str());
    }
  int checkedPipe[2], reportPipe[2];
  if (pipe(checkedPipe) != 0) return fail("pipe failed");
  if (pipe(reportPipe) != 0) return fail("pipe failed");
  // The peer: connects every comm from its main thread, then sends on each from a thread of its own. What went
  // wrong on its side comes back as text through reportPipe.
  pid_t peer = startPeer(c, [&]() {
    close(checkedPipe[1]);
    close(reportPipe[0]);
    std::vector<void*> sendComms(kThreadComms, nullptr);
    auto watches = threadWatches();
    ThreadFailure failure;
    std::atomic<bool> sendersDone{false};
    std::atomic<bool> firstConnected{false};
    {
      ThreadWatchdog watchdog(watches, reportPipe[1], "peer (sender), ");
      std::vector<std::thread> threads;
      for (int i = 0; i < kThreadComms; ++i)
        threads.emplace_back([&, i] {
          sendComms[i] = openCommOnThread(c, i, true, handles[i].data(), nullptr, *watches[i], failure);
          if (i == 0) firstConnected = true;
          if (sendComms[i] != nullptr) driveCommOnThread(c.net, sendComms[i], i, true, *watches[i], failure, nullptr);
        });
      std::thread registrar([&] {
        while (!firstConnected) usleep(1000);  // comm 0 made (or failed): thread 0 always gets there
        if (sendComms[0] != nullptr)
          registerOnThread(c.net, sendComms[0], *watches[kThreadComms], failure, sendersDone);
      });
      for (auto& thread : threads) thread.join();
      sendersDone = true;
      registrar.join();
    }
    if (!failure.text.empty()) {
      std::string text = "peer (sender), " + failure.text;
      (void)!write(reportPipe[1], text.data(), text.size());
      return 60;
    }
    pollfd checked{checkedPipe[0], POLLIN, 0};
    poll(&checked, 1, 60000);
    for (void* comm : sendComms)
      if (comm != nullptr) closeSendComm(c, comm);
    return 0;
  });
  close(checkedPipe[0]);
  close(reportPipe[1]);
  auto peerReport = [&]() {
    std::string text;
    char buffer[512];
    pollfd ready{reportPipe[0], POLLIN, 0};
    while (poll(&ready, 1, 0) > 0) {
      ssize_t n = read(reportPipe[0], buffer, sizeof(buffer));
      if (n <= 0) break;
      text.append(buffer, static_cast<size_t>(n));
    }
    return text;
  };
  auto failNow = [&](const Verdict& v) {
    if (peer > 0) {  // -1 once reaped (kill(-1) would signal every process we may signal)
      kill(peer, SIGKILL);
      waitpid(peer, nullptr, 0);
    }
    verdictNow(v);
  };
  auto watches = threadWatches();
  ThreadFailure failure;
  std::array<ThreadProgress, kThreadComms> progress;
  std::atomic<bool> receiversDone{false};
  std::atomic<int> finished{0};
  long registrations = 0;
  int peerCode = -1;
  {
    ThreadWatchdog watchdog(watches, gResultFd, "FAIL|");
    std::vector<std::thread> threads;
    std::atomic<bool> firstAccepted{false};
    for (int i = 0; i < kThreadComms; ++i)
      threads.emplace_back([&, i] {
        recvComms[i] = openCommOnThread(c, i, false, nullptr, listenComms[i], *watches[i], failure);
        if (i == 0) firstAccepted = true;
        if (recvComms[i] != nullptr)
          driveCommOnThread(c.net, recvComms[i], i, false, *watches[i], failure, &progress[i]);
        ++finished;
      });
    std::thread registrar([&] {
      while (!firstAccepted) usleep(1000);  // comm 0 made (or failed): thread 0 always gets there
      if (recvComms[0] != nullptr)
        registrations = registerOnThread(c.net, recvComms[0], *watches[kThreadComms], failure, receiversDone);
    });
    // Meanwhile: a peer that failed or died ends the run with its evidence, and so does a run about to overrun the
    // rule's time, with how far each comm got (the harness's "hung" would say nothing of it).
    const int64_t giveUp = started + int64_t{std::max(1, gRuleSeconds - std::max(3, gRuleSeconds / 10))} * 1000000000;
    while (finished < kThreadComms && !failure.stop) {
      usleep(5000);
      if (steadyNanos() > giveUp) {
        failure.report("%s", slowText(progress, (steadyNanos() - started) / 1000000000).c_str());
        break;
      }
      int status = 0;
      if (peer > 0 && waitpid(peer, &status, WNOHANG) == peer) {
        peer = -1;
        peerCode = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
        if (peerCode != 0) {
          std::string report = peerReport();
          failure.report("%s", report.empty() ? peerText(peerCode).c_str() : report.c_str());
        }
      }
    }
    receiversDone = true;
    for (auto& thread : threads) thread.join();
    registrar.join();
  }
  if (!failure.text.empty()) failNow(fail("%s", failure.text.c_str()));
  (void)!write(checkedPipe[1], "c", 1);
  if (peer > 0) peerCode = waitPeer(peer, 30);
  close(checkedPipe[1]);
  std::string report = peerReport();
  close(reportPipe[0]);
  closeAll();
  if (peerCode != 0) return fail("%s", report.empty() ? peerText(peerCode).c_str() : report.c_str());
  char text[320];
  std::snprintf(text, sizeof(text),
                "%d comms, each driven from its own thread on both sides: %d messages each (1 B..64 KiB, %d in "
                "flight), sizes and bytes right, with %ld regMr/deregMr pairs on comm 0 from a fifth thread",
                kThreadComms, gThreadMessages, kThreadInFlight, registrations);
  return pass(text);
}

Verdict everyDeviceMovesData(Context& c) {
  // NCCL uses every NIC the plugin lists (one per GPU or rail), each through its own listen/connect/accept; the
  // other rules use device 0 only. Per device: a small and a 70 KB message, sizes and bytes checked.
  int ndev = 0;
  if (ncclResult_t result = CALL("devices", c.net->devices(&ndev)); result != ncclSuccess)
    return fail("devices returned %s", resultText(result).c_str());
  if (ndev <= 0) return fail("devices gave %d", ndev);
  std::string names;
  for (int dev = 0; dev < ndev; ++dev) {
    Context onDevice{c.net, c.ctx, dev, {}};
    if (ncclResult_t result = CALL("getProperties", c.net->getProperties(dev, &onDevice.props)); result != ncclSuccess)
      return fail("device %d: getProperties returned %s", dev, resultText(result).c_str());
    std::string name = core::printable(onDevice.props.name);
    DeviceLimit limit(onDevice.props.maxP2pBytes);
    Verdict v = transferChecked(
        onDevice, {{3, 0x5100 + static_cast<uint64_t>(dev)}, {70000, 0x5200 + static_cast<uint64_t>(dev)}}, 70000);
    if (v.status != Status::kPass) return fail("device %d (%s) of %d: %s", dev, name.c_str(), ndev, v.evidence.c_str());
    names += (dev ? ", " : "") + std::to_string(dev) + " (" + name + ")";
  }
  return pass("listen/connect/accept and 2 checked messages (3 B, 70000 B) on every device: " + names);
}

// "0+1": a vNIC's device list.
std::string deviceListText(int n, const int* devs) {
  std::string text;
  for (int i = 0; i < n; ++i) {
    if (i > 0) text += '+';  // piece by piece: GCC 12 at -O3 reports a false -Wrestrict on "+" + std::to_string()
    text += std::to_string(devs[i]);
  }
  return text.empty() ? "none" : text;
}

Verdict virtualDevices(Context& c) {
  // NCCL (2.23+, ncclNet_v9+) fuses the ports of one NIC into a vNIC with makeVDevice, then counts the devices
  // devices() lists beyond the physical ones as its vNICs, reads each one's properties (vProps names the physical
  // devices, from whose places in the topology it places the vNIC; the name keys it in the topology XML) and uses only
  // the vNICs from then on. Fused here: devices 0 and 1, or device 0 alone where there is one, to check the data
  // path of a vNIC on a one-NIC host (NCCL itself never makes a vNIC of one device: its ncclTopoMakeVnic skips size 1,
  // forced merges too; a plugin may refuse it, then the rule is skipped).
  if (!c.net->hasMakeVDevice())
    return skip(c.net->version() < 9
                    ? "ncclNet_v" + std::to_string(c.net->version()) + " has no makeVDevice (NIC fusion came with v9)"
                    : "makeVDevice is NULL: NCCL uses the devices as listed and fuses none");
  int before = 0;
  if (ncclResult_t result = CALL("devices", c.net->devices(&before)); result != ncclSuccess)
    return fail("devices returned %s", resultText(result).c_str());
  if (before <= 0) return fail("devices gave %d", before);
  // Each device's name (copied: properties-sane judges the pointers) and speed.
  std::vector<std::pair<std::string, int>> physical;
  for (int dev = 0; dev < before; ++dev) {
    ncclNetProperties_v12_t p;
    if (ncclResult_t result = CALL("getProperties", c.net->getProperties(dev, &p)); result != ncclSuccess)
      return fail("getProperties(%d) returned %s", dev, resultText(result).c_str());
    physical.emplace_back(core::printable(p.name), p.speed);
  }

  // What no vNIC can be made of must be refused, and leave the device list as it was: an index read unchecked
  // from devs[] is a read past the plugin's device table.
  struct Refusal {
    const char* what;
    ncclNetVDeviceProps_v12_t props;
  };
  ncclNetVDeviceProps_v12_t none{}, missing{};
  missing.ndevs = 1;
  missing.devs[0] = before + 7;
  const Refusal refusals[] = {{"no devices (ndevs 0)", none}, {"a device that does not exist", missing}};
  for (const Refusal& refusal : refusals) {
    ExpectedRefusals expected;
    ncclNetVDeviceProps_v12_t props = refusal.props;
    int made = -1;
    if (ncclResult_t result = CALL("makeVDevice", c.net->makeVDevice(&made, &props)); result == ncclSuccess)
      return fail(
          "makeVDevice of %s (devs {%s}, %d device(s) listed) succeeded and gave device %d: it must return an "
          "error",
          refusal.what, deviceListText(refusal.props.ndevs, refusal.props.devs).c_str(), before, made);
  }
  int now = 0;
  if (ncclResult_t result = CALL("devices", c.net->devices(&now)); result != ncclSuccess)
    return fail("devices returned %s", resultText(result).c_str());
  if (now != before)
    return fail("devices() lists %d after two refused makeVDevice calls, %d before: a refused vNIC must not be counted",
                now, before);

  ncclNetVDeviceProps_v12_t wanted{};
  wanted.ndevs = before >= 2 ? 2 : 1;
  for (int i = 0; i < wanted.ndevs; ++i) wanted.devs[i] = i;
  const std::string parts = deviceListText(wanted.ndevs, wanted.devs);
  ncclNetVDeviceProps_v12_t props = wanted;
  int vdev = -1;
  if (ncclResult_t result = CALL("makeVDevice", c.net->makeVDevice(&vdev, &props)); result != ncclSuccess) {
    if (wanted.ndevs == 1)
      return skip("one device, and makeVDevice of it alone returned " + resultText(result) +
                  " (NCCL makes vNICs of two devices or more only)");
    // NCCL's automatic fusion (ncclTopoAutoMerge, 2.30) takes a refusal as "these cannot be fused": it marks the two
    // as apart and goes on with them as separate NICs (NCCL_NET_FORCE_MERGE naming them fails the communicator).
    // ncclInvalidUsage is the refusal NCCL's IB plugin gives (ports of another link layer, NCCL_IB_MERGE_NICS=0):
    // not applicable here, once the refused vNIC is not counted. Any other code says the plugin broke and fails.
    if (result == ncclInvalidUsage) {
      int after = 0;
      if (ncclResult_t listed = CALL("devices", c.net->devices(&after)); listed != ncclSuccess)
        return fail("devices returned %s after makeVDevice refused devices %s", resultText(listed).c_str(),
                    parts.c_str());
      if (after != before)
        return fail(
            "devices() lists %d after makeVDevice of devices %s was refused, %d before: a refused vNIC must not "
            "be counted",
            after, parts.c_str(), before);
      return skip("makeVDevice of devices " + parts + " returned " + resultText(result) +
                  ": the plugin will not fuse them, and NCCL then uses them as separate NICs (refusals of no devices "
                  "and of a missing one checked; no vNIC's data path to check)");
    }
    return fail(
        "makeVDevice of devices %s returned %s (a refusal is ncclInvalidUsage, which NCCL takes as 'these "
        "cannot be fused')",
        parts.c_str(), resultText(result).c_str());
  }
  if (ncclResult_t result = CALL("devices", c.net->devices(&now)); result != ncclSuccess)
    return fail("devices returned %s after makeVDevice", resultText(result).c_str());
  if (now != before + 1)
    return fail(
        "devices() lists %d after makeVDevice made device %d, %d before: NCCL counts the devices listed beyond "
        "the physical ones as its vNICs, so it %s",
        now, vdev, before, now == before ? "never sees this one" : "looks for vNICs that were never made");
  if (vdev != before)
    return fail(
        "makeVDevice gave device %d; the new device is %d (the one after the %d listed), where NCCL looks for "
        "it",
        vdev, before, before);

  ncclNetProperties_v12_t p;
  if (ncclResult_t result = CALL("getProperties", c.net->getProperties(vdev, &p)); result != ncclSuccess)
    return fail("getProperties(%d) of the vNIC returned %s", vdev, resultText(result).c_str());
  if (Verdict sane = deviceSane(vdev, p); sane.status != Status::kPass) return fail("vNIC: %s", sane.evidence.c_str());
  std::vector<int> listed(p.vProps.devs, p.vProps.devs + std::clamp(p.vProps.ndevs, 0, NCCL_NET_MAX_DEVS_PER_NIC));
  std::vector<int> fused(wanted.devs, wanted.devs + wanted.ndevs);
  std::sort(listed.begin(), listed.end());
  if (listed != fused)
    return fail("vNIC %d (devices %s) lists devices {%s} in vProps: NCCL places a vNIC by the devices vProps names",
                vdev, parts.c_str(), deviceListText(p.vProps.ndevs, p.vProps.devs).c_str());
  const std::string name = core::printable(p.name);
  int fastest = 0;
  long long total = 0;
  for (int dev = 0; dev < before; ++dev) {
    const auto& [partName, partSpeed] = physical[static_cast<size_t>(dev)];
    const bool member = std::find(fused.begin(), fused.end(), dev) != fused.end();
    if (member) fastest = std::max(fastest, partSpeed), total += partSpeed;
    // A vNIC of one device may keep that device's name (it replaces it); otherwise one name would key two NICs.
    if (name == partName && !(member && wanted.ndevs == 1))
      return fail(
          "vNIC %d is named \"%s\", as device %d is: NCCL keys NICs by name in its topology and would take "
          "one for the other",
          vdev, name.c_str(), dev);
  }
  if (p.speed < fastest)
    return fail("vNIC %d reports %d Mbps, less than its fastest device's %d: NCCL would rate it below a part of it",
                vdev, p.speed, fastest);

  // The data path, with a message large enough to be split over the parts where a plugin stripes.
  gMadeVirtualDevice = true;
  gVirtualDevice = wanted;
  Context onVnic{c.net, c.ctx, vdev, p};
  const size_t large = std::min<size_t>(1 << 20, p.maxP2pBytes);
  DeviceLimit limit(p.maxP2pBytes);
  Verdict v = transferChecked(onVnic, {{3, 0x7100}, {70000, 0x7200}, {large, 0x7300}}, large);
  if (v.status != Status::kPass) return fail("vNIC %d (%s): %s", vdev, name.c_str(), v.evidence.c_str());
  char text[400];
  std::snprintf(
      text, sizeof(text),
      "makeVDevice refused no devices and a missing one; vNIC %d = devices %s (%s, %d Mbps against %lld for its parts, "
      "vProps {%s}) counted by devices() and moved 3 checked messages (3 B, 70000 B, %zu B)",
      vdev, parts.c_str(), name.c_str(), p.speed, total, deviceListText(p.vProps.ndevs, p.vProps.devs).c_str(), large);
  return pass(text);
}

Verdict handleIsSelfContained(Context& c) {
  // Every other rule's peer (without --netns) is forked from the rule process after its listen and so shares the
  // listener's plugin state: a handle that only names something of the listener's process (a pointer, a slot in a
  // table of its own) connects there, and from no other process. NCCL ships the handle to another process, usually
  // on another host. Here the connector is a second instance of the plugin (a copy of its file, opened afresh), which
  // shares nothing with the listener but the handle's bytes.
  if (gPeerLibrary.empty())
    return skip("no copy of the plugin could be made to open as a second instance (the run's first lines say why)");
  gFreshPeer = true;
  Verdict v = transferChecked(c, {{3, 0x5300}, {70000, 0x5301}}, 70000);
  gFreshPeer = false;
  // A copy that does not open is the harness's limit, not the plugin's handle (--netns has the same limit).
  if (v.status != Status::kPass && v.evidence.find(kCopyDidNotOpen) != std::string::npos)
    return skip("no second instance to connect from: " + v.evidence);
  if (v.status != Status::kPass)
    return fail(
        "with a second instance of the plugin connecting (it shares nothing with the listener but the "
        "handle): %s",
        v.evidence.c_str());
  return pass(
      "a second instance of the plugin (a copy of its file) connected with the handle alone and moved 2 checked "
      "messages (3 B, 70000 B)");
}

Verdict foreignHandleIsAnError(Context& c) {
  // Ranks that loaded different plugins, or versions of one, exchange handles the other cannot read, and NCCL hands
  // them to connect as they are. The plainest foreign handle, 128 zero bytes (no magic, no address; a plugin keeping
  // connect state in the handle finds it empty, as after its own listen), must give an error promptly: never a
  // comm, a crash, or "not yet" until a long connect timeout runs out.
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* sendComm = nullptr;
  ncclResult_t result = ncclSuccess;
  const auto start = Clock::now();
  int calls = 0;
  ExpectedRefusals expected;
  while (Clock::now() - start < std::chrono::seconds(10)) {
    ++calls;
    result = CALL("connect", c.net->connect(c.ctx, c.dev, handle, &sendComm, deviceHandleSlot()));
    if (result != ncclSuccess || sendComm != nullptr) break;
    usleep(1000);
  }
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  if (sendComm != nullptr) {
    closeSendComm(c, sendComm);
    return fail("connect with a handle of 128 zero bytes returned a comm after %d call(s)", calls);
  }
  if (result == ncclSuccess)
    return fail(
        "connect with a handle of 128 zero bytes still answered 'not yet' after 10 s (%d calls): the handle "
        "is not checked, and NCCL would wait out the plugin's connect timeout",
        calls);
  char text[160];
  std::snprintf(text, sizeof(text), "a handle of 128 zero bytes: connect returned error %s after %d call(s), %.1f ms",
                resultText(result).c_str(), calls, ms);
  return pass(text);
}

Verdict strangersAreDropped(Context& c) {
  // Before the real sender: on each TCP port the plugin's listen opened in this process, 4 KiB of garbage, 5 bytes
  // and a hang-up, and a connection that says nothing. accept must go on returning success, with no comm, until the
  // real sender is in.
  const auto before = listeningSockets();
  size_t ports = 0;
  std::vector<int> garbage, silent;
  bool connected = true;
  auto strangers = [&]() {
    auto ours = listeningSockets();
    for (const auto& entry : before) ours.erase(entry.first);
    ports = ours.size();
    for (const auto& entry : ours) {
      Strangers on;
      connected = sendStrangers(entry.second, 4096, &on) && connected;
      if (on.garbage >= 0) garbage.push_back(on.garbage);
      if (on.silent >= 0) silent.push_back(on.silent);
    }
  };
  const auto start = Clock::now();
  Verdict v = transferChecked(c, {{4096, 7}, {100000, 8}}, 100000, strangers);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  size_t dropped = 0;
  for (int fd : garbage) dropped += closedByPeer(fd, std::chrono::milliseconds(200)) ? 1 : 0;
  for (int fd : garbage) close(fd);
  for (int fd : silent) close(fd);
  // With no port, no stranger was sent: a failed transfer is then the plugin's own, not the strangers' doing.
  if (ports == 0 && v.status != Status::kPass)
    return fail("%s (listen opened no TCP listening socket here, so no stranger was sent)", v.evidence.c_str());
  if (v.status != Status::kPass)
    return fail("with garbage, a truncated hello and a silent connection on each of its %zu TCP listening port(s): %s",
                ports, v.evidence.c_str());
  if (ports == 0) return skip("listen opened no TCP listening socket in this process: nothing for a stranger to reach");
  if (!connected) return fail("could not connect to (or write to) the %zu TCP port(s) listen opened", ports);
  char text[320];
  std::snprintf(text, sizeof(text),
                "%zu TCP listening port(s), each with garbage, a truncated hello and a silent stranger: the sender "
                "got through and its 2 messages arrived in %.2f s; %zu of %zu garbage connection(s) closed by the "
                "plugin",
                ports, seconds, dropped, garbage.size());
  return pass(text);
}

// ---- the collNet rules (collnet_rules.cc), on the collNet of the library the net came from ------------------------
collnet::Settings collNetSettings() {
  collnet::Settings settings;
  settings.ranks = gCollRanks;
  settings.callTimeout = gCallTimeout;
  settings.ruleSeconds = gRuleSeconds;
  settings.peerDeathSeconds = gPeerDeathSeconds;
  return settings;
}
template <collnet::Outcome (*Check)(const core::Net&, const collnet::Settings&)>
Verdict collNetRule(Context& c) {
  collnet::Outcome outcome = Check(*c.net, collNetSettings());
  return {outcome.status, outcome.evidence};
}

struct Rule {
  RuleInfo info;
  Verdict (*run)(Context&);
};

const std::vector<Rule>& rules() {
  static const std::vector<Rule> list{
      {{"properties-sane",
        "every device's properties are values NCCL accepts (unique printable name, /sys pciPath, speed, "
        "HOST pointers, maxP2pBytes in (0, 1 TiB], device type)"},
       propertiesSane},
      {{"listen-handle-fits", "listen writes at most NCCL_NET_HANDLE_MAXSIZE (128) bytes of handle"}, listenHandleFits},
      {{"connect-is-nonblocking", "connect returns promptly while the peer has not accepted"}, connectIsNonblocking},
      {{"accept-is-nonblocking", "accept returns promptly with no comm while nobody connects"}, acceptIsNonblocking},
      {{"null-request-means-retry", "a full plugin answers isend with a NULL request, and posted sends complete"},
       nullRequestMeansRetry},
      {{"test-reports-sizes", "test reports the sent size on both sides, into larger buffers"}, testReportsSizes},
      {{"multi-recv-tags", "a grouped irecv matches messages to buffers by tag"}, multiRecvTags},
      {{"grouped-zero-byte",
        "grouped receives with 0-byte entries ({0, 100, 0}, {4099, 0, 3}, {0, 0, 0}): test reports each entry's size "
        "and every buffer gets its own message"},
       groupedZeroByte},
      {{"tags-out-of-step",
        "grouped receives posted two steps ahead complete while one tag's sends run ahead of another's (NCCL's "
        "shared comms)"},
       tagsOutOfStep},
      {{"truncation-is-an-error", "a message larger than the posted buffer is an error, never a truncation"},
       truncationIsAnError},
      {{"max-requests-in-flight",
        "NCCL_NET_MAX_REQUESTS (32; 8 through ncclNet_v6) receives can be posted at once and all complete"},
       maxRequestsInFlight},
      {{"zero-byte", "0-byte messages complete with size 0"}, zeroByte},
      {{"iflush-after-receive",
        "iflush is there where device 0 needs it (forceFlush, GPU memory; regMrDmaBuf for DMABUF); when there, after "
        "a completed receive it answers a NULL request or one whose test with sizes NULL (as NCCL's) completes"},
       iflushAfterReceive},
      {{"both-directions-one-thread",
        "each side listens and connects, posts a 16 MiB isend then an irecv and drives both with test() from one "
        "thread, as NCCL's proxy does: both messages arrive whole (no send that can only finish while the other side "
        "reads it)"},
       bothDirectionsOneThread},
      {{"sends-outlive-the-sender",
        "messages whose sends completed arrive after the sender closed its comm and exited"},
       sendsOutliveTheSender},
      {{"listener-closed-after-accept",
        "a receive comm works once its listener is closed, as NCCL closes it right after accept"},
       listenerClosedAfterAccept},
      {{"optional-completion-hint",
        "v9+: irecv given NCCL's optional-completion hint (*request preset to 0x1, as before LL receives) writes "
        "*request, and the receive after it gets the next message"},
       optionalCompletionHint},
      {{"one-gib-message", "a 1 GiB message arrives whole"}, oneGibMessage},
      {{"random-sizes-integrity", "300 random-size messages arrive in order, every byte right"}, randomSizesIntegrity},
      {{"sender-may-go-idle",
        "a 64 MiB and a 100-byte message arrive whole while the sender, its sends completed, makes no more calls"},
       senderMayGoIdle},
      {{"signals-break-nothing",
        "a connection and messages of every size class while every thread of both processes catches a signal every "
        "0.2 ms (handler without SA_RESTART, as Python's): no call fails, no byte is lost"},
       signalsBreakNothing},
      {{"descriptors-close-on-exec",
        "every descriptor the plugin opens (init, listen, connect, accept, regMr, transfers) is close-on-exec: a "
        "program the process starts holds none of its connections open"},
       descriptorsCloseOnExec},
      {{"signal-handlers-untouched",
        "loading the plugin, init and transfers install no signal handler and block no signal: the application's "
        "handlers stay its own"},
       signalHandlersUntouched},
      {{"regmr-dereg-balance", "regMr/deregMr pairs do not leak"}, regmrDeregBalance},
      {{"registered-buffer-offsets",
        "sends and receives at offsets within registered buffers, with their mhandles, land at those offsets"},
       registeredBufferOffsets},
      {{"shared-registrations",
        "one buffer registered on two comms, twice on one and over an overlapping part stays usable through each "
        "registration until its own deregMr"},
       sharedRegistrations},
      {{"remapped-buffers-register-anew",
        "a buffer unmapped and mapped again at its address, then registered, is the one data moves through (no "
        "registration outlives deregMr)"},
       remappedBuffersRegisterAnew},
      {{"close-with-requests-in-flight", "closing comms with requests pending returns and does not crash"},
       closeWithRequestsInFlight},
      {{"deregmr-under-a-receive",
        "a receive whose buffer is deregistered while it is pending (NCCL's teardown after an abort) and whose "
        "message then comes completes whole, fails or stays pending: never wrong bytes, a crash or a stuck close"},
       deregmrUnderAReceive},
      {{"every-version-agrees",
        "every exported ncclNetPlugin_vN reports the same device, with properties NCCL accepts, and moves data"},
       everyVersionAgrees},
      {{"symbols-stay-private",
        "the library exports NCCL's tables and nothing else: no name the host could interpose, no GNU-unique "
        "symbol (which keeps dlclose from unloading it)"},
       symbolsStayPrivate},
      {{"peer-death-is-an-error", "a peer killed mid-transfer makes the pending test fail (within 30 s by default)"},
       peerDeathIsAnError},
      {{"receiver-death-is-an-error",
        "a receiver killed before it posted makes the pending send fail (isend or test, within 30 s by default), "
        "never 'not yet' for ever"},
       receiverDeathIsAnError},
      {{"every-call-returns", "each plugin call returns within the call timeout (a watchdog guards every rule)"},
       everyCallReturns},
      {{"many-comms-at-once",
        "min(maxComms, 64) connections between two processes, open at once and used interleaved, each carry only "
        "their own messages"},
       manyCommsAtOnce},
      {{"comms-on-threads",
        "4 connections, each made (connect, accept) and driven from its own thread on both sides (as NCCL's "
        "proxy threads do), with regMr/deregMr from a fifth, carry every message whole"},
       commsOnThreads},
      {{"every-device-moves-data",
        "listen/connect/accept and checked messages work on every device the plugin lists, not only device 0"},
       everyDeviceMovesData},
      {{"virtual-devices",
        "v9+ with makeVDevice: a vNIC of devices 0 and 1 (0 alone with one device) is the next device, counted by "
        "devices(), listing its parts in vProps under a name of its own, and moves data; a vNIC of no devices or of "
        "a missing one is refused"},
       virtualDevices},
      {{"handle-is-self-contained",
        "a second instance of the plugin, sharing nothing with the listener but the handle, connects with it and "
        "moves data"},
       handleIsSelfContained},
      {{"foreign-handle-is-an-error",
        "connect with a handle of 128 zero bytes returns an error promptly, never a "
        "comm"},
       foreignHandleIsAnError},
      {{"strangers-are-dropped",
        "garbage and silent connections on the listen port neither fail accept nor keep "
        "the real sender out"},
       strangersAreDropped},
      {{"comm-lifecycle-leaks",
        "100 comms opened and closed one after another, each receiver with a receive still pending, leave no "
        "descriptors, threads or mappings behind on either side"},
       commLifecycleLeaks},
      {{"many-comms-over-time",
        "1100 comms opened, used and closed one after another all connect and move their message (the ids, ports "
        "or slots of closed comms are reused)"},
       manyCommsOverTime},
      {{"messages-do-not-leak",
        "20480 messages after a warm-up, in two halves: on neither side does the heap grow by more than 1 MiB in "
        "both (no per-message allocation that is never freed)"},
       messagesDoNotLeak},
      {{"contexts-per-communicator",
        "v11+: a context per init works beside the others, survives another's finalize, and init after a finalize "
        "works (NCCL calls init and finalize per communicator)"},
       contextsPerCommunicator},
      {{"abandoned-connects-are-released",
        "v11+: connects given up unfinished (the host stops calling connect, closes its listeners and finalizes "
        "the context) leave no descriptor, thread or shared mapping behind"},
       abandonedConnectsAreReleased},
      {{"collnet-properties-sane",
        "collNet: init and devices work (NCCL disables the collNet otherwise), each device's properties are values "
        "NCCL uses, and reduceSupport answers 0 or 1 for every type and op, the same when asked again"},
       collNetRule<collnet::propertiesSane>},
      {{"collnet-allreduce-every-type",
        "collNet: --coll-ranks processes connect with every rank's handle; iallreduce of every type and op "
        "reduceSupport accepts, 1, 1023 (in place) and 65539 elements, gives every rank the reduction; also in parts "
        "at offsets inside one registration, as NCCL posts a registered buffer"},
       collNetRule<collnet::allreduceEveryType>},
      {{"collnet-allgather",
        "collNet v8+ with iallgather: 1, 4097 (in place) and 262147 bytes per rank land in each rank's place on every "
        "rank; also in partial windows as NCCL posts them, and from v9 into 3 separately registered receive parts"},
       collNetRule<collnet::allgatherGathers>},
      {{"collnet-reducescatter",
        "collNet v8+ with ireducescatter: every rank gets its own block of the reduction, for each type "
        "reduceSupport accepts; also in partial windows as NCCL posts them, out of place and in place, and from v9 "
        "from 3 separately registered send parts"},
       collNetRule<collnet::reduceScatterScatters>},
      {{"collnet-ops-in-flight",
        "collNet: 8 all-reduces posted before the first test (NCCL's proxy keeps NCCL_STEPS in flight) complete in "
        "order, each right"},
       collNetRule<collnet::operationsInFlight>},
      {{"collnet-rank-death-is-an-error",
        "collNet: a rank killed while the others have an all-reduce pending makes their test fail (within 30 s by "
        "default), never report a result or 'not done' for ever"},
       collNetRule<collnet::rankDeathIsAnError>},
      {{"collnet-every-version-agrees",
        "collNet: every exported ncclCollNetPlugin_vN, each in processes of its own, names device 0 as the newest "
        "does and all-reduces right"},
       collNetRule<collnet::everyVersionAgrees>},
      {{"collnet-comms-come-and-go",
        "collNet: 20 comms connected, used for an all-reduce and closed one after another leave no descriptor, "
        "thread or shared mapping behind on any rank (NCCL makes collNet comms per communicator)"},
       collNetRule<collnet::commsComeAndGo>},
  };
  return list;
}

// The stderr of a rule's processes (the rule's, its peers', the plugin's threads and helpers), passed on to the
// harness's stderr as it comes, with the plugin's last WARN (or ABORT) lines kept: a rule whose plugin call returned
// an error quotes them, as the loader quotes what a plugin logged when it refuses it ("it logged: ..."). The plugin's
// explanation of an error went to stderr with no rule name, and the FAIL said only "test returned 5
// (ncclInvalidUsage)". Read from stderr rather than through a logger of the harness's own: the loader's probe gives
// the plugin the loader's logger first, and a plugin keeps the first logger it is given (the SDK's does); that logger
// prints WARN lines to stderr, as NCCL's does, and so do the SDK's fallback and a plugin printing its own. Under
// NCCL_DEBUG=VERSION, which prints none, there is nothing to quote.
class LogRelay {
 public:
  // The lines quoted, and the bytes kept of each: a line or two, not the log.
  static constexpr size_t kKept = 2, kLineBytes = 200;

  // `fd`: the pipe's read end (made non-blocking here); owned and closed.
  explicit LogRelay(int fd) : fd_(fd) {
    if (fd_ >= 0) fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
  }
  ~LogRelay() { close(); }
  LogRelay(const LogRelay&) = delete;
  LogRelay& operator=(const LogRelay&) = delete;

  int fd() const { return fd_; }
  // Passes on what the pipe holds now, without waiting (a helper the plugin forked may hold it open for good); at
  // its end of file (every writer gone), stops reading it.
  void drain() {
    char buffer[4096];
    while (fd_ >= 0) {
      const ssize_t n = read(fd_, buffer, sizeof(buffer));
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) close();
      if (n <= 0) break;
      for (ssize_t done = 0; done < n;) {  // on, whole: a failed write (stderr closed) loses only the copy
        const ssize_t written = write(STDERR_FILENO, buffer + done, static_cast<size_t>(n - done));
        if (written < 0 && errno == EINTR) continue;
        if (written <= 0) break;
        done += written;
      }
      scan(buffer, static_cast<size_t>(n));
    }
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // The WARN lines kept, oldest first, joined with "; ", each without its level ("" when none).
  std::string warnings() const {
    std::string out;
    for (const auto& line : warnings_) out += (out.empty() ? "" : "; ") + line;
    return out;
  }

 private:
  void scan(const char* data, size_t size) {
    for (size_t i = 0; i < size; ++i) {
      if (data[i] != '\n') {
        if (line_.size() < 4096) line_ += data[i];  // a line longer than that is judged by its start
        continue;
      }
      keepIfWarning(line_);
      line_.clear();
    }
  }
  // "WARN text" or "ABORT text", after the "[rank N] " the loader's logger may put first.
  void keepIfWarning(std::string line) {
    if (line.rfind("[rank ", 0) == 0 && line.find("] ") != std::string::npos) line.erase(0, line.find("] ") + 2);
    for (const char* level : {"WARN ", "ABORT "}) {
      if (line.rfind(level, 0) != 0) continue;
      std::string text = core::printable(line.c_str() + std::strlen(level));
      if (text.size() > kLineBytes) text = text.substr(0, kLineBytes) + "...";
      if (!warnings_.empty() && warnings_.back() == text) return;  // the same line again says nothing more
      warnings_.push_back(text);
      if (warnings_.size() > kKept) warnings_.erase(warnings_.begin());
      return;
    }
  }
  int fd_;
  std::string line_;
  std::vector<std::string> warnings_;
};

// Whether a verdict's evidence says a plugin call returned an error (a result's name: "returned 5
// (ncclInvalidUsage)"), the failures the plugin's WARN lines explain.
bool callReturnedError(const std::string& evidence) {
  for (size_t at = evidence.find("returned "); at != std::string::npos; at = evidence.find("returned ", at + 1)) {
    size_t i = at + std::strlen("returned ");
    if (evidence.compare(i, 9, "an error ") == 0) return true;  // a peer's, said without its code
    if (evidence.compare(i, 6, "error ") == 0) i += 6;          // "returned error 3 (ncclInternalError)"
    const size_t digits = i;
    while (i < evidence.size() && evidence[i] >= '0' && evidence[i] <= '9') ++i;
    if (i > digits && evidence.compare(i, 6, " (nccl") == 0) return true;
  }
  return false;
}

// Whether a FAIL's evidence is a crash (the rule's process or a peer's, by a signal or a sanitizer's report).
bool crashEvidence(const std::string& evidence) {
  for (const char* crash : {"crashed the", "died with signal", "a sanitizer reported"})
    if (evidence.find(crash) != std::string::npos) return true;
  return false;
}

// The rules whose failure says the plugin writes where it must not, into the host's memory, with the part of their
// evidence that shows such a write: a later rule's crash may be that write's doing (every rule that listens gets its
// handle written past), and says so. Only listen-handle-fits: the other writes the rules see land in their guards.
struct CorruptingRule {
  const char* rule;
  const char* evidence;
  const char* note;
};
constexpr CorruptingRule kCorruptingRules[] = {
    {"listen-handle-fits", "listen wrote byte",
     "listen-handle-fits failed earlier: a handle written past its 128 bytes corrupts memory; fix that first"},
};

// Runs one rule in this (child) process and writes "STATUS|evidence" to `fd`.
[[noreturn]] void runRuleProcess(const Rule& rule, const Options& options, int fd) {
  gResultFd = fd;
  gCallTimeout = options.callTimeoutSeconds;
  gPeerDeathSeconds = options.peerDeathSeconds;
  gTransferWaitSeconds = std::max(1, std::min(30, options.ruleTimeoutSeconds / 2));
  gRuleSeconds = options.ruleTimeoutSeconds;
  gThreadMessages = options.threadMessages;
  gCollRanks = options.collRanks;
  signal(SIGALRM, onAlarm);
  signal(SIGPIPE, SIG_IGN);
  gSignalsBeforeLoad = nns::tools::SignalState::now();  // signal-handlers-untouched's "before"
  auto writeVerdict = [&](const Verdict& v) {
    std::string text = std::string(statusText(v.status)) + "|" + v.evidence;
    (void)!write(fd, text.data(), text.size());
    _exit(0);
  };
  gPeerNetns = options.peerNetns;
  gPeerLibrary = options.peerLibrary;
  gVersionsLibrary = options.versionsLibrary;
  std::string netnsError;
  if (!options.listenerNetns.empty() && !enterNetns(options.listenerNetns, &netnsError))
    writeVerdict(fail("could not enter network namespace %s: %s", options.listenerNetns.c_str(), netnsError.c_str()));
  core::LoadReport report;
  gCurrentCall = "the loader's probe (dlopen, init, devices, getProperties(0), finalize)";
  noteCall(gCurrentCall, true);
  alarm(gCallTimeout);
  auto net = core::loadNet(options.load, &report);
  alarm(0);
  noteCall(gCurrentCall, false);
  if (net == nullptr) writeVerdict(fail("the plugin did not load"));
  Context c{net.get(), nullptr, 0, {}};
  if (ncclResult_t result = CALL("init", net->init(&c.ctx, 0x6e6e73, nullptr, nullptr, nullptr)); result != ncclSuccess)
    writeVerdict(fail("init returned %s", resultText(result).c_str()));
  if (ncclResult_t result = CALL("getProperties", net->getProperties(0, &c.props)); result != ncclSuccess)
    writeVerdict(fail("getProperties(0) returned %s", resultText(result).c_str()));
  gLargestMessage = c.props.maxP2pBytes;
  if (void* shared =
          mmap(nullptr, sizeof(std::atomic<size_t>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
      shared != MAP_FAILED)
    gOversized = new (shared) std::atomic<size_t>(0);
  // As in startPeer: an exception stays in this process, as the harness's own failure.
  Verdict verdict{Status::kFail, ""};
  try {
    verdict = rule.run(c);
  } catch (const std::exception& e) {
    writeVerdict(fail("the harness itself failed in this rule (not the plugin): %s", e.what()));
  }
  CALL("finalize", net->finalize(c.ctx));
  verdict = sizedVerdict(verdict);
  if (verdict.status == Status::kPass && !gLeftOut.empty()) verdict.evidence += " (" + gLeftOut + ")";
  if (verdict.status == Status::kPass && !gContractProblem.empty())
    verdict = fail("%s (the rule's own check passed: %s)", gContractProblem.c_str(),
                   verdict.evidence.empty() ? "-" : verdict.evidence.c_str());
  else if (verdict.status == Status::kFail && gContractCode == kPeerRequestReused &&
           verdict.evidence.find(gContractProblem) == std::string::npos)
    verdict.evidence += " (before it: " + gContractProblem + ")";
  writeVerdict(verdict);
  _exit(0);  // writeVerdict exits; this keeps [[noreturn]] visibly true
}

}  // namespace

namespace detail {
ncclResult_t watchedCall(const char* name, int seconds, const std::function<ncclResult_t()>& call) {
  gCurrentCall = name;
  noteCall(name, true);
  const int before = gCallTimeout;
  gCallTimeout = seconds;  // what the watchdog's verdict says
  alarm(static_cast<unsigned>(seconds));
  ncclResult_t result = call();
  alarm(0);
  gCallTimeout = before;
  noteCall(name, false);
  noteResult(name, result);
  return result;
}
Resources resourcesNow() {
  ResourceCounts now = ResourceCounts::now();
  return {now.fds, now.threads, now.mappings};
}
Resources resourceGrowthSince(const Resources& base) {
  ResourceCounts grown = lifecycleGrowth({base.fds, base.threads, base.mappings});
  return {grown.fds, grown.threads, grown.mappings};
}
void becomeRankProcess() {
  if (gResultFd >= 0) close(gResultFd);
  gResultFd = -1;
  gMyNote = nullptr;  // slot 0 is the rule process's (rank 0's), slot 1 a net rule's peer
  gRequests.clear();
}
}  // namespace detail

bool isCollNetRule(const std::string& name) {
  return name.rfind("collnet-", 0) == 0;
}

bool isBasicRule(const std::string& name) {
  return name == "test-reports-sizes" || name == "zero-byte" || name == "random-sizes-integrity";
}

const char* statusText(Status status) {
  switch (status) {
    case Status::kPass: return "PASS";
    case Status::kSkip: return "SKIP";
    case Status::kFail: return "FAIL";
  }
  return "FAIL";
}

void killRunningRule() {
  pid_t group = gRunningRule;
  if (group > 0) kill(-group, SIGKILL);
}

const char* runningRuleName() {
  return gRunningRuleName;
}

const std::vector<RuleInfo>& allRules() {
  static const std::vector<RuleInfo> infos = [] {
    std::vector<RuleInfo> out;
    for (const auto& r : rules()) out.push_back(r.info);
    return out;
  }();
  return infos;
}

bool ruleSelected(const Options& options, const std::string& name) {
  auto named = [&](const std::vector<std::string>& names) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  return (options.only.empty() || named(options.only)) && !named(options.skip);
}

std::vector<RuleResult> runRules(const Options& options, const std::function<void(const RuleResult&)>& onResult) {
  std::vector<RuleResult> results;
  // What earlier rules' failures say of the later ones: the first basic rule that failed (the later rules build on
  // its transfers), and the notes of rules that saw the plugin write into the host's memory (a later crash may be it).
  std::string firstBasicFailure;
  std::vector<std::string> corruptionNotes;
  for (const auto& rule : rules()) {
    if (!ruleSelected(options, rule.info.name)) continue;
    RuleResult result;
    result.rule = rule.info.name;
    gEarlierBasicFailure = firstBasicFailure.empty() ? nullptr : firstBasicFailure.c_str();  // the rule's process's
    // Close-on-exec: a helper process the plugin starts (posix_spawn from init) must not hold the write end, or the
    // verdict's end of file never came and every rule read as hung. Likewise the log pipe, whose write end becomes
    // the rule's stderr (dup2 clears close-on-exec there, as for any stderr).
    int fds[2], logs[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      result.status = Status::kFail;
      result.evidence = std::string("the harness could not make a pipe: ") + std::strerror(errno);
      results.push_back(result);
      if (onResult) onResult(result);  // printed and counted as every verdict is
      continue;
    }
    if (pipe2(logs, O_CLOEXEC) != 0) logs[0] = logs[1] = -1;  // the rule's stderr is then the harness's own
    LogRelay relay(logs[0]);
    auto start = Clock::now();
    if (gCallNotes == nullptr) {
      void* shared = mmap(nullptr, 2 * sizeof(CallNote), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
      if (shared != MAP_FAILED) gCallNotes = static_cast<CallNote*>(shared);
    }
    if (gCallNotes != nullptr)
      for (int side = 0; side < 2; ++side) {
        gCallNotes[side].name.store(nullptr);
        gCallNotes[side].inProgress.store(0);
        gCallNotes[side].pairConnecting.store(0);
        gCallNotes[side].connectGaveUp.store(0);
        gCallNotes[side].harnessExit.store(0);
        gCallNotes[side].regMrFailed.store(0);
        gCallNotes[side].regMrFailedBytes.store(0);
      }
    std::fflush(nullptr);
    pid_t harness = getpid();
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // a harness killed outright takes its rule (and so the peers) with it
      if (getppid() != harness) _exit(124);
      gMyNote = gCallNotes != nullptr ? &gCallNotes[0] : nullptr;
      if (logs[1] >= 0) {
        dup2(logs[1], STDERR_FILENO);
        close(logs[0]);
        close(logs[1]);
      }
      // Whatever the plugin prints goes to stderr, here and in the rule's peers: stdout is the harness's own (the
      // verdict lines, or --json's one document), and a plugin that prints from init must not break it.
      dup2(STDERR_FILENO, STDOUT_FILENO);
      setpgid(0, 0);  // the rule and its peers form one group, killed together on a hang
      runRuleProcess(rule, options, fds[1]);
    }
    close(fds[1]);
    if (logs[1] >= 0) close(logs[1]);
    gRunningRule = pid;
    gRunningRuleName = rule.info.name;
    std::string text;
    char buffer[1024];
    // peer-death-is-an-error waits up to --peer-death-timeout in each of its two cases: its own allowance comes on
    // top (with the defaults, 2 x 30 s left nothing of the 60 s rule timeout for the set-up).
    // receiver-death-is-an-error waits up to it once.
    const int extra = std::strcmp(rule.info.name, "peer-death-is-an-error") == 0 ? 2 * options.peerDeathSeconds
                      : std::strcmp(rule.info.name, "receiver-death-is-an-error") == 0 ||
                              std::strcmp(rule.info.name, "collnet-rank-death-is-an-error") == 0
                          ? options.peerDeathSeconds
                          : 0;
    auto deadline = start + std::chrono::seconds(options.ruleTimeoutSeconds + extra);
    bool hung = false, reaped = false;
    int status = 0;
    for (;;) {
      int left =
          static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
      if (left <= 0) {
        hung = true;
        break;
      }
      pollfd wait[2] = {{fds[0], POLLIN, 0}, {relay.fd(), POLLIN, 0}};  // a closed relay's -1 is not polled
      if (poll(wait, 2, std::min(left, 100)) > 0) {
        if (wait[1].revents != 0) relay.drain();  // before the verdict, so the rule's lines come before its own
        if (wait[0].revents == 0) continue;
        ssize_t n = read(fds[0], buffer, sizeof(buffer));
        if (n <= 0) break;
        text.append(buffer, static_cast<size_t>(n));
        continue;
      }
      // The rule's process has ended but something it started keeps the pipe open (a peer left behind): what it
      // wrote is all there is, and only what is there already is read.
      if (waitpid(pid, &status, WNOHANG) == pid) {
        reaped = true;
        readWhatIsThere(fds[0], text);
        break;
      }
    }
    // The pipe's end of file came: the rule's process is ending, or the plugin closed the descriptor and went on (a
    // close-every-descriptor routine) and may block for good: waited for until the rule's deadline (or 5 s, for a
    // verdict written just before it), never longer.
    const auto exitBy = std::max(deadline, Clock::now() + std::chrono::seconds(5));
    while (!hung && !reaped) {
      relay.drain();  // a process still logging must not block on a full pipe
      if (waitpid(pid, &status, WNOHANG) == pid) {
        reaped = true;
      } else if (Clock::now() >= exitBy) {
        hung = true;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
    close(fds[0]);
    if (hung) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
    }
    if (!reaped) waitpid(pid, &status, 0);  // killed: at once
    kill(-pid, SIGKILL);                    // leftover peers of the rule
    relay.drain();                          // what they wrote before they went
    relay.close();
    gRunningRule = 0;
    gRunningRuleName = nullptr;
    result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    size_t bar = text.find('|');
    if (hung) {
      result.status = Status::kFail;
      result.evidence =
          "hung: the rule did not finish within " + std::to_string(options.ruleTimeoutSeconds + extra) + " s";
      result.evidence += lastCallsText(gCallNotes, std::strcmp(rule.info.name, "receiver-death-is-an-error") == 0);
    } else if (WIFSIGNALED(status)) {
      result.status = Status::kFail;
      result.evidence = "the plugin crashed the process (signal " + std::to_string(WTERMSIG(status)) + ", " +
                        strsignal(WTERMSIG(status)) + ")" + whereText(gCallNotes);
    } else if (bar == std::string::npos) {
      result.status = Status::kFail;
      // Under a sanitizer a crash ends the process with an exit status (its report is on stderr); otherwise the
      // plugin called exit() (or _exit) itself.
      result.evidence = "the rule process ended without a verdict (exit status " + std::to_string(WEXITSTATUS(status)) +
                        "): " +
                        (__sanitizer_get_current_allocated_bytes != nullptr
                             ? "the plugin exited it, or crashed it and a sanitizer reported the crash"
                             : "the plugin exited the process") +
                        whereText(gCallNotes);
    } else {
      std::string status = text.substr(0, bar);
      result.status = status == "PASS" ? Status::kPass : status == "SKIP" ? Status::kSkip : Status::kFail;
      result.evidence = text.substr(bar + 1);
      // A peer's regMr that failed ended it there: what the rule saw after (a message that never came) follows from
      // it, and a rule that did not wait for the peer's messages fails on it too.
      if (gCallNotes != nullptr && gCallNotes[1].regMrFailed.load() != 0) {
        const std::string cause =
            "peer: " + regMrFailedText(gCallNotes[1].regMrFailedBytes.load(), gCallNotes[1].regMrFailed.load());
        if (result.evidence.find(cause) == std::string::npos)
          result.evidence = cause + (result.evidence.empty() ? ""
                                     : result.status == Status::kFail
                                         ? "; what the rule then saw: " + result.evidence
                                         : " (the rule's own verdict: " + std::string(statusText(result.status)) + " " +
                                               result.evidence + ")");
        result.status = Status::kFail;
      }
      const int gaveUp = gCallNotes != nullptr ? gCallNotes[1].connectGaveUp.load() : 0;
      const bool connecting = gCallNotes != nullptr && gCallNotes[1].pairConnecting.load() != 0;
      if (result.status == Status::kFail && gaveUp != 0) {
        const std::string cause = peerText(gaveUp);
        if (result.evidence.find(cause) == std::string::npos)
          result.evidence = cause + ", though accept gave this side a comm; what the rule then saw: " + result.evidence;
      } else if (result.status == Status::kFail && connecting) {
        // The rule gave up before the connecting process's own 20 s did.
        result.evidence += " (the connecting process's connect had not given it a comm yet, though accept had)";
      }
    }
    if (result.status == Status::kFail) {
      if (const std::string logged = relay.warnings(); !logged.empty() && callReturnedError(result.evidence))
        result.evidence += " (the plugin logged: " + logged + ")";
      if (crashEvidence(result.evidence))
        for (const auto& note : corruptionNotes) result.evidence += " (" + note + ")";
      if (!firstBasicFailure.empty())
        result.evidence +=
            " (fix the first failing basic rule (" + firstBasicFailure + ") first: later rules build on it)";
      if (firstBasicFailure.empty() && isBasicRule(result.rule)) firstBasicFailure = result.rule;
      for (const auto& corrupting : kCorruptingRules)
        if (result.rule == corrupting.rule && result.evidence.find(corrupting.evidence) != std::string::npos)
          corruptionNotes.push_back(corrupting.note);
    }
    results.push_back(result);
    if (onResult) onResult(result);
  }
  return results;
}

}  // namespace nns::check
