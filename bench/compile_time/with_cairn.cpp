// SPDX-License-Identifier: Apache-2.0
// Saves and loads the model with cairn: the translation unit a new user writes.
#include <cairn/cairn.hpp>

#include <cstdio>

#include "model.hpp"

namespace model {
CAIRN_TREE(Dense, w, b)
CAIRN_TREE(Mlp, l1, l2, l3, stats, step)
}  // namespace model

int main(int argc, char** argv) {
  if (argc < 2) { std::fprintf(stderr, "usage: %s DIR\n", argv[0]); return 2; }
  const model::Mlp m = model::random_mlp();
  cairn::save(argv[1], m);
  const auto back = cairn::load<model::Mlp>(argv[1]);
  return model::same(m, back) ? 0 : 1;
}
