/* dead_rank_on_first_use.c: a rank dies after the communicator is made, while the others wait for connections made
 * on first use (argv[1] picks which; argv[2] is the rank that dies):
 *   tree: every rank broadcasts over the ring (connected at creation), then the victim exits while the others call a
 *         tree allreduce (run under NNS_ALGO=tree), whose tree connections are made then. Its ring neighbours heard
 *         of the death from its closed bootstrap connections, the ranks beside them from the plugin; a rank that is
 *         only its tree neighbour (rank 3 of 8 beside rank 5) heard of it from nothing and waited out the whole
 *         NNS_COMM_TIMEOUT_MS, 10 s of 10 s where the others failed in 0.2 s.
 *   send: rank 0 sends to the victim, which it has no connection to of any kind (not its ring neighbour), while the
 *         victim exits; the other ranks leave after the broadcast.
 * Run with NNS_COMM_TIMEOUT_MS=20000: every rank that waits must fail within 8 s (they fail in 0.2-1.3 s; once, in a
 * CI run, every rank took 5.9 s, which no rerun showed again: 8 s still tells early from the 20 s timeout). Each says
 * "rank R: failed in S s:
 * why", or "rank R: late ..." / "rank R: succeeded ..." and exits 1. The victim exits 0, so that a launcher lets the
 * others run on. */
#include <nns/nns.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "tree";
  const int victim = argc > 2 ? atoi(argv[2]) : 5;
  nnsComm_t comm;
  int rank = -1, n = 0;
  if (nnsCommInitFromEnv(&comm) != ncclSuccess) {
    printf("init failed: %s\n", nnsGetLastError(NULL));
    return 1;
  }
  nnsCommUserRank(comm, &rank);
  nnsCommCount(comm, &n);
  static float data[16384];
  if (nnsBroadcast(data, data, 16, ncclFloat32, 0, comm, NULL) != ncclSuccess) {
    printf("rank %d: broadcast failed: %s\n", rank, nnsGetLastError(NULL));
    return 1;
  }
  if (rank == victim) {
    usleep(200000); /* the others are waiting for their connections by now */
    _exit(0);       /* as a crash leaves it: nothing closed but by the kernel */
  }
  const double start = now();
  ncclResult_t result;
  if (strcmp(mode, "send") == 0) {
    if (rank != 0) return 0;
    result = nnsSend(data, 16384, ncclFloat32, victim, comm, NULL);
  } else {
    result = nnsAllReduce(data, data, 16384, ncclFloat32, ncclSum, comm, NULL);
  }
  const double seconds = now() - start;
  if (result == ncclSuccess) {
    printf("rank %d: succeeded in %.2f s, with rank %d gone\n", rank, seconds, victim);
    fflush(stdout);
    _exit(1);
  }
  printf("rank %d: %s in %.2f s: %s\n", rank, seconds < 8.0 ? "failed" : "late, failed", seconds,
         nnsGetLastError(NULL));
  fflush(stdout);
  /* Not destroyed: the ranks fail one by one, and a clean exit is all this needs. */
  _exit(seconds < 8.0 ? 0 : 1);
}
