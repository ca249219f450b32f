// SPDX-License-Identifier: Apache-2.0
// Loading safetensors files (Hugging Face's format) into a cairn tree, with the LoadOptions
// of a checkpoint: strict by default with every mismatching key listed, partial restore,
// skip globs, a subtree, casts with reports, and sharded and device targets (each reads only
// its ranges). A single `model.safetensors` or a sharded set through its
// `model.safetensors.index.json`. docs/safetensors.md is the user's guide.
#pragma once

#include <string>

#include "cairn/checkpoint/load.hpp"
#include "cairn/safetensors/options.hpp"

CAIRN_BEGIN_NAMESPACE

namespace detail {
// The runtime's safetensors load (safetensors/load_impl.hpp).
CAIRN_API LoadReport load_safetensors_planned(const Store& store, const std::string& key, const LoadOptions& options,
                                              const SafetensorsOptions& names,
                                              FunctionRef<LoadPlan(const StoredIndex&)> plan);
}  // namespace detail

// Loads the safetensors file (or index of a sharded set) at `location` (a path, a URI, or
// {store, key}) into an existing target. Checksums: safetensors has none, so
// options.verify_checksums does not apply.
template <class T>
LoadReport load_safetensors(const Location& location, T& target, const LoadOptions& options = {},
                            const SafetensorsOptions& names = {}) {
  require_tree_type<T>();
  return detail::load_safetensors_planned(location.store(), location.key(), options, names,
                                          [&](const detail::StoredIndex& index) { return detail::plan_load(target, index, options); });
}
// Loads a new T (default-constructed, then filled from the file).
template <class T>
T load_safetensors(const Location& location, const LoadOptions& options = {}, const SafetensorsOptions& names = {}) {
  T value{};
  load_safetensors(location, value, options, names);
  return value;
}

// What a safetensors file (or sharded set) holds, as checkpoint metadata: one item "state"
// whose leaves are the tensors under their key paths, "__metadata__" as the user metadata.
CAIRN_API CheckpointMetadata safetensors_metadata(const Location& location, const SafetensorsOptions& names = {});

CAIRN_END_NAMESPACE

#if CAIRN_DEFINES_RUNTIME
#include "cairn/safetensors/load_impl.hpp"
#endif
