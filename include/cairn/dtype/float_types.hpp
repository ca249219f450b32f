// SPDX-License-Identifier: Apache-2.0
// cairn's own 16-bit and 8-bit float types (float16, bfloat16, float8_e4m3fn, float8_e5m2),
// used when CUDA's are not there. Each is its bit pattern; conversions round to nearest even,
// keep NaN as NaN and send overflow to infinity (float8_e4m3fn, which has no infinity,
// saturates to +-448: the "satfinite" rule of NVIDIA's converters). Usable in device code.
#pragma once

#include <cstdint>
#include <cstring>

#include "cairn/core/config.hpp"

CAIRN_BEGIN_NAMESPACE

namespace detail {

template <class To, class From>
CAIRN_HD inline To bits_of(const From& from) {
  static_assert(sizeof(To) == sizeof(From));
  To to;
  std::memcpy(&to, &from, sizeof(To));
  return to;
}

// A narrow binary float format: EB exponent bits, MB mantissa bits. `ieee` formats reserve
// the top exponent for inf/NaN; the other kind (e4m3fn) has one NaN pattern per sign and
// no infinity.
template <int EB, int MB, bool ieee>
struct narrow_float_format {
  static constexpr std::uint32_t exp_all = (1u << EB) - 1;
  static constexpr std::uint32_t mant_mask = (1u << MB) - 1;
  static constexpr int bias = (1 << (EB - 1)) - 1;
  static constexpr std::uint32_t sign_bit = 1u << (EB + MB);
  static constexpr std::uint32_t inf_bits = exp_all << MB;
  static constexpr std::uint32_t nan_bits =
      ieee ? ((exp_all << MB) | (1u << (MB - 1))) : ((exp_all << MB) | mant_mask);
  static constexpr std::uint32_t max_finite =
      ieee ? (((exp_all - 1) << MB) | mant_mask) : ((exp_all << MB) | (mant_mask - 1));

  // Round a double to this format. A double is exact for every narrower source (float,
  // float16, ...), so converting through it rounds once.
  CAIRN_HD static std::uint32_t encode(double x) {
    const std::uint64_t b = bits_of<std::uint64_t>(x);
    const std::uint32_t sign = static_cast<std::uint32_t>(b >> 63) ? sign_bit : 0u;
    const int exp = static_cast<int>((b >> 52) & 0x7ff);
    const std::uint64_t mant = b & ((std::uint64_t{1} << 52) - 1);
    if (exp == 0x7ff) {
      if (mant) return sign | nan_bits;
      return sign | (ieee ? inf_bits : max_finite);
    }
    if (exp == 0) return sign;  // zero, or a double subnormal: below every target's range
    int te = exp - 1023 + bias;  // biased exponent in the target
    const std::uint64_t sig = (std::uint64_t{1} << 52) | mant;
    int shift = 52 - MB;
    if (te < 1) shift += 1 - te;  // target subnormal: fewer significant bits
    if (shift >= 64) return sign;
    std::uint64_t keep = sig >> shift;
    const std::uint64_t rem = sig & ((std::uint64_t{1} << shift) - 1);
    const std::uint64_t half = std::uint64_t{1} << (shift - 1);
    if (rem > half || (rem == half && (keep & 1))) ++keep;
    std::uint32_t bits;
    if (te < 1) {
      bits = static_cast<std::uint32_t>(keep);  // rounding up may reach the smallest normal
    } else {
      if (keep >> (MB + 1)) { keep >>= 1; ++te; }
      if (te > static_cast<int>(exp_all)) return sign | (ieee ? inf_bits : max_finite);
      bits = (static_cast<std::uint32_t>(te) << MB) | (static_cast<std::uint32_t>(keep) & mant_mask);
    }
    if (ieee && bits >= inf_bits) return sign | inf_bits;
    if (!ieee && bits > max_finite) return sign | max_finite;
    return sign | bits;
  }

  // Every value of these formats is exact in float.
  CAIRN_HD static float decode(std::uint32_t bits) {
    const std::uint32_t sign = (bits & sign_bit) ? 0x80000000u : 0u;
    const std::uint32_t e = (bits >> MB) & exp_all;
    const std::uint32_t m = bits & mant_mask;
    if (ieee && e == exp_all) return bits_of<float>(sign | 0x7f800000u | (m ? 0x400000u : 0u));
    if (!ieee && e == exp_all && m == mant_mask) return bits_of<float>(sign | 0x7fc00000u);
    if (e == 0) {
      // m * 2^(1 - bias - MB), exact: the scale is a power of two (a double, since for
      // bfloat16 it is below float's normal range) and the result is a float (sub)normal.
      const double scale = bits_of<double>(static_cast<std::uint64_t>(1023 + 1 - bias - MB) << 52);
      const float v = static_cast<float>(static_cast<double>(m) * scale);
      return sign ? -v : v;
    }
    return bits_of<float>(sign | ((e - bias + 127) << 23) | (m << (23 - MB)));
  }
};

// Fast paths for the common float32 <-> float16/bfloat16 conversions: the same results as
// encode/decode above bit for bit (tested exhaustively over the 16-bit side and over a
// dense sample of floats), without the trip through double.
CAIRN_HD inline std::uint16_t float_to_bfloat16_bits(float f) {
  const std::uint32_t u = bits_of<std::uint32_t>(f);
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // nearest even; overflow carries to inf
  const std::uint32_t nan = ((u >> 16) & 0x8000u) | 0x7fc0u;
  return static_cast<std::uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);  // a select, no branch
}
CAIRN_HD inline float bfloat16_bits_to_float(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  const std::uint32_t nan = (u & 0x80000000u) | 0x7fc00000u;  // one quiet NaN
  return bits_of<float>((u & 0x7fffffffu) > 0x7f800000u ? nan : u);  // a select, no branch
}
CAIRN_HD inline std::uint16_t float_to_float16_bits(float f) {
  std::uint32_t a = bits_of<std::uint32_t>(f);
  const std::uint32_t sign = (a >> 16) & 0x8000u;
  a &= 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to inf (or is inf)
  if (a < 0x38800000u) {
    // Below float16's smallest normal: adding 0.5 lines the subnormal's bits up at the bottom
    // of the float, and the hardware's round-to-nearest-even does the rounding.
    const float sum = bits_of<float>(a) + 0.5f;
    return static_cast<std::uint16_t>(sign | (bits_of<std::uint32_t>(sum) - 0x3f000000u));
  }
  const std::uint32_t odd = (a >> 13) & 1u;
  a += (static_cast<std::uint32_t>(15 - 127) << 23) + 0xfffu + odd;
  return static_cast<std::uint16_t>(sign | (a >> 13));
}

using float16_format = narrow_float_format<5, 10, true>;
using bfloat16_format = narrow_float_format<8, 7, true>;
using float8_e4m3fn_format = narrow_float_format<4, 3, false>;
using float8_e5m2_format = narrow_float_format<5, 2, true>;

}  // namespace detail

// Each type is a bit pattern with explicit conversions; it has no arithmetic of its own.
#define CAIRN_NARROW_FLOAT(Name, Storage, Format)                                                           \
  struct Name {                                                                                             \
    Storage bits = 0;                                                                                       \
    Name() = default;                                                                                       \
    CAIRN_HD explicit Name(float v) : bits(static_cast<Storage>(Format::encode(static_cast<double>(v)))) {} \
    CAIRN_HD explicit Name(double v) : bits(static_cast<Storage>(Format::encode(v))) {}                     \
    CAIRN_HD static Name from_bits(Storage b) { Name n; n.bits = b; return n; }                             \
    CAIRN_HD explicit operator float() const { return Format::decode(bits); }                               \
    CAIRN_HD explicit operator double() const { return static_cast<double>(Format::decode(bits)); }         \
    CAIRN_HD float to_float() const { return Format::decode(bits); }                                        \
    /* numeric comparison, as for float: NaN != NaN, -0 == +0 */                                            \
    CAIRN_HD friend bool operator==(Name a, Name b) { return a.to_float() == b.to_float(); }                \
  };                                                                                                        \
  static_assert(sizeof(Name) == sizeof(Storage));

CAIRN_NARROW_FLOAT(float16, std::uint16_t, detail::float16_format)
CAIRN_NARROW_FLOAT(bfloat16, std::uint16_t, detail::bfloat16_format)
CAIRN_NARROW_FLOAT(float8_e4m3fn, std::uint8_t, detail::float8_e4m3fn_format)
CAIRN_NARROW_FLOAT(float8_e5m2, std::uint8_t, detail::float8_e5m2_format)
#undef CAIRN_NARROW_FLOAT

CAIRN_END_NAMESPACE
