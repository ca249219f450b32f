// SPDX-License-Identifier: Apache-2.0
// Eigen dense matrices and arrays as cereal-serializable types, so that CAIRN_TREE structs
// holding Eigen members serialize with any cereal archive: rows, cols, and the coefficients
// in the matrix's own storage order.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <cereal/cereal.hpp>

#include "cairn/leaves/eigen.hpp"

namespace cereal {
template <class Archive, class S, int R, int C, int O, int MR, int MC>
void save(Archive& ar, const Eigen::Matrix<S, R, C, O, MR, MC>& m) {
  ar(make_nvp("rows", static_cast<std::int64_t>(m.rows())), make_nvp("cols", static_cast<std::int64_t>(m.cols())),
     make_nvp("data", std::vector<S>(m.data(), m.data() + m.size())));
}
template <class Archive, class S, int R, int C, int O, int MR, int MC>
void load(Archive& ar, Eigen::Matrix<S, R, C, O, MR, MC>& m) {
  std::int64_t rows = 0, cols = 0;
  std::vector<S> data;
  ar(make_nvp("rows", rows), make_nvp("cols", cols), make_nvp("data", data));
  if (rows < 0 || cols < 0 || static_cast<std::uint64_t>(rows) * static_cast<std::uint64_t>(cols) != data.size() ||
      (R != Eigen::Dynamic && R != rows) || (C != Eigen::Dynamic && C != cols))
    throw ::cairn::Error(::cairn::ErrorKind::corrupt, "Eigen matrix of " + std::to_string(rows) + "x" +
                         std::to_string(cols) + " with " + std::to_string(data.size()) + " values");
  m.resize(rows, cols);
  std::copy(data.begin(), data.end(), m.data());
}
template <class Archive, class S, int R, int C, int O, int MR, int MC>
void save(Archive& ar, const Eigen::Array<S, R, C, O, MR, MC>& a) {
  save(ar, a.matrix().eval());
}
template <class Archive, class S, int R, int C, int O, int MR, int MC>
void load(Archive& ar, Eigen::Array<S, R, C, O, MR, MC>& a) {
  Eigen::Matrix<S, R, C, O, MR, MC> m;
  load(ar, m);
  a = m.array();
}
// An Eigen::Tensor: its dimensions, and the coefficients in its own storage order.
template <class Archive, class S, int N, int O, class I>
void save(Archive& ar, const Eigen::Tensor<S, N, O, I>& t) {
  std::vector<std::int64_t> dims;
  for (std::size_t i = 0; i < static_cast<std::size_t>(N); ++i) dims.push_back(static_cast<std::int64_t>(t.dimension(i)));
  ar(make_nvp("dims", dims), make_nvp("data", std::vector<S>(t.data(), t.data() + t.size())));
}
template <class Archive, class S, int N, int O, class I>
void load(Archive& ar, Eigen::Tensor<S, N, O, I>& t) {
  std::vector<std::int64_t> dims;
  std::vector<S> data;
  ar(make_nvp("dims", dims), make_nvp("data", data));
  std::array<I, static_cast<std::size_t>(N)> d{};
  bool ok = dims.size() == d.size(), empty = false;
  for (std::size_t i = 0; ok && i < d.size(); ++i) {
    ok = dims[i] >= 0;
    empty |= dims[i] == 0;
    d[i] = static_cast<I>(dims[i]);
  }
  // The number of values the dimensions make, without overflow (untrusted: from an archive).
  std::uint64_t n = empty ? 0 : 1;
  for (std::size_t i = 0; ok && !empty && i < d.size(); ++i) {
    ok = n <= data.size() / static_cast<std::uint64_t>(dims[i]);
    n *= static_cast<std::uint64_t>(dims[i]);
  }
  if (!ok || n != data.size())
    throw ::cairn::Error(::cairn::ErrorKind::corrupt, "Eigen tensor of rank " + std::to_string(N) + " with " +
                         std::to_string(dims.size()) + " dimensions and " + std::to_string(data.size()) + " values");
  t.resize(d);
  std::copy(data.begin(), data.end(), t.data());
}
}  // namespace cereal
