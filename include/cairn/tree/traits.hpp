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

// A small fixed-size array of numbers (a position, a colour, an orientation) that a
// std::vector holds many of: such a vector is one leaf of shape [n, size], the elements' values
// one after another, not a sequence of n leaves, each with a metadata record and an aligned
// place in the data file of its own (a million Eigen::Vector3d were 30 times slower and 8 times
// larger that way). Specialize for a type whose memory is exactly `size` scalars in order:
//   using scalar = S; static constexpr std::int64_t size = N;
// (tree/std_leaves.hpp: std::array of numbers; leaves/eigen.hpp: fixed-size vectors and
// quaternions.)
template <class T, class Enable = void>
struct packed_element {};
template <class T>
concept packable_element = requires { typename packed_element<T>::scalar; };

// The children a checkpoint holds for a container node. A container takes the stored
// entries; under LoadOptions::allow_missing it also keeps its own entries that the checkpoint
// lacks (they are reported missing) instead of dropping them.
struct StoredChildren {
  const std::vector<KeyEntry>& keys;
  bool may_remove = true;
};

namespace detail {

// Children of a resizable sequence: the loader resizes it to the stored count, which must
// be the indices 0..n-1. Checked before anything is allocated: an index in untrusted
// metadata ("layers/100000000/w") must not size a vector.
inline std::size_t stored_sequence_length(const std::vector<KeyEntry>& stored) {
  std::uint64_t count = 0, largest_plus_one = 0;
  for (const auto& e : stored) {
    if (e.kind != KeyEntry::Kind::index) continue;
    ++count;
    if (e.number < 0 || static_cast<std::uint64_t>(e.number) >= stored.size())
      throw Error(ErrorKind::corrupt, "a sequence with " + std::to_string(stored.size()) + " stored children has index " +
                  std::to_string(e.number) + " (indices must be 0.." + std::to_string(stored.size() - 1) + ")");
    largest_plus_one = std::max<std::uint64_t>(largest_plus_one, static_cast<std::uint64_t>(e.number) + 1);
  }
  if (largest_plus_one != count)
    throw Error(ErrorKind::corrupt, "a sequence's stored indices are not 0.." + std::to_string(count ? count - 1 : 0) +
                " (largest " + std::to_string(largest_plus_one ? largest_plus_one - 1 : 0) + ")");
  return static_cast<std::size_t>(count);
}

}  // namespace detail

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

// std::unique_ptr<T> and std::shared_ptr<T> (tree/walk.hpp): a pointer is walked as the value
// it points to, at the same key path, and a null one as an absent subtree. A C++ model holds
// its submodules by pointer (`std::vector<std::unique_ptr<Layer>>`), and PyTorch's state_dict,
// what such code is compared with, names their parameters without a level for the pointer.
// Neither a leaf nor a node: the walk looks through it. Arrays (unique_ptr<T[]>) are not
// included: their length is not in the type.
namespace detail {
template <class P>
struct pointee_of {};
template <class T, class D>
  requires(!std::is_array_v<T>)
struct pointee_of<std::unique_ptr<T, D>> {
  using type = T;
};
template <class T>
  requires(!std::is_array_v<T>)
struct pointee_of<std::shared_ptr<T>> {
  using type = T;
};
template <class P>
concept owning_pointer = requires { typename pointee_of<P>::type; };

template <class T>
constexpr bool tree_or_pointer_to_tree() {
  if constexpr (owning_pointer<T>) return tree_or_pointer_to_tree<std::remove_cv_t<typename pointee_of<T>::type>>();
  else return is_leaf<T> || is_node<T>;
}
}  // namespace detail

template <class T>
inline constexpr bool is_tree = detail::tree_or_pointer_to_tree<std::remove_cvref_t<T>>();

namespace detail {
template <class T>
inline constexpr bool is_tree_pointer = owning_pointer<std::remove_cvref_t<T>> && is_tree<T>;

// Makes the object a null pointer of the target points to, to load into (LoadPlanner::pointer
// asks only where the checkpoint holds something at its key path). The pointee is made as
// std::make_unique / std::make_shared do; a type that cannot be made so (abstract, no default
// constructor, a unique_ptr with its own deleter) must be pointed at an object before loading.
template <class P>
void allocate_pointee(void* target) {
  using T = typename pointee_of<P>::type;
  P& p = *static_cast<P*>(target);
  static_assert(!std::is_const_v<T>, "cairn: cannot load into a pointer to const (std::shared_ptr<const T>)");
  if constexpr (!std::is_abstract_v<T> && std::is_default_constructible_v<T> &&
                (std::is_same_v<P, std::unique_ptr<T>> || std::is_same_v<P, std::shared_ptr<T>>)) {
    if constexpr (std::is_same_v<P, std::unique_ptr<T>>) p = std::make_unique<T>();
    else p = std::make_shared<T>();
  } else {
    throw Error(ErrorKind::invalid_argument,
                "the target holds a null pointer where the checkpoint has a value, and cairn cannot make the "
                "object to load into (its type is abstract, has no default constructor, or the unique_ptr has "
                "its own deleter): point it at an object before loading");
  }
}
}  // namespace detail

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
