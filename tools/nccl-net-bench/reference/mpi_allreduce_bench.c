/* mpi_allreduce_bench.c: the reference for nccl-net-bench: MPI_Allreduce (float, sum) timed the same way (warm-up,
   then the mean of N iterations, the slowest rank's time), printing size, time and nccl-tests' bus bandwidth.
   Usage: mpi_allreduce_bench [MIN_BYTES [MAX_BYTES [FACTOR [ITERATIONS [WARMUP]]]]] (8 64M 4 20 5); compare.py passes
   all five, so every tool in a comparison gets the same -n and -w. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  size_t minBytes = argc > 1 ? strtoull(argv[1], NULL, 10) : 8,
         maxBytes = argc > 2 ? strtoull(argv[2], NULL, 10) : 1 << 26;
  int factor = argc > 3 ? atoi(argv[3]) : 4, iterations = argc > 4 ? atoi(argv[4]) : 20,
      warmup = argc > 5 ? atoi(argv[5]) : 5;
  /* A minimum below one float would stay 0 under the factor (rows of 0 bytes for ever), and a factor below 2 would
     never reach the maximum. */
  if (minBytes < sizeof(float) || factor < 2 || iterations < 1 || warmup < 0) {
    if (rank == 0)
      fprintf(stderr,
              "usage: mpi_allreduce_bench [MIN_BYTES >= 4 [MAX_BYTES [FACTOR >= 2 [ITERATIONS >= 1 "
              "[WARMUP >= 0]]]]]\n");
    MPI_Finalize();
    return 2;
  }
  float* send = malloc(maxBytes + 4);
  float* recv = malloc(maxBytes + 4);
  if (send == NULL || recv == NULL) {
    fprintf(stderr, "mpi_allreduce_bench: rank %d: no memory for two buffers of %zu bytes\n", rank, maxBytes + 4);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (size_t i = 0; i < maxBytes / sizeof(float); ++i) send[i] = (float)((rank * 7 + i * 3) % 9) - 4;
  if (rank == 0)
    printf("# MPI_Allreduce float sum, %d ranks\n#%11s %10s %8s %8s\n", size, "size(B)", "time(us)", "algbw", "busbw");
  for (size_t bytes = minBytes; bytes <= maxBytes; bytes *= factor) {
    int count = (int)(bytes / sizeof(float));
    for (int i = 0; i < warmup; ++i) MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (int i = 0; i < iterations; ++i) MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double mine = (MPI_Wtime() - start) / iterations, slowest = 0;
    MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      double algbw = (double)(count * sizeof(float)) / slowest / 1e9;
      printf(" %11zu %10.1f %8.3f %8.3f\n", (size_t)count * sizeof(float), slowest * 1e6, algbw,
             algbw * 2.0 * (size - 1) / size);
    }
  }
  free(send);
  free(recv);
  MPI_Finalize();
  return 0;
}
