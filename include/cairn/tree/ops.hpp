// SPDX-License-Identifier: Apache-2.0
// Tree operations usable on their own: flatten with key paths, for-each and map over one or
// several trees of the same structure, leaf count, and printing a structure.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "cairn/tree/walk.hpp"

CAIRN_BEGIN_NAMESPACE

struct FlatLeaf {
  KeyPath path;
  LeafView view;
};

// Leaves in order with their key paths and views (dtype, shape, bytes); no data is copied.
template <class T>
std::vector<FlatLeaf> flatten(const T& tree) {
  std::vector<FlatLeaf> out;
  walk_leaves(tree, [&](const auto& l, const KeyPath& p) {
    out.push_back({p, leaf_traits<std::remove_cvref_t<decltype(l)>>::view(l)});
  });
  return out;
}

template <class T>
std::vector<std::string> key_paths(const T& tree) {
  std::vector<std::string> out;
  for (auto& leaf : flatten(tree)) out.push_back(leaf.path.str());
  return out;
}

template <class T>
std::size_t leaf_count(const T& tree) {
  std::size_t n = 0;
  detail::count_leaves(tree, n);
  return n;
}

// Calls f(path, leaf) for every leaf, in order; leaves are mutable when the tree is.
template <class T, class F>
void for_each_leaf_with_path(T& tree, F&& f) {
  walk_leaves(tree, [&](auto& l, const KeyPath& p) { f(p, l); });
}

namespace detail {
template <class T>
std::vector<std::pair<std::string, const void*>> leaf_addresses(const T& tree) {
  std::vector<std::pair<std::string, const void*>> out;
  for_each_leaf_with_path(tree, [&](const KeyPath& p, const auto& l) { out.emplace_back(p.str(), &l); });
  return out;
}

// Pairs the leaves of `first` with the leaves at the same positions in `rest`, which must
// have the same structure (same key paths in the same order): with one type T, a key path
// fixes the leaf's static type, so the addresses can be cast back.
template <class T, class F, class... Rest>
void zip_leaves(T& first, F&& f, const Rest&... rest) {
  static_assert((std::is_same_v<std::remove_const_t<T>, Rest> && ...),
                "cairn: trees mapped together must have the same type");
  std::vector<std::vector<std::pair<std::string, const void*>>> others{leaf_addresses(rest)...};
  std::size_t i = 0;
  const std::size_t n = leaf_count(first);
  for (std::size_t k = 0; k < others.size(); ++k)
    if (others[k].size() != n)
      throw Error(ErrorKind::structure_mismatch, "tree " + std::to_string(k + 1) + " has " +
                  std::to_string(others[k].size()) + " leaves, the first tree " + std::to_string(n));
  for_each_leaf_with_path(first, [&](const KeyPath& p, auto& leaf) {
    using L = std::remove_cvref_t<decltype(leaf)>;
    const std::string key = p.str();
    for (std::size_t k = 0; k < others.size(); ++k)
      if (others[k][i].first != key)
        throw Error(ErrorKind::structure_mismatch, "trees differ: leaf " + std::to_string(i) + " is '" + key +
                    "' in the first tree and '" + others[k][i].first + "' in tree " + std::to_string(k + 2), {}, key);
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      f(p, leaf, *static_cast<const L*>(others[I][i].second)...);
    }(std::index_sequence_for<Rest...>{});
    ++i;
  });
}
}  // namespace detail

// f(path, leaf_of_tree, leaf_of_rest...) for trees of one type and the same structure.
template <class T, class F, class... Rest>
void for_each_leaf(T& tree, F&& f, const Rest&... rest) {
  detail::zip_leaves(tree, [&](const KeyPath&, auto& leaf, const auto&... others) { f(leaf, others...); }, rest...);
}

// A new tree of the same type whose leaves are f(leaf, leaves of rest...).
template <class T, class F, class... Rest>
T tree_map(F&& f, const T& tree, const Rest&... rest) {
  T out = tree;
  detail::zip_leaves(out, [&](const KeyPath&, auto& o, const auto&... others) { o = f(others...); }, tree, rest...);
  return out;
}

template <class T, class F, class... Rest>
T tree_map_with_path(F&& f, const T& tree, const Rest&... rest) {
  T out = tree;
  detail::zip_leaves(out, [&](const KeyPath& p, auto& o, const auto&... others) { o = f(p, others...); }, tree, rest...);
  return out;
}

// One line per node: "params: map", "params/dense/kernel: float32[3, 4]".
template <class T>
std::string tree_structure(const T& tree) {
  std::string out;
  auto name = [](const KeyPath& p) { return p.empty() ? std::string("(root)") : p.str(); };
  walk_tree(
      tree,
      [&](const auto&, const KeyPath& p, NodeKind k) {
        out += name(p) + ": " + node_kind_name(k) + "\n";
        return true;
      },
      [&](const auto& l, const KeyPath& p) {
        LeafView v = leaf_traits<std::remove_cvref_t<decltype(l)>>::view(l);
        out += name(p) + ": " + dtype_name(v.dtype) + to_string(v.shape) + "\n";
      });
  return out;
}

CAIRN_END_NAMESPACE
