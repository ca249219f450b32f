// SPDX-License-Identifier: Apache-2.0
// The one reader of leaf data. Every stored leaf is a set of chunks, each a box of the global
// array (a plain leaf is one chunk: the whole array), and every target is a set of boxes (a
// plain target is one: the whole array, in C or F order). Each target box gets the
// intersection of its box with every stored chunk (N-d box intersection), copied by the
// box-copy kernel, cast on the way where the dtypes differ. A chunk that is one target's box
// in the same dtype and layout is read straight into the target.
//
// A chunk that this process's targets need whole is read once, sequentially, in pieces,
// each piece scattered to every target it overlaps, and its CRC32C is checked. A chunk that
// is needed only in part (the targets hold part of the array: another process holds the
// rest; a slice) is read in whole blocks of its block checksums (docs/format.md), each block
// verified: runs of sub-boxes whose byte spans are at most 1.1x the bytes they hold, widened
// to the blocks around them. A small chunk without block checksums is one block; a large one
// (written before them) is read in part, unverified (LoadReport::unverified_bytes), or whole
// where LoadOptions::require_verified asks.
#pragma once

#include <algorithm>
#ifdef __linux__
#include <sched.h>
#endif

#include <atomic>
#include <exception>
#include <cstring>
#include <future>
#include <map>
#include <thread>
#include <vector>

#include "cairn/checkpoint/data_files.hpp"
#include "cairn/checkpoint/options.hpp"
#include "cairn/device/memory.hpp"
#include "cairn/kernels/box_copy.hpp"
#include "cairn/io/block_crc32c.hpp"
#include "cairn/kernels/cast.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// Calls work(k, thread) for every k in [0, count): the even k in order on this thread
// (thread 0), the odd ones on a helper thread (thread 1). A failure on either stops the other
// at its next k and is thrown here, after the helper has ended. The loader's way of putting
// both cores on bytes that are in memory already (a large chunk's pieces, a part's runs, runs
// of small leaves).
template <class Work>
void on_two_threads(std::size_t count, Work&& work) {
  std::atomic<bool> failed{false};
  auto every_other = [&](std::size_t thread) {
    try {
      for (std::size_t k = thread; k < count && !failed.load(std::memory_order_relaxed); k += 2) work(k, thread);
    } catch (...) {
      failed = true;
      throw;
    }
  };
  // The future's destructor joins the helper, also when this thread throws.
  std::future<void> odd = std::async(std::launch::async, every_other, std::size_t{1});
  every_other(0);
  odd.get();
}

// The cores this process may run on: its CPU affinity where the system has one (an MPI rank
// bound to 4 cores, a container limited by cpuset, taskset), else every core.
inline std::size_t usable_cores() {
#ifdef __linux__
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return static_cast<std::size_t>(std::max(1, CPU_COUNT(&set)));
#endif
  return std::max<std::size_t>(1, std::thread::hardware_concurrency());
}

// Whether this thread is one of those reading large leaves side by side (read_scheduler.hpp's
// read_leaves_in_parallel): every core has a leaf then, and a chunk is not split further onto
// a second thread.
inline thread_local bool reading_leaves_in_parallel = false;

// Calls work(k) for every k in [0, count) on `threads` threads (this one and threads - 1
// helpers), each taking the next k as it is done with the last, so that leaves of different
// sizes spread evenly. A failure stops every thread at its next k; the failure of the lowest k
// among those that ran is thrown here, after the helpers have ended.
template <class Work>
void on_threads(std::size_t count, std::size_t threads, Work&& work) {
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::vector<std::exception_ptr> errors(count);
  auto take = [&] {
    const bool was = reading_leaves_in_parallel;
    reading_leaves_in_parallel = true;
    for (std::size_t k; !failed.load(std::memory_order_relaxed) && (k = next.fetch_add(1)) < count;) {
      try {
        work(k);
      } catch (...) {
        errors[k] = std::current_exception();
        failed = true;
      }
    }
    reading_leaves_in_parallel = was;
  };
  {
    std::vector<std::future<void>> helpers;  // their destructors join, also if this thread throws
    for (std::size_t t = 1; t < threads; ++t) helpers.push_back(std::async(std::launch::async, take));
    take();
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// A buffer holding `box` of the global array, in C or F order, in host or device memory.
struct BoxTarget {
  Box box;
  void* data = nullptr;
  MemoryKind memory = MemoryKind::host;
  int device = 0;
  bool column_major = false;
};

// Calls visit(piece, first, span) for sub-boxes of `region` (a box inside the chunk `chunk`,
// whose bytes are in C or F order). Each piece's elements lie within `span` consecutive
// elements of the chunk starting at element `first`, with span <= limit and
// span * 10 <= elements * 11, so reading the span reads at most 1.1x what is needed.
template <class Visit>
void split_for_reading(const Box& chunk, bool column_major, const Box& region, std::uint64_t limit, Visit&& visit) {
  const std::size_t rank = chunk.rank();
  const auto stride = dense_strides(chunk.shape, column_major);
  std::vector<std::size_t> outer_to_inner(rank);
  for (std::size_t k = 0; k < rank; ++k) outer_to_inner[k] = column_major ? rank - 1 - k : k;
  auto first_of = [&](const Box& p) {
    std::uint64_t f = 0;
    for (std::size_t d = 0; d < rank; ++d) f += static_cast<std::uint64_t>((p.start[d] - chunk.start[d]) * stride[d]);
    return f;
  };
  auto span_of = [&](const Box& p) {
    std::uint64_t s = 1;
    for (std::size_t d = 0; d < rank; ++d) s += static_cast<std::uint64_t>((p.shape[d] - 1) * stride[d]);
    return s;
  };
  auto fits = [&](std::uint64_t span, std::uint64_t need) { return span <= limit && span * 10 <= need * 11; };
  auto recurse = [&](auto& self, const Box& p, std::size_t level) -> void {
    const std::uint64_t need = p.elements();
    if (need == 0) return;
    const std::uint64_t span = span_of(p);
    if (fits(span, need)) return visit(p, first_of(p), span);
    while (level < rank && p.shape[outer_to_inner[level]] == 1) ++level;
    const std::size_t d = outer_to_inner[level];
    Box slab = p;
    slab.shape[d] = 1;
    const std::uint64_t s_in = span_of(slab), n_in = slab.elements(), step = static_cast<std::uint64_t>(stride[d]);
    const std::uint64_t extent = static_cast<std::uint64_t>(p.shape[d]);
    std::uint64_t group = 1;
    if (fits(s_in, n_in)) {
      // The most slabs per read that keep both bounds: (g-1)*step + s_in <= limit, and
      // ((g-1)*step + s_in) * 10 <= g * n_in * 11.
      group = (limit - s_in) / step + 1;
      if (step * 10 > n_in * 11) group = std::min(group, ((step - s_in) * 10) / (step * 10 - n_in * 11));
      group = std::clamp<std::uint64_t>(group, 1, extent);
      for (std::uint64_t i = 0; i < extent; i += group) {
        Box q = p;
        q.start[d] += static_cast<std::int64_t>(i);
        q.shape[d] = static_cast<std::int64_t>(std::min(group, extent - i));
        visit(q, first_of(q), span_of(q));
      }
      return;
    }
    for (std::uint64_t i = 0; i < extent; ++i) {
      slab.start[d] = p.start[d] + static_cast<std::int64_t>(i);
      self(self, slab, level + 1);
    }
  };
  recurse(recurse, region, 0);
}

// Where a chunk's bytes come from: its data file, or memory that already holds a stretch of
// that file (small leaves read together in one request).
struct ChunkSource {
  const StoreReader* file = nullptr;
  const unsigned char* memory = nullptr;  // holds the file's bytes from `memory_offset` on
  std::uint64_t memory_offset = 0;
  void read(void* dst, std::uint64_t n, std::uint64_t offset) const {
    if (memory) std::memcpy(dst, memory + (offset - memory_offset), static_cast<std::size_t>(n));
    else file->read_at(dst, n, offset);
  }
};

class BoxLeafReader {
 public:
  BoxLeafReader(const LeafRecord& stored, const LeafBuffer& buffer, const std::string& key, DataFiles& files,
                const LoadOptions& options, LoadReport& report)
      : s_(stored), key_(key), files_(files), options_(options), report_(report), to_(buffer.dtype),
        in_size_(dtype_size(stored.dtype)), out_size_(dtype_size(buffer.dtype)) {
    const std::size_t rank = s_.shape.size();
    chunk_column_major_ = rank >= 2 && s_.order == Order::F;
    if (buffer.shards.empty()) {
      targets_.push_back({whole_box(s_.shape), buffer.data, MemoryKind::host, 0, rank >= 2 && buffer.order == Order::F});
    } else {
      for (const auto& t : buffer.shards) targets_.push_back({t.box, t.data, t.memory, t.device, false});
    }
    for (const auto& t : targets_) {
      if (!box_inside(t.box, s_.shape))
        throw Error(ErrorKind::invalid_argument, "target shard box " + to_string(t.box) + " does not fit the stored "
                    "shape " + to_string(s_.shape), files_.describe(), key_);
      if (!t.data && t.box.elements() > 0)
        throw Error(ErrorKind::invalid_argument, "target shard " + to_string(t.box) + " has no buffer", files_.describe(), key_);
    }
    // Replicas share a group: they get the same bytes.
    for (std::size_t i = 0; i < targets_.size(); ++i) {
      std::size_t g = 0;
      while (g < groups_.size() && targets_[groups_[g].front()].box != targets_[i].box) ++g;
      if (g == groups_.size()) groups_.push_back({});
      groups_[g].push_back(i);
    }
    for (const auto& g : groups_) report_.bytes_needed += targets_[g.front()].box.elements() * in_size_;
    for (const auto& t : targets_) pinned_pieces_ = pinned_pieces_ || (CAIRN_CUDA && t.memory == MemoryKind::device);
    // LoadReport::shard_reads lists the targets of sharded or chunked leaves only.
    record_reads_ = !buffer.shards.empty() || s_.chunks.size() != 1;
    first_read_ = report_.shard_reads.size();
    if (record_reads_)
      for (const auto& t : targets_) report_.shard_reads.push_back({key_, t.box, t.memory, t.device, {}});
  }

  // Reads every chunk the targets need, in file order.
  void read() {
    std::vector<const ChunkRecord*> chunks;
    for (const auto& c : s_.chunks) chunks.push_back(&c);
    std::sort(chunks.begin(), chunks.end(), [](const ChunkRecord* a, const ChunkRecord* b) {
      return a->file != b->file ? a->file < b->file : a->offset < b->offset;
    });
    for (const ChunkRecord* c : chunks) read_chunk(*c, ChunkSource{&files_.get(c->file)});
  }
  // A one-chunk leaf whose file the caller has open already (the plan's ReadTask::file): no
  // lookup of its name (two per leaf were a twentieth of loading 10,000 small Orbax arrays).
  void read_one(const StoreReader& file) { read_chunk(s_.chunks.front(), ChunkSource{&file}); }

  // A one-chunk leaf whose bytes are in memory already (`memory` holds the file from
  // `memory_offset` on).
  void read_from_memory(const unsigned char* memory, std::uint64_t memory_offset) {
    read_chunk(s_.chunks.front(), ChunkSource{nullptr, memory, memory_offset});
  }

 private:
  struct Overlap {
    std::size_t group;
    Box box;
  };

  void read_chunk(const ChunkRecord& c, const ChunkSource& f) {
    const Box cb{c.start, c.shape};
    if (cb.elements() == 0) return;
    std::vector<Overlap> overlaps;
    std::uint64_t covered = 0;
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      Box i;
      if (!intersect(cb, targets_[groups_[g].front()].box, i)) continue;
      overlaps.push_back({g, i});
      covered += i.elements();
      if (record_reads_)
        for (std::size_t t : groups_[g]) report_.shard_reads[first_read_ + t].from_chunks.push_back(cb);
    }
    if (overlaps.empty()) return;  // no target here needs this chunk: not read
    // (execute_plan checked the chunk lies inside its file.)
    // A chunk without usable block checksums is verified only by reading all of it: done for
    // small ones and where the caller requires it. (Blocks beyond a read piece are not used:
    // the block read would hold one in memory.)
    const bool verify = options_.verify_checksums;
    const bool blocked = c.blocks && c.blocks->block_bytes <= read_piece_bytes;
    const bool read_whole = covered >= cb.elements() ||
                            (verify && !blocked && (c.nbytes <= verify_whole_chunk_bytes || options_.require_verified));
    try {
      if (read_whole) {
        // Needed whole: read sequentially, checksum every byte.
        std::uint32_t crc = 0;
        const bool direct = overlaps.size() == 1 && overlaps[0].box == cb && to_ == s_.dtype &&
                            targets_[groups_[overlaps[0].group].front()].box == cb &&
                            same_layout(targets_[groups_[overlaps[0].group].front()]);
        if (direct) {
          // Straight into the target, a piece at a time, each piece checksummed by the thread
          // that read it while it is still in cache, and while the kernel's readahead fetches
          // the next one. A large chunk whose bytes are mostly in memory (the page cache) is
          // read into host memory by two threads taking every other piece: the load is then
          // bound by the copy and the checksum, and two cores share them. The pieces'
          // checksums are joined at the end. A chunk that must come from the disk is read by
          // one thread: there, a second busy thread (two reading, or one checksumming) was
          // measured slower on two cores, as it competes with the kernel's own I/O work.
          const auto& group = groups_[overlaps[0].group];
          if (parallel_direct_read(group, c, f)) {
            const std::uint64_t count = (c.nbytes + crc_piece_bytes - 1) / crc_piece_bytes;
            std::vector<std::uint32_t> crcs(static_cast<std::size_t>(count), 0);
            on_two_threads(static_cast<std::size_t>(count), [&](std::size_t k, std::size_t) {
              const std::uint64_t at = k * crc_piece_bytes;
              read_direct(f, c, at, std::min<std::uint64_t>(crc_piece_bytes, c.nbytes - at), group, crcs[k]);
            });
            if (options_.verify_checksums) crc = join_block_crcs(crcs, crc_piece_bytes, c.nbytes);
          } else if (targets_[group.front()].memory != MemoryKind::host) {
            read_direct_to_device(f, c, group, crc);
          } else {
            for (std::uint64_t done = 0; done < c.nbytes;) {
              const std::uint64_t n = std::min<std::uint64_t>(crc_piece_bytes, c.nbytes - done);
              read_direct(f, c, done, n, group, crc);
              done += n;
            }
          }
        } else {
          struct Piece {
            Box box;
            std::uint64_t first, span;
          };
          std::vector<Piece> pieces;
          const std::uint64_t limit = std::max<std::uint64_t>(read_piece_bytes / in_size_, 1);
          split_for_reading(cb, chunk_column_major_, cb, limit, [&](const Box& piece, std::uint64_t first, std::uint64_t span) {
            pieces.push_back({piece, first, span});
          });
          // Piece k+1 is read on a helper thread while piece k is checksummed and scattered.
          unsigned char* piece_data[2] = {nullptr, nullptr};
          auto read_piece = [&](std::size_t k) {
            const std::size_t n = static_cast<std::size_t>(pieces[k].span * in_size_);
            piece_data[k % 2] = pieces_buf_[k % 2].get(n, pinned_pieces_);
            f.read(piece_data[k % 2], n, c.offset + pieces[k].first * in_size_);
          };
          read_piece(0);
          for (std::size_t k = 0; k < pieces.size(); ++k) {
            std::future<void> next;  // joined before this scope ends, also on error
            if (k + 1 < pieces.size()) next = std::async(std::launch::async, read_piece, k + 1);
            unsigned char* buf = piece_data[k % 2];
            if (options_.verify_checksums) crc = crc32c_extend(crc, buf, static_cast<std::size_t>(pieces[k].span * in_size_));
            if (s_.dtype == DType::bool_) normalize_bools(buf, pieces[k].span);
            for (const auto& o : overlaps) {
              Box j;
              if (intersect(pieces[k].box, o.box, j)) deliver(j, cb, pieces[k].first, o.group, buf);
            }
            if (next.valid()) next.get();
          }
        }
        if (!f.memory) report_.bytes_read += c.nbytes;
        if (verify) check_crc(crc, s_, c, files_);
        else report_.unverified_bytes += c.nbytes;
      } else if (verify && blocked) {
        read_part_in_blocks(c, cb, overlaps, f);
      } else {
        const std::uint64_t limit = std::max<std::uint64_t>(read_piece_bytes / in_size_, 1);
        for (const auto& o : overlaps) {
          split_for_reading(cb, chunk_column_major_, o.box, limit, [&](const Box& piece, std::uint64_t first, std::uint64_t span) {
            const std::uint64_t bytes = span * in_size_;
            unsigned char* buf = pieces_buf_[0].get(static_cast<std::size_t>(bytes), pinned_pieces_);
            f.read(buf, bytes, c.offset + first * in_size_);
            report_.bytes_read += bytes;
            report_.unverified_bytes += bytes;
            if (s_.dtype == DType::bool_) normalize_bools(buf, span);
            deliver(piece, cb, first, o.group, buf);
          });
        }
      }
    } catch (const Error& e) {
      throw e.with_key(key_).with_file(files_.describe(c.file));
    }
  }

  bool same_layout(const BoxTarget& t) const { return t.column_major == chunk_column_major_; }

  // Consecutive blocks [first, end) of a chunk read together, and the pieces of one overlap
  // they hold (each piece's elements from element `first` of the chunk on).
  struct BlockRun {
    std::uint64_t first = 0, end = 0;
    struct Piece {
      Box box;
      std::uint64_t first;
    };
    std::vector<Piece> pieces;
  };

  // A chunk needed in part, with block checksums: the sub-boxes of each overlap, in file
  // order, joined into runs of whole blocks of at most one read piece (a run may re-read the
  // block where the one before it ended). Run k+1 is read and verified on a helper thread
  // while run k is delivered, as the whole-chunk path does with its pieces.
  void read_part_in_blocks(const ChunkRecord& c, const Box& cb, const std::vector<Overlap>& overlaps, const ChunkSource& f) {
    const std::uint64_t block = c.blocks->block_bytes;
    const std::uint64_t limit = std::max<std::uint64_t>(read_piece_bytes / in_size_, 1);
    const std::uint64_t run_bytes = std::max(read_piece_bytes, 2 * block);
    for (const auto& o : overlaps) {
      std::vector<BlockRun> runs;
      split_for_reading(cb, chunk_column_major_, o.box, limit, [&](const Box& piece, std::uint64_t first, std::uint64_t span) {
        const std::uint64_t b0 = first * in_size_ / block, b1 = ((first + span) * in_size_ + block - 1) / block;
        if (runs.empty() || b0 > runs.back().end || (std::max(b1, runs.back().end) - runs.back().first) * block > run_bytes)
          runs.push_back({b0, b1, {}});
        BlockRun& run = runs.back();
        run.end = std::max(run.end, b1);
        run.pieces.push_back({piece, first});
      });
      auto bytes_of = [&](const BlockRun& r) {
        return std::make_pair(r.first * block, std::min(r.end * block, c.nbytes));
      };
      // A run is read a block at a time, each block checksummed as it arrives, while it is
      // still in the core's cache (tuning.hpp, crc_piece_bytes: the same reason).
      unsigned char* run_data[2] = {nullptr, nullptr};
      auto read_run = [&](std::size_t k) {
        const auto [from, to] = bytes_of(runs[k]);
        run_data[k % 2] = pieces_buf_[k % 2].get(static_cast<std::size_t>(to - from), pinned_pieces_);
        read_verified(c, f, runs[k], run_data[k % 2], from);
      };
      if (runs.empty()) continue;
      if (parallel_runs(o.group, runs.size(), c, f, bytes_of(runs.front()).first, bytes_of(runs.back()).second)) {
        // Two threads, each taking every other run whole (read, verify, deliver): the
        // deliveries of different runs fill disjoint parts of host targets, with no cast and
        // so no shared scratch buffer. Only where the bytes are in memory already, as for a
        // whole chunk (parallel_direct_read).
        std::vector<unsigned char> bufs[2];
        std::uint64_t read_bytes[2] = {0, 0};
        on_two_threads(runs.size(), [&](std::size_t k, std::size_t thread) {
          const auto [from, to] = bytes_of(runs[k]);
          std::vector<unsigned char>& buf = bufs[thread];
          buf.resize(static_cast<std::size_t>(to - from));
          read_verified(c, f, runs[k], buf.data(), from);
          read_bytes[thread] += to - from;
          if (s_.dtype == DType::bool_) normalize_bools(buf.data(), to - from);
          for (const auto& p : runs[k].pieces) deliver(p.box, cb, p.first, o.group, buf.data() + (p.first * in_size_ - from));
        });
        if (!f.memory) report_.bytes_read += read_bytes[0] + read_bytes[1];
        continue;
      }
      read_run(0);
      for (std::size_t k = 0; k < runs.size(); ++k) {
        std::future<void> next;  // joined before this scope ends, also on error
        if (k + 1 < runs.size()) next = std::async(std::launch::async, read_run, k + 1);
        const auto [from, to] = bytes_of(runs[k]);
        unsigned char* buf = run_data[k % 2];
        if (!f.memory) report_.bytes_read += to - from;
        if (s_.dtype == DType::bool_) normalize_bools(buf, to - from);
        for (const auto& p : runs[k].pieces) deliver(p.box, cb, p.first, o.group, buf + (p.first * in_size_ - from));
        if (next.valid()) next.get();
      }
    }
  }

  // Reads the blocks of `run` into `buf` (which holds the chunk's bytes from byte `from` on), a
  // block at a time, each checksummed as it arrives, while it is still in the core's cache
  // (tuning.hpp, crc_piece_bytes: the same reason).
  void read_verified(const ChunkRecord& c, const ChunkSource& f, const BlockRun& run, unsigned char* buf,
                     std::uint64_t from) const {
    const std::uint64_t block = c.blocks->block_bytes;
    for (std::uint64_t b = run.first; b < run.end; ++b) {
      const std::uint64_t at = b * block, n = std::min(block, c.nbytes - at);
      unsigned char* dst = buf + (at - from);
      f.read(dst, n, c.offset + at);
      const std::uint32_t got = crc32c(dst, static_cast<std::size_t>(n));
      const std::uint32_t want = c.blocks->crc32c[static_cast<std::size_t>(b)];
      if (got != want)
        throw Error(ErrorKind::corrupt, "checksum mismatch in bytes " + std::to_string(c.offset + at) + ".." +
                    std::to_string(c.offset + at + n) + " (block " + std::to_string(b) + " of the chunk at bytes " +
                    std::to_string(c.offset) + ".." + std::to_string(c.offset + c.nbytes) + "; CRC32C " +
                    std::to_string(got) + ", expected " + std::to_string(want) + ")");
    }
  }

  // Whether the runs of a chunk read in part go to two threads: at least two runs, a second
  // core, every target of the group in host memory and no cast (deliver then shares no
  // scratch), and at least three quarters of the bytes in memory already.
  bool parallel_runs(std::size_t group, std::size_t runs, const ChunkRecord& c, const ChunkSource& f, std::uint64_t from,
                     std::uint64_t to) const {
    static const bool cores = std::thread::hardware_concurrency() > 1;
    if (runs < 2 || !cores || reading_leaves_in_parallel || !f.file || to_ != s_.dtype) return false;
    for (std::size_t t : groups_[group])
      if (targets_[t].memory != MemoryKind::host) return false;
    return f.file->cached_bytes(c.offset + from, to - from) >= (to - from) / 4 * 3;
  }

  // The chunk equals the target's box in the same layout and dtype: `bytes` bytes from byte
  // `first` of the chunk go straight into the first host target (or through the scratch
  // buffer to device targets), then to replicas.
  // Whether a chunk read straight into its targets is read by two threads: large, every
  // target in host memory (device copies stay on one thread), a second core to run on, and
  // at least three quarters of its bytes in memory already (StoreReader::cached_bytes; the
  // page cache of a file just written or read can lack a few pages).
  bool parallel_direct_read(const std::vector<std::size_t>& group, const ChunkRecord& c, const ChunkSource& f) const {
    static const bool cores = std::thread::hardware_concurrency() > 1;
    if (c.nbytes < parallel_read_bytes || !cores || reading_leaves_in_parallel || !f.file) return false;
    for (std::size_t t : group)
      if (targets_[t].memory != MemoryKind::host) return false;
    return f.file->cached_bytes(c.offset, c.nbytes) >= c.nbytes / 4 * 3;
  }

  // Reads bytes [first, first + bytes) of the chunk into the group's first target (in host
  // memory), then copies them to the others.
  void read_direct(const ChunkSource& f, const ChunkRecord& c, std::uint64_t first, std::uint64_t bytes,
                   const std::vector<std::size_t>& group, std::uint32_t& crc) {
    unsigned char* buf = static_cast<unsigned char*>(targets_[group.front()].data) + first;
    f.read(buf, bytes, c.offset + first);
    if (options_.verify_checksums) crc = crc32c_extend(crc, buf, static_cast<std::size_t>(bytes));
    if (s_.dtype == DType::bool_) normalize_bools(buf, bytes);
    for (std::size_t t : group) {
      const BoxTarget& target = targets_[t];
      unsigned char* dst = static_cast<unsigned char*>(target.data) + first;
      if (dst != buf) copy_bytes(dst, target.memory, buf, MemoryKind::host, static_cast<std::size_t>(bytes));
    }
  }

  // A chunk read straight into a group whose first target is in device memory: a piece at a
  // time into two page-locked buffers, each piece checksummed as it arrives; a helper thread
  // copies piece k to every target while piece k+1 is read. (Reading 256 KiB pieces into
  // pageable memory, each copied before the next read, loaded a 1 GiB device array at 0.89x of
  // a read into pinned memory plus one copy: docs/benchmarks.md, GPU.)
  void read_direct_to_device(const ChunkSource& f, const ChunkRecord& c, const std::vector<std::size_t>& group,
                             std::uint32_t& crc) {
    const std::uint64_t piece = std::min(device_read_piece_bytes, c.nbytes);
    std::future<void> copying;  // joined before the buffers are reused or this scope ends, also on error
    for (std::uint64_t done = 0, k = 0; done < c.nbytes; ++k) {
      const std::uint64_t n = std::min(piece, c.nbytes - done);
      unsigned char* buf = pieces_buf_[k % 2].get(static_cast<std::size_t>(piece), CAIRN_CUDA != 0);
      // The buffer's last copy (piece k-2) was joined before piece k-1's began.
      for (std::uint64_t at = 0; at < n; at += crc_piece_bytes) {
        const std::uint64_t len = std::min(crc_piece_bytes, n - at);
        f.read(buf + at, len, c.offset + done + at);
        if (options_.verify_checksums) crc = crc32c_extend(crc, buf + at, static_cast<std::size_t>(len));
      }
      if (s_.dtype == DType::bool_) normalize_bools(buf, n);
      if (copying.valid()) copying.get();
      copying = std::async(std::launch::async, [this, &group, buf, n, done] {
        for (std::size_t t : group) {
          const BoxTarget& target = targets_[t];
          copy_bytes(static_cast<unsigned char*>(target.data) + done, target.memory, buf, MemoryKind::host,
                     static_cast<std::size_t>(n));
        }
      });
      done += n;
    }
    if (copying.valid()) copying.get();
  }

  // Copies region `j` (held in `src`, which starts at element `first` of the chunk) into
  // every target of the group, casting on the way when the target's dtype differs.
  void deliver(const Box& j, const Box& chunk_box, std::uint64_t first, std::size_t group, const unsigned char* src) {
    const auto& members = groups_[group];
    const bool cast = to_ != s_.dtype;
    bool all_host = true;
    for (std::size_t t : members) all_host = all_host && targets_[t].memory == MemoryKind::host;
    if (!cast && all_host) {
      for (std::size_t t : members) {
        BoxCopyPlan plan = plan_box_copy(j, chunk_box, chunk_column_major_, targets_[t].box, targets_[t].column_major);
        plan.src_offset -= first;
        box_copy_host(in_size_, src, targets_[t].data, plan);
      }
      return;
    }
    // Gather the region compactly (C order), then place it in each target: cast on the host
    // for host targets (once, whatever their number), on the device for device targets, so
    // that the stored bytes cross to the GPU (half of a bfloat16 -> float32 load's) and the GPU
    // converts them (cairn-bench --sharded: 0.29x of a raw load cast on the host).
    const std::uint64_t n = j.elements();
    BoxCopyPlan plan = plan_box_copy(j, chunk_box, chunk_column_major_, j, false);
    plan.src_offset -= first;
    const unsigned char* compact;
    if (plan.region.rank == 1 && plan.region.src_stride[0] == 1) {
      compact = src + plan.src_offset * in_size_;  // already one C-order run (whole rows of a C chunk): no copy
    } else {
      unsigned char* gathered = compact_.get(static_cast<std::size_t>(n * in_size_), pinned_pieces_);
      box_copy_host(in_size_, src, gathered, plan);
      compact = gathered;
    }
    const unsigned char* converted = cast ? nullptr : compact;
    auto host_values = [&] {
      if (!converted) {
        converted_.resize(static_cast<std::size_t>(n * out_size_));
        cast_host(s_.dtype, compact, to_, converted_.data(), static_cast<std::size_t>(n), options_.on_overflow);
        converted = converted_.data();
      }
      return converted;
    };
    for (std::size_t t : members) {
      const BoxTarget& target = targets_[t];
      const BoxCopyPlan place = plan_box_copy(j, j, false, target.box, target.column_major);
      if (target.memory == MemoryKind::host) {
        box_copy_host(out_size_, host_values(), target.data, place);
        continue;
      }
      const std::size_t in_bytes = static_cast<std::size_t>(n * in_size_), out_bytes = static_cast<std::size_t>(n * out_size_);
      if (!cast && j == target.box) {
        copy_bytes(target.data, MemoryKind::device, compact, MemoryKind::host, in_bytes);
        continue;
      }
      // To the device, then the cast and the box copy run there.
      DeviceBytes& stored = device_scratch(device_scratch_, target.device, in_bytes);
      copy_bytes(stored.data(), MemoryKind::device, compact, MemoryKind::host, in_bytes);
      const void* values = stored.data();
      if (cast) {
        DeviceGuard guard(target.device);
        void* to = j == target.box ? target.data : device_scratch(device_cast_scratch_, target.device, out_bytes).data();
        cast_device(s_.dtype, stored.data(), to_, to, static_cast<std::size_t>(n), options_.on_overflow);
        if (to == target.data) continue;
        values = to;
      }
      box_copy_device(out_size_, values, target.data, place, target.device);
    }
  }

  static DeviceBytes& device_scratch(std::map<int, DeviceBytes>& scratch, int device, std::size_t bytes) {
    DeviceBytes& d = scratch[device];
    if (d.size() < bytes) d = DeviceBytes(std::max(bytes, static_cast<std::size_t>(read_piece_bytes)), device);
    return d;
  }

  const LeafRecord& s_;
  std::string key_;
  DataFiles& files_;
  const LoadOptions& options_;
  LoadReport& report_;
  DType to_;
  std::size_t in_size_, out_size_;
  bool chunk_column_major_ = false;
  std::vector<BoxTarget> targets_;
  std::vector<std::vector<std::size_t>> groups_;
  std::size_t first_read_ = 0;
  bool record_reads_ = false;
  std::vector<unsigned char> converted_;
  StagingBuffer pieces_buf_[2], compact_;
  bool pinned_pieces_ = false;  // a target is in device memory: pieces are read into pinned memory
  std::map<int, DeviceBytes> device_scratch_, device_cast_scratch_;  // per device: stored bytes, cast values
};

}  // namespace detail
CAIRN_END_NAMESPACE
