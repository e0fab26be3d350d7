/* abi_c99.c: the net-api headers compile as strict C99, and every layout pin holds. */
#include <nccl_net/abi_checks.h>
#include <nccl_net/net.h>
#include <stdio.h>

NCCL_NET_ABI_CHECK_ALL()

int main(void) {
  /* Spot values a C host relies on, printed so a failure shows the numbers. */
  printf("sizeof(ncclNet_v12_t)=%zu sizeof(ncclNetProperties_v12_t)=%zu handle=%d\n", sizeof(ncclNet_v12_t),
         sizeof(ncclNetProperties_v12_t), NCCL_NET_HANDLE_MAXSIZE);
  return (sizeof(ncclNet_t) == 176 && sizeof(ncclNetProperties_t) == 128 && ncclNumResults == 9 && ncclNumTypes == 12 &&
          NCCL_NET_MAX_REQUESTS == 32)
             ? 0
             : 1;
}
