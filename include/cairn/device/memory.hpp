// SPDX-License-Identifier: Apache-2.0
// Device memory for sharded arrays: allocation, copies to and from the host, pinned host
// buffers (kept for reuse), the staging buffers bytes cross to a device in, and the device
// count. Under nvcc (CAIRN_CUDA) these are CUDA runtime calls, each checked: a failure
// becomes a cairn::Error naming the call. Otherwise the "device" is
// Thrust's host-side device system (CPP or OMP) and these are plain host operations, which
// is how the device code paths run in CI without a GPU.
#pragma once

#include <climits>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cairn/core/error.hpp"
#include "cairn/core/memory_kind.hpp"

#if defined(__CUDACC__) && !defined(CAIRN_NO_CUDA)
#define CAIRN_CUDA 1
#include <cuda_runtime.h>
#else
#define CAIRN_CUDA 0
#endif

CAIRN_BEGIN_NAMESPACE
namespace detail {

#if CAIRN_CUDA
inline void check_cuda(cudaError_t e, const char* call) {
  if (e != cudaSuccess)
    throw Error(ErrorKind::io, std::string(call) + " failed: " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}
#define CAIRN_CUDA_CHECK(call) ::cairn::detail::check_cuda((call), #call)

// Makes `id` the current CUDA device for a scope.
class DeviceGuard {
 public:
  explicit DeviceGuard(int id) {
    CAIRN_CUDA_CHECK(cudaGetDevice(&previous_));
    if (id != previous_) CAIRN_CUDA_CHECK(cudaSetDevice(id));
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};
#else
class DeviceGuard {
 public:
  explicit DeviceGuard(int) {}
};
#endif

// How many devices of Thrust's device system this process sees. Without CUDA the device
// system is host memory and any device id is usable.
inline int device_count() {
#if CAIRN_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
#else
  return INT_MAX;
#endif
}

// The device that owns a device pointer (0 without CUDA).
inline int device_of(const void* p) {
#if CAIRN_CUDA
  cudaPointerAttributes attr{};
  CAIRN_CUDA_CHECK(cudaPointerGetAttributes(&attr, p));
  return attr.device;
#else
  (void)p;
  return 0;
#endif
}

inline void* device_alloc(std::size_t n, int device) {
  if (n == 0) return nullptr;
#if CAIRN_CUDA
  DeviceGuard g(device);
  void* p = nullptr;
  CAIRN_CUDA_CHECK(cudaMalloc(&p, n));
  return p;
#else
  (void)device;
  return ::operator new(n, std::align_val_t{64});
#endif
}

inline void device_free(void* p) noexcept {
  if (!p) return;
#if CAIRN_CUDA
  cudaFree(p);
#else
  ::operator delete(p, std::align_val_t{64});
#endif
}

#if CAIRN_CUDA
// Page-locked buffers given back, kept for the next user: cudaMallocHost pins every page and
// takes milliseconds for a few MiB (cairn-bench --sharded prints it), and a save or load of
// device leaves takes two piece buffers per large leaf. Buffers of at most 64 MiB are kept, up
// to 256 MiB in all, as PyTorch's caching host allocator keeps its own. Never destroyed: the
// CUDA runtime may be gone when static destructors run, and the process's end frees them.
class PinnedCache {
 public:
  static PinnedCache& get() {
    static PinnedCache* cache = new PinnedCache;
    return *cache;
  }
  // A kept buffer of at least n bytes and at most twice that (its size in `size`), or null.
  void* take(std::size_t n, std::size_t& size) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = kept_.lower_bound(n);
    if (it == kept_.end() || it->first > 2 * n) return nullptr;
    size = it->first;
    void* p = it->second;
    kept_.erase(it);
    held_ -= size;
    return p;
  }
  // Keeps p, or frees it where the cache is full.
  void give(void* p, std::size_t size) noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (size <= max_kept && held_ + size <= max_held) {
        kept_.emplace(size, p);
        held_ += size;
        return;
      }
    }
    cudaFreeHost(p);
  }

 private:
  static constexpr std::size_t max_kept = std::size_t{64} << 20, max_held = std::size_t{256} << 20;
  std::mutex mutex_;
  std::multimap<std::size_t, void*> kept_;
  std::size_t held_ = 0;
};
#endif

// Page-locked host memory where CUDA has it (faster, asynchronous copies), of at least n bytes
// (the size in `size`: a kept buffer may be larger).
inline void* pinned_alloc(std::size_t n, std::size_t& size) {
  size = n;
  if (n == 0) return nullptr;
#if CAIRN_CUDA
  if (void* kept = PinnedCache::get().take(n, size)) return kept;
  void* p = nullptr;
  CAIRN_CUDA_CHECK(cudaMallocHost(&p, n));
  return p;
#else
  return ::operator new(n, std::align_val_t{64});
#endif
}

inline void pinned_free(void* p, std::size_t size) noexcept {
  if (!p) return;
#if CAIRN_CUDA
  PinnedCache::get().give(p, size);
#else
  (void)size;
  ::operator delete(p, std::align_val_t{64});
#endif
}

// Copies between memories; `kind` tells where each side lives.
inline void copy_bytes(void* dst, MemoryKind dst_kind, const void* src, MemoryKind src_kind, std::size_t n) {
  if (n == 0) return;
#if CAIRN_CUDA
  if (dst_kind == MemoryKind::device || src_kind == MemoryKind::device) {
    CAIRN_CUDA_CHECK(cudaMemcpy(dst, src, n, cudaMemcpyDefault));
    return;
  }
#else
  (void)dst_kind;
  (void)src_kind;
#endif
  std::memcpy(dst, src, n);
}

// Owned device memory of one device, moved not copied.
class DeviceBytes {
 public:
  DeviceBytes() = default;
  DeviceBytes(std::size_t n, int device) : p_(device_alloc(n, device)), n_(n), device_(device) {}
  DeviceBytes(DeviceBytes&& o) noexcept : p_(o.p_), n_(o.n_), device_(o.device_) { o.p_ = nullptr; o.n_ = 0; }
  DeviceBytes& operator=(DeviceBytes&& o) noexcept {
    if (this != &o) {
      device_free(p_);
      p_ = o.p_; n_ = o.n_; device_ = o.device_;
      o.p_ = nullptr; o.n_ = 0;
    }
    return *this;
  }
  ~DeviceBytes() { device_free(p_); }
  void* data() const { return p_; }
  std::size_t size() const { return n_; }
  int device() const { return device_; }

 private:
  void* p_ = nullptr;
  std::size_t n_ = 0;
  int device_ = 0;
};

// Owned page-locked host memory (plain host memory without CUDA), moved not copied.
class PinnedBytes {
 public:
  PinnedBytes() = default;
  // (Allocated in the body: capacity_ is initialized after p_, and would reset what
  // pinned_alloc wrote to it.)
  explicit PinnedBytes(std::size_t n) : n_(n) { p_ = pinned_alloc(n, capacity_); }
  PinnedBytes(PinnedBytes&& o) noexcept : p_(o.p_), n_(o.n_), capacity_(o.capacity_) {
    o.p_ = nullptr;
    o.n_ = o.capacity_ = 0;
  }
  PinnedBytes& operator=(PinnedBytes&& o) noexcept {
    if (this != &o) {
      pinned_free(p_, capacity_);
      p_ = o.p_; n_ = o.n_; capacity_ = o.capacity_;
      o.p_ = nullptr; o.n_ = o.capacity_ = 0;
    }
    return *this;
  }
  ~PinnedBytes() { pinned_free(p_, capacity_); }
  unsigned char* data() const { return static_cast<unsigned char*>(p_); }
  std::size_t size() const { return n_; }

 private:
  void* p_ = nullptr;
  std::size_t n_ = 0, capacity_ = 0;
};

// A reusable host buffer for bytes on their way to device memory: page-locked once a device
// target needs it (a copy from pageable memory goes through the driver's own staging, at about
// half the speed, and cannot overlap), plain memory otherwise.
class StagingBuffer {
 public:
  unsigned char* get(std::size_t n, bool pinned) {
    if (pinned) {
      if (pinned_.size() < n) pinned_ = PinnedBytes(n);
      return pinned_.data();
    }
    if (plain_.size() < n) plain_.resize(n);
    return plain_.data();
  }

 private:
  PinnedBytes pinned_;
  std::vector<unsigned char> plain_;
};

}  // namespace detail
CAIRN_END_NAMESPACE
