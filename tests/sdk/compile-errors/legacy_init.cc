// expect: Net has no public init(const nccl_net::sdk::InitArgs& args, void** ctx)
// The init of ncclNet_v6..v9.
#include "vendor_net.hpp"

struct Net {
  static constexpr const char kName[] = "vendor";
  ncclResult_t init(ncclDebugLogger_t) { return ncclSuccess; }
  VENDOR_NET_REGMR
  VENDOR_NET_ISEND
  VENDOR_NET_TEST
  VENDOR_NET_OTHERS
};
NCCL_NET_SDK_EXPORT(Net)
