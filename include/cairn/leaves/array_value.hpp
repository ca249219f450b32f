// SPDX-License-Identifier: Apache-2.0
// cairn::ArrayValue: a leaf whose dtype and shape are known only at run time: what a tool
// that reads any checkpoint (the `cairn` command, a viewer, a converter) loads into, without
// the C++ type the leaf was saved from. As a tree leaf it loads as stored (its dtype and shape
// become the stored ones; nothing is cast) and saves as it is. cairn::read_arrays
// (inspect/inspect.hpp) reads leaves into it by key, cast to one dtype or only some boxes.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "cairn/core/error.hpp"
#include "cairn/tree/traits.hpp"

CAIRN_BEGIN_NAMESPACE

struct ArrayValue {
  DType dtype = DType::float32;
  Shape shape = {};                  // of the whole array, also when only boxes of it are held
  std::vector<unsigned char> bytes = {};  // C order: the whole array, or each box after the other
  // Empty: `bytes` hold the whole array. Otherwise the boxes of it that `bytes` hold, in order
  // (what read_arrays reads when asked for boxes); such a value is not saved (a save refuses
  // it: it is not the array).
  std::vector<Box> boxes = {};

  std::uint64_t elements() const { return element_count(shape); }

  // The elements as T, whose dtype must be this value's (no cast: read_arrays casts).
  template <class T>
  std::span<const T> values() const {
    if (!has_dtype<T> || dtype_of<T> != dtype)
      throw Error(ErrorKind::dtype_mismatch, std::string("the value holds ") + dtype_name(dtype) +
                  ", not the element type asked for (read it with read_arrays' `as` to cast)");
    return {reinterpret_cast<const T*>(bytes.data()), bytes.size() / sizeof(T)};
  }
};

template <>
struct leaf_traits<ArrayValue> {
  static LeafView view(const ArrayValue& v) {
    LeafView out{v.dtype, v.shape, Order::C, nullptr, 0};
    if (v.boxes.empty()) {
      out.data = v.bytes.data();
      out.nbytes = v.bytes.size();
      if (out.nbytes != byte_count(v.shape, dtype_size(v.dtype)) && v.dtype != DType::string)
        throw Error(ErrorKind::invalid_argument, "an ArrayValue of " + std::string(dtype_name(v.dtype)) + to_string(v.shape) +
                    " holds " + std::to_string(out.nbytes) + " bytes, not " +
                    std::to_string(byte_count(v.shape, dtype_size(v.dtype))));
      return out;
    }
    throw Error(ErrorKind::invalid_argument, "this ArrayValue holds " + std::to_string(v.boxes.size()) +
                " boxes of a " + to_string(v.shape) + " array, not the array: read it whole to save it");
  }
  static LeafBuffer prepare(ArrayValue& v, const StoredLeafInfo& stored) {
    v.dtype = stored.dtype;
    v.shape = stored.shape;
    v.boxes.clear();
    v.bytes.resize(static_cast<std::size_t>(stored.dtype == DType::string ? stored.nbytes
                                                                          : byte_count(stored.shape, dtype_size(stored.dtype))));
    return {v.dtype, Order::C, v.bytes.data(), v.bytes.size()};
  }
};

CAIRN_END_NAMESPACE
