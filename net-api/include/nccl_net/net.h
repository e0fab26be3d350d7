/* nccl_net/net.h: every ABI version's header, and the unversioned names aliased to the newest (v12). */
#ifndef NCCL_NET_NET_H_
#define NCCL_NET_NET_H_

#include "common.h"
#include "err.h"
#include "net_device.h"
#include "net_v10.h"
#include "net_v11.h"
#include "net_v12.h"
#include "net_v6.h"
#include "net_v7.h"
#include "net_v8.h"
#include "net_v9.h"
#include "types.h"

#define NCCL_NET_NEWEST_VERSION 12
#define NCCL_NET_OLDEST_VERSION 6

typedef ncclNet_v12_t ncclNet_t;
typedef ncclCollNet_v12_t ncclCollNet_t;
typedef ncclNetProperties_v12_t ncclNetProperties_t;
typedef ncclNetVDeviceProps_v12_t ncclNetVDeviceProps_t;
typedef ncclNetSGE_v12_t ncclNetSGE_t;
typedef ncclNetCommConfig_v12_t ncclNetCommConfig_t;
typedef ncclNetAttr_v12_t ncclNetAttr_t;
typedef ncclNetCommAttr_v12_t ncclNetCommAttr_t;

#define NCCL_NET_PLUGIN_SYMBOL ncclNetPlugin_v12
#define NCCL_COLLNET_PLUGIN_SYMBOL ncclCollNetPlugin_v12

#endif /* NCCL_NET_NET_H_ */
