// guarded_main.hpp: every tool's main has one shape: the tool's own run(argc, argv), inside a guard that turns an
// exception nothing else caught into one line naming the tool and exit status 1, never std::terminate's abort.
#pragma once

#include <cstdio>
#include <exception>

namespace nns::tools {

template <class Run>
int guardedMain(const char* tool, int argc, char** argv, Run run) noexcept {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", tool, e.what());
  } catch (...) {
    std::fprintf(stderr, "%s: error: an exception that is not a std::exception\n", tool);
  }
  return 1;
}

}  // namespace nns::tools
