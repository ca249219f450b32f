// SPDX-License-Identifier: Apache-2.0
// What the killed saving process (s3_save_child.cpp) and its killer (unit-s3-faults.cpp)
// agree on: the store's options, the Checkpointer's, and the state of each step.
#pragma once

#include <cairn/s3.hpp>

#include <random>

namespace kill_test {

struct State {
  std::vector<float> weights;  // several parts, so that kills land inside multipart uploads
  std::vector<std::int32_t> ids;
  std::int64_t step = 0;
};
CAIRN_TREE(State, weights, ids, step)

inline State state(std::int64_t step) {
  std::mt19937_64 g(static_cast<std::uint64_t>(step) * 7919);
  State s;
  // Every third step small (its files each under the part size, 64 KiB here): written inline,
  // inside its commit marker; the others as a generation with multipart uploads. Kills land
  // in both kinds of save.
  const bool small = step % 3 == 0;
  s.weights.resize((small ? 3000 : 60000) + static_cast<std::size_t>(g() % 5000 / (small ? 10 : 1)));
  for (auto& w : s.weights) w = static_cast<float>(g() % 100000) / 7.0f;
  s.ids.resize(static_cast<std::size_t>(g() % 100));
  for (auto& i : s.ids) i = static_cast<std::int32_t>(g());
  s.step = step;
  return s;
}

inline cairn::S3Options options(const std::string& endpoint) {
  cairn::S3Options o;
  o.endpoint = endpoint;
  o.part_size = 64 << 10;
  o.multipart_threshold = 64 << 10;
  o.read_part_size = 64 << 10;
  o.concurrency = 3;
  o.max_attempts = 2;
  o.backoff_base = std::chrono::milliseconds(5);
  o.leftover_age = std::chrono::seconds(0);  // one writer at a time here: anything unnamed is dead
  return o;
}

inline cairn::CheckpointerOptions checkpointer_options() {
  cairn::CheckpointerOptions o;
  o.retention = cairn::RetentionPolicy::keep_latest(3);
  return o;
}

}  // namespace kill_test
