// SPDX-License-Identifier: Apache-2.0
// cairn: checkpoints of nested C++ state (structs, std containers, Eigen, arrays) with dtype
// casting, partial restore and atomic commits. This umbrella header is all a user includes.
// Eigen support is on when Eigen's headers are found (define CAIRN_NO_EIGEN to leave it out).
//
// Header-only by default: the runtime (cairn/runtime.hpp: the I/O, the metadata, the cast
// kernels, the commit) is compiled in every translation unit that includes this. With
// CAIRN_SEPARATE_COMPILATION defined everywhere, this declares the runtime only, and one
// translation unit compiles it by including cairn/src.hpp (docs/compile-time.md). A model
// header that only annotates structs needs cairn/tree.hpp, not this.
#pragma once

#include "cairn/core/config.hpp"
#include "cairn/tree.hpp"
#include "cairn/core/named_sharding.hpp"
#include "cairn/core/json.hpp"
#include "cairn/tree/cereal.hpp"
#include "cairn/dtype/cast_host.hpp"
#include "cairn/leaves/array.hpp"
#include "cairn/leaves/sharded_array.hpp"
#include "cairn/leaves/device_array_view.hpp"
#include "cairn/store/store.hpp"
#include "cairn/store/location.hpp"
#include "cairn/store/posix_store.hpp"
#include "cairn/store/memory_store.hpp"
#include "cairn/coordination/coordinator.hpp"
#include "cairn/coordination/thread_coordinator.hpp"
#include "cairn/checkpoint/options.hpp"
#include "cairn/checkpoint/save.hpp"
#include "cairn/checkpoint/load.hpp"
#include "cairn/checkpoint/items.hpp"
#include "cairn/safetensors/load.hpp"
#include "cairn/safetensors/save.hpp"
#include "cairn/manager/policies.hpp"
#include "cairn/manager/checkpointer.hpp"
#include "cairn/leaves/array_value.hpp"
#include "cairn/inspect/inspect.hpp"
#include "cairn/inspect/verify.hpp"
#include "cairn/inspect/convert.hpp"

#if !defined(CAIRN_NO_EIGEN) && (__has_include(<Eigen/Core>) || __has_include(<eigen3/Eigen/Core>))
#include "cairn/leaves/eigen_cereal.hpp"
#endif

// cereal support for the standard types cairn's trees are made of, so that CAIRN_TREE structs
// serialize with cereal archives out of the box.
#include <cereal/types/array.hpp>
#include <cereal/types/deque.hpp>
#include <cereal/types/list.hpp>
#include <cereal/types/map.hpp>
#include <cereal/types/memory.hpp>
#include <cereal/types/optional.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/tuple.hpp>
#include <cereal/types/unordered_map.hpp>
#include <cereal/types/utility.hpp>
#include <cereal/types/variant.hpp>
#include <cereal/types/vector.hpp>

// Thrust's vectors as leaves. With separate compilation, include this where they are used:
// Thrust's headers are a good part of what that mode saves.
#if !defined(CAIRN_SEPARATE_COMPILATION)
#include "cairn/leaves/thrust_leaves.hpp"
#endif
