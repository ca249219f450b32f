// SPDX-License-Identifier: Apache-2.0
// The runtime of inspect/convert.hpp.
#pragma once

#include <algorithm>

#include "cairn/checkpoint/save.hpp"
#include "cairn/inspect/convert.hpp"
#include "cairn/inspect/formats.hpp"
#include "cairn/safetensors/save.hpp"

CAIRN_BEGIN_NAMESPACE

CAIRN_API ConvertReport convert(const Location& src, const Location& dst, const ConvertOptions& options) {
  const Inspection source = inspect(src, options.safetensors);
  if (source.kind == LocationKind::checkpointer_root)
    throw Error(ErrorKind::invalid_argument, "this is a Checkpointer root: convert one of its steps", source.path);
  const CheckpointMetadata& m = source.metadata;
  std::vector<const ItemRecord*> items;
  if (!options.item.empty()) {
    const ItemRecord* item = m.find_item(options.item);
    if (!item) throw Error(ErrorKind::not_found, "the source has no item '" + options.item + "'", source.path);
    items.push_back(item);
  } else {
    for (const ItemRecord& item : m.items) items.push_back(&item);
  }
  const bool to_safetensors = options.to == ConvertTo::safetensors ||
                              (options.to == ConvertTo::automatic &&
                               (dst.key().ends_with(".safetensors") || options.max_file_bytes > 0));
  const bool to_orbax = options.to == ConvertTo::orbax;
  const detail::ForeignFormat* orbax = to_orbax ? detail::foreign_format_of(LocationKind::orbax) : nullptr;
  if (to_orbax && (!orbax || !orbax->save))
    throw Error(ErrorKind::invalid_argument, "converting to an Orbax checkpoint needs cairn/orbax.hpp (CMake: cairn::orbax, "
                "which links libzstd); this program was built without it", dst.describe());
  if (!to_orbax && options.orbax != ConvertToOrbax{})
    throw Error(ErrorKind::invalid_argument, "ConvertOptions::orbax chooses an Orbax checkpoint's layout: it goes with "
                "ConvertTo::orbax (cairn convert --to orbax)", dst.describe());
  if (options.link) {
    if (!to_orbax)
      throw Error(ErrorKind::invalid_argument, "link makes an Orbax checkpoint that reads a cairn checkpoint's data files: "
                  "it goes with ConvertTo::orbax (cairn convert --to orbax --link)", dst.describe());
    if (source.kind != LocationKind::checkpoint || !orbax->link)
      throw Error(ErrorKind::invalid_argument, "link shares a cairn checkpoint's data files; the source is not a cairn "
                  "checkpoint", source.path);
    if (!options.cast.empty() || !options.select.empty() || !options.exclude.empty() || options.max_file_bytes ||
        options.overwrite || !(options.item.empty() || options.item == default_item_name))
      throw Error(ErrorKind::invalid_argument, "link shares the tree item's bytes as stored: no cast, select, exclude, "
                  "max_file_bytes, overwrite or other item", dst.describe());
    const detail::ForeignExport r = orbax->link(src, dst, options);
    ConvertReport report;
    report.to = ConvertTo::orbax;
    report.items = {default_item_name};
    report.leaves = r.leaves;
    report.bytes = r.bytes;
    report.linked = r.shared;
    report.copied_by_store = r.copied_by_store;
    return report;
  }
  if ((to_safetensors || to_orbax) && items.size() > 1) {
    std::string names;
    for (const ItemRecord* i : items) names += (names.empty() ? "'" : ", '") + i->name + "'";
    throw Error(ErrorKind::invalid_argument, "the source holds the items " + names +
                std::string("; ") + (to_orbax ? "an Orbax checkpoint" : "a safetensors file") +
                " holds one: choose it (ConvertOptions::item, cairn convert --item NAME)",
                source.path);
  }
  auto matches = [](const std::vector<std::string>& globs, const std::string& k) {
    return std::any_of(globs.begin(), globs.end(), [&](const std::string& g) { return glob_matches(g, k); });
  };
  // Each item's structure, with its selected leaves viewed in the values read (kept alive in
  // `values` until the save returns).
  std::vector<detail::ItemSnapshot> snaps;
  std::vector<std::map<std::string, ArrayValue>> values;
  std::uint64_t all_bytes = 0, read_before = 0;
  // A leaf cairn cannot read (a safetensors tensor of a dtype it does not have) is never left
  // out of a conversion silently: it must be excluded by name.
  for (const ItemRecord* item : items)
    for (const auto& u : item->unread) {
      const std::string k = u.path.str();
      if ((options.select.empty() || matches(options.select, k)) && !matches(options.exclude, k))
        throw Error(ErrorKind::dtype_mismatch, "this leaf is of " + u.reason + ": leave it out (ConvertOptions::exclude, "
                    "cairn convert --exclude '" + k + "') to convert the rest", source.path, k);
    }
  for (const ItemRecord* item : items)
    for (const auto& l : item->leaves) {
      const std::string k = l.key();
      if ((options.select.empty() || matches(options.select, k)) && !matches(options.exclude, k)) all_bytes += l.nbytes();
    }
  values.reserve(items.size());
  for (const ItemRecord* item : items) {
    std::vector<std::string> keys;
    for (const auto& l : item->leaves) {
      const std::string k = l.key();
      if ((options.select.empty() || matches(options.select, k)) && !matches(options.exclude, k)) keys.push_back(k);
    }
    if (keys.empty()) continue;
    // Progress over every item's leaves: the items' reads one after another.
    std::uint64_t item_bytes = 0;
    for (const auto& l : item->leaves)
      if (std::find(keys.begin(), keys.end(), l.key()) != keys.end()) item_bytes += l.nbytes();
    ReadArraysOptions ro;
    ro.item = item->name;
    ro.safetensors = options.safetensors;
    if (options.progress)
      ro.progress = [&, before = read_before](std::uint64_t done, std::uint64_t) { options.progress(before + done, all_bytes); };
    values.push_back(read_arrays(src, keys, ro));
    read_before += item_bytes;
    detail::ItemSnapshot snap;
    snap.name = item->name;
    snap.kind = item->kind;
    snap.nodes = item->nodes;
    for (const auto& l : item->leaves) {
      auto it = values.back().find(l.key());
      if (it == values.back().end()) continue;
      snap.leaves.push_back({l.path, leaf_traits<ArrayValue>::view(it->second)});
    }
    snaps.push_back(std::move(snap));
  }
  if (snaps.empty()) throw Error(ErrorKind::invalid_argument, "no leaf matches the selection", source.path);
  ConvertReport report;
  // Leaves a rule matched and left alone (the first matching rule decides, as on save).
  for (const ItemRecord* item : items)
    for (const auto& l : item->leaves) {
      const std::string k = l.key();
      if (!((options.select.empty() || matches(options.select, k)) && !matches(options.exclude, k))) continue;
      const auto rule = std::find_if(options.cast.begin(), options.cast.end(), [&](const CastRule& r) { return glob_matches(r.pattern, k); });
      if (rule != options.cast.end() && rule->dtype != l.dtype && detail::cast_rule_target(options.cast, k, l.dtype) == l.dtype)
        report.not_cast.push_back(k + " (" + dtype_name(l.dtype) + ")");
    }
  for (const auto& snap : snaps) report.items.push_back(snap.name);
  if (to_orbax) {
    if (options.max_file_bytes)
      throw Error(ErrorKind::invalid_argument, "max_file_bytes is a safetensors option; an Orbax checkpoint is one database",
                  dst.describe());
    if (options.overwrite)
      throw Error(ErrorKind::invalid_argument, "an Orbax export never replaces what is at its path: remove it first",
                  dst.describe());
    const detail::ForeignExport r = orbax->save(dst.store(), dst.key(), snaps.front(), options,
                                                m.user_metadata.is_object() ? m.user_metadata : Json::object());
    report.to = ConvertTo::orbax;
    report.leaves = r.leaves;
    report.bytes = r.bytes;
    report.cast = r.cast;
    return report;
  }
  if (to_safetensors) {
    const detail::ItemSnapshot& snap = snaps.front();
    SafetensorsSaveOptions o;
    o.overwrite = options.overwrite;
    o.cast = options.cast;
    o.max_file_bytes = options.max_file_bytes;
    for (const auto& [k, v] : m.user_metadata.items()) o.metadata[k] = v.is_string() ? v.as_string() : v.dump();
    const SafetensorsSaveReport r = detail::save_safetensors_snapshot(dst.store(), dst.key(), snap, o);
    report.to = ConvertTo::safetensors;
    report.leaves = snap.leaves.size();
    report.bytes = r.tensor_bytes;
    report.files = r.files;
    report.cast = r.cast;
    return report;
  }
  SaveOptions o;
  o.overwrite = options.overwrite;
  o.cast = options.cast;
  o.user_metadata = m.user_metadata.is_object() ? m.user_metadata : Json::object();
  const SaveReport r =
      detail::save_snapshots(dst.store(), dst.key(), [&] { return std::move(snaps); }, o);
  report.to = ConvertTo::checkpoint;
  report.leaves = r.leaves;
  report.bytes = r.bytes_written;
  for (const CastRecord& c : r.cast) report.cast.push_back(c.key);
  return report;
}

CAIRN_END_NAMESPACE
