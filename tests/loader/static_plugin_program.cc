// static_plugin_program.cc: a program that holds its own ncclNet_v12 table and loads it as NCCL_NET_PLUGIN=
// STATIC_PLUGIN does (dlopen(NULL)). Built without position independence, the const table needs no relocation and
// lands in .rodata; linked with -z noseparate-code (as gold links, and as GNU ld does on aarch64) .rodata shares the
// executable segment with the code. The loader took that for "a label in the library's code" and refused a sound
// table. Exits 0 when the table is chosen, 1 (with the reason) when not.
#include <cstdio>
#include <cstring>

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

}  // namespace

extern "C" {
__attribute__((visibility("default"))) extern const ncclNet_v12_t ncclNetPlugin_v12;
const ncclNet_v12_t ncclNetPlugin_v12 = host_only_net::table("static-program", init, devices, getProperties, finalize);
}

int main() {
  nns::core::LoadOptions options;
  options.plugin = "STATIC_PLUGIN";
  options.readNcclNet = false;
  nns::core::LoadReport report;
  auto net = nns::core::loadNet(options, &report);
  if (net != nullptr && std::strcmp(net->name(), "static-program") == 0 && net->version() == 12) {
    std::printf("chosen: %s through ncclNet_v%d\n", net->name(), net->version());
    return 0;
  }
  for (const auto& candidate : report.candidates)
    std::printf("%s: %s\n", candidate.requested.c_str(), candidate.rejectReason.c_str());
  return 1;
}
