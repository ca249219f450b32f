// SPDX-License-Identifier: Apache-2.0
// The same program with cereal alone (a binary archive in a file), for comparison.
#include <cereal/archives/binary.hpp>

#include <cstdio>
#include <fstream>

#include "model.hpp"

namespace model {
template <class A>
void save_matrix(A& ar, const auto& m) {
  ar(static_cast<long>(m.rows()), static_cast<long>(m.cols()));
  ar(cereal::binary_data(m.data(), sizeof(*m.data()) * static_cast<std::size_t>(m.size())));
}
template <class A, class M>
void load_matrix(A& ar, M& m) {
  long r = 0, c = 0;
  ar(r, c);
  m.resize(r, c);
  ar(cereal::binary_data(m.data(), sizeof(*m.data()) * static_cast<std::size_t>(m.size())));
}
template <class A> void save(A& ar, const Dense& d) { save_matrix(ar, d.w); save_matrix(ar, d.b); }
template <class A> void load(A& ar, Dense& d) { load_matrix(ar, d.w); load_matrix(ar, d.b); }
template <class A> void save(A& ar, const Mlp& m) { ar(m.l1, m.l2, m.l3); save_matrix(ar, m.stats); ar(m.step); }
template <class A> void load(A& ar, Mlp& m) { ar(m.l1, m.l2, m.l3); load_matrix(ar, m.stats); ar(m.step); }
}  // namespace model

int main(int argc, char** argv) {
  if (argc < 2) { std::fprintf(stderr, "usage: %s FILE\n", argv[0]); return 2; }
  const model::Mlp m = model::random_mlp();
  {
    std::ofstream out(argv[1], std::ios::binary);
    cereal::BinaryOutputArchive ar(out);
    ar(m);
  }
  model::Mlp back;
  std::ifstream in(argv[1], std::ios::binary);
  cereal::BinaryInputArchive ar(in);
  ar(back);
  return model::same(m, back) ? 0 : 1;
}
