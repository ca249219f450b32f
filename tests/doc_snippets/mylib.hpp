// SPDX-License-Identifier: Apache-2.0
// The user types docs/extending.md adds to cairn: a tensor class and a list container.
#pragma once
#include <cairn/cairn.hpp>

namespace mylib {
class Tensor {
 public:
  const cairn::Shape& shape() const { return shape_; }
  float* data() { return values_.data(); }
  const float* data() const { return values_.data(); }
  std::size_t numel() const { return values_.size(); }
  void resize(const cairn::Shape& s) {
    shape_ = s;
    values_.resize(static_cast<std::size_t>(cairn::element_count(s)));
  }

 private:
  cairn::Shape shape_;
  std::vector<float> values_;
};
class List {
 public:
  auto begin() { return items_.begin(); }
  auto end() { return items_.end(); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }
  void resize(std::size_t n) { items_.resize(n); }

 private:
  std::vector<Tensor> items_;
};
}  // namespace mylib
