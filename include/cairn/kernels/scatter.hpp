// Scattering a piece of a 2-D array stored in one memory order into a target of the other
// order. The piece is `count` consecutive outer blocks (columns of an F-order array, rows of
// a C-order one) of `inner` elements each, starting at outer index `first`; in the target,
// element (outer o, inner i) lives at i * outer_total + o.
#pragma once

#include <cstdint>

#include "cairn/core/error.hpp"
#include "cairn/kernels/policy.hpp"

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

CAIRN_BEGIN_NAMESPACE
namespace detail {

template <class T>
struct scatter_transposed {
  const T* src;
  T* dst;
  std::uint64_t inner, outer_total, first;
  CAIRN_HD void operator()(std::uint64_t k) const {
    const std::uint64_t o = k / inner, i = k % inner;
    dst[i * outer_total + first + o] = src[k];
  }
};

template <class T>
void scatter_transposed_typed(const void* src, void* dst, std::uint64_t inner, std::uint64_t outer_total,
                              std::uint64_t first, std::uint64_t count) {
  thrust::for_each(host_memory_policy(), thrust::counting_iterator<std::uint64_t>(0),
                   thrust::counting_iterator<std::uint64_t>(inner * count),
                   scatter_transposed<T>{static_cast<const T*>(src), static_cast<T*>(dst), inner, outer_total, first});
}

}  // namespace detail

inline void scatter_transposed_host(const void* src, void* dst, std::size_t item_size, std::uint64_t inner,
                                    std::uint64_t outer_total, std::uint64_t first, std::uint64_t count) {
  switch (item_size) {
    case 1: return detail::scatter_transposed_typed<std::uint8_t>(src, dst, inner, outer_total, first, count);
    case 2: return detail::scatter_transposed_typed<std::uint16_t>(src, dst, inner, outer_total, first, count);
    case 4: return detail::scatter_transposed_typed<std::uint32_t>(src, dst, inner, outer_total, first, count);
    case 8: return detail::scatter_transposed_typed<std::uint64_t>(src, dst, inner, outer_total, first, count);
  }
  throw Error(ErrorKind::invalid_argument, "transpose of " + std::to_string(item_size) + "-byte elements");
}

CAIRN_END_NAMESPACE
