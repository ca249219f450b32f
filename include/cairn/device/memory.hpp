// SPDX-License-Identifier: Apache-2.0
// Device memory for sharded arrays: allocation, copies to and from the host, pinned host
// buffers and the device count. Under nvcc (CAIRN_CUDA) these are CUDA runtime calls, each
// checked: a failure becomes a cairn::Error naming the call. Otherwise the "device" is
// Thrust's host-side device system (CPP or OMP) and these are plain host operations, which
// is how the device code paths run in CI without a GPU.
#pragma once

#include <climits>
#include <cstring>
#include <memory>
#include <string>

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

// Page-locked host memory where CUDA has it (faster, asynchronous copies).
inline void* pinned_alloc(std::size_t n) {
  if (n == 0) return nullptr;
#if CAIRN_CUDA
  void* p = nullptr;
  CAIRN_CUDA_CHECK(cudaMallocHost(&p, n));
  return p;
#else
  return ::operator new(n, std::align_val_t{64});
#endif
}

inline void pinned_free(void* p) noexcept {
  if (!p) return;
#if CAIRN_CUDA
  cudaFreeHost(p);
#else
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

class PinnedBytes {
 public:
  PinnedBytes() = default;
  explicit PinnedBytes(std::size_t n) : p_(pinned_alloc(n)), n_(n) {}
  PinnedBytes(PinnedBytes&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr; o.n_ = 0; }
  PinnedBytes& operator=(PinnedBytes&& o) noexcept {
    if (this != &o) { pinned_free(p_); p_ = o.p_; n_ = o.n_; o.p_ = nullptr; o.n_ = 0; }
    return *this;
  }
  ~PinnedBytes() { pinned_free(p_); }
  unsigned char* data() const { return static_cast<unsigned char*>(p_); }
  std::size_t size() const { return n_; }

 private:
  void* p_ = nullptr;
  std::size_t n_ = 0;
};

}  // namespace detail
CAIRN_END_NAMESPACE
