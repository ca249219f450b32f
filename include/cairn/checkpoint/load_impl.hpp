// The runtime of a load (load_planned, metadata), on checkpoint/read_plan.hpp. Compiled in every translation unit that includes cairn/cairn.hpp, or once
// with CAIRN_SEPARATE_COMPILATION (see docs/compile-time.md).
#pragma once

#include <exception>
#include <functional>
#include <string>

#include "cairn/checkpoint/load.hpp"
#include "cairn/checkpoint/read_plan.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

CAIRN_API LoadReport load_planned(const Store& store, const std::string& key, const LoadOptions& options, bool per_rank,
                                  const std::function<LoadPlan(const StoredIndex&)>& plan_fn) {
  LoadReport report;
  std::exception_ptr failure;
  try {
    OpenedCheckpoint ck = open_checkpoint(store, key, options.coordinator);
    const std::string dir = store.describe(ck.key);
    if (const ItemRecord* item = find_load_item(ck.metadata, options, per_rank, dir, report)) {
      StoredIndex index(*item);
      LoadPlan plan = [&] {
        try {
          return plan_fn(index);
        } catch (const Error& e) {
          throw e.kind() == ErrorKind::corrupt ? e.with_file(store.describe(join_key(ck.key, metadata_file))) : e;
        }
      }();
      check_strict(plan.report, options, dir);
      DataFiles files(store, ck.key);
      execute_plan(plan, files, options);
      report = std::move(plan.report);
    }
  } catch (...) {
    if (!options.coordinator) throw;
    failure = std::current_exception();
  }
  if (options.coordinator) {
    options.coordinator->set_phase("agreeing on the load's outcome");
    agree_on_outcome(*options.coordinator, failure);
  }
  return report;
}

}  // namespace detail

CAIRN_API CheckpointMetadata metadata(const Store& store, const std::string& key) {
  return detail::read_metadata(store, store.readable_checkpoint(detail::normalize_key(key)));
}

CAIRN_END_NAMESPACE
