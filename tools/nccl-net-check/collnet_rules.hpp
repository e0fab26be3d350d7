// collnet_rules.hpp: the conformance rules for a plugin's collNet (ncclCollNet_vN: in-network collectives), run by
// rules.cc's machinery like every rule; each rank of a collective is a process of its own.
#pragma once

#include <functional>
#include <string>

#include "harness.hpp"
#include "nns/core/loader.hpp"

namespace nns::check {

// What rules.cc lends the collNet rules: its per-call watchdog and how a forked process stops writing verdicts.
namespace detail {
// Runs `call` under the watchdog: a call that does not return within `seconds` ends the process (in the rule process
// with the verdict "NAME did not return within N s"). Failures are counted as the net rules' are.
ncclResult_t watchedCall(const char* name, int seconds, const std::function<ncclResult_t()>& call);
// In a process forked from the rule process (a rank): the verdict pipe is the rule process's alone.
void becomeRankProcess();
// The process's open descriptors, threads and shared mappings (as comm-lifecycle-leaks counts them), and their growth
// since `base`, looked at again for up to half a second while it is above 0 (a helper thread may still be exiting).
struct Resources {
  int fds = 0, threads = 0, mappings = 0;
};
Resources resourcesNow();
Resources resourceGrowthSince(const Resources& base);
}  // namespace detail

namespace collnet {

struct Settings {
  int ranks = 3;              // --coll-ranks: processes in each collective
  int callTimeout = 5;        // seconds any call but connect may take
  int ruleSeconds = 60;       // the whole rule
  int peerDeathSeconds = 30;  // rank-death: time a pending test has to report the killed rank
  int version = 0;            // the ncclCollNet_vN every rank opens; 0: the one NCCL would (newest first)
};

struct Outcome {
  Status status;
  std::string evidence;
};

// The rules, each run in the rule process (rank 0), which forks the other ranks itself.
Outcome propertiesSane(const core::Net& net, const Settings& settings);
Outcome allreduceEveryType(const core::Net& net, const Settings& settings);
Outcome allgatherGathers(const core::Net& net, const Settings& settings);
Outcome reduceScatterScatters(const core::Net& net, const Settings& settings);
Outcome operationsInFlight(const core::Net& net, const Settings& settings);
Outcome rankDeathIsAnError(const core::Net& net, const Settings& settings);
Outcome everyVersionAgrees(const core::Net& net, const Settings& settings);
Outcome commsComeAndGo(const core::Net& net, const Settings& settings);

// Whether the library `net` came from exports any ncclCollNetPlugin_vN (read without initialising it).
bool libraryHasCollNet(const core::Net& net);

}  // namespace collnet
}  // namespace nns::check
