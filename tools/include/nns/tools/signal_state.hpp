// signal_state.hpp: how a process handles signals (each signal's action and the calling thread's mask), taken before
// a plugin is loaded and compared after its calls: nccl-net-check's signal-handlers-untouched fails a plugin on the
// difference, nccl-net-info names it for the plugin NCCL would load. NCCL itself installs no handler and blocks no
// signal, so every difference is the plugin's (or its transport library's, as UCX's constructor's handlers).
#pragma once

#include <dlfcn.h>
#include <signal.h>

#include <array>
#include <cstring>
#include <string>
#include <vector>

namespace nns::tools {

struct SignalChange {
  std::string signal;  // "SIGSEGV"
  std::string before;  // "the default action", "ignored", "a handler in libucs.so.0", "blocked", "unblocked"
  std::string after;
};

// An action as the tools say it: "the default action", "ignored", "a handler in libucs.so.0" (the library or program
// the handler's code is in).
inline std::string signalActionText(const struct sigaction& action) {
  const bool info = (action.sa_flags & SA_SIGINFO) != 0;
  if (!info && action.sa_handler == SIG_DFL) return "the default action";
  if (!info && action.sa_handler == SIG_IGN) return "ignored";
  void* handler = info ? reinterpret_cast<void*>(action.sa_sigaction) : reinterpret_cast<void*>(action.sa_handler);
  Dl_info where{};
  if (dladdr(handler, &where) != 0 && where.dli_fname != nullptr) {
    const char* base = std::strrchr(where.dli_fname, '/');
    return std::string("a handler in ") + (base != nullptr ? base + 1 : where.dli_fname);
  }
  return "a handler";
}

struct SignalState {
  std::array<struct sigaction, NSIG> actions{};
  sigset_t mask{};

  // The signals an application may handle: not SIGKILL or SIGSTOP, nor glibc's own 32 and 33 (thread cancellation
  // and set*id, which glibc sets as it needs them).
  static bool applicationSignal(int signal) {
    return signal != SIGKILL && signal != SIGSTOP && (signal < 32 || signal >= SIGRTMIN);
  }
  static SignalState now() {
    SignalState state;
    for (int signal = 1; signal < NSIG; ++signal)
      if (applicationSignal(signal)) sigaction(signal, nullptr, &state.actions[static_cast<size_t>(signal)]);
    pthread_sigmask(SIG_SETMASK, nullptr, &state.mask);
    return state;
  }

  // What differs in `later`: each signal whose handler or flags changed (SA_RESTORER aside: libc sets it), then each
  // signal blocked or unblocked in the thread's mask. Signals in `ignore` are left out.
  std::vector<SignalChange> changesIn(const SignalState& later, const std::vector<int>& ignore = {}) const {
    constexpr int kCompared = SA_SIGINFO | SA_RESETHAND | SA_NODEFER | SA_RESTART | SA_ONSTACK;
    auto ignored = [&](int signal) {
      for (int s : ignore)
        if (s == signal) return true;
      return !applicationSignal(signal);
    };
    std::vector<SignalChange> out;
    for (int signal = 1; signal < NSIG; ++signal) {
      if (ignored(signal)) continue;
      const struct sigaction& was = actions[static_cast<size_t>(signal)];
      const struct sigaction& is = later.actions[static_cast<size_t>(signal)];
      if (reinterpret_cast<void*>(was.sa_handler) == reinterpret_cast<void*>(is.sa_handler) &&
          (was.sa_flags & kCompared) == (is.sa_flags & kCompared))
        continue;
      out.push_back({std::string("SIG") + sigabbrev_np(signal), signalActionText(was), signalActionText(is)});
    }
    for (int signal = 1; signal < NSIG; ++signal) {
      if (ignored(signal)) continue;
      const bool wasBlocked = sigismember(&mask, signal) == 1, isBlocked = sigismember(&later.mask, signal) == 1;
      if (wasBlocked != isBlocked)
        out.push_back({std::string("SIG") + sigabbrev_np(signal) + " in the thread's mask",
                       wasBlocked ? "blocked" : "unblocked", isBlocked ? "blocked" : "unblocked"});
    }
    return out;
  }
};

// The changes as one line: "SIGSEGV: the default action -> a handler in libucs.so.0; ..." (the first `named`, then a
// count of the rest).
inline std::string signalChangesText(const std::vector<SignalChange>& changes, size_t named = 6) {
  std::string text;
  for (size_t i = 0; i < changes.size() && i < named; ++i)
    text += (text.empty() ? "" : "; ") + changes[i].signal + ": " + changes[i].before + " -> " + changes[i].after;
  if (changes.size() > named) text += "; and " + std::to_string(changes.size() - named) + " more";
  return text;
}

}  // namespace nns::tools
