// Executing a load plan: the checkpoint opened (by the primary, with several ranks), the
// strict check of the planned keys, and the planned leaves read in file order, verified, cast
// and copied into their targets.
#pragma once

#include <algorithm>
#include <atomic>
#include <exception>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cairn/checkpoint/box_reader.hpp"
#include "cairn/checkpoint/data_files.hpp"
#include "cairn/checkpoint/load_plan.hpp"
#include "cairn/checkpoint/read_ahead.hpp"
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
    for (std::size_t i = 0; i < keys.size(); ++i) s += (i ? ", " : " ") + keys[i];
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

struct ReadTask {
  PlannedLeaf* leaf;
  LeafBuffer buffer;
};

// The one chunk of a plain leaf is its target's whole buffer, byte for byte: it can be read
// straight into the target, with nothing to cast, reorder or scatter.
inline bool reads_in_place(const ReadTask& t) {
  const LeafRecord& s = *t.leaf->stored;
  const ChunkRecord& c = s.chunks.front();
  return t.buffer.shards.empty() && t.buffer.dtype == s.dtype && s.dtype != DType::string &&
         (s.shape.size() < 2 || t.buffer.order == s.order) && c.shape == s.shape &&
         std::all_of(c.start.begin(), c.start.end(), [](std::int64_t v) { return v == 0; }) && c.nbytes == t.buffer.nbytes;
}

// A run of small one-chunk leaves, close together in one file and in file order: one
// scattered read puts each leaf that reads in place straight into its target (the others
// into a staging buffer, for the box reader to cast or reorder), then each is verified.
inline void read_small_run(ReadTask* run, std::size_t count, DataFiles& files, const LoadOptions& options,
                           LoadReport& report) {
  const ChunkRecord& first = run[0].leaf->stored->chunks.front();
  std::vector<ReadPiece> pieces;
  pieces.reserve(2 * count);
  std::vector<std::uint64_t> staged(count, ~std::uint64_t{0});  // offset in `staging`, or none
  std::uint64_t staging_size = 0;
  for (std::size_t k = 0; k < count; ++k)
    if (!reads_in_place(run[k])) {
      staged[k] = staging_size;
      staging_size += run[k].leaf->stored->chunks.front().nbytes;
    }
  std::vector<unsigned char> staging(static_cast<std::size_t>(staging_size));
  std::uint64_t at = first.offset;
  for (std::size_t k = 0; k < count; ++k) {
    const ChunkRecord& c = run[k].leaf->stored->chunks.front();
    if (c.offset > at) pieces.push_back({nullptr, c.offset - at});
    pieces.push_back({staged[k] == ~std::uint64_t{0} ? run[k].buffer.data : staging.data() + staged[k], c.nbytes});
    at = c.offset + c.nbytes;
  }
  try {
    files.get(first.file).read_scattered(pieces.data(), pieces.size(), first.offset);
  } catch (const Error& e) {
    throw e.with_key(run[0].leaf->key).with_file(files.describe(first.file));
  }
  report.bytes_read += at - first.offset;
  for (std::size_t k = 0; k < count; ++k) {
    const LeafRecord& s = *run[k].leaf->stored;
    const ChunkRecord& c = s.chunks.front();
    if (staged[k] != ~std::uint64_t{0}) {
      BoxLeafReader(s, run[k].buffer, run[k].leaf->key, files, options, report)
          .read_from_memory(staging.data() + staged[k], c.offset);
      continue;
    }
    report.bytes_needed += c.nbytes;
    if (c.nbytes == 0) continue;
    try {
      if (options.verify_checksums) check_crc(crc32c(run[k].buffer.data, static_cast<std::size_t>(c.nbytes)), s, c, files);
    } catch (const Error& e) {
      throw e.with_key(run[k].leaf->key);
    }
    if (s.dtype == DType::bool_) normalize_bools(run[k].buffer.data, c.nbytes);
  }
}

// Whether runs of small leaves are read by two threads: a second core to run on, and the
// runs' bytes in memory already (sampled over the span of those in the first run's file, as
// box_reader.hpp's parallel_direct_read decides for one large leaf). From the page cache a
// load of many small leaves is then bound by the copy and the checksum, which two cores
// share; from the disk one reading thread was measured faster on two cores.
inline bool parallel_small_runs(const std::vector<ReadTask>& tasks, const std::vector<std::pair<std::size_t, std::size_t>>& runs,
                                DataFiles& files) {
  static const bool cores = std::thread::hardware_concurrency() > 1;
  if (runs.size() < 2 || !cores) return false;
  const ChunkRecord& first = tasks[runs.front().first].leaf->stored->chunks.front();
  std::uint64_t end = first.offset;
  for (const auto& [i, j] : runs) {
    const ChunkRecord& last = tasks[j - 1].leaf->stored->chunks.front();
    if (last.file == first.file) end = std::max(end, last.offset + last.nbytes);
  }
  const std::uint64_t span = end - first.offset;
  return files.get(first.file).cached_bytes(first.offset, span) >= span / 4 * 3;
}

// Reads the runs of small leaves on two threads taking every other run, each into a report of
// its own (added up here). Every data file is open already (execute_plan asked each chunk's
// file for its size), so the threads only look them up.
inline void read_small_runs_in_parallel(std::vector<ReadTask>& tasks, const std::vector<std::pair<std::size_t, std::size_t>>& runs,
                                        DataFiles& files, const LoadOptions& options, LoadReport& report) {
  LoadReport helper;
  std::atomic<bool> failed{false};  // the other thread stops at its next run
  auto every_other = [&](std::size_t first, LoadReport& into) {
    try {
      for (std::size_t k = first; k < runs.size() && !failed.load(std::memory_order_relaxed); k += 2)
        read_small_run(tasks.data() + runs[k].first, runs[k].second - runs[k].first, files, options, into);
    } catch (...) {
      failed = true;
      throw;
    }
  };
  {
    // The future's destructor joins the helper, also when this thread throws.
    std::future<void> odd = std::async(std::launch::async, every_other, 1, std::ref(helper));
    every_other(0, report);
    odd.get();
  }
  report.bytes_read += helper.bytes_read;
  report.bytes_needed += helper.bytes_needed;
  report.unverified_bytes += helper.unverified_bytes;
  report.shard_reads.insert(report.shard_reads.end(), helper.shard_reads.begin(), helper.shard_reads.end());
}

inline void execute_plan(LoadPlan& plan, DataFiles& files, const LoadOptions& options) {
  const std::string dir = files.describe();
  std::vector<ReadTask> tasks;
  std::vector<CastRecord> lossy;  // casts that could lose information, not allowed
  tasks.reserve(plan.leaves.size());
  // One StoredLeafInfo for every leaf: its shape is assigned into the capacity the leaf before
  // left, not copied into a vector of its own per leaf.
  StoredLeafInfo info;
  info.process = options.coordinator ? options.coordinator->rank() : 0;
  info.processes = options.coordinator ? options.coordinator->size() : 1;
  for (auto& leaf : plan.leaves) {
    const LeafRecord& s = *leaf.stored;
    // Every chunk must lie inside its file before the target allocates anything: shapes in
    // untrusted metadata could otherwise ask for terabytes.
    for (const auto& c : s.chunks) {
      const std::uint64_t fsize = files.size(c.file);
      if (c.offset > fsize || c.nbytes > fsize - c.offset)
        throw Error(ErrorKind::corrupt, "bytes " + std::to_string(c.offset) + ".." + std::to_string(c.offset + c.nbytes) +
                    " lie beyond the end of the file (" + std::to_string(fsize) + " bytes; truncated?)",
                    files.describe(c.file), leaf.key);
    }
    LeafBuffer buf;
    try {
      info.dtype = s.dtype;
      info.shape.assign(s.shape.begin(), s.shape.end());
      info.order = s.order;
      info.nbytes = s.nbytes();
      info.sharding = s.sharding ? &*s.sharding : nullptr;
      buf = leaf.prepare(info);
    } catch (const Error& e) {
      throw Error(e.kind(), e.message(), dir, leaf.key);
    }
    if (buf.dtype != s.dtype) {
      if (!options.allow_cast)
        throw Error(ErrorKind::dtype_mismatch, std::string("stored as ") + dtype_name(s.dtype) + ", the target is " +
                    dtype_name(buf.dtype) + " and casting is disabled", dir, leaf.key);
      if (buf.dtype == DType::string || s.dtype == DType::string)
        throw Error(ErrorKind::dtype_mismatch, std::string("cannot cast ") + dtype_name(s.dtype) + " to " +
                    dtype_name(buf.dtype), dir, leaf.key);
      if (!cast_is_exact(s.dtype, buf.dtype) &&
          std::none_of(options.allow_lossy_cast.begin(), options.allow_lossy_cast.end(),
                       [&](const std::string& g) { return glob_matches(g, leaf.key); }))
        lossy.push_back({leaf.key, s.dtype, buf.dtype});
      plan.report.cast.push_back({leaf.key, s.dtype, buf.dtype});
    }
    const std::uint64_t want = element_count(s.shape) * dtype_size(buf.dtype);
    if (buf.nbytes != want)
      throw Error(ErrorKind::shape_mismatch, "target buffer holds " + std::to_string(buf.nbytes) + " bytes, " +
                  std::to_string(want) + " needed for stored shape " + to_string(s.shape), dir, leaf.key);
    if ((s.chunks.size() != 1 || !buf.shards.empty()) && (s.dtype == DType::string || buf.dtype == DType::string))
      throw Error(ErrorKind::dtype_mismatch, "a string leaf cannot be stored in chunks or loaded into shards", dir, leaf.key);
    tasks.push_back({&leaf, std::move(buf)});
  }
  if (!lossy.empty()) {
    std::string list;
    for (std::size_t i = 0; i < lossy.size() && i < 20; ++i)
      list += (i ? ", " : "") + (lossy[i].key.empty() ? std::string("the root leaf") : lossy[i].key) + " (" +
              dtype_name(lossy[i].from) + " -> " + dtype_name(lossy[i].to) + ")";
    if (lossy.size() > 20) list += ", ... (" + std::to_string(lossy.size()) + " in all)";
    throw Error(ErrorKind::dtype_mismatch, "loading these leaves would need casts that can lose information: " + list +
                ". Give the target the stored dtype, or allow it for these keys with LoadOptions::allow_lossy_cast "
                "(key globs; \"**\" for all)", dir, lossy.size() == 1 ? lossy.front().key : "");
  }
  // Leaves in file order. Runs of small one-chunk leaves that lie close together in one file
  // are read with one request and delivered from memory: 10,000 leaves of a few KiB would
  // otherwise be 10,000 reads.
  auto one_chunk = [](const ReadTask& t) { return t.leaf->stored->chunks.size() == 1; };
  const auto file_order = [&](const ReadTask& a, const ReadTask& b) {
    if (one_chunk(a) != one_chunk(b)) return one_chunk(a);
    if (!one_chunk(a)) return false;
    const auto& ca = a.leaf->stored->chunks.front();
    const auto& cb = b.leaf->stored->chunks.front();
    if (&ca.file != &cb.file && ca.file != cb.file) return ca.file < cb.file;
    return ca.offset < cb.offset;
  };
  // A whole tree loaded as saved is in file order already; the check costs less than the sort.
  if (!std::is_sorted(tasks.begin(), tasks.end(), file_order)) std::stable_sort(tasks.begin(), tasks.end(), file_order);
  // Runs of small leaves, [first, end) of `tasks` each; a leaf of no run is read on its own.
  std::vector<std::pair<std::size_t, std::size_t>> runs;
  for (std::size_t i = 0; i < tasks.size();) {
    std::size_t j = i + 1;
    if (one_chunk(tasks[i]) && tasks[i].buffer.shards.empty() && tasks[i].leaf->stored->chunks.front().nbytes < small_leaf_bytes) {
      const auto& c = tasks[i].leaf->stored->chunks.front();
      std::uint64_t end = c.offset + c.nbytes;
      while (j < tasks.size() && one_chunk(tasks[j]) && tasks[j].buffer.shards.empty()) {
        const auto& n = tasks[j].leaf->stored->chunks.front();
        if (n.file != c.file || n.nbytes >= small_leaf_bytes || n.offset < end || n.offset - end > coalesce_gap_bytes ||
            n.offset + n.nbytes - c.offset > small_run_bytes)
          break;
        end = n.offset + n.nbytes;
        ++j;
      }
      if (j > i + 1) runs.emplace_back(i, j);
    }
    i = j;
  }
  // In memory, the runs first, on two threads; then the other leaves (and from the disk the
  // runs too, on this thread), in file order.
  const bool runs_read = parallel_small_runs(tasks, runs, files);
  if (runs_read) read_small_runs_in_parallel(tasks, runs, files, options, plan.report);
  std::size_t next_run = 0;
  for (std::size_t i = 0; i < tasks.size();) {
    if (next_run < runs.size() && runs[next_run].first == i) {
      if (!runs_read) read_small_run(tasks.data() + i, runs[next_run].second - i, files, options, plan.report);
      i = runs[next_run++].second;
    } else {
      BoxLeafReader(*tasks[i].leaf->stored, tasks[i].buffer, tasks[i].leaf->key, files, options, plan.report).read();
      ++i;
    }
  }
  plan.report.loaded.reserve(plan.report.loaded.size() + tasks.size());
  for (auto& t : tasks) {
    if (t.buffer.commit) {
      try {
        t.buffer.commit();
      } catch (const Error& e) {
        throw e.with_key(t.leaf->key).with_file(dir);
      }
    }
    // The plan is done with the key (errors above name it before this): moved, not copied.
    plan.report.loaded.push_back(std::move(t.leaf->key));
  }
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
};
inline OpenedCheckpoint open_checkpoint(const Store& store, const std::string& key, Coordinator* coordinator) {
  if (!coordinator || coordinator->size() == 1) {
    const std::string ckpt = store.readable_checkpoint(normalize_key(key));
    OpenedCheckpoint c;
    c.key = ckpt;
    const MetadataText t = read_metadata_text(store, ckpt);
    c.read_ahead = start_read_ahead(store, ckpt, t.metadata);
    c.metadata = parse_metadata(store, ckpt, t, &c.leaf_keys);
    c.records = store.describe(join_key(ckpt, metadata_file));
    return c;
  }
  coordinator->set_phase("reading the metadata");
  const std::string got = run_on_primary(*coordinator, [&] {
    const std::string ckpt = store.readable_checkpoint(normalize_key(key));
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
          throw e.kind() == ErrorKind::corrupt ? e.with_file(ck.records) : e;
        }
      }();
      check_strict(plan.report, options, dir);
      // The read-ahead goes on ahead of the reads of a load of every stored leaf (from the
      // start of the files, as it reads); one that reads only some would compete with it.
      if (plan.leaves.size() < item->leaves.size()) ck.read_ahead.reset();
      DataFiles files(store, ck.key);
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
