// c_api_test.cc: the C API (nns/nns.h) through libnns.so: a unique id made on one rank, communicators made from it
// in threads, errors with codes and text, groups, and an abort seen by the peers.
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "../support/sanitizer.hpp"
#include "../support/thread_start_double.hpp"
#include "free_port.hpp"
#include "nns/nns.h"

namespace {

// A unique id for ranks of this process over the socket plugin on loopback.
nnsUniqueId loopbackId() {
  setenv("NCCL_NET_PLUGIN", "socket", 1);
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  setenv("NNS_ROOT_ADDR", ("127.0.0.1:" + std::to_string(nns::test::freeLoopbackPort())).c_str(), 1);
  nnsUniqueId id;
  std::memset(&id, 0, sizeof(id));  // a failure leaves an id no init accepts
  EXPECT_EQ(nnsGetUniqueId(&id), ncclSuccess);
  unsetenv("NNS_ROOT_ADDR");
  return id;
}

// For a unique id whose port nnsGetUniqueId picks itself (no NNS_ROOT_ADDR), on loopback, over the socket plugin.
void pickPortOnLoopback() {
  unsetenv("NNS_ROOT_ADDR");
  setenv("NCCL_NET_PLUGIN", "socket", 1);
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
}

// One thread drives both ranks: a grouped int32 sum of 1s and 2s gives 3 everywhere; then both are destroyed.
void expectGroupedSumAndDestroy(nnsComm_t (&comms)[2]) {
  std::vector<std::vector<int>> data{std::vector<int>(1000, 1), std::vector<int>(1000, 2)};
  ASSERT_EQ(nnsGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r)  // EXPECT: the group is ended whatever happens, or later tests would run inside it
    EXPECT_EQ(nnsAllReduce(data[r].data(), data[r].data(), 1000, ncclInt32, ncclSum, comms[r], nullptr), ncclSuccess);
  ASSERT_EQ(nnsGroupEnd(), ncclSuccess) << nnsGetLastError(nullptr);
  EXPECT_EQ(data[0][999], 3);
  EXPECT_EQ(data[1][0], 3);
  for (nnsComm_t comm : comms) EXPECT_EQ(nnsCommDestroy(comm), ncclSuccess);
}

// The communicator reports no asynchronous error (what was refused left it usable); then it is destroyed.
void expectHealthyThenDestroy(nnsComm_t comm) {
  ncclResult_t async = ncclInternalError;
  EXPECT_EQ(nnsCommGetAsyncError(comm, &async), ncclSuccess);
  EXPECT_EQ(async, ncclSuccess);
  EXPECT_EQ(nnsCommDestroy(comm), ncclSuccess);
}

// Runs `body(rank, comm)` on `ranks` threads, each with its communicator made from one unique id, over the socket
// plugin or `plugin`.
template <class Body>
void onRanks(int ranks, const Body& body, const char* plugin = nullptr) {
  const nnsUniqueId id = loopbackId();
  if (plugin != nullptr) setenv("NCCL_NET_PLUGIN", plugin, 1);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      nnsComm_t comm = nullptr;
      ASSERT_EQ(nnsCommInitRank(&comm, ranks, id, r), ncclSuccess) << nnsGetLastError(nullptr);
      body(r, comm);
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace

TEST(CApi, ArgumentErrorsAreCodesWithText) {
  int version = 0;
  EXPECT_EQ(nnsGetVersion(&version), ncclSuccess);
  EXPECT_EQ(version, NNS_VERSION_CODE);
  EXPECT_EQ(nnsGetVersion(nullptr), ncclInvalidArgument);
  EXPECT_EQ(nnsGroupEnd(), ncclInvalidUsage);
  EXPECT_NE(std::string(nnsGetLastError(nullptr)).find("without nnsGroupStart"), std::string::npos);
  nnsUniqueId junk;
  std::memset(&junk, 0, sizeof(junk));
  nnsComm_t comm = nullptr;
  EXPECT_EQ(nnsCommInitRank(&comm, 2, junk, 0), ncclInvalidArgument);
  EXPECT_NE(std::string(nnsGetLastError(nullptr)).find("host:port"), std::string::npos);
  EXPECT_EQ(nnsCommInitRank(&comm, 2, junk, 2), ncclInvalidArgument);
  EXPECT_STREQ(nnsGetLastError(nullptr), "rank 2 is not in 0..1 (nranks 2)");  // was "rank 2 of 2"
  EXPECT_EQ(nnsCommInitRank(&comm, 0, junk, 0), ncclInvalidArgument);
  EXPECT_STREQ(nnsGetLastError(nullptr), "nranks 0: at least 1");
  EXPECT_EQ(nnsCommInitRank(&comm, INT_MAX, junk, 0), ncclInvalidArgument);
  EXPECT_STREQ(nnsGetLastError(nullptr), "nranks 2147483647: at most 16777216");
  float x = 0;
  EXPECT_EQ(nnsAllReduce(&x, &x, 1, ncclFloat32, ncclSum, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_STRNE(nnsGetErrorString(ncclRemoteError), "");
}

// The pointer nnsGetLastError gives stays a string, as NCCL's does, when later calls fail with longer texts (it pointed
// into a string the next failure reallocated: ASan's heap-use-after-free); its text changes at the next
// nnsGetLastError only, and a text past the buffer is cut with a mark.
TEST(CApi, TheLastErrorsPointerOutlivesLaterFailures) {
  nnsUniqueId junk;
  std::memset(&junk, 0, sizeof(junk));
  nnsComm_t comm = nullptr;
  EXPECT_EQ(nnsCommInitRank(&comm, 0, junk, 0), ncclInvalidArgument);
  const char* saved = nnsGetLastError(nullptr);
  EXPECT_STREQ(saved, "nranks 0: at least 1");
  EXPECT_EQ(nnsCommInitRank(&comm, 2, junk, 2), ncclInvalidArgument);
  EXPECT_EQ(nnsCommInitRank(&comm, INT_MAX, junk, 0), ncclInvalidArgument);
  EXPECT_STREQ(saved, "nranks 0: at least 1") << "changed before the next nnsGetLastError";
  EXPECT_STREQ(nnsGetLastError(nullptr), "nranks 2147483647: at most 16777216");
  EXPECT_STREQ(saved, "nranks 2147483647: at most 16777216") << "one buffer per thread, as NCCL's";
  // A plugin name of 6000 bytes: the refusal quotes it, past the 4095 bytes handed out.
  const std::string name = "nns-" + std::string(6000, 'x');
  setenv("NCCL_NET_PLUGIN", name.c_str(), 1);
  nnsUniqueId id;
  ASSERT_EQ(nnsGetUniqueId(&id), ncclSuccess);
  EXPECT_NE(nnsCommInitRank(&comm, 1, id, 0), ncclSuccess);
  unsetenv("NCCL_NET_PLUGIN");
  const std::string text = nnsGetLastError(nullptr);
  EXPECT_EQ(text.size(), 4095u);
  EXPECT_EQ(text.substr(text.size() - 6), " [...]") << text.substr(0, 200);
  EXPECT_NE(text.find("nns-xxxx"), std::string::npos) << text.substr(0, 200);
}

// A refusal is the code and nnsGetLastError only; on stderr too (NNS WARN) when NNS_DEBUG or NCCL_DEBUG asks for
// warnings, as NCCL prints its WARN lines only then.
TEST(CApi, RefusalsGoToStderrOnlyWhenWarningsAreAskedFor) {
  unsetenv("NNS_DEBUG");
  unsetenv("NCCL_DEBUG");
  testing::internal::CaptureStderr();
  EXPECT_EQ(nnsGetVersion(nullptr), ncclInvalidArgument);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  for (const char* level : {"WARN", "info"}) {
    setenv("NCCL_DEBUG", level, 1);
    testing::internal::CaptureStderr();
    EXPECT_EQ(nnsGetVersion(nullptr), ncclInvalidArgument);
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "NNS WARN version is NULL\n") << "NCCL_DEBUG=" << level;
  }
  // NNS_DEBUG, where it names a level, wins over NCCL_DEBUG (both ways), as for every other line; a word that is no
  // level leaves it to NCCL_DEBUG.
  const struct {
    const char* nns;
    const char* nccl;
    bool shown;
  } cases[] = {{"VERSION", "WARN", false},
               {"WARN", "VERSION", true},
               {"abort", nullptr, true},
               {"bogus", "INFO", true},
               {"bogus", nullptr, false}};
  for (const auto& c : cases) {
    setenv("NNS_DEBUG", c.nns, 1);
    if (c.nccl != nullptr) setenv("NCCL_DEBUG", c.nccl, 1);
    testing::internal::CaptureStderr();
    EXPECT_EQ(nnsGetVersion(nullptr), ncclInvalidArgument);
    EXPECT_EQ(testing::internal::GetCapturedStderr(), c.shown ? "NNS WARN version is NULL\n" : "")
        << "NNS_DEBUG=" << c.nns << " NCCL_DEBUG=" << (c.nccl != nullptr ? c.nccl : "(unset)");
    unsetenv("NCCL_DEBUG");
  }
  unsetenv("NNS_DEBUG");
}

TEST(CApi, CollectivesAndAGroupedRingExchangeOnThreeRanks) {
  onRanks(3, [](int rank, nnsComm_t comm) {
    int size = 0;
    ASSERT_EQ(nnsCommCount(comm, &size), ncclSuccess);
    std::vector<double> data(777, rank + 1.0);
    ASSERT_EQ(nnsAllReduce(data.data(), data.data(), data.size(), ncclFloat64, ncclMax, comm, nullptr), ncclSuccess);
    EXPECT_EQ(data[776], 3.0);
    std::vector<int> gathered(3 * 5), mine(5, rank);
    ASSERT_EQ(nnsAllGather(mine.data(), gathered.data(), 5, ncclInt32, comm, nullptr), ncclSuccess);
    EXPECT_EQ(gathered[14], 2);
    // A group with a collective between point-to-point runs: all run at nnsGroupEnd, in order.
    std::vector<int> out(9, rank), in(9, -1), bcast(4, rank == 1 ? 42 : 0);
    ASSERT_EQ(nnsGroupStart(), ncclSuccess);
    ASSERT_EQ(nnsSend(out.data(), out.size(), ncclInt32, (rank + 1) % 3, comm, nullptr), ncclSuccess);
    ASSERT_EQ(nnsRecv(in.data(), in.size(), ncclInt32, (rank + 2) % 3, comm, nullptr), ncclSuccess);
    ASSERT_EQ(nnsBroadcast(bcast.data(), bcast.data(), bcast.size(), ncclInt32, 1, comm, nullptr), ncclSuccess);
    EXPECT_EQ(in[0], -1) << "nothing runs before nnsGroupEnd";
    ASSERT_EQ(nnsGroupEnd(), ncclSuccess) << nnsGetLastError(nullptr);
    EXPECT_EQ(in[8], (rank + 2) % 3);
    EXPECT_EQ(bcast[3], 42);
    expectHealthyThenDestroy(comm);
  });
}

// nnsRedOpCreatePreMulSum as ncclRedOpCreatePreMulSum: each rank's input times its own scalar, then summed, with
// allreduce, reduce and reduce-scatter; an immediate scalar is read at creation, ncclScalarDevice's when the call
// runs (host memory here), a call queued in a group keeps the op it was given; the op is for its datatype and
// communicator only (numbers are the process's, so another communicator's op is never taken for it), a built-in op
// cannot be destroyed, a destroyed one is refused, and its number is reused.
TEST(CApi, PremultipliedSumsAsNcclRedOpCreatePreMulSum) {
  onRanks(3, [](int rank, nnsComm_t comm) {
    // Rank r multiplies its input r + 1 by (r + 1) / 2: the sum of (r + 1)^2 / 2 is 7.
    double weight = (rank + 1) / 2.0;
    ncclRedOp_t immediate = ncclSum, pointed = ncclSum;
    ASSERT_EQ(nnsRedOpCreatePreMulSum(&immediate, &weight, ncclFloat64, ncclScalarHostImmediate, comm), ncclSuccess)
        << nnsGetLastError(nullptr);
    EXPECT_GE(static_cast<int>(immediate), static_cast<int>(ncclNumOps));
    ASSERT_EQ(nnsRedOpCreatePreMulSum(&pointed, &weight, ncclFloat64, ncclScalarDevice, comm), ncclSuccess);
    EXPECT_NE(immediate, pointed);
    // Another communicator's op (each has one of its own): refused in a call and in a destroy, both ways, however
    // the two were numbered (per communicator, both would be the first op, and one was taken for the other).
    double x = 1, y = 0;
    nnsComm_t other = nullptr;
    ASSERT_EQ(nnsCommSplit(comm, 0, rank, &other, nullptr), ncclSuccess) << nnsGetLastError(nullptr);
    ncclRedOp_t others = ncclSum;
    ASSERT_EQ(nnsRedOpCreatePreMulSum(&others, &weight, ncclFloat64, ncclScalarHostImmediate, other), ncclSuccess);
    EXPECT_EQ(nnsAllReduce(&x, &y, 1, ncclFloat64, pointed, other, nullptr), ncclInvalidArgument);
    EXPECT_NE(std::string(nnsGetLastError(nullptr)).find("nor one made on this communicator"), std::string::npos)
        << nnsGetLastError(nullptr);
    EXPECT_EQ(nnsAllReduce(&x, &y, 1, ncclFloat64, others, comm, nullptr), ncclInvalidArgument);
    EXPECT_EQ(nnsRedOpDestroy(others, comm), ncclInvalidArgument);
    EXPECT_EQ(nnsRedOpDestroy(pointed, other), ncclInvalidArgument);
    EXPECT_EQ(nnsCommDestroy(other), ncclSuccess);  // its op goes with it
    weight = 1.0;  // the immediate op keeps (r + 1) / 2; the pointed one reads 1 from now on
    std::vector<double> in(1001, rank + 1.0), out(1001), block(1001 / 3 * 3, rank + 1.0), part(1001 / 3);
    ASSERT_EQ(nnsAllReduce(in.data(), out.data(), in.size(), ncclFloat64, immediate, comm, nullptr), ncclSuccess)
        << nnsGetLastError(nullptr);
    EXPECT_EQ(out.front(), 7.0);
    EXPECT_EQ(out.back(), 7.0);
    ASSERT_EQ(nnsAllReduce(in.data(), out.data(), in.size(), ncclFloat64, pointed, comm, nullptr), ncclSuccess);
    EXPECT_EQ(out.back(), 6.0) << "1 + 2 + 3: the scalar read when the call ran";
    ASSERT_EQ(nnsReduceScatter(block.data(), part.data(), part.size(), ncclFloat64, immediate, comm, nullptr),
              ncclSuccess);
    EXPECT_EQ(part.back(), 7.0);
    ASSERT_EQ(nnsReduce(in.data(), out.data(), in.size(), ncclFloat64, immediate, 2, comm, nullptr), ncclSuccess);
    if (rank == 2) {
      EXPECT_EQ(out.front(), 7.0);
    }
    // Integers wrap as prod does: 3 x 100 on every rank, summed, is 900.
    int32_t three = 3;
    ncclRedOp_t integer = ncclSum;
    ASSERT_EQ(nnsRedOpCreatePreMulSum(&integer, &three, ncclInt32, ncclScalarHostImmediate, comm), ncclSuccess);
    int32_t hundred = 100, total = 0;
    ASSERT_EQ(nnsAllReduce(&hundred, &total, 1, ncclInt32, integer, comm, nullptr), ncclSuccess);
    EXPECT_EQ(total, 900);
    // Queued in a group, then destroyed before nnsGroupEnd: the call keeps the op as it was.
    ASSERT_EQ(nnsGroupStart(), ncclSuccess);
    ASSERT_EQ(nnsAllReduce(in.data(), out.data(), in.size(), ncclFloat64, immediate, comm, nullptr), ncclSuccess);
    ASSERT_EQ(nnsRedOpDestroy(immediate, comm), ncclSuccess);
    ASSERT_EQ(nnsGroupEnd(), ncclSuccess) << nnsGetLastError(nullptr);
    EXPECT_EQ(out.back(), 7.0);
    // Refusals: another datatype, a destroyed op, a built-in op, no scalar, an unknown residence.
    EXPECT_EQ(nnsAllReduce(in.data(), out.data(), 1, ncclFloat32, pointed, comm, nullptr), ncclInvalidArgument);
    EXPECT_NE(std::string(nnsGetLastError(nullptr)).find("was made for double, not for float"), std::string::npos)
        << nnsGetLastError(nullptr);
    EXPECT_EQ(nnsAllReduce(in.data(), out.data(), 1, ncclFloat64, immediate, comm, nullptr), ncclInvalidArgument);
    EXPECT_EQ(nnsRedOpDestroy(immediate, comm), ncclInvalidArgument);
    EXPECT_EQ(nnsRedOpDestroy(ncclSum, comm), ncclInvalidArgument);
    ncclRedOp_t unused = ncclSum;
    EXPECT_EQ(nnsRedOpCreatePreMulSum(&unused, nullptr, ncclFloat64, ncclScalarHostImmediate, comm),
              ncclInvalidArgument);
    EXPECT_EQ(nnsRedOpCreatePreMulSum(&unused, &weight, ncclFloat64, static_cast<ncclScalarResidence_t>(7), comm),
              ncclInvalidArgument);
    // A destroyed op's number is given again: made and destroyed 1000 times, the numbers stay few (the other ranks'
    // threads make ops of their own meanwhile).
    ncclRedOp_t again = ncclSum;
    int highest = 0;
    for (int k = 0; k < 1000; ++k) {
      ASSERT_EQ(nnsRedOpCreatePreMulSum(&again, &weight, ncclFloat64, ncclScalarHostImmediate, comm), ncclSuccess);
      highest = std::max(highest, static_cast<int>(again));
      ASSERT_EQ(nnsRedOpDestroy(again, comm), ncclSuccess);
    }
    EXPECT_LT(highest, ncclNumOps + 32);
    ASSERT_EQ(nnsRedOpCreatePreMulSum(&again, &weight, ncclFloat64, ncclScalarHostImmediate, comm), ncclSuccess);
    ASSERT_EQ(nnsAllReduce(in.data(), out.data(), in.size(), ncclFloat64, again, comm, nullptr), ncclSuccess);
    EXPECT_EQ(out.back(), 1.0 + 2.0 + 3.0);
    for (ncclRedOp_t op : {again, pointed, integer}) EXPECT_EQ(nnsRedOpDestroy(op, comm), ncclSuccess);
    expectHealthyThenDestroy(comm);
  });
}

// A destroyed communicator's premultiplied sums free their numbers at once (they were freed only when the handle's own
// bytes went, 4096 destroys later): op numbers of a program that makes a communicator per phase stay few, as NCCL's.
TEST(CApi, ADestroyedCommunicatorsOpsFreeTheirNumbers) {
  setenv("NCCL_NET_PLUGIN", "socket", 1);
  std::vector<int> first;
  for (int round = 0; round < 4; ++round) {
    nnsUniqueId id;
    ASSERT_EQ(nnsGetUniqueId(&id), ncclSuccess);
    nnsComm_t comm = nullptr;
    ASSERT_EQ(nnsCommInitRank(&comm, 1, id, 0), ncclSuccess) << nnsGetLastError(nullptr);
    double weight = 2;
    ncclRedOp_t op = ncclSum;
    ASSERT_EQ(nnsRedOpCreatePreMulSum(&op, &weight, ncclFloat64, ncclScalarHostImmediate, comm), ncclSuccess);
    first.push_back(static_cast<int>(op));  // not destroyed: the communicator's destruction frees it
    ASSERT_EQ(nnsCommDestroy(comm), ncclSuccess);
  }
  EXPECT_EQ(first, std::vector<int>(4, first[0]));
}

TEST(CApi, RegisteredBuffersGiveTheSameResultsAndDeregisterOnce) {
  onRanks(3, [](int rank, nnsComm_t comm) {
    // 300001 floats: many 32 KiB pieces per ring step, an odd count.
    std::vector<float> in(300001), out(in.size(), -1.0f);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>((rank + 1) * (i % 97));
    void* inHandle = nullptr;
    void* outHandle = nullptr;
    ASSERT_EQ(nnsCommRegister(comm, in.data(), in.size() * sizeof(float), &inHandle), ncclSuccess)
        << nnsGetLastError(comm);
    ASSERT_EQ(nnsCommRegister(comm, out.data(), out.size() * sizeof(float), &outHandle), ncclSuccess);
    ASSERT_EQ(nnsAllReduce(in.data(), out.data(), in.size(), ncclFloat32, ncclSum, comm, nullptr), ncclSuccess)
        << nnsGetLastError(nullptr);
    for (size_t i = 0; i < out.size(); i += 1013) ASSERT_EQ(out[i], 6.0f * (i % 97)) << i;
    ASSERT_EQ(out.back(), 6.0f * ((out.size() - 1) % 97));
    // In place, in registered memory; then an all-gather whose receives land in the registered output directly.
    ASSERT_EQ(nnsAllReduce(out.data(), out.data(), out.size(), ncclFloat32, ncclMax, comm, nullptr), ncclSuccess);
    ASSERT_EQ(out[96], 6.0f * 96);
    ASSERT_EQ(nnsAllGather(in.data(), out.data(), in.size() / 3, ncclFloat32, comm, nullptr), ncclSuccess);
    for (int r = 0; r < 3; ++r) ASSERT_EQ(out[r * (in.size() / 3) + 5], (r + 1) * 5.0f);
    ASSERT_EQ(nnsCommDeregister(comm, inHandle), ncclSuccess);
    EXPECT_EQ(nnsCommDeregister(comm, inHandle), ncclInvalidArgument);
    EXPECT_NE(std::string(nnsGetLastError(nullptr)).find("not a registration"), std::string::npos)
        << nnsGetLastError(nullptr);
    ASSERT_EQ(nnsCommDeregister(comm, outHandle), ncclSuccess);
    EXPECT_EQ(nnsCommRegister(comm, nullptr, 8, &inHandle), ncclInvalidArgument);
    // Memory that cannot be there: a size that wraps past the address space's end (it matched no buffer and was taken),
    // one far past the mapped input (it would cover every later buffer), and nothing mapped at all.
    auto refusedRange = [&](void* data, size_t bytes, const char* why) {
      void* handle = nullptr;
      EXPECT_EQ(nnsCommRegister(comm, data, bytes, &handle), ncclInvalidArgument) << bytes;
      EXPECT_NE(std::string(nnsGetLastError(nullptr)).find(why), std::string::npos) << nnsGetLastError(nullptr);
      EXPECT_EQ(handle, nullptr);
    };
    refusedRange(in.data(), SIZE_MAX, "past the end of the address space");
    refusedRange(in.data(), size_t{1} << 50, "not all mapped");
    refusedRange(reinterpret_cast<void*>(uintptr_t{4096}), 4096, "not all mapped");
    // Unregistered again: the same call through the slots.
    ASSERT_EQ(nnsAllReduce(in.data(), out.data(), in.size(), ncclFloat32, ncclSum, comm, nullptr), ncclSuccess);
    ASSERT_EQ(out[1000], 6.0f * (1000 % 97));
    EXPECT_EQ(nnsCommDestroy(comm), ncclSuccess);
  });
}

TEST(CApi, AnAbortFailsThePeersWithARemoteError) {
  std::atomic<int> healthy{0};
  onRanks(2, [&](int rank, nnsComm_t comm) {
    std::vector<float> data(1 << 18, 1.0f);
    ASSERT_EQ(nnsAllReduce(data.data(), data.data(), data.size(), ncclFloat32, ncclSum, comm, nullptr), ncclSuccess);
    // An allreduce returns on one rank before the other has seen its last send complete: abort only once both
    // are through the healthy one.
    ++healthy;
    while (healthy.load() < 2) std::this_thread::yield();
    if (rank == 1) {
      EXPECT_EQ(nnsCommAbort(comm), ncclSuccess);
      return;
    }
    ncclResult_t result = ncclSuccess;
    for (int i = 0; i < 1000 && result == ncclSuccess; ++i)
      result = nnsAllReduce(data.data(), data.data(), data.size(), ncclFloat32, ncclSum, comm, nullptr);
    EXPECT_EQ(result, ncclRemoteError) << nnsGetLastError(nullptr);
    ncclResult_t async = ncclSuccess;
    ASSERT_EQ(nnsCommGetAsyncError(comm, &async), ncclSuccess);
    EXPECT_EQ(async, ncclRemoteError);
    EXPECT_EQ(nnsCommDestroy(comm), ncclSuccess);
  });
}

// A watchdog thread aborts a communicator on which two threads wait in allreduces for a peer that does not come (the
// way PyTorch's watchdog calls ncclCommAbort; the second allreduce is queued behind the first): both fail at once,
// not at their timeout, and the communicator is freed only after both calls have returned. Before, nnsCommAbort
// freed it as soon as the running operation had stopped: the queued caller still waited on the communicator's
// condition variable as it was deleted (TSan: data race with operator delete, in 4 of 18 runs; ASan saw nothing).
TEST(CApi, AnAbortFromAnotherThreadFailsTheCallsInProgressAndWaitsForThem) {
  setenv("NNS_COMM_TIMEOUT_MS", "20000", 1);
  std::atomic<bool> released{false};
  onRanks(2, [&](int rank, nnsComm_t comm) {
    std::vector<float> data(1 << 16, 1.0f), more(1 << 16, 1.0f);
    ASSERT_EQ(nnsAllReduce(data.data(), data.data(), data.size(), ncclFloat32, ncclSum, comm, nullptr), ncclSuccess);
    if (rank == 1) {  // never joins the next allreduces; leaves once rank 0 is through
      while (!released.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      EXPECT_EQ(nnsCommDestroy(comm), ncclSuccess) << nnsGetLastError(nullptr);
      return;
    }
    ncclResult_t results[2] = {ncclSuccess, ncclSuccess};
    auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> callers;
    for (int t = 0; t < 2; ++t)
      callers.emplace_back([&, t] {
        std::vector<float>& buffer = t == 0 ? data : more;
        results[t] = nnsAllReduce(buffer.data(), buffer.data(), buffer.size(), ncclFloat32, ncclSum, comm, nullptr);
      });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(nnsCommAbort(comm), ncclSuccess) << nnsGetLastError(nullptr);
    for (auto& caller : callers) caller.join();
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_NE(results[0], ncclSuccess);
    EXPECT_NE(results[1], ncclSuccess);
    EXPECT_LT(seconds, 10.0) << "an allreduce waited for its timeout instead of failing on the abort";
    released = true;
  });
  unsetenv("NNS_COMM_TIMEOUT_MS");
}

// The same through the star example's collNet (its rank 0 reduces for the others; rank 1 never posts, so no part
// completes): the call stops at the abort, as on the ring. Before, its polling loop never looked at the abort and
// waited out its 20 s timeout.
TEST(CApi, AnAbortFailsACallGoingThroughTheCollNet) {
  setenv("NNS_COMM_TIMEOUT_MS", "20000", 1);
  setenv("NNS_STAR_IFNAME", "lo", 1);
  setenv("NNS_ALGO", "collnet", 1);
  std::atomic<bool> released{false};
  onRanks(
      2,
      [&](int rank, nnsComm_t comm) {
        std::vector<float> data(1 << 18, 1.0f);
        ASSERT_EQ(nnsAllReduce(data.data(), data.data(), data.size(), ncclFloat32, ncclSum, comm, nullptr), ncclSuccess)
            << nnsGetLastError(nullptr);
        if (rank == 1) {  // never joins the next allreduce; leaves once rank 0 is through
          while (!released.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
          EXPECT_EQ(nnsCommDestroy(comm), ncclSuccess) << nnsGetLastError(nullptr);
          return;
        }
        std::thread watchdog([&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          EXPECT_EQ(nnsCommAbort(comm), ncclSuccess) << nnsGetLastError(nullptr);
        });
        const auto start = std::chrono::steady_clock::now();
        const ncclResult_t result =
            nnsAllReduce(data.data(), data.data(), data.size(), ncclFloat32, ncclSum, comm, nullptr);
        const std::string error = nnsGetLastError(nullptr);
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        watchdog.join();
        EXPECT_NE(result, ncclSuccess);
        EXPECT_NE(error.find("collnet): aborted"), std::string::npos) << error;
        EXPECT_LT(seconds, 10.0) << "the collNet call waited for its timeout instead of stopping at the abort: "
                                 << error;
        released = true;
      },
      "star");
  for (const char* name : {"NNS_COMM_TIMEOUT_MS", "NCCL_NET_PLUGIN", "NNS_STAR_IFNAME", "NNS_ALGO"}) unsetenv(name);
}

// The same while the call is still making its connection (a send's, on first use: the peer never joins, so its
// listen handle never comes): the abort ends the wait, not the 20 s timeout.
TEST(CApi, AnAbortFailsASendStillMakingItsConnection) {
  setenv("NNS_COMM_TIMEOUT_MS", "20000", 1);
  std::atomic<bool> released{false};
  onRanks(2, [&](int rank, nnsComm_t comm) {
    if (rank == 1) {  // never receives; leaves once rank 0 is through
      while (!released.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      EXPECT_EQ(nnsCommDestroy(comm), ncclSuccess) << nnsGetLastError(nullptr);
      return;
    }
    std::vector<int> data(1024, 7);
    ncclResult_t result = ncclSuccess;
    auto start = std::chrono::steady_clock::now();
    std::thread sender([&] { result = nnsSend(data.data(), data.size(), ncclInt32, 1, comm, nullptr); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(nnsCommAbort(comm), ncclSuccess) << nnsGetLastError(nullptr);
    sender.join();
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_NE(result, ncclSuccess);
    EXPECT_LT(seconds, 10.0) << "the send waited for its timeout instead of failing on the abort";
    released = true;
  });
  unsetenv("NNS_COMM_TIMEOUT_MS");
}

// An abort from another thread while nnsCommDestroy waits for a call in progress fails that call, and the destroy then
// frees the communicator: a watchdog's abort was refused ("not a live one") once the destroy had begun, and both
// waited for the call's timeout.
TEST(CApi, AnAbortWhileADestroyWaitsFailsTheCallItWaitsFor) {
  setenv("NNS_COMM_TIMEOUT_MS", "20000", 1);
  std::atomic<bool> released{false};
  onRanks(2, [&](int rank, nnsComm_t comm) {
    if (rank == 1) {  // never joins the allreduce; leaves once rank 0 is through
      while (!released.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      EXPECT_EQ(nnsCommDestroy(comm), ncclSuccess) << nnsGetLastError(nullptr);
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    float x = 1.0f;
    ncclResult_t reduced = ncclSuccess, destroyed = ncclInternalError;
    std::atomic<bool> calling{false};
    std::thread call([&] {
      calling = true;
      reduced = nnsAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, nullptr);
    });
    while (!calling.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // into the call, which waits for rank 1
    std::thread destroy([&] { destroyed = nnsCommDestroy(comm); });
    int count = 0;  // the destroy has begun once the handle is no longer a live one
    while (nnsCommCount(comm, &count) == ncclSuccess) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(nnsCommAbort(comm), ncclSuccess) << nnsGetLastError(nullptr);
    call.join();
    destroy.join();
    EXPECT_NE(reduced, ncclSuccess);
    EXPECT_EQ(destroyed, ncclSuccess);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << "the call ran to its timeout";
    released = true;
  });
  unsetenv("NNS_COMM_TIMEOUT_MS");
}

// An abort fails a long operation soon, where it is: part of the in-place buffer is never summed. A 128 MiB allreduce
// through 1 KiB slots (131072 pieces, about 0.2 s here) took 13 s before, nearly all of it before any data moved:
// each forwarded piece summed the pieces before it (time quadratic in the pieces), and the abort was looked at only
// once data moved.
TEST(CApi, AnAbortFailsALongOperationSoon) {
  setenv("NNS_SLOT_BYTES", "1024", 1);
  setenv("NNS_COMM_TIMEOUT_MS", "20000", 1);
  onRanks(2, [&](int rank, nnsComm_t comm) {
    // 256 MiB: about 0.4 s here, against the abort at 50 ms. Under a sanitizer 32 MiB (the test took 1-3 s under ASan
    // and 11 s under TSan in CI): there the test is the abort's race with the operation; 256 MiB took 86 s under TSan.
    std::vector<float> data(nns::test::kUnderSanitizer ? size_t{8} << 20 : size_t{64} << 20, 1.0f);
    std::thread watchdog;
    if (rank == 0)
      watchdog = std::thread([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        EXPECT_EQ(nnsCommAbort(comm), ncclSuccess) << nnsGetLastError(nullptr);
      });
    const auto start = std::chrono::steady_clock::now();
    const ncclResult_t result =
        nnsAllReduce(data.data(), data.data(), data.size(), ncclFloat32, ncclSum, comm, nullptr);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_NE(result, ncclSuccess) << "finished in " << seconds << " s, before the abort: make it larger";
    // About 0.2 s here, 13 s before; a sanitizer makes building the plan of 131072 pieces alone take seconds (15 s
    // under TSan on an idle host, 40 s with the CPU shared: a reviewer's measure), so its bound only catches a plan
    // that grows out of hand again. That the abort cut the operation short is the check below.
    EXPECT_LT(seconds, nns::test::kUnderSanitizer ? 180.0 : 10.0);
    if (rank == 0) {
      watchdog.join();
      const auto summed = static_cast<size_t>(std::count(data.begin(), data.end(), 2.0f));
      EXPECT_LT(summed, data.size()) << "the allreduce ran to its end after the abort (" << seconds << " s)";
    } else {
      EXPECT_EQ(nnsCommDestroy(comm), ncclSuccess);
    }
  });
  unsetenv("NNS_SLOT_BYTES");
  unsetenv("NNS_COMM_TIMEOUT_MS");
}

// Refused before anything moves, with ncclInvalidArgument: the communicator stays usable on every rank.
TEST(CApi, BadArgumentsAreRefusedAndTheCommunicatorStaysUsable) {
  onRanks(2, [](int rank, nnsComm_t comm) {
    std::vector<float> data(64, rank + 1.0f), gathered(128);
    auto refused = [](ncclResult_t result, const char* text) {
      EXPECT_EQ(result, ncclInvalidArgument) << text;
      EXPECT_NE(std::string(nnsGetLastError(nullptr)).find(text), std::string::npos) << nnsGetLastError(nullptr);
    };
    refused(nnsAllReduce(data.data(), data.data(), 64, ncclFloat32, static_cast<ncclRedOp_t>(42), comm, nullptr),
            "reduction op 42");
    refused(nnsBroadcast(data.data(), data.data(), 64, ncclFloat32, 7, comm, nullptr), "root 7");
    refused(nnsSend(data.data(), 64, ncclFloat32, 9, comm, nullptr), "peer 9");
    refused(nnsAllReduce(nullptr, data.data(), 64, ncclFloat32, ncclSum, comm, nullptr), "the send buffer is NULL");
    refused(nnsAllReduce(data.data(), nullptr, 64, ncclFloat32, ncclSum, comm, nullptr), "the receive buffer is NULL");
    // Buffers that overlap without being nccl.h's in-place form would reduce or copy over data not yet sent: refused
    // (they gave wrong results with no error). The in-place forms themselves run, below.
    refused(nnsAllReduce(data.data(), data.data() + 1, 32, ncclFloat32, ncclSum, comm, nullptr),
            "the send and receive buffers overlap (by 124 bytes) without being in place (sendbuff == recvbuff)");
    refused(nnsAllGather(gathered.data() + 1, gathered.data(), 32, ncclFloat32, comm, nullptr),
            "without being in place (sendbuff == recvbuff + rank x sendcount)");
    refused(nnsReduceScatter(gathered.data(), gathered.data() + 1, 32, ncclFloat32, ncclSum, comm, nullptr),
            "without being in place (recvbuff == sendbuff + rank x recvcount)");
    std::fill(gathered.begin() + rank * 64, gathered.begin() + rank * 64 + 64, rank + 1.0f);
    ASSERT_EQ(nnsAllGather(gathered.data() + rank * 64, gathered.data(), 64, ncclFloat32, comm, nullptr), ncclSuccess);
    EXPECT_EQ(gathered[0], 1.0f);
    EXPECT_EQ(gathered[127], 2.0f);
    ASSERT_EQ(nnsReduceScatter(gathered.data(), gathered.data() + rank * 64, 64, ncclFloat32, ncclSum, comm, nullptr),
              ncclSuccess);
    EXPECT_EQ(gathered[rank * 64 + 63], 2.0f * (rank + 1));
    // Counts whose bytes wrap around (2^62 + 1 floats would be 4 bytes) or cannot be addressed.
    refused(nnsAllReduce(data.data(), data.data(), (size_t{1} << 62) + 1, ncclFloat32, ncclSum, comm, nullptr),
            "more bytes than a buffer can hold");
    refused(nnsAllGather(data.data(), gathered.data(), size_t{1} << 61, ncclFloat32, comm, nullptr), "times 2 ranks");
    // A count each buffer could hold alone, but not the gathered result of both ranks: 2^54 + 1 floats.
    refused(nnsAllGather(data.data(), gathered.data(), (size_t{1} << 54) + 1, ncclFloat32, comm, nullptr),
            "a count of 18014398509481985 elements of 4 bytes times 2 ranks is more bytes than a buffer can hold");
    // Below PTRDIFF_MAX but past any address space (2^57 bytes): named as such, not as the buffers overlapping.
    refused(nnsAllGather(data.data(), gathered.data(), (SIZE_MAX / 8) + 1, ncclUint8, comm, nullptr),
            "a count of 2305843009213693952 elements of 1 bytes times 2 ranks is more bytes than a buffer can hold");
    // A send to itself with no receive from itself is this rank's own mistake.
    refused(nnsSend(data.data(), 64, ncclFloat32, rank, comm, nullptr), "1 sends to itself but 0 receives");
    // ... and so is one whose receive from itself has another size: nothing is copied.
    std::vector<float> mine(64, -1.0f);
    ASSERT_EQ(nnsGroupStart(), ncclSuccess);
    ASSERT_EQ(nnsSend(data.data(), 64, ncclFloat32, rank, comm, nullptr), ncclSuccess);
    ASSERT_EQ(nnsRecv(mine.data(), 32, ncclFloat32, rank, comm, nullptr), ncclSuccess);
    refused(nnsGroupEnd(), "a send to itself of 256 bytes meets a receive of 128");
    EXPECT_EQ(mine[0], -1.0f);
    ASSERT_EQ(nnsGroupStart(), ncclSuccess);
    ASSERT_EQ(nnsSend(data.data(), 64, ncclFloat32, rank, comm, nullptr), ncclSuccess);
    ASSERT_EQ(nnsRecv(mine.data(), 64, ncclFloat32, rank, comm, nullptr), ncclSuccess);
    ASSERT_EQ(nnsGroupEnd(), ncclSuccess) << nnsGetLastError(nullptr);
    EXPECT_EQ(mine, data);
    // A group's receive into memory that another of its operations sends from (or receives into) is refused: the
    // send read what the receive had already written (4096 of 4096 ints wrong on one rank, with no error).
    ASSERT_EQ(nnsGroupStart(), ncclSuccess);
    ASSERT_EQ(nnsSend(data.data(), 32, ncclFloat32, 1 - rank, comm, nullptr), ncclSuccess);
    ASSERT_EQ(nnsRecv(data.data() + 16, 32, ncclFloat32, 1 - rank, comm, nullptr), ncclSuccess);
    refused(nnsGroupEnd(), "overlap in one group; a receive's buffer must not overlap another operation's");
    EXPECT_EQ(data[16], rank + 1.0f) << "written by a refused group";
    // ... but a send to itself and its receive from itself on the very same memory is a copy onto itself: it runs.
    ASSERT_EQ(nnsGroupStart(), ncclSuccess);
    ASSERT_EQ(nnsSend(data.data(), 64, ncclFloat32, rank, comm, nullptr), ncclSuccess);
    ASSERT_EQ(nnsRecv(data.data(), 64, ncclFloat32, rank, comm, nullptr), ncclSuccess);
    ASSERT_EQ(nnsGroupEnd(), ncclSuccess) << nnsGetLastError(nullptr);
    ASSERT_EQ(nnsAllReduce(data.data(), data.data(), 64, ncclFloat32, ncclSum, comm, nullptr), ncclSuccess)
        << nnsGetLastError(nullptr);
    EXPECT_EQ(data[63], 3.0f);
    expectHealthyThenDestroy(comm);
  });
}

// NCCL's pattern of one thread holding a rank of each communicator: one group runs both.
TEST(CApi, OneThreadDrivesTwoRanksInOneGroup) {
  nnsComm_t comms[2] = {nullptr, nullptr};
  onRanks(2, [&](int rank, nnsComm_t comm) { comms[rank] = comm; });
  ASSERT_TRUE(comms[0] != nullptr && comms[1] != nullptr);
  expectGroupedSumAndDestroy(comms);
}

// nnsCommSplit as ncclCommSplit: ranks 0 and 2 (color 0) form one communicator ranked by key (rank 2 first), rank 1
// (color 1) one of its own, rank 3 (NNS_SPLIT_NOCOLOR) none; each new one sums its members' values. NNS_ROOT_ADDR set
// for the parent does not make the new ones share its root. nnsCommFinalize is a check that returns at once.
TEST(CApi, SplitGroupsRanksByColorOrderedByKey) {
  std::mutex mutex;
  std::vector<std::string> seen;
  const nnsUniqueId id = loopbackId();
  setenv("NNS_ROOT_ADDR", "127.0.0.1:1", 1);  // a fixed root the split must not use (nothing listens there)
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r)
    threads.emplace_back([&, rank = r] {
      nnsComm_t comm = nullptr;
      ASSERT_EQ(nnsCommInitRank(&comm, 4, id, rank), ncclSuccess) << nnsGetLastError(nullptr);
      const int color = rank == 3 ? NNS_SPLIT_NOCOLOR : rank % 2;
      nnsComm_t sub = nullptr;
      const ncclResult_t split = nnsCommSplit(comm, color, -rank, &sub, nullptr);
      int newRank = -1, newSize = -1, sum = rank + 1;
      if (split == ncclSuccess && sub != nullptr) {
        EXPECT_EQ(nnsCommUserRank(sub, &newRank), ncclSuccess);
        EXPECT_EQ(nnsCommCount(sub, &newSize), ncclSuccess);
        EXPECT_EQ(nnsAllReduce(&sum, &sum, 1, ncclInt32, ncclSum, sub, nullptr), ncclSuccess)
            << nnsGetLastError(nullptr);
        EXPECT_EQ(nnsCommFinalize(sub), ncclSuccess);
        EXPECT_EQ(nnsCommDestroy(sub), ncclSuccess);
      }
      {
        std::lock_guard<std::mutex> lock(mutex);
        EXPECT_EQ(split, ncclSuccess) << "rank " << rank << ": " << nnsGetLastError(nullptr);
        seen.push_back(std::to_string(rank) + ":" +
                       (sub == nullptr
                            ? "none"
                            : std::to_string(newRank) + "/" + std::to_string(newSize) + " sum " + std::to_string(sum)));
      }
      EXPECT_EQ(nnsCommDestroy(comm), ncclSuccess);
    });
  for (auto& thread : threads) thread.join();
  unsetenv("NNS_ROOT_ADDR");
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<std::string>{"0:1/2 sum 4", "1:0/1 sum 2", "2:0/2 sum 4", "3:none"}));
  // Refused at once, before any rank meets: a config, a negative color, a NULL newcomm.
  nnsComm_t none = nullptr;
  int config = 0;
  EXPECT_EQ(nnsCommSplit(nullptr, 0, 0, &none, &config), ncclInvalidArgument);
  EXPECT_EQ(nnsCommSplit(nullptr, -5, 0, &none, nullptr), ncclInvalidArgument);
  EXPECT_EQ(nnsCommSplit(nullptr, 0, 0, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_EQ(nnsCommFinalize(nullptr), ncclInvalidArgument);
}

// One rank's nnsCommSplit with a bad argument (a negative color, a config) fails every rank at once: the refusing
// rank still takes part in the exchange of colors, flagged, so the others do not wait out the timeout for it. Every
// rank then goes on using the parent communicator. Before, the refusing rank returned without the exchange and the
// others waited in it until NNS_COMM_TIMEOUT_MS (60 s by default), and the communicator failed.
TEST(CApi, ARanksRefusedSplitFailsEveryRankAtOnce) {
  for (const bool badColor : {true, false}) {
    SCOPED_TRACE(badColor ? "rank 1: color -5" : "rank 1: a config");
    std::mutex mutex;
    std::vector<std::string> seen(3);
    onRanks(3, [&](int rank, nnsComm_t comm) {
      int config = 0;
      nnsComm_t sub = nullptr;
      const auto start = std::chrono::steady_clock::now();
      const ncclResult_t split = rank == 1
                                     ? nnsCommSplit(comm, badColor ? -5 : 0, 0, &sub, badColor ? nullptr : &config)
                                     : nnsCommSplit(comm, 0, rank, &sub, nullptr);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      {
        std::lock_guard<std::mutex> lock(mutex);
        seen[static_cast<size_t>(rank)] = nnsGetLastError(nullptr);
        EXPECT_EQ(split, rank == 1 ? ncclInvalidArgument : ncclInvalidUsage) << "rank " << rank;
        EXPECT_EQ(sub, nullptr) << "rank " << rank;
        EXPECT_LT(seconds, 10.0) << "rank " << rank << " waited for the refusing rank";
      }
      int value = rank + 1;
      EXPECT_EQ(nnsAllReduce(&value, &value, 1, ncclInt32, ncclSum, comm, nullptr), ncclSuccess)
          << nnsGetLastError(nullptr);
      EXPECT_EQ(value, 6) << "rank " << rank;
      EXPECT_EQ(nnsCommDestroy(comm), ncclSuccess);
    });
    EXPECT_NE(seen[1].find(badColor ? "color -5: >= 0 or NNS_SPLIT_NOCOLOR" : "config is not NULL"), std::string::npos)
        << seen[1];
    const std::string told =
        badColor ? "rank 1's call was refused (color -5;" : "rank 1's call was refused (newcomm NULL or a config;";
    EXPECT_NE(seen[0].find(told), std::string::npos) << seen[0];
    EXPECT_NE(seen[2].find(told), std::string::npos) << seen[2];
  }
}

// After nnsCommFinalize, a communicator only waits to be destroyed: an operation on it (collective, send, receive,
// split, one queued in a group) and a second finalize are ncclInvalidUsage with the reason; the queries still answer.
// They used to run. Both ranks are refused at the call, so neither waits for the other.
TEST(CApi, OperationsAfterFinalizeAreRefused) {
  onRanks(2, [](int rank, nnsComm_t comm) {
    int value = rank + 1;
    ASSERT_EQ(nnsAllReduce(&value, &value, 1, ncclInt32, ncclSum, comm, nullptr), ncclSuccess)
        << nnsGetLastError(nullptr);
    EXPECT_EQ(value, 3);
    ASSERT_EQ(nnsCommFinalize(comm), ncclSuccess) << nnsGetLastError(nullptr);
    auto refused = [](const char* what, ncclResult_t result, const char* expected) {
      EXPECT_EQ(result, ncclInvalidUsage) << what;
      EXPECT_NE(std::string(nnsGetLastError(nullptr)).find(expected), std::string::npos)
          << what << ": " << nnsGetLastError(nullptr);
    };
    const char* kAfter = "nnsCommFinalize was called on this communicator: no operation may follow it";
    refused("allreduce", nnsAllReduce(&value, &value, 1, ncclInt32, ncclSum, comm, nullptr), kAfter);
    refused("broadcast", nnsBroadcast(&value, &value, 1, ncclInt32, 0, comm, nullptr), kAfter);
    refused("send", nnsSend(&value, 1, ncclInt32, 1 - rank, comm, nullptr), kAfter);
    refused("recv", nnsRecv(&value, 1, ncclInt32, 1 - rank, comm, nullptr), kAfter);
    nnsComm_t sub = nullptr;
    refused("split", nnsCommSplit(comm, 0, rank, &sub, nullptr), kAfter);
    EXPECT_EQ(sub, nullptr);
    ASSERT_EQ(nnsGroupStart(), ncclSuccess);
    refused("allreduce in a group", nnsAllReduce(&value, &value, 1, ncclInt32, ncclSum, comm, nullptr), kAfter);
    EXPECT_EQ(nnsGroupEnd(), ncclInvalidUsage);  // the refusal at the call, reported again
    refused("a second finalize", nnsCommFinalize(comm), "nnsCommFinalize was called on this communicator already");
    EXPECT_EQ(value, 3);
    int count = 0, me = -1;
    ncclResult_t async = ncclInternalError;
    EXPECT_EQ(nnsCommCount(comm, &count), ncclSuccess);
    EXPECT_EQ(nnsCommUserRank(comm, &me), ncclSuccess);
    EXPECT_EQ(nnsCommGetAsyncError(comm, &async), ncclSuccess);
    EXPECT_EQ(count, 2);
    EXPECT_EQ(me, rank);
    EXPECT_EQ(async, ncclSuccess) << "a refused call does not fail the communicator";
    EXPECT_EQ(nnsCommDestroy(comm), ncclSuccess);
  });
}

// NCCL's other single-thread pattern: the communicators themselves made in a group. Made one by one, the first
// would wait for the other rank until its timeout; made at nnsGroupEnd, together. An operation on one inside that
// group is refused (it does not exist yet), and a failed init leaves the handle NULL.
TEST(CApi, OneThreadMakesTwoRanksInOneGroup) {
  const nnsUniqueId id = loopbackId();
  nnsComm_t comms[2] = {nullptr, nullptr};
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(nnsGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r) ASSERT_EQ(nnsCommInitRank(&comms[r], 2, id, r), ncclSuccess) << nnsGetLastError(nullptr);
  int early = 1;
  EXPECT_EQ(nnsAllReduce(&early, &early, 1, ncclInt32, ncclSum, comms[0], nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(nnsGetLastError(nullptr)).find("made at the nnsGroupEnd"), std::string::npos)
      << nnsGetLastError(nullptr);
  // The refused call makes nnsGroupEnd report it, after the communicators were made.
  EXPECT_EQ(nnsGroupEnd(), ncclInvalidArgument);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20)) << "made one after the other?";
  expectGroupedSumAndDestroy(comms);
  // A grouped creation that fails at nnsGroupEnd (the ranks disagree on the size) keeps its handle: refused by the
  // calls, freed by nnsCommDestroy (a stale handle freed at once could alias a later communicator).
  // Rank 0 names the refused rank at its timeout (so that every rank gets the reason): a short one here, or this
  // test took a minute.
  const nnsUniqueId other = loopbackId();
  nnsComm_t broken[2] = {nullptr, nullptr};
  ASSERT_EQ(setenv("NNS_COMM_TIMEOUT_MS", "2000", 1), 0);
  ASSERT_EQ(nnsGroupStart(), ncclSuccess);
  EXPECT_EQ(nnsCommInitRank(&broken[0], 2, other, 0), ncclSuccess);
  EXPECT_EQ(nnsCommInitRank(&broken[1], 3, other, 1), ncclSuccess);
  EXPECT_NE(nnsGroupEnd(), ncclSuccess);
  unsetenv("NNS_COMM_TIMEOUT_MS");
  for (nnsComm_t comm : broken) {
    ASSERT_NE(comm, nullptr);
    EXPECT_EQ(nnsAllReduce(&early, &early, 1, ncclInt32, ncclSum, comm, nullptr), ncclInvalidArgument);
    EXPECT_NE(std::string(nnsGetLastError(nullptr)).find("creation failed at nnsGroupEnd"), std::string::npos)
        << nnsGetLastError(nullptr);
    EXPECT_EQ(nnsCommDestroy(comm), ncclSuccess);
    EXPECT_EQ(nnsCommDestroy(comm), ncclInvalidArgument) << "freed by the first";
  }
  // A refused init leaves NULL behind, as ncclCommInitRank does.
  nnsComm_t stale = comms[0];
  EXPECT_EQ(nnsCommInitRank(&stale, 2, id, 5), ncclInvalidArgument);
  EXPECT_EQ(stale, nullptr);
}

// nnsCommInitAll as ncclCommInitAll: three ranks of one job made by one call, driven by one thread in a group; a
// devlist is checked, not needed. Refused before anything is made: NULL comms, no ranks, a device twice, a call
// inside a group (each leaves the handles as they were, or NULL).
TEST(CApi, InitAllMakesEveryRankInOneCall) {
  pickPortOnLoopback();
  setenv("NNS_ROOT_ADDR", "127.0.0.1:1", 1);  // a fixed root nnsCommInitAll must not use (nothing listens there)
  nnsComm_t comms[3] = {nullptr, nullptr, nullptr};
  const int devices[3] = {2, 0, 1};
  ASSERT_EQ(nnsCommInitAll(comms, 3, devices), ncclSuccess) << nnsGetLastError(nullptr);
  unsetenv("NNS_ROOT_ADDR");
  std::vector<std::vector<int>> data{std::vector<int>(999, 1), std::vector<int>(999, 2), std::vector<int>(999, 4)};
  ASSERT_EQ(nnsGroupStart(), ncclSuccess);
  for (int r = 0; r < 3; ++r)
    EXPECT_EQ(nnsAllReduce(data[r].data(), data[r].data(), 999, ncclInt32, ncclSum, comms[r], nullptr), ncclSuccess);
  ASSERT_EQ(nnsGroupEnd(), ncclSuccess) << nnsGetLastError(nullptr);
  for (int r = 0; r < 3; ++r) {
    int rank = -1, count = -1;
    EXPECT_EQ(nnsCommUserRank(comms[r], &rank), ncclSuccess);
    EXPECT_EQ(nnsCommCount(comms[r], &count), ncclSuccess);
    EXPECT_EQ(rank, r);
    EXPECT_EQ(count, 3);
    EXPECT_EQ(data[r][0], 7);
    EXPECT_EQ(data[r][998], 7);
    EXPECT_EQ(nnsCommDestroy(comms[r]), ncclSuccess);
  }
  nnsComm_t two[2] = {nullptr, nullptr};
  ASSERT_EQ(nnsCommInitAll(two, 2, nullptr), ncclSuccess) << nnsGetLastError(nullptr);
  expectGroupedSumAndDestroy(two);

  EXPECT_EQ(nnsCommInitAll(nullptr, 2, nullptr), ncclInvalidArgument);
  EXPECT_EQ(nnsCommInitAll(two, 0, nullptr), ncclInvalidArgument);
  // Each refusal leaves every handle NULL, as a failure does (they were left as the caller's array held them).
  auto garbage = [](nnsComm_t* comms) {
    comms[0] = comms[1] = reinterpret_cast<nnsComm_t>(uintptr_t{0xdead});
    return comms;
  };
  const int twice[2] = {1, 1};
  EXPECT_EQ(nnsCommInitAll(garbage(two), 2, twice), ncclInvalidUsage);
  EXPECT_NE(std::string(nnsGetLastError(nullptr)).find("both device 1"), std::string::npos) << nnsGetLastError(nullptr);
  EXPECT_TRUE(two[0] == nullptr && two[1] == nullptr) << "a devlist refusal";
  const int negative[2] = {0, -1};
  EXPECT_EQ(nnsCommInitAll(garbage(two), 2, negative), ncclInvalidArgument);
  EXPECT_TRUE(two[0] == nullptr && two[1] == nullptr) << "a negative device";
  ASSERT_EQ(nnsGroupStart(), ncclSuccess);
  EXPECT_EQ(nnsCommInitAll(garbage(two), 2, nullptr), ncclInvalidUsage);
  EXPECT_EQ(nnsGroupEnd(), ncclSuccess) << "the refusal is the call's own, not the group's";
  EXPECT_TRUE(two[0] == nullptr && two[1] == nullptr) << "inside a group";
  // Ranks that fail as they are made (a plugin that is not there) leave every handle NULL, none of them to destroy,
  // and the reason.
  setenv("NCCL_NET_PLUGIN", "nns-no-such-plugin", 1);
  nnsComm_t stale[2];
  EXPECT_NE(nnsCommInitAll(garbage(stale), 2, nullptr), ncclSuccess);
  EXPECT_NE(std::string(nnsGetLastError(nullptr)).find("nns-no-such-plugin"), std::string::npos)
      << nnsGetLastError(nullptr);
  setenv("NCCL_NET_PLUGIN", "socket", 1);
  EXPECT_EQ(stale[0], nullptr);
  EXPECT_EQ(stale[1], nullptr);
}

// A collective queued between a send and its receive: the sends and receives progress together before the
// collective, so neither rank's send waits for a receive queued behind the collective. Run in call order, 16 MB sends
// deadlocked both ranks until the timeout.
TEST(CApi, ACollectiveBetweenASendAndItsReceiveInOneGroupDoesNotBlockThem) {
  constexpr size_t kCount = 4 << 20;
  std::vector<std::string> errors(2);
  onRanks(2, [&](int rank, nnsComm_t comm) {
    std::vector<float> out(kCount, static_cast<float>(rank + 1)), in(kCount, 0.0f);
    int sum = rank + 1;
    ASSERT_EQ(nnsGroupStart(), ncclSuccess);
    ASSERT_EQ(nnsSend(out.data(), kCount, ncclFloat32, 1 - rank, comm, nullptr), ncclSuccess);
    ASSERT_EQ(nnsAllReduce(&sum, &sum, 1, ncclInt32, ncclSum, comm, nullptr), ncclSuccess);
    ASSERT_EQ(nnsRecv(in.data(), kCount, ncclFloat32, 1 - rank, comm, nullptr), ncclSuccess);
    if (nnsGroupEnd() != ncclSuccess) errors[rank] = nnsGetLastError(nullptr);
    EXPECT_EQ(sum, 3);
    EXPECT_EQ(in.front(), static_cast<float>(2 - rank));
    EXPECT_EQ(in.back(), static_cast<float>(2 - rank));
    EXPECT_EQ(nnsCommDestroy(comm), ncclSuccess);
  });
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
}

// Max and min with a NaN or signed zeros depend on the operands' order; every algorithm still gives every rank the
// same bits (recursive doubling puts the lower rank first on both sides of each exchange).
TEST(CApi, MaxAndMinGiveEveryRankTheSameBits) {
  for (const char* algorithm : {"doubling", "ring", "tree"}) {
    for (int ranks : {2, 3}) {
      SCOPED_TRACE(std::string(algorithm) + " on " + std::to_string(ranks) + " ranks");
      setenv("NNS_ALGO", algorithm, 1);
      std::vector<std::vector<float>> results(ranks);
      onRanks(ranks, [&](int rank, nnsComm_t comm) {
        const float nan = std::nanf("");
        // Per element: which rank holds the NaN or the -0.0 moves, so each position sees another order.
        std::vector<float> data(4 * ranks);
        for (int i = 0; i < 4 * ranks; ++i) {
          const int special = i % ranks;
          data[i] = i < 2 * ranks ? (rank == special ? nan : 1.0f) : (rank == special ? -0.0f : 0.0f);
        }
        std::vector<float> maxima(data.size()), minima(data.size());
        ASSERT_EQ(nnsAllReduce(data.data(), maxima.data(), data.size(), ncclFloat32, ncclMax, comm, nullptr),
                  ncclSuccess);
        ASSERT_EQ(nnsAllReduce(data.data(), minima.data(), data.size(), ncclFloat32, ncclMin, comm, nullptr),
                  ncclSuccess);
        results[rank] = maxima;
        results[rank].insert(results[rank].end(), minima.begin(), minima.end());
        EXPECT_EQ(nnsCommDestroy(comm), ncclSuccess);
      });
      unsetenv("NNS_ALGO");
      for (int r = 1; r < ranks; ++r)
        EXPECT_EQ(std::memcmp(results[r].data(), results[0].data(), results[0].size() * sizeof(float)), 0)
            << "rank " << r << " differs from rank 0";
    }
  }
}

// nnsGetUniqueId without NNS_ROOT_ADDR listens on the port it picks from then on, so no other program can take it
// before rank 0 is made (it looked the port up and let it go), and rank 0's bootstrap takes that listener. The
// address is on the interface NCCL_SOCKET_IFNAME names, as NCCL's bootstrap chooses it (it took the first
// non-loopback one).
TEST(CApi, AUniqueIdsPortIsHeldUntilRankZeroListensOnIt) {
  pickPortOnLoopback();
  nnsUniqueId id;
  ASSERT_EQ(nnsGetUniqueId(&id), ncclSuccess) << nnsGetLastError(nullptr);
  const std::string address(id.internal, strnlen(id.internal, sizeof(id.internal)));
  ASSERT_EQ(address.rfind("127.0.0.1:", 0), 0u) << address;
  const int port = std::atoi(address.c_str() + address.find(':') + 1);
  // Another program trying the port now finds it taken.
  const int other = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in there{};
  there.sin_family = AF_INET;
  there.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  there.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_NE(bind(other, reinterpret_cast<sockaddr*>(&there), sizeof(there)), 0);
  EXPECT_EQ(errno, EADDRINUSE);
  close(other);
  nnsComm_t comms[2] = {nullptr, nullptr};
  ASSERT_EQ(nnsGroupStart(), ncclSuccess);
  EXPECT_EQ(nnsCommInitRank(&comms[0], 2, id, 0), ncclSuccess);
  EXPECT_EQ(nnsCommInitRank(&comms[1], 2, id, 1), ncclSuccess);
  ASSERT_EQ(nnsGroupEnd(), ncclSuccess) << nnsGetLastError(nullptr);
  expectGroupedSumAndDestroy(comms);
}

// An id made in a process that then creates only another rank (legal with ncclGetUniqueId, whose root thread serves
// the rendezvous wherever it was called): the join reaches the id's port, held by this very process for a rank 0
// that never comes, and the error says so (it said only "accepted the connection but never answered the join").
TEST(CApi, ANonZeroRankInTheProcessThatMadeTheIdIsToldWhereRankZeroMustBe) {
  pickPortOnLoopback();
  nnsUniqueId id;
  ASSERT_EQ(nnsGetUniqueId(&id), ncclSuccess) << nnsGetLastError(nullptr);
  ASSERT_EQ(setenv("NNS_COMM_TIMEOUT_MS", "1000", 1), 0);
  nnsComm_t comm = nullptr;
  EXPECT_NE(nnsCommInitRank(&comm, 2, id, 1), ncclSuccess);
  unsetenv("NNS_COMM_TIMEOUT_MS");
  EXPECT_NE(std::string(nnsGetLastError(nullptr)).find("rank 0 must be created in the process that made the id"),
            std::string::npos)
      << nnsGetLastError(nullptr);
  // A one-rank communicator from the id lets its port go.
  ASSERT_EQ(nnsCommInitRank(&comm, 1, id, 0), ncclSuccess) << nnsGetLastError(nullptr);
  EXPECT_EQ(nnsCommDestroy(comm), ncclSuccess);
}

// The port nnsGetUniqueId holds is let go when no bootstrap will listen on it: a one-rank communicator (which meets no
// one) and a rank 0 that fails before its bootstrap (a bad NNS_SLOTS here). It stayed open, listening, for the life of
// the process (one more descriptor per communicator), and a rank that reached it hung until its timeout.
TEST(CApi, AUniqueIdsPortIsLetGoWhenNoBootstrapListensOnIt) {
  pickPortOnLoopback();
  auto portOf = [](const nnsUniqueId& id) {
    const std::string address(id.internal, strnlen(id.internal, sizeof(id.internal)));
    return std::atoi(address.c_str() + address.find(':') + 1);
  };
  auto bindable = [](int port) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in there{};
    there.sin_family = AF_INET;
    there.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    there.sin_port = htons(static_cast<uint16_t>(port));
    const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&there), sizeof(there)) == 0;
    close(fd);
    return ok;
  };
  nnsUniqueId id;
  ASSERT_EQ(nnsGetUniqueId(&id), ncclSuccess) << nnsGetLastError(nullptr);
  ASSERT_FALSE(bindable(portOf(id)));
  nnsComm_t comm = nullptr;
  ASSERT_EQ(nnsCommInitRank(&comm, 1, id, 0), ncclSuccess) << nnsGetLastError(nullptr);
  EXPECT_TRUE(bindable(portOf(id))) << "a one-rank communicator kept the unique id's port";
  EXPECT_EQ(nnsCommDestroy(comm), ncclSuccess);

  ASSERT_EQ(nnsGetUniqueId(&id), ncclSuccess) << nnsGetLastError(nullptr);
  ASSERT_FALSE(bindable(portOf(id)));
  setenv("NNS_SLOTS", "abc", 1);
  comm = nullptr;
  EXPECT_NE(nnsCommInitRank(&comm, 2, id, 0), ncclSuccess);
  unsetenv("NNS_SLOTS");
  EXPECT_TRUE(bindable(portOf(id))) << "a rank 0 that failed before its bootstrap kept the unique id's port";

  // Refused at the call: a bad size, a NULL comm (the port stayed open, one more descriptor per refused call).
  for (int nranks : {0, 2}) {
    ASSERT_EQ(nnsGetUniqueId(&id), ncclSuccess) << nnsGetLastError(nullptr);
    ASSERT_FALSE(bindable(portOf(id)));
    EXPECT_EQ(nranks == 0 ? nnsCommInitRank(&comm, nranks, id, 0) : nnsCommInitRank(nullptr, nranks, id, 0),
              ncclInvalidArgument);
    EXPECT_TRUE(bindable(portOf(id))) << "a rank 0 refused at its call (nranks " << nranks
                                      << ") kept the unique id's port";
  }
}

// Without NCCL_SOCKET_IFNAME, nnsGetUniqueId's address is one other hosts can reach: not a container bridge of this
// host (docker0) nor an interface that is up without a carrier, even when they come first (an id holding docker0's
// address left the ranks on other hosts to wait out their timeout). In a network namespace of its own (a child
// process), veth pairs stand in for the interfaces.
// Runs nnsGetUniqueId in a child process in a network namespace of its own, made by the ip commands `setup`, once
// per NCCL_SOCKET_IFNAME value in `ifnames` (nullptr: unset): the ids' addresses, one per line, or "skip: ..." where
// namespaces or veth pairs cannot be made here.
// `up` names the links that must be running before the ids are made: the kernel sets a link's operational state
// (IFF_RUNNING) from a deferred work item up to a second after its carrier came on, so a just-made veth can still
// read as without a carrier (this test failed so on a loaded CI host: "127.0.0.1" for the veth's address).
std::string uniqueIdsInNamespace(const char* setup, const std::vector<const char*>& up,
                                 const std::vector<const char*>& ifnames) {
  if (geteuid() != 0) return "skip: network namespaces need root";
  int out[2];
  if (pipe(out) != 0) return "skip: pipe failed";
  const pid_t child = fork();
  if (child < 0) return "skip: fork failed";
  if (child == 0) {
    close(out[0]);
    auto say = [&](const std::string& text) { (void)!write(out[1], text.data(), text.size()); };
    if (unshare(CLONE_NEWNET) != 0) {
      say(std::string("skip: unshare(CLONE_NEWNET): ") + std::strerror(errno));
      _exit(0);
    }
    if (std::system(setup) != 0) {
      say("skip: no veth pairs here (`ip link add ... type veth` failed)");
      _exit(0);
    }
    for (const char* link : up) {
      const std::string wait = std::string("for i in $(seq 100); do ip -o link show dev ") + link +
                               " | grep -q 'state UP' && exit 0; sleep 0.05; done; exit 1";
      if (std::system(wait.c_str()) != 0) {
        say(std::string("error: ") + link + " did not come up within 5 s\n");
        _exit(0);
      }
    }
    unsetenv("NNS_ROOT_ADDR");
    for (const char* ifname : ifnames) {
      if (ifname == nullptr)
        unsetenv("NCCL_SOCKET_IFNAME");
      else
        setenv("NCCL_SOCKET_IFNAME", ifname, 1);
      nnsUniqueId id;
      const std::string text = nnsGetUniqueId(&id) == ncclSuccess
                                   ? std::string(id.internal, strnlen(id.internal, sizeof(id.internal)))
                                   : std::string("error: ") + nnsGetLastError(nullptr);
      say(text.substr(0, text.find(':')) + "\n");
    }
    _exit(0);
  }
  close(out[1]);
  std::string said;
  char buffer[256];
  for (ssize_t n; (n = read(out[0], buffer, sizeof(buffer))) > 0;) said.append(buffer, static_cast<size_t>(n));
  close(out[0]);
  int status = 0;
  waitpid(child, &status, 0);
  return said;
}

TEST(CApi, AUniqueIdSkipsContainerBridgesAndLinksWithoutACarrier) {
  const std::string said = uniqueIdsInNamespace(
      "ip link add eth8 type veth peer name zzpeer8 && ip addr add 10.8.0.1/24 dev eth8 && ip link set eth8 up && "
      "ip link add docker0 type veth peer name zzpeer0 && ip addr add 172.17.0.1/16 dev docker0 && "
      "ip link set docker0 up && ip link set zzpeer0 up && "
      "ip link add eth9 type veth peer name zzpeer9 && ip addr add 10.9.0.1/24 dev eth9 && ip link set eth9 up && "
      "ip link set zzpeer9 up && ip link set lo up",  // eth8's peer stays down: eth8 is up with no carrier
      {"docker0", "eth9"}, {nullptr, "^docker"});
  if (said.rfind("skip: ", 0) == 0) GTEST_SKIP() << said.substr(6);
  // "^docker" selects lo too: loopback only when nothing else is selected.
  EXPECT_EQ(said, "10.9.0.1\n10.9.0.1\n") << "the unique ids hold " << said;
}

// A host whose only links are veth pairs (a network namespace's, a container's) and a link-local address (a BMC's
// usb0, 169.254/16): the id holds the veth's address, not the link-local one, nor 127.0.0.1, which sent the other
// hosts' ranks to their own loopback until their timeout.
TEST(CApi, AUniqueIdTakesAVethBeforeLoopbackAndNeverALinkLocalAddress) {
  const std::string said = uniqueIdsInNamespace(
      "ip link add usb0 type veth peer name zzpeer0 && ip addr add 169.254.3.1/16 dev usb0 && ip link set usb0 up && "
      "ip link set zzpeer0 up && "
      "ip link add vethA type veth peer name zzpeerA && ip addr add 10.77.0.1/24 dev vethA && "
      "ip link set vethA up && ip link set zzpeerA up && ip link set lo up",
      {"usb0", "vethA"}, {nullptr, "vethA"});
  if (said.rfind("skip: ", 0) == 0) GTEST_SKIP() << said.substr(6);
  EXPECT_EQ(said, "10.77.0.1\n10.77.0.1\n") << "the unique ids hold " << said;
}

// An id whose port nnsGetUniqueId picked carries a random value, as ncclUniqueId does: a rank holding another id for
// the same port (a stale id of an ended job, whose port a later id got) is turned away as of another job. Without
// it, a rank of the ended job joined the later one wherever its rank and size fitted. With NNS_ROOT_ADDR every rank
// that makes an id gets the same one (NCCL_COMM_ID's way).
TEST(CApi, ARankWithAnotherUniqueIdForTheSamePortIsTurnedAway) {
  pickPortOnLoopback();
  nnsUniqueId id;
  ASSERT_EQ(nnsGetUniqueId(&id), ncclSuccess) << nnsGetLastError(nullptr);
  nnsUniqueId stale = id;  // the same address, another random value
  stale.internal[NNS_UNIQUE_ID_BYTES - 1] = static_cast<char>(stale.internal[NNS_UNIQUE_ID_BYTES - 1] ^ 1);
  ASSERT_EQ(setenv("NNS_COMM_TIMEOUT_MS", "2000", 1), 0);
  nnsComm_t comms[2] = {nullptr, nullptr};
  ASSERT_EQ(nnsGroupStart(), ncclSuccess);
  EXPECT_EQ(nnsCommInitRank(&comms[0], 2, id, 0), ncclSuccess);
  EXPECT_EQ(nnsCommInitRank(&comms[1], 2, stale, 1), ncclSuccess);
  EXPECT_NE(nnsGroupEnd(), ncclSuccess) << "a rank of another unique id joined";
  unsetenv("NNS_COMM_TIMEOUT_MS");
  EXPECT_NE(std::string(nnsGetLastError(nullptr)).find("another unique id"), std::string::npos)
      << nnsGetLastError(nullptr);
  for (nnsComm_t comm : comms) EXPECT_EQ(nnsCommDestroy(comm), ncclSuccess);

  setenv("NNS_ROOT_ADDR", ("127.0.0.1:" + std::to_string(nns::test::freeLoopbackPort())).c_str(), 1);
  nnsUniqueId first, second;
  std::memset(&first, 0x55, sizeof(first));
  std::memset(&second, 0xaa, sizeof(second));
  ASSERT_EQ(nnsGetUniqueId(&first), ncclSuccess) << nnsGetLastError(nullptr);
  ASSERT_EQ(nnsGetUniqueId(&second), ncclSuccess) << nnsGetLastError(nullptr);
  unsetenv("NNS_ROOT_ADDR");
  EXPECT_EQ(std::memcmp(&first, &second, sizeof(first)), 0) << "NNS_ROOT_ADDR's ids differ from call to call";
  // NCCL_COMM_ID, ncclGetUniqueId's fixed root, the same way (it was ignored: the id got an interface and a port).
  const std::string commId = "127.0.0.1:" + std::to_string(nns::test::freeLoopbackPort());
  setenv("NCCL_COMM_ID", commId.c_str(), 1);
  ASSERT_EQ(nnsGetUniqueId(&first), ncclSuccess) << nnsGetLastError(nullptr);
  EXPECT_EQ(std::string(first.internal), commId);
  setenv("NCCL_COMM_ID", "no-port-here", 1);
  EXPECT_EQ(nnsGetUniqueId(&first), ncclInvalidUsage);
  EXPECT_EQ(std::string(nnsGetLastError(nullptr)).rfind("NCCL_COMM_ID must be host:port", 0), 0u)
      << nnsGetLastError(nullptr);
  unsetenv("NCCL_COMM_ID");
}

// NCCL_SOCKET_IFNAME naming no interface that is up with an IPv4 address: nnsGetUniqueId fails, naming it, as NCCL's
// bootstrap does. It gave 127.0.0.1, and the ranks of other hosts dialled their own loopback until their timeout.
TEST(CApi, AUniqueIdNeedsAnInterfaceNcclSocketIfnameSelects) {
  unsetenv("NNS_ROOT_ADDR");
  setenv("NCCL_SOCKET_IFNAME", "nns-no-such-interface", 1);
  nnsUniqueId id;
  std::memset(&id, 0, sizeof(id));
  EXPECT_EQ(nnsGetUniqueId(&id), ncclSystemError);
  EXPECT_NE(std::string(nnsGetLastError(nullptr)).find("matches NCCL_SOCKET_IFNAME=nns-no-such-interface"),
            std::string::npos)
      << nnsGetLastError(nullptr);
  EXPECT_EQ(id.internal[0], '\0') << "an id was written: " << id.internal;
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  ASSERT_EQ(nnsGetUniqueId(&id), ncclSuccess) << nnsGetLastError(nullptr);
  EXPECT_EQ(std::string(id.internal).rfind("127.0.0.1:", 0), 0u) << id.internal;
  nnsComm_t comm = nullptr;  // a one-rank communicator lets the id's port go
  ASSERT_EQ(nnsCommInitRank(&comm, 1, id, 0), ncclSuccess) << nnsGetLastError(nullptr);
  EXPECT_EQ(nnsCommDestroy(comm), ncclSuccess);
}

// A query that fails inside a group is that call's error, not the group's: nnsGroupEnd still reports the group's
// operations (both communicators made). It returned ncclInvalidArgument, "a call in this group was refused", and a
// caller took the two good communicators for failed ones.
TEST(CApi, AFailedQueryInsideAGroupIsNotTheGroupsError) {
  const nnsUniqueId id = loopbackId();
  nnsComm_t comms[2] = {nullptr, nullptr};
  ASSERT_EQ(nnsGroupStart(), ncclSuccess);
  EXPECT_EQ(nnsCommInitRank(&comms[0], 2, id, 0), ncclSuccess);
  EXPECT_EQ(nnsCommInitRank(&comms[1], 2, id, 1), ncclSuccess);
  int count = 0;
  EXPECT_NE(nnsCommCount(comms[0], &count), ncclSuccess) << "not made yet";
  EXPECT_EQ(nnsGetVersion(nullptr), ncclInvalidArgument);
  ASSERT_EQ(nnsGroupEnd(), ncclSuccess) << nnsGetLastError(nullptr);
  expectGroupedSumAndDestroy(comms);
  // A group operation's refusal still is the group's.
  const nnsUniqueId other = loopbackId();
  ASSERT_EQ(nnsGroupStart(), ncclSuccess);
  EXPECT_EQ(nnsCommInitRank(&comms[0], 2, other, 0), ncclSuccess);
  EXPECT_EQ(nnsCommInitRank(&comms[1], 2, other, 1), ncclSuccess);
  EXPECT_EQ(nnsGroupEnd(), ncclSuccess) << nnsGetLastError(nullptr);
  ASSERT_EQ(nnsGroupStart(), ncclSuccess);
  float x = 1;
  EXPECT_EQ(nnsAllReduce(&x, &x, 1, ncclFloat32, static_cast<ncclRedOp_t>(99), comms[0], nullptr), ncclInvalidArgument);
  EXPECT_EQ(nnsGroupEnd(), ncclInvalidArgument);
  for (nnsComm_t comm : comms) EXPECT_EQ(nnsCommDestroy(comm), ncclSuccess);
}

// A watchdog thread that made no failing call gets a failed communicator's own error from nnsGetLastError(comm) (it
// got "": the text was only the failing thread's); with NULL, or where it has an error of its own, its own.
TEST(CApi, AnotherThreadGetsAFailedCommunicatorsErrorFromIt) {
  setenv("NNS_COMM_TIMEOUT_MS", "5000", 1);
  const nnsUniqueId id = loopbackId();
  nnsComm_t comms[2] = {nullptr, nullptr};
  ASSERT_EQ(nnsGroupStart(), ncclSuccess);
  EXPECT_EQ(nnsCommInitRank(&comms[0], 2, id, 0), ncclSuccess);
  EXPECT_EQ(nnsCommInitRank(&comms[1], 2, id, 1), ncclSuccess);
  ASSERT_EQ(nnsGroupEnd(), ncclSuccess) << nnsGetLastError(nullptr);
  std::vector<int> data(300, 7);
  ASSERT_EQ(nnsGroupStart(), ncclSuccess);
  EXPECT_EQ(nnsSend(data.data(), 300, ncclInt32, 1, comms[0], nullptr), ncclSuccess);
  EXPECT_EQ(nnsRecv(data.data(), 290, ncclInt32, 0, comms[1], nullptr), ncclSuccess);  // a count that differs
  EXPECT_EQ(nnsGroupEnd(), ncclInvalidUsage);
  ncclResult_t failure = ncclSuccess;
  ASSERT_EQ(nnsCommGetAsyncError(comms[1], &failure), ncclSuccess);
  ASSERT_EQ(failure, ncclInvalidUsage);
  std::string fromComm, fromNull;
  std::thread watchdog([&] {
    fromNull = nnsGetLastError(nullptr);
    fromComm = nnsGetLastError(comms[1]);
  });
  watchdog.join();
  EXPECT_EQ(fromNull, "");
  EXPECT_NE(fromComm.find("received 1200 bytes from rank 0, expected 1160"), std::string::npos) << fromComm;
  for (nnsComm_t comm : comms) EXPECT_EQ(nnsCommDestroy(comm), ncclSuccess);
  unsetenv("NNS_COMM_TIMEOUT_MS");
}

// nnsGroupEnd that cannot start the thread a communicator of its group needs fails that communicator with
// ncclSystemError and the reason; the std::system_error escaped the C API and ended the process (terminate).
TEST(CApi, AGroupThatCannotStartAThreadFailsInsteadOfEndingTheProcess) {
  setenv("NNS_COMM_TIMEOUT_MS", "1000", 1);  // the other rank waits for the one that never starts
  const nnsUniqueId id = loopbackId();
  nnsComm_t comms[2] = {nullptr, nullptr};
  ASSERT_EQ(nnsGroupStart(), ncclSuccess);
  EXPECT_EQ(nnsCommInitRank(&comms[0], 2, id, 0), ncclSuccess);
  EXPECT_EQ(nnsCommInitRank(&comms[1], 2, id, 1), ncclSuccess);
  failThreadStarts = 1;  // the group's thread for rank 0
  EXPECT_EQ(nnsGroupEnd(), ncclSystemError);
  failThreadStarts = 0;
  EXPECT_NE(std::string(nnsGetLastError(nullptr)).find("communicator rank 0: could not start a thread for it"),
            std::string::npos)
      << nnsGetLastError(nullptr);
  for (nnsComm_t comm : comms) EXPECT_EQ(nnsCommDestroy(comm), ncclSuccess);
  unsetenv("NNS_COMM_TIMEOUT_MS");
}

// Another thread (a watchdog) looking at a communicator that a group's nnsGroupEnd is still making learns that it is
// in progress: nnsCommGetAsyncError gives ncclInProgress, and other calls say whose group makes it. Both said "not a
// live one (destroyed already?)", since the group's record was the making thread's own.
TEST(CApi, ACommunicatorBeingMadeIsInProgressForOtherThreads) {
  // Rank 1 never comes: the group fails after this, which the looks below (200 ms in) must precede under TSan on a
  // loaded host too.
  setenv("NNS_COMM_TIMEOUT_MS", "4000", 1);
  const nnsUniqueId id = loopbackId();
  nnsComm_t comm = nullptr;
  std::atomic<bool> asked{false};
  ncclResult_t groupResult = ncclSuccess;
  std::thread maker([&] {
    EXPECT_EQ(nnsGroupStart(), ncclSuccess);
    EXPECT_EQ(nnsCommInitRank(&comm, 2, id, 0), ncclSuccess);
    asked = true;
    groupResult = nnsGroupEnd();
  });
  while (!asked) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ncclResult_t async = ncclSuccess;
  EXPECT_EQ(nnsCommGetAsyncError(comm, &async), ncclSuccess) << nnsGetLastError(comm);
  EXPECT_EQ(async, ncclInProgress);
  int count = 0;
  EXPECT_EQ(nnsCommCount(comm, &count), ncclInvalidArgument);
  EXPECT_NE(std::string(nnsGetLastError(nullptr)).find("being made by the nnsGroupEnd of another thread's group"),
            std::string::npos)
      << nnsGetLastError(nullptr);
  maker.join();
  EXPECT_EQ(groupResult, ncclRemoteError);
  // Then the creation's failure is its error, as NCCL reports a failed non-blocking init: a watchdog polling until
  // the state leaves ncclInProgress saw the call refused and the state unchanged, and polled for good.
  async = ncclInProgress;
  EXPECT_EQ(nnsCommGetAsyncError(comm, &async), ncclSuccess) << nnsGetLastError(comm);
  EXPECT_EQ(async, ncclRemoteError) << "a failed creation is no longer in progress";
  EXPECT_EQ(nnsCommCount(comm, &count), ncclInvalidArgument) << "a failed creation is not a communicator to use";
  EXPECT_EQ(nnsCommDestroy(comm), ncclSuccess);
  EXPECT_EQ(nnsCommGetAsyncError(comm, &async), ncclInvalidArgument) << "a destroyed handle is refused";
  unsetenv("NNS_COMM_TIMEOUT_MS");
}

// A destroyed handle stays refused after later communicators are made: its address is not given to the next one.
// malloc reused it at once, so the stale handle was the new communicator (nnsCommCount answered for it, and a
// second nnsCommDestroy would have destroyed it).
TEST(CApi, ADestroyedHandleIsNotGivenToTheNextCommunicator) {
  std::vector<nnsComm_t> handles;
  handles.reserve(3);
  const nnsUniqueId ids[3] = {loopbackId(), loopbackId(), loopbackId()};  // nothing allocated between the calls
  for (const nnsUniqueId& id : ids) {
    const int i = static_cast<int>(&id - ids);
    nnsComm_t comm = nullptr;
    ASSERT_EQ(nnsCommInitRank(&comm, 1, id, 0), ncclSuccess) << nnsGetLastError(nullptr);
    for (nnsComm_t old : handles) {
      EXPECT_NE(comm, old) << "a destroyed handle's address was reused";
    }
    handles.push_back(comm);
    if (i < 2) {
      ASSERT_EQ(nnsCommDestroy(comm), ncclSuccess);
    }
  }
  int count = 0;
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(nnsCommCount(handles[i], &count), ncclInvalidArgument) << "handle " << i;
    EXPECT_EQ(nnsCommDestroy(handles[i]), ncclInvalidArgument) << "handle " << i;
  }
  EXPECT_EQ(nnsCommCount(handles[2], &count), ncclSuccess) << nnsGetLastError(nullptr);
  EXPECT_EQ(count, 1);
  EXPECT_EQ(nnsCommDestroy(handles[2]), ncclSuccess);
}

// A handle used after nnsCommDestroy, or destroyed twice, is refused with a reason instead of read after it was
// freed (this crashed with SIGSEGV).
TEST(CApi, ADestroyedCommunicatorIsRefusedNotUsed) {
  setenv("NNS_ROOT_ADDR", ("127.0.0.1:" + std::to_string(nns::test::freeLoopbackPort())).c_str(), 1);
  nnsUniqueId id;
  ASSERT_EQ(nnsGetUniqueId(&id), ncclSuccess);
  unsetenv("NNS_ROOT_ADDR");
  nnsComm_t comm = nullptr;
  ASSERT_EQ(nnsCommInitRank(&comm, 1, id, 0), ncclSuccess) << nnsGetLastError(nullptr);
  float x = 1;
  ASSERT_EQ(nnsAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, nullptr), ncclSuccess);
  ASSERT_EQ(nnsCommDestroy(comm), ncclSuccess);
  auto refused = [](ncclResult_t result) {
    EXPECT_EQ(result, ncclInvalidArgument);
    EXPECT_NE(std::string(nnsGetLastError(nullptr)).find("not a live one (destroyed already?)"), std::string::npos)
        << nnsGetLastError(nullptr);
  };
  refused(nnsAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, nullptr));
  int count = 0;
  refused(nnsCommCount(comm, &count));
  ncclResult_t async = ncclSuccess;
  refused(nnsCommGetAsyncError(comm, &async));
  refused(nnsCommDestroy(comm));
  refused(nnsCommAbort(comm));
  // NULL is a no-op, as ncclCommDestroy(NULL) and ncclCommAbort(NULL) are.
  EXPECT_EQ(nnsCommDestroy(nullptr), ncclSuccess);
  EXPECT_EQ(nnsCommAbort(nullptr), ncclSuccess);
}

// Inside a group a bad argument is refused at the call, as NCCL does, and the group's other operations still run:
// found only at nnsGroupEnd, it skipped them on this rank while the other ranks ran theirs and waited for it.
TEST(CApi, ABadArgumentInAGroupIsRefusedAtTheCallAndTheRestOfTheGroupRuns) {
  setenv("NNS_COMM_TIMEOUT_MS", "3000", 1);
  onRanks(2, [](int rank, nnsComm_t comm) {
    std::vector<float> data(16, rank + 1.0f);
    if (rank == 0) {
      ASSERT_EQ(nnsGroupStart(), ncclSuccess);
      EXPECT_EQ(nnsAllReduce(nullptr, data.data(), 16, ncclFloat32, ncclSum, comm, nullptr), ncclInvalidArgument);
      EXPECT_NE(std::string(nnsGetLastError(nullptr)).find("the send buffer is NULL"), std::string::npos)
          << nnsGetLastError(nullptr);
      EXPECT_EQ(nnsAllReduce(data.data(), data.data(), 16, ncclFloat32, static_cast<ncclRedOp_t>(9), comm, nullptr),
                ncclInvalidArgument);
      EXPECT_EQ(nnsBroadcast(data.data(), data.data(), 16, ncclFloat32, 2, comm, nullptr), ncclInvalidArgument);
      EXPECT_NE(std::string(nnsGetLastError(nullptr)).find("root 2 is not a rank"), std::string::npos)
          << nnsGetLastError(nullptr);
      EXPECT_EQ(nnsSend(data.data(), 16, ncclFloat32, -1, comm, nullptr), ncclInvalidArgument);
      EXPECT_EQ(nnsAllGather(data.data(), data.data(), size_t{1} << 61, ncclFloat32, comm, nullptr),
                ncclInvalidArgument);
      ASSERT_EQ(nnsAllReduce(data.data(), data.data(), 16, ncclFloat32, ncclSum, comm, nullptr), ncclSuccess);
      // The group's first refusal, once its other operation ran (a caller checking only nnsGroupEnd learns of it).
      EXPECT_EQ(nnsGroupEnd(), ncclInvalidArgument);
      EXPECT_NE(
          std::string(nnsGetLastError(nullptr)).find("refused (its other operations ran): the send buffer is NULL"),
          std::string::npos)
          << nnsGetLastError(nullptr);
      // The next group starts clean.
      ASSERT_EQ(nnsGroupStart(), ncclSuccess);
      EXPECT_EQ(nnsGroupEnd(), ncclSuccess) << nnsGetLastError(nullptr);
      // A group nested inside one whose call was refused leaves the refusal to the outer end: the inner start
      // belongs to the same group, and its end runs nothing yet.
      ASSERT_EQ(nnsGroupStart(), ncclSuccess);
      EXPECT_EQ(nnsAllReduce(nullptr, data.data(), 16, ncclFloat32, ncclSum, comm, nullptr), ncclInvalidArgument);
      ASSERT_EQ(nnsGroupStart(), ncclSuccess);
      EXPECT_EQ(nnsGroupEnd(), ncclSuccess) << nnsGetLastError(nullptr);
      EXPECT_EQ(nnsGroupEnd(), ncclInvalidArgument) << "the nested group forgot the refusal";
      // The root's buffers of a broadcast that overlap without being in place are refused at the call, inside a
      // group too (not first at its end, once the other ranks had started theirs).
      ASSERT_EQ(nnsGroupStart(), ncclSuccess);
      EXPECT_EQ(nnsBroadcast(data.data(), data.data() + 1, 4, ncclFloat32, 0, comm, nullptr), ncclInvalidArgument);
      EXPECT_NE(std::string(nnsGetLastError(nullptr)).find("overlap"), std::string::npos) << nnsGetLastError(nullptr);
      EXPECT_EQ(nnsGroupEnd(), ncclInvalidArgument);
    } else {
      EXPECT_EQ(nnsAllReduce(data.data(), data.data(), 16, ncclFloat32, ncclSum, comm, nullptr), ncclSuccess)
          << nnsGetLastError(nullptr);
    }
    EXPECT_EQ(data[15], 3.0f);
    expectHealthyThenDestroy(comm);
  });
  unsetenv("NNS_COMM_TIMEOUT_MS");
}

// Sends to itself and receives from itself that are not pairs on the same memory must not overlap: the copies run
// one after another, so a swap (send A, receive B, send B, receive A) gave B's new value to A, with no error. It is
// refused as a whole, nothing is copied, and the group's collective still runs on this rank as on its peer (it was
// skipped, and the peer waited out its timeout).
TEST(CApi, ASwapThroughCopiesToItselfIsRefusedAndTheGroupsCollectiveStillRuns) {
  setenv("NNS_COMM_TIMEOUT_MS", "5000", 1);
  onRanks(2, [](int rank, nnsComm_t comm) {
    std::vector<int> a(64, 1), b(64, 2), z(16, rank + 1);
    if (rank == 0) {
      ASSERT_EQ(nnsGroupStart(), ncclSuccess);
      ASSERT_EQ(nnsSend(a.data(), 64, ncclInt32, 0, comm, nullptr), ncclSuccess);
      ASSERT_EQ(nnsRecv(b.data(), 64, ncclInt32, 0, comm, nullptr), ncclSuccess);
      ASSERT_EQ(nnsSend(b.data(), 64, ncclInt32, 0, comm, nullptr), ncclSuccess);
      ASSERT_EQ(nnsRecv(a.data(), 64, ncclInt32, 0, comm, nullptr), ncclSuccess);
      ASSERT_EQ(nnsAllReduce(z.data(), z.data(), 16, ncclInt32, ncclSum, comm, nullptr), ncclSuccess);
      EXPECT_EQ(nnsGroupEnd(), ncclInvalidArgument);
      EXPECT_NE(std::string(nnsGetLastError(nullptr)).find("overlap in one group"), std::string::npos)
          << nnsGetLastError(nullptr);
      EXPECT_EQ(a[0], 1) << "copied by a refused group";
      EXPECT_EQ(b[0], 2) << "copied by a refused group";
      // A chain (A to B, then B to C) is refused the same way; the pairs on distinct memory run.
      std::vector<int> c(64, 3);
      ASSERT_EQ(nnsGroupStart(), ncclSuccess);
      ASSERT_EQ(nnsSend(a.data(), 64, ncclInt32, 0, comm, nullptr), ncclSuccess);
      ASSERT_EQ(nnsRecv(b.data(), 64, ncclInt32, 0, comm, nullptr), ncclSuccess);
      ASSERT_EQ(nnsSend(b.data(), 64, ncclInt32, 0, comm, nullptr), ncclSuccess);
      ASSERT_EQ(nnsRecv(c.data(), 64, ncclInt32, 0, comm, nullptr), ncclSuccess);
      EXPECT_EQ(nnsGroupEnd(), ncclInvalidArgument);
      EXPECT_EQ(c[0], 3);
      ASSERT_EQ(nnsGroupStart(), ncclSuccess);
      ASSERT_EQ(nnsSend(a.data(), 64, ncclInt32, 0, comm, nullptr), ncclSuccess);
      ASSERT_EQ(nnsRecv(c.data(), 64, ncclInt32, 0, comm, nullptr), ncclSuccess);
      ASSERT_EQ(nnsSend(b.data(), 64, ncclInt32, 0, comm, nullptr), ncclSuccess);
      ASSERT_EQ(nnsRecv(b.data(), 64, ncclInt32, 0, comm, nullptr), ncclSuccess);
      ASSERT_EQ(nnsGroupEnd(), ncclSuccess) << nnsGetLastError(nullptr);
      EXPECT_EQ(c[0], 1);
      EXPECT_EQ(b[0], 2);
    } else {
      ASSERT_EQ(nnsAllReduce(z.data(), z.data(), 16, ncclInt32, ncclSum, comm, nullptr), ncclSuccess)
          << nnsGetLastError(nullptr);
    }
    EXPECT_EQ(z[15], 3);
    expectHealthyThenDestroy(comm);
  });
  unsetenv("NNS_COMM_TIMEOUT_MS");
}

// A communicator this rank cannot set up is this rank's error, not a remote one: the plugin's own result when its
// init fails, invalid usage for a setting it cannot run with. Nothing remote took part (one rank).
TEST(CApi, ASetUpFailureOnThisRankIsNotARemoteError) {
  setenv("NCCL_NET_PLUGIN", "socket", 1);
  setenv("NNS_ROOT_ADDR", ("127.0.0.1:" + std::to_string(nns::test::freeLoopbackPort())).c_str(), 1);
  nnsUniqueId id;
  ASSERT_EQ(nnsGetUniqueId(&id), ncclSuccess);
  unsetenv("NNS_ROOT_ADDR");
  nnsComm_t comm = nullptr;

  setenv("NCCL_SOCKET_IFNAME", "nns-no-such-if", 1);
  EXPECT_EQ(nnsCommInitRank(&comm, 1, id, 0), ncclSystemError) << nnsGetLastError(nullptr);
  EXPECT_NE(std::string(nnsGetLastError(nullptr)).find("returned ncclSystemError"), std::string::npos)
      << nnsGetLastError(nullptr);
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);

  setenv("NNS_SLOTS", "many", 1);
  EXPECT_EQ(nnsCommInitRank(&comm, 1, id, 0), ncclInvalidUsage) << nnsGetLastError(nullptr);
  EXPECT_NE(std::string(nnsGetLastError(nullptr)).find("NNS_SLOTS=many"), std::string::npos)
      << nnsGetLastError(nullptr);
  unsetenv("NNS_SLOTS");

  setenv("NCCL_NET_PLUGIN", "nns-no-such-plugin", 1);
  EXPECT_EQ(nnsCommInitRank(&comm, 1, id, 0), ncclSystemError) << nnsGetLastError(nullptr);
  EXPECT_NE(std::string(nnsGetLastError(nullptr)).find("no net plugin loaded"), std::string::npos)
      << nnsGetLastError(nullptr);
  setenv("NCCL_NET_PLUGIN", "socket", 1);

  ASSERT_EQ(nnsCommInitRank(&comm, 1, id, 0), ncclSuccess) << nnsGetLastError(nullptr);
  EXPECT_EQ(nnsCommDestroy(comm), ncclSuccess);
}
