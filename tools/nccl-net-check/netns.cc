// netns.cc: the --netns setup of nccl-net-check: `ip netns add` x2, one veth pair, addresses, links up; removed by
// the destructor or, on SIGINT/SIGTERM, by removeNetnsFromSignalHandler().
#include "netns.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

namespace nns::check {
namespace {

// Filled when the namespaces exist, so a signal handler can remove them without allocating.
char gIpPath[256] = "";
char gLiveNamespaces[2][64] = {"", ""};

std::string findIp() {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "";
  dirs += ":/usr/sbin:/sbin:/usr/bin:/bin";  // ctest and sudo may run with a PATH without the sbin directories
  std::stringstream stream(dirs);
  std::string dir;
  while (std::getline(stream, dir, ':')) {
    if (dir.empty()) continue;
    std::string path = dir + "/ip";
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

// Runs `ip ARGS...` with its output captured; false (with the command and its output in `error`) when it fails or
// takes longer than 10 s (then it is killed).
bool runIp(const std::vector<std::string>& args, std::string* error, std::string* output = nullptr) {
  std::string ip = gIpPath;
  std::string command = "ip";
  for (const auto& a : args) command += " " + a;
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    *error = command + ": pipe: " + std::strerror(errno);
    return false;
  }
  std::vector<char*> argv{const_cast<char*>(ip.c_str())};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    dup2(out[1], STDERR_FILENO);
    execv(ip.c_str(), argv.data());
    _exit(127);
  }
  close(out[1]);
  if (pid < 0) {
    close(out[0]);
    *error = command + ": fork: " + std::strerror(errno);
    return false;
  }
  std::string text;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool timedOut = false;
  for (;;) {
    int left = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count());
    if (left <= 0) {
      timedOut = true;
      break;
    }
    pollfd wait{out[0], POLLIN, 0};
    if (poll(&wait, 1, left) <= 0) continue;
    char buffer[512];
    ssize_t n = read(out[0], buffer, sizeof(buffer));
    if (n <= 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  close(out[0]);
  if (timedOut) kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (timedOut) {
    *error = command + ": did not finish within 10 s";
    return false;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    *error = command + ": " + (text.empty() ? "exit status " + std::to_string(WEXITSTATUS(status)) : text);
    return false;
  }
  if (output != nullptr) *output = text;
  return true;
}

}  // namespace

std::string NetnsPair::unavailableReason() {
  if (geteuid() != 0) return "network namespaces need root (ip netns add); running as uid " + std::to_string(geteuid());
  if (findIp().empty()) return "the `ip` command (iproute2) is not installed";
  return "";
}

NetnsPair::NetnsPair() {
  std::string id = std::to_string(getpid());
  nsA_ = "nnscheck-" + id + "-a";
  nsB_ = "nnscheck-" + id + "-b";
  prefix_ = "nnsc";  // interface names stay within IFNAMSIZ (15): nnsc + pid (<= 7 digits) + a/b
  ifA_ = prefix_ + id + "a";
  ifB_ = prefix_ + id + "b";
}

NetnsPair::~NetnsPair() {
  remove();
}

bool NetnsPair::create(std::string* error, bool* unsupported) {
  *unsupported = false;
  std::string ip = findIp();
  if (ip.empty() || ip.size() >= sizeof(gIpPath)) {
    *error = "the `ip` command (iproute2) is not installed";
    return false;
  }
  std::snprintf(gIpPath, sizeof(gIpPath), "%s", ip.c_str());
  created_ = true;  // from the first command on, remove() cleans up whatever exists
  creator_ = getpid();
  std::snprintf(gLiveNamespaces[0], sizeof(gLiveNamespaces[0]), "%s", nsA_.c_str());
  std::snprintf(gLiveNamespaces[1], sizeof(gLiveNamespaces[1]), "%s", nsB_.c_str());
  const std::string a = std::string(kListenerAddress) + "/24", b = std::string(kPeerAddress) + "/24";
  const std::vector<std::vector<std::string>> steps = {
      {"netns", "add", nsA_},
      {"netns", "add", nsB_},
      {"link", "add", ifA_, "netns", nsA_, "type", "veth", "peer", "name", ifB_, "netns", nsB_},
      {"-n", nsA_, "addr", "add", a, "dev", ifA_},
      {"-n", nsB_, "addr", "add", b, "dev", ifB_},
      {"-n", nsA_, "link", "set", ifA_, "up"},
      {"-n", nsB_, "link", "set", ifB_, "up"},
      {"-n", nsA_, "link", "set", "lo", "up"},
      {"-n", nsB_, "link", "set", "lo", "up"},
  };
  for (size_t i = 0; i < steps.size(); ++i) {
    if (!runIp(steps[i], error)) {
      // The very first namespace failing means this machine (a container without CAP_SYS_ADMIN, say) has none.
      *unsupported = i == 0;
      remove();
      return false;
    }
  }
  return true;
}

void NetnsPair::remove() {
  if (!created_ || getpid() != creator_) return;
  created_ = false;
  std::string ignored;
  // Deleting a namespace deletes the veth end inside it, and with it the pair. A namespace that was never made
  // fails to delete: nothing to do.
  runIp({"netns", "del", nsA_}, &ignored);
  runIp({"netns", "del", nsB_}, &ignored);
  gLiveNamespaces[0][0] = '\0';
  gLiveNamespaces[1][0] = '\0';
}

bool NetnsPair::listenerTraffic(uint64_t* rxBytes, uint64_t* txBytes, std::string* error) const {
  std::string text;
  if (!created_ || !runIp({"-n", nsA_, "-j", "-s", "link", "show", "dev", ifA_}, error, &text)) return false;
  auto parsed = nlohmann::json::parse(text, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_array() || parsed.empty() || !parsed[0].contains("stats64")) {
    *error = "unexpected output of ip -j -s link show: " + text.substr(0, 200);
    return false;
  }
  *rxBytes = parsed[0]["stats64"]["rx"].value("bytes", uint64_t{0});
  *txBytes = parsed[0]["stats64"]["tx"].value("bytes", uint64_t{0});
  return true;
}

bool enterNetns(const std::string& name, std::string* error) {
  std::string path = "/var/run/netns/" + name;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *error = "open " + path + ": " + std::strerror(errno);
    return false;
  }
  int result = setns(fd, CLONE_NEWNET);
  int saved = errno;
  close(fd);
  if (result != 0) {
    *error = "setns(" + path + "): " + std::strerror(saved);
    return false;
  }
  return true;
}

void removeNetnsFromSignalHandler() {
  if (gIpPath[0] == '\0') return;
  for (auto& name : gLiveNamespaces) {
    if (name[0] == '\0') continue;
    char netns[] = "netns";
    char del[] = "del";
    char* argv[] = {gIpPath, netns, del, name, nullptr};
    pid_t pid = fork();
    if (pid == 0) {
      int devnull = open("/dev/null", O_WRONLY);
      if (devnull >= 0) {
        dup2(devnull, STDOUT_FILENO);
        dup2(devnull, STDERR_FILENO);
      }
      execv(gIpPath, argv);
      _exit(127);
    }
    if (pid > 0) waitpid(pid, nullptr, 0);
    name[0] = '\0';
  }
}

}  // namespace nns::check
