/* nccl_net/net_device.h: device-offload handle returned by connect/accept (one layout since v7). */
#ifndef NCCL_NET_DEVICE_H_
#define NCCL_NET_DEVICE_H_

#include <stddef.h>

#define NCCL_NET_DEVICE_INVALID_VERSION 0x0
#define NCCL_NET_MTU_SIZE 4096
#define NCCL_NET_DEVICE_UNPACK_VERSION 0x7

typedef enum {
  NCCL_NET_DEVICE_HOST = 0,      /* no offload: the host proxy drives the data path */
  NCCL_NET_DEVICE_UNPACK = 1,    /* device-side unpack (version must be NCCL_NET_DEVICE_UNPACK_VERSION) */
  NCCL_NET_DEVICE_GIN_PROXY = 2, /* 2.28.7+ */
  NCCL_NET_DEVICE_GIN_GDAKI = 3, /* 2.28.7+ */
  NCCL_NET_DEVICE_GIN_GPI = 4    /* 2.30.7 */
} ncclNetDeviceType;

typedef struct {
  ncclNetDeviceType netDeviceType; /* offload type */
  int netDeviceVersion;            /* version of that offload's protocol */
  void* handle;                    /* plugin-owned device-side state */
  size_t size;                     /* bytes at handle */
  int needsProxyProgress;          /* 1 if the host proxy must still call test() */
} ncclNetDeviceHandle_v7_t;

typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v8_t;
typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v9_t;
typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v10_t;
typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v11_t;
typedef ncclNetDeviceHandle_v7_t ncclNetDeviceHandle_v12_t;
typedef ncclNetDeviceHandle_v12_t ncclNetDeviceHandle_t;

#endif /* NCCL_NET_DEVICE_H_ */
