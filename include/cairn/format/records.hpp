// SPDX-License-Identifier: Apache-2.0
// The checkpoint metadata as C++ records (docs/format.md is their specification).
// CheckpointMetadata is also what cairn::metadata() returns. Their JSON forms are
// format/metadata_json.hpp, which only the runtime needs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <optional>
#include <string_view>
#include <type_traits>

#include "cairn/core/bulk_bytes.hpp"
#include "cairn/core/heap_optional.hpp"
#include "cairn/core/inline_vector.hpp"
#include "cairn/core/json.hpp"
#include "cairn/core/key_path.hpp"
#include "cairn/core/named_sharding.hpp"
#include "cairn/core/shape.hpp"
#include "cairn/dtype/dtype.hpp"
#include "cairn/tree/traits.hpp"

CAIRN_BEGIN_NAMESPACE

// The newest format this version reads and writes (docs/format.md, "Versions"): it reads 1, 2
// and 3; it writes 3 where an item's leaves go in a leaf table (items of many small leaves),
// 2 otherwise, so that a checkpoint without one stays readable by cairn since format 2.
inline constexpr int format_version = 3;

namespace detail {
// A leaf table's keys (format 3), spelled out, come to at most this many bytes for each byte of
// the metadata's text, and 64 MiB: the reader refuses more (a few bytes of table can spell a
// long key), and the writer writes records instead (a tree of long names shares most of each
// key: 10,000 keys of 1,000 bytes are about 100 KB of table).
inline constexpr std::uint64_t max_table_key_bytes_per_text_byte = 64;
}  // namespace detail

// The CRC32Cs of a chunk's consecutive blocks of `block_bytes` bytes (the last may be shorter),
// kept for chunks larger than one block, so that a load reading part of the chunk verifies
// the blocks it reads (docs/format.md, "Block checksums"). A chunk without them is one block.
struct BlockChecksums {
  std::uint64_t block_bytes = 0;
  std::vector<std::uint32_t> crc32c;
};

// One stored piece of a leaf: an index box of the global array, and where its bytes are.
// An unsharded leaf has one chunk covering the whole array; sharded arrays have several.
struct ChunkRecord {
  Shape start;                 // first index of the box, per dimension
  Shape shape;                 // extent of the box
  std::string file;            // data file name, inside the checkpoint directory
  std::uint64_t offset = 0;    // byte offset in the file
  std::uint64_t nbytes = 0;    // stored bytes (box elements * dtype size)
  std::uint32_t crc32c = 0;    // CRC32C of those bytes
  HeapOptional<BlockChecksums> blocks;  // per-block CRC32Cs (chunks of more than one block)
};

struct LeafRecord {
  KeyPath path;
  DType dtype = DType::float32;      // as stored
  DType saved_from = DType::float32; // the in-memory dtype at save time (differs when cast on save)
  Shape shape;                       // logical (global) shape
  Order order = Order::C;            // memory order of every chunk's bytes
  // Almost always one chunk (only sharded leaves have more), kept in the record itself.
  InlineVector<ChunkRecord, 1> chunks;
  // How the array was sharded when saved (sharded leaves only). Used as a std::optional; kept
  // on the heap, since most leaves have none (core/heap_optional.hpp).
  HeapOptional<NamedSharding> sharding;

  std::string key() const { return path.str(); }
  std::uint64_t nbytes() const { return byte_count(shape, dtype_size(dtype)); }
};

// A tree's leaf records: a vector whose memory, for thousands of leaves, is in huge pages
// (core/bulk_bytes.hpp): a load of 10,000 small leaves otherwise spends more on the page
// faults of their 2.7 MB of records than on parsing them.
using LeafRecords = std::vector<LeafRecord, detail::BulkAllocator<LeafRecord>>;

struct NodeRecord {
  KeyPath path;
  NodeKind kind = NodeKind::struct_;
};

// What an item holds: a tree of nodes and leaves, a JSON value (one string leaf), or an
// object in a portable binary cereal archive (one uint8 leaf). Stored by name.
enum class ItemKind : char { tree, json, cereal };

inline const char* item_kind_name(ItemKind k) {
  switch (k) {
    case ItemKind::tree: return "tree";
    case ItemKind::json: return "json";
    case ItemKind::cereal: return "cereal";
  }
  return "?";
}

// A named item of a checkpoint.
// A leaf of another system's file that cairn cannot read (a safetensors tensor of a dtype
// cairn does not have): listed with the reason, so that no load or conversion drops it
// silently (docs/safetensors.md). Never part of a cairn checkpoint.
struct UnreadLeaf {
  KeyPath path;
  std::string reason;  // "dtype F8_E8M0, which cairn does not read"
};

struct ItemRecord {
  std::string name;
  ItemKind kind = ItemKind::tree;
  std::vector<NodeRecord> nodes;  // inner nodes, pre-order (the root has the empty path)
  LeafRecords leaves; // leaves in tree order
  std::vector<UnreadLeaf> unread; // an import's leaves that cairn cannot read (empty for cairn's own)

  const LeafRecord* find_leaf(std::string_view key) const {
    for (const auto& l : leaves)
      if (l.key() == key) return &l;
    return nullptr;
  }
  const UnreadLeaf* find_unread(std::string_view key) const {
    for (const auto& u : unread)
      if (u.path.str() == key) return &u;
    return nullptr;
  }
  // Whether `key` names something here: a leaf, readable or not, or a node ("" is the root).
  // A scan of every leaf: for resolving one key a user typed.
  bool names(std::string_view key) const {
    if (key.empty()) return true;
    for (const auto& l : leaves)
      if (key_path_has_prefix(l.key(), key)) return true;
    for (const auto& u : unread)
      if (key_path_has_prefix(u.path.str(), key)) return true;
    for (const auto& n : nodes)
      if (n.path.str() == key) return true;
    return false;
  }
};

struct CheckpointMetadata {
  int format_version = cairn::format_version;
  std::string library_version;
  std::int64_t created_unix_ms = 0;
  std::string created;             // ISO 8601, UTC
  std::vector<std::string> data_files;
  std::vector<ItemRecord> items;
  Json user_metadata = Json::object();  // the caller's object, from its own file

  const ItemRecord* find_item(std::string_view name) const {
    for (const auto& i : items)
      if (i.name == name) return &i;
    return nullptr;
  }
  // The leaves of the main tree item ("state").
  const LeafRecords& leaves() const;
  std::uint64_t total_bytes() const {
    std::uint64_t n = 0;
    for (const auto& i : items)
      for (const auto& l : i.leaves)
        for (const auto& c : l.chunks) n += c.nbytes;
    return n;
  }
  // One line per leaf: "params/dense/kernel: float32[3, 4] (F order)".
  std::string summary() const;
};

inline const char* default_item_name = "state";

namespace detail {
// The inner nodes of a tree an import knows only by its leaves (safetensors names, Orbax
// parameters): every proper prefix of a leaf's path, in printed-key order, each a sequence
// where an index follows it and `kind` otherwise (the root too, where `with_root`, even for a
// tree of no leaves). A prefix that is itself a leaf cannot be a node: `conflict(prefix, leaf)`
// is called for it and must throw; `is_leaf(printed)` says which prefixes are leaves.
template <class IsLeaf, class Conflict>
std::vector<NodeRecord> inner_nodes(const LeafRecords& leaves, NodeKind kind, bool with_root, IsLeaf is_leaf,
                                    Conflict conflict) {
  std::map<std::string, NodeRecord> nodes;
  if (with_root) nodes.emplace("", NodeRecord{KeyPath(), kind});
  // Leaves in key order mostly share their parent with the leaf before: that parent (and so
  // every node above it) is there and checked already, found without printing its path (which
  // was most of an import's time here for 10,000 leaves of one dict).
  const LeafRecord* before = nullptr;
  NodeRecord* before_parent = nullptr;
  for (const auto& l : leaves) {
    const auto& e = l.path.entries();
    const bool same_parent = before_parent && !e.empty() && before->path.size() == e.size() &&
                             std::equal(e.begin(), e.end() - 1, before->path.entries().begin());
    before = &l;
    if (same_parent) {
      if (e.back().kind == KeyEntry::Kind::index) before_parent->kind = NodeKind::sequence;
      continue;
    }
    before_parent = nullptr;
    KeyPath p = l.path;
    bool first = true;
    while (!p.empty()) {
      const KeyEntry child = p.back();
      p.pop_back();
      const std::string printed = p.str();
      if (is_leaf(printed)) conflict(printed, l);
      auto [it, fresh] = nodes.try_emplace(printed, NodeRecord{p, kind});
      if (child.kind == KeyEntry::Kind::index) it->second.kind = NodeKind::sequence;
      if (first) before_parent = &it->second;  // a map's elements stay where they are
      first = false;
      if (!fresh) break;  // its parents are there already
    }
  }
  std::vector<NodeRecord> out;
  out.reserve(nodes.size());
  for (auto& [k, n] : nodes) out.push_back(std::move(n));
  return out;
}
}  // namespace detail

// The stored name of rank r's value of a per-rank item: "iterator" of rank 3 is "iterator@3".
inline std::string per_rank_item_name(const std::string& name, int rank) { return name + "@" + std::to_string(rank); }

inline const LeafRecords& CheckpointMetadata::leaves() const {
  static const LeafRecords none;
  const ItemRecord* item = find_item(default_item_name);
  return item ? item->leaves : none;
}

inline std::string CheckpointMetadata::summary() const {
  // What it was read from: the importers name themselves in library_version ("safetensors";
  // "orbax", or "orbax (LAYOUT)").
  std::string s;
  if (library_version.rfind("orbax", 0) == 0)
    s = "Orbax checkpoint" + library_version.substr(5) + (created.empty() ? "" : ", created " + created) + "\n";
  else if (library_version == "safetensors")
    s = "safetensors file\n";
  else
    s = "cairn checkpoint (format " + std::to_string(format_version) + ", created " + created + ")\n";
  for (const auto& item : items) {
    s += "item '" + item.name + "' (" + item_kind_name(item.kind) + ", " + std::to_string(item.leaves.size()) +
         (item.leaves.size() == 1 ? " leaf)\n" : " leaves)\n");
    for (const auto& l : item.leaves) {
      s += "  " + (l.path.empty() ? std::string("(root)") : l.key()) + ": " + dtype_name(l.dtype) + to_string(l.shape);
      if (l.shape.size() >= 2 && l.order == Order::F) s += " F-order";
      if (l.saved_from != l.dtype) s += std::string(" (cast from ") + dtype_name(l.saved_from) + ")";
      if (l.chunks.size() > 1) s += " in " + std::to_string(l.chunks.size()) + " chunks";
      if (l.sharding) s += ", sharded over " + l.sharding->describe();
      s += "\n";
    }
  }
  if (user_metadata.size()) s += "user metadata: " + user_metadata.dump() + "\n";
  return s;
}

CAIRN_END_NAMESPACE
