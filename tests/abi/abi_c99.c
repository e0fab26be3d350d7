/* abi_c99.c: the net-api headers compile as strict C99, and every layout pin holds. */
#include <nccl_net/abi_checks.h>
#include <nccl_net/net.h>
#include <stdio.h>

NCCL_NET_ABI_CHECK_ALL();

int main(void) {
  /* The host's initializer for setNetAttr's argument: every hint unset. */
  const ncclNetAttr_v12_t attr = NCCL_NET_ATTR_INIT;
  if (attr.sendCommAttr.maxConcurrentPeers != -1 || attr.recvCommAttr.minFlowsPerPeer != -1 ||
      attr.proto != (uint32_t)-1 || attr.op != (uint32_t)-1) {
    printf("NCCL_NET_ATTR_INIT left a hint set\n");
    return 1;
  }
  /* Spot values a C host relies on, printed so a failure shows the numbers. */
  printf("sizeof(ncclNet_v12_t)=%zu sizeof(ncclNetProperties_v12_t)=%zu handle=%d\n", sizeof(ncclNet_v12_t),
         sizeof(ncclNetProperties_v12_t), NCCL_NET_HANDLE_MAXSIZE);
  return (sizeof(ncclNet_t) == 176 && sizeof(ncclNetProperties_t) == 128 && ncclNumResults == 9 && ncclNumTypes == 12 &&
          NCCL_NET_MAX_REQUESTS == 32)
             ? 0
             : 1;
}
