// SPDX-License-Identifier: Apache-2.0
// Helpers of the sharding tests (unit-sharding.cpp, unit-reshard.cpp): random meshes, specs
// and shapes, bit comparison, and rewriting a checkpoint's metadata.
#pragma once

#include "test_util.hpp"

namespace test {


// Rewrites _METADATA (from records) and signs it in the commit marker.
inline void replace_metadata(const std::string& ckpt, const cairn::CheckpointMetadata& m) {
  test::write_file(ckpt + "/_METADATA", cairn::detail::metadata_to_json(m));
  test::resign(ckpt);
}

// A random mesh from 1x1 to 2x4 (or 8 on one axis) of host or device-system memory.
inline cairn::Mesh random_mesh(bool device) {
  static const std::vector<std::pair<std::int64_t, std::int64_t>> grids = {{1, 1}, {1, 2}, {2, 1}, {2, 2}, {2, 4},
                                                                           {4, 2}, {1, 8}, {8, 1}, {3, 1}};
  const auto [a, b] = grids[test::rng()() % grids.size()];
  std::vector<cairn::MeshAxis> axes = {{"x", a}, {"y", b}};
  return device ? cairn::Mesh::device(axes) : cairn::Mesh::host(axes);
}

// A random spec over `rank` dimensions: each dimension replicated, or split over x, y, or both.
inline cairn::PartitionSpec random_spec(std::size_t rank) {
  std::vector<cairn::PartitionSpec::Dim> dims;
  bool x = false, y = false;
  for (std::size_t d = 0; d < rank; ++d) {
    std::vector<std::string> axes;
    switch (test::rng()() % 5) {
      case 1: if (!x) { axes = {"x"}; x = true; } break;
      case 2: if (!y) { axes = {"y"}; y = true; } break;
      case 3: if (!x && !y) { axes = {"x", "y"}; x = y = true; } break;
      case 4: if (!x && !y) { axes = {"y", "x"}; x = y = true; } break;
      default: break;
    }
    dims.emplace_back(axes);
  }
  if (test::rng()() % 4 == 0 && !dims.empty()) dims.pop_back();  // trailing dims replicated by omission
  return cairn::PartitionSpec(std::move(dims));
}

inline cairn::Shape random_shape() {
  cairn::Shape s(1 + test::rng()() % 3);
  for (auto& d : s) d = 1 + static_cast<std::int64_t>(test::rng()() % 13);  // odd sizes included
  return s;
}

template <class T>
void check_same_bits(const std::vector<T>& got, const std::vector<T>& want) {
  REQUIRE(got.size() == want.size());
  CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(T)) == 0);
}

}  // namespace test
