// SPDX-License-Identifier: Apache-2.0
// The runtime of inspect/verify.hpp.
#pragma once

#include <atomic>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>

#include "cairn/checkpoint/data_files.hpp"
#include "cairn/core/parallel.hpp"
#include "cairn/format/files.hpp"
#include "cairn/inspect/formats.hpp"
#include "cairn/inspect/verify.hpp"
#include "cairn/io/block_crc32c.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// One chunk read in pieces of up to buf.size() bytes and, with check_crc, checksummed: its
// problems into `out` (none when it is intact). Returns the bytes read (0 when it could not be).
inline std::uint64_t verify_chunk(const StoreReader& r, const std::string& file, const LeafRecord& l, const ChunkRecord& c,
                                  bool check_crc, std::vector<unsigned char>& buf, ProgressMeter& meter,
                                  std::vector<VerifyProblem>& out) {
  // A truncated file: its real size, not the offset where one read stopped short.
  if (const std::uint64_t size = r.size(); c.offset + c.nbytes > size) {
    out.push_back({file, l.key(), "the file is truncated: it is " + std::to_string(size) +
                   " bytes, and this chunk needs bytes up to " + std::to_string(c.offset + c.nbytes),
                   c.offset, c.offset + c.nbytes});
    return 0;
  }
  // With block checksums, each block's too: a damaged chunk is reported by the blocks that
  // differ (each a byte range a load of part of the chunk would refuse).
  BlockCrc32c crc(c.blocks ? c.blocks->block_bytes : std::max<std::uint64_t>(c.nbytes, 1));
  for (std::uint64_t at = 0; at < c.nbytes;) {
    const std::uint64_t n = std::min<std::uint64_t>(buf.size(), c.nbytes - at);
    r.read_at(buf.data(), n, c.offset + at);
    if (check_crc) crc.extend(buf.data(), static_cast<std::size_t>(n));
    at += n;
    meter.add(n);
  }
  if (!check_crc) return c.nbytes;
  const std::uint32_t whole = crc.whole();
  std::vector<std::uint64_t> bad;  // blocks whose checksum differs
  if (c.blocks) {
    const std::vector<std::uint32_t> got = crc.blocks();
    for (std::size_t k = 0; k < got.size(); ++k)
      if (got[k] != c.blocks->crc32c[k]) bad.push_back(k);
  }
  if (whole != c.crc32c && bad.empty()) {
    out.push_back({file, l.key(), "checksum mismatch (CRC32C " + std::to_string(whole) + ", expected " +
                   std::to_string(c.crc32c) + ")", c.offset, c.offset + c.nbytes});
  } else if (!bad.empty()) {
    const std::uint64_t block = c.blocks->block_bytes;
    const std::string which = whole == c.crc32c ? "the bytes match the chunk's CRC32C: the metadata's block checksum is wrong"
                                                : "the chunk's CRC32C differs too";
    for (std::size_t i = 0; i < bad.size() && i < 8; ++i) {
      const std::uint64_t at = bad[i] * block, end = std::min(at + block, c.nbytes);
      out.push_back({file, l.key(), "checksum mismatch in block " + std::to_string(bad[i]) + " of " +
                     std::to_string(c.blocks->crc32c.size()) + " (" + which + ")", c.offset + at, c.offset + end});
    }
    if (bad.size() > 8)
      out.push_back({file, l.key(), std::to_string(bad.size() - 8) + " more blocks of this chunk differ", c.offset,
                     c.offset + c.nbytes});
  }
  return c.nbytes;
}

// Every chunk of the records read in 4 MiB pieces and, with check_crc, checksummed; the
// problems found go to the report, in the records' order. `dir` is the key the data files are
// under. Where the store gains from reads in flight at once (a bucket: Store::parallel_reads),
// that many chunks are read side by side (one after another, 300 chunks on a bucket 20 ms
// away took 14 s); progress is told from the calling thread only, as a load's is.
inline void verify_chunks(const Store& store, const std::string& dir, const CheckpointMetadata& m, bool check_crc,
                          VerifyReport& report, const Progress& progress = {}) {
  DataFiles files(store, dir);  // at most a quarter of the open-file limit open at once
  for (const auto& item : m.items)
    for (const auto& u : item.unread) report.not_verified.push_back(u.path.str() + ": " + u.reason);
  struct Job {
    const LeafRecord* leaf;
    const ChunkRecord* chunk;
  };
  std::vector<Job> jobs;
  for (const auto& item : m.items)
    for (const auto& l : item.leaves)
      for (const auto& c : l.chunks) jobs.push_back({&l, &c});
  report.chunks += jobs.size();
  const std::uint64_t total = m.total_bytes();
  ProgressMeter meter(progress, total);
  std::vector<std::vector<VerifyProblem>> found(jobs.size());
  std::atomic<std::uint64_t> bytes{0};
  std::mutex opening;  // DataFiles opens each file once, on one thread at a time
  const int threads = std::max(1, store.parallel_reads());
  std::vector<unsigned char> shared_buf(threads == 1 ? std::size_t{4} << 20 : 0);
  for_each_index(jobs.size(), threads, [&](std::size_t k) {
    const LeafRecord& l = *jobs[k].leaf;
    const ChunkRecord& c = *jobs[k].chunk;
    const std::string file = store.describe(join_key(dir, c.file));
    try {
      const StoreReader* r;
      {
        std::lock_guard<std::mutex> lock(opening);
        r = &files.get(c.file);
      }
      std::vector<unsigned char> own_buf(threads == 1 ? 0 : std::min<std::uint64_t>(std::uint64_t{4} << 20, std::max<std::uint64_t>(c.nbytes, 1)));
      bytes += verify_chunk(*r, file, l, c, check_crc, threads == 1 ? shared_buf : own_buf, meter, found[k]);
    } catch (const Error& e) {
      found[k].push_back({file, l.key(), e.message(), c.offset, c.offset + c.nbytes});
    }
  });
  report.bytes += bytes.load();
  for (auto& f : found) report.problems.insert(report.problems.end(), std::make_move_iterator(f.begin()), std::make_move_iterator(f.end()));
  if (progress && !jobs.empty()) progress(std::min(meter.done(), total), total);  // the last, however few were told
}

// A committed cairn checkpoint: its metadata as metadata() reads it (the marker and both
// metadata files checked against it), then every chunk, with where its files are asked once
// for both (on a bucket, a read of the marker).
inline void verify_checkpoint(const Store& store, const std::string& key, VerifyReport& report, const Progress& progress) {
  const std::string readable = store.readable_checkpoint_to_load(key);
  PrintedKeys printed;
  verify_chunks(store, readable, read_metadata(store, readable, &printed), true, report, progress);
}

}  // namespace detail

CAIRN_API VerifyReport verify(const Location& given, const VerifyOptions& options) {
  std::optional<bool> committed;
  VerifyReport report;
  std::vector<std::string> steps;
  const detail::ForeignFormat* format = nullptr;
  detail::RootReading reading;  // a root's listing, read once
  reading.read_steps = false;   // each step's metadata is read by its own check below
  const Location location = detail::safetensors_set_or(given, &committed, &reading.listing);
  const Store& store = location.store();
  report.kind = detail::location_kind(location, &steps, committed, &format, &reading);
  report.path = location.describe();
  if (report.kind == LocationKind::checkpointer_root) {
    const Inspection root = detail::inspect_root(location, std::move(steps), reading.listing ? &*reading.listing : nullptr);
    if (root.latest_marker && !root.latest_problem.empty()) report.problems.push_back({root.path, "", root.latest_problem, 0, 0});
    for (const InspectedStep& step : root.steps) {
      const Location at = location / step.name;
      VerifyReport& one = report.steps.emplace_back();
      one.path = at.describe();
      one.checkpoints.push_back(one.path);
      try {
        // A cairn checkpoint of the directory is one: no other format is asked about it.
        if (const detail::ForeignFormat* f = reading.format_of(step.name)) {
          one.kind = f->kind;
          one.checksummed = false;
          const detail::ForeignView view = f->open(store, at.key());
          detail::verify_chunks(*view.store, "", view.metadata, false, one, options.progress);
        } else {
          detail::verify_checkpoint(store, at.key(), one, options.progress);
        }
      } catch (const Error& e) {
        one.problems.push_back({one.path, "", e.what(), 0, 0});
      }
      report.checkpoints.push_back(one.path);
      report.chunks += one.chunks;
      report.bytes += one.bytes;
      report.checksummed = report.checksummed && one.checksummed;
      report.problems.insert(report.problems.end(), one.problems.begin(), one.problems.end());
      for (const std::string& n : one.not_verified) report.not_verified.push_back(step.name + "/" + n);
    }
    return report;
  }
  report.checkpoints.push_back(report.path);
  if (report.kind == LocationKind::orbax) {
    // Every chunk read and decoded through the format's own view: the OCDBT nodes' and shard
    // indexes' CRC32Cs and any CRC32C codec are checked as they decode; the chunks' bytes
    // themselves carry no checksum in Orbax's default codecs (docs/orbax.md).
    report.checksummed = false;
    const detail::ForeignView view = format->open(store, location.key());
    detail::verify_chunks(*view.store, "", view.metadata, false, report, options.progress);
    return report;
  }
  if (report.kind == LocationKind::safetensors) {
    report.checksummed = false;  // the header is validated as it is read; every tensor byte is read
    detail::verify_chunks(store, detail::key_parent(location.key()), safetensors_metadata(location), false, report,
                          options.progress);
  } else {
    detail::verify_checkpoint(store, location.key(), report, options.progress);
  }
  return report;
}

CAIRN_END_NAMESPACE
