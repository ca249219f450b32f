// Planning a load: which stored leaf goes into which leaf of the target, what is missing,
// unexpected or skipped, and how each target leaf prepares its buffer. The plan is made
// before any data is read, so that a strict mismatch names every key at once.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "cairn/checkpoint/options.hpp"
#include "cairn/format/records.hpp"
#include "cairn/store/store.hpp"  // join_key
#include "cairn/tree/walk.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// Stored keys of one item, indexed by their printed path.
class StoredIndex {
 public:
  explicit StoredIndex(const ItemRecord& item) : item_(item) {
    for (const auto& l : item.leaves) leaves_.emplace(l.key(), &l);
    auto add_child = [&](const KeyPath& p) {
      if (p.empty()) return;
      KeyPath parent = p;
      parent.pop_back();
      children_[parent.str()].push_back(p.back());
    };
    for (const auto& n : item.nodes) { nodes_.emplace(n.path.str(), &n); add_child(n.path); }
    for (const auto& l : item.leaves) add_child(l.path);
  }
  const LeafRecord* leaf(const std::string& key) const {
    auto it = leaves_.find(key);
    return it == leaves_.end() ? nullptr : it->second;
  }
  bool has_node(const std::string& key) const { return nodes_.count(key) != 0; }
  const std::vector<KeyEntry>* children(const std::string& key) const {
    auto it = children_.find(key);
    return it == children_.end() ? nullptr : &it->second;
  }
  const ItemRecord& item() const { return item_; }

 private:
  const ItemRecord& item_;
  std::unordered_map<std::string, const LeafRecord*> leaves_;
  std::unordered_map<std::string, const NodeRecord*> nodes_;
  std::unordered_map<std::string, std::vector<KeyEntry>> children_;
};

// A printed key path in canonical form (segments re-escaped), so "a/b/" and "a/b" agree.
inline std::string canonical_key(const std::string& key) {
  std::string out;
  for (const auto& seg : split_key_path(key)) {
    if (seg.empty()) continue;
    if (!out.empty()) out += '/';
    out += escape_key_segment(seg);
  }
  return out;
}

struct PlannedLeaf {
  std::string key;            // in the target
  const LeafRecord* stored;
  std::function<LeafBuffer(const StoredLeafInfo&)> prepare;
};

struct LoadPlan {
  std::vector<PlannedLeaf> leaves;
  LoadReport report;
};

template <class T>
LoadPlan plan_load(T& target, const StoredIndex& index, const LoadOptions& options) {
  LoadPlan plan;
  const std::string prefix = canonical_key(options.subtree);
  if (!prefix.empty() && !index.leaf(prefix) && !index.has_node(prefix))
    throw Error(ErrorKind::not_found, "the checkpoint has no subtree '" + prefix + "'", {}, prefix);
  std::unordered_map<std::string, bool> visited;
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
        const std::string stored_key = join_key(prefix, key);
        const LeafRecord* stored = index.leaf(stored_key);
        if (!stored) { plan.report.missing.push_back(key); return; }
        visited[stored_key] = true;
        plan.leaves.push_back({key, stored, [&value](const StoredLeafInfo& info) {
                                 return leaf_traits<L>::prepare(value, info);
                               }});
      });
  for (const auto& l : index.item().leaves) {
    const std::string key = l.key();
    if (!key_path_has_prefix(key, prefix) || visited.count(key)) continue;
    std::string rel = prefix.empty() ? key : key.substr(std::min(key.size(), prefix.size() + 1));
    if (skipped(rel)) continue;  // skipped target keys are not "unexpected" either
    plan.report.unexpected.push_back(rel);
  }
  return plan;
}

}  // namespace detail
CAIRN_END_NAMESPACE
