// nccl_net/sdk/log.hpp: logging over the host's ncclDebugLogger_t, safe before init and with a NULL logger.
#pragma once

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "../net.h"
#include "visibility.hpp"

NCCL_NET_SDK_NAMESPACE_BEGIN

namespace detail {
inline std::atomic<ncclDebugLogger_t>& loggerSlot() {
  static std::atomic<ncclDebugLogger_t> slot{nullptr};
  return slot;
}
inline std::atomic<const char*>& prefixSlot() {
  static std::atomic<const char*> prefix{"NET/SDK"};
  return prefix;
}
// The level an NCCL_DEBUG-style value asks for, as NCCL reads it (any case): VERSION, WARN, INFO, ABORT (INFO's lines
// too, as NCCL's ABORT is above INFO), TRACE; -1 for NULL or another word (NCCL then logs WARN).
inline int debugLevelOf(const char* value) {
  if (value == nullptr) return -1;
  if (strcasecmp(value, "TRACE") == 0) return static_cast<int>(NCCL_LOG_TRACE);
  if (strcasecmp(value, "ABORT") == 0) return static_cast<int>(NCCL_LOG_ABORT);
  if (strcasecmp(value, "INFO") == 0) return static_cast<int>(NCCL_LOG_INFO);
  if (strcasecmp(value, "WARN") == 0) return static_cast<int>(NCCL_LOG_WARN);
  if (strcasecmp(value, "VERSION") == 0) return static_cast<int>(NCCL_LOG_VERSION);
  return -1;
}
// Without a host logger, WARN still reaches stderr; INFO/TRACE only when NCCL_DEBUG asks for them.
inline int fallbackLevel() {
  static const int level = [] {
    const int asked = debugLevelOf(std::getenv("NCCL_DEBUG"));
    return asked < 0 ? static_cast<int>(NCCL_LOG_WARN) : asked;
  }();
  return level;
}
// The word a line of `level` is tagged with, and whether stderr shows that level (ABORT as WARN).
inline const char* levelTag(ncclDebugLogLevel level) {
  return level == NCCL_LOG_WARN      ? "WARN"
         : level == NCCL_LOG_ABORT   ? "ABORT"
         : level == NCCL_LOG_TRACE   ? "TRACE"
         : level == NCCL_LOG_VERSION ? "VERSION"
                                     : "INFO";
}
inline bool stderrShows(ncclDebugLogLevel level) {
  const int shown = level == NCCL_LOG_ABORT ? static_cast<int>(NCCL_LOG_WARN) : static_cast<int>(level);
  return shown <= fallbackLevel();
}
}  // namespace detail

// The first non-NULL logger wins; later inits (one per communicator since v11) pass the same function.
inline void setLogger(ncclDebugLogger_t logger) {
  if (logger == nullptr) return;
  ncclDebugLogger_t expected = nullptr;
  detail::loggerSlot().compare_exchange_strong(expected, logger);
}
inline ncclDebugLogger_t logger() {
  return detail::loggerSlot().load(std::memory_order_acquire);
}

// Every message starts with this prefix, e.g. "NET/Socket". Must point to storage that outlives the plugin.
inline void setLogPrefix(const char* prefix) {
  detail::prefixSlot().store(prefix);
}

// An ncclDebugLogger_t for a host without a logger of its own (a tool, a test), and what SDK plugins print through
// when the host passed none: WARN (and ABORT) to stderr, INFO, VERSION and TRACE only when NCCL_DEBUG asks for them.
__attribute__((format(printf, 5, 6))) inline void stderrLogger(ncclDebugLogLevel level, unsigned long flags,
                                                               const char* file, int line, const char* fmt, ...) {
  (void)flags, (void)file, (void)line;
  if (!detail::stderrShows(level)) return;
  char message[1024];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(message, sizeof(message), fmt, args);
  va_end(args);
  std::fprintf(stderr, "%s %s\n", detail::levelTag(level), message);
}

__attribute__((format(printf, 5, 6))) inline void logMessage(ncclDebugLogLevel level, unsigned long flags,
                                                             const char* file, int line, const char* fmt, ...) {
  char message[1024];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(message, sizeof(message), fmt, args);
  va_end(args);
  const char* prefix = detail::prefixSlot().load();
  ncclDebugLogger_t host = logger();
  if (host != nullptr) {
    host(level, flags, file, line, "%s : %s", prefix, message);
    return;
  }
  stderrLogger(level, flags, file, line, "%s : %s", prefix, message);
}

NCCL_NET_SDK_NAMESPACE_END

// The format is part of __VA_ARGS__ (a message with no arguments needs no GNU ##__VA_ARGS__, which -Wpedantic flags in
// a vendor's build), and the subsystem flags go to NCCL's `unsigned long` explicitly (-Wsign-conversion).
#define NCCL_NET_WARN(...) \
  ::nccl_net::sdk::logMessage(NCCL_LOG_WARN, static_cast<unsigned long>(NCCL_ALL), __FILE__, __LINE__, __VA_ARGS__)
#define NCCL_NET_INFO(flags, ...) \
  ::nccl_net::sdk::logMessage(NCCL_LOG_INFO, static_cast<unsigned long>(flags), __FILE__, __LINE__, __VA_ARGS__)
#define NCCL_NET_TRACE(flags, ...) \
  ::nccl_net::sdk::logMessage(NCCL_LOG_TRACE, static_cast<unsigned long>(flags), __FILE__, __LINE__, __VA_ARGS__)
