// harness.hpp: the conformance harness: each rule runs in its own process (a crash or hang is a verdict, not the
// end of the run), with a second process as the peer where a rule needs two sides.
#pragma once

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
  int callTimeoutSeconds = 5;   // every plugin call must return within this
  int ruleTimeoutSeconds = 60;  // a whole rule, peer included
  int peerDeathSeconds = 30;    // peer-death-is-an-error: time a pending test has to report the dead peer
  std::vector<std::string> only;  // rule names to run (all when empty)
};

struct RuleInfo {
  const char* name;
  const char* checks;  // one line: what the rule checks and why NCCL needs it
};
const std::vector<RuleInfo>& allRules();

// Runs the selected rules against the plugin `options.load` names. The plugin is loaded in each rule's process.
std::vector<RuleResult> runRules(const Options& options);

const char* statusText(Status status);

}  // namespace nns::check
