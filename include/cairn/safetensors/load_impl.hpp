// SPDX-License-Identifier: Apache-2.0
// The runtime of a safetensors load: the headers become checkpoint records (one chunk per
// tensor, at its offset in its file, without a checksum), and the load runs as a checkpoint's
// does, through the same planner and reader. Compiled in every translation unit that includes
// cairn/safetensors/load.hpp, or once with CAIRN_SEPARATE_COMPILATION.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "cairn/checkpoint/load_protocol.hpp"
#include "cairn/safetensors/header.hpp"
#include "cairn/safetensors/load.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// A tensor name as a key path (SafetensorsOptions says how).
inline KeyPath safetensors_key_path(const std::string& name, const SafetensorsOptions& names) {
  KeyPath p;
  auto add = [&](std::string_view seg) {
    bool index = !seg.empty() && seg.size() <= 18 && (seg[0] != '0' || seg.size() == 1);
    for (char c : seg) index = index && c >= '0' && c <= '9';
    if (index) p.push_back(KeyEntry::index(std::stoll(std::string(seg))));
    else if (seg.empty()) p.push_back(KeyEntry::key(""));
    else p.push_back(KeyEntry::field(std::string(seg)));
  };
  if (name.empty()) return p;  // the root: a tree that is one leaf exports as the name ""
  // An untrusted name: no deeper than a tree may be (a path of it would throw invalid_argument).
  if (!names.separator.empty()) {
    std::size_t parts = 1;
    for (std::size_t at = name.find(names.separator); at != std::string::npos; at = name.find(names.separator, at + names.separator.size()))
      ++parts;
    if (parts > max_tree_depth)
      throw Error(ErrorKind::corrupt, "a tensor name of " + std::to_string(parts) + " parts, more than the " +
                  std::to_string(max_tree_depth) + " entries a key path may have (cairn::max_tree_depth)", {}, name.substr(0, 200));
  }
  if (names.separator.empty()) {
    p.push_back(KeyEntry::field(name));
    return p;
  }
  std::size_t start = 0;
  while (true) {
    const std::size_t at = name.find(names.separator, start);
    add(std::string_view(name).substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) break;
    start = at + names.separator.size();
  }
  return p;
}

// The records of the safetensors file, or of the set an index names, at `key`.
// With `read_ahead` (a load, not a look at the metadata), the files' bytes are fetched while
// a long header is parsed.
inline OpenedCheckpoint open_safetensors(const Store& store, const std::string& key_in, const SafetensorsOptions& names,
                                         bool read_ahead) {
  const std::string key = normalize_key(key_in);
  OpenedCheckpoint c;
  c.key = key_parent(key);
  c.records = c.name = store.describe(key);
  CheckpointMetadata& m = c.metadata;
  m.library_version = "safetensors";
  m.user_metadata = Json::object();
  // file name -> the tensors the index puts there (empty without an index)
  std::map<std::string, std::set<std::string>> listed;
  const bool is_index = key.size() > std::string_view(safetensors_index_suffix).size() &&
                        key.compare(key.size() - std::string_view(safetensors_index_suffix).size(), std::string::npos,
                                    safetensors_index_suffix) == 0;
  if (is_index) {
    // The index and its shards may be symbolic links (the Hugging Face cache): followed, the
    // shards' names taken relative to the directory the user named.
    const Json index = Json::parse(read_blob(store, store.follow_link(key), max_safetensors_header_bytes), c.records);
    try {
      if (const Json* meta = index.find("metadata"); meta && meta->is_object()) m.user_metadata = *meta;
      for (const auto& [tensor, file] : index.at("weight_map").items()) {
        const std::string& f = file.as_string();
        if (!is_plain_file_name(f))
          throw Error(ErrorKind::corrupt, "weight_map puts '" + tensor + "' in '" + f + "', not a plain file name");
        listed[f].insert(tensor);
      }
    } catch (const Error& e) {
      throw Error(ErrorKind::corrupt, "bad safetensors index: " + e.message(), c.records, e.key_path());
    }
    if (listed.empty()) throw Error(ErrorKind::corrupt, "the index's weight_map names no tensors", c.records);
  } else {
    const std::string file = key.substr(c.key.empty() ? 0 : c.key.size() + 1);
    listed[file];
  }
  ItemRecord item;
  item.name = default_item_name;
  std::map<std::string, std::string> owner;  // printed key path -> tensor name
  for (const auto& [file, tensors] : listed) {
    const std::string named = join_key(c.key, file);
    const std::string file_key = store.follow_link(named);
    if (file_key != named) c.file_keys[file] = file_key;
    std::uint64_t file_size = 0;
    const std::string header = read_safetensors_header_text(store, file_key, file_size);
    // A long header (many tensors) takes a while to parse and turn into records: the files'
    // bytes are read ahead meanwhile, as for a checkpoint (checkpoint/read_ahead.hpp).
    if (read_ahead && !c.read_ahead && header.size() >= read_ahead_min_metadata_bytes) {
      std::vector<std::string> keys;
      for (const auto& [f, t] : listed) keys.push_back(store.follow_link(join_key(c.key, f)));
      c.read_ahead = start_read_ahead(store, std::move(keys));
    }
    const SafetensorsHeader h = parse_safetensors_header_text(header, file_size, store.describe(file_key));
    m.data_files.push_back(file);
    if (!is_index)
      for (const auto& [k, v] : h.metadata) m.user_metadata[k] = v;
    std::size_t found = 0;
    // A tensor's key path, checked against the index and against every other tensor's.
    const std::set<std::string>& in_index = tensors;  // (clang 14 cannot capture a structured binding)
    auto claim = [&](const std::string& name) {
      if (is_index && !in_index.count(name))
        throw Error(ErrorKind::corrupt, "tensor is in this file but the index puts it elsewhere or nowhere",
                    store.describe(file_key), name);
      found += is_index;
      KeyPath p;
      try {
        p = safetensors_key_path(name, names);
      } catch (const Error& e) {
        throw e.with_file(store.describe(file_key));
      }
      if (auto [it, fresh] = owner.emplace(p.str(), name); !fresh)
        throw Error(ErrorKind::invalid_argument, "tensors '" + it->second + "' and '" + name + "' both map to the key path '" +
                    it->first + "'", store.describe(file_key));
      return p;
    };
    // Tensor name -> its leaf in item.leaves (npos: a tensor cairn does not read), built only
    // where aliases are looked up: opening a file of many tensors pays nothing for it otherwise.
    const bool aliases = names.aliases && !is_index;
    std::map<std::string_view, std::size_t> leaf_of;
    for (const auto& t : h.others) {
      item.unread.push_back({claim(t.name), "dtype " + t.dtype + to_string(t.shape) + ", which cairn does not read"});
      if (aliases) leaf_of[t.name] = std::string::npos;
    }
    for (const auto& t : h.tensors) {
      LeafRecord l;
      l.path = claim(t.name);
      l.dtype = l.saved_from = t.dtype;
      l.shape = t.shape;
      ChunkRecord chunk;
      chunk.start.assign(t.shape.size(), 0);
      chunk.shape = t.shape;
      chunk.file = file;
      chunk.offset = h.data_offset + t.begin;
      chunk.nbytes = t.end - t.begin;
      l.chunks.push_back(std::move(chunk));
      if (aliases) leaf_of[t.name] = item.leaves.size();
      item.leaves.push_back(std::move(l));
    }
    // Tied weights that save_model recorded as names of a kept tensor (SafetensorsOptions::aliases).
    if (aliases)
      for (const auto& [alias, kept] : h.metadata) {
        const auto k = leaf_of.find(kept);
        if (k == leaf_of.end() || k->second == std::string::npos || leaf_of.count(alias)) continue;
        LeafRecord l = item.leaves[k->second];
        try {
          l.path = safetensors_key_path(alias, names);
        } catch (const Error& e) {
          throw e.with_file(store.describe(file_key));
        }
        const std::string printed = l.key();
        if (auto [it, fresh] = owner.emplace(printed, alias); !fresh)
          throw Error(ErrorKind::invalid_argument, "the alias '" + alias + "' of '" + kept + "' and the tensor '" + it->second +
                      "' both map to the key path '" + printed + "'", store.describe(file_key));
        item.leaves.push_back(std::move(l));
      }
    if (found != tensors.size()) {
      std::set<std::string_view> here;
      for (const auto& t : h.tensors) here.insert(t.name);
      for (const auto& t : h.others) here.insert(t.name);
      for (const auto& name : tensors)
        if (!here.count(name))
          throw Error(ErrorKind::corrupt, "the index puts this tensor in " + file + ", which does not hold it", c.records, name);
    }
  }
  // The inner nodes: every proper prefix of a tensor's key path. A tensor whose path is
  // another's prefix ("a.b" beside "a.b.c") cannot be both a leaf and a node.
  item.nodes = inner_nodes(
      item.leaves, NodeKind::struct_, false, [&](const std::string& printed) { return owner.count(printed) != 0; },
      [&](const std::string& printed, const LeafRecord& l) {
        throw Error(ErrorKind::invalid_argument, "tensor '" + owner[printed] + "' is also the parent of '" + owner[l.key()] +
                    "': load it with SafetensorsOptions::separator = \"\" (whole names as keys; in the cairn tool, --separator '')",
                    c.records);
      });
  m.items.push_back(std::move(item));
  return c;
}

CAIRN_API LoadReport load_safetensors_planned(const Store& store, const std::string& key, const LoadOptions& options,
                                              const SafetensorsOptions& names,
                                              FunctionRef<LoadPlan(const StoredIndex&)> plan_fn) {
  if (options.require_verified)
    throw Error(ErrorKind::invalid_argument, "safetensors stores no checksums, and LoadOptions::require_verified asks "
                "for every byte to be verified", store.describe(key));
  LoadOptions opts = options;
  opts.verify_checksums = false;  // safetensors stores none
  opts.item = default_item_name;
  return load_opened(store, [&] { return open_safetensors(store, key, names, true); }, opts, false, plan_fn);
}

}  // namespace detail

CAIRN_API CheckpointMetadata safetensors_metadata(const Location& location, const SafetensorsOptions& names) {
  return detail::open_safetensors(location.store(), location.key(), names, false).metadata;
}

CAIRN_END_NAMESPACE
