// isolated_probe.hpp: runs plugin code in a forked child, so that a plugin which crashes or hangs in init, devices,
// getProperties (or in its library's constructors) costs the tool one verdict, never the tool itself. The child names
// each plugin call before it makes it and sends its results as JSON lines; the parent turns a death into "crashed:
// SIGSEGV in <call>" and a call that does not return within the call timeout into "hung: <call> did not return
// within N s" (the child is killed). For nccl-net-info and nccl-net-check, which load plugins before anything else.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nns/core/loader.hpp"

namespace nns::tools {

// What the child's body uses to name the call it is about to make and to send results back.
class ProbeChannel {
 public:
  explicit ProbeChannel(int fd) : fd_(fd) {}
  void call(const std::string& name) { line("C " + name); }  // the plugin call (or step) about to run
  void send(const nlohmann::json& record) {
    line("D " + record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }

 private:
  void line(std::string text) {
    text += '\n';
    for (size_t done = 0; done < text.size();) {
      ssize_t n = write(fd_, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) _exit(120);  // the parent is gone
      done += static_cast<size_t>(n);
    }
  }
  int fd_;
};

struct ProbeOutcome {
  std::vector<nlohmann::json> records;  // what the child sent, in order (also when it died later)
  std::string lastCall;                 // the call in progress when it ended ("" before the first)
  std::string failure;                  // empty when the body returned; else "crashed: ..." or "hung: ..."
  bool crashed = false, hung = false;
  std::string output;  // with captureOutput: what the child printed (the plugin's log lines), at most kOutputCap
};

// What a captured probe keeps of the child's output: a plugin that floods is cut, with a note.
constexpr size_t kOutputCap = 8192;

// "SIGSEGV" for 11; "signal N" for one glibc has no name for.
inline std::string signalName(int sig) {
  const char* abbreviation = sigabbrev_np(sig);
  return abbreviation != nullptr ? std::string("SIG") + abbreviation : "signal " + std::to_string(sig);
}

// The process group of the probe in progress (its child's pid), 0 when none: for a tool's ending-signal handler.
inline std::atomic<pid_t>& probeGroupInProgress() {
  static std::atomic<pid_t> group{0};
  return group;
}

// The signals that end a tool (a terminal's, `timeout`'s): with a probe in progress, its group is killed first, then
// the tool ends by the signal as it would have. Its child dies with the tool anyway (PR_SET_PDEATHSIG); a process the
// plugin forked, in the child's group, does not. Signals the tool was started with ignored (nohup) stay ignored.
constexpr int kToolEndingSignals[] = {SIGINT, SIGTERM, SIGHUP};
inline struct sigaction toolEndingBefore[std::size(kToolEndingSignals)];
inline pid_t probingTool = 0;

inline void killProbeGroupAndEnd(int sig) {
  if (getpid() == probingTool) {
    const pid_t group = probeGroupInProgress().exchange(0);
    if (group > 0) kill(-group, SIGKILL);
  }
  signal(sig, SIG_DFL);
  raise(sig);  // delivered once the handler returns
}

inline void killProbeGroupsOnEndingSignals() {
  probingTool = getpid();
  for (size_t i = 0; i < std::size(kToolEndingSignals); ++i) {
    sigaction(kToolEndingSignals[i], nullptr, &toolEndingBefore[i]);
    if (toolEndingBefore[i].sa_handler == SIG_IGN) continue;
    struct sigaction ending {};
    ending.sa_handler = killProbeGroupAndEnd;
    sigemptyset(&ending.sa_mask);
    sigaction(kToolEndingSignals[i], &ending, nullptr);
  }
}

// Runs `body` in a child process. Each call the body names must return within `callTimeoutSeconds`. The child's
// stdout goes to stderr, so that a plugin that prints cannot break the tool's own output (--json); with
// `captureOutput` both go to `outcome.output` instead, so that the tool can say which plugin printed what (a WARN
// from a library's init would otherwise stand loose above the report, owned by none of its entries).
inline ProbeOutcome runIsolated(const std::function<void(ProbeChannel&)>& body, int callTimeoutSeconds,
                                bool captureOutput = false) {
  ProbeOutcome outcome;
  // Close-on-exec, and the end of the records ("E") is the end: a process the plugin starts (posix_spawn from init)
  // must not hold the records' pipe open, which made every probe wait out its timeout and read as hung.
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    outcome.failure = std::string("could not probe it: pipe: ") + std::strerror(errno);
    return outcome;
  }
  int output[2] = {-1, -1};
  if (captureOutput && pipe2(output, O_CLOEXEC) != 0) {
    close(fds[0]);
    close(fds[1]);
    outcome.failure = std::string("could not probe it: pipe: ") + std::strerror(errno);
    return outcome;
  }
  std::fflush(nullptr);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    for (int fd : {fds[0], fds[1], output[0], output[1]})
      if (fd >= 0) close(fd);
    outcome.failure = std::string("could not probe it: fork: ") + std::strerror(errno);
    return outcome;
  }
  if (pid == 0) {
    close(fds[0]);
    // Dies with the tool (killed, or interrupted at a terminal): a plugin hanging here must not outlive it.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(121);
    // A process group of its own, killed when the probe ends: a process the plugin forks (a monitor forked at init,
    // without an exec) is in it, and outlived the tool under PID 1 otherwise. Out of the terminal's foreground group,
    // a write to it under `stty tostop` would stop the probe (SIGTTOU), read as hung: ignored. The ending signals are
    // handled as before the tool took them (killProbeGroupsOnEndingSignals).
    setpgid(0, 0);
    signal(SIGTTOU, SIG_IGN);
    if (probingTool != 0)
      for (size_t i = 0; i < std::size(kToolEndingSignals); ++i)
        sigaction(kToolEndingSignals[i], &toolEndingBefore[i], nullptr);
    if (captureOutput) {
      close(output[0]);
      dup2(output[1], STDERR_FILENO);
      close(output[1]);
    }
    dup2(STDERR_FILENO, STDOUT_FILENO);
    signal(SIGPIPE, SIG_IGN);
    ProbeChannel channel(fds[1]);
    body(channel);
    std::fflush(nullptr);
    channel.call("");  // finished: no call in progress
    static const char kEnd[] = "E\n";
    (void)!write(fds[1], kEnd, sizeof(kEnd) - 1);
    _exit(0);
  }
  close(fds[1]);
  setpgid(pid, pid);  // here too, so that the kill below finds the group whichever of the two ran first
  probeGroupInProgress().store(pid);
  bool cut = false;
  // Reads what the child printed so far, keeping up to kOutputCap; false once its end is closed.
  auto drainOutput = [&] {
    char buffer[4096];
    for (;;) {
      ssize_t got = read(output[0], buffer, sizeof(buffer));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) return true;  // EAGAIN: nothing more for now
      if (got == 0) return false;
      size_t keep = std::min(static_cast<size_t>(got), kOutputCap - std::min(kOutputCap, outcome.output.size()));
      outcome.output.append(buffer, keep);
      cut = cut || keep < static_cast<size_t>(got);
    }
  };
  if (captureOutput) {
    close(output[1]);
    fcntl(output[0], F_SETFL, O_NONBLOCK);
  }
  using Clock = std::chrono::steady_clock;
  auto deadline = Clock::now() + std::chrono::seconds(callTimeoutSeconds);
  std::string pending;
  bool finished = false;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      outcome.hung = true;
      break;
    }
    pollfd wait[2] = {{fds[0], POLLIN, 0}, {output[0], POLLIN, 0}};
    int ready = poll(wait, output[0] >= 0 ? 2 : 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    char buffer[4096];
    if (output[0] >= 0 && (wait[1].revents & (POLLIN | POLLHUP)) != 0 && !drainOutput()) {
      close(output[0]);  // the child's end closed: only the records are left to read
      output[0] = -1;
    }
    if ((wait[0].revents & (POLLIN | POLLHUP)) == 0) continue;
    ssize_t n = read(fds[0], buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buffer, static_cast<size_t>(n));
    for (size_t end; (end = pending.find('\n')) != std::string::npos; pending.erase(0, end + 1)) {
      std::string line = pending.substr(0, end);
      if (line.rfind("C ", 0) == 0) {
        outcome.lastCall = line.substr(2);
        deadline = Clock::now() + std::chrono::seconds(callTimeoutSeconds);  // each call gets its own time
      } else if (line.rfind("D ", 0) == 0) {
        outcome.records.push_back(nlohmann::json::parse(line.substr(2), nullptr, false));
      } else if (line == "E") {
        finished = true;
      }
    }
    if (finished) break;
  }
  close(fds[0]);
  if (outcome.hung) kill(pid, SIGKILL);
  if (output[0] >= 0) {  // what it printed last (non-blocking: a process the plugin started may hold the pipe open)
    drainOutput();
    close(output[0]);
  }
  if (cut) outcome.output += "\n[cut: the plugin printed more than " + std::to_string(kOutputCap) + " bytes]\n";
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  // The child is reaped; its pid stays taken while any process of its group lives (Linux reuses no pid that is still
  // a process group's id), so this reaches the plugin's helpers, or no process at all.
  probeGroupInProgress().store(0);
  kill(-pid, SIGKILL);
  std::string where = outcome.lastCall.empty() ? "" : " in " + outcome.lastCall;
  if (outcome.hung) {
    outcome.failure = "hung: " + (outcome.lastCall.empty() ? std::string("the probe") : outcome.lastCall) +
                      " did not return within " + std::to_string(callTimeoutSeconds) + " s (killed)";
  } else if (WIFSIGNALED(status)) {
    outcome.crashed = true;
    outcome.failure = "crashed: " + signalName(WTERMSIG(status)) + where;
  } else if (!finished) {
    outcome.crashed = true;
    outcome.failure = "the process ended (exit status " + std::to_string(WEXITSTATUS(status)) + ")" + where +
                      " before the probe finished";
  }
  return outcome;
}

// The call that opens `file`, as the probe names it: dlopen runs the library's constructors. (What is not a regular
// file, a FIFO whose open would wait for a writer among them, is refused before dlopen: core::openLibrary.)
inline std::string openCallName(const std::string& file) {
  return "dlopen of " + file + " (its constructors)";
}

// The loader's probe of one candidate (dlopen, the newest ncclNetPlugin_vN, init, devices, getProperties(0),
// finalize), step by step with each call named: run isolated after the loader itself died or hung on a candidate, it
// says in which call. The first of `files` that opens is probed. It sends what the loader's report would hold: each
// file given to dlopen ({"tried"}), and the one that opened with the versions it exports ({"opened"}).
inline void probeStepByStep(ProbeChannel& channel, const std::vector<std::string>& files) {
  std::string path;
  for (const auto& file : files) {
    channel.send({{"tried", file}});
    channel.call(openCallName(file));
    if (void* handle = core::openLibrary(file, nullptr); handle != nullptr) {
      path = file;
      break;
    }
  }
  if (path.empty()) return;
  auto exports = core::inspectLibrary(path);
  channel.send({{"opened", path}, {"exportedVersions", exports.netVersions}});
  if (exports.netVersions.empty()) return;
  int version = exports.netVersions.front();
  std::string error;
  auto net = core::openNetVersion(path, version, &error);
  if (net == nullptr) return;
  std::string through = " through ncclNet_v" + std::to_string(version) + " of " + path;
  void* ctx = nullptr;
  channel.call("init" + through);
  if (net->init(&ctx, 0, nullptr, nullptr, nullptr) != ncclSuccess) return;
  int ndev = 0;
  channel.call("devices" + through);
  ncclResult_t result = net->devices(&ndev);
  if (result == ncclSuccess && ndev > 0) {
    ncclNetProperties_v12_t props{};
    channel.call("getProperties(0)" + through);
    net->getProperties(0, &props);
  }
  channel.call("finalize" + through);
  net->finalize(ctx);
}

// A candidate's report as the child sends it, and back.
inline nlohmann::json candidateJson(const nns::core::CandidateReport& c) {
  return {{"requested", c.requested},
          {"triedPaths", c.triedPaths},
          {"loadedPath", c.loadedPath},
          {"openedFile", c.openedFile},
          {"exportedVersions", c.exportedVersions},
          {"chosenVersion", c.chosenVersion},
          {"rejectReason", c.rejectReason}};
}

inline nns::core::CandidateReport candidateFromJson(const nlohmann::json& j) {
  nns::core::CandidateReport c;
  c.requested = j.value("requested", "");
  c.triedPaths = j.value("triedPaths", std::vector<std::string>{});
  c.loadedPath = j.value("loadedPath", "");
  c.openedFile = j.value("openedFile", "");
  c.exportedVersions = j.value("exportedVersions", std::vector<int>{});
  c.chosenVersion = j.value("chosenVersion", 0);
  c.rejectReason = j.value("rejectReason", "");
  return c;
}

// After the loader crashed or hung on `entry`: the same probe, call by call, in a fresh child. The candidate as the
// loader's report would have listed it had it lived: the files it tried, the one it opened and its exports, and the
// failure naming the call (`loaderFailure` when the step-by-step probe did not fail the same way).
struct Pinpoint {
  std::vector<std::string> tried;
  std::string opened;
  std::vector<int> exportedVersions;
  std::string failure;
};

// `fallbackDirs`: directories the loader tries last (LoadOptions::fallbackDirs), after the dynamic linker's search.
inline Pinpoint pinpointCandidate(const std::string& entry, const std::vector<std::string>& dirs,
                                  const std::string& loaderFailure, int callTimeoutSeconds,
                                  const std::vector<std::string>& fallbackDirs = {}) {
  auto files = core::candidateFiles(entry, dirs, fallbackDirs);
  ProbeOutcome steps = runIsolated([&](ProbeChannel& channel) { probeStepByStep(channel, files); }, callTimeoutSeconds);
  Pinpoint found;
  for (const auto& record : steps.records) {
    if (!record.is_object()) continue;
    if (record.contains("tried")) found.tried.push_back(record.value("tried", ""));
    if (record.contains("opened")) {
      found.opened = record.value("opened", "");
      found.exportedVersions = record.value("exportedVersions", std::vector<int>{});
    }
  }
  found.failure = steps.failure.empty() ? loaderFailure : steps.failure;
  return found;
}

inline std::string pinpointFailure(const std::string& entry, const std::vector<std::string>& dirs,
                                   const std::string& loaderFailure, int callTimeoutSeconds) {
  return pinpointCandidate(entry, dirs, loaderFailure, callTimeoutSeconds).failure;
}

}  // namespace nns::tools
