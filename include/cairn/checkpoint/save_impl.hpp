// The runtime of save(): a session per save that writes every item's leaves and commits them
// once on every rank. Compiled in every translation unit that includes cairn/cairn.hpp, or
// once with CAIRN_SEPARATE_COMPILATION (see docs/compile-time.md).
#pragma once

#include <exception>
#include <string>
#include <vector>

#include "cairn/checkpoint/commit.hpp"
#include "cairn/checkpoint/save.hpp"
#include "cairn/coordination/coordinator.hpp"
#include "cairn/store/posix_store.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// Whatever fails on this rank while writing still reaches the commit's collectives, so that
// every rank returns the same outcome.
CAIRN_API SaveReport save_snapshots(Store& store, const std::string& key,
                                    FunctionRef<std::vector<ItemSnapshot>()> snapshot, const SaveOptions& options) {
  LocalCoordinator local;
  Coordinator& coordinator = options.coordinator ? *options.coordinator : local;
  SaveSession session(store, key, options.overwrite, coordinator);
  SaveReport total;
  total.path = session.describe();
  std::exception_ptr failure;
  try {
    // Before any leaf is written (the commit checks it again, on the primary).
    if (!options.user_metadata.is_object() && !options.user_metadata.is_null())
      throw Error(ErrorKind::invalid_argument, "user metadata must be a JSON object", session.describe());
    for (auto& item : snapshot()) {
      SaveReport r = session.add_item(std::move(item), options);
      total.leaves += r.leaves;
      total.bytes_written += r.bytes_written;
      total.cast.insert(total.cast.end(), r.cast.begin(), r.cast.end());
    }
  } catch (...) {
    failure = std::current_exception();
  }
  session.commit(options.user_metadata, now_unix_ms(), failure);
  return total;
}

CAIRN_API SaveReport save_tree(Store& store, const std::string& key, FunctionRef<void(ItemSnapshot&)> view,
                               const SaveOptions& options) {
  return save_snapshots(
      store, key,
      [&] {
        // Moved in, not listed in braces: an initializer list would copy every leaf's view
        // (20 MB of a 100,000-leaf save's peak).
        std::vector<ItemSnapshot> items(1);
        items[0].name = default_item_name;
        view(items[0]);
        return items;
      },
      options);
}

CAIRN_API Store& path_store() {
  static PosixStore store;
  return store;
}

}  // namespace detail
CAIRN_END_NAMESPACE
