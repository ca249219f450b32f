// SPDX-License-Identifier: Apache-2.0
// What the multi-process docs' snippets assume: MPI is initialized, a coordinator over
// MPI_COMM_WORLD, and a training state sharded over the ranks.
#pragma once
#include <cairn/mpi.hpp>

#include "train_state.hpp"

struct ShardedState {
  cairn::ShardedArray<float> w;
  std::int64_t step = 0;
};
CAIRN_TREE(ShardedState, w, step)
