// The runtime of checkpoint/snapshot.hpp. Compiled in every translation unit that includes
// cairn/cairn.hpp, or once with CAIRN_SEPARATE_COMPILATION (see docs/compile-time.md).
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cairn/checkpoint/snapshot.hpp"
#include "cairn/device/memory.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

CAIRN_API void add_node(ItemSnapshot& s, const KeyPath& path, NodeKind kind) { s.nodes.push_back({path, kind}); }

CAIRN_API void add_leaf(ItemSnapshot& s, const KeyPath& path, LeafView&& view) {
  s.leaves.push_back({path, std::move(view)});
}

// Makes a view own a copy of its bytes.
CAIRN_API void own_copy(LeafView& v) {
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
CAIRN_API ItemSnapshot bytes_item(const std::string& name, ItemKind kind, DType dtype, std::string bytes) {
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
