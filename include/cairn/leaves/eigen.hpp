// SPDX-License-Identifier: Apache-2.0
// Eigen dense matrices and arrays as tree leaves (fixed and dynamic size, row- and
// column-major), Eigen::Maps of them (loaded in place), Geometry's Quaternion and Transform, and the
// Tensor module's Eigen::Tensor of any rank; their cereal support is
// leaves/eigen_cereal.hpp. The checkpoint keeps the logical shape and the memory order it was
// saved in; a target of the other order is converted on load. Vectors (one compile-time row or
// column) are 1-D arrays, other matrices 2-D, a Tensor<T, N> N-D.
#pragma once

#if __has_include(<Eigen/Core>)
#include <Eigen/Core>
#else
#include <eigen3/Eigen/Core>
#endif

#include <array>
#include <string>
#include <type_traits>
#include <vector>

#include "cairn/tree/traits.hpp"

// The Tensor module (unsupported/Eigen/CXX11/Tensor) is large and rarely wanted, so it is not
// included here: Tensor is declared, as the module itself declares it (which adds the
// defaults), and its leaf_traits below are instantiated only by a program that uses a Tensor,
// which has included the module.
namespace Eigen {
template <typename Scalar_, int NumIndices_, int Options_, typename IndexType_>
class Tensor;
}  // namespace Eigen

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

  // A dimension of the target's shape for an error: Eigen::Dynamic (-1) takes any extent.
  static std::string extent_text(Eigen::Index n) { return n == Eigen::Dynamic ? "any" : std::to_string(n); }

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
                    extent_text(M::RowsAtCompileTime) + ", " + extent_text(M::ColsAtCompileTime) + "]");
      m.resize(r, c);
    }
    return {dtype_of<Scalar>, is_vector ? Order::C : order, m.data(),
            static_cast<std::uint64_t>(m.size()) * sizeof(Scalar)};
  }
};

// Eigen::Tensor<S, N, Options>: an N-D array, column-major (the module's default) or
// row-major (Eigen::RowMajor), resized to the stored shape on load.
template <class S, int N, int Options, class Index>
struct eigen_tensor_leaf {
  using T = Eigen::Tensor<S, N, Options, Index>;
  static_assert(has_dtype<S>, "cairn: Eigen tensors need a scalar type with a dtype (float, double, integers, bool)");
  static constexpr Order order = N >= 2 && !(Options & Eigen::RowMajor) ? Order::F : Order::C;

  static LeafView view(const T& t) {
    Shape shape;
    for (std::size_t i = 0; i < static_cast<std::size_t>(N); ++i) shape.push_back(static_cast<std::int64_t>(t.dimension(i)));
    return {dtype_of<S>, std::move(shape), order, t.data(), static_cast<std::uint64_t>(t.size()) * sizeof(S)};
  }

  static LeafBuffer prepare(T& t, const StoredLeafInfo& stored) {
    if (stored.shape.size() != static_cast<std::size_t>(N))
      throw Error(ErrorKind::shape_mismatch, "stored shape " + to_string(stored.shape) + " is " +
                  std::to_string(stored.shape.size()) + "-D, but the target is an Eigen::Tensor of rank " + std::to_string(N));
    std::array<Index, static_cast<std::size_t>(N)> dims{};
    for (std::size_t i = 0; i < dims.size(); ++i) dims[i] = static_cast<Index>(stored.shape[i]);
    t.resize(dims);
    return {dtype_of<S>, order, t.data(), static_cast<std::uint64_t>(t.size()) * sizeof(S)};
  }
};

// Eigen::Map of a matrix or array: memory the program owns (an arena, a buffer of another
// library), saved as the matrix it maps is, and loaded in place into the shape it maps, which a
// Map cannot change. A Map of const data is saved, never loaded into. Only the default stride
// (contiguous memory) is a leaf.
template <class Mapped, class M>
struct eigen_map_leaf {
  static LeafView view(const Mapped& m) { return eigen_leaf<Mapped>::view(m); }

  static LeafBuffer prepare(Mapped& m, const StoredLeafInfo& stored) {
    static_assert(!std::is_const_v<M>, "cairn: an Eigen::Map of const data can be saved, but not loaded into");
    using L = eigen_leaf<Mapped>;
    const Shape mapped = L::view(m).shape;
    if (stored.shape != mapped)
      throw Error(ErrorKind::shape_mismatch, "stored shape " + to_string(stored.shape) + " does not fit the target, an Eigen::Map of shape " +
                  to_string(mapped) + " (a Map cannot be resized)");
    return {dtype_of<typename L::Scalar>, L::is_vector ? Order::C : L::order, const_cast<typename L::Scalar*>(m.data()),
            static_cast<std::uint64_t>(m.size()) * sizeof(typename L::Scalar)};
  }
};

}  // namespace detail

template <class S, int N, int Options, class Index>
struct leaf_traits<Eigen::Tensor<S, N, Options, Index>> : detail::eigen_tensor_leaf<S, N, Options, Index> {};
template <class M, int MapOptions>
struct leaf_traits<Eigen::Map<M, MapOptions, Eigen::Stride<0, 0>>>
    : detail::eigen_map_leaf<Eigen::Map<M, MapOptions, Eigen::Stride<0, 0>>, M> {};

// The Geometry module's rotations and poses, as robotics and simulation state holds them.
// Eigen/Core declares both classes, so these are instantiated only by a program that uses
// them, which has included Eigen/Geometry (or Eigen/Dense).
// A Quaternion is its four coefficients in Eigen's storage order, x, y, z, w: a 1-D array of 4
// (scipy's Rotation.as_quat order; w comes first in some other libraries).
template <class S, int Options>
struct leaf_traits<Eigen::Quaternion<S, Options>> {
  static_assert(has_dtype<S>, "cairn: an Eigen::Quaternion needs a scalar type with a dtype");
  static LeafView view(const Eigen::Quaternion<S, Options>& q) {
    return {dtype_of<S>, Shape{4}, Order::C, q.coeffs().data(), 4 * sizeof(S)};
  }
  static LeafBuffer prepare(Eigen::Quaternion<S, Options>& q, const StoredLeafInfo& stored) {
    require_shape(Shape{4}, stored.shape);
    return {dtype_of<S>, Order::C, q.coeffs().data(), 4 * sizeof(S)};
  }
};
// A Transform (Isometry3d, Affine2f, ...) is its matrix: (Dim+1) x (Dim+1), or Dim x (Dim+1)
// for AffineCompact, in the matrix's own memory order.
template <class S, int Dim, int Mode, int Options>
struct leaf_traits<Eigen::Transform<S, Dim, Mode, Options>> {
  using M = typename Eigen::Transform<S, Dim, Mode, Options>::MatrixType;
  static LeafView view(const Eigen::Transform<S, Dim, Mode, Options>& t) { return detail::eigen_leaf<M>::view(t.matrix()); }
  static LeafBuffer prepare(Eigen::Transform<S, Dim, Mode, Options>& t, const StoredLeafInfo& stored) {
    return detail::eigen_leaf<M>::prepare(t.matrix(), stored);
  }
};
// Fixed-size vectors and quaternions are packed elements (tree/traits.hpp): a
// std::vector<Eigen::Vector3d> of a million particles is one [n, 3] leaf.
namespace detail {
template <class S, int R, int C>
inline constexpr bool eigen_fixed_vector = has_dtype<S> && (R == 1 || C == 1) && R != Eigen::Dynamic &&
                                           C != Eigen::Dynamic && R * C > 0;
}  // namespace detail
template <class S, int R, int C, int O, int MR, int MC>
struct packed_element<Eigen::Matrix<S, R, C, O, MR, MC>, std::enable_if_t<detail::eigen_fixed_vector<S, R, C>>> {
  using scalar = S;
  static constexpr std::int64_t size = R * C;
};
template <class S, int R, int C, int O, int MR, int MC>
struct packed_element<Eigen::Array<S, R, C, O, MR, MC>, std::enable_if_t<detail::eigen_fixed_vector<S, R, C>>> {
  using scalar = S;
  static constexpr std::int64_t size = R * C;
};
template <class S, int Options>
struct packed_element<Eigen::Quaternion<S, Options>, std::enable_if_t<has_dtype<S>>> {
  using scalar = S;  // x, y, z, w, as the quaternion's own leaf
  static constexpr std::int64_t size = 4;
};

template <class S, int R, int C, int O, int MR, int MC>
struct leaf_traits<Eigen::Matrix<S, R, C, O, MR, MC>> : detail::eigen_leaf<Eigen::Matrix<S, R, C, O, MR, MC>> {};
template <class S, int R, int C, int O, int MR, int MC>
struct leaf_traits<Eigen::Array<S, R, C, O, MR, MC>> : detail::eigen_leaf<Eigen::Array<S, R, C, O, MR, MC>> {};

CAIRN_END_NAMESPACE
