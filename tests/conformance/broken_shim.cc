// broken_shim.cc: deliberately broken plugins for the harness's own tests. Each build forwards to the real minimal
// example plugin (NNS_REAL_PLUGIN) through its ncclNetPlugin_v12 table and injects ONE bug (NNS_BUG_*), so the
// harness must name the rule it breaks.
#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>

#include <nccl_net/net.h>

namespace {

const ncclNet_v12_t* real() {
  static const ncclNet_v12_t* table = [] {
    void* library = dlopen(NNS_REAL_PLUGIN, RTLD_NOW | RTLD_LOCAL);
    return library ? static_cast<const ncclNet_v12_t*>(dlsym(library, "ncclNetPlugin_v12")) : nullptr;
  }();
  return table;
}

ncclResult_t init(void** ctx, uint64_t commId, ncclNetCommConfig_v12_t* config, ncclDebugLogger_t logger,
                  ncclProfilerCallback_t profiler) {
  if (real() == nullptr) return ncclSystemError;
  return real()->init(ctx, commId, config, logger, profiler);
}
ncclResult_t devices(int* ndev) { return real()->devices(ndev); }
ncclResult_t getProperties(int dev, ncclNetProperties_v12_t* props) { return real()->getProperties(dev, props); }

ncclResult_t listen(void* ctx, int dev, void* handle, void** listenComm) {
  ncclResult_t result = real()->listen(ctx, dev, handle, listenComm);
#ifdef NNS_BUG_HANDLE_OVERFLOW
  std::memset(static_cast<char*>(handle) + NCCL_NET_HANDLE_MAXSIZE, 0x42, 16);  // 144-byte handle
#endif
  return result;
}
ncclResult_t connect(void* ctx, int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v12_t** devComm) {
#ifdef NNS_BUG_BLOCKING_CONNECT
  for (;;) {  // waits for the peer to accept instead of returning NULL (a socket connect left in blocking mode)
    ncclResult_t result = real()->connect(ctx, dev, handle, sendComm, devComm);
    if (result != ncclSuccess || *sendComm != nullptr) return result;
    usleep(1000);
  }
#else
  return real()->connect(ctx, dev, handle, sendComm, devComm);
#endif
}
ncclResult_t accept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v12_t** devComm) {
#ifdef NNS_BUG_BLOCKING_ACCEPT
  for (;;) {  // waits for a connection instead of returning NULL
    ncclResult_t result = real()->accept(listenComm, recvComm, devComm);
    if (result != ncclSuccess || *recvComm != nullptr) return result;
    usleep(1000);
  }
#else
  return real()->accept(listenComm, recvComm, devComm);
#endif
}
ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  return real()->regMr(comm, data, size, type, mhandle);
}
ncclResult_t regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle) {
  return real()->regMrDmaBuf(comm, data, size, type, offset, fd, mhandle);
}
ncclResult_t deregMr(void* comm, void* mhandle) { return real()->deregMr(comm, mhandle); }
ncclResult_t isend(void* comm, void* data, size_t size, int tag, void* mhandle, void* phandle, void** request) {
  return real()->isend(comm, data, size, tag, mhandle, phandle, request);
}
ncclResult_t irecv(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** phandles,
                   void** request) {
  return real()->irecv(comm, n, data, sizes, tags, mhandles, phandles, request);
}
ncclResult_t iflush(void* comm, int n, void** data, int* sizes, void** mhandles, void** request) {
  return real()->iflush(comm, n, data, sizes, mhandles, request);
}
ncclResult_t test(void* request, int* done, int* sizes) {
#ifdef NNS_BUG_LOST_COMPLETION
  // Under load the 100th completion is never reported (a completion-queue entry dropped): that request, and any
  // later one the plugin's pool puts at the same address, stays "not done" forever.
  static void* lost = nullptr;
  static int completions = 0;
  if (request == lost) {
    *done = 0;
    return ncclSuccess;
  }
#endif
  ncclResult_t result = real()->test(request, done, sizes);
#ifdef NNS_BUG_LOST_COMPLETION
  if (result == ncclSuccess && *done && ++completions == 100) {
    lost = request;
    *done = 0;
  }
#endif
#ifdef NNS_BUG_SILENT_TRUNCATION
  if (result == ncclInvalidUsage) {  // hides the "does not fit" error and reports a completed receive
    *done = 1;
    return ncclSuccess;
  }
#endif
#ifdef NNS_BUG_CRASH_IN_TEST
  if (*done) raise(SIGSEGV);
#endif
#ifdef NNS_BUG_WRONG_SIZES
  if (*done && sizes != nullptr && sizes[0] > 1) sizes[0] -= 1;
#endif
  return result;
}
ncclResult_t closeSend(void* comm) { return real()->closeSend(comm); }
ncclResult_t closeRecv(void* comm) { return real()->closeRecv(comm); }
ncclResult_t closeListen(void* comm) { return real()->closeListen(comm); }
ncclResult_t finalize(void* ctx) { return real()->finalize(ctx); }

}  // namespace

extern "C" __attribute__((visibility("default"))) const ncclNet_v12_t ncclNetPlugin_v12 = {
    NNS_BUG_NAME, init,   devices, getProperties, listen, connect,  accept,    regMr,   regMrDmaBuf, deregMr, isend,
    irecv,        iflush, test,    closeSend,     closeRecv, closeListen, nullptr, nullptr, nullptr, finalize, nullptr};
