// nccl_net/sdk.hpp: the whole plugin SDK in one include.
#pragma once

#include "export.h"  // NCCL_NET_EXPORT, for a table of the plugin's own beside the SDK's (a tuner's)
#include "sdk_version.h"

#include "sdk/collnet.hpp"
#include "sdk/env.hpp"
#include "sdk/handle.hpp"
#include "sdk/log.hpp"
#include "sdk/plugin.hpp"
#include "sdk/request_pool.hpp"
#include "sdk/result.hpp"
#include "sdk/socket.hpp"
#include "sdk/sysfs.hpp"
