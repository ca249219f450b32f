// A snapshot of one item of a checkpoint: its node records and one view per leaf. A view
// either points into the caller's memory (a synchronous save writes straight from it) or owns
// a copy (an async save, so the caller may change its state at once). Items of other kinds (a
// JSON object, a cereal-serialized object) are snapshots of one byte leaf.
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cairn/device/memory.hpp"
#include "cairn/format/records.hpp"
#include "cairn/tree/walk.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

struct SnapshotLeaf {
  KeyPath path;
  LeafView view;
};

struct ItemSnapshot {
  std::string name;
  ItemKind kind = ItemKind::tree;
  std::vector<NodeRecord> nodes;
  std::vector<SnapshotLeaf> leaves;
  bool per_rank = false;  // each rank's own value, stored as "<name>@<rank>" (see Items)

  std::uint64_t leaf_bytes() const {
    std::uint64_t n = 0;
    for (const auto& l : leaves) n += l.view.nbytes;
    return n;
  }
};

// Views into the tree's own memory; nothing is copied.
template <class T>
ItemSnapshot view_tree(const std::string& name, const T& tree) {
  ItemSnapshot s;
  s.name = name;
  walk_tree(
      tree,
      [&](const auto&, const KeyPath& p, NodeKind k) {
        s.nodes.push_back({p, k});
        return true;
      },
      [&](const auto& value, const KeyPath& p) {
        s.leaves.push_back({p, leaf_traits<std::remove_cvref_t<decltype(value)>>::view(value)});
      });
  return s;
}

// Makes a view own a copy of its bytes.
inline void own_copy(LeafView& v) {
  if (!v.shards.empty()) {
    // Each box once (replicas are not written), in host memory.
    auto copies = std::make_shared<std::vector<std::unique_ptr<unsigned char[]>>>();
    std::vector<ShardView> kept;
    const std::size_t item = dtype_size(v.dtype);
    for (const auto& s : v.shards) {
      if (!s.primary) continue;
      const auto n = static_cast<std::size_t>(s.box.elements() * item);
      copies->push_back(std::make_unique<unsigned char[]>(std::max<std::size_t>(n, 1)));
      copy_bytes(copies->back().get(), MemoryKind::host, s.data, s.memory, n);
      kept.push_back({s.box, copies->back().get(), MemoryKind::host, 0, true});
    }
    v.shards = std::move(kept);
    v.owner = copies;
    return;
  }
  if (v.nbytes == 0) return;
  std::shared_ptr<unsigned char[]> copy(new unsigned char[static_cast<std::size_t>(v.nbytes)]);
  std::memcpy(copy.get(), v.data, static_cast<std::size_t>(v.nbytes));
  v.data = copy.get();
  v.owner = std::shared_ptr<const void>(copy, copy.get());
}

// An item that is one array of bytes (JSON text, a cereal archive), owning them.
inline ItemSnapshot bytes_item(const std::string& name, ItemKind kind, DType dtype, std::string bytes) {
  ItemSnapshot s;
  s.name = name;
  s.kind = kind;
  auto owned = std::make_shared<std::string>(std::move(bytes));
  LeafView v{dtype, {static_cast<std::int64_t>(owned->size())}, Order::C, owned->data(), owned->size(), owned};
  s.leaves.push_back({KeyPath(), std::move(v)});
  return s;
}

}  // namespace detail
CAIRN_END_NAMESPACE
