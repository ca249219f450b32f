// SPDX-License-Identifier: Apache-2.0
// The two extension points of cairn's trees, and how a type is classified.
// - leaf_traits<T>: a type whose value is stored as one array (scalars, strings, vectors of
//   numbers, Eigen matrices, cairn::Array, a user's tensor class).
// - node_traits<T>: a type with children (containers, tuples, a user's own container).
// Structs annotated with CAIRN_TREE are nodes without any specialization. A type that is
// neither fails with one static_assert naming the type and the fix.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>
#include <vector>

#include <optional>

#include "cairn/core/box.hpp"
#include "cairn/core/heap_optional.hpp"
#include "cairn/core/key_path.hpp"
#include "cairn/core/memory_kind.hpp"
#include "cairn/core/order.hpp"
#include "cairn/core/shape.hpp"
#include "cairn/dtype/dtype.hpp"

CAIRN_BEGIN_NAMESPACE

// Declared only: the light model header does without the sharding types' headers (a leaf
// view's sharding is a HeapOptional, which needs the type complete only where one is made).
struct NamedSharding;

// One shard of a sharded leaf as the saver sees it: its box of the global array and its
// elements in C order, in host or device memory. `primary` is false for a replica whose box
// another device (the first in mesh order) holds too: each box is written once.
struct ShardView {
  Box box;
  const void* data = nullptr;
  MemoryKind memory = MemoryKind::host;
  int device = 0;
  bool primary = true;
};

// What a leaf shows the saver: dtype, logical shape, memory order and its bytes. `owner`
// keeps alive a buffer the view made (for leaf types that are not contiguous in memory).
// A leaf that lives in device memory, or in shards, leaves `data` null and lists `shards`
// instead (one shard covering the whole array for a plain device array); `sharding`, when
// set, is recorded in the checkpoint's metadata (it is used as a std::optional, and kept on
// the heap: most leaves have none, and a save holds one view per leaf).
struct LeafView {
  DType dtype = DType::float32;
  Shape shape;
  Order order = Order::C;
  const void* data = nullptr;
  std::uint64_t nbytes = 0;
  std::shared_ptr<const void> owner = {};
  std::vector<ShardView> shards = {};
  HeapOptional<NamedSharding> sharding = {};
};

// What the loader knows of a stored leaf when it asks the target to take its shape.
struct StoredLeafInfo {
  DType dtype = DType::float32;
  Shape shape;
  Order order = Order::C;
  std::uint64_t nbytes = 0;
  const NamedSharding* sharding = nullptr;  // how it was sharded when saved, if it was
  int process = 0;                          // the loading rank, and how many ranks load
  int processes = 1;
};

// Where the loader writes one shard of a target: a box of the global array, C order.
struct ShardTarget {
  Box box;
  void* data = nullptr;
  MemoryKind memory = MemoryKind::host;
  int device = 0;
};

// Where the loader writes a leaf's values, in the target's own dtype and order. `commit`,
// when set, runs after the bytes are written (for targets that need a final copy). A target
// in device memory or in shards leaves `data` null and lists `shards` (replicas included:
// each is filled).
struct LeafBuffer {
  DType dtype = DType::float32;
  Order order = Order::C;
  void* data = nullptr;
  std::uint64_t nbytes = 0;
  std::function<void()> commit = {};
  std::vector<ShardTarget> shards = {};
};

// Specialize for a leaf type:
//   static LeafView view(const T&);                          // for save
//   static LeafBuffer prepare(T&, const StoredLeafInfo&);    // for load: take the stored
//       shape (resize) or throw via require_shape(), then say where to write
template <class T, class Enable = void>
struct leaf_traits {
  using cairn_not_specialized = void;
};

// The children a checkpoint holds for a container node. A container takes the stored
// entries; under LoadOptions::allow_missing it also keeps its own entries that the checkpoint
// lacks (they are reported missing) instead of dropping them.
struct StoredChildren {
  const std::vector<KeyEntry>& keys;
  bool may_remove = true;
};

// Specialize for a node type:
//   static constexpr NodeKind kind = ...;
//   template <class Self, class F> static void for_each_child(Self& node, F&& f);
//       // Self is T or const T; calls f(KeyEntry, child&) for each child in a fixed order
//   static void prepare(T& node, const StoredChildren& stored);   // optional: for containers
//       // whose children come from the checkpoint (resize, insert or erase keys)
template <class T, class Enable = void>
struct node_traits {
  using cairn_not_specialized = void;
};

namespace detail {

template <class T>
concept specialized_leaf = !requires { typename leaf_traits<T>::cairn_not_specialized; };
template <class T>
concept specialized_node = !requires { typename node_traits<T>::cairn_not_specialized; };
template <class T>
concept described_struct = requires { cairn_tree_fields(static_cast<const T*>(nullptr)); };

template <class T> inline constexpr bool always_false = false;

}  // namespace detail

template <class T>
inline constexpr bool is_leaf = detail::specialized_leaf<std::remove_cvref_t<T>>;
template <class T>
inline constexpr bool is_node = !is_leaf<T> && (detail::specialized_node<std::remove_cvref_t<T>> ||
                                                detail::described_struct<std::remove_cvref_t<T>>);
template <class T>
inline constexpr bool is_tree = is_leaf<T> || is_node<T>;

// Fails compilation with the type named in the diagnostic and the fix in the message.
template <class T>
constexpr void require_tree_type() {
  static_assert(is_tree<T>,
                "cairn: this type is neither a tree node nor a leaf. For a struct of your own, annotate it with "
                "CAIRN_TREE(Type, field1, field2, ...) at namespace scope in the struct's own namespace (written in "
                "another one, the global namespace included, it is not found), or CAIRN_TREE_INTRUSIVE inside the "
                "class; for a type stored as one array (std::complex<float>, a tensor class), specialize "
                "cairn::leaf_traits<T>; for a container, cairn::node_traits<T>. See docs/extending.md.");
}

CAIRN_END_NAMESPACE
