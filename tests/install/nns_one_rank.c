/* nns_one_rank.c: a C99 program on the INSTALLED C API (nns/nns.h, libnns.so): one rank from the environment
 * (NNS_RANK=0 NNS_WORLD_SIZE=1, no root address needed), an allreduce and a send/recv to itself, checked. */
#include <stdio.h>

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
  int version = 0, rank = -1, size = 0;
  nnsComm_t comm;
  float in[5] = {1.5f, -2.0f, 3.25f, 0.0f, 1e6f}, out[5] = {0};
  int sent[3] = {7, 8, 9}, received[3] = {0};
  CHECK(nnsGetVersion(&version));
  CHECK(nnsCommInitFromEnv(&comm));
  CHECK(nnsCommUserRank(comm, &rank));
  CHECK(nnsCommCount(comm, &size));
  CHECK(nnsAllReduce(in, out, 5, ncclFloat32, ncclSum, comm, NULL));
  CHECK(nnsGroupStart());
  CHECK(nnsSend(sent, 3, ncclInt32, 0, comm, NULL));
  CHECK(nnsRecv(received, 3, ncclInt32, 0, comm, NULL));
  CHECK(nnsGroupEnd());
  CHECK(nnsCommDestroy(comm));
  for (int i = 0; i < 5; ++i)
    if (out[i] != in[i]) {
      fprintf(stderr, "allreduce of one rank: element %d is %g, not %g\n", i, (double)out[i], (double)in[i]);
      return 1;
    }
  for (int i = 0; i < 3; ++i)
    if (received[i] != sent[i]) {
      fprintf(stderr, "send/recv to itself: element %d is %d, not %d\n", i, received[i], sent[i]);
      return 1;
    }
  printf("nns C API %d: rank %d of %d, allreduce and send/recv to itself right\n", version, rank, size);
  return 0;
}
