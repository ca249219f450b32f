// SPDX-License-Identifier: Apache-2.0
// The commit protocol of a save, top to bottom, for any number of ranks:
//
//   1. The primary (rank 0) checks the overwrite rule and stages (Store::stage); every rank
//      learns the staging key, or every rank throws the primary's error.
//   2. Every rank writes the leaves it is responsible for into its own data file under the
//      staging key (checkpoint/leaf_writer.hpp): rank 0 the unsharded leaves, every rank the
//      shard boxes it is the primary holder of.
//   3. Every rank makes its data file durable and sends its chunk records (with their CRCs)
//      and its file's size to the primary, or its error: one gather, whatever the number of
//      chunks.
//   4. If every rank succeeded, the primary merges the records, writes _METADATA and
//      _USER_METADATA, then the commit marker _CHECKPOINT last, and publishes once
//      (CheckpointStaging::publish checks every file is there with its size first).
//   5. The primary broadcasts the outcome; every rank returns it: success everywhere, or the
//      same error everywhere. One rank's failure means nobody publishes, and the primary's
//      staging (with every rank's files) is removed.
//
// With one rank (LocalCoordinator) these are exactly the steps of a single-process save, and
// the collectives return at once.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <exception>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cairn/checkpoint/leaf_writer.hpp"
#include "cairn/checkpoint/snapshot.hpp"
#include "cairn/coordination/coordinator.hpp"
#include "cairn/coordination/wire.hpp"
#include "cairn/core/utc_time.hpp"
#include "cairn/format/files.hpp"
#include "cairn/store/store.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

inline std::string library_version_string() {
  return std::to_string(CAIRN_VERSION_MAJOR) + "." + std::to_string(CAIRN_VERSION_MINOR) + "." +
         std::to_string(CAIRN_VERSION_PATCH);
}

// One save of one checkpoint, on one rank. Every rank constructs it (step 1), adds the same
// items and leaves (step 2), and calls commit (steps 3 to 5).
class SaveSession {
 public:
  SaveSession(Store& store, const std::string& key, bool overwrite, Coordinator& coordinator)
      : store_(store), key_(normalize_key(key)), coordinator_(coordinator) {
    // Step 1.
    coordinator_.set_phase("staging");
    const std::string staged = run_on_primary(coordinator_, [&] {
      if (store_.parallel_reads() <= 1) {
        refuse_inside_checkpoint(store_, key_);
        staging_ = store_.stage(key_, overwrite);
        return staging_->key();
      }
      // On a store whose every look waits on a network (a bucket), whether the key lies
      // inside a checkpoint is asked alongside the store's own looks at the key
      // (CheckpointStaging::check_also), and a store that can (S3Store) answers those after
      // stage() returns: the save writes meanwhile, and a refusal reaches the commit, which
      // reports it before anything else that failed (checked). Where the key is inside a
      // checkpoint, that error comes first, as when it was asked first. With several ranks
      // the others write as soon as they learn the key: the primary has the answers before
      // it tells them.
      std::unique_ptr<CheckpointStaging> staging;
      try {
        staging = store_.stage(key_, overwrite);
      } catch (...) {
        refuse_inside_checkpoint(store_, key_);
        throw;
      }
      staging->check_also([&store = store_, key = key_] { refuse_inside_checkpoint(store, key); });
      if (coordinator_.size() > 1) staging->checked();
      staging_ = std::move(staging);
      return staging_->key();
    });
    writer_ = std::make_unique<LeafWriter>(store_, staged, coordinator_.rank(), coordinator_.size());
    metadata_.library_version = library_version_string();
  }
  SaveSession(const SaveSession&) = delete;
  SaveSession& operator=(const SaveSession&) = delete;
  // Unpublished, the primary's staging (and every file under it) is removed.
  ~SaveSession() = default;

  std::string describe() const { return store_.describe(key_); }

  // Step 2, on every rank: an item, then its leaves. A per-rank item is this rank's own
  // value (a data iterator's position, an RNG): stored as "<name>@<rank>", written by its
  // rank, and its records travel whole to the primary.
  // `leaves`: how many leaves will follow (their records are reserved at once: grown by
  // doubling, a 100,000-leaf item's records were up to 1.5x their size at once).
  void begin_item(const std::string& name, ItemKind kind, std::vector<NodeRecord> nodes, bool per_rank = false,
                  std::size_t leaves = 0) {
    const std::string stored = per_rank ? per_rank_item_name(name, coordinator_.rank()) : name;
    for (const auto* list : {&metadata_.items, &per_rank_items_})
      for (const auto& i : *list)
        if (i.name == stored) throw Error(ErrorKind::invalid_argument, "two items named '" + stored + "'", describe());
    ItemRecord item;
    item.name = stored;
    item.kind = kind;
    item.nodes = std::move(nodes);
    auto& list = per_rank ? per_rank_items_ : metadata_.items;
    list.push_back(std::move(item));
    current_ = &list.back();
    current_->leaves.reserve(leaves);
    current_per_rank_ = per_rank;
  }
  // Casts on save apply to tree items only.
  void add_leaf(const KeyPath& p, const LeafView& view, const SaveOptions& options, SaveReport& report) {
    ItemRecord& item = *current_;
    static const SaveOptions no_casts;
    try {
      item.leaves.push_back(writer_->write_leaf(p, view, item.kind == ItemKind::tree ? options : no_casts, report,
                                                current_per_rank_));
    } catch (const Error& e) {
      throw e.with_key(p.str()).with_file(describe());
    }
    ++report.leaves;
  }
  // Takes the snapshot apart as it goes: each leaf's view and key path are freed once the leaf
  // is written, so that its record's copies reuse that memory (at 100,000 leaves the two
  // copies together were 20 MB of a save's peak).
  SaveReport add_item(ItemSnapshot&& snapshot, const SaveOptions& options) {
    SaveReport report;
    report.path = describe();
    check_distinct_key_paths(snapshot, describe());
    begin_item(snapshot.name, snapshot.kind, std::move(snapshot.nodes), snapshot.per_rank, snapshot.leaves.size());
    for (auto& leaf : snapshot.leaves) {
      LeafView fetched;
      add_leaf(leaf.path, leaf_data(leaf, fetched), options, report);
      leaf = SnapshotLeaf{};
    }
    return report;
  }

  // This rank's data file made durable (the end of step 2). Safe to call from a background
  // thread (no collective); commit calls it if nobody did.
  void finish_writes() {
    if (DataFileWriter* data = writer_->data(); data && !finished_) data->finish();
    finished_ = true;
  }

  // Steps 3 to 5, on every rank. `failure` is this rank's error from step 2, if any: then
  // nothing is published and every rank throws. `created_unix_ms` is the time recorded in
  // the metadata (a Checkpointer passes the one it also keeps in its step's metadata).
  void commit(const Json& user_metadata, std::int64_t created_unix_ms, std::exception_ptr failure = nullptr) {
    // Step 3.
    coordinator_.set_phase("gathering chunk records");
    WireWriter mine;
    if (!failure) {
      try {
        mine.u64(1);
        if (coordinator_.size() > 1) mine.u64(tree_digest());
        encode_records(mine);
      } catch (...) {
        failure = std::current_exception();
      }
    }
    writer_->drop();  // closed before the primary may remove the staging
    if (failure) {
      mine = WireWriter();
      mine.u64(0);
      encode_error(mine, as_error(failure));
    }
    const std::vector<std::string> reports = coordinator_.gather(mine.take());

    // Step 4.
    WireWriter outcome;
    std::exception_ptr publish_failure;
    if (coordinator_.is_primary()) {
      try {
        if (failure) std::rethrow_exception(failure);
        if (const int differs = first_rank_with_another_tree(reports); differs > 0) {
          outcome.u64(2).u64(static_cast<std::uint64_t>(differs));  // named in a round of its own, below
        } else {
          publish(reports, user_metadata, created_unix_ms);
          outcome.u64(1);
        }
      } catch (...) {
        publish_failure = std::current_exception();
        // The staging's looks at the key, where the store answers them after stage()
        // (CheckpointStaging::checked; the publish waited for them where it got that far):
        // their refusal is the save's error, whatever failed while they were out (a leaf, the
        // metadata), as when stage() made them before anything was written.
        try {
          if (staging_) staging_->checked();
        } catch (...) {
          publish_failure = std::current_exception();
          if (failure) failure = publish_failure;
        }
        outcome = WireWriter();
        outcome.u64(0);
        encode_error(outcome, as_error(publish_failure));
      }
      staging_.reset();  // unpublished, removed here: every rank closed its files before the gather
    }

    // Step 5.
    coordinator_.set_phase("agreeing on the outcome");
    const std::string agreed = coordinator_.broadcast(outcome.take());
    if (failure) std::rethrow_exception(failure);
    if (publish_failure) std::rethrow_exception(publish_failure);
    WireReader in(agreed);
    const std::uint64_t status = in.u64();
    if (status == 2) throw tree_difference(static_cast<int>(in.u64()));
    if (status != 1) throw decode_error(in);
  }

 private:
  // Every rank must save the same tree: the same keys, dtypes, shapes, orders and shardings
  // (per-rank items aside). Each rank sends a digest of its tree in the gather; a rank whose
  // digest differs from the primary's fails the save on every rank, and only then do the ranks
  // spend a round naming the difference (tree_difference). Without it, a rank whose plain
  // leaf or sharded array had another shape committed silently with rank 0's.
  std::uint64_t tree_digest() const {
    WireDigest h;
    for (const auto& item : metadata_.items) {
      h.str(item.name);
      const std::uint64_t leaves = item.leaves.size();
      h.bytes(&leaves, sizeof leaves);
      for (const auto& l : item.leaves) {
        for (const auto& e : l.path.entries()) {
          h.bytes(&e.kind, sizeof e.kind);
          h.str(e.name);
          h.bytes(&e.number, sizeof e.number);
        }
        const unsigned char kinds[3] = {static_cast<unsigned char>(l.dtype), static_cast<unsigned char>(l.order),
                                        static_cast<unsigned char>(l.sharding ? 1 : 0)};
        h.bytes(kinds, sizeof kinds);
        const std::uint64_t rank = l.shape.size();
        h.bytes(&rank, sizeof rank);
        h.bytes(l.shape.data(), l.shape.size() * sizeof(std::int64_t));
        if (l.sharding) {
          h.str(l.sharding->spec.str());
          for (const auto& a : l.sharding->mesh.axes()) {
            h.str(a.name);
            h.bytes(&a.size, sizeof a.size);
          }
        }
      }
    }
    return h.value;
  }
  // One line per leaf of the tree as a rank describes it, for naming the first difference.
  std::vector<std::pair<std::string, std::string>> tree_lines() const {
    std::vector<std::pair<std::string, std::string>> lines;
    for (const auto& item : metadata_.items)
      for (const auto& l : item.leaves) {
        std::string what = std::string(dtype_name(l.dtype)) + to_string(l.shape);
        if (l.shape.size() >= 2 && l.order == Order::F) what += " (column-major)";
        if (l.sharding) what += " (sharded as " + l.sharding->spec.str() + " over " + l.sharding->mesh.describe() + ")";
        lines.emplace_back((metadata_.items.size() > 1 ? item.name + ": " : std::string()) + l.key(), std::move(what));
      }
    return lines;
  }
  // The primary's step 4: the first rank whose digest differs from its own (0: none, or a
  // rank failed, which publish reports).
  int first_rank_with_another_tree(const std::vector<std::string>& reports) const {
    if (reports.size() < 2) return 0;
    const std::uint64_t mine = tree_digest();
    for (std::size_t r = 1; r < reports.size(); ++r) {
      WireReader in(reports[r]);
      if (in.u64() != 1) return 0;
    }
    for (std::size_t r = 1; r < reports.size(); ++r) {
      WireReader in(reports[r]);
      in.u64();
      if (in.u64() != mine) return static_cast<int>(r);
    }
    return 0;
  }
  // Step 5 when rank `r`'s tree differs (every rank): the primary sends its description, rank
  // r finds the first difference, and every rank returns the same error naming it.
  Error tree_difference(int r) {
    coordinator_.set_phase("naming where the ranks' trees differ");
    WireWriter w;
    if (coordinator_.is_primary()) {
      const auto lines = tree_lines();
      w.u64(lines.size());
      for (const auto& [key, what] : lines) w.str(key).str(what);
    }
    const std::string primary_lines = coordinator_.broadcast(w.take());
    std::string found;
    if (coordinator_.rank() == r) {
      WireReader in(primary_lines);
      std::vector<std::pair<std::string, std::string>> theirs(static_cast<std::size_t>(in.u64()));
      for (auto& [key, what] : theirs) {
        key = in.str();
        what = in.str();
      }
      const auto mine = tree_lines();
      const std::string who = "rank " + std::to_string(r);
      for (std::size_t i = 0; i < std::max(mine.size(), theirs.size()) && found.empty(); ++i) {
        if (i >= mine.size()) found = who + " has no leaf '" + theirs[i].first + "', which rank 0 has";
        else if (i >= theirs.size()) found = who + " has a leaf '" + mine[i].first + "' that rank 0 has not";
        else if (mine[i].first != theirs[i].first)
          found = who + " has the leaf '" + mine[i].first + "' where rank 0 has '" + theirs[i].first + "'";
        else if (mine[i].second != theirs[i].second)
          found = "'" + mine[i].first + "' is " + theirs[i].second + " on rank 0 but " + mine[i].second + " on " + who;
      }
      if (found.empty()) found = who + "'s tree differs from rank 0's";
    }
    const std::vector<std::string> all = coordinator_.gather(found);
    const std::string message = coordinator_.broadcast(coordinator_.is_primary() ? all.at(static_cast<std::size_t>(r)) : "");
    return Error(ErrorKind::invalid_argument, message + ": every rank must save the same tree (the same keys, dtypes, "
                 "shapes and shardings); nothing was saved", describe());
  }

  // This rank's data file and the chunks it wrote, by item and leaf position.
  void encode_records(WireWriter& w) {
    finish_writes();
    DataFileWriter* data = writer_->data();
    w.str(data ? data->name() : std::string()).u64(data ? data->size() : 0);
    std::uint64_t leaves = 0;
    for (const auto& item : metadata_.items) leaves += item.leaves.size();
    w.u64(leaves);
    if (coordinator_.is_primary()) return;  // the primary has its records at hand
    w.u64(per_rank_items_.size());
    for (const auto& item : per_rank_items_) w.str(item_to_json(item));
    std::uint64_t with_chunks = 0;
    for (const auto& item : metadata_.items)
      for (const auto& l : item.leaves) with_chunks += !l.chunks.empty();
    w.u64(with_chunks);
    for (std::size_t i = 0; i < metadata_.items.size(); ++i)
      for (std::size_t j = 0; j < metadata_.items[i].leaves.size(); ++j) {
        const LeafRecord& l = metadata_.items[i].leaves[j];
        if (l.chunks.empty()) continue;
        w.u64(i).u64(j).str(l.key()).u64(l.chunks.size());
        for (const auto& c : l.chunks) {
          w.str(c.file).u64(c.offset).u64(c.nbytes).u64(c.crc32c).shape(c.start).shape(c.shape);
          w.u64(c.blocks ? c.blocks->block_bytes : 0);
          if (c.blocks) w.u32s(c.blocks->crc32c);
        }
      }
  }

  // The primary's step 4.
  void publish(const std::vector<std::string>& reports, const Json& user_metadata, std::int64_t created_unix_ms) {
    if (!user_metadata.is_object() && !user_metadata.is_null())
      throw Error(ErrorKind::invalid_argument, "user metadata must be a JSON object", describe());
    std::uint64_t leaves = 0;
    for (const auto& item : metadata_.items) leaves += item.leaves.size();
    std::map<std::string, std::uint64_t> expected;  // every file the checkpoint needs, and its size
    std::vector<ItemRecord> ranks_items;            // every rank's per-rank items, in rank order
    for (std::size_t r = 0; r < reports.size(); ++r) {
      const std::string rank = "rank " + std::to_string(r);
      WireReader in(reports[r]);
      if (in.u64() != 1) {
        const Error e = decode_error(in);
        throw Error(e.kind(), rank + " failed: " + e.message(), e.file(), e.key_path());
      }
      if (reports.size() > 1) in.u64();  // the tree's digest, compared before
      const std::string file = in.str();
      const std::uint64_t size = in.u64();
      if (!file.empty()) {
        expected[file] = size;
        metadata_.data_files.push_back(file);
      }
      if (const std::uint64_t n = in.u64(); n != leaves)
        throw Error(ErrorKind::invalid_argument, rank + " saved " + std::to_string(n) + " leaves, rank 0 saved " +
                    std::to_string(leaves) + ": every rank must save the same tree", describe());
      if (r == 0) {
        for (auto& item : per_rank_items_) ranks_items.push_back(std::move(item));
        continue;
      }
      for (std::uint64_t k = 0, n = in.u64(); k < n; ++k) {
        ItemRecord item = item_from_json(in.str(), describe());
        if (item.name.size() < 2 || item.name.substr(item.name.rfind('@') + 1) != std::to_string(r))
          throw Error(ErrorKind::invalid_argument, rank + " sent the per-rank item '" + item.name + "' of another rank",
                      describe());
        ranks_items.push_back(std::move(item));
      }
      for (std::uint64_t k = 0, n = in.u64(); k < n; ++k) {
        const std::uint64_t i = in.u64(), j = in.u64();
        const std::string key = in.str();
        if (i >= metadata_.items.size() || j >= metadata_.items[i].leaves.size() ||
            metadata_.items[i].leaves[j].key() != key)
          throw Error(ErrorKind::invalid_argument, rank + " saved a leaf that rank 0 does not have at the same place: "
                      "every rank must save the same tree", describe(), key);
        LeafRecord& l = metadata_.items[i].leaves[j];
        for (std::uint64_t c = 0, chunks = in.u64(); c < chunks; ++c) {
          ChunkRecord chunk;
          chunk.file = in.str();
          chunk.offset = in.u64();
          chunk.nbytes = in.u64();
          chunk.crc32c = static_cast<std::uint32_t>(in.u64());
          chunk.start = in.shape();
          chunk.shape = in.shape();
          if (const std::uint64_t block = in.u64(); block != 0) chunk.blocks = BlockChecksums{block, in.u32s()};
          l.chunks.push_back(std::move(chunk));
        }
      }
    }
    for (auto& item : ranks_items) {
      for (const auto& i : metadata_.items)
        if (i.name == item.name) throw Error(ErrorKind::invalid_argument, "two items named '" + item.name + "'", describe());
      metadata_.items.push_back(std::move(item));
    }
    // Records that came from other ranks are checked as a reader will check them (boxes
    // inside their arrays, covering them without overlap, files and ranges consistent): a
    // rank with another mesh, or a mesh whose processes disagree with the ranks, fails here
    // rather than publishing a checkpoint no one can load.
    if (reports.size() > 1) {
      try {
        validate_metadata(metadata_, describe());
      } catch (const Error& e) {
        throw Error(ErrorKind::invalid_argument, "the ranks' parts do not fit together (do all ranks use the same "
                    "meshes and specs?): " + e.message(), e.file(), e.key_path());
      }
    }
    metadata_.created_unix_ms = created_unix_ms;
    metadata_.created = iso8601_utc(created_unix_ms);
    int version = 0;
    const std::string meta = metadata_to_json(metadata_, &version);
    const std::string user = user_metadata.is_null() ? std::string("{}") : user_metadata.dump();
    const std::string marker = marker_json({meta.size(), crc32c(meta.data(), meta.size())},
                                           {user.size(), crc32c(user.data(), user.size())}, version).dump();
    const std::string& staged = staging_->key();
    // One after another, the marker last, on a filesystem; at once on an object store, whose
    // commit is the marker it writes at the publish (Store::write_whole_each).
    store_.write_whole_each({{join_key(staged, metadata_file), meta},
                             {join_key(staged, user_metadata_file), user},
                             {join_key(staged, marker_file), marker}});
    expected[metadata_file] = meta.size();
    expected[user_metadata_file] = user.size();
    expected[marker_file] = marker.size();
    staging_->publish(expected);
  }

  Store& store_;
  std::string key_;
  Coordinator& coordinator_;
  std::unique_ptr<CheckpointStaging> staging_;  // the primary's
  std::unique_ptr<LeafWriter> writer_;
  CheckpointMetadata metadata_;
  std::vector<ItemRecord> per_rank_items_;  // this rank's, with their stored names
  ItemRecord* current_ = nullptr;           // the item being written (re-pointed by begin_item)
  bool current_per_rank_ = false;
  bool finished_ = false;
};

}  // namespace detail
CAIRN_END_NAMESPACE
