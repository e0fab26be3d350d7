// expect: success
// A name the spelling check refuses, meant as it is (an enumerator here), with the check turned off as its error says.
#define NCCL_NET_SDK_NO_SPELLING_CHECK
#include "vendor_net.hpp"

struct Net {
  enum Stage { iFlush, done };
  static constexpr const char kName[] = "vendor";
  VENDOR_NET_REQUIRED
};
NCCL_NET_SDK_EXPORT(Net)
