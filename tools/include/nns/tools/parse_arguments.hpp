// parse_arguments.hpp: every tool's command line parsed the same way: --help (and --version) prints and exits 0, a bad
// argument prints CLI11's message and exits 2 (what the docs promise), never CLI11's own codes (105, 109, ...). With
// --json among the arguments the refusal is also a JSON object on stdout, {"error": "...", "exitStatus": 2}, as the
// tools' other failures are: a script reading stdout found nothing to parse.
#pragma once

#include <nccl_net/sdk_version.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

namespace nns::tools {

// An integer option's check, in place of CLI::Range: a value that is not a whole number says so ("-n abc" read as
// "Value abc not in range 1 to 2147483647"), and one outside the range keeps CLI11's wording.
template <class Integer>
CLI::Validator integerIn(Integer minimum, Integer maximum) {
  const std::string range = std::to_string(minimum) + " to " + std::to_string(maximum);
  return CLI::Validator(
      [minimum, maximum, range](std::string& text) -> std::string {
        Integer value{};
        if (CLI::detail::lexical_cast(text, value)) {
          if (value < minimum || value > maximum) return "Value " + text + " not in range " + range;
          return {};
        }
        // Not this type: a whole number too large for it is out of range; one in range but written otherwise ("2.0",
        // "1e3") is refused for its form (the option takes digits); anything else is not a whole number.
        double number = 0;
        if (CLI::detail::lexical_cast(text, number) && std::isfinite(number) && std::trunc(number) == number) {
          if (number < static_cast<double>(minimum) || number > static_cast<double>(maximum))
            return "Value " + text + " not in range " + range;
          return "Value " + text + " is not written as a whole number (digits only)";
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
