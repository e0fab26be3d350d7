// harness.hpp: the conformance harness: each rule runs in its own process (a crash or hang is a verdict, not the
// end of the run), with a second process as the peer where a rule needs two sides.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "nns/core/loader.hpp"

namespace nns::check {

enum class Status { kPass, kFail, kSkip };

struct RuleResult {
  std::string rule;
  Status status = Status::kFail;
  std::string evidence;  // what was observed: sizes, calls, timings, the plugin's return codes
  double seconds = 0;
};

struct Options {
  nns::core::LoadOptions load;
  int callTimeoutSeconds = 5;     // every plugin call must return within this
  int ruleTimeoutSeconds = 60;    // a whole rule, peer included
  int peerDeathSeconds = 30;      // peer-death-is-an-error: time a pending test has to report the dead peer
  int threadMessages = 30000;     // comms-on-threads: messages per comm (fewer under sanitizers or emulated NICs)
  int collRanks = 3;              // the collNet rules: processes (ranks) in each collective, 1..8
  std::vector<std::string> only;  // rule names to run (all when empty)
  std::vector<std::string> skip;  // rule names not to run
  // --netns: each rule process enters `listenerNetns` before loading the plugin; each peer enters `peerNetns` and
  // opens its own copy of the plugin (`peerLibrary`, a copy of the file so it starts fresh rather than inheriting
  // the listener's interface choice). Empty: both sides share this host's network.
  std::string listenerNetns, peerNetns, peerLibrary;
  // every-version-agrees opens each version on this copy, in a process of its own: a fresh instance, as NCCL loads
  // one version per process. Empty: the rule's own instance.
  std::string versionsLibrary;
};

struct RuleInfo {
  const char* name;
  const char* checks;  // one line: what the rule checks and why NCCL needs it
};
const std::vector<RuleInfo>& allRules();
// The collNet rules (collnet-*), which apply to a library that exports ncclCollNetPlugin_vN.
bool isCollNetRule(const std::string& name);
// The basic data rules: plain messages, sizes and bytes checked (test-reports-sizes, zero-byte,
// random-sizes-integrity). Every rule that moves data builds on what they check, so once one has failed, a later
// rule's failure is most likely its bug again: the later FAIL lines, and the summary, say to fix it first.
bool isBasicRule(const std::string& name);
// Whether --rules and --skip leave the rule named `name` to run.
bool ruleSelected(const Options& options, const std::string& name);

// Runs the selected rules against the plugin `options.load` names. The plugin is loaded in each rule's process.
// `onResult`, when given, is called with each rule's result as soon as it is known, in the order of the returned list.
std::vector<RuleResult> runRules(const Options& options, const std::function<void(const RuleResult&)>& onResult = {});

const char* statusText(Status status);

// Kills the rule in progress with its peers (async-signal-safe): for a run interrupted by a signal.
void killRunningRule();

// The name of the rule in progress, or nullptr between rules (async-signal-safe).
const char* runningRuleName();

}  // namespace nns::check
