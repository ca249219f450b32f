// SPDX-License-Identifier: Apache-2.0
// Writing an OCDBT database (the format of orbax/ocdbt.hpp, TensorStore's
// kvstore/ocdbt/index.rst): one version, whose B+tree is written in one data file after the
// values too large to keep inline. Values are appended to the data file as they are put (a
// value of gigabytes is never held), and finish() writes the leaf nodes (at most 1,024 entries
// each), an interior node above them where there is more than one, and last the manifest.
// Uncompressed: compression is a later option. A value may also point into another database's
// data file below this one (put_reference): how the root database of a multi-process Orbax
// export reaches the values each process wrote into its own database, as Orbax's merge of its
// per-process databases does, without copying them. What the Orbax export and the benchmarks
// build on; the reader is checked against it and against TensorStore's own files.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "cairn/io/crc32c.hpp"
#include "cairn/orbax/ocdbt.hpp"
#include "cairn/store/gathered_writer.hpp"
#include "cairn/store/store.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail::orbax {

inline void ocdbt_put_varint(std::string& s, std::uint64_t v) {
  char bytes[10];  // (appended at once: a character at a time was a tenth of writing a node)
  std::size_t n = 0;
  while (v >= 0x80) {
    bytes[n++] = static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  bytes[n++] = static_cast<char>(v);
  s.append(bytes, n);
}

// The n low bytes of v, little-endian, at `out` (a fixed-size field in a caller's buffer).
inline void ocdbt_store_le(char* out, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
inline void ocdbt_put_le(std::string& s, std::uint64_t v, int n) {
  char bytes[8];
  ocdbt_store_le(bytes, v, n);
  s.append(bytes, static_cast<std::size_t>(n));
}

// The frame every manifest and node has: magic, length, version 0, no compression, body, CRC32C.
inline std::string ocdbt_frame(std::uint32_t magic, const std::string& body) {
  std::string out;
  for (int i = 3; i >= 0; --i) out += static_cast<char>((magic >> (8 * i)) & 0xff);
  ocdbt_put_le(out, 4 + 8 + 2 + body.size() + 4, 8);
  out += '\0';  // format version
  out += '\0';  // uncompressed
  out += body;
  ocdbt_put_le(out, crc32c(out.data(), out.size()), 4);
  return out;
}

// A data file as a node names it: a base path (another database's directory, relative to this
// one; empty for the database's own files) and the path below it.
struct OcdbtFileName {
  std::string base, relative;
  std::string full() const { return base + relative; }
  friend bool operator<(const OcdbtFileName& a, const OcdbtFileName& b) {
    return a.base != b.base ? a.base < b.base : a.relative < b.relative;
  }
  friend bool operator==(const OcdbtFileName&, const OcdbtFileName&) = default;
};

// A data file table: the count, the prefix each full path shares with the one before it, the
// suffix lengths, the base path lengths, then the suffixes.
inline void ocdbt_put_files(std::string& s, const std::vector<OcdbtFileName>& files) {
  ocdbt_put_varint(s, files.size());
  std::vector<std::size_t> prefix(files.size(), 0);
  for (std::size_t i = 1; i < files.size(); ++i) {
    const std::string a = files[i - 1].full(), b = files[i].full();
    std::size_t p = 0;
    while (p < a.size() && p < b.size() && a[p] == b[p]) ++p;
    // The format's rule: a shared prefix ends within both base paths unless they are equal.
    if (files[i - 1].base != files[i].base) p = std::min({p, files[i - 1].base.size(), files[i].base.size()});
    prefix[i] = p;
    ocdbt_put_varint(s, p);
  }
  for (std::size_t i = 0; i < files.size(); ++i) ocdbt_put_varint(s, files[i].full().size() - prefix[i]);
  for (const auto& f : files) ocdbt_put_varint(s, f.base.size());
  for (std::size_t i = 0; i < files.size(); ++i) s += files[i].full().substr(prefix[i]);
}
// A data file table of one of the database's own files.
inline void ocdbt_put_one_file(std::string& s, const std::string& path) { ocdbt_put_files(s, {{std::string(), path}}); }

class OcdbtWriter {
 public:
  static constexpr std::size_t max_leaf_entries = 1024;

  // The database at `key` (a new prefix); values up to `max_inline` bytes stay in the B+tree.
  OcdbtWriter(Store& store, std::string key, std::uint64_t max_inline = 100)
      : store_(store), key_(normalize_key(std::move(key))), max_inline_(max_inline) {
    std::random_device rd;
    std::mt19937_64 rng((std::uint64_t(rd()) << 32) ^ rd() ^
                        static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
    static const char hex[] = "0123456789abcdef";
    data_name_ = "d/";
    for (int i = 0; i < 32; ++i) data_name_ += hex[rng() % 16];
    for (int i = 0; i < 16; ++i) uuid_ += static_cast<char>(rng() & 0xff);
    data_ = store_.create(join_key(key_, data_name_));
    out_.emplace(*data_);
  }

  // Each key once (a key put twice is refused, at the latest by finish(), before the tree is
  // written); any order.
  void put(std::string_view key, const void* value, std::uint64_t n) { put(key, value, n, false); }
  void put(std::string_view key, const std::string& value) { put(key, value.data(), value.size(), false); }
  // A value the caller leaves where it is, unchanged, until finish() returns: written to the
  // data file from there (GatheredWriter::append_kept), not copied. The same value put again
  // under another key (the same string: an export's arrays of one dtype and shape share their
  // zarr.json) is written once, and every key after the first points at those bytes: an OCDBT
  // value is a byte range of a data file, and nothing asks that two keys' ranges differ. (Ten
  // thousand small arrays' zarr.json were 4.5 MB of an export's 7.9 MB data file.)
  void put_kept(std::string_view key, const std::string& value) {
    if (value.size() > max_inline_)
      if (const auto at = kept_at_.find(&value); at != kept_at_.end()) {
        check_key(key);
        return add_range(key, 0, at->second, value.size());
      }
    const std::uint64_t offset = out_->size();
    put(key, value.data(), value.size(), true);
    if (value.size() > max_inline_) kept_at_.emplace(&value, offset);
  }

  // A value that is already in a data file of another database below this one: `length` bytes
  // at `offset` of `file` (its base path is that database's directory relative to this one,
  // ending in '/'). Nothing is copied.
  void put_reference(std::string_view key, const OcdbtFileName& file, std::uint64_t offset, std::uint64_t length) {
    check_key(key);
    auto [at, fresh] = files_.emplace(file, files_.size() + 1);  // 0 is the database's own file
    if (fresh) file_names_.push_back(file);
    add_range(key, static_cast<std::uint32_t>(at->second), offset, length);
  }

  // A value as finish() stored it: inline bytes, or a byte range of the database's own data file.
  struct StoredValue {
    bool indirect = false;
    std::string inline_value;
    std::uint64_t offset = 0, length = 0;
  };
  // Every key put, and its value; the data file's name (relative to the database). For the
  // root of a multi-process export, after finish().
  template <class F>
  void for_each_value(F&& f) const {
    for (const Entry& e : entries_) {
      const std::string k(e.key);
      if (e.indirect) f(k, StoredValue{true, std::string(), e.offset, e.length});
      else f(k, StoredValue{false, std::string(e.inline_value), 0, e.length});
    }
  }
  std::size_t value_count() const { return entries_.size(); }
  const std::string& data_name() const { return data_name_; }

  // A value made in pieces and never held whole (an array of gigabytes): produce(sink, kept)
  // calls sink(bytes, n), or kept(bytes, n) for bytes that stay where they are, unchanged,
  // until finish() returns (not copied: GatheredWriter::append_kept), with the value's bytes
  // in order. Stored indirect, in the data file.
  template <class Produce>
  void put_stream(std::string_view key, Produce&& produce) {
    check_key(key);
    Entry e;
    e.indirect = true;
    e.offset = out_->size();
    produce([&](const void* bytes, std::uint64_t n) { out_->append(bytes, n); },
            [&](const void* bytes, std::uint64_t n) { out_->append_kept(bytes, n); });
    e.length = out_->size() - e.offset;
    indirect_bytes_ += e.length;
    add(key, e);
  }

  // Writes the tree and the manifest. The database is complete when this returns. Returns the
  // blobs written (relative to the database's key) and their sizes.
  std::map<std::string, std::uint64_t> finish() {
    struct Child {
      std::string first_key;
      std::uint64_t offset, length, keys, tree_bytes, indirect;
    };
    sort_keys();
    std::vector<Child> children;
    for (std::size_t at = 0; at < entries_.size(); at += max_leaf_entries) {
      const std::size_t end = std::min(entries_.size(), at + max_leaf_entries);
      const std::string node = ocdbt_frame(ocdbt_btree_node_magic, leaf_body(at, end));
      std::uint64_t indirect = 0;
      for (std::size_t i = at; i < end; ++i) indirect += entries_[i].indirect ? entries_[i].length : 0;
      children.push_back({std::string(entries_[at].key), append(node), node.size(), end - at, node.size(), indirect});
    }
    // An empty database has no root: a version that names no node, and no data file.
    Child root = children.empty() ? Child{std::string(), 0, 0, 0, 0, 0} : children.front();
    int height = 0;
    if (children.size() > 1) {
      std::string body(1, '\x01');  // height 1
      ocdbt_put_one_file(body, data_name_);
      ocdbt_put_varint(body, children.size());
      put_keys(body, children.size(), [&](std::size_t i) { return std::string_view(children[i].first_key); }, true);
      for (std::size_t i = 0; i < children.size(); ++i) ocdbt_put_varint(body, 0);  // data file 0
      for (const auto& c : children) ocdbt_put_varint(body, c.offset);
      for (const auto& c : children) ocdbt_put_varint(body, c.length);
      std::uint64_t keys = 0, tree = 0, indirect = 0;
      for (const auto& c : children) ocdbt_put_varint(body, c.keys), keys += c.keys;
      for (const auto& c : children) ocdbt_put_varint(body, c.tree_bytes), tree += c.tree_bytes;
      for (const auto& c : children) ocdbt_put_varint(body, c.indirect), indirect += c.indirect;
      const std::string node = ocdbt_frame(ocdbt_btree_node_magic, body);
      root = {std::string(), append(node), node.size(), keys, tree + node.size(), indirect};
      height = 1;
    }
    const std::uint64_t data_bytes = out_->size();
    out_->finish();
    out_.reset();
    data_.reset();
    // The manifest: configuration, the one data file, one version.
    std::string m = uuid_;
    m += '\0';                                 // a single manifest
    ocdbt_put_varint(m, max_inline_);
    ocdbt_put_varint(m, 1 << 20);              // max decoded node bytes
    m += '\x04';                               // version tree arity 2^4
    ocdbt_put_varint(m, 0);                    // no compression
    if (children.empty()) ocdbt_put_varint(m, 0);
    else ocdbt_put_one_file(m, data_name_);
    ocdbt_put_varint(m, 1);                    // one version
    ocdbt_put_varint(m, 1);                    // generation 1
    m += static_cast<char>(height);
    ocdbt_put_varint(m, 0);                    // data file 0
    ocdbt_put_varint(m, root.offset);
    ocdbt_put_varint(m, root.length);
    ocdbt_put_varint(m, root.keys);
    ocdbt_put_varint(m, root.tree_bytes);
    ocdbt_put_varint(m, root.indirect);
    ocdbt_put_le(m, static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::system_clock::now().time_since_epoch()).count()), 8);
    ocdbt_put_varint(m, 0);                    // no version tree nodes
    const std::string manifest = ocdbt_frame(ocdbt_manifest_magic, m);
    write_blob(store_, join_key(key_, "manifest.ocdbt"), manifest);
    return {{data_name_, data_bytes}, {"manifest.ocdbt", manifest.size()}};
  }

 private:
  // Bytes kept end to end in blocks of 64 KiB (a larger piece has a block of its own), never
  // moved, so a view of them stays valid. (One std::string grown by doubling to a megabyte
  // would be copied at each step, and its last copy is fresh pages from the system.)
  class Pool {
   public:
    std::string_view keep(std::string_view s) {
      if (s.size() > left_) {
        const std::size_t n = std::max(block_bytes, s.size());
        blocks_.push_back(std::make_unique_for_overwrite<char[]>(n));
        at_ = blocks_.back().get();
        left_ = n;
      }
      if (!s.empty()) std::memcpy(at_, s.data(), s.size());
      const std::string_view kept(at_, s.size());
      at_ += s.size();
      left_ -= s.size();
      return kept;
    }

   private:
    static constexpr std::size_t block_bytes = std::size_t{64} << 10;
    std::vector<std::unique_ptr<char[]>> blocks_;
    char* at_ = nullptr;
    std::size_t left_ = 0;
  };

  // An entry's key and inline value are views of pool_, not strings of their own: an export of
  // 10,000 small arrays puts 20,000 keys, and a node of a std::map per key (with a string in
  // it) was a fifth of that export's time.
  struct Entry {
    std::string_view key, inline_value;
    std::uint32_t file = 0;  // indirect: 0 the database's own data file, else files_'s number
    bool indirect = false;
    std::uint64_t offset = 0, length = 0;  // indirect: the range of the data file
  };

  void put(std::string_view key, const void* value, std::uint64_t n, bool kept) {
    check_key(key);
    Entry e;
    e.length = n;
    if (n <= max_inline_) {
      e.inline_value = pool_.keep(std::string_view(static_cast<const char*>(value), static_cast<std::size_t>(n)));
    } else {
      e.indirect = true;
      e.offset = out_->size();
      if (kept) out_->append_kept(value, n);
      else out_->append(value, n);
      indirect_bytes_ += n;
    }
    add(key, e);
  }

  // Every put's check, before anything is written: a key OCDBT can hold. (A key put twice is
  // found here where keys come in order, else by sort_keys.)
  void check_key(std::string_view key) const {
    if (key.size() > ocdbt_max_path)
      throw Error(ErrorKind::invalid_argument, "an OCDBT key is longer than 65535 bytes", "", std::string(key));
    if (!entries_.empty() && key == entries_.back().key) twice(key);
  }
  [[noreturn]] static void twice(std::string_view key) {
    throw Error(ErrorKind::invalid_argument, "an OCDBT key was put twice", "", std::string(key));
  }
  // A value that is `length` bytes at `offset` of data file `file` (0: this database's own).
  void add_range(std::string_view key, std::uint32_t file, std::uint64_t offset, std::uint64_t length) {
    Entry e;
    e.indirect = true;
    e.file = file;
    e.offset = offset;
    e.length = length;
    add(key, e);
  }
  void add(std::string_view key, Entry e) {
    if (!entries_.empty() && key < entries_.back().key) in_order_ = false;
    e.key = pool_.keep(key);
    entries_.push_back(e);
  }
  // The entries in key order, as a B+tree holds them; a key put twice is an error.
  void sort_keys() {
    if (!in_order_) {
      std::sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) { return a.key < b.key; });
      in_order_ = true;
    }
    for (std::size_t i = 1; i < entries_.size(); ++i)
      if (entries_[i].key == entries_[i - 1].key) twice(entries_[i].key);
  }

  std::uint64_t append(const std::string& bytes) {
    const std::uint64_t at = out_->size();
    out_->append(bytes.data(), bytes.size());
    return at;
  }

  // The key columns: prefix lengths (after the first), suffix lengths, [subtree prefix
  // lengths, all 0: the children's keys are whole], suffixes.
  template <class KeyAt>
  static void put_keys(std::string& body, std::size_t n, KeyAt key_at, bool interior) {
    std::vector<std::size_t> prefix(n, 0);
    for (std::size_t i = 1; i < n; ++i) {
      const std::string_view a = key_at(i - 1), b = key_at(i);
      std::size_t p = 0;
      while (p < a.size() && p < b.size() && a[p] == b[p]) ++p;
      prefix[i] = p;
      ocdbt_put_varint(body, p);
    }
    for (std::size_t i = 0; i < n; ++i) ocdbt_put_varint(body, key_at(i).size() - prefix[i]);
    if (interior)
      for (std::size_t i = 0; i < n; ++i) ocdbt_put_varint(body, 0);
    for (std::size_t i = 0; i < n; ++i) body.append(key_at(i).substr(prefix[i]));
  }

  std::string leaf_body(std::size_t first, std::size_t last) const {
    // The node's entries, looked up in the deque once (its operator[] divides, once a column).
    const std::size_t n = last - first;
    std::vector<const Entry*> all(n);
    std::size_t key_bytes = 0;
    for (std::size_t i = 0; i < n; ++i) all[i] = &entries_[first + i], key_bytes += all[i]->key.size();
    std::string body(1, '\0');  // height 0
    body.reserve(key_bytes + 24 * n + 64);
    // The node's file table: the database's own data file, then the other databases' files its
    // values point into, sorted (as TensorStore writes tables), each entry's index remapped.
    std::map<std::size_t, std::size_t> index_of{{0, 0}};
    std::vector<OcdbtFileName> table{{std::string(), data_name_}};
    if (!files_.empty()) {
      std::vector<std::pair<OcdbtFileName, std::size_t>> used;
      for (const Entry* e : all)
        if (const std::size_t f = e->file; f != 0 && index_of.emplace(f, 0).second) used.emplace_back(file_names_[f - 1], f);
      std::sort(used.begin(), used.end());
      for (const auto& [name, f] : used) {
        index_of[f] = table.size();
        table.push_back(name);
      }
    }
    ocdbt_put_files(body, table);
    ocdbt_put_varint(body, n);
    put_keys(body, n, [&](std::size_t i) { return all[i]->key; }, false);
    for (const Entry* e : all) ocdbt_put_varint(body, e->length);
    for (const Entry* e : all) body += e->indirect ? '\x01' : '\0';
    for (const Entry* e : all)
      if (e->indirect) ocdbt_put_varint(body, e->file == 0 ? 0 : index_of.at(e->file));
    for (const Entry* e : all)
      if (e->indirect) ocdbt_put_varint(body, e->offset);
    for (const Entry* e : all)
      if (!e->indirect) body += e->inline_value;
    return body;
  }

  Store& store_;
  std::string key_, data_name_, uuid_;
  std::uint64_t max_inline_;
  std::unique_ptr<StoreWriter> data_;
  std::optional<GatheredWriter> out_;  // appends to data_ (small values gathered into writes of many pieces)
  std::uint64_t indirect_bytes_ = 0;
  std::map<const std::string*, std::uint64_t> kept_at_;  // each value put_kept wrote: its offset
  std::deque<Entry> entries_;  // in the order put until finish() sorts them (blocks, as pool_'s)
  Pool pool_;                  // the entries' keys and inline values
  bool in_order_ = true;       // entries_ are in key order
  std::map<OcdbtFileName, std::size_t> files_;  // other databases' data files, numbered from 1
  std::vector<OcdbtFileName> file_names_;       // by number - 1
};

}  // namespace detail::orbax
CAIRN_END_NAMESPACE
