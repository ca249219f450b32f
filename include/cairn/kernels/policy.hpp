// SPDX-License-Identifier: Apache-2.0
// Which Thrust execution policy runs kernels on host memory. Under the OpenMP or TBB device
// system the "device" is the host's cores, so host arrays use it and run in parallel; under
// CUDA or the plain C++ system, host memory is processed by thrust::host.
#pragma once

#include "cairn/core/config.hpp"

#if defined(__has_include) && !__has_include(<thrust/version.h>)
#error "cairn's kernels need Thrust's headers (Thrust 1.17+: Debian's libthrust-dev, or CUDA's CCCL on the include path)"
#endif
#include <thrust/execution_policy.h>

CAIRN_BEGIN_NAMESPACE
namespace detail {

inline auto host_memory_policy() {
#if THRUST_DEVICE_SYSTEM == THRUST_DEVICE_SYSTEM_OMP || THRUST_DEVICE_SYSTEM == THRUST_DEVICE_SYSTEM_TBB
  return thrust::device;
#else
  return thrust::host;
#endif
}

}  // namespace detail
CAIRN_END_NAMESPACE
