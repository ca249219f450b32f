// SPDX-License-Identifier: Apache-2.0
// Exporting a cairn tree (or a subtree, or a glob selection of it) to safetensors: one
// `.safetensors` file, or above a size limit a sharded Hugging Face set in a directory. Leaves
// are cast by rules as on save (the bfloat16 inference export), column-major leaves are written
// in C order as the format demands, sharded and device arrays are gathered. Nothing is at the
// final path until the export is complete. docs/safetensors.md is the user's guide.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cairn/checkpoint/options.hpp"
#include "cairn/checkpoint/save.hpp"
#include "cairn/checkpoint/snapshot.hpp"

CAIRN_BEGIN_NAMESPACE

struct SafetensorsSaveOptions {
  bool overwrite = false;               // replace an existing file, or a sharded set's directory whole
  std::string separator = ".";          // key path -> name: layers/0/w -> "layers.0.w"
  std::string subtree = {};             // export only this subtree, names relative to it
  std::vector<std::string> select = {}; // key-path globs (relative to the subtree); empty: every leaf
  std::vector<CastRule> cast = {};      // as SaveOptions::cast: {{"*", DType::bfloat16}}
  OnOverflow on_overflow = OnOverflow::error;
  std::map<std::string, std::string> metadata = {};  // the header's "__metadata__"
  // Above this many bytes of tensors (0: no limit), a sharded set: the path is a directory
  // holding model-0000i-of-0000N.safetensors files of at most this size (a tensor larger than
  // the limit gets a file of its own) and model.safetensors.index.json.
  std::uint64_t max_file_bytes = 0;
};

// What an export wrote.
struct SafetensorsSaveReport {
  std::vector<std::string> files;  // relative to the path's directory (a set: to the path)
  std::uint64_t tensor_bytes = 0;
  std::vector<std::string> cast;   // key paths stored as another dtype
};

namespace detail {
// The order of a safetensors file's tensors: larger elements first, the tree's order within
// each size (a stable sort by this), as Hugging Face's writer orders them, so that every tensor
// starts at a multiple of its element size (zero-copy readers can view any of them).
inline bool safetensors_writes_before(DType a, DType b) { return dtype_size(a) > dtype_size(b); }

CAIRN_API SafetensorsSaveReport save_safetensors_snapshot(Store& store, const std::string& key, const ItemSnapshot& item,
                                                          const SafetensorsSaveOptions& options);
}  // namespace detail

// Exports a tree as a safetensors file (or a sharded set) at `location` (a path, a URI, or
// {store, key}).
template <class T>
SafetensorsSaveReport save_safetensors(const Location& location, const T& tree, const SafetensorsSaveOptions& options = {}) {
  require_tree_type<T>();
  return detail::save_safetensors_snapshot(location.store(), location.key(), detail::view_tree(default_item_name, tree), options);
}

CAIRN_END_NAMESPACE

#if CAIRN_DEFINES_RUNTIME
#include "cairn/safetensors/save_impl.hpp"
#endif
