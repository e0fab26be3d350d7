// two_process.hpp: runs two peers of the nns-ib plugin in forked processes joined by a socketpair, and drives the
// plugin's ncclNet_v12 table the way NCCL's proxy does (used by the benchmark and by tests/ib).
#pragma once

#include <dlfcn.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <nccl_net/net.h>

namespace nns_ib_pair {

using Clock = std::chrono::steady_clock;

// WARN lines the plugin logged (tests check that a fault names the peer and the verbs status).
inline std::vector<std::string>& warnings() {
  static std::vector<std::string> lines;
  return lines;
}
// INFO lines (device discovery: the chosen GID, speed, PCI path).
inline std::vector<std::string>& infos() {
  static std::vector<std::string> lines;
  return lines;
}
inline void logger(ncclDebugLogLevel level, unsigned long /*flags*/, const char* /*file*/, int /*line*/,
                   const char* fmt, ...) {
  if (level != NCCL_LOG_WARN && level != NCCL_LOG_INFO) return;
  char text[1024];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(text, sizeof(text), fmt, args);
  va_end(args);
  if (level == NCCL_LOG_WARN || std::getenv("NNS_IB_TEST_VERBOSE") != nullptr)
    std::fprintf(stderr, "[pid %d plugin %s] %s\n", static_cast<int>(getpid()),
                 level == NCCL_LOG_WARN ? "WARN" : "INFO", text);
  (level == NCCL_LOG_WARN ? warnings() : infos()).push_back(text);
}
inline bool warnedAbout(const std::string& needle) {
  for (const std::string& line : warnings())
    if (line.find(needle) != std::string::npos) return true;
  return false;
}
inline bool informedAbout(const std::string& needle) {
  for (const std::string& line : infos())
    if (line.find(needle) != std::string::npos) return true;
  return false;
}

// ---- the byte channel between the two processes -------------------------------------------------------------------
struct Channel {
  int fd = -1;
  bool send(const void* data, size_t size) const {
    const auto* bytes = static_cast<const unsigned char*>(data);
    while (size > 0) {
      ssize_t n = ::write(fd, bytes, size);
      if (n <= 0) return false;
      bytes += n;
      size -= static_cast<size_t>(n);
    }
    return true;
  }
  bool recv(void* data, size_t size, int timeoutMs = 60000) const {
    auto* bytes = static_cast<unsigned char*>(data);
    auto deadline = Clock::now() + std::chrono::milliseconds(timeoutMs);
    while (size > 0) {
      int left =
          static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
      pollfd waiter{fd, POLLIN, 0};
      if (left <= 0 || poll(&waiter, 1, left) <= 0) return false;
      ssize_t n = ::read(fd, bytes, size);
      if (n <= 0) return false;
      bytes += n;
      size -= static_cast<size_t>(n);
    }
    return true;
  }
  template <class T>
  bool sendValue(const T& value) const {
    return send(&value, sizeof(value));
  }
  template <class T>
  bool recvValue(T* value, int timeoutMs = 60000) const {
    return recv(value, sizeof(*value), timeoutMs);
  }
};

struct PairResult {
  int first = -1;  // exit status of each child; -1 killed at the timeout
  int second = -1;
  bool timedOut = false;
};

// Forks both peers (each gets its environment applied before it loads anything) and waits up to `timeout`.
inline PairResult runPair(const std::vector<std::pair<std::string, std::string>>& firstEnv,
                          const std::function<int(const Channel&)>& first,
                          const std::vector<std::pair<std::string, std::string>>& secondEnv,
                          const std::function<int(const Channel&)>& second, std::chrono::milliseconds timeout,
                          pid_t* firstPid = nullptr, pid_t* secondPid = nullptr,
                          const std::function<void()>& whileWaiting = nullptr) {
  int fds[2];
  PairResult result;
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return result;
  std::fflush(stdout);
  std::fflush(stderr);
  auto spawn = [&](int mine, int other, const std::vector<std::pair<std::string, std::string>>& env,
                   const std::function<int(const Channel&)>& body) {
    pid_t pid = fork();
    if (pid == 0) {
      close(other);
      for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
      int status = body(Channel{mine});
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(status);
    }
    return pid;
  };
  pid_t a = spawn(fds[0], fds[1], firstEnv, first);
  pid_t b = spawn(fds[1], fds[0], secondEnv, second);
  close(fds[0]);
  close(fds[1]);
  if (firstPid != nullptr) *firstPid = a;
  if (secondPid != nullptr) *secondPid = b;
  if (whileWaiting) whileWaiting();
  auto deadline = Clock::now() + timeout;
  int statusA = 0, statusB = 0;
  bool doneA = false, doneB = false;
  while (!(doneA && doneB)) {
    if (!doneA && waitpid(a, &statusA, WNOHANG) == a) doneA = true;
    if (!doneB && waitpid(b, &statusB, WNOHANG) == b) doneB = true;
    if (Clock::now() > deadline) {
      result.timedOut = true;
      if (!doneA) kill(a, SIGKILL), waitpid(a, &statusA, 0);
      if (!doneB) kill(b, SIGKILL), waitpid(b, &statusB, 0);
      break;
    }
    usleep(5000);
  }
  auto code = [](int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; };
  result.first = code(statusA);
  result.second = code(statusB);
  return result;
}

// ---- one peer's view of the plugin
// ------------------------------------------------------------------------------------
struct Peer {
  const ncclNet_v12_t* net = nullptr;
  void* ctx = nullptr;
  std::string error;

  bool load(const char* path) {
    void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      error = dlerror();
      return false;
    }
    net = static_cast<const ncclNet_v12_t*>(dlsym(library, "ncclNetPlugin_v12"));
    if (net == nullptr) {
      error = "no ncclNetPlugin_v12";
      return false;
    }
    if (net->init(&ctx, 0x1b, nullptr, logger, nullptr) != ncclSuccess) {
      error = "init failed";
      return false;
    }
    return true;
  }

  // Fuses physical devices into a vNIC; returns its index or -1.
  int fuse(const std::vector<int>& devs) {
    ncclNetVDeviceProps_v12_t props{};
    props.ndevs = static_cast<int>(devs.size());
    for (size_t i = 0; i < devs.size(); ++i) props.devs[i] = devs[i];
    int d = -1;
    if (net->makeVDevice == nullptr || net->makeVDevice(&d, &props) != ncclSuccess) return -1;
    return d;
  }

  // Listens on `dev`, ships the handle through the channel, and accepts (the other side calls connectTo).
  ncclResult_t acceptFrom(const Channel& channel, int dev, void** recvComm, void** listenComm) {
    char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
    ncclResult_t result = net->listen(ctx, dev, handle, listenComm);
    if (result != ncclSuccess) return result;
    if (!channel.send(handle, sizeof(handle))) return ncclSystemError;
    auto deadline = Clock::now() + std::chrono::seconds(60);
    ncclNetDeviceHandle_v12_t* devHandle = nullptr;
    *recvComm = nullptr;
    while (*recvComm == nullptr) {
      result = net->accept(*listenComm, recvComm, &devHandle);
      if (result != ncclSuccess) return result;
      if (Clock::now() > deadline) return ncclTimeout;
    }
    return ncclSuccess;
  }

  ncclResult_t connectTo(const Channel& channel, int dev, void** sendComm) {
    char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
    if (!channel.recv(handle, sizeof(handle))) return ncclSystemError;
    auto deadline = Clock::now() + std::chrono::seconds(60);
    ncclNetDeviceHandle_v12_t* devHandle = nullptr;
    *sendComm = nullptr;
    while (*sendComm == nullptr) {
      ncclResult_t result = net->connect(ctx, dev, handle, sendComm, &devHandle);
      if (result != ncclSuccess) return result;
      if (Clock::now() > deadline) return ncclTimeout;
    }
    return ncclSuccess;
  }

  // Polls until done, an error, or the timeout (ncclTimeout).
  ncclResult_t wait(void* request, int* sizes, std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
    auto deadline = Clock::now() + timeout;
    int done = 0;
    while (!done) {
      ncclResult_t result = net->test(request, &done, sizes);
      if (result != ncclSuccess) return result;
      if (!done && Clock::now() > deadline) return ncclTimeout;
      if (!done) sched_yield();  // as NCCL's proxy thread does when idle: soft-RoCE's kernel work needs the CPU
    }
    return ncclSuccess;
  }

  ncclResult_t postSend(void* comm, void* data, size_t size, int tag, void* mhandle, void** request,
                        std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
    auto deadline = Clock::now() + timeout;
    *request = nullptr;
    while (*request == nullptr) {
      ncclResult_t result = net->isend(comm, data, size, tag, mhandle, nullptr, request);
      if (result != ncclSuccess) return result;
      if (*request == nullptr && Clock::now() > deadline) return ncclTimeout;
      if (*request == nullptr) sched_yield();
    }
    return ncclSuccess;
  }

  ncclResult_t postRecv(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** request,
                        std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
    auto deadline = Clock::now() + timeout;
    *request = nullptr;
    while (*request == nullptr) {
      ncclResult_t result = net->irecv(comm, n, data, sizes, tags, mhandles, nullptr, request);
      if (result != ncclSuccess) return result;
      if (*request == nullptr && Clock::now() > deadline) return ncclTimeout;
      if (*request == nullptr) sched_yield();
    }
    return ncclSuccess;
  }
};

}  // namespace nns_ib_pair
