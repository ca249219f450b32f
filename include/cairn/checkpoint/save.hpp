// save(): a tree to a new checkpoint, in a store or at a path, by one process or by every rank
// of a coordinator (the protocol is checkpoint/commit.hpp).
#pragma once

#include <exception>
#include <string>

#include "cairn/checkpoint/commit.hpp"
#include "cairn/coordination/coordinator.hpp"
#include "cairn/store/posix_store.hpp"
#include "cairn/tree/walk.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// Runs a save on every rank: the items are written, and whatever fails on this rank still
// reaches the commit's collectives, so that every rank returns the same outcome.
template <class WriteItems>
SaveReport run_save(Store& store, const std::string& key, const SaveOptions& options, WriteItems&& write_items) {
  LocalCoordinator local;
  Coordinator& coordinator = options.coordinator ? *options.coordinator : local;
  SaveSession session(store, key, options.overwrite, coordinator);
  SaveReport report;
  report.path = session.describe();
  std::exception_ptr failure;
  try {
    write_items(session, report);
  } catch (...) {
    failure = std::current_exception();
  }
  session.commit(options.user_metadata, now_unix_ms(), failure);
  return report;
}

}  // namespace detail

// Saves a tree to a new checkpoint at `key` in `store`. Fails if a checkpoint is there,
// unless options.overwrite (which replaces it atomically). With options.coordinator, every
// rank calls this with the same tree; each writes its part, and the checkpoint commits once.
template <class T>
SaveReport save(Store& store, const std::string& key, const T& tree, const SaveOptions& options = {}) {
  require_tree_type<T>();
  return detail::run_save(store, key, options, [&](detail::SaveSession& session, SaveReport& report) {
    report = session.add_item(detail::view_tree(default_item_name, tree), options);
  });
}

// The same to a checkpoint directory at `path`.
template <class T>
SaveReport save(const std::string& path, const T& tree, const SaveOptions& options = {}) {
  PosixStore store;
  return save(store, path, tree, options);
}

CAIRN_END_NAMESPACE
