// slot_memory.cc: the communicator's slots for GPU buffers: GPU memory (GPU Direct RDMA) or pinned host memory
// (staging), with copies into them on a stream of their own, polled through events.
#include "nns/cuda/slot_memory.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include <cuda_runtime_api.h>

#include <nns/core/nccl_conf.hpp>
#include <nns/cuda/kernels.hpp>

#include "scoped_device.hpp"

namespace nns::cuda {
namespace {

void throwOnError(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess)
    throw core::CommError("CUDA " + what + ": " + cudaGetErrorString(status), ncclUnhandledCudaError);
}

// Events must be made and recorded on the stream's device, and memory freed there, from whichever thread calls.
class OnDevice {
 public:
  explicit OnDevice(int device) : device_(device) {
    throwOnError(device_.status(), "cudaSetDevice(" + std::to_string(device) + ")");
  }

 private:
  ScopedDevice device_;
};

// A 0/1 switch: `fallback` when unset or empty; anything but 0 or 1 is refused, as the communicator's own knobs are.
bool envFlag(const char* name, bool fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  if (std::strcmp(text, "0") != 0 && std::strcmp(text, "1") != 0)
    throw core::CommError(std::string(name) + "=" + text + " is not 0 or 1", ncclInvalidUsage);
  return text[0] == '1';
}

// NCCL's own integer parameters as NCCL reads them: any integer, non-zero meaning on (NCCL_NET_FORCE_FLUSH=2 is on
// there). A value that is not plainly an integer is refused by name: NCCL reads the integer it starts with ("yes" is
// 0, off), and a typo here would silently leave GPU Direct receives unflushed.
bool ncclIntegerFlag(const char* name, bool fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text, &end, 0);
  if (errno != 0 || end == text || *end != '\0')
    throw core::CommError(std::string(name) + "=" + text + " is not an integer", ncclInvalidUsage);
  return value != 0;
}

class CudaSlots final : public core::SlotMemory {
 public:
  CudaSlots(int device, bool gpuMemory, bool flush, std::string why)
      : device_(device), gpuMemory_(gpuMemory), flush_(flush), why_(std::move(why)) {
    OnDevice on(device_);
    // A blocking stream: its copies wait for work on the legacy default stream (a cudaMemcpy from pageable memory
    // that returned before its DMA landed, a kernel the caller launched there), as the kernels on
    // cudaStreamPerThread do. A non-blocking one let a call's first sends copy its input before that work was done.
    throwOnError(cudaStreamCreateWithFlags(&stream_, cudaStreamDefault), "stream for slot copies");
  }
  ~CudaSlots() override {
    for (const Scratch& scratch : scratch_) {
      ScopedDevice on(scratch.device);
      cudaFree(scratch.memory);
    }
    ScopedDevice on(device_);  // noexcept: a failed switch still destroys what it can
    for (cudaEvent_t event : events_) cudaEventDestroy(event);
    cudaStreamDestroy(stream_);
  }
  std::string describe() const override { return why_; }
  int ptrType() const override { return gpuMemory_ ? NCCL_PTR_CUDA : NCCL_PTR_HOST; }
  void* allocate(size_t bytes) override {
    void* memory = nullptr;
    OnDevice on(device_);
    if (gpuMemory_) {
      throwOnError(cudaMalloc(&memory, bytes), "cudaMalloc of " + std::to_string(bytes) + " bytes of slots");
    } else {
      // Mapped: with unified addressing the GPU reads a received piece at the same address, no copy first.
      throwOnError(cudaHostAlloc(&memory, bytes, cudaHostAllocPortable | cudaHostAllocMapped),
                   "cudaHostAlloc of " + std::to_string(bytes) + " bytes of slots");
    }
    return memory;
  }
  void release(void* memory) noexcept override {
    if (memory == nullptr) return;
    ScopedDevice on(device_);
    if (gpuMemory_) {
      cudaFree(memory);
    } else {
      cudaFreeHost(memory);
    }
  }
  void* startCopy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return nullptr;
    OnDevice on(device_);
    throwOnError(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_), "copy into a slot");
    cudaEvent_t event = takeEvent();
    const cudaError_t recorded = cudaEventRecord(event, stream_);
    if (recorded != cudaSuccess) giveEvent(event);
    throwOnError(recorded, "event record");
    return event;
  }
  bool copyDone(void* token) override {
    auto event = static_cast<cudaEvent_t>(token);
    OnDevice on(device_);
    cudaError_t status = cudaEventQuery(event);
    if (status == cudaErrorNotReady) {
      // Not an error, but a runtime may keep it as the thread's last error (PyTorch clears it the same way): this
      // thread's next kernel launch checks cudaGetLastError and would fail with it.
      (void)cudaGetLastError();
      return false;
    }
    giveEvent(event);
    throwOnError(status, "copy into a slot");
    return true;
  }
  bool flushReceives() const override { return flush_; }
  bool deviceReadable() const override { return true; }
  int gpu() const override { return gpuMemory_ ? device_ : -1; }
  // On the device of `near` (the operation's buffers may be on another GPU than the slots: a kernel there would fault
  // on memory of another device without peer access), one grow-only buffer per device. The communicator runs one
  // operation at a time.
  void* deviceScratch(size_t bytes, const void* near) override {
    int device = device_;
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, near) != cudaSuccess)
      (void)cudaGetLastError();  // not memory CUDA knows: the slots' device
    else if (attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged)
      device = attributes.device;
    auto found = std::find_if(scratch_.begin(), scratch_.end(),
                              [device](const Scratch& scratch) { return scratch.device == device; });
    if (found == scratch_.end()) found = scratch_.insert(scratch_.end(), Scratch{device});
    if (found->bytes < bytes) {
      OnDevice on(device);
      if (found->memory != nullptr) cudaFree(found->memory);
      found->memory = nullptr;
      found->bytes = 0;
      throwOnError(cudaMalloc(&found->memory, bytes), "cudaMalloc of " + std::to_string(bytes) + " bytes of scratch");
      found->bytes = bytes;
    }
    return found->memory;
  }

 private:
  struct Scratch {
    int device = -1;
    void* memory = nullptr;
    size_t bytes = 0;
  };
  std::vector<Scratch> scratch_;  // deviceScratch's, by device
  cudaEvent_t takeEvent() {
    std::lock_guard lock(mutex_);
    if (!free_.empty()) {
      cudaEvent_t event = free_.back();
      free_.pop_back();
      return event;
    }
    cudaEvent_t event = nullptr;
    throwOnError(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "event create");
    events_.push_back(event);
    return event;
  }
  void giveEvent(cudaEvent_t event) {
    std::lock_guard lock(mutex_);
    free_.push_back(event);
  }

  int device_;  // the CUDA device current when the communicator was made: its slots and copies live there
  bool gpuMemory_;
  bool flush_;
  std::string why_;
  cudaStream_t stream_ = nullptr;
  std::mutex mutex_;
  std::vector<cudaEvent_t> events_;  // every event made (destroyed at the end)
  std::vector<cudaEvent_t> free_;    // those not recording a copy now
};

}  // namespace

std::shared_ptr<core::SlotMemory> chooseSlotMemory(core::Net& net, int netDevice) {
  // Read first, so that a malformed value is refused on any machine.
  // NCCL_NET_FORCE_FLUSH as NCCL reads it; NNS_NET_FORCE_FLUSH, when set, over it.
  const bool wantGdr = envFlag("NNS_GDR", true);
  const char* ownFlush = std::getenv("NNS_NET_FORCE_FLUSH");
  const bool ownFlushSet = ownFlush != nullptr && *ownFlush != '\0';
  const bool forceFlush = envFlag("NNS_NET_FORCE_FLUSH", ncclIntegerFlag("NCCL_NET_FORCE_FLUSH", false));
  const char* ncclFlush = std::getenv("NCCL_NET_FORCE_FLUSH");
  const std::string forceFlushVariable = ownFlushSet
                                             ? std::string("NNS_NET_FORCE_FLUSH=1")
                                             : std::string("NCCL_NET_FORCE_FLUSH=") + (ncclFlush ? ncclFlush : "");
  int cudaDevice = 0;
  if (const std::string reason = deviceUnavailableReason(); !reason.empty())
    throw core::CommError("no CUDA device (" + reason + ")", ncclSystemError);
  throwOnError(cudaGetDevice(&cudaDevice), "cudaGetDevice");
  cudaDeviceProp gpu{};
  throwOnError(cudaGetDeviceProperties(&gpu, cudaDevice), "cudaGetDeviceProperties");
  ncclNetProperties_v12_t props{};
  if (net.getProperties(netDevice, &props) != ncclSuccess)
    throw core::CommError(std::string(net.name()) + " getProperties(" + std::to_string(netDevice) + ") failed",
                          ncclSystemError);
  const std::string nic =
      std::string(net.name()) + " device " + std::to_string(netDevice) + " (" + (props.name ? props.name : "?") + ")";
  const std::string where = "GPU " + std::to_string(cudaDevice) + " (" + gpu.name + ", sm_" +
                            std::to_string(gpu.major) + std::to_string(gpu.minor) + ")";
  const bool canGdr = (props.ptrSupport & NCCL_PTR_CUDA) != 0;
  const bool gdr = canGdr && wantGdr;
  std::string why;
  bool flush = false;
  if (gdr) {
    // NCCL's rule (net-abi.md 5.4): always when the device asks (forceFlush) or NCCL_NET_FORCE_FLUSH=1, otherwise on
    // GPUs before compute capability 9.0, and on newer ones attached to their CPU by C2C (Grace) when the NIC is at
    // most a PCIe switch away ("DataDirect"). This layer does not look the NIC's distance up, so a C2C-attached GPU
    // (one whose pageable memory access goes through the host's page tables, which C2C's ATS gives) is flushed
    // whatever it is: a flush too many costs a round trip, one too few lets a kernel read a piece not yet landed.
    int c2c = 0;
    if (cudaDeviceGetAttribute(&c2c, cudaDevAttrPageableMemoryAccessUsesHostPageTables, cudaDevice) != cudaSuccess) {
      (void)cudaGetLastError();
      c2c = 0;
    }
    const char* flushWhy = props.forceFlush ? "the device sets forceFlush"
                           : forceFlush     ? forceFlushVariable.c_str()
                           : gpu.major < 9  ? "compute capability below 9.0"
                           : c2c != 0       ? "GPU attached to its CPU by C2C, where NCCL flushes for a near NIC"
                                            : nullptr;
    flush = flushWhy != nullptr;
    why = "GPU Direct RDMA enabled: slots in " + where + " memory, " + nic + " supports CUDA pointers; " +
          (flush ? std::string("receives flushed (") + flushWhy + ")"
                 : "no flush (compute capability 9.0+, attached by PCIe)");
  } else {
    why = "GPU Direct RDMA disabled: " + nic +
          (canGdr ? " supports CUDA pointers but NNS_GDR=0" : " moves host memory only (ptrSupport has no CUDA)") +
          "; staging " + where + " buffers through pinned host slots";
  }
  if (core::debugInfo()) std::fprintf(stderr, "nns INFO %s\n", why.c_str());
  return std::make_shared<CudaSlots>(cudaDevice, gdr, flush, why);
}

}  // namespace nns::cuda
