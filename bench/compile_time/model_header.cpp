// SPDX-License-Identifier: Apache-2.0
// A file of a project that includes its model header (Eigen structs) and works on the model
// without checkpointing it. With WITH_CAIRN_TREE, the model header also makes the structs
// cairn trees through the light header: what that costs every such file is the difference.
#include <string>
#include <vector>

#include "model.hpp"

#ifdef WITH_CAIRN_TREE
#include <cairn/tree.hpp>
namespace model {
CAIRN_TREE(Dense, w, b)
CAIRN_TREE(Mlp, l1, l2, l3, stats, step)
}  // namespace model
#endif

float train_step(model::Mlp& m, const std::vector<float>& x) {
  Eigen::Map<const Eigen::VectorXf> in(x.data(), static_cast<Eigen::Index>(x.size()));
  Eigen::VectorXf h = (m.l1.w * in + m.l1.b).cwiseMax(0.f);
  h = (m.l2.w * h + m.l2.b).cwiseMax(0.f);
  Eigen::VectorXf out = m.l3.w * h + m.l3.b;
  m.step++;
#ifdef WITH_CAIRN_TREE
  return out.sum() + static_cast<float>(cairn::leaf_count(m));
#else
  return out.sum();
#endif
}
