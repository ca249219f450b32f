// SPDX-License-Identifier: Apache-2.0
// Where a buffer lives: host memory, or the memory of Thrust's device system (a CUDA GPU
// under nvcc; host memory handled through Thrust's CPP/OMP backend otherwise).
#pragma once

#include "cairn/core/config.hpp"

CAIRN_BEGIN_NAMESPACE

enum class MemoryKind : char { host, device };

inline const char* memory_kind_name(MemoryKind m) { return m == MemoryKind::host ? "host" : "device"; }

CAIRN_END_NAMESPACE
