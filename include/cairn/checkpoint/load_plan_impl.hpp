// SPDX-License-Identifier: Apache-2.0
// The runtime of plan_load (checkpoint/load_plan.hpp): matching the target's keys to the
// stored ones. Compiled in every translation unit that includes cairn/cairn.hpp, or once with
// CAIRN_SEPARATE_COMPILATION (see docs/compile-time.md).
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "cairn/checkpoint/load_plan.hpp"
#include "cairn/checkpoint/missing_key.hpp"
#include "cairn/checkpoint/stored_index.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

CAIRN_API LoadPlanner::LoadPlanner(const StoredIndex& index, const LoadOptions& options)
    : index_(index),
      options_(options),
      prefix_(resolve_key(options.subtree, [&](const std::string& k) { return index.leaf(k) || index.has_node(k); })),
      visited_(index.item().leaves.size(), 0) {
  plan_.leaves.reserve(index.item().leaves.size());  // usually each stored leaf once: no regrowth
  if (!prefix_.empty() && !index.leaf(prefix_) && !index.has_node(prefix_)) {
    throw Error(ErrorKind::not_found, "the checkpoint has no subtree '" + prefix_ + "'" + missing_key_hint(index.item().leaves, prefix_),
                {}, prefix_);
  }
}

CAIRN_API LoadPlanner::~LoadPlanner() = default;

CAIRN_API bool LoadPlanner::skipped(std::string_view key) const {
  for (const auto& g : options_.skip)
    if (glob_matches(g, key)) return true;
  return false;
}

// The stored key of the target's `key` (its path `p`) under the subtree `prefix`. The target's
// own root is the subtree itself; any other path is below it, even one that prints as "" (the
// map entry whose key is the empty string, stored as "prefix/").
inline std::string key_under(const std::string& prefix, const KeyPath& p, const std::string& key) {
  return p.empty() ? prefix : prefix + "/" + key;
}

CAIRN_API void LoadPlanner::node(const KeyPath& p, void* target, void (*prepare)(void*, const StoredChildren&)) {
  const std::string key = p.str();
  if (!key.empty() && skipped(key)) return;
  const std::string stored = prefix_.empty() ? key : key_under(prefix_, p, key);
  static const std::vector<KeyEntry> no_children;
  const auto* children = index_.children(stored);
  if (!children && !index_.has_node(stored)) return;
  try {
    prepare(target, StoredChildren{children ? *children : no_children, !options_.allow_missing});
  } catch (const Error& e) {
    throw e.with_key(stored);
  }
}

CAIRN_API void LoadPlanner::sequence(const KeyPath& p, void* target, void (*resize)(void*, std::size_t, bool)) {
  const std::string key = p.str();
  if (!key.empty() && skipped(key)) return;
  const std::string stored = prefix_.empty() ? key : key_under(prefix_, p, key);
  try {
    std::size_t length = 0;
    if (const auto n = index_.index_children(stored)) length = *n;
    else if (const auto* children = index_.children(stored)) length = stored_sequence_length(*children);  // (throws)
    else if (!index_.has_node(stored)) return;
    resize(target, length, !options_.allow_missing);
  } catch (const Error& e) {
    throw e.with_key(stored);
  }
}

CAIRN_API void LoadPlanner::pointer(const KeyPath& p, void* target, void (*allocate)(void*)) {
  const std::string key = p.str();
  if (!key.empty() && skipped(key)) return;
  const std::string stored = prefix_.empty() ? key : key_under(prefix_, p, key);
  std::size_t next = next_;  // a look, not a visit: leaf() finds it again from here
  if (!index_.leaf(stored, next) && !index_.has_children(stored) && !index_.has_node(stored)) return;
  if (!options_.skip.empty()) {
    // Nor where each stored leaf below it is skipped ("head/*" leaves a null head null).
    std::size_t below = 0, loaded = 0;
    for (std::size_t i = 0; i < index_.item().leaves.size() && loaded == 0; ++i) {
      const std::string_view k = index_.key(i);
      if (!key_path_has_prefix(k, stored)) continue;
      ++below;
      if (!skipped(prefix_.empty() ? k : k.substr(std::min(k.size(), prefix_.size() + 1)))) ++loaded;
    }
    if (below > 0 && loaded == 0) return;
  }
  try {
    allocate(target);
  } catch (const Error& e) {
    throw e.with_key(stored);
  }
}

CAIRN_API void LoadPlanner::leaf(const KeyPath& p, void* target, LeafBuffer (*prepare)(void*, const StoredLeafInfo&),
                                 PackedTarget packed) {
  std::string key = p.str();
  if (skipped(key)) {
    plan_.report.skipped.push_back(std::move(key));
    return;
  }
  std::string joined;  // only under a subtree: the key is not copied otherwise
  const std::string& stored_key = prefix_.empty() ? key : (joined = key_under(prefix_, p, key));
  const LeafRecord* stored = index_.leaf(stored_key, next_);
  if (stored) {
    visited_[index_.position(stored)] = 1;
  } else if (packed.element_size > 0) {
    stored = joined_elements(stored_key, packed);
  }
  if (!stored) {
    plan_.report.missing.push_back(std::move(key));
    return;
  }
  plan_.leaves.push_back({std::move(key), stored, target, prepare});
}

// A packed target (a std::vector<Eigen::Vector3d>) whose checkpoint holds it as a sequence of
// leaves, `stored/0`, `stored/1`, ..., each one chunk of `element_size` values: as checkpoints
// before 2026-11-30 saved it. One record of shape [n, element_size] is made whose chunks are
// the elements' own (the same files, offsets and checksums, each the box of its row), so the
// load reads and verifies them as it reads a leaf saved in shards. Null where the stored
// sequence is not that (another length per element, a missing index, several dtypes): the
// target leaf is then missing and the elements unexpected, each named.
const LeafRecord* LoadPlanner::joined_elements(const std::string& stored, PackedTarget packed) {
  const std::vector<KeyEntry>* children = index_.children(stored);
  if (!children && !index_.has_node(stored)) return nullptr;
  const std::size_t n = children ? children->size() : 0;
  LeafRecord record;
  record.dtype = record.saved_from = packed.dtype;
  record.shape = Shape{static_cast<std::int64_t>(n), packed.element_size};
  std::vector<const LeafRecord*> elements(n, nullptr);
  for (std::size_t k = 0; k < n; ++k) {
    const KeyEntry& e = (*children)[k];
    if (e.kind != KeyEntry::Kind::index || e.number < 0 || static_cast<std::uint64_t>(e.number) >= n ||
        elements[static_cast<std::size_t>(e.number)])
      return nullptr;
    const auto i = static_cast<std::size_t>(e.number);
    elements[i] = index_.leaf(stored.empty() ? std::to_string(i) : stored + "/" + std::to_string(i));
    const LeafRecord* el = elements[i];
    if (!el || el->chunks.size() != 1 || el->sharding || el->shape != Shape{packed.element_size} ||
        el->chunks.front().start != Shape{0} || el->chunks.front().shape != el->shape)
      return nullptr;
  }
  record.chunks.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const LeafRecord& el = *elements[i];
    if (i == 0) {
      record.path = el.path;
      record.path.pop_back();
      record.dtype = el.dtype;
      record.saved_from = el.saved_from;
    } else if (el.dtype != record.dtype) {
      return nullptr;
    }
    ChunkRecord c = el.chunks.front();
    c.start = Shape{static_cast<std::int64_t>(i), 0};
    c.shape = Shape{1, packed.element_size};
    record.chunks.push_back(std::move(c));
  }
  for (const LeafRecord* el : elements) visited_[index_.position(el)] = 1;
  plan_.joined.push_back(std::move(record));
  return &plan_.joined.back();
}

CAIRN_API LoadPlan LoadPlanner::finish() && {
  for (std::size_t i = 0; i < visited_.size(); ++i) {
    if (visited_[i]) continue;
    const std::string_view key = index_.key(i);
    if (!key_path_has_prefix(key, prefix_)) continue;
    std::string rel(prefix_.empty() ? key : key.substr(std::min(key.size(), prefix_.size() + 1)));
    if (skipped(rel)) continue;  // skipped target keys are not "unexpected" either
    plan_.report.unexpected.push_back(std::move(rel));
  }
  return std::move(plan_);
}

}  // namespace detail
CAIRN_END_NAMESPACE
