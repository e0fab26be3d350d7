// send_delay_double.hpp: a test double for sendmsg that stands in for a thread descheduled right after a write, which
// a loaded host does at random and a test cannot ask the scheduler for. While delayOtherThreadsSendsMs > 0, a sendmsg
// that wrote something, called from any thread but `undelayedThread` (the test's own), returns that many ms after
// its write; everything else goes straight to the next sendmsg in line (libc's, or a sanitizer's). It defines the
// function for the whole program: include it in one translation unit of a test program only, and export the symbol
// (the plugin under test is opened with dlopen): `LINKER:--export-dynamic-symbol=sendmsg`.
#pragma once

#include <dlfcn.h>
#include <pthread.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <thread>

inline std::atomic<int> delayOtherThreadsSendsMs{0};
inline std::atomic<pthread_t> undelayedThread{};

// NOLINTNEXTLINE(misc-definitions-in-headers): one definition per program, by the rule above
extern "C" ssize_t sendmsg(int fd, const struct msghdr* message, int flags) {
  using Real = ssize_t (*)(int, const struct msghdr*, int);
  static Real real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "sendmsg"));
  const ssize_t sent = real(fd, message, flags);
  const int delay = delayOtherThreadsSendsMs.load();
  if (sent > 0 && delay > 0 && pthread_equal(pthread_self(), undelayedThread.load()) == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(delay));
  return sent;
}
