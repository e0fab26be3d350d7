// ucx_wire.hpp: what nns-ucx puts on the wire outside UCX: its connection handle and the side channel's two messages.
// The plugin and the tests that forge them (a stale handle, a hostile hello, a stranger's reply) share this one layout.
#pragma once

#include <cstdint>

#include <nccl_net/sdk/handle.hpp>
#include <nccl_net/sdk/socket.hpp>

namespace nns_ucx {

constexpr const char kPluginName[] = "nns-ucx";
constexpr uint32_t kWireMagic = 0x4e55435au;  // "NUCZ"
constexpr uint32_t kWireVersion = 1;
constexpr uint32_t kMaxWorkerAddressBytes = 64 * 1024;

struct HandlePayload {
  uint64_t listenId;                         // random; a connector proves with it that it holds this listener's handle
  nccl_net::sdk::SocketAddress sideChannel;  // where the listener accepts the worker-address exchange
};
constexpr nccl_net::sdk::HandleCodec<HandlePayload> kHandleCodec(nccl_net::sdk::handleMagic(kPluginName), 1);

// connector -> listener, followed by the sender worker's address
struct Hello {
  uint32_t magic;
  uint32_t version;
  uint64_t listenId;
  uint32_t addressBytes;
  uint32_t reserved;
};
// listener -> connector, followed by the receiver worker's address
struct Reply {
  uint32_t magic;
  uint32_t connectionTag;  // the high 32 bits of every UCP tag on this connection
  uint32_t addressBytes;
  uint32_t reserved;
};

}  // namespace nns_ucx
