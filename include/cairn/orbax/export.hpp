// SPDX-License-Identifier: Apache-2.0
// Writing a tree as an Orbax checkpoint: OCDBT (or a directory per parameter) + zarr v3, laid out as Orbax v1's ocp.save
// writes it (the pytree under <dir>/state/) or as Orbax v0's StandardCheckpointer does (the
// pytree at <dir>/), with _METADATA, _sharding for sharded leaves, _strings.json for string
// leaves, array_metadatas/process_<i>, _CHECKPOINT_METADATA and the indicator files. Each
// array is a regular grid of zarr chunks, each holding one `sharding_indexed` shard (inner
// codecs bytes [+ zstd], index bytes + crc32c, at the end), as Orbax writes arrays: one chunk
// for an array held whole, one per device block for a sharded one. Values are made a piece at
// a time (c_order.hpp) and streamed (through zstd where asked) into the database's data file,
// never held whole. Several processes export together as Orbax's do: each into its own
// database, which a root database written last points into. The checkpoint is staged and
// published whole, as every cairn save is.
#pragma once

#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "cairn/checkpoint/c_order.hpp"
#include "cairn/checkpoint/coverage.hpp"
#include "cairn/checkpoint/options.hpp"
#include "cairn/checkpoint/snapshot.hpp"
#include "cairn/core/json_reader.hpp"
#include "cairn/core/parallel.hpp"
#include "cairn/core/tuning.hpp"
#include "cairn/coordination/wire.hpp"
#include "cairn/format/metadata_json_writer.hpp"
#include "cairn/format/root_layout.hpp"
#include "cairn/format/validation.hpp"
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
  // true: zarr v3 arrays (Orbax v1's default, and cairn's). false: zarr v2 arrays (.zarray, chunk
  // keys <name>/<i>.<j>, zstd as the compressor), as Orbax v0's StandardCheckpointer writes by
  // default (use_zarr3=False), which zarr-python 2 also reads.
  bool zarr3 = true;
  std::vector<CastRule> cast = {};  // as SaveOptions::cast: {{"**", DType::bfloat16}}
  OnOverflow on_overflow = OnOverflow::error;
  Json custom_metadata = Json::object();  // _CHECKPOINT_METADATA's "custom_metadata"
  Json metrics = Json::object();          // _CHECKPOINT_METADATA's "metrics"
  // Several processes exporting one tree together (cairn/mpi.hpp's MpiCoordinator, or a
  // ThreadGroup's ranks): every rank calls save_orbax with the same tree, and each writes the
  // blocks of sharded arrays it holds into its own database (ocdbt.process_<rank>/), as Orbax
  // does on several hosts. nullptr: this process alone.
  Coordinator* coordinator = nullptr;
};

// With several ranks, bytes and stored_bytes are what this rank wrote.
struct OrbaxSaveReport {
  std::uint64_t leaves = 0;
  // Array bytes as stored (edge blocks padded), before compression, and the bytes of string
  // leaves (in _strings.json), as a cairn save counts them.
  std::uint64_t bytes = 0;
  std::uint64_t stored_bytes = 0;  // the chunks as written (compressed where zstd is on)
  std::vector<std::string> cast;   // key paths stored as another dtype
};

namespace detail::orbax {

// A source's user metadata (convert's, link_as_orbax's) as _CHECKPOINT_METADATA's. Where it
// has the shape an Orbax import and a Checkpointer's step give it (no keys but "metrics",
// "custom", "created_unix_ms" and "step", metrics and custom objects where there), its metrics
// are Orbax's metrics (what a CheckpointManager picks its best step by) and its custom part is
// the custom metadata, so that Orbax -> Orbax keeps each where it was rather than nest it a
// level deeper every time; the times and the step number are the source's own save's, which
// the new checkpoint has of its own (its commit time; its directory). Any other user metadata
// ({"epoch": 3}) is the custom metadata whole.
inline void take_user_metadata(const Json& user, OrbaxSaveOptions& o) {
  const auto shaped = [&] {
    if (!user.is_object()) return false;
    bool any = false;
    for (const auto& [k, v] : user.items()) {
      if (k == "metrics" || k == "custom") {
        if (!v.is_object()) return false;
        any = true;
      } else if (k != "created_unix_ms" && k != "step") {
        return false;
      }
    }
    return any;
  };
  if (!shaped()) {
    o.custom_metadata = user;
    return;
  }
  if (const Json* m = user.find("metrics")) o.metrics = *m;
  if (const Json* c = user.find("custom")) o.custom_metadata = *c;
}

inline std::string base64url(const std::string& s) {
  static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < s.size(); i += 3) {
    const unsigned v = (unsigned{static_cast<unsigned char>(s[i])} << 16) | (unsigned{static_cast<unsigned char>(s[i + 1])} << 8) |
                       unsigned{static_cast<unsigned char>(s[i + 2])};
    out += a[v >> 18];
    out += a[(v >> 12) & 63];
    out += a[(v >> 6) & 63];
    out += a[v & 63];
  }
  if (i + 1 == s.size()) {
    const unsigned v = unsigned{static_cast<unsigned char>(s[i])} << 16;
    out += a[v >> 18];
    out += a[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == s.size()) {
    const unsigned v = (unsigned{static_cast<unsigned char>(s[i])} << 16) | (unsigned{static_cast<unsigned char>(s[i + 1])} << 8);
    out += a[v >> 18];
    out += a[(v >> 12) & 63];
    out += a[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

// A Python str's repr, as the keys of Orbax's _METADATA spell a tuple of keys, appended.
inline void append_python_repr(std::string& out, std::string_view s) {
  const char quote = s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos ? '"' : '\'';
  out += quote;
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
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
  out += quote;
}

inline Json json_shape(const Shape& s) {
  Json a = Json::array();
  for (std::int64_t d : s) a.push_back(Json(d));
  return a;
}
// The same as JSON text: [2,3] (format/metadata_json_writer.hpp's append_json_ints).
inline std::string shape_text(const Shape& s) {
  std::string t;
  append_json_ints(t, s);
  return t;
}

// The one chunk an array is stored as: the array, each dimension at least 1 (a zarr chunk is
// never empty; a zero-size array has no chunk written).
inline Shape orbax_chunk_shape(const Shape& shape) {
  Shape chunk = shape;
  for (auto& d : chunk) d = std::max<std::int64_t>(d, 1);
  return chunk;
}

// zarr v3's metadata of an array whose chunks (a regular grid) each hold one sharding_indexed
// shard of one inner chunk, as Orbax stores every array.
inline std::string orbax_zarr_json(DType dtype, const Shape& shape, const Shape& chunk, int zstd_level) {
  // Spelled as text: building it as a Json tree was most of an export of small arrays.
  std::string inner = dtype_size(dtype) == 1 ? R"({"name":"bytes"})" : R"({"name":"bytes","configuration":{"endian":"little"}})";
  if (zstd_level > 0) inner += R"(,{"name":"zstd","configuration":{"level":)" + std::to_string(zstd_level) + R"(,"checksum":false}})";
  const char* fill = dtype == DType::bool_ ? "false" : is_float_dtype(dtype) ? "0.0" : "0";
  const std::string chunk_text = shape_text(chunk);
  return R"({"zarr_format":3,"node_type":"array","shape":)" + shape_text(shape) + R"(,"data_type":")" + dtype_name(dtype) +
         R"(","chunk_grid":{"name":"regular","configuration":{"chunk_shape":)" + chunk_text +
         R"(}},"chunk_key_encoding":{"name":"default"},"fill_value":)" + fill +
         R"(,"codecs":[{"name":"sharding_indexed","configuration":{"chunk_shape":)" + chunk_text + R"(,"codecs":[)" + inner +
         R"(],"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}],"index_location":"end"}}]})";
}

// numpy's type string of a dtype as zarr v2 writes it ("<f4", "|b1"), or TensorStore's bare
// name for the ones numpy has not got ("bfloat16", "float8_e4m3fn").
inline std::string zarr2_dtype(DType d) {
  switch (d) {
    case DType::bool_: return "|b1";
    case DType::int8: return "|i1";
    case DType::uint8: return "|u1";
    case DType::int16: return "<i2";
    case DType::uint16: return "<u2";
    case DType::int32: return "<i4";
    case DType::uint32: return "<u4";
    case DType::int64: return "<i8";
    case DType::uint64: return "<u8";
    case DType::float16: return "<f2";
    case DType::float32: return "<f4";
    case DType::float64: return "<f8";
    default: return dtype_name(d);
  }
}

// zarr v2's .zarray of an array of chunks `chunk`, C order (or F: a column-major chunk as it is
// stored), zstd where a level is given, members in the sorted order zarr-python and TensorStore
// write them. The fill value is null, as Orbax writes it: every chunk is written.
inline std::string orbax_zarray(DType dtype, const Shape& shape, const Shape& chunk, int zstd_level, Order order = Order::C) {
  Json compressor = zstd_level > 0 ? Json::object({{"id", "zstd"}, {"level", Json(std::int64_t{zstd_level})}}) : Json();
  return "{\"chunks\":" + shape_text(chunk) + ",\"compressor\":" + compressor.dump() +
         ",\"dimension_separator\":\".\",\"dtype\":" + Json(zarr2_dtype(dtype)).dump() +
         ",\"fill_value\":null,\"filters\":null,\"order\":\"" + (order == Order::F && shape.size() >= 2 ? "F" : "C") +
         "\",\"shape\":" + shape_text(shape) + ",\"zarr_format\":2}";
}

// The JSON string _sharding holds for a NamedSharding of an array of `array_shape` (devices
// numbered in mesh order). JAX refuses a sharding whose mesh axes do not divide the dimension
// they split (IndivisibleError, and Orbax restores through JAX), so such a dimension is written
// unsplit: Orbax restores the array with the nearest sharding JAX allows. The chunks stay one
// per device block (zarr reads them whatever the restoring sharding).
inline std::string orbax_sharding_json(const NamedSharding& s, const Shape& array_shape) {
  Json shape = Json::array(), names = Json::array(), types = Json::array(), spec = Json::array();
  for (const MeshAxis& a : s.mesh.axes()) {
    shape.push_back(Json(a.size));
    names.push_back(Json(a.name));
    types.push_back(Json("AxisType.Auto"));
  }
  const auto& dims = s.spec.dims();
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const auto& d = dims[i];
    std::int64_t parts = 1;
    for (const auto& a : d.axes)
      if (const int k = s.mesh.axis_index(a); k >= 0) parts *= s.mesh.axes()[static_cast<std::size_t>(k)].size;
    if (d.axes.empty() || (i < array_shape.size() && array_shape[i] % parts != 0)) spec.push_back(Json());
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

// Streams one array's chunk into `sink`: zarr v3, a shard (its values, then the index and the
// index's CRC32C); zarr v2, the values alone. Values written as they lie in the leaf's memory
// (C order, no cast, no compression) go to `kept` instead, which may keep a reference to them
// where the caller keeps the leaf (OcdbtWriter::put_stream's); a caller that does not passes
// `sink` twice. Returns the bytes of the chunk data (compressed where zstd is on).
template <class Sink, class Kept>
std::uint64_t write_orbax_shard(const LeafView& v, DType to, const OrbaxSaveOptions& o, const std::string& key, Sink&& sink,
                                Kept&& kept) {
  std::uint64_t n = 0;
  if (o.zstd_level <= 0) {
    const bool in_place = c_order_in_place(v, to);
    for_each_c_order_piece(v, to, o.on_overflow, key, [&](const void* p, std::uint64_t len) {
      if (in_place) kept(p, len);
      else sink(p, len);
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
  if (!o.zarr3) return n;  // zarr v2: the chunk is its bytes (or one zstd frame), no shard index
  // The shard index: the one inner chunk's offset (0) and size, and their CRC32C, little-endian.
  char index[20] = {};  // (on the stack: a std::string of 20 bytes was an allocation a chunk)
  ocdbt_store_le(index + 8, n, 8);
  ocdbt_store_le(index + 16, crc32c(index, 16), 4);
  sink(index, sizeof index);
  return n;
}

// A text made of many small appends and written once, whole (a _METADATA of 10,000 leaves is
// megabytes): kept in blocks of 64 KiB that never move once written, so that it grows
// without the copies of a std::string doubling, each of them into memory new to the process
// (its page faults were most of an export's text); the blocks lie below malloc's mmap
// threshold, so that one export's memory is reused by the next. Written as parts
// (write_blob_parts), never joined.
class TextBlocks {
 public:
  static constexpr std::size_t block_bytes = std::size_t{64} << 10;
  TextBlocks& operator+=(std::string_view s) {
    size_ += s.size();
    while (!s.empty()) {
      if (blocks_.empty() || blocks_.back().size() == block_bytes) {
        blocks_.emplace_back();
        blocks_.back().reserve(block_bytes);
      }
      std::string& b = blocks_.back();
      const std::size_t n = std::min(s.size(), block_bytes - b.size());
      b.append(s.data(), n);
      s.remove_prefix(n);
    }
    return *this;
  }
  TextBlocks& operator+=(char c) { return *this += std::string_view(&c, 1); }
  bool empty() const { return size_ == 0; }
  std::uint64_t size() const { return size_; }
  void add_parts(std::vector<std::string_view>& parts) const {
    for (const std::string& b : blocks_) parts.push_back(b);
  }
  // As WireDigest::str of the whole text.
  void digest(WireDigest& d) const {
    const std::uint64_t n = size_;
    d.bytes(&n, sizeof n);
    for (const std::string& b : blocks_) d.bytes(b.data(), b.size());
  }

 private:
  std::vector<std::string> blocks_;
  std::uint64_t size_ = 0;
};

// The text of a pytree's metadata files (_METADATA's tree, _sharding, _strings.json,
// array_metadatas/process_<i>), leaf by leaf, and then the files themselves. The objects keyed
// by parameter are spelled as text, member by member: a Json object looks its keys up on
// insertion, which 10,000 leaves made quadratic (a third of a second).
//
// The leaves are taken in (begin_leaf, then add_array or add_string) as cheap records, and
// their text is spelled by render(), once, after the last: an export spells it on the thread
// that then writes the files, while its own thread writes the arrays (10,000 small arrays'
// text took a quarter of an export's time, with nothing written meanwhile). Every error about a
// leaf's name comes from begin_leaf and check_names, before anything is written.
class OrbaxMetadataText {
 public:
  explicit OrbaxMetadataText(std::string where) : where_(std::move(where)) {}

  // A leaf's parameter name: its keys joined with '.'. Refuses keys no name can hold and two
  // leaves of one name. Then add_string or add_array, once.
  std::string begin_leaf(const KeyPath& path) { return begin_leaf(path, path.str()); }
  // The same, given the path as KeyPath::str prints it.
  std::string begin_leaf(const KeyPath& path, const std::string& full) {
    if (path.size() == 0)
      throw Error(ErrorKind::invalid_argument, "an Orbax checkpoint holds a tree (a dict at the top); this tree is one "
                  "array: put it in a struct or a map", where_);
    std::string name;
    for (std::size_t i = 0; i < path.size(); ++i) {
      char digits[24];
      const std::string_view text = entry_text(path[i], digits);
      if (text.empty() || std::any_of(text.begin(), text.end(), [](char c) { return c == '/' || c == '.'; }))
        throw Error(ErrorKind::invalid_argument, "the key '" + std::string(text) + "' cannot be part of an Orbax parameter "
                    "name ('.' joins the keys and '/' separates the arrays in the database; an empty key has no name)", where_, full);
      if (i) name += '.';
      name += text;
    }
    names_.push_back(name);
    leaves_.emplace_back().path = &path;
    return name;
  }
  void add_string(const std::string& name, const std::string& value) {
    ++string_leaves_;
    add_member(strings_, name, Json(value).dump());
    leaves_.back().kind = Leaf::string;
  }
  // The leaf begun last is an array of `shape` stored in chunks of `chunk`; `sharding` where
  // it has one (a jax.Array), which must stay alive, unchanged, until the text is rendered.
  void add_array(const NamedSharding* sharding, const Shape& shape, const Shape& chunk) {
    ++arrays_;
    Leaf& l = leaves_.back();
    l.kind = Leaf::array;
    l.sharding = sharding;
    l.shape = shape;
    l.chunk = chunk;
  }

  std::uint64_t leaves() const { return arrays_ + string_leaves_; }
  // After the last leaf, while the key paths begun are alive: two leaves of one name are an
  // error. (A std::map of the names, searched per leaf, was a tenth of an export of 10,000
  // small arrays.)
  void check_names() const {
    const std::vector<std::string_view> views(names_.begin(), names_.end());
    if (const std::string_view* again = find_repeated(views)) {
      const std::size_t j = static_cast<std::size_t>(again - views.data());
      const std::size_t i = static_cast<std::size_t>(std::find(views.begin(), views.end(), *again) - views.begin());
      throw Error(ErrorKind::invalid_argument, "key paths '" + leaves_[i].path->str() + "' and '" + leaves_[j].path->str() +
                  "' both become the Orbax parameter name '" + names_[j] + "'", where_);
    }
  }
  // Spells every leaf's text, once: after the last leaf, while the key paths (and shardings)
  // it was given are alive. Each of the accessors below calls it first.
  void render() {
    if (rendered_) return;
    rendered_ = true;
    std::string tuple, keys, value;
    std::size_t same = 0;  // leading keys spelled already in `tuple` and `keys` (the leaf before's)
    std::vector<std::pair<std::size_t, std::size_t>> after;  // their lengths after each of those keys
    const KeyPath* before = nullptr;
    for (std::size_t n = 0; n < leaves_.size(); ++n) {
      const Leaf& l = leaves_[n];
      if (l.kind == Leaf::none) continue;
      const KeyPath& path = *l.path;
      // A tree's leaves share their parents' keys with the leaf before: those are spelled once.
      same = 0;
      if (before)
        while (same + 1 < path.size() && same < before->size() && (*before)[same] == path[same]) ++same;
      after.resize(same);
      if (same == 0) tuple = "(", keys = "[";
      else tuple.resize(after[same - 1].first), keys.resize(after[same - 1].second);
      for (std::size_t i = same; i < path.size(); ++i) {
        char digits[24];
        const std::string_view text = entry_text(path[i], digits);
        if (i) tuple += ", ", keys += ',';
        append_python_repr(tuple, text);
        keys += "{\"key\":";
        append_json_string(keys, text);
        keys += path[i].kind == KeyEntry::Kind::index ? ",\"key_type\":1}" : ",\"key_type\":2}";
        after.emplace_back(tuple.size(), keys.size());
      }
      before = &path;
      const std::size_t tuple_keys = tuple.size(), keys_keys = keys.size();
      tuple += path.size() == 1 ? ",)" : ")";
      keys += ']';
      const std::string& name = names_[n];
      if (l.kind == Leaf::string) {
        end_leaf(tuple, keys, R"({"value_type":"string","skip_deserialize":false})");
      } else {
        if (l.sharding) add_member(shardings_, base64url(name), Json(orbax_sharding_json(*l.sharding, l.shape)).dump());
        value = array_metadatas_.empty() ? R"({"array_metadata":{"param_name":)" : R"(,{"array_metadata":{"param_name":)";
        append_json_string(value, name);
        value += R"(,"write_shape":)";
        const std::size_t chunk_at = value.size();
        append_json_ints(value, l.chunk);
        const std::string_view chunk_text(value.data() + chunk_at, value.size() - chunk_at);
        array_metadatas_ += value;
        array_metadatas_ += R"(,"chunk_shape":)";
        array_metadatas_ += chunk_text;
        array_metadatas_ += R"(,"ext_metadata":null}})";
        if (l.sharding) {
          std::string v = R"({"value_type":"jax.Array","write_shape":)";
          v += chunk_text;
          v += R"(,"skip_deserialize":false})";
          end_leaf(tuple, keys, v);
        } else {
          end_leaf(tuple, keys, R"({"value_type":"np.ndarray","skip_deserialize":false})");
        }
      }
      tuple.resize(tuple_keys);
      keys.resize(keys_keys);
    }
  }
  // What every rank of a multi-process export must spell alike.
  void digest(WireDigest& d) {
    render();
    tree_.digest(d);
    d.str(shardings_);
  }
  // array_metadatas/process_<i>, in parts that point into this object.
  TextParts array_metadatas() {
    render();
    std::vector<std::string_view> parts{"{\"array_metadatas\":["};
    array_metadatas_.add_parts(parts);
    parts.emplace_back("]}");
    return parts;
  }
  std::string strings() const { return string_leaves_ ? "{" + strings_ + "}" : std::string(); }

  // The pytree's _METADATA and _sharding under `rel`, and the checkpoint's _CHECKPOINT_METADATA
  // and orbax.checkpoint: put(name, TextParts) writes each. The commit indicator is
  // put_commit's, written last.
  template <class Put>
  void put_files(Put&& put, const std::string& rel, const OrbaxSaveOptions& options) {
    render();
    std::vector<std::string_view> meta{"{\"tree_metadata\":{"};
    tree_.add_parts(meta);
    meta.insert(meta.end(), {"},\"use_ocdbt\":", options.ocdbt ? "true" : "false", ",\"use_zarr3\":",
                             options.zarr3 ? "true" : "false",
                             ",\"store_array_data_equal_to_fill_value\":true,\"custom_metadata\":null}"});
    put(rel + "_METADATA", TextParts(std::move(meta)));
    if (!shardings_.empty()) put(rel + "_sharding", "{" + shardings_ + "}");
    const std::int64_t now = unix_nanoseconds();
    Json handlers = options.layout == OrbaxLayout::v1
                        ? Json::object({{"state", "orbax.checkpoint.experimental.v1._src.handlers.pytree_handler.PyTreeHandler"}})
                        : Json("orbax.checkpoint._src.handlers.standard_checkpoint_handler.StandardCheckpointHandler");
    put("_CHECKPOINT_METADATA", Json::object({{"item_handlers", handlers},
                                              {"metrics", options.metrics},
                                              {"performance_metrics", Json::object()},
                                              {"init_timestamp_nsecs", Json(now)},
                                              {"commit_timestamp_nsecs", Json(now)},
                                              {"custom_metadata", options.custom_metadata}})
                                    .dump());
    if (options.layout == OrbaxLayout::v1) put("orbax.checkpoint", std::string());
  }
  // commit_success.txt: on a bucket, where an export is written in place, the file whose
  // presence says that the checkpoint is whole (as Orbax commits on GCS), so it comes after
  // every other.
  template <class Put>
  void put_commit(Put&& put) const {
    put("commit_success.txt", "Checkpoint commit was successful to " + where_);
  }

 private:
  // A leaf as taken in: its key path, and what render() spells of it.
  struct Leaf {
    const KeyPath* path = nullptr;
    enum Kind : unsigned char { none, array, string } kind = none;
    const NamedSharding* sharding = nullptr;
    Shape shape, chunk;
  };
  // A key's text as KeyEntry::text spells it, without a string of its own: a view of its name,
  // or of its number spelled into `digits`.
  static std::string_view entry_text(const KeyEntry& e, char (&digits)[24]) {
    if (e.kind != KeyEntry::Kind::index && e.kind != KeyEntry::Kind::int_key) return e.name;
    const auto r = std::to_chars(digits, digits + sizeof digits, e.number);
    return std::string_view(digits, static_cast<std::size_t>(r.ptr - digits));
  }
  static void add_member(std::string& object, const std::string& name, const std::string& value_json) {
    if (!object.empty()) object += ',';
    append_json_string(object, name);
    object += ':';
    object += value_json;
  }
  // A leaf's _METADATA entry: its tuple's repr, its key_metadata list, and `value`, the value
  // metadata's text.
  void end_leaf(std::string_view tuple, std::string_view keys, std::string_view value) {
    entry_.clear();  // (one string reused for every leaf's entry)
    if (!tree_.empty()) entry_ += ',';
    append_json_string(entry_, tuple);
    entry_ += R"(:{"key_metadata":)";
    entry_ += keys;
    entry_ += R"(,"value_metadata":)";
    entry_ += value;
    entry_ += '}';
    tree_ += entry_;
  }

  std::string where_;
  std::deque<std::string> names_;  // the leaves' parameter names (never moved: check_names views them)
  std::deque<Leaf> leaves_;        // and the leaves, in order
  std::string strings_, shardings_, entry_;
  TextBlocks tree_, array_metadatas_;
  std::uint64_t arrays_ = 0, string_leaves_ = 0;
  bool rendered_ = false;
};

// One array of the export: its parameter name and key path, its view, the dtype it is stored
// as, and its chunk. A sharded array (a view with a sharding and shards) is stored as Orbax
// stores it: a regular grid whose chunk is one device's block (JAX's ceil(n / parts)), each
// chunk written by the process that is its primary holder. Any other array is one chunk.
struct OrbaxParam {
  std::string name, key;
  const SnapshotLeaf* leaf = nullptr;
  const LeafView* view = nullptr;  // leaf's view (its bytes through leaf_data)
  DType dtype = DType::float32;
  Shape chunk;
  bool by_shards = false;
};

inline Shape orbax_shard_chunk(const LeafView& v) {
  Shape chunk(v.shape.size());
  for (std::size_t d = 0; d < chunk.size(); ++d) {
    const std::int64_t parts = v.sharding->parts(d);
    chunk[d] = std::max<std::int64_t>(1, (v.shape[d] + parts - 1) / parts);
  }
  return chunk;
}

// A chunk's key in the array: zarr v3's <name>/c/<i>/<j> (<name>/c for a scalar), zarr v2's
// <name>/<i>.<j> (<name>/0 for a scalar).
inline std::string orbax_chunk_key(const std::string& name, const Shape& index, bool zarr3 = true) {
  std::string key;
  key.reserve(name.size() + 3 + 4 * index.size());
  key += name;
  if (!zarr3) {
    key += '/';
    for (std::size_t d = 0; d < index.size(); ++d) {
      if (d) key += '.';
      append_json_int(key, index[d]);
    }
    if (index.empty()) key += '0';
    return key;
  }
  key += "/c";
  for (std::int64_t i : index) {
    key += '/';
    append_json_int(key, i);
  }
  return key;
}
// An array's metadata key: zarr.json, or zarr v2's .zarray.
inline std::string orbax_metadata_key(const std::string& name, bool zarr3) {
  const std::string_view file = zarr3 ? "/zarr.json" : "/.zarray";
  std::string key;
  key.reserve(name.size() + file.size());
  return key.append(name).append(file);
}

// How many chunks of an array hold data (zarr writes none of a zero-size array).
inline std::uint64_t orbax_chunk_count(const Shape& shape, const Shape& chunk) {
  std::uint64_t n = 1;
  for (std::size_t d = 0; d < shape.size(); ++d) n *= static_cast<std::uint64_t>((shape[d] + chunk[d] - 1) / chunk[d]);
  return n;
}

// The view of one chunk made of one shard: the shard's box in C order, padded to the chunk's
// full shape (an edge block of an uneven split) with zeros, zarr's fill value here. A host
// shard that fills its chunk is read in place.
inline LeafView orbax_chunk_view(const LeafView& v, const ShardView& s, const Shape& chunk) {
  LeafView c;
  c.dtype = v.dtype;
  c.shape = chunk;
  if (s.box.shape == chunk && s.memory == MemoryKind::host) {
    c.data = s.data;
    c.nbytes = element_count(chunk) * dtype_size(v.dtype);
    return c;
  }
  ShardView at = s;
  at.box.start.assign(chunk.size(), 0);
  c.shards.push_back(at);
  return c;
}

// The export itself: `item`'s leaves as an Orbax checkpoint at `key`. With several ranks
// (options.coordinator), every rank calls it with the same tree, as Orbax's processes all save:
//   1. rank 0 checks the path and stages it; every rank learns the staging key (or the error);
//   2. every rank writes the chunks it is the primary holder of into its own OCDBT database,
//      <pytree>/ocdbt.process_<rank>/, and its array_metadatas/process_<rank>; rank 0 also the
//      unsharded arrays and every array's zarr.json;
//   3. one gather: each rank's files, chunks and database values, or its error;
//   4. rank 0 checks that the ranks saved one tree and that every chunk was written once, then
//      writes the root database, whose values point into the processes' data files (as Orbax's
//      merge of its per-process databases does), the metadata files, and publishes;
//   5. one broadcast: every rank returns, or throws the same error.
// With one rank the database is the pytree directory's own (as Orbax on one host reads it).
inline OrbaxSaveReport save_orbax_snapshot(Store& store, const std::string& key_in, const ItemSnapshot& item,
                                           const OrbaxSaveOptions& options) {
  LocalCoordinator alone;
  Coordinator& coordinator = options.coordinator ? *options.coordinator : alone;
  const int rank = coordinator.rank(), ranks = coordinator.size();
  const bool primary = coordinator.is_primary();
  const std::string key = normalize_key(key_in);
  const std::string where = store.describe(key);

  // Step 1.
  coordinator.set_phase("staging");
  std::unique_ptr<CheckpointStaging> staging;  // rank 0's
  const std::string top = run_on_primary(coordinator, [&] {
    refuse_inside_checkpoint(store, key);
    // _CHECKPOINT_METADATA holds them one level down; a reader takes Json::max_parse_depth.
    for (const auto& [name, value] : {std::pair<const char*, const Json*>{"metrics", &options.metrics},
                                      std::pair<const char*, const Json*>{"custom_metadata", &options.custom_metadata}})
      if (value->depth() > Json::max_parse_depth - 1)
        throw Error(ErrorKind::invalid_argument, std::string("OrbaxSaveOptions::") + name + " nests arrays and objects " +
                    "more than " + std::to_string(Json::max_parse_depth - 1) + " deep, more than a load reads", where);
    if (options.zstd_level < 0 || options.zstd_level > ZSTD_maxCLevel())
      throw Error(ErrorKind::invalid_argument, "OrbaxSaveOptions::zstd_level is " + std::to_string(options.zstd_level) +
                  "; it is 0 (no compression) or 1 to " + std::to_string(ZSTD_maxCLevel()), where);
    if (store.exists(key))
      throw Error(ErrorKind::already_exists, "something is already here; an Orbax export never replaces it (remove it "
                  "first, or export to another path)", where);
    staging = store.stage_foreign(key);
    return staging->key();
  });
  const std::string pytree_dir = options.layout == OrbaxLayout::v1 ? "state" : "";
  const std::string dir = pytree_dir.empty() ? top : join_key(top, pytree_dir);
  const std::string rel = pytree_dir.empty() ? "" : pytree_dir + "/";
  const std::string process_db = "ocdbt.process_" + std::to_string(rank) + "/";

  // Step 2. Any error from here on reaches every rank through the gather.
  OrbaxSaveReport report;
  std::vector<OrbaxParam> params;
  params.reserve(item.leaves.size());  // (grown by doubling, 10,000 leaves' params were moved 14 times)
  OrbaxMetadataText text(where);
  WireDigest digest;                     // what every rank must agree on
  std::map<std::string, std::uint64_t> mine;  // files this rank wrote, relative to the checkpoint
  std::vector<std::string> chunks_written;    // by shards: the chunk keys this rank wrote
  std::optional<OcdbtWriter> db;
  std::exception_ptr failure;
  std::mutex written;  // guards mine, chunks_written and the report's sums (written side by side)
  auto put_mine = [&](const std::string& name, const TextParts& content) {
    const std::uint64_t size = write_blob_parts(store, join_key(top, name), content);
    std::lock_guard<std::mutex> lock(written);
    mine[name] = size;
  };
  std::future<void> metadata_files;  // (after what it uses, so that it is waited for first)
  try {
    for (const auto& leaf : item.leaves) {
      std::string full = leaf.path.str();
      std::string name = text.begin_leaf(leaf.path, full);
      const LeafView& v = leaf.view;
      if (v.dtype == DType::string) {
        LeafView fetched;
        const LeafView& bytes = leaf_data(leaf, fetched);
        text.add_string(name, std::string(static_cast<const char*>(bytes.data), static_cast<std::size_t>(bytes.nbytes)));
        if (primary) report.bytes += bytes.nbytes;  // (rank 0 writes _strings.json)
        continue;
      }
      // By its blocks: every rank alike, also one that holds none of them (its mesh puts no
      // device on this process), so that every rank spells the same layout.
      const bool by_shards = v.sharding && !v.data && !leaf.fetch;  // (a fetched leaf is written whole)
      // Written whole by rank 0, which must hold all of it.
      if (!by_shards && !v.shards.empty() && primary)
        if (const std::uint64_t held = held_elements(v); held != element_count(v.shape))
          throw uncovered_leaf_error(held, v, "an array without a sharding is written by rank 0, which needs all of "
                                     "it: gather it onto this process first")
              .with_file(where)
              .with_key(full);
      const DType to = cast_rule_target(options.cast, full, v.dtype);
      if (to == DType::string) throw Error(ErrorKind::invalid_argument, "a cast rule makes an array a string", where, full);
      if (to != v.dtype) report.cast.push_back(full);
      const Shape chunk = by_shards ? orbax_shard_chunk(v) : orbax_chunk_shape(v.shape);
      text.add_array(v.sharding ? &*v.sharding : nullptr, v.shape, chunk);
      params.push_back({std::move(name), std::move(full), &leaf, &v, to, chunk, by_shards});
    }
    text.check_names();
    report.leaves = text.leaves();

    // The metadata files, complete once the last leaf is seen, are spelled (text.render) and
    // written on a thread of their own while the arrays are written and synced: each file's
    // fsync waits on the disk, and one after another after the data file's, they were a fifth
    // of an export of 10,000 small arrays (docs/benchmarks.md), and their text a quarter. All
    // but the commit indicator (step 4). Where no thread can be had, they are written here
    // when waited for. Nothing else touches `text` until then.
    metadata_files = std::async(std::launch::async | std::launch::deferred, [&] {
      put_mine(rel + "array_metadatas/process_" + std::to_string(rank), text.array_metadatas());
      if (!primary) return;
      if (const std::string strings = text.strings(); !strings.empty()) put_mine(rel + "_strings.json", strings);
      text.put_files(put_mine, rel, options);
    });
    // The arrays: keys of one OCDBT database per rank, or files of one directory per parameter.
    if (options.ocdbt) db.emplace(store, ranks > 1 ? join_key(dir, process_db) : dir);
    auto write_chunk = [&](const OrbaxParam& p, const LeafView& v, const std::string& chunk_key, bool leaf_kept) {
      std::uint64_t data = 0, at = 0;
      if (db) {
        // A leaf's own memory stays where it is until the database is finished; a fetched
        // leaf's copy goes once its chunk is written.
        db->put_stream(chunk_key, [&](auto&& sink, auto&& kept) {
          if (leaf_kept) data = write_orbax_shard(v, p.dtype, options, p.key, sink, kept);
          else data = write_orbax_shard(v, p.dtype, options, p.key, sink, sink);
        });
      } else {
        auto w = store.create(join_key(top, rel + chunk_key));
        auto sink = [&](const void* bytes, std::uint64_t n) {
          if (n == 0) return;
          w->write_at(bytes, n, at);
          at += n;
        };
        data = write_orbax_shard(v, p.dtype, options, p.key, sink, sink);
        w->finish(at);
      }
      std::lock_guard<std::mutex> lock(written);
      if (!db) mine[rel + chunk_key] = at;
      report.bytes += element_count(v.shape) * dtype_size(p.dtype);
      report.stored_bytes += data;
    };
    // Each array's zarr metadata, in order: what every rank must agree on. Arrays of one
    // dtype, shape and chunk shape (a model's layers, 10,000 small arrays) share one text,
    // made once and written from where it is (OcdbtWriter::put_kept).
    std::vector<const std::string*> zarr_json(params.size());
    std::map<std::tuple<DType, Shape, Shape>, std::string> zarr_texts;
    for (std::size_t i = 0; i < params.size(); ++i) {
      const OrbaxParam& p = params[i];
      auto [it, fresh] = zarr_texts.try_emplace({p.dtype, p.view->shape, p.chunk});
      if (fresh)
        it->second = options.zarr3 ? orbax_zarr_json(p.dtype, p.view->shape, p.chunk, options.zstd_level)
                                   : orbax_zarray(p.dtype, p.view->shape, p.chunk, options.zstd_level);
      zarr_json[i] = &it->second;
      if (ranks > 1) digest.str(*zarr_json[i]);
    }
    // An array's chunks: one, or its blocks (each by the rank that is its primary holder).
    auto write_array_chunks = [&](const OrbaxParam& p) {
      if (element_count(p.view->shape) == 0) return;  // no chunk: a zero-size array is all fill value
      if (!p.by_shards) {
        LeafView fetched;  // a fetched leaf's bytes, dropped once it is written
        if (primary)
          write_chunk(p, leaf_data(*p.leaf, fetched), orbax_chunk_key(p.name, Shape(p.view->shape.size(), 0), options.zarr3),
                      !p.leaf->fetch);
        return;
      }
      for (const ShardView& s : p.view->shards) {
        if (!s.primary || !s.data || s.box.elements() == 0) continue;
        Shape index(s.box.start.size());
        for (std::size_t d = 0; d < index.size(); ++d) {
          const std::int64_t edge = std::min(p.chunk[d], p.view->shape[d] - s.box.start[d]);
          if (s.box.start[d] % p.chunk[d] != 0 || s.box.shape[d] != edge)
            throw Error(ErrorKind::invalid_argument, "the shard at " + to_string(s.box.start) + " of shape " +
                        to_string(s.box.shape) + " is not a block of the regular grid of " + to_string(p.chunk) +
                        " an Orbax array's chunks form", where, p.key);
          index[d] = s.box.start[d] / p.chunk[d];
        }
        const std::string chunk_key = orbax_chunk_key(p.name, index, options.zarr3);
        write_chunk(p, orbax_chunk_view(*p.view, s, p.chunk), chunk_key, false);
        std::lock_guard<std::mutex> lock(written);
        chunks_written.push_back(chunk_key);
      }
    };
    // In a database, an array's zarr v3 metadata key goes in after its chunks, so that the
    // keys of a usual tree come in the order the database keeps ("<name>/c/0" sorts before
    // "<name>/zarr.json"; v2's "<name>/.zarray" before "<name>/0"), and its sort at finish()
    // has nothing to do (sorting 20,000 keys was a tenth of an export's instructions). A
    // directory per parameter writes an array's metadata file first, as it always has.
    auto write_metadata = [&](const OrbaxParam& p, std::size_t i) {
      if (!primary) return;
      if (db) db->put_kept(orbax_metadata_key(p.name, options.zarr3), *zarr_json[i]);
      else put_mine(rel + orbax_metadata_key(p.name, options.zarr3), *zarr_json[i]);
    };
    const bool metadata_after_chunks = db && options.zarr3;
    auto write_array = [&](std::size_t i) {
      const OrbaxParam& p = params[i];
      if (!metadata_after_chunks) write_metadata(p, i);
      write_array_chunks(p);
      if (metadata_after_chunks) write_metadata(p, i);
    };
    // A directory per parameter writes the files of arrays with small chunks side by side:
    // on a bucket Store::parallel_reads at once (one after another, 300 arrays 20 ms away took
    // 12.5 s), on a filesystem eight, since each file's fsync, and each directory's at the
    // publish, waits on the disk (1,000 arrays: 1.0-1.9 s one after another, 1.0-1.2 s so,
    // with the directories' fsyncs). Larger chunks, each already uploaded in parallel parts,
    // go one after another after them, so that memory stays at about the store's parts in
    // flight.
    const int writers = db ? 1 : std::max(8, store.parallel_reads());
    if (writers <= 1) {
      for (std::size_t i = 0; i < params.size(); ++i) write_array(i);
    } else {
      std::vector<std::size_t> side, one_by_one;
      for (std::size_t i = 0; i < params.size(); ++i)
        (params[i].by_shards || element_count(params[i].chunk) * dtype_size(params[i].dtype) > export_side_by_side_bytes
             ? one_by_one
             : side)
            .push_back(i);
      std::atomic<bool> failed{false};  // the first error stops the writes not yet begun
      for_each_index(side.size(), writers, [&](std::size_t k) {
        if (failed.load()) return;
        try {
          write_array(side[k]);
        } catch (...) {
          failed = true;
          throw;
        }
      });
      for (std::size_t i : one_by_one) write_array(i);
    }
    if (db)
      for (const auto& [name, size] : db->finish()) {
        std::lock_guard<std::mutex> lock(written);
        mine[rel + (ranks > 1 ? process_db : "") + name] = size;
      }
    metadata_files.get();
    if (ranks > 1) text.digest(digest);  // (a byte at a time: 10,000 leaves' text took 9 ms)
  } catch (const Error& e) {
    failure = std::make_exception_ptr(e.file().empty() ? e.with_file(where) : e);
  } catch (...) {
    failure = std::current_exception();
  }
  // An array failed first: its error is the one reported, and the files go with the staging.
  if (metadata_files.valid() && metadata_files.wait_for(std::chrono::seconds(0)) != std::future_status::deferred) {
    try {
      metadata_files.get();
    } catch (...) {
    }
  }

  // Step 3.
  coordinator.set_phase("gathering the ranks' arrays");
  WireWriter out;
  if (!failure) {
    out.u64(1).u64(digest.value);
    out.u64(mine.size());
    for (const auto& [name, size] : mine) out.str(name).u64(size);
    out.u64(chunks_written.size());
    for (const auto& c : chunks_written) out.str(c);
    if (db && ranks > 1) {
      out.str(db->data_name()).u64(db->value_count());
      db->for_each_value([&](const std::string& k, const OcdbtWriter::StoredValue& v) {
        out.str(k).u64(v.indirect ? 1 : 0);
        if (v.indirect) out.u64(v.offset).u64(v.length);
        else out.str(v.inline_value);
      });
    }
  } else {
    out.u64(0);
    encode_error(out, as_error(failure));
  }
  db.reset();
  const std::vector<std::string> reports = coordinator.gather(out.take());

  // Step 4.
  WireWriter outcome;
  std::exception_ptr publish_failure;
  // The other ranks learn whose error it is: another rank's, or one about the ranks together
  // (their trees, their blocks), as it is; rank 0's own, prefixed "rank 0 failed: ".
  bool says_whose = false;
  auto about_ranks = [&](Error e) {
    says_whose = true;
    return e;
  };
  if (primary) {
    try {
      if (failure) std::rethrow_exception(failure);
      for (std::size_t r = 0; r < reports.size(); ++r) {
        WireReader in(reports[r]);
        if (in.u64() == 1) continue;
        const Error e = decode_error(in);
        throw about_ranks(Error(e.kind(), "rank " + std::to_string(r) + " failed: " + e.message(), e.file(), e.key_path()));
      }
      std::map<std::string, std::uint64_t> expected;
      std::map<std::string, int> writer_of;  // chunk key -> the rank that wrote it
      std::optional<OcdbtWriter> root;
      if (options.ocdbt && ranks > 1) root.emplace(store, dir);
      for (std::size_t r = 0; r < reports.size(); ++r) {
        WireReader in(reports[r]);
        in.u64();
        if (in.u64() != digest.value)
          throw about_ranks(Error(ErrorKind::invalid_argument, "rank " + std::to_string(r) + " saved another tree than rank 0 "
                                  "(other keys, dtypes, shapes or shardings): every rank saves the same tree", where));
        for (std::uint64_t n = in.u64(); n > 0; --n) {
          std::string name = in.str();
          expected[name] = in.u64();
        }
        for (std::uint64_t n = in.u64(); n > 0; --n) {
          std::string c = in.str();
          if (auto [it, fresh] = writer_of.emplace(c, static_cast<int>(r)); !fresh)
            throw about_ranks(Error(ErrorKind::invalid_argument, "ranks " + std::to_string(it->second) + " and " +
                                    std::to_string(r) + " both wrote chunk '" + c + "' (each block has one primary holder)", where));
        }
        if (root) {
          const OcdbtFileName file{"ocdbt.process_" + std::to_string(r) + "/", in.str()};
          for (std::uint64_t n = in.u64(); n > 0; --n) {
            const std::string k = in.str();
            if (in.u64() == 1) {
              const std::uint64_t offset = in.u64();
              root->put_reference(k, file, offset, in.u64());
            } else {
              root->put(k, in.str());
            }
          }
        }
      }
      // Every chunk of every array stored by shards is written: a block no rank held is not
      // silently left as fill values.
      for (const OrbaxParam& p : params) {
        if (!p.by_shards || element_count(p.view->shape) == 0) continue;
        const std::uint64_t want = orbax_chunk_count(p.view->shape, p.chunk);
        std::uint64_t got = 0;
        // Its chunks' keys are those under "<name>/" (no name holds '/', so no other array's are).
        const std::string under = p.name + "/";
        for (auto it = writer_of.lower_bound(under); it != writer_of.end() && it->first.rfind(under, 0) == 0; ++it) ++got;
        if (got != want)
          throw about_ranks(Error(ErrorKind::invalid_argument, "the ranks hold " + std::to_string(got) + " of the array's " +
                      std::to_string(want) + " blocks: every block needs a process that holds it (" +
                      (ranks > 1 ? "every rank that holds a part takes part in the export"
                                 : "pass OrbaxSaveOptions::coordinator on every rank, or gather the array onto this "
                                   "process (ShardedArray::gather) first") +
                      ")", where, p.key));
      }
      if (root)
        for (const auto& [name, size] : root->finish()) expected[rel + name] = size;
      root.reset();
      auto put_file = [&](const std::string& name, const TextParts& content) {
        expected[name] = write_blob_parts(store, join_key(top, name), content);
      };
      text.put_commit(put_file);
      staging->publish(expected);
      outcome.u64(1);
    } catch (...) {
      publish_failure = std::current_exception();
      const Error e = as_error(publish_failure);
      outcome = WireWriter();
      outcome.u64(0);
      encode_error(outcome, says_whose || ranks == 1 ? e : Error(e.kind(), "rank 0 failed: " + e.message(), e.file(), e.key_path()));
    }
    staging.reset();  // unpublished, removed: every rank closed its files before the gather
  }

  // Step 5.
  coordinator.set_phase("agreeing on the outcome");
  const std::string agreed = coordinator.broadcast(outcome.take());
  if (failure) std::rethrow_exception(failure);
  if (publish_failure) std::rethrow_exception(publish_failure);
  WireReader in(agreed);
  if (in.u64() != 1) throw decode_error(in);
  return report;
}

}  // namespace detail::orbax
CAIRN_END_NAMESPACE
