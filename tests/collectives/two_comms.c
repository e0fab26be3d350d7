/* two_comms.c: more communicators made the NCCL way inside a launched job, all alive at once:
 * - a second one over every rank: rank 0's nnsGetUniqueId, handed to the others over the first communicator;
 * - one per half of the ranks ({0 .. size/2-1} and {size/2 .. size-1}), each from an id its own first rank makes, the
 *   ids all-gathered over the first communicator: the second half's root is not rank 0, and both are made at once.
 * Under nccl-net-run each id gets a port of its own, as under torchrun. Before, nnsGetUniqueId returned the
 * launcher's NNS_ROOT_ADDR (meant for the job's rendezvous), so a half's root other than rank 0 could not listen
 * there ("Address already in use") and both halves' ids were the same. */
#include <stdio.h>
#include <string.h>

#include "nns/nns.h"

static int failed(const char* what, int rank) {
  printf("rank %d: %s: %s\n", rank, what, nnsGetLastError(NULL));
  return 1;
}

/* The sum of (r + 1) over ranks r in [from, to) after an allreduce on `comm` of this rank's (rank + 1). */
static int checkSum(nnsComm_t comm, int rank, int from, int to, const char* which) {
  float x = (float)(rank + 1);
  if (nnsAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, NULL) != ncclSuccess) return failed(which, rank);
  const int expected = (to * (to + 1) - from * (from + 1)) / 2;
  if (x != (float)expected) {
    printf("rank %d: the %s communicator's allreduce gave %g, not %d\n", rank, which, (double)x, expected);
    return 1;
  }
  return 0;
}

int main(void) {
  nnsComm_t first, second, half;
  int rank = -1, size = 0;
  if (nnsCommInitFromEnv(&first) != ncclSuccess) return failed("nnsCommInitFromEnv", rank);
  if (nnsCommUserRank(first, &rank) != ncclSuccess || nnsCommCount(first, &size) != ncclSuccess)
    return failed("rank and size", rank);
  if (size < 2 || size > 16) {
    printf("rank %d: run this on 2 to 16 ranks, not %d\n", rank, size);
    return 1;
  }
  nnsUniqueId id;
  memset(&id, 0, sizeof(id));
  if (rank == 0 && nnsGetUniqueId(&id) != ncclSuccess) return failed("nnsGetUniqueId", rank);
  if (nnsBroadcast(&id, &id, sizeof(id), ncclInt8, 0, first, NULL) != ncclSuccess) return failed("broadcast", rank);
  if (nnsCommInitRank(&second, size, id, rank) != ncclSuccess) return failed("nnsCommInitRank", rank);
  if (checkSum(second, rank, 0, size, "second") != 0) return 1;

  const int split = size / 2, mine = rank < split ? 0 : 1;
  const int from = mine == 0 ? 0 : split, to = mine == 0 ? split : size;
  nnsUniqueId ids[16];
  memset(&id, 0, sizeof(id));
  if (rank == from && nnsGetUniqueId(&id) != ncclSuccess) return failed("nnsGetUniqueId for a half", rank);
  if (nnsAllGather(&id, ids, sizeof(id), ncclInt8, first, NULL) != ncclSuccess) return failed("allgather", rank);
  if (memcmp(&ids[0], &ids[split], sizeof(id)) == 0) {
    printf("rank %d: both halves got the same unique id\n", rank);
    return 1;
  }
  if (nnsCommInitRank(&half, to - from, ids[from], rank - from) != ncclSuccess)
    return failed("nnsCommInitRank for a half", rank);
  if (checkSum(half, rank, from, to, "half") != 0) return 1;

  printf("rank %d of %d: three communicators\n", rank, size);
  nnsCommDestroy(half);
  nnsCommDestroy(second);
  nnsCommDestroy(first);
  return 0;
}
