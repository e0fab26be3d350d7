// nccl_net/sdk/handle.hpp: the connection-handle codec: magic, version, length and checksum around a POD payload.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
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
      return ncclInternalError;
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
      return ncclInternalError;
    }
    HandleHeader header;
    const auto* in = static_cast<const unsigned char*>(handle);
    std::memcpy(&header, in, sizeof(header));
    if (header.magic != magic_) {
      NCCL_NET_WARN(
          "connection handle magic 0x%08x is not this plugin's 0x%08x: a handle from another plugin, "
          "or not a handle at all",
          header.magic, magic_);
      return ncclInternalError;
    }
    if (header.version != version_) {
      NCCL_NET_WARN("connection handle version %u, this plugin speaks version %u: mixed plugin builds across ranks?",
                    header.version, version_);
      return ncclInvalidUsage;
    }
    if (header.length != sizeof(Payload)) {
      NCCL_NET_WARN("connection handle length %u, expected %zu: corrupt handle", header.length, sizeof(Payload));
      return ncclInternalError;
    }
    if (header.reserved != 0) {
      NCCL_NET_WARN("connection handle reserved field 0x%x, expected 0: corrupt handle",
                    static_cast<unsigned>(header.reserved));
      return ncclInternalError;
    }
    if (header.checksum != checksum(header, in + sizeof(header))) {
      NCCL_NET_WARN("connection handle checksum mismatch: the handle was corrupted in transit");
      return ncclInternalError;
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

// Holds one T in static storage that is never destroyed, so a call into the plugin during process exit, after its
// statics were destroyed (a host's own static tearing down a communicator), still finds a valid object. What T holds
// is given back at unload or exit by T::close(), run by a static made right after it (so it runs before the statics
// the plugin made earlier are destroyed): after dlclose nothing is left unreachable for LeakSanitizer to report.
template <class T>
class Immortal {
 public:
  static T& get() {
    alignas(T) static unsigned char storage[sizeof(T)];
    static T* object = new (storage) T;
    static Closer closer{object};
    return *object;
  }

 private:
  struct Closer {
    T* object;
    ~Closer() { object->close(); }
  };
};

// A tag per vendor class: a ctx made by one exported class's init (the ncclNet, or the ncclCollNet) is refused by
// the other's entry points.
template <class Vendor>
const void* vendorTag() {
  static char tag;  // not const: identical constants may be merged
  return &tag;
}

// The contexts this plugin's init handed out (v11+). The host holds a token of the SDK's for every init, never the
// plugin's own ctx: so each communicator is told apart (a plugin may return NULL, or the same object, from every
// init), a ctx that init never returned is refused by name, and so is one already finalized. The plugin is handed the
// ctx its init returned, as before. A token is a number, never reused while the plugin is loaded, with high bits no
// user-space address has (so no pointer the host has is mistaken for one) and a salt of this table's (so another
// SDK-built plugin's token is very likely refused too): a token at or below the last one made that is no longer
// listed was finalized, and a finalized one takes no memory.
class ContextTokens {
 public:
  static ContextTokens& instance() { return Immortal<ContextTokens>::get(); }

  void* make(const void* vendor, void* pluginCtx) {
    std::lock_guard<std::mutex> lock(mutex_);
    // During exit nothing is left to tell apart; after 2^36 inits (never, in practice) neither.
    if (closed_ || lastNumber_ == kNumberMask) return pluginCtx;
    const uint64_t number = ++lastNumber_;
    tokens_.emplace(number, Entry{vendor, pluginCtx});
    return tokenOf(number);
  }
  enum class Lookup { kLive, kFinalized, kUnknown };
  // What `ctx` from the host is; for a live one, *pluginCtx is what init returned. NULL is let through as NULL (hosts
  // before v11 pass none; NCCL never passes NULL from v11 on), and so is everything once the plugin is closing.
  Lookup find(const void* vendor, void* ctx, void** pluginCtx) const {
    *pluginCtx = nullptr;
    if (ctx == nullptr) return Lookup::kLive;
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) return Lookup::kLive;
    const uint64_t number = numberOf(ctx);
    if (number == 0) return Lookup::kUnknown;
    auto it = tokens_.find(number);
    if (it == tokens_.end()) return Lookup::kFinalized;
    if (it->second.vendor != vendor) return Lookup::kUnknown;
    *pluginCtx = it->second.pluginCtx;
    return Lookup::kLive;
  }
  // Forgets a live token (it reads as finalized from then on); false if it was not live (finalized meanwhile by
  // another thread).
  bool finish(void* ctx) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) return true;
    return tokens_.erase(numberOf(ctx)) == 1;
  }
  // Frees the table's memory (buckets too: the immortal instance's storage goes with the library at dlclose, and a
  // leak checker would then count what it still pointed to).
  void close() {
    std::unordered_map<uint64_t, Entry> tokens;  // freed after the lock is released
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    tokens.swap(tokens_);
  }
  // How many tokens are live (not finalized).
  size_t liveCount() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return tokens_.size();
  }

 private:
  static_assert(sizeof(void*) == 8, "tokens are 64-bit addresses");
  static constexpr uint64_t kTokenBits = 0xc7c0000000000000ull;  // above any user-space address (x86-64, AArch64)
  static constexpr int kNumberBits = 36;
  static constexpr uint64_t kNumberMask = (1ull << kNumberBits) - 1;
  // 12 bits between the number and kTokenBits, from this table's address: each plugin's table is its own.
  const uint64_t salt_ = ((static_cast<uint64_t>(reinterpret_cast<uintptr_t>(this)) >> 4) * 0x9e3779b97f4a7c15ull >> 52)
                         << kNumberBits;
  void* tokenOf(uint64_t number) const {
    return reinterpret_cast<void*>(static_cast<uintptr_t>(kTokenBits | salt_ | number));
  }
  // The token's number, or 0 for a pointer that is no token of this table's (or one not made yet).
  uint64_t numberOf(const void* ctx) const {
    const auto bits = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ctx));
    const uint64_t number = bits & kNumberMask;
    if ((bits & ~kNumberMask) != (kTokenBits | salt_) || number == 0 || number > lastNumber_) return 0;
    return number;
  }

  struct Entry {
    const void* vendor;
    void* pluginCtx;
  };
  mutable std::mutex mutex_;
  bool closed_ = false;
  uint64_t lastNumber_ = 0;
  std::unordered_map<uint64_t, Entry> tokens_;
};

// Every state a connect left in a handle through ConnectStage and nobody has taken back, with the host ctx of the
// connect() call that put it there. ncclNet has no call to cancel a connect: a host that gives up on one (its own
// timeout, an abort, a peer it knows to be dead) frees the handle, and the state with it would leak (an fd, a mapping,
// a half-made comm). Owned states (ConnectStage::adopt) left so are deleted when the host finalizes that ctx (v11+),
// and the rest when the plugin is unloaded or the process exits (hosts before v11 have no finalize).
//
// A forked child inherits the parent's entries: it never finds, takes or deletes them (they hold the parent's
// segments, QPs and workers), and keeps them listed, so they stay reachable rather than leaked.
//
// The deletions at unload or exit run before the statics the plugin made before its first adopt() are destroyed (a
// state's destructor may use those), and after the ones it made later (which a destructor must therefore not use).
class ConnectStageRegistry {
 public:
  using Deleter = void (*)(void*);

  static ConnectStageRegistry& instance() { return Immortal<ConnectStageRegistry>::get(); }
  // The registry if the first adopt() or set() has made it, else nullptr; never makes it (and so never makes the
  // closing static at the wrong point of the plugin's static order).
  static ConnectStageRegistry* existing() { return live().load(std::memory_order_acquire); }

  ConnectStageRegistry() { live().store(this, std::memory_order_release); }
  ConnectStageRegistry(const ConnectStageRegistry&) = delete;
  ConnectStageRegistry& operator=(const ConnectStageRegistry&) = delete;

  // Returns the id the handle's tail carries beside the pointer; 0 (never found again) once the plugin is closing.
  uint64_t add(void* state, const void* type, Deleter deleter, void* ctx) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) return 0;
    const uint64_t id = ++lastId_;
    states_.erase(state);  // (emplace, not operator[]: keeps the plugin free of GNU-unique symbols)
    states_.emplace(state, Entry{type, deleter, ctx, id, getpid()});
    return id;
  }
  bool contains(const void* state, const void* type, uint64_t id) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = states_.find(const_cast<void*>(state));
    return it != states_.end() && it->second.id == id && it->second.type == type && it->second.owner == getpid();
  }
  // Unregisters the state if it is still the one `id` names; false if it was not (released meanwhile, never kept, or
  // the parent's).
  bool remove(const void* state, uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = states_.find(const_cast<void*>(state));
    if (it == states_.end() || it->second.id != id || it->second.owner != getpid()) return false;
    states_.erase(it);
    return true;
  }
  // Deletes the owned states left by this process's connects under `ctx` (forgets the unowned ones); returns how many
  // were deleted.
  size_t release(void* ctx) {
    return destroy(takeOut([ctx](const Entry& entry) { return entry.ctx == ctx; }));
  }
  void close() {
    std::vector<std::pair<void*, Entry>> leftovers = takeOut([](const Entry&) { return true; }, /*closing=*/true);
    {
      // An emptied map still holds its bucket array, which a dlclose would leave unreachable. (A forked child's map
      // keeps the parent's entries, reachable while the plugin stays loaded.)
      std::lock_guard<std::mutex> lock(mutex_);
      if (states_.empty()) decltype(states_)().swap(states_);
    }
    destroy(leftovers);
  }

 private:
  struct Entry {
    const void* type;  // ConnectStage<State>'s tag: a state is found again only as the type it was kept as
    Deleter deleter;   // nullptr: not owned (set()), forgotten rather than deleted
    void* ctx;
    uint64_t id;
    pid_t owner;
  };
  template <class Match>
  std::vector<std::pair<void*, Entry>> takeOut(Match match, bool closing = false) {
    std::vector<std::pair<void*, Entry>> out;
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = closed_ || closing;
    const pid_t self = getpid();
    for (auto it = states_.begin(); it != states_.end();) {
      if (it->second.owner == self && match(it->second)) {
        out.emplace_back(*it);
        it = states_.erase(it);
      } else {
        ++it;
      }
    }
    return out;
  }
  // Outside the lock: a destructor may log, or use the registry.
  static size_t destroy(const std::vector<std::pair<void*, Entry>>& leftovers) {
    size_t deleted = 0;
    for (const auto& [state, entry] : leftovers) {
      if (entry.deleter == nullptr) continue;
      entry.deleter(state);
      ++deleted;
    }
    return deleted;
  }
  static std::atomic<ConnectStageRegistry*>& live() {
    static std::atomic<ConnectStageRegistry*> pointer{nullptr};  // trivially destructible
    return pointer;
  }

  mutable std::mutex mutex_;
  bool closed_ = false;
  uint64_t lastId_ = 0;
  std::unordered_map<void*, Entry> states_;
};

// The host ctx of the connect() this thread is in: set around the plugin's connect by the SDK's entry point.
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
//   adopt(handle, std::make_unique<State>(...))  stores a state and hands it to the SDK's keeping; returns it;
//   get(handle)    finds it again on the next call: nullptr for a handle that never carried one (encode() zeroes
//                  the tail), and for a tail that does not name a state this plugin still keeps as a State (a
//                  corrupt, stale or forged handle is never followed to a pointer);
//   take(handle)   ends the stage (the connect made its comm, or failed): the tail is zeroed and the state is the
//                  caller's again, as a unique_ptr.
//
// A state adopted and never taken (the host gave up on the connect: ncclNet has no call to cancel one) is deleted by
// the SDK when the host finalizes the ctx the connect ran under (v11+), or else when the plugin is unloaded (see
// detail::ConnectStageRegistry), on whichever thread does that. Its destructor must release what it holds.
//
// set(handle, state) and clear(handle) are SDK 0.1's spelling: set keeps the pointer without owning it (the caller
// deletes it after clear, and a connect the host gives up leaks it, as before).
template <class State>
class ConnectStage {
 public:
  static State* get(const void* handle) {
    Slot slot;
    std::memcpy(&slot, tail(handle), sizeof(slot));
    if (slot.pointer == 0) return nullptr;
    auto* state = reinterpret_cast<State*>(slot.pointer);
    detail::ConnectStageRegistry* registry = detail::ConnectStageRegistry::existing();
    if (registry == nullptr || !registry->contains(state, typeTag(), slot.id)) return nullptr;
    return state;
  }
  static State* adopt(void* handle, std::unique_ptr<State> state) {
    State* kept = state.get();
    store(handle, kept, [](void* p) { delete static_cast<State*>(p); });
    (void)state.release();  // the registry owns it from here
    return kept;
  }
  static std::unique_ptr<State> take(void* handle) {
    Slot slot;
    std::memcpy(&slot, tail(handle), sizeof(slot));
    State* state = get(handle);
    std::memset(tail(handle), 0, sizeof(Slot));
    // Gone from the registry meanwhile (a finalize of its ctx on another thread): not the caller's to delete.
    if (state == nullptr || !detail::ConnectStageRegistry::instance().remove(state, slot.id)) return nullptr;
    return std::unique_ptr<State>(state);
  }

  static void set(void* handle, State* state) { store(handle, state, nullptr); }
  static void clear(void* handle) { (void)take(handle).release(); }

 private:
  struct Slot {
    uint64_t pointer;
    uint64_t id;  // the registry's id for this adopt/set: a stale tail naming a reused address is not followed
  };
  static_assert(sizeof(Slot) == kConnectStageBytes);
  static const void* typeTag() { return detail::vendorTag<State>(); }
  static void store(void* handle, State* state, detail::ConnectStageRegistry::Deleter deleter) {
    const uint64_t id = detail::ConnectStageRegistry::instance().add(state, typeTag(), deleter, detail::connectContext);
    Slot slot{reinterpret_cast<uint64_t>(state), id};
    std::memcpy(tail(handle), &slot, sizeof(slot));
  }
  static unsigned char* tail(void* handle) {
    return static_cast<unsigned char*>(handle) + NCCL_NET_HANDLE_MAXSIZE - kConnectStageBytes;
  }
  static const unsigned char* tail(const void* handle) {
    return static_cast<const unsigned char*>(handle) + NCCL_NET_HANDLE_MAXSIZE - kConnectStageBytes;
  }
};

NCCL_NET_SDK_NAMESPACE_END
