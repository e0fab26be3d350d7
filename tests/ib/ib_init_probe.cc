// ib_init_probe.cc: runs the nns-ib plugin's ncclNet_v12 init once and prints what it said and found, for
// ib_fake_verbs_test, which runs it in a child process per case (the plugin reads its settings once per process),
// with the fake libibverbs (fake_verbs.c) first on LD_LIBRARY_PATH and NNS_FAKE_VERBS describing the devices.
//
// Output, one line each: "WARN <text>" and "INFO <text>" as the plugin logs them, "init returned <n>", then on success
// "device <i>: name=<name> guid=0x<hex> speed=<mbps> port=<port>" per device from getProperties.
// Usage: ib_init_probe [plugin.so] (default: the plugin of this build).
#include <dlfcn.h>

#include <cinttypes>
#include <cstdarg>
#include <cstdio>

#include <nccl_net/net.h>

namespace {

void printLog(ncclDebugLogLevel level, unsigned long, const char*, int, const char* fmt, ...) {
  if (level != NCCL_LOG_WARN && level != NCCL_LOG_INFO) return;
  char text[2048];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(text, sizeof(text), fmt, args);
  va_end(args);
  std::printf("%s %s\n", level == NCCL_LOG_WARN ? "WARN" : "INFO", text);
}

}  // namespace

int main(int argc, char** argv) {
  const char* path = argc > 1 ? argv[1] : NNS_IB_PLUGIN_PATH;
  void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    std::printf("cannot load %s: %s\n", path, dlerror());
    return 3;
  }
  auto* net = static_cast<const ncclNet_v12_t*>(dlsym(library, "ncclNetPlugin_v12"));
  if (net == nullptr) {
    std::printf("%s has no ncclNetPlugin_v12\n", path);
    return 3;
  }
  void* ctx = nullptr;
  ncclResult_t rc = net->init(&ctx, 1, nullptr, printLog, nullptr);
  std::printf("init returned %d\n", static_cast<int>(rc));
  if (rc == ncclSuccess) {
    int ndev = 0;
    if (net->devices(&ndev) != ncclSuccess) std::printf("devices failed\n");
    for (int i = 0; i < ndev; ++i) {
      ncclNetProperties_v12_t props{};
      if (net->getProperties(i, &props) != ncclSuccess) {
        std::printf("device %d: getProperties failed\n", i);
        continue;
      }
      std::printf("device %d: name=%s guid=0x%" PRIx64 " speed=%d port=%d\n", i, props.name, props.guid, props.speed,
                  props.port);
    }
    net->finalize(ctx);
  }
  std::fflush(stdout);
  return 0;
}
