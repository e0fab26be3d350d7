// collnet_export_plugin.cc: a test-double plugin library (collNet needs switch hardware that cannot run here) that
// only proves NCCL_NET_SDK_EXPORT_WITH_COLLNET exports ncclNetPlugin_v6..v12 and ncclCollNetPlugin_v6..v12 and
// nothing else. Every call returns ncclInvalidUsage: it is never loaded as a transport.
#include <nccl_net/sdk.hpp>

namespace {
constexpr ncclResult_t kTestDouble = ncclInvalidUsage;
}

struct ExportOnlyNet {
  static constexpr const char kName[] = "export-only";
  ncclResult_t init(const nccl_net::sdk::InitArgs&, void**) { return kTestDouble; }
  ncclResult_t devices(int* ndev) {
    *ndev = 0;
    return kTestDouble;
  }
  ncclResult_t getProperties(int, ncclNetProperties_v12_t*) { return kTestDouble; }
  ncclResult_t listen(void*, int, void*, void**) { return kTestDouble; }
  ncclResult_t connect(void*, int, void*, void**, ncclNetDeviceHandle_v12_t**) { return kTestDouble; }
  ncclResult_t accept(void*, void**, ncclNetDeviceHandle_v12_t**) { return kTestDouble; }
  ncclResult_t regMr(void*, void*, size_t, int, void**) { return kTestDouble; }
  ncclResult_t deregMr(void*, void*) { return kTestDouble; }
  ncclResult_t isend(void*, void*, size_t, int, void*, void*, void**) { return kTestDouble; }
  ncclResult_t irecv(void*, int, void**, size_t*, int*, void**, void**, void**) { return kTestDouble; }
  ncclResult_t test(void*, int*, nccl_net::sdk::CompletedSizes&) { return kTestDouble; }
  ncclResult_t closeSend(void*) { return kTestDouble; }
  ncclResult_t closeRecv(void*) { return kTestDouble; }
  ncclResult_t closeListen(void*) { return kTestDouble; }
};

struct ExportOnlyColl {
  static constexpr const char kName[] = "export-only-coll";
  ncclResult_t init(const nccl_net::sdk::InitArgs&, void**) { return kTestDouble; }
  ncclResult_t devices(int* ndev) {
    *ndev = 0;
    return kTestDouble;
  }
  ncclResult_t getProperties(int, ncclNetProperties_v12_t*) { return kTestDouble; }
  ncclResult_t listen(void*, int, void*, void**) { return kTestDouble; }
  ncclResult_t connect(void**, int, int, void*, void**) { return kTestDouble; }
  ncclResult_t reduceSupport(ncclDataType_t, ncclRedOp_t, int*) { return kTestDouble; }
  ncclResult_t regMr(void*, void*, size_t, int, void**) { return kTestDouble; }
  ncclResult_t deregMr(void*, void*) { return kTestDouble; }
  ncclResult_t iallreduce(void*, void*, void*, size_t, ncclDataType_t, ncclRedOp_t, void*, void*, void**) {
    return kTestDouble;
  }
  ncclResult_t test(void*, int*, nccl_net::sdk::CompletedSizes&) { return kTestDouble; }
  ncclResult_t closeColl(void*) { return kTestDouble; }
  ncclResult_t closeListen(void*) { return kTestDouble; }
};

NCCL_NET_SDK_EXPORT_WITH_COLLNET(ExportOnlyNet, ExportOnlyColl)
