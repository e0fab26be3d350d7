// ucx_irecv_test.cc: nns-ucx receives in one process over tcp loopback: grouped receives whose posting goes wrong
// part-way, grouped receives beyond maxRecvs, the device's properties, memory deregistered under a posted receive or
// send, and memory types regMr must refuse.
//
// UCX gives no way to make ucp_tag_recv_nbx fail on demand, so this executable defines ucp_tag_recv_nbx itself and
// exports it (ENABLE_EXPORTS): the plugin's call binds to it first (the executable leads the global lookup scope),
// and it forwards to libucp's unless a test asked for a failure.
#include <dlfcn.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>
#include <ucp/api/ucp.h>

#define NNS_SOCKET_PLUGIN_PATH NNS_UCX_PLUGIN_PATH  // plugin_harness.hpp loads the plugin named by this macro
#include "../socket/plugin_harness.hpp"
#include "ucx_pair.hpp"

namespace {
int failRecvCall = 0;  // > 0: that many ucp_tag_recv_nbx calls from now, the last one fails
}  // namespace

extern "C" ucs_status_ptr_t ucp_tag_recv_nbx(ucp_worker_h worker, void* buffer, size_t count, ucp_tag_t tag,
                                             ucp_tag_t tagMask, const ucp_request_param_t* param) {
  using Function = ucs_status_ptr_t (*)(ucp_worker_h, void*, size_t, ucp_tag_t, ucp_tag_t, const ucp_request_param_t*);
  // libucp came in with the plugin (this executable does not need it at link time, so --as-needed drops it).
  static auto real =
      reinterpret_cast<Function>(dlsym(dlopen("libucp.so.0", RTLD_NOW | RTLD_NOLOAD), "ucp_tag_recv_nbx"));
  if (failRecvCall > 0 && --failRecvCall == 0) return UCS_STATUS_PTR(UCS_ERR_NO_MEMORY);
  return real(worker, buffer, count, tag, tagMask, param);
}

// Counts the plugin's unmaps and forwards them: a deregMr under a posted receive must not unmap the region the receive
// was given (UCX reads its memh when the data arrives), but must when the receive ends.
int unmapCalls = 0;
extern "C" ucs_status_t ucp_mem_unmap(ucp_context_h context, ucp_mem_h memh) {
  using Function = ucs_status_t (*)(ucp_context_h, ucp_mem_h);
  static auto real = reinterpret_cast<Function>(dlsym(dlopen("libucp.so.0", RTLD_NOW | RTLD_NOLOAD), "ucp_mem_unmap"));
  ++unmapCalls;
  return real(context, memh);
}

namespace {

using namespace socket_test;

// Tests a send and a receive until both are done (20 s at most), from this one thread: a rendezvous needs both workers
// progressed. *received: the receive's size.
void driveBoth(const ncclNet_v12_t* net, void* sendRequest, void* recvRequest, int* received) {
  int sendDone = 0, recvDone = 0;
  auto deadline = Clock::now() + std::chrono::seconds(20);
  while (!sendDone || !recvDone) {
    if (!sendDone) {
      ASSERT_EQ(net->test(sendRequest, &sendDone, nullptr), ncclSuccess);
    }
    if (!recvDone) {
      ASSERT_EQ(net->test(recvRequest, &recvDone, received), ncclSuccess);
    }
    ASSERT_LT(Clock::now(), deadline) << "the transfer did not complete";
  }
}

// The second of three grouped receives cannot be posted: irecv fails and hands out no request, and the comm is
// failed, so a receive posted earlier reports an error instead of waiting forever for a peer that NCCL abandons.
TEST(UcxIrecv, FailedSubReceiveFailsTheComm) {
  setenv("NNS_UCX_CLOSE_TIMEOUT_MS", "3000", 1);
  UcxPair pair;
  ASSERT_NO_FATAL_FAILURE(openUcxPair({{"UCX_TLS", "tcp"}, {"UCX_NET_DEVICES", "lo"}}, &pair));
  const ncclNet_v12_t* net = pair.net;
  ASSERT_NE(net, nullptr);  // openUcxPair checked it; said again for the static analyzer
  std::vector<char> earlier(4096), grouped(3 * 4096);
  void* earlierData = earlier.data();
  size_t earlierSize = earlier.size();
  int earlierTag = 1;
  void* earlierRequest = nullptr;
  ASSERT_EQ(postRecv(net, pair.recvComm, 1, &earlierData, &earlierSize, &earlierTag, &earlierRequest), ncclSuccess);

  void* data[3] = {grouped.data(), grouped.data() + 4096, grouped.data() + 2 * 4096};
  size_t sizes[3] = {4096, 4096, 4096};
  int tags[3] = {10, 11, 12};
  void* mhandles[3] = {};
  void* request = nullptr;
  failRecvCall = 2;
  EXPECT_NE(net->irecv(pair.recvComm, 3, data, sizes, tags, mhandles, nullptr, &request), ncclSuccess);
  failRecvCall = 0;
  EXPECT_EQ(request, nullptr);
  EXPECT_TRUE(warnedAbout("irecv could not post a receive")) << "the comm was not failed";

  int recvSizes[8] = {};
  auto start = Clock::now();
  ncclResult_t result = waitRequest(net, earlierRequest, recvSizes, std::chrono::seconds(5));
  EXPECT_NE(result, ncclSuccess) << "the earlier receive completed on a failed comm";
  EXPECT_NE(result, ncclTimeout) << "the earlier receive still waits: the comm was not failed";
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(1));

  // The abandoned subs were cancelled and taken back: closing everything works and waits out no timeout.
  start = Clock::now();
  closeUcxPair(pair);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
}

// A grouped receive whose first message has already arrived completes that sub inside ucp_tag_recv_nbx (the plugin
// asks for no immediate completion, so UCX runs the callback, which frees the UCP request, before returning it).
// The plugin must keep no handle to that request: closeRecv would cancel a freed request and wait
// NNS_UCX_CLOSE_TIMEOUT_MS for a callback that already ran.
TEST(UcxIrecv, SubCompletedAtPostHoldsNoUcxRequest) {
  setenv("NNS_UCX_CLOSE_TIMEOUT_MS", "3000", 1);
  UcxPair pair;
  ASSERT_NO_FATAL_FAILURE(openUcxPair({{"UCX_TLS", "tcp"}, {"UCX_NET_DEVICES", "lo"}}, &pair));
  const ncclNet_v12_t* net = pair.net;
  ASSERT_NE(net, nullptr);  // openUcxPair checked it; said again for the static analyzer
  std::vector<char> message(64, 'm'), other(64), grouped(2 * 64);
  void* sendRequest = nullptr;
  ASSERT_EQ(postSend(net, pair.sendComm, message.data(), message.size(), 20, &sendRequest), ncclSuccess);
  // Progress both workers through a receive of another tag until the tag-20 message sits unexpected at the receiver.
  void* otherData = other.data();
  size_t otherSize = other.size();
  int otherTag = 99;
  void* otherRequest = nullptr;
  ASSERT_EQ(postRecv(net, pair.recvComm, 1, &otherData, &otherSize, &otherTag, &otherRequest), ncclSuccess);
  int sendDone = 0, otherDone = 0, sizes[8] = {};
  for (auto until = Clock::now() + std::chrono::milliseconds(300); Clock::now() < until;) {
    if (!sendDone) {
      ASSERT_EQ(net->test(sendRequest, &sendDone, sizes), ncclSuccess);
    }
    ASSERT_EQ(net->test(otherRequest, &otherDone, sizes), ncclSuccess);
    ASSERT_FALSE(otherDone);
  }
  ASSERT_TRUE(sendDone);

  void* data[2] = {grouped.data(), grouped.data() + 64};
  size_t capacities[2] = {64, 64};
  int tags[2] = {20, 21};
  void* request = nullptr;
  ASSERT_EQ(postRecv(net, pair.recvComm, 2, data, capacities, tags, &request), ncclSuccess);
  int done = 0;
  ASSERT_EQ(net->test(request, &done, sizes), ncclSuccess);
  EXPECT_FALSE(done) << "tag 21 was never sent";
  EXPECT_EQ(std::memcmp(grouped.data(), message.data(), message.size()), 0) << "tag 20 was not received at post";

  // Both receives are still in flight; closing cancels tag 21 and tag 99 and must not wait for tag 20's request.
  auto start = Clock::now();
  closeUcxPair(pair);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
}

// maxRecvs is what irecv takes: a group of maxRecvs receives is posted and completes, one more is refused with an error
// and no request (the plugin's request holds maxRecvs subs: a larger group would write past them).
TEST(UcxIrecv, AGroupOfMaxRecvsIsTakenAndOneMoreIsRefused) {
  UcxPair pair;
  ASSERT_NO_FATAL_FAILURE(openUcxPair({{"UCX_TLS", "tcp"}, {"UCX_NET_DEVICES", "lo"}}, &pair));
  const ncclNet_v12_t* net = pair.net;
  ASSERT_NE(net, nullptr);  // openUcxPair checked it; said again for the static analyzer
  ncclNetProperties_v12_t props{};
  ASSERT_EQ(net->getProperties(0, &props), ncclSuccess);
  ASSERT_GE(props.maxRecvs, 2) << "nns-ucx groups receives (NCCL's IB transport groups 8)";
  ASSERT_LE(props.maxRecvs, 63);
  const int n = props.maxRecvs;
  std::vector<std::vector<char>> buffers(static_cast<size_t>(n) + 1, std::vector<char>(64));
  std::vector<void*> data;
  std::vector<size_t> sizes(static_cast<size_t>(n) + 1, 64);
  std::vector<int> tags;
  std::vector<void*> mhandles(static_cast<size_t>(n) + 1, nullptr);
  for (int i = 0; i <= n; ++i) {
    data.push_back(buffers[static_cast<size_t>(i)].data());
    tags.push_back(100 + i);
  }
  void* request = nullptr;
  EXPECT_NE(
      net->irecv(pair.recvComm, n + 1, data.data(), sizes.data(), tags.data(), mhandles.data(), nullptr, &request),
      ncclSuccess)
      << "irecv took " << n + 1 << " grouped receives with maxRecvs " << n;
  EXPECT_EQ(request, nullptr);

  ASSERT_EQ(postRecv(net, pair.recvComm, n, data.data(), sizes.data(), tags.data(), &request), ncclSuccess);
  std::vector<std::vector<char>> messages;
  std::vector<void*> sendRequests(static_cast<size_t>(n), nullptr);
  for (int i = 0; i < n; ++i) {
    messages.emplace_back(64, static_cast<char>('a' + i));
    ASSERT_EQ(postSend(net, pair.sendComm, messages.back().data(), 10 + static_cast<size_t>(i), 100 + i,
                       &sendRequests[static_cast<size_t>(i)]),
              ncclSuccess);
  }
  // Both workers progressed from this one thread until every send and the group are done.
  int received[64] = {};
  int recvDone = 0;
  std::vector<int> sendDone(static_cast<size_t>(n), 0);
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (!recvDone || std::count(sendDone.begin(), sendDone.end(), 0) > 0) {
    for (size_t i = 0; i < sendDone.size(); ++i)
      if (!sendDone[i]) {
        ASSERT_EQ(net->test(sendRequests[i], &sendDone[i], nullptr), ncclSuccess);
      }
    if (!recvDone) {
      ASSERT_EQ(net->test(request, &recvDone, received), ncclSuccess);
    }
    ASSERT_LT(Clock::now(), deadline) << "the group did not complete";
  }
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(received[i], 10 + i) << "receive " << i;
    EXPECT_EQ(buffers[static_cast<size_t>(i)][0], static_cast<char>('a' + i)) << "receive " << i;
  }
  closeUcxPair(pair);
}

// A grouped receive whose first sub is truncated while its second sub's message never comes: test() reports the
// truncation (ncclInvalidUsage) as soon as it happened, not when (if ever) every sub completed, and the request's other
// sub is cancelled and taken back, so closing waits for nothing. It waited for tag 2 for ever before. And the comm
// takes no more receives: the cancelled sub's message, sent after, waited in the worker and a later receive of tag 2
// took it as its own.
TEST(UcxIrecv, ATruncatedSubFailsTheGroupWithoutWaitingForTheOthers) {
  setenv("NNS_UCX_CLOSE_TIMEOUT_MS", "3000", 1);
  UcxPair pair;
  ASSERT_NO_FATAL_FAILURE(openUcxPair({{"UCX_TLS", "tcp"}, {"UCX_NET_DEVICES", "lo"}}, &pair));
  const ncclNet_v12_t* net = pair.net;
  ASSERT_NE(net, nullptr);  // openUcxPair checked it; said again for the static analyzer
  std::vector<char> big(8192, 'b'), first(4096), second(4096);
  void* data[2] = {first.data(), second.data()};
  size_t sizes[2] = {4096, 4096};
  int tags[2] = {1, 2};
  void* request = nullptr;
  ASSERT_EQ(postRecv(net, pair.recvComm, 2, data, sizes, tags, &request), ncclSuccess);
  void* sendRequest = nullptr;
  ASSERT_EQ(postSend(net, pair.sendComm, big.data(), big.size(), 1, &sendRequest), ncclSuccess);
  int done = 0, received[8] = {};
  int sendDone = 0;
  ncclResult_t result = ncclSuccess;
  auto start = Clock::now();
  while (result == ncclSuccess && !done && Clock::now() - start < std::chrono::seconds(10)) {
    if (!sendDone) {
      ASSERT_EQ(net->test(sendRequest, &sendDone, received), ncclSuccess);
    }
    result = net->test(request, &done, received);
  }
  EXPECT_EQ(result, ncclInvalidUsage) << "the truncation of sub 0 was not reported while sub 1 waits";
  EXPECT_FALSE(done);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
  EXPECT_TRUE(warnedAbout("the 8192-byte message is larger than the 4096-byte buffer"));
  std::vector<char> stale(100, 's');
  void* staleRequest = nullptr;
  ASSERT_EQ(postSend(net, pair.sendComm, stale.data(), stale.size(), 2, &staleRequest), ncclSuccess);
  void* later = nullptr;
  EXPECT_EQ(postRecv(net, pair.recvComm, 1, data + 1, sizes + 1, tags + 1, &later), ncclInvalidUsage)
      << "a receive of tag 2 was posted on the comm after its group failed";
  EXPECT_EQ(later, nullptr);
  EXPECT_TRUE(warnedAbout("a grouped receive failed on it earlier"));
  // Sub 1 was cancelled: closing everything waits out no NNS_UCX_CLOSE_TIMEOUT_MS (3 s here).
  start = Clock::now();
  closeUcxPair(pair);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
}

// A buffer registered through a comm of another device (another UCP context, with memory mapped as for RDMA) and
// then sent and received through a comm of this one: the foreign memory handle must not reach UCX, and the bytes
// arrive. Two devices: lo and eth0 (or any second interface UCX lists).
TEST(UcxIrecv, AMemoryHandleOfAnotherDeviceIsNotUsed) {
  setenv("UCX_TLS", "tcp", 1);
  setenv("UCX_NET_DEVICES", "lo,eth0", 1);
  setenv("NNS_UCX_MEM_MAP", "yes", 1);
  const ncclNet_v12_t* net = plugin();
  ASSERT_NE(net, nullptr) << dlerror();
  ncclResult_t result = ncclSuccess;
  void* ctx = initPlugin(net, &result);
  ASSERT_EQ(result, ncclSuccess);
  int ndev = 0;
  ASSERT_EQ(net->devices(&ndev), ncclSuccess);
  if (ndev < 2) GTEST_SKIP() << "UCX lists " << ndev << " device(s) for lo,eth0: two are needed";
  void* comms[2][3] = {};  // per device: send, recv, listen
  for (int d = 0; d < 2; ++d)
    ASSERT_EQ(connectPair(net, ctx, d, &comms[d][0], &comms[d][1], &comms[d][2]), ncclSuccess) << "device " << d;
  constexpr size_t kBytes = 1u << 20;
  std::vector<unsigned char> source(kBytes), target(kBytes, 0);
  for (size_t i = 0; i < kBytes; ++i) source[i] = static_cast<unsigned char>(i * 7 + 3);
  void* sendHandle = nullptr;
  void* recvHandle = nullptr;
  ASSERT_EQ(net->regMr(comms[0][0], source.data(), kBytes, NCCL_PTR_HOST, &sendHandle), ncclSuccess);
  ASSERT_EQ(net->regMr(comms[0][1], target.data(), kBytes, NCCL_PTR_HOST, &recvHandle), ncclSuccess);
  void* data[1] = {target.data()};
  size_t sizes[1] = {kBytes};
  int tags[1] = {5};
  void* recvRequest = nullptr;
  void* sendRequest = nullptr;
  ASSERT_EQ(net->irecv(comms[1][1], 1, data, sizes, tags, &recvHandle, nullptr, &recvRequest), ncclSuccess);
  ASSERT_EQ(net->isend(comms[1][0], source.data(), kBytes, 5, sendHandle, nullptr, &sendRequest), ncclSuccess);
  ASSERT_NE(recvRequest, nullptr);
  ASSERT_NE(sendRequest, nullptr);
  int received = -1;
  ASSERT_NO_FATAL_FAILURE(driveBoth(net, sendRequest, recvRequest, &received));
  EXPECT_EQ(received, static_cast<int>(kBytes));
  EXPECT_TRUE(target == source);
  EXPECT_EQ(net->deregMr(comms[0][0], sendHandle), ncclSuccess);
  EXPECT_EQ(net->deregMr(comms[0][1], recvHandle), ncclSuccess);
  for (int d = 0; d < 2; ++d) {
    EXPECT_EQ(net->closeSend(comms[d][0]), ncclSuccess);
    EXPECT_EQ(net->closeRecv(comms[d][1]), ncclSuccess);
    EXPECT_EQ(net->closeListen(comms[d][2]), ncclSuccess);
  }
}

// getProperties reports speed in Mbps, as NCCL reads it: loopback's link states no speed (reading its sysfs speed
// fails), so lo reports NCCL's own default for such links, 10 Gb/s, as 10000 (not 10: Gb/s). The name is UCX's.
TEST(UcxProperties, LoopbackReportsItsSpeedInMbps) {
  UcxPair pair;
  ASSERT_NO_FATAL_FAILURE(openUcxPair({{"UCX_TLS", "tcp"}, {"UCX_NET_DEVICES", "lo"}}, &pair));
  const ncclNet_v12_t* net = pair.net;
  ASSERT_NE(net, nullptr);  // openUcxPair checked it; said again for the static analyzer
  ncclNetProperties_v12_t props{};
  ASSERT_EQ(net->getProperties(0, &props), ncclSuccess);
  ASSERT_NE(props.name, nullptr);
  EXPECT_STREQ(props.name, "lo");
  EXPECT_EQ(props.speed, 10000);
  EXPECT_EQ(props.pciPath, nullptr) << "loopback is no PCI function";
  closeUcxPair(pair);
}

// nns-ucx moves host memory only (ptrSupport is NCCL_PTR_HOST): regMr of any other memory type fails and hands out
// no handle, so a caller that ignored ptrSupport learns it at registration, not from UCX reading device memory.
TEST(UcxRegMr, MemoryOtherThanHostIsRefused) {
  UcxPair pair;
  ASSERT_NO_FATAL_FAILURE(openUcxPair({{"UCX_TLS", "tcp"}, {"UCX_NET_DEVICES", "lo"}}, &pair));
  const ncclNet_v12_t* net = pair.net;
  ASSERT_NE(net, nullptr);  // openUcxPair checked it; said again for the static analyzer
  ncclNetProperties_v12_t props{};
  ASSERT_EQ(net->getProperties(0, &props), ncclSuccess);
  EXPECT_EQ(props.ptrSupport, NCCL_PTR_HOST);
  std::vector<char> buffer(4096);
  for (int type : {NCCL_PTR_CUDA, NCCL_PTR_DMABUF}) {
    void* mhandle = nullptr;
    EXPECT_NE(net->regMr(pair.sendComm, buffer.data(), buffer.size(), type, &mhandle), ncclSuccess) << "type " << type;
    EXPECT_EQ(mhandle, nullptr) << "type " << type;
  }
  void* mhandle = nullptr;
  ASSERT_EQ(net->regMr(pair.sendComm, buffer.data(), buffer.size(), NCCL_PTR_HOST, &mhandle), ncclSuccess);
  EXPECT_EQ(net->deregMr(pair.sendComm, mhandle), ncclSuccess);
  closeUcxPair(pair);
}

// NCCL's teardown after an abort deregisters a receive buffer before it closes the comm, with a receive still posted
// into it. The region stays mapped for that receive: it still completes, correctly, and its release unmaps the region.
// deregMr unmapped it at once before, and UCX read the freed memh when the rendezvous data arrived (valgrind).
TEST(UcxIrecv, DeregisteringUnderAPostedReceiveUnmapsWhenItEnds) {
  UcxPair pair;
  ASSERT_NO_FATAL_FAILURE(
      openUcxPair({{"UCX_TLS", "tcp"}, {"UCX_NET_DEVICES", "lo"}, {"NNS_UCX_MEM_MAP", "yes"}}, &pair));
  const ncclNet_v12_t* net = pair.net;
  ASSERT_NE(net, nullptr);             // openUcxPair checked it; said again for the static analyzer
  constexpr size_t kBytes = 1u << 20;  // a rendezvous over tcp
  std::vector<unsigned char> source(kBytes), target(kBytes, 0);
  for (size_t i = 0; i < kBytes; ++i) source[i] = static_cast<unsigned char>(i * 13 + 1);
  void* recvHandle = nullptr;
  ASSERT_EQ(net->regMr(pair.recvComm, target.data(), kBytes, NCCL_PTR_HOST, &recvHandle), ncclSuccess);
  void* data[1] = {target.data()};
  size_t sizes[1] = {kBytes};
  int tags[1] = {7};
  void* recvRequest = nullptr;
  ASSERT_EQ(net->irecv(pair.recvComm, 1, data, sizes, tags, &recvHandle, nullptr, &recvRequest), ncclSuccess);
  ASSERT_NE(recvRequest, nullptr);
  unmapCalls = 0;
  EXPECT_EQ(net->deregMr(pair.recvComm, recvHandle), ncclSuccess);
  EXPECT_EQ(unmapCalls, 0) << "the region was unmapped under the posted receive";

  void* sendRequest = nullptr;
  ASSERT_EQ(postSend(net, pair.sendComm, source.data(), kBytes, 7, &sendRequest), ncclSuccess);
  int received = -1;
  ASSERT_NO_FATAL_FAILURE(driveBoth(net, sendRequest, recvRequest, &received));
  EXPECT_EQ(received, static_cast<int>(kBytes));
  EXPECT_TRUE(target == source);
  EXPECT_EQ(unmapCalls, 1) << "the receive's release did not unmap the deregistered region";
  closeUcxPair(pair);
  EXPECT_EQ(unmapCalls, 1);
}

// The same deregistration, and then the comm is closed with the receive still pending (the rest of that teardown):
// the close cancels the receive and unmaps the region once the worker is gone.
TEST(UcxIrecv, DeregisteringUnderAPostedReceiveUnmapsAtClose) {
  UcxPair pair;
  ASSERT_NO_FATAL_FAILURE(
      openUcxPair({{"UCX_TLS", "tcp"}, {"UCX_NET_DEVICES", "lo"}, {"NNS_UCX_MEM_MAP", "yes"}}, &pair));
  const ncclNet_v12_t* net = pair.net;
  ASSERT_NE(net, nullptr);  // openUcxPair checked it; said again for the static analyzer
  std::vector<char> target(1u << 20);
  void* recvHandle = nullptr;
  ASSERT_EQ(net->regMr(pair.recvComm, target.data(), target.size(), NCCL_PTR_HOST, &recvHandle), ncclSuccess);
  void* data[1] = {target.data()};
  size_t sizes[1] = {target.size()};
  int tags[1] = {8};
  void* recvRequest = nullptr;
  ASSERT_EQ(net->irecv(pair.recvComm, 1, data, sizes, tags, &recvHandle, nullptr, &recvRequest), ncclSuccess);
  unmapCalls = 0;
  EXPECT_EQ(net->deregMr(pair.recvComm, recvHandle), ncclSuccess);
  EXPECT_EQ(unmapCalls, 0) << "the region was unmapped under the posted receive";
  closeUcxPair(pair);
  EXPECT_EQ(unmapCalls, 1) << "closing the comm did not unmap the deregistered region";
}

// A send comm that failed takes no more sends: once test() reported the failure (here: the receiver closed its comm
// and a send was still waiting for it NNS_UCX_CLOSE_TIMEOUT_MS later), isend fails at once and hands out no request,
// rather than posting to a peer that is gone and leaving the error to a later test().
TEST(UcxIsend, ASendCommThatFailedRefusesFurtherSends) {
  setenv("NNS_UCX_CLOSE_TIMEOUT_MS", "200", 1);
  UcxPair pair;
  ASSERT_NO_FATAL_FAILURE(openUcxPair({{"UCX_TLS", "tcp"}, {"UCX_NET_DEVICES", "lo"}}, &pair));
  const ncclNet_v12_t* net = pair.net;
  ASSERT_NE(net, nullptr);               // openUcxPair checked it; said again for the static analyzer
  std::vector<char> big(1u << 20, 'x');  // a rendezvous over tcp: done only once a receive takes it
  void* sendRequest = nullptr;
  ASSERT_EQ(postSend(net, pair.sendComm, big.data(), big.size(), 3, &sendRequest), ncclSuccess);
  EXPECT_EQ(net->closeRecv(pair.recvComm), ncclSuccess);  // no receive was ever posted for tag 3
  ncclResult_t result = waitRequest(net, sendRequest, nullptr, std::chrono::seconds(10));
  ASSERT_NE(result, ncclSuccess) << "the send completed although its receiver closed without receiving it";
  ASSERT_NE(result, ncclTimeout) << "the send still waits for a receiver that closed";

  std::vector<char> small(64, 's');
  void* request = nullptr;
  EXPECT_NE(net->isend(pair.sendComm, small.data(), small.size(), 4, nullptr, nullptr, &request), ncclSuccess)
      << "isend took a send on a comm that failed";
  EXPECT_EQ(request, nullptr);
  EXPECT_EQ(net->closeSend(pair.sendComm), ncclSuccess);
  EXPECT_EQ(net->closeListen(pair.listenComm), ncclSuccess);
}

// closeSend with a send still waiting for its receiver (NCCL aborting): the send is dropped, not left to linger, since
// the caller may free its buffer once close returns. The receive for it, posted only after the close, fails at once
// (well within NNS_UCX_CLOSE_TIMEOUT_MS, 5 s here) instead of completing with bytes read from the buffer after the
// close. Over tcp and over shared memory, in one process.
void sendPendingAtCloseIsDropped(const std::vector<std::pair<const char*, const char*>>& env) {
  setenv("NNS_UCX_CLOSE_TIMEOUT_MS", "5000", 1);
  UcxPair pair;
  ASSERT_NO_FATAL_FAILURE(openUcxPair(env, &pair));
  const ncclNet_v12_t* net = pair.net;
  ASSERT_NE(net, nullptr);             // openUcxPair checked it; said again for the static analyzer
  constexpr size_t kBytes = 4u << 20;  // a rendezvous: no byte moves before a receive is posted
  std::vector<unsigned char> source(kBytes, 's'), target(kBytes, 0);
  void* sendRequest = nullptr;
  ASSERT_EQ(postSend(net, pair.sendComm, source.data(), kBytes, 6, &sendRequest), ncclSuccess);
  int sendDone = 0;
  ASSERT_EQ(net->test(sendRequest, &sendDone, nullptr), ncclSuccess);
  ASSERT_FALSE(sendDone) << "the send completed with no receive posted";
  EXPECT_EQ(net->closeSend(pair.sendComm), ncclSuccess);
  std::fill(source.begin(), source.end(), 'f');  // what a caller does with a buffer it owns again

  void* data[1] = {target.data()};
  size_t sizes[1] = {kBytes};
  int tags[1] = {6};
  void* recvRequest = nullptr;
  ASSERT_EQ(postRecv(net, pair.recvComm, 1, data, sizes, tags, &recvRequest), ncclSuccess);
  const auto start = Clock::now();
  int received[8] = {};
  ncclResult_t result = waitRequest(net, recvRequest, received, std::chrono::seconds(10));
  EXPECT_NE(result, ncclSuccess) << "the receive completed with a send that its sender closed before it moved";
  EXPECT_NE(result, ncclTimeout);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2)) << "the receiver waited as if the sender said goodbye";
  EXPECT_EQ(net->closeRecv(pair.recvComm), ncclSuccess);
  EXPECT_EQ(net->closeListen(pair.listenComm), ncclSuccess);
}
TEST(UcxIsend, TcpSendPendingAtCloseIsDroppedAndItsReceiverFailsAtOnce) {
  sendPendingAtCloseIsDropped({{"UCX_TLS", "tcp"}, {"UCX_NET_DEVICES", "lo"}});
}
TEST(UcxIsend, SharedMemorySendPendingAtCloseIsDroppedAndItsReceiverFailsAtOnce) {
  sendPendingAtCloseIsDropped({{"UCX_TLS", "sm"}});
}

// The same on the sending side: a send's region deregistered while the send waits for its receiver (a rendezvous
// reads the sender's memh when the receiver asks for the data). The send still moves every byte, and its test unmaps.
TEST(UcxIsend, DeregisteringUnderAPostedSendUnmapsWhenItEnds) {
  UcxPair pair;
  ASSERT_NO_FATAL_FAILURE(
      openUcxPair({{"UCX_TLS", "tcp"}, {"UCX_NET_DEVICES", "lo"}, {"NNS_UCX_MEM_MAP", "yes"}}, &pair));
  const ncclNet_v12_t* net = pair.net;
  ASSERT_NE(net, nullptr);  // openUcxPair checked it; said again for the static analyzer
  constexpr size_t kBytes = 1u << 20;
  std::vector<unsigned char> source(kBytes), target(kBytes, 0);
  for (size_t i = 0; i < kBytes; ++i) source[i] = static_cast<unsigned char>(i * 7 + 3);
  void* sendHandle = nullptr;
  ASSERT_EQ(net->regMr(pair.sendComm, source.data(), kBytes, NCCL_PTR_HOST, &sendHandle), ncclSuccess);
  void* sendRequest = nullptr;
  auto deadline = Clock::now() + std::chrono::seconds(20);
  while (sendRequest == nullptr && Clock::now() < deadline)
    ASSERT_EQ(net->isend(pair.sendComm, source.data(), kBytes, 9, sendHandle, nullptr, &sendRequest), ncclSuccess);
  ASSERT_NE(sendRequest, nullptr) << "the send was not posted in 20 s";
  unmapCalls = 0;
  EXPECT_EQ(net->deregMr(pair.sendComm, sendHandle), ncclSuccess);
  EXPECT_EQ(unmapCalls, 0) << "the region was unmapped under the posted send";

  void* data[1] = {target.data()};
  size_t sizes[1] = {kBytes};
  int tags[1] = {9};
  void* recvRequest = nullptr;
  ASSERT_EQ(postRecv(net, pair.recvComm, 1, data, sizes, tags, &recvRequest), ncclSuccess);
  int received = -1;
  ASSERT_NO_FATAL_FAILURE(driveBoth(net, sendRequest, recvRequest, &received));
  EXPECT_EQ(received, static_cast<int>(kBytes));
  EXPECT_TRUE(target == source);
  EXPECT_EQ(unmapCalls, 1) << "the send's release did not unmap the deregistered region";
  closeUcxPair(pair);
  EXPECT_EQ(unmapCalls, 1);
}

}  // namespace
