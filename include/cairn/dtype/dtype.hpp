// SPDX-License-Identifier: Apache-2.0
// Element types of stored arrays, named as numpy and ml_dtypes spell them, and the map from
// C++ element types to them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "cairn/core/error.hpp"
#include "cairn/dtype/float_types.hpp"

CAIRN_BEGIN_NAMESPACE

// What an integer cast does with a value the target type cannot hold: fail (naming the key),
// or clamp to the nearest representable value (NaN becomes 0).
enum class OnOverflow { error, saturate };

enum class DType : std::uint8_t {
  bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
  float16, bfloat16, float32, float64, float8_e4m3fn, float8_e5m2,
  string,  // UTF-8 bytes of a std::string leaf; never cast to or from numbers
};

inline constexpr DType all_numeric_dtypes[] = {
    DType::bool_,   DType::int8,     DType::int16,   DType::int32,         DType::int64,
    DType::uint8,   DType::uint16,   DType::uint32,  DType::uint64,        DType::float16,
    DType::bfloat16, DType::float32, DType::float64, DType::float8_e4m3fn, DType::float8_e5m2};

inline const char* dtype_name(DType d) {
  switch (d) {
    case DType::bool_: return "bool";
    case DType::int8: return "int8";
    case DType::int16: return "int16";
    case DType::int32: return "int32";
    case DType::int64: return "int64";
    case DType::uint8: return "uint8";
    case DType::uint16: return "uint16";
    case DType::uint32: return "uint32";
    case DType::uint64: return "uint64";
    case DType::float16: return "float16";
    case DType::bfloat16: return "bfloat16";
    case DType::float32: return "float32";
    case DType::float64: return "float64";
    case DType::float8_e4m3fn: return "float8_e4m3fn";
    case DType::float8_e5m2: return "float8_e5m2";
    case DType::string: return "string";
  }
  return "?";
}

inline bool parse_dtype(std::string_view name, DType& out) {
  for (int i = 0; i <= static_cast<int>(DType::string); ++i) {
    if (name == dtype_name(static_cast<DType>(i))) { out = static_cast<DType>(i); return true; }
  }
  return false;
}

inline DType dtype_from_name(std::string_view name) {
  DType d;
  if (!parse_dtype(name, d))
    throw Error(ErrorKind::invalid_argument, "unknown dtype '" + std::string(name) +
                "' (expected a numpy name such as float32, bfloat16, int64, float8_e4m3fn)");
  return d;
}

// Bytes per element; strings are stored as bytes.
inline std::size_t dtype_size(DType d) {
  switch (d) {
    case DType::bool_: case DType::int8: case DType::uint8: case DType::float8_e4m3fn:
    case DType::float8_e5m2: case DType::string: return 1;
    case DType::int16: case DType::uint16: case DType::float16: case DType::bfloat16: return 2;
    case DType::int32: case DType::uint32: case DType::float32: return 4;
    case DType::int64: case DType::uint64: case DType::float64: return 8;
  }
  return 0;
}

inline bool is_float_dtype(DType d) {
  return d == DType::float16 || d == DType::bfloat16 || d == DType::float32 ||
         d == DType::float64 || d == DType::float8_e4m3fn || d == DType::float8_e5m2;
}

// Whether every value of `from` is exactly a value of `to` (a widening cast: int8 -> int32,
// uint16 -> float32, float16 -> float32, bfloat16 -> float64, bool -> any number). Any other
// cast between numbers can lose information: float -> int, narrower floats, narrower or
// sign-changing integers, int32 -> float32. Loads do those only where the caller allows.
inline bool cast_is_exact(DType from, DType to) {
  if (from == to) return true;
  if (from == DType::string || to == DType::string) return false;
  if (from == DType::bool_) return true;
  if (to == DType::bool_) return false;
  // Significand digits (with the implicit bit), the exponent just above the largest finite
  // value, and the exponent of the smallest subnormal, as in std::numeric_limits.
  struct Float { int digits, max_exp, min_subnormal_exp; };
  auto float_of = [](DType d) -> Float {
    switch (d) {
      case DType::float16: return {11, 16, -24};
      case DType::bfloat16: return {8, 128, -133};
      case DType::float32: return {24, 128, -149};
      case DType::float64: return {53, 1024, -1074};
      case DType::float8_e4m3fn: return {4, 9, -9};
      default: return {3, 16, -16};  // float8_e5m2
    }
  };
  const bool from_signed = from == DType::int8 || from == DType::int16 || from == DType::int32 || from == DType::int64;
  const bool to_signed = to == DType::int8 || to == DType::int16 || to == DType::int32 || to == DType::int64;
  if (is_float_dtype(from)) {
    if (!is_float_dtype(to)) return false;
    const Float f = float_of(from), t = float_of(to);
    return t.digits >= f.digits && t.max_exp >= f.max_exp && t.min_subnormal_exp <= f.min_subnormal_exp;
  }
  const int magnitude_bits = static_cast<int>(dtype_size(from)) * 8 - (from_signed ? 1 : 0);
  if (is_float_dtype(to)) return magnitude_bits <= float_of(to).digits;
  if (from_signed && !to_signed) return false;
  return static_cast<int>(dtype_size(to)) * 8 - (to_signed ? 1 : 0) >= magnitude_bits;
}

// dtype_of<T>: the DType of a C++ element type; `has_dtype<T>` is false for other types.
namespace detail {
template <class T, class = void>
struct dtype_of_impl { static constexpr bool known = false; };
template <> struct dtype_of_impl<bool> { static constexpr bool known = true; static constexpr DType value = DType::bool_; };
template <class T>
struct dtype_of_impl<T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool> &&
                                         !std::is_same_v<T, char>>> {
  static constexpr bool known = true;
  static constexpr DType value =
      std::is_signed_v<T>
          ? (sizeof(T) == 1 ? DType::int8 : sizeof(T) == 2 ? DType::int16 : sizeof(T) == 4 ? DType::int32 : DType::int64)
          : (sizeof(T) == 1 ? DType::uint8 : sizeof(T) == 2 ? DType::uint16 : sizeof(T) == 4 ? DType::uint32 : DType::uint64);
};
template <> struct dtype_of_impl<float> { static constexpr bool known = true; static constexpr DType value = DType::float32; };
template <> struct dtype_of_impl<double> { static constexpr bool known = true; static constexpr DType value = DType::float64; };
template <> struct dtype_of_impl<float16> { static constexpr bool known = true; static constexpr DType value = DType::float16; };
template <> struct dtype_of_impl<bfloat16> { static constexpr bool known = true; static constexpr DType value = DType::bfloat16; };
template <> struct dtype_of_impl<float8_e4m3fn> { static constexpr bool known = true; static constexpr DType value = DType::float8_e4m3fn; };
template <> struct dtype_of_impl<float8_e5m2> { static constexpr bool known = true; static constexpr DType value = DType::float8_e5m2; };
// An enumeration with a fixed underlying type (every enum class, and `enum E : T`) is stored as
// that integer type (a training phase, an optimizer's mode), so it is a leaf like that
// integer: scalars, vectors, arrays. Only those: every value of the integer is then a valid
// value of the enum, whatever a file holds. An unscoped enum without one has a narrower range
// of valid values, and loading an untrusted value out of it would be undefined behaviour.
// (`E{integer}` compiles exactly when E's underlying type is fixed.)
template <class T>
struct dtype_of_impl<T, std::enable_if_t<std::is_enum_v<T> && requires { T{std::underlying_type_t<T>{}}; }>>
    : dtype_of_impl<std::underlying_type_t<T>> {};
}  // namespace detail

template <class T>
inline constexpr bool has_dtype = detail::dtype_of_impl<std::remove_cv_t<T>>::known;

template <class T>
inline constexpr DType dtype_of = detail::dtype_of_impl<std::remove_cv_t<T>>::value;

// The C++ type stored for a DType, for dispatching runtime dtypes to templates.
template <class F>
decltype(auto) visit_dtype(DType d, F&& f) {
  switch (d) {
    case DType::bool_: return f(static_cast<bool*>(nullptr));
    case DType::int8: return f(static_cast<std::int8_t*>(nullptr));
    case DType::int16: return f(static_cast<std::int16_t*>(nullptr));
    case DType::int32: return f(static_cast<std::int32_t*>(nullptr));
    case DType::int64: return f(static_cast<std::int64_t*>(nullptr));
    case DType::uint8: return f(static_cast<std::uint8_t*>(nullptr));
    case DType::uint16: return f(static_cast<std::uint16_t*>(nullptr));
    case DType::uint32: return f(static_cast<std::uint32_t*>(nullptr));
    case DType::uint64: return f(static_cast<std::uint64_t*>(nullptr));
    case DType::float16: return f(static_cast<float16*>(nullptr));
    case DType::bfloat16: return f(static_cast<bfloat16*>(nullptr));
    case DType::float32: return f(static_cast<float*>(nullptr));
    case DType::float64: return f(static_cast<double*>(nullptr));
    case DType::float8_e4m3fn: return f(static_cast<float8_e4m3fn*>(nullptr));
    case DType::float8_e5m2: return f(static_cast<float8_e5m2*>(nullptr));
    case DType::string: break;
  }
  throw Error(ErrorKind::dtype_mismatch, std::string("dtype ") + dtype_name(d) + " has no numeric element type");
}

CAIRN_END_NAMESPACE
