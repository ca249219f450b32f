// SPDX-License-Identifier: Apache-2.0
// The one encoder of leaf values on save: a run of consecutive elements of a leaf's or a
// shard's memory, as the dtype it is stored in, into host memory, a piece at a time. Host
// memory is cast on the host; device memory is cast on the device first (so the stored bytes
// cross to the host: half of a float32 -> bfloat16 save's) and copied over. Every writer reads
// leaves through it: the checkpoint's data files box by box (leaf_writer.hpp), and the exports
// (safetensors, Orbax) in C-order slabs gathered from the boxes (c_order.hpp).
#pragma once

#include <cstdint>
#include <cstring>
#include <map>

#include "cairn/device/memory.hpp"
#include "cairn/dtype/cast_host.hpp"
#include "cairn/kernels/cast.hpp"
#include "cairn/tree/traits.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

class LeafEncoder {
 public:
  LeafEncoder(DType from, DType to, OnOverflow on_overflow)
      : from_(from), to_(to), on_overflow_(on_overflow), in_size_(dtype_size(from)), out_size_(dtype_size(to)) {}

  DType from() const { return from_; }
  DType to() const { return to_; }
  bool casts() const { return from_ != to_; }

  // Elements [first, first + count) of `data` (host or device memory of `device`), as `to`,
  // into `dst` in host memory. A cast that does not fit throws value_out_of_range.
  void encode(const void* data, MemoryKind memory, int device, std::uint64_t first, std::uint64_t count,
              unsigned char* dst) {
    const auto* src = static_cast<const unsigned char*>(data) + first * in_size_;
    const auto n = static_cast<std::size_t>(count);
    if (memory == MemoryKind::host) {
      if (casts()) cast_host(from_, src, to_, dst, n, on_overflow_);
      else std::memcpy(dst, src, n * in_size_);
      return;
    }
    DeviceGuard guard(device);
    if (casts()) {
      DeviceBytes& scratch = scratch_[device];
      if (scratch.size() < n * out_size_) scratch = DeviceBytes(n * out_size_, device);
      cast_device(from_, src, to_, scratch.data(), n, on_overflow_);
      src = static_cast<const unsigned char*>(scratch.data());
    }
    copy_bytes(dst, MemoryKind::host, src, MemoryKind::device, n * out_size_);
  }

 private:
  DType from_, to_;
  OnOverflow on_overflow_;
  std::size_t in_size_, out_size_;
  std::map<int, DeviceBytes> scratch_;  // per device: the cast values of one piece
};

}  // namespace detail
CAIRN_END_NAMESPACE
