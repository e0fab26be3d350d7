/* abi_bite.c: proves the layout pins bite. Built by a test that expects it to FAIL to compile when
 * NNS_ABI_BREAK is defined: a v9 properties struct with the classic mistake (int instead of size_t for
 * maxP2pBytes) is run through the same check table as the real header. Without NNS_ABI_BREAK the struct is right
 * and the file must compile, so a failure cannot come from anything else. */
#include <nccl_net/abi_checks.h>

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v9_t vProps;
#ifdef NNS_ABI_BREAK
  int maxP2pBytes;
#else
  size_t maxP2pBytes;
#endif
  size_t maxCollBytes;
} vendor_props_v9;

NCCL_NET_ABI_CHECK_ncclNetProperties_v9_t(vendor_props_v9);

int main(void) {
  return 0;
}
