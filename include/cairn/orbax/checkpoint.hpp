// SPDX-License-Identifier: Apache-2.0
// An Orbax checkpoint read as a cairn checkpoint: the layout (which directory holds which
// checkpointable), each pytree's `_METADATA` (its key paths), its arrays (zarr v2 or v3, in an
// OCDBT database or, in Orbax's older layout, one directory each) turned into cairn's records,
// and `OrbaxView`, a read-only Store whose blobs are the arrays' chunks, decoded on demand.
// The load then runs as a checkpoint's does (checkpoint/load_protocol.hpp): planning, strict
// and partial restore, casts, sharded and device targets, each reading only the chunks it needs.
// docs/orbax.md is the user's guide and says how names map to key paths.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstring>
#include <deque>
#include <exception>
#include <future>
#include <map>
#include <optional>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "cairn/checkpoint/commit.hpp"
#include "cairn/checkpoint/load_protocol.hpp"
#include "cairn/core/parallel.hpp"
#include "cairn/core/tuning.hpp"
#include "cairn/kernels/box_plan.hpp"
#include "cairn/orbax/msgpack.hpp"
#include "cairn/orbax/ocdbt.hpp"
#include "cairn/orbax/tree_metadata.hpp"
#include "cairn/orbax/zarr.hpp"

CAIRN_BEGIN_NAMESPACE

// What an Orbax checkpoint holds, beyond the records every checkpoint has.
struct OrbaxCheckpoint {
  // "orbax (OCDBT, zarr v3)", "orbax (OCDBT, zarr v2)" or "orbax (zarr v2 directories)".
  std::string layout;
  // The checkpointable whose tree is the item "state" ("" for a checkpoint written directly
  // as one pytree, Orbax v0's StandardCheckpointer).
  std::string pytree;
  // Items: each pytree checkpointable (the main one as "state"), each JSON checkpointable
  // (ItemKind::json) under its own name; the user metadata is _CHECKPOINT_METADATA's
  // {"metrics", "custom", "created_unix_ms"}, as a cairn Checkpointer's step has it.
  CheckpointMetadata metadata;
  std::map<std::string, Json> json;          // the JSON checkpointables' values
  std::vector<std::string> unknown;          // checkpointables present but not known: not read
  std::vector<std::string> missing;          // named by _CHECKPOINT_METADATA but not present
  std::vector<std::string> not_read;         // leaves cairn does not read, each with the reason
};

namespace detail::orbax {

// The small zstd chunks of one data file, decoded one after another (Blob::Kind::decoded):
// piece i is the chunk whose stored bytes are [stored_at, stored_at + stored) of the file and
// whose elements are bytes [at, at + size) of the blob (PytreeReader::add_direct_chunk).
struct DecodedChunks {
  struct Piece {
    std::uint64_t at = 0, stored_at = 0, stored = 0, size = 0;
  };
  std::vector<Piece> pieces;       // by `at`
  std::vector<std::string> keys;   // each piece's leaf, for errors
};

// How one blob of the view is made.
struct Blob {
  enum class Kind { range, bytes, fill, chunk, decoded } kind = Kind::bytes;
  const OcdbtDatabase* db = nullptr;  // the value's database, or null: `path` is a file of the store
  OcdbtValue value;
  std::string path;                   // store key of a plain file
  bool file_may_be_missing = false;   // `path` not looked for yet: missing when read, it is the fill value
  // The base store's key of what errors name, described only when one is thrown (describing
  // each of 10,000 chunks' files up front, and keeping the text, was 3% of a load).
  std::string name;
  std::string key;                    // the leaf's key path
  std::string bytes;                  // Kind::bytes
  // Kind::chunk: the codecs, the stored chunk's shape, the box wanted of it (offset in it).
  const ZarrArray* array = nullptr;
  bool inner = false;                 // an inner chunk of a shard (the index says where)
  std::uint64_t inner_index = 0, inner_count = 0;
  Shape stored, box_start, box_shape;
  std::uint64_t size = 0;
  std::shared_ptr<DecodedChunks> decoded;  // Kind::decoded (its database's data file: value.file)
  // `path`'s whole bytes, read ahead with many others' (OrbaxView::read_ahead) for the reads
  // about to come, which take them from here; set before those reads start, dropped after.
  mutable std::shared_ptr<const std::string> held;
};

// The read-only store the load reads through: blob "i" is chunk i.
class OrbaxView final : public Store {
 public:
  OrbaxView(const Store& base, std::string key) : base_(base), key_(normalize_key(std::move(key))) {}
  const Store& base() const { return base_; }
  const std::string& key() const { return key_; }
  std::deque<Blob>& blobs() { return blobs_; }
  std::vector<std::unique_ptr<OcdbtDatabase>>& databases() { return dbs_; }
  std::vector<std::unique_ptr<ZarrArray>>& arrays() { return arrays_; }
  // A chunk of `l` (the box start + shape) whose bytes blob `b` makes: the blob's number is the
  // chunk's file name.
  void add_chunk(LeafRecord& l, Shape start, Shape shape, Blob&& b) {
    add_range(l, std::move(start), std::move(shape), std::to_string(blobs_.size()), 0, b.size);
    blobs_.push_back(std::move(b));
  }
  // A chunk of `l` that is bytes [offset, offset + nbytes) of blob `blob` (a data file of a
  // database: PytreeReader::add_direct_chunk).
  void add_range(LeafRecord& l, Shape start, Shape shape, const std::string& blob, std::uint64_t offset, std::uint64_t nbytes) {
    ChunkRecord c;
    c.start = std::move(start);
    c.shape = std::move(shape);
    c.file = blob;
    c.offset = offset;
    c.nbytes = nbytes;
    l.chunks.push_back(std::move(c));
  }

  // Frees `what` on another thread while the load goes on, joined when the view goes (at the
  // end of the load): 10,000 entries of _METADATA took 0.7 ms of the loading thread to free.
  // Freed here where no thread can be started.
  template <class T>
  void free_beside(T what) {
    try {
      freeing_.push_back(std::async(std::launch::async, [w = std::move(what)]() mutable { T gone = std::move(w); }));
    } catch (const std::system_error&) {
    }
  }

  std::string describe(const std::string& key) const override {
    if (key.empty()) return base_.describe(key_);
    const Blob* b = find(key);
    return b ? base_.describe(b->name) : base_.describe(key_) + " (" + key + ")";
  }
  // (inline here as well as where defined below: a virtual function declared without it would
  // be the class's key function, and g++ would then compile the class's whole virtual table
  // into every file that includes this header, even with CAIRN_SEPARATE_COMPILATION)
  inline std::unique_ptr<StoreReader> open(const std::string& key) const override;
  // The loader's hint before it reads many small chunks each in a file of its own (a directory
  // per parameter): their files are read whole now, together (the base store's
  // read_whole_each: through io_uring on a POSIX store, at once on an object store), and their
  // reads served from memory while the handle lives. A file not read so (too large, missing,
  // anything wrong) is read as before when its chunk is, which reports what is wrong.
  inline std::unique_ptr<StoreReadAhead> read_ahead(const std::vector<std::string>& keys, std::uint64_t bytes) const override;
  bool exists(const std::string& key) const override { return key.empty() || find(key); }
  bool is_blob(const std::string& key) const override { return find(key) != nullptr; }
  // A chunk's reader opens its file (of a directory per parameter) while it reads, and lets
  // go of it once read (BlobReader::file); a database's data files are its own few readers.
  bool readers_hold_files() const override { return false; }
  // Its chunks' files are the base store's: as many reads gain from being in flight at once.
  int parallel_reads() const override { return base_.parallel_reads(); }
  std::vector<StoreEntry> list(const std::string&) const override { return {}; }
  std::unique_ptr<StoreWriter> create(const std::string& key) override { refuse(key); }
  void remove(const std::string& key) override { refuse(key); }
  std::unique_ptr<CheckpointStaging> stage(const std::string& key, bool) override { refuse(key); }
  void remove_checkpoints(const std::vector<std::string>& keys) override { refuse(keys.empty() ? "" : keys[0]); }
  void write_atomically(const std::string& key, const std::string&) override { refuse(key); }
  std::unique_ptr<StoreWriter> create_atomically(const std::string& key, bool) override { refuse(key); }

 private:
  [[noreturn]] void refuse(const std::string& key) const {
    throw Error(ErrorKind::invalid_argument, "an Orbax checkpoint is read here, never written through its view",
                describe(key));
  }
  const Blob* find(const std::string& key) const {
    std::uint64_t i;
    if (!parse_uint64(key, i) || i >= blobs_.size()) return nullptr;
    return &blobs_[static_cast<std::size_t>(i)];
  }
  const Store& base_;
  std::string key_;
  std::deque<Blob> blobs_;  // a deque: readers hold references, and growing never copies a Blob
  std::vector<std::unique_ptr<OcdbtDatabase>> dbs_;
  std::vector<std::unique_ptr<ZarrArray>> arrays_;
  std::vector<std::future<void>> freeing_;  // free_beside (last: joined first, when the view goes)
};

// Store::read_whole_each of many small files, on one thread per core where the store keeps
// no requests in flight of its own (a POSIX store: each thread's share through io_uring where
// there is io_uring, or one file after another where there is not, as before on as many
// threads); at once on one that does (an object store: Store::parallel_reads).
inline std::vector<Store::WholeBlob> read_whole_each_sliced(const Store& store, const std::vector<std::pair<std::string, std::uint64_t>>& reads) {
  const std::size_t slices = store.parallel_reads() > 1 ? 1 : std::min<std::size_t>(usable_cores(), 16);
  if (slices <= 1) return store.read_whole_each(reads);
  std::vector<Store::WholeBlob> got(reads.size());
  const std::size_t per = (reads.size() + slices - 1) / slices;
  for_each_index(slices, static_cast<int>(slices), [&](std::size_t t) {
    const std::size_t lo = std::min(reads.size(), t * per), hi = std::min(reads.size(), lo + per);
    if (lo == hi) return;
    auto part = store.read_whole_each({reads.begin() + static_cast<std::ptrdiff_t>(lo), reads.begin() + static_cast<std::ptrdiff_t>(hi)});
    std::move(part.begin(), part.end(), got.begin() + static_cast<std::ptrdiff_t>(lo));
  });
  return got;
}

// A chunk's file read ahead (Blob::held): its reads are copies, and its end is where the
// file ended, named as File::read_at names a file that ends early.
class HeldFileReader final : public StoreReader {
 public:
  HeldFileReader(std::shared_ptr<const std::string> bytes, std::string name) : bytes_(std::move(bytes)), name_(std::move(name)) {}
  std::uint64_t size() const override { return bytes_->size(); }
  std::uint64_t cached_bytes(std::uint64_t, std::uint64_t n) const override { return n; }
  void read_at(void* dst, std::uint64_t n, std::uint64_t offset) const override {
    const std::uint64_t size = bytes_->size();
    if (offset > size || n > size - offset)
      throw Error(ErrorKind::corrupt, "file ends at byte " + std::to_string(std::max(offset, size)) +
                  ", before the data its metadata describes (truncated?)", name_);
    if (n) std::memcpy(dst, bytes_->data() + offset, static_cast<std::size_t>(n));
  }

 private:
  std::shared_ptr<const std::string> bytes_;
  std::string name_;
};

// The handle of OrbaxView::read_ahead: drops the files it holds.
class HeldFiles final : public StoreReadAhead {
 public:
  explicit HeldFiles(std::vector<const Blob*> blobs) : blobs_(std::move(blobs)) {}
  ~HeldFiles() override {
    for (const Blob* b : blobs_) b->held.reset();
  }

 private:
  std::vector<const Blob*> blobs_;
};

inline std::unique_ptr<StoreReadAhead> OrbaxView::read_ahead(const std::vector<std::string>& keys, std::uint64_t bytes) const {
  (void)bytes;  // the loader bounds what it asks for at once; each file is bounded here too
  std::vector<const Blob*> blobs;
  std::vector<std::pair<std::string, std::uint64_t>> reads;
  for (const std::string& k : keys) {
    const Blob* b = find(k);
    if (!b || b->db || b->held || (b->kind != Blob::Kind::chunk && b->kind != Blob::Kind::range)) continue;
    blobs.push_back(b);
    reads.emplace_back(b->path, 2 * small_leaf_bytes);  // a small leaf's file: its chunk and index
  }
  if (reads.size() < parallel_small_files_min) return nullptr;
  std::vector<WholeBlob> got = read_whole_each_sliced(base_, reads);
  std::vector<const Blob*> held;
  for (std::size_t i = 0; i < blobs.size(); ++i) {
    if (got[i].error || blobs[i]->held) continue;  // (a file named twice: held once)
    blobs[i]->held = std::make_shared<const std::string>(std::move(got[i].bytes));
    held.push_back(blobs[i]);
  }
  if (held.empty()) return nullptr;
  return std::make_unique<HeldFiles>(std::move(held));
}

class BlobReader final : public StoreReader {
 public:
  BlobReader(const OrbaxView& view, const Blob& b) : view_(view), b_(b) {}
  std::uint64_t size() const override { return b_.size; }
  // A value read in place is in memory as much as its bytes in the data file are, and so is an
  // inner chunk stored plainly (estimated over its whole shard: where it lies in the shard is
  // known once the index is read); a chunk that decodes says 0 (its pieces must be read in
  // order: box_reader.hpp's two-thread reads of one chunk stay off it).
  std::uint64_t cached_bytes(std::uint64_t offset, std::uint64_t n) const override {
    if (b_.kind == Blob::Kind::bytes || b_.kind == Blob::Kind::fill) return n;
    if (b_.kind == Blob::Kind::decoded) {
      const auto [first, last] = decoded_pieces(offset, n);
      if (first == last) return n;
      const auto [lo, hi] = stored_span(first, last);
      const std::uint64_t in = b_.db->value_reader(*b_.value.file).cached_bytes(lo, hi - lo);
      return in >= (hi - lo) / 4 * 3 ? n : 0;
    }
    if (b_.file_may_be_missing && !present()) return n;  // read as the fill value
    if (b_.kind == Blob::Kind::range) return b_.db ? b_.db->cached_bytes(b_.value, offset, n) : file()->cached_bytes(offset, n);
    if (codecs().zstd) return 0;
    const std::uint64_t whole = source_size();
    if (whole == 0) return n;
    const std::uint64_t in = b_.db ? b_.db->cached_bytes(b_.value, 0, whole) : file()->cached_bytes(0, whole);
    return in >= whole / 4 * 3 ? n : 0;
  }
  bool opens_file_to_read() const override { return !b_.db && (b_.kind == Blob::Kind::chunk || b_.kind == Blob::Kind::range); }
  void read_at(void* dst, std::uint64_t n, std::uint64_t offset) const override {
    described([&] { read_blob_at(dst, n, offset); });
  }
  // A run of small chunks of a database's data file (a blob of the whole file,
  // PytreeReader::add_direct_chunk) is one vectored read of the file, as a cairn checkpoint's
  // run of small leaves is; anything else reads its span and copies the pieces out.
  void read_scattered(const ReadPiece* pieces, std::size_t count, std::uint64_t offset) const override {
    if (b_.kind == Blob::Kind::decoded) return described([&] { read_decoded(pieces, count, offset); });
    if (b_.kind != Blob::Kind::range || !b_.db || b_.value.is_inline) return StoreReader::read_scattered(pieces, count, offset);
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < count; ++i) total += pieces[i].n;
    if (offset > b_.size || total > b_.size - offset)
      throw Error(ErrorKind::corrupt, "read past the end of a chunk", view_.base().describe(b_.name), b_.key);
    if (b_.db->read_held(*b_.value.file, pieces, count, b_.value.offset + offset)) return;
    b_.db->value_reader(*b_.value.file).read_scattered(pieces, count, b_.value.offset + offset);
  }

 private:
  // Runs f; the errors it throws name the blob by its store key (Blob::name), described here
  // (describing each of 10,000 chunks' files up front was 3% of a load).
  template <class F>
  void described(F&& f) const {
    try {
      f();
    } catch (const Error& e) {
      if (e.file() != b_.name) throw;
      throw Error(e.kind(), e.message(), view_.base().describe(b_.name), e.key_path());
    }
  }
  void read_blob_at(void* dst, std::uint64_t n, std::uint64_t offset) const {
    if (offset > b_.size || n > b_.size - offset)
      throw Error(ErrorKind::corrupt, "read past the end of a chunk", b_.name, b_.key);
    if (!n) return;
    switch (b_.kind) {
      case Blob::Kind::bytes: std::memcpy(dst, b_.bytes.data() + offset, static_cast<std::size_t>(n)); return;
      case Blob::Kind::fill: fill(dst, n, offset); return;
      case Blob::Kind::range:
        if (b_.file_may_be_missing && !present()) return fill(dst, n, offset);
        read_source(dst, n, offset);
        read_from_file(n);
        return;
      case Blob::Kind::decoded: {
        const ReadPiece one{dst, n};
        return read_decoded(&one, 1, offset);
      }
      case Blob::Kind::chunk: break;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    locate();
    if (raw_inner_) {
      if (shard_.empty()) {
        read_source(dst, n, inner_offset_ + offset);
        read_from_file(n);
        return;
      }
      // A small shard read whole with its index (locate): served from memory, once.
      std::memcpy(dst, shard_.data() + inner_offset_ + offset, static_cast<std::size_t>(n));
      consumed_ += n;
      if (consumed_ >= b_.size) std::string().swap(shard_), consumed_ = 0, located_ = raw_inner_ = false;
      return;
    }
    if (missing_) {
      fill(dst, n, offset);
      return;
    }
    // A zstd chunk read from its start in order (as the loader reads a chunk, a piece at a
    // time) decodes straight into the caller's memory: no buffer of the whole chunk.
    if (!decoded_done_ && codecs().zstd && b_.stored == b_.box_shape && offset == streamed_) {
      stream(static_cast<unsigned char*>(dst), n);
      return;
    }
    if (!decoded_done_) decode_all();
    std::memcpy(dst, decoded_.data() + offset, static_cast<std::size_t>(n));
    // A chunk is read once, whole or in pieces: its decoded bytes go once all were read.
    consumed_ += n;
    if (consumed_ >= b_.size) std::string().swap(decoded_), decoded_done_ = false, consumed_ = 0, located_ = false;
  }
  // Kind::decoded: [first, last) of the pieces that bytes [offset, offset + n) fall in.
  std::pair<std::size_t, std::size_t> decoded_pieces(std::uint64_t offset, std::uint64_t n) const {
    const auto& p = b_.decoded->pieces;
    if (n == 0) return {0, 0};
    auto first = std::upper_bound(p.begin(), p.end(), offset, [](std::uint64_t o, const DecodedChunks::Piece& x) { return o < x.at; });
    auto last = std::lower_bound(first, p.end(), offset + n, [](const DecodedChunks::Piece& x, std::uint64_t o) { return x.at < o; });
    return {static_cast<std::size_t>(first - p.begin()) - 1, static_cast<std::size_t>(last - p.begin())};
  }
  // Where the stored bytes of pieces [first, last) lie in the data file: [lo, hi).
  std::pair<std::uint64_t, std::uint64_t> stored_span(std::size_t first, std::size_t last) const {
    std::uint64_t lo = ~std::uint64_t(0), hi = 0;
    for (std::size_t i = first; i < last; ++i) {
      const auto& x = b_.decoded->pieces[i];
      lo = std::min(lo, x.stored_at);
      hi = std::max(hi, x.stored_at + x.stored);
    }
    return {lo, hi};
  }
  // Bytes [offset, offset + sum of the pieces' n) of a blob of decoded chunks into the pieces
  // (a null dst skips its bytes). The chunks' stored bytes are read with one request where
  // they lie close together in the file (as a run of small arrays written one after another
  // does: a request per chunk was 10,000 `pread`s for 10,000 arrays), each alone otherwise,
  // and each chunk is decoded straight into its piece where the piece takes it whole (a run
  // of small leaves read into their targets). Safe on several threads at once: no state but
  // the thread's own zstd decoder.
  void read_decoded(const ReadPiece* ps, std::size_t count, std::uint64_t offset) const {
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < count; ++i) total += ps[i].n;
    if (offset > b_.size || total > b_.size - offset)
      throw Error(ErrorKind::corrupt, "read past the end of a chunk", b_.name, b_.key);
    if (total == 0) return;
    const auto [first, last] = decoded_pieces(offset, total);
    const auto [lo, hi] = stored_span(first, last);
    std::uint64_t stored_sum = 0;
    for (std::size_t i = first; i < last; ++i) stored_sum += b_.decoded->pieces[i].stored;
    const StoreReader& file = b_.db->value_reader(*b_.value.file);
    std::unique_ptr<char[]> span;
    // In the runs the database holds (OcdbtDatabase::hold_small_runs): each piece's bytes
    // looked at where they are. Else, close together (no more between them than the
    // database's runs allow: each array's zarr metadata lies between two chunks), one read.
    const bool held = b_.db->held(*b_.value.file, b_.decoded->pieces[first].stored_at, b_.decoded->pieces[first].stored).has_value();
    const bool one_read =
        !held && hi - lo <= stored_sum + (last - first) * OcdbtDatabase::run_gap_bytes && hi - lo <= (16u << 20);
    if (one_read) {
      span = std::make_unique_for_overwrite<char[]>(static_cast<std::size_t>(hi - lo));
      file.read_at(span.get(), hi - lo, lo);
    }
    std::string own, whole;
    std::uint64_t pos = offset;
    std::size_t at = first;
    for (std::size_t k = 0; k < count; ++k) {
      const std::uint64_t begin = pos, end = pos + ps[k].n;
      pos = end;
      if (!ps[k].dst) continue;
      auto* dst = static_cast<unsigned char*>(ps[k].dst);
      while (at < last && b_.decoded->pieces[at].at + b_.decoded->pieces[at].size <= begin) ++at;
      for (std::size_t i = at; i < last && b_.decoded->pieces[i].at < end; ++i) {
        const DecodedChunks::Piece& x = b_.decoded->pieces[i];
        std::string_view stored;
        std::optional<std::string_view> in_run;
        if (one_read) {
          stored = std::string_view(span.get() + (x.stored_at - lo), static_cast<std::size_t>(x.stored));
        } else if (held && (in_run = b_.db->held(*b_.value.file, x.stored_at, x.stored))) {
          stored = *in_run;
        } else {
          own.resize(static_cast<std::size_t>(x.stored));
          file.read_at(own.data(), x.stored, x.stored_at);
          stored = own;
        }
        const std::uint64_t from = std::max(begin, x.at), to = std::min(end, x.at + x.size);
        if (from == x.at && to == x.at + x.size) {
          zarr_decode_chunk({false, true, false}, stored, dst + (x.at - begin), x.size, b_.name, b_.decoded->keys[i]);
        } else {
          whole.resize(static_cast<std::size_t>(x.size));
          zarr_decode_chunk({false, true, false}, stored, whole.data(), x.size, b_.name, b_.decoded->keys[i]);
          std::memcpy(dst + (from - begin), whole.data() + (from - x.at), static_cast<std::size_t>(to - from));
        }
      }
    }
  }
  const ZarrCodecs& codecs() const { return b_.inner ? b_.array->shard.inner : b_.array->codecs; }
  std::uint64_t source_size() const {
    return b_.db ? b_.value.size() : file()->size();
  }
  // The chunk's own file (the layout of a directory per parameter): opened when first read,
  // and let go once every byte this reader takes from it was read. A load of 10,000 such
  // arrays held 10,000 files open, past the usual limit of 1,024 descriptors ("Too many open
  // files"). Each read holds its own reference, so letting go never takes a file from under
  // a read on another thread (the range kind reads from two); a later read opens it again.
  std::shared_ptr<const StoreReader> file() const {
    std::lock_guard<std::mutex> lock(open_mutex_);
    if (!file_) file_ = open_file(), present_ = true;
    return file_;
  }
  // The file read ahead (Blob::held), or opened now.
  std::shared_ptr<const StoreReader> open_file() const {
    if (std::shared_ptr<const std::string> held = b_.held) return std::make_shared<HeldFileReader>(std::move(held), view_.base().describe(b_.path));
    return view_.base().open(b_.path);
  }
  void let_go_of_file() const {
    if (b_.db) return;  // a database's values: its data files are the database's
    std::lock_guard<std::mutex> lock(open_mutex_);
    file_.reset();
    taken_ = 0;
  }
  // n more bytes read in place from the file (the range kind, a plainly stored inner chunk):
  // once the whole chunk was, the file goes.
  void read_from_file(std::uint64_t n) const {
    if (b_.db) return;
    std::lock_guard<std::mutex> lock(open_mutex_);
    taken_ += n;
    if (taken_ >= b_.size) file_.reset(), taken_ = 0;
  }
  // Whether the chunk's file is there (zarr: a chunk never written reads as the fill value).
  bool present() const {
    std::lock_guard<std::mutex> lock(open_mutex_);
    if (present_) return true;
    try {
      file_ = open_file();
      present_ = true;
      return true;
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::not_found) throw;
      return false;
    }
  }
  void read_source(void* dst, std::uint64_t n, std::uint64_t offset) const {
    if (b_.db) b_.db->read(b_.value, dst, n, offset, b_.key);
    else file()->read_at(dst, n, offset);
  }
  void fill(void* dst, std::uint64_t n, std::uint64_t offset) const {
    const std::string& f = b_.array->fill;
    auto* d = static_cast<unsigned char*>(dst);
    for (std::uint64_t i = 0; i < n; ++i) d[i] = static_cast<unsigned char>(f[(offset + i) % f.size()]);
  }
  // Where the chunk's bytes are: an inner chunk stored plainly (read in place), a missing one
  // (the fill value), or its stored bytes read into stored_ (a trailing CRC32C checked and cut).
  void locate() const {
    if (located_) return;
    const ZarrArray& a = *b_.array;
    const ZarrCodecs& c = codecs();
    std::uint64_t offset = 0, size = 0;
    if (b_.inner) {
      if (b_.file_may_be_missing && !present()) {
        located_ = missing_ = true;
        return;
      }
      // The shard's index, then this inner chunk's place. A small shard is read whole, its
      // index and its chunk in one read (two reads of a few hundred bytes per array were a
      // fifth of a load of 10,000 small arrays: docs/benchmarks.md, "Orbax import").
      const std::uint64_t total = source_size();
      const std::uint64_t index_size = zarr_index_bytes(a.shard, b_.inner_count);
      if (total < index_size)
        zarr_fail("shard is " + std::to_string(total) + " bytes, shorter than its index (" + std::to_string(index_size) + ")",
                  b_.name, b_.key);
      const std::uint64_t index_at = a.shard.index_at_start ? 0 : total - index_size;
      std::string own_index;
      std::string_view index;
      if (total <= small_shard_bytes && b_.inner_count == 1) {
        shard_.resize(static_cast<std::size_t>(total));
        read_source(shard_.data(), total, 0);
        let_go_of_file();
        index = std::string_view(shard_).substr(static_cast<std::size_t>(index_at), static_cast<std::size_t>(index_size));
      } else {
        own_index.resize(static_cast<std::size_t>(index_size));
        read_source(own_index.data(), index_size, index_at);
        index = own_index;
      }
      const auto entries = zarr_parse_shard_index(a.shard, index, b_.inner_count, total, b_.name, b_.key);
      const ZarrShardEntry e = entries[static_cast<std::size_t>(b_.inner_index)];
      located_ = true;
      if (e.missing()) {
        missing_ = true;
        std::string().swap(shard_);
        let_go_of_file();
        return;
      }
      if (!c.zstd && !c.crc32c && b_.stored == b_.box_shape) {
        if (e.nbytes != b_.size)
          zarr_fail("inner chunk is " + std::to_string(e.nbytes) + " bytes, expected " + std::to_string(b_.size), b_.name, b_.key);
        raw_inner_ = true;
        inner_offset_ = e.offset;
        return;
      }
      offset = e.offset;
      size = e.nbytes;
      if (!shard_.empty()) {
        // (zarr_parse_shard_index checked that the entry lies inside the shard.)
        stored_ = shard_.substr(static_cast<std::size_t>(offset), static_cast<std::size_t>(size));
        std::string().swap(shard_);
        if (c.crc32c) stored_.resize(zarr_strip_crc(stored_, b_.name, b_.key).size());
        return;
      }
    } else {
      if (b_.file_may_be_missing && !present()) {
        located_ = missing_ = true;
        return;
      }
      size = source_size();
      if (size > (std::uint64_t(1) << 40)) zarr_fail("chunk is too large", b_.name, b_.key);
    }
    // A large zstd chunk decoded straight into its target is read as it decodes, a window at
    // a time (stream): read whole first, a chunk of 4 GiB took 4 GiB beside its target.
    if (c.zstd && !c.crc32c && b_.stored == b_.box_shape && size > zstd_input_window_bytes) {
      input_at_ = offset;
      input_size_ = size;
      input_taken_ = 0;
      input_streamed_ = true;
      stored_.clear();
      located_ = true;
      return;
    }
    stored_.resize(static_cast<std::size_t>(size));
    read_source(stored_.data(), size, offset);
    let_go_of_file();
    if (c.crc32c) stored_.resize(zarr_strip_crc(stored_, b_.name, b_.key).size());
    located_ = true;
  }
  [[noreturn]] void zstd_error(const std::string& why) const { zarr_fail("zstd chunk " + why, b_.name, b_.key); }
  // The next n bytes of the chunk, decoded from where the last read stopped.
  void stream(unsigned char* dst, std::uint64_t n) const {
    if (!stream_) {
      stream_ = take_decoder();
      if (!stream_) throw Error(ErrorKind::io, "out of memory for a zstd decoder", b_.name, b_.key);
      in_pos_ = 0;
    }
    ZSTD_outBuffer out{dst, static_cast<std::size_t>(n), 0};
    while (out.pos < out.size) {
      next_input();
      ZSTD_inBuffer in{stored_.data(), stored_.size(), in_pos_};
      const std::size_t before = out.pos;
      const std::size_t r = ZSTD_decompressStream(stream_.get(), &out, &in);
      const bool progressed = in.pos != in_pos_ || out.pos != before;
      in_pos_ = in.pos;
      if (ZSTD_isError(r)) zstd_error(std::string("does not decode: ") + ZSTD_getErrorName(r));
      if (!progressed) zstd_error("is truncated or decodes to fewer than " + std::to_string(b_.size) + " bytes");
      frame_ended_ = r == 0;
    }
    streamed_ += n;
    if (streamed_ < b_.size) return;
    // The end: what is left of the input must decode to nothing and end its frame.
    while (!(frame_ended_ && input_done())) {
      next_input();
      unsigned char probe;
      ZSTD_outBuffer more{&probe, 1, 0};
      ZSTD_inBuffer in{stored_.data(), stored_.size(), in_pos_};
      const std::size_t r = ZSTD_decompressStream(stream_.get(), &more, &in);
      const bool progressed = in.pos != in_pos_;
      in_pos_ = in.pos;
      if (ZSTD_isError(r)) zstd_error(std::string("does not decode: ") + ZSTD_getErrorName(r));
      if (more.pos) zstd_error("decodes to more than the " + std::to_string(b_.size) + " bytes expected");
      if (!progressed) zstd_error("is truncated (its last frame does not end)");
      frame_ended_ = r == 0;
    }
    // Done: a second read of the chunk decodes it again.
    give_back_decoder(std::move(stream_));
    std::string().swap(stored_);
    streamed_ = 0;
    located_ = false;
    if (input_streamed_) input_streamed_ = false, let_go_of_file();
  }
  // Whether the decoder has every stored byte of the chunk (stream).
  bool input_done() const { return in_pos_ == stored_.size() && (!input_streamed_ || input_taken_ == input_size_); }
  // A chunk whose stored bytes are read as it decodes (locate): the next window, once the
  // decoder has taken the last.
  void next_input() const {
    if (!input_streamed_ || in_pos_ < stored_.size() || input_taken_ == input_size_) return;
    const std::uint64_t k = std::min(zstd_input_window_bytes, input_size_ - input_taken_);
    stored_.resize(static_cast<std::size_t>(k));
    read_source(stored_.data(), k, input_at_ + input_taken_);
    input_taken_ += k;
    in_pos_ = 0;
  }
  // The chunk's box decoded whole (a read out of order, or a box cut from an edge chunk).
  void decode_all() const {
    stream_.reset();
    streamed_ = 0;
    if (input_streamed_) {  // (a read out of order: the whole chunk's stored bytes after all)
      stored_.resize(static_cast<std::size_t>(input_size_));
      read_source(stored_.data(), input_size_, input_at_);
      input_streamed_ = false;
      let_go_of_file();
    }
    const ZarrCodecs& c = codecs();
    const std::size_t item = dtype_size(b_.array->dtype);
    const std::uint64_t full = element_count(b_.stored) * item;
    if (b_.stored == b_.box_shape) {
      decoded_.resize(static_cast<std::size_t>(full));
      zarr_decode_chunk({c.fortran, c.zstd, false}, stored_, decoded_.data(), full, b_.name, b_.key);
    } else {
      std::string whole(static_cast<std::size_t>(full), '\0');
      zarr_decode_chunk({c.fortran, c.zstd, false}, stored_, whole.data(), full, b_.name, b_.key);
      decoded_.resize(static_cast<std::size_t>(b_.size));
      // The box cut out of the edge chunk by the box-copy kernel (both sides in the chunk's order).
      const Box box{b_.box_start, b_.box_shape};
      box_copy_host(item, whole.data(), decoded_.data(), plan_box_copy(box, Box{Shape(b_.stored.size(), 0), b_.stored}, c.fortran, box, c.fortran));
    }
    std::string().swap(stored_);
    decoded_done_ = true;
  }

  const OrbaxView& view_;
  const Blob& b_;
  mutable std::mutex mutex_, open_mutex_;
  mutable std::shared_ptr<const StoreReader> file_;
  mutable bool present_ = false;   // the file was found (a later read that cannot open it fails)
  mutable std::uint64_t taken_ = 0;  // bytes read in place from file_ (read_from_file)
  mutable std::string stored_, decoded_;
  mutable std::string shard_;  // a small shard read whole: its index and chunk
  mutable ZstdDecoder stream_;  // while the chunk streams (take_decoder)
  mutable bool located_ = false, decoded_done_ = false, raw_inner_ = false, missing_ = false, frame_ended_ = false;
  mutable std::uint64_t inner_offset_ = 0, consumed_ = 0, streamed_ = 0, in_pos_ = 0;
  // A large zstd chunk read as it decodes (locate, next_input): where its stored bytes lie in
  // the source, how many, and how many were read; stored_ holds the window being decoded.
  mutable bool input_streamed_ = false;
  mutable std::uint64_t input_at_ = 0, input_size_ = 0, input_taken_ = 0;
};

inline std::unique_ptr<StoreReader> OrbaxView::open(const std::string& key) const {
  const Blob* b = find(key);
  if (!b) throw Error(ErrorKind::not_found, "no such chunk", describe(key));
  return std::make_unique<BlobReader>(*this, *b);
}

// Orbax's names for a pytree's checkpointable handlers, as _CHECKPOINT_METADATA records them.
inline bool is_pytree_handler(const std::string& h) {
  return h.find("PyTree") != std::string::npos || h.find("StandardCheckpointHandler") != std::string::npos;
}
inline bool is_json_handler(const std::string& h) {
  return h.find("Json") != std::string::npos;
}

inline Json parse_json_file(const Store& store, const std::string& key, const std::string& text) {
  try {
    return Json::parse(text, store.describe(key));
  } catch (const Error& e) {
    throw Error(ErrorKind::corrupt, e.message(), store.describe(key));
  }
}
inline Json read_json_file(const Store& store, const std::string& key, std::uint64_t limit = 64u << 20) {
  return parse_json_file(store, key, read_blob(store, key, limit));
}
// The file's JSON, or nullopt where there is no such file.
inline std::optional<Json> read_json_file_if_there(const Store& store, const std::string& key, std::uint64_t limit = 64u << 20) {
  std::optional<std::string> text = read_blob_if_there(store, key, limit);
  if (!text) return std::nullopt;
  return parse_json_file(store, key, *text);
}

// A pytree checkpointable's directory read into an item of the view.
class PytreeReader {
 public:
  // `keys`, if given, gets the item's leaves' printed keys at the item's position.
  // `for_load`: the records are for a load, which reads small shards' chunks as byte ranges of
  // their data file (add_direct_chunk); metadata, verify and convert leave every shard index to
  // be read (and checked) when its chunk is.
  PytreeReader(OrbaxView& view, OrbaxCheckpoint& out, std::string dir, std::string item, PrintedKeys* keys = nullptr,
               bool for_load = false)
      : view_(view), out_(out), store_(view.base()), dir_(std::move(dir)), item_name_(std::move(item)), keys_out_(keys),
        for_load_(for_load) {}

  void read() {
    const std::string meta_key = join_key(dir_, "_METADATA");
    TreeMetadata meta;
    const std::optional<std::string> meta_text = read_blob_if_there(store_, meta_key, 64u << 20);
    const bool has_meta = meta_text.has_value();
    const bool manifest_there = store_.is_blob(join_key(dir_, "manifest.ocdbt"));
    // A large _METADATA is parsed on a second thread while this one opens the database beside
    // it (its manifest and B+tree read, its key index built): for 10,000 small arrays each is
    // about 2 ms of one core, an eighth of the load. The database is opened then before
    // _METADATA says whether to use it; its error counts only where it is used, and an error
    // of _METADATA comes first, as when they were one after the other. (The database stays on
    // the loading thread: memory a short-lived thread allocates comes from another malloc
    // arena, which gives it back to the system when freed, and a database whose B+tree holds
    // small zstd chunks inline, read there, took 1,400 more page faults a load.)
    std::unique_ptr<OcdbtDatabase> opened;
    std::exception_ptr open_error;
    if (has_meta && manifest_there && meta_text->size() >= read_ahead_min_metadata_bytes && usable_cores() > 1) {
      std::future<TreeMetadata> parsed = std::async(std::launch::async, [&] { return read_tree_metadata(*meta_text, store_.describe(meta_key)); });
      try {
        opened = std::make_unique<OcdbtDatabase>(store_, dir_);
        // (A load reads the runs of small values whole anyway; here, while the parse goes on.)
        if (for_load_) opened->hold_small_runs();
      } catch (...) {
        open_error = std::current_exception();
      }
      meta = parsed.get();
    } else if (has_meta) {
      meta = read_tree_metadata(*meta_text, store_.describe(meta_key));
    }
    // OCDBT unless _METADATA says otherwise, or nothing of a database is there (the older layout).
    bool ocdbt = manifest_there || store_.exists(join_key(dir_, "d"));
    if (meta.use_ocdbt) ocdbt = *meta.use_ocdbt;
    if (ocdbt) {
      if (!manifest_there)
        throw Error(ErrorKind::not_found, "the OCDBT database's manifest.ocdbt is missing", store_.describe(join_key(dir_, "manifest.ocdbt")));
      if (open_error) std::rethrow_exception(open_error);
      view_.databases().push_back(opened ? std::move(opened) : std::make_unique<OcdbtDatabase>(store_, dir_));
      db_ = view_.databases().back().get();
    }
    zarr3_ = meta.use_zarr3 ? int(*meta.use_zarr3) : -1;
    sharding_ = std::make_shared<const std::map<std::string, Json>>(read_sharding());
    if (auto j = read_json_file_if_there(store_, join_key(dir_, "_strings.json"))) strings_ = std::make_shared<const Json>(std::move(*j));

    ItemRecord item;
    item.name = item_name_;
    if (has_meta) {
      // One leaf per entry, at most: growing the vector moved every record made so far, each
      // time it doubled (a tenth of a load of 10,000 small arrays, with the page faults of the
      // new buffers).
      item.leaves.reserve(meta.entries.size());
      if (!add_on_two_threads(item, meta.entries)) add_records(item, meta.entries, 0, meta.entries.size(), true);
    } else {
      for (const std::string& param : params_without_metadata()) add_array(item, param, key_path_of(param));
    }
    add_nodes(item);
    if (meta.entries.size() >= parallel_records_min && usable_cores() > 1) view_.free_beside(std::move(meta));
    if (out_.layout.empty())
      out_.layout = db_ ? std::string("orbax (OCDBT, zarr v") + (zarr3_found_ ? "3" : "2") + ")" : std::string("orbax (zarr v") + (zarr3_found_ ? "3" : "2") + " directories)";
    out_.metadata.items.push_back(std::move(item));
    if (keys_out_) {
      keys_out_->resize(out_.metadata.items.size());
      keys_out_->back() = std::move(keys_);
    }
  }

 private:
  std::string meta_file() const { return store_.describe(join_key(dir_, "_METADATA")); }

  // Whether an entry of _METADATA is an array, read from its zarr metadata (add_array).
  static bool is_array(const TreeMetadataEntry& e) {
    const std::string& t = e.value_type;
    return !e.skip_deserialize && (t == "jax.Array" || t == "np.ndarray" || t == "scalar" || t.empty());
  }

  // The records of entries [from, to) of _METADATA, in order. In a directory per parameter, a
  // batch's zarr metadata files are read together first (prefetch_array_metadata), on every
  // core where `all_cores`, else on this thread (add_on_two_threads: one thread each already).
  void add_records(ItemRecord& item, const std::vector<TreeMetadataEntry>& entries, std::size_t from, std::size_t to,
                   bool all_cores) {
    for (std::size_t at = from; at < to; at += prefetch_batch) {
      const std::size_t end = std::min(to, at + prefetch_batch);
      if (!db_) prefetch_array_metadata(entries, at, end, all_cores);
      for (std::size_t i = at; i < end; ++i) add_from_metadata(item, entries[i]);
    }
    prefetched_.clear();
  }

  // The records of many arrays, made on two threads: this one the first half of _METADATA's
  // entries, a second reader (sharing the database, _sharding and _strings.json, read only)
  // the second half into a view and item of its own, joined after (join_second_half). Making
  // them one after another was half of a load of 10,000 small arrays (docs/benchmarks.md,
  // "Orbax import"). In an OCDBT database, only where every run of small values is in memory
  // (OcdbtDatabase::hold_small_runs): values are then read without the lock both threads took
  // for each one. In a directory per parameter, each half reads its own arrays' zarr metadata
  // files (one thread each, where one reader alone reads them on every core and parses them
  // on one), on a store that reads on this thread (a filesystem; an object store's requests
  // are in flight together already). An error is the one the entries in order meet first:
  // the first half's, else the second's. False where the records are to be made here one by one.
  bool add_on_two_threads(ItemRecord& item, const std::vector<TreeMetadataEntry>& entries) {
    if (!for_load_ || entries.size() < parallel_records_min || usable_cores() < 2) return false;
    if (db_ ? !db_->hold_small_runs() : store_.parallel_reads() > 1) return false;
    const std::size_t half = entries.size() / 2;
    OrbaxView second_view(view_.base(), view_.key());
    OrbaxCheckpoint second_out;
    PytreeReader second(second_view, second_out, dir_, item_name_, nullptr, for_load_);
    second.db_ = db_;
    second.zarr3_ = zarr3_;
    second.sharding_ = sharding_;
    second.strings_ = strings_;
    ItemRecord second_item;
    second_item.leaves.reserve(entries.size() - half);
    {
      // (Declared after what it writes: where the first half throws, this waits for the second
      // before they go.)
      std::future<void> done;
      try {
        done = std::async(std::launch::async, [&] { second.add_records(second_item, entries, half, entries.size(), false); });
      } catch (const std::system_error&) {
        return false;  // no thread to be had: one after another, here
      }
      add_records(item, entries, 0, half, false);
      done.get();
    }
    join_second_half(item, second, second_view, second_out, second_item);
    return true;
  }

  // The second half's records appended to this reader's (add_on_two_threads): its blobs join
  // the view, each renumbered; a data file's blob is this reader's blob of that file; the
  // small zstd chunks it decoded from a file follow this reader's of that file, their
  // offsets moved by as many bytes.
  void join_second_half(ItemRecord& item, PytreeReader& second, OrbaxView& second_view, OrbaxCheckpoint& second_out,
                        ItemRecord& second_item) {
    std::deque<Blob>& blobs = second_view.blobs();
    std::vector<const std::string*> name(blobs.size(), nullptr);
    std::vector<std::uint64_t> shift(blobs.size(), 0);
    for (const auto& [file, made] : second.data_file_blobs_) name[made.first] = &data_file_blob(*file);
    for (const auto& [file, made] : second.decoded_blobs_) {
      const Blob& from = blobs[made.first];
      auto& [number, blob_name] = decoded_blob(*file);
      Blob& to = view_.blobs()[number];
      shift[made.first] = to.size;
      for (const DecodedChunks::Piece& p : from.decoded->pieces) to.decoded->pieces.push_back({p.at + to.size, p.stored_at, p.stored, p.size});
      to.decoded->keys.insert(to.decoded->keys.end(), from.decoded->keys.begin(), from.decoded->keys.end());
      to.size += from.size;
      to.value.length = to.size;
      name[made.first] = &blob_name;
    }
    std::vector<std::string> numbers;  // the others' new names (reserved: name points into it)
    numbers.reserve(blobs.size());
    for (std::size_t i = 0; i < blobs.size(); ++i) {
      if (name[i]) continue;
      name[i] = &numbers.emplace_back(std::to_string(view_.blobs().size()));
      view_.blobs().push_back(std::move(blobs[i]));
    }
    for (LeafRecord& l : second_item.leaves) {
      for (ChunkRecord& c : l.chunks) {
        std::size_t i = 0;  // (the blob's number, as the second half's view named it)
        std::from_chars(c.file.data(), c.file.data() + c.file.size(), i);
        c.file = *name.at(i);
        c.offset += shift[i];
      }
      item.leaves.push_back(std::move(l));
    }
    keys_.insert(keys_.end(), std::make_move_iterator(second.keys_.begin()), std::make_move_iterator(second.keys_.end()));
    item.unread.insert(item.unread.end(), std::make_move_iterator(second_item.unread.begin()),
                       std::make_move_iterator(second_item.unread.end()));
    out_.not_read.insert(out_.not_read.end(), std::make_move_iterator(second_out.not_read.begin()),
                         std::make_move_iterator(second_out.not_read.end()));
    for (auto& a : second_view.arrays()) view_.arrays().push_back(std::move(a));
    zarr3_found_ = zarr3_found_ || second.zarr3_found_;
    // Each half counted its own chunks against the bound; together they may pass it.
    if ((total_chunks_ += second.total_chunks_) > max_chunks)
      throw Error(ErrorKind::corrupt, "the arrays have too many chunks (over " + std::to_string(max_chunks) + ")", store_.describe(dir_));
  }

  // The layout of a directory per parameter keeps each array's zarr metadata in a file of its
  // own. The files of a batch of entries are read together before its arrays are added, with
  // Store::read_whole_each: a POSIX store reads them through io_uring, 64 files a system call
  // (io/batched_reads.hpp), on one thread per core; an object store sends them at once. Read
  // one after another they were half of a load of 10,000 small arrays, and one system call at
  // a time a third (docs/benchmarks.md, "Orbax import"). The name of the format the checkpoint
  // says it has (or zarr v3's) is read first, the other's for those it misses. Batches bound the
  // texts held at once. A parameter none was read of (an error, or neither name there) is left
  // to array_metadata, which tries it again and reports it there.
  static constexpr std::size_t prefetch_batch = 1024;
  void prefetch_array_metadata(const std::vector<TreeMetadataEntry>& entries, std::size_t from, std::size_t to, bool all_cores) {
    prefetched_.clear();
    std::vector<const std::string*> params;
    for (std::size_t i = from; i < to; ++i)
      if (is_array(entries[i]) && stays_below(entries[i].param)) params.push_back(&entries[i].param);
    if (params.size() < parallel_small_files_min) return;
    for (const int format : {3, 2}) {
      if (!may_be(format) || params.empty()) continue;
      std::vector<std::pair<std::string, std::uint64_t>> reads;
      reads.reserve(params.size());
      for (const std::string* p : params) reads.emplace_back(join_key(dir_, *p + metadata_name(format)), max_array_metadata_bytes);
      std::vector<Store::WholeBlob> got = all_cores ? read_whole_each_sliced(store_, reads) : store_.read_whole_each(reads);
      std::vector<const std::string*> missed;  // not there: the other format's name next
      for (std::size_t k = 0; k < params.size(); ++k) {
        if (!got[k].error) {
          prefetched_.emplace(*params[k], MetadataText{std::move(got[k].bytes), format, std::nullopt});
          continue;
        }
        try {
          std::rethrow_exception(got[k].error);
        } catch (const Error& e) {
          if (e.kind() == ErrorKind::not_found) missed.push_back(params[k]);
        } catch (...) {  // left to array_metadata, which reads it again and reports what is wrong
        }
      }
      params = std::move(missed);
    }
  }

  // `_sharding`: base64url(parameter name) -> a JSON string describing the sharding.
  std::map<std::string, Json> read_sharding() {
    std::map<std::string, Json> m;
    const std::string key = join_key(dir_, "_sharding");
    Json j;
    try {
      std::optional<Json> there = read_json_file_if_there(store_, key);
      if (!there) return m;
      j = std::move(*there);
    } catch (const Error&) {
      return m;  // Orbax treats a damaged _sharding as absent when a target gives the shardings
    }
    if (!j.is_object()) return m;
    for (const auto& [b64, v] : j.items()) {
      if (!v.is_string()) continue;
      try {
        m[base64url_decode(b64)] = Json::parse(v.as_string());
      } catch (const Error&) {
      }
    }
    return m;
  }
  static std::string base64url_decode(const std::string& s) {
    std::string out;
    int bits = 0, val = 0;
    for (char c : s) {
      int d;
      if (c >= 'A' && c <= 'Z') d = c - 'A';
      else if (c >= 'a' && c <= 'z') d = c - 'a' + 26;
      else if (c >= '0' && c <= '9') d = c - '0' + 52;
      else if (c == '-' || c == '+') d = 62;
      else if (c == '_' || c == '/') d = 63;
      else if (c == '=') break;
      else throw Error(ErrorKind::corrupt, "not base64");
      val = (val << 6) | d;
      bits += 6;
      if (bits >= 8) {
        bits -= 8;
        out += static_cast<char>((val >> bits) & 0xff);
      }
    }
    return out;
  }

  // The parameters of a pytree without _METADATA: every array the database (or directory) holds.
  std::vector<std::string> params_without_metadata() {
    std::vector<std::string> params;
    if (db_) {
      for (const auto& [k, v] : db_->entries()) {
        for (const char* suffix : {"/.zarray", "/zarr.json"}) {
          const std::string sfx = suffix;
          if (k.size() > sfx.size() && k.compare(k.size() - sfx.size(), sfx.size(), sfx) == 0)
            params.emplace_back(k.substr(0, k.size() - sfx.size()));
        }
      }
    } else {
      for (const auto& e : store_.list(dir_))
        if (e.is_prefix && (store_.is_blob(join_key(join_key(dir_, e.name), ".zarray")) ||
                            store_.is_blob(join_key(join_key(dir_, e.name), "zarr.json"))))
          params.push_back(e.name);
      std::sort(params.begin(), params.end());
    }
    return params;
  }

  // The documented rule for names without _METADATA: split at '.', decimal segments are
  // sequence indices (as the safetensors import reads "layers.0.w").
  static KeyPath key_path_of(const std::string& param) {
    KeyPath p;
    std::size_t start = 0;
    if (static_cast<std::size_t>(std::count(param.begin(), param.end(), '.')) >= max_tree_depth)
      throw Error(ErrorKind::corrupt, "a parameter name of more than " + std::to_string(max_tree_depth) +
                  " parts (cairn::max_tree_depth)", {}, param.substr(0, 200));
    while (true) {
      const std::size_t at = param.find('.', start);
      const std::string seg = param.substr(start, at == std::string::npos ? std::string::npos : at - start);
      std::int64_t i;
      if (!seg.empty() && seg.size() <= 18 && (seg[0] != '0' || seg.size() == 1) &&
          seg.find_first_not_of("0123456789") == std::string::npos && parse_int64(seg, i))
        p.push_back(KeyEntry::index(i));
      else p.push_back(KeyEntry::key(seg));
      if (at == std::string::npos) break;
      start = at + 1;
    }
    return p;
  }

  void add_from_metadata(ItemRecord& item, const TreeMetadataEntry& entry) {
    const KeyPath& path = entry.path;
    const std::string& param = entry.param;
    const std::string& type = entry.value_type;
    // None and empty containers hold no value: Orbax marks them skip_deserialize and stores
    // nothing (not in the msgpack file either, which they were said to be missing from).
    if (type == "None" || (entry.skip_deserialize && (type == "Dict" || type == "List" || type == "Tuple"))) return;
    if (entry.skip_deserialize) {
      add_aggregated(item, path);
      return;
    }
    if (type == "string") {
      const Json* s = strings_->is_object() ? strings_->find(param) : nullptr;
      if (!s || !s->is_string())
        throw Error(ErrorKind::corrupt, "string leaf '" + param + "' has no value in _strings.json",
                    store_.describe(join_key(dir_, "_strings.json")), path.str());
      Blob b;
      b.kind = Blob::Kind::bytes;
      b.bytes = s->as_string();
      b.size = b.bytes.size();
      b.name = join_key(dir_, "_strings.json");
      const std::string key = path.str();
      b.key = key;
      LeafRecord l;
      l.path = path;
      l.dtype = l.saved_from = DType::string;
      l.shape = Shape{static_cast<std::int64_t>(b.size)};
      add_chunk(l, Shape{0}, l.shape, std::move(b));
      push_leaf(item, std::move(l), key);
      return;
    }
    if (is_array(entry)) {
      add_array(item, param, path);
      return;
    }
    if (type == "Dict" || type == "List" || type == "Tuple") return;  // empty containers: no value
    add_unread(item, path, "value type '" + printable_prefix(std::string_view(type).substr(0, 60)) + "', which cairn does not read");
  }

  // Every leaf goes in here, with its printed key path: the key is printed once, where the
  // leaf is made, and the load's index of stored keys takes these (PrintedKeys) rather than
  // printing each again (twice per leaf, with add_nodes, were 3% of a load of 10,000 arrays).
  void push_leaf(ItemRecord& item, LeafRecord&& l, std::string key) {
    item.leaves.push_back(std::move(l));
    keys_.push_back(std::move(key));
  }

  // A leaf cairn cannot read (a value type it has no leaf for, an array of a dtype it does not
  // have): listed in not_read, never read, and refused by any load that would take it
  // (ItemRecord::unread; load_protocol.hpp's account_unread), as a safetensors tensor of such a
  // dtype is.
  void add_unread(ItemRecord& item, const KeyPath& path, std::string reason) {
    out_.not_read.push_back(path.str() + ": " + reason);
    item.unread.push_back({path, std::move(reason)});
  }

  // A value Orbax's older layout kept in the msgpack file `checkpoint` (saved with `aggregate`):
  // a flax ndarray (extension 1: [shape, dtype, bytes]), a number, a boolean or a string.
  void add_aggregated(ItemRecord& item, const KeyPath& path) {
    const std::string key = path.str();
    const std::string file_key = join_key(dir_, "checkpoint");
    const std::string file = store_.describe(file_key);
    if (!aggregate_loaded_) {
      aggregate_loaded_ = true;
      try {
        aggregate_text_ = read_blob(store_, file_key, std::uint64_t(1) << 31);
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::not_found) throw;
      }
      if (!aggregate_text_.empty()) aggregate_ = MsgReader(aggregate_text_, file).read_all();
    }
    const MsgValue* v = &aggregate_;
    for (const KeyEntry& e : path.entries()) {
      if (!v) break;
      if (v->kind == MsgValue::Kind::map) v = v->find(e.text());
      else if (v->kind == MsgValue::Kind::array && e.kind == KeyEntry::Kind::index && e.number >= 0 &&
               static_cast<std::size_t>(e.number) < v->items.size())
        v = &v->items[static_cast<std::size_t>(e.number)];
      else v = nullptr;
    }
    // A value _METADATA names but the msgpack file does not hold is refused by a strict load,
    // as any leaf cairn cannot read is: a load that went on without it lost it silently.
    if (!v || v->kind == MsgValue::Kind::nil) {
      add_unread(item, path, std::string("_METADATA says it is in the msgpack file `checkpoint`, which ") +
                                 (aggregate_text_.empty() ? "is not there" : "does not hold it"));
      return;
    }
    LeafRecord l;
    l.path = path;
    Blob b;
    b.kind = Blob::Kind::bytes;
    b.name = file_key;
    b.key = key;
    switch (v->kind) {
      case MsgValue::Kind::ext: {
        if (v->ext_type != 1) throw Error(ErrorKind::invalid_argument, "msgpack extension type " + std::to_string(v->ext_type) +
                                          " (flax's ndarray is 1)", file, key);
        const MsgValue a = MsgReader(v->s, file).read_all();
        if (a.kind != MsgValue::Kind::array || a.items.size() != 3 || a.items[0].kind != MsgValue::Kind::array ||
            a.items[1].kind != MsgValue::Kind::str || a.items[2].kind != MsgValue::Kind::bin)
          throw Error(ErrorKind::corrupt, "an ndarray that is not [shape, dtype, bytes]", file, key);
        if (!parse_dtype(a.items[1].s, l.dtype) || l.dtype == DType::string)
          throw Error(ErrorKind::invalid_argument, "ndarray of dtype '" + a.items[1].s + "', which cairn does not read", file, key);
        for (const MsgValue& d : a.items[0].items) {
          const bool ok = (d.kind == MsgValue::Kind::int_ && d.i >= 0) || d.kind == MsgValue::Kind::uint;
          const std::uint64_t n = d.kind == MsgValue::Kind::uint ? d.u : static_cast<std::uint64_t>(d.i);
          if (!ok || n > (std::uint64_t(1) << 48) || l.shape.size() >= 32)
            throw Error(ErrorKind::corrupt, "an ndarray's shape holds a bad size", file, key);
          l.shape.push_back(static_cast<std::int64_t>(n));
        }
        std::uint64_t want;
        if (!try_byte_count(l.shape, dtype_size(l.dtype), want) || want != a.items[2].s.size())
          throw Error(ErrorKind::corrupt, "an ndarray of shape " + to_string(l.shape) + " holds " +
                      std::to_string(a.items[2].s.size()) + " bytes", file, key);
        b.bytes = a.items[2].s;
        break;
      }
      case MsgValue::Kind::boolean: l.dtype = DType::bool_, b.bytes.assign(1, v->b ? 1 : 0); break;
      case MsgValue::Kind::int_: l.dtype = DType::int64, b.bytes.assign(reinterpret_cast<const char*>(&v->i), 8); break;
      case MsgValue::Kind::uint: l.dtype = DType::uint64, b.bytes.assign(reinterpret_cast<const char*>(&v->u), 8); break;
      case MsgValue::Kind::float_: l.dtype = DType::float64, b.bytes.assign(reinterpret_cast<const char*>(&v->f), 8); break;
      case MsgValue::Kind::str:
        l.dtype = DType::string;
        b.bytes = v->s;
        l.shape = Shape{static_cast<std::int64_t>(v->s.size())};
        break;
      default:
        add_unread(item, path, "a msgpack value that is no array, number or string");
        return;
    }
    l.saved_from = l.dtype;
    b.size = b.bytes.size();
    add_chunk(l, Shape(l.shape.size(), 0), l.shape, std::move(b));
    push_leaf(item, std::move(l), key);
  }

  // A parameter's zarr metadata may be named zarr.json (format 3) or .zarray (2), as
  // _METADATA's use_zarr3 allows; looked for in that order.
  bool may_be(int format) const { return format == 3 ? zarr3_ != 0 : zarr3_ != 1; }
  static const char* metadata_name(int format) { return format == 3 ? "/zarr.json" : "/.zarray"; }
  struct MetadataText {
    std::string text;
    int format = 0;  // 3: zarr.json, 2: .zarray; 0: neither is there
    std::optional<std::string_view> held;  // the text where the database holds it (then `text` is empty)
    std::string_view bytes() const { return held ? *held : std::string_view(text); }
  };
  static constexpr std::uint64_t max_array_metadata_bytes = 16u << 20;  // an array's zarr.json or .zarray
  // A parameter's zarr metadata text, from the database or from its file (no stat first: one
  // call fewer per array). Errors other than its absence are thrown.
  MetadataText read_metadata_text(const std::string& param, const std::string& key) const {
    // A parameter's name is a path below the checkpoint in this layout, and it comes from
    // _METADATA: one that leads out of it ("../x") must not read the files there.
    if (!db_ && !stays_below(param))
      throw Error(ErrorKind::corrupt, "parameter name '" + param + "' is no path inside the checkpoint (an empty, '.' or '..' "
                  "part, or a NUL)", meta_file(), key);
    for (const int format : {3, 2}) {
      if (!may_be(format)) continue;
      std::string& k = metadata_key_;  // (a string kept: one allocation per array fewer)
      k.assign(param).append(metadata_name(format));
      if (db_) {
        if (const OcdbtValue* v = db_->find(k)) {
          if (std::optional<std::string_view> held = db_->held(*v)) return {std::string(), format, held};
          return {db_->read(*v, key), format, std::nullopt};
        }
        continue;
      }
      try {
        return {read_blob(store_, join_key(dir_, k), max_array_metadata_bytes), format, std::nullopt};
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::not_found) throw;
      }
    }
    return {};
  }

  const ZarrArray& array_metadata(const std::string& param, const std::string& key) {
    MetadataText m;
    if (auto it = prefetched_.find(param); it != prefetched_.end()) {  // read already (prefetch_array_metadata)
      m = std::move(it->second);
      prefetched_.erase(it);
    } else {
      m = read_metadata_text(param, key);
    }
    if (!m.format) {
      const std::string name = param + metadata_name(may_be(3) ? 3 : 2);
      throw Error(ErrorKind::not_found,
                  "array '" + param + "' has no zarr metadata (" +
                      (db_ ? "no key '" + name + "' in the OCDBT database" : "no file '" + name + "'") + ")",
                  store_.describe(dir_), key);
    }
    const std::string_view text = m.bytes();
    const int format = m.format;
    zarr3_found_ = zarr3_found_ || format == 3;
    // Arrays of one shape and dtype have the same metadata text (a model's layers): parsed once
    // (and the file named in the errors of a first parse only: described then).
    // The array before's text is compared first: arrays in key order mostly follow one of
    // their shape, and comparing the text is cheaper than hashing it.
    auto& parsed = parsed_[format == 3];
    auto& last = last_parsed_[format == 3];
    if (last.first && *last.first == text) return *last.second;
    auto it = parsed.find(text);
    if (it == parsed.end()) {
      const std::string file = store_.describe(join_key(dir_, param + metadata_name(format)));
      view_.arrays().push_back(std::make_unique<ZarrArray>(parse_zarr_metadata(std::string(text), format, file, key)));
      it = parsed.emplace(std::string(text), view_.arrays().back().get()).first;
    }
    last = {&it->first, it->second};
    return *it->second;
  }

  void add_chunk(LeafRecord& l, Shape start, Shape shape, Blob&& b) { view_.add_chunk(l, std::move(start), std::move(shape), std::move(b)); }

  void add_array(ItemRecord& item, const std::string& param, const KeyPath& path) {
    const std::string key = path.str();
    const ZarrArray& a = array_metadata(param, key);
    if (!a.unread_dtype.empty()) {
      add_unread(item, path, "dtype " + a.unread_dtype + to_string(a.shape) + ", which cairn does not read");
      return;
    }
    LeafRecord l;
    l.path = path;
    l.dtype = l.saved_from = a.dtype;
    l.shape = a.shape;
    const bool fortran = a.sharded ? a.shard.inner.fortran : a.codecs.fortran;
    l.order = fortran ? Order::F : Order::C;
    const std::size_t item_size = dtype_size(a.dtype);
    const std::size_t rank = a.shape.size();
    // The chunk grid (shards for sharding_indexed), each chunk cut to the array.
    Shape grid(rank, 0);
    std::uint64_t chunks = 1;
    bool empty = false;
    for (std::size_t d = 0; d < rank; ++d) {
      grid[d] = a.shape[d] == 0 ? 0 : (a.shape[d] + a.chunk_shape[d] - 1) / a.chunk_shape[d];
      empty = empty || grid[d] == 0;
      if (!empty && !checked_mul(chunks, static_cast<std::uint64_t>(grid[d]), chunks)) chunks = ~std::uint64_t(0);
    }
    Shape inner_grid(rank, 1);
    std::uint64_t inner_count = 1;
    if (a.sharded)
      for (std::size_t d = 0; d < rank; ++d) {
        inner_grid[d] = a.chunk_shape[d] / a.shard.inner_shape[d];
        inner_count *= static_cast<std::uint64_t>(inner_grid[d]);
      }
    total_chunks_ += empty ? 1 : chunks;
    if (!empty && (chunks > max_chunks || inner_count > max_chunks || (total_chunks_ += chunks * (inner_count - 1)) > max_chunks))
      throw Error(ErrorKind::corrupt, "array '" + param + "' has too many chunks (over " + std::to_string(max_chunks) + ")",
                  store_.describe(dir_), key);
    if (empty) {
      Blob b;
      b.kind = Blob::Kind::bytes;
      b.name = join_key(dir_, param);
      b.key = key;
      add_chunk(l, Shape(rank, 0), a.shape, std::move(b));
      push_leaf(item, std::move(l), key);
      finish_leaf(item.leaves.back(), param);
      return;
    }
    Shape at(rank, 0);
    while (true) {
      std::string& chunk_key = chunk_key_;  // (a string kept: two allocations per chunk fewer)
      chunk_key.assign(param).push_back('/');
      zarr_append_chunk_key(a, at, chunk_key);
      Blob src;
      src.array = &a;
      src.key = key;
      // (src.name, what errors name, is joined only for a chunk that becomes a blob of its own:
      // a small chunk read as a range of its data file needs none, and joining it for each of
      // 10,000 arrays, and copying it into each inner chunk's blob, was a twentieth of opening.)
      bool present = true;
      if (db_) {
        const OcdbtValue* v = db_->find(chunk_key);
        present = v != nullptr;
        if (v) src.db = db_, src.value = *v;
      } else {
        src.path = join_key(dir_, chunk_key);
        src.file_may_be_missing = true;  // found out when read: a stat per chunk here was a tenth of a small load
      }
      Shape outer_start(rank, 0);
      for (std::size_t d = 0; d < rank; ++d) outer_start[d] = at[d] * a.chunk_shape[d];
      // Each inner chunk (one, unsharded: the chunk itself).
      Shape in(rank, 0);
      std::uint64_t inner_index = 0;
      while (true) {
        Blob b = inner_index + 1 == inner_count ? std::move(src) : Blob(src);  // (the last inner chunk takes src)
        const Shape& cs = a.sharded ? a.shard.inner_shape : a.chunk_shape;
        Shape start(rank, 0), shape(rank, 0), box_start(rank, 0);
        bool inside = true;
        for (std::size_t d = 0; d < rank; ++d) {
          start[d] = outer_start[d] + in[d] * cs[d];
          inside = inside && start[d] < a.shape[d];
          shape[d] = inside ? std::min(cs[d], a.shape[d] - start[d]) : 0;
        }
        if (inside) {
          b.stored = cs;
          b.box_start = box_start;
          b.box_shape = shape;
          b.size = element_count(shape) * item_size;
          b.inner = a.sharded;
          b.inner_index = inner_index;
          b.inner_count = inner_count;
          const ZarrCodecs& codecs = a.sharded ? a.shard.inner : a.codecs;
          if (!present) b.kind = Blob::Kind::fill;
          else if (!a.sharded && !codecs.zstd && !codecs.crc32c && shape == cs) b.kind = Blob::Kind::range;
          else b.kind = Blob::Kind::chunk;
          const Direct direct = b.kind == Blob::Kind::fill ? Direct::no : add_direct_chunk(l, start, shape, b);
          if (direct == Direct::missing) {  // (the shard's index says so)
            b.kind = Blob::Kind::fill;
            b.db = nullptr;
          }
          if (direct != Direct::yes) {
            b.name = b.path.empty() ? join_key(dir_, chunk_key) : b.path;  // (a file's path is its name)
            add_chunk(l, start, shape, std::move(b));
          }
        }
        ++inner_index;
        std::size_t d = rank;
        while (d > 0 && ++in[d - 1] == inner_grid[d - 1]) in[--d] = 0;
        if (d == 0) break;
      }
      std::size_t d = rank;
      while (d > 0 && ++at[d - 1] == grid[d - 1]) at[--d] = 0;
      if (d == 0) break;
    }
    // A chunk of the range kind must be its stored size: checked when read (a value of
    // another size is corrupt), and here where the size is known without reading.
    // Before any target is allocated for it (as a cairn checkpoint's chunks must lie inside
    // their files first): a chunk in the database cannot decode to more than its stored bytes
    // allow, uncompressed as they are, compressed at zstd's utmost ratio (about 32,000:1 for a
    // run of one byte), so a small hostile zarr.json cannot make a load allocate terabytes.
    const ZarrCodecs& codecs = a.sharded ? a.shard.inner : a.codecs;
    for (const auto& c : l.chunks) {
      const Blob& b = view_.blobs()[std::stoull(c.file)];
      if (!b.db || b.kind == Blob::Kind::fill || !b.array) continue;  // (no array: a data file, add_direct_chunk)
      const std::uint64_t stored = b.value.size();
      if (b.kind == Blob::Kind::range && stored != b.size)
        throw Error(ErrorKind::corrupt, "chunk is " + std::to_string(stored) + " bytes, expected " + std::to_string(b.size),
                    store_.describe(b.name), key);
      const std::uint64_t most = codecs.zstd ? stored * 32768 + (1u << 20) : stored;
      if (element_count(b.stored) * item_size > most)
        throw Error(ErrorKind::corrupt, "a chunk of " + std::to_string(element_count(b.stored) * item_size) +
                    " bytes cannot come from the " + std::to_string(stored) + " bytes stored", store_.describe(b.name), key);
    }
    push_leaf(item, std::move(l), key);
    finish_leaf(item.leaves.back(), param);
  }

  // A small chunk in a run of small values of the database (Orbax's layouts of many small
  // arrays: each array's zarr metadata and its chunk or shard back to back in one data file),
  // of one inner chunk where sharded: its shard's index is read and checked now, from the run
  // read anyway for the zarr metadata, and the chunk recorded as a byte range of its data file
  // (one blob per data file: data_file_blob), or where zstd-compressed, of the file's decoded
  // small chunks (one blob per file: decoded_blob). A load then reads runs of such chunks with
  // one request each, as a cairn checkpoint's small leaves are, on two threads where the file
  // is in memory. As blobs of their own, each chunk took a reader, a lock of the database's
  // runs and a parse of its index while loading: 10,000 arrays of 64 floats loaded in 29 ms
  // against 7.7 for the same arrays saved by cairn (docs/benchmarks.md, "Orbax import"). A
  // chunk its index says is missing is Direct::missing: the caller makes it a fill blob, which
  // reads as the fill value. Direct::no for anything else (an edge chunk, a CRC32C codec, a
  // damaged index, a size that does not fit): the chunk is read as before, and what is wrong
  // with it reported when it is.
  enum class Direct { no, yes, missing };  // a range of its data file (yes), or not (no, missing)
  Direct add_direct_chunk(LeafRecord& l, const Shape& start, const Shape& shape, const Blob& b) {
    if (!for_load_ || !b.db || b.value.is_inline || b.stored != b.box_shape || !b.db->in_small_run(b.value)) return Direct::no;
    const ZarrArray& a = *b.array;
    const ZarrCodecs& c = b.inner ? a.shard.inner : a.codecs;
    if (c.crc32c || (b.inner && b.inner_count != 1)) return Direct::no;
    std::uint64_t at = b.value.offset, stored = b.value.length;
    if (b.inner) {
      const std::uint64_t index_size = zarr_index_bytes(a.shard, 1);
      if (stored < index_size) return Direct::no;
      char index[20];
      static_assert(sizeof(index) >= 16 + 4);
      ZarrShardEntry e;
      try {
        b.db->read(b.value, index, index_size, a.shard.index_at_start ? 0 : stored - index_size, b.key);
        std::string_view entry(index, static_cast<std::size_t>(index_size));
        if (a.shard.index_crc32c) entry = zarr_strip_crc(entry, b.name, b.key, " (shard index)");
        e = zarr_shard_entry(a.shard, entry, 0, 1, stored, b.name, b.key);
      } catch (const Error&) {
        return Direct::no;
      }
      if (e.missing()) return Direct::missing;
      at += e.offset;
      stored = e.nbytes;
    }
    if (!c.zstd) {
      if (stored != b.size) return Direct::no;
      view_.add_range(l, start, shape, data_file_blob(*b.value.file), at, stored);
      return Direct::yes;
    }
    // (The bound add_array puts on any zstd chunk: none decodes past zstd's utmost ratio.)
    if (stored == 0 || b.size > stored * 32768 + (1u << 20)) return Direct::no;
    auto& [blob, name] = decoded_blob(*b.value.file);
    Blob& d = view_.blobs()[blob];
    d.decoded->pieces.push_back({d.size, at, stored, b.size});
    d.decoded->keys.push_back(b.key);
    view_.add_range(l, start, shape, name, d.size, b.size);
    d.size += b.size;
    d.value.length = d.size;
    return Direct::yes;
  }
  // The blob of a whole data file of the database (add_direct_chunk), made once per file: its
  // number, and that as its name.
  const std::string& data_file_blob(const OcdbtDataFile& f) {
    return file_blob(data_file_blobs_, f, Blob::Kind::range).second;
  }
  // The blob of a data file's small zstd chunks, decoded one after another (add_direct_chunk).
  std::pair<std::size_t, std::string>& decoded_blob(const OcdbtDataFile& f) {
    return file_blob(decoded_blobs_, f, Blob::Kind::decoded);
  }
  using FileBlobs = std::unordered_map<const OcdbtDataFile*, std::pair<std::size_t, std::string>>;
  std::pair<std::size_t, std::string>& file_blob(FileBlobs& made, const OcdbtDataFile& f, Blob::Kind kind) {
    auto [it, fresh] = made.try_emplace(&f);
    if (!fresh) return it->second;
    Blob b;
    b.kind = kind;
    b.db = db_;
    b.value.is_inline = false;
    b.value.file = &f;
    b.name = join_key(dir_, f.path);
    if (kind == Blob::Kind::decoded) b.decoded = std::make_shared<DecodedChunks>();  // grows with its chunks
    else b.value.length = b.size = db_->value_reader(f).size();
    it->second = {view_.blobs().size(), std::to_string(view_.blobs().size())};
    view_.blobs().push_back(std::move(b));
    return it->second;
  }

  // The sharding _sharding records, as cairn's mesh and partition spec (host devices: where
  // the shards live when loaded is the target's business).
  void finish_leaf(LeafRecord& l, const std::string& param) {
    auto it = sharding_->find(param);
    if (it == sharding_->end() || !it->second.is_object()) return;
    const Json& s = it->second;
    const Json* type = s.find("sharding_type");
    if (!type || !type->is_string() || type->as_string() != "NamedSharding") return;
    try {
      const Json& shape = s.at("shape");
      const Json& names = s.at("axis_names");
      if (!shape.is_array() || !names.is_array() || shape.size() != names.size()) return;
      std::vector<MeshAxis> axes;
      std::uint64_t devices = 1;
      for (std::size_t i = 0; i < shape.size(); ++i) {
        const std::int64_t n = shape.as_array()[i].as_int();
        if (n <= 0 || n > (1 << 20)) return;
        devices *= static_cast<std::uint64_t>(n);
        if (devices > (1u << 20)) return;
        axes.push_back({names.as_array()[i].as_string(), n});
      }
      std::vector<PartitionSpec::Dim> dims;
      if (const Json* spec = s.find("partition_spec"); spec && spec->is_array())
        for (const Json& d : spec->as_array()) {
          if (d.is_null()) dims.emplace_back(Replicated{});
          else if (d.is_string()) dims.emplace_back(d.as_string());
          else if (d.is_array()) {
            std::vector<std::string> list;
            for (const Json& x : d.as_array()) list.push_back(x.as_string());
            dims.emplace_back(std::move(list));
          }
        }
      NamedSharding ns(Mesh::host(std::move(axes)), PartitionSpec(std::move(dims)));
      ns.validate(l.shape.size());
      l.sharding = std::move(ns);
    } catch (const Error&) {
      // A sharding cairn cannot express is left out: it describes, it does not decide.
    }
  }

  // Inner nodes: every proper prefix of a leaf's path; a map for keys, a sequence for indices.
  void add_nodes(ItemRecord& item) {
    std::vector<std::string_view> keys(keys_.begin(), keys_.end());
    const KeyTable leaves(keys);
    if (const std::string_view* twice = leaves.repeated())
      throw Error(ErrorKind::corrupt, "two parameters map to one key path", meta_file(), std::string(*twice));
    item.nodes = inner_nodes(
        item.leaves, NodeKind::map, true, [&](const std::string& printed) { return leaves.contains(printed); },
        [&](const std::string& printed, const LeafRecord& l) {
          throw Error(ErrorKind::corrupt, "'" + printed + "' is both a leaf and the parent of '" + l.key() + "'", meta_file(), printed);
        });
  }

  static constexpr std::uint64_t max_chunks = 10'000'000;
  OrbaxView& view_;
  OrbaxCheckpoint& out_;
  const Store& store_;
  std::string dir_;
  std::string item_name_;
  PrintedKeys* keys_out_ = nullptr;
  bool for_load_ = false;
  FileBlobs data_file_blobs_, decoded_blobs_;  // data_file_blob, decoded_blob: file -> blob
  std::vector<std::string> keys_;  // item.leaves' printed keys (push_leaf)
  OcdbtDatabase* db_ = nullptr;
  int zarr3_ = -1;  // from _METADATA: 1 zarr v3, 0 zarr v2, -1 unsaid (look for either)
  bool zarr3_found_ = false;
  std::uint64_t total_chunks_ = 0;
  // _sharding and _strings.json, read once (a second thread's reader shares them: add_on_two_threads).
  std::shared_ptr<const std::map<std::string, Json>> sharding_ = std::make_shared<const std::map<std::string, Json>>();
  std::shared_ptr<const Json> strings_ = std::make_shared<const Json>();
  // By metadata text, zarr v2 and v3; looked up by a view of the text (TextHash).
  struct TextHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, const ZarrArray*, TextHash, std::equal_to<>> parsed_[2];
  std::pair<const std::string*, const ZarrArray*> last_parsed_[2] = {};  // the last found in parsed_ (its nodes stay)
  mutable std::string metadata_key_;  // read_metadata_text's key, kept
  std::string chunk_key_;             // add_array's, kept
  bool aggregate_loaded_ = false;
  std::string aggregate_text_;
  MsgValue aggregate_;
  // The zarr metadata of a batch of parameters, read side by side (prefetch_array_metadata).
  std::unordered_map<std::string, MetadataText> prefetched_;
};

// Whether the directory at `key` is a pytree's (its _METADATA or its OCDBT database).
inline bool is_pytree_dir(const Store& store, const std::string& key) {
  return store.is_blob(join_key(key, "_METADATA")) || store.is_blob(join_key(key, "manifest.ocdbt"));
}

// Whether `key` looks like an Orbax checkpoint at all (what inspect asks first); `listing`:
// the store's listing of `key`, where the caller has it: the files are looked for in it, not
// asked for one by one.
inline bool looks_like_orbax(const Store& store, const std::string& key, const std::vector<StoreEntry>* listing) {
  const std::string k = normalize_key(key);
  auto has = [&](const char* name) {
    if (!listing) return store.is_blob(join_key(k, name));
    return std::any_of(listing->begin(), listing->end(), [&](const StoreEntry& e) { return !e.is_prefix && e.name == name; });
  };
  if (has("_CHECKPOINT")) return false;  // cairn's commit marker
  return has("_CHECKPOINT_METADATA") || has("orbax.checkpoint") || has("commit_success.txt") || has("_METADATA") ||
         has("manifest.ocdbt");  // the last two: a pytree's directory (is_pytree_dir)
}
inline bool looks_like_orbax(const Store& store, const std::string& key) { return looks_like_orbax(store, key, nullptr); }

// Why the Orbax checkpoint at `key` is a save Orbax has not finished, or "" where it is
// finished. Such a save is not loaded, as a cairn checkpoint without its marker is not: its
// temporary directory (Orbax renames it to its name when the save is done, on a filesystem;
// its name holds ".orbax-checkpoint-tmp"), or, written in place (on an object store), a
// _CHECKPOINT_METADATA whose commit time is null beside no commit_success.txt. (Orbax writes
// the commit time and commit_success.txt when it finishes; checkpoints of Orbax versions that
// wrote neither, without the member, are finished.) `cm`: _CHECKPOINT_METADATA where the
// caller read it (null: read here where needed).
inline std::string orbax_unfinished(const Store& store, const std::string& key, const Json* cm) {
  const std::string name = key.substr(key.rfind('/') == std::string::npos ? 0 : key.rfind('/') + 1);
  if (name.find(".orbax-checkpoint-tmp") != std::string::npos)
    return "Orbax's temporary directory of a save in progress, or of one that died (Orbax renames it when the save "
           "is done): not a checkpoint to load";
  std::optional<Json> read;
  if (!cm) {
    if (store.is_blob(join_key(key, "commit_success.txt"))) return {};
    read = read_json_file_if_there(store, join_key(key, "_CHECKPOINT_METADATA"));
    if (!read) return {};
    cm = &*read;
  }
  const Json* t = cm->is_object() ? cm->find("commit_timestamp_nsecs") : nullptr;
  if (t && t->is_null() && (read || !store.is_blob(join_key(key, "commit_success.txt"))))
    return "an Orbax save in progress, or one that died: _CHECKPOINT_METADATA has no commit time and there is no "
           "commit_success.txt";
  return {};
}

// Reads the layout and every checkpointable's records into `view` and the returned description;
// `leaf_keys`, if given, gets the pytree items' leaves' printed keys by item (empty for others).
// `leaf_keys` and `for_load`: PytreeReader's.
inline OrbaxCheckpoint open_orbax(OrbaxView& view, PrintedKeys* leaf_keys = nullptr, bool for_load = false) {
  const Store& store = view.base();
  const std::string& key = view.key();
  OrbaxCheckpoint out;
  CheckpointMetadata& m = out.metadata;
  m.library_version = "orbax";
  m.format_version = 0;
  m.user_metadata = Json::object();
  // _CHECKPOINT_METADATA: the handlers of the checkpointables, the metrics, custom metadata and times.
  Json handlers;
  const std::string cm_key = join_key(key, "_CHECKPOINT_METADATA");
  const std::optional<Json> read = read_json_file_if_there(store, cm_key);
  if (const std::string why = orbax_unfinished(store, key, read ? &*read : nullptr); !why.empty())
    throw Error(ErrorKind::incomplete, why, store.describe(key));
  if (read) {
    const Json& cm = *read;
    if (cm.is_object()) {
      if (const Json* h = cm.find("item_handlers")) handlers = *h;
      if (const Json* v = cm.find("metrics"); v && v->is_object()) m.user_metadata["metrics"] = *v;
      if (const Json* v = cm.find("custom_metadata"); v && v->is_object()) m.user_metadata["custom"] = *v;
      const Json* t = cm.find("commit_timestamp_nsecs");
      if (!t || !t->is_int()) t = cm.find("init_timestamp_nsecs");
      if (t && t->is_int()) {
        m.created_unix_ms = t->as_int() / 1'000'000;
        m.created = iso8601_utc(m.created_unix_ms);
        m.user_metadata["created_unix_ms"] = m.created_unix_ms;
      }
    }
  }
  if (is_pytree_dir(store, key)) {
    // One pytree written directly (StandardCheckpointer, PyTreeCheckpointer, the older layout).
    PytreeReader(view, out, key, default_item_name, leaf_keys, for_load).read();
  } else {
    // A composite checkpoint: one directory per checkpointable.
    std::set<std::string> dirs;
    for (const auto& e : store.list(key))
      if (e.is_prefix && !e.name.empty() && e.name[0] != '.' && e.name[0] != '_') dirs.insert(e.name);
    std::map<std::string, std::string> kinds;  // name -> "pytree" | "json"
    for (const std::string& d : dirs) {
      const std::string dk = join_key(key, d);
      std::string handler;
      if (handlers.is_object()) {
        const Json* h = handlers.find(d);
        if (!h) {
          out.unknown.push_back(d);
          continue;
        }
        handler = h->is_string() ? h->as_string() : "";
      } else if (handlers.is_string()) {
        handler = handlers.as_string();  // Orbax v0 with one handler for the whole checkpoint
      }
      if ((handler.empty() || is_pytree_handler(handler)) && is_pytree_dir(store, dk)) kinds[d] = "pytree";
      else if ((handler.empty() || is_json_handler(handler)) &&
               (store.is_blob(join_key(dk, "data.json")) || store.is_blob(join_key(dk, "metadata"))))
        kinds[d] = "json";
      else out.unknown.push_back(d);
    }
    if (handlers.is_object())
      for (const auto& [name, h] : handlers.items())
        if (!dirs.count(name) && h.is_string() && (is_pytree_handler(h.as_string()) || is_json_handler(h.as_string())))
          out.missing.push_back(name);
    if (kinds.empty() && out.missing.empty())
      throw Error(ErrorKind::not_found, "not an Orbax checkpoint (no _METADATA, manifest.ocdbt or checkpointable directory)",
                  store.describe(key));
    // The main pytree: "state" (Orbax v1, and v0's composite), "pytree" (v1 before 2026-05),
    // "default", or the only one.
    std::vector<std::string> pytrees;
    for (const auto& [name, kind] : kinds)
      if (kind == "pytree") pytrees.push_back(name);
    for (const char* preferred : {"state", "pytree", "default"})
      if (out.pytree.empty() && kinds.count(preferred) && kinds[preferred] == "pytree") out.pytree = preferred;
    if (out.pytree.empty() && pytrees.size() == 1) out.pytree = pytrees[0];
    for (const auto& [name, kind] : kinds) {
      const std::string dk = join_key(key, name);
      if (kind == "pytree") {
        PytreeReader(view, out, dk, name == out.pytree ? std::string(default_item_name) : name, leaf_keys, for_load).read();
        continue;
      }
      const std::string file = store.is_blob(join_key(dk, "data.json")) ? join_key(dk, "data.json") : join_key(dk, "metadata");
      const Json value = read_json_file(store, file);
      out.json[name] = value;
      Blob b;
      b.kind = Blob::Kind::bytes;
      b.bytes = value.dump();
      b.size = b.bytes.size();
      b.name = file;
      ItemRecord item;
      item.name = name;
      item.kind = ItemKind::json;
      LeafRecord l;
      l.dtype = l.saved_from = DType::string;
      l.shape = Shape{static_cast<std::int64_t>(b.size)};
      view.add_chunk(l, Shape{0}, l.shape, std::move(b));
      item.leaves.push_back(std::move(l));
      m.items.push_back(std::move(item));
    }
  }
  if (leaf_keys) leaf_keys->resize(m.items.size());
  m.library_version = out.layout.empty() ? "orbax" : out.layout;
  m.data_files.reserve(view.blobs().size());
  for (std::size_t i = 0; i < view.blobs().size(); ++i) m.data_files.push_back(std::to_string(i));
  return out;
}

// A load of an Orbax checkpoint through the checkpoint's own protocol (steps 5-9).
inline LoadReport load_orbax_planned(const Store& store, const std::string& key, const LoadOptions& options,
                                     FunctionRef<LoadPlan(const StoredIndex&)> plan_fn) {
  if (options.require_verified)
    throw Error(ErrorKind::invalid_argument, "cairn checks no checksum of an Orbax checkpoint's data (its codecs' own "
                "checks run where it has them), and LoadOptions::require_verified asks for every byte to be verified",
                store.describe(key));
  OrbaxView view(store, key);
  LoadOptions opts = options;
  opts.verify_checksums = false;  // the chunks' own checks (CRC32C codecs, zstd frames) run as they decode
  return load_opened(view, [&] {
    OpenedCheckpoint o;
    OrbaxCheckpoint c = open_orbax(view, &o.leaf_keys, true);
    if (!c.metadata.find_item(opts.item)) {
      std::string why = "the Orbax checkpoint has no " +
                        (opts.item == default_item_name ? std::string("pytree checkpointable") : "checkpointable '" + opts.item + "'");
      if (!c.missing.empty()) why += " (_CHECKPOINT_METADATA names '" + c.missing[0] + "', whose directory is missing)";
      throw Error(ErrorKind::not_found, why, store.describe(key));
    }
    o.key = "";
    o.name = store.describe(key);
    o.records = store.describe(key);
    o.metadata = std::move(c.metadata);
    return o;
  }, opts, false, plan_fn);
}

}  // namespace detail::orbax
CAIRN_END_NAMESPACE
