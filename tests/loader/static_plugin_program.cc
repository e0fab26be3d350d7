// static_plugin_program.cc: a program that holds its own ncclNet_v12 table and loads it as NCCL_NET_PLUGIN=
// STATIC_PLUGIN does (dlopen(NULL)). Built without position independence, the const table needs no relocation and
// lands in .rodata; linked with -z noseparate-code (as gold links, and as GNU ld does on aarch64) .rodata shares the
// executable segment with the code. The loader took that for "a label in the library's code" and refused a sound
// table. Its collNet finds no device once initialised: rejected after its init ran, it stays disabled for the process
// (the program is never unloaded), so later loads refuse it without calling init again; the record was dropped at
// once for the program, whose placeholder path no dlopen finds, and init ran on every load. Exits 0 when the table
// is chosen and the collNet handled so, 1 (with the reason) when not.
#include <cstdio>
#include <cstring>
#include <string>

#include "host_only_net.hpp"
#include "nns/core/loader.hpp"

namespace {

ncclResult_t init(void** ctx, uint64_t, ncclNetCommConfig_v12_t*, ncclDebugLogger_t, ncclProfilerCallback_t) {
  static int state;
  *ctx = &state;
  return ncclSuccess;
}
ncclResult_t devices(int* ndev) {
  *ndev = 1;
  return ncclSuccess;
}
ncclResult_t getProperties(int, ncclNetProperties_v12_t* props) {
  host_only_net::fillProperties(props, "static0");
  return ncclSuccess;
}
ncclResult_t finalize(void*) {
  return ncclSuccess;
}

// The collNet: a test double whose every entry past init, devices and finalize refuses.
int collInits = 0;
ncclResult_t collInit(void** ctx, uint64_t, ncclDebugLogger_t) {
  ++collInits;
  *ctx = nullptr;
  return ncclSuccess;
}
ncclResult_t collDevices(int* ndev) {
  *ndev = 0;
  return ncclSuccess;
}
ncclResult_t collGetProperties(int, ncclNetProperties_v12_t*) {
  return ncclInternalError;
}
ncclResult_t collListen(void*, int, void*, void**) {
  return ncclInternalError;
}
ncclResult_t collConnect(void*[], int, int, void*, void**) {
  return ncclInternalError;
}
ncclResult_t collReduceSupport(ncclDataType_t, ncclRedOp_t, int*) {
  return ncclInternalError;
}
ncclResult_t collRegMr(void*, void*, size_t, int, void**) {
  return ncclInternalError;
}
ncclResult_t collDeregMr(void*, void*) {
  return ncclInternalError;
}
ncclResult_t collIallreduce(void*, void*, void*, size_t, ncclDataType_t, ncclRedOp_t, void*, void*, void**) {
  return ncclInternalError;
}
ncclResult_t collTest(void*, int*, int*) {
  return ncclInternalError;
}
ncclResult_t collClose(void*) {
  return ncclInternalError;
}
ncclResult_t collFinalize(void*) {
  return ncclSuccess;
}

}  // namespace

extern "C" {
__attribute__((visibility("default"))) extern const ncclNet_v12_t ncclNetPlugin_v12;
const ncclNet_v12_t ncclNetPlugin_v12 = host_only_net::table("static-program", init, devices, getProperties, finalize);
__attribute__((visibility("default"))) extern const ncclCollNet_v12_t ncclCollNetPlugin_v12;
const ncclCollNet_v12_t ncclCollNetPlugin_v12 = {.name = "static-collnet",
                                                 .init = collInit,
                                                 .devices = collDevices,
                                                 .getProperties = collGetProperties,
                                                 .listen = collListen,
                                                 .connect = collConnect,
                                                 .reduceSupport = collReduceSupport,
                                                 .regMr = collRegMr,
                                                 .regMrDmaBuf = nullptr,
                                                 .deregMr = collDeregMr,
                                                 .iallreduce = collIallreduce,
                                                 .iallgather = nullptr,
                                                 .ireducescatter = nullptr,
                                                 .iflush = nullptr,
                                                 .test = collTest,
                                                 .closeColl = collClose,
                                                 .closeListen = collClose,
                                                 .makeVDevice = nullptr,
                                                 .finalize = collFinalize};
}

int main() {
  nns::core::LoadOptions options;
  options.plugin = "STATIC_PLUGIN";
  options.readNcclNet = false;
  nns::core::LoadReport report;
  auto net = nns::core::loadNet(options, &report);
  if (net != nullptr && std::strcmp(net->name(), "static-program") == 0 && net->version() == 12) {
    std::printf("chosen: %s through ncclNet_v%d\n", net->name(), net->version());
    for (int load = 1; load <= 3; ++load) {
      nns::core::CollNetReport collReport;
      auto coll = nns::core::loadCollNet(*net, &collReport);
      std::printf("collNet load %d: %s (init calls so far: %d)\n", load, collReport.rejectReason.c_str(), collInits);
      const bool disabled = collReport.rejectReason.find("disabled") != std::string::npos;
      if (coll != nullptr || collInits != 1 || (load > 1 && !disabled)) {
        std::printf("the collNet should be rejected once after one init, then refused as disabled\n");
        return 1;
      }
    }
    return 0;
  }
  for (const auto& candidate : report.candidates)
    std::printf("%s: %s\n", candidate.requested.c_str(), candidate.rejectReason.c_str());
  return 1;
}
