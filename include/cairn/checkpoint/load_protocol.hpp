// SPDX-License-Identifier: Apache-2.0
// The load protocol, step by step (the mirror of commit.hpp for saves). A load of the
// checkpoint at a key, by one process or by every rank of a coordinator:
//
//   1. Resolve: the store says which key to read (Store::readable_checkpoint: the key itself,
//      or where an interrupted overwrite left the previous checkpoint). With several ranks only
//      the primary resolves and reads steps 1-2, and broadcasts the bytes (open_checkpoint).
//   2. Read and verify the metadata: the commit marker, then _METADATA and _USER_METADATA,
//      each checked against the size and CRC32C the marker records (format/verified_read.hpp).
//   3. Read ahead: the data files start coming into memory while the metadata is parsed
//      (checkpoint/read_ahead.hpp; one process only).
//   4. Parse and cross-check the records (format/metadata_json.hpp, format/validation.hpp).
//   5. Find the item (find_load_item: options.item, or this rank's value of a per-rank item).
//   6. Plan: the target's leaves matched to the stored ones by key path
//      (checkpoint/load_plan.hpp, through a StoredIndex), which also reports missing and
//      unexpected keys and the casts.
//   7. Strict check: with strict options, a missing or unexpected key fails here, with every
//      key named, before any data is read (check_strict).
//   8. Read: the planned leaves only, in file order, verified, cast and copied
//      (checkpoint/read_scheduler.hpp).
//   9. Agree: with a coordinator, every rank returns the same outcome (agree_on_outcome).
//
// load_planned (load_impl.hpp) runs load_opened with open_checkpoint, and once more, from
// step 1, when a single process's read failed because the checkpoint was replaced under it
// (an overwrite racing the load); the safetensors import runs it with its own open
// (safetensors/load_impl.hpp), so steps 5-9 are the same code.
#pragma once

#include <algorithm>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cairn/checkpoint/load_plan.hpp"
#include "cairn/checkpoint/read_ahead.hpp"
#include "cairn/checkpoint/read_scheduler.hpp"
#include "cairn/checkpoint/stored_index.hpp"
#include "cairn/core/function_ref.hpp"
#include "cairn/coordination/wire.hpp"
#include "cairn/format/files.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

inline void check_strict(const LoadReport& r, const LoadOptions& options, const std::string& dir) {
  const bool bad_missing = !options.allow_missing && !r.missing.empty();
  const bool bad_unexpected = !options.allow_unexpected && !r.unexpected.empty();
  if (!bad_missing && !bad_unexpected) return;
  std::string msg = "the target and the checkpoint have different keys.";
  auto list = [&](const std::vector<std::string>& keys) {
    std::string s;
    // (The key "" is a tree that is one leaf: a vector loaded from a checkpoint of a struct.)
    for (std::size_t i = 0; i < keys.size(); ++i) s += (i ? ", " : " ") + (keys[i].empty() ? std::string("(the root)") : keys[i]);
    return s;
  };
  if (bad_missing)
    msg += " In the target but not in the checkpoint (" + std::to_string(r.missing.size()) + "):" + list(r.missing) + ".";
  if (bad_unexpected)
    msg += " In the checkpoint but not in the target (" + std::to_string(r.unexpected.size()) + "):" +
           list(r.unexpected) + ".";
  msg += " Pass LoadOptions::partial(), allow_missing / allow_unexpected, or skip globs to load anyway.";
  throw Error(ErrorKind::structure_mismatch, msg, dir);
}

// An import's leaves that cairn cannot read (ItemRecord::unread: a safetensors tensor of a
// dtype cairn does not have) are in no index, so the planner saw a target leaf for one as
// missing and never saw the stored one. A target leaf for one is refused with the reason; one
// the target does not take is reported unexpected, so that a strict load refuses it (saying
// why) and a partial one says it left it. The subtree and skip globs leave them out as they
// leave out any stored leaf.
inline void account_unread(const ItemRecord& item, const LoadOptions& options, LoadReport& report, const std::string& dir) {
  if (item.unread.empty()) return;
  const std::string prefix = resolve_key(options.subtree, [&](const std::string& k) { return item.names(k); });
  std::string refused;
  std::string first;
  std::size_t count = 0;
  for (const UnreadLeaf& u : item.unread) {
    const std::string key = u.path.str();
    if (!key_path_has_prefix(key, prefix)) continue;
    std::string rel = prefix.empty() ? key : key.substr(std::min(key.size(), prefix.size() + 1));
    if (std::any_of(options.skip.begin(), options.skip.end(), [&](const std::string& g) { return glob_matches(g, rel); }))
      continue;
    if (const auto m = std::find(report.missing.begin(), report.missing.end(), rel); m != report.missing.end())
      throw Error(ErrorKind::dtype_mismatch, "the target has a leaf here, and the stored one cannot be read: " + u.reason, dir, key);
    refused += (count ? ", " : " ") + rel + " (" + u.reason + ")";
    if (!count++) first = key;
    report.unexpected.push_back(std::move(rel));
  }
  if (count && !options.allow_unexpected)
    throw Error(ErrorKind::dtype_mismatch, std::to_string(count) + " stored " + (count == 1 ? "leaf" : "leaves") +
                " cannot be read:" + refused + ". Leave " + (count == 1 ? "it" : "them") +
                " out with LoadOptions::skip globs, or load with allow_unexpected or LoadOptions::partial()", dir, first);
}

// The checkpoint a load reads and its metadata. With several ranks the primary resolves the
// key and reads the metadata files, and broadcasts their bytes; every rank parses them. (A
// shared filesystem then sees one reader, not one per rank, and only the primary may repair
// an interrupted overwrite; see docs/multiprocess.md for the measurement.)
struct OpenedCheckpoint {
  std::string key;  // where the data files are
  CheckpointMetadata metadata;
  std::string records;  // what a corrupt record found while planning names: the metadata file
  std::string name;     // what other errors name: the checkpoint directory (empty: store.describe(key))
  PrintedKeys leaf_keys;  // by item, as the parser printed them (empty: the index prints them)
  std::unique_ptr<StoreReadAhead> read_ahead;  // the data files fetched while the metadata is parsed, if at all
  // Data files read from another key than key/name: a safetensors file reached through a
  // symbolic link (Store::follow_link). Never filled for a checkpoint's own files.
  std::map<std::string, std::string> file_keys;
};
// What a load's errors about the checkpoint as a whole (its keys, its items) name: the
// location the caller gave, not the generation an object store reads it from
// (`s3://b/run/5`, not `s3://b/run/5/.cairn-gen-...`); errors about a file name the file.
inline std::string name_of(const Store& store, const std::string& key, const std::string& readable) {
  const std::string given = normalize_key(key);
  return readable == given ? std::string() : store.describe(given);
}

// `commit_seen`: as read_metadata_text's (one process only).
inline OpenedCheckpoint open_checkpoint(const Store& store, const std::string& key, Coordinator* coordinator,
                                        std::uint64_t* commit_seen = nullptr) {
  if (!coordinator || coordinator->size() == 1) {
    const std::string ckpt = store.readable_checkpoint_to_load(normalize_key(key));
    OpenedCheckpoint c;
    c.key = ckpt;
    const MetadataText t = read_metadata_text(store, ckpt, commit_seen);
    c.read_ahead = start_read_ahead(store, ckpt, t.metadata);
    c.metadata = parse_metadata(store, ckpt, t, &c.leaf_keys);
    c.records = store.describe(join_key(ckpt, metadata_file));
    c.name = name_of(store, key, ckpt);
    return c;
  }
  coordinator->set_phase("reading the metadata");
  const std::string got = run_on_primary(*coordinator, [&] {
    const std::string ckpt = store.readable_checkpoint_to_load(normalize_key(key));
    MetadataText t = read_metadata_text(store, ckpt);
    return WireWriter().str(ckpt).str(t.metadata).str(t.user).take();
  });
  WireReader in(got);
  OpenedCheckpoint c;
  c.key = in.str();
  MetadataText t;
  t.metadata = in.str();
  t.user = in.str();
  c.metadata = parse_metadata(store, c.key, t, &c.leaf_keys);
  c.records = store.describe(join_key(c.key, metadata_file));
  c.name = name_of(store, key, c.key);
  return c;
}

// The stored item a load reads: options.item, or for a per-rank item this rank's value of it
// ("<item>@<rank>"), which exists only if the checkpoint was saved by as many ranks as load
// it. Null: the item is left as it is and reported missing (allow_missing).
inline const ItemRecord* find_load_item(const CheckpointMetadata& meta, const LoadOptions& options, bool per_rank,
                                        const std::string& dir, LoadReport& report) {
  if (!per_rank) {
    const ItemRecord* item = meta.find_item(options.item);
    if (!item) throw Error(ErrorKind::not_found, "the checkpoint has no item '" + options.item + "'", dir);
    return item;
  }
  const int rank = options.coordinator ? options.coordinator->rank() : 0;
  const int ranks = options.coordinator ? options.coordinator->size() : 1;
  int saved = 0;
  while (meta.find_item(per_rank_item_name(options.item, saved))) ++saved;
  if (saved == ranks) return meta.find_item(per_rank_item_name(options.item, rank));
  if (options.allow_missing) {
    report.missing.push_back(per_rank_item_name(options.item, rank));
    return nullptr;
  }
  throw Error(saved == 0 ? ErrorKind::not_found : ErrorKind::structure_mismatch,
              saved == 0 ? "the checkpoint has no per-rank item '" + options.item + "'"
                         : "item '" + options.item + "' was saved per rank by " + std::to_string(saved) +
                               " ranks and is loaded by " + std::to_string(ranks) + ": each value belongs to a rank of "
                               "the saving job. Leave it out (and restart what it holds), load one rank's value by its "
                               "stored name '" + per_rank_item_name(options.item, 0) + "', or pass allow_missing to "
                               "leave it as it is",
              dir);
}

// A load from what `open` opens (a checkpoint, or safetensors files): find the item, have
// `plan_fn` match its stored leaves to the target's, then read, verify, cast and copy. With
// options.coordinator, a collective: every rank returns the same outcome.
inline LoadReport load_opened(const Store& store, FunctionRef<OpenedCheckpoint()> open, const LoadOptions& options,
                              bool per_rank, FunctionRef<LoadPlan(const StoredIndex&)> plan_fn) {
  LoadReport report;
  std::exception_ptr failure;
  try {
    OpenedCheckpoint ck = open();
    const std::string dir = ck.name.empty() ? store.describe(ck.key) : ck.name;
    if (const ItemRecord* item = find_load_item(ck.metadata, options, per_rank, dir, report)) {
      // The index is gone before the reads begin: at 100,000 leaves it is about 15 MB, and
      // the reads are where a load's memory peaks.
      LoadPlan plan = [&] {
        try {
          const auto at = static_cast<std::size_t>(item - ck.metadata.items.data());
          const StoredIndex index(*item, at < ck.leaf_keys.size() ? std::move(ck.leaf_keys[at]) : std::vector<std::string>{});
          ck.leaf_keys.clear();
          return plan_fn(index);
        } catch (const Error& e) {
          // The planner knows keys, not files: a damaged record is the records' file's, any
          // other error (no such subtree) the checkpoint's.
          throw e.with_file(e.kind() == ErrorKind::corrupt ? ck.records : dir);
        }
      }();
      account_unread(*item, options, plan.report, dir);
      check_strict(plan.report, options, dir);
      // The read-ahead goes on ahead of the reads of a load of every stored leaf (from the
      // start of the files, as it reads); one that reads only some would compete with it.
      if (plan.leaves.size() < item->leaves.size()) ck.read_ahead.reset();
      DataFiles files(store, ck.key, &ck.file_keys);
      files.describe_as(dir);
      execute_plan(plan, files, options);
      ck.read_ahead.reset();  // stopped and joined: the reads are done
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
CAIRN_END_NAMESPACE
