// process_per_test_main.cc: a GoogleTest main that runs each selected test in a process of its own, as ctest does
// (one --gtest_filter per test), for test programs whose tests must not share a process: UCX reads its transports
// from the environment once per context, and a child forked while its parent holds a UCP context is refused by
// nns-ucx. Run by hand (`./ucx_close_test`, any --gtest_filter), the program lists the tests the arguments select
// and runs each in a child given the same arguments and a filter of that test alone; it prints one line per test and
// a summary, and fails if any test failed. One test selected (ctest's way), --gtest_list_tests, --help, or
// NNS_GTEST_IN_ONE_PROCESS=1 in the environment: the tests run here, as with gtest_main.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr const char* kInOneProcess = "NNS_GTEST_IN_ONE_PROCESS";

bool runsHere(int argc, char** argv) {
  const char* inOne = std::getenv(kInOneProcess);
  if (inOne != nullptr && std::strcmp(inOne, "1") == 0) return true;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--gtest_list_tests" || arg == "--help" || arg == "-h" || arg == "-?" || arg == "/?" ||
        arg.rfind("--gtest_list_tests=", 0) == 0)
      return true;
  }
  return false;
}

// Runs this program with `args` (argv[0] first) and NNS_GTEST_IN_ONE_PROCESS=1; its stdout into `out` when given,
// else shared. Returns the wait status, or -1 when it could not be started.
int runSelf(const std::vector<std::string>& args, std::string* out) {
  int pipeFds[2] = {-1, -1};
  if (out != nullptr && pipe(pipeFds) != 0) return -1;
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child < 0) return -1;
  if (child == 0) {
    if (out != nullptr) {
      dup2(pipeFds[1], STDOUT_FILENO);
      close(pipeFds[0]);
      close(pipeFds[1]);
    }
    setenv(kInOneProcess, "1", 1);
    std::vector<char*> argv;
    for (const auto& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    std::fprintf(stderr, "process_per_test_main: execv /proc/self/exe: %s\n", std::strerror(errno));
    _exit(127);
  }
  if (out != nullptr) {
    close(pipeFds[1]);
    char buffer[4096];
    ssize_t got = 0;
    while ((got = read(pipeFds[0], buffer, sizeof(buffer))) > 0 || (got < 0 && errno == EINTR))
      if (got > 0) out->append(buffer, static_cast<size_t>(got));
    close(pipeFds[0]);
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return status;
}

// The full names ("Suite.Test", "Prefix/Suite.Test/0") in --gtest_list_tests' output: a suite line ("Suite.", maybe
// followed by "  # TypeParam = ..."), then its tests indented by two spaces ("  Test/0  # GetParam() = ...").
std::vector<std::string> listedTests(const std::string& listing) {
  std::vector<std::string> tests;
  std::string suite;
  size_t start = 0;
  while (start < listing.size()) {
    size_t end = listing.find('\n', start);
    if (end == std::string::npos) end = listing.size();
    const std::string line = listing.substr(start, end - start);
    start = end + 1;
    if (line.empty()) continue;
    if (line.rfind("  ", 0) == 0) {
      const std::string name = line.substr(2, line.find(' ', 2) - 2);
      if (!suite.empty() && !name.empty()) tests.push_back(suite + name);
    } else if (line[0] != ' ') {
      suite = line.substr(0, line.find(' '));
    }
  }
  return tests;
}

std::string describeStatus(int status) {
  if (status == -1) return "could not be started";
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "wait status " + std::to_string(status);
}

}  // namespace

int main(int argc, char** argv) {
  if (runsHere(argc, argv)) {
    testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
  }
  std::vector<std::string> args(argv, argv + argc);
  std::vector<std::string> listArgs = args;
  listArgs.emplace_back("--gtest_list_tests");
  std::string listing;
  const int listed = runSelf(listArgs, &listing);
  if (listed != 0) {
    std::fprintf(stderr, "%s: listing the tests failed (%s)\n", argv[0], describeStatus(listed).c_str());
    return 1;
  }
  const std::vector<std::string> tests = listedTests(listing);
  if (tests.size() <= 1) {
    testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
  }
  // The same arguments but the filter, which each child gets as its one test.
  std::vector<std::string> childArgs;
  for (const auto& arg : args)
    if (arg.rfind("--gtest_filter=", 0) != 0) childArgs.push_back(arg);
  std::printf("%s: %zu tests, each in a process of its own (%s=1 runs them in this one)\n", argv[0], tests.size(),
              kInOneProcess);
  std::vector<std::string> failed;
  for (const auto& test : tests) {
    std::vector<std::string> one = childArgs;
    one.push_back("--gtest_filter=" + test);
    const int status = runSelf(one, nullptr);
    if (status != 0) failed.push_back(test + " (" + describeStatus(status) + ")");
  }
  std::printf("\n%s: %zu tests in processes of their own: %zu passed, %zu failed\n", argv[0], tests.size(),
              tests.size() - failed.size(), failed.size());
  for (const auto& test : failed) std::printf("  FAILED %s\n", test.c_str());
  return failed.empty() ? 0 : 1;
}
