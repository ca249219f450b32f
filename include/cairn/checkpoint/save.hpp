// SPDX-License-Identifier: Apache-2.0
// save(): a tree to a new checkpoint, in a store or at a path, by one process or by every rank
// of a coordinator (the protocol is checkpoint/commit.hpp). The templates here only take the
// tree's views; the runtime that writes and commits them is checkpoint/save_impl.hpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cairn/checkpoint/options.hpp"
#include "cairn/core/function_ref.hpp"
#include "cairn/checkpoint/snapshot.hpp"
#include "cairn/store/location.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// Writes the items' snapshots as one new checkpoint at `key` and commits it (on every rank of
// options.coordinator, each with its own part). `snapshot` runs once the save has begun, so
// that its error (a leaf that cannot be viewed) reaches every rank through the commit.
CAIRN_API SaveReport save_snapshots(Store& store, const std::string& key,
                                    FunctionRef<std::vector<ItemSnapshot>()> snapshot, const SaveOptions& options);

// save_snapshots of one tree item, the default one, that `view` fills with the tree's views.
CAIRN_API SaveReport save_tree(Store& store, const std::string& key, FunctionRef<void(ItemSnapshot&)> view,
                               const SaveOptions& options);

class SaveJob;     // checkpoint/save_job.hpp
class SaveWorker;

}  // namespace detail

// A save running in the background (save_async). wait() returns its report, or throws its
// error; the destructor waits too (printing an error it can no longer throw), so a save is
// never left half-done by a handle going out of scope. Move-only.
class AsyncSave {
 public:
  AsyncSave() = default;
  AsyncSave(AsyncSave&& other) noexcept = default;
  // Waits for the save this handle holds, then takes the other's.
  CAIRN_API AsyncSave& operator=(AsyncSave&& other);
  CAIRN_API ~AsyncSave();
  // With a coordinator of several ranks, a collective: the checkpoint commits here.
  CAIRN_API SaveReport wait();
  // Whether a save is held that wait() has not finished.
  bool pending() const { return worker_ != nullptr; }

  explicit AsyncSave(std::shared_ptr<detail::SaveWorker> worker) : worker_(std::move(worker)) {}

 private:
  std::shared_ptr<detail::SaveWorker> worker_;
};

namespace detail {
// save_snapshots in the background: returns once the snapshot is taken (within
// options.async_memory_budget). The save shares the location's store (a store given by
// reference must outlive it).
CAIRN_API AsyncSave save_snapshots_async(const Location& location,
                                         FunctionRef<std::vector<ItemSnapshot>()> snapshot, const SaveOptions& options);
}  // namespace detail

// Saves a tree to a new checkpoint at `location` (a directory path, a URI, or {store, key}).
// Fails if a checkpoint is there, unless options.overwrite (which replaces it atomically).
// With options.coordinator, every rank calls this with the same tree; each writes its part,
// and the checkpoint commits once.
template <class T>
SaveReport save(const Location& location, const T& tree, const SaveOptions& options = {}) {
  require_tree_type<T>();
  return detail::save_tree(location.store(), location.key(), [&](detail::ItemSnapshot& s) { detail::view_tree_into(s, tree); },
                           options);
}

// Like save, but returns once the tree is snapshotted (copied to host memory, within
// options.async_memory_budget); writing, fsync and the commit run on a background thread, and
// the caller may change the tree at once. The returned handle's wait() gives the report or the
// error (Orbax's AsyncCheckpointer, PyTorch DCP's async_save). With a coordinator every rank
// calls it, and wait() is where the checkpoint commits (a collective). A store given by
// reference ({store, key}) must outlive the save; one made from a URI is kept alive by it.
template <class T>
[[nodiscard]] AsyncSave save_async(const Location& location, const T& tree, const SaveOptions& options = {}) {
  require_tree_type<T>();
  return detail::save_snapshots_async(
      location,
      [&] {
        std::vector<detail::ItemSnapshot> items(1);  // moved in: braces would copy every leaf's view
        items[0] = detail::view_tree(default_item_name, tree);
        return items;
      },
      options);
}

CAIRN_END_NAMESPACE

// Header-only: the definitions of the entry points declared here (with
// CAIRN_SEPARATE_COMPILATION, only in the translation unit of cairn/src.hpp).
#if CAIRN_DEFINES_RUNTIME
#include "cairn/checkpoint/save_impl.hpp"
#endif
