// nccl_net/sdk/request_pool.hpp: fixed-capacity request storage, so isend/irecv/test never allocate.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>

#include "visibility.hpp"

NCCL_NET_SDK_NAMESPACE_BEGIN

// A pool of Capacity objects of type T. acquire() returns nullptr when full, which a plugin turns into
// "*request = NULL" (the host retries later). owns() tells a live request of this pool from a stale, foreign or
// corrupt pointer. Not thread-safe: NCCL drives one comm from one proxy thread; keep one pool per comm.
template <class T, size_t Capacity>
class RequestPool {
  static_assert(Capacity > 0 && Capacity <= 65535, "capacity is indexed by uint16_t");

 public:
  RequestPool() {
    for (size_t i = 0; i < Capacity; ++i) freeList_[i] = static_cast<uint16_t>(Capacity - 1 - i);
  }
  ~RequestPool() {
    for (size_t i = 0; i < Capacity; ++i)
      if (live_[i]) slot(i)->~T();
  }
  RequestPool(const RequestPool&) = delete;
  RequestPool& operator=(const RequestPool&) = delete;

  // A constructor that throws leaves the pool as it was (the slot stays free) and the exception goes on.
  template <class... Args>
  T* acquire(Args&&... args) {
    if (freeCount_ == 0) return nullptr;
    const uint16_t index = freeList_[freeCount_ - 1];
    T* request = new (&storage_[index]) T(std::forward<Args>(args)...);
    --freeCount_;
    live_[index] = true;
    return request;
  }

  // Returns false (and does nothing) for a pointer that is not a live request of this pool.
  bool release(T* request) {
    if (!owns(request)) return false;
    size_t index = indexOf(request);
    request->~T();
    live_[index] = false;
    freeList_[freeCount_++] = static_cast<uint16_t>(index);
    return true;
  }

  bool owns(const void* pointer) const {
    auto address = reinterpret_cast<uintptr_t>(pointer);
    auto base = reinterpret_cast<uintptr_t>(&storage_[0]);
    if (address < base || address >= base + sizeof(storage_)) return false;
    if ((address - base) % sizeof(Slot) != 0) return false;
    return live_[(address - base) / sizeof(Slot)];
  }

  size_t inUse() const { return Capacity - freeCount_; }
  static constexpr size_t capacity() { return Capacity; }

  // Visits every live request (e.g. to fail them all when the connection dies).
  template <class F>
  void forEachLive(F&& visit) {
    for (size_t i = 0; i < Capacity; ++i)
      if (live_[i]) visit(*slot(i));
  }

 private:
  struct Slot {
    alignas(T) unsigned char bytes[sizeof(T)];
  };
  T* slot(size_t i) { return std::launder(reinterpret_cast<T*>(&storage_[i])); }
  size_t indexOf(const T* request) const {
    return (reinterpret_cast<uintptr_t>(request) - reinterpret_cast<uintptr_t>(&storage_[0])) / sizeof(Slot);
  }

  std::array<Slot, Capacity> storage_{};
  std::array<bool, Capacity> live_{};
  std::array<uint16_t, Capacity> freeList_{};
  size_t freeCount_ = Capacity;
};

NCCL_NET_SDK_NAMESPACE_END
