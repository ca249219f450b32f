// SPDX-License-Identifier: Apache-2.0
// Cross-checks of a checkpoint's records read from disk (untrusted): unique keys, sane shapes,
// chunks inside their array and covering it exactly once, byte ranges that neither overflow
// nor overlap; each bounded in work, so that a hostile file cannot make them quadratic.
#pragma once

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "cairn/core/tuning.hpp"
#include "cairn/core/utf8.hpp"
#include "cairn/format/layout.hpp"
#include "cairn/format/metadata_json.hpp"
#include "cairn/format/records.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

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
  // Each chunk named with its file (data-<rank>-<n>.bin says which process wrote it) and its
  // box, so that ranks whose meshes or specs disagree can be told apart.
  auto overlap = [&](std::size_t a, std::size_t b) {
    auto chunk = [&](std::size_t i) {
      const ChunkRecord& c = l.chunks[i];
      return std::to_string(i) + " (in " + printable_prefix(c.file) + ", start " + to_string(c.start) + ", shape " +
             to_string(c.shape) + ")";
    };
    fail("chunks " + chunk(std::min(a, b)) + " and " + chunk(std::max(a, b)) + " overlap", key);
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
      auto at = [&](std::size_t k) { return cells.begin() + static_cast<std::ptrdiff_t>(k * rank); };
      return std::lexicographical_compare(at(a), at(a + 1), at(b), at(b + 1));
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

// Keys viewed where they lie (`keys`, which must outlive it), found by an open-addressing table
// of their positions, at most half full: a hash set of views, a node allocated per key, was a
// tenth of metadata() at 100,000 leaves, and of making an Orbax import's nodes at 10,000.
class KeyTable {
 public:
  explicit KeyTable(const std::vector<std::string_view>& keys) : keys_(keys) {
    std::size_t slots = 16;
    while (slots < 2 * keys.size()) slots *= 2;
    table_.assign(slots, SIZE_MAX);
    for (std::size_t i = 0; i < keys.size(); ++i) {
      std::size_t at = slot_of(keys[i]);
      for (; table_[at] != SIZE_MAX; at = next(at))
        if (keys[table_[at]] == keys[i]) break;
      if (table_[at] == SIZE_MAX) table_[at] = i;
      else if (!repeated_) repeated_ = &keys[i];
    }
  }
  // The first key equal to an earlier one, or null.
  const std::string_view* repeated() const { return repeated_; }
  bool contains(std::string_view k) const {
    for (std::size_t at = slot_of(k); table_[at] != SIZE_MAX; at = next(at))
      if (keys_[table_[at]] == k) return true;
    return false;
  }

 private:
  std::size_t slot_of(std::string_view k) const { return std::hash<std::string_view>{}(k) & (table_.size() - 1); }
  std::size_t next(std::size_t at) const { return (at + 1) & (table_.size() - 1); }
  const std::vector<std::string_view>& keys_;
  std::vector<std::size_t> table_;
  const std::string_view* repeated_ = nullptr;
};

// The first string in `keys` equal to an earlier one, or null.
inline const std::string_view* find_repeated(const std::vector<std::string_view>& keys) { return KeyTable(keys).repeated(); }

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
    if (!leaf_keys || leaf_key.size() != item.leaves.size()) {  // (own_leaf_keys: each item's own)
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
          if (c.blocks) {
            const std::uint64_t block = c.blocks->block_bytes;
            if (block == 0) fail("chunk " + std::to_string(i) + " has blocks of 0 bytes", key);
            const std::uint64_t want = c.nbytes / block + (c.nbytes % block != 0);
            if (c.blocks->crc32c.size() != want)
              fail("chunk " + std::to_string(i) + " lists " + std::to_string(c.blocks->crc32c.size()) +
                   " block checksums; its " + std::to_string(c.nbytes) + " bytes in blocks of " + std::to_string(block) +
                   " make " + std::to_string(want), key);
          }
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

}  // namespace detail
CAIRN_END_NAMESPACE
