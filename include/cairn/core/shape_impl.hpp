// SPDX-License-Identifier: Apache-2.0
// Shapes' printing and the fixed-shape check (core/shape.hpp): once in the runtime with
// separate compilation, inline when header-only.
#pragma once

#include <string>

#include "cairn/core/shape.hpp"

CAIRN_BEGIN_NAMESPACE

CAIRN_API std::string to_string(const Shape& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

CAIRN_API void require_shape(const Shape& expected, const Shape& stored) {
  if (expected != stored)
    throw Error(ErrorKind::shape_mismatch, "stored shape " + to_string(stored) +
                " does not fit the target's fixed shape " + to_string(expected));
}

CAIRN_END_NAMESPACE
