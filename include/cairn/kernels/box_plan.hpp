// SPDX-License-Identifier: Apache-2.0
// Planning a copy of an N-d index box between two buffers of different layouts (each side
// described by element strides, so C and F order and any box inside a larger buffer are the
// same case), and the host copy's entry point. The Thrust kernel that runs a plan is
// kernels/box_copy.hpp; only the runtime includes it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cairn/core/box.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

inline constexpr int max_box_rank = 8;

// A region to copy: its extent per dimension and the element strides of source and
// destination (the pointers passed with it address the region's first element).
struct StridedRegion {
  int rank = 0;
  std::uint64_t extent[max_box_rank] = {};
  std::int64_t src_stride[max_box_rank] = {};
  std::int64_t dst_stride[max_box_rank] = {};

  std::uint64_t elements() const {
    std::uint64_t n = 1;
    for (int d = 0; d < rank; ++d) n *= extent[d];
    return n;
  }
};

// Element strides of a dense buffer holding `shape` in C (row-major) or F order.
inline std::vector<std::int64_t> dense_strides(const Shape& shape, bool column_major) {
  std::vector<std::int64_t> s(shape.size());
  std::int64_t m = 1;
  if (column_major) {
    for (std::size_t d = 0; d < shape.size(); ++d) { s[d] = m; m *= shape[d]; }
  } else {
    for (std::size_t d = shape.size(); d-- > 0;) { s[d] = m; m *= shape[d]; }
  }
  return s;
}

struct BoxCopyPlan {
  StridedRegion region;
  std::uint64_t src_offset = 0, dst_offset = 0;  // elements, to the region's first element
};

// Plans copying `region` (global indices) from a buffer holding `src_box` to one holding
// `dst_box`. Dimensions of extent 1 are dropped and neighbours contiguous on both sides are
// merged, so a copy of whole rows becomes one long run.
inline BoxCopyPlan plan_box_copy(const Box& region, const Box& src_box, bool src_column_major, const Box& dst_box,
                                 bool dst_column_major) {
  const auto ss = dense_strides(src_box.shape, src_column_major);
  const auto ds = dense_strides(dst_box.shape, dst_column_major);
  BoxCopyPlan p;
  struct D { std::uint64_t e; std::int64_t s, t; };
  std::vector<D> dims;
  for (std::size_t d = 0; d < region.rank(); ++d) {
    p.src_offset += static_cast<std::uint64_t>((region.start[d] - src_box.start[d]) * ss[d]);
    p.dst_offset += static_cast<std::uint64_t>((region.start[d] - dst_box.start[d]) * ds[d]);
    if (region.shape[d] != 1) dims.push_back({static_cast<std::uint64_t>(region.shape[d]), ss[d], ds[d]});
  }
  // The innermost dimension should be the destination's fastest one (writes stay sequential
  // when the orders differ).
  if (dims.size() > 1 && dst_column_major) std::reverse(dims.begin(), dims.end());
  std::vector<D> merged;
  for (const auto& d : dims) {
    if (!merged.empty()) {
      D& m = merged.back();
      // m is outer, d inner: merge when stepping m equals running through all of d.
      if (m.s == d.s * static_cast<std::int64_t>(d.e) && m.t == d.t * static_cast<std::int64_t>(d.e)) {
        m.e *= d.e;
        m.s = d.s;
        m.t = d.t;
        continue;
      }
    }
    merged.push_back(d);
  }
  if (merged.empty()) merged.push_back({1, 1, 1});
  if (merged.size() > static_cast<std::size_t>(max_box_rank))
    throw Error(ErrorKind::invalid_argument,
                "box copy of rank " + std::to_string(merged.size()) + " (after merging dimensions); at most " +
                std::to_string(max_box_rank) + " is supported");
  p.region.rank = static_cast<int>(merged.size());
  for (std::size_t d = 0; d < merged.size(); ++d) {
    p.region.extent[d] = merged[d].e;
    p.region.src_stride[d] = merged[d].s;
    p.region.dst_stride[d] = merged[d].t;
  }
  return p;
}

// Runs a planned copy of `item_size`-byte elements between two buffers of host memory
// (kernels/box_copy_impl.hpp).
CAIRN_API void box_copy_host(std::size_t item_size, const void* src, void* dst, const BoxCopyPlan& p);

}  // namespace detail
CAIRN_END_NAMESPACE

