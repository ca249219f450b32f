// SPDX-License-Identifier: Apache-2.0
// Writing a tree as an Orbax checkpoint: OCDBT (or a directory per parameter) + zarr v3, laid out as Orbax v1's ocp.save
// writes it (the pytree under <dir>/state/) or as Orbax v0's StandardCheckpointer does (the
// pytree at <dir>/), with _METADATA, _sharding for sharded leaves, _strings.json for string
// leaves, array_metadatas/process_0, _CHECKPOINT_METADATA and the indicator files. Each array
// is one zarr chunk holding one `sharding_indexed` shard (inner codecs bytes [+ zstd], index
// bytes + crc32c, at the end), as Orbax writes an unsharded array; its values are made a piece
// at a time (c_order.hpp) and streamed (through zstd where asked) into the database's data
// file, never held whole. The checkpoint is staged and published whole, as every cairn save is.
#pragma once

#include <zstd.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cairn/checkpoint/c_order.hpp"
#include "cairn/checkpoint/coverage.hpp"
#include "cairn/checkpoint/options.hpp"
#include "cairn/checkpoint/snapshot.hpp"
#include "cairn/format/root_layout.hpp"
#include "cairn/orbax/ocdbt_writer.hpp"

CAIRN_BEGIN_NAMESPACE

// Which Orbax writes the layout cairn writes.
enum class OrbaxLayout {
  v1,           // ocp.save (orbax.checkpoint.v1): the pytree under <dir>/state/
  v0_standard,  // StandardCheckpointer: the pytree at <dir>/ (restore with StandardCheckpointer().restore)
};

struct OrbaxSaveOptions {
  OrbaxLayout layout = OrbaxLayout::v1;
  // 0: chunks stored uncompressed; 1-22: zstd at that level (one streaming compressor per
  // array, fed a piece at a time). Orbax itself writes level 3 (v1) or 1 (v0).
  int zstd_level = 0;
  // true: the arrays in one OCDBT database (Orbax's default). false: one directory per
  // parameter (<name>/zarr.json, <name>/c/0/0), as Orbax writes with use_ocdbt=False, which
  // any zarr v3 reader opens as plain files.
  bool ocdbt = true;
  std::vector<CastRule> cast = {};  // as SaveOptions::cast: {{"**", DType::bfloat16}}
  OnOverflow on_overflow = OnOverflow::error;
  Json custom_metadata = Json::object();  // _CHECKPOINT_METADATA's "custom_metadata"
  Json metrics = Json::object();          // _CHECKPOINT_METADATA's "metrics"
};

struct OrbaxSaveReport {
  std::uint64_t leaves = 0;
  std::uint64_t bytes = 0;         // array bytes as stored, before compression
  std::uint64_t stored_bytes = 0;  // the chunks as written (compressed where zstd is on)
  std::vector<std::string> cast;   // key paths stored as another dtype
};

namespace detail::orbax {

inline std::string base64url(const std::string& s) {
  static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < s.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(s[i]) << 16) | (static_cast<unsigned char>(s[i + 1]) << 8) |
                       static_cast<unsigned char>(s[i + 2]);
    out += a[v >> 18];
    out += a[(v >> 12) & 63];
    out += a[(v >> 6) & 63];
    out += a[v & 63];
  }
  if (i + 1 == s.size()) {
    const unsigned v = static_cast<unsigned char>(s[i]) << 16;
    out += a[v >> 18];
    out += a[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == s.size()) {
    const unsigned v = (static_cast<unsigned char>(s[i]) << 16) | (static_cast<unsigned char>(s[i + 1]) << 8);
    out += a[v >> 18];
    out += a[(v >> 12) & 63];
    out += a[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

// A Python str's repr, as the keys of Orbax's _METADATA spell a tuple of keys.
inline std::string python_repr(const std::string& s) {
  const char quote = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\' || c == static_cast<unsigned char>(quote)) out += '\\', out += static_cast<char>(c);
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + quote;
}

inline Json json_shape(const Shape& s) {
  Json a = Json::array();
  for (std::int64_t d : s) a.push_back(Json(d));
  return a;
}

// The one chunk an array is stored as: the array, each dimension at least 1 (a zarr chunk is
// never empty; a zero-size array has no chunk written).
inline Shape orbax_chunk_shape(const Shape& shape) {
  Shape chunk = shape;
  for (auto& d : chunk) d = std::max<std::int64_t>(d, 1);
  return chunk;
}

// zarr v3's metadata of one array stored as a single chunk holding one sharding_indexed shard.
inline std::string orbax_zarr_json(DType dtype, const Shape& shape, int zstd_level) {
  const Shape chunk = orbax_chunk_shape(shape);
  Json inner = Json::array();
  if (dtype_size(dtype) == 1) inner.push_back(Json::object({{"name", "bytes"}}));
  else inner.push_back(Json::object({{"name", "bytes"}, {"configuration", Json::object({{"endian", "little"}})}}));
  if (zstd_level > 0)
    inner.push_back(Json::object({{"name", "zstd"},
                                  {"configuration", Json::object({{"level", Json(std::int64_t{zstd_level})}, {"checksum", false}})}}));
  Json index = Json::array();
  index.push_back(Json::object({{"name", "bytes"}, {"configuration", Json::object({{"endian", "little"}})}}));
  index.push_back(Json::object({{"name", "crc32c"}}));
  Json fill = dtype == DType::bool_ ? Json(false) : is_float_dtype(dtype) ? Json(0.0) : Json(std::int64_t{0});
  Json m = Json::object({
      {"zarr_format", Json(std::int64_t{3})},
      {"node_type", "array"},
      {"shape", json_shape(shape)},
      {"data_type", dtype_name(dtype)},
      {"chunk_grid", Json::object({{"name", "regular"}, {"configuration", Json::object({{"chunk_shape", json_shape(chunk)}})}})},
      {"chunk_key_encoding", Json::object({{"name", "default"}})},
      {"fill_value", fill},
      {"codecs", Json::array()},
  });
  m["codecs"].push_back(Json::object({{"name", "sharding_indexed"},
                                      {"configuration", Json::object({{"chunk_shape", json_shape(chunk)},
                                                                      {"codecs", inner},
                                                                      {"index_codecs", index},
                                                                      {"index_location", "end"}})}}));
  return m.dump();
}

// The JSON string _sharding holds for a NamedSharding (devices numbered in mesh order).
inline std::string orbax_sharding_json(const NamedSharding& s) {
  Json shape = Json::array(), names = Json::array(), types = Json::array(), spec = Json::array();
  for (const MeshAxis& a : s.mesh.axes()) {
    shape.push_back(Json(a.size));
    names.push_back(Json(a.name));
    types.push_back(Json("AxisType.Auto"));
  }
  for (const auto& d : s.spec.dims()) {
    if (d.axes.empty()) spec.push_back(Json());
    else if (d.axes.size() == 1) spec.push_back(Json(d.axes.front()));
    else {
      Json list = Json::array();
      for (const auto& a : d.axes) list.push_back(Json(a));
      spec.push_back(list);
    }
  }
  // The device grid: nested lists of {"id": n}, one level per mesh axis.
  std::int64_t next = 0;
  auto grid = [&](auto&& self, std::size_t axis) -> Json {
    Json level = Json::array();
    for (std::int64_t i = 0; i < s.mesh.axes()[axis].size; ++i)
      level.push_back(axis + 1 == s.mesh.axes().size() ? Json::object({{"id", Json(next++)}}) : self(self, axis + 1));
    return level;
  };
  Json mesh = s.mesh.axes().empty() ? Json::array() : grid(grid, 0);
  return Json::object({{"sharding_type", "NamedSharding"},
                       {"shape", shape},
                       {"axis_names", names},
                       {"axis_types", types},
                       {"partition_spec", spec},
                       {"device_mesh", Json::object({{"mesh", mesh}})}})
      .dump();
}

inline std::int64_t unix_nanoseconds() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Streams one array's shard (its values, then the index and the index's CRC32C) into `sink`.
// Returns the bytes of the chunk data (compressed where zstd is on).
template <class Sink>
std::uint64_t write_orbax_shard(const LeafView& v, DType to, const OrbaxSaveOptions& o, const std::string& key, Sink&& sink) {
  std::uint64_t n = 0;
  if (o.zstd_level <= 0) {
    for_each_c_order_piece(v, to, o.on_overflow, key, [&](const void* p, std::uint64_t len) {
      sink(p, len);
      n += len;
    });
  } else {
    // One frame with its content size (readers that need it, such as zarr-python's, have it).
    std::unique_ptr<ZSTD_CCtx, decltype(&ZSTD_freeCCtx)> cctx(ZSTD_createCCtx(), &ZSTD_freeCCtx);
    if (!cctx) throw Error(ErrorKind::io, "zstd: out of memory", "", key);
    const std::uint64_t total = element_count(v.shape) * dtype_size(to);
    ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_compressionLevel, o.zstd_level);
    ZSTD_CCtx_setPledgedSrcSize(cctx.get(), total);
    std::vector<unsigned char> out(ZSTD_CStreamOutSize());
    auto feed = [&](const void* p, std::uint64_t len, ZSTD_EndDirective mode) {
      ZSTD_inBuffer in{p, static_cast<std::size_t>(len), 0};
      for (;;) {
        ZSTD_outBuffer ob{out.data(), out.size(), 0};
        const std::size_t left = ZSTD_compressStream2(cctx.get(), &ob, &in, mode);
        if (ZSTD_isError(left)) throw Error(ErrorKind::io, std::string("zstd: ") + ZSTD_getErrorName(left), "", key);
        sink(out.data(), ob.pos);
        n += ob.pos;
        if (mode == ZSTD_e_end ? left == 0 : in.pos == in.size) break;
      }
    };
    for_each_c_order_piece(v, to, o.on_overflow, key, [&](const void* p, std::uint64_t len) { feed(p, len, ZSTD_e_continue); });
    feed(nullptr, 0, ZSTD_e_end);
  }
  std::string index;
  ocdbt_put_le(index, 0, 8);
  ocdbt_put_le(index, n, 8);
  ocdbt_put_le(index, crc32c(index.data(), index.size()), 4);
  sink(index.data(), index.size());
  return n;
}

// The export itself: `item`'s leaves as an Orbax checkpoint at `key`.
inline OrbaxSaveReport save_orbax_snapshot(Store& store, const std::string& key_in, const ItemSnapshot& item,
                                           const OrbaxSaveOptions& options) {
  const std::string key = normalize_key(key_in);
  const std::string where = store.describe(key);
  refuse_inside_checkpoint(store, key);
  if (options.zstd_level < 0 || options.zstd_level > ZSTD_maxCLevel())
    throw Error(ErrorKind::invalid_argument, "OrbaxSaveOptions::zstd_level is " + std::to_string(options.zstd_level) +
                "; it is 0 (no compression) or 1 to " + std::to_string(ZSTD_maxCLevel()), where);
  if (store.exists(key))
    throw Error(ErrorKind::already_exists, "something is already here; an Orbax export never replaces it (remove it "
                "first, or export to another path)", where);
  struct Param {
    std::string name, key;
    const LeafView* view;
    DType dtype;
  };
  std::vector<Param> params;
  std::map<std::string, std::string> names;  // parameter name -> key path
  OrbaxSaveReport report;
  std::uint64_t string_leaves = 0;
  // The objects keyed by parameter are spelled as text, member by member: a Json object looks
  // its keys up on insertion, which 10,000 leaves made quadratic (a third of a second).
  std::string tree, strings, shardings;
  Json array_metadatas = Json::array();
  auto add_member = [](std::string& object, const std::string& key, const std::string& value_json) {
    object += (object.empty() ? "" : ",") + Json(key).dump() + ":" + value_json;
  };
  for (const auto& leaf : item.leaves) {
    const std::string full = leaf.path.str();
    if (leaf.path.size() == 0)
      throw Error(ErrorKind::invalid_argument, "an Orbax checkpoint holds a tree (a dict at the top); this tree is one "
                  "array: put it in a struct or a map", where);
    std::string name, tuple = "(";
    Json keys = Json::array();
    for (std::size_t i = 0; i < leaf.path.size(); ++i) {
      const KeyEntry& e = leaf.path[i];
      const std::string text = e.text();
      if (text.empty() || text.find('/') != std::string::npos || text.find('.') != std::string::npos)
        throw Error(ErrorKind::invalid_argument, "the key '" + text + "' cannot be part of an Orbax parameter name ('.' "
                    "joins the keys and '/' separates the arrays in the database; an empty key has no name)", where, full);
      name += (i ? "." : "") + text;
      tuple += (i ? ", " : "") + python_repr(text);
      keys.push_back(Json::object({{"key", text}, {"key_type", Json(std::int64_t{e.kind == KeyEntry::Kind::index ? 1 : 2})}}));
    }
    tuple += leaf.path.size() == 1 ? ",)" : ")";
    if (auto [it, fresh] = names.emplace(name, full); !fresh)
      throw Error(ErrorKind::invalid_argument, "key paths '" + it->second + "' and '" + full +
                  "' both become the Orbax parameter name '" + name + "'", where);
    const LeafView& v = leaf.view;
    Json value = Json::object();
    if (v.dtype == DType::string) {
      value["value_type"] = "string";
      ++string_leaves;
      add_member(strings, name, Json(std::string(static_cast<const char*>(v.data), static_cast<std::size_t>(v.nbytes))).dump());
    } else {
      if (!v.shards.empty())
        if (const std::uint64_t held = held_elements(v); held != element_count(v.shape))
          throw uncovered_leaf_error(held, v, "an Orbax export is written by one process, which needs all of it: "
                                     "gather the array onto this process (ShardedArray::gather)")
              .with_file(where)
              .with_key(full);
      const DType to = cast_rule_target(options.cast, full, v.dtype);
      if (to == DType::string)
        throw Error(ErrorKind::invalid_argument, "a cast rule makes an array a string", where, full);
      if (to != v.dtype) report.cast.push_back(full);
      params.push_back({name, full, &v, to});
      if (v.sharding) {
        value["value_type"] = "jax.Array";
        add_member(shardings, base64url(name), Json(orbax_sharding_json(*v.sharding)).dump());
      } else {
        value["value_type"] = "np.ndarray";
      }
      const Shape chunk = orbax_chunk_shape(v.shape);
      if (v.sharding) value["write_shape"] = json_shape(chunk);
      array_metadatas.push_back(Json::object({{"array_metadata", Json::object({{"param_name", name},
                                                                                {"write_shape", json_shape(chunk)},
                                                                                {"chunk_shape", json_shape(chunk)},
                                                                                {"ext_metadata", Json()}})}}));
    }
    value["skip_deserialize"] = false;
    add_member(tree, tuple, Json::object({{"key_metadata", keys}, {"value_metadata", value}}).dump());
  }

  auto staging = store.stage(key, false);
  const std::string top = staging->key();
  const std::string pytree_dir = options.layout == OrbaxLayout::v1 ? "state" : "";
  const std::string dir = pytree_dir.empty() ? top : join_key(top, pytree_dir);
  const std::string rel = pytree_dir.empty() ? "" : pytree_dir + "/";
  std::map<std::string, std::uint64_t> expected;
  auto put_file = [&](const std::string& name, const std::string& text) {
    write_blob(store, join_key(top, name), text);
    expected[name] = text.size();
  };
  // The arrays: keys of one OCDBT database, or files of one directory per parameter.
  std::optional<OcdbtWriter> db;
  if (options.ocdbt) db.emplace(store, dir);
  for (const Param& p : params) {
    const std::string zarr_json = orbax_zarr_json(p.dtype, p.view->shape, options.zstd_level);
    if (db) db->put(p.name + "/zarr.json", zarr_json);
    else put_file(rel + p.name + "/zarr.json", zarr_json);
    const std::uint64_t elements = element_count(p.view->shape);
    if (elements == 0) continue;  // no chunk: a zero-size array is all fill value
    std::string chunk_key = p.name + "/c";
    for (std::size_t d = 0; d < p.view->shape.size(); ++d) chunk_key += "/0";
    std::uint64_t data = 0;
    if (db) {
      db->put_stream(chunk_key, [&](auto&& sink) { data = write_orbax_shard(*p.view, p.dtype, options, p.key, sink); });
    } else {
      auto w = store.create(join_key(top, rel + chunk_key));
      std::uint64_t at = 0;
      data = write_orbax_shard(*p.view, p.dtype, options, p.key, [&](const void* bytes, std::uint64_t n) {
        if (n == 0) return;
        w->write_at(bytes, n, at);
        at += n;
      });
      w->finish(at);
      expected[rel + chunk_key] = at;
    }
    report.bytes += elements * dtype_size(p.dtype);
    report.stored_bytes += data;
    ++report.leaves;
  }
  if (db)
    for (const auto& [name, size] : db->finish()) expected[rel + name] = size;
  report.leaves += string_leaves;
  put_file(rel + "_METADATA", "{\"tree_metadata\":{" + tree + "},\"use_ocdbt\":" + (options.ocdbt ? "true" : "false") +
                                  ",\"use_zarr3\":true,\"store_array_data_equal_to_fill_value\":true,"
                                  "\"custom_metadata\":null}");
  if (!shardings.empty()) put_file(rel + "_sharding", "{" + shardings + "}");
  if (string_leaves) put_file(rel + "_strings.json", "{" + strings + "}");
  put_file(rel + "array_metadatas/process_0", Json::object({{"array_metadatas", array_metadatas}}).dump());
  const std::int64_t now = unix_nanoseconds();
  Json handlers = options.layout == OrbaxLayout::v1
                      ? Json::object({{"state", "orbax.checkpoint.experimental.v1._src.handlers.pytree_handler.PyTreeHandler"}})
                      : Json("orbax.checkpoint._src.handlers.standard_checkpoint_handler.StandardCheckpointHandler");
  put_file("_CHECKPOINT_METADATA", Json::object({{"item_handlers", handlers},
                                                 {"metrics", options.metrics},
                                                 {"performance_metrics", Json::object()},
                                                 {"init_timestamp_nsecs", Json(now)},
                                                 {"commit_timestamp_nsecs", Json(now)},
                                                 {"custom_metadata", options.custom_metadata}})
                                       .dump());
  if (options.layout == OrbaxLayout::v1) put_file("orbax.checkpoint", "");
  put_file("commit_success.txt", "Checkpoint commit was successful to " + where);
  staging->publish(expected);
  return report;
}

}  // namespace detail::orbax
CAIRN_END_NAMESPACE
