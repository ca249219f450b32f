// SPDX-License-Identifier: Apache-2.0
// The runtime of a load (load_planned, metadata), on checkpoint/read_plan.hpp. Compiled in every translation unit that includes cairn/cairn.hpp, or once
// with CAIRN_SEPARATE_COMPILATION (see docs/compile-time.md).
#pragma once

#include <functional>
#include <string>

#include "cairn/checkpoint/load.hpp"
#include "cairn/checkpoint/read_plan.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

CAIRN_API LoadReport load_planned(const Store& store, const std::string& key, const LoadOptions& options, bool per_rank,
                                  FunctionRef<LoadPlan(const StoredIndex&)> plan_fn) {
  return load_opened(store, [&] { return open_checkpoint(store, key, options.coordinator); }, options, per_rank, plan_fn);
}

CAIRN_API void load_value(const Store& store, const std::string& key, const LoadOptions& options,
                          FunctionRef<LoadPlan(const StoredIndex&)> plan) {
  load_planned(store, key, options, false, plan);
}

}  // namespace detail

CAIRN_API CheckpointMetadata metadata(const Store& store, const std::string& key) {
  detail::PrintedKeys printed;  // printed by the parser while each record is in cache
  return detail::read_metadata(store, store.readable_checkpoint(detail::normalize_key(key)), &printed);
}

CAIRN_END_NAMESPACE
