// SPDX-License-Identifier: Apache-2.0
// The light header for model definitions: CAIRN_TREE, the leaf and node traits of the
// standard containers and Eigen, and the tree operations (flatten, key_paths, leaf_count),
// without Thrust, the cast kernels, cereal or any I/O. A header that declares a model and
// annotates it includes this; the files that save and load include cairn/cairn.hpp.
#pragma once

#include "cairn/core/config.hpp"
#include "cairn/core/error.hpp"
#include "cairn/core/key_path.hpp"
#include "cairn/core/shape.hpp"
#include "cairn/dtype/dtype.hpp"
#include "cairn/dtype/float_types.hpp"
#include "cairn/tree/traits.hpp"
#include "cairn/tree/describe.hpp"
#include "cairn/tree/std_leaves.hpp"
#include "cairn/tree/std_nodes.hpp"
#include "cairn/tree/walk.hpp"
#include "cairn/tree/ops.hpp"

#if !defined(CAIRN_NO_EIGEN) && (__has_include(<Eigen/Core>) || __has_include(<eigen3/Eigen/Core>))
#include "cairn/leaves/eigen.hpp"
#endif
