/* nccl_net/common.h: constants shared by every ncclNet/ncclCollNet ABI version (values as of NCCL 2.30). */
#ifndef NCCL_NET_COMMON_H_
#define NCCL_NET_COMMON_H_

#include "types.h"

/* listen() writes at most this many bytes of connection handle; the host ships it to the peer verbatim. */
#define NCCL_NET_HANDLE_MAXSIZE 128

/* ptrSupport bits and regMr() types. */
#define NCCL_PTR_HOST 0x1
#define NCCL_PTR_CUDA 0x2
#define NCCL_PTR_DMABUF 0x4

/* Requests in flight per comm the host may post (8 up to NCCL 2.18, 32 since 2.19). */
#define NCCL_NET_MAX_REQUESTS 32
#define NCCL_NET_MAX_REQUESTS_V6 8

/* Physical devices one virtual NIC may fuse: 4 for v9..v11 plugins, 8 for v12. */
#define NCCL_NET_MAX_DEVS_PER_NIC_V11 4
#define NCCL_NET_MAX_DEVS_PER_NIC_V12 8
#define NCCL_NET_MAX_DEVS_PER_NIC NCCL_NET_MAX_DEVS_PER_NIC_V12

/* Passed *in* *request to irecv (since 2.24): the host does not need an exact completion (LL protocols). */
#define NCCL_NET_OPTIONAL_RECV_COMPLETION 0x1
#define NCCL_NET_MULTI_REQUEST 0x2

/* Registration flags and signal operations of NCCL's GIN/RMA paths (FORCE_SO and the signal operations since NCCL
 * 2.28, SIGNAL_NEVER_RESET since 2.30.7; 2.30's early builds lack it): no ncclNet_vN call takes them; they are here so
 * that code written against NCCL's net header finds every name it defines. */
#define NCCL_NET_MR_FLAG_FORCE_SO (1 << 0)
#define NCCL_NET_MR_FLAG_SIGNAL_NEVER_RESET (1 << 1)
#define NCCL_NET_SIGNAL_OP_INC 0x1
#define NCCL_NET_SIGNAL_OP_ADD 0x2

/* Upper bound the host accepts for maxP2pBytes / maxCollBytes (1 TiB), and the defaults it fills for v6..v8. */
#define NCCL_MAX_NET_SIZE_BYTES (1ULL * 1024 * 1024 * 1024 * 1024)
#define NCCL_NET_DEFAULT_MAX_P2P_BYTES (1ULL << 30)
#define NCCL_NET_DEFAULT_MAX_COLL_BYTES (512ULL << 20)
/* The same two defaults under the names NCCL's own nccl_net.h gives them (signed long there, as here), for code
 * ported from NCCL's plugins. */
#ifndef MAX_NET_SIZE
#define MAX_NET_SIZE (1024 * 1024 * 1024L)
#endif
#ifndef MAX_COLLNET_SIZE
#define MAX_COLLNET_SIZE (512 * 1024 * 1024L)
#endif

#define NCCL_NET_TRAFFIC_CLASS_UNDEF (-1)
#define NCCL_NET_ATTR_UNDEF (-1)
/* An ncclNetAttr_v11_t / _v12_t with every hint unset (the host's initializer for what it passes to setNetAttr). */
#define NCCL_NET_ATTR_INIT                                                                          \
  {                                                                                                 \
    {NCCL_NET_ATTR_UNDEF, NCCL_NET_ATTR_UNDEF, NCCL_NET_ATTR_UNDEF, NCCL_NET_ATTR_UNDEF},           \
        {NCCL_NET_ATTR_UNDEF, NCCL_NET_ATTR_UNDEF, NCCL_NET_ATTR_UNDEF, NCCL_NET_ATTR_UNDEF},       \
        (uint32_t)NCCL_NET_ATTR_UNDEF, (uint32_t)NCCL_NET_ATTR_UNDEF, (uint32_t)NCCL_NET_ATTR_UNDEF \
  }
#define NCCL_NET_ID_UNDEF (-1)

#ifndef NCCL_NET_MAX_PLUGINS
#define NCCL_NET_MAX_PLUGINS 16
#endif

#endif /* NCCL_NET_COMMON_H_ */
