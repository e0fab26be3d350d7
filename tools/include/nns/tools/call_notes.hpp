// call_notes.hpp: the plugin call each worker process is in, kept in memory shared with the process that forked the
// workers, which times the calls and names the one a worker crashed or hung in. For tools whose plugin calls are a
// measurement's hot path (nccl-net-perf): noting a call is two stores, where naming each call over a pipe
// (isolated_probe.hpp, for tools that only load and list) would cost a system call per plugin call. The scheme is
// nccl-net-check's per-rule call notes (a process the plugin kills cannot say where it was, so the parent reads it
// from shared memory), with the per-call timeout kept by the parent rather than by alarm() in each worker.
#pragma once

#include <sys/mman.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <utility>

#include "nns/tools/isolated_probe.hpp"

namespace nns::tools {

// One worker's slot. The name is a pointer, so it must be a string literal of the tool: the workers are forks of the
// parent, so the literal has the same address in every one of them (a plugin's string, or one built at run time,
// would not). A cache line each: two workers noting calls in one line would bounce it between their CPUs at every
// call (measured with nccl-net-perf over the minimal plugin: an 8-byte latency of 0.17 us instead of 0.13 us).
struct alignas(64) CallNote {
  std::atomic<const char*> name{nullptr};  // the call in progress, else the last one made (nullptr before the first)
  std::atomic<std::uint64_t> serial{0};    // moves at each call's start and end: odd while a call is in progress

  void begin(const char* call) {
    name.store(call, std::memory_order_relaxed);
    serial.store(serial.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
  void end() { serial.store(serial.load(std::memory_order_relaxed) + 1, std::memory_order_release); }
  bool inProgress() const { return (serial.load(std::memory_order_acquire) & 1) != 0; }
};
// Shared between processes, so the atomics must be plain memory, not a lock inside one process.
static_assert(std::atomic<const char*>::is_always_lock_free && std::atomic<std::uint64_t>::is_always_lock_free);

// Runs `call` (a plugin call, or a step such as the loader's probe) named `name` in `note`.
template <class Call>
auto watchedCall(CallNote& note, const char* name, Call&& call) {
  note.begin(name);
  auto result = std::forward<Call>(call)();
  note.end();
  return result;
}

// `count` notes in memory shared with every process forked after this, unmapped when it goes (in each process).
class SharedCallNotes {
 public:
  explicit SharedCallNotes(std::size_t count) : count_(count) {
    void* shared = mmap(nullptr, count * sizeof(CallNote), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) return;  // valid() says so; errno says why
    notes_ = static_cast<CallNote*>(shared);
    for (std::size_t i = 0; i < count; ++i) new (&notes_[i]) CallNote();
  }
  ~SharedCallNotes() {
    if (notes_ != nullptr) munmap(notes_, count_ * sizeof(CallNote));
  }
  SharedCallNotes(const SharedCallNotes&) = delete;
  SharedCallNotes& operator=(const SharedCallNotes&) = delete;

  bool valid() const { return notes_ != nullptr; }
  CallNote& operator[](std::size_t i) { return notes_[i]; }
  const CallNote& operator[](std::size_t i) const { return notes_[i]; }

 private:
  std::size_t count_;
  CallNote* notes_ = nullptr;
};

// Watches one note from the parent: a call is overdue once the same call (the same odd serial) has been seen in
// progress for `timeout`. It samples, so a hang is seen up to one sampling interval late, never early.
class CallWatch {
 public:
  using Clock = std::chrono::steady_clock;
  CallWatch(const CallNote& note, std::chrono::seconds timeout) : note_(&note), timeout_(timeout) {}

  bool overdue(Clock::time_point now) {
    std::uint64_t serial = note_->serial.load(std::memory_order_acquire);
    if (serial != seen_) {
      seen_ = serial;
      since_ = now;
    }
    return (serial & 1) != 0 && now - since_ >= timeout_;
  }
  // How long the call in progress has been seen running (0 between calls).
  double secondsInCall(Clock::time_point now) const {
    if ((note_->serial.load(std::memory_order_acquire) & 1) == 0) return 0;
    return std::chrono::duration<double>(now - since_).count();
  }

 private:
  const CallNote* note_;
  Clock::duration timeout_;
  std::uint64_t seen_ = 0;
  Clock::time_point since_ = Clock::now();
};

// The call's name as noted, "" before the first.
inline std::string callName(const CallNote& note) {
  const char* name = note.name.load(std::memory_order_relaxed);
  return name != nullptr ? name : "";
}

// " in test"; " after test returned (in a thread of the plugin, or on what it returned)"; "" before any call.
inline std::string whereText(const CallNote& note) {
  std::string name = callName(note);
  if (name.empty()) return "";
  if (note.inProgress()) return " in " + name;
  return " after " + name + " returned (in a thread of the plugin, or on what it returned)";
}

// Why a worker that did not finish ended, in isolated_probe.hpp's words: "crashed: SIGSEGV in test", or, for one
// that exited mid-way without saying why (a sanitizer reporting a crash, a plugin calling exit()), "the process
// ended (exit status 1) in test".
inline std::string deathText(int waitStatus, const CallNote& note) {
  if (WIFSIGNALED(waitStatus)) return "crashed: " + signalName(WTERMSIG(waitStatus)) + whereText(note);
  return "the process ended (exit status " + std::to_string(WEXITSTATUS(waitStatus)) + ")" + whereText(note);
}

// A call that ran out of its time: "hung: connect did not return within 30 s".
inline std::string hungText(const CallNote& note, int timeoutSeconds) {
  return "hung: " + callName(note) + " did not return within " + std::to_string(timeoutSeconds) + " s";
}

}  // namespace nns::tools
