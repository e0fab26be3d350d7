// ib_init_probe.cc: runs the nns-ib plugin's ncclNet_v12 init once and prints what it said and found, for
// ib_fake_verbs_test, which runs it in a child process per case (the plugin reads its settings once per process),
// with the fake libibverbs (fake_verbs.c) first on LD_LIBRARY_PATH and NNS_FAKE_VERBS describing the devices.
//
// Output, one line each: "WARN <text>" and "INFO <text>" as the plugin logs them, "init returned <n>", then on success
// "device <i>: name=<name> guid=0x<hex> speed=<mbps> port=<port>" per device from getProperties; then for each
// argument vnic=A,B,... one makeVDevice of those devices, "vnic A,B,...: returned <n>" and, where it made one, the
// new device's line.
// Usage: ib_init_probe [plugin.so] [vnic=A,B,...]... (default: the plugin of this build).
#include <dlfcn.h>

#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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

void printDevice(const ncclNet_v12_t* net, int i) {
  ncclNetProperties_v12_t props{};
  if (net->getProperties(i, &props) != ncclSuccess) {
    std::printf("device %d: getProperties failed\n", i);
    return;
  }
  std::printf("device %d: name=%s guid=0x%" PRIx64 " speed=%d port=%d\n", i, props.name, props.guid, props.speed,
              props.port);
}

}  // namespace

int main(int argc, char** argv) {
  const char* path = argc > 1 && std::strncmp(argv[1], "vnic=", 5) != 0 ? argv[1] : NNS_IB_PLUGIN_PATH;
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
    for (int i = 0; i < ndev; ++i) printDevice(net, i);
    for (int a = 1; a < argc; ++a) {
      if (std::strncmp(argv[a], "vnic=", 5) != 0) continue;
      ncclNetVDeviceProps_v12_t props{};
      for (const char* at = argv[a] + 5; *at != '\0' && props.ndevs < NCCL_NET_MAX_DEVS_PER_NIC_V12;) {
        char* end = nullptr;
        props.devs[props.ndevs++] = static_cast<int>(std::strtol(at, &end, 10));
        at = *end == ',' ? end + 1 : end;
      }
      int d = -1;
      const ncclResult_t made = net->makeVDevice(&d, &props);
      std::printf("%s: returned %d\n", argv[a], static_cast<int>(made));
      if (made == ncclSuccess) printDevice(net, d);
    }
    net->finalize(ctx);
  }
  std::fflush(stdout);
  return 0;
}
