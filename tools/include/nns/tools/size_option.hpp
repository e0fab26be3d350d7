// size_option.hpp: a byte-count option as the tools take it (nccl-tests' K/M/G suffixes, powers of 1024, through
// CLI11's size parser), refused by name when it is not a whole size from `minimum` up to NCCL's largest net size
// (1 TiB). For the CLI11-based tools only.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace nns::tools {

constexpr std::uint64_t kMaxSizeOptionBytes = std::uint64_t{1} << 40;

template <class Bytes>
CLI::Option* addSizeOption(CLI::App& app, const std::string& flags, Bytes& bytes, const std::string& help,
                           std::uint64_t minimum = 0) {
  return app.add_option(flags, bytes, help)
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::Range(minimum, kMaxSizeOptionBytes));
}

}  // namespace nns::tools
