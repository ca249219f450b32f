// SPDX-License-Identifier: Apache-2.0
// Planning a load: which stored leaf goes into which leaf of the target, what is missing,
// unexpected or skipped, and how each target leaf prepares its buffer. The plan is made
// before any data is read, so that a strict mismatch names every key at once.
#pragma once

#include <algorithm>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cairn/checkpoint/options.hpp"
#include "cairn/format/records.hpp"
#include "cairn/store/store.hpp"  // join_key
#include "cairn/tree/walk.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// The stored keys of one item, indexed by their printed path (checkpoint/stored_index.hpp, a
// runtime header): the templates of a load only pass it on, so a file that loads does not
// compile its maps.
class StoredIndex;

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
  // Records the planner made for leaves stored in pieces (LoadPlanner::leaf, `packed`); a
  // deque, so that the leaves' pointers to them survive its growth and its move.
  std::deque<LeafRecord> joined;
};

// A target leaf that may be stored as a sequence of leaves: a std::vector of packed elements
// (tree/traits.hpp), which checkpoints before 2026-11-30 held as one leaf per element.
struct PackedTarget {
  std::int64_t element_size = 0;  // 0: not such a leaf
  DType dtype = DType::float32;   // the target's, for an empty sequence (nothing says the stored one)
};

template <class N>
void prepare_node_of(void* node, const StoredChildren& children) {
  node_traits<N>::prepare(*static_cast<N*>(node), children);
}
template <class N>
void resize_sequence_of(void* node, std::size_t length, bool may_remove) {
  node_traits<N>::resize_to_stored(*static_cast<N*>(node), length, may_remove);
}

// The half of plan_load that does not depend on the target's types: in the runtime with
// separate compilation, so that a file that loads instantiates only the tree's walk and one
// small call per leaf and container type (docs/compile-time.md).
class LoadPlanner {
 public:
  // Throws not_found when options.subtree names nothing stored.
  CAIRN_API LoadPlanner(const StoredIndex& index, const LoadOptions& options);
  CAIRN_API ~LoadPlanner();
  // A container of the target at p whose children come from the checkpoint: prepares it with
  // the stored children (unless it is skipped or nothing is stored there).
  CAIRN_API void node(const KeyPath& p, void* target, void (*prepare)(void*, const StoredChildren&));
  // The same for a resizable sequence (tree/std_nodes.hpp): resized to the stored length,
  // which the index counts without a KeyEntry per element.
  CAIRN_API void sequence(const KeyPath& p, void* target, void (*resize)(void*, std::size_t, bool));
  // A null pointer of the target at p: pointed at a new object when the checkpoint holds a
  // leaf or a node there (unless it is skipped), else left null (an absent subtree).
  CAIRN_API void pointer(const KeyPath& p, void* target, void (*allocate)(void*));
  // A leaf of the target at p: planned from its stored leaf, or reported skipped or missing.
  // A packed target is also planned from a stored sequence of its elements.
  CAIRN_API void leaf(const KeyPath& p, void* target, LeafBuffer (*prepare)(void*, const StoredLeafInfo&),
                      PackedTarget packed = {});
  // The plan, with every stored leaf no target leaf took reported unexpected.
  CAIRN_API LoadPlan finish() &&;

 private:
  bool skipped(std::string_view key) const;
  const LeafRecord* joined_elements(const std::string& stored, PackedTarget packed);

  const StoredIndex& index_;
  const LoadOptions& options_;
  std::string prefix_;
  std::vector<char> visited_;  // by position in the item
  std::size_t next_ = 0;       // where the next leaf is looked for first (StoredIndex::leaf)
  LoadPlan plan_;
};

template <class T>
LoadPlan plan_load(T& target, const StoredIndex& index, const LoadOptions& options) {
  LoadPlanner planner(index, options);
  walk_tree(
      target,
      [&](auto& value, const KeyPath& p, NodeKind) {
        using U = std::remove_cvref_t<decltype(value)>;
        // Containers whose children come from the checkpoint take the stored children now,
        // before their children are visited (so references taken below stay valid).
        if constexpr (is_tree_pointer<U>)  // a null pointer (tree/walk.hpp)
          planner.pointer(p, static_cast<void*>(std::addressof(value)), &allocate_pointee<U>);
        else if constexpr (requires(U& u) { node_traits<U>::resize_to_stored(u, std::size_t{0}, true); })
          planner.sequence(p, static_cast<void*>(std::addressof(value)), &resize_sequence_of<U>);
        else if constexpr (requires(U& u, const StoredChildren& c) { node_traits<U>::prepare(u, c); })
          planner.node(p, static_cast<void*>(std::addressof(value)), &prepare_node_of<U>);
        return true;
      },
      [&](auto& value, const KeyPath& p) {
        using L = std::remove_cvref_t<decltype(value)>;
        PackedTarget packed;
        if constexpr (requires { leaf_traits<L>::packed_element_size; })
          packed = {leaf_traits<L>::packed_element_size, leaf_traits<L>::packed_element_dtype};
        planner.leaf(p, static_cast<void*>(std::addressof(value)), &prepare_leaf_of<L>, packed);
      });
  return std::move(planner).finish();
}

}  // namespace detail
CAIRN_END_NAMESPACE

#if CAIRN_DEFINES_RUNTIME
#include "cairn/checkpoint/load_plan_impl.hpp"
#endif
