/* queued_behind_stuck.c: rank 1's thread A receives from rank 0, which sends, and is stuck inside the plugin's accept
 * for good (broken-blocking-accept, told by $NNS_TEST_ACCEPT_STUCK, set once the communicator is made, never to
 * return: the communicator accepts only once the peer says it connects, so an accept that merely blocks until then
 * returns). Thread B's allreduce, queued behind A, must fail once nothing has progressed for 4 x NNS_COMM_TIMEOUT_MS +
 * 30 s, saying why; it waited for ever. Rank 0 only sends and waits, then leaves. B is queued 5 s after A is stuck,
 * and gives up 34 s (4 x 1 s + 30 s) after B was queued, not after A started: it must return within 32 to 37 s. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nns/nns.h"

static nnsComm_t comm;

static void* receiveNeverSent(void* arg) {
  static int x[4];
  (void)arg;
  nnsRecv(x, 4, ncclInt32, 0, comm, NULL); /* does not return: the process ends with it stuck */
  return NULL;
}

int main(void) {
  int rank = -1;
  if (nnsCommInitFromEnv(&comm) != ncclSuccess) {
    printf("init: %s\n", nnsGetLastError(NULL));
    return 1;
  }
  nnsCommUserRank(comm, &rank);
  if (rank == 0) {
    static int y[4];
    nnsSend(y, 4, ncclInt32, 1, comm, NULL); /* its connect is never accepted: it fails after the plugin's timeout */
    sleep(44);                               /* past rank 1's 5 + 37 s at most */
    _exit(0);
  }
  setenv("NNS_TEST_ACCEPT_STUCK", "1", 1);
  pthread_t stuck;
  pthread_create(&stuck, NULL, receiveNeverSent, NULL);
  sleep(5); /* the idle time counts from B's queueing: counted from A's start, B gave up after 29 s */
  struct timespec start, end;
  clock_gettime(CLOCK_MONOTONIC, &start);
  float v = 1;
  ncclResult_t result = nnsAllReduce(&v, &v, 1, ncclFloat32, ncclSum, comm, NULL);
  clock_gettime(CLOCK_MONOTONIC, &end);
  const double seconds = (double)(end.tv_sec - start.tv_sec) + (double)(end.tv_nsec - start.tv_nsec) / 1e9;
  printf("rank 1: the queued allreduce returned after %.1f s: %s: %s\n", seconds, nnsGetErrorString(result),
         nnsGetLastError(NULL));
  fflush(stdout);
  if (result != ncclSuccess && strstr(nnsGetLastError(NULL), "gave up waiting for the operation ahead of this one") &&
      seconds >= 32 && seconds < 37)
    printf("rank 1: a call queued behind a stuck plugin call gave up\n");
  fflush(stdout);
  _exit(0); /* the stuck thread stays in the plugin's accept */
}
