// unload_plugin.cc: a test-double plugin library (it moves no data) for the SDK's unload path: v6..v10 hosts have no
// finalize and NCCL dlcloses the plugin after its last communicator, so the contexts the SDK made for such a host
// must reach the vendor's finalize as the library goes. Each finalize says which ctx through the host's logger.
#include <nccl_net/sdk.hpp>

namespace {
constexpr ncclResult_t kTestDouble = ncclInvalidUsage;
}

struct UnloadTestNet {
  static constexpr const char kName[] = "sdk-unload-test";
  ncclResult_t init(const nccl_net::sdk::InitArgs& args, void** ctx) {
    *ctx = new int(args.trafficClass);
    return ncclSuccess;
  }
  ncclResult_t finalize(void* ctx) {
    auto* trafficClass = static_cast<int*>(ctx);
    NCCL_NET_WARN("sdk-unload-test: finalize of the context for traffic class %d", *trafficClass);
    delete trafficClass;
    return ncclSuccess;
  }
  ncclResult_t devices(int* ndev) {
    *ndev = 1;
    return ncclSuccess;
  }
  ncclResult_t getProperties(int, ncclNetProperties_v12_t* props) {
    props->name = const_cast<char*>("unload0");
    return ncclSuccess;
  }
  ncclResult_t listen(void*, int, void*, void**) { return kTestDouble; }
  // Completes at once with the ctx as the comm, so the host can see a context per traffic class was made.
  ncclResult_t connect(void* ctx, int, void*, void** sendComm, ncclNetDeviceHandle_v12_t**) {
    *sendComm = ctx;
    return ncclSuccess;
  }
  ncclResult_t accept(void*, void**, ncclNetDeviceHandle_v12_t**) { return kTestDouble; }
  ncclResult_t regMr(void*, void*, size_t, int, void**) { return kTestDouble; }
  ncclResult_t deregMr(void*, void*) { return kTestDouble; }
  ncclResult_t isend(void*, void*, size_t, int, void*, void*, void**) { return kTestDouble; }
  ncclResult_t irecv(void*, int, void**, size_t*, int*, void**, void**, void**) { return kTestDouble; }
  ncclResult_t test(void*, int*, nccl_net::sdk::CompletedSizes&) { return kTestDouble; }
  ncclResult_t closeSend(void*) { return ncclSuccess; }
  ncclResult_t closeRecv(void*) { return ncclSuccess; }
  ncclResult_t closeListen(void*) { return ncclSuccess; }
};

NCCL_NET_SDK_EXPORT(UnloadTestNet)
