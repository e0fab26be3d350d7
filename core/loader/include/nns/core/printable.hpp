// printable.hpp: text a plugin hands the host (its name, device names, PCI paths) made safe to print and to put in
// JSON or XML: a buggy plugin's bytes never reach a terminal, or a JSON writer that rejects invalid UTF-8, raw.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace nns::core {

inline bool isPrintableByte(unsigned char c) {
  return c >= 0x20 && c < 0x7f;
}

// True when every byte of `text` is printable ASCII (what NCCL's own names are, and what its logs and topology
// XML carry as they are).
inline bool isPrintableText(std::string_view text, size_t* firstBad = nullptr) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (!isPrintableByte(static_cast<unsigned char>(text[i]))) {
      if (firstBad != nullptr) *firstBad = i;
      return false;
    }
  }
  return true;
}

// `text` with every byte outside printable ASCII written as \xNN; NULL as "(null)".
inline std::string printable(const char* text) {
  if (text == nullptr) return "(null)";
  std::string out;
  for (const char* p = text; *p != '\0'; ++p) {
    const auto c = static_cast<unsigned char>(*p);
    if (isPrintableByte(c)) {
      out += static_cast<char>(c);
    } else {
      char escaped[5];
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", c);
      out += escaped;
    }
  }
  return out;
}

}  // namespace nns::core
