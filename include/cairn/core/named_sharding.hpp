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
  void validate(std::size_t rank) const {
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

  // How many parts dimension d is split into.
  std::int64_t parts(std::size_t d) const {
    std::int64_t p = 1;
    for (const auto& name : spec.axes(d)) p *= mesh.axes()[static_cast<std::size_t>(mesh.axis_index(name))].size;
    return p;
  }

  // The box of the global array held by the device at mesh position i (validate first).
  Box shard_box(const Shape& shape, std::size_t i) const {
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

  // Boxes of every device, in mesh order.
  std::vector<Box> shard_boxes(const Shape& shape) const {
    validate(shape.size());
    std::vector<Box> out;
    out.reserve(mesh.size());
    for (std::size_t i = 0; i < mesh.size(); ++i) out.push_back(shard_box(shape, i));
    return out;
  }

  std::string describe() const { return "mesh " + mesh.describe() + ", " + spec.str(); }

  friend bool operator==(const NamedSharding&, const NamedSharding&) = default;
};

CAIRN_END_NAMESPACE
