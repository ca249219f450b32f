// SPDX-License-Identifier: Apache-2.0
// The host box copy, on the Thrust kernel of kernels/box_copy.hpp. Compiled in every
// translation unit that includes cairn/cairn.hpp, or once with CAIRN_SEPARATE_COMPILATION.
#pragma once

#include "cairn/kernels/box_copy.hpp"
#include "cairn/kernels/box_plan.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

CAIRN_API void box_copy_host(std::size_t item_size, const void* src, void* dst, const BoxCopyPlan& p) {
  box_copy(host_memory_policy(), item_size, src, dst, p, host_copy_segment_bytes / item_size);
}

}  // namespace detail
CAIRN_END_NAMESPACE
