// SPDX-License-Identifier: Apache-2.0
// The runtime of inspect/inspect.hpp.
#pragma once

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_set>

#include "cairn/checkpoint/load.hpp"
#include "cairn/checkpoint/missing_key.hpp"
#include "cairn/checkpoint/stored_index.hpp"
#include "cairn/core/parallel.hpp"
#include "cairn/core/utf8.hpp"
#include "cairn/format/files.hpp"
#include "cairn/inspect/formats.hpp"
#include "cairn/inspect/inspect.hpp"
#include "cairn/safetensors/header.hpp"
#include "cairn/safetensors/load.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

inline bool names_safetensors(const std::string& key) {
  return key.ends_with(".safetensors") || key.ends_with(safetensors_index_suffix);
}

// A directory holding a sharded safetensors set (what convert --max-file-bytes writes) read
// as the set: the location of its one *.safetensors.index.json. Anything else as it is.
// `committed` (where given) learns whether the location returned is a committed cairn
// checkpoint, when that was looked up on the way: the steps after it need not ask the store
// again (each look is a request on an object store: `cairn show` on a bucket made three HEADs
// of one marker before it read anything).
// `listing` (where given) receives the listing of the location's own key, where one was read
// and the location is returned unchanged.
inline Location safetensors_set_or(const Location& location, std::optional<bool>* committed = nullptr,
                                   std::optional<std::vector<StoreEntry>>* listing = nullptr) {
  if (names_safetensors(location.key())) return location;
  const Store& store = location.store();
  const bool is_checkpoint = is_committed_checkpoint(store, location.key());
  if (committed) *committed = is_checkpoint;
  if (is_checkpoint) return location;
  // A set whose overwrite was interrupted between its two renames (a filesystem without an
  // atomic exchange) is read where it was set aside, until the next export there puts it back.
  std::string dir = location.key();
  try {
    dir = store.readable_checkpoint(dir);
  } catch (const Error&) {
    return location;  // a save's staging: the load says so
  }
  std::string index;
  std::vector<StoreEntry> entries = store.list(dir);
  for (const auto& e : entries) {
    if (e.is_prefix || !e.name.ends_with(std::string(".safetensors") + safetensors_index_suffix)) continue;
    if (!index.empty()) return location;  // two sets: the caller names one
    index = e.name;
  }
  if (index.empty()) {
    if (listing && dir == location.key()) *listing = std::move(entries);
    return location;
  }
  if (committed) committed->reset();  // another location: not looked at
  return Location(location.shared_store(), join_key(dir, index));
}

// Registered formats: a deque, so that the pointers foreign_format_at returns stay valid.
inline std::deque<ForeignFormat>& foreign_formats() {
  static std::deque<ForeignFormat> formats;
  return formats;
}
inline std::mutex& foreign_formats_mutex() {
  static std::mutex m;
  return m;
}

// inspect's and verify's look at a Checkpointer root: the root's listing, read once (its
// steps, its `latest` marker and its incomplete steps all come from it), and, for inspect,
// what reading each step's metadata found where that read was also the look at whether the
// step committed (only what `cairn ls` shows of it is kept: a root of many large steps is
// never all in memory).
struct RootReading {
  bool read_steps = true;  // false (verify): the steps' metadata is read later, one at a time
  std::optional<std::vector<StoreEntry>> listing;
  std::map<std::string, InspectedStep> steps;  // the steps read that way (`error` where it failed)
  // The steps that are another system's checkpoints (Orbax's), each with the format that
  // recognized it (not asked again: on a bucket, a listing each).
  std::map<std::string, const ForeignFormat*> foreign;
  // Other systems' saves there that have not finished (an Orbax save's temporary directory,
  // under any name): listed as incomplete, as a cairn step without its marker is.
  std::vector<std::string> foreign_unfinished;

  // The format of the step `name` where it is another system's checkpoint, else null (cairn's).
  const ForeignFormat* format_of(const std::string& name) const {
    const auto f = foreign.find(name);
    return f == foreign.end() ? nullptr : f->second;
  }
};

// What `cairn ls` shows of a step.
inline void summarize_step(const CheckpointMetadata& m, InspectedStep& step) {
  step.created = m.created;
  step.bytes = m.total_bytes();
  if (const Json* metrics = m.user_metadata.find("metrics")) step.metrics = *metrics;
}

// The committed checkpoints directly under `location`, as committed_children finds them, for
// inspect: in a Checkpointer's root (its listing holds the `latest` marker) a step's metadata
// is read straight away, and only where that fails is its marker asked for, to tell a step
// that never committed from a damaged one: on a bucket, a HEAD and two round trips fewer per
// step than asking first and reading after (`cairn ls` of a root of 6 steps: 49 requests,
// 31 of them per step). Other directories are asked first, as their names may be anything.
inline std::vector<std::string> read_children(const Location& location, RootReading& root) {
  const Store& store = location.store();
  if (!root.listing) root.listing = store.list(location.key());
  const bool checkpointer_root = std::any_of(root.listing->begin(), root.listing->end(),
                                             [](const StoreEntry& e) { return !e.is_prefix && e.name == "latest"; });
  std::vector<std::string> candidates;
  for (const auto& e : *root.listing)
    if (e.is_prefix && !store.is_internal_name(e.name)) candidates.push_back(e.name);
  std::vector<char> committed(candidates.size(), 0);
  std::vector<std::optional<InspectedStep>> read(candidates.size());
  for_each_index(candidates.size(), store.parallel_reads(), [&](std::size_t i) {
    const Location step = location / candidates[i];
    if (!root.read_steps || !checkpointer_root || !looks_like_step_name(candidates[i])) {
      committed[i] = is_committed_checkpoint(store, step.key());
      return;
    }
    try {
      InspectedStep s;
      summarize_step(metadata(step), s);
      read[i] = std::move(s);
      committed[i] = 1;
    } catch (const Error& e) {
      committed[i] = is_committed_checkpoint(store, step.key());
      if (committed[i]) {
        read[i].emplace();
        read[i]->error = e.what();
      }
    }
  });
  std::vector<std::string> names;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    if (!committed[i]) continue;
    if (read[i]) root.steps.emplace(candidates[i], std::move(*read[i]));
    names.push_back(std::move(candidates[i]));
  }
  sort_in_step_order(names);
  return names;
}

// The directories under `key` (its `listing`) that are finished checkpoints of another
// system's format (ForeignFormat), under any name, leaving out `cairn_names` (cairn's own
// committed checkpoints there), each with its format. Each other directory is listed,
// parallel_reads() at a time; one that cannot be listed is none. `unfinished`, where given,
// receives the names of those whose format says the save has not finished.
inline std::map<std::string, const ForeignFormat*> foreign_children(const Store& store, const std::string& key,
                                                 const std::vector<StoreEntry>& listing,
                                                 const std::vector<std::string>& cairn_names,
                                                 std::vector<std::string>* unfinished = nullptr) {
  {
    std::lock_guard<std::mutex> lock(foreign_formats_mutex());
    if (foreign_formats().empty()) return {};
  }
  const std::unordered_set<std::string> cairn(cairn_names.begin(), cairn_names.end());
  std::vector<std::string> candidates;
  for (const auto& e : listing)
    if (e.is_prefix && !store.is_internal_name(e.name) && !cairn.count(e.name)) candidates.push_back(e.name);
  std::vector<const ForeignFormat*> found(candidates.size(), nullptr);
  std::vector<char> in_progress(candidates.size(), 0);
  for_each_index(candidates.size(), store.parallel_reads(), [&](std::size_t i) {
    const std::string at = join_key(key, candidates[i]);
    try {
      if (const ForeignFormat* f = foreign_format_at(store, at)) {
        if (!f->finished || f->finished(store, at)) found[i] = f;
        else in_progress[i] = 1;
      }
    } catch (const Error&) {
    }
  });
  std::map<std::string, const ForeignFormat*> out;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    if (in_progress[i] && unfinished) unfinished->push_back(candidates[i]);
    if (found[i]) out.emplace(std::move(candidates[i]), found[i]);
  }
  return out;
}

// What is at `location`; for a Checkpointer root, `steps` receives its committed steps (the
// listing that decided it, so that nobody lists the root again).
// `committed`: whether it is a committed cairn checkpoint, where the caller knows already;
// `format` (where given) receives the other system's format found there, if any; `root`
// (inspect's), where given, receives the root's listing and the steps' metadata read on the way.
inline LocationKind location_kind(const Location& location, std::vector<std::string>* steps = nullptr,
                                  std::optional<bool> committed = std::nullopt, const ForeignFormat** format = nullptr,
                                  RootReading* root = nullptr) {
  if (names_safetensors(location.key())) return LocationKind::safetensors;
  const Store& store = location.store();
  if (committed ? *committed : is_committed_checkpoint(store, location.key())) return LocationKind::checkpoint;
  // inspect lists the location here, once: the other formats look for their files in the
  // listing, and the steps of a root come from it.
  if (root && !root->listing) root->listing = store.list(location.key());
  if (const ForeignFormat* f = foreign_format_at(store, location.key(), root ? &*root->listing : nullptr)) {
    if (format) *format = f;
    return f->kind;
  }
  std::optional<std::vector<StoreEntry>> listed;
  if (!root) listed = store.list(location.key());
  std::vector<std::string> names = root ? read_children(location, *root) : committed_children(store, location.key(), &*listed);
  const std::vector<StoreEntry>& listing = root ? *root->listing : *listed;
  // Other systems' checkpoints in it (Orbax's: a CheckpointManager's steps, or exports under
  // any name), beside cairn's or instead of them: listed and verified with them, never left
  // out unsaid (`cairn verify` of a directory said OK having checked only cairn's).
  std::map<std::string, const ForeignFormat*> foreign =
      foreign_children(store, location.key(), listing, names, root ? &root->foreign_unfinished : nullptr);
  if (names.empty() && foreign.empty()) return LocationKind::checkpoint;  // read as one, for the load's own error
  for (const auto& [name, f] : foreign) names.push_back(name);
  sort_in_step_order(names);
  if (root) root->foreign = std::move(foreign);
  if (steps) *steps = std::move(names);
  return LocationKind::checkpointer_root;
}

// The records of a checkpoint, or of another system's checkpoint read through its format.
// `committed`: a committed cairn checkpoint is there (no other format is looked for);
// `format`: the other system's format location_kind found there.
inline CheckpointMetadata metadata_of(const Location& location, bool committed = false, const ForeignFormat* format = nullptr) {
  if (committed) return metadata(location);
  if (format) return format->open(location.store(), location.key()).metadata;
  if (const ForeignFormat* f = foreign_format_at(location.store(), location.key()))
    return f->open(location.store(), location.key()).metadata;
  return metadata(location);
}

// A Checkpointer root's steps and its `latest` marker, without reading the steps' metadata;
// `listing`: the root's, where the caller has it (else the root is listed here).
inline Inspection inspect_root(const Location& location, std::vector<std::string> names,
                               const std::vector<StoreEntry>* listing = nullptr) {
  Inspection out;
  out.kind = LocationKind::checkpointer_root;
  out.path = location.describe();
  const Store& store = location.store();
  std::optional<std::vector<StoreEntry>> listed;
  if (!listing) listing = &listed.emplace(store.list(location.key()));
  const std::string marker = join_key(location.key(), "latest");
  if (std::none_of(listing->begin(), listing->end(), [](const StoreEntry& e) { return !e.is_prefix && e.name == "latest"; })) {
    // A Checkpointer would find and repair this root only where every name is a step (as
    // describe_checkpointer_root tells a load): else it is a plain directory of checkpoints,
    // where a marker was never missing.
    out.plain_directory = !all_step_names(names);
    // (Not damage: checkpoints saved by cairn::save at step-numbered paths, the README's own
    // example, have none; nor does a Checkpointer's first step before its marker is written.)
    if (!out.plain_directory)
      out.latest_problem = "there is no latest marker (" + store.describe(marker) +
                           "): steps saved by cairn::save, or a Checkpointer stopped before writing it";
  } else {
    out.latest_marker = true;
    try {
      out.latest = read_blob(store, marker, 4096);
      while (!out.latest.empty() && (out.latest.back() == '\n' || out.latest.back() == '\r')) out.latest.pop_back();
      if (!valid_utf8(out.latest)) out.latest = printable_prefix(out.latest);
      if (std::find(names.begin(), names.end(), out.latest) == names.end())
        out.latest_problem = "the latest marker (" + store.describe(marker) + ") is damaged: it says '" +
                             printable_prefix(out.latest) + "', which is no committed step";
    } catch (const Error& e) {
      out.latest_problem = std::string("the latest marker does not read: ") + e.what();
      out.latest.clear();
    }
  }
  for (const auto& e : *listing)
    if (e.is_prefix && !store.is_internal_name(e.name) && looks_like_step_name(e.name) &&
        std::find(names.begin(), names.end(), e.name) == names.end())
      out.incomplete.push_back(e.name);
  sort_in_step_order(out.incomplete);
  for (auto& n : names) {
    InspectedStep step;
    step.latest = n == out.latest;
    step.name = std::move(n);
    out.steps.push_back(std::move(step));
  }
  return out;
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

CAIRN_API void detail::register_foreign_format(const ForeignFormat& format) {
  std::lock_guard<std::mutex> lock(foreign_formats_mutex());
  for (const auto& f : foreign_formats())
    if (f.kind == format.kind) return;
  foreign_formats().push_back(format);
}

CAIRN_API const detail::ForeignFormat* detail::foreign_format_at(const Store& store, const std::string& key,
                                                                 const std::vector<StoreEntry>* listing) {
  std::vector<const ForeignFormat*> formats;
  {
    std::lock_guard<std::mutex> lock(foreign_formats_mutex());
    for (const auto& f : foreign_formats()) formats.push_back(&f);
  }
  for (const ForeignFormat* f : formats)
    if (f->recognizes(store, key, listing)) return f;
  return nullptr;
}

CAIRN_API const detail::ForeignFormat* detail::foreign_format_of(LocationKind kind) {
  std::lock_guard<std::mutex> lock(foreign_formats_mutex());
  for (const auto& f : foreign_formats())
    if (f.kind == kind) return &f;
  return nullptr;
}

CAIRN_API const char* location_kind_name(LocationKind kind) {
  switch (kind) {
    case LocationKind::checkpoint: return "checkpoint";
    case LocationKind::checkpointer_root: return "checkpointer_root";
    case LocationKind::safetensors: return "safetensors";
    case LocationKind::orbax: return "orbax";
  }
  return "?";
}

CAIRN_API Inspection inspect(const Location& given, const SafetensorsOptions& safetensors) {
  std::optional<bool> committed;
  detail::RootReading root;
  const Location location = detail::safetensors_set_or(given, &committed, &root.listing);
  std::vector<std::string> names;
  const detail::ForeignFormat* format = nullptr;
  const LocationKind kind = detail::location_kind(location, &names, committed, &format, &root);
  if (kind == LocationKind::checkpointer_root) {
    Inspection out = detail::inspect_root(location, std::move(names), root.listing ? &*root.listing : nullptr);
    // Other systems' unfinished saves, under any name (inspect_root found those named like steps).
    for (auto& n : root.foreign_unfinished)
      if (std::find(out.incomplete.begin(), out.incomplete.end(), n) == out.incomplete.end()) out.incomplete.push_back(std::move(n));
    detail::sort_in_step_order(out.incomplete);
    // Another system's manager root (Orbax's CheckpointManager) keeps no `latest` marker: its
    // latest step is the highest, and nothing is missing.
    if (!out.latest_marker && !root.foreign.empty() && root.foreign.size() == out.steps.size()) {
      out.latest_problem.clear();
      // Steps named with Orbax's step_prefix ("checkpoint_100"): a manager root, whose latest
      // is the highest (load_orbax's), not a plain directory of checkpoints.
      std::vector<std::string> step_names;
      for (const InspectedStep& s : out.steps) step_names.push_back(s.name);
      if (out.plain_directory && detail::orbax_steps_of_one_manager(step_names)) out.plain_directory = false;
    }
    // Each step's metadata, Store::parallel_reads() at a time (a bucket's round trips).
    detail::for_each_index(out.steps.size(), location.store().parallel_reads(), [&](std::size_t i) {
      InspectedStep& step = out.steps[i];
      if (auto it = root.steps.find(step.name); it != root.steps.end()) {  // read as it was found
        it->second.name = std::move(step.name);
        it->second.latest = step.latest;
        step = std::move(it->second);
        return;
      }
      try {
        // A cairn checkpoint is read as one (no other format is asked); another system's through its format.
        const Location at = location / step.name;
        const detail::ForeignFormat* step_format = root.format_of(step.name);
        if (step_format) step.kind = step_format->kind;
        detail::summarize_step(detail::metadata_of(at, !step_format, step_format), step);
      } catch (const Error& e) {
        step.error = e.what();
      }
    });
    return out;
  }
  Inspection out;
  out.kind = kind;
  out.path = location.describe();
  out.metadata = kind == LocationKind::safetensors ? safetensors_metadata(location, safetensors)
                                                   : detail::metadata_of(location, committed.value_or(false), format);
  return out;
}

CAIRN_API std::map<std::string, ArrayValue> read_arrays(const Location& given, const std::vector<std::string>& keys_in,
                                                       const ReadArraysOptions& options, LoadReport* report) {
  std::optional<bool> committed;
  const Location location = detail::safetensors_set_or(given, &committed);
  std::vector<std::string> keys;
  std::map<std::string, ArrayValue> out;
  std::deque<detail::ArrayTarget> targets;  // the plan points into it: a deque keeps addresses
  auto plan_fn = [&](const detail::StoredIndex& index) {
    detail::LoadPlan plan;
    keys.clear();
    for (const auto& k : keys_in)
      keys.push_back(detail::resolve_key(k, [&](const std::string& s) { return index.leaf(s) || index.has_node(s); }));
    for (const auto& k : keys)
      if (!index.leaf(k)) {
        if (const UnreadLeaf* u = index.item().find_unread(k))
          throw Error(ErrorKind::dtype_mismatch, "this leaf is of " + u->reason, location.describe(), k);
        if (!k.empty() && index.has_node(k)) {
          std::vector<std::string> under;  // a subtree: name what it holds
          for (const auto& l : index.item().leaves)
            if (key_path_has_prefix(l.key(), k)) under.push_back(l.key());
          throw Error(ErrorKind::not_found, "'" + k + "' is a subtree, not a leaf: its leaves are " + detail::listed_names(under),
                      location.describe(), k);
        }
        throw Error(ErrorKind::not_found, "no leaf '" + k + "'" + detail::missing_key_hint(index.item().leaves, k) + " (cairn ls lists them)",
                    location.describe(), k);
      }
    const std::unordered_set<std::string> wanted(keys.begin(), keys.end());  // (a find per leaf was quadratic)
    for (const auto& l : index.item().leaves) {
      const std::string key = l.key();
      if (!keys.empty() && !wanted.count(key)) continue;
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
  load_options.progress = options.progress;
  // Leaves named: the others, readable or not (ItemRecord::unread), are not asked for. Every
  // leaf: one cairn cannot read is refused (account_unread), not left out silently.
  load_options.allow_unexpected = !keys_in.empty();
  const detail::ForeignFormat* foreign = detail::names_safetensors(location.key()) || committed.value_or(false)
                                              ? nullptr
                                              : detail::foreign_format_at(location.store(), location.key());
  const LoadReport r = detail::names_safetensors(location.key())
                           ? detail::load_safetensors_planned(location.store(), location.key(), load_options, options.safetensors, plan_fn)
                       : foreign ? foreign->load(location.store(), location.key(), load_options, plan_fn)
                                 : detail::load_planned(location.store(), location.key(), load_options, false, plan_fn);
  if (report) *report = r;
  return out;
}

CAIRN_END_NAMESPACE
