// nccl_net/sdk/env.hpp: integer settings from the environment, read the way a plugin should read NCCL_* and its own
// variables: whole numbers only ("4x" and "abc" are not 4 and 0), within the range the setting allows, and a value
// outside it reported with a WARN naming the variable and what is used instead, never clamped or dropped silently.
#pragma once

#include <cerrno>
#include <cstdlib>

#include "log.hpp"
#include "visibility.hpp"

NCCL_NET_SDK_NAMESPACE_BEGIN

// The value of `name` when it is a whole number in [minimum, maximum], written as NCCL's own parameters are (strtol
// base 0: decimal, 0x hexadecimal, a leading 0 octal); `fallback` when it is unset or empty, and with a WARN when
// it is anything else.
inline long envInteger(const char* name, long fallback, long minimum, long maximum) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 0);
  if (end == text || *end != '\0' || errno != 0 || value < minimum || value > maximum) {
    NCCL_NET_WARN("%s=%s is not an integer in [%ld, %ld]; using %ld", name, text, minimum, maximum, fallback);
    return fallback;
  }
  return value;
}

NCCL_NET_SDK_NAMESPACE_END
