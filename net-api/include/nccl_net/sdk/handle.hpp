// nccl_net/sdk/handle.hpp: the connection-handle codec: magic, version, length and checksum around a POD payload.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

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

// NCCL calls connect() again and again with the same handle buffer until it returns a comm. A non-blocking
// connect keeps its in-progress state in the tail of that buffer (NCCL's own transports do the same); the state
// pointer is stored with a check word so a handle that never carried one (zeroed by encode()) reads as "no stage".
template <class State>
class ConnectStage {
 public:
  static State* get(const void* handle) {
    Slot slot;
    std::memcpy(&slot, tail(handle), sizeof(slot));
    if (slot.pointer == 0 || slot.check != (slot.pointer ^ kCheck)) return nullptr;
    return reinterpret_cast<State*>(slot.pointer);
  }
  static void set(void* handle, State* state) {
    auto pointer = reinterpret_cast<uint64_t>(state);
    Slot slot{pointer, pointer ^ kCheck};
    std::memcpy(tail(handle), &slot, sizeof(slot));
  }
  static void clear(void* handle) { std::memset(tail(handle), 0, sizeof(Slot)); }

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
