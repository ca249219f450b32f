// SPDX-License-Identifier: Apache-2.0
// The read scheduler: a load plan's leaves read in file order, small neighbours in one
// scattered read (on two threads when their bytes are in memory already), large ones through
// the box reader, each verified against its CRC32C, cast and copied into its target
// (execute_plan). The load protocol around it is checkpoint/load_protocol.hpp.
#pragma once

#include <optional>

#include <algorithm>
#include <atomic>
#include <exception>
#include <functional>
#include <future>
#include <iterator>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cairn/checkpoint/box_reader.hpp"
#include "cairn/checkpoint/data_files.hpp"
#include "cairn/checkpoint/load_plan.hpp"
#include "cairn/core/tuning.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// What a load does for one planned leaf. For a leaf of one chunk it holds where that chunk
// lies and its checksum, copied from the record while that is in cache (file is null for a
// leaf of several chunks), and a leaf read in place (the usual one) keeps only its target's
// address, not its LeafBuffer (80 bytes, with a std::function and a vector): the passes that
// order the tasks, find the runs of small leaves, read them and finish go through 56-byte
// tasks in order, instead of from each task to its leaf and record. At 100,000 leaves neither
// the records (26 MB) nor tasks with their buffers (12 MB) fit the caches, and those passes
// took 6.6 ms against 0.3 at 10,000 (docs/benchmarks.md).
struct ReadTask {
  PlannedLeaf* leaf;
  const DataFiles::Entry* file = nullptr;
  std::uint64_t offset = 0;
  std::uint64_t nbytes = 0;
  void* data = nullptr;       // the target's bytes, for a leaf read in place
  std::uint32_t crc32c = 0;
  // 1 + the position of the leaf's LeafBuffer among those kept (ReadBuffers), or 0: a leaf
  // read in place without a commit keeps none. (Positions fit 32 bits: a metadata file of at
  // most 1 GiB lists fewer leaves.)
  std::uint32_t buffer = 0;
  bool in_place = false;      // reads_in_place
  bool to_shards = false;     // its target is in shards
  bool bools = false;         // read in place as bool: each byte made 0 or 1
};

// The LeafBuffers kept: of leaves not read in place, or with a commit.
using ReadBuffers = std::vector<LeafBuffer>;

// The one chunk of a plain leaf is its target's whole buffer, byte for byte: it can be read
// straight into the target, with nothing to cast, reorder or scatter.
inline bool reads_in_place(const LeafRecord& s, const LeafBuffer& buffer) {
  const ChunkRecord& c = s.chunks.front();
  return buffer.shards.empty() && buffer.dtype == s.dtype && s.dtype != DType::string &&
         (s.shape.size() < 2 || buffer.order == s.order) && c.shape == s.shape &&
         std::all_of(c.start.begin(), c.start.end(), [](std::int64_t v) { return v == 0; }) && c.nbytes == buffer.nbytes;
}

// A run of small one-chunk leaves, close together in one file and in file order: one
// scattered read puts each leaf that reads in place straight into its target (the others
// into a staging buffer, for the box reader to cast or reorder), then each is verified.
inline void read_small_run(ReadTask* run, std::size_t count, const ReadBuffers& buffers, DataFiles& files,
                           const LoadOptions& options, LoadReport& report) {
  const ReadTask& first = run[0];
  std::vector<ReadPiece> pieces;
  pieces.reserve(2 * count);
  std::vector<std::uint64_t> staged(count, ~std::uint64_t{0});  // offset in `staging`, or none
  std::uint64_t staging_size = 0;
  for (std::size_t k = 0; k < count; ++k)
    if (!run[k].in_place) {
      staged[k] = staging_size;
      staging_size += run[k].nbytes;
    }
  std::vector<unsigned char> staging(static_cast<std::size_t>(staging_size));
  std::uint64_t at = first.offset;
  for (std::size_t k = 0; k < count; ++k) {
    const ReadTask& c = run[k];
    if (c.offset > at) pieces.push_back({nullptr, c.offset - at});
    pieces.push_back({staged[k] == ~std::uint64_t{0} ? c.data : staging.data() + staged[k], c.nbytes});
    at = c.offset + c.nbytes;
  }
  try {
    first.file->second->read_scattered(pieces.data(), pieces.size(), first.offset);
  } catch (const Error& e) {
    throw e.with_key(first.leaf->key).with_file(files.describe(first.file->first));
  }
  report.bytes_read += at - first.offset;
  for (std::size_t k = 0; k < count; ++k) {
    const ReadTask& t = run[k];
    if (staged[k] != ~std::uint64_t{0}) {
      BoxLeafReader(*t.leaf->stored, buffers[t.buffer - 1], t.leaf->key, files, options, report)
          .read_from_memory(staging.data() + staged[k], t.offset);
      continue;
    }
    report.bytes_needed += t.nbytes;
    if (t.nbytes == 0) continue;
    if (!options.verify_checksums) report.unverified_bytes += t.nbytes;
    if (options.verify_checksums) {
      const std::uint32_t got = crc32c(t.data, static_cast<std::size_t>(t.nbytes));
      try {
        if (got != t.crc32c) check_crc(got, *t.leaf->stored, t.leaf->stored->chunks.front(), files);
      } catch (const Error& e) {
        throw e.with_key(t.leaf->key);
      }
    }
    if (t.bools) normalize_bools(t.data, t.nbytes);
  }
}

// Whether runs of small leaves are read by two threads: a second core to run on, and the
// runs' bytes in memory already (sampled over the span of those in the first run's file, as
// box_reader.hpp's parallel_direct_read decides for one large leaf). From the page cache a
// load of many small leaves is then bound by the copy and the checksum, which two cores
// share; from the disk one reading thread was measured faster on two cores.
inline bool parallel_small_runs(const std::vector<ReadTask>& tasks, const std::vector<std::pair<std::size_t, std::size_t>>& runs) {
  static const bool cores = std::thread::hardware_concurrency() > 1;
  if (runs.size() < 2 || !cores) return false;
  const ReadTask& first = tasks[runs.front().first];
  std::uint64_t end = first.offset;
  for (const auto& [i, j] : runs) {
    const ReadTask& last = tasks[j - 1];
    if (last.file == first.file) end = std::max(end, last.offset + last.nbytes);
  }
  const std::uint64_t span = end - first.offset;
  return first.file->second->cached_bytes(first.offset, span) >= span / 4 * 3;
}

// Adds what one thread read (its own report) to the load's report.
inline void add_report(LoadReport& to, LoadReport& from) {
  to.bytes_read += from.bytes_read;
  to.bytes_needed += from.bytes_needed;
  to.unverified_bytes += from.unverified_bytes;
  to.shard_reads.insert(to.shard_reads.end(), std::make_move_iterator(from.shard_reads.begin()),
                        std::make_move_iterator(from.shard_reads.end()));
}

// Reads the runs of small leaves on two threads taking every other run, each into a report of
// its own (added up here). Every data file is open already (execute_plan asked each chunk's
// file for its size), so the threads only look them up.
inline void read_small_runs_in_parallel(std::vector<ReadTask>& tasks, const ReadBuffers& buffers,
                                        const std::vector<std::pair<std::size_t, std::size_t>>& runs, DataFiles& files,
                                        const LoadOptions& options, LoadReport& report) {
  LoadReport helper;
  on_two_threads(runs.size(), [&](std::size_t k, std::size_t thread) {
    read_small_run(tasks.data() + runs[k].first, runs[k].second - runs[k].first, buffers, files, options,
                   thread == 0 ? report : helper);
  });
  add_report(report, helper);
}

// Reads one planned leaf that is not part of a run of small ones, through the box reader.
inline void read_leaf(const ReadTask& t, const ReadBuffers& buffers, DataFiles& files, const LoadOptions& options,
                      LoadReport& report) {
  const LeafRecord& s = *t.leaf->stored;
  // ReadTask::file is set exactly for a one-chunk leaf: its file's entry, looked up at planning.
  auto read = [&](BoxLeafReader&& r) { t.file ? r.read_one(*t.file->second) : r.read(); };
  if (t.buffer) {
    read(BoxLeafReader(s, buffers[t.buffer - 1], t.leaf->key, files, options, report));
  } else {  // read in place: the target's dtype and order are the stored ones
    const LeafBuffer in_place{s.dtype, s.order, t.data, t.nbytes};
    read(BoxLeafReader(s, in_place, t.leaf->key, files, options, report));
  }
}

// The stored bytes of a leaf's chunks.
inline std::uint64_t stored_bytes(const ReadTask& t) {
  if (t.file) return t.nbytes;
  std::uint64_t n = 0;
  for (const ChunkRecord& c : t.leaf->stored->chunks) n += c.nbytes;
  return n;
}

// Whether every one of these leaves' targets is in host memory (a device target's copies use
// the CUDA stream and pinned buffers of the loading thread).
inline bool host_targets(const std::vector<ReadTask>& tasks, const std::vector<std::size_t>& leaves, const ReadBuffers& buffers) {
  for (std::size_t i : leaves) {
    const ReadTask& t = tasks[i];
    if (t.buffer)
      for (const auto& sh : buffers[t.buffer - 1].shards)
        if (sh.memory != MemoryKind::host) return false;
  }
  return true;
}

// How many threads read `leaves` leaves side by side (large ones, none of a run, or small ones
// each in a file of its own, every target in host memory: host_targets): one per core this
// process may use (at most 16: usable_cores), when there are at least two, wherever their
// bytes are.
// From the page cache the cores share the copies and checksums. From the disk too: a load of
// 64 arrays of 16 MiB read on one thread was 0.75-0.83x of two threads' plain reads, and 1.36-
// 1.40x on two threads (docs/benchmarks.md, 2026-12-03). Two things a second thread overlaps
// there: the disk's requests (a virtual disk served two streams, each a leaf's chunk, at 0.42
// GiB/s and one at 0.23), and the first touch of the new targets' pages, kernel work on the
// reading thread (a fresh GiB took 2.6 s to touch on one core of that VM, 1.4 s on two). Each
// thread reads its leaf's chunks in order, so that the kernel's readahead sees a sequential
// stream (two threads taking every other piece of one chunk, or the two halves of a file, were
// as slow as one).
inline std::size_t leaf_threads(std::size_t leaves) {
  static const std::size_t cores = std::min<std::size_t>(usable_cores(), 16);
  return cores < 2 || leaves < 2 ? 1 : std::min(cores, leaves);
}

// Whether reading the leaf opens a file of its own (StoreReader::opens_file_to_read), judged
// by its first chunk.
inline bool opens_files_to_read(const ReadTask& t, DataFiles& files) {
  const LeafRecord& s = *t.leaf->stored;
  if (t.file) return t.file->second->opens_file_to_read();
  return !s.chunks.empty() && files.get(s.chunks.front().file).opens_file_to_read();
}

// Reads the leaves on `threads` threads, each into a report of its own (reports[k] for
// leaves[k]), for execute_plan_reads to add up in the leaves' order (the order a one-thread
// read gives LoadReport::shard_reads).
inline void read_leaves_in_parallel(const std::vector<ReadTask>& tasks, const std::vector<std::size_t>& leaves,
                                    std::size_t threads, const ReadBuffers& buffers, DataFiles& files,
                                    const LoadOptions& options, std::vector<LoadReport>& reports) {
  reports.resize(leaves.size());
  on_threads(leaves.size(), threads, [&](std::size_t k) { read_leaf(tasks[leaves[k]], buffers, files, options, reports[k]); });
}

inline void execute_plan_reads(LoadPlan& plan, DataFiles& files, const LoadOptions& options) {
  const std::string dir = files.describe();
  if (options.require_verified && !options.verify_checksums)
    throw Error(ErrorKind::invalid_argument, "LoadOptions::require_verified asks for every byte to be verified, and "
                "verify_checksums is off", dir);
  std::vector<ReadTask> tasks;
  ReadBuffers buffers;
  std::vector<CastRecord> lossy;  // casts that could lose information, not allowed
  tasks.reserve(plan.leaves.size());
  // The order the leaves are read in: those of one chunk first (file set), by file name and
  // offset; the others as planned.
  const auto file_order = [](const ReadTask& a, const ReadTask& b) {
    if (!a.file || !b.file) return a.file && !b.file;
    if (a.file != b.file) return a.file->first < b.file->first;
    return a.offset < b.offset;
  };
  bool in_file_order = true;
  bool any_commit = false;
  // One StoredLeafInfo for every leaf: its shape is assigned into the capacity the leaf before
  // left, not copied into a vector of its own per leaf.
  StoredLeafInfo info;
  info.process = options.coordinator ? options.coordinator->rank() : 0;
  info.processes = options.coordinator ? options.coordinator->size() : 1;
  // Leaves the target cannot take (another fixed shape, a cast it may not do): every one is
  // named in one error, so that a changed model is seen whole and not fixed a leaf per try.
  std::vector<Error> misfits;
  for (auto& leaf : plan.leaves) {
    const LeafRecord& s = *leaf.stored;
    // Every chunk must lie inside its file before the target allocates anything: shapes in
    // untrusted metadata could otherwise ask for terabytes.
    const DataFiles::Entry* file = nullptr;
    for (const auto& c : s.chunks) {
      file = &files.entry(c.file);
      const std::uint64_t fsize = file->second->size();
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
      if (e.kind() != ErrorKind::shape_mismatch && e.kind() != ErrorKind::dtype_mismatch)
        throw Error(e.kind(), e.message(), dir, leaf.key);
      misfits.emplace_back(e.kind(), e.message(), dir, leaf.key);
      continue;
    }
    const auto misfit = [&](ErrorKind kind, std::string message) { misfits.emplace_back(kind, std::move(message), dir, leaf.key); };
    if (buf.dtype != s.dtype) {
      if (!options.allow_cast) {
        misfit(ErrorKind::dtype_mismatch, std::string("stored as ") + dtype_name(s.dtype) + ", the target is " +
               dtype_name(buf.dtype) + " and casting is disabled");
        continue;
      }
      if (buf.dtype == DType::string || s.dtype == DType::string) {
        misfit(ErrorKind::dtype_mismatch, std::string("cannot cast ") + dtype_name(s.dtype) + " to " + dtype_name(buf.dtype));
        continue;
      }
      if (!cast_is_exact(s.dtype, buf.dtype) &&
          std::none_of(options.allow_lossy_cast.begin(), options.allow_lossy_cast.end(),
                       [&](const std::string& g) { return glob_matches(g, leaf.key); }))
        lossy.push_back({leaf.key, s.dtype, buf.dtype});
      plan.report.cast.push_back({leaf.key, s.dtype, buf.dtype});
    }
    const std::uint64_t want = element_count(s.shape) * dtype_size(buf.dtype);
    if (buf.nbytes != want) {
      misfit(ErrorKind::shape_mismatch, "target buffer holds " + std::to_string(buf.nbytes) + " bytes, " +
             std::to_string(want) + " needed for stored shape " + to_string(s.shape));
      continue;
    }
    if ((s.chunks.size() != 1 || !buf.shards.empty()) && (s.dtype == DType::string || buf.dtype == DType::string)) {
      misfit(ErrorKind::dtype_mismatch, "a string leaf cannot be stored in chunks or loaded into shards");
      continue;
    }
    ReadTask& t = tasks.emplace_back(ReadTask{&leaf});
    t.to_shards = !buf.shards.empty();
    if (s.chunks.size() == 1) {
      const ChunkRecord& c = s.chunks.front();
      t.file = file;
      t.offset = c.offset;
      t.nbytes = c.nbytes;
      t.crc32c = c.crc32c;
      t.in_place = reads_in_place(s, buf);
      t.data = buf.data;
      t.bools = s.dtype == DType::bool_;  // read in place: the target's dtype too
    }
    if (tasks.size() > 1 && file_order(t, tasks[tasks.size() - 2])) in_file_order = false;
    if (buf.commit) any_commit = true;
    if (!t.in_place || buf.commit) {
      buffers.push_back(std::move(buf));
      t.buffer = static_cast<std::uint32_t>(buffers.size());
    }
  }
  if (misfits.size() == 1 && lossy.empty()) throw misfits.front();
  const auto name = [](const std::string& key) { return key.empty() ? std::string("the root leaf") : key; };
  std::vector<std::string> lossy_names;
  for (const auto& c : lossy)
    lossy_names.push_back(name(c.key) + " (" + dtype_name(c.from) + " -> " + dtype_name(c.to) + ")");
  if (!misfits.empty()) {
    std::vector<std::string> named;
    for (const auto& e : misfits) named.push_back(name(e.key_path()) + ": " + e.message());
    std::string list = listed_names(named, 20, "; ");
    if (!lossy.empty())
      list += "; and casts that can lose information (LoadOptions::allow_lossy_cast): " + listed_names(lossy_names, 20);
    const std::string count = misfits.size() == 1 ? "1 leaf does" : std::to_string(misfits.size()) + " leaves do";
    throw Error(misfits.front().kind(), count + " not fit the target: " + list, dir);
  }
  if (!lossy.empty()) {
    const std::string list = listed_names(lossy_names, 20);
    throw Error(ErrorKind::dtype_mismatch, "loading these leaves would need casts that can lose information: " + list +
                ". Give the target the stored dtype, or allow it for these keys with LoadOptions::allow_lossy_cast "
                "(key globs; \"**\" for all)", dir, lossy.size() == 1 ? lossy.front().key : "");
  }
  // Leaves in file order. Runs of small one-chunk leaves that lie close together in one file
  // are read with one request and delivered from memory: 10,000 leaves of a few KiB would
  // otherwise be 10,000 reads.
  // A whole tree loaded as saved is in file order already (checked as the tasks were made).
  if (!in_file_order) std::stable_sort(tasks.begin(), tasks.end(), file_order);
  // Runs of small leaves, [first, end) of `tasks` each; a leaf of no run is read on its own.
  std::vector<std::pair<std::size_t, std::size_t>> runs;
  for (std::size_t i = 0; i < tasks.size();) {
    std::size_t j = i + 1;
    if (tasks[i].file && !tasks[i].to_shards && tasks[i].nbytes < small_leaf_bytes) {
      const ReadTask& c = tasks[i];
      std::uint64_t end = c.offset + c.nbytes;
      while (j < tasks.size() && tasks[j].file && !tasks[j].to_shards) {
        const ReadTask& n = tasks[j];
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
  // The runs first, on two threads where their bytes are in memory; the large leaves (each read
  // on its own) side by side on one thread per core, and small leaves each in a file of its own
  // the same way; then the other leaves (and from the disk the runs too, on this thread) in
  // file order, the reports of those read side by side added up in their place.
  const bool runs_read = parallel_small_runs(tasks, runs);
  if (runs_read) read_small_runs_in_parallel(tasks, buffers, runs, files, options, plan.report);
  std::vector<std::size_t> large, singles;
  for (std::size_t i = 0, next = 0; i < tasks.size();) {
    if (next < runs.size() && runs[next].first == i) i = runs[next++].second;
    else if (stored_bytes(tasks[i]) >= small_leaf_bytes) large.push_back(i++);
    else singles.push_back(i++);
  }
  std::vector<LoadReport> large_reports, single_reports;
  // Device targets stay on one thread (their copies use the CUDA stream and pinned buffers of
  // this one).
  if (const std::size_t threads = host_targets(tasks, large, buffers) ? leaf_threads(large.size()) : 1; threads > 1)
    read_leaves_in_parallel(tasks, large, threads, buffers, files, options, large_reports);
  // Small leaves that are neither in a run nor served from memory, each in a file of its own
  // (Orbax's layout of a file per chunk), are read side by side too: the load of 10,000 such
  // arrays opened their files one after another on one core (docs/benchmarks.md, "Orbax
  // import"). On a store whose every request waits on a network, as many at once as it keeps
  // in flight (Store::parallel_reads), whatever the cores: 300 such arrays on a bucket 20 ms
  // away were 600 requests one after another.
  // Their files are offered to the store first, a window at a time (Store::read_ahead: an
  // Orbax view reads a window's files whole together, through io_uring on a POSIX store, where
  // one at a time each was four system calls), so that the reads are copies.
  if (singles.size() >= parallel_small_files_min && opens_files_to_read(tasks[singles.front()], files) &&
      host_targets(tasks, singles, buffers))
    if (const std::size_t threads = std::max<std::size_t>(leaf_threads(singles.size()),
                                                          static_cast<std::size_t>(std::clamp(files.parallel_reads(), 1, 64)));
        threads > 1) {
      std::vector<std::size_t> window;
      std::vector<std::string> names;
      std::vector<LoadReport> window_reports;
      single_reports.reserve(singles.size());
      for (std::size_t from = 0; from < singles.size();) {
        window.clear(), names.clear();
        std::uint64_t bytes = 0;
        for (; from < singles.size() && window.size() < held_files_max && bytes < held_files_bytes; ++from) {
          const ReadTask& t = tasks[singles[from]];
          window.push_back(singles[from]);
          bytes += stored_bytes(t);
          for (const ChunkRecord& c : t.leaf->stored->chunks) names.push_back(c.file);
        }
        std::unique_ptr<StoreReadAhead> held = files.read_ahead(names, bytes);
        read_leaves_in_parallel(tasks, window, threads, buffers, files, options, window_reports);
        held.reset();
        std::move(window_reports.begin(), window_reports.end(), std::back_inserter(single_reports));
      }
    }
  std::size_t next_run = 0, next_large = 0, next_single = 0;
  for (std::size_t i = 0; i < tasks.size();) {
    if (next_run < runs.size() && runs[next_run].first == i) {
      if (!runs_read) read_small_run(tasks.data() + i, runs[next_run].second - i, buffers, files, options, plan.report);
      i = runs[next_run++].second;
    } else if (!large_reports.empty() && next_large < large.size() && large[next_large] == i) {
      add_report(plan.report, large_reports[next_large++]);
      ++i;
    } else if (!single_reports.empty() && next_single < singles.size() && singles[next_single] == i) {
      add_report(plan.report, single_reports[next_single++]);
      ++i;
    } else {
      read_leaf(tasks[i++], buffers, files, options, plan.report);
    }
  }
  // Leaves read into a buffer of their own copy it into the target now. Most leaves have none,
  // and then this pass over the tasks (12 MB at 100,000 leaves, out of the caches) is skipped.
  if (any_commit)
    for (auto& t : tasks) {
      if (!t.buffer || !buffers[t.buffer - 1].commit) continue;
      try {
        buffers[t.buffer - 1].commit();
      } catch (const Error& e) {
        throw e.with_key(t.leaf->key).with_file(dir);
      }
    }
  // The plan is done with the keys (errors above name them): moved, not copied, in the
  // target's order.
  plan.report.loaded.reserve(plan.report.loaded.size() + plan.leaves.size());
  for (auto& leaf : plan.leaves) plan.report.loaded.push_back(std::move(leaf.key));
}

// Reads every planned leaf (execute_plan_reads), telling LoadOptions::progress as it goes.
inline void execute_plan(LoadPlan& plan, DataFiles& files, const LoadOptions& options) {
  // Progress: the stored bytes of the planned leaves, counted as the files are read.
  std::optional<ProgressMeter> meter;
  if (options.progress) {
    std::uint64_t total = 0;
    for (const auto& leaf : plan.leaves)
      for (const auto& c : leaf.stored->chunks) total += c.nbytes;
    meter.emplace(options.progress, total);
    files.count_into(&*meter);
  }
  execute_plan_reads(plan, files, options);
  if (meter) {
    files.count_into(nullptr);
    meter->finish();
  }
}

}  // namespace detail
CAIRN_END_NAMESPACE
