// SPDX-License-Identifier: Apache-2.0
// Nodes from the standard library: sequences (std::vector / std::deque / std::list /
// std::array of nodes), maps with string or integer keys (visited in sorted key order),
// std::tuple, std::pair, std::optional (a node with zero or one child, keyed 0) and
// std::variant (one child, keyed by the index of the alternative it holds).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <iterator>
#include <limits>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "cairn/tree/traits.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

template <class Seq>
struct resizable_sequence_node {
  static constexpr NodeKind kind = NodeKind::sequence;
  template <class Self, class F>
  static void for_each_child(Self& node, F&& f) {
    std::int64_t i = 0;
    for (auto& child : node) f(KeyEntry::index(i++), child);
  }
  static void prepare(Seq& node, const StoredChildren& stored) {
    resize_to_stored(node, stored_sequence_length(stored.keys), stored.may_remove);
  }
  // What a load calls (checkpoint/load_plan.hpp), with the stored length that its index counted
  // without a KeyEntry per element.
  static void resize_to_stored(Seq& node, std::size_t n, bool may_remove) {
    if (!may_remove) n = std::max(n, node.size());
    node.resize(n);
  }
};

template <class K>
inline constexpr bool is_map_key_v =
    std::is_same_v<K, std::string> || (std::is_integral_v<K> && !std::is_same_v<K, bool>);

// Integer keys are stored as int64 (kind 'n'). An unsigned key above that range (a uint64 id
// or hash of 2^63 or more) is stored as a string key of its decimal digits, which prints as the
// number itself and which key_from_entry reads back (docs/format.md): cast to int64 it would
// print as a negative number that no unsigned map can take back.
template <class K>
KeyEntry map_key_entry(const K& k) {
  if constexpr (std::is_same_v<K, std::string>) {
    return KeyEntry::key(k);
  } else if constexpr (std::is_unsigned_v<K> && sizeof(K) >= sizeof(std::int64_t)) {
    if (k > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return KeyEntry::key(std::to_string(k));
    return KeyEntry::int_key(static_cast<std::int64_t>(k));
  } else {
    return KeyEntry::int_key(static_cast<std::int64_t>(k));
  }
}

// A stored key as the target's key type; false when it cannot be one (it is then reported
// as an unexpected key by the loader).
template <class K>
bool key_from_entry(const KeyEntry& e, K& out) {
  if constexpr (std::is_same_v<K, std::string>) {
    out = e.text();
    return true;
  } else {
    std::int64_t v = 0;
    if (e.kind == KeyEntry::Kind::int_key || e.kind == KeyEntry::Kind::index) {
      v = e.number;
    } else if (!parse_int64(e.name, v)) {
      // Digits beyond int64: an unsigned key of 2^63 or more, as map_key_entry stores it.
      std::uint64_t u = 0;
      if constexpr (!std::is_unsigned_v<K>) return false;
      if (!parse_uint64(e.name, u) || u > static_cast<std::uint64_t>(std::numeric_limits<K>::max())) return false;
      out = static_cast<K>(u);
      return true;
    }
    if constexpr (std::is_signed_v<K>) {
      if (v < static_cast<std::int64_t>(std::numeric_limits<K>::min()) ||
          v > static_cast<std::int64_t>(std::numeric_limits<K>::max())) return false;
    } else {
      if (v < 0 || static_cast<std::uint64_t>(v) > static_cast<std::uint64_t>(std::numeric_limits<K>::max())) return false;
    }
    out = static_cast<K>(v);
    return true;
  }
}

// The first eight bytes of a string, big-endian and zero-padded: ordering by it, then by the
// whole string, is the string's own order (memcmp's), and short keys are ordered by it alone
// without reaching into the map's scattered nodes again.
inline std::uint64_t string_prefix(const std::string& s) {
  std::uint64_t v = 0;
  const std::size_t n = std::min<std::size_t>(8, s.size());
  for (std::size_t i = 0; i < 8; ++i) v = v << 8 | (i < n ? static_cast<unsigned char>(s[i]) : 0u);
  return v;
}

// Whether a map with string keys holds exactly the stored keys (a state loaded into again):
// checked on the stored entries themselves, with no copy of the keys, and for an ordered map in
// one step through both.
template <class Map>
bool holds_exactly(const Map& node, const std::vector<KeyEntry>& stored) {
  if (node.size() != stored.size()) return false;
  // String entries are distinct (their printed paths are), so n of them found in a map of n
  // keys are all of its keys.
  if constexpr (requires { typename Map::key_compare; }) {
    auto it = node.begin();
    for (const auto& e : stored) {
      if (e.kind != KeyEntry::Kind::key || it->first != e.name) return false;
      ++it;
    }
    return true;
  } else {
    for (const auto& e : stored)
      if (e.kind != KeyEntry::Kind::key || node.find(e.name) == node.end()) return false;
    return true;
  }
}

template <class Map>
struct map_node {
  using key_type = typename Map::key_type;
  static constexpr NodeKind kind = NodeKind::map;
  template <class Self, class F>
  static void for_each_child(Self& node, F&& f) {
    if constexpr (requires { typename Map::key_compare; }) {
      for (auto& kv : node) f(map_key_entry(kv.first), kv.second);
    } else if constexpr (std::is_same_v<key_type, std::string>) {
      // Sorted order even for unordered maps, so a checkpoint does not depend on hashing; by
      // each key's first bytes first (sorting 10,000 keys by whole strings was a tenth of
      // loading into an unordered_map, each comparison two trips into its nodes).
      struct Item {
        std::uint64_t prefix;
        decltype(&*node.begin()) kv;
      };
      std::vector<Item> items;
      items.reserve(node.size());
      for (auto& kv : node) items.push_back({string_prefix(kv.first), &kv});
      std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
        return a.prefix != b.prefix ? a.prefix < b.prefix : a.kv->first < b.kv->first;
      });
      for (const Item& item : items) f(map_key_entry(item.kv->first), item.kv->second);
    } else {
      std::vector<decltype(&*node.begin())> items;
      items.reserve(node.size());
      for (auto& kv : node) items.push_back(&kv);
      std::sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      for (auto* kv : items) f(map_key_entry(kv->first), kv->second);
    }
  }
  static void prepare(Map& node, const StoredChildren& stored) {
    if constexpr (std::is_same_v<key_type, std::string>)
      if (holds_exactly(node, stored.keys)) return;
    std::vector<key_type> keys;
    keys.reserve(stored.keys.size());  // grown by doubling, it was 3 MB of a 100,000-leaf load's peak
    // Stored keys are distinct as printed paths, so distinct as strings and as numbers stored
    // as numbers; two string entries may still parse to one integer key.
    bool distinct = true;
    for (const auto& e : stored.keys) {
      key_type k{};
      if (key_from_entry(e, k)) keys.push_back(k);
      if constexpr (!std::is_same_v<key_type, std::string>)
        if (e.kind != KeyEntry::Kind::int_key && e.kind != KeyEntry::Kind::index) distinct = false;
    }
    if constexpr (!requires { typename Map::key_compare; }) {
      // A target that holds exactly the stored keys already (a state loaded into again): one
      // lookup per key instead of sorting a copy of them (at 10,000 keys that sort made loading
      // into an existing unordered_map 1.5x as slow as into a std::map).
      if (distinct && node.size() == keys.size() &&
          std::all_of(keys.begin(), keys.end(), [&](const key_type& k) { return node.find(k) != node.end(); }))
        return;
    } else {
      (void)distinct;
      // An ordered map and stored keys in its order (as every ordered map saves them): one
      // merge over both, no search per key.
      const auto less = node.key_comp();
      if (std::is_sorted(keys.begin(), keys.end(), less)) {
        auto it = node.begin();
        for (auto& k : keys) {  // moved into the map: the copies are this function's own
          while (it != node.end() && less(it->first, k)) it = stored.may_remove ? node.erase(it) : std::next(it);
          if (it != node.end() && !less(k, it->first)) ++it;
          else node.try_emplace(it, std::move(k));
        }
        if (stored.may_remove) node.erase(it, node.end());
        return;
      }
    }
    if (stored.may_remove) {
      // Sorted, so that a map of n entries costs n log n here, not n^2.
      std::vector<key_type> sorted = keys;
      std::sort(sorted.begin(), sorted.end());
      for (auto it = node.begin(); it != node.end();) {
        if (!std::binary_search(sorted.begin(), sorted.end(), it->first)) it = node.erase(it);
        else ++it;
      }
    }
    for (auto& k : keys) node.try_emplace(std::move(k));
  }
};

}  // namespace detail

template <class T, class A>
struct node_traits<std::vector<T, A>, std::enable_if_t<!has_dtype<T>>>
    : detail::resizable_sequence_node<std::vector<T, A>> {};

// A deque is not contiguous, so even a deque of numbers is a sequence of scalar leaves.
template <class T, class A>
struct node_traits<std::deque<T, A>> : detail::resizable_sequence_node<std::deque<T, A>> {};

// So is a list: a sequence of its elements, each a leaf or a node.
template <class T, class A>
struct node_traits<std::list<T, A>> : detail::resizable_sequence_node<std::list<T, A>> {};

template <class T, std::size_t N>
struct node_traits<std::array<T, N>, std::enable_if_t<!has_dtype<T>>> {
  static constexpr NodeKind kind = NodeKind::sequence;
  template <class Self, class F>
  static void for_each_child(Self& node, F&& f) {
    for (std::size_t i = 0; i < N; ++i) f(KeyEntry::index(static_cast<std::int64_t>(i)), node[i]);
  }
};

template <class K, class V, class C, class A>
struct node_traits<std::map<K, V, C, A>, std::enable_if_t<detail::is_map_key_v<K>>>
    : detail::map_node<std::map<K, V, C, A>> {};

template <class K, class V, class H, class E, class A>
struct node_traits<std::unordered_map<K, V, H, E, A>, std::enable_if_t<detail::is_map_key_v<K>>>
    : detail::map_node<std::unordered_map<K, V, H, E, A>> {};

template <class... Ts>
struct node_traits<std::tuple<Ts...>> {
  static constexpr NodeKind kind = NodeKind::tuple;
  template <class Self, class F>
  static void for_each_child(Self& node, F&& f) {
    std::int64_t i = 0;
    std::apply([&](auto&... child) { (f(KeyEntry::index(i++), child), ...); }, node);
  }
};

template <class A, class B>
struct node_traits<std::pair<A, B>> {
  static constexpr NodeKind kind = NodeKind::tuple;
  template <class Self, class F>
  static void for_each_child(Self& node, F&& f) {
    f(KeyEntry::index(0), node.first);
    f(KeyEntry::index(1), node.second);
  }
};

template <class T>
struct node_traits<std::optional<T>> {
  static constexpr NodeKind kind = NodeKind::optional;
  template <class Self, class F>
  static void for_each_child(Self& node, F&& f) {
    if (node) f(KeyEntry::index(0), *node);
  }
  static void prepare(std::optional<T>& node, const StoredChildren& stored) {
    if (stored.keys.empty() && stored.may_remove) node.reset();
    else if (!stored.keys.empty() && !node) node.emplace();
  }
};

// std::monostate, a variant's "none": a struct without fields.
template <>
struct node_traits<std::monostate> {
  static constexpr NodeKind kind = NodeKind::struct_;
  template <class Self, class F>
  static void for_each_child(Self&, F&&) {}
};

// A variant is a node of one child, the alternative it holds, keyed by that alternative's
// index: a body's `std::variant<Sphere, Box>` holding a Box saves as "shape/1/...". The kind
// is `custom` (docs/format.md): no format change, so every earlier cairn reads it. A load
// switches the target to the stored alternative (made by its default constructor) and loads
// into it; the index comes from the checkpoint, so it is checked against the alternatives.
template <class... Ts>
struct node_traits<std::variant<Ts...>> {
  static constexpr NodeKind kind = NodeKind::custom;
  template <class Self, class F>
  static void for_each_child(Self& node, F&& f) {
    if (node.valueless_by_exception()) return;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((node.index() == I ? f(KeyEntry::index(static_cast<std::int64_t>(I)), *std::get_if<I>(&node)) : void()), ...);
    }(std::index_sequence_for<Ts...>{});
  }
  static void prepare(std::variant<Ts...>& node, const StoredChildren& stored) {
    if (stored.keys.empty()) return;  // a valueless variant was saved: nothing to load
    const KeyEntry& e = stored.keys.front();
    if (stored.keys.size() != 1 || e.kind != KeyEntry::Kind::index)
      throw Error(ErrorKind::structure_mismatch,
                  "the target is a std::variant, stored as one child keyed by the index of the alternative it "
                  "holds, and the checkpoint holds " + std::to_string(stored.keys.size()) + " here, the first '" +
                      e.text() + "'");
    if (e.number < 0 || static_cast<std::uint64_t>(e.number) >= sizeof...(Ts))
      throw Error(ErrorKind::structure_mismatch,
                  "the checkpoint holds alternative " + std::to_string(e.number) + " of a std::variant here, and the "
                  "target's has " + std::to_string(sizeof...(Ts)) + (sizeof...(Ts) == 1 ? " alternative" : " alternatives"));
    const auto index = static_cast<std::size_t>(e.number);
    if (node.index() == index) return;  // loaded in place
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((index == I ? emplace<I>(node) : void()), ...);
    }(std::index_sequence_for<Ts...>{});
  }

 private:
  template <std::size_t I>
  static void emplace(std::variant<Ts...>& node) {
    using T = std::variant_alternative_t<I, std::variant<Ts...>>;
    if constexpr (std::is_default_constructible_v<T>) {
      node.template emplace<I>();
    } else {
      throw Error(ErrorKind::invalid_argument,
                  "the checkpoint holds alternative " + std::to_string(I) + " of this std::variant, which has no "
                  "default constructor to make it with: set the target to that alternative before loading");
    }
  }
};

CAIRN_END_NAMESPACE
