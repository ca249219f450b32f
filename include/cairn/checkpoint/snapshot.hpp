// SPDX-License-Identifier: Apache-2.0
// A snapshot of one item of a checkpoint: its node records and one view per leaf. A view
// either points into the caller's memory (a synchronous save writes straight from it) or owns
// a copy (an async save, so the caller may change its state at once). Items of other kinds (a
// JSON object, a cereal-serialized object) are snapshots of one byte leaf.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cairn/format/records.hpp"
#include "cairn/tree/walk.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// Where the bytes of a leaf come from when they are read only as a writer reaches it
// (convert's leaves of a source checkpoint, read a batch at a time, so that a conversion holds
// a bounded part of them). A virtual call, not a std::function, which every file that saves
// would instantiate (docs/compile-time.md).
struct LeafFetch {
  virtual ~LeafFetch() = default;
  // The leaf's view with its data (kept alive by its owner).
  virtual LeafView fetch() const = 0;
};

struct SnapshotLeaf {
  KeyPath path;
  LeafView view;
  // Set for a leaf read when a writer reaches it: `view` then says the dtype, shape, order
  // and nbytes and has no data; the writer reads the bytes through leaf_data and drops them
  // once the leaf is written.
  std::shared_ptr<const LeafFetch> fetch = {};
};

// The view a writer reads a leaf's bytes through: the leaf's own, or the one its fetch
// returns, held in `fetched` (the caller's, dropped once the leaf is written).
inline const LeafView& leaf_data(const SnapshotLeaf& leaf, LeafView& fetched) {
  if (!leaf.fetch) return leaf.view;
  fetched = leaf.fetch->fetch();
  return fetched;
}

struct ItemSnapshot {
  std::string name;
  ItemKind kind = ItemKind::tree;
  std::vector<NodeRecord> nodes;
  // (Its memory for thousands of leaves in huge pages, as LeafRecords': the walk of 10,000
  // leaves grows it by doubling to 3 MB, hundreds of 4 KiB page faults of a save in new memory.)
  std::vector<SnapshotLeaf, BulkAllocator<SnapshotLeaf>> leaves;
  bool per_rank = false;  // each rank's own value, stored as "<name>@<rank>" (see Items)

  std::uint64_t leaf_bytes() const {
    std::uint64_t n = 0;
    for (const auto& l : leaves) n += l.view.nbytes;
    return n;
  }
};

// A node and a leaf of a snapshot, in the order of the walk. Out of line with separate
// compilation: a file that saves compiles its tree's walk, not the snapshot's vectors.
CAIRN_API void add_node(ItemSnapshot& s, const KeyPath& path, NodeKind kind);
CAIRN_API void add_leaf(ItemSnapshot& s, const KeyPath& path, LeafView&& view);

// Throws invalid_argument (naming `where` and the key) when two nodes or leaves of the snapshot
// print as the same key path, before anything is written: the checkpoint could not be loaded
// (its reader rejects repeated keys). A map with an empty string key at the top of a tree does
// it (the key prints as "", the root's own key path), and so does a custom node whose children
// repeat a key.
CAIRN_API void check_distinct_key_paths(const ItemSnapshot& s, const std::string& where);

// Views into the tree's own memory; nothing is copied. The leaves are counted first (a walk
// without key paths) and room made for them at once: grown by doubling instead (14 times for
// 10,000 small leaves, 304 bytes of view each, every time into new memory), the walk took
// 1.1-9.6 ms of a save of them to a bucket, and 0.7-1.3 ms so (docs/benchmarks.md, 2026-12-05).
template <class T>
void view_tree_into(ItemSnapshot& s, const T& tree) {
  std::size_t leaves = 0;
  count_leaves(tree, leaves);
  s.leaves.reserve(s.leaves.size() + leaves);
  walk_tree(
      tree,
      [&](const auto&, const KeyPath& p, NodeKind k) {
        add_node(s, p, k);
        return true;
      },
      [&](const auto& value, const KeyPath& p) { add_leaf(s, p, leaf_traits<std::remove_cvref_t<decltype(value)>>::view(value)); });
}
template <class T>
ItemSnapshot view_tree(const std::string& name, const T& tree) {
  ItemSnapshot s;
  s.name = name;
  view_tree_into(s, tree);
  return s;
}

// Makes a view own a copy of its bytes: of a sharded view, the boxes this process writes (its
// primary boxes, and with `replicas` the replicas it holds too: ReplicaWrites::split).
CAIRN_API void own_copy(LeafView& v, bool replicas = false);

// An item that is one array of bytes (JSON text, a cereal archive), owning them.
CAIRN_API ItemSnapshot bytes_item(const std::string& name, ItemKind kind, DType dtype, std::string bytes);

}  // namespace detail
CAIRN_END_NAMESPACE

#if CAIRN_DEFINES_RUNTIME
#include "cairn/checkpoint/snapshot_impl.hpp"
#endif
