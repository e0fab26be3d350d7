// gdr_standin_plugin.cc: libnccl-net-gdr-standin.so, a TEST DOUBLE standing in for a GPU Direct RDMA NIC, for the
// GPU checks (scripts/gpu-checks.sh): no NIC of this machine kind reads or writes GPU memory, so nothing real can
// drive the engine's GPU Direct path (device slots registered with NCCL_PTR_CUDA, receives flushed) there.
//
// It is the minimal example plugin (examples/minimal-plugin: shared memory between processes on one host) with GPU
// memory accepted the way a GDR NIC accepts it:
// - ptrSupport has NCCL_PTR_CUDA, and forceFlush is set, so the host flushes every received piece;
// - regMr of CUDA memory gives the region a pinned host shadow, through which the ring's bytes pass;
// - a send from GPU memory copies its bytes into the shadow first (on a stream of the plugin's own, waited for);
// - a receive into GPU memory lands in the shadow, and its completion (test) only queues the copy to the GPU on that
//   stream: like a NIC's DMA writes, the bytes are not yet visible to the GPU's kernels when test says done;
// - iflush makes them visible: its request completes once every copy queued before it has, as NCCL's flush (a
//   read issued after the writes) completes once they have landed.
// A host that read a received piece without flushing it could read it before the copy: the checked bench
// (nccl-net-bench -c 1) finds wrong elements when that race shows. Each flush is counted; finalize says how many at
// INFO level, which the GPU checks require on every rank.
#include <cuda_runtime_api.h>

#include <mutex>
#include <unordered_map>
#include <unordered_set>

#define NNS_MINIMAL_NO_EXPORT  // the stand-in exports its own tables, below
#include "minimal_plugin.cc"   // NOLINT(bugprone-suspicious-include): the example is one file, by design

namespace {

class GdrStandIn : public MinimalNet {
 public:
  static constexpr const char kName[] = "gdr-standin";

  ncclResult_t init(const sdk::InitArgs& args, void** ctx) {
    NCCL_NET_CHECK(MinimalNet::init(args, ctx));
    sdk::setLogPrefix("NET/gdr-standin");
    NCCL_NET_INFO(NCCL_INIT | NCCL_NET, "a test double of a GPU Direct RDMA NIC (CUDA pointers through host shadows)");
    return ncclSuccess;
  }

  ncclResult_t finalize(void* /*ctx*/) {
    std::lock_guard lock(mutex_);
    NCCL_NET_INFO(NCCL_NET, "%llu flushes, %llu receives into GPU memory", flushes_, gpuReceives_);
    return ncclSuccess;
  }

  ncclResult_t getProperties(int dev, ncclNetProperties_v12_t* props) {
    NCCL_NET_CHECK(MinimalNet::getProperties(dev, props));
    props->name = const_cast<char*>("gdr0");
    props->ptrSupport = NCCL_PTR_HOST | NCCL_PTR_CUDA;
    props->forceFlush = 1;
    return ncclSuccess;
  }

  ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
    if (type != NCCL_PTR_HOST && type != NCCL_PTR_CUDA) {
      NCCL_NET_WARN("regMr: memory type %d is not supported (host or CUDA)", type);
      return ncclInternalError;
    }
    auto region = std::make_unique<Region>();
    region->data = static_cast<unsigned char*>(data);
    region->size = size;
    if (type == NCCL_PTR_CUDA) {
      cudaPointerAttributes attributes{};
      if (!cudaOk(cudaPointerGetAttributes(&attributes, data), "cudaPointerGetAttributes")) return ncclSystemError;
      if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged) {
        NCCL_NET_WARN("regMr: %p registered as CUDA memory is not GPU memory", data);
        return ncclInvalidArgument;
      }
      region->device = attributes.device;
      OnDevice on(region->device);
      if (!on.ok() || !ensureStream(region->device) ||
          !cudaOk(cudaMallocHost(reinterpret_cast<void**>(&region->shadow), size), "cudaMallocHost"))
        return ncclSystemError;
    }
    ncclResult_t result =
        MinimalNet::regMr(comm, region->shadow != nullptr ? region->shadow : data, size, NCCL_PTR_HOST, &region->base);
    if (result != ncclSuccess) {
      if (region->shadow != nullptr) cudaFreeHost(region->shadow);
      return result;
    }
    *mhandle = region.release();
    return ncclSuccess;
  }

  ncclResult_t deregMr(void* comm, void* mhandle) {
    auto* region = static_cast<Region*>(mhandle);
    if (region->shadow != nullptr) {
      // A copy still reading or writing the shadow ends first.
      OnDevice on(region->device);
      if (!on.ok() || !cudaOk(cudaStreamSynchronize(stream_), "cudaStreamSynchronize") ||
          !cudaOk(cudaFreeHost(region->shadow), "cudaFreeHost"))
        return ncclSystemError;
    }
    ncclResult_t result = MinimalNet::deregMr(comm, region->base);
    delete region;
    return result;
  }

  ncclResult_t isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle, void** request) {
    unsigned char* shadow = nullptr;
    NCCL_NET_CHECK(shadowOf("isend", data, size, mhandle, &shadow));
    if (shadow != nullptr) {
      OnDevice on(static_cast<Region*>(mhandle)->device);
      if (!on.ok() ||
          !cudaOk(cudaMemcpyAsync(shadow, data, size, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync") ||
          !cudaOk(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"))
        return ncclSystemError;
      data = shadow;
    }
    return MinimalNet::isend(sendComm, data, size, tag, region(mhandle), phandle, request);
  }

  ncclResult_t irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** phandles,
                     void** request) {
    if (n != 1) return MinimalNet::irecv(recvComm, n, data, sizes, tags, mhandles, phandles, request);
    void* mhandle = mhandles != nullptr ? mhandles[0] : nullptr;
    unsigned char* shadow = nullptr;
    NCCL_NET_CHECK(shadowOf("irecv", data[0], sizes[0], mhandle, &shadow));
    void* target = shadow != nullptr ? shadow : data[0];
    void* baseHandle = region(mhandle);
    NCCL_NET_CHECK(MinimalNet::irecv(recvComm, 1, &target, sizes, tags, &baseHandle, phandles, request));
    if (shadow != nullptr && *request != nullptr) {
      std::lock_guard lock(mutex_);
      toGpu_[*request] = PendingCopy{static_cast<Region*>(mhandle)->device, data[0], shadow};
    }
    return ncclSuccess;
  }

  ncclResult_t test(void* request, int* done, sdk::CompletedSizes& sizes) {
    {
      std::lock_guard lock(mutex_);
      if (auto flush = flushesInFlight_.find(request); flush != flushesInFlight_.end()) {
        auto* event = static_cast<cudaEvent_t>(request);
        cudaError_t state = cudaEventQuery(event);
        if (state == cudaErrorNotReady) return ncclSuccess;
        flushesInFlight_.erase(flush);
        cudaError_t destroyed = cudaEventDestroy(event);
        if (!cudaOk(state, "cudaEventQuery (flush)") || !cudaOk(destroyed, "cudaEventDestroy")) return ncclSystemError;
        *done = 1;
        return ncclSuccess;
      }
    }
    int size = 0;
    sdk::CompletedSizes own(&size, 1);
    NCCL_NET_CHECK(MinimalNet::test(request, done, own));
    if (!*done) return ncclSuccess;
    std::lock_guard lock(mutex_);
    if (auto copy = toGpu_.find(request); copy != toGpu_.end()) {
      // Queued, not waited for: the bytes reach the GPU when the stream gets to them, which iflush waits for.
      PendingCopy pending = copy->second;
      toGpu_.erase(copy);
      ++gpuReceives_;
      if (size > 0) {
        OnDevice on(pending.device);
        if (!on.ok() || !cudaOk(cudaMemcpyAsync(pending.target, pending.shadow, static_cast<size_t>(size),
                                                cudaMemcpyHostToDevice, stream_),
                                "cudaMemcpyAsync"))
          return ncclSystemError;
      }
    }
    sizes.set(0, static_cast<size_t>(size));  // an int: it fits, and index 0 is within any room
    return ncclSuccess;
  }

  ncclResult_t iflush(void* /*recvComm*/, int n, void** /*data*/, int* /*sizes*/, void** mhandles, void** request) {
    *request = nullptr;  // nothing to flush: done
    const Region* gpu = nullptr;
    for (int i = 0; i < n && gpu == nullptr; ++i) {
      const auto* region = static_cast<const Region*>(mhandles != nullptr ? mhandles[i] : nullptr);
      if (region != nullptr && region->shadow != nullptr) gpu = region;
    }
    if (gpu == nullptr) return ncclSuccess;
    cudaEvent_t event = nullptr;
    OnDevice on(gpu->device);
    if (!on.ok() || !cudaOk(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate") ||
        !cudaOk(cudaEventRecord(event, stream_), "cudaEventRecord"))
      return ncclSystemError;
    std::lock_guard lock(mutex_);
    flushesInFlight_.insert(event);
    ++flushes_;
    *request = event;
    return ncclSuccess;
  }

 private:
  struct Region {
    unsigned char* data = nullptr;  // what the host registered (GPU memory, or host memory as the example takes)
    size_t size = 0;
    unsigned char* shadow = nullptr;  // GPU memory's pinned host copy, which the ring reads and writes
    int device = -1;
    void* base = nullptr;  // the example's own handle, of the shadow (or of the host memory)
  };
  struct PendingCopy {
    int device;
    void* target;
    const unsigned char* shadow;
  };

  static bool cudaOk(cudaError_t status, const char* what) {
    if (status == cudaSuccess) return true;
    NCCL_NET_WARN("%s: %s", what, cudaGetErrorString(status));
    return false;
  }
  // Makes `device` the calling thread's current one for the CUDA calls of a scope, then gives the thread its own
  // back: the host's threads keep theirs.
  class OnDevice {
   public:
    explicit OnDevice(int device) {
      ok_ = cudaOk(cudaGetDevice(&previous_), "cudaGetDevice") && cudaOk(cudaSetDevice(device), "cudaSetDevice");
    }
    ~OnDevice() {
      if (ok_) (void)cudaSetDevice(previous_);
    }
    OnDevice(const OnDevice&) = delete;
    OnDevice& operator=(const OnDevice&) = delete;
    bool ok() const { return ok_; }

   private:
    int previous_ = 0;
    bool ok_ = false;
  };

  static void* region(void* mhandle) { return mhandle != nullptr ? static_cast<Region*>(mhandle)->base : nullptr; }

  // Where the ring moves [data, data + size) through: the shadow for GPU memory (*shadow), nothing for host memory.
  static ncclResult_t shadowOf(const char* call, void* data, size_t size, void* mhandle, unsigned char** shadow) {
    *shadow = nullptr;
    const auto* region = static_cast<const Region*>(mhandle);
    if (region == nullptr || region->shadow == nullptr) return ncclSuccess;
    const auto* bytes = static_cast<const unsigned char*>(data);
    if (bytes < region->data || size > region->size ||
        static_cast<size_t>(bytes - region->data) > region->size - size) {
      NCCL_NET_WARN("%s: %zu bytes at %p are not within the region registered at %p (%zu bytes)", call, size, data,
                    static_cast<const void*>(region->data), region->size);
      return ncclInvalidArgument;
    }
    *shadow = region->shadow + (bytes - region->data);
    return ncclSuccess;
  }

  // The copies' stream, made on the first GPU registered: one GPU per process, as NCCL binds a process's
  // communicator to one.
  bool ensureStream(int device) {
    std::lock_guard lock(mutex_);
    if (stream_ == nullptr) {
      if (!cudaOk(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate")) return false;
      streamDevice_ = device;
    }
    if (device == streamDevice_) return true;
    NCCL_NET_WARN("regMr: memory of GPU %d, and this stand-in copies for GPU %d only", device, streamDevice_);
    return false;
  }

  std::mutex mutex_;
  cudaStream_t stream_ = nullptr;  // the copies to and from shadows; kept to the process's end, as CUDA's context
  int streamDevice_ = -1;
  std::unordered_map<void*, PendingCopy> toGpu_;  // receives into GPU memory not yet tested done
  std::unordered_set<void*> flushesInFlight_;     // iflush's requests (CUDA events) not yet tested done
  unsigned long long flushes_ = 0, gpuReceives_ = 0;
};

}  // namespace

NCCL_NET_SDK_EXPORT(GdrStandIn)
