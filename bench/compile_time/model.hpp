// SPDX-License-Identifier: Apache-2.0
// The model a new user checkpoints: a struct of Eigen matrices and vectors. Kept free of any
// checkpointing library so that every variant of the compile-time measurement shares it.
#pragma once

#include <Eigen/Core>

namespace model {
struct Dense {
  Eigen::MatrixXf w;
  Eigen::VectorXf b;
};
struct Mlp {
  Dense l1, l2, l3;
  Eigen::MatrixXd stats;
  long step = 0;
};
inline Mlp random_mlp() {
  Mlp m;
  m.l1 = {Eigen::MatrixXf::Random(64, 32), Eigen::VectorXf::Random(64)};
  m.l2 = {Eigen::MatrixXf::Random(64, 64), Eigen::VectorXf::Random(64)};
  m.l3 = {Eigen::MatrixXf::Random(10, 64), Eigen::VectorXf::Random(10)};
  m.stats = Eigen::MatrixXd::Random(4, 4);
  m.step = 7;
  return m;
}
inline bool same(const Mlp& a, const Mlp& b) {
  auto eq = [](const Dense& x, const Dense& y) { return x.w == y.w && x.b == y.b; };
  return eq(a.l1, b.l1) && eq(a.l2, b.l2) && eq(a.l3, b.l3) && a.stats == b.stats && a.step == b.step;
}
}  // namespace model
