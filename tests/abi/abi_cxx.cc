// abi_cxx.cc: the net-api headers compile as C++ (with the same pins) and agree with the C view.
#include <gtest/gtest.h>
#include <nccl_net/abi_checks.h>
#include <nccl_net/net.h>

#include <type_traits>

NCCL_NET_ABI_CHECK_ALL()

TEST(AbiCxx, NewestAliasesAreV12) {
  EXPECT_TRUE((std::is_same_v<ncclNet_t, ncclNet_v12_t>));
  EXPECT_TRUE((std::is_same_v<ncclCollNet_t, ncclCollNet_v12_t>));
  EXPECT_TRUE((std::is_same_v<ncclNetProperties_t, ncclNetProperties_v12_t>));
  EXPECT_EQ(NCCL_NET_NEWEST_VERSION, 12);
}

TEST(AbiCxx, EnumsAreIntSizedWithNcclValues) {
  EXPECT_EQ(sizeof(ncclResult_t), 4u);
  EXPECT_EQ(sizeof(ncclDataType_t), 4u);
  EXPECT_EQ(sizeof(ncclRedOp_t), 4u);
  EXPECT_EQ(sizeof(ncclNetDeviceType), 4u);
  EXPECT_EQ(ncclRemoteError, 6);
  EXPECT_EQ(ncclTimeout, 8);
  EXPECT_EQ(ncclBfloat16, 9);
  EXPECT_EQ(ncclFloat8e5m2, 11);
  EXPECT_EQ(ncclAvg, 4);
  EXPECT_EQ(NCCL_NET, 0x10);
}

TEST(AbiCxx, TablesHaveOneSlotPerFunction) {
  // 8-byte slots: name + functions. v6 17, v7/v8 19, v9/v10 20, v11/v12 22.
  EXPECT_EQ(sizeof(ncclNet_v6_t) / 8, 17u);
  EXPECT_EQ(sizeof(ncclNet_v8_t) / 8, 19u);
  EXPECT_EQ(sizeof(ncclNet_v10_t) / 8, 20u);
  EXPECT_EQ(sizeof(ncclNet_v12_t) / 8, 22u);
  EXPECT_EQ(sizeof(ncclCollNet_v7_t) / 8, 15u);
  EXPECT_EQ(sizeof(ncclCollNet_v12_t) / 8, 19u);
}
