// parse_arguments.hpp: every tool's command line parsed the same way: --help (and --version) prints and exits 0, a bad
// argument prints CLI11's message and exits 2 (what the docs promise), never CLI11's own codes (105, 109, ...). With
// --json among the arguments the refusal is also a JSON object on stdout, {"error": "...", "exitStatus": 2}, as the
// tools' other failures are: a script reading stdout found nothing to parse.
#pragma once

#include <nccl_net/sdk_version.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

namespace nns::tools {

// An integer option's check, in place of CLI::Range: a value that is not a whole number says so ("-n abc" read as
// "Value abc not in range 1 to 2147483647"), and one outside the range keeps CLI11's wording. Decimal only: CLI11
// reads integers with strtoll's base 0, so "010" was 8 and "0x10" 16; the text is handed on as plain decimal digits,
// which needs the option's ->transform() (->check() hands CLI11 the text as it was given).
template <class Integer>
CLI::Validator integerIn(Integer minimum, Integer maximum) {
  const std::string range = std::to_string(minimum) + " to " + std::to_string(maximum);
  return CLI::Validator(
      [minimum, maximum, range](std::string& text) -> std::string {
        // Digits, after one optional sign (from_chars takes no '+').
        const char* begin = text.data() + (!text.empty() && text[0] == '+' ? 1 : 0);
        const char* end = text.data() + text.size();
        const char* digits = begin != end && *begin == '-' ? begin + 1 : begin;
        const auto isDigit = [](char c) { return c >= '0' && c <= '9'; };
        if (digits != end && std::all_of(digits, end, isDigit)) {
          Integer value{};
          const auto [stop, error] = std::from_chars(begin, end, value, 10);
          if (error != std::errc() || stop != end || value < minimum || value > maximum)
            return "Value " + text + " not in range " + range;  // too large for the type, or outside the range
          text = std::to_string(value);                         // "010" as 10, not strtoll's octal 8
          return {};
        }
        // A whole number written otherwise ("2.0", "1e3", "0x10") is refused for its form, or as out of range
        // where it is; anything else is not a whole number.
        double number = 0;
        if (CLI::detail::lexical_cast(text, number) && std::isfinite(number) && std::trunc(number) == number) {
          if (number < static_cast<double>(minimum) || number > static_cast<double>(maximum))
            return "Value " + text + " not in range " + range;
          return "Value " + text + " is not written as a whole number in decimal digits";
        }
        return "Value " + text + " is not a whole number";
      },
      "INT in [" + std::to_string(minimum) + " - " + std::to_string(maximum) + "]");
}

// -1: the arguments parsed, go on; else the exit status to return now.
inline int parseArguments(CLI::App& app, int argc, char** argv) {
  app.set_version_flag("--version", "nccl-net-sdk " NCCL_NET_SDK_VERSION_STRING);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int status = app.exit(e);  // prints the help, or the error (on stderr)
    if (status == 0) return 0;
    // The flag's value is not set when parsing failed: --json is looked for as given, up to a "--".
    bool json = false;
    for (int i = 1; i < argc && std::strcmp(argv[i], "--") != 0; ++i)
      json = json || std::strcmp(argv[i], "--json") == 0;
    if (json) {
      const nlohmann::json refused = {{"error", std::string(e.what())}, {"exitStatus", 2}};
      std::printf("%s\n", refused.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
      std::fflush(stdout);
    }
    return 2;
  }
  return -1;
}

}  // namespace nns::tools
