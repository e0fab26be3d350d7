// guid_text.hpp: a 64-bit GUID as the tools' --json gives it beside the number: "0x" and lowercase hex digits, as
// NCCL logs GUIDs and as a topology file's <net guid> holds them. A JSON number above 2^53 is exact in the text but
// not in every reader: jq 1.6 (Debian 12's) and JavaScript read numbers as doubles and round a NIC's node GUID.
#pragma once

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <string>

namespace nns::tools {

inline std::string guidText(std::uint64_t guid) {
  char text[19];  // "0x" + 16 digits
  std::snprintf(text, sizeof(text), "0x%" PRIx64, guid);
  return text;
}

}  // namespace nns::tools
