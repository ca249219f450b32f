// SPDX-License-Identifier: Apache-2.0
// A cairn checkpoint as an Orbax checkpoint without copying its data: an OCDBT database whose
// values are byte ranges of the checkpoint's own data files (OCDBT lets a value point into any
// data file below the database), and zarr v3 arrays whose chunks are cairn's chunks as stored
// (codec `bytes`, with `transpose` for a column-major leaf; zarr v2: no compressor, order C or F). The data files get a second name
// under the database's d/ (a hard link, Store::share_blob), or are copied where the store or
// the filesystem cannot share them. A leaf whose chunks are not the regular grid zarr needs
// (an uneven split: zarr pads edge chunks to the full chunk, cairn stores them as they are;
// replicas written in slabs) is written anew as save_orbax writes it. The Orbax checkpoint is
// staged and published whole, as every export is.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cairn/checkpoint/load.hpp"
#include "cairn/format/verified_read.hpp"
#include "cairn/inspect/inspect.hpp"
#include "cairn/io/crc32c.hpp"
#include "cairn/orbax/export.hpp"

CAIRN_BEGIN_NAMESPACE

struct OrbaxLinkReport {
  std::uint64_t leaves = 0;
  std::uint64_t linked_bytes = 0;      // chunk bytes the Orbax checkpoint reads from the shared data files
  std::uint64_t rewritten_bytes = 0;   // bytes of the leaves written anew
  std::vector<std::string> rewritten;  // their key paths (chunks zarr cannot take as they are)
  // The data files: hard-linked (true), or copied (false: another filesystem or store).
  bool files_shared = false;
  // Where they could not be linked: copied by the store itself (an object store's server-side
  // copy, Store::copy_blob), no byte through this process; false: read and written here.
  bool files_copied_by_store = false;
  std::vector<std::string> items_left;  // the checkpoint's other items (an Orbax pytree is one tree)
};

namespace detail::orbax {

// The zarr v3 metadata of an array whose chunks are stored as they are: `bytes` (little-endian),
// after `transpose` for column-major chunks.
inline std::string orbax_plain_zarr_json(DType dtype, const Shape& shape, const Shape& chunk, Order order) {
  Json codecs = Json::array();
  if (order == Order::F && shape.size() >= 2) {
    Json perm = Json::array();
    for (std::size_t d = shape.size(); d-- > 0;) perm.push_back(Json(static_cast<std::int64_t>(d)));
    codecs.push_back(Json::object({{"name", "transpose"}, {"configuration", Json::object({{"order", perm}})}}));
  }
  if (dtype_size(dtype) == 1) codecs.push_back(Json::object({{"name", "bytes"}}));
  else codecs.push_back(Json::object({{"name", "bytes"}, {"configuration", Json::object({{"endian", "little"}})}}));
  Json fill = dtype == DType::bool_ ? Json(false) : is_float_dtype(dtype) ? Json(0.0) : Json(std::int64_t{0});
  return Json::object({
                          {"zarr_format", Json(std::int64_t{3})},
                          {"node_type", "array"},
                          {"shape", json_shape(shape)},
                          {"data_type", dtype_name(dtype)},
                          {"chunk_grid", Json::object({{"name", "regular"},
                                                       {"configuration", Json::object({{"chunk_shape", json_shape(chunk)}})}})},
                          {"chunk_key_encoding", Json::object({{"name", "default"}})},
                          {"fill_value", fill},
                          {"codecs", codecs},
                      })
      .dump();
}

// The grid a leaf's chunks form, where they are one zarr can read as they are: every chunk a
// full block of one regular grid (the largest box along each dimension), the blocks covering
// the array once. A column-major leaf qualifies as one chunk only (its bytes are the whole
// array's, transposed).
inline std::optional<Shape> linkable_grid(const LeafRecord& l) {
  if (l.dtype == DType::string || l.chunks.empty()) return std::nullopt;
  if (l.order == Order::F && l.shape.size() >= 2 && l.chunks.size() != 1) return std::nullopt;
  Shape grid(l.shape.size(), 1);
  for (const ChunkRecord& c : l.chunks)
    for (std::size_t d = 0; d < grid.size(); ++d) grid[d] = std::max(grid[d], c.shape[d]);
  std::set<Shape> seen;
  for (const ChunkRecord& c : l.chunks) {
    for (std::size_t d = 0; d < grid.size(); ++d)
      if (c.shape[d] != grid[d] || c.start[d] % grid[d] != 0) return std::nullopt;
    if (!seen.insert(c.start).second) return std::nullopt;
  }
  if (seen.size() != orbax_chunk_count(l.shape, grid)) return std::nullopt;
  return grid;
}

inline OrbaxLinkReport link_as_orbax(const Location& source, Store& store, const std::string& key_in,
                                     const OrbaxSaveOptions& options) {
  const Store& src_store = source.store();
  const std::string key = normalize_key(key_in);
  const std::string where = store.describe(key);
  if (options.zstd_level != 0 || !options.cast.empty() || !options.ocdbt || options.coordinator)
    throw Error(ErrorKind::invalid_argument, "an Orbax checkpoint that shares a cairn checkpoint's data keeps its bytes as "
                "stored, in one OCDBT database, made by one process: no zstd_level, cast, ocdbt = false or coordinator",
                where);
  const std::string src = src_store.readable_checkpoint(source.key());
  const CheckpointMetadata meta = read_metadata(src_store, src);
  const ItemRecord* item = meta.find_item(default_item_name);
  if (!item)
    throw Error(ErrorKind::invalid_argument, "the checkpoint has no tree item '" + std::string(default_item_name) +
                "' to show Orbax", src_store.describe(src));
  OrbaxLinkReport report;
  for (const ItemRecord& i : meta.items)
    if (&i != item) report.items_left.push_back(i.name);
  refuse_inside_checkpoint(store, key);
  if (store.exists(key))
    throw Error(ErrorKind::already_exists, "something is already here; an Orbax export never replaces it (remove it "
                "first, or export to another path)", where);

  // Every chunk within its data file (the records are untrusted, and Orbax would read what is
  // there): checked before anything is read or staged. Each file opened once, here.
  std::map<std::string, std::unique_ptr<StoreReader>> readers;
  for (const LeafRecord& l : item->leaves)
    for (const ChunkRecord& c : l.chunks) {
      auto& r = readers[c.file];
      if (!r) r = src_store.open(join_key(src, c.file));
      if (c.offset > r->size() || c.nbytes > r->size() - c.offset)
        throw Error(ErrorKind::corrupt, "a chunk's bytes end at " + std::to_string(c.offset + c.nbytes) + ", past the end of its " +
                    std::to_string(r->size()) + "-byte data file", src_store.describe(join_key(src, c.file)), l.key());
    }

  OrbaxMetadataText text(where);
  struct Linked {
    const LeafRecord* leaf;
    std::string name;
    Shape grid;
  };
  std::vector<Linked> linked;
  std::vector<std::pair<const LeafRecord*, std::string>> rewrite;  // leaf, parameter name
  std::set<std::string> files;
  for (const LeafRecord& l : item->leaves) {
    const std::string name = text.begin_leaf(l.path);
    if (l.dtype == DType::string) {
      // A string's bytes go into _strings.json: read, and checked against the chunk's CRC32C.
      std::string value;
      if (!l.chunks.empty()) {
        const ChunkRecord& c = l.chunks.front();
        value.resize(static_cast<std::size_t>(c.nbytes));
        if (c.nbytes) readers.at(c.file)->read_at(value.data(), c.nbytes, c.offset);
        if (crc32c(value.data(), value.size()) != c.crc32c)
          throw Error(ErrorKind::corrupt, "a string leaf's bytes do not match their CRC32C", src_store.describe(join_key(src, c.file)),
                      l.key());
      }
      text.add_string(name, value);
      continue;
    }
    const std::optional<Shape> grid = element_count(l.shape) == 0 ? std::optional<Shape>(orbax_chunk_shape(l.shape)) : linkable_grid(l);
    if (!grid) {
      rewrite.emplace_back(&l, name);
      text.add_array(l.sharding ? &*l.sharding : nullptr, l.shape, orbax_chunk_shape(l.shape));
      continue;
    }
    linked.push_back({&l, name, *grid});
    for (const ChunkRecord& c : l.chunks) files.insert(c.file);
    text.add_array(l.sharding ? &*l.sharding : nullptr, l.shape, *grid);
  }
  text.check_names();
  report.leaves = text.leaves();

  // The values of the leaves written anew, read before anything is staged.
  std::map<std::string, ArrayValue> values;
  if (!rewrite.empty()) {
    std::vector<std::string> keys;
    for (const auto& [l, name] : rewrite) keys.push_back(l->key());
    values = read_arrays(source, keys, {});
  }

  auto staging = store.stage_foreign(key);
  const std::string top = staging->key();
  const std::string rel = options.layout == OrbaxLayout::v1 ? "state/" : "";
  const std::string dir = rel.empty() ? top : join_key(top, "state");
  std::map<std::string, std::uint64_t> expected;
  // The data files, under the database's d/: shared, or copied a piece at a time.
  report.files_shared = !files.empty();
  bool copied_by_store = false, copied_here = false;
  for (const std::string& f : files) {
    const std::string from = join_key(src, f), to = join_key(dir, "d/" + f);
    const StoreReader& reader = *readers.at(f);
    const std::uint64_t size = reader.size();
    if (!store.share_blob(src_store, from, to)) {
      report.files_shared = false;
      if (store.copy_blob(src_store, from, to)) {
        copied_by_store = true;
        expected[rel + "d/" + f] = size;
        continue;
      }
      copied_here = true;
      auto w = store.create(to);
      std::vector<unsigned char> piece(static_cast<std::size_t>(std::min<std::uint64_t>(size, write_piece_bytes)));
      for (std::uint64_t at = 0; at < size; at += piece.size()) {
        const std::uint64_t n = std::min<std::uint64_t>(piece.size(), size - at);
        reader.read_at(piece.data(), n, at);
        w->write_at(piece.data(), n, at);
      }
      w->finish(size);
    }
    expected[rel + "d/" + f] = size;
  }
  report.files_copied_by_store = copied_by_store && !copied_here;
  OcdbtWriter db(store, dir);
  for (const Linked& a : linked) {
    const LeafRecord& l = *a.leaf;
    db.put(orbax_metadata_key(a.name, options.zarr3), options.zarr3 ? orbax_plain_zarr_json(l.dtype, l.shape, a.grid, l.order)
                                                                    : orbax_zarray(l.dtype, l.shape, a.grid, 0, l.order));
    for (const ChunkRecord& c : l.chunks) {
      Shape index(c.start.size());
      for (std::size_t d = 0; d < index.size(); ++d) index[d] = c.start[d] / a.grid[d];
      db.put_reference(orbax_chunk_key(a.name, index, options.zarr3), {std::string(), "d/" + c.file}, c.offset, c.nbytes);
      report.linked_bytes += c.nbytes;
    }
  }
  for (const auto& [rewritten, name] : rewrite) {
    const LeafRecord* l = rewritten;  // (a structured binding: clang 14 cannot capture one below)
    const ArrayValue& v = values.at(l->key());
    LeafView view;
    view.dtype = v.dtype;
    view.shape = v.shape;
    view.data = v.bytes.data();
    view.nbytes = v.bytes.size();
    const Shape whole = orbax_chunk_shape(v.shape);
    db.put(orbax_metadata_key(name, options.zarr3), options.zarr3 ? orbax_zarr_json(v.dtype, v.shape, whole, 0)
                                                                  : orbax_zarray(v.dtype, v.shape, whole, 0));
    db.put_stream(orbax_chunk_key(name, Shape(v.shape.size(), 0), options.zarr3),
                  [&](auto&& sink, auto&& kept) { write_orbax_shard(view, v.dtype, options, l->key(), sink, kept); });  // (no zstd, no cast: checked)
    report.rewritten.push_back(l->key());
    report.rewritten_bytes += v.bytes.size();
  }
  for (const auto& [name, size] : db.finish()) expected[rel + name] = size;
  auto put_file = [&](const std::string& name, const TextParts& content) {
    expected[name] = write_blob_parts(store, join_key(top, name), content);
  };
  put_file(rel + "array_metadatas/process_0", text.array_metadatas());
  if (const std::string strings = text.strings(); !strings.empty()) put_file(rel + "_strings.json", strings);
  OrbaxSaveOptions o = options;
  const auto unset = [](const Json& j) { return j.is_object() && j.size() == 0; };
  if (unset(o.custom_metadata) && unset(o.metrics)) take_user_metadata(meta.user_metadata, o);
  text.put_files(put_file, rel, o);
  text.put_commit(put_file);
  staging->publish(expected);
  return report;
}

}  // namespace detail::orbax
CAIRN_END_NAMESPACE
