// SPDX-License-Identifier: Apache-2.0
// The loops of a cast over arrays: Thrust transforms (host backends and CUDA), loops written
// so that the compiler vectorizes them, the same loops compiled for AVX2 and F16C where the
// CPU has them, and the range check of the error mode. The element is cast_element.hpp's.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "cairn/core/tuning.hpp"
#include "cairn/device/memory.hpp"
#include "cairn/kernels/cast_element.hpp"
#include "cairn/kernels/policy.hpp"

#include <thrust/find.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform.h>

CAIRN_BEGIN_NAMESPACE
namespace detail {

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

}  // namespace detail

CAIRN_END_NAMESPACE
