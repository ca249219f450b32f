// SPDX-License-Identifier: Apache-2.0
// Element-type conversion kernels, written once with Thrust so they run on the host backends
// (CPP, OpenMP) and on CUDA. Rules (docs/casting.md):
// - float -> narrower float: round to nearest even, NaN stays NaN, overflow to +-inf
//   (float8_e4m3fn saturates to +-448);
// - float -> int truncates toward zero; NaN, inf and values outside the target's range are
//   an error by default, or clamp with OnOverflow::saturate (NaN becomes 0);
// - int -> int: out of range is an error by default, or clamps;
// - anything -> bool is "!= 0" (NaN is true); bool -> anything is 0 or 1.
// No conversion is undefined behaviour: the element functor always clamps, and the error
// mode checks the whole array first.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "cairn/core/tuning.hpp"
#include "cairn/device/memory.hpp"
#include "cairn/dtype/dtype.hpp"
#include "cairn/kernels/policy.hpp"

#include <thrust/find.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform.h>

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
      return (v >= static_cast<From>(std::numeric_limits<To>::min())) & (v <= static_cast<From>(std::numeric_limits<To>::max()));
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

// `memory` says where src and dst live (the policy must run there).
template <class To, class From, class Policy>
void cast_typed(Policy&& policy, const From* src, To* dst, std::size_t n, OnOverflow on_overflow,
                MemoryKind memory = MemoryKind::host) {
  if constexpr (std::is_same_v<To, From>) {
    copy_bytes(dst, memory, src, memory, n * sizeof(To));
  } else {
  if constexpr (can_overflow_v<To, From>) {
    if (on_overflow == OnOverflow::error) {
      const From* bad = thrust::find_if(policy, src, src + n, cast_does_not_fit<To, From>{});
      if (bad != src + n) {
        From value;
        copy_bytes(&value, MemoryKind::host, bad, memory, sizeof(From));
        throw Error(ErrorKind::value_out_of_range,
                  "element " + std::to_string(bad - src) + " (value " + element_to_string(value) +
                  ") does not fit in " + dtype_name(dtype_of<To>) +
                  " (pass OnOverflow::saturate to clamp instead)");
      }
    }
  }
  thrust::transform(policy, src, src + n, dst, cast_element<To, From>{});
  }
}

// Restrict-qualified parameters (GCC honours restrict there, not on local pointers), and a
// fixed trip count, so that these loops vectorize.
template <class To, class From>
void convert_block(const From* __restrict s, To* __restrict d, std::size_t m) {
  for (std::size_t i = 0; i < m; ++i) d[i] = cast_element<To, From>{}(s[i]);
}
template <class To, class From>
void convert_block_in_range(const From* __restrict s, To* __restrict d, std::size_t m) {
  if constexpr (std::is_integral_v<To> && !std::is_same_v<To, bool> &&
                (std::is_integral_v<From> || std::is_floating_point_v<From>)) {
    for (std::size_t i = 0; i < m; ++i) d[i] = static_cast<To>(s[i]);  // every element fits: defined, exact
  } else {
    convert_block<To, From>(s, d, m);
  }
}
template <class To, class From>
bool block_fits(const From* __restrict s, std::size_t m) {
  unsigned bad = 0;
  for (std::size_t i = 0; i < m; ++i) bad |= static_cast<unsigned>(!cast_fits<To, From>{}(s[i]));
  return bad == 0;
}

// float32 -> bfloat16 / float16 is compute-bound with SSE2's lanes (the x86-64 baseline):
// where the CPU has AVX2 (checked once at run time), the same loop compiled for AVX2 runs
// instead. Nothing else changes: the element function is the same.
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define CAIRN_CAST_AVX2 1
template <class To, class From>
__attribute__((target("avx2"))) void convert_full_block_avx2(const From* __restrict s, To* __restrict d) {
  for (std::size_t i = 0; i < cast_block_elements; ++i) d[i] = cast_element<To, From>{}(s[i]);  // fixed count: vectorizes at -O2
}
template <class To, class From>
__attribute__((target("avx2"))) bool full_block_fits_avx2(const From* __restrict s) {
  unsigned bad = 0;
  for (std::size_t i = 0; i < cast_block_elements; ++i) bad |= static_cast<unsigned>(!cast_fits<To, From>{}(s[i]));
  return bad == 0;
}
template <class To, class From>
__attribute__((target("avx2"))) void convert_full_block_in_range_avx2(const From* __restrict s, To* __restrict d) {
  for (std::size_t i = 0; i < cast_block_elements; ++i) d[i] = static_cast<To>(s[i]);  // every element fits
}
inline bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#endif

// float32 <-> float16 with the F16C instructions (every CPU with AVX2 has them): eight
// conversions an instruction, rounding to nearest even like cast_element; only NaN differs
// (F16C keeps a NaN's payload, cairn writes one quiet NaN of the same sign), and is fixed up
// in the same lanes. Vector types and two builtins, not <immintrin.h> (see io/crc32c.hpp);
// not under nvcc, whose front end does not know these builtins.
#if defined(CAIRN_CAST_AVX2) && !defined(__CUDACC__)
#define CAIRN_CAST_F16C 1
typedef float cast_f32x8 __attribute__((vector_size(32)));
typedef int cast_i32x8 __attribute__((vector_size(32)));
typedef short cast_i16x8 __attribute__((vector_size(16)));
__attribute__((target("avx2,f16c"))) inline void float_to_float16_block_f16c(const float* __restrict s,
                                                                             float16* __restrict d) {
  for (std::size_t i = 0; i < cast_block_elements; i += 8) {
    cast_f32x8 x;
    std::memcpy(&x, s + i, sizeof x);
    cast_i16x8 h = __builtin_ia32_vcvtps2ph256(x, 0);  // 0: round to nearest even
    const cast_i16x8 nan = __builtin_convertvector(x != x, cast_i16x8);
    h = (h & ~nan) | (nan & ((h & static_cast<short>(0x8000)) | static_cast<short>(0x7e00)));
    std::memcpy(reinterpret_cast<unsigned char*>(d) + 2 * i, &h, sizeof h);
  }
}
__attribute__((target("avx2,f16c"))) inline void float16_to_float_block_f16c(const float16* __restrict s,
                                                                             float* __restrict d) {
  for (std::size_t i = 0; i < cast_block_elements; i += 8) {
    cast_i16x8 h;
    std::memcpy(&h, reinterpret_cast<const unsigned char*>(s) + 2 * i, sizeof h);  // bytes: clang splits a struct copy
    const cast_f32x8 x = __builtin_ia32_vcvtph2ps256(h);  // exact
    cast_i32x8 b;
    std::memcpy(&b, &x, sizeof b);
    // NaN from the half's bits (an integer test: clang splits a float compare into scalars here).
    const cast_i32x8 nan = __builtin_convertvector((h & static_cast<short>(0x7fff)) > static_cast<short>(0x7c00), cast_i32x8);
    b = (b & ~nan) | (nan & ((b & static_cast<int>(0x80000000u)) | 0x7fc00000));
    std::memcpy(d + i, &b, sizeof b);
  }
}
// double -> float16: rounded to odd as a float first (exact where it matters, see
// double_to_float_round_to_odd), then the instruction.
__attribute__((target("avx2,f16c"))) inline void double_to_float16_block_f16c(const double* __restrict s,
                                                                              float16* __restrict d) {
  alignas(32) float odd[cast_block_elements];
  for (std::size_t i = 0; i < cast_block_elements; ++i) odd[i] = double_to_float_round_to_odd(s[i]);
  float_to_float16_block_f16c(odd, d);
}
inline bool cpu_has_f16c() {
  // CPUID leaf 1, ECX bit 29 (clang 14's __builtin_cpu_supports does not know "f16c").
  static const bool has = [] {
    unsigned a = 1, b = 0, c = 0, d = 0;
    __asm__("cpuid" : "+a"(a), "=b"(b), "=c"(c), "=d"(d));
    return cpu_has_avx2() && ((c >> 29) & 1u);
  }();
  return has;
}
template <class To, class From>
inline constexpr bool cast_uses_f16c = (std::is_same_v<From, float> && std::is_same_v<To, float16>) ||
                                       (std::is_same_v<From, float16> && std::is_same_v<To, float>) ||
                                       (std::is_same_v<From, double> && std::is_same_v<To, float16>);
#endif

template <class To, class From>
inline constexpr bool cast_uses_avx2 =
    (std::is_same_v<From, float> || std::is_same_v<From, double>) && (std::is_same_v<To, bfloat16> || std::is_same_v<To, float16>);
// Range-checked integer narrowing and float -> int: the check and the conversion, both with
// AVX2's lanes.
template <class To, class From>
inline constexpr bool checked_cast_uses_avx2 = (std::is_integral_v<From> || std::is_floating_point_v<From>) &&
                                               std::is_integral_v<To> && !std::is_same_v<From, bool> &&
                                               !std::is_same_v<To, bool> && can_overflow_v<To, From>;

template <class To, class From, bool Check>
struct cast_block {
  const From* src;
  To* dst;
  std::size_t n;
  unsigned char* bad;  // per block: 1 when an element does not fit (Check only)

  void operator()(std::size_t b) const {
    const std::size_t first = b * cast_block_elements;
    const std::size_t m = std::min(cast_block_elements, n - first);
    if constexpr (Check) {
#ifdef CAIRN_CAST_AVX2
      if constexpr (checked_cast_uses_avx2<To, From>) {
        if (m == cast_block_elements && cpu_has_avx2()) {
          if (!full_block_fits_avx2<To, From>(src + first)) { bad[b] = 1; return; }
          return convert_full_block_in_range_avx2<To, From>(src + first, dst + first);
        }
      }
#endif
      const bool fits = m == cast_block_elements ? block_fits<To, From>(src + first, cast_block_elements)
                                                 : block_fits<To, From>(src + first, m);
      if (!fits) { bad[b] = 1; return; }
      if (m == cast_block_elements) convert_block_in_range<To, From>(src + first, dst + first, cast_block_elements);
      else convert_block_in_range<To, From>(src + first, dst + first, m);
    } else {
#ifdef CAIRN_CAST_F16C
      if constexpr (cast_uses_f16c<To, From>) {
        if (m == cast_block_elements && cpu_has_f16c()) {
          if constexpr (std::is_same_v<From, float>) return float_to_float16_block_f16c(src + first, dst + first);
          else if constexpr (std::is_same_v<From, double>) return double_to_float16_block_f16c(src + first, dst + first);
          else return float16_to_float_block_f16c(src + first, dst + first);
        }
      }
#endif
#ifdef CAIRN_CAST_AVX2
      if constexpr (cast_uses_avx2<To, From>) {
        if (m == cast_block_elements && cpu_has_avx2()) return convert_full_block_avx2<To, From>(src + first, dst + first);
      }
#endif
      if (m == cast_block_elements) convert_block<To, From>(src + first, dst + first, cast_block_elements);
      else convert_block<To, From>(src + first, dst + first, m);
    }
  }
};

template <class To, class From>
void cast_typed_host(const From* src, To* dst, std::size_t n, OnOverflow on_overflow) {
  if constexpr (std::is_same_v<To, From>) {
    std::memcpy(dst, src, n * sizeof(To));
  } else {
    const std::size_t blocks = (n + cast_block_elements - 1) / cast_block_elements;
    auto run = [&](auto check, unsigned char* bad) {
      thrust::for_each(host_memory_policy(), thrust::counting_iterator<std::size_t>(0),
                       thrust::counting_iterator<std::size_t>(blocks),
                       cast_block<To, From, decltype(check)::value>{src, dst, n, bad});
    };
    if (can_overflow_v<To, From> && on_overflow == OnOverflow::error) {
      std::vector<unsigned char> bad(blocks, 0);
      run(std::true_type{}, bad.data());
      for (std::size_t b = 0; b < blocks; ++b) {
        if (!bad[b]) continue;
        const From* p = src + b * cast_block_elements;
        while (cast_fits<To, From>{}(*p)) ++p;
        throw Error(ErrorKind::value_out_of_range,
                    "element " + std::to_string(p - src) + " (value " + element_to_string(*p) + ") does not fit in " +
                    dtype_name(dtype_of<To>) + " (pass OnOverflow::saturate to clamp instead)");
      }
    } else {
      run(std::false_type{}, nullptr);
    }
  }
}


// ---- Which kernel a host cast runs (docs/compile-time.md: 70 instantiations, not 225).
// A few common pairs have a kernel of their own (cast_typed_host). Every other pair goes in
// two steps per block of 4096 elements: the source widens, exactly, to its wide type (int64
// for signed integers, uint64 for unsigned ones and bool, double for floats), and the wide
// values convert to the target with the range check of that pair. The result and the error
// are the same as a direct conversion's: every rule in the comment at the top holds for the
// wide value, since it equals the source value (float -> int truncates the same double; an
// integer -> narrow float rounds the same integer once), and a source already of its wide
// type (int64, uint64, float64) skips the first step.
template <class T> struct wide_of { using type = std::conditional_t<is_any_float_v<T>, double,
    std::conditional_t<std::is_signed_v<T> && !std::is_same_v<T, bool>, std::int64_t, std::uint64_t>>; };
template <class T> using wide_t = typename wide_of<T>::type;

using widen_block_fn = void (*)(const void* src, void* wide, std::size_t m);
using narrow_block_fn = bool (*)(const void* wide, void* dst, std::size_t m, bool check);
using first_bad_fn = std::size_t (*)(const void* wide, std::size_t m, std::string* value);

template <class From>
void widen_block(const void* src, void* wide, std::size_t m) {
  convert_block<wide_t<From>, From>(static_cast<const From*>(src), static_cast<wide_t<From>*>(wide), m);
}
// One block of at most cast_block_elements (the same block function as a pair's own kernel);
// false when `check` and an element does not fit (nothing is promised of dst then).
template <class To, class Wide>
bool narrow_block(const void* wide, void* dst, std::size_t m, bool check) {
  const Wide* w = static_cast<const Wide*>(wide);
  To* d = static_cast<To*>(dst);
  if constexpr (can_overflow_v<To, Wide>) {
    if (check) {
      unsigned char bad = 0;
      cast_block<To, Wide, true>{w, d, m, &bad}(0);
      return bad == 0;
    }
  }
  (void)check;
  cast_block<To, Wide, false>{w, d, m, nullptr}(0);
  return true;
}
template <class To, class Wide>
std::size_t first_bad(const void* wide, std::size_t m, std::string* value) {
  const Wide* w = static_cast<const Wide*>(wide);
  std::size_t i = 0;
  while (i < m && cast_fits<To, Wide>{}(w[i])) ++i;
  if (i < m) *value = element_to_string(w[i]);
  return i;
}

struct general_cast_block {
  const unsigned char* src;
  unsigned char* dst;
  std::size_t n, from_size, to_size;
  widen_block_fn widen;  // null when the source is of its wide type
  narrow_block_fn narrow;
  bool check;
  unsigned char* bad;

  void operator()(std::size_t b) const {
    const std::size_t first = b * cast_block_elements;
    const std::size_t m = std::min(cast_block_elements, n - first);
    const void* w = src + first * from_size;
    alignas(64) unsigned char wide[cast_block_elements * 8];
    if (widen) {
      widen(w, wide, m);
      w = wide;
    }
    if (!narrow(w, dst + first * to_size, m, check)) bad[b] = 1;
  }
};

// The pairs with a kernel of their own: the casts of mixed-precision training and inference
// (float32 <-> bfloat16 / float16, float32 -> float64) and integer narrowing from int32 and
// the unsigned types. Returns false for any other pair.
inline bool cast_common_pair(DType from, const void* src, DType to, void* dst, std::size_t n, OnOverflow on_overflow) {
  auto run = [&](auto* f, auto* t) {
    using From = std::remove_pointer_t<decltype(f)>;
    using To = std::remove_pointer_t<decltype(t)>;
    cast_typed_host<To, From>(static_cast<const From*>(src), static_cast<To*>(dst), n, on_overflow);
    return true;
  };
  auto pair = [](DType a, DType b) { return static_cast<unsigned>(a) * 16u + static_cast<unsigned>(b); };
  switch (pair(from, to)) {
    case pair(DType::float32, DType::bfloat16): return run((float*)nullptr, (bfloat16*)nullptr);
    case pair(DType::float32, DType::float16): return run((float*)nullptr, (float16*)nullptr);
    case pair(DType::bfloat16, DType::float32): return run((bfloat16*)nullptr, (float*)nullptr);
    case pair(DType::float16, DType::float32): return run((float16*)nullptr, (float*)nullptr);
    case pair(DType::float32, DType::float64): return run((float*)nullptr, (double*)nullptr);
    case pair(DType::float32, DType::int32): return run((float*)nullptr, (std::int32_t*)nullptr);
    case pair(DType::int32, DType::float32): return run((std::int32_t*)nullptr, (float*)nullptr);
    case pair(DType::int32, DType::int16): return run((std::int32_t*)nullptr, (std::int16_t*)nullptr);
    case pair(DType::int32, DType::int8): return run((std::int32_t*)nullptr, (std::int8_t*)nullptr);
    case pair(DType::int16, DType::int8): return run((std::int16_t*)nullptr, (std::int8_t*)nullptr);
    case pair(DType::uint32, DType::uint16): return run((std::uint32_t*)nullptr, (std::uint16_t*)nullptr);
    case pair(DType::uint32, DType::uint8): return run((std::uint32_t*)nullptr, (std::uint8_t*)nullptr);
    case pair(DType::uint16, DType::uint8): return run((std::uint16_t*)nullptr, (std::uint8_t*)nullptr);
    default: return false;
  }
}

// Every other pair, in the two steps above.
inline void cast_general(DType from, const void* src, DType to, void* dst, std::size_t n, OnOverflow on_overflow) {
  widen_block_fn widen = nullptr;
  DType wide = DType::int64;
  visit_dtype(from, [&](auto* f) {
    using From = std::remove_pointer_t<decltype(f)>;
    if constexpr (!std::is_same_v<From, wide_t<From>>) widen = &widen_block<From>;
    wide = dtype_of<wide_t<From>>;
  });
  narrow_block_fn narrow = nullptr;
  first_bad_fn find_bad = nullptr;
  bool may_overflow = false;
  auto pick = [&](auto* w) {
    using Wide = std::remove_pointer_t<decltype(w)>;
    visit_dtype(to, [&](auto* t) {
      using To = std::remove_pointer_t<decltype(t)>;
      narrow = &narrow_block<To, Wide>;
      find_bad = &first_bad<To, Wide>;
      may_overflow = can_overflow_v<To, Wide>;
    });
  };
  if (wide == DType::int64) pick(static_cast<std::int64_t*>(nullptr));
  else if (wide == DType::uint64) pick(static_cast<std::uint64_t*>(nullptr));
  else pick(static_cast<double*>(nullptr));
  // Checked wherever the wide pair can overflow: the check is per value, so a pair whose
  // values always fit (int8 -> int16) passes it, at the cost of the check.
  const bool check = may_overflow && on_overflow == OnOverflow::error;
  const std::size_t blocks = (n + cast_block_elements - 1) / cast_block_elements;
  std::vector<unsigned char> bad(check ? blocks : 0, 0);
  thrust::for_each(host_memory_policy(), thrust::counting_iterator<std::size_t>(0),
                   thrust::counting_iterator<std::size_t>(blocks),
                   general_cast_block{static_cast<const unsigned char*>(src), static_cast<unsigned char*>(dst), n,
                                      dtype_size(from), dtype_size(to), widen, narrow, check, bad.data()});
  for (std::size_t b = 0; b < bad.size(); ++b) {
    if (!bad[b]) continue;
    const std::size_t first = b * cast_block_elements;
    const std::size_t m = std::min(cast_block_elements, n - first);
    const void* w = static_cast<const unsigned char*>(src) + first * dtype_size(from);
    std::vector<unsigned char> buffer(widen ? m * 8 : 0);
    if (widen) {
      widen(w, buffer.data(), m);
      w = buffer.data();
    }
    std::string value;
    const std::size_t i = find_bad(w, m, &value);
    throw Error(ErrorKind::value_out_of_range, "element " + std::to_string(first + i) + " (value " + value +
                ") does not fit in " + dtype_name(to) + " (pass OnOverflow::saturate to clamp instead)");
  }
}

}  // namespace detail

// Declared for cast_device (its default argument and documentation are in dtype/cast_host.hpp,
// which this header does not include: that header's definition needs this one).
CAIRN_API void cast_host(DType from, const void* src, DType to, void* dst, std::size_t n, OnOverflow on_overflow);

namespace detail {
// The same conversion on memory of Thrust's device system (a GPU under nvcc), run there.
// Without CUDA that memory is host memory and the host instantiations serve (no second set
// of 225 kernels to compile).
inline void cast_device(DType from, const void* src, DType to, void* dst, std::size_t n, OnOverflow on_overflow) {
#if !CAIRN_CUDA
  cast_host(from, src, to, dst, n, on_overflow);
#else
  if (from == DType::string || to == DType::string)
    throw Error(ErrorKind::dtype_mismatch, std::string("cannot cast between ") + dtype_name(from) + " and " +
                dtype_name(to));
  visit_dtype(from, [&](auto* f) {
    using From = std::remove_pointer_t<decltype(f)>;
    visit_dtype(to, [&](auto* t) {
      using To = std::remove_pointer_t<decltype(t)>;
      cast_typed<To, From>(thrust::device, static_cast<const From*>(src), static_cast<To*>(dst), n, on_overflow,
                           MemoryKind::device);
    });
  });
#endif
}
}  // namespace detail

// Cast one value (for tests and for scalar conversions).
template <class To, class From>
CAIRN_HD inline To cast_value(const From& v) { return detail::cast_element<To, From>{}(v); }

CAIRN_END_NAMESPACE
