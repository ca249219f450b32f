// SPDX-License-Identifier: Apache-2.0
// The one traversal every tree operation is built on: depth-first, children in their
// fixed order, with the key path of each node. It calls
//   on_node(node&, const KeyPath&, NodeKind) -> bool   // false skips the children
//   on_leaf(leaf&, const KeyPath&)
// (generic lambdas), on const and non-const trees alike.
#pragma once

#include <type_traits>

#include "cairn/tree/traits.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

template <class T, class OnNode, class OnLeaf>
void walk(T& value, KeyPath& path, OnNode& on_node, OnLeaf& on_leaf) {
  using U = std::remove_cvref_t<T>;
  require_tree_type<U>();
  if constexpr (is_leaf<U>) {
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
