// SPDX-License-Identifier: Apache-2.0
// Writing the records' JSON form, the text of _METADATA (docs/format.md specifies it): plain
// appends into one string, no tree of JSON values in between and no cereal. Format 2 leaves
// out what a reader restores (metadata_json_reader.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
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

// `files`: null where the item is written on its own (a rank's per-rank items sent to the
// primary), whose chunks then name their files.
inline void append_item_json(std::string& out, const ItemRecord& item, const DataFileNumbers* files) {
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
  out += ",\"leaves\":[";
  for (std::size_t i = 0; i < item.leaves.size(); ++i) {
    if (i) out += ',';
    append_leaf_json(out, item.leaves[i], files);
  }
  out += "]}";
}

// The text of _METADATA: everything but the user metadata, which has a file of its own.
inline std::string metadata_to_json(const CheckpointMetadata& m) {
  std::string out;
  std::size_t leaves = 0;
  for (const auto& i : m.items) leaves += i.leaves.size() + i.nodes.size();
  out.reserve(256 + 160 * leaves);
  // Always this version's number: the text is in this version's form, whichever version the
  // records were read from.
  out += "{\"format\":\"cairn\",\"format_version\":";
  append_json_int(out, cairn::format_version);
  out += ",\"library_version\":";
  append_json_string(out, m.library_version);
  out += ",\"created_unix_ms\":";
  append_json_int(out, m.created_unix_ms);
  out += ",\"created\":";
  append_json_string(out, m.created);
  out += ",\"data_files\":";
  append_json_strings(out, m.data_files);
  out += ",\"items\":[";
  const DataFileNumbers files(m.data_files);
  for (std::size_t i = 0; i < m.items.size(); ++i) {
    if (i) out += ',';
    append_item_json(out, m.items[i], &files);
  }
  out += "]}";
  return out;
}

// One item's records (how a rank sends its per-rank items to the primary).
inline std::string item_to_json(const ItemRecord& item) {
  std::string out;
  append_item_json(out, item, nullptr);
  return out;
}

}  // namespace detail
CAIRN_END_NAMESPACE
