// plugin_harness.hpp: loads libnccl-net-socket.so and drives its ncclNet_v12 table the way NCCL's proxy does, with a
// timeout on every wait (shared by the socket plugin's tests).
#pragma once

#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nccl_net/net.h>

// In a forked child that returns its exit code: when `cond` fails, says so on stderr and returns `code`.
#define CHILD_CHECK(cond, code, ...)                            \
  do {                                                          \
    if (!(cond)) {                                              \
      std::fprintf(stderr, "child check failed: " __VA_ARGS__); \
      std::fprintf(stderr, " (%s)\n", #cond);                   \
      return code;                                              \
    }                                                           \
  } while (0)

namespace socket_test {

using Clock = std::chrono::steady_clock;

// ---- for tests that fork their peers -----------------------------------------------------------------------------
// Reads exactly `size` bytes from `fd` within `timeoutMs`.
inline bool readWithin(int fd, void* data, size_t size, int timeoutMs) {
  auto* bytes = static_cast<unsigned char*>(data);
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeoutMs);
  while (size > 0) {
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    pollfd waiter{fd, POLLIN, 0};
    if (left <= 0 || poll(&waiter, 1, left) <= 0) return false;
    ssize_t got = ::read(fd, bytes, size);
    if (got <= 0) return false;
    bytes += got;
    size -= static_cast<size_t>(got);
  }
  return true;
}

// The child's exit code, or -1 if it did not exit within the timeout (it is then killed).
inline int waitChild(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (Clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Runs a shell command quietly; true when it exited 0.
inline bool shell(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
}

// WARN lines the plugin logged through our logger (so tests can check that a fault names the peer).
inline std::mutex& warningsMutex() {
  static std::mutex mutex;
  return mutex;
}
inline std::vector<std::string>& warnings() {
  static std::vector<std::string> lines;
  return lines;
}
inline void collectingLogger(ncclDebugLogLevel level, unsigned long /*flags*/, const char* /*file*/, int /*line*/,
                             const char* fmt, ...) {
  if (level != NCCL_LOG_WARN) return;
  char text[1024];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(text, sizeof(text), fmt, args);
  va_end(args);
  std::fprintf(stderr, "[plugin WARN] %s\n", text);
  std::lock_guard<std::mutex> lock(warningsMutex());
  warnings().push_back(text);
}
inline bool warnedAbout(const std::string& needle) {
  std::lock_guard<std::mutex> lock(warningsMutex());
  for (const std::string& line : warnings())
    if (line.find(needle) != std::string::npos) return true;
  return false;
}

inline void* openPlugin() {
  static void* library = dlopen(NNS_SOCKET_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  return library;
}

inline const ncclNet_v12_t* plugin() {
  void* library = openPlugin();
  if (library == nullptr) return nullptr;
  return static_cast<const ncclNet_v12_t*>(dlsym(library, "ncclNetPlugin_v12"));
}

// init once per process with the collecting logger; returns the ctx.
inline void* initPlugin(const ncclNet_v12_t* net, ncclResult_t* result) {
  void* ctx = nullptr;
  *result = net->init(&ctx, 0x5eed, nullptr, collectingLogger, nullptr);
  return ctx;
}

// Polls test() until done, an error, or the timeout (ncclTimeout).
inline ncclResult_t waitRequest(const ncclNet_v12_t* net, void* request, int* sizes,
                                std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto deadline = Clock::now() + timeout;
  int done = 0;
  while (!done) {
    ncclResult_t result = net->test(request, &done, sizes);
    if (result != ncclSuccess) return result;
    if (!done && Clock::now() > deadline) return ncclTimeout;
  }
  return ncclSuccess;
}

// Posts an isend, retrying while the plugin answers "not now" (NULL request).
inline ncclResult_t postSend(const ncclNet_v12_t* net, void* comm, void* data, size_t size, int tag, void** request,
                             std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto deadline = Clock::now() + timeout;
  *request = nullptr;
  while (*request == nullptr) {
    ncclResult_t result = net->isend(comm, data, size, tag, nullptr, nullptr, request);
    if (result != ncclSuccess) return result;
    if (*request == nullptr && Clock::now() > deadline) return ncclTimeout;
  }
  return ncclSuccess;
}

inline ncclResult_t postRecv(const ncclNet_v12_t* net, void* comm, int n, void** data, size_t* sizes, int* tags,
                             void** request, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto deadline = Clock::now() + timeout;
  *request = nullptr;
  void* mhandles[8] = {};
  while (*request == nullptr) {
    ncclResult_t result = net->irecv(comm, n, data, sizes, tags, mhandles, nullptr, request);
    if (result != ncclSuccess) return result;
    if (*request == nullptr && Clock::now() > deadline) return ncclTimeout;
  }
  return ncclSuccess;
}

// connect() until it yields a sendComm (both ends in other processes, or accept driven elsewhere).
inline ncclResult_t connectUntilDone(const ncclNet_v12_t* net, void* ctx, int dev, void* handle, void** sendComm,
                                     std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto deadline = Clock::now() + timeout;
  ncclNetDeviceHandle_v12_t* devHandle = nullptr;
  *sendComm = nullptr;
  while (*sendComm == nullptr) {
    ncclResult_t result = net->connect(ctx, dev, handle, sendComm, &devHandle);
    if (result != ncclSuccess) return result;
    if (*sendComm == nullptr && Clock::now() > deadline) return ncclTimeout;
  }
  return ncclSuccess;
}

inline ncclResult_t acceptUntilDone(const ncclNet_v12_t* net, void* listenComm, void** recvComm,
                                    std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto deadline = Clock::now() + timeout;
  ncclNetDeviceHandle_v12_t* devHandle = nullptr;
  *recvComm = nullptr;
  while (*recvComm == nullptr) {
    ncclResult_t result = net->accept(listenComm, recvComm, &devHandle);
    if (result != ncclSuccess) return result;
    if (*recvComm == nullptr && Clock::now() > deadline) return ncclTimeout;
  }
  return ncclSuccess;
}

// In one process: drive connect (to `handle`) and accept (on `listenComm`) alternately until both comms exist.
inline ncclResult_t connectToListener(const ncclNet_v12_t* net, void* ctx, int dev, void* handle, void* listenComm,
                                      void** sendComm, void** recvComm) {
  auto deadline = Clock::now() + std::chrono::seconds(20);
  ncclNetDeviceHandle_v12_t* devHandle = nullptr;
  *sendComm = nullptr;
  *recvComm = nullptr;
  while (*sendComm == nullptr || *recvComm == nullptr) {
    if (*sendComm == nullptr) {
      ncclResult_t result = net->connect(ctx, dev, handle, sendComm, &devHandle);
      if (result != ncclSuccess) return result;
    }
    if (*recvComm == nullptr) {
      ncclResult_t result = net->accept(listenComm, recvComm, &devHandle);
      if (result != ncclSuccess) return result;
    }
    if (Clock::now() > deadline) return ncclTimeout;
  }
  return ncclSuccess;
}

// In one process: listen on `dev`, then connect and accept.
inline ncclResult_t connectPair(const ncclNet_v12_t* net, void* ctx, int dev, void** sendComm, void** recvComm,
                                void** listenComm) {
  unsigned char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  ncclResult_t result = net->listen(ctx, dev, handle, listenComm);
  if (result != ncclSuccess) return result;
  return connectToListener(net, ctx, dev, handle, *listenComm, sendComm, recvComm);
}

// Calls accept on `listenComm` until a WARN containing `needle` was logged (true), for at most 10 s. False also when
// accept fails or returns a comm (nobody real is connecting).
inline bool acceptUntilWarned(const ncclNet_v12_t* net, void* listenComm, const std::string& needle) {
  auto deadline = Clock::now() + std::chrono::seconds(10);
  ncclNetDeviceHandle_v12_t* devHandle = nullptr;
  while (!warnedAbout(needle)) {
    void* comm = nullptr;
    if (Clock::now() > deadline || net->accept(listenComm, &comm, &devHandle) != ncclSuccess || comm != nullptr)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

inline unsigned char patternByte(size_t index, size_t seed) {
  return static_cast<unsigned char>((index * 2654435761u + seed * 40503u) >> 7);
}

}  // namespace socket_test
