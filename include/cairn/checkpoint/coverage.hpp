// SPDX-License-Identifier: Apache-2.0
// Whether the boxes a process writes of a sharded leaf cover the whole array, and the one error
// every writer gives when they do not (a checkpoint saved alone, a safetensors export): a mesh
// that spans processes holds part of the array elsewhere, and a file holding only this
// process's part would load as holes (or, in a reused buffer, as bytes of another tensor).
#pragma once

#include <cstdint>
#include <string>

#include "cairn/core/error.hpp"
#include "cairn/core/named_sharding.hpp"
#include "cairn/tree/traits.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// `covered` of the array's elements are in the boxes this process can write; `remedy` says what
// the writer's caller can do about it.
inline Error uncovered_leaf_error(std::uint64_t covered, const LeafView& view, const std::string& remedy) {
  std::string spans;
  if (view.sharding && view.sharding->mesh.process_count() > 1)
    spans = " (its mesh spans " + std::to_string(view.sharding->mesh.process_count()) + " processes)";
  return Error(ErrorKind::invalid_argument, "this process holds " + std::to_string(covered) + " of the array's " +
               std::to_string(element_count(view.shape)) + " elements" + spans + ": " + remedy);
}

inline const char* save_without_coordinator_remedy =
    "every process that holds a part must take part in the save: pass SaveOptions::coordinator (cairn/mpi.hpp) "
    "on every rank, or gather the array onto this process (ShardedArray::gather) first";

}  // namespace detail
CAIRN_END_NAMESPACE
