// nccl_net/sdk/visibility.hpp: keeps SDK internals out of a plugin's dynamic symbol table.
#pragma once

// Everything in namespace nccl_net::sdk is hidden, so two plugins built with different SDK versions can live in
// one process (NCCL opens plugins RTLD_LOCAL) and `nm -D` of a plugin lists only the ncclNetPlugin_vN tables.
#if defined(__GNUC__) || defined(__clang__)
#define NCCL_NET_SDK_HIDDEN_NAMESPACE __attribute__((visibility("hidden")))
#define NCCL_NET_SDK_EXPORT_SYMBOL __attribute__((visibility("default")))
#else
#define NCCL_NET_SDK_HIDDEN_NAMESPACE
#define NCCL_NET_SDK_EXPORT_SYMBOL
#endif

// namespace nccl_net::sdk, hidden. (C++17 forbids attributes on a nested namespace definition, hence two levels.)
#define NCCL_NET_SDK_NAMESPACE_BEGIN \
  namespace nccl_net {               \
  namespace sdk NCCL_NET_SDK_HIDDEN_NAMESPACE {
#define NCCL_NET_SDK_NAMESPACE_END \
  }                                \
  }
