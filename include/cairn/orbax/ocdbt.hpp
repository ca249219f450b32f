// SPDX-License-Identifier: Apache-2.0
// Reading an OCDBT database (TensorStore's "optionally-cooperative distributed B+tree", the
// key-value store under Orbax checkpoints; specified in TensorStore's
// kvstore/ocdbt/index.rst): the manifest, the latest version's B+tree, and its values, inline
// or in data files reached through base paths (Orbax grafts each process's database,
// ocdbt.process_<i>/, into the root tree this way).
//
// Everything read is untrusted: every node's magic, length and CRC32C are checked before its
// body is looked at, a zstd body is decoded within the database's own node-size limit (and
// never past 64 MiB), B+tree heights must fall by one at each level (so no reference can form
// a cycle), the tree's keys and bytes are capped, and a data file path that would leave the
// database ("..", an absolute path) is refused. Errors are ErrorKind::corrupt naming the file.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <unordered_map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cairn/checkpoint/data_files.hpp"
#include "cairn/io/crc32c.hpp"
#include "cairn/orbax/zstd.hpp"
#include "cairn/store/store.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail::orbax {

inline constexpr std::uint32_t ocdbt_manifest_magic = 0x0cdb3a2a;
inline constexpr std::uint32_t ocdbt_version_node_magic = 0x0cdb1234;
inline constexpr std::uint32_t ocdbt_btree_node_magic = 0x0cdb20de;
// Bounds against hostile databases (TensorStore's own: a node's arity is at most 2^20, a key
// or a path at most 65535 bytes).
inline constexpr std::uint64_t ocdbt_max_node_bytes = 64ull << 20;     // an encoded or decoded node
inline constexpr std::uint64_t ocdbt_max_manifest_bytes = 64ull << 20;
inline constexpr std::uint64_t ocdbt_max_arity = 1u << 20;
inline constexpr std::uint64_t ocdbt_max_keys = 10'000'000;            // in the whole tree
inline constexpr std::uint64_t ocdbt_max_nodes = 1'000'000;            // B+tree nodes read for one tree
inline constexpr std::uint64_t ocdbt_max_tree_bytes = 4ull << 30;      // node bytes read for one tree
inline constexpr std::size_t ocdbt_max_path = 65535;
// Keys and paths share prefixes, so a few bytes can spell a long one: what they spell out is
// capped too (per node or table, and per tree), or a small node could ask for gigabytes.
inline constexpr std::uint64_t ocdbt_max_spelled_bytes = 64ull << 20;
inline constexpr std::uint64_t ocdbt_max_tree_key_bytes = 1ull << 30;

// Little-endian and varint reads over a byte range, each throwing corrupt at its end.
class OcdbtCursor {
 public:
  OcdbtCursor(std::string_view bytes, const std::string& file, std::string what)
      : p_(reinterpret_cast<const unsigned char*>(bytes.data())), end_(p_ + bytes.size()), file_(file), what_(std::move(what)) {}
  [[noreturn]] void fail(const std::string& why) const {
    throw Error(ErrorKind::corrupt, "OCDBT " + what_ + ": " + why, file_);
  }
  std::size_t left() const { return static_cast<std::size_t>(end_ - p_); }
  bool done() const { return p_ == end_; }
  std::uint8_t byte() {
    if (p_ == end_) fail("ends early");
    return *p_++;
  }
  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      const std::uint8_t b = byte();
      if (shift == 63 && b > 1) fail("a varint overflows 64 bits");
      v |= std::uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("a varint is longer than 10 bytes");
  }
  // A varint that counts something of at most `max`.
  std::uint64_t count(std::uint64_t max, const char* what) {
    const std::uint64_t v = varint();
    if (v > max) fail(std::string(what) + " " + std::to_string(v) + " is over the limit of " + std::to_string(max));
    return v;
  }
  std::uint64_t le(int n) {
    if (left() < std::size_t(n)) fail("ends early");
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= std::uint64_t(p_[i]) << (8 * i);
    p_ += n;
    return v;
  }
  std::string_view bytes(std::uint64_t n) {
    if (n > left()) fail("ends early (" + std::to_string(n) + " bytes wanted, " + std::to_string(left()) + " left)");
    std::string_view s(reinterpret_cast<const char*>(p_), static_cast<std::size_t>(n));
    p_ += n;
    return s;
  }

 private:
  const unsigned char* p_;
  const unsigned char* end_;
  const std::string& file_;
  std::string what_;
};

// The body of an encoded manifest or node: magic (big-endian), whole length, format version,
// compression, body, CRC32C of everything before it (little-endian). `limit` caps the
// decoded body.
inline std::string ocdbt_decode_frame(std::string_view encoded, std::uint32_t magic, std::uint64_t limit,
                                      const std::string& file, const char* what) {
  OcdbtCursor c(encoded, file, what);
  if (encoded.size() < 16) c.fail("is " + std::to_string(encoded.size()) + " bytes, shorter than any encoding");
  const auto* u = reinterpret_cast<const unsigned char*>(encoded.data());
  const std::uint32_t got = (std::uint32_t(u[0]) << 24) | (std::uint32_t(u[1]) << 16) | (std::uint32_t(u[2]) << 8) | u[3];
  if (got != magic) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "starts with 0x%08x, not the magic number 0x%08x", got, magic);
    c.fail(buf);
  }
  c.bytes(4);
  const std::uint64_t length = c.le(8);
  if (length != encoded.size())
    c.fail("says it is " + std::to_string(length) + " bytes long but " + std::to_string(encoded.size()) + " were read");
  const std::uint32_t stored = static_cast<std::uint32_t>(
      u[encoded.size() - 4] | (std::uint32_t(u[encoded.size() - 3]) << 8) | (std::uint32_t(u[encoded.size() - 2]) << 16) |
      (std::uint32_t(u[encoded.size() - 1]) << 24));
  const std::uint32_t actual = crc32c(encoded.data(), encoded.size() - 4);
  if (stored != actual)
    c.fail("checksum mismatch (CRC32C " + std::to_string(actual) + ", stored " + std::to_string(stored) + ")");
  OcdbtCursor body(encoded.substr(0, encoded.size() - 4), file, what);
  body.bytes(12);
  const std::uint64_t version = body.varint();
  if (version != 0) body.fail("has format version " + std::to_string(version) + "; this reader knows version 0");
  const std::uint64_t compression = body.varint();
  const std::string_view rest = body.bytes(body.left());
  if (compression == 0) {
    if (rest.size() > limit) body.fail("body is over the limit of " + std::to_string(limit) + " bytes");
    return std::string(rest);
  }
  if (compression == 1) return zstd_decompress(rest.data(), rest.size(), limit, file, "", std::string("OCDBT ") + what + " (zstd)");
  body.fail("has compression " + std::to_string(compression) + " (0 none and 1 zstd are defined)");
}

// A data file of the database, as a path relative to its root.
struct OcdbtFile {
  std::string path;       // transitive base path + base path + relative path
  std::string transitive; // what the nodes read from this file prefix their own paths with
};

// A data file table (the manifest's or a node's). `transitive`: the parent's transitive path.
inline std::vector<OcdbtFile> ocdbt_read_file_table(OcdbtCursor& c, const std::string& transitive) {
  const std::uint64_t n = c.count(ocdbt_max_arity, "number of data files");
  std::vector<std::uint64_t> prefix(n, 0), suffix(n), base(n);
  for (std::uint64_t i = 1; i < n; ++i) prefix[i] = c.count(ocdbt_max_path, "path prefix length");
  for (std::uint64_t i = 0; i < n; ++i) suffix[i] = c.count(ocdbt_max_path, "path suffix length");
  for (std::uint64_t i = 0; i < n; ++i) base[i] = c.count(ocdbt_max_path, "base path length");
  std::vector<OcdbtFile> files(n);
  std::string prev;
  std::uint64_t spelled = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    if (prefix[i] > prev.size()) c.fail("a data file path shares more bytes with the previous one than it has");
    spelled += 2 * (transitive.size() + prefix[i] + suffix[i]);
    if (spelled > ocdbt_max_spelled_bytes) c.fail("data file paths spell out more than 64 MiB");
    std::string path = prev.substr(0, prefix[i]);
    path += c.bytes(suffix[i]);
    if (path.size() + transitive.size() > ocdbt_max_path) c.fail("a data file path is over 65535 bytes");
    if (base[i] > path.size()) c.fail("a base path is longer than its data file path");
    files[i].path = transitive + path;
    files[i].transitive = transitive + path.substr(0, base[i]);
    // Paths are relative to the database; none may leave it.
    const std::string& p = files[i].path;
    if (!stays_below(p)) c.fail("data file path '" + p + "' is empty or absolute, leaves the database or has an empty segment");
    prev = std::move(path);
  }
  return files;
}

// A data file that values point into: its path relative to the database, and its reader once
// opened. One per distinct path, shared by every value in it (a checkpoint of 10,000 small
// arrays has 20,000 values in one file: a copy of the path in each was a tenth of a load's
// allocations, and finding its reader by path a string comparison per read).
struct OcdbtDataFile {
  std::string path;
};

// A value of the database: inline bytes, or a byte range of a data file.
struct OcdbtValue {
  bool is_inline = true;
  std::string bytes;                     // inline
  const OcdbtDataFile* file = nullptr;   // indirect: the data file (the database owns it)
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint64_t size() const { return is_inline ? bytes.size() : length; }
};

// A reference to a node: where its encoding is.
struct OcdbtRef {
  const OcdbtFile* file = nullptr;
  std::uint64_t offset = 0, length = 0;
};

// The latest version of the database at `key` of `store`, read whole into a sorted map (an
// Orbax checkpoint has a key per array and chunk: tens of thousands at most).
class OcdbtDatabase {
 public:
  OcdbtDatabase(const Store& store, std::string key) : store_(store), key_(normalize_key(std::move(key))) {
    read_manifest();
    build_index();
    find_small_runs();
  }
  // Every key and its value, in key order (the B+tree's); the keys view the database's memory.
  const std::deque<std::pair<std::string_view, OcdbtValue>>& entries() const { return entries_; }
  const OcdbtValue* find(std::string_view key) const {
    if (slots_.empty()) return nullptr;
    for (std::size_t at = std::hash<std::string_view>{}(key) & (slots_.size() - 1);; at = (at + 1) & (slots_.size() - 1)) {
      const std::uint32_t slot = slots_[at];
      if (!slot) return nullptr;
      if (entries_[slot - 1].first == key) return &entries_[slot - 1].second;
    }
  }
  // Where errors point: the database directory, and a data file of it.
  std::string describe() const { return store_.describe(key_); }
  std::string describe_file(const std::string& path) const { return store_.describe(join_key(key_, path)); }

  // n bytes at `offset` of a value into dst.
  void read(const OcdbtValue& v, void* dst, std::uint64_t n, std::uint64_t offset, const std::string& key) const {
    if (offset > v.size() || n > v.size() - offset)
      throw Error(ErrorKind::corrupt, "read past the end of the value", describe(), key);
    if (v.is_inline) {
      if (n) std::memcpy(dst, v.bytes.data() + offset, static_cast<std::size_t>(n));
      return;
    }
    if (v.length <= small_value_bytes && read_from_run(*v.file, dst, n, v.offset + offset)) return;
    value_reader(*v.file).read_at(dst, n, v.offset + offset);
  }
  // Whether a value lies in a run of small values (read whole once, find_small_runs): reading
  // a few of its bytes costs a copy, not a request.
  bool in_small_run(const OcdbtValue& v) const {
    return !v.is_inline && v.length <= small_value_bytes && run_of(*v.file, v.length, v.offset) != nullptr;
  }
  // Reads every run of small values now, where all of them fit in held_run_bytes: values are
  // then read from them without a lock, and on any thread (PytreeReader::read makes a load's
  // records of many small arrays on two). False, and nothing changed but runs read, where they
  // do not fit, or a data file cannot be read (its values then fail where they are read, naming
  // their keys, as before).
  bool hold_small_runs() const {
    std::lock_guard<std::mutex> lock(run_mutex_);
    if (all_runs_held_.load(std::memory_order_relaxed)) return true;
    std::uint64_t total = 0;
    for (const auto& [file, runs] : small_runs_)
      for (const SmallRun& run : runs)
        if (run.values >= 2) total += run.end - run.begin;  // (a value alone is read as it was: run_of)
    if (total > held_run_bytes) return false;
    try {
      for (const auto& [file, runs] : small_runs_) {
        const StoreReader& reader = value_reader(*file);
        for (const SmallRun& run : runs) {
          const std::pair<const OcdbtDataFile*, std::uint64_t> id{file, run.begin};
          if (held_runs_.count(id) == 0 && run.values >= 2) hold_run(reader, id, run);
        }
      }
    } catch (const Error&) {
      return false;
    }
    all_runs_held_.store(true, std::memory_order_release);
    return true;
  }
  // A value's bytes where they stay in memory as long as the database: inline, or in a run of
  // small values once every run is held (hold_small_runs); nullopt otherwise (read() it). A
  // load's records look at each array's zarr.json this way: copying 10,000 of them out of the
  // held runs, a string each, was a tenth of making the records (docs/benchmarks.md).
  std::optional<std::string_view> held(const OcdbtValue& v) const {
    if (v.is_inline) return std::string_view(v.bytes);
    return v.length > small_value_bytes ? std::nullopt : held(*v.file, v.offset, v.length);
  }
  // The same for n bytes at `at` of a data file.
  std::optional<std::string_view> held(const OcdbtDataFile& file, std::uint64_t at, std::uint64_t n) const {
    if (!all_runs_held_.load(std::memory_order_acquire) || at + n < at) return std::nullopt;
    const SmallRun* run = run_of(file, n, at);
    if (!run) return std::nullopt;
    auto it = held_runs_.find({&file, run->begin});
    if (it == held_runs_.end() || at + n > run->begin + it->second.size) return std::nullopt;
    return std::string_view(it->second.data.get() + (at - run->begin), static_cast<std::size_t>(n));
  }
  // Pieces of `file` from `at` on (a null dst skips its bytes) copied out of the held runs of
  // small values, where every piece lies in one (hold_small_runs); false, and nothing read,
  // where one does not (the caller reads the file). A load's small chunks in a database's
  // data file are read so: read again from the file, the whole span between them (each
  // array's zarr.json) was copied by the kernel a second time.
  bool read_held(const OcdbtDataFile& file, const ReadPiece* pieces, std::size_t count, std::uint64_t at) const {
    if (!all_runs_held_.load(std::memory_order_acquire)) return false;
    std::vector<const char*> from(count, nullptr);  // each piece's bytes, all found before any is copied
    for (std::size_t i = 0; i < count; at += pieces[i].n, ++i) {
      if (!pieces[i].dst || !pieces[i].n) continue;
      const std::optional<std::string_view> bytes = held(file, at, pieces[i].n);
      if (!bytes) return false;
      from[i] = bytes->data();
    }
    for (std::size_t i = 0; i < count; ++i)
      if (from[i]) std::memcpy(pieces[i].dst, from[i], static_cast<std::size_t>(pieces[i].n));
    return true;
  }
  // How many of a value's n bytes from `offset` are in memory already (StoreReader::cached_bytes).
  std::uint64_t cached_bytes(const OcdbtValue& v, std::uint64_t offset, std::uint64_t n) const {
    return v.is_inline ? n : value_reader(*v.file).cached_bytes(v.offset + offset, n);
  }
  std::string read(const OcdbtValue& v, const std::string& key) const {
    std::string s(static_cast<std::size_t>(v.size()), '\0');
    read(v, s.data(), s.size(), 0, key);
    return s;
  }
  // Small indirect values lying close together in a data file (at most 4 KiB apart) form runs
  // of at most 1 MiB, and a value of a run is served from the run, read whole once: a
  // checkpoint of 10,000 small arrays keeps 20,000 small values (each array's zarr.json and
  // its chunk) back to back, and a read of each was a fifth of its load. A value alone (the
  // zarr.json between two large chunks) is its own run: read as it was. Runs read are kept, up
  // to 64 MiB (held_run_bytes).
  static constexpr std::uint64_t small_value_bytes = 64 << 10, run_gap_bytes = 4 << 10, max_run_bytes = 1 << 20;

  // The reader of a data file values point into: the one its tree nodes are read with (a
  // file holds both; opened twice, it was two HEADs on an object store).
  const StoreReader& value_reader(const OcdbtDataFile& f) const { return reader(f.path); }
  // The reader of a data file (opened once, checked to hold every value that points into it).
  // Through DataFiles, which keeps at most a quarter of the open-file limit open: Orbax
  // writes data files per process (ocdbt.process_<i>/d/...), and a checkpoint of more than
  // about 1,000 processes would otherwise fail to load with "Too many open files".
  const StoreReader& reader(const std::string& path) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return files_.get(path);
  }

 private:
  std::string read_range(const OcdbtRef& ref, const char* what) {
    if (ref.length > ocdbt_max_node_bytes)
      throw Error(ErrorKind::corrupt, std::string("OCDBT ") + what + " is " + std::to_string(ref.length) +
                  " bytes, over the limit", describe_file(ref.file->path));
    tree_bytes_ += ref.length;
    if (tree_bytes_ > ocdbt_max_tree_bytes)
      throw Error(ErrorKind::corrupt, "OCDBT tree is over " + std::to_string(ocdbt_max_tree_bytes) + " bytes of nodes",
                  describe());
    const StoreReader& r = reader(ref.file->path);
    if (ref.offset > r.size() || ref.length > r.size() - ref.offset)
      throw Error(ErrorKind::corrupt, std::string("OCDBT ") + what + " at bytes " + std::to_string(ref.offset) + ".." +
                  std::to_string(ref.offset + ref.length) + " lies past the end of the file (" +
                  std::to_string(r.size()) + " bytes)", describe_file(ref.file->path));
    std::string s(static_cast<std::size_t>(ref.length), '\0');
    r.read_at(s.data(), s.size(), ref.offset);
    return s;
  }

  // A hash index beside the ordered entries: a checkpoint looks up every chunk's key, and a
  // sorted map's comparisons of keys with long common prefixes were a tenth of a load. Open
  // addressing in one array (entry number + 1; 0 is empty), at most half full: a node per key
  // (std::unordered_map) made and freed 20,000 allocations for 10,000 small arrays.
  void build_index() {
    std::size_t size = 16;
    while (size < 2 * entries_.size()) size *= 2;
    slots_.assign(size, 0);
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      const std::string_view key = entries_[i].first;
      std::size_t at = std::hash<std::string_view>{}(key) & (size - 1);
      for (; slots_[at]; at = (at + 1) & (size - 1))
        if (entries_[slots_[at] - 1].first == key)
          throw Error(ErrorKind::corrupt, "OCDBT tree holds the key '" + printable_prefix(key) + "' twice", describe());
      slots_[at] = static_cast<std::uint32_t>(i + 1);
    }
  }

  // Groups the small indirect values of each data file into runs (see small_value_bytes).
  void find_small_runs() {
    std::map<const OcdbtDataFile*, std::vector<std::pair<std::uint64_t, std::uint64_t>>> ranges;
    for (const auto& [k, v] : entries_)
      if (!v.is_inline && v.length > 0 && v.length <= small_value_bytes && v.offset + v.length > v.offset)
        ranges[v.file].emplace_back(v.offset, v.offset + v.length);
    for (auto& [file, r] : ranges) {
      std::sort(r.begin(), r.end());
      std::vector<SmallRun>& runs = small_runs_[file];
      for (const auto& [begin, end] : r) {
        if (!runs.empty() && begin <= runs.back().end + run_gap_bytes && std::max(end, runs.back().end) - runs.back().begin <= max_run_bytes) {
          runs.back().end = std::max(runs.back().end, end);
          ++runs.back().values;
        } else {
          runs.push_back({begin, end, 1});
        }
      }
    }
  }
  // The run of several values holding [at, at + n) of `file`, or null.
  struct SmallRun;
  const SmallRun* run_of(const OcdbtDataFile& file, std::uint64_t n, std::uint64_t at) const {
    auto f = small_runs_.find(&file);
    if (f == small_runs_.end()) return nullptr;
    const std::vector<SmallRun>& runs = f->second;
    auto it = std::upper_bound(runs.begin(), runs.end(), at, [](std::uint64_t a, const SmallRun& r) { return a < r.begin; });
    if (it == runs.begin()) return nullptr;
    const SmallRun& run = *--it;
    return run.values < 2 || at + n > run.end ? nullptr : &run;
  }
  // Copies [at, at + n) of `file` from the run holding it, read once; false where no run of
  // several values holds it (the caller reads it itself, and reports what is wrong with it).
  bool read_from_run(const OcdbtDataFile& file, void* dst, std::uint64_t n, std::uint64_t at) const {
    if (all_runs_held_.load(std::memory_order_acquire)) {
      // Every run is in memory and none is added or dropped any more (hold_small_runs): read
      // without the lock, which two threads making a load's records took for every value.
      const std::optional<std::string_view> bytes = held(file, at, n);
      if (bytes && n) std::memcpy(dst, bytes->data(), static_cast<std::size_t>(n));
      return bytes.has_value();
    }
    const SmallRun* found = run_of(file, n, at);
    if (!found) return false;
    const SmallRun& run = *found;
    const std::pair<const OcdbtDataFile*, std::uint64_t> id{&file, run.begin};
    const StoreReader& reader = value_reader(file);
    std::lock_guard<std::mutex> lock(run_mutex_);
    auto held = held_runs_.find(id);
    if (held == held_runs_.end()) {
      held = hold_run(reader, id, run);
      if (held == held_runs_.end()) return false;
    }
    return copy_from(held->second, run, dst, n, at);
  }
  void read_manifest() {
    std::string manifest_key = join_key(key_, "manifest.ocdbt");
    std::string text = read_blob(store_, manifest_key, ocdbt_max_manifest_bytes);
    std::string file = store_.describe(manifest_key);
    std::string body = ocdbt_decode_frame(text, ocdbt_manifest_magic, ocdbt_max_manifest_bytes, file, "manifest");
    OcdbtCursor c(body, file, "manifest");
    c.bytes(16);  // uuid
    const std::uint8_t kind = c.byte();
    if (kind == 1) {
      // Numbered manifests: manifest.ocdbt holds the configuration only; the versions are in
      // manifest.<16 hex digits>, the highest the latest.
      std::string latest;
      for (const auto& e : store_.list(key_))
        if (!e.is_prefix && e.name.size() == 9 + 16 && e.name.rfind("manifest.", 0) == 0 &&
            e.name.find_first_not_of("0123456789abcdef", 9) == std::string::npos && e.name > latest)
          latest = e.name;
      if (latest.empty()) throw Error(ErrorKind::corrupt, "numbered OCDBT manifest, but no manifest.<number> file", file);
      manifest_key = join_key(key_, latest);
      text = read_blob(store_, manifest_key, ocdbt_max_manifest_bytes);
      file = store_.describe(manifest_key);
      body = ocdbt_decode_frame(text, ocdbt_manifest_magic, ocdbt_max_manifest_bytes, file, "manifest");
      OcdbtCursor n(body, file, "manifest");
      n.bytes(16);
      n.byte();
      read_versions(n, file);
      return;
    }
    if (kind != 0) c.fail("has manifest kind " + std::to_string(kind) + " (0 single and 1 numbered are defined)");
    read_versions(c, file);
  }

  // The configuration after the kind, then the version table; the latest version's tree.
  void read_versions(OcdbtCursor& c, const std::string& file) {
    c.varint();  // max_inline_value_bytes
    c.varint();  // max_decoded_node_bytes: a writer's target, which TensorStore's nodes may exceed
    const std::uint8_t arity_log2 = c.byte();
    if (arity_log2 == 0 || arity_log2 > 16) c.fail("has version tree arity 2^" + std::to_string(arity_log2));
    const std::uint64_t compression = c.varint();
    if (compression == 1) c.le(4);  // zstd level
    else if (compression != 0) c.fail("configures compression " + std::to_string(compression));
    manifest_files_ = ocdbt_read_file_table(c, "");
    const std::uint64_t n = c.count(std::uint64_t(1) << arity_log2, "number of inline versions");
    if (n == 0) c.fail("has no version");
    std::vector<std::uint64_t> generation(n), height(n), id(n), offset(n), length(n);
    for (auto& g : generation) g = c.varint();
    for (auto& h : height) h = c.byte();
    for (auto& i : id) i = c.varint();
    for (auto& o : offset) o = c.varint();
    for (auto& l : length) l = c.varint();
    for (std::uint64_t i = 0; i < 3 * n; ++i) c.varint();  // statistics
    for (std::uint64_t i = 0; i < n; ++i) c.le(8);          // commit times
    for (std::uint64_t i = 1; i < n; ++i)
      if (generation[i] <= generation[i - 1]) c.fail("generation numbers do not increase");
    // The rest (references to older versions' nodes) is not needed for the latest version.
    const std::size_t last = static_cast<std::size_t>(n - 1);
    (void)file;
    if (manifest_files_.empty()) return;  // an empty database: its root is "missing", no data file
    if (id[last] >= manifest_files_.size())
      c.fail("latest version's root names data file " + std::to_string(id[last]) + " of " +
             std::to_string(manifest_files_.size()));
    if (offset[last] + length[last] < offset[last]) c.fail("latest version's root has a byte range that overflows");
    read_node({&manifest_files_[id[last]], offset[last], length[last]}, static_cast<int>(height[last]), "");
  }

  // One B+tree node and, below it, its subtree. `prefix`: the key bytes every key below shares.
  // The one OcdbtDataFile of a path.
  const OcdbtDataFile* data_file(const std::string& path) {
    auto it = data_file_of_.find(path);
    if (it != data_file_of_.end()) return it->second;
    data_files_.push_back(OcdbtDataFile{path});
    return data_file_of_.emplace(path, &data_files_.back()).first->second;
  }

  void read_node(const OcdbtRef& ref, int expected_height, const std::string& prefix) {
    // A node may be referenced from several parents (a DAG): the visits are capped, so that a
    // small hostile tree cannot make the reader walk one node exponentially often.
    if (++nodes_read_ > ocdbt_max_nodes)
      throw Error(ErrorKind::corrupt, "OCDBT tree has more than " + std::to_string(ocdbt_max_nodes) + " nodes", describe());
    const std::string encoded = read_range(ref, "B+tree node");
    const std::string file = describe_file(ref.file->path);
    const std::string body = ocdbt_decode_frame(encoded, ocdbt_btree_node_magic, ocdbt_max_node_bytes, file, "B+tree node");
    OcdbtCursor c(body, file, "B+tree node");
    const int height = c.byte();
    if (height != expected_height)
      c.fail("has height " + std::to_string(height) + " where its parent says " + std::to_string(expected_height));
    const std::vector<OcdbtFile> files = ocdbt_read_file_table(c, ref.file->transitive);
    const std::uint64_t n = c.count(ocdbt_max_arity, "number of entries");
    if (n == 0) c.fail("is empty");
    std::vector<std::uint64_t> prefix_len(n, 0), suffix_len(n), subtree(n, 0);
    for (std::uint64_t i = 1; i < n; ++i) prefix_len[i] = c.count(ocdbt_max_path, "key prefix length");
    for (std::uint64_t i = 0; i < n; ++i) suffix_len[i] = c.count(ocdbt_max_path, "key suffix length");
    if (height > 0)
      for (std::uint64_t i = 0; i < n; ++i) subtree[i] = c.count(ocdbt_max_path, "subtree prefix length");
    // The node's keys spelled out back to back in one buffer (a string each was an allocation
    // per key of a small load).
    std::uint64_t spelled = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
      if (i && prefix_len[i] > prefix_len[i - 1] + suffix_len[i - 1]) c.fail("a key shares more bytes with the previous one than it has");
      spelled += prefix_len[i] + suffix_len[i] + prefix.size();
      if (spelled > ocdbt_max_spelled_bytes) c.fail("keys spell out more than 64 MiB");
    }
    std::string spelled_keys;
    spelled_keys.reserve(static_cast<std::size_t>(spelled));
    std::vector<std::size_t> key_at(n + 1, 0);
    for (std::uint64_t i = 0; i < n; ++i) {
      if (i) spelled_keys.append(spelled_keys, key_at[i - 1], static_cast<std::size_t>(prefix_len[i]));
      spelled_keys += c.bytes(suffix_len[i]);
      key_at[i + 1] = spelled_keys.size();
    }
    auto key_of = [&](std::uint64_t i) {
      return std::string_view(spelled_keys).substr(key_at[i], key_at[i + 1] - key_at[i]);
    };
    for (std::uint64_t i = 1; i < n; ++i)
      if (!(key_of(i) > key_of(i - 1))) c.fail("keys are not in increasing order");
    auto file_of = [&](std::uint64_t id) -> const OcdbtFile& {
      if (id >= files.size()) c.fail("names data file " + std::to_string(id) + " of " + std::to_string(files.size()));
      return files[id];
    };
    if (height > 0) {
      std::vector<std::uint64_t> id(n), offset(n), length(n);
      for (auto& v : id) v = c.varint();
      for (auto& v : offset) v = c.varint();
      for (auto& v : length) v = c.varint();
      for (std::uint64_t i = 0; i < 3 * n; ++i) c.varint();  // statistics
      if (!c.done()) c.fail("has bytes after its entries");
      for (std::uint64_t i = 0; i < n; ++i) {
        if (subtree[i] > key_of(i).size()) c.fail("a subtree prefix is longer than its key");
        if (offset[i] + length[i] < offset[i]) c.fail("a child's byte range overflows");
        std::string child_prefix = prefix;
        child_prefix += key_of(i).substr(0, static_cast<std::size_t>(subtree[i]));
        read_node({&file_of(id[i]), offset[i], length[i]}, height - 1, child_prefix);
      }
      return;
    }
    std::vector<std::uint64_t> length(n);
    std::vector<std::uint8_t> kind(n);
    for (auto& v : length) v = c.varint();
    std::uint64_t indirect = 0;
    for (auto& k : kind) {
      k = c.byte();
      if (k > 1) c.fail("has value kind " + std::to_string(k) + " (0 inline, 1 in a data file)");
      indirect += k;
    }
    std::vector<std::uint64_t> id(indirect), offset(indirect);
    for (auto& v : id) v = c.varint();
    for (auto& v : offset) v = c.varint();
    if (entries_.size() + n > ocdbt_max_keys) c.fail("tree has more than " + std::to_string(ocdbt_max_keys) + " keys");
    // The node's full keys (its prefix and each key) back to back in one block the entries'
    // keys view: a string per key was 20,000 allocations, and as many frees, for 10,000 small
    // arrays. Reserved whole first: it never moves.
    std::string& block = key_blocks_.emplace_back();
    block.reserve(static_cast<std::size_t>(spelled));
    std::size_t j = 0;
    // Each of the node's data files found once (a lookup by path per value was a map search
    // for each of 20,000 values of a small load).
    std::vector<const OcdbtDataFile*> value_file(files.size(), nullptr);
    for (std::uint64_t i = 0; i < n; ++i) {
      OcdbtValue v;
      if (kind[i] == 0) {
        v.bytes = std::string(c.bytes(length[i]));
      } else {
        v.is_inline = false;
        const OcdbtFile& f = file_of(id[j]);
        const OcdbtDataFile*& known = value_file[static_cast<std::size_t>(id[j])];
        v.file = known ? known : (known = data_file(f.path));
        v.offset = offset[j];
        v.length = length[i];
        if (v.offset + v.length < v.offset) c.fail("a value's byte range overflows");
        ++j;
      }
      const std::string_view key = key_of(i);
      key_bytes_ += prefix.size() + key.size();
      if (key_bytes_ > ocdbt_max_tree_key_bytes) c.fail("tree's keys spell out more than 1 GiB");
      const std::size_t start = block.size();
      block += prefix;
      block += key;
      entries_.emplace_back(std::string_view(block).substr(start), std::move(v));
    }
    if (!c.done()) c.fail("has bytes after its values");
  }

  const Store& store_;
  std::string key_;
  std::uint64_t tree_bytes_ = 0;
  std::uint64_t nodes_read_ = 0;
  std::uint64_t key_bytes_ = 0;
  std::vector<OcdbtFile> manifest_files_;
  std::deque<std::pair<std::string_view, OcdbtValue>> entries_;  // a deque: values stay where they are
  std::deque<std::string> key_blocks_;  // the keys entries_ view, a block per leaf node (read_node)
  std::vector<std::uint32_t> slots_;                        // build_index: entry number + 1, or 0
  std::deque<OcdbtDataFile> data_files_;  // a deque: values point at its elements
  std::map<std::string, const OcdbtDataFile*, std::less<>> data_file_of_;
  mutable std::mutex mutex_;
  mutable DataFiles files_{store_, key_};  // (after store_ and key_, which it is made from)
  struct SmallRun {
    std::uint64_t begin = 0, end = 0, values = 0;
  };
  std::map<const OcdbtDataFile*, std::vector<SmallRun>> small_runs_;  // by file, sorted by begin
  static constexpr std::uint64_t held_run_bytes = 64 << 20;
  mutable std::mutex run_mutex_;
  struct HeldRun {
    std::unique_ptr<char[]> data;
    std::uint64_t size = 0;
  };
  mutable std::map<std::pair<const OcdbtDataFile*, std::uint64_t>, HeldRun> held_runs_;  // (file, begin) -> bytes
  mutable std::atomic<bool> all_runs_held_{false};  // hold_small_runs: held_runs_ holds every run, and changes no more
  // Reads a run whole and keeps it (run_mutex_ held), the oldest dropped first beyond
  // held_run_bytes; held_runs_.end() for a run past the end of its (damaged) file, whose values
  // the caller reads itself, and refuses.
  std::map<std::pair<const OcdbtDataFile*, std::uint64_t>, HeldRun>::iterator hold_run(
      const StoreReader& reader, const std::pair<const OcdbtDataFile*, std::uint64_t>& id, const SmallRun& run) const {
    const std::uint64_t size = reader.size();
    if (run.begin >= size) return held_runs_.end();
    // Not zero-filled first (the read fills it): clearing a megabyte per run was 2% of a
    // load of 10,000 small arrays.
    const std::uint64_t length = std::min(run.end, size) - run.begin;
    HeldRun bytes{std::make_unique_for_overwrite<char[]>(static_cast<std::size_t>(length)), length};
    reader.read_at(bytes.data.get(), bytes.size, run.begin);
    // Runs are kept (values are not read in file order: keys sort otherwise), up to
    // held_run_bytes, the oldest dropped first.
    while (held_bytes_ + bytes.size > held_run_bytes && !held_order_.empty()) {
      auto oldest = held_runs_.find(held_order_.front());
      held_bytes_ -= oldest->second.size;
      held_runs_.erase(oldest);
      held_order_.pop_front();
    }
    held_bytes_ += bytes.size;
    held_order_.push_back(id);
    return held_runs_.emplace(id, std::move(bytes)).first;
  }
  static bool copy_from(const HeldRun& held, const SmallRun& run, void* dst, std::uint64_t n, std::uint64_t at) {
    if (at + n > run.begin + held.size) return false;
    if (n) std::memcpy(dst, held.data.get() + (at - run.begin), static_cast<std::size_t>(n));
    return true;
  }

  mutable std::deque<std::pair<const OcdbtDataFile*, std::uint64_t>> held_order_;          // oldest first
  mutable std::uint64_t held_bytes_ = 0;
};

}  // namespace detail::orbax
CAIRN_END_NAMESPACE
