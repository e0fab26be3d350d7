/* two_comms.c: a second communicator made the NCCL way inside a launched job: rank 0's nnsGetUniqueId, handed to the
 * others over the first communicator, then nnsCommInitRank on every rank, both communicators alive. Under
 * nccl-net-run the id is the launcher's NNS_ROOT_ADDR (as ncclGetUniqueId returns NCCL_COMM_ID), whose port rank 0
 * could not bind again while the first communicator's connections, accepted on the launcher's socket, lived. */
#include <stdio.h>
#include <string.h>

#include "nns/nns.h"

static int failed(const char* what, int rank) {
  printf("rank %d: %s: %s\n", rank, what, nnsGetLastError());
  return 1;
}

int main(void) {
  nnsComm_t first, second;
  int rank = -1, size = 0;
  if (nnsCommInitFromEnv(&first) != ncclSuccess) return failed("nnsCommInitFromEnv", rank);
  if (nnsCommUserRank(first, &rank) != ncclSuccess || nnsCommCount(first, &size) != ncclSuccess)
    return failed("rank and size", rank);
  nnsUniqueId id;
  memset(&id, 0, sizeof(id));
  if (rank == 0 && nnsGetUniqueId(&id) != ncclSuccess) return failed("nnsGetUniqueId", rank);
  if (nnsBroadcast(&id, &id, sizeof(id), ncclInt8, 0, first, NULL) != ncclSuccess) return failed("broadcast", rank);
  if (nnsCommInitRank(&second, size, id, rank) != ncclSuccess) return failed("nnsCommInitRank", rank);
  float x = (float)(rank + 1);
  if (nnsAllReduce(&x, &x, 1, ncclFloat32, ncclSum, second, NULL) != ncclSuccess) return failed("allreduce", rank);
  const int expected = size * (size + 1) / 2; /* 1 + 2 + ... + size */
  if (x != (float)expected) {
    printf("rank %d: the second communicator's allreduce gave %g\n", rank, (double)x);
    return 1;
  }
  printf("rank %d of %d: two communicators\n", rank, size);
  nnsCommDestroy(second);
  nnsCommDestroy(first);
  return 0;
}
