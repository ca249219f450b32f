// SPDX-License-Identifier: Apache-2.0
// A leaf's values in C order in host memory, whatever its view holds: a column-major leaf
// reordered, the boxes of a sharded one placed, device shards copied over, cast by the leaf
// encoder (leaf_encoder.hpp), a piece of rows at a time. What the exports to other formats (safetensors,
// Orbax), which store arrays whole and in C order, read leaves through.
#pragma once

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>
#include <vector>

#include "cairn/checkpoint/leaf_encoder.hpp"
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

// The rows [first, first + count) along dimension 0 of a view, in C order and the encoder's
// dtype, into host memory at `dst`. Each distinct box this process holds a copy of (the export
// checked first that they cover the array) gives its rows within the slab, which are one run
// of its C-order memory: encoded (cast, or copied over from the device) into `staged` and
// box-copied into place, or box-copied straight from host memory where nothing is cast. A
// plain C-order view's rows are one run; a column-major one is reordered into `staged` first.
inline void c_order_slab(const LeafView& v, LeafEncoder& encoder, std::int64_t first, std::int64_t count,
                         unsigned char* dst, StagingBuffer& staged) {
  const std::size_t in_size = dtype_size(v.dtype), out_size = dtype_size(encoder.to());
  if (v.shape.empty()) {  // a scalar: one element
    const bool plain = v.shards.empty();
    encoder.encode(plain ? v.data : v.shards.front().data, plain ? MemoryKind::host : v.shards.front().memory,
                   plain ? 0 : v.shards.front().device, 0, 1, dst);
    return;
  }
  Box slab = whole_box(v.shape);
  slab.start[0] = first;
  slab.shape[0] = count;
  if (v.shards.empty()) {
    const std::uint64_t elements = slab.elements();
    if (v.order == Order::C || v.shape.size() < 2) {
      encoder.encode(v.data, MemoryKind::host, 0, static_cast<std::uint64_t>(first) * (elements / static_cast<std::uint64_t>(count)),
                     elements, dst);
      return;
    }
    unsigned char* reordered = staged.get(static_cast<std::size_t>(elements * in_size), false);
    box_copy_host(in_size, v.data, reordered, plan_box_copy(slab, whole_box(v.shape), true, slab, false));
    encoder.encode(reordered, MemoryKind::host, 0, 0, elements, dst);
    return;
  }
  for_each_held_box(v, [&](const ShardView& s) {
    Box part;
    if (!intersect(s.box, slab, part)) return;
    if (s.memory == MemoryKind::host && !encoder.casts()) {
      box_copy_host(in_size, s.data, dst, plan_box_copy(part, s.box, false, slab, false));
      return;
    }
    // The shard's rows part.start[0] .. + part.shape[0], whole: one run of its memory.
    Box rows = s.box;
    rows.start[0] = part.start[0];
    rows.shape[0] = part.shape[0];
    const std::uint64_t row_elements = static_cast<std::uint64_t>(s.box.elements()) / static_cast<std::uint64_t>(s.box.shape[0]);
    const std::uint64_t skip = static_cast<std::uint64_t>(part.start[0] - s.box.start[0]) * row_elements;
    // Device rows cross into page-locked memory (a copy from pageable memory goes through the
    // driver's own staging, at about half the speed).
    unsigned char* encoded = staged.get(static_cast<std::size_t>(rows.elements() * out_size),
                                        CAIRN_CUDA && s.memory == MemoryKind::device);
    encoder.encode(s.data, s.memory, s.device, skip, static_cast<std::uint64_t>(rows.elements()), encoded);
    box_copy_host(out_size, encoded, dst, plan_box_copy(part, rows, false, slab, false));
  });
}

// Whether for_each_c_order_piece hands out the leaf's own memory (C order already, one
// buffer, no cast) rather than pieces it made.
inline bool c_order_in_place(const LeafView& v, DType to) {
  return v.shards.empty() && (v.order == Order::C || v.shape.size() < 2) && to == v.dtype;
}

// Calls put(bytes, n) with a leaf's values in C order as dtype `to`, in order, a piece of about
// write_piece_bytes at a time (rows along dimension 0, one row at least): reordered, gathered
// from its shards (host or device) and cast a piece at a time by the leaf encoder, never the
// whole leaf. A cast that does not fit names `key`. Elements no shard of a sharded view covers
// are zero (the Orbax export's padding of an edge chunk to its full shape, as zarr stores it).
template <class Put>
void for_each_c_order_piece(const LeafView& v, DType to, OnOverflow on_overflow, const std::string& key, Put&& put) {
  const std::size_t in_size = dtype_size(v.dtype), out_size = dtype_size(to);
  if (c_order_in_place(v, to)) {
    // Already C order, as stored: straight from the leaf's memory, no copy.
    const std::uint64_t total = element_count(v.shape) * in_size;
    const auto* bytes = static_cast<const unsigned char*>(v.data);
    for (std::uint64_t at = 0; at < total; at += write_piece_bytes)
      put(bytes + at, std::min<std::uint64_t>(write_piece_bytes, total - at));
    return;
  }
  LeafEncoder encoder(v.dtype, to, on_overflow);
  std::vector<unsigned char> piece;
  StagingBuffer staged;
  const bool holes = !v.shards.empty() && held_elements(v) < element_count(v.shape);
  const std::int64_t rows = v.shape.empty() ? 1 : v.shape[0];
  const std::uint64_t row_elements = element_count(v.shape) / static_cast<std::uint64_t>(std::max<std::int64_t>(rows, 1));
  const std::int64_t per_piece = static_cast<std::int64_t>(
      std::max<std::uint64_t>(1, write_piece_bytes / std::max<std::uint64_t>(1, row_elements * std::max(in_size, out_size))));
  for (std::int64_t first = 0; first < rows; first += per_piece) {
    const std::int64_t count = std::min(per_piece, rows - first);
    const std::uint64_t elements = row_elements * static_cast<std::uint64_t>(count);
    if (elements == 0) continue;
    piece.resize(static_cast<std::size_t>(elements * out_size));
    if (holes) std::fill(piece.begin(), piece.end(), static_cast<unsigned char>(0));
    try {
      c_order_slab(v, encoder, first, count, piece.data(), staged);
    } catch (const Error& e) {
      throw e.key_path().empty() ? e.with_key(key) : e;
    }
    put(piece.data(), elements * out_size);
  }
}

}  // namespace detail
CAIRN_END_NAMESPACE
