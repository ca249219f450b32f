// SPDX-License-Identifier: Apache-2.0
// The runtime of inspect/inspect.hpp.
#pragma once

#include <algorithm>
#include <deque>

#include "cairn/checkpoint/load.hpp"
#include "cairn/checkpoint/stored_index.hpp"
#include "cairn/core/utf8.hpp"
#include "cairn/format/files.hpp"
#include "cairn/inspect/inspect.hpp"
#include "cairn/safetensors/header.hpp"
#include "cairn/safetensors/load.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

inline bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

inline LocationKind location_kind(const Location& location) {
  if (ends_with(location.key(), ".safetensors") || ends_with(location.key(), safetensors_index_suffix))
    return LocationKind::safetensors;
  const Store& store = location.store();
  if (!is_committed_checkpoint(store, location.key()) && !describe_checkpointer_root(store, location.key()).empty())
    return LocationKind::checkpointer_root;
  return LocationKind::checkpoint;
}

// A leaf of read_arrays' plan: where its value goes and how it is read.
struct ArrayTarget {
  ArrayValue* value;
  const ReadArraysOptions* options;
};

inline LeafBuffer prepare_array_target(void* target, const StoredLeafInfo& info) {
  const ArrayTarget& t = *static_cast<const ArrayTarget*>(target);
  ArrayValue& v = *t.value;
  if (t.options->boxes.empty()) {
    LeafBuffer b = leaf_traits<ArrayValue>::prepare(v, info);
    if (!t.options->as || info.dtype == DType::string) return b;
    v.dtype = *t.options->as;
    v.bytes.resize(static_cast<std::size_t>(byte_count(info.shape, dtype_size(v.dtype))));
    return {v.dtype, Order::C, v.bytes.data(), v.bytes.size()};
  }
  v.dtype = t.options->as && info.dtype != DType::string ? *t.options->as : info.dtype;
  v.shape = info.shape;
  v.boxes = t.options->boxes;
  const std::size_t item = dtype_size(v.dtype);
  std::uint64_t total = 0;
  for (const Box& box : v.boxes) {
    if (box.start.size() != info.shape.size() || box.shape.size() != info.shape.size())
      throw Error(ErrorKind::invalid_argument, "a box of rank " + std::to_string(box.shape.size()) + " for an array of rank " +
                  std::to_string(info.shape.size()));
    for (std::size_t d = 0; d < box.shape.size(); ++d)
      if (box.start[d] < 0 || box.shape[d] < 0 || box.start[d] + box.shape[d] > info.shape[d])
        throw Error(ErrorKind::invalid_argument, "the box " + to_string(box.start) + "+" + to_string(box.shape) +
                    " is outside the array " + to_string(info.shape));
    total += byte_count(box.shape, item);
  }
  v.bytes.resize(static_cast<std::size_t>(total));
  LeafBuffer b;
  b.dtype = v.dtype;
  b.nbytes = byte_count(info.shape, item);  // shards: the whole array's size
  std::uint64_t at = 0;
  for (const Box& box : v.boxes) {
    b.shards.push_back({box, v.bytes.data() + at, MemoryKind::host, 0});
    at += byte_count(box.shape, item);
  }
  return b;
}

}  // namespace detail

CAIRN_API const char* location_kind_name(LocationKind kind) {
  switch (kind) {
    case LocationKind::checkpoint: return "checkpoint";
    case LocationKind::checkpointer_root: return "checkpointer_root";
    case LocationKind::safetensors: return "safetensors";
  }
  return "?";
}

CAIRN_API Inspection inspect(const Location& location) {
  Inspection out;
  out.kind = detail::location_kind(location);
  out.path = location.describe();
  if (out.kind == LocationKind::safetensors) {
    out.metadata = safetensors_metadata(location);
    return out;
  }
  if (out.kind == LocationKind::checkpoint) {
    out.metadata = metadata(location);
    return out;
  }
  const Store& store = location.store();
  const std::string& key = location.key();
  std::vector<std::string> names;
  for (const auto& e : store.list(key))
    if (e.is_prefix && !store.is_internal_name(e.name) && detail::is_committed_checkpoint(store, detail::join_key(key, e.name)))
      names.push_back(e.name);
  std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;  // numeric order for plain step numbers
  });
  const std::string marker = detail::join_key(key, "latest");
  if (!store.is_blob(marker)) {
    out.latest_problem = "the latest marker (" + store.describe(marker) + ") is missing";
  } else {
    out.latest_marker = true;
    try {
      out.latest = detail::read_blob(store, marker, 4096);
      while (!out.latest.empty() && (out.latest.back() == '\n' || out.latest.back() == '\r')) out.latest.pop_back();
      if (!detail::valid_utf8(out.latest)) out.latest = detail::printable_prefix(out.latest);
      if (std::find(names.begin(), names.end(), out.latest) == names.end())
        out.latest_problem = "the latest marker (" + store.describe(marker) + ") is damaged: it says '" +
                             detail::printable_prefix(out.latest) + "', which is no committed step";
    } catch (const Error& e) {
      out.latest_problem = std::string("the latest marker does not read: ") + e.what();
      out.latest.clear();
    }
  }
  if (names.empty()) out.latest_problem.clear();  // nothing committed: nothing to point at
  for (const auto& n : names) {
    InspectedStep step;
    step.name = n;
    step.latest = n == out.latest;
    try {
      const CheckpointMetadata m = metadata(location / n);
      step.created = m.created;
      step.bytes = m.total_bytes();
      if (const Json* metrics = m.user_metadata.find("metrics")) step.metrics = *metrics;
    } catch (const Error& e) {
      step.error = e.what();
    }
    out.steps.push_back(std::move(step));
  }
  return out;
}

CAIRN_API std::map<std::string, ArrayValue> read_arrays(const Location& location, const std::vector<std::string>& keys_in,
                                                       const ReadArraysOptions& options, LoadReport* report) {
  std::vector<std::string> keys;
  for (const auto& k : keys_in) keys.push_back(detail::canonical_key(k));
  std::map<std::string, ArrayValue> out;
  std::deque<detail::ArrayTarget> targets;  // the plan points into it: a deque keeps addresses
  auto plan_fn = [&](const detail::StoredIndex& index) {
    detail::LoadPlan plan;
    for (const auto& k : keys)
      if (!index.leaf(k)) throw Error(ErrorKind::not_found, "no leaf '" + k + "' (cairn ls lists them)", location.describe(), k);
    for (const auto& l : index.item().leaves) {
      const std::string key = l.key();
      if (!keys.empty() && std::find(keys.begin(), keys.end(), key) == keys.end()) continue;
      targets.push_back({&out[key], &options});
      plan.leaves.push_back({key, &l, &targets.back(), &detail::prepare_array_target});
    }
    return plan;
  };
  LoadOptions load_options;
  load_options.item = options.item;
  load_options.allow_cast = true;
  load_options.allow_lossy_cast = {"*"};  // the caller chose `as`
  load_options.on_overflow = OnOverflow::saturate;
  const LoadReport r = detail::location_kind(location) == LocationKind::safetensors
                           ? detail::load_safetensors_planned(location.store(), location.key(), load_options, {}, plan_fn)
                           : detail::load_planned(location.store(), location.key(), load_options, false, plan_fn);
  if (report) *report = r;
  return out;
}

CAIRN_END_NAMESPACE
