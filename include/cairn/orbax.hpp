// SPDX-License-Identifier: Apache-2.0
// Orbax checkpoints in C++, opt-in: include this after (or instead of) cairn/cairn.hpp and
// link libzstd (CMake: cairn::orbax; pkg-config: cairn-orbax; meson: dependency('cairn-orbax')).
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

CAIRN_BEGIN_NAMESPACE

// Loads the Orbax checkpoint at `location` (a checkpoint directory, Orbax v0 or v1, or one
// pytree's directory) into an existing target. options.item picks the checkpointable: "state"
// (the default) is the checkpoint's pytree, whatever Orbax named it.
template <class T>
LoadReport load_orbax(const Location& location, T& target, const LoadOptions& options = {}) {
  require_tree_type<T>();
  return detail::orbax::load_orbax_planned(location.store(), location.key(), options,
                                           [&](const detail::StoredIndex& index) { return detail::plan_load(target, index, options); });
}
// Loads a new T (default-constructed, then filled from the checkpoint).
template <class T>
T load_orbax(const Location& location, const LoadOptions& options = {}) {
  T value{};
  load_orbax(location, value, options);
  return value;
}

// What the Orbax checkpoint at `location` holds: its records (as cairn::metadata gives a
// checkpoint's), the JSON checkpointables' values, and what is there but not read.
inline OrbaxCheckpoint orbax_metadata(const Location& location) {
  detail::orbax::OrbaxView view(location.store(), location.key());
  return detail::orbax::open_orbax(view);
}

namespace detail::orbax {

// Orbax checkpoints for inspect, read_arrays, verify, convert and the `cairn` tool.
inline ForeignView open_view(const Store& store, const std::string& key) {
  auto view = std::make_shared<OrbaxView>(store, key);
  ForeignView v;
  v.metadata = open_orbax(*view).metadata;
  v.store = std::move(view);
  return v;
}

inline const bool format_registered = [] {
  register_foreign_format({LocationKind::orbax, &looks_like_orbax, &open_view, &load_orbax_planned});
  return true;
}();

}  // namespace detail::orbax

CAIRN_END_NAMESPACE
