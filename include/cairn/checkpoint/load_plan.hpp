// Planning a load: which stored leaf goes into which leaf of the target, what is missing,
// unexpected or skipped, and how each target leaf prepares its buffer. The plan is made
// before any data is read, so that a strict mismatch names every key at once.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cairn/checkpoint/options.hpp"
#include "cairn/format/records.hpp"
#include "cairn/store/store.hpp"  // join_key
#include "cairn/tree/walk.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// Stored keys of one item, indexed by their printed path. Each key is printed once here:
// with 10,000 leaves, printing and hashing key paths was a fifth of a load.
class StoredIndex {
 public:
  explicit StoredIndex(const ItemRecord& item) : item_(item) {
    keys_.reserve(item.leaves.size());
    for (const auto& l : item.leaves) keys_.push_back(l.key());
    node_keys_.reserve(item.nodes.size());
    for (const auto& n : item.nodes) node_keys_.push_back(n.path.str());
    leaves_.reserve(keys_.size());
    for (std::size_t i = 0; i < keys_.size(); ++i) leaves_.emplace(keys_[i], &item.leaves[i]);
    // A parent's printed path is its child's up to the last '/' (a '/' inside a segment is
    // escaped), so no key path is copied or printed again here. Two passes: the children are
    // counted first, so that each list is allocated once at its size (a map of 100,000 leaves
    // grown by doubling held 1.5 MB more at the load's peak).
    auto parent = [](const std::string& key) {
      const std::size_t slash = key.rfind('/');
      return std::string_view(key).substr(0, slash == std::string::npos ? 0 : slash);
    };
    for (int pass = 0; pass < 2; ++pass) {
      auto add_child = [&](const std::string& key, const KeyPath& p) {
        if (p.empty()) return;
        auto& list = children_[parent(key)];
        if (pass == 0) list.count += 1;
        else list.keys.push_back(p.back());
      };
      for (std::size_t i = 0; i < node_keys_.size(); ++i) add_child(node_keys_[i], item.nodes[i].path);
      for (std::size_t i = 0; i < keys_.size(); ++i) add_child(keys_[i], item.leaves[i].path);
      if (pass == 0)
        for (auto& [key, list] : children_) list.keys.reserve(list.count);
    }
    for (std::size_t i = 0; i < node_keys_.size(); ++i) nodes_.emplace(node_keys_[i], &item.nodes[i]);
  }
  StoredIndex(const StoredIndex&) = delete;  // the maps view keys_ and node_keys_
  StoredIndex& operator=(const StoredIndex&) = delete;

  const LeafRecord* leaf(std::string_view key) const {
    auto it = leaves_.find(key);
    return it == leaves_.end() ? nullptr : it->second;
  }
  bool has_node(std::string_view key) const { return nodes_.count(key) != 0; }
  const std::vector<KeyEntry>* children(std::string_view key) const {
    auto it = children_.find(key);
    return it == children_.end() ? nullptr : &it->second.keys;
  }
  const ItemRecord& item() const { return item_; }
  // The printed key of item().leaves[i], and the position of a stored leaf there.
  const std::string& key(std::size_t i) const { return keys_[i]; }
  std::size_t position(const LeafRecord* leaf) const { return static_cast<std::size_t>(leaf - item_.leaves.data()); }

 private:
  const ItemRecord& item_;
  std::vector<std::string> keys_, node_keys_;
  std::unordered_map<std::string_view, const LeafRecord*> leaves_;
  std::unordered_map<std::string_view, const NodeRecord*> nodes_;
  struct Children {
    std::size_t count = 0;
    std::vector<KeyEntry> keys;
  };
  std::unordered_map<std::string_view, Children> children_;
};

struct PlannedLeaf {
  std::string key;            // in the target
  const LeafRecord* stored;
  // The target leaf and its type's prepare. A plain function pointer: a std::function per leaf
  // type cost every file that loads its wrapper classes (docs/compile-time.md), and 16 bytes
  // more per leaf.
  void* target;
  LeafBuffer (*prepare_leaf)(void* target, const StoredLeafInfo& info);
  LeafBuffer prepare(const StoredLeafInfo& info) const { return prepare_leaf(target, info); }
};

template <class L>
LeafBuffer prepare_leaf_of(void* target, const StoredLeafInfo& info) {
  return leaf_traits<L>::prepare(*static_cast<L*>(target), info);
}

struct LoadPlan {
  std::vector<PlannedLeaf> leaves;
  LoadReport report;
};

template <class T>
LoadPlan plan_load(T& target, const StoredIndex& index, const LoadOptions& options) {
  LoadPlan plan;
  plan.leaves.reserve(index.item().leaves.size());  // usually each stored leaf once: no regrowth
  const std::string prefix = canonical_key(options.subtree);
  if (!prefix.empty() && !index.leaf(prefix) && !index.has_node(prefix))
    throw Error(ErrorKind::not_found, "the checkpoint has no subtree '" + prefix + "'", {}, prefix);
  std::vector<char> visited(index.item().leaves.size(), 0);  // by position in the item
  auto skipped = [&](const std::string& key) {
    for (const auto& g : options.skip)
      if (glob_matches(g, key)) return true;
    return false;
  };
  walk_tree(
      target,
      [&](auto& value, const KeyPath& p, NodeKind) {
        using U = std::remove_cvref_t<decltype(value)>;
        // Containers whose children come from the checkpoint take the stored children now,
        // before their children are visited (so references taken below stay valid).
        if constexpr (requires(U& u, const StoredChildren& c) { node_traits<U>::prepare(u, c); }) {
          const std::string key = p.str();
          if (key.empty() || !skipped(key)) {
            const std::string stored = join_key(prefix, key);
            static const std::vector<KeyEntry> no_children;
            const auto* children = index.children(stored);
            if (children || index.has_node(stored)) {
              try {
                node_traits<U>::prepare(value, StoredChildren{children ? *children : no_children, !options.allow_missing});
              } catch (const Error& e) {
                throw e.with_key(stored);
              }
            }
          }
        }
        return true;
      },
      [&](auto& value, const KeyPath& p) {
        using L = std::remove_cvref_t<decltype(value)>;
        const std::string key = p.str();
        if (skipped(key)) { plan.report.skipped.push_back(key); return; }
        std::string joined;
        const LeafRecord* stored = index.leaf(prefix.empty() ? key : (joined = join_key(prefix, key)));
        if (!stored) { plan.report.missing.push_back(key); return; }
        visited[index.position(stored)] = 1;
        plan.leaves.push_back({key, stored, static_cast<void*>(std::addressof(value)), &prepare_leaf_of<L>});
      });
  for (std::size_t i = 0; i < visited.size(); ++i) {
    if (visited[i]) continue;
    const std::string& key = index.key(i);
    if (!key_path_has_prefix(key, prefix)) continue;
    std::string rel = prefix.empty() ? key : key.substr(std::min(key.size(), prefix.size() + 1));
    if (skipped(rel)) continue;  // skipped target keys are not "unexpected" either
    plan.report.unexpected.push_back(rel);
  }
  return plan;
}

}  // namespace detail
CAIRN_END_NAMESPACE
