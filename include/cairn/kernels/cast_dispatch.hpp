// SPDX-License-Identifier: Apache-2.0
// Which loop a cast of dtypes known only at run time runs: a kernel of its own for the common
// pairs, two steps through a wide type for the others (70 instantiations, not 225), and the
// device cast.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "cairn/kernels/cast_loops.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

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
    case pair(DType::float32, DType::bfloat16): return run(static_cast<float*>(nullptr), static_cast<bfloat16*>(nullptr));
    case pair(DType::float32, DType::float16): return run(static_cast<float*>(nullptr), static_cast<float16*>(nullptr));
    case pair(DType::bfloat16, DType::float32): return run(static_cast<bfloat16*>(nullptr), static_cast<float*>(nullptr));
    case pair(DType::float16, DType::float32): return run(static_cast<float16*>(nullptr), static_cast<float*>(nullptr));
    case pair(DType::float32, DType::float64): return run(static_cast<float*>(nullptr), static_cast<double*>(nullptr));
    case pair(DType::float32, DType::int32): return run(static_cast<float*>(nullptr), static_cast<std::int32_t*>(nullptr));
    case pair(DType::int32, DType::float32): return run(static_cast<std::int32_t*>(nullptr), static_cast<float*>(nullptr));
    case pair(DType::int32, DType::int16): return run(static_cast<std::int32_t*>(nullptr), static_cast<std::int16_t*>(nullptr));
    case pair(DType::int32, DType::int8): return run(static_cast<std::int32_t*>(nullptr), static_cast<std::int8_t*>(nullptr));
    case pair(DType::int16, DType::int8): return run(static_cast<std::int16_t*>(nullptr), static_cast<std::int8_t*>(nullptr));
    case pair(DType::uint32, DType::uint16): return run(static_cast<std::uint32_t*>(nullptr), static_cast<std::uint16_t*>(nullptr));
    case pair(DType::uint32, DType::uint8): return run(static_cast<std::uint32_t*>(nullptr), static_cast<std::uint8_t*>(nullptr));
    case pair(DType::uint16, DType::uint8): return run(static_cast<std::uint16_t*>(nullptr), static_cast<std::uint8_t*>(nullptr));
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

CAIRN_END_NAMESPACE
