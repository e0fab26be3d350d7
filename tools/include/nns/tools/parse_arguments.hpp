// parse_arguments.hpp: every tool's command line parsed the same way: --help (and --version) prints and exits 0, a bad
// argument prints CLI11's message and exits 2 (what the docs promise), never CLI11's own codes (105, 109, ...).
#pragma once

#include <nccl_net/sdk_version.h>

#include <CLI/CLI.hpp>

namespace nns::tools {

// -1: the arguments parsed, go on; else the exit status to return now.
inline int parseArguments(CLI::App& app, int argc, char** argv) {
  app.set_version_flag("--version", "nccl-net-sdk " NCCL_NET_SDK_VERSION_STRING);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // app.exit prints the help, or the error
  }
  return -1;
}

}  // namespace nns::tools
