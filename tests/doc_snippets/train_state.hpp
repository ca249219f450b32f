// SPDX-License-Identifier: Apache-2.0
// What the README's and docs' training-loop snippets assume: a state with a step counter, a
// training step, and a data-loader position that cereal serializes.
#pragma once
#include <cairn/cairn.hpp>

struct Dense { Eigen::MatrixXf kernel; Eigen::VectorXf bias; };
CAIRN_TREE(Dense, kernel, bias)
struct TrainState { std::map<std::string, Dense> params; std::int64_t step = 0; };
CAIRN_TREE(TrainState, params, step)

struct DataPosition {
  std::int64_t epoch = 0, offset = 0;
  template <class Archive> void serialize(Archive& ar) { ar(epoch, offset); }
};

inline void train_step(TrainState& s) { (void)s; }
