// cairn: checkpoints of nested C++ state (structs, std containers, Eigen, arrays) with dtype
// casting, partial restore and atomic commits. This umbrella header is all a user includes.
// Eigen support is on when Eigen's headers are found (define CAIRN_NO_EIGEN to leave it out).
#pragma once

#include "cairn/core/config.hpp"
#include "cairn/core/error.hpp"
#include "cairn/core/json.hpp"
#include "cairn/core/key_path.hpp"
#include "cairn/core/shape.hpp"
#include "cairn/core/mesh.hpp"
#include "cairn/core/partition_spec.hpp"
#include "cairn/core/named_sharding.hpp"
#include "cairn/dtype/dtype.hpp"
#include "cairn/dtype/float_types.hpp"
#include "cairn/kernels/cast.hpp"
#include "cairn/tree/traits.hpp"
#include "cairn/tree/describe.hpp"
#include "cairn/tree/std_leaves.hpp"
#include "cairn/tree/std_nodes.hpp"
#include "cairn/tree/walk.hpp"
#include "cairn/tree/ops.hpp"
#include "cairn/leaves/array.hpp"
#include "cairn/leaves/sharded_array.hpp"
#include "cairn/leaves/thrust_leaves.hpp"
#include "cairn/leaves/device_array_view.hpp"
#include "cairn/store/store.hpp"
#include "cairn/store/posix_store.hpp"
#include "cairn/store/memory_store.hpp"
#include "cairn/coordination/coordinator.hpp"
#include "cairn/coordination/thread_coordinator.hpp"
#include "cairn/checkpoint/options.hpp"
#include "cairn/checkpoint/save.hpp"
#include "cairn/checkpoint/load.hpp"
#include "cairn/checkpoint/items.hpp"
#include "cairn/manager/policies.hpp"
#include "cairn/manager/checkpointer.hpp"

#if !defined(CAIRN_NO_EIGEN) && (__has_include(<Eigen/Core>) || __has_include(<eigen3/Eigen/Core>))
#include "cairn/leaves/eigen.hpp"
#endif

// cereal support for the standard types cairn's trees are made of, so that CAIRN_TREE structs
// serialize with cereal archives out of the box.
#include <cereal/types/array.hpp>
#include <cereal/types/deque.hpp>
#include <cereal/types/map.hpp>
#include <cereal/types/optional.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/tuple.hpp>
#include <cereal/types/unordered_map.hpp>
#include <cereal/types/utility.hpp>
#include <cereal/types/vector.hpp>
