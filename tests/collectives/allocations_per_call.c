/* allocations_per_call.c: once a communicator has run a call of each kind and size, running them again allocates
 * nothing, on any thread of the process (the caller's, the progress thread, the plugin's). Every heap allocation
 * goes through the counting malloc family below (operator new calls malloc), which hands it to glibc's own. Each
 * rank warms up every collective and a grouped send/receive at three sizes, then runs them all again in turn for
 * `rounds` rounds and counts; exits 1 when a rank counted any. Not for sanitizer builds (they replace malloc).
 * Argument: "registered" registers both buffers with the communicator first (zero-copy sends and receives). */
#define _GNU_SOURCE
#include <nns/nns.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern void* __libc_malloc(size_t);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
extern void* __libc_memalign(size_t, size_t);

static atomic_long allocations;
static void counted(void) {
  atomic_fetch_add_explicit(&allocations, 1, memory_order_relaxed);
}
void* malloc(size_t bytes) {
  counted();
  return __libc_malloc(bytes);
}
void* calloc(size_t count, size_t bytes) {
  counted();
  return __libc_calloc(count, bytes);
}
void* realloc(void* memory, size_t bytes) {
  counted();
  return __libc_realloc(memory, bytes);
}
void* memalign(size_t alignment, size_t bytes) {
  counted();
  return __libc_memalign(alignment, bytes);
}
void* aligned_alloc(size_t alignment, size_t bytes) {
  counted();
  return __libc_memalign(alignment, bytes);
}
int posix_memalign(void** memory, size_t alignment, size_t bytes) {
  counted();
  *memory = __libc_memalign(alignment, bytes);
  return *memory != NULL ? 0 : 12 /* ENOMEM */;
}

enum { kKinds = 6, kSizes = 3 };
static const char* const kNames[kKinds] = {"allreduce", "allgather", "reducescatter",
                                           "broadcast", "reduce",    "send/recv"};
static const size_t kCounts[kSizes] = {3, 1001, 300001}; /* floats: latency, tree/ring, several slots */

static ncclResult_t call(int kind, size_t count, float* send, float* recv, int rank, int n, nnsComm_t comm) {
  switch (kind) {
    case 0: return nnsAllReduce(send, recv, count, ncclFloat32, ncclSum, comm, NULL);
    case 1: return nnsAllGather(send, recv, count / n + 1, ncclFloat32, comm, NULL);
    case 2: return nnsReduceScatter(send, recv, count / n + 1, ncclFloat32, ncclMax, comm, NULL);
    case 3: return nnsBroadcast(send, recv, count, ncclFloat32, n - 1, comm, NULL);
    case 4: return nnsReduce(send, recv, count, ncclFloat32, ncclAvg, 0, comm, NULL);
    default:
      nnsGroupStart();
      nnsSend(send, count, ncclFloat32, (rank + 1) % n, comm, NULL);
      nnsRecv(recv, count, ncclFloat32, (rank + n - 1) % n, comm, NULL);
      return nnsGroupEnd();
  }
}

int main(int argc, char** argv) {
  const int registered = argc > 1 && strcmp(argv[1], "registered") == 0;
  const int rounds = 20;
  nnsComm_t comm;
  int rank = -1, n = 0;
  if (nnsCommInitFromEnv(&comm) != ncclSuccess) {
    fprintf(stderr, "init: %s\n", nnsGetLastError(NULL));
    return 1;
  }
  nnsCommUserRank(comm, &rank);
  nnsCommCount(comm, &n);
  const size_t most = kCounts[kSizes - 1] + (size_t)n;
  float* send = calloc(most * (size_t)n, sizeof(float));
  float* recv = calloc(most * (size_t)n, sizeof(float));
  void *sendHandle = NULL, *recvHandle = NULL;
  if (registered && (nnsCommRegister(comm, send, most * n * sizeof(float), &sendHandle) != ncclSuccess ||
                     nnsCommRegister(comm, recv, most * n * sizeof(float), &recvHandle) != ncclSuccess)) {
    fprintf(stderr, "register: %s\n", nnsGetLastError(NULL));
    return 1;
  }
  long counts[kKinds] = {0};
  for (int round = -1; round < rounds; ++round) { /* round -1 warms up */
    for (int s = 0; s < kSizes; ++s) {
      for (int kind = 0; kind < kKinds; ++kind) {
        const long before = atomic_load(&allocations);
        if (call(kind, kCounts[s], send, recv, rank, n, comm) != ncclSuccess) {
          fprintf(stderr, "rank %d: %s of %zu: %s\n", rank, kNames[kind], kCounts[s], nnsGetLastError(NULL));
          return 1;
        }
        if (round >= 0) counts[kind] += atomic_load(&allocations) - before;
      }
    }
  }
  long total = 0;
  for (int kind = 0; kind < kKinds; ++kind) {
    total += counts[kind];
    if (counts[kind] != 0)
      printf("rank %d: %s: %ld allocations in %d calls\n", rank, kNames[kind], counts[kind], rounds * kSizes);
  }
  printf("rank %d of %d: %ld allocations in %d calls after the first of each\n", rank, n, total,
         rounds * kSizes * kKinds);
  if (registered) {
    nnsCommDeregister(comm, sendHandle);
    nnsCommDeregister(comm, recvHandle);
  }
  nnsCommDestroy(comm);
  free(send);
  free(recv);
  return total == 0 ? 0 : 1;
}
