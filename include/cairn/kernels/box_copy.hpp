// SPDX-License-Identifier: Apache-2.0
// Copying an N-d index box between two buffers with different layouts: the kernel behind
// resharding (a stored chunk's part that a target shard needs) and behind loading a sharded
// checkpoint into one plain array. Both sides are described by element strides, so C and
// F (column-major) order, and any box inside a larger buffer, are the same case. Written
// once with Thrust: it runs on host memory (CPP/OMP backend) and on CUDA device memory.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cairn/core/tuning.hpp"
#include "cairn/core/box.hpp"
#include "cairn/kernels/box_plan.hpp"
#include "cairn/device/memory.hpp"
#include "cairn/kernels/policy.hpp"

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

CAIRN_BEGIN_NAMESPACE
namespace detail {

// One call copies `seg` elements of one row (the innermost dimension) of the region.
template <class T>
struct box_copy_segment {
  const T* src;
  T* dst;
  StridedRegion r;
  std::uint64_t seg, segs_per_row;

  CAIRN_HD void operator()(std::uint64_t k) const {
    std::uint64_t row = k / segs_per_row;
    const std::uint64_t first = (k % segs_per_row) * seg;
    const int inner = r.rank - 1;
    std::int64_t so = 0, dof = 0;
    for (int d = inner - 1; d >= 0; --d) {
      const std::uint64_t i = row % r.extent[d];
      row /= r.extent[d];
      so += static_cast<std::int64_t>(i) * r.src_stride[d];
      dof += static_cast<std::int64_t>(i) * r.dst_stride[d];
    }
    const std::uint64_t n = r.extent[inner] - first < seg ? r.extent[inner] - first : seg;
    const std::int64_t a = r.src_stride[inner], b = r.dst_stride[inner];
    const T* s = src + so + static_cast<std::int64_t>(first) * a;
    T* t = dst + dof + static_cast<std::int64_t>(first) * b;
#if !defined(__CUDA_ARCH__)
    if (a == 1 && b == 1) {
      std::memcpy(t, s, n * sizeof(T));
      return;
    }
#endif
    for (std::uint64_t i = 0; i < n; ++i) t[static_cast<std::int64_t>(i) * b] = s[static_cast<std::int64_t>(i) * a];
  }
};

struct alignas(16) bytes16 { std::uint64_t lo, hi; };

template <class T, class Policy>
void box_copy_typed(Policy&& policy, const void* src, void* dst, const BoxCopyPlan& p, std::uint64_t seg) {
  const StridedRegion& r = p.region;
  const std::uint64_t inner = r.extent[r.rank - 1];
  if (inner == 0 || r.elements() == 0) return;
  if (seg == 0 || seg > inner) seg = inner;
  const std::uint64_t segs_per_row = (inner + seg - 1) / seg;
  const std::uint64_t calls = r.elements() / inner * segs_per_row;
  thrust::for_each(policy, thrust::counting_iterator<std::uint64_t>(0), thrust::counting_iterator<std::uint64_t>(calls),
                   box_copy_segment<T>{static_cast<const T*>(src) + p.src_offset, static_cast<T*>(dst) + p.dst_offset,
                                       r, seg, segs_per_row});
}

// Runs a planned box copy of `item_size`-byte elements under a Thrust policy (host or
// device). `seg` bounds the elements one call copies: long for host memory (memcpy-sized
// runs), 1 on a GPU (one thread per element).
template <class Policy>
void box_copy(Policy&& policy, std::size_t item_size, const void* src, void* dst, const BoxCopyPlan& p,
              std::uint64_t seg) {
  switch (item_size) {
    case 1: return box_copy_typed<std::uint8_t>(policy, src, dst, p, seg);
    case 2: return box_copy_typed<std::uint16_t>(policy, src, dst, p, seg);
    case 4: return box_copy_typed<std::uint32_t>(policy, src, dst, p, seg);
    case 8: return box_copy_typed<std::uint64_t>(policy, src, dst, p, seg);
    case 16: return box_copy_typed<bytes16>(policy, src, dst, p, seg);
  }
  throw Error(ErrorKind::invalid_argument, "box copy of " + std::to_string(item_size) + "-byte elements");
}

#if CAIRN_CUDA
// Regions whose rows are contiguous on both sides (the loader's every placement into device
// shards: C order on both sides). The element kernel above computes each element's offsets
// with 64-bit divisions and ran at 0.07x of a device-to-device copy on an H200
// (docs/benchmarks.md, GPU), and the copy engine's 2-D copies (one per outer index) that this
// kernel replaced at 0.81x. Here a team of up to 32 threads copies a segment of one row in
// units of up to 16 bytes, so a row's offsets are computed once per segment and a warp's loads
// and stores are coalesced; short rows get small teams (several rows per warp), long rows
// several segments (enough teams to fill the GPU).
template <class U>
__global__ void box_copy_rows_kernel(const unsigned char* src, unsigned char* dst, StridedRegion r, std::uint64_t rows,
                                     std::uint64_t units, std::uint64_t seg_units, std::uint64_t segs_per_row,
                                     unsigned team) {
  const unsigned lane = threadIdx.x % team;
  const std::uint64_t teams = static_cast<std::uint64_t>(gridDim.x) * (blockDim.x / team);
  const std::uint64_t items = rows * segs_per_row;
  for (std::uint64_t item = static_cast<std::uint64_t>(blockIdx.x) * (blockDim.x / team) + threadIdx.x / team;
       item < items; item += teams) {
    std::uint64_t row = item / segs_per_row;
    const std::uint64_t first = (item % segs_per_row) * seg_units;
    std::int64_t so = 0, dof = 0;  // bytes
    for (int d = r.rank - 2; d >= 0; --d) {
      const std::uint64_t i = row % r.extent[d];
      row /= r.extent[d];
      so += static_cast<std::int64_t>(i) * r.src_stride[d];
      dof += static_cast<std::int64_t>(i) * r.dst_stride[d];
    }
    const U* __restrict__ s = reinterpret_cast<const U*>(src + so) + first;
    U* __restrict__ t = reinterpret_cast<U*>(dst + dof) + first;
    const std::uint64_t n = units - first < seg_units ? units - first : seg_units;
    std::uint64_t i = lane;
    for (; i + 3 * team < n; i += 4 * team) {  // four loads in flight before the first store
      const U a = s[i], b = s[i + team], c = s[i + 2 * team], e = s[i + 3 * team];
      t[i] = a;
      t[i + team] = b;
      t[i + 2 * team] = c;
      t[i + 3 * team] = e;
    }
    for (; i < n; i += team) t[i] = s[i];
  }
}

// Runs the row kernel where the region's rows are contiguous on both sides; false otherwise.
inline bool box_copy_device_rows(std::size_t item_size, const void* src, void* dst, const BoxCopyPlan& p) {
  StridedRegion r = p.region;
  const int inner = r.rank - 1;
  if (r.src_stride[inner] != 1 || r.dst_stride[inner] != 1) return false;
  const auto* s = static_cast<const unsigned char*>(src) + p.src_offset * item_size;
  auto* d = static_cast<unsigned char*>(dst) + p.dst_offset * item_size;
  const std::uint64_t width = r.extent[inner] * item_size;
  // The widest unit (16, 8, 4, 2 or 1 bytes) that divides the width, both start addresses and
  // every outer stride in bytes.
  std::uint64_t bits = width | reinterpret_cast<std::uintptr_t>(s) | reinterpret_cast<std::uintptr_t>(d) | 16;
  for (int k = 0; k < inner; ++k) {
    r.src_stride[k] *= static_cast<std::int64_t>(item_size);  // bytes from here on
    r.dst_stride[k] *= static_cast<std::int64_t>(item_size);
    bits |= static_cast<std::uint64_t>(r.src_stride[k]) | static_cast<std::uint64_t>(r.dst_stride[k]);
  }
  const std::uint64_t unit = bits & (~bits + 1);  // the lowest set bit
  std::uint64_t rows = 1;
  for (int k = 0; k < inner; ++k) rows *= r.extent[k];
  const std::uint64_t units = width / unit;
  if (rows == 0 || units == 0) return true;  // nothing to copy (a launch of no blocks would fail)
  unsigned team = 1;
  while (team < 32 && team < units) team *= 2;
  const std::uint64_t seg_units = std::uint64_t{team} * 64;  // 32 KiB per segment of 16-byte units
  const std::uint64_t segs_per_row = (units + seg_units - 1) / seg_units;
  const unsigned threads = 256;
  int device = 0, sms = 0;
  CAIRN_CUDA_CHECK(cudaGetDevice(&device));
  CAIRN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const std::uint64_t wanted = (rows * segs_per_row + threads / team - 1) / (threads / team);
  const unsigned blocks = static_cast<unsigned>(std::min<std::uint64_t>(wanted, std::uint64_t(sms) * 16));
  switch (unit) {
    case 16: box_copy_rows_kernel<uint4><<<blocks, threads>>>(s, d, r, rows, units, seg_units, segs_per_row, team); break;
    case 8: box_copy_rows_kernel<std::uint64_t><<<blocks, threads>>>(s, d, r, rows, units, seg_units, segs_per_row, team); break;
    case 4: box_copy_rows_kernel<std::uint32_t><<<blocks, threads>>>(s, d, r, rows, units, seg_units, segs_per_row, team); break;
    case 2: box_copy_rows_kernel<std::uint16_t><<<blocks, threads>>>(s, d, r, rows, units, seg_units, segs_per_row, team); break;
    default: box_copy_rows_kernel<std::uint8_t><<<blocks, threads>>>(s, d, r, rows, units, seg_units, segs_per_row, team); break;
  }
  CAIRN_CUDA_CHECK(cudaGetLastError());
  return true;
}

#endif

// The same copy between buffers in the memory of one device (a GPU under nvcc: the row kernel
// for contiguous rows, else one thread per element; without CUDA the host kernel).
inline void box_copy_device(std::size_t item_size, const void* src, void* dst, const BoxCopyPlan& p, int device) {
#if CAIRN_CUDA
  DeviceGuard guard(device);
  if (p.region.elements() == 0) return;
  if (!box_copy_device_rows(item_size, src, dst, p)) box_copy(thrust::device, item_size, src, dst, p, 1);
  CAIRN_CUDA_CHECK(cudaDeviceSynchronize());
#else
  (void)device;
  box_copy_host(item_size, src, dst, p);
#endif
}

}  // namespace detail
CAIRN_END_NAMESPACE

// The host copy's definition: in every translation unit when header-only, only in
// cairn/src.hpp's with CAIRN_SEPARATE_COMPILATION.
#if CAIRN_DEFINES_RUNTIME
#include "cairn/kernels/box_copy_impl.hpp"
#endif
