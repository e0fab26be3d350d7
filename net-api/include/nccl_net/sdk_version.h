/* nccl_net/sdk_version.h: the release of this SDK (not an NCCL ABI version: those are the ncclNet_vN tables).
 * A plugin built against several releases can test it (#if NCCL_NET_SDK_VERSION >= 200), and the tools print it
 * (--version). The project's CMake version is read from this file, so the two cannot differ. C and C++. */
#ifndef NCCL_NET_SDK_VERSION_H_
#define NCCL_NET_SDK_VERSION_H_

#define NCCL_NET_SDK_VERSION_MAJOR 0
#define NCCL_NET_SDK_VERSION_MINOR 3
#define NCCL_NET_SDK_VERSION_PATCH 0
/* MAJOR * 10000 + MINOR * 100 + PATCH, as NCCL's NCCL_VERSION_CODE. */
#define NCCL_NET_SDK_VERSION \
  (NCCL_NET_SDK_VERSION_MAJOR * 10000 + NCCL_NET_SDK_VERSION_MINOR * 100 + NCCL_NET_SDK_VERSION_PATCH)
#define NCCL_NET_SDK_VERSION_STRING "0.3.0"

#endif /* NCCL_NET_SDK_VERSION_H_ */
