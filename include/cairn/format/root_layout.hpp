// SPDX-License-Identifier: Apache-2.0
// Checkpoints among other keys: whether a key is a committed checkpoint, the checkpoint a key
// lies inside, the names a Checkpointer gives steps, and what to say when a directory of
// checkpoints is loaded as if it were one.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cairn/core/parallel.hpp"
#include "cairn/format/layout.hpp"
#include "cairn/core/key_path.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// Whether the blobs under `key` are a committed checkpoint (its marker is a blob; what the
// marker holds is checked on read).
inline bool is_committed_checkpoint(const Store& store, const std::string& key) {
  return store.is_blob(join_key(key, marker_file));
}

// The nearest key above `key` that is a committed checkpoint, or "" when none is. Nothing may
// be saved inside a checkpoint: its directory is its own, and replacing or deleting it (an
// overwrite, a Checkpointer's retention) takes everything under it along.
// Where each look waits on a network (Store::parallel_reads), every key above is looked at at
// once, not one after another.
inline std::string enclosing_checkpoint(const Store& store, const std::string& key) {
  std::vector<std::string> above;  // nearest first
  for (std::size_t end = key.rfind('/'); end != std::string::npos && end > 0; end = key.rfind('/', end - 1))
    above.push_back(key.substr(0, end));
  if (store.parallel_reads() <= 1) {
    for (const auto& a : above)
      if (is_committed_checkpoint(store, a)) return a;
    return {};
  }
  std::vector<char> committed(above.size(), 0);
  for_each_index(above.size(), store.parallel_reads(), [&](std::size_t i) { committed[i] = is_committed_checkpoint(store, above[i]); });
  for (std::size_t i = 0; i < above.size(); ++i)
    if (committed[i]) return above[i];
  return {};
}

// Throws invalid_argument when `key` lies inside a committed checkpoint (what saves and exports
// check before they write anything).
inline void refuse_inside_checkpoint(const Store& store, const std::string& key) {
  const std::string outer = enclosing_checkpoint(store, key);
  if (!outer.empty())
    throw Error(ErrorKind::invalid_argument, "this path is inside the checkpoint " + store.describe(outer) +
                ", whose directory is its own: replacing or deleting that checkpoint would delete this one with it. "
                "Save beside it instead", store.describe(key));
}

// The step a run of digits names: leading zeros are padding of any width (step_digits), and
// digits beyond int64 name no step of any scheme.
inline bool parse_step_digits(std::string_view digits, std::int64_t& step) {
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos) return false;
  return parse_int64(digits.substr(std::min(digits.find_first_not_of('0'), digits.size() - 1)), step);
}

// A name that some Checkpointer's scheme gives a step: digits with any padding, with or without
// "step_" (Checkpointer::looks_like_step).
inline bool looks_like_step_name(std::string_view name) {
  std::int64_t step = 0;
  return parse_step_digits(name.substr(name.rfind("step_", 0) == 0 ? 5 : 0), step);
}

// A name Orbax's CheckpointManager gives a step (its standard name format): the step's digits,
// zero-padded or not, after an optional "<step_prefix>_" ("100", "00000100", "checkpoint_100");
// `prefix` receives what comes before the digits ("" or "checkpoint_").
inline bool orbax_step_name(std::string_view name, std::string_view& prefix, std::int64_t& step) {
  const std::size_t digits = name.find_last_not_of("0123456789") + 1;  // (npos + 1: all digits)
  prefix = name.substr(0, digits);
  return (prefix.empty() || prefix.back() == '_') && parse_step_digits(name.substr(digits), step);
}

// Whether `names` (at least one) are the steps of one Orbax CheckpointManager: Orbax's step
// names, all with the same prefix.
inline bool orbax_steps_of_one_manager(const std::vector<std::string>& names) {
  std::string_view first, prefix;
  std::int64_t step = 0;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (!orbax_step_name(names[i], prefix, step) || (i > 0 && prefix != first)) return false;
    first = prefix;
  }
  return !names.empty();
}

// Whether every name is one a Checkpointer gives a step: a directory of such names is a
// Checkpointer's root (marker or not), any other a plain directory of checkpoints.
inline bool all_step_names(const std::vector<std::string>& names) {
  return std::all_of(names.begin(), names.end(), [](const std::string& n) { return looks_like_step_name(n); });
}

// Names for an error message: the first `most`, then how many in all.
inline std::string listed_names(const std::vector<std::string>& names, std::size_t most = 8, const char* separator = ", ") {
  std::string list;
  for (std::size_t i = 0; i < names.size() && i < most; ++i) list += (i ? separator : "") + names[i];
  if (names.size() > most) list += separator + std::string("... (") + std::to_string(names.size()) + " in all)";
  return list;
}

// Whether `a` comes before `b` in step order: runs of digits compare as the numbers they
// spell, the rest as text ("9" before "10", "checkpoint_9" before "checkpoint_10", "v2"
// before "v10"); of two names that spell the same numbers, the shorter ("7" before "007"),
// then by text. For plain step numbers this is numeric order.
inline bool before_in_step_order(const std::string& a, const std::string& b) {
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      std::size_t ie = i, je = j;
      while (ie < a.size() && digit(a[ie])) ++ie;
      while (je < b.size() && digit(b[je])) ++je;
      std::size_t iz = i, jz = j;  // past the leading zeros
      while (iz + 1 < ie && a[iz] == '0') ++iz;
      while (jz + 1 < je && b[jz] == '0') ++jz;
      if (ie - iz != je - jz) return ie - iz < je - jz;  // fewer digits, the smaller number
      if (const int c = a.compare(iz, ie - iz, b, jz, je - jz); c != 0) return c < 0;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]);
      ++i;
      ++j;
    }
  }
  if ((i < a.size()) != (j < b.size())) return j < b.size();  // a ran out first
  return a.size() != b.size() ? a.size() < b.size() : a < b;
}

// Sorts directory names in step order (before_in_step_order).
inline void sort_in_step_order(std::vector<std::string>& names) {
  std::sort(names.begin(), names.end(), before_in_step_order);
}

// When `key` is not a checkpoint but a directory of checkpoints (a Checkpointer's root, or any
// other), a message saying so and how to load one; "" otherwise.
// The names of the committed checkpoints directly under `key`, in step order (numeric for
// plain step numbers): what a directory of checkpoints holds.
// `listing`: the store's listing of `key`, where the caller has it (on a bucket, a round trip).
inline std::vector<std::string> committed_children(const Store& store, const std::string& key,
                                                   const std::vector<StoreEntry>* listing = nullptr) {
  std::optional<std::vector<StoreEntry>> listed;
  if (!listing) listing = &listed.emplace(store.list(key));
  std::vector<std::string> candidates;
  for (const auto& e : *listing)
    if (e.is_prefix && !store.is_internal_name(e.name)) candidates.push_back(e.name);
  // Looked at Store::parallel_reads() at a time (on a bucket, a round trip or two each).
  std::vector<char> committed(candidates.size(), 0);
  for_each_index(candidates.size(), store.parallel_reads(),
                 [&](std::size_t i) { committed[i] = is_committed_checkpoint(store, join_key(key, candidates[i])); });
  std::vector<std::string> names;
  for (std::size_t i = 0; i < candidates.size(); ++i)
    if (committed[i]) names.push_back(std::move(candidates[i]));
  sort_in_step_order(names);
  return names;
}

// `listing`: the store's listing of `key`, where the caller has it (committed_children).
inline std::string describe_checkpointer_root(const Store& store, const std::string& key,
                                              const std::vector<StoreEntry>* listing = nullptr) {
  const std::vector<std::string> steps = committed_children(store, key, listing);
  if (steps.empty()) return {};
  const std::string list = listed_names(steps);
  const std::string one = store.describe(join_key(key, steps.back()));
  // The Checkpointer is suggested only where the names are steps: it would find no others.
  if (!all_step_names(steps))
    return "this is a directory of checkpoints (" + list + "), not one checkpoint: load one of them, such as " + one;
  return "this is a directory of checkpoints (a Checkpointer root holding " + list +
         "), not one checkpoint: load one of them, such as " + one + ", or the latest with cairn::Checkpointer(\"" +
         store.describe(key) + "\").load(target)";
}

}  // namespace detail
CAIRN_END_NAMESPACE
