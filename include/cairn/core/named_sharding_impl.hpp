// SPDX-License-Identifier: Apache-2.0
// The runtime of core/named_sharding.hpp: checking a sharding against an array and the box
// each device holds. Out of line with separate compilation (docs/compile-time.md); they run
// once per shard, never per element.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cairn/core/named_sharding.hpp"

CAIRN_BEGIN_NAMESPACE

CAIRN_API void NamedSharding::validate(std::size_t rank) const {
  if (spec.size() > rank)
    throw Error(ErrorKind::invalid_argument, spec.str() + " has " + std::to_string(spec.size()) +
                " entries for an array of rank " + std::to_string(rank));
  std::vector<bool> used(mesh.axes().size(), false);
  for (std::size_t d = 0; d < spec.size(); ++d)
    for (const auto& name : spec.axes(d)) {
      const int a = mesh.axis_index(name);
      if (a < 0)
        throw Error(ErrorKind::invalid_argument, spec.str() + " names axis '" + name + "', not in the mesh " +
                    mesh.describe());
      if (used[static_cast<std::size_t>(a)])
        throw Error(ErrorKind::invalid_argument, spec.str() + " uses mesh axis '" + name + "' twice");
      used[static_cast<std::size_t>(a)] = true;
    }
}

CAIRN_API Box NamedSharding::shard_box(const Shape& shape, std::size_t i) const {
  const auto coords = mesh.coordinates(i);
  Box b{Shape(shape.size(), 0), shape};
  for (std::size_t d = 0; d < shape.size() && d < spec.size(); ++d) {
    std::int64_t part = 0, parts = 1;
    for (const auto& name : spec.axes(d)) {  // first named axis is the major one
      const auto a = static_cast<std::size_t>(mesh.axis_index(name));
      part = part * mesh.axes()[a].size + coords[a];
      parts *= mesh.axes()[a].size;
    }
    const std::int64_t n = shape[d];
    const std::int64_t per = (n + parts - 1) / parts;
    const std::int64_t start = (per == 0 || part > n / per) ? n : std::min(n, part * per);  // no overflow
    b.start[d] = start;
    b.shape[d] = std::min(per, n - start);
  }
  return b;
}

CAIRN_API std::vector<Box> NamedSharding::shard_boxes(const Shape& shape) const {
  validate(shape.size());
  std::vector<Box> out;
  out.reserve(mesh.size());
  for (std::size_t i = 0; i < mesh.size(); ++i) out.push_back(shard_box(shape, i));
  return out;
}

CAIRN_END_NAMESPACE
