// SPDX-License-Identifier: Apache-2.0
// The runtime of a safetensors export. Compiled in every translation unit that includes
// cairn/safetensors/save.hpp, or once with CAIRN_SEPARATE_COMPILATION.
#pragma once

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cairn/checkpoint/c_order.hpp"
#include "cairn/checkpoint/coverage.hpp"
#include "cairn/dtype/cast_host.hpp"
#include "cairn/core/key_path.hpp"  // canonical_key
#include "cairn/format/files.hpp"  // refuse_inside_checkpoint
#include "cairn/format/root_layout.hpp"  // listed_names
#include "cairn/core/tuning.hpp"
#include "cairn/kernels/box_copy.hpp"
#include "cairn/safetensors/header.hpp"
#include "cairn/safetensors/save.hpp"
#include "cairn/store/gathered_writer.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

struct ExportTensor {
  std::string name, key;  // the safetensors name; the key path, for errors
  const SnapshotLeaf* leaf = nullptr;
  const LeafView* view = nullptr;  // leaf's view (its bytes through leaf_data)
  DType dtype = DType::float32;  // as written
  std::uint64_t nbytes = 0;
};

// The header: the tensors in file order, then "__metadata__", padded with spaces so that the
// buffer starts at a multiple of 8 bytes, as Hugging Face's writer does.
inline std::string safetensors_header_text(const std::vector<const ExportTensor*>& tensors,
                                           const std::map<std::string, std::string>& metadata) {
  std::string h = "{";
  std::uint64_t at = 0;
  for (const ExportTensor* t : tensors) {
    if (h.size() > 1) h += ',';
    append_json_string(h, t->name);
    h += ":{\"dtype\":\"";
    h += safetensors_dtype_name(t->dtype);
    h += "\",\"shape\":[";
    for (std::size_t d = 0; d < t->view->shape.size(); ++d) {
      if (d) h += ',';
      append_json_int(h, t->view->shape[d]);
    }
    h += "],\"data_offsets\":[";
    append_json_int(h, at);
    h += ',';
    append_json_int(h, at + t->nbytes);
    h += "]}";
    at += t->nbytes;
  }
  if (!metadata.empty()) {
    if (h.size() > 1) h += ',';
    h += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) h += ',';
      first = false;
      append_json_string(h, k);
      h += ':';
      append_json_string(h, v);
    }
    h += '}';
  }
  h += '}';
  while ((8 + h.size()) % 8) h += ' ';
  return h;
}

// Writes one safetensors file: small tensors gathered into few writes (GatheredWriter), large
// ones straight from their memory when they need no conversion. Returns the file's size.
inline std::uint64_t write_safetensors_file(StoreWriter& w, const std::vector<const ExportTensor*>& tensors,
                                            const std::map<std::string, std::string>& metadata, OnOverflow on_overflow) {
  const std::string header = safetensors_header_text(tensors, metadata);
  char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  GatheredWriter out(w);
  out.append(length, sizeof length);
  out.append(header.data(), header.size());
  // Each tensor in C order as written, a piece at a time (a tensor already so is written from
  // the caller's memory).
  for (const ExportTensor* t : tensors)
    if (t->nbytes > 0) {
      LeafView fetched;  // a fetched leaf's bytes, dropped once it is written
      for_each_c_order_piece(leaf_data(*t->leaf, fetched), t->dtype, on_overflow, t->key,
                             [&](const void* bytes, std::uint64_t n) { out.append(bytes, n); });
    }
  out.finish();
  return out.size();
}

inline std::string safetensors_shard_name(std::size_t i, std::size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

CAIRN_API SafetensorsSaveReport save_safetensors_snapshot(Store& store, const std::string& key_in, const ItemSnapshot& item,
                                                          const SafetensorsSaveOptions& options) {
  const std::string key = normalize_key(key_in);
  const std::string where = store.describe(key);
  refuse_inside_checkpoint(store, key);
  const std::string prefix = resolve_key(options.subtree, [&](const std::string& k) {
    return std::any_of(item.leaves.begin(), item.leaves.end(), [&](const auto& l) { return key_path_has_prefix(l.path.str(), k); });
  });
  const std::size_t depth = split_key_path(prefix).size();
  std::vector<ExportTensor> tensors;
  std::map<std::string, std::string> names;  // name -> key path
  SafetensorsSaveReport report;
  std::vector<std::string> no_dtype;  // string leaves: all named at once, not one per try
  bool prefix_found = prefix.empty();
  for (const auto& leaf : item.leaves) {
    const std::string full = leaf.path.str();
    if (!key_path_has_prefix(full, prefix)) continue;
    prefix_found = true;
    const std::string rel = prefix.empty() ? full : full.substr(std::min(full.size(), prefix.size() + 1));
    if (!options.select.empty() &&
        std::none_of(options.select.begin(), options.select.end(), [&](const std::string& g) { return glob_matches(g, rel); }))
      continue;
    ExportTensor t;
    t.key = full;
    t.leaf = &leaf;
    t.view = &leaf.view;
    for (std::size_t i = depth; i < leaf.path.size(); ++i) t.name += (i > depth ? options.separator : "") + leaf.path[i].text();
    t.dtype = cast_rule_target(options.cast, rel, leaf.view.dtype);
    if (!safetensors_dtype_name(t.dtype)) {
      no_dtype.push_back(full);
      continue;
    }
    if (!leaf.view.shards.empty())
      if (const std::uint64_t held = held_elements(leaf.view); held != element_count(leaf.view.shape))
        throw uncovered_leaf_error(held, leaf.view, "a safetensors file is written by one process, which needs all "
                                   "of it: gather the array onto this process (ShardedArray::gather), or save a cairn "
                                   "checkpoint with SaveOptions::coordinator, which every process writes its part of")
            .with_file(where)
            .with_key(full);
    if (t.dtype != leaf.view.dtype) report.cast.push_back(full);
    t.nbytes = byte_count(leaf.view.shape, dtype_size(t.dtype));
    // Only the root leaf (a tree that is one array) is named "": a leaf under a map's empty
    // key would read back as the root, so no tree could load the file.
    if (t.name.empty() && leaf.path.size() > depth)
      throw Error(ErrorKind::invalid_argument, "a map at the top of the tree has the empty string as a key, which gives the "
                  "tensor the empty name, the root's own (nest the map one level down, or give the key a name)", where, full);
    if (t.name == "__metadata__")
      throw Error(ErrorKind::invalid_argument, "the name __metadata__ is reserved by safetensors", where, full);
    if (auto [it, fresh] = names.emplace(t.name, full); !fresh)
      throw Error(ErrorKind::invalid_argument, "key paths '" + it->second + "' and '" + full + "' both become the name '" +
                  t.name + "' (choose another SafetensorsSaveOptions::separator)", where);
    report.tensor_bytes += t.nbytes;
    tensors.push_back(std::move(t));
  }
  if (!prefix_found) throw Error(ErrorKind::not_found, "the tree has no subtree '" + prefix + "'", where, prefix);
  if (!no_dtype.empty())
    throw Error(ErrorKind::invalid_argument,
                "safetensors has no dtype for string leaves, and " +
                    (no_dtype.size() == 1 ? std::string("this tree has one: ")
                                          : "this tree has " + std::to_string(no_dtype.size()) + ": ") +
                    listed_names(no_dtype, 20) +
                    "; leave them out with SafetensorsSaveOptions::select (cairn convert: --exclude GLOB), or save a "
                    "cairn checkpoint",
                where, no_dtype.front());
  // Larger elements first (the buffer starts at a multiple of 8).
  std::stable_sort(tensors.begin(), tensors.end(),
                   [](const ExportTensor& a, const ExportTensor& b) { return safetensors_writes_before(a.dtype, b.dtype); });

  if (options.max_file_bytes == 0 || report.tensor_bytes <= options.max_file_bytes) {
    std::vector<const ExportTensor*> all;
    for (const auto& t : tensors) all.push_back(&t);
    auto w = store.create_atomically(key, options.overwrite);
    write_safetensors_file(*w, all, options.metadata, options.on_overflow);
    report.files.push_back(key.substr(key.rfind('/') == std::string::npos ? 0 : key.rfind('/') + 1));
    return report;
  }
  // A sharded set in a directory, published whole.
  std::vector<std::vector<const ExportTensor*>> files(1);
  std::uint64_t in_file = 0;
  for (const auto& t : tensors) {
    if (in_file > 0 && in_file + t.nbytes > options.max_file_bytes) {
      files.emplace_back();
      in_file = 0;
    }
    files.back().push_back(&t);
    in_file += t.nbytes;
  }
  // A set (or a checkpoint) already there is replaced whole with overwrite, as a checkpoint is:
  // the new set is staged beside it and published in its place at once (store.hpp).
  auto staging = store.stage(key, options.overwrite);
  // Its looks at the key answered before a tensor is converted: a refusal of the key is the
  // export's error, whatever a conversion would have thrown.
  staging->checked();
  std::map<std::string, std::uint64_t> expected;
  Json weight_map = Json::object();
  for (std::size_t i = 0; i < files.size(); ++i) {
    const std::string name = safetensors_shard_name(i, files.size());
    auto w = store.create(join_key(staging->key(), name));
    expected[name] = write_safetensors_file(*w, files[i], options.metadata, options.on_overflow);
    for (const ExportTensor* t : files[i]) weight_map[t->name] = name;
    report.files.push_back(name);
  }
  const std::string index_name = std::string("model.safetensors") + safetensors_index_suffix;
  const std::string index =
      Json::object({{"metadata", Json::object({{"total_size", static_cast<std::int64_t>(report.tensor_bytes)}})},
                    {"weight_map", weight_map}})
          .dump();
  write_blob(store, join_key(staging->key(), index_name), index);
  expected[index_name] = index.size();
  report.files.push_back(index_name);
  staging->publish(expected);
  return report;
}

}  // namespace detail
CAIRN_END_NAMESPACE
