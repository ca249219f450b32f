// SPDX-License-Identifier: Apache-2.0
// cairn::cast_host: converting an array of one dtype to another in host memory, by the rules
// of docs/casting.md. The kernels (kernels/cast.hpp) are the runtime's.
#pragma once

#include <cstddef>

#include "cairn/dtype/dtype.hpp"

CAIRN_BEGIN_NAMESPACE

// Converts n elements of host memory from one dtype to another; src and dst must not overlap.
// Throws value_out_of_range naming the first element that does not fit (OnOverflow::error),
// or clamps (OnOverflow::saturate).
CAIRN_API void cast_host(DType from, const void* src, DType to, void* dst, std::size_t n,
                         OnOverflow on_overflow = OnOverflow::error);

CAIRN_END_NAMESPACE

// The definition: in every translation unit when header-only, only in cairn/src.hpp's with
// CAIRN_SEPARATE_COMPILATION.
#if CAIRN_DEFINES_RUNTIME
#include "cairn/kernels/cast_impl.hpp"
#endif
