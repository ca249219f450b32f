// SPDX-License-Identifier: Apache-2.0
// The stored keys of one item, indexed by their printed path: what a load's planner looks
// stored leaves and containers up in. A runtime header: the light headers only declare
// StoredIndex (checkpoint/load_plan.hpp), so that a file that loads does not instantiate its
// maps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cairn/core/prefetch.hpp"
#include "cairn/format/records.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// Stored keys of one item, indexed by their printed path. Each key is printed once here:
// with 10,000 leaves, printing and hashing key paths was a fifth of a load. The maps are made
// on first use: a target walked in the order its checkpoint was saved in (the usual load)
// finds each of its leaves at the position after the last one (`leaf(key, next)`), and at
// 100,000 leaves hashing every key and looking each up in a map of that size (a few cache
// misses per leaf) was a fifth of the load again. Not for use by two threads at once.
class StoredIndex {
 public:
  // `printed`: the leaves' keys as the metadata parser printed them (PrintedKeys), if at hand.
  explicit StoredIndex(const ItemRecord& item, std::vector<std::string> printed = {}) : item_(item) {
    if (printed.size() == item.leaves.size()) {
      keys_ = std::move(printed);
      return;
    }
    keys_.reserve(item.leaves.size());
    for (const auto& l : item.leaves) keys_.push_back(l.key());
  }
  StoredIndex(const StoredIndex&) = delete;  // the maps view keys_ and node_keys_
  StoredIndex& operator=(const StoredIndex&) = delete;

  const LeafRecord* leaf(std::string_view key) const {
    if (leaves_.empty() && !keys_.empty()) {
      leaves_.reserve(keys_.size());
      for (std::size_t i = 0; i < keys_.size(); ++i) leaves_.emplace(keys_[i], &item_.leaves[i]);
    }
    auto it = leaves_.find(key);
    return it == leaves_.end() ? nullptr : it->second;
  }
  // The same, trying the stored leaf at position `next` first; `next` moves past the leaf
  // found.
  const LeafRecord* leaf(std::string_view key, std::size_t& next) const {
    const LeafRecord* found = next < keys_.size() && keys_[next] == key ? &item_.leaves[next] : leaf(key);
    if (found) next = position(found) + 1;
    return found;
  }
  bool has_node(std::string_view key) const { return nodes().count(key) != 0; }
  bool has_children(std::string_view key) const { return find_children(key) != nullptr; }
  const std::vector<KeyEntry>* children(std::string_view key) const {
    Children* c = find_children(key);
    if (!c) return nullptr;
    if (c->indices && c->keys.empty()) {  // made now, for the one container that asks
      c->keys.reserve(c->count);
      for (std::size_t i = 0; i < c->count; ++i) c->keys.push_back(KeyEntry::index(static_cast<std::int64_t>(i)));
    }
    return &c->keys;
  }
  // n where the stored children of `key` are the indices 0..n-1, in order (a sequence as
  // cairn saves it); else, or with none, nothing.
  std::optional<std::size_t> index_children(std::string_view key) const {
    const Children* c = find_children(key);
    if (!c || !c->indices) return std::nullopt;
    return c->count;
  }
  const ItemRecord& item() const { return item_; }
  // The printed key of item().leaves[i], and the position of a stored leaf there.
  std::string_view key(std::size_t i) const { return keys_[i]; }
  std::size_t position(const LeafRecord* leaf) const { return static_cast<std::size_t>(leaf - item_.leaves.data()); }

 private:
  struct Children;
  Children* find_children(std::string_view key) const {
    if (!children_made_) make_children();
    auto it = children_.find(key);
    return it == children_.end() ? nullptr : &it->second;
  }
  const std::unordered_map<std::string_view, const NodeRecord*>& nodes() const {
    if (node_keys_.size() != item_.nodes.size()) {
      node_keys_.reserve(item_.nodes.size());
      for (const auto& n : item_.nodes) node_keys_.push_back(n.path.str());
      for (std::size_t i = 0; i < node_keys_.size(); ++i) nodes_.emplace(node_keys_[i], &item_.nodes[i]);
    }
    return nodes_;
  }
  void make_children() const {
    nodes();  // node_keys_
    // A parent's printed path is its child's up to the last '/' (a '/' inside a segment is
    // escaped), so no key path is copied or printed again here. Two passes: the children are
    // counted first, so that each list is allocated once at its size (a map of 100,000 leaves
    // grown by doubling held 1.5 MB more at the load's peak). At 100,000 leaves the records are
    // some 26 MB, and waiting on each one in both passes cost 3.5 times as much per leaf as at
    // 10,000 (perf): so the counting pass reads only the printed keys, the second asks for the
    // records ahead (core/prefetch.hpp), and siblings, stored one after another, find their
    // parent's list without a lookup. Together 7 -> 3.3 ms of a 100,000-leaf load.
    // A list of the indices 0..n-1 in order (a sequence's children, the most numerous) is kept
    // as its count, its KeyEntries made only if a container asks for them (children()): a
    // sequence is resized from the count (index_children): 10,000 entries of 48 bytes were
    // 480 KB of new memory a load.
    auto parent = [](std::string_view key) {
      const std::size_t slash = key.rfind('/');
      return key.substr(0, slash == std::string_view::npos ? 0 : slash);
    };
    for (int pass = 0; pass < 2; ++pass) {
      std::string_view last_parent;
      Children* last = nullptr;
      // The root has the printed path "", and so has a one-entry path of an empty string key:
      // only there does the counting pass look at the record.
      auto add_child = [&](std::string_view key, const KeyPath& p) {
        if (key.empty() && p.empty()) return;
        const std::string_view par = parent(key);
        if (!last || par != last_parent) {
          last = &children_[par];
          last_parent = par;
        }
        if (pass == 0) {
          last->count += 1;
          return;
        }
        const KeyEntry& e = p.back();
        if (last->indices) {
          if (e.kind == KeyEntry::Kind::index && e.number == static_cast<std::int64_t>(last->seen)) {
            ++last->seen;
            return;
          }
          last->indices = false;  // not 0..n-1 in order: the list is made, as far as it went
          last->keys.reserve(last->count);
          for (std::size_t j = 0; j < last->seen; ++j) last->keys.push_back(KeyEntry::index(static_cast<std::int64_t>(j)));
        }
        last->keys.push_back(e);
      };
      for (std::size_t i = 0; i < node_keys_.size(); ++i) add_child(node_keys_[i], item_.nodes[i].path);
      for (std::size_t i = 0; i < keys_.size(); ++i) {
        if (pass == 1 && i + 2 * prefetch_distance < keys_.size()) {  // core/prefetch.hpp
          prefetch(item_.leaves[i + 2 * prefetch_distance].path);
          const KeyPath& ahead = item_.leaves[i + prefetch_distance / 2].path;
          if (!ahead.empty()) prefetch(ahead.back());
        }
        add_child(keys_[i], item_.leaves[i].path);
      }
    }
    children_made_ = true;
  }

  const ItemRecord& item_;
  std::vector<std::string> keys_;
  mutable std::vector<std::string> node_keys_;
  mutable std::unordered_map<std::string_view, const LeafRecord*> leaves_;
  mutable std::unordered_map<std::string_view, const NodeRecord*> nodes_;
  struct Children {
    std::size_t count = 0;
    bool indices = true;    // the children are KeyEntry::index(0), (1), ... (count of them)
    std::size_t seen = 0;   // of them, while the list is made
    std::vector<KeyEntry> keys;  // the children, unless `indices` (then made on request)
  };
  mutable std::unordered_map<std::string_view, Children> children_;
  mutable bool children_made_ = false;
};

}  // namespace detail
CAIRN_END_NAMESPACE
