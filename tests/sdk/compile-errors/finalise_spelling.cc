// expect: the class declares finalise, which nothing calls: the optional method is finalize
// A misspelt optional method: it compiled, the SDK supplied its own default finalize, and the vendor's never ran.
#include "vendor_net.hpp"

struct Net {
  static constexpr const char kName[] = "vendor";
  VENDOR_NET_REQUIRED
  ncclResult_t finalise(void*) { return ncclSuccess; }
};
NCCL_NET_SDK_EXPORT(Net)
