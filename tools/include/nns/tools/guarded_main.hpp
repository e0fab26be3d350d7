// guarded_main.hpp: every tool's main has one shape: the tool's own run(argc, argv), inside a guard that turns an
// exception nothing else caught into one line naming the tool and exit status 1, never std::terminate's abort; and
// output that could not be written (a full disk, a closed stdout) is a failure too, not a success with a truncated
// report or JSON document.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>

namespace nns::tools {

template <class Run>
int guardedMain(const char* tool, int argc, char** argv, Run run) noexcept {
  int status = 1;
  try {
    status = run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", tool, e.what());
  } catch (...) {
    std::fprintf(stderr, "%s: error: an exception that is not a std::exception\n", tool);
  }
  errno = 0;
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "%s: error: could not write the output: %s\n", tool,
                 errno != 0 ? std::strerror(errno) : "an earlier write to stdout failed");
    if (status == 0) status = 1;
  }
  return status;
}

}  // namespace nns::tools
