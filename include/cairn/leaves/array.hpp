// SPDX-License-Identifier: Apache-2.0
// cairn::Array<T>: a small owning N-d array (row-major) for code that has no tensor type of
// its own. It is a tree leaf, and cereal-serializable.
#pragma once

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <vector>

#include <cereal/cereal.hpp>
#include <cereal/types/vector.hpp>

#include "cairn/tree/traits.hpp"

CAIRN_BEGIN_NAMESPACE

template <class T>
class Array {
  static_assert(has_dtype<T>, "cairn::Array<T> needs an element type with a dtype (bool, integers, enums, "
                              "float, double, cairn::float16, cairn::bfloat16, cairn::float8_*)");

 public:
  Array() = default;
  explicit Array(Shape shape, T fill = T{}) { resize(std::move(shape)); std::fill_n(data_.get(), size_, fill); }
  Array(Shape shape, std::initializer_list<T> values) : Array(std::move(shape)) {
    if (values.size() != size_)
      throw Error(ErrorKind::invalid_argument, "cairn::Array: " + std::to_string(values.size()) +
                  " values for shape " + cairn::to_string(shape_));
    std::copy(values.begin(), values.end(), data_.get());
  }
  Array(const Array& o) : Array(o.shape_) { std::copy_n(o.data_.get(), size_, data_.get()); }
  Array(Array&&) noexcept = default;
  Array& operator=(const Array& o) { if (this != &o) { Array c(o); *this = std::move(c); } return *this; }
  Array& operator=(Array&&) noexcept = default;

  const Shape& shape() const { return shape_; }
  std::size_t rank() const { return shape_.size(); }
  std::size_t size() const { return size_; }
  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  T* begin() { return data(); }
  T* end() { return data() + size_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size_; }
  T& operator[](std::size_t i) { return data_[i]; }
  const T& operator[](std::size_t i) const { return data_[i]; }

  // Element at an N-d index, row-major.
  template <class... I> T& operator()(I... idx) { return data_[offset({static_cast<std::int64_t>(idx)...})]; }
  template <class... I> const T& operator()(I... idx) const { return data_[offset({static_cast<std::int64_t>(idx)...})]; }

  // New shape; contents are reset to T{}.
  void resize(Shape shape) {
    const std::uint64_t n = element_count(shape);
    shape_ = std::move(shape);
    if (n != size_ || !data_) data_ = std::make_unique<T[]>(static_cast<std::size_t>(n));
    else std::fill_n(data_.get(), n, T{});
    size_ = static_cast<std::size_t>(n);
  }
  // New shape; contents unspecified until written. For code that writes every element next,
  // as a load does: no zero fill, whose memset cost a load into new arrays a third of its time.
  void resize_for_overwrite(Shape shape) {
    const std::uint64_t n = element_count(shape);
    shape_ = std::move(shape);
    if (n != size_ || !data_) data_ = std::make_unique_for_overwrite<T[]>(static_cast<std::size_t>(n));
    size_ = static_cast<std::size_t>(n);
  }

  friend bool operator==(const Array& a, const Array& b) {
    return a.shape_ == b.shape_ && std::memcmp(a.data(), b.data(), a.size_ * sizeof(T)) == 0;
  }

  template <class Archive>
  void save(Archive& ar) const {
    ar(cereal::make_nvp("shape", shape_), cereal::make_nvp("data", std::vector<T>(begin(), end())));
  }
  template <class Archive>
  void load(Archive& ar) {
    Shape s;
    std::vector<T> values;
    ar(cereal::make_nvp("shape", s), cereal::make_nvp("data", values));
    Array a(s);
    if (values.size() != a.size())
      throw Error(ErrorKind::corrupt, "cairn::Array: " + std::to_string(values.size()) + " values for shape " +
                  cairn::to_string(s));
    std::copy(values.begin(), values.end(), a.data());
    *this = std::move(a);
  }

 private:
  std::size_t offset(std::initializer_list<std::int64_t> idx) const {
    std::size_t off = 0, k = 0;
    for (std::int64_t i : idx) off = off * static_cast<std::size_t>(shape_[k++]) + static_cast<std::size_t>(i);
    return off;
  }

  Shape shape_;
  std::unique_ptr<T[]> data_ = std::make_unique<T[]>(1);
  std::size_t size_ = 1;  // a default Array is 0-d with one element, like numpy
};

template <class T>
struct leaf_traits<Array<T>> {
  static LeafView view(const Array<T>& a) {
    return {dtype_of<T>, a.shape(), Order::C, a.data(), a.size() * sizeof(T)};
  }
  static LeafBuffer prepare(Array<T>& a, const StoredLeafInfo& stored) {
    if (a.shape() != stored.shape) a.resize_for_overwrite(stored.shape);  // the load writes every element
    return {dtype_of<T>, Order::C, a.data(), a.size() * sizeof(T)};
  }
};

// cereal support for the narrow float types: their bit pattern.
template <class Archive> void serialize(Archive& ar, float16& v) { ar(v.bits); }
template <class Archive> void serialize(Archive& ar, bfloat16& v) { ar(v.bits); }
template <class Archive> void serialize(Archive& ar, float8_e4m3fn& v) { ar(v.bits); }
template <class Archive> void serialize(Archive& ar, float8_e5m2& v) { ar(v.bits); }

CAIRN_END_NAMESPACE

// cereal support for cairn::Shape: written as the std::vector<std::int64_t> it was before it
// kept small ranks inline, so archives written then and now read the same. In namespace
// cereal, not cairn, where cairn::save(path, value) would take a call meant for the archive.
namespace cereal {
template <class Archive>
void save(Archive& ar, const ::cairn::Shape& s) {
  save(ar, std::vector<std::int64_t>(s.begin(), s.end()));
}
template <class Archive>
void load(Archive& ar, ::cairn::Shape& s) {
  std::vector<std::int64_t> v;
  load(ar, v);
  s.assign(v.begin(), v.end());
}
}  // namespace cereal
