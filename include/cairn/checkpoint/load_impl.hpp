// SPDX-License-Identifier: Apache-2.0
// The runtime of a load (load_planned, metadata), on checkpoint/load_protocol.hpp. Compiled in every translation unit that includes cairn/cairn.hpp, or once
// with CAIRN_SEPARATE_COMPILATION (see docs/compile-time.md).
#pragma once

#include <functional>
#include <string>

#include "cairn/checkpoint/load.hpp"
#include "cairn/checkpoint/load_protocol.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// Whether the checkpoint at `key` is another commit than `opened` (or cannot be read now): an
// overwrite replaced it while a load read it.
inline bool replaced_since(const Store& store, const std::string& key, std::uint64_t opened) {
  if (opened == 0) return false;
  try {
    return read_metadata_text(store, store.readable_checkpoint(normalize_key(key))).commit != opened;
  } catch (const Error&) {
    return true;  // mid-replacement (the fallback's moment without a checkpoint at the path)
  }
}

CAIRN_API LoadReport load_planned(const Store& store, const std::string& key, const LoadOptions& options, bool per_rank,
                                  FunctionRef<LoadPlan(const StoredIndex&)> plan_fn) {
  std::uint64_t opened = 0;  // the commit whose marker the load read, even if it failed after
  auto open = [&] { return open_checkpoint(store, key, options.coordinator, &opened); };
  if (options.coordinator) return load_opened(store, open, options, per_rank, plan_fn);
  // A load racing an overwrite of its checkpoint may open the old one and read files of the
  // new one (an overwrite swaps the whole directory between the load's reads): their checks
  // then fail (corrupt, or a file gone). When the checkpoint at the path is another commit than
  // the one opened, the load runs once more, on the new one, so that a reader during an
  // overwrite gets the old checkpoint or the new one, not an error. Damage that is not a
  // replacement fails as before. The open itself can race too (the marker of one commit, the
  // metadata of the next): the marker's commit is known as soon as it is read. A retry can
  // race the next overwrite in turn (a writer overwriting in a tight loop did that to one load
  // in 3,000 under AddressSanitizer), so up to `attempts` runs, each only after the checkpoint
  // was seen to be another commit. (With a coordinator every rank would have to agree to
  // retry: not done.)
  constexpr int attempts = 5;
  for (int attempt = 1;; ++attempt) {
    opened = 0;
    try {
      return load_opened(store, open, options, per_rank, plan_fn);
    } catch (const Error& e) {
      const bool may_be_replaced =
          e.kind() == ErrorKind::corrupt || e.kind() == ErrorKind::not_found || e.kind() == ErrorKind::io;
      if (attempt == attempts || !may_be_replaced || !replaced_since(store, key, opened)) throw;
    }
  }
}

CAIRN_API void load_value(const Store& store, const std::string& key, const LoadOptions& options,
                          FunctionRef<LoadPlan(const StoredIndex&)> plan) {
  load_planned(store, key, options, false, plan);
}

}  // namespace detail

CAIRN_API CheckpointMetadata metadata(const Location& location) {
  const Store& store = location.store();
  detail::PrintedKeys printed;  // printed by the parser while each record is in cache
  return detail::read_metadata(store, store.readable_checkpoint(location.key()), &printed);
}

CAIRN_END_NAMESPACE
