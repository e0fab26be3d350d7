// thread_start_double.hpp: a test double for pthread_create, for tests of what a thread limit does (a process or
// container at its limit cannot be made on demand). While failThreadStarts > 0, each call fails with EAGAIN, as the
// kernel does at the limit; otherwise the next pthread_create in line runs (libc's, or a sanitizer's). It defines the
// function for the whole program: include it in one translation unit of a test program only.
#pragma once

#include <dlfcn.h>
#include <pthread.h>

#include <atomic>
#include <cerrno>

inline std::atomic<int> failThreadStarts{0};

// NOLINTNEXTLINE(misc-definitions-in-headers): one definition per program, by the rule above
extern "C" int pthread_create(pthread_t* thread, const pthread_attr_t* attr, void* (*start)(void*), void* arg) {
  using Real = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
  static Real real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "pthread_create"));
  if (failThreadStarts.load() > 0) {
    --failThreadStarts;
    return EAGAIN;
  }
  return real(thread, attr, start, arg);
}
