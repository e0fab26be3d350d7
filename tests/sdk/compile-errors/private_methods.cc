// expect: Net has no public test(void* request, int* done, nccl_net::sdk::CompletedSizes& sizes)
// A method under private: is not one the SDK can call; the error says "public" rather than only "has no".
#include "vendor_net.hpp"

class Net {
 public:
  static constexpr const char kName[] = "vendor";
  VENDOR_NET_INIT
  VENDOR_NET_REGMR
  VENDOR_NET_ISEND
  VENDOR_NET_OTHERS

 private:
  VENDOR_NET_TEST
};
NCCL_NET_SDK_EXPORT(Net)
