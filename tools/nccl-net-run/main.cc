// nccl-net-run: a local launcher: runs N copies of a command as ranks 0..N-1 on this host (NNS_RANK,
// NNS_WORLD_SIZE, NNS_ROOT_ADDR), kills them all at the first failure, and exits with that rank's status.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

// A listening socket on a free loopback port, kept open and handed to rank 0 (NNS_ROOT_LISTEN_FD), so the port
// cannot be taken by another process between choosing it and rank 0's listen. -1 on failure.
int rootListener(int ranks, int* port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 || listen(fd, ranks) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    close(fd);
    return -1;
  }
  *port = ntohs(address.sin_port);
  return fd;
}

void usage(const char* self) {
  std::fprintf(stderr, "usage: %s -n RANKS [--timeout SECONDS] COMMAND [ARGS...]\n", self);
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = 0;
  int timeoutSeconds = 0;
  int first = 1;
  while (first < argc && argv[first][0] == '-') {
    std::string flag = argv[first];
    if ((flag == "-n" || flag == "--ranks") && first + 1 < argc) {
      ranks = std::atoi(argv[first + 1]);
      first += 2;
    } else if (flag == "--timeout" && first + 1 < argc) {
      timeoutSeconds = std::atoi(argv[first + 1]);
      first += 2;
    } else {
      break;
    }
  }
  if (ranks < 1 || first >= argc) {
    usage(argv[0]);
    return 2;
  }
  int port = 0;
  int listener = rootListener(ranks, &port);
  if (listener < 0) {
    std::perror("nccl-net-run: no free port on 127.0.0.1");
    return 1;
  }
  std::string root = "127.0.0.1:" + std::to_string(port);
  std::string job = std::to_string(getpid()) + "-" +
                    std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  std::vector<pid_t> children;
  for (int rank = 0; rank < ranks; ++rank) {
    pid_t pid = fork();
    if (pid == 0) {
      setenv("NNS_RANK", std::to_string(rank).c_str(), 1);
      setenv("NNS_WORLD_SIZE", std::to_string(ranks).c_str(), 1);
      setenv("NNS_ROOT_ADDR", root.c_str(), 1);
      setenv("NNS_JOB_ID", job.c_str(), 1);
      if (rank == 0) {
        setenv("NNS_ROOT_LISTEN_FD", std::to_string(listener).c_str(), 1);
      } else {
        close(listener);
      }
      setenv("NCCL_SOCKET_IFNAME", "lo", 0);  // one host: keep the socket plugin on loopback unless told otherwise
      execvp(argv[first], argv + first);
      std::fprintf(stderr, "nccl-net-run: cannot run %s: %s\n", argv[first], std::strerror(errno));
      _exit(127);
    }
    children.push_back(pid);
  }
  close(listener);
  auto start = std::chrono::steady_clock::now();
  int exitCode = 0;
  size_t running = children.size();
  while (running > 0) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid == 0) {
      if (timeoutSeconds > 0 && std::chrono::steady_clock::now() - start > std::chrono::seconds(timeoutSeconds)) {
        std::fprintf(stderr, "nccl-net-run: timeout after %d s, killing all ranks\n", timeoutSeconds);
        for (pid_t child : children) kill(child, SIGKILL);
        if (exitCode == 0) exitCode = 124;
      }
      usleep(10000);
      continue;
    }
    if (pid < 0) break;
    --running;
    int rank = -1;
    for (size_t i = 0; i < children.size(); ++i)
      if (children[i] == pid) rank = static_cast<int>(i);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0 && exitCode == 0) {
      exitCode = code;
      std::fprintf(stderr, "nccl-net-run: rank %d failed (status %d); stopping the others\n", rank, code);
      for (pid_t child : children)
        if (child != pid) kill(child, SIGTERM);
    }
  }
  return exitCode;
}
