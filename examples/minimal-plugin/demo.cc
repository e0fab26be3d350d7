// demo.cc: drives a plugin's ncclNetPlugin_v12 table the way NCCL's proxy does, between two processes, and prints
// the bandwidth per message size beside a single-thread memcpy of the same size measured in the same run.
// Usage: minimal-plugin-demo PATH/TO/libnccl-net-X.so
#include <dlfcn.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include <nccl_net/net.h>

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kTimeout = std::chrono::seconds(30);

#define DEMO_CHECK(call)                                                                   \
  do {                                                                                     \
    ncclResult_t demo_result_ = (call);                                                    \
    if (demo_result_ != ncclSuccess) {                                                     \
      std::fprintf(stderr, "demo: %s failed with ncclResult_t %d\n", #call, demo_result_); \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

// Polls test() until done, as NCCL's proxy does; gives up after kTimeout.
int waitFor(const ncclNet_v12_t* net, void* request, int* size) {
  auto deadline = Clock::now() + kTimeout;
  for (int done = 0; !done;) {
    DEMO_CHECK(net->test(request, &done, size));
    if (!done) sched_yield();  // as NCCL's proxy thread does when a pass made no progress
    if (Clock::now() > deadline) {
      std::fprintf(stderr, "demo: request did not complete within %lld s\n", static_cast<long long>(kTimeout.count()));
      return 1;
    }
  }
  return 0;
}

constexpr size_t kMaxBytes = 64u << 20;

// The reference: one thread copying the same bytes between two buffers of this process.
double memcpyGbps(size_t bytes, int iterations) {
  static std::vector<unsigned char> from(kMaxBytes, 1), to(kMaxBytes);
  auto start = Clock::now();
  for (int i = 0; i < iterations; ++i) {
    std::memcpy(to.data(), from.data(), bytes);
    asm volatile("" : : "r"(to.data()) : "memory");  // keep the copy
  }
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return static_cast<double>(bytes) * iterations / seconds / 1e9;
}

int iterationsFor(size_t bytes) {
  return bytes <= (64u << 10) ? 2000 : bytes <= (4u << 20) ? 200 : 20;
}

int runSender(const ncclNet_v12_t* net, void* ctx, unsigned char* handle) {
  void* sendComm = nullptr;
  auto deadline = Clock::now() + kTimeout;
  while (sendComm == nullptr) {
    DEMO_CHECK(net->connect(ctx, 0, handle, &sendComm, nullptr));
    if (Clock::now() > deadline) return 1;
  }
  std::vector<unsigned char> buffer(kMaxBytes, 0x5a);
  void* mhandle = nullptr;
  DEMO_CHECK(net->regMr(sendComm, buffer.data(), buffer.size(), NCCL_PTR_HOST, &mhandle));
  for (size_t bytes = 8; bytes <= kMaxBytes; bytes *= 8) {
    for (int i = 0; i < iterationsFor(bytes); ++i) {
      void* request = nullptr;
      while (request == nullptr) DEMO_CHECK(net->isend(sendComm, buffer.data(), bytes, 0, mhandle, nullptr, &request));
      int size = 0;
      if (waitFor(net, request, &size) != 0) return 1;
    }
  }
  DEMO_CHECK(net->deregMr(sendComm, mhandle));
  DEMO_CHECK(net->closeSend(sendComm));
  return 0;
}

int runReceiver(const ncclNet_v12_t* net, void* listenComm) {
  void* recvComm = nullptr;
  auto deadline = Clock::now() + kTimeout;
  while (recvComm == nullptr) {
    DEMO_CHECK(net->accept(listenComm, &recvComm, nullptr));
    if (Clock::now() > deadline) return 1;
  }
  std::vector<unsigned char> buffer(kMaxBytes);
  void* mhandle = nullptr;
  DEMO_CHECK(net->regMr(recvComm, buffer.data(), buffer.size(), NCCL_PTR_HOST, &mhandle));
  std::printf("%12s %8s %12s %10s %12s %8s\n", "bytes", "iters", "time(us)", "GB/s", "memcpy GB/s", "ratio");
  for (size_t bytes = 8; bytes <= kMaxBytes; bytes *= 8) {
    int iterations = iterationsFor(bytes);
    auto start = Clock::now();
    for (int i = 0; i < iterations; ++i) {
      void* request = nullptr;
      void* data = buffer.data();
      size_t capacity = buffer.size();
      int tag = 0;
      while (request == nullptr)
        DEMO_CHECK(net->irecv(recvComm, 1, &data, &capacity, &tag, &mhandle, nullptr, &request));
      int size = -1;
      if (waitFor(net, request, &size) != 0) return 1;
      if (static_cast<size_t>(size) != bytes || buffer[bytes - 1] != 0x5a) {
        std::fprintf(stderr, "demo: expected %zu bytes of 0x5a, test reported %d\n", bytes, size);
        return 1;
      }
    }
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    double gbps = static_cast<double>(bytes) * iterations / seconds / 1e9;
    double reference = memcpyGbps(bytes, iterations);
    std::printf("%12zu %8d %12.2f %10.3f %12.3f %8.2f\n", bytes, iterations, seconds / iterations * 1e6, gbps,
                reference, gbps / reference);
  }
  DEMO_CHECK(net->deregMr(recvComm, mhandle));
  DEMO_CHECK(net->closeRecv(recvComm));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bool help = argc == 2 && (std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0);
  if (argc != 2 || help) {
    std::fprintf(
        help ? stdout : stderr,
        "usage: %s PATH/TO/libnccl-net-NAME.so\n"
        "  drives the plugin's ncclNetPlugin_v12 table between two processes, as NCCL's proxy does, and prints\n"
        "  the bandwidth per message size beside a memcpy of the same size\n",
        argv[0]);
    return help ? 0 : 2;
  }
  void* library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    std::fprintf(stderr, "demo: %s\n", dlerror());
    return 1;
  }
  auto* net = static_cast<const ncclNet_v12_t*>(dlsym(library, "ncclNetPlugin_v12"));
  if (net == nullptr) {
    std::fprintf(stderr, "demo: %s exports no ncclNetPlugin_v12\n", argv[1]);
    return 1;
  }
  void* ctx = nullptr;
  DEMO_CHECK(net->init(&ctx, 0, nullptr, nullptr, nullptr));
  ncclNetProperties_v12_t props;
  DEMO_CHECK(net->getProperties(0, &props));
  std::printf("plugin %s, device 0: %s, %d Mbps, maxRecvs %d; sender and receiver are separate processes\n", net->name,
              props.name, props.speed, props.maxRecvs);

  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* listenComm = nullptr;
  DEMO_CHECK(net->listen(ctx, 0, handle, &listenComm));
  std::fflush(stdout);
  pid_t child = fork();
  if (child == 0) _exit(runSender(net, ctx, handle));  // the handle reaches the child through fork
  int status = runReceiver(net, listenComm);
  DEMO_CHECK(net->closeListen(listenComm));
  int childStatus = 0;
  waitpid(child, &childStatus, 0);
  DEMO_CHECK(net->finalize(ctx));
  return status != 0 || !WIFEXITED(childStatus) || WEXITSTATUS(childStatus) != 0;
}
