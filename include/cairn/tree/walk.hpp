// SPDX-License-Identifier: Apache-2.0
// The one traversal every tree operation is built on: depth-first, children in their
// fixed order, with the key path of each node. It calls
//   on_node(node&, const KeyPath&, NodeKind) -> bool   // false skips the children
//   on_leaf(leaf&, const KeyPath&)
// (generic lambdas), on const and non-const trees alike. Smart pointers are looked through
// (tree/traits.hpp): on_node sees one only where it is null in a mutable tree.
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>

#include "cairn/tree/traits.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

template <class T, class OnNode, class OnLeaf>
void walk(T& value, KeyPath& path, OnNode& on_node, OnLeaf& on_leaf) {
  using U = std::remove_cvref_t<T>;
  require_tree_type<U>();
  if constexpr (is_tree_pointer<U>) {
    // A pointer is its pointee at the same key path. A null one is absent: a const walk (a
    // save, a count) passes it by; a mutable one (a load's planning) offers it to on_node as an
    // optional node first, which may point it at a new object (LoadPlanner::pointer).
    if (!value) {
      if constexpr (std::is_const_v<T>) return;
      else if (!on_node(value, path, NodeKind::optional) || !value) return;
    }
    if constexpr (std::is_const_v<T>) walk(std::as_const(*value), path, on_node, on_leaf);
    else walk(*value, path, on_node, on_leaf);
  } else if constexpr (is_leaf<U>) {
    on_leaf(value, path);
  } else if constexpr (is_node<U>) {
    if (!on_node(value, path, node_traits<U>::kind)) return;
    node_traits<U>::for_each_child(value, [&](KeyEntry entry, auto& child) {
      path.push_back(std::move(entry));
      walk(child, path, on_node, on_leaf);
      path.pop_back();
    });
  }
}

// The walk without key paths, counting leaves (leaf_count, and a snapshot's room for its
// leaves): a count needs none, and building them (a string per field, pushed and popped) was
// most of what a file calling leaf_count compiled.
template <class T>
void count_leaves(const T& value, std::size_t& n) {
  using U = std::remove_cvref_t<T>;
  require_tree_type<U>();
  if constexpr (is_tree_pointer<U>) {
    if (value) count_leaves(*value, n);
  } else if constexpr (is_leaf<U>) {
    ++n;
  } else if constexpr (is_node<U>) {
    node_traits<U>::for_each_child(value, [&](const KeyEntry&, const auto& child) { count_leaves(child, n); });
  }
}

inline constexpr auto visit_all_nodes = [](const auto&, const KeyPath&, NodeKind) { return true; };

}  // namespace detail

template <class T, class OnNode, class OnLeaf>
void walk_tree(T& tree, OnNode&& on_node, OnLeaf&& on_leaf) {
  KeyPath path;
  detail::walk(tree, path, on_node, on_leaf);
}

// Calls f(leaf, path) for every leaf, in order.
template <class T, class OnLeaf>
void walk_leaves(T& tree, OnLeaf&& on_leaf) {
  auto on_node = detail::visit_all_nodes;
  KeyPath path;
  detail::walk(tree, path, on_node, on_leaf);
}

CAIRN_END_NAMESPACE
