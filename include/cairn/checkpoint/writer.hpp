// CheckpointWriter: writes the items of one checkpoint into a claimed staging directory beside
// the final path and commits it (checkpoint/commit.hpp): data and metadata are fsynced and
// closed, the commit marker is written last, every file is checked to be there, then the
// directory is published with one rename. Until commit() returns, the final path holds either
// nothing or the previous checkpoint; a writer destroyed without committing removes its
// staging directory.
#pragma once

#include <atomic>
#include <chrono>
#include <cstring>
#include <ctime>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "cairn/checkpoint/commit.hpp"
#include "cairn/checkpoint/options.hpp"
#include "cairn/checkpoint/snapshot.hpp"
#include "cairn/device/memory.hpp"
#include "cairn/format/files.hpp"
#include "cairn/io/crc_worker.hpp"
#include "cairn/tree/walk.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

inline std::string library_version_string() {
  return std::to_string(CAIRN_VERSION_MAJOR) + "." + std::to_string(CAIRN_VERSION_MINOR) + "." +
         std::to_string(CAIRN_VERSION_PATCH);
}

// Large leaves start on 4 KiB boundaries (page-aligned for mmap and O_DIRECT), small ones on
// 64 bytes so that thousands of tiny leaves do not pad the file to many times its size.
inline std::uint64_t leaf_alignment(std::uint64_t nbytes) { return nbytes >= (64u << 10) ? 4096 : 64; }

// Pieces in which device shards cross to the host (and casts run) while being written.
inline constexpr std::uint64_t write_piece_bytes = std::uint64_t{8} << 20;

class DataFileWriter {
 public:
  DataFileWriter(std::string dir, std::string name)
      : name_(std::move(name)), file_(File::create(join_path(dir, name_))) {}

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
      c.crc32c = crc32c(data, static_cast<std::size_t>(n));
      if (staging_.empty()) staging_.reserve(staging_bytes);
      if (!staging_.empty() && offset + n - staging_base_ > staging_bytes) flush();
      if (staging_.empty()) staging_base_ = offset;
      staging_.resize(static_cast<std::size_t>(offset - staging_base_), 0);  // zero padding
      const char* p = static_cast<const char*>(data);
      staging_.insert(staging_.end(), p, p + n);
    } else {
      flush();
      crc_.begin();
      crc_.submit(data, static_cast<std::size_t>(n));  // checksummed while it is written
      file_.write_at(data, n, offset);
      c.crc32c = crc_.finish();
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
    std::uint32_t crc = 0;
    fill(std::uint64_t{0}, piece, bufs[0].data());
    for (std::uint64_t done = 0, k = 0; done < n; ++k) {
      const std::uint64_t len = std::min(piece, n - done), next = done + len;
      std::future<void> producing;  // joined before the buffers go away, also on error
      if (next < n)
        producing = std::async(std::launch::async, [&, next, k] {
          fill(next, std::min(piece, n - next), bufs[(k + 1) % 2].data());
        });
      file_.write_at(bufs[k % 2].data(), len, offset + done);
      crc = crc32c_extend(crc, bufs[k % 2].data(), static_cast<std::size_t>(len));
      if (producing.valid()) producing.get();
      done = next;
    }
    end_ = offset + n;
    ChunkRecord c;
    c.file = name_;
    c.offset = offset;
    c.nbytes = n;
    c.crc32c = crc;
    return c;
  }

  // Flushes, fsyncs and closes the file.
  void finish() {
    flush();
    file_.truncate(end_);
    file_.sync();
    file_.close();
  }

 private:
  void flush() {
    if (staging_.empty()) return;
    file_.write_at(staging_.data(), staging_.size(), staging_base_);
    staging_.clear();
  }

  std::string name_;
  File file_;
  std::uint64_t end_ = 0;
  std::vector<char> staging_;
  std::uint64_t staging_base_ = 0;
  CrcWorker crc_;
};

class CheckpointWriter {
 public:
  CheckpointWriter(const std::string& path, bool overwrite)
      : path_(normalize_dir(path)), overwrite_(overwrite) {
    if (path_.empty()) throw Error(ErrorKind::invalid_argument, "empty checkpoint path");
    if (path_.find(temp_infix) != std::string::npos || path_.find(legacy_old_infix) != std::string::npos)
      throw Error(ErrorKind::invalid_argument, std::string("checkpoint paths may not contain '") + temp_infix + "' or '" +
                  legacy_old_infix + "'", path_);
    const std::string parent = parent_dir(path_);
    if (!is_directory(parent)) {
      std::error_code ec;
      std::filesystem::create_directories(parent, ec);
      if (ec) throw Error(ErrorKind::io, "cannot create parent directory: " + ec.message(), parent);
    }
    // The leftovers of earlier saves of this path that died: staging directories are removed,
    // and a previous checkpoint that an interrupted overwrite set aside is put back first, so
    // the overwrite rule below sees it.
    const std::string name = base_name(path_);
    clean_leftovers(parent, &name);
    check_target(path_, overwrite_);
    claim_ = StagingClaim::create(path_);
    make_dir(staging());
    metadata_.library_version = library_version_string();
  }
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;
  ~CheckpointWriter() {
    if (!committed_) {
      data_.reset();
      std::error_code ec;
      std::filesystem::remove_all(staging(), ec);  // best effort: what is left, the next save or Checkpointer removes
    }
    claim_.release();
  }

  const std::string& path() const { return path_; }

  // Starts an item; its leaves follow through add_leaf, then finish_item.
  void begin_item(const std::string& name, const std::string& kind, std::vector<NodeRecord> nodes) {
    for (const auto& i : metadata_.items)
      if (i.name == name) throw Error(ErrorKind::invalid_argument, "two items named '" + name + "'", path_);
    ItemRecord item;
    item.name = name;
    item.kind = kind;
    item.nodes = std::move(nodes);
    metadata_.items.push_back(std::move(item));
  }
  // Writes one leaf of the current item (cast first where a rule says, for tree items).
  void add_leaf(const KeyPath& p, const LeafView& view, const SaveOptions& options, SaveReport& report) {
    ItemRecord& item = metadata_.items.back();
    static const SaveOptions no_casts;
    try {
      item.leaves.push_back(write_leaf(p, view, item.kind == "tree" ? options : no_casts, report));
    } catch (const Error& e) {
      throw e.with_key(p.str());
    }
    ++report.leaves;
  }

  SaveReport add_item(const ItemSnapshot& snapshot, const SaveOptions& options) {
    SaveReport report;
    report.path = path_;
    begin_item(snapshot.name, snapshot.kind, snapshot.nodes);
    for (const auto& leaf : snapshot.leaves) add_leaf(leaf.path, leaf.view, options, report);
    return report;
  }

  template <class T>
  SaveReport add_tree(const std::string& item_name, const T& tree, const SaveOptions& options) {
    return add_item(view_tree(item_name, tree), options);
  }

  void commit(const Json& user_metadata) {
    if (!user_metadata.is_object() && !user_metadata.is_null())
      throw Error(ErrorKind::invalid_argument, "user metadata must be a JSON object", path_);
    std::map<std::string, std::uint64_t> expected;  // every file the checkpoint needs, and its size
    if (data_) {
      data_->finish();
      expected[data_->name()] = data_->size();
      data_.reset();
    }
    const auto now = std::chrono::system_clock::now();
    metadata_.created_unix_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
    std::time_t t = std::chrono::system_clock::to_time_t(now);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    metadata_.created = buf;

    const std::string meta = metadata_to_json(metadata_);
    const std::string user = user_metadata.is_null() ? std::string("{}") : user_metadata.dump();
    const std::string marker = marker_json({meta.size(), crc32c(meta.data(), meta.size())},
                                           {user.size(), crc32c(user.data(), user.size())}).dump();
    write_whole_file(join_path(staging(), metadata_file), meta);
    write_whole_file(join_path(staging(), user_metadata_file), user);
    write_whole_file(join_path(staging(), marker_file), marker);
    expected[metadata_file] = meta.size();
    expected[user_metadata_file] = user.size();
    expected[marker_file] = marker.size();
    fsync_dir(staging());
    // Never publish a checkpoint that lacks a file: had anything removed the staging
    // directory or a file in it meanwhile, the writes above could have gone to unlinked files.
    for (const auto& [name, bytes] : expected) {
      struct stat st;
      const std::string p = join_path(staging(), name);
      if (::lstat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || static_cast<std::uint64_t>(st.st_size) != bytes)
        throw Error(ErrorKind::io, "a file of the staged checkpoint is missing or has the wrong size; nothing was "
                    "published", p);
    }
    publish(claim_, path_, overwrite_);
    committed_ = true;
    claim_.release();
  }

  // The dtype a cast rule gives this leaf on save (its own when no rule applies).
  static DType cast_target(const std::string& key, const LeafView& view, const SaveOptions& options) {
    for (const auto& rule : options.cast) {
      if (!glob_matches(rule.pattern, key)) continue;
      const bool castable = view.dtype != DType::string && (!rule.floats_only || is_float_dtype(view.dtype));
      return castable ? rule.dtype : view.dtype;
    }
    return view.dtype;
  }

  DataFileWriter& data_file() {
    if (!data_) {
      data_ = std::make_unique<DataFileWriter>(staging(), data_file_name(0, 0));
      metadata_.data_files.push_back(data_->name());
    }
    return *data_;
  }

  // A leaf in shards (or in device memory): each distinct box written once, by its primary
  // holder, as one chunk; device shards are cast on the device and copied to the host a
  // piece at a time while the previous piece is written.
  LeafRecord write_sharded_leaf(const KeyPath& p, const LeafView& view, const SaveOptions& options, SaveReport& report) {
    LeafRecord rec;
    rec.path = p;
    rec.saved_from = view.dtype;
    rec.shape = view.shape;
    rec.order = Order::C;
    rec.sharding = view.sharding;
    if (view.dtype == DType::string) throw Error(ErrorKind::invalid_argument, "string leaves cannot be sharded");
    rec.dtype = cast_target(p.str(), view, options);
    if (rec.dtype != view.dtype) report.cast.push_back({p.str(), view.dtype, rec.dtype});
    const std::size_t in_size = dtype_size(view.dtype), out_size = dtype_size(rec.dtype);
    const std::uint64_t piece_elements = write_piece_bytes / std::max(in_size, out_size);
    std::map<std::pair<Shape, Shape>, bool> written;
    for (const auto& shard : view.shards) {
      if (shard.box.rank() != view.shape.size())
        throw Error(ErrorKind::invalid_argument, "shard box " + to_string(shard.box) + " has another rank than the "
                    "array " + to_string(view.shape));
      for (std::size_t d = 0; d < view.shape.size(); ++d)
        if (shard.box.start[d] < 0 || shard.box.shape[d] < 0 || shard.box.start[d] + shard.box.shape[d] > view.shape[d])
          throw Error(ErrorKind::invalid_argument, "shard box " + to_string(shard.box) + " lies outside the array " +
                      to_string(view.shape));
      const std::uint64_t n = shard.box.elements();
      if (n > 0 && !shard.data)
        throw Error(ErrorKind::invalid_argument, "shard " + to_string(shard.box) + " has no data");
      if (!shard.primary || n == 0 || !written.emplace(std::make_pair(shard.box.start, shard.box.shape), true).second)
        continue;
      const auto* src = static_cast<const unsigned char*>(shard.data);
      const bool cast = rec.dtype != view.dtype;
      ChunkRecord chunk;
      if (shard.memory == MemoryKind::host && !cast) {
        chunk = data_file().append(src, n * in_size);
      } else if (shard.memory == MemoryKind::host) {
        chunk = data_file().append_produced(n * out_size, piece_elements * out_size,
                                            [&](std::uint64_t off, std::uint64_t len, unsigned char* dst) {
          cast_host(view.dtype, src + off / out_size * in_size, rec.dtype, dst, static_cast<std::size_t>(len / out_size),
                    options.on_overflow);
        });
      } else {
        // A device scratch piece holds the cast values before they cross to the host.
        DeviceBytes scratch;
        if (cast) scratch = DeviceBytes(static_cast<std::size_t>(std::min(n, piece_elements) * out_size), shard.device);
        const int device = shard.device;
        chunk = data_file().append_produced(n * out_size, piece_elements * out_size,
                                            [&, device](std::uint64_t off, std::uint64_t len, unsigned char* dst) {
          DeviceGuard guard(device);
          const unsigned char* from = src + off / out_size * in_size;
          if (cast) {
            cast_device(view.dtype, from, rec.dtype, scratch.data(), static_cast<std::size_t>(len / out_size),
                        options.on_overflow);
            from = static_cast<const unsigned char*>(scratch.data());
          }
          copy_bytes(dst, MemoryKind::host, from, MemoryKind::device, static_cast<std::size_t>(len));
        });
      }
      chunk.start = shard.box.start;
      chunk.shape = shard.box.shape;
      report.bytes_written += chunk.nbytes;
      rec.chunks.push_back(std::move(chunk));
    }
    return rec;
  }

  LeafRecord write_leaf(const KeyPath& p, const LeafView& view, const SaveOptions& options, SaveReport& report) {
    if (!view.shards.empty()) return write_sharded_leaf(p, view, options, report);
    LeafRecord rec;
    rec.path = p;
    rec.saved_from = view.dtype;
    rec.dtype = view.dtype;
    rec.shape = view.shape;
    rec.order = view.shape.size() >= 2 ? view.order : Order::C;
    const std::uint64_t expected = byte_count(view.shape, dtype_size(view.dtype));
    if (view.dtype != DType::string && expected != view.nbytes)
      throw Error(ErrorKind::invalid_argument, "leaf view says " + std::to_string(view.nbytes) + " bytes for shape " +
                  to_string(view.shape) + " of " + dtype_name(view.dtype));
    const std::string key = p.str();
    const void* bytes = view.data;
    std::uint64_t nbytes = view.nbytes;
    std::vector<unsigned char> converted;
    if (const DType to = cast_target(key, view, options); to != view.dtype) {
      const std::uint64_t n = element_count(view.shape);
      converted.resize(static_cast<std::size_t>(n * dtype_size(to)));
      cast_host(view.dtype, view.data, to, converted.data(), static_cast<std::size_t>(n), options.on_overflow);
      rec.dtype = to;
      bytes = converted.data();
      nbytes = converted.size();
      report.cast.push_back({key, view.dtype, to});
    }
    ChunkRecord chunk = data_file().append(bytes, nbytes);
    chunk.start.assign(rec.shape.size(), 0);
    chunk.shape = rec.shape;
    rec.chunks.push_back(std::move(chunk));
    report.bytes_written += nbytes;
    return rec;
  }

 private:
  const std::string& staging() const { return claim_.staging_path(); }

  std::string path_;
  StagingClaim claim_;
  bool overwrite_ = false;
  bool committed_ = false;
  CheckpointMetadata metadata_;
  std::unique_ptr<DataFileWriter> data_;
};

}  // namespace detail

// Saves a tree to a new checkpoint directory at `path`. Fails if the path exists, unless
// options.overwrite (which replaces an existing checkpoint atomically).
template <class T>
SaveReport save(const std::string& path, const T& tree, const SaveOptions& options = {}) {
  require_tree_type<T>();
  detail::CheckpointWriter writer(path, options.overwrite);
  SaveReport report = writer.add_tree(default_item_name, tree, options);
  writer.commit(options.user_metadata);
  return report;
}

CAIRN_END_NAMESPACE
