// SPDX-License-Identifier: Apache-2.0
// The same program with Eigen alone (raw bytes through stdio), for comparison.
#include <cstdio>

#include "model.hpp"

namespace {
template <class M>
bool put(std::FILE* f, const M& m) {
  const long dims[2] = {static_cast<long>(m.rows()), static_cast<long>(m.cols())};
  return std::fwrite(dims, sizeof dims, 1, f) == 1 &&
         std::fwrite(m.data(), sizeof(*m.data()), static_cast<std::size_t>(m.size()), f) == static_cast<std::size_t>(m.size());
}
template <class M>
bool get(std::FILE* f, M& m) {
  long dims[2];
  if (std::fread(dims, sizeof dims, 1, f) != 1) return false;
  m.resize(dims[0], dims[1]);
  return std::fread(m.data(), sizeof(*m.data()), static_cast<std::size_t>(m.size()), f) == static_cast<std::size_t>(m.size());
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) { std::fprintf(stderr, "usage: %s FILE\n", argv[0]); return 2; }
  const model::Mlp m = model::random_mlp();
  std::FILE* f = std::fopen(argv[1], "wb");
  if (!f) return 2;
  bool ok = put(f, m.l1.w) && put(f, m.l1.b) && put(f, m.l2.w) && put(f, m.l2.b) && put(f, m.l3.w) && put(f, m.l3.b) &&
            put(f, m.stats) && std::fwrite(&m.step, sizeof m.step, 1, f) == 1;
  std::fclose(f);
  model::Mlp back;
  f = std::fopen(argv[1], "rb");
  if (!f) return 2;
  ok = ok && get(f, back.l1.w) && get(f, back.l1.b) && get(f, back.l2.w) && get(f, back.l2.b) && get(f, back.l3.w) &&
       get(f, back.l3.b) && get(f, back.stats) && std::fread(&back.step, sizeof back.step, 1, f) == 1;
  std::fclose(f);
  return ok && model::same(m, back) ? 0 : 1;
}
