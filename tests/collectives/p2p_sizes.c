/* p2p_sizes.c: a receive whose size differs from its send's fails on that receive, naming the mismatch, also where
 * both are whole numbers of pieces (NNS_SLOT_BYTES=1024: 256 ints a piece). A receive of 512 ints from a send of 768
 * completed before, cut short, and the send's third piece went into the next receive. Equal sizes still pass, whole
 * pieces or not. Two ranks; each mismatch on a communicator of its own (made from rank 0's unique id, handed over the
 * first), as a mismatch fails the communicator. Every mismatch is ncclInvalidUsage, whichever side sees it. */
#include <stdio.h>
#include <string.h>

#include "nns/nns.h"

static int failures = 0;

static void expect(int ok, int rank, const char* what) {
  if (!ok) ++failures;
  printf("rank %d: %s: %s%s%s\n", rank, what, ok ? "as expected" : "NOT as expected (", ok ? "" : nnsGetLastError(NULL),
         ok ? "" : ")");
}

/* Rank 0 sends `sendCount` ints of `value`, rank 1 receives `recvCount`: the receive's result and last error. */
static ncclResult_t exchange(nnsComm_t comm, int rank, size_t sendCount, size_t recvCount, int value, int* data) {
  if (rank == 0) {
    for (size_t i = 0; i < sendCount; ++i) data[i] = value;
    return nnsSend(data, sendCount, ncclInt32, 1, comm, NULL);
  }
  for (size_t i = 0; i < recvCount; ++i) data[i] = -1;
  return nnsRecv(data, recvCount, ncclInt32, 0, comm, NULL);
}

static nnsComm_t another(nnsComm_t first, int rank, int size) {
  nnsUniqueId id;
  nnsComm_t comm = NULL;
  memset(&id, 0, sizeof(id));
  if (rank == 0 && nnsGetUniqueId(&id) != ncclSuccess) return NULL;
  if (nnsBroadcast(&id, &id, sizeof(id), ncclInt8, 0, first, NULL) != ncclSuccess) return NULL;
  if (nnsCommInitRank(&comm, size, id, rank) != ncclSuccess) return NULL;
  return comm;
}

/* On a communicator of its own (a mismatch fails it): rank 0 sends `sendCount` ints, rank 1 receives `recvCount`,
 * which must fail with ncclInvalidUsage and `text` in the error. 0 when the communicator could not be made. */
static int mismatch(nnsComm_t first, int rank, int size, size_t sendCount, size_t recvCount, int* data,
                    const char* text) {
  char what[96];
  nnsComm_t comm = another(first, rank, size);
  if (comm == NULL) return printf("rank %d: another communicator: %s\n", rank, nnsGetLastError(NULL)), 0;
  ncclResult_t result = exchange(comm, rank, sendCount, recvCount, 7, data);
  snprintf(what, sizeof(what), "%zu ints into %zu fails on that receive", sendCount, recvCount);
  if (rank == 1) expect(result == ncclInvalidUsage && strstr(nnsGetLastError(NULL), text) != NULL, rank, what);
  nnsCommDestroy(comm);
  return 1;
}

int main(void) {
  static int data[32768];
  nnsComm_t first;
  int rank = -1, size = 0;
  if (nnsCommInitFromEnv(&first) != ncclSuccess) {
    printf("init: %s\n", nnsGetLastError(NULL));
    return 1;
  }
  nnsCommUserRank(first, &rank);
  nnsCommCount(first, &size);
  /* Equal sizes: whole pieces (512 ints, two pieces and the end mark) and not (300 ints). */
  expect(exchange(first, rank, 512, 512, 5, data) == ncclSuccess && (rank == 0 || data[511] == 5), rank,
         "512 ints into 512");
  expect(exchange(first, rank, 300, 300, 6, data) == ncclSuccess && (rank == 0 || data[299] == 6), rank,
         "300 ints into 300");
  /* A receive of whole pieces fewer than the send. */
  if (!mismatch(first, rank, size, 768, 512, data, "sent more than this receive takes")) return 1;
  /* A receive larger than the send, the send a whole piece. */
  if (!mismatch(first, rank, size, 256, 512, data, "received 0 bytes from rank 0, expected 1024")) return 1;
  /* A last piece larger than its receive, which the plugin refuses itself: the call's buffers, 64 KiB and more, are
   * received into directly (NNS_CALL_REGISTRATION over TCP), so the receive is exactly the piece (20000 ints into
   * 19990: the last piece's 128 bytes into 88). The same code, and the receive's size said (it said only "returned
   * ncclInvalidUsage"). The socket plugin fails the comm and may say so at the test of another receive of it (a
   * 1024-byte piece under clang's timing), whose size is said as the one tested. */
  if (!mismatch(first, rank, size, 20000, 19990, data, "returned ncclInvalidUsage, testing a receive of ")) return 1;
  nnsCommDestroy(first);
  if (failures == 0) printf("rank %d of %d: every receive's size checked against its send's\n", rank, size);
  return failures != 0;
}
