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
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cairn/io/crc32c.hpp"
#include "cairn/orbax/ocdbt.hpp"
#include "cairn/store/gathered_writer.hpp"
#include "cairn/store/store.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail::orbax {

inline void ocdbt_put_varint(std::string& s, std::uint64_t v) {
  while (v >= 0x80) {
    s += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  s += static_cast<char>(v);
}

inline void ocdbt_put_le(std::string& s, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
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

  // Each key once; any order.
  void put(const std::string& key, const void* value, std::uint64_t n) { put(key, value, n, false); }
  void put(const std::string& key, const std::string& value) { put(key, value.data(), value.size(), false); }
  // A value the caller leaves where it is, unchanged, until finish() returns: written to the
  // data file from there (GatheredWriter::append_kept), not copied.
  void put_kept(const std::string& key, const std::string& value) { put(key, value.data(), value.size(), true); }

  // A value that is already in a data file of another database below this one: `length` bytes
  // at `offset` of `file` (its base path is that database's directory relative to this one,
  // ending in '/'). Nothing is copied.
  void put_reference(const std::string& key, const OcdbtFileName& file, std::uint64_t offset, std::uint64_t length) {
    check_new_key(key);
    auto [at, fresh] = files_.emplace(file, files_.size() + 1);  // 0 is the database's own file
    if (fresh) file_names_.push_back(file);
    Entry e;
    e.indirect = true;
    e.file = at->second;
    e.offset = offset;
    e.length = length;
    entries_.emplace(key, std::move(e));
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
    for (const auto& [key, e] : entries_) f(key, StoredValue{e.indirect, e.inline_value, e.offset, e.length});
  }
  std::size_t value_count() const { return entries_.size(); }
  const std::string& data_name() const { return data_name_; }

  // A value made in pieces and never held whole (an array of gigabytes): produce(sink, kept)
  // calls sink(bytes, n), or kept(bytes, n) for bytes that stay where they are, unchanged,
  // until finish() returns (not copied: GatheredWriter::append_kept), with the value's bytes
  // in order. Stored indirect, in the data file.
  template <class Produce>
  void put_stream(const std::string& key, Produce&& produce) {
    check_new_key(key);
    Entry e;
    e.indirect = true;
    e.offset = out_->size();
    produce([&](const void* bytes, std::uint64_t n) { out_->append(bytes, n); },
            [&](const void* bytes, std::uint64_t n) { out_->append_kept(bytes, n); });
    e.length = out_->size() - e.offset;
    indirect_bytes_ += e.length;
    entries_.emplace(key, std::move(e));
  }

  // Writes the tree and the manifest. The database is complete when this returns. Returns the
  // blobs written (relative to the database's key) and their sizes.
  std::map<std::string, std::uint64_t> finish() {
    struct Child {
      std::string first_key;
      std::uint64_t offset, length, keys, tree_bytes, indirect;
    };
    std::vector<Child> children;
    std::vector<const std::pair<const std::string, Entry>*> all;
    for (const auto& e : entries_) all.push_back(&e);
    for (std::size_t at = 0; at < all.size(); at += max_leaf_entries) {
      const std::size_t end = std::min(all.size(), at + max_leaf_entries);
      const std::string node = ocdbt_frame(ocdbt_btree_node_magic, leaf_body(all, at, end));
      std::uint64_t indirect = 0;
      for (std::size_t i = at; i < end; ++i) indirect += all[i]->second.indirect ? all[i]->second.length : 0;
      children.push_back({all[at]->first, append(node), node.size(), end - at, node.size(), indirect});
    }
    // An empty database has no root: a version that names no node, and no data file.
    Child root = children.empty() ? Child{std::string(), 0, 0, 0, 0, 0} : children.front();
    int height = 0;
    if (children.size() > 1) {
      std::string body(1, '\x01');  // height 1
      ocdbt_put_one_file(body, data_name_);
      ocdbt_put_varint(body, children.size());
      put_keys(body, children.size(), [&](std::size_t i) -> const std::string& { return children[i].first_key; }, true);
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
  struct Entry {
    bool indirect = false;
    std::string inline_value;
    std::size_t file = 0;  // indirect: 0 the database's own data file, else files_'s number
    std::uint64_t offset = 0, length = 0;
  };

  void put(const std::string& key, const void* value, std::uint64_t n, bool kept) {
    check_new_key(key);
    Entry e;
    e.length = n;
    if (n <= max_inline_) {
      e.inline_value.assign(static_cast<const char*>(value), static_cast<std::size_t>(n));
    } else {
      e.indirect = true;
      e.offset = out_->size();
      if (kept) out_->append_kept(value, n);
      else out_->append(value, n);
      indirect_bytes_ += n;
    }
    entries_.emplace(key, std::move(e));
  }

  // Every put's check, before anything is written: a key OCDBT can hold, put once.
  void check_new_key(const std::string& key) const {
    if (key.size() > ocdbt_max_path) throw Error(ErrorKind::invalid_argument, "an OCDBT key is longer than 65535 bytes", "", key);
    if (entries_.count(key)) throw Error(ErrorKind::invalid_argument, "an OCDBT key was put twice", "", key);
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
      const std::string &a = key_at(i - 1), &b = key_at(i);
      std::size_t p = 0;
      while (p < a.size() && p < b.size() && a[p] == b[p]) ++p;
      prefix[i] = p;
      ocdbt_put_varint(body, p);
    }
    for (std::size_t i = 0; i < n; ++i) ocdbt_put_varint(body, key_at(i).size() - prefix[i]);
    if (interior)
      for (std::size_t i = 0; i < n; ++i) ocdbt_put_varint(body, 0);
    for (std::size_t i = 0; i < n; ++i) body.append(key_at(i), prefix[i], std::string::npos);
  }

  std::string leaf_body(const std::vector<const std::pair<const std::string, Entry>*>& all, std::size_t at, std::size_t end) const {
    std::string body(1, '\0');  // height 0
    // The node's file table: the database's own data file, then the other databases' files its
    // values point into, sorted (as TensorStore writes tables), each entry's index remapped.
    std::map<std::size_t, std::size_t> index_of{{0, 0}};
    std::vector<OcdbtFileName> table{{std::string(), data_name_}};
    if (!files_.empty()) {
      std::vector<std::pair<OcdbtFileName, std::size_t>> used;
      for (std::size_t i = at; i < end; ++i)
        if (const std::size_t f = all[i]->second.file; f != 0 && index_of.emplace(f, 0).second)
          used.emplace_back(file_names_[f - 1], f);
      std::sort(used.begin(), used.end());
      for (const auto& [name, f] : used) {
        index_of[f] = table.size();
        table.push_back(name);
      }
    }
    ocdbt_put_files(body, table);
    ocdbt_put_varint(body, end - at);
    put_keys(body, end - at, [&](std::size_t i) -> const std::string& { return all[at + i]->first; }, false);
    for (std::size_t i = at; i < end; ++i) ocdbt_put_varint(body, all[i]->second.length);
    for (std::size_t i = at; i < end; ++i) body += all[i]->second.indirect ? '\x01' : '\0';
    for (std::size_t i = at; i < end; ++i)
      if (all[i]->second.indirect) ocdbt_put_varint(body, index_of.at(all[i]->second.file));
    for (std::size_t i = at; i < end; ++i)
      if (all[i]->second.indirect) ocdbt_put_varint(body, all[i]->second.offset);
    for (std::size_t i = at; i < end; ++i)
      if (!all[i]->second.indirect) body += all[i]->second.inline_value;
    return body;
  }

  Store& store_;
  std::string key_, data_name_, uuid_;
  std::uint64_t max_inline_;
  std::unique_ptr<StoreWriter> data_;
  std::optional<GatheredWriter> out_;  // appends to data_ (small values gathered into writes of many pieces)
  std::uint64_t indirect_bytes_ = 0;
  std::map<std::string, Entry> entries_;
  std::map<OcdbtFileName, std::size_t> files_;  // other databases' data files, numbered from 1
  std::vector<OcdbtFileName> file_names_;       // by number - 1
};

}  // namespace detail::orbax
CAIRN_END_NAMESPACE
