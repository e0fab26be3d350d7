// ucx_pair.hpp: the UCX plugin loaded with an environment of its own, initialized, and one connected pair on device 0,
// for tests in one process. Include after ../socket/plugin_harness.hpp (with NNS_SOCKET_PLUGIN_PATH naming the UCX
// plugin).
#pragma once

#include <stdlib.h>

#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace socket_test {

struct UcxPair {
  const ncclNet_v12_t* net = nullptr;
  void* ctx = nullptr;
  void *sendComm = nullptr, *recvComm = nullptr, *listenComm = nullptr;
};

// Sets `env` (UCX reads it when the plugin initializes), loads and initializes the plugin, connects a pair. Fails
// the test (fatally: call through ASSERT_NO_FATAL_FAILURE) when any step does.
inline void openUcxPair(const std::vector<std::pair<const char*, const char*>>& env, UcxPair* pair) {
  for (const auto& [key, value] : env) setenv(key, value, 1);
  pair->net = plugin();
  ASSERT_NE(pair->net, nullptr) << dlerror();
  ncclResult_t result = ncclSuccess;
  pair->ctx = initPlugin(pair->net, &result);
  ASSERT_EQ(result, ncclSuccess);
  ASSERT_EQ(connectPair(pair->net, pair->ctx, 0, &pair->sendComm, &pair->recvComm, &pair->listenComm), ncclSuccess);
}

inline void closeUcxPair(const UcxPair& pair) {
  EXPECT_EQ(pair.net->closeRecv(pair.recvComm), ncclSuccess);
  EXPECT_EQ(pair.net->closeSend(pair.sendComm), ncclSuccess);
  EXPECT_EQ(pair.net->closeListen(pair.listenComm), ncclSuccess);
}

}  // namespace socket_test
