// nccl-net-run: a local launcher: runs N copies of a command as ranks 0..N-1 on this host (NNS_RANK,
// NNS_WORLD_SIZE, NNS_LOCAL_RANK, NNS_ROOT_ADDR), stops them all at the first failure, and exits with that rank's
// status. Stopping is SIGTERM, then SIGKILL for what is left after a grace period (--kill-after); SIGTERM, SIGINT,
// SIGHUP, SIGQUIT and SIGALRM sent to the launcher are passed on to the ranks the same way, and the launcher then ends
// by that signal itself; SIGUSR1 and SIGUSR2 are passed on as they are; Ctrl-Z (SIGTSTP) stops the ranks with it. Each
// rank is a process group, and what a rank started goes with it: whatever is left in the groups when the ranks have
// ended is stopped the same way (as Slurm ends a step's processes with its tasks); a launcher killed outright, alone or
// with its process group, leaves a keeper behind that kills the groups (Keeper, below). Like mpirun, it binds each rank
// to a share of the CPUs when there are enough for all (--bind-to none: not).
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include <nccl_net/sdk_version.h>
#include "nns/core/cpus.hpp"

#include "nns/tools/cpu_shares.hpp"
#include "nns/tools/executable_dir.hpp"
#include "nns/tools/guarded_main.hpp"

namespace {

// A listening socket on a free loopback port, kept open and handed to rank 0 (NNS_ROOT_LISTEN_FD), so the port
// cannot be taken by another process between choosing it and rank 0's listen. -1 on failure.
int rootListener(int ranks, int* port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  // As rank 0's own listener has it: the connections accepted on this socket inherit it, and a later rank 0 binding
  // the same address (another job given this port) could not while one of them lives without it.
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
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

// The keeper: a process that outlives a launcher killed outright (SIGKILL: it can stop nothing) and then kills the
// ranks' process groups. PR_SET_PDEATHSIG reaches a rank itself, not what it started (a wrapper script's command,
// a program's workers), which would otherwise run on under PID 1. The launcher tells it over a socket pair (sent
// with MSG_NOSIGNAL: a keeper that died must not end the launcher by SIGPIPE), 4 bytes at a time: a rank's process
// group to keep (its id), one to forget (minus its id: emptied, so its id may be reused), and 0 when the launcher ends
// having stopped everything itself. The connection's end without that 0 means the launcher died. A process that left
// its rank's group (setsid) is out of its reach.
class Keeper {
 public:
  // Starts the keeper; without one (fork failed) the launcher still runs, with a warning.
  explicit Keeper(int closeInKeeper) {
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
      std::perror("nccl-net-run: socket pair for the keeper (ranks will not be stopped if this launcher is killed)");
      return;
    }
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("nccl-net-run: fork of the keeper (ranks will not be stopped if this launcher is killed)");
      close(fds[0]);
      close(fds[1]);
      return;
    }
    if (pid == 0) {
      // A process group of its own: `kill -KILL -- -PGID` for the launcher's group (a batch system's, a shell's job
      // control) killed the keeper with it, and what the ranks started ran on (their own groups are not the
      // launcher's, and PR_SET_PDEATHSIG reaches only the ranks).
      setpgid(0, 0);
      close(fds[1]);
      close(closeInKeeper);
      run(fds[0]);
    }
    setpgid(pid, pid);  // here too: the launcher's group may be killed before the keeper's own setpgid runs
    close(fds[0]);
    pid_ = pid;
    fd_ = fds[1];
  }
  Keeper(const Keeper&) = delete;
  Keeper& operator=(const Keeper&) = delete;
  // The launcher's clean end: the keeper exits without killing anything. Unwound by an exception (runTool gave up
  // with ranks perhaps still running) the end is not clean: the keeper is not told, and kills what is left.
  ~Keeper() {
    if (fd_ < 0) return;
    if (std::uncaught_exceptions() == uncaught_) tell(0);
    close(fd_);
    // Bounded: a keeper that cannot run (stopped by SIGSTOP, or starved) must not hold the launcher's exit. It has
    // nothing left to do once told 0; when not told, its kills are done within this wait or never.
    for (int i = 0; i < 200; ++i) {
      const pid_t reaped = waitpid(pid_, nullptr, WNOHANG);
      if (reaped == pid_ || (reaped < 0 && errno != EINTR)) return;
      usleep(10000);
    }
    std::fprintf(stderr, "nccl-net-run: the keeper (pid %d) did not end within 2 s (stopped?); killing it\n",
                 static_cast<int>(pid_));
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  void keep(pid_t group) { tell(static_cast<int32_t>(group)); }
  void forget(pid_t group) { tell(-static_cast<int32_t>(group)); }

 private:
  void tell(int32_t message) {
    // 4 bytes into an empty-enough stream socket: sent whole or not at all.
    if (fd_ >= 0) (void)!send(fd_, &message, sizeof(message), MSG_NOSIGNAL);
  }
  [[noreturn]] static void run(int fd) {
    // Signals meant for the launcher's terminal group (Ctrl-C) are the launcher's to pass on; the keeper waits for
    // its connection to end whatever happens.
    // In a group of its own it is in the background: its one line on a terminal under `stty tostop` would stop it
    // (SIGTTOU) before it killed anything.
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTTOU}) signal(sig, SIG_IGN);
    prctl(PR_SET_NAME, "nccl-net-keeper");
    const int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
      dup2(null, STDIN_FILENO);
      dup2(null, STDOUT_FILENO);  // a reader of the launcher's output sees its end when the launcher ends
      close(null);
    }
    std::vector<pid_t> groups;
    int32_t message = 0;
    for (;;) {
      ssize_t got = read(fd, &message, sizeof(message));
      if (got < 0 && errno == EINTR) continue;
      if (got != sizeof(message)) break;  // the launcher is gone without a word
      if (message == 0) _exit(0);
      if (message > 0) {
        groups.push_back(message);
      } else {
        groups.erase(std::remove(groups.begin(), groups.end(), -message), groups.end());
      }
    }
    size_t killed = 0;
    for (pid_t group : groups) killed += kill(-group, SIGKILL) == 0 ? 1 : 0;
    if (killed > 0)
      std::fprintf(stderr,
                   "nccl-net-run: the launcher ended without stopping its ranks (killed?); killing %zu rank "
                   "process group(s)\n",
                   killed);
    _exit(0);
  }
  pid_t pid_ = -1;
  int fd_ = -1;
  int uncaught_ = std::uncaught_exceptions();  // those in flight at its start: more at its end is an unwind
};

// How long the ranks have between SIGTERM and SIGKILL: long enough to flush output and close connections, short
// enough that a rank stuck with the signal blocked or ignored does not hold the launcher for good.
constexpr int kDefaultKillAfterSeconds = 5;

void usage(const char* self, FILE* out) {
  std::fprintf(
      out,
      "usage: %s -n RANKS (or -nRANKS) [--timeout SECONDS] [--kill-after SECONDS] [--bind-to spread|none]\n"
      "       [--report-bindings] [--] COMMAND [ARGS...]   (or --version)\n"
      "  COMMAND: a path, or a name looked up on PATH, then beside nccl-net-run (the project's tools)\n"
      "  --: ends the options (a command that starts with '-'); long options take --name VALUE or --name=VALUE\n"
      "  --timeout: kill every rank after this long (0, the default: no limit)\n"
      "  --kill-after: when a rank fails or the launcher gets SIGTERM, SIGINT, SIGHUP, SIGQUIT or SIGALRM,\n"
      "    the ranks get SIGTERM (or that signal), then SIGKILL this long after (default %d s)\n"
      "  SIGUSR1 and SIGUSR2 are passed on to the ranks; Ctrl-Z (SIGTSTP) stops them with the launcher\n"
      "  --bind-to spread (the default): each rank gets its share of the CPUs, spread over the machine's\n"
      "    topology, when there are at least as many CPUs as ranks; none: ranks are not bound\n"
      "  --report-bindings: print each rank's CPUs (or why the ranks are not bound) before starting them\n"
      "  Each rank gets NNS_RANK, NNS_WORLD_SIZE, NNS_LOCAL_RANK, NNS_ROOT_ADDR, NNS_JOB_ID and NNS_LAUNCHER,\n"
      "  and NCCL_SOCKET_IFNAME=lo unless it is set and not empty: the ranks share this host, so the socket plugin "
      "runs\n"
      "  over loopback (set NCCL_SOCKET_IFNAME to measure an interface)\n",
      self, kDefaultKillAfterSeconds);
}

// Ranks one host can start: far beyond its cores already, and short of the process and descriptor limits.
constexpr int kMaxRanks = 4096;

// A whole decimal number in [low, high], or false (std::atoi would take "4x" for 4 and "abc" for 0).
bool parseCount(const char* text, long low, long high, int* value) {
  char* end = nullptr;
  errno = 0;
  long parsed = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || errno != 0 || parsed < low || parsed > high) return false;
  *value = static_cast<int>(parsed);
  return true;
}

// A signal's name, as the docs and a shell give it (sigabbrev_np is glibc 2.32+): those it passes on and those that
// end a rank most often; others by number.
std::string sigabbrev(int sig) {
  static const std::pair<int, const char*> kNames[] = {
      {SIGTERM, "SIGTERM"}, {SIGINT, "SIGINT"},   {SIGHUP, "SIGHUP"},   {SIGKILL, "SIGKILL"}, {SIGSEGV, "SIGSEGV"},
      {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},   {SIGILL, "SIGILL"},   {SIGPIPE, "SIGPIPE"},
      {SIGQUIT, "SIGQUIT"}, {SIGTRAP, "SIGTRAP"}, {SIGXCPU, "SIGXCPU"}, {SIGALRM, "SIGALRM"}, {SIGUSR1, "SIGUSR1"},
      {SIGUSR2, "SIGUSR2"}, {SIGTSTP, "SIGTSTP"}};
  for (const auto& [number, name] : kNames)
    if (number == sig) return name;
  return "signal " + std::to_string(sig);
}

// Reads what the ranks' failed execs sent (see runTool) until every rank has started or failed, and prints each
// reason once: "cannot run ./x: No such file or directory", naming the ranks only where some others started. The
// wait is bounded (2 s; an exec takes milliseconds): a rank stopped before its exec (SIGSTOP, or SIGTTOU for its
// "not bound" line under `stty tostop`) must not hold the launcher, whose signals wait meanwhile. After it, a failed
// exec is said by its rank, which finds the pipe closed. Returns the ranks whose failure it said.
std::vector<int> reportExecFailures(int fds[2], const char* command, int started) {
  std::vector<int> said;
  if (fds[0] < 0) return said;
  close(fds[1]);
  std::vector<std::pair<int, std::vector<int>>> reasons;  // errno, and the ranks that failed with it
  const auto giveUpAt = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(giveUpAt - std::chrono::steady_clock::now()).count();
    pollfd ready{fds[0], POLLIN, 0};
    if (left <= 0 || poll(&ready, 1, static_cast<int>(left)) <= 0) {
      if (left > 0 && errno == EINTR) continue;
      break;
    }
    int failure[2];
    const ssize_t got = read(fds[0], failure, sizeof(failure));
    if (got < 0 && errno == EINTR) continue;
    if (got != static_cast<ssize_t>(sizeof(failure))) break;  // EOF: every rank has run its command or failed
    auto reason = std::find_if(reasons.begin(), reasons.end(), [&](const auto& r) { return r.first == failure[1]; });
    if (reason == reasons.end()) reason = reasons.insert(reasons.end(), {failure[1], {}});
    reason->second.push_back(failure[0]);
  }
  close(fds[0]);
  for (auto& [error, failed] : reasons) {
    said.insert(said.end(), failed.begin(), failed.end());
    std::string which;
    if (static_cast<int>(failed.size()) < started) {
      std::sort(failed.begin(), failed.end());
      for (int rank : failed)
        which += (which.empty() ? failed.size() == 1 ? " (rank " : " (ranks " : ", ") + std::to_string(rank);
      which += ")";
    }
    std::fprintf(stderr, "nccl-net-run: cannot run %s: %s%s\n", command, std::strerror(error), which.c_str());
  }
  return said;
}

// The signal that ended the job when it was one the launcher was sent (SIGINT, ...): main ends the launcher by it
// too, once everything is stopped. A shell running a loop stops at a command killed by SIGINT (Ctrl-C), and goes on
// after one that merely exits 130.
int gEndingSignal = 0;

// The signals the launcher is sent and passes on. Stopping ones end the job (as SIGTERM does); the others are passed
// on as they are.
bool stopsTheJob(int sig) {
  return sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT || sig == SIGALRM;
}

}  // namespace

int runTool(int argc, char** argv) {
  int ranks = 0;
  int timeoutSeconds = 0, killAfterSeconds = kDefaultKillAfterSeconds;
  bool bind = true, report = false;
  int first = 1;
  while (first < argc && argv[first][0] == '-') {
    std::string flag = argv[first];
    // --ranks=4 as well as --ranks 4 (GNU style): the value is then this argument's, and one argument is used.
    std::string attached;
    const bool hasAttached = flag.size() > 2 && flag.compare(0, 2, "--") == 0 && flag.find('=') != std::string::npos;
    if (hasAttached) {
      attached = flag.substr(flag.find('=') + 1);
      flag.resize(flag.find('='));
    }
    const bool hasValue = hasAttached || first + 1 < argc;
    const char* value = hasAttached ? attached.c_str() : first + 1 < argc ? argv[first + 1] : "";
    const int used = hasAttached ? 1 : 2;
    if (hasAttached && (flag == "--help" || flag == "--version" || flag == "--report-bindings")) {
      std::fprintf(stderr, "nccl-net-run: %s takes no value (--help lists the options)\n", flag.c_str());
      return 2;
    }
    if (flag == "-h" || flag == "--help") {
      usage(argv[0], stdout);
      return 0;
    }
    if (flag == "--version") {
      std::printf("nccl-net-sdk %s\n", NCCL_NET_SDK_VERSION_STRING);
      return 0;
    }
    if (flag.size() > 2 && flag.compare(0, 2, "-n") == 0 && std::isdigit(static_cast<unsigned char>(flag[2]))) {
      // -n4, as srun and getopt-style launchers take it
      if (!parseCount(flag.c_str() + 2, 1, kMaxRanks, &ranks)) {
        std::fprintf(stderr, "nccl-net-run: %s: a rank count from 1 to %d\n", flag.c_str(), kMaxRanks);
        return 2;
      }
      ++first;
    } else if ((flag == "-n" || flag == "--ranks") && hasValue) {
      if (!parseCount(value, 1, kMaxRanks, &ranks)) {
        std::fprintf(stderr, "nccl-net-run: %s %s: a rank count from 1 to %d\n", flag.c_str(), value, kMaxRanks);
        return 2;
      }
      first += used;
    } else if (flag == "--timeout" && hasValue) {
      if (!parseCount(value, 0, 1000000, &timeoutSeconds)) {
        std::fprintf(stderr, "nccl-net-run: --timeout %s: whole seconds (0: none)\n", value);
        return 2;
      }
      first += used;
    } else if (flag == "--kill-after" && hasValue) {
      if (!parseCount(value, 0, 1000000, &killAfterSeconds)) {
        std::fprintf(stderr, "nccl-net-run: --kill-after %s: whole seconds (0: SIGKILL at once)\n", value);
        return 2;
      }
      first += used;
    } else if (flag == "--bind-to" && hasValue) {
      std::string policy = value;
      if (policy != "spread" && policy != "none") {
        std::fprintf(stderr, "nccl-net-run: --bind-to %s: spread or none\n", policy.c_str());
        return 2;
      }
      bind = policy == "spread";
      first += used;
    } else if (flag == "--report-bindings") {
      report = true;
      ++first;
    } else if (flag == "--") {  // the end of the options: what follows is the command, even if it starts with '-'
      ++first;
      break;
    } else {
      // A known option at the end has lost its value; anything else is a typo (mpirun's -np, say), which would
      // otherwise be run as the command.
      bool known =
          flag == "-n" || flag == "--ranks" || flag == "--timeout" || flag == "--kill-after" || flag == "--bind-to";
      std::fprintf(stderr, "nccl-net-run: %s%s (--help lists the options)\n", flag.c_str(),
                   known           ? " needs a value"
                   : flag == "-np" ? ": not an option; the rank count is -n N"
                                   : ": not an option");
      return 2;
    }
  }
  if (ranks < 1 || first >= argc || argv[first][0] == '\0') {
    std::fprintf(stderr, "nccl-net-run: %s\n",
                 ranks < 1       ? "give the rank count: -n N"
                 : first >= argc ? "no command to run"
                                 : "the command is empty");
    usage(argv[0], stderr);
    return 2;
  }
  // Started with stdin, stdout or stderr closed (`2>&-`, a daemon's closed stdio), the launcher's first descriptor
  // would take its number: the root listener became fd 2, which rank 0 cannot be handed (its stderr), and every job
  // failed. /dev/null fills the gap, as for the ranks, which inherit it.
  for (int fd = STDIN_FILENO; fd <= STDERR_FILENO; ++fd) {
    if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
    const int null = open("/dev/null", O_RDWR);  // the lowest free number: this one
    if (null >= 0 && null != fd) close(null);
  }
  int port = 0;
  int listener = rootListener(ranks, &port);
  if (listener < 0) {
    std::perror("nccl-net-run: no free port on 127.0.0.1");
    return 1;
  }
  std::string root = "127.0.0.1:" + std::to_string(port);
  std::string job =
      std::to_string(getpid()) + "-" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  std::string unbound = "--bind-to none";
  std::vector<cpu_set_t> cpus = bind ? nns::tools::cpuShares(ranks, "ranks", &unbound) : std::vector<cpu_set_t>{};
  if (report) {
    for (int rank = 0; rank < ranks; ++rank)
      std::fprintf(stderr, "nccl-net-run: rank %d %s\n", rank,
                   cpus.empty() ? ("not bound (" + unbound + ")").c_str()
                                : ("bound to CPUs " + nns::core::cpuList(cpus[static_cast<size_t>(rank)])).c_str());
  }
  // The signals the launcher passes on, and SIGCHLD, are blocked from here and taken by sigtimedwait in the wait
  // loop below: none is lost between two checks, and none arrives while the ranks are being started. One the
  // launcher was started ignoring (nohup's SIGHUP) stays ignored, by the ranks too, as with any other command.
  sigset_t waited, original;
  sigemptyset(&waited);
  sigaddset(&waited, SIGCHLD);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGALRM, SIGUSR1, SIGUSR2, SIGTSTP}) {
    struct sigaction current {};
    if (sigaction(sig, nullptr, &current) == 0 && current.sa_handler != SIG_IGN) sigaddset(&waited, sig);
  }
  signal(SIGCHLD, SIG_DFL);  // inherited SIG_IGN would reap the ranks behind waitpid's back
  // What a rank started and left behind (a shell's commands outliving it) is reparented to the launcher, not to init:
  // it is reaped here, and the launcher knows when a rank's process group is empty.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  Keeper keeper(listener);
  sigprocmask(SIG_BLOCK, &waited, &original);
  const pid_t launcher = getpid();
  const std::string besideUs = nns::tools::executableDir();
  std::vector<pid_t> children;
  // A rank whose exec fails says why here (its rank and errno), for the launcher to print once for the job rather
  // than once per rank. Both ends close on a successful exec, so the reader sees EOF once every rank has started.
  int execFailures[2] = {-1, -1};
  if (pipe2(execFailures, O_CLOEXEC) != 0) execFailures[0] = execFailures[1] = -1;
  for (int rank = 0; rank < ranks; ++rank) {
    pid_t pid = fork();
    if (pid == 0) {
      // Its own process group, so that stopping the rank stops what it started too (a shell's commands).
      setpgid(0, 0);
      // A launcher killed outright (SIGKILL: no chance to stop anything) takes its ranks with it.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != launcher) _exit(128 + SIGKILL);
      sigprocmask(SIG_SETMASK, &original, nullptr);
      // stdin: rank 0 keeps a pipe or a file (mpirun forwards stdin to rank 0), nobody keeps a terminal. A rank is
      // not in the terminal's foreground group, so reading it would stop the rank (SIGTTIN) for good.
      if (rank != 0 || isatty(STDIN_FILENO) != 0) {
        const int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (null >= 0) {
          dup2(null, STDIN_FILENO);
          close(null);
        }
      }
      if (!cpus.empty() && sched_setaffinity(0, sizeof(cpu_set_t), &cpus[static_cast<size_t>(rank)]) != 0)
        std::fprintf(stderr, "nccl-net-run: rank %d not bound: %s\n", rank, std::strerror(errno));
      setenv("NNS_RANK", std::to_string(rank).c_str(), 1);
      setenv("NNS_WORLD_SIZE", std::to_string(ranks).c_str(), 1);
      setenv("NNS_ROOT_ADDR", root.c_str(), 1);
      setenv("NNS_LAUNCHER", "nccl-net-run", 1);  // this NNS_ROOT_ADDR is the job's, not NCCL_COMM_ID's analogue
      setenv("NNS_JOB_ID", job.c_str(), 1);
      setenv("NNS_LOCAL_RANK", std::to_string(rank).c_str(), 1);  // every rank is on this host
      if (rank == 0) {
        setenv("NNS_ROOT_LISTEN_FD", std::to_string(listener).c_str(), 1);
      } else {
        close(listener);
      }
      // One host: keep the socket plugin on loopback unless told otherwise (set but empty is no interface named: the
      // plugin would take its default, the first non-loopback one).
      if (const char* ifname = std::getenv("NCCL_SOCKET_IFNAME"); ifname == nullptr || *ifname == '\0')
        setenv("NCCL_SOCKET_IFNAME", "lo", 1);
      execvp(argv[first], argv + first);
      int error = errno;
      // A bare name that PATH does not hold: this launcher's own folder has the project's other tools (an install's
      // bin/ is rarely on PATH), so `nccl-net-run -n 4 nccl-net-bench ...` runs as the README shows.
      if (error == ENOENT && std::strchr(argv[first], '/') == nullptr && !besideUs.empty()) {
        const std::string sibling = besideUs + "/" + argv[first];
        execv(sibling.c_str(), argv + first);
        if (errno != ENOENT) error = errno;
      }
      // A folder named as the command is "Permission denied" to exec: said as what it is.
      struct stat target {};
      if (error == EACCES && std::strchr(argv[first], '/') != nullptr && stat(argv[first], &target) == 0 &&
          S_ISDIR(target.st_mode))
        error = EISDIR;
      const int failure[2] = {rank, error};
      signal(SIGPIPE, SIG_IGN);  // a launcher that stopped reading: said here instead
      if (execFailures[1] < 0 || write(execFailures[1], failure, sizeof(failure)) != sizeof(failure))
        std::fprintf(stderr, "nccl-net-run: rank %d cannot run %s: %s\n", rank, argv[first], std::strerror(error));
      // As a shell says it: 127 for a command that is not there, 126 for one found but not runnable.
      _exit(error == ENOENT || error == ENOTDIR ? 127 : 126);
    }
    if (pid < 0) {
      std::perror("nccl-net-run: fork");
      break;  // stop those already started, below
    }
    setpgid(pid, pid);  // here too: a signal sent before the child's own setpgid must still reach its group
    children.push_back(pid);
    keeper.keep(pid);
  }
  close(listener);
  const std::vector<int> execFailed = reportExecFailures(execFailures, argv[first], static_cast<int>(children.size()));
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  int exitCode = static_cast<int>(children.size()) < ranks ? 1 : 0;
  // Ranks not yet reaped. A reaped rank's process group is still signalled while it has members (what the rank
  // started): its id cannot be another process's while the group exists.
  // A forgotten rank is reaped and its group was found empty: its id is free, and may be an unrelated process
  // group's by now, which must get none of this job's signals.
  std::vector<bool> alive(children.size(), true), forgotten(children.size(), false);
  size_t running = children.size();
  auto signalRanks = [&](int sig) {
    for (size_t i = 0; i < children.size(); ++i) {
      if (forgotten[i]) continue;
      // A rank that left its group (setpgid into another group of its session; setsid fails for the group leader
      // each rank is made) is still signalled itself, while it is not reaped.
      if (kill(-children[i], sig) != 0 && errno == ESRCH && alive[i]) kill(children[i], sig);
    }
  };
  // Processes left in the process groups of ranks that have ended.
  auto groupsLeft = [&]() {
    size_t left = 0;
    for (size_t i = 0; i < children.size(); ++i)
      if (!alive[i] && !forgotten[i] && (kill(-children[i], 0) == 0 || errno == EPERM)) ++left;
    return left;
  };
  // A reaped rank's emptied group is forgotten, here and by the keeper; checked as soon as the rank is reaped, before
  // anything is signalled, so that the window in which its id could be taken is as short as it can be.
  auto forgetIfEmpty = [&](size_t i) {
    if (!alive[i] && !forgotten[i] && kill(-children[i], 0) != 0 && errno == ESRCH) {
      forgotten[i] = true;
      keeper.forget(children[i]);
    }
  };
  bool timedOut = false, killed = false;
  Clock::time_point killAt = Clock::time_point::max();  // SIGKILL for what is left: set when stopping begins
  auto stop = [&](int sig) {
    signalRanks(sig);
    if (killAt == Clock::time_point::max()) killAt = Clock::now() + std::chrono::seconds(killAfterSeconds);
  };
  if (exitCode != 0) stop(SIGTERM);
  // The ranks that failed before the others were told to stop. When one crashes, the others see its connections
  // break and exit 1 within microseconds; all are then reaped in one pass, lowest rank first, and the first reaped was
  // blamed (a rank that merely saw the crash). So failures are gathered for a moment first (kBlameWindow), and a rank
  // ended by a signal, which none of them was sent yet, is blamed before those that exited with an error.
  struct Failure {
    int rank;
    int status;  // as waitpid gave it
  };
  std::vector<Failure> failures;
  constexpr auto kBlameWindow = std::chrono::milliseconds(100);
  Clock::time_point blameAt = Clock::time_point::max();
  auto blame = [&]() {
    if (failures.empty()) return;
    const auto byCrash =
        std::find_if(failures.begin(), failures.end(), [](const Failure& f) { return WIFSIGNALED(f.status); });
    const Failure chosen = byCrash != failures.end() ? *byCrash : failures.front();
    auto codeOf = [](const Failure& f) {
      return WIFEXITED(f.status) ? WEXITSTATUS(f.status) : 128 + WTERMSIG(f.status);
    };
    auto said = [&](const Failure& f) {  // its exec failure was said already ("cannot run ...")
      return std::find(execFailed.begin(), execFailed.end(), f.rank) != execFailed.end();
    };
    if (exitCode == 0) exitCode = codeOf(chosen);
    // A signal is named as a shell would (a segfault is SIGSEGV, not "status 139"); the status stays 128+N.
    if (!said(chosen) && WIFSIGNALED(chosen.status))
      std::fprintf(stderr, "nccl-net-run: rank %d was killed by %s%s (status %d); stopping the others\n", chosen.rank,
                   sigabbrev(WTERMSIG(chosen.status)).c_str(), WCOREDUMP(chosen.status) ? ", core dumped" : "",
                   codeOf(chosen));
    else if (!said(chosen))
      std::fprintf(stderr, "nccl-net-run: rank %d failed (status %d); stopping the others\n", chosen.rank,
                   codeOf(chosen));
    std::sort(failures.begin(), failures.end(), [](const Failure& a, const Failure& b) { return a.rank < b.rank; });
    std::string others;
    for (const Failure& f : failures) {
      if (f.rank == chosen.rank || said(f)) continue;
      others += (others.empty() ? "" : ", ") + std::string("rank ") + std::to_string(f.rank) + " (" +
                (WIFSIGNALED(f.status) ? sigabbrev(WTERMSIG(f.status)) : "status " + std::to_string(codeOf(f))) + ")";
    }
    if (!others.empty())
      std::fprintf(stderr, "nccl-net-run: also ended before the others were stopped: %s\n", others.c_str());
    failures.clear();
    stop(SIGTERM);
  };
  Clock::time_point giveUpAt = Clock::time_point::max();  // a group SIGKILL did not empty (a process in D state)
  // The signal that began the stop, and who sent it: SIGTERM again from the same process within a second is that one
  // request twice, not a "kill them now". GNU timeout sends SIGTERM to its child, then to its whole process group,
  // this launcher's included: taken as told twice, it killed every rank at once, with no grace period. A second
  // SIGINT (Ctrl-C) or SIGHUP still kills at once.
  struct {
    int sig = 0;
    pid_t sender = 0;
    Clock::time_point at;
  } firstStop;
  for (;;) {
    int status = 0;
    pid_t pid = 0;
    while ((pid = waitpid(-1, &status, WNOHANG | WUNTRACED)) > 0) {
      if (WIFSTOPPED(status)) {
        // Stopped for touching the terminal from the background (a write under `stty tostop`): it would wait for
        // ever. Other stops (SIGSTOP, a debugger) are the user's and are left alone.
        const int sig = WSTOPSIG(status);
        if (sig != SIGTTIN && sig != SIGTTOU) continue;
        if (std::find(children.begin(), children.end(), pid) == children.end()) continue;  // what a rank left
        int rank = -1;
        for (size_t i = 0; i < children.size(); ++i)
          if (children[i] == pid) rank = static_cast<int>(i);
        if (exitCode == 0) {
          exitCode = 128 + sig;
          std::fprintf(stderr,
                       "nccl-net-run: rank %d was stopped by %s (it used the terminal from the background); stopping "
                       "the ranks\n",
                       rank, sig == SIGTTIN ? "SIGTTIN" : "SIGTTOU");
        }
        stop(SIGTERM);
        signalRanks(SIGCONT);  // a stopped rank acts on SIGTERM only once it runs
        continue;
      }
      int rank = -1;
      for (size_t i = 0; i < children.size(); ++i)
        if (children[i] == pid) {
          rank = static_cast<int>(i);
          alive[i] = false;
          forgetIfEmpty(i);
        }
      if (rank < 0) continue;  // a process a rank left behind, reparented here
      --running;
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (code != 0 && exitCode == 0) {
        failures.push_back({rank, status});
        if (blameAt == Clock::time_point::max()) blameAt = Clock::now() + kBlameWindow;
      }
    }
    if (!failures.empty() && (running == 0 || Clock::now() >= blameAt)) blame();
    // What a rank left in its group may have ended since: its id is free for another process from now.
    for (size_t i = 0; i < children.size(); ++i) forgetIfEmpty(i);
    // The job ends with its ranks: what they left running in their groups is stopped like a rank (SIGTERM, then
    // SIGKILL after the grace period), so it neither outlives the job nor holds its output pipe open.
    size_t left = running == 0 ? groupsLeft() : 0;
    if (running == 0 && left == 0) break;
    const auto now = Clock::now();
    if (running == 0 && killAt == Clock::time_point::max()) {
      std::fprintf(stderr, "nccl-net-run: the ranks have ended; stopping %zu process group(s) they left running\n",
                   left);
      stop(SIGTERM);
    }
    if (running == 0 && killed && giveUpAt == Clock::time_point::max()) giveUpAt = now + std::chrono::seconds(5);
    if (running == 0 && now >= giveUpAt) {
      std::fprintf(stderr, "nccl-net-run: %zu process group(s) the ranks left survived SIGKILL for 5 s; leaving them\n",
                   left);
      break;
    }
    const auto deadline = timeoutSeconds > 0 ? start + std::chrono::seconds(timeoutSeconds) : Clock::time_point::max();
    if (!timedOut && now >= deadline) {
      blame();
      timedOut = killed = true;
      std::fprintf(stderr, "nccl-net-run: timeout after %d s, killing all ranks\n", timeoutSeconds);
      signalRanks(SIGKILL);
      if (exitCode == 0) exitCode = 124;
    }
    if (!killed && now >= killAt) {
      killed = true;
      const size_t left = groupsLeft();
      std::string what = running > 0 ? std::to_string(running) + " rank(s)" : "";
      if (left > 0) what += (running > 0 ? " and " : "") + std::to_string(left) + " process group(s) the ranks left";
      std::fprintf(stderr, "nccl-net-run: %s still running %d s after being told to stop; killing them\n", what.c_str(),
                   killAfterSeconds);
      signalRanks(SIGKILL);
    }
    // Sleep until a rank ends, a signal comes, or the next deadline; after SIGKILL only the ranks' ends are left.
    // Once the ranks have ended, what they left is looked at again every 50 ms: its processes need not be children
    // of this launcher (one whose parent is still alive), so no SIGCHLD need come when the last one ends.
    siginfo_t info;
    int sig;
    auto next = killed ? Clock::time_point::max() : std::min(deadline, killAt);
    if (running == 0) next = std::min(next, now + std::chrono::milliseconds(50));
    if (!failures.empty()) next = std::min(next, blameAt);
    if (next == Clock::time_point::max()) {
      sig = sigwaitinfo(&waited, &info);
    } else {
      const auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(next - now).count() + 1;
      const timespec ts{static_cast<time_t>(wait / 1000000000), static_cast<long>(wait % 1000000000)};
      sig = sigtimedwait(&waited, &info, &ts);
    }
    if (sig == SIGUSR1 || sig == SIGUSR2) {
      // A note for the ranks (Slurm's --signal=USR1@60, a checkpoint request), not a stop: passed on as it is.
      std::fprintf(stderr, "nccl-net-run: got %s; passing it to the ranks\n", sigabbrev(sig).c_str());
      signalRanks(sig);
    } else if (sig == SIGTSTP) {
      // Ctrl-Z: the ranks are process groups of their own, not the terminal's foreground one, so the terminal's
      // SIGTSTP stopped the launcher alone while the ranks ran (and wrote) on. They stop with it (SIGSTOP: a rank
      // cannot ignore it) and go on when it is continued (fg, bg, SIGCONT).
      signalRanks(SIGSTOP);
      raise(SIGSTOP);
      signalRanks(SIGCONT);
    } else if (stopsTheJob(sig)) {
      blame();  // a rank's failure seen first is still the job's status
      if (exitCode == 0) {
        exitCode = 128 + sig;
        gEndingSignal = sig;
      }
      const pid_t sender = info.si_code == SI_USER || info.si_code == SI_QUEUE ? info.si_pid : 0;
      const bool repeated = sig == SIGTERM && firstStop.sig == sig && sender != 0 && firstStop.sender == sender &&
                            Clock::now() - firstStop.at < std::chrono::seconds(1);
      if (killAt == Clock::time_point::max()) {
        std::fprintf(stderr, "nccl-net-run: got %s; passing it to the ranks (SIGKILL in %d s)\n",
                     sigabbrev(sig).c_str(), killAfterSeconds);
        firstStop = {sig, sender, Clock::now()};
        stop(sig);
      } else if (!killed && !repeated) {  // (repeated: timeout's second SIGTERM; the grace period stands)
        // Told twice (a second Ctrl-C): the user will not wait out the grace period.
        killed = true;
        std::fprintf(stderr, "nccl-net-run: got %s while stopping; killing the ranks\n", sigabbrev(sig).c_str());
        signalRanks(SIGKILL);
      }
    }
  }
  return exitCode;
}

int main(int argc, char** argv) {
  const int status = nns::tools::guardedMain("nccl-net-run", argc, argv, runTool);
  if (gEndingSignal != 0 && status == 128 + gEndingSignal) {
    // Ended by the signal it was sent, as the ranks were: its parent sees that, not an exit status it could take for
    // a failure the launcher had of its own. No core file for SIGQUIT: the launcher did nothing wrong.
    std::fflush(stderr);
    if (gEndingSignal == SIGQUIT) {
      const rlimit none{0, 0};
      setrlimit(RLIMIT_CORE, &none);
    }
    signal(gEndingSignal, SIG_DFL);
    sigset_t only;
    sigemptyset(&only);
    sigaddset(&only, gEndingSignal);
    sigprocmask(SIG_UNBLOCK, &only, nullptr);
    raise(gEndingSignal);
  }
  return status;
}
