// SPDX-License-Identifier: Apache-2.0
// Array shapes and the overflow-checked arithmetic on them. Shapes come from untrusted
// checkpoint metadata, so element and byte counts are computed with explicit overflow checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <string>
#include <vector>

#include "cairn/core/error.hpp"
#include "cairn/core/inline_vector.hpp"

CAIRN_BEGIN_NAMESPACE

// An array's extent per dimension: a vector of int64 that keeps up to four dimensions in
// itself and only larger ranks on the heap (PyTorch's tensor sizes are kept the same way). A load
// of 100,000 small leaves holds three shapes a leaf in its metadata records; as std::vectors
// they were three allocations a leaf, more than half of all a load made. It has std::vector's
// interface for what shapes need (core/inline_vector.hpp), converts to and from
// std::vector<std::int64_t> implicitly, and compares with one.
class Shape : public InlineVector<std::int64_t, 4> {
  using Base = InlineVector<std::int64_t, 4>;

 public:
  // Ranks up to this many live inside the Shape.
  static constexpr size_type inline_rank = inline_capacity;

  Shape() noexcept {}
  explicit Shape(size_type n, value_type v = 0) : Base(n, v) {}
  Shape(std::initializer_list<value_type> values) : Base(values) {}
  template <std::input_iterator It>
  Shape(It first, It last) : Base(first, last) {}
  Shape(const std::vector<value_type>& v) : Base(v) {}
  Shape& operator=(std::initializer_list<value_type> values) {
    assign(values.begin(), values.end());
    return *this;
  }
  void resize(size_type n, value_type v = 0) { Base::resize(n, v); }
};

// "[2, 3]".
CAIRN_API std::string to_string(const Shape& shape);

// Multiply with overflow detection; false when a*b does not fit in uint64.
inline bool checked_mul(std::uint64_t a, std::uint64_t b, std::uint64_t& out) {
  return !__builtin_mul_overflow(a, b, &out);
}
inline bool checked_add(std::uint64_t a, std::uint64_t b, std::uint64_t& out) {
  return !__builtin_add_overflow(a, b, &out);
}

// Number of elements, or a corrupt-input error when a dimension is negative or the product
// overflows. A 0-d shape has one element.
inline std::uint64_t element_count(const Shape& shape) {
  std::uint64_t n = 1;
  for (std::int64_t d : shape) {
    if (d < 0) throw Error(ErrorKind::corrupt, "negative dimension in shape " + to_string(shape));
    if (!checked_mul(n, static_cast<std::uint64_t>(d), n))
      throw Error(ErrorKind::corrupt, "element count of shape " + to_string(shape) + " overflows");
  }
  return n;
}

inline std::uint64_t byte_count(const Shape& shape, std::size_t item_size) {
  std::uint64_t bytes = 0;
  if (!checked_mul(element_count(shape), item_size, bytes))
    throw Error(ErrorKind::corrupt, "byte size of shape " + to_string(shape) + " overflows");
  return bytes;
}

// byte_count without throwing: false when a dimension is negative or the count overflows.
inline bool try_byte_count(const Shape& shape, std::size_t item_size, std::uint64_t& out) {
  std::uint64_t n = item_size;
  for (std::int64_t d : shape)
    if (d < 0 || !checked_mul(n, static_cast<std::uint64_t>(d), n)) return false;
  out = n;
  return true;
}

// Throws shape_mismatch unless two shapes are equal; for fixed-size targets.
CAIRN_API void require_shape(const Shape& expected, const Shape& stored);

CAIRN_END_NAMESPACE

#if CAIRN_DEFINES_RUNTIME
#include "cairn/core/shape_impl.hpp"
#endif
