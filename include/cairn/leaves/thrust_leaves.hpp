// SPDX-License-Identifier: Apache-2.0
// thrust::host_vector<T> and thrust::device_vector<T> as tree leaves (1-D arrays). A device
// vector is saved through pinned staging buffers a piece at a time and loaded straight into
// its memory; under g++ its memory is that of Thrust's CPP/OMP device system.
#pragma once

#include "cairn/core/config.hpp"  // first: picks Thrust's device system without nvcc

#if defined(__has_include) && !__has_include(<thrust/version.h>)
#error "cairn's kernels need Thrust's headers (Thrust 1.17+: Debian's libthrust-dev, or CUDA's CCCL on the include path)"
#endif
#include <thrust/device_vector.h>
#include <thrust/host_vector.h>

#include "cairn/device/memory.hpp"
#include "cairn/tree/traits.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {
// A fresh vector of n elements (the old values are about to be overwritten anyway). Thrust
// 1.17's resize of an empty vector binds a reference through a null pointer, which is
// undefined behaviour (UBSan reports it), so no resize.
template <class Vector>
void resize_for_load(Vector& v, std::size_t n) {
  if (v.size() == n) return;
  Vector fresh(n);
  v.swap(fresh);
}
}  // namespace detail

template <class T, class Alloc>
struct leaf_traits<thrust::host_vector<T, Alloc>, std::enable_if_t<has_dtype<T>>> {
  static LeafView view(const thrust::host_vector<T, Alloc>& v) {
    return {dtype_of<T>, {static_cast<std::int64_t>(v.size())}, Order::C, thrust::raw_pointer_cast(v.data()),
            v.size() * sizeof(T)};
  }
  static LeafBuffer prepare(thrust::host_vector<T, Alloc>& v, const StoredLeafInfo& stored) {
    if (stored.shape.size() != 1)
      throw Error(ErrorKind::shape_mismatch, "stored shape " + to_string(stored.shape) +
                  " is not 1-D, but the target is a thrust::host_vector");
    detail::resize_for_load(v, static_cast<std::size_t>(stored.shape[0]));
    return {dtype_of<T>, Order::C, thrust::raw_pointer_cast(v.data()), v.size() * sizeof(T)};
  }
};

template <class T, class Alloc>
struct leaf_traits<thrust::device_vector<T, Alloc>, std::enable_if_t<has_dtype<T>>> {
  static LeafView view(const thrust::device_vector<T, Alloc>& v) {
    const Shape shape{static_cast<std::int64_t>(v.size())};
    LeafView view{dtype_of<T>, shape, Order::C, nullptr, v.size() * sizeof(T)};
    const T* p = thrust::raw_pointer_cast(v.data());
    view.shards.push_back({whole_box(shape), p, MemoryKind::device, v.empty() ? 0 : detail::device_of(p), true});
    return view;
  }
  static LeafBuffer prepare(thrust::device_vector<T, Alloc>& v, const StoredLeafInfo& stored) {
    if (stored.shape.size() != 1)
      throw Error(ErrorKind::shape_mismatch, "stored shape " + to_string(stored.shape) +
                  " is not 1-D, but the target is a thrust::device_vector");
    detail::resize_for_load(v, static_cast<std::size_t>(stored.shape[0]));
    T* p = thrust::raw_pointer_cast(v.data());
    LeafBuffer b{dtype_of<T>, Order::C, nullptr, v.size() * sizeof(T)};
    b.shards.push_back({whole_box(stored.shape), p, MemoryKind::device, v.empty() ? 0 : detail::device_of(p)});
    return b;
  }
};

CAIRN_END_NAMESPACE
