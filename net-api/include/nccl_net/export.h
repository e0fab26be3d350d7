/* nccl_net/export.h: NCCL_NET_EXPORT, for a plugin written in C against the ABI headers alone. pkg-config's
 * nccl-net-sdk flags build with hidden visibility (and a version script that keeps only the ncclNetPlugin_vN and
 * ncclCollNetPlugin_vN tables): a table not marked with it is hidden, and NCCL's dlsym does not find it.
 *
 *   #include <nccl_net/export.h>
 *   #include <nccl_net/net_v8.h>
 *   NCCL_NET_EXPORT const ncclNet_v8_t ncclNetPlugin_v8 = { "mynet", myInit, ... };
 *
 * (The C++ SDK's NCCL_NET_SDK_EXPORT marks its tables itself.) Not part of NCCL's headers. */
#ifndef NCCL_NET_EXPORT_H_
#define NCCL_NET_EXPORT_H_

#if defined(__GNUC__) || defined(__clang__)
#define NCCL_NET_EXPORT __attribute__((visibility("default")))
#else
#define NCCL_NET_EXPORT
#endif

#endif /* NCCL_NET_EXPORT_H_ */
