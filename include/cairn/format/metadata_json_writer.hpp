// SPDX-License-Identifier: Apache-2.0
// Writing the records' JSON form, the text of _METADATA (docs/format.md specifies it): plain
// appends into one string, no tree of JSON values in between and no cereal. Format 2 leaves
// out what a reader restores (metadata_json_reader.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "cairn/core/json_reader.hpp"
#include "cairn/format/records.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

inline void append_json_ints(std::string& out, const Shape& v) {
  out += '[';
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) out += ',';
    append_json_int(out, v[i]);
  }
  out += ']';
}
template <class T>
void append_json_ints(std::string& out, const std::vector<T>& v) {
  out += '[';
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) out += ',';
    append_json_int(out, v[i]);
  }
  out += ']';
}
inline void append_json_strings(std::string& out, const std::vector<std::string>& v) {
  out += '[';
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) out += ',';
    append_json_string(out, v[i]);
  }
  out += ']';
}

inline void append_sharding_json(std::string& out, const NamedSharding& s) {
  out += "{\"mesh_axes\":[";
  bool first = true;
  for (const auto& a : s.mesh.axes()) {
    if (!first) out += ',';
    first = false;
    append_json_string(out, a.name);
  }
  out += "],\"mesh_shape\":[";
  first = true;
  for (const auto& a : s.mesh.axes()) {
    if (!first) out += ',';
    first = false;
    append_json_int(out, a.size);
  }
  out += "],\"memory\":";
  append_json_string(out, s.mesh.devices().empty() ? "host" : memory_kind_name(s.mesh.devices().front().memory));
  out += ",\"device_ids\":[";
  first = true;
  for (const auto& d : s.mesh.devices()) {
    if (!first) out += ',';
    first = false;
    append_json_int(out, d.id);
  }
  out += "],\"spec\":[";
  first = true;
  for (const auto& d : s.spec.dims()) {
    if (!first) out += ',';
    first = false;
    append_json_strings(out, d.axes);
  }
  out += ']';
  // The process of each device, only when the mesh spans several processes, so that
  // single-process checkpoints read as they always did.
  if (s.mesh.process_count() > 1) {
    out += ",\"device_processes\":[";
    first = true;
    for (const auto& d : s.mesh.devices()) {
      if (!first) out += ',';
      first = false;
      append_json_int(out, d.process);
    }
    out += ']';
  }
  out += '}';
}

// A data file's number in the metadata's `data_files`, for chunks that name their file by
// number (format 2). Built once per metadata text; a save by many ranks lists one file per rank.
class DataFileNumbers {
 public:
  explicit DataFileNumbers(const std::vector<std::string>& files) : files_(files) {
    if (files.size() > 8)
      for (std::size_t i = files.size(); i-- > 0;) index_[files[i]] = i;  // the first of repeats
  }
  // -1 when the file is not listed (the chunk then names it by its name).
  std::int64_t find(const std::string& file) const {
    if (index_.empty()) {
      for (std::size_t i = 0; i < files_.size(); ++i)
        if (files_[i] == file) return static_cast<std::int64_t>(i);
      return -1;
    }
    const auto it = index_.find(file);
    return it == index_.end() ? -1 : static_cast<std::int64_t>(it->second);
  }

 private:
  const std::vector<std::string>& files_;
  std::unordered_map<std::string_view, std::size_t> index_;
};

// A leaf in format 2's short form: a member whose value is its default is left out
// (`saved_from` equal to `dtype`, `order` C; a chunk's `start` at the origin, its `shape` the
// leaf's, its `nbytes` what its box holds), and a chunk names a listed file by its number.
// What is left out is exactly what a reader restores, whatever the records hold (records that
// are not consistent are written in full, so that they read back as they were).
inline void append_leaf_json(std::string& out, const LeafRecord& l, const DataFileNumbers* files) {
  // The members every leaf has come first, the optional ones after (the reader guesses each
  // next name from this order).
  out += "{\"key\":";
  append_json_string(out, l.path.str());
  out += ",\"key_kinds\":";
  append_json_string(out, l.path.kinds());
  out += ",\"dtype\":\"";
  out += dtype_name(l.dtype);
  out += "\",\"shape\":";
  append_json_ints(out, l.shape);
  out += ",\"chunks\":[";
  for (std::size_t i = 0; i < l.chunks.size(); ++i) {
    const ChunkRecord& c = l.chunks[i];
    out += i ? ",{\"file\":" : "{\"file\":";
    if (const std::int64_t number = files ? files->find(c.file) : -1; number >= 0)
      append_json_int(out, number);
    else
      append_json_string(out, c.file);
    out += ",\"offset\":";
    append_json_int(out, c.offset);
    out += ",\"crc32c\":";
    append_json_int(out, c.crc32c);
    const bool at_origin = c.start.size() == l.shape.size() &&
                           std::all_of(c.start.begin(), c.start.end(), [](std::int64_t v) { return v == 0; });
    if (!at_origin) {
      out += ",\"start\":";
      append_json_ints(out, c.start);
    }
    if (c.shape != l.shape) {
      out += ",\"shape\":";
      append_json_ints(out, c.shape);
    }
    std::uint64_t box_bytes = 0;
    if (!try_byte_count(c.shape, dtype_size(l.dtype), box_bytes) || box_bytes != c.nbytes) {
      out += ",\"nbytes\":";
      append_json_int(out, c.nbytes);
    }
    if (c.blocks) {
      out += ",\"block_bytes\":";
      append_json_int(out, c.blocks->block_bytes);
      out += ",\"block_crc32c\":[";
      for (std::size_t k = 0; k < c.blocks->crc32c.size(); ++k) {
        if (k) out += ',';
        append_json_int(out, c.blocks->crc32c[k]);
      }
      out += ']';
    }
    out += '}';
  }
  out += ']';
  if (l.saved_from != l.dtype) {
    out += ",\"saved_from\":\"";
    out += dtype_name(l.saved_from);
    out += '"';
  }
  if (l.order != Order::C) {
    out += ",\"order\":\"";
    out += static_cast<char>(l.order);
    out += '"';
  }
  if (l.sharding) {
    out += ",\"sharding\":";
    append_sharding_json(out, *l.sharding);
  }
  out += '}';
}

// Format 3's leaf table (docs/format.md, "Leaf tables"): the leaves of an item of many plain
// leaves in columns rather than a record each, about 21 bytes a leaf where a record takes
// about 127 (issue 35: the metadata of 10,000 small leaves was 1.27 MB beside their 2.9 MB,
// and its parse most of a load's CPU). Smaller items keep their records, which any cairn since
// format 2 reads and people read more easily.
inline constexpr std::size_t leaf_table_min_leaves = 1024;

// A leaf the table can hold: one chunk, the whole array, in a listed file, no block
// checksums, stored as it was in memory, C order, unsharded (what every small leaf is).
inline bool table_leaf(const LeafRecord& l, const DataFileNumbers& files) {
  if (l.chunks.size() != 1 || l.sharding || l.saved_from != l.dtype || l.order != Order::C) return false;
  const ChunkRecord& c = l.chunks[0];
  std::uint64_t bytes = 0;
  return !c.blocks && c.shape == l.shape && c.start.size() == l.shape.size() &&
         std::all_of(c.start.begin(), c.start.end(), [](std::int64_t v) { return v == 0; }) &&
         try_byte_count(l.shape, dtype_size(l.dtype), bytes) && bytes == c.nbytes &&
         c.offset <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) &&
         bytes <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) - c.offset &&
         files.find(c.file) >= 0;
}
// Also only where the keys come to no more than a reader takes from a table of that many
// leaves (max_table_key_bytes_per_text_byte, against the fewest bytes a table spends on a
// leaf: 15), so that what is written is always read.
// The keys are printed only where a bound of their size (every character escaped, every number
// of 20 characters) does not already show it: append_leaf_table_json prints each once more.
inline bool writes_leaf_table(const ItemRecord& item, const DataFileNumbers* files) {
  if (!files || item.leaves.size() < leaf_table_min_leaves) return false;
  std::uint64_t most_key_bytes = 0;
  for (const auto& l : item.leaves) {
    if (!table_leaf(l, *files)) return false;
    for (const KeyEntry& e : l.path.entries()) most_key_bytes += 1 + (e.name.empty() ? 20 : 3 * std::uint64_t{e.name.size()});
  }
  const std::uint64_t limit = max_table_key_bytes_per_text_byte * 15 * item.leaves.size() + (std::uint64_t{64} << 20);
  if (most_key_bytes <= limit) return true;
  std::uint64_t key_bytes = 0;
  for (const auto& l : item.leaves) key_bytes += l.path.str().size();
  return key_bytes <= limit;
}

// Runs of equal values: [[value, count], ...].
template <class Value, class Append>
void append_runs(std::string& out, const LeafRecords& leaves, Value value, Append append) {
  out += '[';
  for (std::size_t i = 0; i < leaves.size();) {
    const auto v = value(leaves[i]);
    std::size_t j = i + 1;
    while (j < leaves.size() && value(leaves[j]) == v) ++j;
    out += i ? ",[" : "[";
    append(v);
    out += ',';
    append_json_int(out, static_cast<std::uint64_t>(j - i));
    out += ']';
    i = j;
  }
  out += ']';
}

inline void append_leaf_table_json(std::string& out, const LeafRecords& leaves, const DataFileNumbers& files) {
  // keys: [shared, suffix, ...]: the bytes each printed key shares with the one before, and
  // the rest (cut between UTF-8 characters, so that the text stays valid UTF-8).
  out += "{\"keys\":[";
  std::string before, key;
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    key = leaves[i].path.str();
    std::size_t shared = 0;
    const std::size_t most = std::min(before.size(), key.size());
    while (shared < most && before[shared] == key[shared]) ++shared;
    while (shared > 0 && shared < key.size() && (static_cast<unsigned char>(key[shared]) & 0xC0) == 0x80) --shared;
    if (i) out += ',';
    append_json_int(out, static_cast<std::uint64_t>(shared));
    out += ',';
    append_json_string(out, std::string_view(key).substr(shared));
    before.swap(key);
  }
  out += "],\"key_kinds\":";
  append_runs(out, leaves, [](const LeafRecord& l) { return l.path.kinds(); },
              [&](const std::string& k) { append_json_string(out, k); });
  out += ",\"dtype\":";
  append_runs(out, leaves, [](const LeafRecord& l) { return l.dtype; }, [&](DType d) {
    out += '"';
    out += dtype_name(d);
    out += '"';
  });
  out += ",\"rank\":";
  append_runs(out, leaves, [](const LeafRecord& l) { return l.shape.size(); },
              [&](std::size_t r) { append_json_int(out, static_cast<std::uint64_t>(r)); });
  out += ",\"shape\":[";
  bool first = true;
  for (const auto& l : leaves)
    for (std::int64_t d : l.shape) {
      if (!first) out += ',';
      first = false;
      append_json_int(out, d);
    }
  out += "],\"file\":";
  append_runs(out, leaves, [&](const LeafRecord& l) { return files.find(l.chunks[0].file); },
              [&](std::int64_t f) { append_json_int(out, f); });
  // Each offset less the end of the leaf before where that leaf is in the same file (0 for
  // leaves written one after another); the offset itself where the file changes.
  out += ",\"offset\":[";
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    const ChunkRecord& c = leaves[i].chunks[0];
    if (i) out += ',';
    if (i && leaves[i - 1].chunks[0].file == c.file) {
      const ChunkRecord& b = leaves[i - 1].chunks[0];
      append_json_int(out, static_cast<std::int64_t>(c.offset) - static_cast<std::int64_t>(b.offset + b.nbytes));
    } else {
      append_json_int(out, c.offset);
    }
  }
  // The CRC32Cs as 8 hexadecimal digits each, in one string.
  out += "],\"crc32c\":\"";
  static constexpr char hex[] = "0123456789abcdef";
  for (const auto& l : leaves) {
    const std::uint32_t crc = l.chunks[0].crc32c;
    for (int shift = 28; shift >= 0; shift -= 4) out += hex[(crc >> shift) & 0xF];
  }
  out += "\"}";
}

// `files`: null where the item is written on its own (a rank's per-rank items sent to the
// primary), whose chunks then name their files. `table`: its leaves as a leaf table
// (writes_leaf_table).
inline void append_item_json(std::string& out, const ItemRecord& item, const DataFileNumbers* files, bool table) {
  out += "{\"name\":";
  append_json_string(out, item.name);
  out += ",\"kind\":\"";
  out += item_kind_name(item.kind);
  // The counts let a reader size its record arrays once (at 100,000 leaves, growing them
  // was 5 MB of a load's peak memory). Readers that do not know them skip them.
  out += "\",\"node_count\":";
  append_json_int(out, static_cast<std::int64_t>(item.nodes.size()));
  out += ",\"nodes\":[";
  for (std::size_t i = 0; i < item.nodes.size(); ++i) {
    const NodeRecord& n = item.nodes[i];
    out += i ? ",{\"key\":" : "{\"key\":";
    append_json_string(out, n.path.str());
    out += ",\"key_kinds\":";
    append_json_string(out, n.path.kinds());
    out += ",\"kind\":\"";
    out += node_kind_name(n.kind);
    out += "\"}";
  }
  out += "],\"leaf_count\":";
  append_json_int(out, static_cast<std::int64_t>(item.leaves.size()));
  if (table) {
    out += ",\"leaf_table\":";
    append_leaf_table_json(out, item.leaves, *files);
    out += '}';
    return;
  }
  out += ",\"leaves\":[";
  for (std::size_t i = 0; i < item.leaves.size(); ++i) {
    if (i) out += ',';
    append_leaf_json(out, item.leaves[i], files);
  }
  out += "]}";
}

// The text of _METADATA: everything but the user metadata, which has a file of its own.
// `version`, where given, is set to the text's format version, which the commit marker repeats.
inline std::string metadata_to_json(const CheckpointMetadata& m, int* version = nullptr) {
  const DataFileNumbers files(m.data_files);
  std::vector<char> tables(m.items.size());
  for (std::size_t i = 0; i < m.items.size(); ++i) tables[i] = writes_leaf_table(m.items[i], &files);
  // Room for the text at once: a record takes about 130 bytes a leaf, a table about 21 and
  // each key's suffix (a guess: growing past it costs one copy).
  std::string out;
  std::size_t room = 256;
  for (std::size_t i = 0; i < m.items.size(); ++i)
    room += 80 * m.items[i].nodes.size() + (tables[i] ? 40 : 160) * m.items[i].leaves.size();
  out.reserve(room);
  // The text is in this version's form, whichever version the records were read from:
  // format 3 where an item's leaves are a table, format 2 otherwise (which cairn reads since
  // 2026-11-23).
  const int text_version = std::find(tables.begin(), tables.end(), 1) != tables.end() ? 3 : 2;
  if (version) *version = text_version;
  out += "{\"format\":\"cairn\",\"format_version\":";
  append_json_int(out, text_version);
  out += ",\"library_version\":";
  append_json_string(out, m.library_version);
  out += ",\"created_unix_ms\":";
  append_json_int(out, m.created_unix_ms);
  out += ",\"created\":";
  append_json_string(out, m.created);
  out += ",\"data_files\":";
  append_json_strings(out, m.data_files);
  out += ",\"items\":[";
  for (std::size_t i = 0; i < m.items.size(); ++i) {
    if (i) out += ',';
    append_item_json(out, m.items[i], &files, tables[i]);
  }
  out += "]}";
  return out;
}

// One item's records (how a rank sends its per-rank items to the primary).
inline std::string item_to_json(const ItemRecord& item) {
  std::string out;
  append_item_json(out, item, nullptr, false);
  return out;
}

}  // namespace detail
CAIRN_END_NAMESPACE
