// nccl_allreduce_check.cc: loads a net plugin into real NCCL and runs a checked 2-rank all-reduce through it.
//
// Two processes share one GPU but claim different hosts (NCCL_HOSTID), so NCCL must move every byte through its
// network transport: the plugin named by NCCL_NET_PLUGIN / NCCL_NET (or NCCL's internal "Socket" for comparison).
// Needs CUDA and NCCL; built and run by nccl_check.sh on a GPU machine, not by CMake.
//
// Usage: nccl_allreduce_check [MAX_BYTES] [ITERATIONS]
#include <cuda_runtime.h>
#include <nccl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

#define CHECK_CUDA(call)                                                                        \
  do {                                                                                          \
    cudaError_t e = (call);                                                                     \
    if (e != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e)); \
      return 2;                                                                                 \
    }                                                                                           \
  } while (0)
#define CHECK_NCCL(call)                                                                        \
  do {                                                                                          \
    ncclResult_t r = (call);                                                                    \
    if (r != ncclSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, ncclGetErrorString(r)); \
      return 3;                                                                                 \
    }                                                                                           \
  } while (0)

int runRank(int rank, int idPipe[2], size_t maxBytes, int iterations) {
  setenv("NCCL_HOSTID", rank == 0 ? "nns-check-host-0" : "nns-check-host-1", 1);
  ncclUniqueId id;
  if (rank == 0) {
    CHECK_NCCL(ncclGetUniqueId(&id));
    if (write(idPipe[1], &id, sizeof(id)) != static_cast<ssize_t>(sizeof(id))) return 4;
  } else if (read(idPipe[0], &id, sizeof(id)) != static_cast<ssize_t>(sizeof(id))) {
    return 4;
  }
  CHECK_CUDA(cudaSetDevice(0));
  ncclComm_t comm;
  CHECK_NCCL(ncclCommInitRank(&comm, 2, id, rank));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  size_t maxCount = maxBytes / sizeof(float);
  float* buffer = nullptr;
  CHECK_CUDA(cudaMalloc(&buffer, maxCount * sizeof(float)));
  std::vector<float> host(maxCount);
  if (rank == 0) std::printf("%12s %12s %12s %10s\n", "bytes", "time_us", "busbw_GB/s", "check");
  for (size_t count = 2; count <= maxCount; count *= 8) {
    // Rank r contributes r + 1 everywhere: the sum is 3 in every element.
    for (size_t i = 0; i < count; ++i) host[i] = static_cast<float>(rank + 1);
    CHECK_CUDA(cudaMemcpy(buffer, host.data(), count * sizeof(float), cudaMemcpyHostToDevice));
    CHECK_NCCL(ncclAllReduce(buffer, buffer, count, ncclFloat, ncclSum, comm, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    CHECK_CUDA(cudaMemcpy(host.data(), buffer, count * sizeof(float), cudaMemcpyDeviceToHost));
    bool correct = true;
    for (size_t i = 0; i < count && correct; ++i) correct = host[i] == 3.0f;
    auto start = std::chrono::steady_clock::now();
    for (int it = 0; it < iterations; ++it)
      CHECK_NCCL(ncclAllReduce(buffer, buffer, count, ncclFloat, ncclSum, comm, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iterations;
    double bytes = static_cast<double>(count * sizeof(float));
    // busbw for 2 ranks = algbw x 2(n-1)/n = algbw.
    if (rank == 0)
      std::printf("%12zu %12.1f %12.3f %10s\n", count * sizeof(float), seconds * 1e6, bytes / seconds / 1e9,
                  correct ? "ok" : "WRONG");
    std::fflush(stdout);
    if (!correct) return 5;
  }
  CHECK_CUDA(cudaFree(buffer));
  CHECK_NCCL(ncclCommDestroy(comm));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  size_t maxBytes = argc > 1 ? std::strtoull(argv[1], nullptr, 0) : (size_t{64} << 20);
  int iterations = argc > 2 ? std::atoi(argv[2]) : 10;
  int idPipe[2];
  if (pipe(idPipe) != 0) return 1;
  pid_t children[2];
  for (int rank = 0; rank < 2; ++rank) {
    std::fflush(stdout);
    children[rank] = fork();
    if (children[rank] == 0) _exit(runRank(rank, idPipe, maxBytes, iterations));
  }
  int failures = 0;
  for (pid_t child : children) {
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
  }
  std::printf("%s\n", failures == 0 ? "PASS" : "FAIL");
  return failures == 0 ? 0 : 1;
}
