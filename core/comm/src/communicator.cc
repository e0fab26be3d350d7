// communicator.cc: connection setup over the plugin, the progress thread, and the pipelined plan runner under the
// collectives.
#include "nns/core/communicator.hpp"

#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "nccl_net/sdk/result.hpp"
#include "nns/core/descriptors.hpp"
#include "nns/core/printable.hpp"

namespace nns::core {

namespace {
using Clock = std::chrono::steady_clock;

// The comm id the plugin's context is made with ("nns"): the loader's probe and the communicator's init share it.
constexpr uint64_t kCommId = 0x6e6e73;

// A receive that completed while the segments it waits on were behind: its piece stays in the slot until then.
void* const kArrived = reinterpret_cast<void*>(uintptr_t{1});

using nccl_net::sdk::resultName;

// Reads an integer knob of at least `minimum` from the environment; keeps `fallback` when unset, throws when
// malformed.
long long envKnob(const char* name, long long fallback, long long minimum = 1, long long maximum = INT_MAX) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  long long value = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || errno != 0 || value < minimum || value > maximum)
    throw CommError(std::string(name) + "=" + text + " is not an integer from " + std::to_string(minimum) + " to " +
                        std::to_string(maximum),
                    ncclInvalidUsage);
  return value;
}

// The bootstrap's error as the communicator's (a C++ caller catches CommError for every failure, and the C API
// returns its result): its codes are ncclResult_t's, spelled out in the bootstrap, which builds without net-api.
static_assert(BootstrapError::kSystemError == static_cast<int>(ncclSystemError) &&
              BootstrapError::kInvalidUsage == static_cast<int>(ncclInvalidUsage) &&
              BootstrapError::kRemoteError == static_cast<int>(ncclRemoteError));
CommError asCommError(const BootstrapError& e) {
  return CommError(e.what(), static_cast<ncclResult_t>(e.result()));
}

// The slot limits, which the environment knobs and CommOptions share (the channels' is Communicator::kMaxChannels).
// A slot is one request in flight on its connection's comm, and NCCL never has more than NCCL_NET_MAX_REQUESTS there
// (its plugins' request pools hold that many and fail the next request; 8 for ncclNet_v6 plugins, Communicator()).
constexpr int kMaxSlots = NCCL_NET_MAX_REQUESTS;
constexpr int kTestSizesRoom = 64;  // sizes NCCL's proxy hands a receive's test (NCCL_PROXY_MAX_SUBS)
constexpr long long kMinSlotBytes = 1024, kMaxSlotBytes = 1LL << 30;
// Host memory: page-aligned slots, plain memcpy.
class HostSlots final : public SlotMemory {
 public:
  std::string describe() const override { return "host memory"; }
  int ptrType() const override { return NCCL_PTR_HOST; }
  void* allocate(size_t bytes) override {
    void* memory = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (memory == nullptr)
      throw CommError("cannot allocate " + std::to_string(bytes) + " bytes of slots", ncclSystemError);
    return memory;
  }
  void release(void* memory) noexcept override { std::free(memory); }
  void* startCopy(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return nullptr;
  }
  bool copyDone(void*) override { return true; }
  int defaultSlots() const override { return 2; }
};

// What the plugin logs on this thread names `rank` while this lives (the thread's own rank before, after).
class ThreadLogRank {
 public:
  explicit ThreadLogRank(int rank) : before_(setThreadLogRank(rank)) {}
  ~ThreadLogRank() { setThreadLogRank(before_); }
  ThreadLogRank(const ThreadLogRank&) = delete;
  ThreadLogRank& operator=(const ThreadLogRank&) = delete;

 private:
  int before_;
};
}  // namespace

// ---- Plan ----

int Plan::flowFor(int peer, int channel, bool sending) {
  for (size_t i = 0; i < flowCount_; ++i)
    if (flows_[i].peer == peer && flows_[i].channel == channel && flows_[i].sending == sending)
      return static_cast<int>(i);
  // A flow kept from an earlier plan is reused with its segments' storage.
  if (flowCount_ == flows_.size()) flows_.emplace_back();
  Flow& flow = flows_[flowCount_];
  flow.peer = peer;
  flow.channel = channel;
  flow.sending = sending;
  flow.segments.clear();
  return static_cast<int>(flowCount_++);
}

void Plan::clear() {
  flowCount_ = 0;
  pieceBytes_ = 0;
  endMarks_ = false;
}

Plan::RecvRef Plan::recv(int peer, int channel, size_t bytes, PieceHandler onPiece, Refs after, void* direct) {
  int flow = flowFor(peer, channel, false);
  Segment& segment = flows_[flow].segments.emplace_back();
  segment.data = static_cast<const unsigned char*>(direct);
  segment.bytes = bytes;
  segment.onPiece = onPiece;
  segment.after = after;
  return RecvRef{flow, static_cast<int>(flows_[flow].segments.size() - 1)};
}

void Plan::send(int peer, int channel, const void* data, size_t bytes, Refs after, PieceHandler stage) {
  int flow = flowFor(peer, channel, true);
  Segment& segment = flows_[flow].segments.emplace_back();
  segment.data = static_cast<const unsigned char*>(data);
  segment.bytes = bytes;
  segment.after = after;
  segment.stage = stage;
}

void Plan::forward(int peer, int channel, RecvRef from, Refs after) {
  int flow = flowFor(peer, channel, true);
  after.push_back(from);
  size_t bytes = 0;
  if (from.flow >= 0 && static_cast<size_t>(from.flow) < flowCount_ && from.segment >= 0 &&
      from.segment < static_cast<int>(flows_[from.flow].segments.size()))
    bytes = flows_[from.flow].segments[from.segment].bytes;
  Segment& segment = flows_[flow].segments.emplace_back();
  segment.from = from;
  segment.after = after;
  segment.bytes = bytes;
}

// ---- Communicator: setup and teardown ----

void Communicator::check(ncclResult_t result, const char* call, int peer, std::chrono::nanoseconds inCall) {
  if (result == ncclSuccess) return;
  // The plugin's own result is the error's code; one that is not a failure NCCL defines is an internal error.
  const bool known = result > ncclSuccess && result <= ncclTimeout && result != ncclInProgress;
  // A connect or accept that waits for its peer instead of returning at once fails only when the plugin gives up
  // (two ranks connecting to each other both wait), and its error seldom says why: the time it held the thread does.
  std::string held;
  if (inCall >= std::chrono::seconds(1)) {
    char text[48];
    std::snprintf(text, sizeof(text), "%.1f", std::chrono::duration<double>(inCall).count());
    held = std::string(" after ") + text + " s inside the call (connect and accept must return at once, the comm " +
           "left NULL while the peer is not there yet, to be called again, as NCCL's proxy does)";
  }
  // A plugin out of descriptors seldom says so: where this process is at its limit, the error does.
  fail(std::string(net_->name()) + " " + call + (peer >= 0 ? " (peer rank " + std::to_string(peer) + ")" : "") +
           " returned " + resultName(result) + held + (nearDescriptorLimit() ? "; " + descriptorUse() : ""),
       known ? result : ncclInternalError);
}

void Communicator::fail(const std::string& what, ncclResult_t result) {
  throw CommError(
      "rank " + std::to_string(rank_) + (runningCall_ != nullptr ? ", in " + runningCall_->text() : "") + ": " + what,
      result);
}

std::string CallInfo::text() const {
  const std::string called = name != nullptr ? name : "operation";
  if (operations > 1) return called + "(" + std::to_string(operations) + " operations)";
  std::string call = called + "(count " + std::to_string(count);
  if (type != nullptr) call += std::string(", ") + type;
  if (op != nullptr) call += std::string(", ") + op;
  if (root >= 0) call += ", root " + std::to_string(root);
  if (algorithm != nullptr) call += std::string(", ") + algorithm;
  if (peer >= 0) call += ", peer " + std::to_string(peer);
  return call + ")";
}

Communicator::Communicator(const LaunchInfo& launch, const CommOptions& options)
    : rank_(launch.rank), size_(launch.size), options_(options), creatorPid_(getpid()) {
  options_.slotBytes = static_cast<size_t>(
      envKnob("NNS_SLOT_BYTES", static_cast<long long>(options_.slotBytes), kMinSlotBytes, kMaxSlotBytes));
  options_.slots = static_cast<int>(envKnob("NNS_SLOTS", options_.slots, 1, kMaxSlots));
  options_.channels = static_cast<int>(envKnob("NNS_NCHANNELS", options_.channels, 1, kMaxChannels));
  options_.timeout = std::chrono::milliseconds(envKnob("NNS_COMM_TIMEOUT_MS", options_.timeout.count()));
  // Deadlines are now + timeout (and 4 x it for queued calls): 0 or less failed every wait at once, and a "forever"
  // such as milliseconds::max() overflowed them into the past.
  if (options_.timeout.count() < 1 || options_.timeout.count() > INT_MAX)
    throw CommError("timeout " + std::to_string(options_.timeout.count()) +
                        " ms (NNS_COMM_TIMEOUT_MS or CommOptions::timeout): 1 to " + std::to_string(INT_MAX) + " ms",
                    ncclInvalidUsage);
  spin_ = std::chrono::microseconds(envKnob("NNS_PROGRESS_SPIN_US", spin_.count(), 0));
  inline_ = envKnob("NNS_PROGRESS_INLINE", inline_ ? 1 : 0, 0, 1) != 0;
  options_.device = static_cast<int>(envKnob("NNS_NET_DEVICE", options_.device, 0));
  options_.checkCalls = envKnob("NNS_CHECK_CALLS", options_.checkCalls ? 1 : 0, 0, 1) != 0;
  options_.callRegistration = static_cast<int>(envKnob("NNS_CALL_REGISTRATION", options_.callRegistration, 0, 1));
  if (options_.callRegistration < -1 || options_.callRegistration > 1)
    throw CommError("callRegistration " + std::to_string(options_.callRegistration) +
                        " (CommOptions::callRegistration): -1 (when registration costs nothing), 0 or 1",
                    ncclInvalidUsage);
  callRegistration_ = options_.callRegistration;
  callRegistrations_.resize(kMaxCallRegistrations);
  // Named by both their sources: the knob (already range-checked above when set) or the CommOptions field.
  if (options_.slots < 0 || options_.slots > kMaxSlots)
    throw CommError("slots " + std::to_string(options_.slots) + " (CommOptions::slots): 0 (the slot memory's " +
                        "default) to " + std::to_string(kMaxSlots),
                    ncclInvalidUsage);
  if (options_.channels < 1 || options_.channels > kMaxChannels)
    throw CommError("channels " + std::to_string(options_.channels) + " (CommOptions::channels): 1 to " +
                        std::to_string(kMaxChannels),
                    ncclInvalidUsage);
  if (options_.slotBytes < static_cast<size_t>(kMinSlotBytes) ||
      options_.slotBytes > static_cast<size_t>(kMaxSlotBytes) || options_.slotBytes % 64 != 0)
    throw CommError("slot bytes " + std::to_string(options_.slotBytes) +
                        " (NNS_SLOT_BYTES or CommOptions::slotBytes): 1 KiB to 1 GiB and a multiple of 64",
                    ncclInvalidUsage);

  // The plugin's lines name their rank: this one's on its own threads, the process's (where all agree) on others.
  setProcessLogRank(rank_);
  const ThreadLogRank constructing(rank_);
  try {
    bootstrap_ = std::make_unique<Bootstrap>(launch, options_.timeout);
  } catch (const BootstrapError& e) {
    throw asCommError(e);
  }
  // The plugin named in the options is taken outright; one from NCCL_NET_PLUGIN as NCCL takes it, NCCL_NET's name
  // filter included. "none" (or NCCL_NET_PLUGIN set but empty) means no external plugin to NCCL, and this
  // communicator has no internal net to fall back on: said, rather than read as unset.
  LoadOptions load;
  const char* env = std::getenv("NCCL_NET_PLUGIN");
  load.plugin = !options_.plugin.empty() ? options_.plugin : env != nullptr ? "" : "socket";  // "": the loader reads it
  load.readNcclNet = options_.plugin.empty() && env != nullptr;  // not for the built-in default either
  if (const std::string none = noPluginReason(load); !none.empty())
    fail(none + ": name a plugin, or leave NCCL_NET_PLUGIN unset for the default (the socket plugin)",
         ncclInvalidUsage);
  load.searchDirs = options_.searchDirs;
  load.commId = kCommId;  // the probe's init is this communicator's, as in NCCL
  LoadReport report;
  net_ = loadNet(load, &report);
  if (net_ == nullptr) {
    std::string why;
    for (const auto& c : report.candidates) why += "; " + c.requested + ": " + c.rejectReason;
    fail("no net plugin loaded" + why, ncclSystemError);
  }
  check(net_->init(&ctx_, kCommId, nullptr, hostLogger, nullptr), "init");
  try {
    if (options_.slotMemory) slotMemory_ = options_.slotMemory(*net_, options_.device);
    if (!slotMemory_) slotMemory_ = std::make_shared<HostSlots>();
    slotMemoryDescription_ = slotMemory_->describe();
    if (options_.slots == 0) {
      options_.slots = slotMemory_->defaultSlots();
      if (options_.slots < 1 || options_.slots > kMaxSlots)
        fail("slot memory \"" + slotMemoryDescription_ + "\" asks for " + std::to_string(options_.slots) +
                 " slots per connection; 1.." + std::to_string(kMaxSlots) + " are possible",
             ncclInternalError);
    }
    // Plugins made for NCCL 2.18 and before (ncclNet_v6) were given at most NCCL_NET_MAX_REQUESTS_V6 requests per
    // comm; theirs may fail a ninth.
    if (const int most = net_->version() >= 7 ? NCCL_NET_MAX_REQUESTS : NCCL_NET_MAX_REQUESTS_V6; options_.slots > most)
      fail("slots " + std::to_string(options_.slots) + " (NNS_SLOTS or CommOptions::slots): " + net_->name() +
               " was loaded as ncclNet_v" + std::to_string(net_->version()) + ", which NCCL gives at most " +
               std::to_string(most) + " requests in flight per comm, a slot's each",
           ncclInvalidUsage);
    connectRing();
    progress_ = std::thread([this] { progressLoop(); });  // inside: a thread that cannot start closes what is open
  } catch (...) {
    // No destructor runs for a constructor that throws: close what was opened before the plugin is unloaded.
    closeConnections();
    net_->finalize(ctx_);
    try {
      throw;
    } catch (const BootstrapError& e) {  // the layout check, the handles: a CommError like every other failure here
      throw CommError("rank " + std::to_string(rank_) + ": " + e.what(), static_cast<ncclResult_t>(e.result()));
    }
  }
}

void Communicator::connectRing() {
  check(net_->devices(&devices_), "devices");
  if (devices_ < 1) fail(std::string(net_->name()) + " has no device", ncclSystemError);
  if (options_.device < 0 || options_.device >= devices_)
    fail(
        "device " + std::to_string(options_.device) + " out of range (the plugin has " + std::to_string(devices_) + ")",
        ncclInvalidUsage);
  // A device whose receives NCCL's GPU kernels must finish (netDeviceType UNPACK: the data lands in the plugin's
  // bounce buffers, and only a kernel given the device handle copies it out) cannot serve a host engine: a completed
  // receive would not mean the data is in the buffer. NCCL loads such a plugin; this engine refuses it by name.
  size_t largest = SIZE_MAX;  // the largest message every device used takes
  // The slot memory was chosen from options_.device's properties; channels may use other devices (deviceOf). GPU
  // slots (NCCL_PTR_CUDA) need every one of them to take CUDA pointers, and receives are flushed when any of them
  // asks (forceFlush), as NCCL decides per connection.
  const bool gpuSlots = slotMemory_->ptrType() == NCCL_PTR_CUDA && size_ > 1;  // one rank: no connection registers
  flushReceives_ = slotMemory_->flushReceives();
  for (int c = 0; c < connectionChannels(); ++c) {
    ncclNetProperties_v12_t props{};
    check(net_->getProperties(deviceOf(c), &props), "getProperties");
    if (gpuSlots && (props.ptrSupport & NCCL_PTR_CUDA) == 0)
      fail(std::string(net_->name()) + " device " + std::to_string(deviceOf(c)) + " (" + printable(props.name) +
               "), channel " + std::to_string(c) + "'s, moves host memory only (ptrSupport " +
               std::to_string(props.ptrSupport) + "), and the slots are GPU memory (" + slotMemory_->describe() +
               ", chosen for device " + std::to_string(options_.device) +
               "): use devices alike, fewer channels (NNS_NCHANNELS), or host slots (NNS_GDR=0)",
           ncclInvalidUsage);
    if (gpuSlots && props.forceFlush && !flushReceives_) {
      flushReceives_ = true;
      hostLogger(NCCL_LOG_INFO, NCCL_INIT, __FILE__, __LINE__,
                 "receives flushed: %s device %d (channel %d's) sets forceFlush", net_->name(), deviceOf(c), c);
    }
    for (size_t most : {props.maxCollBytes, props.maxP2pBytes})
      if (most > 0) largest = std::min(largest, most);
    const std::string device = "device " + std::to_string(deviceOf(c)) + " (" + printable(props.name) + ", " +
                               std::to_string(props.speed) + " Mbps)";
    if (devicesDescription_.find(device) == std::string::npos)
      devicesDescription_ += (devicesDescription_.empty() ? "" : ", ") + device;
    if (props.netDeviceType != NCCL_NET_DEVICE_HOST)
      fail(std::string(net_->name()) + " device " + std::to_string(deviceOf(c)) + " has netDeviceType " +
               std::to_string(static_cast<int>(props.netDeviceType)) +
               (props.netDeviceType == NCCL_NET_DEVICE_UNPACK ? " (UNPACK)" : "") +
               ": its receives are finished by NCCL's GPU kernels through the device handle, which this engine has "
               "not; use a plugin whose devices are NCCL_NET_DEVICE_HOST",
           ncclInvalidUsage);
  }
  // No message is larger than a slot: a plugin that takes smaller ones (maxCollBytes, maxP2pBytes) gets slots of the
  // largest it takes, a multiple of 64 bytes as every slot, before any connection allocates them.
  if (options_.slotBytes > largest) {
    const size_t fitting = largest - largest % 64;
    if (fitting < static_cast<size_t>(kMinSlotBytes))
      fail(std::string(net_->name()) + " takes messages of at most " + std::to_string(largest) +
               " bytes (maxCollBytes/maxP2pBytes); a slot is at least " + std::to_string(kMinSlotBytes),
           ncclInvalidUsage);
    hostLogger(NCCL_LOG_INFO, NCCL_INIT, __FILE__, __LINE__,
               "slots of %zu bytes, not %zu: %s takes messages of at most %zu bytes (maxCollBytes/maxP2pBytes)",
               fitting, options_.slotBytes, net_->name(), largest);
    options_.slotBytes = fitting;
  }

  if (size_ > 1) {
    checkSameLayout();
    // One listen per connection, as NCCL makes them: its handle goes to the one peer that connects there, through the
    // bootstrap, so an accepted connection's peer and channel are known without asking the plugin (ncclNet's accept
    // does not say who connected). A listen is made when its connection is, and closed once it is accepted.
    listenComms_.assign(static_cast<size_t>(size_) * connectionChannels(), nullptr);
    // The ring is what most schedules use: connect it now; other peers are connected on first use.
    std::vector<ConnKey> ring;
    for (int c = 0; c < options_.channels; ++c) {
      ring.push_back({next(), c, true});
      ring.push_back({prev(), c, false});
    }
    establish(ring, /*watchBootstrap=*/true);
    bootstrap_->barrier();
  }
}

// Both ends of a connection cut a message into the same pieces, and make their connections per channel: ranks started
// with different settings would cut messages differently, or wait for connections the others never make. Refused
// by name.
void Communicator::checkSameLayout() {
  // NCCL's own algorithm and protocol choices are not this engine's: said once per process, rather than left to look
  // as if they were taken.
  static std::once_flag ncclKnobsNoted;
  std::call_once(ncclKnobsNoted, [] {
    for (const char* knob : {"NCCL_ALGO", "NCCL_PROTO"})
      if (const char* value = std::getenv(knob); value != nullptr && *value != '\0')
        std::fprintf(stderr,
                     "nns: note: %s=%s is NCCL's and is not read here (NNS_ALGO=ring|tree|doubling|auto chooses the "
                     "allreduce algorithm)\n",
                     knob, value);
  });
  // The collectives' schedule knobs too, as set at creation: ranks cutting the same call by other algorithms or
  // pieces fail on the wire ("received 151428 bytes from rank 1, expected 75712"), naming neither setting.
  std::string schedule;
  for (const char* knob : {"NNS_ALGO", "NNS_PIECE_BYTES", "NNS_DOUBLING_MAX_BYTES", "NNS_TREE_MAX_BYTES"})
    if (const char* value = std::getenv(knob); value != nullptr && *value != '\0')
      schedule += std::string(", ") + knob + "=" + value;
  // NCCL_COLLNET_ENABLE too (read at each call; unset and 0 alike): a rank that takes the collNet waits in its
  // connect's all-gather while the others run the ring, and both fail at the timeout naming neither.
  if (const char* value = std::getenv("NCCL_COLLNET_ENABLE");
      value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0)
    schedule += std::string(", NCCL_COLLNET_ENABLE=") + value;
  char layout[384] = {};
  std::snprintf(layout, sizeof(layout),
                "plugin %s, NNS_NCHANNELS=%d, NNS_SLOT_BYTES=%zu, NNS_SLOTS=%d, NNS_CHECK_CALLS=%d%s", net_->name(),
                options_.channels, options_.slotBytes, options_.slots, options_.checkCalls ? 1 : 0, schedule.c_str());
  const std::string mine(layout, sizeof(layout));
  const auto everyone = bootstrap_->allGather(mine);
  for (int peer = 0; peer < size_; ++peer) {
    if (everyone[peer] == mine) continue;
    fail("rank " + std::to_string(peer) + " runs with " + everyone[peer].c_str() + ", this rank with " + layout +
             ": every rank needs the same plugin and settings",
         ncclInvalidUsage);
  }
}

void Communicator::checkSameCall(const std::string& call) {
  if (!options_.checkCalls) return;
  if (failed_.load()) return;  // the operation itself reports the communicator's error
  const uint64_t sequence = ++checkedCalls_;
  // Fixed-size records: a long description is cut, never mistaken for another rank's.
  char record[256] = {};
  std::snprintf(record, sizeof(record), "%s", call.c_str());
  std::vector<std::string> everyone;
  try {
    everyone = bootstrap_->allGather(std::string(record, sizeof(record)));
  } catch (const std::exception& e) {
    // The bootstrap's state is unknown after a failed exchange: no later call can be compared, so fail for good.
    const std::string why = "rank " + std::to_string(rank_) + ": NNS_CHECK_CALLS: collective " +
                            std::to_string(sequence) + " (" + call + "): " + e.what();
    abort(why);
    throw CommError(why);
  }
  bool same = true;
  for (const auto& other : everyone) same = same && other == everyone[static_cast<size_t>(rank_)];
  if (same) return;
  std::string listing;
  for (int peer = 0; peer < size_; ++peer)
    listing += (peer == 0 ? "" : "; ") + std::string("rank ") + std::to_string(peer) + " " + everyone[peer].c_str();
  throw ArgumentError("NNS_CHECK_CALLS: the ranks disagree about collective " + std::to_string(sequence) + ": " +
                      listing);
}

unsigned char* Communicator::handleOf(int peer, int channel) {
  // The handle `peer` made for this rank on `channel`, once it has come. Connect may keep its state in the handle's
  // tail between calls (the SDK's connect stage), so this is the stored copy, not a temporary.
  const auto key = std::make_pair(peer, channel);
  if (auto it = peerHandles_.find(key); it != peerHandles_.end()) return it->second.data();
  std::string handle;
  try {
    if (!bootstrap_->tryRecv(peer, static_cast<uint32_t>(channel), &handle)) return nullptr;
  } catch (const BootstrapError& e) {
    failMakingConnections(e);
  }
  if (handle.size() != NCCL_NET_HANDLE_MAXSIZE)
    fail("rank " + std::to_string(peer) + " sent a connection handle of " + std::to_string(handle.size()) +
         " bytes, not " + std::to_string(NCCL_NET_HANDLE_MAXSIZE));
  auto& stored = peerHandles_[key];
  std::memcpy(stored.data(), handle.data(), stored.size());
  // Before the first connect: the peer accepts once this note has come (peerConnecting).
  try {
    bootstrap_->send(peer, static_cast<uint32_t>(channel) | kConnectingTag, std::string());
  } catch (const BootstrapError& e) {
    failMakingConnections(e);
  }
  return stored.data();
}

bool Communicator::peerConnecting(int peer, int channel) {
  const auto key = std::make_pair(peer, channel);
  if (connectingPeers_.count(key) != 0) return true;
  std::string note;
  try {
    if (!bootstrap_->tryRecv(peer, static_cast<uint32_t>(channel) | kConnectingTag, &note)) return false;
  } catch (const BootstrapError& e) {
    failMakingConnections(e);
  }
  connectingPeers_.insert(key);
  return true;
}

void Communicator::failMakingConnections(const BootstrapError& e) {
  // At creation, where every rank makes its connections on its way to the same all-gather: a peer that died is named
  // as rank 0 sees it (its closed bootstrap connection), and rank 0 tells every rank why it gives up, so that the
  // others do not hear only that rank 0 left.
  if (watchingBootstrap_) {
    try {
      bootstrap_->checkPeers();
      bootstrap_->abandon(e.what(), e.result());
    } catch (const BootstrapError& seen) {
      fail(std::string("while making the connections: ") + seen.what(), static_cast<ncclResult_t>(seen.result()));
    }
  }
  fail(std::string("while making the connections: ") + e.what(), static_cast<ncclResult_t>(e.result()));
}

void Communicator::offerListen(int peer, int channel) {
  void*& listen = listenComms_[static_cast<size_t>(peer) * connectionChannels() + channel];
  if (listen != nullptr) return;
  std::string handle(NCCL_NET_HANDLE_MAXSIZE, '\0');
  check(net_->listen(ctx_, deviceOf(channel), handle.data(), &listen), "listen", peer);
  try {
    bootstrap_->send(peer, static_cast<uint32_t>(channel), handle);
  } catch (const BootstrapError& e) {
    failMakingConnections(e);
  }
}

void Communicator::registerSlots(Connection& conn, bool sending, int peer) {
  const size_t bytes = options_.slotBytes * options_.slots;
  conn.memory = static_cast<unsigned char*>(slotMemory_->allocate(bytes));
  check(net_->regMr(conn.comm, conn.memory, bytes, slotMemory_->ptrType(), &conn.mhandle), "regMr", peer);
  conn.slots.resize(options_.slots);
  for (int i = 0; i < options_.slots; ++i) conn.slots[i].memory = conn.memory + i * options_.slotBytes;
  (void)sending;
  if (callRegistration_ < 0) decideCallRegistration(conn, bytes, peer);
}

void Communicator::decideCallRegistration(Connection& conn, size_t bytes, int peer) {
  // Registering a call's buffers instead of copying them through the slots pays when registration costs nothing, as
  // with TCP, whose plugins only hand back a handle: a 2-rank 2 MiB allreduce then makes no copy of its own but the
  // reduction (about 25% faster at 1 MiB on loopback). A plugin that pins memory (verbs, UCX over RDMA) takes tens of
  // microseconds or more per registration, more than the copies cost. Timed on memory of the slots' size and kind,
  // not the slots themselves (a plugin that caches registrations by address without counting them would release
  // the slots' with the probe's), the best of three pairs (a preempted one is not taken for the plugin's cost); a
  // failure only means no.
  callRegistration_ = 0;
  if (slotMemory_->ptrType() != NCCL_PTR_HOST) return;
  struct Probe {
    SlotMemory& memory;
    void* data;
    ~Probe() { memory.release(data); }
  } probe{*slotMemory_, slotMemory_->allocate(bytes)};
  constexpr auto kFree = std::chrono::nanoseconds(1000);
  auto best = std::chrono::nanoseconds::max();
  int slow = 0;  // pairs over 100 us: two say pinning (one may be a preempted call)
  for (int i = 0; i < 3; ++i) {
    void* mhandle = nullptr;
    const auto start = Clock::now();
    if (net_->regMr(conn.comm, probe.data, bytes, NCCL_PTR_HOST, &mhandle) != ncclSuccess) return;
    if (net_->deregMr(conn.comm, mhandle) != ncclSuccess) {
      hostLogger(NCCL_LOG_WARN, NCCL_INIT, __FILE__, __LINE__,
                 "deregMr of a probe registration failed on the connection with rank %d; buffers go through the slots",
                 peer);
      return;
    }
    const auto took = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start);
    best = std::min(best, took);
    if (took > 100 * kFree && ++slow == 2) break;  // pinning: no more start-up spent on pinning it again
  }
  callRegistration_ = best < kFree ? 1 : 0;
  hostLogger(NCCL_LOG_INFO, NCCL_INIT, __FILE__, __LINE__,
             callRegistration_ ? "%s registers %zu bytes and deregisters them in %.2f us: host buffers of %zu bytes "
                                 "and more are registered for each call, not copied through the slots "
                                 "(NNS_CALL_REGISTRATION=0 turns it off)"
                               : "%s registers %zu bytes and deregisters them in %.2f us: host buffers are copied "
                                 "through the slots (NNS_CALL_REGISTRATION=1 registers them for each call instead)",
             net_->name(), bytes, static_cast<double>(best.count()) / 1000.0, kCallRegistrationMinBytes);
}

void Communicator::establish(const std::vector<ConnKey>& keys, bool watchBootstrap) {
  struct Watching {
    bool& flag;
    ~Watching() { flag = false; }
  } watching{watchingBootstrap_};
  watchingBootstrap_ = watchBootstrap;
  auto deadline = Clock::now() + options_.timeout;
  auto watched = Clock::now();
  for (const auto& key : keys)
    if (key.peer < 0 || key.peer >= size_ || key.peer == rank_ || key.channel < 0 ||
        key.channel >= connectionChannels())
      fail("no connection to rank " + std::to_string(key.peer) + " channel " + std::to_string(key.channel));
  // Room for the connections still to make (none on the hot path, where every one is made).
  size_t toMake = 0;
  for (const auto& key : keys) {
    const auto made = connections_.find(key);
    if (made == connections_.end() || made->second.comm == nullptr) ++toMake;
  }
  if (toMake > 0) reserveRoomFor(toMake);
  // Every listen first, its handle sent at once: a peer may be waiting for it before it can accept anything of ours.
  for (const auto& key : keys)
    if (!key.sending && connections_[key].comm == nullptr) offerListen(key.peer, key.channel);
  // One step of making `key`'s connection; true once it is made.
  auto advance = [&](const ConnKey& key) {
    Connection& conn = connections_[key];
    if (conn.comm != nullptr) return true;
    const bool p2p = key.channel == p2pChannel();
    // A place for the device handle, as NCCL's proxy passes one (plugins write it without a NULL check); a host
    // engine has no use for what a plugin puts there.
    ncclNetDeviceHandle_v12_t* deviceHandle = nullptr;
    if (key.sending) {
      unsigned char* handle = handleOf(key.peer, key.channel);
      if (handle == nullptr) return false;  // the peer has not listened yet
      const auto called = Clock::now();
      const ncclResult_t connected = net_->connect(ctx_, deviceOf(key.channel), handle, &conn.comm, &deviceHandle);
      check(connected, p2p ? "connect (send/recv)" : "connect", key.peer, Clock::now() - called);
    } else {
      offerListen(key.peer, key.channel);
      // Accepting only once the peer says it connects: over a plugin whose accept blocks until the peer connects
      // (NCCL's must not; a vendor's first version sometimes does), an accept before that could wait for good while
      // this rank's own connects, which the peer may be waiting for, are never made.
      if (!peerConnecting(key.peer, key.channel)) return false;
      void*& listen = listenComms_[static_cast<size_t>(key.peer) * connectionChannels() + key.channel];
      const auto called = Clock::now();
      const ncclResult_t accepted = net_->accept(listen, &conn.comm, &deviceHandle);
      check(accepted, p2p ? "accept (send/recv)" : "accept", key.peer, Clock::now() - called);
      // Accepted: the listen has served its one connection (NCCL closes it there too).
      if (conn.comm != nullptr) {
        if (net_->closeListen(listen) != ncclSuccess)
          hostLogger(NCCL_LOG_WARN, NCCL_ALL, __FILE__, __LINE__,
                     "closeListen failed after accepting rank %d's connection (channel %d); carrying on", key.peer,
                     key.channel);
        listen = nullptr;
      }
    }
    if (conn.comm == nullptr) return false;
    registerSlots(conn, key.sending, key.peer);
    return true;
  };
  // Waiting for a peer that has not arrived yet (a send/recv whose peer posts its side seconds later) yields at first,
  // for the common case of a peer microseconds away, then sleeps, longer each time up to kLongestNap: yielding for the
  // whole wait kept a core busy for up to NNS_COMM_TIMEOUT_MS (5 s of a peer's sleep cost 3 s of CPU). A connection
  // made starts the yielding again.
  constexpr auto kYieldFor = std::chrono::microseconds(500);
  constexpr auto kShortestNap = std::chrono::microseconds(20);
  constexpr auto kLongestNap = std::chrono::milliseconds(1);
  auto lastProgress = Clock::now();
  std::chrono::microseconds nap = kShortestNap;
  size_t madeBefore = 0;
  // After creation nothing else tells this wait that a peer died: checkPeers may not be used (a rank may have left for
  // good), and a peer that never opened a bootstrap connection to this rank closes none when it dies, so the wait for
  // a tree or send/recv connection to it ran out the whole timeout (10 s of a tree neighbour's, where its ring
  // neighbours failed in 0.2 s). The peers this wait is held up by are probed instead (Bootstrap::probe), once it has
  // gone kProbeEvery without progress, and every kProbeEvery after: a dead one fails this rank within moments, naming
  // it, and a live one, however late it posts its side, is never judged. A probe costs a nonblocking poll (a connect
  // the first time, kProbeConnectWithin at most); a peer whose connect times out (its host does not answer) is left
  // to the timeout.
  constexpr auto kProbeEvery = std::chrono::milliseconds(200);
  constexpr auto kProbeConnectWithin = std::chrono::milliseconds(100);
  auto lastProbe = Clock::now();
  std::vector<int> probed, unjudged;  // peers: probed this round; whose probe could not tell (not probed again)
  for (;;) {
    bool all = true;
    size_t made = 0;
    for (const auto& key : keys) {
      if (advance(key)) {
        ++made;
        continue;
      }
      all = false;
      // Two ranks that each send to the other before receiving (outside a group) each wait here for the other's
      // accept: accepting the peer's send/recv connection meanwhile lets both connections be made.
      if (key.sending && key.channel == p2pChannel()) advance({key.peer, key.channel, false});
    }
    if (all) return;
    stopIfAborted();
    // A rank that died on the way (its bootstrap connection closed) fails the connections now, on every rank, not
    // when the wait for a peer that will never connect runs out.
    if (watchBootstrap && Clock::now() - watched > std::chrono::milliseconds(20)) {
      watched = Clock::now();
      try {
        bootstrap_->checkPeers();
      } catch (const BootstrapError& e) {
        fail(std::string("while making the connections: ") + e.what(), static_cast<ncclResult_t>(e.result()));
      }
    }
    if (Clock::now() > deadline) {
      std::string missing;
      bool p2p = false;
      for (const auto& key : keys) {
        if (connections_[key].comm != nullptr) continue;
        missing +=
            std::string(missing.empty() ? "" : ", ") + (key.sending ? "to" : "from") + " rank " +
            std::to_string(key.peer) + (key.channel == p2pChannel() ? " (send/recv)" : "") +
            (key.sending && peerHandles_.count({key.peer, key.channel}) == 0 ? " (it sent no handle)" : "") +
            (!key.sending && connectingPeers_.count({key.peer, key.channel}) == 0 ? " (it did not connect)" : "");
        p2p = p2p || key.channel == p2pChannel();
      }
      fail("connections not made within " + std::to_string(options_.timeout.count()) + " ms: " + missing +
           (p2p ? "; a send/recv connection is made when the peer posts the matching receive or send, as in NCCL: that "
                  "peer has not, or has died"
                : ""));
    }
    const auto now = Clock::now();
    if (made != madeBefore) {
      madeBefore = made;
      lastProgress = now;
      nap = kShortestNap;
    }
    if (!watchBootstrap && now - lastProgress >= kProbeEvery && now - lastProbe >= kProbeEvery) {
      lastProbe = now;
      probed.clear();
      for (const auto& key : keys) {
        if (connections_[key].comm != nullptr) continue;
        const auto seen = [&](const std::vector<int>& peers) {
          return std::find(peers.begin(), peers.end(), key.peer) != peers.end();
        };
        if (seen(probed) || seen(unjudged)) continue;
        probed.push_back(key.peer);
        try {
          if (!bootstrap_->probe(key.peer, kProbeConnectWithin)) unjudged.push_back(key.peer);
        } catch (const BootstrapError& e) {
          failMakingConnections(e);
        }
      }
    }
    if (now - lastProgress < kYieldFor) {
      sched_yield();
    } else {
      // Not past the deadline: the timeout is said when it is due, not up to a nap later, after a peer that gave up
      // at the same moment has closed (its closed connection then said instead why this rank waited).
      std::this_thread::sleep_for(std::min<Clock::duration>(nap, deadline - now));
      nap = std::min<std::chrono::microseconds>(nap * 2, kLongestNap);
    }
  }
}

void Communicator::reserveRoomFor(size_t connections) {
  // A listen while it waits, and the plugin's sockets: the socket plugin's take one and its data sockets (one or two
  // by default, NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD where set, up to 64). A higher soft limit costs nothing
  // until descriptors are open: 16 each leaves room for what jobs commonly set.
  constexpr size_t kDescriptorsPerConnection = 16;
  const DescriptorRoom room = reserveDescriptors(connections * kDescriptorsPerConnection);
  if (room.raised())
    hostLogger(NCCL_LOG_INFO, NCCL_INIT, __FILE__, __LINE__,
               "NET/nns : raised the descriptor limit (ulimit -n) from %llu to %llu for %zu connection(s)",
               static_cast<unsigned long long>(room.before), static_cast<unsigned long long>(room.soft), connections);
}

void Communicator::releaseSlots(Connection& conn, Clock::time_point deadline) {
  // A copy still running into a slot (a failed operation left it) must end before the slot's memory goes. This runs
  // from the destructor too: a copy that failed (copyDone throws) is over, so the slot can go; one that never
  // completes (a GPU copy engine that hangs) is given up on at `deadline`, and the memory is leaked rather than freed
  // under a copy that may still write to it: waiting on, the destructor never returned.
  size_t stillCopying = 0;
  for (Slot& slot : conn.slots) {
    const auto since = Clock::now();
    try {
      while (slot.copy != nullptr && !slotMemory_->copyDone(slot.copy)) {
        const auto now = Clock::now();
        if (now >= deadline) {
          ++stillCopying;
          break;
        }
        // A copy about to finish is caught at once; a slow one costs no core for the whole wait.
        if (now - since < std::chrono::milliseconds(1))
          sched_yield();
        else
          std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "nns: rank %d: releasing a slot: %s\n", rank_, e.what());
    } catch (...) {  // from the destructor too: nothing may escape
      std::fprintf(stderr, "nns: rank %d: releasing a slot: the slot memory threw something not a std::exception\n",
                   rank_);
    }
    slot.copy = nullptr;
  }
  if (stillCopying > 0) {
    hostLogger(NCCL_LOG_WARN, NCCL_ALL, __FILE__, __LINE__,
               "NET/nns : rank %d: %zu copy(ies) into a connection's slots (%s) did not complete within %lld ms "
               "(NNS_COMM_TIMEOUT_MS) of closing it; its %zu bytes of slot memory are left allocated, not freed "
               "under a copy that may still write to them",
               rank_, stillCopying, slotMemoryDescription_.c_str(), static_cast<long long>(options_.timeout.count()),
               options_.slotBytes * conn.slots.size());
    conn.memory = nullptr;
    return;
  }
  if (conn.memory != nullptr) slotMemory_->release(conn.memory);
  conn.memory = nullptr;
}

void Communicator::flush(Connection& conn, void* data, int bytes, void* mhandle, int peer) {
  // As NCCL does after a GPU Direct receive: the plugin makes the received bytes visible to the GPU before they are
  // read. A NULL request means the flush is complete (or the plugin needs none).
  void* request = nullptr;
  check(net_->iflush(conn.comm, 1, &data, &bytes, &mhandle, &request), "iflush", peer);
  auto deadline = Clock::now() + options_.timeout;
  for (int done = 0; request != nullptr && !done;) {
    stopIfAborted();  // an abort from another thread ends the wait at once, as in the operations' own loops
    check(net_->test(request, &done, nullptr), "test(flush)", peer);
    if (!done && Clock::now() > deadline) fail("iflush did not complete within the timeout");
  }
}

void Communicator::closeConnections() {
  if (net_ == nullptr) return;
  {
    std::lock_guard lock(collNetMutex_);
    closeCollNet();
  }
  for (auto& registration : registrations_) deregister(*registration);
  for (auto& registration : callRegistrations_) deregister(registration, /*keepKeys=*/true);
  // A failed close or deregMr cannot be undone here, but a plugin that fails them (a leak, a handle it does not know)
  // is worth a word: one line for all, naming the first.
  int failures = 0;
  std::string firstFailure;
  auto note = [&](ncclResult_t result, const char* call, const ConnKey* key) {
    if (result == ncclSuccess) return;
    if (failures++ == 0) {
      char what[160];
      if (key != nullptr)
        std::snprintf(what, sizeof(what), "%s on the %s connection with rank %d (channel %d) returned %s", call,
                      key->sending ? "send" : "receive", key->peer, key->channel, resultName(result));
      else
        std::snprintf(what, sizeof(what), "%s returned %s", call, resultName(result));
      firstFailure = what;
    }
  };
  // Forward registrations cover other connections' slots: all go before any slot memory does.
  for (auto& [key, conn] : connections_) {
    for (auto& [source, mhandle] : conn.forwardHandles)
      note(net_->deregMr(conn.comm, mhandle), "deregMr (forward)", &key);
    conn.forwardHandles.clear();
  }
  for (auto& [key, conn] : connections_) {
    if (conn.comm == nullptr) continue;
    if (conn.mhandle != nullptr) note(net_->deregMr(conn.comm, conn.mhandle), "deregMr (slots)", &key);
    if (key.sending) {
      note(net_->closeSend(conn.comm), "closeSend", &key);
    } else {
      note(net_->closeRecv(conn.comm), "closeRecv", &key);
    }
  }
  // Only once every comm is closed: a send still in flight may read another connection's slots (a forward). One
  // deadline for all: a copy engine that hangs costs the timeout once, not once per slot.
  const auto deadline = Clock::now() + options_.timeout;
  for (auto& [key, conn] : connections_) releaseSlots(conn, deadline);
  connections_.clear();
  for (void*& listen : listenComms_) {
    if (listen != nullptr) note(net_->closeListen(listen), "closeListen", nullptr);
    listen = nullptr;
  }
  if (failures > 0)
    hostLogger(NCCL_LOG_WARN, NCCL_ALL, __FILE__, __LINE__,
               "%d plugin call%s failed while closing the communicator's connections; the first: %s", failures,
               failures == 1 ? "" : "s", firstFailure.c_str());
}

// ---- The collNet (in-network all-reduce) ----

void Communicator::loadCollNetOnce() {
  if (collNetTried_) return;
  collNetTried_ = true;
  CollNetReport report;
  collNetPlugin_ = loadCollNet(*net_, &report);
  if (collNetPlugin_ == nullptr) {
    collNetWhy_ = "no collNet: " + report.rejectReason;
  } else if (ncclResult_t result = collNetPlugin_->init(&collNetCtx_, 0, hostLogger);  // the loader's probe's
             result != ncclSuccess) {
    collNetWhy_ = std::string("the collNet's init returned ") + resultName(result);
    collNetPlugin_.reset();
  } else {
    ncclNetProperties_v12_t props{};
    const ncclResult_t got = collNetPlugin_->getProperties(0, &props);
    if (got != ncclSuccess) {
      collNetWhy_ = std::string("the collNet's getProperties(0) returned ") + resultName(got);
    } else if ((props.ptrSupport & NCCL_PTR_HOST) == 0) {
      collNetWhy_ = "the collNet's device 0 takes no host memory (ptrSupport " + std::to_string(props.ptrSupport) +
                    "), and this engine gives it host slots";
    } else if (props.maxCollBytes < 8) {
      collNetWhy_ = "the collNet's device 0 takes " + std::to_string(props.maxCollBytes) + " bytes at most";
    }
    collNetMaxBytes_ = props.maxCollBytes;
    // NCCL asks reduceSupport once per communicator for its support matrix; so does this, not once per call.
    for (int type = 0; type < ncclNumTypes && collNetWhy_.empty(); ++type)
      for (int op = 0; op < ncclNumOps && collNetWhy_.empty(); ++op) {
        int supported = 0;
        if (ncclResult_t result = collNetPlugin_->reduceSupport(static_cast<ncclDataType_t>(type),
                                                                static_cast<ncclRedOp_t>(op), &supported);
            result != ncclSuccess)
          collNetWhy_ = std::string("the collNet's reduceSupport returned ") + resultName(result);
        collNetSupport_[static_cast<size_t>(type * ncclNumOps + op)] = supported != 0 ? 1 : 0;
      }
    if (!collNetWhy_.empty()) {
      collNetPlugin_->finalize(collNetCtx_);
      collNetPlugin_.reset();
    }
  }
  if (!collNetWhy_.empty()) {
    collNetConnected_ = -1;
    hostLogger(NCCL_LOG_INFO, NCCL_INIT | NCCL_NET, __FILE__, __LINE__, "collNet not used: %s", collNetWhy_.c_str());
  }
}

void Communicator::checkCollNet(ncclResult_t result, const char* call) {
  if (result == ncclSuccess) return;
  const bool known = result > ncclSuccess && result <= ncclTimeout && result != ncclInProgress;
  fail(std::string("collNet ") + (collNetPlugin_ != nullptr ? collNetPlugin_->name() : "?") + " " + call +
           " returned " + resultName(result),
       known ? result : ncclInternalError);
}

Communicator::CollNetLink* Communicator::collNet(std::string* why) {
  {
    std::lock_guard lock(collNetMutex_);
    // Decided at the first call on every rank at once: the rest answer without a word to the others.
    if (collNetAgreed_) {
      if (collNetConnected_ > 0) return &collNetLink_;
      *why = collNetAgreedWhy_;
      return nullptr;
    }
    collNetAgreed_ = true;
    loadCollNetOnce();
  }
  // Every rank says whether it can take part, and what its collNet does: 'H', the handle, the reduceSupport matrix
  // a byte of capabilities (1: iallgather, 2: ireducescatter) and its device's maxCollBytes (8 bytes, little-endian);
  // or '!' and why not. Nothing is connected unless all can, and the link does what all do: its slots, and so every
  // part and window, are cut to the smallest maxCollBytes, or ranks would post parts of different counts.
  constexpr size_t kCapabilities = 1 + NCCL_NET_HANDLE_MAXSIZE + kReducePairs, kMaxBytes = kCapabilities + 1,
                   kSaid = kMaxBytes + 8;
  std::string mine(1, '!');
  if (collNetPlugin_ != nullptr && collNetConnected_ == 0) {
    unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
    if (ncclResult_t result = collNetPlugin_->listen(collNetCtx_, 0, handle, &collNetListen_); result != ncclSuccess) {
      mine += std::string("the collNet's listen returned ") + resultName(result);
    } else {
      mine.assign(1, 'H').append(reinterpret_cast<const char*>(handle), sizeof(handle));
      mine.append(reinterpret_cast<const char*>(collNetSupport_.data()), collNetSupport_.size());
      mine.push_back(
          static_cast<char>((collNetPlugin_->hasIallgather() ? 1 : 0) | (collNetPlugin_->hasIreducescatter() ? 2 : 0)));
      for (int byte = 0; byte < 8; ++byte)
        mine.push_back(static_cast<char>((static_cast<uint64_t>(collNetMaxBytes_) >> (8 * byte)) & 0xff));
    }
  } else {
    mine += collNetWhy_;
  }
  std::vector<std::string> all;
  try {
    all = bootstrap_->allGather(mine);
  } catch (const BootstrapError& e) {
    throw asCommError(e);
  }
  collNetLink_.reduces.fill(1);
  for (int r = 0; r < size_; ++r) {
    const std::string& said = all[static_cast<size_t>(r)];
    if (said.empty() || said[0] != 'H' || said.size() != kSaid) {
      std::lock_guard lock(collNetMutex_);
      collNetAgreedWhy_ = "rank " + std::to_string(r) + " has no collNet to use (" +
                          (said.size() > 1 && said[0] == '!' ? said.substr(1) : std::string("no reason given")) + ")";
      hostLogger(NCCL_LOG_INFO, NCCL_INIT | NCCL_NET, __FILE__, __LINE__, "collNet not used: %s",
                 collNetAgreedWhy_.c_str());
      collNetConnected_ = -1;
      closeCollNet();
      *why = collNetAgreedWhy_;
      return nullptr;
    }
    for (size_t pair = 0; pair < kReducePairs; ++pair)
      collNetLink_.reduces[pair] &= static_cast<unsigned char>(said[1 + NCCL_NET_HANDLE_MAXSIZE + pair] == 1);
    const auto capabilities = static_cast<unsigned char>(said[kCapabilities]);
    if ((capabilities & 1) == 0 && collNetLink_.withoutAllGather < 0) collNetLink_.withoutAllGather = r;
    if ((capabilities & 2) == 0 && collNetLink_.withoutReduceScatter < 0) collNetLink_.withoutReduceScatter = r;
    uint64_t maxBytes = 0;
    for (int byte = 0; byte < 8; ++byte)
      maxBytes |= static_cast<uint64_t>(static_cast<unsigned char>(said[kMaxBytes + byte])) << (8 * byte);
    if (maxBytes < collNetLink_.maxBytes) {
      collNetLink_.maxBytes = static_cast<size_t>(maxBytes);
      collNetLink_.maxBytesRank = r;
    }
  }
  collNetLink_.allGather = collNetLink_.withoutAllGather < 0;
  collNetLink_.reduceScatter = collNetLink_.withoutReduceScatter < 0;
  std::vector<void*> handles(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) handles[static_cast<size_t>(r)] = all[static_cast<size_t>(r)].data() + 1;
  // NCCL calls connect once, from its proxy thread, and waits: a collective that returns once every rank is there.
  checkCollNet(collNetPlugin_->connect(handles.data(), size_, rank_, collNetListen_, &collNetLink_.comm), "connect");
  if (collNetLink_.comm == nullptr) fail("the collNet's connect returned success without a comm", ncclInternalError);
  // Slots: as many pairs as a connection has, each a multiple of 8 bytes no larger than the device takes.
  const size_t slotBytes = std::min(options_.slotBytes, collNetLink_.maxBytes) / 8 * 8;
  const size_t pairs = static_cast<size_t>(options_.slots);
  collNetMemoryBytes_ = 2 * pairs * slotBytes;
  void* memory = mmap(nullptr, collNetMemoryBytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) fail("no memory for the collNet's slots: " + std::string(strerror(errno)), ncclSystemError);
  collNetMemory_ = static_cast<unsigned char*>(memory);
  checkCollNet(collNetPlugin_->regMr(collNetLink_.comm, collNetMemory_, collNetMemoryBytes_, NCCL_PTR_HOST,
                                     &collNetLink_.mhandle),
               "regMr");
  collNetLink_.coll = collNetPlugin_.get();
  collNetLink_.slotBytes = slotBytes;
  for (size_t i = 0; i < pairs; ++i) {
    collNetLink_.sendSlots.push_back(collNetMemory_ + 2 * i * slotBytes);
    collNetLink_.recvSlots.push_back(collNetMemory_ + (2 * i + 1) * slotBytes);
  }
  // Registered calls post other windows than copied ones: every rank must take the same path.
  std::string registration;
  const bool registers = collNetFreeRegistration(&registration);
  std::vector<std::string> saidRegisters;
  try {
    saidRegisters = bootstrap_->allGather(std::string(1, registers ? '1' : '0'));
  } catch (const BootstrapError& e) {
    throw asCommError(e);
  }
  collNetLink_.registersCalls = true;
  for (int r = 0; r < size_ && collNetLink_.registersCalls; ++r) {
    if (saidRegisters[static_cast<size_t>(r)] == "1") continue;
    collNetLink_.registersCalls = false;
    if (registers) registration = "rank " + std::to_string(r) + " copies them";
  }
  const std::string slotsCut = collNetLink_.maxBytes < options_.slotBytes
                                   ? " (rank " + std::to_string(collNetLink_.maxBytesRank) + "'s device takes " +
                                         std::to_string(collNetLink_.maxBytes) + " bytes at most)"
                                   : "";
  hostLogger(NCCL_LOG_INFO, NCCL_INIT | NCCL_NET, __FILE__, __LINE__,
             "collNet %s (ncclCollNet_v%d) connected: %d ranks, %zu pairs of %zu-byte host slots registered%s; "
             "through it: allreduce%s%s; host buffers of %zu bytes and more %s (%s)",
             collNetPlugin_->name(), collNetPlugin_->version(), size_, pairs, slotBytes, slotsCut.c_str(),
             collNetLink_.allGather ? ", allgather" : "", collNetLink_.reduceScatter ? ", reducescatter" : "",
             kCallRegistrationMinBytes,
             collNetLink_.registersCalls ? "are registered with it for each call and walked in slot-sized windows"
                                         : "are copied through the slots",
             registration.c_str());
  std::lock_guard lock(collNetMutex_);
  collNetConnected_ = 1;
  return &collNetLink_;
}

// Like decideCallRegistration, for the collNet's connected comm: CommOptions::callRegistration when set, else whether
// a regMr/deregMr pair of a slot's bytes took under 1 us (the best of three, on memory of its own).
bool Communicator::collNetFreeRegistration(std::string* why) {
  if (options_.callRegistration >= 0) {
    *why = "NNS_CALL_REGISTRATION=" + std::to_string(options_.callRegistration);
    return options_.callRegistration == 1;
  }
  const size_t bytes = collNetLink_.slotBytes;
  void* probe = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (probe == MAP_FAILED) {
    *why = "no memory to time a registration on";
    return false;
  }
  auto best = std::chrono::nanoseconds::max();
  for (int i = 0; i < 3; ++i) {
    void* mhandle = nullptr;
    const auto start = Clock::now();
    if (collNetPlugin_->regMr(collNetLink_.comm, probe, bytes, NCCL_PTR_HOST, &mhandle) != ncclSuccess) {
      *why = "its regMr of host memory failed";
      break;
    }
    if (collNetPlugin_->deregMr(collNetLink_.comm, mhandle) != ncclSuccess) {
      *why = "its deregMr failed";
      break;
    }
    best = std::min(best, std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start));
  }
  munmap(probe, bytes);
  if (!why->empty()) return false;
  char took[96];
  std::snprintf(took, sizeof(took), "a regMr/deregMr pair takes %.2f us", static_cast<double>(best.count()) / 1000.0);
  *why = took;
  return best < std::chrono::nanoseconds(1000);
}

// Part of closeConnections: the comm closes before the plugin goes, and an abort's close reaches the other ranks.
void Communicator::closeCollNet() {
  if (collNetPlugin_ == nullptr) return;
  if (collNetLink_.mhandle != nullptr) (void)collNetPlugin_->deregMr(collNetLink_.comm, collNetLink_.mhandle);
  if (collNetLink_.comm != nullptr) (void)collNetPlugin_->closeColl(collNetLink_.comm);
  if (collNetListen_ != nullptr) (void)collNetPlugin_->closeListen(collNetListen_);
  (void)collNetPlugin_->finalize(collNetCtx_);
  collNetPlugin_.reset();
  collNetLink_ = CollNetLink{};
  collNetListen_ = nullptr;
  if (collNetMemory_ != nullptr) munmap(collNetMemory_, collNetMemoryBytes_);
  collNetMemory_ = nullptr;
  // Closed (shutdown, or an abort): neither this rank's answer nor the agreed one is "usable" any more.
  for (std::string* said : {&collNetWhy_, &collNetAgreedWhy_})
    if (said->empty()) *said = "the collNet was closed with the communicator's connections";
  collNetConnected_ = -1;
}

bool Communicator::forkedCopy() const {
  return getpid() != creatorPid_;
}

Communicator::~Communicator() {
  if (forkedCopy()) {
    // Closing the plugin's comms would shut down sockets the parent still uses, and the progress thread is not in
    // this process: leave the plugin, the thread's handle and the handoff's state alone (a little memory of this
    // process). The bootstrap's destructor only closes this process's descriptors.
    (void)net_.release();
    progress_.detach();
    (void)handoff_.release();
    return;
  }
  if (shutdown()) return;
  // The object goes (a stack object cannot be kept) with the thread still inside the plugin: leave the thread and
  // the plugin alone rather than hang, and say so.
  std::fprintf(stderr,
               "nns: rank %d: communicator destroyed while a plugin call on its progress thread has not returned for "
               "%lld ms; the thread resumes in freed memory if the call ever returns (shut down a communicator on the "
               "heap with shutdown(), and abandon() it when that fails)\n",
               rank_, static_cast<long long>((options_.timeout + std::chrono::seconds(5)).count()));
  progress_.detach();
  (void)net_.release();
}

bool Communicator::shutdown() {
  if (forkedCopy()) return true;
  {
    std::unique_lock lock(mutex_);
    if (shutDown_) return true;
    stopping_ = true;
    wake_.notify_all();
    // An operation still running is bounded by its own no-progress timeout; one stuck inside a plugin call is not,
    // and then this thread leaves it (and the plugin) alone rather than hang. Operations still queued run before the
    // progress thread returns, so its end is waited for under the same bound: waiting for !busy_ alone, a shutdown
    // that came in between an inline call's end and the queued call after it hung in the join below when that call
    // stayed in the plugin. One caller closes (closing_): another thread's shutdown() meanwhile waits for its end,
    // under the same bound, instead of joining the thread and closing every comm a second time beside it.
    if (!done_.wait_for(lock, options_.timeout + std::chrono::seconds(5),
                        [&] { return shutDown_ || (!closing_ && !busy_ && progressEnded_); }))
      return false;
    if (shutDown_) return true;
    closing_ = true;
  }
  closeOnce();
  return true;
}

void Communicator::closeOnce() {
  // The progress thread has returned, or is returning (this may be that thread: see progressLoop), and closing_
  // keeps every other closer out: progress_ and the connections are this caller's alone. The thread closing its own
  // abandoned communicator detaches itself (nobody is left to join it, and the object is never freed).
  if (progress_.get_id() == std::this_thread::get_id())
    progress_.detach();
  else if (progress_.joinable())
    progress_.join();
  closeConnections();
  if (net_ != nullptr) net_->finalize(ctx_);
  std::lock_guard lock(mutex_);
  closing_ = false;
  shutDown_ = true;
  done_.notify_all();
}

void Communicator::abandon(std::unique_ptr<Communicator> comm) {
  static auto* mutex = new std::mutex;  // never destroyed: a communicator may be abandoned during exit
  static auto* abandoned = new std::vector<std::unique_ptr<Communicator>>;
  Communicator* kept = comm.get();
  {
    std::lock_guard lock(*mutex);
    abandoned->push_back(std::move(comm));
  }
  // Whoever the stuck call returns to ends the communicator: its progress thread closes the connections and the
  // plugin as it returns (no caller is left to shut it down); if it returned already, before the flag, that is
  // done here.
  bool ended = false;
  {
    std::lock_guard lock(kept->mutex_);
    kept->abandoned_ = true;
    ended = kept->progressEnded_;
  }
  if (ended) (void)kept->shutdown();
}

// ---- The progress thread ----

// Both sides poll for a short while before sleeping: back-to-back operations (a training step's many allreduces)
// then pass from the caller to this thread and back without a futex wake-up each way.
void Communicator::progressLoop() {
  setThreadLogRank(rank_);
  std::unique_lock lock(mutex_);
  for (;;) {
    if (queue_.empty() && !stopping_) {
      lock.unlock();
      for (auto until = Clock::now() + spin_; queued_.load() == 0 && Clock::now() < until;) sched_yield();
      lock.lock();
    }
    // An operation running inline on its caller's thread has the communicator: queued tasks wait for it.
    wake_.wait(lock, [this] { return (stopping_ && !busy_) || (!queue_.empty() && !busy_); });
    if (queue_.empty()) {  // stopping, nothing left
      progressEnded_ = true;
      // abandon()ed after a shutdown() that gave up on a stuck call: that call has returned, nobody else will close.
      if (abandoned_ && !shutDown_ && !closing_) {
        closing_ = true;
        lock.unlock();
        closeOnce();
        return;
      }
      done_.notify_all();  // shutdown() waits for this
      return;
    }
    Task* task = queue_.front();
    queue_.popFront();
    --queued_;
    busy_ = true;
    lock.unlock();
    ncclResult_t result = ncclSuccess;
    std::string error = execute(task->operation, task->always, &result);
    lock.lock();
    busy_ = false;
    task->error = std::move(error);
    task->result = result;
    task->done = true;
    task->finished.store(true, std::memory_order_release);  // the last touch of *task: its submitter may return now
    done_.notify_all();
  }
}

// The operation runs on this thread itself when nothing else is queued or running (NCCL's model for a blocking
// call: no handoff, and the progress thread stays asleep instead of competing for the cores); otherwise it is
// queued for the progress thread, which runs operations one at a time in submission order. $NNS_PROGRESS_INLINE=0
// sends every operation through the progress thread.
void Communicator::submit(OperationRef operation) {
  if (forkedCopy())
    throw CommError("rank " + std::to_string(rank_) + ": this communicator was made by process " +
                        std::to_string(creatorPid_) + ", and process " + std::to_string(getpid()) +
                        " was forked from it: a forked process cannot use its parent's communicators (make one of "
                        "its own)",
                    ncclInvalidUsage);
  throwIfFailed();
  auto refuseIfShutDown = [this] {  // under mutex_
    if (stopping_)
      throw CommError("rank " + std::to_string(rank_) + ": the communicator is shut down", ncclInvalidUsage);
  };
  if (inline_) {
    std::unique_lock lock(mutex_);
    refuseIfShutDown();
    if (queue_.empty() && !busy_) {
      busy_ = true;
      lock.unlock();
      ncclResult_t result = ncclSuccess;
      std::string error;
      {
        const ThreadLogRank caller(rank_);  // on the caller's thread, which may be another communicator's rank too
        error = execute(operation, false, &result);
      }
      lock.lock();
      busy_ = false;
      // A task queued meanwhile (another thread's, or an abort's close) may run now, and a destructor may go on.
      // Only then: waking the sleeping progress thread for nothing would cost every call a context switch.
      if (!queue_.empty() || stopping_) wake_.notify_all();
      done_.notify_all();
      if (!error.empty()) throw CommError(error, result);
      return;
    }
  }
  Task task(operation);
  const auto submitted = Clock::now();
  {
    std::lock_guard guard(mutex_);
    refuseIfShutDown();
    queue_.pushBack(&task);
    ++queued_;
  }
  wake_.notify_one();
  for (auto until = Clock::now() + spin_; !task.finished.load(std::memory_order_acquire) && Clock::now() < until;)
    sched_yield();
  std::unique_lock lock(mutex_);
  // Operations are bounded by their no-progress timeout; the margin covers the plugin calls around them. The wait
  // gives up only when nothing on the communicator has progressed for that long (since this call came, at least):
  // a long operation that keeps moving data, this one or one ahead of it, is waited for.
  const auto bound = options_.timeout * 4 + std::chrono::seconds(30);
  while (!done_.wait_for(lock, std::chrono::seconds(1), [&] { return task.done; })) {
    const auto stamp = Clock::time_point(Clock::duration(progressStamp_.load(std::memory_order_relaxed)));
    const auto idle = Clock::now() - std::max(stamp, submitted);
    if (idle < bound) continue;
    const std::string why = "nothing on this communicator progressed for " +
                            std::to_string(std::chrono::duration_cast<std::chrono::seconds>(idle).count()) +
                            " s (a plugin call that never returns?)";
    {
      std::lock_guard errorLock(errorMutex_);
      if (asyncError_.empty()) {
        asyncError_ = why;
        asyncResult_ = ncclRemoteError;
      }
    }
    failed_ = true;
    // Not started (queued behind an operation stuck in a plugin call): taken out of the queue, and this call fails.
    if (queue_.remove(&task)) {
      --queued_;
      throw CommError("rank " + std::to_string(rank_) + ": gave up waiting for the operation ahead of this one: " + why,
                      ncclRemoteError);
    }
    // Running, and its storage (and the caller's closure it runs) is this frame: wait for it after all.
    done_.wait(lock, [&] { return task.done; });
    break;
  }
  if (!task.error.empty()) throw CommError(task.error, task.result);
}

void Communicator::submit(const CallInfo& call, OperationRef operation) {
  // The comparison runs inside the operation: operations run one at a time, so the calls are compared in the order
  // they run (two threads' comparisons made on their own threads interleaved on the bootstrap and compared calls
  // that did not meet). A disagreement is not the communicator's failure: it leaves the operation normally and is
  // thrown here.
  struct Context {
    Communicator* self;
    const CallInfo* call;
    OperationRef operation;
    std::string disagreement;
  } context{this, &call, operation, {}};
  submit([c = &context] {
    if (c->self->options_.checkCalls && !c->call->pointToPoint) {
      try {
        c->self->checkSameCall(c->call->text());
      } catch (const ArgumentError& e) {
        c->disagreement = e.what();
        return;
      }
    }
    struct Running {  // runningCall_ for the operation's extent, however it leaves
      Communicator* self;
      ~Running() { self->runningCall_ = nullptr; }
    } running{c->self};
    c->self->runningCall_ = c->call;
    c->operation();
  });
  if (!context.disagreement.empty()) throw ArgumentError(context.disagreement);
}

namespace {
// The communicator whose operation this thread is running, if any (abort() from inside an operation closes the
// connections itself instead of queueing the close behind the running operation).
thread_local const Communicator* tlsRunning = nullptr;
}  // namespace

std::string Communicator::execute(OperationRef operation, bool always, ncclResult_t* result) {
  std::string error;
  *result = ncclRemoteError;
  if (failed_.load() && !always) {
    *result = asyncResult();
    return "communicator failed earlier: " + asyncError();
  }
  // Restored, not cleared, at the end: an operation that ran another communicator's inline leaves this thread
  // still running its own.
  const Communicator* const outer = tlsRunning;
  tlsRunning = this;
  noteProgress();
  try {
    operation();
  } catch (const CommError& e) {
    error = e.what();
    *result = e.result() == ncclSuccess ? ncclInternalError : e.result();  // a failure is never a success
  } catch (const std::exception& e) {
    error = e.what();
    *result = ncclSystemError;  // not the communicator's own: memory, say (a kernel layer's CUDA error is a CommError)
  } catch (...) {
    // Something that is no std::exception (from a custom slot memory, say): an error like any other. Let through,
    // it skipped what follows, and the operation stayed "running" for every later call and shutdown().
    error = "an operation threw something that is not a std::exception";
    *result = ncclSystemError;
  }
  if (!error.empty() && !always) abort(error, *result);
  dropCallRegistrations();  // after an abort's close, which deregistered them already
  tlsRunning = outer;
  return error;
}

std::string Communicator::asyncError() const {
  std::lock_guard lock(errorMutex_);
  return asyncError_;
}

ncclResult_t Communicator::asyncResult() const {
  std::lock_guard lock(errorMutex_);
  return asyncResult_;
}

void Communicator::throwIfFailed() const {
  if (failed_.load())
    throw CommError("rank " + std::to_string(rank_) + ": communicator failed earlier: " + asyncError(), asyncResult());
}

void Communicator::noteProgress() {
  progressStamp_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
}

void Communicator::stopIfAborted() {
  if (failed_.load(std::memory_order_relaxed)) fail("aborted: " + asyncError(), asyncResult());
}

void Communicator::abort(const std::string& why, ncclResult_t result) {
  if (forkedCopy()) return;  // the connections are the parent's: nothing of this copy's to fail
  {
    std::lock_guard lock(errorMutex_);
    if (asyncError_.empty()) {
      asyncError_ = why;
      asyncResult_ = result == ncclSuccess ? ncclInternalError : result;
    }
  }
  failed_ = true;
  // Closing every connection makes the peers' pending requests fail now instead of at their timeout, so one
  // rank's error reaches the whole communicator quickly. Only the thread running an operation touches plugin
  // comms: from inside one, close now; from elsewhere, queue the close behind the operation running.
  if (tlsRunning == this) {
    closeConnections();
  } else {
    // On the heap: an abort that gives up on a stuck plugin call returns while the task is still queued.
    struct CloseTask {
      explicit CloseTask(Communicator* comm) : self(comm), task(*this, true) {}
      void operator()() const { self->closeConnections(); }
      Communicator* self;
      Task task;
    };
    std::unique_lock lock(mutex_);
    // Closed already, or about to be: once the progress thread has returned, nothing would run a queued close, and
    // this abort waited its whole bound (4 x the timeout + 30 s) for it; shutdown(), which joined that thread, closes
    // the connections itself.
    if (shutDown_ || progressEnded_) return;
    auto* owned = new CloseTask(this);
    queue_.pushFront(&owned->task);
    ++queued_;
    wake_.notify_one();
    // The operation in flight sees the failure at its next idle poll; one stuck in a plugin call is waited for as
    // long as submit() would, and then the abort returns (a watchdog calling nnsCommAbort must get its thread back):
    // the close task is left to the progress thread and never freed, a few bytes for a plugin call that hangs.
    if (!done_.wait_for(lock, options_.timeout * 4 + std::chrono::seconds(30), [&] { return owned->task.done; })) {
      std::fprintf(stderr,
                   "nns: rank %d: abort gives up waiting for a plugin call that does not return; the connections "
                   "close when it does\n",
                   rank_);
      return;
    }
    lock.unlock();
    delete owned;
  }
}

Communicator::Registration* Communicator::covering(const void* data, size_t bytes) const {
  const auto begin = reinterpret_cast<uintptr_t>(data);
  for (const auto& registration : registrations_)
    if (begin >= registration->begin && begin + bytes <= registration->end) return registration.get();
  for (size_t i = 0; i < callRegistered_; ++i) {
    const Registration& registration = callRegistrations_[i];
    if (begin >= registration.begin && begin + bytes <= registration.end)
      return const_cast<Registration*>(&registration);
  }
  return nullptr;
}

bool Communicator::registerForCall(const void* data, size_t bytes) {
  if (callRegistration_ != 1 || bytes < kCallRegistrationMinBytes || callRegistered_ == callRegistrations_.size() ||
      slotMemory_->ptrType() != NCCL_PTR_HOST || covering(data, bytes) != nullptr)
    return false;
  Registration& registration = callRegistrations_[callRegistered_++];
  registration.begin = reinterpret_cast<uintptr_t>(data);
  registration.end = registration.begin + bytes;
  registration.type = NCCL_PTR_HOST;
  return true;
}

void Communicator::dropCallRegistrations() {
  for (size_t i = 0; i < callRegistered_; ++i) deregister(callRegistrations_[i], /*keepKeys=*/true);
  callRegistered_ = 0;
}

void* Communicator::registeredHandle(const ConnKey& key, const void* data, size_t bytes) {
  Registration* registration = covering(data, bytes);
  if (registration == nullptr) return nullptr;
  auto found = registration->mhandles.find(key);
  if (found != registration->mhandles.end() && found->second != nullptr) return found->second;
  void* mhandle = nullptr;
  check(net_->regMr(connections_[key].comm, reinterpret_cast<void*>(registration->begin),
                    registration->end - registration->begin, registration->type, &mhandle),
        "regMr(user buffer)", key.peer);
  // A lent buffer's entry stays from an earlier operation (no allocation then).
  if (found != registration->mhandles.end())
    found->second = mhandle;
  else
    registration->mhandles[key] = mhandle;
  return mhandle;
}

bool Communicator::registered(const void* data, size_t bytes) const {
  return covering(data, bytes) != nullptr;
}

void* Communicator::forwardHandle(const ConnKey& sendKey, const ConnKey& recvKey) {
  Connection& conn = connections_[sendKey];
  auto found = conn.forwardHandles.find(recvKey);
  if (found != conn.forwardHandles.end()) return found->second;
  void* mhandle = nullptr;
  check(net_->regMr(conn.comm, connections_[recvKey].memory, options_.slotBytes * options_.slots,
                    slotMemory_->ptrType(), &mhandle),
        "regMr(forwarded slots)", sendKey.peer);
  conn.forwardHandles[recvKey] = mhandle;
  return mhandle;
}

void Communicator::deregister(Registration& registration, bool keepKeys) {
  for (auto& [key, mhandle] : registration.mhandles) {
    if (mhandle == nullptr) continue;
    auto conn = connections_.find(key);
    if (conn != connections_.end() && conn->second.comm != nullptr &&
        net_->deregMr(conn->second.comm, mhandle) != ncclSuccess)
      hostLogger(NCCL_LOG_WARN, NCCL_ALL, __FILE__, __LINE__,
                 "deregMr of a user buffer failed on the %s connection with rank %d (channel %d)",
                 key.sending ? "send" : "receive", key.peer, key.channel);
    mhandle = nullptr;
  }
  if (!keepKeys) registration.mhandles.clear();
}

void* Communicator::registerBuffer(void* data, size_t bytes, int type) {
  if (data == nullptr || bytes == 0) throw ArgumentError("registerBuffer: a NULL or empty buffer");
  // Memory that cannot exist is refused here: regMr comes only at each connection's first use (and the socket
  // plugin's checks nothing), and a range past the address space's end wrapped to a registration that matched nothing
  // (so buffers inside it went through the slots after all) or, huge but not wrapping, one that covered every later
  // buffer. Host memory must be mapped (msync checks the whole range, and MS_ASYNC flushes nothing).
  const auto begin = reinterpret_cast<uintptr_t>(data);
  char range[64];
  std::snprintf(range, sizeof(range), "%zu bytes at %p", bytes, data);
  if (bytes > UINTPTR_MAX - begin)
    throw ArgumentError(std::string("registerBuffer: ") + range + " run past the end of the address space");
  if (type != NCCL_PTR_HOST && type != NCCL_PTR_CUDA)
    throw ArgumentError("registerBuffer: type " + std::to_string(type) +
                        " is neither NCCL_PTR_HOST (1) nor NCCL_PTR_CUDA (2)");
  // GPU memory goes to the plugin only where the slots do (GPU Direct): that is where received pieces are flushed as
  // NCCL would. On a communicator that stages GPU buffers through host slots (the plugin moves host memory only, or
  // NNS_GDR=0) the plugin would write the GPU buffer with no flush, or refuse it at the first call, failing the
  // communicator; NCCL too registers user buffers with the network only under GPU Direct.
  if (type == NCCL_PTR_CUDA && slotMemory_->ptrType() != NCCL_PTR_CUDA)
    throw ArgumentError(std::string("registerBuffer: ") + range +
                        " of GPU memory (NCCL_PTR_CUDA) on a communicator without GPU Direct slots (" +
                        slotMemoryDescription_ + "): its GPU buffers go through the slots, unregistered");
  if (type == NCCL_PTR_HOST) {
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE)), first = begin & ~(page - 1);
    if (msync(reinterpret_cast<void*>(first), begin + bytes - first, MS_ASYNC) != 0 && errno == ENOMEM)
      throw ArgumentError(std::string("registerBuffer: ") + range + " are not all mapped memory of this process");
  }
  auto registration = std::make_unique<Registration>();
  registration->begin = begin;
  registration->end = begin + bytes;
  registration->type = type;
  Registration* handle = registration.get();
  submit([&] { registrations_.push_back(std::move(registration)); });
  return handle;
}

bool Communicator::deregisterBuffer(void* handle) {
  // A wrong handle is the caller's mistake, not the communicator's: it must not fail the communicator (an
  // exception inside the operation would), so the operation only reports whether it found it.
  bool found = false;
  submit([&] {
    for (auto it = registrations_.begin(); it != registrations_.end(); ++it) {
      if (it->get() != handle) continue;
      deregister(**it);
      registrations_.erase(it);
      found = true;
      return;
    }
  });
  return found;
}

void* Communicator::scratch(size_t bytes) {
  if (scratch_.size() < bytes) scratch_.resize(bytes);
  return scratch_.data();
}

void* Communicator::deviceScratch(size_t bytes, const void* near) {
  void* memory = slotMemory_->deviceScratch(bytes, near);
  if (memory == nullptr)
    throw CommError("rank " + std::to_string(rank_) + ": GPU scratch asked of slot memory that has none (" +
                        slotMemoryDescription_ + ")",
                    ncclInvalidUsage);
  return memory;
}

// ---- The plan runner ----

Plan& Communicator::newPlan() {
  plan_.clear();
  return plan_;
}

void Communicator::run(Plan& plan) {
  if (plan.empty()) return;
  if (failed_.load()) fail("communicator failed: " + asyncError(), asyncResult());
  const size_t piece = plan.pieceBytes_ == 0 ? options_.slotBytes : std::min(plan.pieceBytes_, options_.slotBytes);
  const size_t slots = static_cast<size_t>(options_.slots);
  const std::span<Plan::Flow> flows = plan.flows();
  std::vector<ConnKey>& keys = runKeys_;
  keys.clear();
  // piecesBefore[flowStart[f] + s]: the pieces of flow f's segments before s (a forward's slot bound reads them; summed
  // per forward, they took time quadratic in the segments: 2.8 s before a 64 MiB allreduce in 1 KiB pieces began).
  std::vector<size_t>& flowStart = runFlowStart_;
  std::vector<size_t>& piecesBefore = runPiecesBefore_;
  flowStart.clear();
  piecesBefore.clear();
  for (auto& flow : flows) {
    keys.push_back({flow.peer, flow.channel, flow.sending});
    flowStart.push_back(piecesBefore.size());
    size_t before = 0;
    for (auto& segment : flow.segments) {
      segment.pieces = segment.bytes == 0 ? 1 : (segment.bytes + piece - 1) / piece;
      if (plan.endMarks_ && segment.bytes > 0 && segment.bytes % piece == 0) ++segment.pieces;  // the zero-byte end
      piecesBefore.push_back(before);
      before += segment.pieces;
      segment.piecesDone = 0;
      segment.forwarded = false;
      segment.fromSlots = false;
    }
  }
  for (auto& flow : flows) {
    for (auto& segment : flow.segments)
      for (const auto& ref : segment.after) {
        if (ref.flow < 0 || static_cast<size_t>(ref.flow) >= flows.size() || flows[ref.flow].sending ||
            ref.segment < 0 || ref.segment >= static_cast<int>(flows[ref.flow].segments.size()) ||
            flows[ref.flow].segments[ref.segment].bytes != segment.bytes)
          fail("internal: a segment waits on a receive that is not of the same size in the same plan");
      }
  }
  establish(keys);
  for (size_t f = 0; f < flows.size(); ++f)
    for (auto& segment : flows[f].segments)
      segment.mhandle = segment.data == nullptr || (registrations_.empty() && callRegistered_ == 0)
                            ? nullptr
                            : registeredHandle(keys[f], segment.data, segment.bytes);
  // Forwards: from the registered memory a receive went straight into, else from its slots (held until sent).
  for (size_t f = 0; f < flows.size(); ++f) {
    size_t sendPieces = 0;
    for (auto& segment : flows[f].segments) {
      if (segment.from.flow >= 0) {
        auto& fromFlow = flows[segment.from.flow];
        Plan::Segment& source = fromFlow.segments[segment.from.segment];
        if (source.mhandle != nullptr) {
          segment.data = source.data;
          segment.mhandle = registeredHandle(keys[f], segment.data, segment.bytes);
        } else {
          const size_t recvPieces = piecesBefore[flowStart[segment.from.flow] + segment.from.segment];
          if (source.forwarded) fail("internal: a receive is forwarded twice");
          if (sendPieces >= recvPieces + slots)
            fail("internal: a forward would hold " + std::to_string(sendPieces - recvPieces + 1) +
                 " slots of its receive, which has " + std::to_string(slots));
          source.forwarded = true;
          segment.fromSlots = true;
          segment.mhandle = forwardHandle(keys[f], keys[segment.from.flow]);
        }
      }
      sendPieces += segment.pieces;
    }
  }

  std::vector<Cursor>& cursors = runCursors_;
  cursors.clear();
  for (const auto& key : keys) {
    cursors.push_back(Cursor{&connections_[key]});
    for (Slot& slot : connections_[key].slots) {
      slot.held = false;
      slot.source = nullptr;
    }
  }

  auto lastProgress = Clock::now();
  for (;;) {
    bool progressed = false, finished = true;
    for (size_t f = 0; f < flows.size(); ++f) {
      auto& flow = flows[f];
      Cursor& cursor = cursors[f];
      Connection& conn = *cursor.conn;
      while (cursor.released < cursor.tail && !conn.slots[cursor.released % slots].held) ++cursor.released;
      // Post pieces into free slots, in order.
      while (cursor.head - cursor.released < slots && cursor.postSegment < flow.segments.size()) {
        Plan::Segment& segment = flow.segments[cursor.postSegment];
        const size_t offset = cursor.postPiece * piece;
        const size_t bytes = std::min(piece, segment.bytes - std::min(segment.bytes, offset));
        Slot& slot = conn.slots[cursor.head % slots];
        if (flow.sending) {
          bool ready = true;
          for (const auto& ref : segment.after)
            ready = ready && flows[ref.flow].segments[ref.segment].piecesDone > cursor.postPiece;
          if (!ready) break;
          if (segment.fromSlots) {  // forwarded: straight from the slot the piece arrived in
            const Plan::Segment& source = flows[segment.from.flow].segments[segment.from.segment];
            Slot& arrived = cursors[segment.from.flow].conn->slots[(source.firstSlot + cursor.postPiece) % slots];
            check(net_->isend(conn.comm, arrived.memory, bytes, rank_, segment.mhandle, nullptr, &slot.request),
                  "isend", flow.peer);
            if (slot.request != nullptr) slot.source = &arrived;
          } else if (segment.mhandle != nullptr) {  // registered: straight from the user's memory
            check(net_->isend(conn.comm, const_cast<unsigned char*>(segment.data) + offset, bytes, rank_,
                              segment.mhandle, nullptr, &slot.request),
                  "isend", flow.peer);
          } else {
            // Through the slot: the copy may run asynchronously (a GPU's copy engine) while earlier pieces are on
            // the wire; the piece is posted once it is in the slot.
            if (!slot.staged) {
              if (segment.stage)
                segment.stage(offset, slot.memory, bytes);
              else
                slot.copy = slotMemory_->startCopy(slot.memory, segment.data + offset, bytes);
              slot.staged = true;
            }
            if (slot.copy != nullptr) {
              if (!slotMemory_->copyDone(slot.copy)) break;
              slot.copy = nullptr;
            }
            check(net_->isend(conn.comm, slot.memory, bytes, rank_, conn.mhandle, nullptr, &slot.request), "isend",
                  flow.peer);
            if (slot.request != nullptr) slot.staged = false;
          }
        } else {
          const bool direct = segment.mhandle != nullptr;  // registered: straight into the user's memory
          void* data = direct ? const_cast<unsigned char*>(segment.data) + offset : slot.memory;
          size_t capacity = direct ? bytes : piece;
          void* mhandle = direct ? segment.mhandle : conn.mhandle;
          int tag = flow.peer;
          if (cursor.postPiece == 0) segment.firstSlot = cursor.head;
          check(net_->irecv(conn.comm, 1, &data, &capacity, &tag, &mhandle, nullptr, &slot.request), "irecv",
                flow.peer);
        }
        if (slot.request == nullptr) break;  // the plugin asks us to retry later
        slot.bytes = bytes;
        slot.segment = static_cast<int>(cursor.postSegment);
        slot.offset = offset;
        ++cursor.head;
        if (++cursor.postPiece == segment.pieces) {
          ++cursor.postSegment;
          cursor.postPiece = 0;
        }
        progressed = true;
      }
      // Complete in order: a receive's piece is handed on before the next one.
      while (cursor.tail < cursor.head) {
        Slot& slot = conn.slots[cursor.tail % slots];
        int done = 0, size = 0;
        if (slot.request == kArrived) {
          done = 1;
          size = slot.arrivedBytes;
        } else {
          // Room for 64 sizes, zeroed, as NCCL's proxy hands a receive's test (NCCL_PROXY_MAX_SUBS): a plugin may
          // fill one per receive it can group (its maxRecvs) whatever this one's n, and a single int let such a
          // plugin write over this stack (ASan: stack-buffer-overflow, with nccl-net-check's nccl-like shim).
          int sizes[kTestSizesRoom] = {};
          const ncclResult_t tested = net_->test(slot.request, &done, sizes);
          // A receive a plugin refuses as invalid usage is most often one its message does not fit (a rank's count
          // or type that differs). The plugin may fail the whole comm and say so at the test of another of its
          // receives than the refused one: the size of the one tested is said as such, the refused one's and its
          // message's in the plugin's WARN line.
          if (tested == ncclInvalidUsage && !flow.sending)
            fail(std::string(net_->name()) + " test(recv) (peer rank " + std::to_string(flow.peer) +
                     ") returned ncclInvalidUsage, testing a receive of " + std::to_string(slot.bytes) +
                     " bytes: a plugin says so of a message larger than its receive (a count or type that differs "
                     "between the ranks?); its WARN line names the sizes of the message and of the receive",
                 ncclInvalidUsage);
          check(tested, flow.sending ? "test(send)" : "test(recv)", flow.peer);
          size = sizes[0];
        }
        if (!done) break;
        slot.request = nullptr;
        if (!flow.sending) {
          Plan::Segment& segment = flow.segments[slot.segment];
          bool ready = true;
          for (const auto& ref : segment.after)
            ready = ready && flows[ref.flow].segments[ref.segment].piecesDone > segment.piecesDone;
          if (!ready) {
            slot.request = kArrived;  // keep the piece in its slot; test() must not be called on it again
            slot.arrivedBytes = size;
            break;
          }
          if (static_cast<size_t>(size) != slot.bytes)
            fail("received " + std::to_string(size) + " bytes from rank " + std::to_string(flow.peer) + ", expected " +
                     std::to_string(slot.bytes) +
                     (!plan.endMarks_   ? ""
                      : slot.bytes == 0 ? " where the message ends: rank " + std::to_string(flow.peer) +
                                              " sent more than this receive takes (a count or type that differs "
                                              "between its send and this receive?)"
                                        : " (the send and this receive differ in size: a count or type that differs "
                                          "between them?)"),
                 ncclInvalidUsage);  // the ranks' calls disagree, as when the plugin finds the message too large
          // GPU memory that the plugin wrote (a GPU slot, or a registered GPU buffer received into directly) is
          // flushed before anything reads it, where NCCL would flush.
          if (size > 0 && flushReceives_) {
            if (segment.mhandle == nullptr) {
              flush(conn, slot.memory, size, conn.mhandle, flow.peer);
            } else if (const Registration* r = covering(segment.data, segment.bytes); r && r->type == NCCL_PTR_CUDA) {
              flush(conn, const_cast<unsigned char*>(segment.data) + slot.offset, size, segment.mhandle, flow.peer);
            }
          }
          if (segment.onPiece && segment.mhandle == nullptr) segment.onPiece(slot.offset, slot.memory, slot.bytes);
          ++segment.piecesDone;
          slot.held = segment.forwarded;
        } else if (slot.source != nullptr) {
          slot.source->held = false;  // the forwarded piece is out: its receive slot may take the next one
          slot.source = nullptr;
        }
        ++cursor.tail;
        progressed = true;
      }
      if (cursor.postSegment < flow.segments.size() || cursor.tail < cursor.head) finished = false;
    }
    if (finished) return;
    stopIfAborted();
    if (progressed) {
      lastProgress = Clock::now();
      progressStamp_.store(lastProgress.time_since_epoch().count(), std::memory_order_relaxed);
      continue;
    }
    if (Clock::now() - lastProgress > options_.timeout) {
      std::string waiting;
      for (size_t f = 0; f < flows.size(); ++f) {
        const auto& flow = flows[f];
        if (cursors[f].postSegment < flow.segments.size() || cursors[f].tail < cursors[f].head)
          waiting += std::string(waiting.empty() ? "" : ", ") + (flow.sending ? "send to" : "receive from") + " rank " +
                     std::to_string(flow.peer);
      }
      fail("no progress for " + std::to_string(options_.timeout.count()) + " ms (" + waiting +
           "; a rank dead or stuck?)");
    }
    sched_yield();
  }
}

}  // namespace nns::core
