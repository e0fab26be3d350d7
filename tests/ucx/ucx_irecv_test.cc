// ucx_irecv_test.cc: nns-ucx receives in one process over tcp loopback: grouped receives whose posting goes wrong
// part-way, and memory deregistered under a posted receive or send.
//
// UCX gives no way to make ucp_tag_recv_nbx fail on demand, so this executable defines ucp_tag_recv_nbx itself and
// exports it (ENABLE_EXPORTS): the plugin's call binds to it first (the executable leads the global lookup scope),
// and it forwards to libucp's unless a test asked for a failure.
#include <dlfcn.h>
#include <stdlib.h>

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

// A grouped receive whose first sub is truncated while its second sub's message never comes: test() reports the
// truncation (ncclInvalidUsage) as soon as it happened, not when (if ever) every sub completed, and the request's other
// sub is cancelled and taken back, so closing waits for nothing. It waited for tag 2 for ever before.
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
