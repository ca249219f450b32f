// SPDX-License-Identifier: Apache-2.0
// NamedSharding = Mesh + PartitionSpec: which index box of a global array each device holds.
// Uneven divisions follow JAX's rule: a dimension of size n split into p parts gives every
// part ceil(n / p) indices except the last ones, which get what is left (possibly nothing:
// n = 5 over 4 devices gives 2, 2, 1, 0).
#pragma once

#include <string>
#include <vector>

#include "cairn/core/box.hpp"
#include "cairn/core/mesh.hpp"
#include "cairn/core/partition_spec.hpp"

CAIRN_BEGIN_NAMESPACE

struct NamedSharding {
  Mesh mesh;
  PartitionSpec spec;

  NamedSharding() = default;
  NamedSharding(Mesh m, PartitionSpec s) : mesh(std::move(m)), spec(std::move(s)) {}

  // Throws invalid_argument unless the spec fits an array of this rank and this mesh: every
  // named axis exists and is used at most once.
  CAIRN_API void validate(std::size_t rank) const;

  // How many parts dimension d is split into.
  std::int64_t parts(std::size_t d) const {
    std::int64_t p = 1;
    for (const auto& name : spec.axes(d)) p *= mesh.axes()[static_cast<std::size_t>(mesh.axis_index(name))].size;
    return p;
  }

  // The box of the global array held by the device at mesh position i (validate first).
  CAIRN_API Box shard_box(const Shape& shape, std::size_t i) const;

  // Boxes of every device, in mesh order.
  CAIRN_API std::vector<Box> shard_boxes(const Shape& shape) const;

  std::string describe() const { return "mesh " + mesh.describe() + ", " + spec.str(); }

  friend bool operator==(const NamedSharding&, const NamedSharding&) = default;
};

CAIRN_END_NAMESPACE

// Header-only: the definitions of the members declared here (with CAIRN_SEPARATE_COMPILATION,
// only in the translation unit of cairn/src.hpp).
#if CAIRN_DEFINES_RUNTIME
#include "cairn/core/named_sharding_impl.hpp"
#endif
