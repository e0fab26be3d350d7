// expect: Net::finalize is not a public finalize(void* ctx) returning ncclResult_t
// An optional method with the right signature in the private section: named as not public (it read as the wrong
// signature only).
#include "vendor_net.hpp"

class Net {
 public:
  static constexpr const char kName[] = "vendor";
  VENDOR_NET_REQUIRED

 private:
  ncclResult_t finalize(void*) { return ncclSuccess; }
};
NCCL_NET_SDK_EXPORT(Net)
