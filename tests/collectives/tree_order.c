/* tree_order.c: the tree allreduce adds its children's partial sums in a fixed order. Ranks 1 and 3 hold 2^24 and
 * -2^24, rank 2 holds 1: in float, (x + 2^24) + 1 and (x + 1) + 2^24 round differently, so a tree that added
 * whichever child's piece came first gave 0 in some calls and 1 in others (74 of 3000 in one run). Every call must
 * give the first call's result. Run under NNS_ALGO=tree with 4 ranks; exits 1 on a difference. */
#include <nns/nns.h>
#include <stdio.h>

int main(void) {
  nnsComm_t comm;
  int rank = -1, n = 0;
  if (nnsCommInitFromEnv(&comm) != ncclSuccess) {
    fprintf(stderr, "init: %s\n", nnsGetLastError(NULL));
    return 1;
  }
  nnsCommUserRank(comm, &rank);
  nnsCommCount(comm, &n);
  const float mine = rank == 2 ? 1.0f : rank == 1 ? 16777216.0f : rank == 3 ? -16777216.0f : 0.0f;
  float first = 0;
  int differing = 0;
  for (int call = 0; call < 2000; ++call) {
    float in = mine, out = -5;
    if (nnsAllReduce(&in, &out, 1, ncclFloat32, ncclSum, comm, NULL) != ncclSuccess) {
      fprintf(stderr, "allreduce: %s\n", nnsGetLastError(NULL));
      return 1;
    }
    if (call == 0) first = out;
    if (out != first) ++differing;
  }
  printf("rank %d of %d: first result %g, %d of 2000 calls differed\n", rank, n, first, differing);
  nnsCommDestroy(comm);
  return differing == 0 ? 0 : 1;
}
