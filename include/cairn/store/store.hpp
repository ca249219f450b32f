// SPDX-License-Identifier: Apache-2.0
// The storage seam: what a checkpoint needs from the medium it lives in. A Store holds blobs
// under '/'-separated keys ("ckpt/100/_METADATA"); a checkpoint is the blobs under one key.
// The format (checkpoint/, format/) is written once against this interface; where the bytes
// live is the Store's business: PosixStore (files and directories, store/posix_store.hpp),
// MemoryStore (tests, with fault injection, store/memory_store.hpp), and S3Store (object stores,
// opt-in through cairn/s3.hpp, s3/s3_store.hpp).
//
// Readers and writers move bytes between the medium and the caller's memory with as few
// copies as the medium allows: none for files; an object store gathers writes into upload
// parts and may read ahead into blocks. Every error is a cairn::Error whose file is
// describe(key), the path or URL a user can look at.
//
// Commit mechanics belong to the store, because they are what differs most between media: a
// filesystem stages a directory beside the final path and renames it; an object store, which
// cannot rename, writes the blobs under a generation below the final key and publishes by
// writing, last, the commit marker that names it (readable_checkpoint then leads readers there).
// Every store keeps the same promise (tests/store_conformance.hpp checks it): until publish()
// returns, a reader of the final key sees the previous checkpoint or nothing, never a part.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <utility>
#include <string>
#include <string_view>
#include <vector>

#include "cairn/core/error.hpp"

CAIRN_BEGIN_NAMESPACE

// One destination of a scattered read: the next `n` bytes go to `dst`, or are skipped when
// `dst` is null (the padding between small leaves).
struct ReadPiece {
  void* dst = nullptr;
  std::uint64_t n = 0;
};

// The bytes at `from`, the span `pieces` cover one after another, copied into each piece that
// has somewhere to go (a read_scattered from memory).
namespace detail {
inline void copy_to_pieces(const unsigned char* from, const ReadPiece* pieces, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    if (pieces[i].dst && pieces[i].n) std::memcpy(pieces[i].dst, from, static_cast<std::size_t>(pieces[i].n));
    from += pieces[i].n;
  }
}
}  // namespace detail

// One source of a gathered write: the next `n` bytes come from `src`.
struct WritePiece {
  const void* src = nullptr;
  std::uint64_t n = 0;
};

// Reads one blob: exact byte ranges into caller memory.
// Reads may come from several threads at once (a large chunk already in memory is read by two
// threads, checkpoint/box_reader.hpp, and so are runs of small leaves; large leaves are read
// on as many threads as there are cores, read_scheduler.hpp), so read_at and read_scattered
// must be safe to call concurrently, as pread and preadv are.
class StoreReader {
 public:
  virtual ~StoreReader() = default;
  virtual std::uint64_t size() const = 0;
  // About how many of these bytes can be read without waiting for the medium (a file's pages
  // already in the page cache, a blob in memory; an estimate is enough): the loader reads a
  // large chunk that is mostly there with two threads, since the copy and the checksum, not
  // the disk, bound it. 0 is always safe.
  virtual std::uint64_t cached_bytes(std::uint64_t offset, std::uint64_t n) const {
    (void)offset;
    (void)n;
    return 0;
  }
  // Whether a read of this blob opens a file of its own (Orbax's layout of a file per chunk):
  // the loader reads many such small blobs side by side on one thread per core, since opening
  // a file is work the kernel does on the calling thread. Small blobs served from memory (an
  // OCDBT database's) answer false: their reads are a copy, which the threads' handoff costs
  // more than. false (the default) is always safe.
  virtual bool opens_file_to_read() const { return false; }
  // Exactly n bytes at `offset`, or throws: a blob shorter than that is corrupt (truncated).
  virtual void read_at(void* dst, std::uint64_t n, std::uint64_t offset) const = 0;
  // Consecutive ranges from `offset` on, each into its own buffer, as one request: how many
  // small leaves are read into their targets. The default reads the whole span with one
  // read_at into a temporary buffer and copies the pieces out; a store with a vectored read
  // (PosixStore: preadv) reads straight into the pieces. Skipped pieces should be small.
  virtual void read_scattered(const ReadPiece* pieces, std::size_t count, std::uint64_t offset) const {
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < count; ++i) total += pieces[i].n;
    // Not zeroed first: read_at writes every byte of it.
    const auto span = std::make_unique_for_overwrite<unsigned char[]>(static_cast<std::size_t>(total));
    read_at(span.get(), total, offset);
    detail::copy_to_pieces(span.get(), pieces, count);
  }
};

// Writes one new blob from caller memory, in any order of ranges.
class StoreWriter {
 public:
  virtual ~StoreWriter() = default;  // destroyed unfinished: the blob is abandoned, never published
  virtual void write_at(const void* src, std::uint64_t n, std::uint64_t offset) = 0;
  // Consecutive ranges from `offset` on, each from its own buffer, as one request: how many
  // small values are written from where they lie (store/gathered_writer.hpp). The default
  // writes each with write_at; a store with a vectored write (PosixStore: pwritev) writes them
  // with one call, and no copy gathers them first.
  virtual void write_gathered(const WritePiece* pieces, std::size_t count, std::uint64_t offset) {
    for (std::size_t i = 0; i < count; ++i) {
      write_at(pieces[i].src, pieces[i].n, offset);
      offset += pieces[i].n;
    }
  }
  // Whether every write is copied into buffers of the writer's own before it goes anywhere (an
  // object store's upload parts): a caller then writes small pieces as they come, where for a
  // file it gathers them into one buffer first, one system call for many (DataFileWriter).
  virtual bool copies_writes() const { return false; }
  // Sets the blob's final size and makes it durable (fsync and close for a file). A save
  // fails when this fails: on NFS this is where delayed write errors surface.
  virtual void finish(std::uint64_t size) = 0;
};

// A read-ahead in progress (Store::read_ahead): destroying it stops it and waits for it.
class StoreReadAhead {
 public:
  virtual ~StoreReadAhead() = default;
};

// One entry of a listing: a blob, or a prefix that holds blobs (a directory).
struct StoreEntry {
  std::string name;
  bool is_prefix = false;
  friend bool operator==(const StoreEntry&, const StoreEntry&) = default;
};

// A checkpoint being written where no reader looks (a staging directory beside the final
// path). Any rank may create blobs under key(). Destroyed without publishing, it removes
// what was written.
class CheckpointStaging {
 public:
  virtual ~CheckpointStaging() = default;
  // Where the blobs of the checkpoint are created until it is published.
  virtual const std::string& key() const = 0;
  // Checks that every blob in `expected` is staged with that size (nothing is published
  // that lacks a file), then makes the checkpoint appear at its final key at once, replacing
  // the previous one where the save allows it. Errors raised after the checkpoint became
  // visible are ErrorKind::after_commit.
  virtual void publish(const std::map<std::string, std::uint64_t>& expected) = 0;
  // A store whose looks at the key wait on a network (S3Store) may return from stage() before
  // they are answered: the save writes meanwhile, and its writes into the staging and the
  // publish wait for them. This waits for them too, and throws their refusal (already_exists,
  // an io error): a save asks before it reports an error of its own, so that a refusal of the
  // key comes first, as where stage() made the looks. The default: nothing (stage() did).
  virtual void checked() {}
  // A look the caller makes at the key alongside the store's own (a save: the key is not
  // inside a checkpoint), with the same standing: run while the save writes where the store
  // defers its own, its error first; the default runs it at once.
  virtual void check_also(std::function<void()> look) { look(); }
};

class Store {
 public:
  // Defined in cairn's runtime (below): with CAIRN_SEPARATE_COMPILATION it is the class's key
  // function, so the virtual table and the default members below are compiled there once, and
  // g++ has no reason to compile a store's members into a file that only calls them (at -O2 it
  // devirtualizes the calls of these defaults into the one store class it sees, cairn/s3.hpp's).
  CAIRN_API virtual ~Store();

  // The name of a key a user can look at (a path, a URL); errors name blobs with it.
  virtual std::string describe(const std::string& key) const = 0;

  // Blobs. open() throws not_found where nothing is; create() fails where a blob exists.
  virtual std::unique_ptr<StoreReader> open(const std::string& key) const = 0;
  virtual std::unique_ptr<StoreWriter> create(const std::string& key) = 0;
  // Several small new blobs, each written as create, write_at and finish write it: the
  // default writes them one after another in the order given (a checkpoint's commit marker,
  // given last, is written last); a store whose every request waits on a network (S3Store)
  // sends them at once, where nothing reads them before the whole is published. Every write
  // has ended when it returns or throws; it throws the first error in the order given.
  virtual void write_whole_each(const std::vector<std::pair<std::string, std::string_view>>& blobs) {
    for (const auto& [key, content] : blobs) {
      auto w = create(key);
      w->write_at(content.data(), content.size(), 0);
      w->finish(content.size());
    }
  }
  // How many small requests a caller gains from having in flight at once: 1 where each is a
  // local call (a filesystem, memory: the default), more where each waits on a network round
  // trip (S3Store: its concurrency). A Checkpointer looks at its steps this many at a time.
  virtual int parallel_reads() const { return 1; }
  // Whether each reader open() returns holds a file of the operating system open until it is
  // destroyed (a filesystem: the default). A load then keeps at most a quarter of the
  // process's open-file limit of them at once (checkpoint/data_files.hpp), so that a
  // checkpoint of more files than the limit loads. Memory, an object store and a view whose
  // readers open their files only while they read answer false, and their readers are used
  // as they are.
  virtual bool readers_hold_files() const { return true; }
  // A blob, or a prefix holding anything.
  virtual bool exists(const std::string& key) const = 0;
  // A blob (a regular file), as opposed to a prefix.
  virtual bool is_blob(const std::string& key) const = 0;
  // One level under a prefix, in no particular order; empty where nothing is.
  virtual std::vector<StoreEntry> list(const std::string& prefix) const = 0;
  // The blob at `key` and everything under it, if anything is there.
  virtual void remove(const std::string& key) = 0;
  // A whole small blob (a metadata file), refused above `limit` bytes before more than that
  // is held; not_found where nothing is. The default opens it, asks its size and reads it; an
  // object store reads it with one request (where opening asks for the size first).
  virtual std::string read_whole(const std::string& key, std::uint64_t limit) const;
  // Several small blobs, each read as read_whole(key, limit) reads it: per blob its bytes or
  // the error reading it threw, in the order asked, so that a caller meets the errors in the
  // order it would have reading them one by one. The default reads them one after another,
  // in that order (on a filesystem a later one is read after an earlier one, as before); a
  // store whose every request waits on a network (S3Store) sends them at once, so a load's
  // commit marker, _METADATA and _USER_METADATA cost one round trip, not three.
  struct WholeBlob {
    std::string bytes;
    std::exception_ptr error;  // set: reading it threw this
    // The bytes, or what reading them threw.
    std::string take() {
      if (error) std::rethrow_exception(error);
      return std::move(bytes);
    }
  };
  virtual std::vector<WholeBlob> read_whole_each(const std::vector<std::pair<std::string, std::uint64_t>>& reads) const {
    std::vector<WholeBlob> out(reads.size());
    for (std::size_t i = 0; i < reads.size(); ++i) {
      try {
        out[i].bytes = read_whole(reads[i].first, reads[i].second);
      } catch (...) {
        out[i].error = std::current_exception();
      }
    }
    return out;
  }

  // A hint that a load is about to read the blobs at `keys`, each from its start: starts
  // bringing up to `bytes` of them in all, in that order, closer to memory in the background
  // (a file's pages into the page cache), so that the reads that follow wait less. A load
  // asks for it just before it parses the checkpoint's metadata (checkpoint/read_ahead.hpp).
  // Returns a handle whose destruction stops the work and waits for it, or null where there
  // is nothing to do: the default (a store in memory has nothing to fetch), or blobs that
  // are in memory already. It changes nothing a reader sees and never fails: a missing blob,
  // or anything else wrong, ends it quietly. The reads it serves are checked as always.
  virtual std::unique_ptr<StoreReadAhead> read_ahead(const std::vector<std::string>& keys, std::uint64_t bytes) const {
    (void)keys;
    (void)bytes;
    return nullptr;
  }

  // The key a blob that a user named is read from, with a symbolic link at `key` followed
  // where the medium has links (the Hugging Face cache links snapshots/<rev>/model.safetensors
  // to ../../blobs/<sha256>). open() itself never follows one: a link inside a checkpoint
  // could lead anywhere, so only the importers of files a user names (safetensors files, and
  // the shards an index names) ask for this. The default: `key`.
  virtual std::string follow_link(const std::string& key) const { return key; }

  // Makes `to` (nothing there yet) a second name of the blob `from` of the store `from_store`,
  // sharing its bytes (a hard link), durable when this returns: true where the medium can (the
  // POSIX store, both paths on one filesystem); false where it cannot, having done nothing, and
  // the caller copies instead. What an export that references a checkpoint's data files rather
  // than copying them (link_as_orbax) stands on. The default: false.
  virtual bool share_blob(const Store& from_store, const std::string& from, const std::string& to) {
    (void)from_store;
    (void)from;
    (void)to;
    return false;
  }

  // Writes a copy of the blob `from` of the store `from_store` at `to` (nothing there yet)
  // without its bytes passing through this process (an object store's server-side copy),
  // durable when this returns: true where the medium can; false where it cannot, having done
  // nothing, and the caller copies the bytes itself. For exports that would otherwise read
  // and write every byte of a data file where share_blob cannot link it (link_as_orbax on an
  // object store). The default: false.
  virtual bool copy_blob(const Store& from_store, const std::string& from, const std::string& to) {
    (void)from_store;
    (void)from;
    (void)to;
    return false;
  }

  // Commit mechanics (see the top of this file).
  // Checks the overwrite rule for `key` (nothing there, an empty prefix, or a committed
  // checkpoint or a safetensors set with `overwrite`; anything else is already_exists), removes the leftovers of
  // earlier saves of `key` that died, and claims a staging place.
  virtual std::unique_ptr<CheckpointStaging> stage(const std::string& key, bool overwrite) = 0;
  // Staging for a checkpoint of another system's format (an Orbax export), whose readers open
  // its blobs by their own names under `key` and know nothing of this store's commit: once
  // published, every blob is at key/<name> as written. Never replaces anything. The default:
  // stage(key, false), whose publish leaves exactly that on a filesystem (its staging
  // directory renamed). An object store, which has no rename and commits its own checkpoints
  // by a marker naming a generation, writes them in place instead, and the format's own last
  // file is the commit (Orbax's commit_success.txt, as Orbax commits on GCS).
  virtual std::unique_ptr<CheckpointStaging> stage_foreign(const std::string& key) { return stage(key, false); }
  // The key to read the checkpoint at `key` from: `key` itself, or where an interrupted
  // overwrite left the previous checkpoint. Throws (incomplete) for a staging key.
  virtual std::string readable_checkpoint(const std::string& key) const { return key; }
  // The same, for a caller about to read the checkpoint's data as well as its metadata (a
  // load, a verify): a store may bring more of it at once (S3Store reads a small checkpoint
  // written inline in its commit marker whole, with the marker). The default:
  // readable_checkpoint.
  virtual std::string readable_checkpoint_to_load(const std::string& key) const { return readable_checkpoint(key); }
  // Names the store gives its own staging, claims and set-aside data: never a checkpoint or
  // a step, whatever they hold.
  virtual bool is_internal_name(const std::string& name) const { (void)name; return false; }
  // Removes the leftovers of dead saves and deletions directly under `prefix` (a Checkpointer
  // root) and puts back checkpoints that an interrupted overwrite set aside. Best effort.
  virtual void clean_leftovers(const std::string& prefix) { (void)prefix; }
  // Deletes checkpoints so that none is ever seen half-deleted: each first stops being a
  // checkpoint (renamed away, or its commit marker removed first), then goes.
  virtual void remove_checkpoints(const std::vector<std::string>& keys) = 0;
  // Replaces a small blob at once (the Checkpointer's `latest` marker).
  virtual void write_atomically(const std::string& key, const std::string& content) = 0;
  // A new blob that appears at `key` only when the writer's finish() returns, whole and
  // durable (a file: written beside it under a claimed temporary name, synced, renamed, the
  // directory synced); a writer destroyed unfinished leaves nothing at `key`. A blob already
  // there is replaced only with `overwrite` (already_exists otherwise, checked again at
  // finish); a prefix (a directory) there is never replaced. How single-file exports
  // (safetensors) commit.
  virtual std::unique_ptr<StoreWriter> create_atomically(const std::string& key, bool overwrite) = 0;
};

inline std::string Store::read_whole(const std::string& key, std::uint64_t limit) const {
  auto r = open(key);
  const std::uint64_t size = r->size();
  if (size > limit)
    throw Error(ErrorKind::corrupt, "file is " + std::to_string(size) + " bytes, over the limit of " + std::to_string(limit),
                describe(key));
  std::string s(static_cast<std::size_t>(size), '\0');
  r->read_at(s.data(), size, 0);
  return s;
}

namespace detail {

// The blob whose presence makes the blobs under a key a committed checkpoint. Stores need its
// name for the overwrite rule; what it holds is the format's business (format/files.hpp).
inline constexpr const char* commit_marker_name = "_CHECKPOINT";

// The index of a sharded safetensors set (model.safetensors.index.json). A prefix holding it
// is a set, which cairn publishes whole as it publishes a checkpoint (and which Hugging Face's
// writers finish with the index): overwrite replaces a set as it replaces a committed
// checkpoint, and nothing else that is not empty (docs/safetensors.md, "Sharded sets").
inline constexpr const char* set_index_name = "model.safetensors.index.json";

// An error raised after the new checkpoint was already published: it is at its key and
// loads, but a step after the publish failed (the parent directory's fsync, so durability
// across a power loss is unknown; the `latest` marker; retention).
inline Error after_commit_error(const Error& e, const std::string& what) {
  return Error(ErrorKind::after_commit, "the checkpoint is committed and loads, but " + what + " failed afterwards: " +
               e.message(), e.file(), e.key_path());
}

inline std::string join_key(const std::string& prefix, const std::string& name) {
  if (prefix.empty()) return name;
  if (name.empty()) return prefix;
  // One allocation (prefix + "/" + name made two): a load joins a key per chunk.
  std::string key;
  key.reserve(prefix.size() + 1 + name.size());
  key.append(prefix).append(1, '/').append(name);
  return key;
}

// Whether a key read from untrusted data (a checkpoint's own metadata naming one of its
// files) stays below the key it is joined to: relative, and no segment empty, "." or "..",
// and no NUL (which a file system would cut the name at). A POSIX store resolves ".." on
// disk, so such a name could read any file the process can.
inline bool stays_below(std::string_view rel) {
  if (rel.empty() || rel.find('\0') != std::string_view::npos) return false;
  for (std::size_t at = 0; at <= rel.size();) {
    const std::size_t slash = std::min(rel.find('/', at), rel.size());
    const std::string_view seg = rel.substr(at, slash - at);
    if (seg.empty() || seg == "." || seg == "..") return false;
    at = slash + 1;
  }
  return true;
}

// A key without trailing separators, so "ckpt/100/" and "ckpt/100" name one checkpoint.
inline std::string normalize_key(std::string k) {
  while (k.size() > 1 && k.back() == '/') k.pop_back();
  return k;
}

// Everything before the last segment of a key ("" for a key without '/').
inline std::string key_parent(const std::string& key) {
  const auto slash = key.rfind('/');
  if (slash == std::string::npos) return {};
  return slash == 0 ? std::string("/") : key.substr(0, slash);
}

// A whole small blob, refused above `limit` bytes before anything is allocated
// (Store::read_whole).
inline std::string read_blob(const Store& store, const std::string& key, std::uint64_t limit) {
  return store.read_whole(key, limit);
}

// The same, or nullopt where nothing is there: one request on an object store, where asking
// whether it is there and then reading it were two.
inline std::optional<std::string> read_blob_if_there(const Store& store, const std::string& key, std::uint64_t limit) {
  try {
    return store.read_whole(key, limit);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::not_found) return std::nullopt;
    throw;
  }
}


inline void write_blob(Store& store, const std::string& key, const std::string& content) {
  auto w = store.create(key);
  w->write_at(content.data(), content.size(), 0);
  w->finish(content.size());
}

// A text in parts, written one after another (write_blob_parts): a file of megabytes joined
// from the parts only as it is written, never into one string first.
struct TextParts {
  std::vector<std::string_view> parts;
  TextParts(const std::string& s) : parts{s} {}  // NOLINT: a whole text is one part
  TextParts(std::vector<std::string_view> p) : parts(std::move(p)) {}  // NOLINT
  std::uint64_t size() const {
    std::uint64_t n = 0;
    for (std::string_view p : parts) n += p.size();
    return n;
  }
};
// Writes a new blob of the parts with one gathered write (StoreWriter::write_gathered);
// returns its size.
inline std::uint64_t write_blob_parts(Store& store, const std::string& key, const TextParts& text) {
  std::vector<WritePiece> pieces;
  for (std::string_view p : text.parts)
    if (!p.empty()) pieces.push_back({p.data(), p.size()});
  auto w = store.create(key);
  w->write_gathered(pieces.data(), pieces.size(), 0);
  const std::uint64_t n = text.size();
  w->finish(n);
  return n;
}

}  // namespace detail
CAIRN_END_NAMESPACE

#if CAIRN_DEFINES_RUNTIME
#include "cairn/store/store_impl.hpp"
#endif
