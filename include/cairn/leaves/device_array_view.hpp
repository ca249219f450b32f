// SPDX-License-Identifier: Apache-2.0
// DeviceArrayView<T>: a leaf over memory the caller owns on a device (a raw CUDA pointer from
// another library, a framework's tensor), with a fixed shape in C order. Saving copies it to
// the host through pinned staging buffers; loading writes into it, and the stored shape must
// equal its shape.
#pragma once

#include "cairn/device/memory.hpp"
#include "cairn/tree/traits.hpp"

CAIRN_BEGIN_NAMESPACE

template <class T>
struct DeviceArrayView {
  static_assert(has_dtype<T>, "cairn::DeviceArrayView<T> needs an element type with a dtype");
  T* data = nullptr;
  Shape shape;
  int device = 0;  // the CUDA device that owns `data`
};

template <class T>
struct leaf_traits<DeviceArrayView<T>> {
  static LeafView view(const DeviceArrayView<T>& v) {
    LeafView view{dtype_of<T>, v.shape, Order::C, nullptr, byte_count(v.shape, sizeof(T))};
    view.shards.push_back({whole_box(v.shape), v.data, MemoryKind::device, v.device, true});
    return view;
  }
  static LeafBuffer prepare(DeviceArrayView<T>& v, const StoredLeafInfo& stored) {
    require_shape(v.shape, stored.shape);
    LeafBuffer b{dtype_of<T>, Order::C, nullptr, byte_count(v.shape, sizeof(T))};
    b.shards.push_back({whole_box(v.shape), v.data, MemoryKind::device, v.device});
    return b;
  }
};

CAIRN_END_NAMESPACE
