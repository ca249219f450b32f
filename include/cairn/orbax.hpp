// SPDX-License-Identifier: Apache-2.0
// Orbax checkpoints in C++, opt-in: include this after (or instead of) cairn/cairn.hpp and
// link its code compiled once with libzstd (CMake: cairn::orbax; pkg-config and meson:
// cairn-orbax), or, header-only, libzstd alone (cairn::orbax_header_only; docs/compile-time.md).
//
//   auto state = cairn::load_orbax<State>("/ckpts/run7/1000");          // Orbax v0 or v1
//   cairn::load_orbax("/ckpts/run7/1000", params, cairn::LoadOptions::partial());
//   cairn::OrbaxCheckpoint info = cairn::orbax_metadata("/ckpts/run7/1000");
//
// Every LoadOptions works as for a cairn checkpoint: strict by default with every mismatching
// key listed, partial restore, skip globs, a subtree, casts with reports, sharded and device
// targets (each reads only the chunks it needs). See docs/orbax.md.
#pragma once

#include "cairn/cairn.hpp"
#include "cairn/inspect/formats.hpp"
#include "cairn/orbax/checkpoint.hpp"
#include "cairn/orbax/export.hpp"
#include "cairn/orbax/link.hpp"

#include <algorithm>
#include <map>
#include <string>

CAIRN_BEGIN_NAMESPACE

namespace detail::orbax {
// An Orbax CheckpointManager root (no checkpoint of its own; step directories named as
// Orbax's standard name format names them) stands for its latest finished step; anything
// else is returned as it is (the definition, below, says how the step is picked).
CAIRN_API Location latest_if_manager_root(const Location& location);
// What the templates below call: a load into a target the planner maps, and an export of a
// tree's views. With CAIRN_SEPARATE_COMPILATION they are compiled once (src/orbax.cpp, the
// cairn::orbax library), so a file that loads or saves Orbax checkpoints compiles none of
// the reader's or the writer's code.
CAIRN_API LoadReport load_orbax_at(const Location& location, const LoadOptions& options,
                                   FunctionRef<LoadPlan(const StoredIndex&)> plan);
CAIRN_API OrbaxSaveReport save_orbax_at(const Location& location, const ItemSnapshot& item, const OrbaxSaveOptions& options);
// Registers the format with inspect, read_arrays, verify, convert and the `cairn` tool.
CAIRN_API bool register_orbax_format();
}  // namespace detail::orbax

// Loads the Orbax checkpoint at `location` (a checkpoint directory, Orbax v0 or v1, or one
// pytree's directory; a CheckpointManager root loads its latest step) into an existing target. options.item picks the checkpointable: "state"
// (the default) is the checkpoint's pytree, whatever Orbax named it.
template <class T>
LoadReport load_orbax(const Location& location, T& target, const LoadOptions& options = {}) {
  require_tree_type<T>();
  return detail::orbax::load_orbax_at(location, options,
                                      [&](const detail::StoredIndex& index) { return detail::plan_load(target, index, options); });
}
// Loads a new T (default-constructed, then filled from the checkpoint).
template <class T>
T load_orbax(const Location& location, const LoadOptions& options = {}) {
  T value{};
  load_orbax(location, value, options);
  return value;
}

// Writes `tree` as an Orbax checkpoint at `location` (which must not exist): OCDBT + zarr v3,
// laid out as Orbax v1's ocp.save writes it unless options.layout says v0_standard. Orbax
// restores it (ocp.load_pytree / StandardCheckpointer().restore), and so does load_orbax.
// Staged and published whole: nothing is at the path until it is complete. Sharded arrays are
// written one chunk per device block, with their mesh and partition spec in _sharding; with
// options.coordinator every rank calls this with its own shards and writes its blocks into its
// own database, as Orbax's processes do. See docs/orbax.md.
template <class T>
OrbaxSaveReport save_orbax(const Location& location, const T& tree, const OrbaxSaveOptions& options = {}) {
  require_tree_type<T>();
  return detail::orbax::save_orbax_at(location, detail::view_tree(default_item_name, tree), options);
}

// Shows the cairn checkpoint at `checkpoint` to Orbax without copying its data: an Orbax
// checkpoint at `orbax_dir` (which must not exist) whose OCDBT values are byte ranges of the
// checkpoint's data files, hard-linked under its d/ (copied where the filesystem or store cannot
// share them: report.files_shared says which). The tree item only; bytes as stored (no cast,
// no zstd); a leaf whose chunks zarr cannot take as they are (an uneven split) is written anew.
// user metadata becomes _CHECKPOINT_METADATA's (its metrics and custom metadata: see
// take_user_metadata) unless options.custom_metadata or options.metrics is set. Deleting the
// cairn checkpoint afterwards leaves the Orbax one whole (hard links). See docs/orbax.md.
CAIRN_API OrbaxLinkReport link_as_orbax(const Location& checkpoint, const Location& orbax_dir, const OrbaxSaveOptions& options = {});

// What the Orbax checkpoint at `location` holds: its records (as cairn::metadata gives a
// checkpoint's), the JSON checkpointables' values, and what is there but not read.
CAIRN_API OrbaxCheckpoint orbax_metadata(const Location& location);

namespace detail::orbax {
// Registered once per program, by whichever file includes this header first (a file of
// cairn::orbax's library itself where it is compiled once).
inline const bool format_registered = register_orbax_format();
}  // namespace detail::orbax

#if CAIRN_DEFINES_ORBAX
// The definitions: in every including file when header-only; with CAIRN_SEPARATE_COMPILATION,
// only in src/orbax.cpp (CAIRN_BUILDING_ORBAX).
CAIRN_API OrbaxLinkReport link_as_orbax(const Location& checkpoint, const Location& orbax_dir, const OrbaxSaveOptions& options) {
  return detail::orbax::link_as_orbax(checkpoint, orbax_dir.store(), orbax_dir.key(), options);
}

CAIRN_API OrbaxCheckpoint orbax_metadata(const Location& location) {
  const Location at = detail::orbax::latest_if_manager_root(location);
  detail::orbax::OrbaxView view(at.store(), at.key());
  return detail::orbax::open_orbax(view);
}

namespace detail::orbax {

// An Orbax CheckpointManager root (no checkpoint of its own; step directories named as
// Orbax's standard name format names them: "100", zero-padded "00000100", or with a
// step_prefix "checkpoint_100") stands for its latest finished step, the highest number, as
// CheckpointManager.latest_step() picks it (a save in progress or one that died is passed
// over: orbax_unfinished). Steps of plain numbers where there are any; else the one prefix
// whose highest step is an Orbax checkpoint (with several such, which is meant is not guessed).
// Anything else is returned as it is, for the load's own error.
CAIRN_API Location latest_if_manager_root(const Location& location) {
  const Store& store = location.store();
  if (looks_like_orbax(store, location.key())) return location;
  std::map<std::string, std::vector<std::pair<std::int64_t, std::string>>, std::less<>> by_prefix;
  for (const auto& e : store.list(location.key())) {
    std::string_view prefix;
    std::int64_t step = 0;
    if (e.is_prefix && orbax_step_name(e.name, prefix, step)) by_prefix[std::string(prefix)].emplace_back(step, e.name);
  }
  for (auto& [prefix, steps] : by_prefix)  // highest first; of equal steps (padded apart), the name's order
    std::sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second > b.second; });
  const std::vector<std::pair<std::int64_t, std::string>>* steps = nullptr;
  if (auto plain = by_prefix.find(""); plain != by_prefix.end()) {
    steps = &plain->second;
  } else {
    for (const auto& [prefix, named] : by_prefix)
      if (looks_like_orbax(store, join_key(location.key(), named.front().second))) {
        if (steps) return location;  // two managers' steps (or a manager's and other Orbax checkpoints)
        steps = &named;
      }
  }
  if (!steps) return location;
  for (const auto& [step, name] : *steps) {
    const std::string key = join_key(location.key(), name);
    if (looks_like_orbax(store, key) && orbax_unfinished(store, key, nullptr).empty()) return location / name;
  }
  return location;
}

// Orbax checkpoints for inspect, read_arrays, verify, convert and the `cairn` tool.
inline ForeignView open_view(const Store& store, const std::string& key) {
  auto view = std::make_shared<OrbaxView>(store, key);
  ForeignView v;
  v.metadata = open_orbax(*view).metadata;
  v.store = std::move(view);
  return v;
}

// convert's choice of layout, as OrbaxSaveOptions spells it.
inline OrbaxSaveOptions save_options_of(const ConvertOptions& options) {
  OrbaxSaveOptions o;
  o.layout = options.orbax.v0_standard ? OrbaxLayout::v0_standard : OrbaxLayout::v1;
  o.zarr3 = options.orbax.zarr3;
  o.ocdbt = options.orbax.ocdbt;
  o.zstd_level = options.orbax.zstd_level;
  return o;
}

// convert's export: the source's user metadata becomes _CHECKPOINT_METADATA's (take_user_metadata).
inline ForeignExport export_item(Store& store, const std::string& key, const ItemSnapshot& item,
                                 const ConvertOptions& options, const Json& user_metadata) {
  OrbaxSaveOptions o = save_options_of(options);
  o.cast = options.cast;
  take_user_metadata(user_metadata, o);
  const OrbaxSaveReport r = save_orbax_snapshot(store, key, item, o);
  return {r.leaves, r.bytes, r.cast};
}

// convert's link: the cairn checkpoint's data files shared (bytes: linked and rewritten).
inline ForeignExport link_item(const Location& checkpoint, const Location& dst, const ConvertOptions& options) {
  const OrbaxLinkReport r = link_as_orbax(checkpoint, dst.store(), dst.key(), save_options_of(options));
  return {r.leaves, r.linked_bytes + r.rewritten_bytes, {}, r.files_shared, r.files_copied_by_store};
}

CAIRN_API bool register_orbax_format() {
  orbax_reader_included = true;  // (format/verified_read.hpp's hint)
  register_foreign_format({LocationKind::orbax, static_cast<bool (*)(const Store&, const std::string&, const std::vector<StoreEntry>*)>(&looks_like_orbax), &open_view, &load_orbax_planned, &export_item, &link_item,
                           [](const Store& store, const std::string& key) { return orbax_unfinished(store, key, nullptr).empty(); }});
  return true;
}

CAIRN_API LoadReport load_orbax_at(const Location& location, const LoadOptions& options,
                                   FunctionRef<LoadPlan(const StoredIndex&)> plan) {
  const Location at = latest_if_manager_root(location);
  return load_orbax_planned(at.store(), at.key(), options, plan);
}

CAIRN_API OrbaxSaveReport save_orbax_at(const Location& location, const ItemSnapshot& item, const OrbaxSaveOptions& options) {
  return save_orbax_snapshot(location.store(), location.key(), item, options);
}

}  // namespace detail::orbax

#endif  // CAIRN_DEFINES_ORBAX

CAIRN_END_NAMESPACE
