// SPDX-License-Identifier: Apache-2.0
// The state of tests/data/v1-checkpoint: a checkpoint written by cairn before the storage
// seam (issue 8), kept to prove that the bytes on disk did not change. Every value is a
// formula of its index, so the test recomputes what it must load.
#pragma once

#include <cairn/cairn.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace compat {

struct Inner {
  std::vector<std::int32_t> counts;
  std::optional<double> lr;
};
CAIRN_TREE(Inner, counts, lr)

struct State {
  std::vector<float> small;            // a small leaf, packed with its neighbours
  std::vector<float> large;            // 96 KiB: 4 KiB-aligned, written on its own
  std::vector<float> cast_on_save;     // stored as bfloat16 by a cast rule
  Eigen::MatrixXd column_major;        // stored in F order
  std::vector<bool> flags;
  std::int64_t step = 0;
  std::string name;
  std::map<std::string, Inner> table;
  cairn::ShardedArray<float> sharded;  // 2x2 host mesh, PartitionSpec('x', 'y')
};
CAIRN_TREE(State, small, large, cast_on_save, column_major, flags, step, name, table, sharded)

inline float value(std::size_t i, float scale) { return static_cast<float>(static_cast<int>(i % 1000) - 500) * scale; }

inline cairn::NamedSharding sharding() {
  return cairn::NamedSharding(cairn::Mesh::host({{"x", 2}, {"y", 2}}), cairn::PartitionSpec{"x", "y"});
}

inline State make() {
  State s;
  for (std::size_t i = 0; i < 37; ++i) s.small.push_back(value(i, 0.125f));
  for (std::size_t i = 0; i < 24576; ++i) s.large.push_back(value(i * 7, 0.5f));
  for (std::size_t i = 0; i < 50; ++i) s.cast_on_save.push_back(value(i * 3, 0.0625f));  // rounded when stored as bfloat16
  s.column_major.resize(3, 5);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 5; ++c) s.column_major(r, c) = r * 10 + c + 0.25;
  for (std::size_t i = 0; i < 19; ++i) s.flags.push_back(i % 3 == 0);
  s.step = 1234567890123;
  s.name = "compat \"v1\" / ok";
  s.table["alpha"] = Inner{{1, -2, 3}, 0.001};
  s.table["beta"] = Inner{{}, std::nullopt};
  std::vector<float> w;
  for (std::size_t i = 0; i < 6 * 4; ++i) w.push_back(value(i, 1.5f));
  s.sharded = cairn::ShardedArray<float>::from_host(w, {6, 4}, sharding());
  return s;
}

}  // namespace compat
