// nccl_net/sdk/handle.hpp: the connection-handle codec: magic, version, length and checksum around a POD payload.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../net.h"
#include "log.hpp"
#include "visibility.hpp"

namespace nccl_net::sdk NCCL_NET_SDK_HIDDEN_NAMESPACE {

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
constexpr uint32_t handleMagic(const char* pluginName) { return fnv1a(pluginName); }

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
  static_assert(sizeof(HandleHeader) + sizeof(Payload) <= NCCL_NET_HANDLE_MAXSIZE,
                "the handle must fit in NCCL_NET_HANDLE_MAXSIZE (128) bytes");

 public:
  static constexpr size_t kEncodedSize = sizeof(HandleHeader) + sizeof(Payload);

  constexpr HandleCodec(uint32_t magic, uint16_t version) : magic_(magic), version_(version) {}

  ncclResult_t encode(const Payload& payload, void* handle) const {
    if (handle == nullptr) {
      NCCL_NET_WARN("cannot write a connection handle to a NULL buffer");
      return ncclInvalidArgument;
    }
    HandleHeader header{magic_, version_, static_cast<uint16_t>(sizeof(Payload)), 0, 0};
    header.checksum = checksum(header, reinterpret_cast<const unsigned char*>(&payload));
    auto* out = static_cast<unsigned char*>(handle);
    std::memcpy(out, &header, sizeof(header));
    std::memcpy(out + sizeof(header), &payload, sizeof(Payload));
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
      NCCL_NET_WARN("connection handle magic 0x%08x is not this plugin's 0x%08x: a handle from another plugin, "
                    "or not a handle at all",
                    header.magic, magic_);
      return ncclInvalidArgument;
    }
    if (header.version != version_) {
      NCCL_NET_WARN("connection handle version %u, this plugin speaks version %u: mixed plugin builds across ranks?",
                    header.version, version_);
      return ncclInvalidUsage;
    }
    if (header.length != sizeof(Payload) || header.reserved != 0) {
      NCCL_NET_WARN("connection handle length %u, expected %zu: corrupt handle", header.length, sizeof(Payload));
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

}  // namespace nccl_net::sdk
