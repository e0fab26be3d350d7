// expect: Net has no public init(const nccl_net::sdk::InitArgs& args, void** ctx)
// `void* ctx` where v12 has `void** ctx`: it compiled, and the plugin stored its context into NCCL's pointer variable
// as if it were a buffer.
#include "vendor_net.hpp"

struct Net {
  static constexpr const char kName[] = "vendor";
  ncclResult_t init(const nccl_net::sdk::InitArgs&, void*) { return ncclSuccess; }
  VENDOR_NET_REGMR
  VENDOR_NET_ISEND
  VENDOR_NET_TEST
  VENDOR_NET_OTHERS
};
NCCL_NET_SDK_EXPORT(Net)
