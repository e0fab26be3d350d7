/* nccl_net/abi_checks.h: compile-time pins of every ABI struct's size, alignment and field offsets.
 * The values are the layouts measured against NCCL 2.13..2.30 (LP64), as ../shared/spec/net-abi.md tabulates them;
 * tests/abi compiles them as C99, C11 and C++. Kept as tables, one line per field: clang-format leaves them alone. */
#ifndef NCCL_NET_ABI_CHECKS_H_
#define NCCL_NET_ABI_CHECKS_H_

#include <stddef.h>

#include "net.h"

/* clang-format off */
/* Each check takes a message (C11, C++) and, for C99, where a failed check is an array of negative size, the name
 * that array gets: nccl_net_abi_maxP2pBytes_has_the_wrong_size_12 says what the message would. */
#if defined(__cplusplus)
#define NCCL_NET_STATIC_ASSERT(cond, msg, name) static_assert(cond, msg);
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define NCCL_NET_STATIC_ASSERT(cond, msg, name) _Static_assert(cond, msg);
#else /* C99: a negative array size fails the build */
#define NCCL_NET_ABI_CAT2_(a, b) a##b
#define NCCL_NET_ABI_CAT_(a, b) NCCL_NET_ABI_CAT2_(a, b)
#define NCCL_NET_STATIC_ASSERT(cond, msg, name) \
  typedef char NCCL_NET_ABI_CAT_(name, __COUNTER__)[(cond) ? 1 : -1];
#endif

#define NCCL_NET_ABI_SIZE(T, size, align) \
  NCCL_NET_STATIC_ASSERT(sizeof(T) == (size), #T " has the wrong size", nccl_net_abi_type_has_the_wrong_size_) \
  NCCL_NET_STATIC_ASSERT(NCCL_NET_ALIGNOF(T) == (align), #T " has the wrong alignment", \
                         nccl_net_abi_type_has_the_wrong_alignment_)
#define NCCL_NET_ABI_FIELD(T, field, offset, size) \
  NCCL_NET_STATIC_ASSERT(offsetof(T, field) == (offset), #T "." #field " is at the wrong offset", \
                         nccl_net_abi_##field##_is_at_the_wrong_offset_) \
  NCCL_NET_STATIC_ASSERT(sizeof(((T*)0)->field) == (size), #T "." #field " has the wrong size", \
                         nccl_net_abi_##field##_has_the_wrong_size_)
/* Ends every NCCL_NET_ABI_CHECK_* use: a declaration that the caller's semicolon completes, so a use reads as a
 * statement (NCCL_NET_ABI_CHECK_ALL();) and leaves no empty declaration behind, which ISO C refuses under -pedantic.
 * At file or namespace scope (or in a function), not inside a class: a member may not be declared twice.
 * Declaring a struct tag again is allowed in C and C++ alike. */
#define NCCL_NET_ABI_END_ struct nccl_net_abi_checks_end_

#if defined(__cplusplus)
#define NCCL_NET_ALIGNOF(T) alignof(T)
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define NCCL_NET_ALIGNOF(T) _Alignof(T)
#else /* C99 has no alignof; GCC and Clang provide __alignof__ */
#define NCCL_NET_ALIGNOF(T) __alignof__(T)
#endif

#define NCCL_NET_ABI_CHECK_ncclNetDeviceHandle_v7_t(T) \
  NCCL_NET_ABI_SIZE(T, 32, 8) \
  NCCL_NET_ABI_FIELD(T, netDeviceType, 0, 4) \
  NCCL_NET_ABI_FIELD(T, netDeviceVersion, 4, 4) \
  NCCL_NET_ABI_FIELD(T, handle, 8, 8) \
  NCCL_NET_ABI_FIELD(T, size, 16, 8) \
  NCCL_NET_ABI_FIELD(T, needsProxyProgress, 24, 4) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclNetProperties_v6_t(T) \
  NCCL_NET_ABI_SIZE(T, 48, 8) \
  NCCL_NET_ABI_FIELD(T, name, 0, 8) \
  NCCL_NET_ABI_FIELD(T, pciPath, 8, 8) \
  NCCL_NET_ABI_FIELD(T, guid, 16, 8) \
  NCCL_NET_ABI_FIELD(T, ptrSupport, 24, 4) \
  NCCL_NET_ABI_FIELD(T, speed, 28, 4) \
  NCCL_NET_ABI_FIELD(T, port, 32, 4) \
  NCCL_NET_ABI_FIELD(T, latency, 36, 4) \
  NCCL_NET_ABI_FIELD(T, maxComms, 40, 4) \
  NCCL_NET_ABI_FIELD(T, maxRecvs, 44, 4) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclNet_v6_t(T) \
  NCCL_NET_ABI_SIZE(T, 136, 8) \
  NCCL_NET_ABI_FIELD(T, name, 0, 8) \
  NCCL_NET_ABI_FIELD(T, init, 8, 8) \
  NCCL_NET_ABI_FIELD(T, devices, 16, 8) \
  NCCL_NET_ABI_FIELD(T, getProperties, 24, 8) \
  NCCL_NET_ABI_FIELD(T, listen, 32, 8) \
  NCCL_NET_ABI_FIELD(T, connect, 40, 8) \
  NCCL_NET_ABI_FIELD(T, accept, 48, 8) \
  NCCL_NET_ABI_FIELD(T, regMr, 56, 8) \
  NCCL_NET_ABI_FIELD(T, regMrDmaBuf, 64, 8) \
  NCCL_NET_ABI_FIELD(T, deregMr, 72, 8) \
  NCCL_NET_ABI_FIELD(T, isend, 80, 8) \
  NCCL_NET_ABI_FIELD(T, irecv, 88, 8) \
  NCCL_NET_ABI_FIELD(T, iflush, 96, 8) \
  NCCL_NET_ABI_FIELD(T, test, 104, 8) \
  NCCL_NET_ABI_FIELD(T, closeSend, 112, 8) \
  NCCL_NET_ABI_FIELD(T, closeRecv, 120, 8) \
  NCCL_NET_ABI_FIELD(T, closeListen, 128, 8) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclCollNet_v6_t(T) \
  NCCL_NET_ABI_SIZE(T, 120, 8) \
  NCCL_NET_ABI_FIELD(T, name, 0, 8) \
  NCCL_NET_ABI_FIELD(T, init, 8, 8) \
  NCCL_NET_ABI_FIELD(T, devices, 16, 8) \
  NCCL_NET_ABI_FIELD(T, getProperties, 24, 8) \
  NCCL_NET_ABI_FIELD(T, listen, 32, 8) \
  NCCL_NET_ABI_FIELD(T, connect, 40, 8) \
  NCCL_NET_ABI_FIELD(T, reduceSupport, 48, 8) \
  NCCL_NET_ABI_FIELD(T, regMr, 56, 8) \
  NCCL_NET_ABI_FIELD(T, regMrDmaBuf, 64, 8) \
  NCCL_NET_ABI_FIELD(T, deregMr, 72, 8) \
  NCCL_NET_ABI_FIELD(T, iallreduce, 80, 8) \
  NCCL_NET_ABI_FIELD(T, iflush, 88, 8) \
  NCCL_NET_ABI_FIELD(T, test, 96, 8) \
  NCCL_NET_ABI_FIELD(T, closeColl, 104, 8) \
  NCCL_NET_ABI_FIELD(T, closeListen, 112, 8) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclNetProperties_v7_t(T) \
  NCCL_NET_ABI_SIZE(T, 56, 8) \
  NCCL_NET_ABI_FIELD(T, name, 0, 8) \
  NCCL_NET_ABI_FIELD(T, pciPath, 8, 8) \
  NCCL_NET_ABI_FIELD(T, guid, 16, 8) \
  NCCL_NET_ABI_FIELD(T, ptrSupport, 24, 4) \
  NCCL_NET_ABI_FIELD(T, speed, 28, 4) \
  NCCL_NET_ABI_FIELD(T, port, 32, 4) \
  NCCL_NET_ABI_FIELD(T, latency, 36, 4) \
  NCCL_NET_ABI_FIELD(T, maxComms, 40, 4) \
  NCCL_NET_ABI_FIELD(T, maxRecvs, 44, 4) \
  NCCL_NET_ABI_FIELD(T, netDeviceType, 48, 4) \
  NCCL_NET_ABI_FIELD(T, netDeviceVersion, 52, 4) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclNet_v7_t(T) \
  NCCL_NET_ABI_SIZE(T, 152, 8) \
  NCCL_NET_ABI_FIELD(T, name, 0, 8) \
  NCCL_NET_ABI_FIELD(T, init, 8, 8) \
  NCCL_NET_ABI_FIELD(T, devices, 16, 8) \
  NCCL_NET_ABI_FIELD(T, getProperties, 24, 8) \
  NCCL_NET_ABI_FIELD(T, listen, 32, 8) \
  NCCL_NET_ABI_FIELD(T, connect, 40, 8) \
  NCCL_NET_ABI_FIELD(T, accept, 48, 8) \
  NCCL_NET_ABI_FIELD(T, regMr, 56, 8) \
  NCCL_NET_ABI_FIELD(T, regMrDmaBuf, 64, 8) \
  NCCL_NET_ABI_FIELD(T, deregMr, 72, 8) \
  NCCL_NET_ABI_FIELD(T, isend, 80, 8) \
  NCCL_NET_ABI_FIELD(T, irecv, 88, 8) \
  NCCL_NET_ABI_FIELD(T, iflush, 96, 8) \
  NCCL_NET_ABI_FIELD(T, test, 104, 8) \
  NCCL_NET_ABI_FIELD(T, closeSend, 112, 8) \
  NCCL_NET_ABI_FIELD(T, closeRecv, 120, 8) \
  NCCL_NET_ABI_FIELD(T, closeListen, 128, 8) \
  NCCL_NET_ABI_FIELD(T, getDeviceMr, 136, 8) \
  NCCL_NET_ABI_FIELD(T, irecvConsumed, 144, 8) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclCollNet_v7_t(T) \
  NCCL_NET_ABI_SIZE(T, 120, 8) \
  NCCL_NET_ABI_FIELD(T, name, 0, 8) \
  NCCL_NET_ABI_FIELD(T, init, 8, 8) \
  NCCL_NET_ABI_FIELD(T, devices, 16, 8) \
  NCCL_NET_ABI_FIELD(T, getProperties, 24, 8) \
  NCCL_NET_ABI_FIELD(T, listen, 32, 8) \
  NCCL_NET_ABI_FIELD(T, connect, 40, 8) \
  NCCL_NET_ABI_FIELD(T, reduceSupport, 48, 8) \
  NCCL_NET_ABI_FIELD(T, regMr, 56, 8) \
  NCCL_NET_ABI_FIELD(T, regMrDmaBuf, 64, 8) \
  NCCL_NET_ABI_FIELD(T, deregMr, 72, 8) \
  NCCL_NET_ABI_FIELD(T, iallreduce, 80, 8) \
  NCCL_NET_ABI_FIELD(T, iflush, 88, 8) \
  NCCL_NET_ABI_FIELD(T, test, 96, 8) \
  NCCL_NET_ABI_FIELD(T, closeColl, 104, 8) \
  NCCL_NET_ABI_FIELD(T, closeListen, 112, 8) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclNetProperties_v8_t(T) \
  NCCL_NET_ABI_SIZE(T, 64, 8) \
  NCCL_NET_ABI_FIELD(T, name, 0, 8) \
  NCCL_NET_ABI_FIELD(T, pciPath, 8, 8) \
  NCCL_NET_ABI_FIELD(T, guid, 16, 8) \
  NCCL_NET_ABI_FIELD(T, ptrSupport, 24, 4) \
  NCCL_NET_ABI_FIELD(T, regIsGlobal, 28, 4) \
  NCCL_NET_ABI_FIELD(T, speed, 32, 4) \
  NCCL_NET_ABI_FIELD(T, port, 36, 4) \
  NCCL_NET_ABI_FIELD(T, latency, 40, 4) \
  NCCL_NET_ABI_FIELD(T, maxComms, 44, 4) \
  NCCL_NET_ABI_FIELD(T, maxRecvs, 48, 4) \
  NCCL_NET_ABI_FIELD(T, netDeviceType, 52, 4) \
  NCCL_NET_ABI_FIELD(T, netDeviceVersion, 56, 4) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclNetSGE_v8_t(T) \
  NCCL_NET_ABI_SIZE(T, 24, 8) \
  NCCL_NET_ABI_FIELD(T, mhandle, 0, 8) \
  NCCL_NET_ABI_FIELD(T, address, 8, 8) \
  NCCL_NET_ABI_FIELD(T, size, 16, 4) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclNet_v8_t(T) \
  NCCL_NET_ABI_SIZE(T, 152, 8) \
  NCCL_NET_ABI_FIELD(T, name, 0, 8) \
  NCCL_NET_ABI_FIELD(T, init, 8, 8) \
  NCCL_NET_ABI_FIELD(T, devices, 16, 8) \
  NCCL_NET_ABI_FIELD(T, getProperties, 24, 8) \
  NCCL_NET_ABI_FIELD(T, listen, 32, 8) \
  NCCL_NET_ABI_FIELD(T, connect, 40, 8) \
  NCCL_NET_ABI_FIELD(T, accept, 48, 8) \
  NCCL_NET_ABI_FIELD(T, regMr, 56, 8) \
  NCCL_NET_ABI_FIELD(T, regMrDmaBuf, 64, 8) \
  NCCL_NET_ABI_FIELD(T, deregMr, 72, 8) \
  NCCL_NET_ABI_FIELD(T, isend, 80, 8) \
  NCCL_NET_ABI_FIELD(T, irecv, 88, 8) \
  NCCL_NET_ABI_FIELD(T, iflush, 96, 8) \
  NCCL_NET_ABI_FIELD(T, test, 104, 8) \
  NCCL_NET_ABI_FIELD(T, closeSend, 112, 8) \
  NCCL_NET_ABI_FIELD(T, closeRecv, 120, 8) \
  NCCL_NET_ABI_FIELD(T, closeListen, 128, 8) \
  NCCL_NET_ABI_FIELD(T, getDeviceMr, 136, 8) \
  NCCL_NET_ABI_FIELD(T, irecvConsumed, 144, 8) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclCollNet_v8_t(T) \
  NCCL_NET_ABI_SIZE(T, 136, 8) \
  NCCL_NET_ABI_FIELD(T, name, 0, 8) \
  NCCL_NET_ABI_FIELD(T, init, 8, 8) \
  NCCL_NET_ABI_FIELD(T, devices, 16, 8) \
  NCCL_NET_ABI_FIELD(T, getProperties, 24, 8) \
  NCCL_NET_ABI_FIELD(T, listen, 32, 8) \
  NCCL_NET_ABI_FIELD(T, connect, 40, 8) \
  NCCL_NET_ABI_FIELD(T, reduceSupport, 48, 8) \
  NCCL_NET_ABI_FIELD(T, regMr, 56, 8) \
  NCCL_NET_ABI_FIELD(T, regMrDmaBuf, 64, 8) \
  NCCL_NET_ABI_FIELD(T, deregMr, 72, 8) \
  NCCL_NET_ABI_FIELD(T, iallreduce, 80, 8) \
  NCCL_NET_ABI_FIELD(T, iallgather, 88, 8) \
  NCCL_NET_ABI_FIELD(T, ireducescatter, 96, 8) \
  NCCL_NET_ABI_FIELD(T, iflush, 104, 8) \
  NCCL_NET_ABI_FIELD(T, test, 112, 8) \
  NCCL_NET_ABI_FIELD(T, closeColl, 120, 8) \
  NCCL_NET_ABI_FIELD(T, closeListen, 128, 8) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclNetVDeviceProps_v9_t(T) \
  NCCL_NET_ABI_SIZE(T, 20, 4) \
  NCCL_NET_ABI_FIELD(T, ndevs, 0, 4) \
  NCCL_NET_ABI_FIELD(T, devs, 4, 16) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclNetProperties_v9_t(T) \
  NCCL_NET_ABI_SIZE(T, 104, 8) \
  NCCL_NET_ABI_FIELD(T, name, 0, 8) \
  NCCL_NET_ABI_FIELD(T, pciPath, 8, 8) \
  NCCL_NET_ABI_FIELD(T, guid, 16, 8) \
  NCCL_NET_ABI_FIELD(T, ptrSupport, 24, 4) \
  NCCL_NET_ABI_FIELD(T, regIsGlobal, 28, 4) \
  NCCL_NET_ABI_FIELD(T, forceFlush, 32, 4) \
  NCCL_NET_ABI_FIELD(T, speed, 36, 4) \
  NCCL_NET_ABI_FIELD(T, port, 40, 4) \
  NCCL_NET_ABI_FIELD(T, latency, 44, 4) \
  NCCL_NET_ABI_FIELD(T, maxComms, 48, 4) \
  NCCL_NET_ABI_FIELD(T, maxRecvs, 52, 4) \
  NCCL_NET_ABI_FIELD(T, netDeviceType, 56, 4) \
  NCCL_NET_ABI_FIELD(T, netDeviceVersion, 60, 4) \
  NCCL_NET_ABI_FIELD(T, vProps, 64, 20) \
  NCCL_NET_ABI_FIELD(T, maxP2pBytes, 88, 8) \
  NCCL_NET_ABI_FIELD(T, maxCollBytes, 96, 8) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclNetSGE_v9_t(T) \
  NCCL_NET_ABI_SIZE(T, 24, 8) \
  NCCL_NET_ABI_FIELD(T, mhandle, 0, 8) \
  NCCL_NET_ABI_FIELD(T, address, 8, 8) \
  NCCL_NET_ABI_FIELD(T, size, 16, 8) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclNet_v9_t(T) \
  NCCL_NET_ABI_SIZE(T, 160, 8) \
  NCCL_NET_ABI_FIELD(T, name, 0, 8) \
  NCCL_NET_ABI_FIELD(T, init, 8, 8) \
  NCCL_NET_ABI_FIELD(T, devices, 16, 8) \
  NCCL_NET_ABI_FIELD(T, getProperties, 24, 8) \
  NCCL_NET_ABI_FIELD(T, listen, 32, 8) \
  NCCL_NET_ABI_FIELD(T, connect, 40, 8) \
  NCCL_NET_ABI_FIELD(T, accept, 48, 8) \
  NCCL_NET_ABI_FIELD(T, regMr, 56, 8) \
  NCCL_NET_ABI_FIELD(T, regMrDmaBuf, 64, 8) \
  NCCL_NET_ABI_FIELD(T, deregMr, 72, 8) \
  NCCL_NET_ABI_FIELD(T, isend, 80, 8) \
  NCCL_NET_ABI_FIELD(T, irecv, 88, 8) \
  NCCL_NET_ABI_FIELD(T, iflush, 96, 8) \
  NCCL_NET_ABI_FIELD(T, test, 104, 8) \
  NCCL_NET_ABI_FIELD(T, closeSend, 112, 8) \
  NCCL_NET_ABI_FIELD(T, closeRecv, 120, 8) \
  NCCL_NET_ABI_FIELD(T, closeListen, 128, 8) \
  NCCL_NET_ABI_FIELD(T, getDeviceMr, 136, 8) \
  NCCL_NET_ABI_FIELD(T, irecvConsumed, 144, 8) \
  NCCL_NET_ABI_FIELD(T, makeVDevice, 152, 8) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclCollNet_v9_t(T) \
  NCCL_NET_ABI_SIZE(T, 144, 8) \
  NCCL_NET_ABI_FIELD(T, name, 0, 8) \
  NCCL_NET_ABI_FIELD(T, init, 8, 8) \
  NCCL_NET_ABI_FIELD(T, devices, 16, 8) \
  NCCL_NET_ABI_FIELD(T, getProperties, 24, 8) \
  NCCL_NET_ABI_FIELD(T, listen, 32, 8) \
  NCCL_NET_ABI_FIELD(T, connect, 40, 8) \
  NCCL_NET_ABI_FIELD(T, reduceSupport, 48, 8) \
  NCCL_NET_ABI_FIELD(T, regMr, 56, 8) \
  NCCL_NET_ABI_FIELD(T, regMrDmaBuf, 64, 8) \
  NCCL_NET_ABI_FIELD(T, deregMr, 72, 8) \
  NCCL_NET_ABI_FIELD(T, iallreduce, 80, 8) \
  NCCL_NET_ABI_FIELD(T, iallgather, 88, 8) \
  NCCL_NET_ABI_FIELD(T, ireducescatter, 96, 8) \
  NCCL_NET_ABI_FIELD(T, iflush, 104, 8) \
  NCCL_NET_ABI_FIELD(T, test, 112, 8) \
  NCCL_NET_ABI_FIELD(T, closeColl, 120, 8) \
  NCCL_NET_ABI_FIELD(T, closeListen, 128, 8) \
  NCCL_NET_ABI_FIELD(T, makeVDevice, 136, 8) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclNetVDeviceProps_v10_t(T) \
  NCCL_NET_ABI_SIZE(T, 20, 4) \
  NCCL_NET_ABI_FIELD(T, ndevs, 0, 4) \
  NCCL_NET_ABI_FIELD(T, devs, 4, 16) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclNetCommConfig_v10_t(T) \
  NCCL_NET_ABI_SIZE(T, 4, 4) \
  NCCL_NET_ABI_FIELD(T, trafficClass, 0, 4) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclNetProperties_v10_t(T) \
  NCCL_NET_ABI_SIZE(T, 104, 8) \
  NCCL_NET_ABI_FIELD(T, name, 0, 8) \
  NCCL_NET_ABI_FIELD(T, pciPath, 8, 8) \
  NCCL_NET_ABI_FIELD(T, guid, 16, 8) \
  NCCL_NET_ABI_FIELD(T, ptrSupport, 24, 4) \
  NCCL_NET_ABI_FIELD(T, regIsGlobal, 28, 4) \
  NCCL_NET_ABI_FIELD(T, forceFlush, 32, 4) \
  NCCL_NET_ABI_FIELD(T, speed, 36, 4) \
  NCCL_NET_ABI_FIELD(T, port, 40, 4) \
  NCCL_NET_ABI_FIELD(T, latency, 44, 4) \
  NCCL_NET_ABI_FIELD(T, maxComms, 48, 4) \
  NCCL_NET_ABI_FIELD(T, maxRecvs, 52, 4) \
  NCCL_NET_ABI_FIELD(T, netDeviceType, 56, 4) \
  NCCL_NET_ABI_FIELD(T, netDeviceVersion, 60, 4) \
  NCCL_NET_ABI_FIELD(T, vProps, 64, 20) \
  NCCL_NET_ABI_FIELD(T, maxP2pBytes, 88, 8) \
  NCCL_NET_ABI_FIELD(T, maxCollBytes, 96, 8) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclNetSGE_v10_t(T) \
  NCCL_NET_ABI_SIZE(T, 24, 8) \
  NCCL_NET_ABI_FIELD(T, mhandle, 0, 8) \
  NCCL_NET_ABI_FIELD(T, address, 8, 8) \
  NCCL_NET_ABI_FIELD(T, size, 16, 8) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclNet_v10_t(T) \
  NCCL_NET_ABI_SIZE(T, 160, 8) \
  NCCL_NET_ABI_FIELD(T, name, 0, 8) \
  NCCL_NET_ABI_FIELD(T, init, 8, 8) \
  NCCL_NET_ABI_FIELD(T, devices, 16, 8) \
  NCCL_NET_ABI_FIELD(T, getProperties, 24, 8) \
  NCCL_NET_ABI_FIELD(T, listen, 32, 8) \
  NCCL_NET_ABI_FIELD(T, connect, 40, 8) \
  NCCL_NET_ABI_FIELD(T, accept, 48, 8) \
  NCCL_NET_ABI_FIELD(T, regMr, 56, 8) \
  NCCL_NET_ABI_FIELD(T, regMrDmaBuf, 64, 8) \
  NCCL_NET_ABI_FIELD(T, deregMr, 72, 8) \
  NCCL_NET_ABI_FIELD(T, isend, 80, 8) \
  NCCL_NET_ABI_FIELD(T, irecv, 88, 8) \
  NCCL_NET_ABI_FIELD(T, iflush, 96, 8) \
  NCCL_NET_ABI_FIELD(T, test, 104, 8) \
  NCCL_NET_ABI_FIELD(T, closeSend, 112, 8) \
  NCCL_NET_ABI_FIELD(T, closeRecv, 120, 8) \
  NCCL_NET_ABI_FIELD(T, closeListen, 128, 8) \
  NCCL_NET_ABI_FIELD(T, getDeviceMr, 136, 8) \
  NCCL_NET_ABI_FIELD(T, irecvConsumed, 144, 8) \
  NCCL_NET_ABI_FIELD(T, makeVDevice, 152, 8) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclCollNet_v10_t(T) \
  NCCL_NET_ABI_SIZE(T, 144, 8) \
  NCCL_NET_ABI_FIELD(T, name, 0, 8) \
  NCCL_NET_ABI_FIELD(T, init, 8, 8) \
  NCCL_NET_ABI_FIELD(T, devices, 16, 8) \
  NCCL_NET_ABI_FIELD(T, getProperties, 24, 8) \
  NCCL_NET_ABI_FIELD(T, listen, 32, 8) \
  NCCL_NET_ABI_FIELD(T, connect, 40, 8) \
  NCCL_NET_ABI_FIELD(T, reduceSupport, 48, 8) \
  NCCL_NET_ABI_FIELD(T, regMr, 56, 8) \
  NCCL_NET_ABI_FIELD(T, regMrDmaBuf, 64, 8) \
  NCCL_NET_ABI_FIELD(T, deregMr, 72, 8) \
  NCCL_NET_ABI_FIELD(T, iallreduce, 80, 8) \
  NCCL_NET_ABI_FIELD(T, iallgather, 88, 8) \
  NCCL_NET_ABI_FIELD(T, ireducescatter, 96, 8) \
  NCCL_NET_ABI_FIELD(T, iflush, 104, 8) \
  NCCL_NET_ABI_FIELD(T, test, 112, 8) \
  NCCL_NET_ABI_FIELD(T, closeColl, 120, 8) \
  NCCL_NET_ABI_FIELD(T, closeListen, 128, 8) \
  NCCL_NET_ABI_FIELD(T, makeVDevice, 136, 8) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclNetVDeviceProps_v11_t(T) \
  NCCL_NET_ABI_SIZE(T, 20, 4) \
  NCCL_NET_ABI_FIELD(T, ndevs, 0, 4) \
  NCCL_NET_ABI_FIELD(T, devs, 4, 16) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclNetCommConfig_v11_t(T) \
  NCCL_NET_ABI_SIZE(T, 4, 4) \
  NCCL_NET_ABI_FIELD(T, trafficClass, 0, 4) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclNetProperties_v11_t(T) \
  NCCL_NET_ABI_SIZE(T, 112, 8) \
  NCCL_NET_ABI_FIELD(T, name, 0, 8) \
  NCCL_NET_ABI_FIELD(T, pciPath, 8, 8) \
  NCCL_NET_ABI_FIELD(T, guid, 16, 8) \
  NCCL_NET_ABI_FIELD(T, ptrSupport, 24, 4) \
  NCCL_NET_ABI_FIELD(T, regIsGlobal, 28, 4) \
  NCCL_NET_ABI_FIELD(T, forceFlush, 32, 4) \
  NCCL_NET_ABI_FIELD(T, speed, 36, 4) \
  NCCL_NET_ABI_FIELD(T, port, 40, 4) \
  NCCL_NET_ABI_FIELD(T, latency, 44, 4) \
  NCCL_NET_ABI_FIELD(T, maxComms, 48, 4) \
  NCCL_NET_ABI_FIELD(T, maxRecvs, 52, 4) \
  NCCL_NET_ABI_FIELD(T, netDeviceType, 56, 4) \
  NCCL_NET_ABI_FIELD(T, netDeviceVersion, 60, 4) \
  NCCL_NET_ABI_FIELD(T, vProps, 64, 20) \
  NCCL_NET_ABI_FIELD(T, maxP2pBytes, 88, 8) \
  NCCL_NET_ABI_FIELD(T, maxCollBytes, 96, 8) \
  NCCL_NET_ABI_FIELD(T, maxMultiRequestSize, 104, 4) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclNetCommAttr_v11_t(T) \
  NCCL_NET_ABI_SIZE(T, 16, 4) \
  NCCL_NET_ABI_FIELD(T, maxConcurrentPeers, 0, 4) \
  NCCL_NET_ABI_FIELD(T, minConcurrentPeers, 4, 4) \
  NCCL_NET_ABI_FIELD(T, maxFlowsPerPeer, 8, 4) \
  NCCL_NET_ABI_FIELD(T, minFlowsPerPeer, 12, 4) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclNetAttr_v11_t(T) \
  NCCL_NET_ABI_SIZE(T, 44, 4) \
  NCCL_NET_ABI_FIELD(T, sendCommAttr, 0, 16) \
  NCCL_NET_ABI_FIELD(T, recvCommAttr, 16, 16) \
  NCCL_NET_ABI_FIELD(T, op, 32, 4) \
  NCCL_NET_ABI_FIELD(T, algo, 36, 4) \
  NCCL_NET_ABI_FIELD(T, proto, 40, 4) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclNetSGE_v11_t(T) \
  NCCL_NET_ABI_SIZE(T, 24, 8) \
  NCCL_NET_ABI_FIELD(T, mhandle, 0, 8) \
  NCCL_NET_ABI_FIELD(T, address, 8, 8) \
  NCCL_NET_ABI_FIELD(T, size, 16, 8) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclNet_v11_t(T) \
  NCCL_NET_ABI_SIZE(T, 176, 8) \
  NCCL_NET_ABI_FIELD(T, name, 0, 8) \
  NCCL_NET_ABI_FIELD(T, init, 8, 8) \
  NCCL_NET_ABI_FIELD(T, devices, 16, 8) \
  NCCL_NET_ABI_FIELD(T, getProperties, 24, 8) \
  NCCL_NET_ABI_FIELD(T, listen, 32, 8) \
  NCCL_NET_ABI_FIELD(T, connect, 40, 8) \
  NCCL_NET_ABI_FIELD(T, accept, 48, 8) \
  NCCL_NET_ABI_FIELD(T, regMr, 56, 8) \
  NCCL_NET_ABI_FIELD(T, regMrDmaBuf, 64, 8) \
  NCCL_NET_ABI_FIELD(T, deregMr, 72, 8) \
  NCCL_NET_ABI_FIELD(T, isend, 80, 8) \
  NCCL_NET_ABI_FIELD(T, irecv, 88, 8) \
  NCCL_NET_ABI_FIELD(T, iflush, 96, 8) \
  NCCL_NET_ABI_FIELD(T, test, 104, 8) \
  NCCL_NET_ABI_FIELD(T, closeSend, 112, 8) \
  NCCL_NET_ABI_FIELD(T, closeRecv, 120, 8) \
  NCCL_NET_ABI_FIELD(T, closeListen, 128, 8) \
  NCCL_NET_ABI_FIELD(T, getDeviceMr, 136, 8) \
  NCCL_NET_ABI_FIELD(T, irecvConsumed, 144, 8) \
  NCCL_NET_ABI_FIELD(T, makeVDevice, 152, 8) \
  NCCL_NET_ABI_FIELD(T, finalize, 160, 8) \
  NCCL_NET_ABI_FIELD(T, setNetAttr, 168, 8) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclCollNet_v11_t(T) \
  NCCL_NET_ABI_SIZE(T, 152, 8) \
  NCCL_NET_ABI_FIELD(T, name, 0, 8) \
  NCCL_NET_ABI_FIELD(T, init, 8, 8) \
  NCCL_NET_ABI_FIELD(T, devices, 16, 8) \
  NCCL_NET_ABI_FIELD(T, getProperties, 24, 8) \
  NCCL_NET_ABI_FIELD(T, listen, 32, 8) \
  NCCL_NET_ABI_FIELD(T, connect, 40, 8) \
  NCCL_NET_ABI_FIELD(T, reduceSupport, 48, 8) \
  NCCL_NET_ABI_FIELD(T, regMr, 56, 8) \
  NCCL_NET_ABI_FIELD(T, regMrDmaBuf, 64, 8) \
  NCCL_NET_ABI_FIELD(T, deregMr, 72, 8) \
  NCCL_NET_ABI_FIELD(T, iallreduce, 80, 8) \
  NCCL_NET_ABI_FIELD(T, iallgather, 88, 8) \
  NCCL_NET_ABI_FIELD(T, ireducescatter, 96, 8) \
  NCCL_NET_ABI_FIELD(T, iflush, 104, 8) \
  NCCL_NET_ABI_FIELD(T, test, 112, 8) \
  NCCL_NET_ABI_FIELD(T, closeColl, 120, 8) \
  NCCL_NET_ABI_FIELD(T, closeListen, 128, 8) \
  NCCL_NET_ABI_FIELD(T, makeVDevice, 136, 8) \
  NCCL_NET_ABI_FIELD(T, finalize, 144, 8) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclNetVDeviceProps_v12_t(T) \
  NCCL_NET_ABI_SIZE(T, 36, 4) \
  NCCL_NET_ABI_FIELD(T, ndevs, 0, 4) \
  NCCL_NET_ABI_FIELD(T, devs, 4, 32) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclNetCommConfig_v12_t(T) \
  NCCL_NET_ABI_SIZE(T, 4, 4) \
  NCCL_NET_ABI_FIELD(T, trafficClass, 0, 4) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclNetProperties_v12_t(T) \
  NCCL_NET_ABI_SIZE(T, 128, 8) \
  NCCL_NET_ABI_FIELD(T, name, 0, 8) \
  NCCL_NET_ABI_FIELD(T, pciPath, 8, 8) \
  NCCL_NET_ABI_FIELD(T, guid, 16, 8) \
  NCCL_NET_ABI_FIELD(T, ptrSupport, 24, 4) \
  NCCL_NET_ABI_FIELD(T, regIsGlobal, 28, 4) \
  NCCL_NET_ABI_FIELD(T, forceFlush, 32, 4) \
  NCCL_NET_ABI_FIELD(T, speed, 36, 4) \
  NCCL_NET_ABI_FIELD(T, port, 40, 4) \
  NCCL_NET_ABI_FIELD(T, latency, 44, 4) \
  NCCL_NET_ABI_FIELD(T, maxComms, 48, 4) \
  NCCL_NET_ABI_FIELD(T, maxRecvs, 52, 4) \
  NCCL_NET_ABI_FIELD(T, netDeviceType, 56, 4) \
  NCCL_NET_ABI_FIELD(T, netDeviceVersion, 60, 4) \
  NCCL_NET_ABI_FIELD(T, vProps, 64, 36) \
  NCCL_NET_ABI_FIELD(T, maxP2pBytes, 104, 8) \
  NCCL_NET_ABI_FIELD(T, maxCollBytes, 112, 8) \
  NCCL_NET_ABI_FIELD(T, maxMultiRequestSize, 120, 4) \
  NCCL_NET_ABI_FIELD(T, railId, 124, 2) \
  NCCL_NET_ABI_FIELD(T, planeId, 126, 2) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclNetCommAttr_v12_t(T) \
  NCCL_NET_ABI_SIZE(T, 16, 4) \
  NCCL_NET_ABI_FIELD(T, maxConcurrentPeers, 0, 4) \
  NCCL_NET_ABI_FIELD(T, minConcurrentPeers, 4, 4) \
  NCCL_NET_ABI_FIELD(T, maxFlowsPerPeer, 8, 4) \
  NCCL_NET_ABI_FIELD(T, minFlowsPerPeer, 12, 4) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclNetAttr_v12_t(T) \
  NCCL_NET_ABI_SIZE(T, 44, 4) \
  NCCL_NET_ABI_FIELD(T, sendCommAttr, 0, 16) \
  NCCL_NET_ABI_FIELD(T, recvCommAttr, 16, 16) \
  NCCL_NET_ABI_FIELD(T, op, 32, 4) \
  NCCL_NET_ABI_FIELD(T, algo, 36, 4) \
  NCCL_NET_ABI_FIELD(T, proto, 40, 4) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclNetSGE_v12_t(T) \
  NCCL_NET_ABI_SIZE(T, 24, 8) \
  NCCL_NET_ABI_FIELD(T, mhandle, 0, 8) \
  NCCL_NET_ABI_FIELD(T, address, 8, 8) \
  NCCL_NET_ABI_FIELD(T, size, 16, 8) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclNet_v12_t(T) \
  NCCL_NET_ABI_SIZE(T, 176, 8) \
  NCCL_NET_ABI_FIELD(T, name, 0, 8) \
  NCCL_NET_ABI_FIELD(T, init, 8, 8) \
  NCCL_NET_ABI_FIELD(T, devices, 16, 8) \
  NCCL_NET_ABI_FIELD(T, getProperties, 24, 8) \
  NCCL_NET_ABI_FIELD(T, listen, 32, 8) \
  NCCL_NET_ABI_FIELD(T, connect, 40, 8) \
  NCCL_NET_ABI_FIELD(T, accept, 48, 8) \
  NCCL_NET_ABI_FIELD(T, regMr, 56, 8) \
  NCCL_NET_ABI_FIELD(T, regMrDmaBuf, 64, 8) \
  NCCL_NET_ABI_FIELD(T, deregMr, 72, 8) \
  NCCL_NET_ABI_FIELD(T, isend, 80, 8) \
  NCCL_NET_ABI_FIELD(T, irecv, 88, 8) \
  NCCL_NET_ABI_FIELD(T, iflush, 96, 8) \
  NCCL_NET_ABI_FIELD(T, test, 104, 8) \
  NCCL_NET_ABI_FIELD(T, closeSend, 112, 8) \
  NCCL_NET_ABI_FIELD(T, closeRecv, 120, 8) \
  NCCL_NET_ABI_FIELD(T, closeListen, 128, 8) \
  NCCL_NET_ABI_FIELD(T, getDeviceMr, 136, 8) \
  NCCL_NET_ABI_FIELD(T, irecvConsumed, 144, 8) \
  NCCL_NET_ABI_FIELD(T, makeVDevice, 152, 8) \
  NCCL_NET_ABI_FIELD(T, finalize, 160, 8) \
  NCCL_NET_ABI_FIELD(T, setNetAttr, 168, 8) \
  NCCL_NET_ABI_END_

#define NCCL_NET_ABI_CHECK_ncclCollNet_v12_t(T) \
  NCCL_NET_ABI_SIZE(T, 152, 8) \
  NCCL_NET_ABI_FIELD(T, name, 0, 8) \
  NCCL_NET_ABI_FIELD(T, init, 8, 8) \
  NCCL_NET_ABI_FIELD(T, devices, 16, 8) \
  NCCL_NET_ABI_FIELD(T, getProperties, 24, 8) \
  NCCL_NET_ABI_FIELD(T, listen, 32, 8) \
  NCCL_NET_ABI_FIELD(T, connect, 40, 8) \
  NCCL_NET_ABI_FIELD(T, reduceSupport, 48, 8) \
  NCCL_NET_ABI_FIELD(T, regMr, 56, 8) \
  NCCL_NET_ABI_FIELD(T, regMrDmaBuf, 64, 8) \
  NCCL_NET_ABI_FIELD(T, deregMr, 72, 8) \
  NCCL_NET_ABI_FIELD(T, iallreduce, 80, 8) \
  NCCL_NET_ABI_FIELD(T, iallgather, 88, 8) \
  NCCL_NET_ABI_FIELD(T, ireducescatter, 96, 8) \
  NCCL_NET_ABI_FIELD(T, iflush, 104, 8) \
  NCCL_NET_ABI_FIELD(T, test, 112, 8) \
  NCCL_NET_ABI_FIELD(T, closeColl, 120, 8) \
  NCCL_NET_ABI_FIELD(T, closeListen, 128, 8) \
  NCCL_NET_ABI_FIELD(T, makeVDevice, 136, 8) \
  NCCL_NET_ABI_FIELD(T, finalize, 144, 8) \
  NCCL_NET_ABI_END_

/* Every struct of every version, checked against its own typedef. Used as a declaration: NCCL_NET_ABI_CHECK_ALL(); */
#define NCCL_NET_ABI_CHECK_ALL() \
  NCCL_NET_ABI_CHECK_ncclNetDeviceHandle_v7_t(ncclNetDeviceHandle_v7_t); \
  NCCL_NET_ABI_CHECK_ncclNetProperties_v6_t(ncclNetProperties_v6_t); \
  NCCL_NET_ABI_CHECK_ncclNet_v6_t(ncclNet_v6_t); \
  NCCL_NET_ABI_CHECK_ncclCollNet_v6_t(ncclCollNet_v6_t); \
  NCCL_NET_ABI_CHECK_ncclNetProperties_v7_t(ncclNetProperties_v7_t); \
  NCCL_NET_ABI_CHECK_ncclNet_v7_t(ncclNet_v7_t); \
  NCCL_NET_ABI_CHECK_ncclCollNet_v7_t(ncclCollNet_v7_t); \
  NCCL_NET_ABI_CHECK_ncclNetProperties_v8_t(ncclNetProperties_v8_t); \
  NCCL_NET_ABI_CHECK_ncclNetSGE_v8_t(ncclNetSGE_v8_t); \
  NCCL_NET_ABI_CHECK_ncclNet_v8_t(ncclNet_v8_t); \
  NCCL_NET_ABI_CHECK_ncclCollNet_v8_t(ncclCollNet_v8_t); \
  NCCL_NET_ABI_CHECK_ncclNetVDeviceProps_v9_t(ncclNetVDeviceProps_v9_t); \
  NCCL_NET_ABI_CHECK_ncclNetProperties_v9_t(ncclNetProperties_v9_t); \
  NCCL_NET_ABI_CHECK_ncclNetSGE_v9_t(ncclNetSGE_v9_t); \
  NCCL_NET_ABI_CHECK_ncclNet_v9_t(ncclNet_v9_t); \
  NCCL_NET_ABI_CHECK_ncclCollNet_v9_t(ncclCollNet_v9_t); \
  NCCL_NET_ABI_CHECK_ncclNetVDeviceProps_v10_t(ncclNetVDeviceProps_v10_t); \
  NCCL_NET_ABI_CHECK_ncclNetCommConfig_v10_t(ncclNetCommConfig_v10_t); \
  NCCL_NET_ABI_CHECK_ncclNetProperties_v10_t(ncclNetProperties_v10_t); \
  NCCL_NET_ABI_CHECK_ncclNetSGE_v10_t(ncclNetSGE_v10_t); \
  NCCL_NET_ABI_CHECK_ncclNet_v10_t(ncclNet_v10_t); \
  NCCL_NET_ABI_CHECK_ncclCollNet_v10_t(ncclCollNet_v10_t); \
  NCCL_NET_ABI_CHECK_ncclNetVDeviceProps_v11_t(ncclNetVDeviceProps_v11_t); \
  NCCL_NET_ABI_CHECK_ncclNetCommConfig_v11_t(ncclNetCommConfig_v11_t); \
  NCCL_NET_ABI_CHECK_ncclNetProperties_v11_t(ncclNetProperties_v11_t); \
  NCCL_NET_ABI_CHECK_ncclNetCommAttr_v11_t(ncclNetCommAttr_v11_t); \
  NCCL_NET_ABI_CHECK_ncclNetAttr_v11_t(ncclNetAttr_v11_t); \
  NCCL_NET_ABI_CHECK_ncclNetSGE_v11_t(ncclNetSGE_v11_t); \
  NCCL_NET_ABI_CHECK_ncclNet_v11_t(ncclNet_v11_t); \
  NCCL_NET_ABI_CHECK_ncclCollNet_v11_t(ncclCollNet_v11_t); \
  NCCL_NET_ABI_CHECK_ncclNetVDeviceProps_v12_t(ncclNetVDeviceProps_v12_t); \
  NCCL_NET_ABI_CHECK_ncclNetCommConfig_v12_t(ncclNetCommConfig_v12_t); \
  NCCL_NET_ABI_CHECK_ncclNetProperties_v12_t(ncclNetProperties_v12_t); \
  NCCL_NET_ABI_CHECK_ncclNetCommAttr_v12_t(ncclNetCommAttr_v12_t); \
  NCCL_NET_ABI_CHECK_ncclNetAttr_v12_t(ncclNetAttr_v12_t); \
  NCCL_NET_ABI_CHECK_ncclNetSGE_v12_t(ncclNetSGE_v12_t); \
  NCCL_NET_ABI_CHECK_ncclNet_v12_t(ncclNet_v12_t); \
  NCCL_NET_ABI_CHECK_ncclCollNet_v12_t(ncclCollNet_v12_t)
/* clang-format on */

#endif /* NCCL_NET_ABI_CHECKS_H_ */
