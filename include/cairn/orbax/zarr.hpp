// SPDX-License-Identifier: Apache-2.0
// zarr arrays as Orbax (through TensorStore) writes them: the metadata of zarr v2 (`.zarray`)
// and v3 (`zarr.json`), the chunk keys, and the codecs that turn a stored chunk into its
// elements: zarr v2 with no compressor or zstd; zarr v3 with `transpose` (identity or
// reversed: C or F order), `bytes` (little-endian), `zstd`, `crc32c` (checked, then removed)
// and `sharding_indexed` (a shard of inner chunks with an index of offsets and sizes, itself
// checked by its `crc32c`). Anything else (big-endian data, blosc, gzip, filters, other
// permutations) is refused by name: a clear error, never wrong data.
//
// Metadata and chunks are untrusted: shapes and chunk grids are bounded, a shard index
// entry must lie inside its shard, a chunk must decode to exactly its size.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "cairn/core/json.hpp"
#include "cairn/core/shape.hpp"
#include "cairn/core/utf8.hpp"  // printable_prefix
#include "cairn/dtype/dtype.hpp"
#include "cairn/dtype/float_types.hpp"
#include "cairn/io/crc32c.hpp"
#include "cairn/orbax/zstd.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail::orbax {

// The codecs between a chunk's elements and its stored bytes (one level: a shard's inner
// chunks have their own).
struct ZarrCodecs {
  bool fortran = false;   // elements in F order (zarr v2 "order": "F", or v3 transpose reversed)
  bool zstd = false;      // bytes compressed with zstd
  bool crc32c = false;    // a CRC32C of the bytes appended (v3 codec crc32c)
};

struct ZarrShardIndex {
  Shape inner_shape;           // each inner chunk's shape
  ZarrCodecs inner;            // the inner chunks' codecs
  bool index_crc32c = false;   // the index is followed by its CRC32C
  bool index_at_start = false; // index_location "start" (default "end")
};

struct ZarrArray {
  int zarr_format = 3;
  DType dtype = DType::float32;
  // A dtype cairn does not have ("int4", "float8_e4m3fnuz", "<c8"), as the metadata spells it:
  // the array is listed, not read (ItemRecord::unread), and nothing past its shape is parsed.
  std::string unread_dtype;
  Shape shape;
  Shape chunk_shape;             // the stored chunk (for sharding_indexed: the shard)
  ZarrCodecs codecs;             // unsharded chunks' codecs
  bool sharded = false;
  ZarrShardIndex shard;          // when sharded
  std::string fill;              // the fill value's bytes (one element): where a chunk is missing
  // Chunk key: v2 "i.j" (separator "."), v3 default "c/i/j"; 0-d: "0" or "c".
  std::string key_prefix;        // "" (v2 encoding) or "c"
  char separator = '.';
};

[[noreturn]] inline void zarr_fail(const std::string& why, const std::string& file, const std::string& key) {
  throw Error(ErrorKind::corrupt, why, file, key);
}
[[noreturn]] inline void zarr_unsupported(const std::string& what, const std::string& file, const std::string& key) {
  throw Error(ErrorKind::invalid_argument, what + ": cairn reads zarr arrays with the codecs Orbax writes (docs/orbax.md)",
              file, key);
}

// numpy's type strings ("<f4", "|b1") and the bare names TensorStore uses for the types numpy
// has not got ("bfloat16", "float8_e4m3fn"); zarr v3's data_type names. Empty for any other
// (a dtype cairn does not have, or no dtype at all).
inline std::optional<DType> zarr_known_dtype(const std::string& s, int format) {
  DType d;
  if (format == 3 || s.find_first_of("<>|") != 0) {
    if (parse_dtype(s, d) && d != DType::string) return d;
    return std::nullopt;
  }
  if (s[0] == '>' && s.size() == 3 && s[2] != '1') return std::nullopt;  // big-endian
  static const struct { const char* code; DType d; } codes[] = {
      {"b1", DType::bool_},    {"i1", DType::int8},     {"i2", DType::int16},   {"i4", DType::int32},
      {"i8", DType::int64},    {"u1", DType::uint8},    {"u2", DType::uint16},  {"u4", DType::uint32},
      {"u8", DType::uint64},   {"f2", DType::float16},  {"f4", DType::float32}, {"f8", DType::float64}};
  const std::string code = s.substr(1);
  for (const auto& c : codes)
    if (code == c.code) return c.d;
  return std::nullopt;
}

// Whether `s` names a dtype cairn does not have, as Orbax (TensorStore, numpy) spells one:
// "int4", "float8_e4m3fnuz", "complex64" (zarr v3; v2's bare names), "<c8", "<c16" (v2's numpy
// codes, little-endian or of one byte). Such an array is listed, not read; anything else that
// is no known dtype (big-endian, text) is refused as before.
inline bool zarr_other_dtype(const std::string& s, int format) {
  if (s.empty() || s.size() > 40) return false;
  if (format == 2 && (s[0] == '<' || s[0] == '|')) {
    return s.size() >= 3 && std::all_of(s.begin() + 1, s.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    });
  }
  return s[0] >= 'a' && s[0] <= 'z' && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

inline DType zarr_dtype(const std::string& s, int format, const std::string& file, const std::string& key) {
  if (const auto d = zarr_known_dtype(s, format)) return *d;
  if (format == 2 && s.size() == 3 && s[0] == '>') zarr_unsupported("big-endian data type '" + s + "'", file, key);
  zarr_unsupported("data type '" + printable_prefix(s.substr(0, 40)) + "'", file, key);
}

inline Shape zarr_shape(const Json& j, const char* what, const std::string& file, const std::string& key) {
  if (!j.is_array()) zarr_fail(std::string(what) + " is not a list", file, key);
  if (j.size() > 32) zarr_fail(std::string(what) + " has more than 32 dimensions", file, key);
  Shape s;
  for (const Json& v : j.as_array()) {
    if (!v.is_int() || v.as_int() < 0 || v.as_int() > (std::int64_t(1) << 48))
      zarr_fail(std::string(what) + " holds " + v.dump() + ", not a size", file, key);
    s.push_back(v.as_int());
  }
  return s;
}

// The fill value's bytes for one element: numbers, booleans, "NaN", "Infinity", "-Infinity",
// and zarr v3's "0x..." bit patterns; null (zarr v2) is zero.
inline std::string zarr_fill(const Json* j, DType d, const std::string& file, const std::string& key) {
  const std::size_t n = dtype_size(d);
  std::string out(n, '\0');
  if (!j || j->is_null()) return out;
  auto put_double = [&](double v) {
    unsigned char buf[8];
    switch (d) {
      case DType::float32: { float f = static_cast<float>(v); std::memcpy(buf, &f, 4); break; }
      case DType::float64: std::memcpy(buf, &v, 8); break;
      case DType::float16: { float16 f(static_cast<float>(v)); std::memcpy(buf, &f, 2); break; }
      case DType::bfloat16: { bfloat16 f(static_cast<float>(v)); std::memcpy(buf, &f, 2); break; }
      case DType::float8_e4m3fn: { float8_e4m3fn f(static_cast<float>(v)); std::memcpy(buf, &f, 1); break; }
      case DType::float8_e5m2: { float8_e5m2 f(static_cast<float>(v)); std::memcpy(buf, &f, 1); break; }
      case DType::bool_: buf[0] = v != 0; break;
      default: {
        // Integers: two's complement, little-endian (the hosts cairn supports).
        const std::int64_t i = static_cast<std::int64_t>(v);
        std::memcpy(buf, &i, 8);
      }
    }
    std::memcpy(out.data(), buf, n);
  };
  if (j->is_bool()) put_double(j->as_bool() ? 1 : 0);
  else if (j->is_int()) {
    const std::int64_t i = j->as_int();
    if (d == DType::bool_ || d == DType::float16 || d == DType::bfloat16 || d == DType::float32 || d == DType::float64 ||
        d == DType::float8_e4m3fn || d == DType::float8_e5m2)
      put_double(static_cast<double>(i));
    else std::memcpy(out.data(), &i, n);
  } else if (j->is_uint()) {
    const std::uint64_t u = j->as_uint();
    std::memcpy(out.data(), &u, n);
  } else if (j->is_number()) put_double(j->as_double());
  else if (j->is_string()) {
    const std::string& s = j->as_string();
    if (s == "NaN") put_double(std::numeric_limits<double>::quiet_NaN());
    else if (s == "Infinity") put_double(std::numeric_limits<double>::infinity());
    else if (s == "-Infinity") put_double(-std::numeric_limits<double>::infinity());
    else if (s.size() == 2 + 2 * n && s.rfind("0x", 0) == 0) {
      // Big-endian hex of the element's bits.
      auto digit = [&](char ch) -> int {
        if (ch >= '0' && ch <= '9') return ch - '0';
        if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
        if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
        zarr_fail("fill_value '" + s + "' is not hexadecimal", file, key);
      };
      for (std::size_t b = 0; b < n; ++b)
        out[n - 1 - b] = static_cast<char>(digit(s[2 + 2 * b]) * 16 + digit(s[3 + 2 * b]));
    } else zarr_fail("fill_value '" + s + "' is not a number", file, key);
  } else zarr_fail("fill_value " + j->dump() + " is not a number", file, key);
  return out;
}

// A v3 codec chain (array -> bytes -> bytes) into `c`; `sharding` receives a sharding_indexed
// codec where one is allowed.
inline void zarr_v3_codecs(const Json& list, DType d, std::size_t rank, ZarrCodecs& c, ZarrArray* sharding,
                           const std::string& file, const std::string& key) {
  if (!list.is_array() || list.size() == 0) zarr_fail("codecs is not a list of codecs", file, key);
  int stage = 0;  // 0 array->array, 1 after array->bytes
  for (const Json& codec : list.as_array()) {
    if (!codec.is_object() || !codec.contains("name") || !codec.at("name").is_string())
      zarr_fail("a codec has no name", file, key);
    const std::string& name = codec.at("name").as_string();
    const Json* conf = codec.find("configuration");
    if (name == "transpose" && stage == 0) {
      const Json* order = conf ? conf->find("order") : nullptr;
      if (!order || !order->is_array() || order->size() != rank) zarr_fail("transpose has no order of the array's rank", file, key);
      bool identity = true, reversed = true;
      for (std::size_t i = 0; i < rank; ++i) {
        const Json& o = order->as_array()[i];
        if (!o.is_int()) zarr_fail("transpose order holds " + o.dump(), file, key);
        identity = identity && o.as_int() == std::int64_t(i);
        reversed = reversed && o.as_int() == std::int64_t(rank - 1 - i);
      }
      if (!identity && !reversed) zarr_unsupported("transpose order " + order->dump() + " (only C or F order)", file, key);
      c.fortran = !identity && rank > 1;
    } else if (name == "bytes" && stage == 0) {
      const Json* endian = conf ? conf->find("endian") : nullptr;
      if (endian && (!endian->is_string() || (endian->as_string() != "little" && dtype_size(d) > 1)))
        zarr_unsupported("bytes codec with endian " + endian->dump(), file, key);
      stage = 1;
    } else if (name == "sharding_indexed" && stage == 0 && sharding) {
      if (!conf) zarr_fail("sharding_indexed has no configuration", file, key);
      sharding->sharded = true;
      ZarrShardIndex& s = sharding->shard;
      s.inner_shape = zarr_shape(conf->at("chunk_shape"), "sharding_indexed chunk_shape", file, key);
      if (s.inner_shape.size() != rank) zarr_fail("sharding_indexed chunk_shape has another rank than the array", file, key);
      zarr_v3_codecs(conf->at("codecs"), d, rank, s.inner, nullptr, file, key);
      if (const Json* idx = conf->find("index_codecs")) {
        ZarrCodecs ic;
        zarr_v3_codecs(*idx, DType::uint64, 1, ic, nullptr, file, key);
        if (ic.zstd || ic.fortran) zarr_unsupported("compressed shard index", file, key);
        s.index_crc32c = ic.crc32c;
      }
      if (const Json* loc = conf->find("index_location"))
        s.index_at_start = loc->is_string() && loc->as_string() == "start";
      stage = 2;
    } else if (name == "zstd" && stage == 1 && !c.zstd && !c.crc32c) {
      c.zstd = true;
    } else if (name == "crc32c" && stage == 1 && !c.crc32c) {
      c.crc32c = true;
    } else {
      zarr_unsupported("codec '" + name + "' in this position", file, key);
    }
  }
  if (stage == 0) zarr_fail("codecs has no array-to-bytes codec", file, key);
}

// Reads `.zarray` (v2) or `zarr.json` (v3) text.
inline ZarrArray parse_zarr_metadata(const std::string& text, int format, const std::string& file, const std::string& key) {
  Json j;
  try {
    j = Json::parse(text, file);
  } catch (const Error& e) {
    throw Error(ErrorKind::corrupt, "zarr metadata is not JSON: " + e.message(), file, key);
  }
  if (!j.is_object()) zarr_fail("zarr metadata is not a JSON object", file, key);
  ZarrArray a;
  a.zarr_format = format;
  try {
    const Json* zf = j.find("zarr_format");
    if (!zf || !zf->is_int() || zf->as_int() != format)
      zarr_fail("zarr metadata does not say zarr_format " + std::to_string(format), file, key);
    // A dtype cairn does not have: the shape (for the listing), nothing else.
    const std::string& dtype_text = j.at(format == 2 ? "dtype" : "data_type").as_string();
    if (!zarr_known_dtype(dtype_text, format) && zarr_other_dtype(dtype_text, format)) {
      a.unread_dtype = dtype_text;
      a.shape = zarr_shape(j.at("shape"), "shape", file, key);
      return a;
    }
    if (format == 2) {
      a.dtype = zarr_dtype(j.at("dtype").as_string(), 2, file, key);
      a.shape = zarr_shape(j.at("shape"), "shape", file, key);
      a.chunk_shape = zarr_shape(j.at("chunks"), "chunks", file, key);
      const Json* order = j.find("order");
      a.codecs.fortran = order && order->is_string() && order->as_string() == "F" && a.shape.size() > 1;
      if (const Json* comp = j.find("compressor"); comp && !comp->is_null()) {
        const Json* id = comp->find("id");
        if (!id || !id->is_string() || id->as_string() != "zstd")
          zarr_unsupported("compressor " + comp->dump(), file, key);
        a.codecs.zstd = true;
      }
      if (const Json* f = j.find("filters"); f && !f->is_null() && !(f->is_array() && f->size() == 0))
        zarr_unsupported("filters " + f->dump(), file, key);
      if (const Json* sep = j.find("dimension_separator"); sep && sep->is_string()) {
        if (sep->as_string() != "." && sep->as_string() != "/") zarr_fail("dimension_separator " + sep->dump(), file, key);
        a.separator = sep->as_string()[0];
      }
      a.fill = zarr_fill(j.find("fill_value"), a.dtype, file, key);
    } else {
      if (const Json* nt = j.find("node_type"); !nt || !nt->is_string() || nt->as_string() != "array")
        zarr_fail("zarr.json is not an array's (node_type)", file, key);
      a.dtype = zarr_dtype(j.at("data_type").as_string(), 3, file, key);
      a.shape = zarr_shape(j.at("shape"), "shape", file, key);
      const Json& grid = j.at("chunk_grid");
      if (!grid.contains("name") || grid.at("name").as_string() != "regular")
        zarr_unsupported("chunk grid " + grid.dump(), file, key);
      a.chunk_shape = zarr_shape(grid.at("configuration").at("chunk_shape"), "chunk_shape", file, key);
      if (a.chunk_shape.size() != a.shape.size()) zarr_fail("chunk_shape has another rank than shape", file, key);
      zarr_v3_codecs(j.at("codecs"), a.dtype, a.shape.size(), a.codecs, &a, file, key);
      a.key_prefix = "c";
      a.separator = '/';
      if (const Json* enc = j.find("chunk_key_encoding")) {
        const std::string& name = enc->at("name").as_string();
        if (name == "v2") a.key_prefix.clear(), a.separator = '.';
        else if (name != "default") zarr_unsupported("chunk_key_encoding " + enc->dump(), file, key);
        if (const Json* conf = enc->find("configuration"))
          if (const Json* sep = conf->find("separator")) {
            // The spec allows these two; any other character would be spliced into file names.
            if (!sep->is_string() || (sep->as_string() != "." && sep->as_string() != "/"))
              zarr_fail("chunk_key_encoding separator " + sep->dump(), file, key);
            a.separator = sep->as_string()[0];
          }
      }
      a.fill = zarr_fill(j.find("fill_value"), a.dtype, file, key);
    }
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::corrupt || e.kind() == ErrorKind::invalid_argument) {
      if (!e.key_path().empty()) throw;
      throw Error(e.kind(), e.message(), file, key);
    }
    throw Error(ErrorKind::corrupt, "zarr metadata: " + e.message(), file, key);
  }
  if (a.chunk_shape.size() != a.shape.size()) zarr_fail("chunks has another rank than shape", file, key);
  for (std::size_t i = 0; i < a.shape.size(); ++i)
    if (a.chunk_shape[i] <= 0 && a.shape[i] > 0) zarr_fail("a chunk dimension is 0", file, key);
  if (a.sharded)
    for (std::size_t i = 0; i < a.shape.size(); ++i)
      if (a.shard.inner_shape[i] <= 0 || a.chunk_shape[i] % a.shard.inner_shape[i])
        zarr_fail("sharding_indexed's chunk_shape does not divide the shard's", file, key);
  std::uint64_t bytes;
  if (!try_byte_count(a.chunk_shape, dtype_size(a.dtype), bytes) || bytes > (std::uint64_t(1) << 40))
    zarr_fail("a chunk of shape " + to_string(a.chunk_shape) + " is too large", file, key);
  return a;
}

// The chunk key of grid position `at` (relative to the array's key), appended to `out`.
inline void zarr_append_chunk_key(const ZarrArray& a, const Shape& at, std::string& out) {
  if (a.key_prefix.empty() && at.empty()) {
    out += '0';
    return;
  }
  out += a.key_prefix;
  bool first = a.key_prefix.empty();
  for (std::size_t i = 0; i < at.size(); ++i) {
    if (!first) out += a.separator;
    first = false;
    char digits[24];
    const auto r = std::to_chars(digits, digits + sizeof digits, at[i]);
    out.append(digits, static_cast<std::size_t>(r.ptr - digits));
  }
}
inline std::string zarr_chunk_key(const ZarrArray& a, const Shape& at) {
  std::string k;
  zarr_append_chunk_key(a, at, k);
  return k;
}

// Removes and checks a trailing CRC32C (the v3 crc32c codec).
// `what` follows the key in an error ("" for a chunk, " (shard index)"): no text is put
// together unless one is thrown.
inline std::string_view zarr_strip_crc(std::string_view b, const std::string& file, const std::string& key, const char* what = "") {
  if (b.size() < 4) zarr_fail("chunk is shorter than its CRC32C", file, key + what);
  const auto* u = reinterpret_cast<const unsigned char*>(b.data() + b.size() - 4);
  const std::uint32_t stored = u[0] | (std::uint32_t(u[1]) << 8) | (std::uint32_t(u[2]) << 16) | (std::uint32_t(u[3]) << 24);
  const std::uint32_t got = crc32c(b.data(), b.size() - 4);
  if (got != stored)
    zarr_fail("chunk checksum mismatch (CRC32C " + std::to_string(got) + ", stored " + std::to_string(stored) + ")", file, key + what);
  return b.substr(0, b.size() - 4);
}

// Stored bytes of one chunk -> its `nbytes` bytes of elements (in the codecs' order).
inline void zarr_decode_chunk(const ZarrCodecs& c, std::string_view stored, void* dst, std::uint64_t nbytes,
                              const std::string& file, const std::string& key) {
  if (c.crc32c) stored = zarr_strip_crc(stored, file, key);
  if (c.zstd) {
    zstd_decompress_exact(dst, nbytes, stored.data(), stored.size(), file, key, "zstd chunk");
    return;
  }
  if (stored.size() != nbytes)
    zarr_fail("chunk is " + std::to_string(stored.size()) + " bytes, expected " + std::to_string(nbytes), file, key);
  if (nbytes) std::memcpy(dst, stored.data(), static_cast<std::size_t>(nbytes));
}

// A shard's index: for each inner chunk (C order over the shard's grid), its offset and size
// in the shard, or "missing" (both 2^64-1). Read from the shard's bytes of `shard_size`.
struct ZarrShardEntry {
  std::uint64_t offset = 0, nbytes = 0;
  bool missing() const { return offset == ~std::uint64_t(0) && nbytes == ~std::uint64_t(0); }
};
inline std::uint64_t zarr_index_bytes(const ZarrShardIndex& s, std::uint64_t inner_count) {
  return inner_count * 16 + (s.index_crc32c ? 4 : 0);
}
// Entry i of a shard's index, its CRC32C checked and cut already (`index`: inner_count * 16
// bytes), checked to lie inside the shard's data.
inline ZarrShardEntry zarr_shard_entry(const ZarrShardIndex& s, std::string_view index, std::uint64_t i,
                                       std::uint64_t inner_count, std::uint64_t shard_size, const std::string& file,
                                       const std::string& key) {
  const auto* u = reinterpret_cast<const unsigned char*>(index.data()) + 16 * i;
  auto le64 = [](const unsigned char* p) {
    std::uint64_t v = 0;
    for (int b = 0; b < 8; ++b) v |= std::uint64_t(p[b]) << (8 * b);
    return v;
  };
  const ZarrShardEntry e{le64(u), le64(u + 8)};
  if (!e.missing()) {
    const std::uint64_t index_size = zarr_index_bytes(s, inner_count);
    const std::uint64_t lo = s.index_at_start ? index_size : 0;
    const std::uint64_t hi = s.index_at_start ? shard_size : shard_size - index_size;
    if (e.offset < lo || e.offset > hi || e.nbytes > hi - e.offset)
      zarr_fail("shard index entry " + std::to_string(i) + " (bytes " + std::to_string(e.offset) + " + " +
                std::to_string(e.nbytes) + ") lies outside the shard's data (" + std::to_string(shard_size) + " bytes)",
                file, key);
  }
  return e;
}
inline std::vector<ZarrShardEntry> zarr_parse_shard_index(const ZarrShardIndex& s, std::string_view index,
                                                          std::uint64_t inner_count, std::uint64_t shard_size,
                                                          const std::string& file, const std::string& key) {
  if (s.index_crc32c) index = zarr_strip_crc(index, file, key, " (shard index)");
  if (index.size() != inner_count * 16) zarr_fail("shard index has the wrong size", file, key);
  std::vector<ZarrShardEntry> out(static_cast<std::size_t>(inner_count));
  for (std::uint64_t i = 0; i < inner_count; ++i)
    out[static_cast<std::size_t>(i)] = zarr_shard_entry(s, index, i, inner_count, shard_size, file, key);
  return out;
}

}  // namespace detail::orbax
CAIRN_END_NAMESPACE
