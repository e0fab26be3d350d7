// abi_cxx.cc: the net-api headers compile as C++ (with the same pins) and agree with the C view.
#include <gtest/gtest.h>
#include <nccl_net/abi_checks.h>
#include <nccl_net/net.h>

#include <type_traits>

NCCL_NET_ABI_CHECK_ALL();

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

// The flags and constants a plugin passes or reads, with NCCL's values; the GIN/RMA ones too, which no ncclNet_vN
// call takes but NCCL's net header defines.
TEST(AbiCxx, ConstantsHaveNcclValues) {
  EXPECT_EQ(NCCL_NET_HANDLE_MAXSIZE, 128);
  EXPECT_EQ(NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF, 0x7);
  EXPECT_EQ(NCCL_NET_MAX_REQUESTS, 32);
  EXPECT_EQ(NCCL_NET_OPTIONAL_RECV_COMPLETION, 0x1);
  EXPECT_EQ(NCCL_NET_MULTI_REQUEST, 0x2);
  EXPECT_EQ(NCCL_NET_MR_FLAG_FORCE_SO, 0x1);
  EXPECT_EQ(NCCL_NET_MR_FLAG_SIGNAL_NEVER_RESET, 0x2);
  EXPECT_EQ(NCCL_NET_SIGNAL_OP_INC, 0x1);
  EXPECT_EQ(NCCL_NET_SIGNAL_OP_ADD, 0x2);
  EXPECT_EQ(ncclProfilerNetEventUpdateAndStop, 3);
  // The size limits, under NCCL's names as well (signed long there, as here).
  EXPECT_EQ(NCCL_MAX_NET_SIZE_BYTES, 1ULL << 40);
  EXPECT_EQ(MAX_NET_SIZE, 1L << 30);
  EXPECT_EQ(MAX_COLLNET_SIZE, 1L << 29);
  static_assert(std::is_same_v<decltype(MAX_NET_SIZE), long>, "NCCL's MAX_NET_SIZE is a long");
  EXPECT_EQ(static_cast<unsigned long long>(MAX_NET_SIZE), NCCL_NET_DEFAULT_MAX_P2P_BYTES);
  EXPECT_EQ(static_cast<unsigned long long>(MAX_COLLNET_SIZE), NCCL_NET_DEFAULT_MAX_COLL_BYTES);
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
