// SPDX-License-Identifier: Apache-2.0
// Index boxes of an N-d array: where a shard or a stored chunk lies in the global array, and
// the intersection of two of them (which part of a stored chunk a target shard needs).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "cairn/core/shape.hpp"

CAIRN_BEGIN_NAMESPACE

struct Box {
  Shape start;  // first index per dimension
  Shape shape;  // extent per dimension

  std::size_t rank() const { return shape.size(); }
  std::uint64_t elements() const { return element_count(shape); }
  bool empty() const {
    for (auto e : shape)
      if (e == 0) return true;
    return false;
  }
  friend bool operator==(const Box&, const Box&) = default;
};

inline std::string to_string(const Box& b) {
  std::string s = "[";
  for (std::size_t d = 0; d < b.rank(); ++d) {
    if (d) s += ", ";
    s += std::to_string(b.start[d]) + ":" + std::to_string(b.start[d] + b.shape[d]);
  }
  return s + "]";
}

// Whether `b` has the rank of `shape` and lies inside it, with no negative start or extent.
// Written so that no sum can overflow: boxes come from untrusted metadata too.
inline bool box_inside(const Shape& start, const Shape& extent, const Shape& shape) {
  if (start.size() != shape.size() || extent.size() != shape.size()) return false;
  for (std::size_t d = 0; d < shape.size(); ++d)
    if (start[d] < 0 || extent[d] < 0 || start[d] > shape[d] || extent[d] > shape[d] - start[d]) return false;
  return true;
}
inline bool box_inside(const Box& b, const Shape& shape) { return box_inside(b.start, b.shape, shape); }

// The box covering a whole array of this shape.
inline Box whole_box(const Shape& shape) { return {Shape(shape.size(), 0), shape}; }

// Intersection of two boxes of the same rank; false when it holds no element.
inline bool intersect(const Box& a, const Box& b, Box& out) {
  out.start.resize(a.rank());
  out.shape.resize(a.rank());
  for (std::size_t d = 0; d < a.rank(); ++d) {
    const std::int64_t lo = std::max(a.start[d], b.start[d]);
    const std::int64_t hi = std::min(a.start[d] + a.shape[d], b.start[d] + b.shape[d]);
    if (hi <= lo) return false;
    out.start[d] = lo;
    out.shape[d] = hi - lo;
  }
  return true;
}

CAIRN_END_NAMESPACE
