/* ring_exchange.c: the C API in a few lines: a communicator from the launcher's environment, an allreduce, and a
 * ring exchange of send/recv in a group. Run: nccl-net-run -n 4 ./nns-c-api-example */
#include <stdio.h>
#include <stdlib.h>

#include <nns/nns.h>

#define CHECK(call)                                                                                 \
  do {                                                                                              \
    ncclResult_t r_ = (call);                                                                       \
    if (r_ != ncclSuccess) {                                                                        \
      fprintf(stderr, "%s failed: %s (%s)\n", #call, nnsGetErrorString(r_), nnsGetLastError(NULL)); \
      return 1;                                                                                     \
    }                                                                                               \
  } while (0)

int main(void) {
  nnsComm_t comm;
  int rank, size;
  CHECK(nnsCommInitFromEnv(&comm));
  CHECK(nnsCommUserRank(comm, &rank));
  CHECK(nnsCommCount(comm, &size));

  enum { kCount = 1001 };
  float* values = malloc(kCount * sizeof(float));
  int* sent = malloc(kCount * sizeof(int));
  int* received = malloc(kCount * sizeof(int));
  for (int i = 0; i < kCount; ++i) {
    values[i] = (float)(rank + i);
    sent[i] = rank * 100000 + i;
  }
  CHECK(nnsAllReduce(values, values, kCount, ncclFloat32, ncclSum, comm, NULL));

  /* Everyone sends to the next rank and receives from the previous one: only safe in a group. */
  CHECK(nnsGroupStart());
  CHECK(nnsSend(sent, kCount, ncclInt32, (rank + 1) % size, comm, NULL));
  CHECK(nnsRecv(received, kCount, ncclInt32, (rank + size - 1) % size, comm, NULL));
  CHECK(nnsGroupEnd());

  int wrong = 0;
  for (int i = 0; i < kCount; ++i) {
    float expected =
        (float)size * (float)i + (float)size * (float)(size - 1) / 2.0f; /* exact: both sums are whole numbers */
    if (values[i] != expected) ++wrong;
    if (received[i] != ((rank + size - 1) % size) * 100000 + i) ++wrong;
  }
  /* A stream is refused (calls block on host buffers), with the reason. */
  int dummy;
  if (nnsAllReduce(values, values, 1, ncclFloat32, ncclSum, comm, &dummy) != ncclInvalidArgument) ++wrong;
  ncclResult_t async;
  CHECK(nnsCommGetAsyncError(comm, &async));
  if (async != ncclSuccess) ++wrong;
  printf("rank %d of %d: %s\n", rank, size, wrong == 0 ? "allreduce and ring exchange correct" : "WRONG");
  CHECK(nnsCommDestroy(comm));
  free(values);
  free(sent);
  free(received);
  return wrong == 0 ? 0 : 3;
}
