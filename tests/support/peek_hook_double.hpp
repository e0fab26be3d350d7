// peek_hook_double.hpp: a test double for recv that stands in for a thread descheduled between two looks at the
// world (say, an empty completion queue, then a peek at a side channel), which a loaded host does at random and a test
// cannot ask the scheduler for. Once armPeekHook(hook) is called, the next recv with MSG_PEEK, from any thread, runs
// `hook` first (once) and then peeks; every other recv goes straight to the next recv in line (libc's, or a
// sanitizer's). It defines the function for the whole program: include it in one translation unit of a test program
// only, and export the symbol (the plugin under test is opened with dlopen): `LINKER:--export-dynamic-symbol=recv`.
#pragma once

#include <dlfcn.h>
#include <sys/socket.h>

#include <atomic>
#include <functional>
#include <utility>

inline std::function<void()> peekHook;  // written before peekHookArmed is set, read after it is taken
inline std::atomic<bool> peekHookArmed{false};
inline std::atomic<int> peekHooksRun{0};

inline void armPeekHook(std::function<void()> hook) {
  peekHook = std::move(hook);
  peekHookArmed.store(true);
}

// NOLINTNEXTLINE(misc-definitions-in-headers): one definition per program, by the rule above
extern "C" ssize_t recv(int fd, void* buffer, size_t size, int flags) {
  using Real = ssize_t (*)(int, void*, size_t, int);
  static Real real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "recv"));
  if ((flags & MSG_PEEK) != 0 && peekHookArmed.exchange(false)) {
    peekHook();
    peekHooksRun.fetch_add(1);
  }
  return real(fd, buffer, size, flags);
}
