// launch_test.cc: which launcher's variables the bootstrap takes when several launchers' are present, how strictly
// the root address is read, and what each rank is told (text and code) when the rendezvous goes wrong (a wrong size,
// a rank that never arrives, another job or another program on the port).
#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "free_port.hpp"
#include "nns/core/bootstrap.hpp"

namespace {

using nns::core::Bootstrap;
using nns::core::BootstrapError;
using nns::core::LaunchInfo;
using Clock = std::chrono::steady_clock;

const char* const kLauncherVariables[] = {"NNS_RANK",
                                          "NNS_WORLD_SIZE",
                                          "NNS_LOCAL_RANK",
                                          "NNS_ROOT_ADDR",
                                          "NNS_JOB_ID",
                                          "OMPI_COMM_WORLD_RANK",
                                          "OMPI_COMM_WORLD_SIZE",
                                          "OMPI_COMM_WORLD_LOCAL_RANK",
                                          "SLURM_PROCID",
                                          "SLURM_NTASKS",
                                          "SLURM_LOCALID",
                                          "SLURM_JOB_ID",
                                          "SLURM_STEP_ID",
                                          "SLURM_STEPID",
                                          "PMI_RANK",
                                          "PMI_SIZE",
                                          "MPI_LOCALRANKID",
                                          "RANK",
                                          "WORLD_SIZE",
                                          "LOCAL_RANK",
                                          "TORCHELASTIC_RUN_ID",
                                          "MASTER_ADDR",
                                          "MASTER_PORT",
                                          "OMPI_MCA_ess_base_jobid",
                                          "PMIX_NAMESPACE",
                                          "PMI_JOBID",
                                          "NNS_LAUNCHER"};

void clearLauncherVariables() {
  for (const char* name : kLauncherVariables) unsetenv(name);
}

struct Expected {
  int rank, size, localRank;
  std::string source, job;
};

Expected launchFrom(const std::vector<std::pair<const char*, const char*>>& variables) {
  clearLauncherVariables();
  for (const auto& [name, value] : variables) setenv(name, value, 1);
  setenv("MASTER_ADDR", "10.0.0.1", 1);
  setenv("MASTER_PORT", "29500", 1);
  LaunchInfo info;
  std::string error;
  EXPECT_TRUE(nns::core::launchInfoFromEnvironment(&info, &error)) << error;
  clearLauncherVariables();
  return {info.rank, info.size, info.localRank, info.source, info.job};
}

}  // namespace

// `srun torchrun`: every worker inherits the step's SLURM_PROCID (its node's task) and gets torchrun's RANK (its own);
// with the node's number every worker of a node claimed the same rank.
TEST(LaunchPrecedence, TorchrunUnderSrunTakesTheWorkersRank) {
  auto got = launchFrom({{"SLURM_PROCID", "1"},
                         {"SLURM_NTASKS", "2"},
                         {"SLURM_LOCALID", "0"},
                         {"SLURM_JOB_ID", "77"},
                         {"SLURM_STEP_ID", "0"},
                         {"RANK", "3"},
                         {"WORLD_SIZE", "4"},
                         {"LOCAL_RANK", "1"},
                         {"TORCHELASTIC_RUN_ID", "run-a"}});
  EXPECT_EQ(got.rank, 3);
  EXPECT_EQ(got.size, 4);
  EXPECT_EQ(got.localRank, 1);
  EXPECT_EQ(got.source, "RANK/WORLD_SIZE");
  EXPECT_EQ(got.job, "TORCHELASTIC_RUN_ID=run-a");
}

// A batch script run without -n has SLURM_PROCID=0 and no SLURM_NTASKS: rank and size were taken from two
// launchers (rank 0 from Slurm, the size from torchrun), so every worker was rank 0.
TEST(LaunchPrecedence, RankAndSizeNeverComeFromTwoLaunchers) {
  auto got = launchFrom({{"SLURM_PROCID", "0"}, {"RANK", "2"}, {"WORLD_SIZE", "4"}});
  EXPECT_EQ(got.rank, 2);
  EXPECT_EQ(got.source, "RANK/WORLD_SIZE");
  clearLauncherVariables();
  setenv("SLURM_PROCID", "0", 1);
  LaunchInfo info;
  std::string error;
  EXPECT_FALSE(nns::core::launchInfoFromEnvironment(&info, &error));
  EXPECT_NE(error.find("SLURM_PROCID is set but SLURM_NTASKS is not"), std::string::npos) << error;
  clearLauncherVariables();
}

// A rank or size is decimal digits and nothing else: strtol read NNS_RANK=" 1", "+1" and an overflowing size as
// numbers, so a hand-made typo ran as a rank it never said.
TEST(LaunchPrecedence, RankAndSizeAreDecimalDigitsOnly) {
  const std::pair<const char*, const char*> bad[] = {{" 1", "2"},      {"+1", "2"}, {"1 ", "2"},
                                                     {"1", "0x2"},     {"-0", "2"}, {"1", "99999999999999999999"},
                                                     {"0", "16777217"}};
  for (const auto& [rank, size] : bad) {
    clearLauncherVariables();
    setenv("NNS_RANK", rank, 1);
    setenv("NNS_WORLD_SIZE", size, 1);
    setenv("NNS_ROOT_ADDR", "127.0.0.1:29500", 1);
    LaunchInfo info;
    std::string error;
    EXPECT_FALSE(nns::core::launchInfoFromEnvironment(&info, &error)) << "NNS_RANK=\"" << rank << "\"";
    EXPECT_NE(error.find(std::string("NNS_RANK=\"") + rank + "\" NNS_WORLD_SIZE=\"" + size + "\""), std::string::npos)
        << error;
  }
  auto got = launchFrom({{"NNS_RANK", "0007"}, {"NNS_WORLD_SIZE", "16777216"}});
  EXPECT_EQ(got.rank, 7);
  EXPECT_EQ(got.size, 16777216);
}

// A Slurm batch script (or salloc's shell) has SLURM_PROCID=0 and the allocation's SLURM_NTASKS but no srun step's
// SLURM_STEP_ID, and everything it starts inherits them: each process was rank 0 of SLURM_NTASKS, and a script's own
// RANK/WORLD_SIZE for a smaller world were dropped as a stale export. Outside a step they are no launcher's; inside
// one (a step id below the batch, extern and interactive steps' 0xfffffff0 and up) they are.
TEST(LaunchPrecedence, SlurmsBatchScriptIsNoLauncher) {
  const std::vector<std::pair<const char*, const char*>> batch = {
      {"SLURM_JOB_ID", "77"}, {"SLURM_NTASKS", "8"}, {"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}};
  auto with = [&](std::vector<std::pair<const char*, const char*>> more) {
    more.insert(more.begin(), batch.begin(), batch.end());
    return more;
  };
  testing::internal::CaptureStderr();
  auto own = launchFrom(with({{"RANK", "1"}, {"WORLD_SIZE", "2"}}));
  std::string said = testing::internal::GetCapturedStderr();
  EXPECT_EQ(own.source, "RANK/WORLD_SIZE");
  EXPECT_EQ(own.rank, 1);
  EXPECT_EQ(own.size, 2);
  EXPECT_EQ(said.find("WARN"), std::string::npos) << said;
  for (const char* step : {"", "4294967291", "4294967292"}) {  // no step id; the batch step's; the extern step's
    clearLauncherVariables();
    for (const auto& [name, value] : batch) setenv(name, value, 1);
    if (*step != '\0') setenv("SLURM_STEP_ID", step, 1);
    EXPECT_FALSE(nns::core::launcherVariablesSet()) << "step id '" << step << "'";
    LaunchInfo info;
    std::string error;
    EXPECT_FALSE(nns::core::launchInfoFromEnvironment(&info, &error));
    EXPECT_NE(error.find("the Slurm job's batch script's"), std::string::npos) << error;
  }
  clearLauncherVariables();
  auto step = launchFrom(with({{"SLURM_STEP_ID", "0"}}));
  EXPECT_EQ(step.source, "SLURM_PROCID/SLURM_NTASKS");
  EXPECT_EQ(step.size, 8);
  auto oldSlurm = launchFrom(with({{"SLURM_STEPID", "3"}}));
  EXPECT_EQ(oldSlurm.source, "SLURM_PROCID/SLURM_NTASKS");
}

// mpirun with RANK and WORLD_SIZE exported by hand earlier (no torchrun: no TORCHELASTIC_RUN_ID): every local rank
// inherited them, and each became rank 0 of a 1-rank job of its own. Open MPI's variables win now; torchrun's, which
// come with its run id, still win over what started torchrun.
TEST(LaunchPrecedence, RankAndWorldSizeWithoutTorchrunGiveWayToMpirun) {
  auto mpi =
      launchFrom({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"RANK", "0"}, {"WORLD_SIZE", "1"}});
  EXPECT_EQ(mpi.rank, 3);
  EXPECT_EQ(mpi.size, 4);
  EXPECT_EQ(mpi.source, "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE");
  auto pmi = launchFrom({{"PMI_RANK", "2"}, {"PMI_SIZE", "8"}, {"RANK", "0"}, {"WORLD_SIZE", "1"}});
  EXPECT_EQ(pmi.rank, 2);
  EXPECT_EQ(pmi.size, 8);
  auto torchrun = launchFrom({{"OMPI_COMM_WORLD_RANK", "1"},
                              {"OMPI_COMM_WORLD_SIZE", "2"},
                              {"RANK", "5"},
                              {"WORLD_SIZE", "8"},
                              {"TORCHELASTIC_RUN_ID", "run-b"}});
  EXPECT_EQ(torchrun.rank, 5);
  EXPECT_EQ(torchrun.size, 8);
}

// NNS_RANK without NNS_WORLD_SIZE under mpirun: Open MPI's rank and size are used, and the dropped variable is named
// (it was dropped in silence).
TEST(LaunchPrecedence, AHalfSetNnsRankIsNamedWhenAnotherLauncherIsUsed) {
  testing::internal::CaptureStderr();
  auto mpi = launchFrom({{"NNS_RANK", "1"}, {"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_EQ(mpi.source, "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE");
  EXPECT_EQ(mpi.rank, 0);
  EXPECT_NE(said.find("nns WARN bootstrap: ignoring NNS_RANK=1: NNS_WORLD_SIZE is not set; "
                      "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE (Open MPI) are used"),
            std::string::npos)
      << said;
}

// srun with RANK=0 WORLD_SIZE=1 exported before it (no torchrun: no TORCHELASTIC_RUN_ID): every task was rank 0 of a
// one-rank job of its own, and each reported success. A world smaller than the step's is no launcher's inside it:
// Slurm's rank and size win, with a warning at the default verbosity. A script's own numbering, as large as the
// step's or larger (several processes per task), still stands, and torchrun's, under srun, without a word.
TEST(LaunchPrecedence, StaleRankAndWorldSizeGiveWayToALargerSlurmStep) {
  testing::internal::CaptureStderr();
  auto stale = launchFrom({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"RANK", "0"}, {"WORLD_SIZE", "1"}});
  std::string said = testing::internal::GetCapturedStderr();
  EXPECT_EQ(stale.rank, 1);
  EXPECT_EQ(stale.size, 2);
  EXPECT_EQ(stale.source, "SLURM_PROCID/SLURM_NTASKS");
  EXPECT_NE(said.find("nns WARN bootstrap: ignoring RANK=0 WORLD_SIZE=1: set without torchrun (no "
                      "TORCHELASTIC_RUN_ID), and a world smaller than the Slurm step's (SLURM_NTASKS=2"),
            std::string::npos)
      << said;
  for (const auto& variables : std::vector<std::vector<std::pair<const char*, const char*>>>{
           {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"RANK", "5"}, {"WORLD_SIZE", "8"}},
           {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"RANK", "0"}, {"WORLD_SIZE", "2"}},
           {{"SLURM_PROCID", "1"},
            {"SLURM_NTASKS", "2"},
            {"RANK", "3"},
            {"WORLD_SIZE", "4"},
            {"TORCHELASTIC_RUN_ID", "r"}}}) {
    testing::internal::CaptureStderr();
    auto own = launchFrom(variables);
    said = testing::internal::GetCapturedStderr();
    EXPECT_EQ(own.source, "RANK/WORLD_SIZE");
    EXPECT_EQ(own.rank, std::atoi(variables[2].second));
    EXPECT_EQ(said.find("WARN"), std::string::npos) << said;
  }
}

// NNS_RANK/NNS_WORLD_SIZE set by hand are this library's own override and win, a one-rank run per task included; a
// world smaller than the launcher's around them is said at the default verbosity, naming both (a stale export made
// each process a job of its own without a word). nccl-net-run's own, and a larger world, are not warned of.
TEST(LaunchPrecedence, NnsRankAndSizeSmallerThanTheLaunchersAreWarnedOf) {
  testing::internal::CaptureStderr();
  auto byHand = launchFrom({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"NNS_RANK", "0"}, {"NNS_WORLD_SIZE", "1"}});
  std::string said = testing::internal::GetCapturedStderr();
  EXPECT_EQ(byHand.rank, 0);
  EXPECT_EQ(byHand.size, 1);
  EXPECT_EQ(byHand.source, "NNS_RANK/NNS_WORLD_SIZE");
  EXPECT_NE(said.find("nns WARN bootstrap: rank 0 of 1 from NNS_RANK=0/NNS_WORLD_SIZE=1, set by hand, while Slurm "
                      "says SLURM_PROCID=1/SLURM_NTASKS=2"),
            std::string::npos)
      << said;
  for (const auto& variables : std::vector<std::vector<std::pair<const char*, const char*>>>{
           {{"OMPI_COMM_WORLD_RANK", "1"},
            {"OMPI_COMM_WORLD_SIZE", "4"},
            {"NNS_RANK", "0"},
            {"NNS_WORLD_SIZE", "2"},
            {"NNS_LAUNCHER", "nccl-net-run"}},
           {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"NNS_RANK", "5"}, {"NNS_WORLD_SIZE", "8"}}}) {
    testing::internal::CaptureStderr();
    auto own = launchFrom(variables);
    said = testing::internal::GetCapturedStderr();
    EXPECT_EQ(own.source, "NNS_RANK/NNS_WORLD_SIZE");
    EXPECT_EQ(said.find("WARN"), std::string::npos) << said;
  }
}

// The same size as the launcher's and another rank: a stale export gives every process one rank, and the job then
// fails on a rank given twice, which does not point at the export. Warned of; the launcher's own rank is not.
TEST(LaunchPrecedence, NnsRankOtherThanTheLaunchersAtTheSameSizeIsWarnedOf) {
  testing::internal::CaptureStderr();
  auto stale = launchFrom(
      {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"NNS_RANK", "0"}, {"NNS_WORLD_SIZE", "2"}});
  std::string said = testing::internal::GetCapturedStderr();
  EXPECT_EQ(stale.rank, 0);
  EXPECT_EQ(stale.source, "NNS_RANK/NNS_WORLD_SIZE");
  EXPECT_NE(said.find("nns WARN bootstrap: rank 0 of 2 from NNS_RANK=0/NNS_WORLD_SIZE=2, set by hand, while Open MPI "
                      "says OMPI_COMM_WORLD_RANK=1/OMPI_COMM_WORLD_SIZE=2: the same size, another rank"),
            std::string::npos)
      << said;
  EXPECT_NE(said.find("which rank 0 refuses as given twice"), std::string::npos) << said;
  testing::internal::CaptureStderr();
  auto agreeing = launchFrom(
      {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"NNS_RANK", "1"}, {"NNS_WORLD_SIZE", "2"}});
  said = testing::internal::GetCapturedStderr();
  EXPECT_EQ(agreeing.rank, 1);
  EXPECT_EQ(said.find("WARN"), std::string::npos) << said;
}

// torchrun's agent keeps its TCP store on MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True), so rank 0 could not
// listen there: every rank takes MASTER_PORT+1 instead, and NNS_ROOT_ADDR still overrides.
TEST(LaunchPrecedence, UnderTorchrunsAgentStoreTheRootIsTheNextPort) {
  clearLauncherVariables();
  for (auto [name, value] : std::vector<std::pair<const char*, const char*>>{{"RANK", "1"},
                                                                             {"WORLD_SIZE", "2"},
                                                                             {"TORCHELASTIC_RUN_ID", "r"},
                                                                             {"MASTER_ADDR", "10.0.0.1"},
                                                                             {"MASTER_PORT", "29500"}})
    setenv(name, value, 1);
  setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
  LaunchInfo info;
  std::string error;
  EXPECT_TRUE(nns::core::launchInfoFromEnvironment(&info, &error)) << error;
  EXPECT_EQ(info.rootHost, "10.0.0.1");
  EXPECT_EQ(info.rootPort, 29501);
  EXPECT_NE(info.rootPortNote.find("torchrun's agent holds MASTER_PORT"), std::string::npos) << info.rootPortNote;
  setenv("TORCHELASTIC_USE_AGENT_STORE", "False", 1);
  EXPECT_TRUE(nns::core::launchInfoFromEnvironment(&info, &error)) << error;
  EXPECT_EQ(info.rootPort, 29500);
  unsetenv("TORCHELASTIC_USE_AGENT_STORE");
  clearLauncherVariables();
}

// Hydra (MPICH, Intel MPI) started by srun: the proxies' SLURM_PROCID is the node's; PMI_RANK is the rank's.
TEST(LaunchPrecedence, PmiUnderSrunTakesThePmiRank) {
  auto got = launchFrom(
      {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"PMI_RANK", "5"}, {"PMI_SIZE", "8"}, {"MPI_LOCALRANKID", "1"}});
  EXPECT_EQ(got.rank, 5);
  EXPECT_EQ(got.size, 8);
  EXPECT_EQ(got.localRank, 1);
  EXPECT_EQ(got.source, "PMI_RANK/PMI_SIZE");
}

// mpirun in a batch script, and srun alone: each launcher's local rank and job come with its rank.
TEST(LaunchPrecedence, OpenMpiInABatchScriptAndSrunAlone) {
  auto mpi = launchFrom({{"SLURM_PROCID", "0"},
                         {"SLURM_NTASKS", "1"},
                         {"OMPI_COMM_WORLD_RANK", "3"},
                         {"OMPI_COMM_WORLD_SIZE", "4"},
                         {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                         {"OMPI_MCA_ess_base_jobid", "1352597505"}});
  EXPECT_EQ(mpi.rank, 3);
  EXPECT_EQ(mpi.size, 4);
  EXPECT_EQ(mpi.localRank, 1);
  EXPECT_EQ(mpi.job, "OMPI_MCA_ess_base_jobid=1352597505");
  // Open MPI 5 (PRRTE) names its job by the PMIx namespace; PMI under Slurm (srun --mpi=pmi2) by PMI_JOBID and
  // Slurm's ids. Without them a second job on the same root port was taken for this one.
  auto mpi5 = launchFrom(
      {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"PMIX_NAMESPACE", "prterun-node0-4242@1"}});
  EXPECT_EQ(mpi5.job, "PMIX_NAMESPACE=prterun-node0-4242@1");
  auto pmi = launchFrom(
      {{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"PMI_JOBID", "77.3"}, {"SLURM_JOB_ID", "77"}, {"SLURM_STEP_ID", "3"}});
  EXPECT_EQ(pmi.source, "PMI_RANK/PMI_SIZE");
  EXPECT_EQ(pmi.job, "PMI_JOBID=77.3 SLURM_JOB_ID=77 SLURM_STEP_ID=3");
  auto slurm = launchFrom({{"SLURM_PROCID", "5"},
                           {"SLURM_NTASKS", "8"},
                           {"SLURM_LOCALID", "1"},
                           {"SLURM_JOB_ID", "77"},
                           {"SLURM_STEP_ID", "2"}});
  EXPECT_EQ(slurm.rank, 5);
  EXPECT_EQ(slurm.localRank, 1);
  EXPECT_EQ(slurm.job, "SLURM_JOB_ID=77 SLURM_STEP_ID=2");
  // Slurm before 20.11: the step is SLURM_STEPID (taken only where SLURM_STEP_ID is not set).
  auto oldSlurm =
      launchFrom({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_JOB_ID", "77"}, {"SLURM_STEPID", "4"}});
  EXPECT_EQ(oldSlurm.job, "SLURM_JOB_ID=77 SLURM_STEPID=4");
  auto bothNames = launchFrom({{"SLURM_PROCID", "5"},
                               {"SLURM_NTASKS", "8"},
                               {"SLURM_JOB_ID", "77"},
                               {"SLURM_STEP_ID", "2"},
                               {"SLURM_STEPID", "2"}});
  EXPECT_EQ(bothNames.job, "SLURM_JOB_ID=77 SLURM_STEP_ID=2");
}

namespace {

// Runs a bootstrap for each LaunchInfo on a thread of its own; returns each one's error ("" when it joined and
// all-gathered) and how long it took.
std::vector<std::pair<std::string, double>> rendezvous(const std::vector<LaunchInfo>& ranks,
                                                       std::chrono::milliseconds timeout) {
  std::vector<std::pair<std::string, double>> results(ranks.size());
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (size_t i = 0; i < ranks.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        Bootstrap bootstrap(ranks[i], timeout);
        bootstrap.allGather(std::to_string(i));
      } catch (const std::exception& e) {
        results[i].first = e.what();
      }
      results[i].second = std::chrono::duration<double>(Clock::now() - start).count();
    });
  }
  for (auto& thread : threads) thread.join();
  return results;
}

}  // namespace

// A wrong WORLD_SIZE on one rank: it is told at once why rank 0 refused it, rank 0 names it after the timeout, and
// the rank that had joined hears rank 0's reason instead of a reset connection.
TEST(BootstrapFailures, AWrongWorldSizeOnOneRankIsNamedOnEveryRank) {
  const int port = nns::test::freeLoopbackPort();
  std::vector<LaunchInfo> ranks{
      {0, 3, "127.0.0.1", port, "test"}, {1, 3, "127.0.0.1", port, "test"}, {2, 4, "127.0.0.1", port, "test"}};
  auto results = rendezvous(ranks, std::chrono::milliseconds(1500));
  EXPECT_NE(results[2].first.find("rank 0 at 127.0.0.1:" + std::to_string(port) +
                                  " refused it: rank 0 expects 3 ranks, and rank 2 says 4"),
            std::string::npos)
      << results[2].first;
  EXPECT_LT(results[2].second, 1.0) << "the rank with the wrong size waited instead of failing at once";
  EXPECT_NE(results[0].first.find("rank(s) 2 did not arrive within 1500 ms"), std::string::npos) << results[0].first;
  EXPECT_NE(results[0].first.find("turned away: rank 2 of 4: rank 0 expects 3 ranks"), std::string::npos)
      << results[0].first;
  EXPECT_NE(results[1].first.find("rank 0 gave up: rank(s) 2 did not arrive"), std::string::npos) << results[1].first;
  for (const auto& [error, seconds] : results) EXPECT_LT(seconds, 4.0) << error;
}

// A rank that never arrives: rank 0 names it after the timeout, and so does every rank that joined, at once.
TEST(BootstrapFailures, ARankThatNeverArrivesIsNamedOnEveryRankThatDid) {
  const int port = nns::test::freeLoopbackPort();
  std::vector<LaunchInfo> ranks{{0, 3, "127.0.0.1", port, "test"}, {1, 3, "127.0.0.1", port, "test"}};
  auto results = rendezvous(ranks, std::chrono::milliseconds(1000));
  EXPECT_NE(results[0].first.find("rank(s) 2 did not arrive within 1000 ms at 127.0.0.1:" + std::to_string(port) +
                                  " (ranks from test)"),
            std::string::npos)
      << results[0].first;
  EXPECT_NE(results[1].first.find("rank 0 gave up: rank(s) 2 did not arrive within 1000 ms"), std::string::npos)
      << results[1].first;
  EXPECT_LT(results[1].second, results[0].second + 0.5) << "rank 1 outlived rank 0 by its own timeout";
}

// An all-gather whose result is over the bootstrap's limit (3 ranks of 30 MiB: 90 MiB to send back) is refused by rank
// 0, naming the size, and the others hear its reason. Rank 0 sent anyway and the receivers refused an "oversized
// bootstrap message", so rank 0 failed on a reset connection and a rank not yet served heard only that the
// connection closed.
TEST(BootstrapFailures, AnAllGatherOverTheLimitIsRefusedByItsSizeOnEveryRank) {
  const int port = nns::test::freeLoopbackPort();
  std::vector<std::string> errors(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      try {
        Bootstrap bootstrap(LaunchInfo{r, 3, "127.0.0.1", port, "test"}, std::chrono::milliseconds(20000));
        bootstrap.allGather(std::string(30u << 20, static_cast<char>('a' + r)));
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& thread : threads) thread.join();
  const std::string size =
      "a bootstrap message of " + std::to_string(3 * ((30u << 20) + 4)) + " bytes, over the 64 MiB";
  EXPECT_NE(errors[0].find(size), std::string::npos) << errors[0];
  for (int r = 1; r < 3; ++r) {
    EXPECT_NE(errors[r].find("rank 0 gave up: " + size), std::string::npos) << "rank " << r << ": " << errors[r];
  }
}

// Rank 0 cannot deliver the all-gather's result to rank 2 (a process stopped after it sent its part) after rank 1
// was served: rank 1 fails too, with rank 0's reason. It returned the result, and heard of the failure only at its
// next exchange, as a reset connection.
TEST(BootstrapFailures, AResultOneRankNeverGotIsAFailureOnEveryRank) {
  const int port = nns::test::freeLoopbackPort();
  int joined[2];
  ASSERT_EQ(pipe(joined), 0);
  const pid_t rank2 = fork();
  ASSERT_GE(rank2, 0);
  if (rank2 == 0) {
    close(joined[0]);
    try {
      Bootstrap bootstrap(LaunchInfo{2, 3, "127.0.0.1", port, "test"}, std::chrono::milliseconds(20000));
      (void)!write(joined[1], "j", 1);
      // A part small enough to sit in the socket's buffer at once: it reaches rank 0 even once this process stops.
      bootstrap.allGather("c");
    } catch (const std::exception&) {
    }
    _exit(0);
  }
  close(joined[1]);
  std::vector<std::string> errors(2);
  std::atomic<bool> stopped{false};
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        Bootstrap bootstrap(LaunchInfo{r, 3, "127.0.0.1", port, "test"},
                            std::chrono::milliseconds(r == 0 ? 3000 : 20000));
        // Rank 1 contributes once rank 2 is stopped: rank 0 serves rank 1 first, then waits on rank 2 (a result of
        // 16 MiB, more than the socket buffers hold).
        while (r == 1 && !stopped) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        bootstrap.allGather(std::string(8u << 20, static_cast<char>('a' + r)));
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  char byte = 0;
  pollfd wait{joined[0], POLLIN, 0};
  const bool rank2Joined = poll(&wait, 1, 20000) == 1 && read(joined[0], &byte, 1) == 1;
  // Its one-byte part is sent microseconds after the byte above; stopped well after.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(rank2, SIGSTOP);
  stopped = true;
  for (auto& thread : threads) thread.join();
  kill(rank2, SIGKILL);
  waitpid(rank2, nullptr, 0);
  close(joined[0]);
  ASSERT_TRUE(rank2Joined) << errors[0];
  EXPECT_NE(errors[0].find("(sending the all-gather to rank 2)"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("rank 0 gave up: "), std::string::npos) << "rank 1: " << errors[1];
  EXPECT_NE(errors[1].find("(sending the all-gather to rank 2)"), std::string::npos) << "rank 1: " << errors[1];
}

// Every rank on time, but rank 0 halfway through the 6 s timeout, and rank 1 (in from the start, its part sent) then
// stopped until 8 s in, not reading the 56 MiB result (more than the socket buffers hold: loopback's receive buffer
// may grow to 32 MiB). Rank 0 serves rank 1 first, within a timeout of its own, so rank 2 (in from the start too)
// gets the result about 8 s in: it waited 7 s (the timeout and a second) and failed the job while no rank was late.
TEST(BootstrapFailures, ARankServedAfterASlowOneStillGetsTheResult) {
  const int port = nns::test::freeLoopbackPort();
  constexpr auto kTimeout = std::chrono::milliseconds(6000);
  int sent[2], outcome[2];
  ASSERT_EQ(pipe(sent), 0);
  ASSERT_EQ(pipe(outcome), 0);
  const pid_t rank1 = fork();
  ASSERT_GE(rank1, 0);
  if (rank1 == 0) {
    close(sent[0]);
    close(outcome[0]);
    char ok = 'n';
    try {
      Bootstrap bootstrap(LaunchInfo{1, 3, "127.0.0.1", port, "test"}, kTimeout);
      (void)!write(sent[1], "s", 1);
      // A part small enough to sit in the socket's buffer at once: it reaches rank 0 while this process is stopped.
      const auto all = bootstrap.allGather("b");
      if (all.size() == 3 && all[1] == "b" && all[2].size() == (28u << 20)) ok = 'y';
    } catch (const std::exception&) {
    }
    (void)!write(outcome[1], &ok, 1);
    _exit(0);
  }
  close(sent[1]);
  close(outcome[1]);
  std::vector<std::string> errors(3);
  std::vector<size_t> sizes(3, 0);
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (int r : {0, 2})
    threads.emplace_back([&, r] {
      try {
        Bootstrap bootstrap(LaunchInfo{r, 3, "127.0.0.1", port, "test"}, kTimeout);
        if (r == 0) std::this_thread::sleep_for(kTimeout / 2);
        sizes[r] = bootstrap.allGather(std::string(28u << 20, static_cast<char>('a' + r))).size();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  char byte = 0;
  pollfd wait{sent[0], POLLIN, 0};
  const bool rank1Sent = poll(&wait, 1, 20000) == 1 && read(sent[0], &byte, 1) == 1;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // its part goes out microseconds after the byte
  kill(rank1, SIGSTOP);
  std::this_thread::sleep_until(start + std::chrono::milliseconds(8000));
  kill(rank1, SIGCONT);
  for (auto& thread : threads) thread.join();
  wait = {outcome[0], POLLIN, 0};
  char rank1Outcome = 0;
  const bool rank1Said = poll(&wait, 1, 20000) == 1 && read(outcome[0], &rank1Outcome, 1) == 1;
  kill(rank1, SIGKILL);
  waitpid(rank1, nullptr, 0);
  close(sent[0]);
  close(outcome[0]);
  ASSERT_TRUE(rank1Sent) << errors[0];
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[2], "") << "rank 2";
  EXPECT_EQ(sizes[0], 3u);
  EXPECT_EQ(sizes[2], 3u);
  EXPECT_TRUE(rank1Said && rank1Outcome == 'y') << "rank 1 did not get the result";
}

// Rank 2 leaves after the rendezvous, before the all-gather: rank 0 gives up on it, and rank 1, whose part comes
// after that and whose send then fails, reads rank 0's reason (it said only "send failed: Broken pipe").
TEST(BootstrapFailures, ALateRankHearsWhyRankZeroGaveUp) {
  const int port = nns::test::freeLoopbackPort();
  std::vector<std::string> errors(3);
  std::promise<void> rankZeroFailed;
  std::shared_future<void> failedSoon = rankZeroFailed.get_future().share();
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      try {
        Bootstrap bootstrap(LaunchInfo{r, 3, "127.0.0.1", port, "test"}, std::chrono::milliseconds(20000));
        if (r == 2) return;  // leaves: its connection to rank 0 closes
        if (r == 1) failedSoon.wait_for(std::chrono::seconds(30));
        bootstrap.allGather(std::string(4u << 20, static_cast<char>('a' + r)));
      } catch (const std::exception& e) {
        errors[r] = e.what();
        if (r == 0) rankZeroFailed.set_value();
      }
    });
  for (auto& thread : threads) thread.join();
  EXPECT_NE(errors[0].find("rank 2"), std::string::npos) << errors[0];
  EXPECT_EQ(errors[1].rfind("bootstrap: rank 0 gave up: ", 0), 0u) << "rank 1: " << errors[1];
  EXPECT_NE(errors[1].find("rank 2"), std::string::npos) << "rank 1: " << errors[1];
}

// A test double for getaddrinfo (a name with two addresses, one of them dropping SYNs, cannot be made for real here
// without root and /etc/hosts): "nns-two-addresses.test" resolves to 127.0.0.2, then 127.0.0.1; everything else
// goes to the real one. The list is two of the real function's lists chained, so the real freeaddrinfo frees it.
extern "C" int getaddrinfo(const char* node, const char* service, const addrinfo* hints, addrinfo** res) {
  using Real = int (*)(const char*, const char*, const addrinfo*, addrinfo**);
  static Real real = reinterpret_cast<Real>(dlsym(RTLD_NEXT, "getaddrinfo"));
  // "nns-flaky-dns.test": the resolver fails for a while (EAI_AGAIN, as a DNS server that timed out), then gives
  // 127.0.0.1.
  static std::atomic<int> flakyFailures{0};
  if (node != nullptr && std::strcmp(node, "nns-flaky-dns.test") == 0) {
    if (flakyFailures++ < 3) return EAI_AGAIN;
    addrinfo numeric{};
    numeric.ai_flags = AI_NUMERICHOST;
    numeric.ai_family = AF_INET;
    numeric.ai_socktype = SOCK_STREAM;
    return real("127.0.0.1", service, &numeric, res);
  }
  if (node == nullptr || std::strcmp(node, "nns-two-addresses.test") != 0) return real(node, service, hints, res);
  addrinfo numeric{};
  numeric.ai_flags = AI_NUMERICHOST;
  numeric.ai_family = AF_INET;
  numeric.ai_socktype = SOCK_STREAM;
  addrinfo *first = nullptr, *second = nullptr;
  if (int rc = real("127.0.0.2", service, &numeric, &first); rc != 0) return rc;
  if (int rc = real("127.0.0.1", service, &numeric, &second); rc != 0) {
    freeaddrinfo(first);
    return rc;
  }
  addrinfo* last = first;
  while (last->ai_next != nullptr) last = last->ai_next;
  last->ai_next = second;
  *res = first;
  return 0;
}

// A root name with two addresses, the first dropping SYNs (a listener there whose accept queue is full; a firewall
// or an IPv6 address not routed here look the same): the joining rank moves on to the second and joins. It spent
// the whole timeout on the first ("could not reach rank 0 ... Connection timed out").
TEST(BootstrapFailures, AJoiningRankMovesOnFromARootAddressThatDropsItsConnects) {
  const int port = nns::test::freeLoopbackPort();
  // 127.0.0.2:port, listening with a full queue: its backlog of 0 holds one connection, made here.
  const int blackhole = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in there{};
  there.sin_family = AF_INET;
  there.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.2", &there.sin_addr);
  ASSERT_EQ(bind(blackhole, reinterpret_cast<sockaddr*>(&there), sizeof(there)), 0) << std::strerror(errno);
  ASSERT_EQ(listen(blackhole, 0), 0);
  const int filler = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(filler, reinterpret_cast<sockaddr*>(&there), sizeof(there)), 0);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        // Rank 0 listens on the address given as a number; rank 1 has the name.
        Bootstrap bootstrap(LaunchInfo{r, 2, r == 0 ? "127.0.0.1" : "nns-two-addresses.test", port, "test"},
                            std::chrono::milliseconds(6000));
        bootstrap.barrier();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  close(filler);
  close(blackhole);
}

// Two ranks claiming the same rank: the second is refused at once, with the reason, and the job still forms.
TEST(BootstrapFailures, TwoRanksWithTheSameNumberAreRefused) {
  const int port = nns::test::freeLoopbackPort();
  std::vector<std::string> errors(4, "still running");
  std::vector<double> seconds(4);
  const auto start = Clock::now();
  auto run = [&](int slot, int rank, int delayMs) {
    std::this_thread::sleep_for(std::chrono::milliseconds(delayMs));
    try {
      Bootstrap bootstrap(LaunchInfo{rank, 3, "127.0.0.1", port, "test"}, std::chrono::milliseconds(3000));
      bootstrap.allGather(std::to_string(rank));
      errors[slot] = "";
    } catch (const std::exception& e) {
      errors[slot] = e.what();
    }
    seconds[slot] = std::chrono::duration<double>(Clock::now() - start).count();
  };
  // Rank 0 still listens for rank 2 when the second rank 1 comes.
  std::vector<std::thread> threads;
  threads.emplace_back(run, 0, 0, 0);
  threads.emplace_back(run, 1, 1, 0);
  threads.emplace_back(run, 2, 1, 300);
  threads.emplace_back(run, 3, 2, 800);
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_EQ(errors[3], "");
  EXPECT_NE(errors[2].find("refused it: rank 0 already has a rank 1 (two ranks were given the same rank"),
            std::string::npos)
      << errors[2];
  EXPECT_LT(seconds[2], 1.5) << "the duplicate waited instead of failing at once";
}

// Two jobs on one root port: a rank of job b that reaches job a's rank 0 first is turned away, retries, and joins
// its own rank 0 once that listens on the port (after job a's has stopped listening). Before, job a took it as its
// rank 1 (the same size, no job to tell them apart) and turned its real rank 1 away.
TEST(BootstrapFailures, ARankOfAnotherJobOnThePortWaitsForItsOwnRoot) {
  const int port = nns::test::freeLoopbackPort();
  auto info = [&](int rank, const char* job) {
    LaunchInfo one{rank, 2, "127.0.0.1", port, "test"};
    one.job = job;
    return one;
  };
  std::vector<std::string> errors(4, "still running"), gathered(4);
  auto run = [&](int slot, const LaunchInfo& one) {
    try {
      Bootstrap bootstrap(one, std::chrono::milliseconds(8000));
      auto all = bootstrap.allGather(one.job + std::to_string(one.rank));
      gathered[slot] = all[0] + "," + all[1];
      errors[slot] = "";
    } catch (const std::exception& e) {
      errors[slot] = e.what();
    }
  };
  std::thread b1(run, 3, info(1, "TORCHELASTIC_RUN_ID=b"));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::thread a0(run, 0, info(0, "TORCHELASTIC_RUN_ID=a"));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::thread a1(run, 1, info(1, "TORCHELASTIC_RUN_ID=a"));
  a0.join();
  a1.join();
  std::thread b0(run, 2, info(0, "TORCHELASTIC_RUN_ID=b"));
  b0.join();
  b1.join();
  for (const auto& error : errors) EXPECT_EQ(error, "");
  EXPECT_EQ(gathered[0], "TORCHELASTIC_RUN_ID=a0,TORCHELASTIC_RUN_ID=a1");
  EXPECT_EQ(gathered[3], "TORCHELASTIC_RUN_ID=b0,TORCHELASTIC_RUN_ID=b1");
}

// mpirun and srun set no root address: the error says how to give one with the launcher in use.
TEST(LaunchPrecedence, NoRootAddressSaysHowToGiveOneToThisLauncher) {
  const std::vector<std::pair<std::vector<std::pair<const char*, const char*>>, std::string>> cases = {
      {{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}}, "mpirun -x MASTER_ADDR="},
      {{{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}}, "scontrol show hostnames"},
      {{{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}}, "mpiexec -genv MASTER_ADDR"},
  };
  for (const auto& [variables, hint] : cases) {
    clearLauncherVariables();
    for (const auto& [name, value] : variables) setenv(name, value, 1);
    LaunchInfo info;
    std::string error;
    EXPECT_FALSE(nns::core::launchInfoFromEnvironment(&info, &error));
    EXPECT_NE(error.find("no root address"), std::string::npos) << error;
    EXPECT_NE(error.find(hint), std::string::npos) << error;
  }
  clearLauncherVariables();
}

// A malformed NNS_ROOT_ADDR is refused by name, with what is wrong. Before, `[::1:29816` (no closing bracket) became
// [::]:29816 without a word, and `:29817` (no host) got as far as "cannot resolve root address".
TEST(RootAddress, AMalformedNnsRootAddrIsRefusedSayingWhatIsWrong) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"[::1:29816", "no ']' closes the IPv6 address"},
      {":29817", "no host before the ':'"},
      {"node0:80x", "the port \"80x\" is not a number"},
      {"node0: 80", "the port \" 80\" is not a number"},
      {"node0:99999", "the port 99999 is not one of 1..65535"},
      {"node0:0", "the port 0 is not one of 1..65535"},
      {"node0:", "no port after the ':'"},
      {"node0", "no :port"},
      {"::1:29500", "an IPv6 address needs brackets, as in [::1]:port"},
      {"[::1]29500", "no :port after the ']'"},
      {"[node0]:29500", "[node0] is not an IPv6 address"},
      {"tcp://node0:29500", "the host \"tcp://node0\" has a ':'"},
  };
  for (const auto& [root, why] : cases) {
    clearLauncherVariables();
    setenv("NNS_RANK", "1", 1);
    setenv("NNS_WORLD_SIZE", "2", 1);
    setenv("NNS_ROOT_ADDR", root, 1);
    LaunchInfo info;
    std::string error;
    EXPECT_FALSE(nns::core::launchInfoFromEnvironment(&info, &error))
        << root << " was taken as " << info.rootHost << " port " << info.rootPort;
    EXPECT_NE(error.find(std::string("NNS_ROOT_ADDR must be host:port (port 1..65535) or [IPv6]:port, not \"") + root +
                         "\": " + why),
              std::string::npos)
        << error;
  }
  clearLauncherVariables();
}

// NNS_ROOT_ADDR (and MASTER_ADDR) set but empty are unset, as launcherVariablesSet and nnsGetUniqueId read them: an
// empty NNS_ROOT_ADDR gives way to MASTER_ADDR (it was refused as malformed), and where no root is left the error
// says which was empty. A one-rank job needs none.
TEST(RootAddress, AnEmptyRootAddressIsUnset) {
  clearLauncherVariables();
  setenv("NNS_RANK", "1", 1);
  setenv("NNS_WORLD_SIZE", "2", 1);
  setenv("NNS_ROOT_ADDR", "", 1);
  setenv("MASTER_ADDR", "10.0.0.1", 1);
  setenv("MASTER_PORT", "29500", 1);
  LaunchInfo info;
  std::string error;
  EXPECT_TRUE(nns::core::launchInfoFromEnvironment(&info, &error)) << error;
  EXPECT_EQ(info.rootHost, "10.0.0.1");
  EXPECT_EQ(info.rootPort, 29500);
  setenv("MASTER_ADDR", "", 1);
  EXPECT_FALSE(nns::core::launchInfoFromEnvironment(&info, &error));
  EXPECT_NE(error.find("no root address (NNS_ROOT_ADDR and MASTER_ADDR are set but empty)"), std::string::npos)
      << error;
  unsetenv("MASTER_ADDR");
  EXPECT_FALSE(nns::core::launchInfoFromEnvironment(&info, &error));
  EXPECT_NE(error.find("no root address (NNS_ROOT_ADDR is set but empty)"), std::string::npos) << error;
  setenv("NNS_RANK", "0", 1);
  setenv("NNS_WORLD_SIZE", "1", 1);
  EXPECT_TRUE(nns::core::launchInfoFromEnvironment(&info, &error)) << error;
  clearLauncherVariables();
}

// The well-formed ones, through the function nnsCommInitRank can share: a name, IPv4, IPv6 in brackets (a zone too).
TEST(RootAddress, WellFormedAddressesAreSplitIntoHostAndPort) {
  const std::vector<std::tuple<const char*, const char*, int>> cases = {
      {"node-0.cluster_a:29500", "node-0.cluster_a", 29500},
      {"10.78.0.1:1", "10.78.0.1", 1},
      {"[fd78::1]:65535", "fd78::1", 65535},
      {"[fe80::1%eth0]:29500", "fe80::1%eth0", 29500},
  };
  for (const auto& [text, host, port] : cases) {
    std::string gotHost, error;
    int gotPort = 0;
    EXPECT_TRUE(nns::core::parseRootAddress(text, &gotHost, &gotPort, &error)) << text << ": " << error;
    EXPECT_EQ(gotHost, host) << text;
    EXPECT_EQ(gotPort, port) << text;
  }
}

// A rank equal to the size is one past the last rank: refused where the environment is read, naming the variables
// that said it (the Bootstrap refused it later, naming neither).
TEST(LaunchPrecedence, ARankEqualToTheSizeIsRefusedNamingItsVariables) {
  for (const auto& [variables, named] :
       std::vector<std::pair<std::vector<std::pair<const char*, const char*>>, const char*>>{
           {{{"NNS_RANK", "4"}, {"NNS_WORLD_SIZE", "4"}}, "bad rank/size: NNS_RANK=\"4\" NNS_WORLD_SIZE=\"4\""},
           {{{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "2"}},
            "bad rank/size: OMPI_COMM_WORLD_RANK=\"2\" OMPI_COMM_WORLD_SIZE=\"2\""}}) {
    clearLauncherVariables();
    for (const auto& [name, value] : variables) setenv(name, value, 1);
    LaunchInfo info;
    std::string error;
    EXPECT_FALSE(nns::core::launchInfoFromEnvironment(&info, &error)) << named;
    EXPECT_NE(error.find(named), std::string::npos) << error;
  }
  clearLauncherVariables();
}

// MASTER_ADDR without MASTER_PORT is half a root address: refused, not completed with torchrun's default port (a job
// whose launcher exported only the host would meet at 29500, where another job's may be).
TEST(RootAddress, MasterAddrWithoutMasterPortIsRefused) {
  clearLauncherVariables();
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("TORCHELASTIC_RUN_ID", "r", 1);
  setenv("MASTER_ADDR", "node0", 1);
  LaunchInfo info;
  std::string error;
  EXPECT_FALSE(nns::core::launchInfoFromEnvironment(&info, &error));
  EXPECT_NE(error.find("MASTER_ADDR is set but MASTER_PORT is missing or not a port (1..65535): it is not set"),
            std::string::npos)
      << error;
  clearLauncherVariables();
}

// NNS_ROOT_ADDR, given by hand, wins over torchrun's MASTER_ADDR and MASTER_PORT (with or without its agent store):
// it is how a user moves this library's rendezvous off torchrun's port.
TEST(RootAddress, NnsRootAddrWinsOverMasterAddr) {
  for (const char* agentStore : {"False", "True"}) {
    clearLauncherVariables();
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("TORCHELASTIC_RUN_ID", "r", 1);
    setenv("MASTER_ADDR", "10.0.0.1", 1);
    setenv("MASTER_PORT", "29500", 1);
    setenv("NNS_ROOT_ADDR", "127.0.0.1:5000", 1);
    setenv("TORCHELASTIC_USE_AGENT_STORE", agentStore, 1);
    LaunchInfo info;
    std::string error;
    EXPECT_TRUE(nns::core::launchInfoFromEnvironment(&info, &error)) << error;
    EXPECT_EQ(info.rootHost, "127.0.0.1") << "agent store " << agentStore;
    EXPECT_EQ(info.rootPort, 5000) << "agent store " << agentStore;
    EXPECT_EQ(info.rootPortNote, "") << "agent store " << agentStore;
  }
  unsetenv("TORCHELASTIC_USE_AGENT_STORE");
  clearLauncherVariables();
}

// MASTER_PORT is read as strictly, and an empty MASTER_ADDR is named instead of failing later to resolve "".
TEST(RootAddress, MasterAddrAndPortAreCheckedToo) {
  const std::vector<std::tuple<const char*, const char*, const char*>> cases = {
      {"node0", "80x", "MASTER_PORT=80x: the port \"80x\" is not a number"},
      {"node0", "0", "MASTER_PORT=0: the port 0 is not one of 1..65535"},
      {"", "29500", "MASTER_ADDR is set but empty"},
      // A URL or a host:port was taken as a host name, to fail later as one that cannot be resolved.
      // Their ':' was then blamed on missing brackets ("[node0:29500] is not an IPv6 address").
      {"tcp://node0", "29500",
       "MASTER_ADDR=tcp://node0 is not a host name or address: it has a ':' but is not an IPv6 address (a host:port "
       "or a URL?); give the host alone, and the port in MASTER_PORT"},
      {"node0:29500", "29500", "MASTER_ADDR=node0:29500 is not a host name or address: it has a ':'"},
      {"10.0.0.1:29500", "29500", "MASTER_ADDR=10.0.0.1:29500 is not a host name or address: it has a ':'"},
      {"[node0]", "29500", "MASTER_ADDR=[node0] is not a host name or address"},
      // Brackets twice passed as the host "[::1]" and failed later to resolve (found by the parsers' fuzzer).
      {"[[::1]]", "29500", "MASTER_ADDR=[[::1]] is not a host name or address: brackets go once around"},
      {"[::1", "29500", "MASTER_ADDR=[::1 is not a host name or address: brackets go once around"},
  };
  for (const auto& [host, port, why] : cases) {
    clearLauncherVariables();
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("MASTER_ADDR", host, 1);
    setenv("MASTER_PORT", port, 1);
    LaunchInfo info;
    std::string error;
    EXPECT_FALSE(nns::core::launchInfoFromEnvironment(&info, &error)) << host << ":" << port;
    EXPECT_NE(error.find(why), std::string::npos) << error;
  }
  // An IPv6 address bare, as torchrun takes it, or in brackets; a zone too.
  for (const auto& [given, host] :
       std::vector<std::pair<const char*, const char*>>{{"fd78::1", "fd78::1"},
                                                        {"[::1]", "::1"},
                                                        {"fe80::1%eth0", "fe80::1%eth0"},
                                                        {"node-0.cluster", "node-0.cluster"}}) {
    clearLauncherVariables();
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("MASTER_ADDR", given, 1);
    setenv("MASTER_PORT", "29500", 1);
    LaunchInfo info;
    std::string error;
    EXPECT_TRUE(nns::core::launchInfoFromEnvironment(&info, &error)) << given << ": " << error;
    EXPECT_EQ(info.rootHost, host);
    EXPECT_EQ(info.rootPort, 29500);
  }
  clearLauncherVariables();
}

namespace {

struct Outcome {
  std::string error;  // "" when it joined and all-gathered
  int result = 0;     // BootstrapError::result(); -1 for any other exception
};

// Each LaunchInfo's bootstrap on a thread of its own, started `delaysMs` apart (0 where not given).
std::vector<Outcome> outcomes(const std::vector<LaunchInfo>& ranks, std::chrono::milliseconds timeout,
                              const std::vector<int>& delaysMs = {}) {
  std::vector<Outcome> results(ranks.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i) {
    threads.emplace_back([&, i] {
      if (i < delaysMs.size()) std::this_thread::sleep_for(std::chrono::milliseconds(delaysMs[i]));
      try {
        Bootstrap bootstrap(ranks[i], timeout);
        bootstrap.allGather(std::to_string(i));
      } catch (const BootstrapError& e) {
        results[i] = {e.what(), e.result()};
      } catch (const std::exception& e) {
        results[i] = {e.what(), -1};
      }
    });
  }
  for (auto& thread : threads) thread.join();
  return results;
}

constexpr auto kShort = std::chrono::milliseconds(300);

// A socket listening on a free loopback port (another program holding the root port), and that port.
std::pair<int, int> listenerOnAFreePort(int backlog) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 || listen(fd, backlog) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0)
    return {-1, 0};
  return {fd, ntohs(address.sin_port)};
}

}  // namespace

namespace {

// Connects to 127.0.0.1:`port` within 2 s; -1 if nothing listens there by then.
int connectLoopback(int port) {
  for (int tries = 0; tries < 200; ++tries) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<uint16_t>(port));
    if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) return fd;
    if (fd >= 0) close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

// Blocking exchanges with a 2 s receive timeout, for a hand-made peer: false on any failure.
bool sendBytes(int fd, const std::string& bytes) {
  return send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
}
bool recvBytes(int fd, size_t bytes, std::string* got = nullptr) {
  timeval wait{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
  std::string buffer(bytes, '\0');
  size_t have = 0;
  while (have < bytes) {
    const ssize_t n = recv(fd, buffer.data() + have, bytes - have, 0);
    if (n <= 0) return false;
    have += static_cast<size_t>(n);
  }
  if (got != nullptr) *got = buffer;
  return true;
}
std::string lengthPrefixed(const std::string& text) {
  const uint32_t length = static_cast<uint32_t>(text.size());
  return std::string(reinterpret_cast<const char*>(&length), sizeof(length)) + text;
}

// A hand-made rank 1 of 2 (no launcher job: job id 0) connected to rank 0 on `port` and joined (rank 0's 4-byte
// answer read): the socket, or -1 with `problem` set.
int joinAsRankOne(int port, std::string* problem) {
  const int fd = connectLoopback(port);
  if (fd < 0) {
    *problem = "could not reach rank 0";
    return -1;
  }
  struct {
    uint32_t magic = 0x4e4e5342, version = 4;  // the bootstrap's kJoinVersion
    int32_t rank = 1, size = 2;
    uint64_t job = 0;
  } join;
  if (!sendBytes(fd, std::string(reinterpret_cast<const char*>(&join), sizeof(join))) || !recvBytes(fd, 4)) {
    *problem = "the hand-made rank 1 could not join";
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

namespace {

// A hand-made rank 0 on `listener` for one joining rank: reads its join, admits it, reads its part of the
// rendezvous' all-gather, then sends `answer` as it is and waits (up to 10 s) for the rank to close. False, with
// *problem, where the exchange broke before the answer.
bool fakeRankZero(int listener, const std::string& answer, std::string* problem) {
  const int fd = accept(listener, nullptr, nullptr);
  std::string length;
  if (fd < 0 || !recvBytes(fd, 24) || !sendBytes(fd, std::string(4, '\0')) || !recvBytes(fd, 4, &length) ||
      !recvBytes(fd, *reinterpret_cast<const uint32_t*>(length.data())) || !sendBytes(fd, answer)) {
    *problem = "the joining rank did not speak the join and its all-gather part";
    if (fd >= 0) close(fd);
    return false;
  }
  timeval wait{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
  char byte;
  while (recv(fd, &byte, 1, 0) > 0) {
  }
  close(fd);
  return true;
}

// Rank 1 of 2 (timeout 20 s) against fakeRankZero sending `answer`: its error and how long it took.
std::pair<std::string, double> joinAFakeRankZero(const std::string& answer, std::string* problem, int* result) {
  const auto [listener, port] = listenerOnAFreePort(4);
  if (listener < 0) return {"no listener", 0};
  std::thread rankZero([&, listener = listener] { fakeRankZero(listener, answer, problem); });
  const auto start = Clock::now();
  std::string error;
  try {
    Bootstrap bootstrap(LaunchInfo{1, 2, "127.0.0.1", port, "test"}, std::chrono::milliseconds(20000));
  } catch (const BootstrapError& e) {
    error = e.what();
    *result = e.result();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  rankZero.join();
  close(listener);
  return {error, seconds};
}

}  // namespace

// A rank 0 that announces a message larger than any the bootstrap sends (garbage, another program on the port) fails
// the joining rank at once, naming the size, rather than have it allocate 4 GiB and wait out its timeout for them.
TEST(BootstrapErrorCodes, AMessageAnnouncedOverTheLimitFailsAtOnce) {
  const uint32_t huge = 0xfffffff0u;
  std::string problem;
  int result = -1;
  const auto [error, seconds] =
      joinAFakeRankZero(std::string(reinterpret_cast<const char*>(&huge), sizeof(huge)), &problem, &result);
  EXPECT_EQ(problem, "");
  EXPECT_NE(error.find("announced as 4294967280 bytes, over the"), std::string::npos) << error;
  EXPECT_EQ(result, BootstrapError::kRemoteError) << error;
  EXPECT_LT(seconds, 5.0) << error;
}

// An all-gather result whose last part announces more bytes than follow is rank 0's garbage, named as truncated,
// not a shorter part taken as the rank's.
TEST(BootstrapErrorCodes, ATruncatedAllGatherResultIsAnError) {
  std::string packed;
  auto part = [&packed](const std::string& bytes, uint32_t announced) {
    packed.append(reinterpret_cast<const char*>(&announced), sizeof(announced));
    packed += bytes;
  };
  part("zero", 4);
  part("x", 100);
  const auto length = static_cast<uint32_t>(packed.size());
  std::string problem;
  int result = -1;
  // The result, then rank 0's word that every rank has it (an empty message).
  const auto [error, seconds] = joinAFakeRankZero(
      std::string(reinterpret_cast<const char*>(&length), sizeof(length)) + packed + std::string(4, '\0'), &problem,
      &result);
  EXPECT_EQ(problem, "");
  EXPECT_NE(error.find("truncated all-gather from rank 0"), std::string::npos) << error;
  EXPECT_EQ(result, BootstrapError::kRemoteError) << error;
  EXPECT_LT(seconds, 5.0) << error;
}

// A rank that joined, sent its part of an all-gather and then stopped reading (stopped, swapped out, wedged) does
// not hold rank 0 past its timeout: the packed answer (32 MiB here) is larger than the socket buffers, and rank 0's
// send of the rest, blocking once poll said "some room", waited for ever. The hand-made rank 1 speaks the join
// (rank, size, job id 0 for no launcher job) and the machine all-gather the constructor makes.
TEST(BootstrapFailures, ARankThatStopsReadingCannotHoldRankZeroPastItsTimeout) {
  const int port = nns::test::freeLoopbackPort();
  std::atomic<bool> finished{false};
  std::string stuckProblem;
  std::thread stuck([&] {
    const int fd = joinAsRankOne(port, &stuckProblem);
    if (fd < 0) return;
    // Its part of the rendezvous' all-gather: its point-to-point address (a length, then a sockaddr's room), then
    // its machine.
    std::string announced(4 + sizeof(sockaddr_storage), '\0');
    sockaddr_in nowhere{};
    nowhere.sin_family = AF_INET;
    nowhere.sin_port = htons(1);
    nowhere.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const uint32_t length = sizeof(nowhere);
    std::memcpy(announced.data(), &length, sizeof(length));
    std::memcpy(announced.data() + sizeof(length), &nowhere, sizeof(nowhere));
    std::string packed;
    if (!sendBytes(fd, lengthPrefixed(announced + "another machine\n")) || !recvBytes(fd, 4, &packed) ||
        !recvBytes(fd, *reinterpret_cast<const uint32_t*>(packed.data())) || !sendBytes(fd, lengthPrefixed("y")))
      stuckProblem = "the hand-made rank 1 could not join";
    while (!finished) std::this_thread::sleep_for(std::chrono::milliseconds(10));  // and never reads again
    close(fd);
  });
  const auto start = Clock::now();
  std::string error;
  try {
    Bootstrap bootstrap(LaunchInfo{0, 2, "127.0.0.1", port, "test"}, std::chrono::milliseconds(1500));
    bootstrap.allGather(std::string(32u << 20, 'x'));
  } catch (const std::exception& e) {
    error = e.what();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  finished = true;
  stuck.join();
  ASSERT_EQ(stuckProblem, "");
  EXPECT_NE(error.find("timed out sending"), std::string::npos) << error;
  EXPECT_LT(seconds, 5.0) << error;
}

// A joined rank that sends rank 0's failure marker in place of its message's length (a foreign or corrupt peer) is
// garbage from that rank, named as such. Rank 0 read it as its own giving up and failed with "rank 0 gave up:"
// followed by the peer's bytes as the reason.
TEST(BootstrapFailures, AFailureMarkerFromAJoinedRankIsGarbageFromIt) {
  const int port = nns::test::freeLoopbackPort();
  std::string peerProblem;
  std::thread peer([&] {
    const int fd = joinAsRankOne(port, &peerProblem);
    if (fd < 0) return;
    const uint32_t marker = 0xFFFFFFFFu;
    if (!sendBytes(fd, std::string(reinterpret_cast<const char*>(&marker), sizeof(marker)) + lengthPrefixed("hello")))
      peerProblem = "the hand-made rank 1 could not send";
    recvBytes(fd, 1 << 16);  // until rank 0 closes
    close(fd);
  });
  std::string error;
  try {
    Bootstrap bootstrap(LaunchInfo{0, 2, "127.0.0.1", port, "test"}, std::chrono::milliseconds(3000));
  } catch (const std::exception& e) {
    error = e.what();
  }
  peer.join();
  ASSERT_EQ(peerProblem, "");
  EXPECT_NE(error.find("garbage: a failure marker, which only rank 0 sends"), std::string::npos) << error;
  EXPECT_NE(error.find("(from rank 1)"), std::string::npos) << error;
  EXPECT_EQ(error.find("rank 0 gave up: hello"), std::string::npos) << error;
}

// Garbage where rank 0's refusal and its reason belong (a failure marker where the reason's length should be, over
// and over) is an error naming it. Each marker made the reader call itself again, and 4 MB of them overflowed the
// stack.
TEST(BootstrapErrorCodes, MarkersInPlaceOfRankZerosReasonAreAnError) {
  const std::pair<int, int> listener = listenerOnAFreePort(4);
  const int server = listener.first, port = listener.second;
  ASSERT_GE(server, 0) << std::strerror(errno);
  std::thread garbage([server] {
    pollfd ready{server, POLLIN, 0};
    if (poll(&ready, 1, 2000) != 1) return;
    const int fd = accept(server, nullptr, nullptr);
    if (fd < 0) return;
    char join[24];  // magic, version, rank, size, job
    if (recvBytes(fd, sizeof(join))) {
      const uint32_t refused = 2;
      std::string answer(reinterpret_cast<const char*>(&refused), sizeof(refused));
      answer.append(4u << 20, '\xff');
      sendBytes(fd, answer);
    }
    close(fd);
  });
  auto got = outcomes({{1, 2, "127.0.0.1", port, "test"}}, std::chrono::milliseconds(2000));
  garbage.join();
  close(server);
  EXPECT_NE(got[0].error.find("garbage in place of rank 0's reason"), std::string::npos) << got[0].error;
}

// The C API returns result() for a failed creation (docs/collectives.md): a size that differs between the ranks is
// ncclInvalidUsage on the rank refused and on rank 0, which names it; the rank that had joined hears rank 0 give up,
// a remote error. Every one was a plain std::runtime_error before, so every code was ncclSystemError.
TEST(BootstrapErrorCodes, AWrongWorldSizeIsInvalidUsage) {
  const int port = nns::test::freeLoopbackPort();
  auto got = outcomes(
      {{0, 3, "127.0.0.1", port, "test"}, {1, 3, "127.0.0.1", port, "test"}, {2, 4, "127.0.0.1", port, "test"}},
      kShort);
  EXPECT_NE(got[2].error.find("rank 0 expects 3 ranks, and rank 2 says 4"), std::string::npos) << got[2].error;
  EXPECT_EQ(got[2].result, BootstrapError::kInvalidUsage) << got[2].error;
  EXPECT_NE(got[0].error.find("turned away: rank 2 of 4"), std::string::npos) << got[0].error;
  EXPECT_EQ(got[0].result, BootstrapError::kInvalidUsage) << got[0].error;
  EXPECT_NE(got[1].error.find("rank 0 gave up"), std::string::npos) << got[1].error;
  EXPECT_EQ(got[1].result, BootstrapError::kRemoteError) << got[1].error;
}

// A rank given a number another rank has: ncclInvalidUsage on whichever of the two came second, while the job
// itself still forms (the second comes while rank 0 still waits for rank 2).
TEST(BootstrapErrorCodes, ARankNumberGivenTwiceIsInvalidUsage) {
  const int port = nns::test::freeLoopbackPort();
  auto got = outcomes({{0, 3, "127.0.0.1", port, "test"},
                       {1, 3, "127.0.0.1", port, "test"},
                       {1, 3, "127.0.0.1", port, "test"},
                       {2, 3, "127.0.0.1", port, "test"}},
                      std::chrono::milliseconds(2000), {0, 0, 100, 400});
  EXPECT_EQ(got[0].error, "");
  EXPECT_EQ(got[3].error, "");
  const Outcome& second = got[1].error.empty() ? got[2] : got[1];
  EXPECT_TRUE(got[1].error.empty() || got[2].error.empty()) << got[1].error << " / " << got[2].error;
  EXPECT_NE(second.error.find("rank 0 already has a rank 1"), std::string::npos) << second.error;
  EXPECT_EQ(second.result, BootstrapError::kInvalidUsage) << second.error;
}

// A connection that sends part of a join message and closes (an HTTP request line: 16 bytes) is named by what it
// sent: its half-filled fields read as "rank 825184340 of 168636462" in the error.
TEST(BootstrapErrorCodes, AConnectionThatSentPartOfAJoinIsNotCalledARank) {
  const int port = nns::test::freeLoopbackPort();
  std::thread stranger([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const int fd = connectLoopback(port);
    if (fd < 0) return;
    sendBytes(fd, "GET / HTTP/1.0\r\n");
    close(fd);
  });
  auto got = outcomes({{0, 2, "127.0.0.1", port, "test"}}, std::chrono::milliseconds(1500));
  stranger.join();
  EXPECT_NE(got[0].error.find("turned away: a connection that sent 16 of the 24 bytes of a rank's join message: it "
                              "closed"),
            std::string::npos)
      << got[0].error;
  EXPECT_EQ(got[0].error.find("turned away: rank "), std::string::npos) << got[0].error;
}

// A connection that sends bytes that are not a join of this bootstrap (zeros here: they read as "rank 0 of 0") is a
// stranger, closed without an answer: the job still forms when its ranks come, and a rank that never does is a remote
// error naming it. The zeros were a rank with a wrong world size: ncclInvalidUsage, the user blamed for a stray.
TEST(BootstrapErrorCodes, AStrangersBytesAreNotARankWithWrongSettings) {
  for (bool rankOneComes : {true, false}) {
    const int port = nns::test::freeLoopbackPort();
    bool strangerClosed = false;
    std::thread stranger([&] {
      const int fd = connectLoopback(port);
      if (fd < 0) return;
      std::string answer;
      strangerClosed = sendBytes(fd, std::string(24, '\0')) && !recvBytes(fd, 1, &answer);
      close(fd);
    });
    std::vector<LaunchInfo> ranks{{0, 2, "127.0.0.1", port, "test"}};
    if (rankOneComes) ranks.push_back({1, 2, "127.0.0.1", port, "test"});
    auto got = outcomes(ranks, std::chrono::milliseconds(1500), {0, 500});
    stranger.join();
    EXPECT_TRUE(strangerClosed) << "the stranger got an answer or was not closed";
    if (rankOneComes) {
      EXPECT_EQ(got[0].error, "");
      EXPECT_EQ(got[1].error, "");
    } else {
      EXPECT_NE(got[0].error.find("turned away: a connection that is not a rank of this bootstrap"), std::string::npos)
          << got[0].error;
      EXPECT_EQ(got[0].result, BootstrapError::kRemoteError) << got[0].error;
    }
  }
}

// A join of this job that claims rank 0 (rank 0 is the one that listens; no rank joins as it) is refused with the
// reason, and rank 0 goes on waiting for its rank 1, whose absence it reports: the claim was taken as rank 0's first
// member, and the rendezvous ended one rank short.
TEST(BootstrapErrorCodes, AJoinClaimingRankZeroIsRefused) {
  unsetenv("NNS_JOB_ID");
  const int port = nns::test::freeLoopbackPort();
  std::string reply, reason;
  std::thread stranger([&] {
    const int fd = connectLoopback(port);
    if (fd < 0) return;
    const uint64_t job = 0;  // the tests' ranks name no job
    const struct {
      uint32_t magic, version;
      int32_t rank, size;
      uint64_t job;
    } join{0x4e4e5342, 4, 0, 2, job};
    std::string bytes(sizeof(join), '\0');
    std::memcpy(bytes.data(), &join, sizeof(join));
    if (sendBytes(fd, bytes) && recvBytes(fd, 4, &reply)) {
      char text[256];
      const ssize_t n = recv(fd, text, sizeof(text), MSG_WAITALL);
      if (n > 0) reason.assign(text, static_cast<size_t>(n));
    }
    close(fd);
  });
  auto got = outcomes({{0, 2, "127.0.0.1", port, "test"}}, std::chrono::milliseconds(1500));
  stranger.join();
  ASSERT_EQ(reply.size(), 4u) << "no answer to the join";
  uint32_t code = 0;
  std::memcpy(&code, reply.data(), sizeof(code));
  EXPECT_EQ(code, 2u) << "not refused";
  EXPECT_NE(reason.find("rank 0 is not a joining rank of 2"), std::string::npos) << reason;
  EXPECT_NE(got[0].error.find("rank 0 is not a joining rank of 2"), std::string::npos) << got[0].error;
  EXPECT_NE(got[0].error.find("rank(s) 1 did not arrive"), std::string::npos) << got[0].error;
}

// Rank 0 out of descriptors while connections keep coming (a flood of them, a low `ulimit -n`): accept fails with
// EMFILE, and the listener stays readable. Rank 0 pauses accepting instead of spinning on it (30000 failed accepts in
// 3 s, a core busy), and its error names the failure. Run in a child process, whose descriptor limit is lowered.
TEST(BootstrapFailures, RankZeroOutOfDescriptorsDoesNotSpinAndSaysSo) {
  const int port = nns::test::freeLoopbackPort();
  int report[2];
  ASSERT_EQ(pipe(report), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(report[0]);
    // Room for the listener and a few connections, not for the 20 the parent makes: new descriptors take the lowest
    // free numbers below the limit, so the limit is where the 6th free number lies.
    int end = 0;
    for (int free = 0; free < 6; ++end)
      if (fcntl(end, F_GETFD) < 0) ++free;
    const rlimit limit{static_cast<rlim_t>(end), static_cast<rlim_t>(end)};
    setrlimit(RLIMIT_NOFILE, &limit);
    std::string error;
    try {
      Bootstrap bootstrap(LaunchInfo{0, 2, "127.0.0.1", port, "test"}, std::chrono::milliseconds(2000));
    } catch (const std::exception& e) {
      error = e.what();
    }
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    const double cpu = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                       static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
    const std::string line = std::to_string(cpu) + " " + error;
    (void)!write(report[1], line.data(), line.size());
    _exit(0);
  }
  close(report[1]);
  // The first once rank 0 listens, then 19 more without waiting for each (its accept queue holds 2).
  std::vector<int> flood{connectLoopback(port)};
  for (int i = 0; i < 19; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<uint16_t>(port));
    (void)connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    flood.push_back(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::string line;
  char buffer[4096];
  for (ssize_t n; (n = read(report[0], buffer, sizeof(buffer))) > 0;) line.append(buffer, static_cast<size_t>(n));
  close(report[0]);
  int status = 0;
  waitpid(child, &status, 0);
  for (int fd : flood) close(fd);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child rank 0 ended with status " << status;
  ASSERT_GE(flood.front(), 0) << "rank 0 never listened";
  EXPECT_LT(std::atof(line.c_str()), 0.5) << "CPU seconds in a 2 s wait: " << line;
  EXPECT_NE(line.find("accepting failed: Too many open files"), std::string::npos) << line;
}

// A resolver that fails for a while (EAI_AGAIN three times: a DNS server timing out while a job's ranks start) is
// retried until the timeout: the rank joins. It failed at once ("cannot resolve root address ...: Temporary failure
// in name resolution").
TEST(BootstrapFailures, ATemporaryResolverFailureIsRetried) {
  const int port = nns::test::freeLoopbackPort();
  auto got = outcomes({{0, 2, "127.0.0.1", port, "test"}, {1, 2, "nns-flaky-dns.test", port, "test"}},
                      std::chrono::milliseconds(5000));
  EXPECT_EQ(got[0].error, "");
  EXPECT_EQ(got[1].error, "");
}

// A rank that never arrives, and a rank 0 that never listens: remote errors (a peer), on every rank that waited.
TEST(BootstrapErrorCodes, AMissingRankAndAnUnreachableRootAreRemoteErrors) {
  const int port = nns::test::freeLoopbackPort();
  auto missing = outcomes({{0, 3, "127.0.0.1", port, "test"}, {1, 3, "127.0.0.1", port, "test"}}, kShort);
  EXPECT_NE(missing[0].error.find("rank(s) 2 did not arrive within 300 ms"), std::string::npos) << missing[0].error;
  EXPECT_EQ(missing[0].result, BootstrapError::kRemoteError) << missing[0].error;
  EXPECT_NE(missing[1].error.find("rank 0 gave up: rank(s) 2 did not arrive"), std::string::npos) << missing[1].error;
  EXPECT_EQ(missing[1].result, BootstrapError::kRemoteError) << missing[1].error;

  auto unreachable = outcomes({{1, 2, "127.0.0.1", nns::test::freeLoopbackPort(), "test"}}, kShort);
  EXPECT_NE(unreachable[0].error.find("rank 1 could not reach rank 0 at 127.0.0.1:"), std::string::npos)
      << unreachable[0].error;
  // Nothing listens: the error says what that can mean, a latecomer after a complete rendezvous included.
  EXPECT_NE(unreachable[0].error.find("Connection refused (nothing listens there: rank 0 has not started"),
            std::string::npos)
      << unreachable[0].error;
  EXPECT_NE(unreachable[0].error.find("it has all 2 ranks already and stopped listening"), std::string::npos)
      << unreachable[0].error;
  EXPECT_EQ(unreachable[0].result, BootstrapError::kRemoteError) << unreachable[0].error;
}

// A root port another program listens on: rank 0 cannot set up, this rank's own failure (ncclSystemError).
TEST(BootstrapErrorCodes, ARootPortInUseIsASystemErrorOnRankZero) {
  const auto [holder, port] = listenerOnAFreePort(1);
  ASSERT_GE(holder, 0) << std::strerror(errno);
  auto got = outcomes({{0, 2, "127.0.0.1", port, "test"}}, kShort);
  close(holder);
  EXPECT_NE(got[0].error.find("rank 0 cannot listen on 127.0.0.1:" + std::to_string(port) + ": Address already in use"),
            std::string::npos)
      << got[0].error;
  EXPECT_EQ(got[0].result, BootstrapError::kSystemError) << got[0].error;
}

// Another program on the root port (a web server) answers the join with its own protocol: the rank says that what
// answered is no rank 0 of this bootstrap, quoting it, instead of "rank 0 ... refused it: oversized bootstrap
// message" (its first 4 bytes, "HTTP", read as a message length).
TEST(BootstrapErrorCodes, AForeignServiceOnTheRootPortIsNamedAsSuch) {
  const std::pair<int, int> listener = listenerOnAFreePort(4);
  const int server = listener.first, port = listener.second;  // plain variables: the thread below captures one
  ASSERT_GE(server, 0) << std::strerror(errno);
  // Answers one connection at once, then holds it until the rank closes it (2 s at most: the test never hangs).
  std::thread http([server] {
    pollfd ready{server, POLLIN, 0};
    if (poll(&ready, 1, 2000) != 1) return;
    const int fd = accept(server, nullptr, nullptr);
    if (fd < 0) return;
    const char answer[] = "HTTP/1.0 200 OK\r\n\r\n";
    (void)send(fd, answer, sizeof(answer) - 1, MSG_NOSIGNAL);
    char sink[256];
    pollfd peer{fd, POLLIN, 0};
    while (poll(&peer, 1, 2000) == 1 && recv(fd, sink, sizeof(sink), 0) > 0) {
    }
    close(fd);
  });
  auto got = outcomes({{1, 2, "127.0.0.1", port, "test"}}, kShort);
  http.join();
  close(server);
  EXPECT_NE(got[0].error.find("rank 1: what answered at 127.0.0.1:" + std::to_string(port) +
                              " does not speak this bootstrap (not an nccl-net-sdk rank 0: another program holds "
                              "the port?); it answered \"HTTP"),
            std::string::npos)
      << got[0].error;
  EXPECT_EQ(got[0].error.find("oversized"), std::string::npos) << got[0].error;
  EXPECT_EQ(got[0].result, BootstrapError::kInvalidUsage) << got[0].error;
}

// A timeout names the first 32 missing ranks and counts the rest (a 4096-rank job missing most printed them all).
TEST(BootstrapErrorCodes, AMissingRankListNamesThirtyTwoAndCountsTheRest) {
  const int port = nns::test::freeLoopbackPort();
  auto got = outcomes({{0, 41, "127.0.0.1", port, "test"}}, kShort);
  EXPECT_NE(got[0].error.find("rank(s) 1,2,3,"), std::string::npos) << got[0].error;
  EXPECT_NE(got[0].error.find(",31,32 and 8 more did not arrive within 300 ms"), std::string::npos) << got[0].error;
}

// A LaunchInfo made in code (not from the environment) without a usable root address is refused as such.
TEST(BootstrapErrorCodes, ALaunchInfoWithoutARootAddressIsInvalidUsage) {
  auto got = outcomes({{1, 2, "", 29500, "test"},
                       {1, 2, "127.0.0.1", 0, "test"},
                       {2, 2, "127.0.0.1", 1, "test"},
                       {0, INT_MAX, "127.0.0.1", 1, "test"}},
                      kShort);
  for (const auto& one : got) EXPECT_EQ(one.result, BootstrapError::kInvalidUsage) << one.error;
  EXPECT_NE(got[0].error.find("no root address: host \"\", port 29500"), std::string::npos) << got[0].error;
  EXPECT_NE(got[2].error.find("rank 2 of 2: a rank is 0..size-1 of a size of 1 to 16777216"), std::string::npos)
      << got[2].error;
  // Refused before rank 0 reserves room for every rank (it raised the descriptor limit and allocated 8 GiB).
  EXPECT_NE(got[3].error.find("rank 0 of 2147483647: a rank is 0..size-1"), std::string::npos) << got[3].error;
}

namespace {

// The local address of the socket listening on `port` (/proc/net/tcp and tcp6, as ss reads them), in their hex form:
// "0100007F" for 127.0.0.1, "00000000" for every IPv4 address, 32 digits for IPv6. "" when none listens yet.
std::string listeningAddress(int port) {
  char portHex[8];
  std::snprintf(portHex, sizeof(portHex), "%04X", port);
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    FILE* file = std::fopen(table, "r");
    if (file == nullptr) continue;
    char line[512];
    std::string found;
    while (found.empty() && std::fgets(line, sizeof(line), file) != nullptr) {
      char local[64] = "", remote[64] = "", state[8] = "";
      if (std::sscanf(line, " %*d: %63s %63s %7s", local, remote, state) != 3 || std::strcmp(state, "0A") != 0)
        continue;  // not a LISTEN entry
      const std::string address = local;
      const size_t colon = address.find(':');
      if (colon != std::string::npos && address.substr(colon + 1) == portHex) found = address.substr(0, colon);
    }
    std::fclose(file);
    if (!found.empty()) return found;
  }
  return "";
}

}  // namespace

// A root named "localhost" is on this machine for every rank: rank 0 listens on loopback only, not on every address
// (as for other names), so the job cannot be joined from another host. The ranks still meet.
TEST(RootAddress, ARootNamedLocalhostListensOnLoopbackOnly) {
  const int port = nns::test::freeLoopbackPort();
  auto run = std::async(std::launch::async, [port] {
    return outcomes({{0, 2, "localhost", port, "test"}, {1, 2, "localhost", port, "test"}},
                    std::chrono::milliseconds(10000), {0, 1500});
  });
  std::string address;
  for (int i = 0; i < 100 && address.empty(); ++i) {
    address = listeningAddress(port);
    if (address.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const auto got = run.get();
  EXPECT_EQ(got[0].error, "");
  EXPECT_EQ(got[1].error, "");
  // 127.0.0.1, or ::1 where localhost resolves to it first.
  EXPECT_TRUE(address == "0100007F" || address == "00000000000000000000000001000000") << "listening on " << address;
}

// A root that takes the join (answers kJoined) and then says nothing: the rank gives up after its timeouts, saying
// which wait it was (its part sent, the result never came), not only "timed out receiving (rank 0)".
TEST(BootstrapErrorCodes, ARootThatJoinsARankAndFallsSilentIsNamedByTheWait) {
  const std::pair<int, int> listener = listenerOnAFreePort(4);
  const int server = listener.first, port = listener.second;
  ASSERT_GE(server, 0) << std::strerror(errno);
  // Reads the 24-byte join, answers 0 (joined), then drains the connection until the rank closes it (3 s at most).
  std::thread silent([server] {
    pollfd ready{server, POLLIN, 0};
    if (poll(&ready, 1, 2000) != 1) return;
    const int fd = accept(server, nullptr, nullptr);
    if (fd < 0) return;
    char join[24];
    size_t got = 0;
    pollfd peer{fd, POLLIN, 0};
    while (got < sizeof(join) && poll(&peer, 1, 2000) == 1) {
      const ssize_t n = recv(fd, join + got, sizeof(join) - got, 0);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    const uint32_t joined = 0;
    (void)send(fd, &joined, sizeof(joined), MSG_NOSIGNAL);
    char sink[256];
    while (poll(&peer, 1, 3000) == 1 && recv(fd, sink, sizeof(sink), 0) > 0) {
    }
    close(fd);
  });
  auto got = outcomes({{1, 2, "127.0.0.1", port, "test"}}, kShort);
  silent.join();
  close(server);
  EXPECT_NE(got[0].error.find("(rank 0, waiting for the all-gather's result: this rank's part was sent)"),
            std::string::npos)
      << got[0].error;
  EXPECT_EQ(got[0].result, BootstrapError::kRemoteError) << got[0].error;
}
