// SPDX-License-Identifier: Apache-2.0
// The files of a checkpoint directory, and reading its metadata safely. Everything read here
// is untrusted: sizes are capped, the metadata's CRC is checked against the commit marker,
// the JSON reader bounds nesting and integer ranges, and every record is cross-checked.
//
//   <checkpoint>/_CHECKPOINT      commit marker, written last (format, version, CRCs of the two below)
//   <checkpoint>/_METADATA        tree structure, dtypes, shapes, chunk locations (JSON)
//   <checkpoint>/_USER_METADATA   the caller's JSON object
//   <checkpoint>/data-<process>-<n>.bin   array bytes
#pragma once

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <unordered_set>

#include "cairn/core/tuning.hpp"
#include "cairn/format/records.hpp"
#include "cairn/format/metadata_json.hpp"
#include "cairn/io/crc32c.hpp"
#include "cairn/store/store.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

inline constexpr const char* marker_file = commit_marker_name;
inline constexpr const char* metadata_file = "_METADATA";
inline constexpr const char* user_metadata_file = "_USER_METADATA";
inline constexpr std::uint64_t max_metadata_bytes = std::uint64_t{1} << 30;
inline constexpr std::uint64_t max_marker_bytes = std::uint64_t{1} << 20;
// Pairs of chunks compared for overlap in a leaf whose chunks are not a grid (cairn writes
// only grids): about a second of work at most.
inline constexpr std::uint64_t max_overlap_checks = std::uint64_t{1} << 26;

inline std::string data_file_name(int process, int index) {
  return "data-" + std::to_string(process) + "-" + std::to_string(index) + ".bin";
}

// Data file names come from untrusted metadata: only plain names, never a path out of the
// checkpoint directory.
inline bool is_plain_file_name(const std::string& name) {
  if (name.empty() || name.size() > 255 || name[0] == '.') return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
      return false;
  return true;
}

struct FileDigest {
  std::uint64_t bytes = 0;
  std::uint32_t crc32c = 0;
};

inline Json marker_json(const FileDigest& metadata, const FileDigest& user) {
  auto digest = [](const FileDigest& d) {
    return Json::object({{"bytes", static_cast<std::int64_t>(d.bytes)}, {"crc32c", static_cast<std::int64_t>(d.crc32c)}});
  };
  return Json::object({{"format", "cairn"},
                       {"format_version", cairn::format_version},
                       {"files", Json::object({{metadata_file, digest(metadata)}, {user_metadata_file, digest(user)}})}});
}

// Whether the blobs under `key` are a committed checkpoint (its marker is a blob; what the
// marker holds is checked on read).
inline bool is_committed_checkpoint(const Store& store, const std::string& key) {
  return store.is_blob(join_key(key, marker_file));
}

// The nearest key above `key` that is a committed checkpoint, or "" when none is. Nothing may
// be saved inside a checkpoint: its directory is its own, and replacing or deleting it (an
// overwrite, a Checkpointer's retention) takes everything under it along.
inline std::string enclosing_checkpoint(const Store& store, const std::string& key) {
  for (std::size_t end = key.rfind('/'); end != std::string::npos && end > 0; end = key.rfind('/', end - 1)) {
    const std::string above = key.substr(0, end);
    if (is_committed_checkpoint(store, above)) return above;
  }
  return {};
}

// Throws invalid_argument when `key` lies inside a committed checkpoint (what saves and exports
// check before they write anything).
inline void refuse_inside_checkpoint(const Store& store, const std::string& key) {
  const std::string outer = enclosing_checkpoint(store, key);
  if (!outer.empty())
    throw Error(ErrorKind::invalid_argument, "this path is inside the checkpoint " + store.describe(outer) +
                ", whose directory is its own: replacing or deleting that checkpoint would delete this one with it. "
                "Save beside it instead", store.describe(key));
}

// The step a run of digits names: leading zeros are padding of any width (step_digits), and
// digits beyond int64 name no step of any scheme.
inline bool parse_step_digits(std::string_view digits, std::int64_t& step) {
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos) return false;
  return parse_int64(digits.substr(std::min(digits.find_first_not_of('0'), digits.size() - 1)), step);
}

// A name that some Checkpointer's scheme gives a step: digits with any padding, with or without
// "step_" (Checkpointer::looks_like_step).
inline bool looks_like_step_name(std::string_view name) {
  std::int64_t step = 0;
  return parse_step_digits(name.substr(name.rfind("step_", 0) == 0 ? 5 : 0), step);
}

// When `key` is not a checkpoint but a directory of checkpoints (a Checkpointer's root, or any
// other), a message saying so and how to load one; "" otherwise.
inline std::string describe_checkpointer_root(const Store& store, const std::string& key) {
  std::vector<std::string> steps;
  for (const auto& e : store.list(key))
    if (e.is_prefix && !store.is_internal_name(e.name) && is_committed_checkpoint(store, join_key(key, e.name)))
      steps.push_back(e.name);
  if (steps.empty()) return {};
  std::sort(steps.begin(), steps.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;  // numeric order for plain step numbers
  });
  std::string list;
  for (std::size_t i = 0; i < steps.size() && i < 8; ++i) list += (i ? ", " : "") + steps[i];
  if (steps.size() > 8) list += ", ... (" + std::to_string(steps.size()) + " in all)";
  const std::string one = store.describe(join_key(key, steps.back()));
  // The Checkpointer is suggested only where the names are steps: it would find no others.
  if (!std::all_of(steps.begin(), steps.end(), [](const std::string& s) { return looks_like_step_name(s); }))
    return "this is a directory of checkpoints (" + list + "), not one checkpoint: load one of them, such as " + one;
  return "this is a directory of checkpoints (a Checkpointer root holding " + list +
         "), not one checkpoint: load one of them, such as " + one + ", or the latest with cairn::Checkpointer(\"" +
         store.describe(key) + "\").load(target)";
}

// Checks a checkpoint's commit marker and returns the digests it records.
inline std::map<std::string, FileDigest> read_marker(const Store& store, const std::string& key) {
  const std::string dir = store.describe(key);
  const std::string marker_key = join_key(key, marker_file);
  const std::string path = store.describe(marker_key);
  if (!store.exists(marker_key)) {
    if (!store.exists(key)) throw Error(ErrorKind::not_found, "no checkpoint at this path (nothing is there)", dir);
    if (store.is_blob(key)) throw Error(ErrorKind::not_found, "this path is a file, not a checkpoint directory", dir);
    if (std::string root = describe_checkpointer_root(store, key); !root.empty()) throw Error(ErrorKind::not_found, root, dir);
    throw Error(ErrorKind::incomplete, std::string("no ") + marker_file +
                " file: not a cairn checkpoint, or a save that did not commit", dir);
  }
  Json marker = Json::parse(read_blob(store, marker_key, max_marker_bytes), path);
  try {
    if (!marker.is_object() || !marker.contains("format") || marker.at("format").as_string() != "cairn")
      throw Error(ErrorKind::corrupt, "not a cairn commit marker", path);
    const std::int64_t version = marker.at("format_version").as_int();
    if (version < 1 || version > cairn::format_version)
      throw Error(ErrorKind::unsupported_version, "format version " + std::to_string(version) +
                  " (this cairn reads up to " + std::to_string(cairn::format_version) + ")", path);
    std::map<std::string, FileDigest> out;
    for (const auto& [name, d] : marker.at("files").items()) {
      const std::int64_t bytes = d.at("bytes").as_int(), crc = d.at("crc32c").as_int();
      if (bytes < 0 || crc < 0 || crc > 0xffffffffLL) throw Error(ErrorKind::corrupt, "bad digest for " + name, path);
      out[name] = {static_cast<std::uint64_t>(bytes), static_cast<std::uint32_t>(crc)};
    }
    return out;
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::corrupt || e.kind() == ErrorKind::unsupported_version) throw e.with_file(path);
    throw Error(ErrorKind::corrupt, "malformed commit marker: " + e.message(), path);
  }
}

// Reads a file named in the marker and checks its size and CRC32C.
inline std::string read_verified(const Store& store, const std::string& key,
                                 const std::map<std::string, FileDigest>& digests, const char* name, std::uint64_t limit) {
  const std::string blob = join_key(key, name);
  const std::string path = store.describe(blob);
  auto it = digests.find(name);
  if (it == digests.end()) throw Error(ErrorKind::corrupt, std::string("commit marker does not list ") + name, store.describe(key));
  std::string content = read_blob(store, blob, limit);
  if (content.size() != it->second.bytes)
    throw Error(ErrorKind::corrupt, "file is " + std::to_string(content.size()) + " bytes, the commit marker says " +
                std::to_string(it->second.bytes), path);
  const std::uint32_t crc = crc32c(content.data(), content.size());
  if (crc != it->second.crc32c)
    throw Error(ErrorKind::corrupt, "checksum mismatch (CRC32C " + std::to_string(crc) + ", the commit marker says " +
                std::to_string(it->second.crc32c) + ")", path);
  return content;
}

inline bool boxes_overlap(const ChunkRecord& a, const ChunkRecord& b) {
  for (std::size_t d = 0; d < a.start.size(); ++d) {
    if (a.start[d] + a.shape[d] <= b.start[d] || b.start[d] + b.shape[d] <= a.start[d]) return false;
  }
  return true;
}

// No two non-empty chunk boxes of a leaf share an element. `fail` throws.
//
// Every layout cairn writes is a grid: the cuts of each dimension are the chunks' starts and
// ends, and each chunk is exactly one cell of that grid. Then two chunks overlap exactly when
// they are the same cell, found by sorting the cells: O(n log n) for any number of chunks
// (40,000 column strips took 12 s with a sweep). Any other layout goes through a sweep over
// chunks sorted by their start in dimension 0, bounded in work so a hostile file cannot
// make it quadratic.
template <class Fail>
void check_no_overlap(const LeafRecord& l, const std::string& key, Fail&& fail) {
  if (l.chunks.size() < 2) return;  // most leaves: nothing to compare
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < l.chunks.size(); ++i)
    if (element_count(l.chunks[i].shape) > 0) order.push_back(i);
  auto overlap = [&](std::size_t a, std::size_t b) {
    fail("chunks " + std::to_string(std::min(a, b)) + " and " + std::to_string(std::max(a, b)) + " overlap", key);
  };
  if (l.shape.empty()) {
    if (order.size() > 1) overlap(order[0], order[1]);
    return;
  }
  const std::size_t rank = l.shape.size();
  std::vector<std::vector<std::int64_t>> cuts(rank);
  for (std::size_t i : order)
    for (std::size_t d = 0; d < rank; ++d) {
      cuts[d].push_back(l.chunks[i].start[d]);
      cuts[d].push_back(l.chunks[i].start[d] + l.chunks[i].shape[d]);
    }
  for (auto& c : cuts) {
    std::sort(c.begin(), c.end());
    c.erase(std::unique(c.begin(), c.end()), c.end());
  }
  std::vector<std::size_t> cells(order.size() * rank);
  bool grid = true;
  for (std::size_t k = 0; k < order.size() && grid; ++k) {
    const ChunkRecord& c = l.chunks[order[k]];
    for (std::size_t d = 0; d < rank; ++d) {
      const auto first = std::lower_bound(cuts[d].begin(), cuts[d].end(), c.start[d]);
      if (first + 1 == cuts[d].end() || *(first + 1) != c.start[d] + c.shape[d]) { grid = false; break; }
      cells[k * rank + d] = static_cast<std::size_t>(first - cuts[d].begin());
    }
  }
  if (grid) {
    std::vector<std::size_t> by_cell(order.size());
    for (std::size_t k = 0; k < by_cell.size(); ++k) by_cell[k] = k;
    auto cell_less = [&](std::size_t a, std::size_t b) {
      return std::lexicographical_compare(cells.begin() + a * rank, cells.begin() + (a + 1) * rank,
                                          cells.begin() + b * rank, cells.begin() + (b + 1) * rank);
    };
    std::sort(by_cell.begin(), by_cell.end(), cell_less);
    for (std::size_t k = 1; k < by_cell.size(); ++k)
      if (!cell_less(by_cell[k - 1], by_cell[k])) overlap(order[by_cell[k - 1]], order[by_cell[k]]);
    return;
  }
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return l.chunks[a].start[0] < l.chunks[b].start[0]; });
  std::uint64_t work = 0;
  for (std::size_t a = 0; a < order.size(); ++a) {
    const ChunkRecord& x = l.chunks[order[a]];
    for (std::size_t b = a + 1; b < order.size() && l.chunks[order[b]].start[0] < x.start[0] + x.shape[0]; ++b) {
      if (++work > max_overlap_checks)
        fail("the " + std::to_string(order.size()) + " chunks do not form a grid and are too many to check for "
             "overlap", key);
      if (boxes_overlap(x, l.chunks[order[b]])) overlap(order[a], order[b]);
    }
  }
}

// The first string in `keys` equal to an earlier one, or null. An open-addressing table of
// positions: a hash set of views, a node allocated per key, was a tenth of metadata() at
// 100,000 leaves.
inline const std::string_view* find_repeated(const std::vector<std::string_view>& keys) {
  std::size_t slots = 16;
  while (slots < 2 * keys.size()) slots *= 2;
  std::vector<std::size_t> table(slots, SIZE_MAX);
  const std::hash<std::string_view> hash;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    std::size_t at = hash(keys[i]) & (slots - 1);
    for (; table[at] != SIZE_MAX; at = (at + 1) & (slots - 1))
      if (keys[table[at]] == keys[i]) return &keys[i];
    table[at] = i;
  }
  return nullptr;
}

// Cross-checks of the records against each other: unique keys, sane shapes, chunks inside
// their array and covering it exactly once, byte ranges that neither overflow nor overlap.
// `path` names the metadata file in errors.
// `leaf_keys`: the items' leaves' printed keys as the parser printed them (metadata_json.hpp),
// used instead of printing them again; or empty, to be filled here. A load's index then takes
// them too.
inline void validate_metadata(const CheckpointMetadata& m, const std::string& path, PrintedKeys* leaf_keys = nullptr) {
  auto fail = [&](const std::string& why, const std::string& key = {}) {
    throw Error(ErrorKind::corrupt, why, path, key);
  };
  std::unordered_set<std::string> files;
  for (const auto& f : m.data_files) {
    if (!is_plain_file_name(f)) fail("data file name '" + f + "' is not a plain file name");
    if (!files.insert(f).second) fail("data file '" + f + "' listed twice");
  }
  std::map<std::string, std::vector<std::pair<std::uint64_t, std::uint64_t>>> ranges;
  const std::string* last_file = nullptr;
  std::vector<std::pair<std::uint64_t, std::uint64_t>>* last_ranges = nullptr;
  std::unordered_set<std::string> item_names;
  if (leaf_keys && leaf_keys->size() != m.items.size()) leaf_keys->assign(m.items.size(), {});
  std::vector<std::string> node_keys, own_leaf_keys;
  std::vector<std::string_view> printed;  // each key once, nodes then leaves
  for (std::size_t item_at = 0; item_at < m.items.size(); ++item_at) {
    const ItemRecord& item = m.items[item_at];
    if (item.name.empty() || !item_names.insert(item.name).second) fail("empty or repeated item name '" + item.name + "'");
    node_keys.clear();
    for (const auto& n : item.nodes) node_keys.push_back(n.path.str());
    std::vector<std::string>& leaf_key = leaf_keys ? (*leaf_keys)[item_at] : own_leaf_keys;
    if (leaf_key.size() != item.leaves.size()) {
      leaf_key.clear();
      leaf_key.reserve(item.leaves.size());
      for (const auto& l : item.leaves) leaf_key.push_back(l.key());
    }
    printed.clear();
    printed.reserve(node_keys.size() + leaf_key.size());
    printed.insert(printed.end(), node_keys.begin(), node_keys.end());
    printed.insert(printed.end(), leaf_key.begin(), leaf_key.end());
    if (const std::string_view* twice = find_repeated(printed)) fail("key path listed twice", std::string(*twice));
    for (std::size_t leaf = 0; leaf < item.leaves.size(); ++leaf) {
      const LeafRecord& l = item.leaves[leaf];
      const std::string& key = leaf_key[leaf];
      try {
        const std::uint64_t count = element_count(l.shape);
        (void)byte_count(l.shape, dtype_size(l.dtype));
        if (l.chunks.empty() && count > 0) fail("leaf has no chunks", key);
        std::uint64_t covered = 0;
        for (std::size_t i = 0; i < l.chunks.size(); ++i) {
          const auto& c = l.chunks[i];
          if (c.start.size() != l.shape.size() || c.shape.size() != l.shape.size())
            fail("chunk " + std::to_string(i) + " has rank " +
                 std::to_string(c.start.size() != l.shape.size() ? c.start.size() : c.shape.size()) + ", the array " +
                 std::to_string(l.shape.size()), key);
          if (!box_inside(c.start, c.shape, l.shape))
            fail("chunk " + std::to_string(i) + " box (start " + to_string(c.start) + ", shape " + to_string(c.shape) +
                 ") lies outside the array shape " + to_string(l.shape), key);
          if (c.nbytes != byte_count(c.shape, dtype_size(l.dtype)))
            fail("chunk " + std::to_string(i) + " says " + std::to_string(c.nbytes) + " bytes, its box holds " +
                 std::to_string(byte_count(c.shape, dtype_size(l.dtype))), key);
          // Consecutive chunks usually name the same file: look it up once per run.
          if (!last_ranges || c.file != *last_file) {
            if (!files.count(c.file)) fail("chunk " + std::to_string(i) + " names unknown data file '" + c.file + "'", key);
            last_file = &c.file;
            last_ranges = &ranges[c.file];
          }
          std::uint64_t end = 0;
          if (!checked_add(c.offset, c.nbytes, end)) fail("chunk " + std::to_string(i) + " offset + size overflows", key);
          if (c.nbytes) last_ranges->emplace_back(c.offset, end);
          covered += element_count(c.shape);
        }
        check_no_overlap(l, key, fail);
        if (covered != count)
          fail("chunks cover " + std::to_string(covered) + " of the array's " + std::to_string(count) +
               " elements (a chunk is missing)", key);
      } catch (const Error& e) {
        throw Error(e.kind(), e.message(), path, key);
      }
    }
  }
  for (auto& [file, rs] : ranges) {
    if (!std::is_sorted(rs.begin(), rs.end())) std::sort(rs.begin(), rs.end());  // as written, usually
    for (std::size_t i = 1; i < rs.size(); ++i)
      if (rs[i].first < rs[i - 1].second)
        fail("two chunks share bytes " + std::to_string(rs[i].first) + ".." + std::to_string(rs[i - 1].second) +
             " of data file '" + file + "'");
  }
}

// A committed checkpoint's _METADATA and _USER_METADATA, verified against the commit marker
// but not parsed: what a primary reads and broadcasts to the other ranks.
struct MetadataText {
  std::string metadata, user;
  // Which commit this is: the marker's sizes and CRCs of the two files (free: the marker
  // names them). A checkpoint replaced by an overwrite has another, unless identical.
  std::uint64_t commit = 0;
};
// `commit_seen`, when given, is set as soon as the marker is read (before the files it names),
// so that a caller whose read of those files fails knows which commit it had opened.
inline MetadataText read_metadata_text(const Store& store, const std::string& key, std::uint64_t* commit_seen = nullptr) {
  auto digests = read_marker(store, key);
  MetadataText t;
  for (const auto& [name, d] : digests)
    t.commit = (t.commit * 0x100000001b3ull) ^ (d.bytes * 0x9e3779b97f4a7c15ull) ^ d.crc32c;
  if (commit_seen) *commit_seen = t.commit;
  t.metadata = read_verified(store, key, digests, metadata_file, max_metadata_bytes);
  t.user = read_verified(store, key, digests, user_metadata_file, max_metadata_bytes);
  return t;
}

// Parses and validates the metadata of the checkpoint at `key` (named in errors).
inline CheckpointMetadata parse_metadata(const Store& store, const std::string& key, const MetadataText& t,
                                         PrintedKeys* leaf_keys = nullptr) {
  const std::string path = store.describe(join_key(key, metadata_file));
  CheckpointMetadata m = metadata_from_json(t.metadata, path, leaf_keys);
  validate_metadata(m, path, leaf_keys);
  m.user_metadata = Json::parse(t.user, store.describe(join_key(key, user_metadata_file)));
  return m;
}

// Reads, verifies and validates a committed checkpoint's metadata.
inline CheckpointMetadata read_metadata(const Store& store, const std::string& key_in, PrintedKeys* leaf_keys = nullptr) {
  const std::string key = normalize_key(key_in);
  return parse_metadata(store, key, read_metadata_text(store, key), leaf_keys);
}

}  // namespace detail
CAIRN_END_NAMESPACE
