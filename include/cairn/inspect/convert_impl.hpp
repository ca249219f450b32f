// SPDX-License-Identifier: Apache-2.0
// The runtime of inspect/convert.hpp.
#pragma once

#include <algorithm>

#include "cairn/checkpoint/save.hpp"
#include "cairn/inspect/convert.hpp"
#include "cairn/safetensors/save.hpp"

CAIRN_BEGIN_NAMESPACE

CAIRN_API ConvertReport convert(const Location& src, const Location& dst, const ConvertOptions& options) {
  const Inspection source = inspect(src);
  if (source.kind == LocationKind::checkpointer_root)
    throw Error(ErrorKind::invalid_argument, "this is a Checkpointer root: convert one of its steps", source.path);
  const CheckpointMetadata& m = source.metadata;
  const ItemRecord* item = m.find_item(default_item_name);
  if (!item) throw Error(ErrorKind::not_found, "the source has no item 'state' to convert", source.path);
  std::vector<std::string> keys;
  for (const auto& l : item->leaves) {
    const std::string k = l.key();
    auto matches = [&](const std::vector<std::string>& globs) {
      return std::any_of(globs.begin(), globs.end(), [&](const std::string& g) { return glob_matches(g, k); });
    };
    if ((options.select.empty() || matches(options.select)) && !matches(options.exclude)) keys.push_back(k);
  }
  if (keys.empty()) throw Error(ErrorKind::invalid_argument, "no leaf matches the selection", source.path);
  const auto values = read_arrays(src, keys);
  // The source's structure, with the selected leaves viewed in the values read.
  detail::ItemSnapshot snap;
  snap.name = default_item_name;
  snap.nodes = item->nodes;
  for (const auto& l : item->leaves) {
    auto it = values.find(l.key());
    if (it == values.end()) continue;
    snap.leaves.push_back({l.path, leaf_traits<ArrayValue>::view(it->second)});
  }
  ConvertReport report;
  const bool to_safetensors = options.to == ConvertTo::safetensors ||
                              (options.to == ConvertTo::automatic &&
                               (detail::ends_with(dst.key(), ".safetensors") || options.max_file_bytes > 0));
  if (to_safetensors) {
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
      detail::save_snapshots(dst.store(), dst.key(), [&] { return std::vector<detail::ItemSnapshot>{snap}; }, o);
  report.to = ConvertTo::checkpoint;
  report.leaves = r.leaves;
  report.bytes = r.bytes_written;
  for (const CastRecord& c : r.cast) report.cast.push_back(c.key);
  return report;
}

CAIRN_END_NAMESPACE
