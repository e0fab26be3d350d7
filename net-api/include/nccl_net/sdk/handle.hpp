// nccl_net/sdk/handle.hpp: the connection-handle codec: magic, version, length and checksum around a POD payload.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../net.h"
#include "log.hpp"
#include "visibility.hpp"

NCCL_NET_SDK_NAMESPACE_BEGIN

// FNV-1a, 32 bit: small, deterministic and good enough to catch corruption and foreign handles (not an attacker).
constexpr uint32_t fnv1a(const unsigned char* data, size_t size, uint32_t hash = 2166136261u) {
  for (size_t i = 0; i < size; ++i) hash = (hash ^ data[i]) * 16777619u;
  return hash;
}
constexpr uint32_t fnv1a(const char* text, uint32_t hash = 2166136261u) {
  for (; *text != '\0'; ++text) hash = (hash ^ static_cast<unsigned char>(*text)) * 16777619u;
  return hash;
}

// A plugin's magic number derived from its name, so two plugins never accept each other's handles.
constexpr uint32_t handleMagic(const char* pluginName) {
  return fnv1a(pluginName);
}

// The last bytes of the 128-byte handle are reserved for ConnectStage (see below).
inline constexpr size_t kConnectStageBytes = 16;

struct HandleHeader {
  uint32_t magic;     // identifies the plugin that wrote the handle
  uint16_t version;   // the plugin's wire version of the payload
  uint16_t length;    // payload bytes following the header
  uint32_t checksum;  // fnv1a over magic, version, length and payload
  uint32_t reserved;  // zero
};
static_assert(sizeof(HandleHeader) == 16, "HandleHeader is part of the wire format");

// Encodes/decodes a trivially copyable Payload into NCCL's opaque 128-byte handle.
template <class Payload>
class HandleCodec {
  static_assert(std::is_trivially_copyable_v<Payload>, "a handle payload travels as bytes");
  static_assert(sizeof(HandleHeader) + sizeof(Payload) <= NCCL_NET_HANDLE_MAXSIZE - kConnectStageBytes,
                "the handle payload must fit in NCCL_NET_HANDLE_MAXSIZE (128) bytes, less the connect stage");

 public:
  static constexpr size_t kEncodedSize = sizeof(HandleHeader) + sizeof(Payload);

  constexpr HandleCodec(uint32_t magic, uint16_t version) : magic_(magic), version_(version) {}

  ncclResult_t encode(const Payload& payload, void* handle) const {
    if (handle == nullptr) {
      NCCL_NET_WARN("cannot write a connection handle to a NULL buffer");
      return ncclInvalidArgument;
    }
    auto* out = static_cast<unsigned char*>(handle);
    std::memset(out, 0, NCCL_NET_HANDLE_MAXSIZE);  // also clears the connect stage
    std::memcpy(out + sizeof(HandleHeader), &payload, sizeof(Payload));
    // Checksum the bytes as they travel (a payload's padding is copied, not reinterpreted).
    HandleHeader header{magic_, version_, static_cast<uint16_t>(sizeof(Payload)), 0, 0};
    header.checksum = checksum(header, out + sizeof(HandleHeader));
    std::memcpy(out, &header, sizeof(header));
    return ncclSuccess;
  }

  ncclResult_t decode(const void* handle, Payload* payload) const {
    if (handle == nullptr || payload == nullptr) {
      NCCL_NET_WARN("cannot decode a NULL connection handle");
      return ncclInvalidArgument;
    }
    HandleHeader header;
    const auto* in = static_cast<const unsigned char*>(handle);
    std::memcpy(&header, in, sizeof(header));
    if (header.magic != magic_) {
      NCCL_NET_WARN(
          "connection handle magic 0x%08x is not this plugin's 0x%08x: a handle from another plugin, "
          "or not a handle at all",
          header.magic, magic_);
      return ncclInvalidArgument;
    }
    if (header.version != version_) {
      NCCL_NET_WARN("connection handle version %u, this plugin speaks version %u: mixed plugin builds across ranks?",
                    header.version, version_);
      return ncclInvalidUsage;
    }
    if (header.length != sizeof(Payload)) {
      NCCL_NET_WARN("connection handle length %u, expected %zu: corrupt handle", header.length, sizeof(Payload));
      return ncclInvalidArgument;
    }
    if (header.reserved != 0) {
      NCCL_NET_WARN("connection handle reserved field 0x%x, expected 0: corrupt handle",
                    static_cast<unsigned>(header.reserved));
      return ncclInvalidArgument;
    }
    if (header.checksum != checksum(header, in + sizeof(header))) {
      NCCL_NET_WARN("connection handle checksum mismatch: the handle was corrupted in transit");
      return ncclInvalidArgument;
    }
    std::memcpy(payload, in + sizeof(header), sizeof(Payload));
    return ncclSuccess;
  }

 private:
  static uint32_t checksum(HandleHeader header, const unsigned char* payload) {
    header.checksum = 0;
    uint32_t hash = fnv1a(reinterpret_cast<const unsigned char*>(&header), sizeof(header));
    return fnv1a(payload, sizeof(Payload), hash);
  }

  uint32_t magic_;
  uint16_t version_;
};

namespace detail {

// Every state that ConnectStage::set has put in a handle and nobody has taken back, with the host context of the
// connect() call that put it there. ncclNet has no call to cancel a connect: a host that gives up on one (its own
// timeout, an abort, a peer it knows to be dead) frees the handle and the state with it would leak (an fd, a
// mapping, a half-made comm). Such leftovers are deleted when the host finalizes that context (v11+, a non-NULL ctx
// only: a NULL ctx is every communicator's), and the rest when the plugin is unloaded or the process exits.
//
// The registry comes into being at the first set(), so it goes before any static the plugin made earlier (its
// device table, its library handles): a leftover's destructor may still use those.
class ConnectStageRegistry {
 public:
  using Deleter = void (*)(void*);

  static ConnectStageRegistry& instance() {
    static ConnectStageRegistry registry;
    return registry;
  }
  // The registry if set() has made it (and it is not destroyed yet), else nullptr; never makes it.
  static ConnectStageRegistry* existing() { return live().load(std::memory_order_acquire); }

  void add(void* state, Deleter deleter, void* ctx) {
    std::lock_guard<std::mutex> lock(mutex_);
    states_[state] = Entry{deleter, ctx};
  }
  bool contains(const void* state) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return states_.count(const_cast<void*>(state)) != 0;
  }
  bool remove(const void* state) {
    std::lock_guard<std::mutex> lock(mutex_);
    return states_.erase(const_cast<void*>(state)) != 0;
  }
  // Deletes the states left by connects under `ctx`; returns how many.
  size_t release(void* ctx) {
    std::vector<std::pair<void*, Entry>> leftovers;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = states_.begin(); it != states_.end();) {
        if (it->second.ctx == ctx) {
          leftovers.emplace_back(*it);
          it = states_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (auto& [state, entry] : leftovers) entry.deleter(state);  // outside the lock: a destructor may log
    return leftovers.size();
  }

  ConnectStageRegistry(const ConnectStageRegistry&) = delete;
  ConnectStageRegistry& operator=(const ConnectStageRegistry&) = delete;

 private:
  struct Entry {
    Deleter deleter;
    void* ctx;
  };
  ConnectStageRegistry() { live().store(this, std::memory_order_release); }
  ~ConnectStageRegistry() {
    live().store(nullptr, std::memory_order_release);
    for (auto& [state, entry] : states_) entry.deleter(state);
  }
  static std::atomic<ConnectStageRegistry*>& live() {
    static std::atomic<ConnectStageRegistry*> pointer{nullptr};  // trivially destructible: outlives the registry
    return pointer;
  }

  mutable std::mutex mutex_;
  std::unordered_map<void*, Entry> states_;
};

// The ctx of the connect() this thread is in: set around the plugin's connect by the SDK's entry point.
inline thread_local void* connectContext = nullptr;

class ConnectContextScope {
 public:
  explicit ConnectContextScope(void* ctx) : saved_(connectContext) { connectContext = ctx; }
  ~ConnectContextScope() { connectContext = saved_; }
  ConnectContextScope(const ConnectContextScope&) = delete;
  ConnectContextScope& operator=(const ConnectContextScope&) = delete;

 private:
  void* saved_;
};

}  // namespace detail

// NCCL calls connect() again and again with the same handle buffer until it returns a comm. A non-blocking
// connect keeps its in-progress state in the tail of that buffer (NCCL's own transports do the same).
//
//   set(handle, state)   stores a heap-allocated state (new State) and hands it to the SDK's keeping;
//   get(handle)          finds it again on the next call: nullptr for a handle that never carried one (encode()
//                        zeroes the tail), and for a tail that does not name a state this plugin set and still
//                        keeps (a corrupt or foreign handle is never followed to a pointer);
//   take(handle)         ends the stage (the connect made its comm, or failed): the tail is zeroed and the state
//                        is the caller's again.
//
// A state that is never taken (the host gave up on the connect) is deleted by the SDK: when the host finalizes the
// ctx the connect ran under, or when the plugin is unloaded (see detail::ConnectStageRegistry). Its destructor must
// therefore release what it holds.
template <class State>
class ConnectStage {
 public:
  static State* get(const void* handle) {
    Slot slot;
    std::memcpy(&slot, tail(handle), sizeof(slot));
    if (slot.pointer == 0 || slot.check != (slot.pointer ^ kCheck)) return nullptr;
    auto* state = reinterpret_cast<State*>(slot.pointer);
    detail::ConnectStageRegistry* registry = detail::ConnectStageRegistry::existing();
    if (registry == nullptr || !registry->contains(state)) return nullptr;
    return state;
  }
  static void set(void* handle, State* state) {
    detail::ConnectStageRegistry::instance().add(
        state, [](void* p) { delete static_cast<State*>(p); }, detail::connectContext);
    auto pointer = reinterpret_cast<uint64_t>(state);
    Slot slot{pointer, pointer ^ kCheck};
    std::memcpy(tail(handle), &slot, sizeof(slot));
  }
  static std::unique_ptr<State> take(void* handle) {
    State* state = get(handle);
    std::memset(tail(handle), 0, sizeof(Slot));
    if (state == nullptr) return nullptr;
    detail::ConnectStageRegistry::instance().remove(state);
    return std::unique_ptr<State>(state);
  }
  // take() as SDK 0.1 spelled it: ends the stage and leaves deleting the state to the caller.
  static void clear(void* handle) { (void)take(handle).release(); }

 private:
  struct Slot {
    uint64_t pointer;
    uint64_t check;
  };
  static_assert(sizeof(Slot) == kConnectStageBytes);
  static constexpr uint64_t kCheck = 0x6e6e732d73746167ull;  // "nns-stag"
  static unsigned char* tail(void* handle) {
    return static_cast<unsigned char*>(handle) + NCCL_NET_HANDLE_MAXSIZE - kConnectStageBytes;
  }
  static const unsigned char* tail(const void* handle) {
    return static_cast<const unsigned char*>(handle) + NCCL_NET_HANDLE_MAXSIZE - kConnectStageBytes;
  }
};

NCCL_NET_SDK_NAMESPACE_END
