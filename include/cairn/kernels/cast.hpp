// SPDX-License-Identifier: Apache-2.0
// Element-type conversion kernels, written once with Thrust so they run on the host backends
// (CPP, OpenMP) and on CUDA (docs/casting.md): the element semantics (cast_element.hpp), the
// loops over arrays with their SIMD variants (cast_loops.hpp), and which loop a cast runs
// (cast_dispatch.hpp).
#pragma once

#include "cairn/kernels/cast_element.hpp"
#include "cairn/kernels/cast_loops.hpp"
#include "cairn/kernels/cast_dispatch.hpp"
