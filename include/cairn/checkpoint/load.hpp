// SPDX-License-Identifier: Apache-2.0
// Loading a tree from a checkpoint: into a new object (load<T>) or into an existing target.
// The load is planned first (which stored leaf goes where, what is missing or unexpected), so
// a strict mismatch is reported with every key before any data is read. Then only the byte
// ranges of the planned leaves are read, sorted by offset (small neighbours in one read),
// each verified against its CRC32C, cast and reordered where the target differs.
#pragma once

#include <string>
#include <vector>

#include "cairn/checkpoint/load_plan.hpp"
#include "cairn/checkpoint/options.hpp"
#include "cairn/core/function_ref.hpp"
#include "cairn/checkpoint/save.hpp"
#include "cairn/format/records.hpp"
#include "cairn/store/store.hpp"
#include "cairn/tree/walk.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// The runtime's load (checkpoint/load_impl.hpp): opens the checkpoint, finds the item, has
// `plan` match its stored leaves to the target's, then reads, verifies, casts and copies the
// planned leaves. With options.coordinator, a collective: every rank returns the same outcome.
CAIRN_API LoadReport load_planned(const Store& store, const std::string& key, const LoadOptions& options, bool per_rank,
                                  FunctionRef<LoadPlan(const StoredIndex&)> plan);

// load_planned for a caller that has no use for the report (load<T>): it is dropped in the
// runtime, not in each file that loads.
CAIRN_API void load_value(const Store& store, const std::string& key, const LoadOptions& options,
                          FunctionRef<LoadPlan(const StoredIndex&)> plan);

template <class T>
LoadReport load_item(const Store& store, const std::string& key, T& target, const LoadOptions& options, bool per_rank) {
  return load_planned(store, key, options, per_rank,
                      [&](const StoredIndex& index) { return plan_load(target, index, options); });
}

}  // namespace detail

// Loads into an existing target (its "abstract" shape: types, and the sizes of fixed-size
// parts) from the checkpoint at `location` (a directory path, a URI, or {store, key}). On
// error the target is left valid but possibly partly loaded; use load<T>() for
// all-or-nothing. With options.coordinator, every rank calls it: each reads what its own
// target holds (its shards of a sharded array), and every rank returns the same outcome.
template <class T>
LoadReport load(const Location& location, T& target, const LoadOptions& options = {}) {
  require_tree_type<T>();
  return detail::load_item(location.store(), location.key(), target, options, false);
}

// Loads a new T (default-constructed, then filled from the checkpoint).
template <class T>
T load(const Location& location, const LoadOptions& options = {}) {
  require_tree_type<T>();
  T value{};
  detail::load_value(location.store(), location.key(), options,
                     [&](const detail::StoredIndex& index) { return detail::plan_load(value, index, options); });
  return value;
}

// Loads a single leaf (or subtree) by key path: load_subtree<Eigen::MatrixXf>(dir, "params/dense/kernel").
template <class T>
T load_subtree(const Location& checkpoint, const std::string& key, LoadOptions options = {}) {
  options.subtree = key;
  return load<T>(checkpoint, options);
}

// Structure, dtypes, shapes and user metadata of a checkpoint; reads no array data.
CAIRN_API CheckpointMetadata metadata(const Location& location);

CAIRN_END_NAMESPACE

// Header-only: the definitions of the entry points declared here (with
// CAIRN_SEPARATE_COMPILATION, only in the translation unit of cairn/src.hpp).
#if CAIRN_DEFINES_RUNTIME
#include "cairn/checkpoint/load_impl.hpp"
#endif
