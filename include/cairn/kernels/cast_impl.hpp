// SPDX-License-Identifier: Apache-2.0
// cairn::cast_host: which kernel a host cast runs (kernels/cast.hpp). Compiled in every
// translation unit that includes cairn/cairn.hpp, or once with CAIRN_SEPARATE_COMPILATION.
#pragma once

#include <cstring>
#include <string>

#include "cairn/dtype/cast_host.hpp"
#include "cairn/kernels/cast.hpp"

CAIRN_BEGIN_NAMESPACE

CAIRN_API void cast_host(DType from, const void* src, DType to, void* dst, std::size_t n, OnOverflow on_overflow) {
  if (from == DType::string || to == DType::string) {
    if (from == to) { std::memcpy(dst, src, n); return; }
    throw Error(ErrorKind::dtype_mismatch, std::string("cannot cast between ") + dtype_name(from) +
                " and " + dtype_name(to));
  }
  if (from == to) {
    std::memcpy(dst, src, n * dtype_size(from));
    return;
  }
  if (!detail::cast_common_pair(from, src, to, dst, n, on_overflow)) detail::cast_general(from, src, to, dst, n, on_overflow);
}

CAIRN_END_NAMESPACE
