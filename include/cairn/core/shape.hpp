// Array shapes and the overflow-checked arithmetic on them. Shapes come from untrusted
// checkpoint metadata, so element and byte counts are computed with explicit overflow checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cairn/core/error.hpp"

CAIRN_BEGIN_NAMESPACE

using Shape = std::vector<std::int64_t>;

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
