// SPDX-License-Identifier: Apache-2.0
// Writing leaves into a checkpoint's data file: the bytes of each leaf appended to this
// rank's data file through the store (small leaves gathered into large writes, large ones
// straight from the caller's memory), sharded leaves written box by box by their primary
// holder (a plain leaf is one whole box), casts and device memory a piece at a time through
// the leaf encoder (leaf_encoder.hpp) into two pinned buffers.
#pragma once

#include <algorithm>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cairn/core/tuning.hpp"
#include "cairn/checkpoint/coverage.hpp"
#include "cairn/checkpoint/leaf_encoder.hpp"
#include "cairn/checkpoint/options.hpp"
#include "cairn/device/memory.hpp"
#include "cairn/format/files.hpp"
#include "cairn/io/crc_worker.hpp"
#include "cairn/kernels/cast.hpp"
#include "cairn/store/store.hpp"
#include "cairn/tree/traits.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// Large leaves start on 4 KiB boundaries (page-aligned for mmap and O_DIRECT), those of 4 KiB
// or more on 64 bytes (a cache line), smaller ones on 16 bytes: the widest element (complex128)
// and vector load, so that a reader may still use any leaf in place. Tiny leaves padded to 64
// made a tenth of the data of 10,000 leaves of 64-512 bytes zeros, which an object store's load
// fetched as it fetches data (docs/format.md).
inline std::uint64_t leaf_alignment(std::uint64_t nbytes) {
  return nbytes >= (64u << 10) ? 4096 : nbytes >= (4u << 10) ? 64 : 16;
}

class DataFileWriter {
 public:
  DataFileWriter(Store& store, const std::string& staging_key, std::string name)
      : name_(std::move(name)), file_(store.create(join_key(staging_key, name_))) {}

  const std::string& name() const { return name_; }
  std::uint64_t size() const { return end_; }

  // Appends n bytes at the next aligned offset and returns where they went and their CRC.
  ChunkRecord append(const void* data, std::uint64_t n) {
    const std::uint64_t align = leaf_alignment(n);
    const std::uint64_t offset = (end_ + align - 1) / align * align;
    ChunkRecord c;
    c.file = name_;
    c.offset = offset;
    c.nbytes = n;
    if (n < small_leaf_bytes) {
      if (n > crc_block_bytes) {
        BlockCrc32c blocks(crc_block_bytes);
        blocks.extend(data, static_cast<std::size_t>(n));
        set_crcs(c, blocks);
      } else {
        c.crc32c = crc32c(data, static_cast<std::size_t>(n));
      }
      if (file_->copies_writes()) {
        // Straight into the store's own buffers (an S3 part): gathered here first, the leaves
        // were copied twice, the second time from a staging buffer of new memory, whose page
        // faults were a fifth of a first save of 10,000 small leaves to S3 (docs/benchmarks.md).
        // The padding between leaves is never written: the store's buffer reads as zeros there.
        file_->write_at(data, n, offset);
        end_ = offset + n;
        return c;
      }
      if (staging_.empty()) staging_.reserve(staging_bytes);
      if (!staging_.empty() && offset + n - staging_base_ > staging_bytes) flush();
      if (staging_.empty()) staging_base_ = offset;
      staging_.resize(static_cast<std::size_t>(offset - staging_base_), 0);  // zero padding
      const char* p = static_cast<const char*>(data);
      staging_.insert(staging_.end(), p, p + n);
    } else {
      flush();
      crc_.begin(crc_block_bytes);
      crc_.submit(data, static_cast<std::size_t>(n));  // checksummed while it is written
      file_->write_at(data, n, offset);
      c.crc32c = crc_.finish();
      if (n > crc_block_bytes) c.blocks = BlockChecksums{crc_block_bytes, crc_.blocks()};
    }
    end_ = offset + n;
    return c;
  }

  // Appends n bytes that fill(offset, len, dst) produces a piece at a time (a device-to-host
  // copy, a cast): the next piece is produced on a helper thread while this one is written,
  // and only two pieces are ever in host memory.
  template <class Fill>
  ChunkRecord append_produced(std::uint64_t n, std::uint64_t piece, Fill&& fill) {
    if (n < small_leaf_bytes) {
      std::vector<unsigned char> tmp(static_cast<std::size_t>(n));
      fill(std::uint64_t{0}, n, tmp.data());
      return append(tmp.data(), n);
    }
    flush();
    const std::uint64_t align = leaf_alignment(n);
    const std::uint64_t offset = (end_ + align - 1) / align * align;
    piece = std::min(piece, n);
    PinnedBytes bufs[2] = {PinnedBytes(static_cast<std::size_t>(piece)), PinnedBytes(static_cast<std::size_t>(piece))};
    BlockCrc32c crc(crc_block_bytes);
    fill(std::uint64_t{0}, piece, bufs[0].data());
    for (std::uint64_t done = 0, k = 0; done < n; ++k) {
      const std::uint64_t len = std::min(piece, n - done), next = done + len;
      std::future<void> producing;  // joined before the buffers go away, also on error
      if (next < n)
        producing = std::async(std::launch::async, [&, next, k] {
          fill(next, std::min(piece, n - next), bufs[(k + 1) % 2].data());
        });
      file_->write_at(bufs[k % 2].data(), len, offset + done);
      crc.extend(bufs[k % 2].data(), static_cast<std::size_t>(len));
      if (producing.valid()) producing.get();
      done = next;
    }
    end_ = offset + n;
    ChunkRecord c;
    c.file = name_;
    c.offset = offset;
    c.nbytes = n;
    set_crcs(c, crc);
    return c;
  }

  // Flushes, then makes the file durable (fsync and close for a file).
  void finish() {
    flush();
    file_->finish(end_);
  }

 private:
  // The chunk's CRC32C, and its blocks' where it has more than one.
  static void set_crcs(ChunkRecord& c, const BlockCrc32c& crc) {
    c.crc32c = crc.whole();
    if (crc.total() > crc.block_bytes()) c.blocks = BlockChecksums{crc.block_bytes(), crc.blocks()};
  }

  void flush() {
    if (staging_.empty()) return;
    file_->write_at(staging_.data(), staging_.size(), staging_base_);
    staging_.clear();
  }

  std::string name_;
  std::unique_ptr<StoreWriter> file_;
  std::uint64_t end_ = 0;
  std::vector<char> staging_;
  std::uint64_t staging_base_ = 0;
  CrcWorker crc_;
};

// Writes the leaves of one rank. Rank 0 writes every leaf that is not sharded; every rank
// writes the shards whose primary holder it has (or its slabs of replicated boxes), and the
// leaves of its per-rank items. The data file is created on the first write.
class LeafWriter {
 public:
  LeafWriter(Store& store, std::string staging_key, int rank, int ranks)
      : store_(store), staging_key_(std::move(staging_key)), rank_(rank), ranks_(ranks) {}

  // The data file, if this rank wrote any byte.
  DataFileWriter* data() { return data_.get(); }
  void drop() { data_.reset(); }

  // The dtype a cast rule gives this leaf on save (its own when no rule applies).
  static DType cast_target(const std::string& key, const LeafView& view, const SaveOptions& options) {
    return cast_rule_target(options.cast, key, view.dtype);
  }

  DataFileWriter& data_file() {
    if (!data_) data_ = std::make_unique<DataFileWriter>(store_, staging_key_, data_file_name(rank_, 0));
    return *data_;
  }

  // A leaf in shards (or in device memory): each distinct box written once (by its primary
  // holder, or in slabs by all its holders: ReplicaWrites::split); device shards are cast on
  // the device and copied to the host a piece at a time while the previous piece is written.
  LeafRecord write_sharded_leaf(const KeyPath& p, const LeafView& view, const SaveOptions& options, SaveReport& report) {
    LeafRecord rec;
    rec.path = p;
    rec.saved_from = view.dtype;
    rec.shape = view.shape;
    rec.order = Order::C;
    rec.sharding = view.sharding;
    if (view.dtype == DType::string) throw Error(ErrorKind::invalid_argument, "string leaves cannot be sharded");
    if (ranks_ > 1 && view.sharding && view.sharding->mesh.this_process() != rank_)
      throw Error(ErrorKind::invalid_argument, "the array's mesh says this is process " +
                  std::to_string(view.sharding->mesh.this_process()) + ", but this is rank " + std::to_string(rank_) +
                  " of the save: give every rank's mesh its processes (Mesh::assign_processes or "
                  "Mesh::host_per_process / device_per_process) with this rank as this_process");
    rec.dtype = cast_target(p.str(), view, options);
    if (rec.dtype != view.dtype) report.cast.push_back({p.str(), view.dtype, rec.dtype});
    for (const auto& shard : view.shards) {
      if (!box_inside(shard.box, view.shape))
        throw Error(ErrorKind::invalid_argument, "shard box " + to_string(shard.box) + " lies outside the array " +
                    to_string(view.shape));
      if (shard.box.elements() > 0 && !shard.data)
        throw Error(ErrorKind::invalid_argument, "shard " + to_string(shard.box) + " has no data");
    }
    const bool split = options.replicas == ReplicaWrites::split && view.sharding;
    // For split writes: the processes holding each box, in mesh order.
    std::map<std::pair<Shape, Shape>, std::vector<int>> holders_of;
    if (split) {
      const auto boxes = view.sharding->shard_boxes(view.shape);
      for (std::size_t i = 0; i < boxes.size(); ++i) {
        auto& h = holders_of[std::make_pair(boxes[i].start, boxes[i].shape)];
        const int proc = view.sharding->mesh.devices()[i].process;
        if (std::find(h.begin(), h.end(), proc) == h.end()) h.push_back(proc);
      }
    }
    std::map<std::pair<Shape, Shape>, bool> written;
    std::uint64_t covered = 0;  // elements this rank wrote
    for (const auto& shard : view.shards) {
      if (shard.box.elements() == 0 || !written.emplace(std::make_pair(shard.box.start, shard.box.shape), true).second)
        continue;
      if (!split) {
        if (shard.primary) {
          write_box(rec, view, shard, shard.box, 0, options, report);
          covered += static_cast<std::uint64_t>(shard.box.elements());
        }
        continue;
      }
      // This process's slab of the box, by its place among the box's holders.
      const std::vector<int>& holders = holders_of[std::make_pair(shard.box.start, shard.box.shape)];
      const std::int64_t me =
          std::find(holders.begin(), holders.end(), view.sharding->mesh.this_process()) - holders.begin();
      if (me == static_cast<std::int64_t>(holders.size())) continue;  // not a holder by the mesh: nothing to write
      // Slabs along the first dimension longer than 1: all dimensions before it have extent
      // 1, so a slab is contiguous in the shard's C-order memory.
      Box slab = shard.box;
      std::size_t d = 0;
      while (d < slab.shape.size() && slab.shape[d] <= 1) ++d;
      std::uint64_t skip = 0;  // elements before the slab
      if (d < slab.shape.size()) {
        const std::int64_t n = shard.box.shape[d], k = static_cast<std::int64_t>(holders.size());
        const std::int64_t per = (n + k - 1) / k, from = std::min(n, per * me), len = std::min(per, n - from);
        slab.start[d] += from;
        slab.shape[d] = len;
        std::uint64_t inner = 1;
        for (std::size_t e = d + 1; e < slab.shape.size(); ++e) inner *= static_cast<std::uint64_t>(slab.shape[e]);
        skip = static_cast<std::uint64_t>(from) * inner;
      } else if (me != 0) {
        continue;  // one element: its first holder writes it
      }
      if (slab.elements() > 0) {
        write_box(rec, view, shard, slab, skip, options, report);
        covered += static_cast<std::uint64_t>(slab.elements());
      }
    }
    // Alone, this rank writes every box: a mesh that spans other processes (saved without
    // their coordinator) leaves parts of the array unwritten. With several ranks the primary
    // checks the merged records instead (commit.hpp).
    if (ranks_ == 1 && covered != element_count(view.shape))
      throw uncovered_leaf_error(covered, view, save_without_coordinator_remedy);
    return rec;
  }

  // Writes `box`, which starts `skip` elements into `shard`'s memory, as one chunk: straight
  // from host memory as it is, or a piece at a time through the encoder (a cast, device
  // memory), each piece made on a helper thread while the one before it is written.
  void write_box(LeafRecord& rec, const LeafView& view, const ShardView& shard, const Box& box, std::uint64_t skip,
                 const SaveOptions& options, SaveReport& report) {
    const std::size_t in_size = dtype_size(view.dtype), out_size = dtype_size(rec.dtype);
    const std::uint64_t n = box.elements();
    ChunkRecord chunk;
    if (shard.memory == MemoryKind::host && rec.dtype == view.dtype) {
      chunk = data_file().append(static_cast<const unsigned char*>(shard.data) + skip * in_size, n * in_size);
    } else {
      const std::uint64_t piece_elements = write_piece_bytes / std::max(in_size, out_size);
      LeafEncoder encoder(view.dtype, rec.dtype, options.on_overflow);
      chunk = data_file().append_produced(n * out_size, piece_elements * out_size,
                                          [&](std::uint64_t off, std::uint64_t len, unsigned char* dst) {
        encoder.encode(shard.data, shard.memory, shard.device, skip + off / out_size, len / out_size, dst);
      });
    }
    chunk.start = box.start;
    chunk.shape = box.shape;
    report.bytes_written += chunk.nbytes;
    rec.chunks.push_back(std::move(chunk));
  }

  // `own`: a leaf of this rank's own (a per-rank item), written here whatever the rank.
  LeafRecord write_leaf(const KeyPath& p, const LeafView& view, const SaveOptions& options, SaveReport& report,
                        bool own = false) {
    // A sharded view whose async snapshot kept no box of this process is still sharded.
    if (!view.shards.empty() || view.sharding) return write_sharded_leaf(p, view, options, report);
    LeafRecord rec;
    if (rank_ != 0 && !own) {
      // Written by rank 0; this rank keeps the place and what it would have written, so that
      // the commit can check that every rank saved the same tree (SaveSession::tree_digest).
      rec.path = p;
      rec.saved_from = view.dtype;
      rec.dtype = options.cast.empty() ? view.dtype : cast_target(p.str(), view, options);
      rec.shape = view.shape;
      rec.order = view.shape.size() >= 2 ? view.order : Order::C;
      return rec;
    }
    rec.path = p;
    rec.saved_from = view.dtype;
    rec.dtype = view.dtype;
    rec.shape = view.shape;
    rec.order = view.shape.size() >= 2 ? view.order : Order::C;
    const std::uint64_t expected = byte_count(view.shape, dtype_size(view.dtype));
    if (view.dtype != DType::string && expected != view.nbytes)
      throw Error(ErrorKind::invalid_argument, "leaf view says " + std::to_string(view.nbytes) + " bytes for shape " +
                  to_string(view.shape) + " of " + dtype_name(view.dtype));
    // A plain leaf is one box, the whole array, in this process's memory: the same writer as a
    // shard's (the mirror of the one reader), so a cast runs a piece at a time beside the write
    // instead of into a buffer the size of the leaf.
    // (The printed key only where there are cast rules to match it: a third of the key paths a
    // save of 10,000 small leaves printed.)
    if (!options.cast.empty()) {
      const std::string key = p.str();
      if (const DType to = cast_target(key, view, options); to != view.dtype) {
        rec.dtype = to;
        report.cast.push_back({key, view.dtype, to});
      }
    }
    const ShardView whole{Box{Shape(view.shape.size(), 0), view.shape}, view.data, MemoryKind::host, 0, true};
    if (view.dtype == DType::string) {  // bytes, not elements of a shape
      ChunkRecord chunk = data_file().append(view.data, view.nbytes);
      chunk.start.assign(rec.shape.size(), 0);
      chunk.shape = rec.shape;
      rec.chunks.push_back(std::move(chunk));
      report.bytes_written += view.nbytes;
      return rec;
    }
    try {
      write_box(rec, view, whole, whole.box, 0, options, report);
    } catch (const Error& e) {
      throw e.key_path().empty() ? e.with_key(p.str()) : e;
    }
    return rec;
  }
 private:
  Store& store_;
  std::string staging_key_;
  int rank_ = 0, ranks_ = 1;
  std::unique_ptr<DataFileWriter> data_;
};

}  // namespace detail
CAIRN_END_NAMESPACE
