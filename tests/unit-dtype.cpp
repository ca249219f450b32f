// SPDX-License-Identifier: Apache-2.0
#include "test_util.hpp"

#include "cairn/kernels/cast_element.hpp"  // cast_value, cast_fits: kernels a separately compiled program does not get from cairn.hpp

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>

using namespace cairn;

namespace {

template <class F> struct format_info;
template <> struct format_info<float16> { using fmt = detail::float16_format; using bits = std::uint16_t; static constexpr bool ieee = true; };
template <> struct format_info<bfloat16> { using fmt = detail::bfloat16_format; using bits = std::uint16_t; static constexpr bool ieee = true; };
template <> struct format_info<float8_e4m3fn> { using fmt = detail::float8_e4m3fn_format; using bits = std::uint8_t; static constexpr bool ieee = false; };
template <> struct format_info<float8_e5m2> { using fmt = detail::float8_e5m2_format; using bits = std::uint8_t; static constexpr bool ieee = true; };

// Reference rounding by brute force over every finite value of the format: nearest, ties to
// the even bit pattern; beyond the largest finite value plus half its ulp, overflow.
template <class F>
std::uint32_t reference_round(float x) {
  using I = format_info<F>;
  constexpr std::uint32_t count = 1u << (8 * sizeof(typename I::bits));
  const float max_finite = I::fmt::decode(I::fmt::max_finite);
  const float below_max = I::fmt::decode(I::fmt::max_finite - 1);
  const double overflow_at = static_cast<double>(max_finite) + (static_cast<double>(max_finite) - below_max) / 2;
  const std::uint32_t sign = std::signbit(x) ? I::fmt::sign_bit : 0;
  if (std::isnan(x)) return I::fmt::nan_bits;
  if (std::fabs(static_cast<double>(x)) >= overflow_at) return sign | (I::ieee ? I::fmt::inf_bits : I::fmt::max_finite);
  std::uint32_t best = 0;
  double best_d = INFINITY;
  for (std::uint32_t b = 0; b < count; ++b) {
    if (b & I::fmt::sign_bit) continue;
    const float v = I::fmt::decode(b);
    if (!std::isfinite(v)) continue;
    const double d = std::fabs(std::fabs(static_cast<double>(x)) - v);
    if (d < best_d || (d == best_d && (b & 1) == 0)) { best = b; best_d = d; }
  }
  return sign | best;
}

template <class F>
void check_format() {
  using I = format_info<F>;
  constexpr std::uint32_t count = 1u << (8 * sizeof(typename I::bits));
  // Every bit pattern decodes and encodes back to itself (NaN to a NaN).
  for (std::uint32_t b = 0; b < count; ++b) {
    const float v = I::fmt::decode(b);
    const std::uint32_t back = I::fmt::encode(v);
    if (std::isnan(v)) {
      CHECK(std::isnan(I::fmt::decode(back)));
    } else {
      CHECK_MESSAGE(back == b, "bits " << b);
    }
  }
  // Random floats across the exponent range, including subnormals and overflow.
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  for (int i = 0; i < (sizeof(typename I::bits) == 1 ? 4000 : 300); ++i) {
    const int e = static_cast<int>(test::rng()() % 60) - 30 + (sizeof(typename I::bits) == 2 && I::fmt::bias > 100 ? static_cast<int>(test::rng()() % 200) - 100 : 0);
    float x = std::ldexp(mant(test::rng()), e);
    if (test::rng()() & 1) x = -x;
    CHECK_MESSAGE(I::fmt::encode(x) == reference_round<F>(x), "x = " << x);
  }
  // Exact ties between two neighbours round to the even pattern.
  for (std::uint32_t b = 1; b + 1 < (I::fmt::max_finite); b += 7) {
    const double mid = (static_cast<double>(I::fmt::decode(b)) + I::fmt::decode(b + 1)) / 2;
    CHECK(I::fmt::encode(mid) == ((b & 1) ? b + 1 : b));
  }
  CHECK(std::isnan(I::fmt::decode(I::fmt::encode(std::numeric_limits<double>::quiet_NaN()))));
  CHECK(I::fmt::encode(-0.0) == I::fmt::sign_bit);
}

}  // namespace

TEST_CASE("float16 rounds to nearest even, overflows to infinity, keeps NaN") { check_format<float16>(); }
TEST_CASE("bfloat16 rounds to nearest even, overflows to infinity, keeps NaN") { check_format<bfloat16>(); }
TEST_CASE("float8_e5m2 rounds to nearest even, overflows to infinity") { check_format<float8_e5m2>(); }
TEST_CASE("float8_e4m3fn rounds to nearest even and saturates at 448") {
  check_format<float8_e4m3fn>();
  CHECK(static_cast<float>(float8_e4m3fn(1e6f)) == 448.0f);
  CHECK(static_cast<float>(float8_e4m3fn(-INFINITY)) == -448.0f);
  CHECK(std::isnan(static_cast<float>(float8_e4m3fn(NAN))));
}

TEST_CASE("dtype names are numpy's and round-trip") {
  for (DType d : all_numeric_dtypes) CHECK(dtype_from_name(dtype_name(d)) == d);
  CHECK(std::string(dtype_name(DType::bfloat16)) == "bfloat16");
  CHECK(std::string(dtype_name(DType::float8_e4m3fn)) == "float8_e4m3fn");
  CHECK(dtype_of<long> == DType::int64);
  CHECK(dtype_of<unsigned char> == DType::uint8);
  CHECK(dtype_of<bfloat16> == DType::bfloat16);
  CHECK_CAIRN_ERROR(dtype_from_name("float33"), ErrorKind::invalid_argument, "float33");
}

TEST_CASE("integer narrowing is an error by default, naming the element; saturate clamps") {
  std::vector<std::int32_t> src = {1, -2, 300, 5};
  std::vector<std::uint8_t> dst(4);
  CHECK_CAIRN_ERROR(cast_host(DType::int32, src.data(), DType::uint8, dst.data(), 4), ErrorKind::value_out_of_range,
                    "element 1 (value -2)");
  cast_host(DType::int32, src.data(), DType::uint8, dst.data(), 4, OnOverflow::saturate);
  CHECK(dst == std::vector<std::uint8_t>{1, 0, 255, 5});
  std::vector<std::uint64_t> big = {~std::uint64_t{0}};
  std::vector<std::int64_t> out(1);
  CHECK_CAIRN_ERROR(cast_host(DType::uint64, big.data(), DType::int64, out.data(), 1), ErrorKind::value_out_of_range, "int64");
  cast_host(DType::uint64, big.data(), DType::int64, out.data(), 1, OnOverflow::saturate);
  CHECK(out[0] == std::numeric_limits<std::int64_t>::max());
}

TEST_CASE("float to int truncates toward zero; NaN, inf and out of range are errors or clamp") {
  std::vector<double> src = {2.9, -2.9, -128.9, 127.99};
  std::vector<std::int8_t> dst(4);
  cast_host(DType::float64, src.data(), DType::int8, dst.data(), 4);
  CHECK(dst == std::vector<std::int8_t>{2, -2, -128, 127});
  for (double bad : {std::nan(""), static_cast<double>(INFINITY), 128.0, -129.0, 9.3e18}) {
    std::vector<double> one = {bad};
    CHECK_CAIRN_ERROR(cast_host(DType::float64, one.data(), DType::int8, dst.data(), 1), ErrorKind::value_out_of_range, "int8");
  }
  std::vector<float> s2 = {NAN, INFINITY, -INFINITY, 1e30f};
  std::vector<std::int64_t> d2(4);
  cast_host(DType::float32, s2.data(), DType::int64, d2.data(), 4, OnOverflow::saturate);
  CHECK(d2 == std::vector<std::int64_t>{0, INT64_MAX, INT64_MIN, INT64_MAX});
  std::vector<float> s3 = {-0.5f};
  std::vector<std::uint32_t> d3(1);
  cast_host(DType::float32, s3.data(), DType::uint32, d3.data(), 1);  // truncates to 0: fits
  CHECK(d3[0] == 0);
}

TEST_CASE("integers to narrow floats round once, even beyond 2^53") {
  // 2^60 + 2^52 + 1 lies just above a bfloat16 tie: a double rounding would go to even (down).
  const std::int64_t v = (std::int64_t{1} << 60) + (std::int64_t{1} << 52) + 1;
  const bfloat16 b = cast_value<bfloat16>(v);
  const double lo = std::ldexp(1.0, 60), hi = std::ldexp(1.0 + 1.0 / 128, 60);
  CHECK(static_cast<double>(b.to_float()) == hi);
  CHECK(static_cast<double>(bfloat16(lo).to_float()) == lo);
  CHECK(cast_value<float16>(std::int32_t{70000}).bits == detail::float16_format::inf_bits);
  CHECK(cast_value<float>(std::uint64_t{~0ull}) == 18446744073709551616.0f);
}

TEST_CASE("bool casts: nonzero is true (NaN too), true is 1") {
  std::vector<float> src = {0.0f, -0.0f, 2.5f, NAN};
  std::vector<std::uint8_t> bytes(4);
  cast_host(DType::float32, src.data(), DType::bool_, bytes.data(), 4);
  CHECK(bytes == std::vector<std::uint8_t>{0, 0, 1, 1});
  std::vector<bool> bools = {true, false};
  CHECK(cast_value<float>(true) == 1.0f);
  CHECK(cast_value<bfloat16>(true).to_float() == 1.0f);
  CHECK_CAIRN_ERROR(cast_host(DType::string, "ab", DType::int8, bytes.data(), 2), ErrorKind::dtype_mismatch, "string");
}

// Two full blocks of the host kernels (their fixed-count loops) and a partial one: a few
// pairs have a kernel of their own, the others widen first (docs/compile-time.md).
constexpr std::size_t cast_test_elements = 2 * 4096 + 37;

TEST_CASE("every pair of numeric dtypes converts through the same kernels as single values") {
  const std::size_t n = cast_test_elements;
  for (DType from : all_numeric_dtypes)
    for (DType to : all_numeric_dtypes) {
      auto src = test::random_bits<unsigned char>(n * dtype_size(from));
      if (from == DType::bool_)
        for (auto& b : src) b &= 1;  // a bool object holds 0 or 1; anything else is not a bool
      std::vector<unsigned char> a(n * dtype_size(to)), b(n * dtype_size(to));
      cast_host(from, src.data(), to, a.data(), n, OnOverflow::saturate);
      visit_dtype(from, [&](auto* f) {
        using From = std::remove_pointer_t<decltype(f)>;
        visit_dtype(to, [&](auto* t) {
          using To = std::remove_pointer_t<decltype(t)>;
          for (std::size_t i = 0; i < n; ++i) {
            From x;
            std::memcpy(&x, src.data() + i * sizeof(From), sizeof(From));
            To y = cast_value<To>(x);
            std::memcpy(b.data() + i * sizeof(To), &y, sizeof(To));
          }
        });
      });
      CHECK_MESSAGE(a == b, dtype_name(from) << " -> " << dtype_name(to));
    }
}

TEST_CASE("every pair that can overflow names the first element that does not fit, on either kind of kernel") {
  std::mt19937_64& rng = test::rng();
  const std::size_t n = cast_test_elements;
  int pairs_checked = 0;
  for (DType from : all_numeric_dtypes)
    for (DType to : all_numeric_dtypes) {
      if (from == to) continue;
      visit_dtype(from, [&](auto* f) {
        using From = std::remove_pointer_t<decltype(f)>;
        visit_dtype(to, [&](auto* t) {
          using To = std::remove_pointer_t<decltype(t)>;
          // A value of From that does not fit in To, if the pair has one.
          std::optional<From> bad;
          for (int tries = 0; tries < 2000 && !bad; ++tries) {
            auto bits = test::random_bits<unsigned char>(sizeof(From), rng);
            if constexpr (std::is_same_v<From, bool>) bits[0] &= 1;
            From x;
            std::memcpy(&x, bits.data(), sizeof(From));
            if (!cairn::detail::cast_fits<To, From>{}(x)) bad = x;
          }
          // Raw arrays: std::vector<bool> has no data().
          std::unique_ptr<From[]> src(new From[n]);
          std::unique_ptr<To[]> dst(new To[n]);
          std::fill_n(src.get(), n, cast_value<From>(false));  // zeros fit everywhere
          // The random search finds one exactly for the pairs whose range check is compiled.
          constexpr bool checked = cairn::detail::can_overflow_v<To, From>;
          CHECK_MESSAGE(bad.has_value() == checked, dtype_name(from) << " -> " << dtype_name(to));
          if (!bad) {
            cast_host(from, src.get(), to, dst.get(), n);  // nothing to complain about
            return;
          }
          const std::size_t k = 4096 + rng() % (n - 4096 - 1);  // past the first block
          src[k] = *bad;
          src[n - 1] = *bad;  // a later one is not the one named
          CHECK_CAIRN_ERROR(cast_host(from, src.get(), to, dst.get(), n), ErrorKind::value_out_of_range,
                            "element " + std::to_string(k) + " (value ");
          cast_host(from, src.get(), to, dst.get(), n, OnOverflow::saturate);  // clamps instead
          CHECK(std::memcmp(&dst[k], &dst[n - 1], sizeof(To)) == 0);
          ++pairs_checked;
        });
      });
    }
  CHECK(pairs_checked == 86);  // integer narrowing, sign changes and float -> integer, in both kernels
}

TEST_CASE("the fast float32 <-> bfloat16 / float16 paths equal the reference rounding bit for bit") {
  using cairn::detail::bfloat16_format;
  using cairn::detail::float16_format;
  auto check_float = [](std::uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    const auto bf = cairn::cast_value<cairn::bfloat16>(f);
    const auto h = cairn::cast_value<cairn::float16>(f);
    if (bf.bits != bfloat16_format::encode(static_cast<double>(f)) ||
        h.bits != float16_format::encode(static_cast<double>(f))) {
      FAIL("float bits " << u << ": bfloat16 " << bf.bits << " vs " << bfloat16_format::encode(f) << ", float16 "
                         << h.bits << " vs " << float16_format::encode(f));
    }
  };
  // Every upper half with the low halves where rounding decides (ties, just above and below).
  for (std::uint32_t hi = 0; hi < 65536; ++hi)
    for (std::uint32_t lo : {0x0000u, 0x0001u, 0x0fffu, 0x1000u, 0x1001u, 0x7fffu, 0x8000u, 0x8001u, 0xefffu,
                             0xf000u, 0xf001u, 0xffffu})
      check_float(hi << 16 | lo);
  for (int i = 0; i < 2000000; ++i) check_float(static_cast<std::uint32_t>(test::rng()()));
  // The same through cast_host: the blocked host kernel (AVX2 where the CPU has it).
  std::vector<std::uint32_t> bits;
  for (std::uint32_t hi = 0; hi < 65536; ++hi)
    for (std::uint32_t lo : {0x0000u, 0x7fffu, 0x8000u, 0x8001u, 0x1000u, 0xffffu}) bits.push_back(hi << 16 | lo);
  for (int i = 0; i < 1000000; ++i) bits.push_back(static_cast<std::uint32_t>(test::rng()()));
  std::vector<float> floats(bits.size());
  std::memcpy(floats.data(), bits.data(), bits.size() * 4);
  std::vector<cairn::bfloat16> bf(bits.size());
  std::vector<cairn::float16> hf(bits.size());
  cairn::cast_host(cairn::DType::float32, floats.data(), cairn::DType::bfloat16, bf.data(), floats.size());
  cairn::cast_host(cairn::DType::float32, floats.data(), cairn::DType::float16, hf.data(), floats.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < floats.size(); ++i)
    bad += bf[i].bits != bfloat16_format::encode(static_cast<double>(floats[i])) ||
           hf[i].bits != float16_format::encode(static_cast<double>(floats[i]));
  CHECK(bad == 0);
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const float fast = cairn::cast_value<float>(cairn::bfloat16::from_bits(static_cast<std::uint16_t>(b)));
    const float ref = bfloat16_format::decode(b);
    CHECK(std::memcmp(&fast, &ref, 4) == 0);
  }
}

namespace {
// Doubles where rounding to float16 or bfloat16 decides: each neighbour pair's midpoint, and
// the doubles just either side of it (a float cannot hold them: the case that a rounding
// through float would get wrong), around the largest finite values and the subnormals, and
// beyond float's range.
template <class Format>
void add_rounding_cases(std::vector<double>& out, std::uint32_t count) {
  for (std::uint32_t b = 0; b + 1 < count; ++b) {
    const double a = Format::decode(b), c = Format::decode(b + 1);
    if (!std::isfinite(a) || !std::isfinite(c) || std::isnan(a) || std::isnan(c)) continue;
    const double mid = (a + c) / 2;
    for (double x : {mid, std::nextafter(mid, -INFINITY), std::nextafter(mid, INFINITY), a})
      for (double s : {1.0, -1.0}) out.push_back(s * x);
  }
}
}  // namespace

TEST_CASE("float64 to float16 and bfloat16 rounds once, bit for bit with the reference rounding") {
  using cairn::detail::bfloat16_format;
  using cairn::detail::float16_format;
  std::vector<double> xs;
  add_rounding_cases<float16_format>(xs, 0x7c00);
  add_rounding_cases<bfloat16_format>(xs, 0x7f80);
  for (double x : {0.0, -0.0, static_cast<double>(INFINITY), -static_cast<double>(INFINITY), std::nan(""),
                   -std::nan(""), 65504.0, 65519.999999, 65520.0, 65520.000001, 1e300, -1e300, 3.4e38, 3.3961e38,
                   static_cast<double>(std::numeric_limits<float>::max()), std::ldexp(1.0, 128), 1e-300, -4.9e-324,
                   std::ldexp(1.0, -25), std::ldexp(1.0, -25) * (1 + 1e-15), std::ldexp(1.0, -134),
                   std::ldexp(1.0, -134) * (1 + 1e-15), std::ldexp(1.0, -150), std::ldexp(1.0, -149) * 1.5})
    xs.push_back(x);
  for (int i = 0; i < 1000000; ++i) {  // random bits, and random values in float16's range
    const std::uint64_t u = test::rng()();
    double d;
    std::memcpy(&d, &u, 8);
    xs.push_back(d);
    xs.push_back(std::ldexp(static_cast<double>(u >> 11), static_cast<int>(u % 64) - 90));
  }
  std::vector<cairn::bfloat16> bf(xs.size());
  std::vector<cairn::float16> hf(xs.size());
  cairn::cast_host(cairn::DType::float64, xs.data(), cairn::DType::bfloat16, bf.data(), xs.size());
  cairn::cast_host(cairn::DType::float64, xs.data(), cairn::DType::float16, hf.data(), xs.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const std::uint32_t rb = bfloat16_format::encode(xs[i]), rh = float16_format::encode(xs[i]);
    const bool ok = bf[i].bits == rb && hf[i].bits == rh && cairn::cast_value<cairn::bfloat16>(xs[i]).bits == rb &&
                    cairn::cast_value<cairn::float16>(xs[i]).bits == rh;
    if (!ok && ++bad <= 5)
      MESSAGE("x = " << xs[i] << ": bfloat16 " << bf[i].bits << " vs " << rb << ", float16 " << hf[i].bits << " vs " << rh);
  }
  CHECK(bad == 0);
  // Integers round once too (through a double rounded to odd, then this path).
  for (int i = 0; i < 100000; ++i) {
    const auto v = static_cast<std::int64_t>(test::rng()()) >> (test::rng()() % 64);
    const double odd = cairn::detail::int_as_double_round_to_odd(v);
    CHECK_MESSAGE(cairn::cast_value<cairn::bfloat16>(v).bits == bfloat16_format::encode(odd), v);
    CHECK_MESSAGE(cairn::cast_value<cairn::float16>(v).bits == float16_format::encode(odd), v);
  }
}

TEST_CASE("float16 to float32 through the host kernel equals the reference for every bit pattern") {
  std::vector<cairn::float16> all(65536 * 2);  // twice, so that full blocks take the vector path
  for (std::size_t b = 0; b < all.size(); ++b) all[b] = cairn::float16::from_bits(static_cast<std::uint16_t>(b));
  std::vector<float> out(all.size());
  cairn::cast_host(cairn::DType::float16, all.data(), cairn::DType::float32, out.data(), all.size());
  std::size_t bad = 0;
  for (std::size_t b = 0; b < all.size(); ++b) {
    const float ref = cairn::detail::float16_format::decode(static_cast<std::uint32_t>(b & 0xffff));
    bad += std::memcmp(&out[b], &ref, 4) != 0;
  }
  CHECK(bad == 0);
}

TEST_CASE("float to int: the range test is trunc's at every boundary, for every pair") {
  // Reference: truncate, then compare with the target's range as exact doubles.
  auto check = [](auto* to_tag, auto* from_tag) {
    using To = std::remove_pointer_t<decltype(to_tag)>;
    using From = std::remove_pointer_t<decltype(from_tag)>;
    const double lo = static_cast<double>(std::numeric_limits<To>::min());
    const double hi = std::ldexp(1.0, std::numeric_limits<To>::digits);  // one past max, exact
    std::vector<From> xs;
    for (double edge : {lo, lo - 1, hi, hi - 1, 0.0, -1.0})
      for (From x = static_cast<From>(edge), k = 0; k < 4; ++k) {
        xs.push_back(x);
        xs.push_back(std::nextafter(x, std::numeric_limits<From>::infinity()));
        xs.push_back(std::nextafter(x, -std::numeric_limits<From>::infinity()));
        x = std::nextafter(x, -std::numeric_limits<From>::infinity());
      }
    for (From x : {From(0.5), From(-0.5), From(-0.999), std::numeric_limits<From>::quiet_NaN(),
                   std::numeric_limits<From>::infinity(), -std::numeric_limits<From>::infinity()})
      xs.push_back(x);
    for (From x : xs) {
      const double t = std::trunc(static_cast<double>(x));
      const bool fits = !std::isnan(t) && t >= lo && t < hi;
      const bool got = cairn::detail::cast_fits<To, From>{}(x);
      CHECK_MESSAGE(got == fits, dtype_name(dtype_of<From>) << " " << x << " -> " << dtype_name(dtype_of<To>));
      const To expect = std::isnan(t) ? To{0} : t < lo ? std::numeric_limits<To>::min()
                                         : t >= hi ? std::numeric_limits<To>::max() : static_cast<To>(t);
      CHECK(cast_value<To>(x) == expect);
    }
  };
  auto each_int = [&](auto* from) {
    check(static_cast<std::int8_t*>(nullptr), from);
    check(static_cast<std::int16_t*>(nullptr), from);
    check(static_cast<std::int32_t*>(nullptr), from);
    check(static_cast<std::int64_t*>(nullptr), from);
    check(static_cast<std::uint8_t*>(nullptr), from);
    check(static_cast<std::uint16_t*>(nullptr), from);
    check(static_cast<std::uint32_t*>(nullptr), from);
    check(static_cast<std::uint64_t*>(nullptr), from);
  };
  each_int(static_cast<float*>(nullptr));
  each_int(static_cast<double*>(nullptr));
}
