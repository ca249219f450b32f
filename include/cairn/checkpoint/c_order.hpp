// SPDX-License-Identifier: Apache-2.0
// A leaf's values in C order in host memory, whatever its view holds: a column-major leaf
// reordered, the boxes of a sharded one placed, device shards copied over, a piece of rows at
// a time. What the exports to other formats (safetensors,
// Orbax), which store arrays whole and in C order, read leaves through.
#pragma once

#include <cstring>
#include <set>
#include <utility>
#include <vector>

#include "cairn/core/tuning.hpp"
#include "cairn/device/memory.hpp"
#include "cairn/dtype/cast_host.hpp"
#include "cairn/kernels/box_copy.hpp"
#include "cairn/tree/traits.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// The elements of a sharded view this process holds a copy of (each distinct box once).
// Calls f(shard) for one copy of each distinct non-empty box this process holds (a replica
// whose primary holder is another process holds the same values).
template <class F>
void for_each_held_box(const LeafView& v, F&& f) {
  std::set<std::pair<Shape, Shape>> seen;
  for (const auto& s : v.shards)
    if (s.box.elements() > 0 && s.data && seen.emplace(s.box.start, s.box.shape).second) f(s);
}
inline std::uint64_t held_elements(const LeafView& v) {
  std::uint64_t covered = 0;
  for_each_held_box(v, [&](const ShardView& s) { covered += static_cast<std::uint64_t>(s.box.elements()); });
  return covered;
}

// The rows [first, first + count) along dimension 0 of a view, in C order and the view's own
// dtype, into host memory at `dst`: a plain C-order view's bytes are copied, a column-major one
// and the boxes of a sharded one are box-copied into place (each distinct box once, from any
// copy this process holds; the export checked first that they cover the array). A shard in
// device memory sends only its rows within the slab, which are contiguous in its C-order
// memory, through `staged`: so a device leaf crosses to the host a slab at a time, never whole.
inline void c_order_slab(const LeafView& v, std::int64_t first, std::int64_t count, unsigned char* dst,
                         std::vector<unsigned char>& staged) {
  const std::size_t item = dtype_size(v.dtype);
  if (v.shape.empty()) {  // a scalar: one element
    if (v.shards.empty()) std::memcpy(dst, v.data, item);
    else copy_bytes(dst, MemoryKind::host, v.shards.front().data, v.shards.front().memory, item);
    return;
  }
  Box slab = whole_box(v.shape);
  slab.start[0] = first;
  slab.shape[0] = count;
  if (v.shards.empty()) {
    if (v.order == Order::C || v.shape.size() < 2) {
      const std::uint64_t row = byte_count(slab.shape, item) / static_cast<std::uint64_t>(std::max<std::int64_t>(count, 1));
      std::memcpy(dst, static_cast<const unsigned char*>(v.data) + static_cast<std::uint64_t>(first) * row,
                  static_cast<std::size_t>(row * static_cast<std::uint64_t>(count)));
      return;
    }
    box_copy_host(item, v.data, dst, plan_box_copy(slab, whole_box(v.shape), true, slab, false));
    return;
  }
  for_each_held_box(v, [&](const ShardView& s) {
    Box part;
    if (!intersect(s.box, slab, part)) return;
    if (s.memory == MemoryKind::host) {
      box_copy_host(item, s.data, dst, plan_box_copy(part, s.box, false, slab, false));
      return;
    }
    // The shard's rows part.start[0] .. + part.shape[0], whole, from the device.
    Box rows = s.box;
    rows.start[0] = part.start[0];
    rows.shape[0] = part.shape[0];
    const std::uint64_t row_bytes = byte_count(s.box.shape, item) / static_cast<std::uint64_t>(s.box.shape[0]);
    const std::uint64_t skip = static_cast<std::uint64_t>(part.start[0] - s.box.start[0]) * row_bytes;
    staged.resize(static_cast<std::size_t>(row_bytes * static_cast<std::uint64_t>(part.shape[0])));
    copy_bytes(staged.data(), MemoryKind::host, static_cast<const unsigned char*>(s.data) + skip, s.memory, staged.size());
    box_copy_host(item, staged.data(), dst, plan_box_copy(part, rows, false, slab, false));
  });
}

// Calls put(bytes, n) with a leaf's values in C order as dtype `to`, in order, a piece of about
// write_piece_bytes at a time (rows along dimension 0, one row at least): reordered, gathered
// from its shards (host or device) and cast a piece at a time, never the whole leaf. A cast
// that does not fit names `key`.
template <class Put>
void for_each_c_order_piece(const LeafView& v, DType to, OnOverflow on_overflow, const std::string& key, Put&& put) {
  const std::size_t in_size = dtype_size(v.dtype), out_size = dtype_size(to);
  std::vector<unsigned char> piece, staged, cast;
  auto convert = [&](const void* src, std::uint64_t elements) -> const void* {
    if (to == v.dtype) return src;
    cast.resize(static_cast<std::size_t>(elements * out_size));
    try {
      cast_host(v.dtype, src, to, cast.data(), static_cast<std::size_t>(elements), on_overflow);
    } catch (const Error& e) {
      throw e.with_key(key);
    }
    return cast.data();
  };
  if (v.shards.empty() && (v.order == Order::C || v.shape.size() < 2) && to == v.dtype) {
    // Already C order, as stored: straight from the leaf's memory, no copy.
    const std::uint64_t total = element_count(v.shape) * in_size;
    const auto* bytes = static_cast<const unsigned char*>(v.data);
    for (std::uint64_t at = 0; at < total; at += write_piece_bytes)
      put(bytes + at, std::min<std::uint64_t>(write_piece_bytes, total - at));
    return;
  }
  const std::int64_t rows = v.shape.empty() ? 1 : v.shape[0];
  const std::uint64_t row_elements = element_count(v.shape) / static_cast<std::uint64_t>(std::max<std::int64_t>(rows, 1));
  const std::int64_t per_piece = static_cast<std::int64_t>(
      std::max<std::uint64_t>(1, write_piece_bytes / std::max<std::uint64_t>(1, row_elements * std::max(in_size, out_size))));
  for (std::int64_t first = 0; first < rows; first += per_piece) {
    const std::int64_t count = std::min(per_piece, rows - first);
    const std::uint64_t elements = row_elements * static_cast<std::uint64_t>(count);
    if (elements == 0) continue;
    piece.resize(static_cast<std::size_t>(elements * in_size));
    c_order_slab(v, first, count, piece.data(), staged);
    put(convert(piece.data(), elements), elements * out_size);
  }
}

}  // namespace detail
CAIRN_END_NAMESPACE
