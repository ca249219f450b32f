// SPDX-License-Identifier: Apache-2.0
// The runtime of checkpoint/snapshot.hpp. Compiled in every translation unit that includes
// cairn/cairn.hpp, or once with CAIRN_SEPARATE_COMPILATION (see docs/compile-time.md).
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cairn/checkpoint/snapshot.hpp"
#include "cairn/device/memory.hpp"
#include "cairn/format/files.hpp"  // find_repeated

CAIRN_BEGIN_NAMESPACE
namespace detail {

CAIRN_API void add_node(ItemSnapshot& s, const KeyPath& path, NodeKind kind) { s.nodes.push_back({path, kind}); }

CAIRN_API void add_leaf(ItemSnapshot& s, const KeyPath& path, LeafView&& view) {
  s.leaves.push_back({path, std::move(view)});
}

CAIRN_API void check_distinct_key_paths(const ItemSnapshot& s, const std::string& where) {
  std::vector<std::string> keys;
  keys.reserve(s.nodes.size() + s.leaves.size());
  for (const auto& n : s.nodes) keys.push_back(n.path.str());
  for (const auto& l : s.leaves) keys.push_back(l.path.str());
  const std::vector<std::string_view> printed(keys.begin(), keys.end());
  const std::string_view* twice = find_repeated(printed);
  if (!twice) return;
  if (twice->empty())
    throw Error(ErrorKind::invalid_argument, "item '" + s.name + "': a map at the top of the tree has the empty string "
                "as a key, whose key path \"\" is the root's own, and a checkpoint could not tell the two apart (nest "
                "the map one level down, or give the key a name)", where, "");
  throw Error(ErrorKind::invalid_argument, "item '" + s.name + "': two parts of the tree have the key path '" +
              std::string(*twice) + "' (a custom node's children need distinct keys)", where, std::string(*twice));
}

// Makes a view own a copy of its bytes.
CAIRN_API void own_copy(LeafView& v, bool replicas) {
  if (!v.shards.empty()) {
    // Each distinct box once. Only the primary holder writes a box unless replicas are split
    // (ReplicaWrites::split: every holder writes a slab, so the replicas this process holds
    // are copied too). A view left with no shards is still a sharded leaf (its sharding says
    // so), and the writer's coverage check names what this process does not write.
    auto copies = std::make_shared<std::vector<std::unique_ptr<unsigned char[]>>>();
    std::vector<ShardView> kept;
    const std::size_t item = dtype_size(v.dtype);
    for (const auto& s : v.shards) {
      if (!s.primary && !replicas) continue;
      auto same = std::find_if(kept.begin(), kept.end(), [&](const ShardView& k) { return k.box == s.box; });
      if (same != kept.end()) {
        same->primary = same->primary || s.primary;
        continue;
      }
      const auto n = static_cast<std::size_t>(s.box.elements() * item);
      copies->push_back(std::make_unique<unsigned char[]>(std::max<std::size_t>(n, 1)));
      if (n) copy_bytes(copies->back().get(), MemoryKind::host, s.data, s.memory, n);
      kept.push_back({s.box, copies->back().get(), MemoryKind::host, 0, s.primary});
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
