/* p2p_order.c: send/recv patterns whose connections depend on when each rank posts its side, now that a connection's
 * handle comes from the receiving rank when it posts the receive (argv[1] picks one; every rank prints "rank R: ok"
 * or exits 1 saying why):
 *   crossed: rank 0 runs a group {send to 1, receive from 2}; rank 2 sends to 0, then to 1; rank 1 receives from 2,
 *            then from 0. Rank 0 must accept rank 2's connection while its own send to 1 still waits for rank 1's
 *            handle (holding every accept until then left all three waiting out the timeout).
 *   one:     rank 0 sends to 1, rank 1 receives from 0, over any plugin (a plugin whose accept blocks until the peer
 *            connects included: rank 0 accepted rank 1's reverse connection, which rank 1 never made, for good).
 *   both:    two ranks send to each other, then receive, three times outside a group: the descriptors after the
 *            first round stay as they are (a listen offered twice for one connection was left open). */
#include <dirent.h>
#include <stdio.h>
#include <string.h>

#include "nns/nns.h"

static int descriptors(void) {
  int n = 0;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == NULL) return -1;
  while (readdir(dir) != NULL) ++n;
  closedir(dir);
  return n;
}

static int failed(int rank, const char* what, ncclResult_t result) {
  printf("rank %d: %s failed: %s: %s\n", rank, what, nnsGetErrorString(result), nnsGetLastError(NULL));
  return 1;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "crossed";
  nnsComm_t comm;
  int rank = -1;
  if (nnsCommInitFromEnv(&comm) != ncclSuccess) {
    printf("init failed: %s\n", nnsGetLastError(NULL));
    return 1;
  }
  nnsCommUserRank(comm, &rank);
  int mine[4] = {rank, rank + 10, rank + 20, rank + 30}, got[4] = {-1, -1, -1, -1};
  ncclResult_t result = ncclSuccess;
  int expect = -1; /* the rank whose data `got` should hold at the end, -1 for none */
  if (strcmp(mode, "crossed") == 0) {
    if (rank == 0) {
      nnsGroupStart();
      nnsSend(mine, 4, ncclInt32, 1, comm, NULL);
      nnsRecv(got, 4, ncclInt32, 2, comm, NULL);
      result = nnsGroupEnd();
      expect = 2;
    } else if (rank == 2) {
      result = nnsSend(mine, 4, ncclInt32, 0, comm, NULL);
      if (result == ncclSuccess) result = nnsSend(mine, 4, ncclInt32, 1, comm, NULL);
    } else if (rank == 1) {
      result = nnsRecv(got, 4, ncclInt32, 2, comm, NULL);
      if (result == ncclSuccess && got[1] != 12) return failed(rank, "the receive from rank 2 (wrong data)", result);
      if (result == ncclSuccess) result = nnsRecv(got, 4, ncclInt32, 0, comm, NULL);
      expect = 0;
    }
  } else if (strcmp(mode, "one") == 0) {
    if (rank == 0) result = nnsSend(mine, 4, ncclInt32, 1, comm, NULL);
    if (rank == 1) result = nnsRecv(got, 4, ncclInt32, 0, comm, NULL);
    expect = rank == 1 ? 0 : -1;
  } else if (strcmp(mode, "both") == 0 && rank < 2) {
    int after[3] = {0, 0, 0};
    for (int round = 0; round < 3 && result == ncclSuccess; ++round) {
      result = nnsSend(mine, 4, ncclInt32, 1 - rank, comm, NULL);
      if (result == ncclSuccess) result = nnsRecv(got, 4, ncclInt32, 1 - rank, comm, NULL);
      after[round] = descriptors();
    }
    if (result == ncclSuccess && after[2] != after[0]) {
      printf("rank %d: descriptors after rounds 1, 2, 3: %d, %d, %d\n", rank, after[0], after[1], after[2]);
      return 1;
    }
    expect = 1 - rank;
  }
  if (result != ncclSuccess) return failed(rank, mode, result);
  if (expect >= 0 && (got[0] != expect || got[3] != expect + 30)) {
    printf("rank %d: received %d %d %d %d, expected rank %d's data\n", rank, got[0], got[1], got[2], got[3], expect);
    return 1;
  }
  printf("rank %d: ok\n", rank);
  fflush(stdout);
  nnsCommDestroy(comm);
  return 0;
}
