// size_option.hpp: a byte-count option as the tools take it (nccl-tests' K/M/G suffixes, powers of 1024, through
// CLI11's size parser), refused by name when it is not a whole size from `minimum` up to NCCL's largest net size
// (1 TiB). For the CLI11-based tools only.
#pragma once

#include <CLI/CLI.hpp>
#include <cctype>
#include <cstdint>
#include <string>

namespace nns::tools {

constexpr std::uint64_t kMaxSizeOptionBytes = std::uint64_t{1} << 40;

// Decimal digits first: CLI11 reads the number with strtoull(.., 0), which took "-18446744073709551615" as 1 (a sign
// wraps around 2^64), "010" as 8 and "0x10" as 16 (found by the parsers' fuzzer).
inline std::string decimalSizeText(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t");
  if (first == std::string::npos || text[first] < '0' || text[first] > '9')
    return "a size is decimal digits with an optional K, M, G or T, not \"" + text + "\"";
  const char next = first + 1 < text.size() ? text[first + 1] : '\0';
  if (text[first] == '0' && (std::isdigit(static_cast<unsigned char>(next)) != 0 || next == 'x' || next == 'X'))
    return "a size is decimal, without a leading 0 (octal) or 0x (hex): \"" + text + "\"";
  // CLI11 reads the number as an integer: "1.5K" was "Value 1.5 could not be converted".
  const size_t end = text.find_first_not_of("0123456789", first);
  if (end != std::string::npos && (text[end] == '.' || text[end] == ','))
    return "a size is a whole number (of bytes, or of K, M, G or T), not \"" + text + "\"";
  return {};
}

template <class Bytes>
CLI::Option* addSizeOption(CLI::App& app, const std::string& flags, Bytes& bytes, const std::string& help,
                           std::uint64_t minimum = 0) {
  // CLI11 runs transforms before checks, each added transform before the earlier ones: the text's own check is
  // added last so that it runs first, on the text as given (as a check it ran after the unit's conversion, which
  // failed "1.5K" with CLI11's "Value 1.5 could not be converted to UINT").
  return app.add_option(flags, bytes, help)
      ->transform(CLI::AsSizeValue(false))
      ->transform(CLI::Validator(decimalSizeText, ""))  // AsSizeValue describes the SIZE in --help
      ->check(CLI::Range(minimum, kMaxSizeOptionBytes));
}

}  // namespace nns::tools
