// SPDX-License-Identifier: Apache-2.0
// The element semantics of a cast, one value at a time, written once for the host and CUDA
// (CAIRN_HD). The rules (docs/casting.md):
// - float -> narrower float: round to nearest even, NaN stays NaN, overflow to +-inf
//   (float8_e4m3fn saturates to +-448);
// - float -> int truncates toward zero; NaN, inf and values outside the target's range are
//   an error by default, or clamp with OnOverflow::saturate (NaN becomes 0);
// - int -> int: out of range is an error by default, or clamps;
// - anything -> bool is "!= 0" (NaN is true); bool -> anything is 0 or 1.
// No conversion is undefined behaviour: the element functor always clamps, and the error
// mode checks the whole array first.
// The loops that run these over arrays are kernels/cast_loops.hpp; which loop a cast runs,
// kernels/cast_dispatch.hpp.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "cairn/dtype/dtype.hpp"
#include "cairn/dtype/float_types.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {


template <class T> inline constexpr bool is_narrow_float_v =
    std::is_same_v<T, float16> || std::is_same_v<T, bfloat16> ||
    std::is_same_v<T, float8_e4m3fn> || std::is_same_v<T, float8_e5m2>;
template <class T> inline constexpr bool is_any_float_v =
    std::is_floating_point_v<T> || is_narrow_float_v<T>;
template <class T> inline constexpr bool is_int_v = std::is_integral_v<T> && !std::is_same_v<T, bool>;

template <class T> struct narrow_format_of;
template <> struct narrow_format_of<float16> { using type = float16_format; };
template <> struct narrow_format_of<bfloat16> { using type = bfloat16_format; };
template <> struct narrow_format_of<float8_e4m3fn> { using type = float8_e4m3fn_format; };
template <> struct narrow_format_of<float8_e5m2> { using type = float8_e5m2_format; };

// Any float source as double (exact for all of them).
template <class From>
CAIRN_HD inline double float_as_double(From v) {
  if constexpr (std::is_same_v<From, bfloat16>) return static_cast<double>(bfloat16_bits_to_float(v.bits));  // the same, faster
  else if constexpr (is_narrow_float_v<From>) return static_cast<double>(narrow_format_of<From>::type::decode(v.bits));
  else return static_cast<double>(v);
}

// An integer as a double rounded to odd: exact below 2^53, otherwise the low bit records
// inexactness so that a second rounding to a narrower float is still correct.
template <class From>
CAIRN_HD inline double int_as_double_round_to_odd(From v) {
  const bool neg = std::is_signed_v<From> && v < 0;
  std::uint64_t u = neg ? (std::uint64_t{0} - static_cast<std::uint64_t>(v)) : static_cast<std::uint64_t>(v);
  if (u < (std::uint64_t{1} << 53)) return neg ? -static_cast<double>(u) : static_cast<double>(u);
  int k = 0;
  while ((u >> k) >= (std::uint64_t{1} << 53)) ++k;
  const std::uint64_t sticky = (u & ((std::uint64_t{1} << k) - 1)) != 0;
  double d = static_cast<double>((u >> k) | sticky);
  for (int i = 0; i < k; ++i) d *= 2.0;  // exact
  return neg ? -d : d;
}

// d as a float rounded to odd: exact when d is, otherwise d truncated toward zero with its last
// bit set (NaN stays NaN; beyond float's range, FLT_MAX with that sign). Rounding that once more
// to nearest even, to a format of at least two bits less precision (float16, bfloat16), gives
// what rounding d directly would: the last bit keeps "inexact", so no tie is made or lost.
// Written as selects over the hardware's float conversion, so that a loop of it vectorizes.
CAIRN_HD inline float double_to_float_round_to_odd(double d) {
  const float f = static_cast<float>(d);
  const double back = static_cast<double>(f);
  const std::uint32_t inexact = (back != d) & (d == d);
  const std::uint32_t away = ((back > d) & (d > 0)) | ((back < d) & (d < 0));  // rounded up in magnitude
  return bits_of<float>((bits_of<std::uint32_t>(f) - away) | inexact);
}

template <class To>
CAIRN_HD inline To double_to_float(double d) {
  if constexpr (std::is_same_v<To, bfloat16>) return To::from_bits(float_to_bfloat16_bits(double_to_float_round_to_odd(d)));
  else if constexpr (std::is_same_v<To, float16>) return To::from_bits(float_to_float16_bits(double_to_float_round_to_odd(d)));
  else if constexpr (is_narrow_float_v<To>) return To::from_bits(static_cast<decltype(To{}.bits)>(narrow_format_of<To>::type::encode(d)));
  else return static_cast<To>(d);  // float or double: round to nearest even, overflow to inf
}

// Integer range of To as exact doubles: [lo, hi). Constants: callers bind them to constexpr
// locals, so that the per-element range test compares against two immediates (computed by a
// loop at run time, they made every float -> int cast 30x slower).
template <class To> CAIRN_HD constexpr double int_lo() {
  if constexpr (std::is_signed_v<To>) return -static_cast<double>(std::uint64_t{1} << (sizeof(To) * 8 - 1));
  else return 0.0;
}
template <class To> CAIRN_HD constexpr double int_hi_excl() {
  constexpr unsigned bits = sizeof(To) * 8 - (std::is_signed_v<To> ? 1 : 0);  // 2^bits, exact
  return static_cast<double>(std::uint64_t{1} << (bits - 1)) * 2.0;
}

template <class To, class From>
CAIRN_HD inline bool int_fits(From v) {
  if constexpr (std::is_signed_v<From> == std::is_signed_v<To>) {
    if constexpr (sizeof(To) >= sizeof(From)) return true;
    else if constexpr (std::is_signed_v<From>)
      return v >= static_cast<From>(std::numeric_limits<To>::min()) && v <= static_cast<From>(std::numeric_limits<To>::max());
    else return v <= static_cast<From>(std::numeric_limits<To>::max());
  } else if constexpr (std::is_signed_v<From>) {  // signed -> unsigned
    return (v >= 0) & (static_cast<std::make_unsigned_t<From>>(v) <= std::numeric_limits<To>::max());
  } else {  // unsigned -> signed
    return v <= static_cast<std::make_unsigned_t<To>>(std::numeric_limits<To>::max());
  }
}

// True when converting v to To needs no clamping.
template <class To, class From>
struct cast_fits {
  CAIRN_HD bool operator()(const From& v) const {
    if constexpr (std::is_same_v<To, bool> || std::is_same_v<From, bool> || is_any_float_v<To>) {
      return true;
    } else if constexpr (is_any_float_v<From>) {
      // trunc(d) in [lo, hi), without trunc (a library call per element on x86-64's baseline,
      // which keeps the loop from vectorizing): trunc(d) >= lo exactly when d > lo - 1, and
      // trunc(d) < hi exactly when d < hi. lo - 1 is a double for every type but the 64-bit
      // ones, where no double lies between lo - 1 and lo. NaN fails both comparisons.
      const double d = float_as_double(v);
      constexpr double lo = int_lo<To>(), hi = int_hi_excl<To>();
      constexpr double below = lo - 1.0;
      if constexpr (below != lo) return static_cast<int>(d > below) & static_cast<int>(d < hi);
      else return static_cast<int>(d >= lo) & static_cast<int>(d < hi);
    } else {
      return int_fits<To>(v);
    }
  }
};
template <class To, class From>
struct cast_does_not_fit {
  CAIRN_HD bool operator()(const From& v) const { return !cast_fits<To, From>{}(v); }
};

// The element conversion. Always defined: out-of-range values clamp.
template <class To, class From>
struct cast_element {
  CAIRN_HD To operator()(const From& v) const {
    if constexpr (std::is_same_v<To, From>) {
      return v;
    } else if constexpr (std::is_same_v<From, float> && std::is_same_v<To, bfloat16>) {
      return bfloat16::from_bits(float_to_bfloat16_bits(v));
    } else if constexpr (std::is_same_v<From, bfloat16> && std::is_same_v<To, float>) {
      return bfloat16_bits_to_float(v.bits);
    } else if constexpr (std::is_same_v<From, float> && std::is_same_v<To, float16>) {
      return float16::from_bits(float_to_float16_bits(v));
    } else if constexpr (std::is_same_v<To, bool>) {
      if constexpr (is_any_float_v<From>) return float_as_double(v) != 0.0;
      else return v != 0;
    } else if constexpr (std::is_same_v<From, bool>) {
      if constexpr (is_narrow_float_v<To>) return double_to_float<To>(v ? 1.0 : 0.0);
      else return static_cast<To>(v ? 1 : 0);
    } else if constexpr (is_any_float_v<To>) {
      if constexpr (is_any_float_v<From>) return double_to_float<To>(float_as_double(v));
      else if constexpr (std::is_same_v<To, double> || std::is_same_v<To, float>) return static_cast<To>(v);
      else return double_to_float<To>(int_as_double_round_to_odd(v));
    } else if constexpr (is_any_float_v<From>) {
      const double d = float_as_double(v);
      if (!(d == d)) return To{0};
      constexpr double lo = int_lo<To>(), hi = int_hi_excl<To>();
      if (d < lo) return std::numeric_limits<To>::min();
      if (d >= hi) return std::numeric_limits<To>::max();
      return static_cast<To>(d);  // in range after truncation: defined
    } else {
      if (int_fits<To>(v)) return static_cast<To>(v);
      if constexpr (std::is_signed_v<From>) { if (v < 0) return std::numeric_limits<To>::min(); }
      return std::numeric_limits<To>::max();
    }
  }
};

template <class T>
std::string element_to_string(const T& v) {
  if constexpr (is_any_float_v<T>) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", float_as_double(v));
    return buf;
  } else if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else {
    return std::to_string(v);
  }
}

// Whether some value of From does not fit in To. Known at compile time, so the checking pass
// is only compiled (and run) for the pairs that need it.
template <class To, class From>
inline constexpr bool can_overflow_v = [] {
  if constexpr (std::is_same_v<To, bool> || std::is_same_v<From, bool> || is_any_float_v<To>) return false;
  else if constexpr (is_any_float_v<From>) return true;
  else if constexpr (std::is_signed_v<From> == std::is_signed_v<To>) return sizeof(To) < sizeof(From);
  else if constexpr (std::is_signed_v<From>) return true;  // negative values
  else return sizeof(To) <= sizeof(From);                  // unsigned into a wider signed type fits
}();

}  // namespace detail

// Cast one value (for tests and for scalar conversions).
template <class To, class From>
CAIRN_HD inline To cast_value(const From& v) { return detail::cast_element<To, From>{}(v); }

CAIRN_END_NAMESPACE
