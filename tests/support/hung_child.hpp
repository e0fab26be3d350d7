// hung_child.hpp: waiting for a forked child with a bound, and saying where it hangs when it does. A child that hangs
// only now and then (under a loaded CI host, say) is found once in hundreds of runs: its test must name the call it
// waited in, not just that it waited. describeHungProcess reads the kernel's view (/proc/PID/wchan and syscall) and,
// where gdb is installed, the user stacks of every thread (gdb attaches as the parent, which ptrace allows).
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace nns::test {

// The first line of /proc/PID/NAME, or "" when it cannot be read.
inline std::string procLine(pid_t pid, const char* name) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/" + name);
  std::string line;
  std::getline(file, line);
  return line;
}

// Where `pid` waits: its kernel wait channel and system call, and gdb's "thread apply all bt" where gdb exists.
inline std::string describeHungProcess(pid_t pid) {
  std::ostringstream out;
  out << "process " << pid << ": wchan " << procLine(pid, "wchan") << ", syscall " << procLine(pid, "syscall");
  if (std::system("command -v gdb > /dev/null 2>&1") != 0) {
    out << "; no gdb on this host for its user stack";
    return out.str();
  }
  const std::string command = "timeout 60 gdb -nx -q -batch -p " + std::to_string(pid) +
                              " -ex 'thread apply all bt 40' 2>&1 | grep -E '^(Thread|#)'";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out.str() + "; gdb could not be started";
  out << "; its stacks (gdb):\n";
  std::array<char, 512> line{};
  while (std::fgets(line.data(), static_cast<int>(line.size()), pipe) != nullptr) out << line.data();
  pclose(pipe);
  return out.str();
}

// Waits for the child `pid` for `timeout` at most. True with its wait status in *status once it ended; false once
// the time passed, with *hung saying where it waited, and the child killed and reaped.
inline bool waitForChild(pid_t pid, std::chrono::milliseconds timeout, int* status, std::string* hung) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const pid_t ended = waitpid(pid, status, WNOHANG);
    if (ended == pid) return true;
    if (ended < 0) {
      *hung = "waitpid failed for process " + std::to_string(pid);
      return false;
    }
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  *hung = describeHungProcess(pid);
  kill(pid, SIGKILL);
  waitpid(pid, status, 0);
  return false;
}

}  // namespace nns::test
