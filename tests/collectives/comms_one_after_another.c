/* comms_one_after_another.c: a job's communicators made from the launcher's environment one after another (made,
 * used, destroyed, then the next), as a program that rebuilds its communicator after a failure or per phase does.
 * Run under nccl-net-run through a wrapper shell (collectives.communicators_one_after_another_under_a_shell): the
 * listening socket the launcher hands rank 0 has a copy in the shell too, and while it stayed listening the second
 * communicator's rank 0 could not listen on the job's port ("Address already in use"). */
#include <stdio.h>

#include "nns/nns.h"

int main(void) {
  int rank = -1, size = 0;
  for (int round = 0; round < 3; ++round) {
    nnsComm_t comm = NULL;
    if (nnsCommInitFromEnv(&comm) != ncclSuccess) {
      printf("rank %d: communicator %d: %s\n", rank, round, nnsGetLastError(NULL));
      return 1;
    }
    if (nnsCommUserRank(comm, &rank) != ncclSuccess || nnsCommCount(comm, &size) != ncclSuccess) {
      printf("rank %d: communicator %d: %s\n", rank, round, nnsGetLastError(NULL));
      return 1;
    }
    int value = rank + 1;
    if (nnsAllReduce(&value, &value, 1, ncclInt32, ncclSum, comm, NULL) != ncclSuccess ||
        value != size * (size + 1) / 2) {
      printf("rank %d: communicator %d: allreduce gave %d: %s\n", rank, round, value, nnsGetLastError(NULL));
      return 1;
    }
    if (nnsCommDestroy(comm) != ncclSuccess) {
      printf("rank %d: communicator %d: destroy: %s\n", rank, round, nnsGetLastError(NULL));
      return 1;
    }
  }
  printf("rank %d of %d: three communicators one after another\n", rank, size);
  return 0;
}
