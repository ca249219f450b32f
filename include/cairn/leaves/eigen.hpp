// SPDX-License-Identifier: Apache-2.0
// Eigen dense matrices and arrays as tree leaves (fixed and dynamic size, row- and
// column-major); their cereal support is leaves/eigen_cereal.hpp. The checkpoint keeps the
// logical shape and the memory order it was saved in; a target of the other order is
// converted on load. Vectors (one compile-time row or column) are 1-D arrays, everything else 2-D.
#pragma once

#if __has_include(<Eigen/Core>)
#include <Eigen/Core>
#else
#include <eigen3/Eigen/Core>
#endif

#include <vector>

#include "cairn/tree/traits.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

template <class M>
struct eigen_leaf {
  using Scalar = typename M::Scalar;
  static_assert(has_dtype<Scalar>, "cairn: Eigen leaves need a scalar type with a dtype (float, double, integers, bool)");
  static constexpr bool is_vector = M::RowsAtCompileTime == 1 || M::ColsAtCompileTime == 1;
  static constexpr Order order = (M::Flags & Eigen::RowMajorBit) ? Order::C : Order::F;

  static LeafView view(const M& m) {
    Shape shape = is_vector ? Shape{static_cast<std::int64_t>(m.size())}
                            : Shape{static_cast<std::int64_t>(m.rows()), static_cast<std::int64_t>(m.cols())};
    return {dtype_of<Scalar>, std::move(shape), is_vector ? Order::C : order, m.data(),
            static_cast<std::uint64_t>(m.size()) * sizeof(Scalar)};
  }

  static LeafBuffer prepare(M& m, const StoredLeafInfo& stored) {
    const Shape& s = stored.shape;
    if (is_vector) {
      if (s.size() != 1)
        throw Error(ErrorKind::shape_mismatch, "stored shape " + to_string(s) + " is not 1-D, but the target is an Eigen vector");
      const Eigen::Index n = static_cast<Eigen::Index>(s[0]);
      const Eigen::Index fixed = M::SizeAtCompileTime;
      if (fixed != Eigen::Dynamic && fixed != n)
        throw Error(ErrorKind::shape_mismatch, "stored shape " + to_string(s) + " does not fit the target's fixed shape [" +
                    std::to_string(fixed) + "]");
      if (M::RowsAtCompileTime == 1) m.resize(1, n); else m.resize(n, 1);
    } else {
      if (s.size() != 2)
        throw Error(ErrorKind::shape_mismatch, "stored shape " + to_string(s) + " is not 2-D, but the target is an Eigen matrix");
      const Eigen::Index r = static_cast<Eigen::Index>(s[0]), c = static_cast<Eigen::Index>(s[1]);
      if ((M::RowsAtCompileTime != Eigen::Dynamic && M::RowsAtCompileTime != r) ||
          (M::ColsAtCompileTime != Eigen::Dynamic && M::ColsAtCompileTime != c))
        throw Error(ErrorKind::shape_mismatch, "stored shape " + to_string(s) + " does not fit the target's fixed shape [" +
                    std::to_string(M::RowsAtCompileTime) + ", " + std::to_string(M::ColsAtCompileTime) + "]");
      m.resize(r, c);
    }
    return {dtype_of<Scalar>, is_vector ? Order::C : order, m.data(),
            static_cast<std::uint64_t>(m.size()) * sizeof(Scalar)};
  }
};

}  // namespace detail

template <class S, int R, int C, int O, int MR, int MC>
struct leaf_traits<Eigen::Matrix<S, R, C, O, MR, MC>> : detail::eigen_leaf<Eigen::Matrix<S, R, C, O, MR, MC>> {};
template <class S, int R, int C, int O, int MR, int MC>
struct leaf_traits<Eigen::Array<S, R, C, O, MR, MC>> : detail::eigen_leaf<Eigen::Array<S, R, C, O, MR, MC>> {};

CAIRN_END_NAMESPACE
