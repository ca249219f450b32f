// SPDX-License-Identifier: Apache-2.0
// The safetensors format (Hugging Face's file of named tensors), read as its specification
// demands: an 8-byte little-endian header length (capped at 100 MB), a JSON object that
// begins with '{' and may be padded with spaces, then the byte buffer. Each tensor has a
// dtype by its safetensors name, a shape and [begin, end) offsets into the buffer; the
// offsets, in order, must tile the buffer exactly (no overlap, no hole, nothing after), and
// each range must hold shape x dtype size bytes. "__metadata__" is an optional map of strings
// to strings. Everything is untrusted: every violation is a corrupt cairn::Error naming the
// file and, where there is one, the tensor.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "cairn/core/json_reader.hpp"
#include "cairn/core/utf8.hpp"
#include "cairn/core/shape.hpp"
#include "cairn/dtype/dtype.hpp"
#include "cairn/store/store.hpp"

CAIRN_BEGIN_NAMESPACE

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::float32;
  Shape shape;
  std::uint64_t begin = 0, end = 0;  // in the byte buffer, which starts after the header
};

// A tensor of a dtype cairn does not have (F8_E8M0, F4, C64, ...: the specification grows):
// not read, but listed, and its bytes still take part in the check that the offsets tile the
// buffer. Its byte count is not checked against its shape (cairn does not know the width).
struct SafetensorsOtherTensor {
  std::string name;
  std::string dtype;  // as the header spells it (at most 40 characters, printable)
  Shape shape;
  std::uint64_t begin = 0, end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsTensor> tensors;       // in the order of their bytes
  std::vector<SafetensorsOtherTensor> others;   // of dtypes cairn does not read, in header order
  std::map<std::string, std::string> metadata;  // "__metadata__"
  std::uint64_t data_offset = 0;                // where the byte buffer starts in the file: 8 + N
};

// The dtypes by their safetensors names; false for a name cairn does not know.
inline bool safetensors_dtype(std::string_view name, DType& out) {
  static constexpr std::pair<std::string_view, DType> names[] = {
      {"BOOL", DType::bool_},     {"U8", DType::uint8},       {"I8", DType::int8},         {"I16", DType::int16},
      {"U16", DType::uint16},     {"F16", DType::float16},    {"BF16", DType::bfloat16},   {"I32", DType::int32},
      {"U32", DType::uint32},     {"F32", DType::float32},    {"F64", DType::float64},     {"I64", DType::int64},
      {"U64", DType::uint64},     {"F8_E4M3", DType::float8_e4m3fn}, {"F8_E5M2", DType::float8_e5m2}};
  for (const auto& [n, d] : names)
    if (n == name) { out = d; return true; }
  return false;
}
inline const char* safetensors_dtype_name(DType d) {
  switch (d) {
    case DType::bool_: return "BOOL";
    case DType::uint8: return "U8";
    case DType::int8: return "I8";
    case DType::int16: return "I16";
    case DType::uint16: return "U16";
    case DType::float16: return "F16";
    case DType::bfloat16: return "BF16";
    case DType::int32: return "I32";
    case DType::uint32: return "U32";
    case DType::float32: return "F32";
    case DType::float64: return "F64";
    case DType::int64: return "I64";
    case DType::uint64: return "U64";
    case DType::float8_e4m3fn: return "F8_E4M3";
    case DType::float8_e5m2: return "F8_E5M2";
    default: return nullptr;  // string leaves have no safetensors dtype
  }
}

namespace detail {

inline constexpr std::uint64_t max_safetensors_header_bytes = 100'000'000;
// A sharded set's index is <name>.index.json ("model.safetensors.index.json").
inline constexpr const char* safetensors_index_suffix = ".index.json";

// Parses and validates a header's JSON against a byte buffer of data_bytes. `file` names the
// file in errors.
inline SafetensorsHeader parse_safetensors_header(std::string_view json, std::uint64_t data_bytes, const std::string& file) {
  SafetensorsHeader h;
  if (json.empty() || json[0] != '{') throw Error(ErrorKind::corrupt, "safetensors header does not begin with '{'", file);
  JsonReader r(json, file, 8, "invalid safetensors header");
  std::set<std::string, std::less<>> names;
  r.object([&](std::string_view key) {
    // The header is UTF-8 JSON (the specification): a name or value that is not valid UTF-8
    // (overlong forms and surrogates included) is refused, never printed as raw bytes.
    if (!valid_utf8(key)) r.fail("a tensor name is not valid UTF-8 (" + printable_prefix(key) + ")");
    if (!names.insert(std::string(key)).second) r.fail("tensor '" + std::string(key) + "' is listed twice");
    if (key == "__metadata__") {
      r.object([&](std::string_view k) {
        std::string name(k);
        if (!valid_utf8(name)) r.fail("a __metadata__ key is not valid UTF-8 (" + printable_prefix(name) + ")");
        if (r.peek() != '"') r.fail("__metadata__ value of '" + name + "' is not a string");
        const std::string_view value = r.string();
        if (!valid_utf8(value)) r.fail("__metadata__ value of '" + name + "' is not valid UTF-8");
        if (!h.metadata.emplace(name, std::string(value)).second) r.fail("__metadata__ has '" + name + "' twice");
      });
      return;
    }
    SafetensorsTensor t;
    t.name = std::string(key);
    std::string other;  // a dtype name cairn does not have
    bool has_dtype = false, has_shape = false, has_offsets = false;
    try {
      r.object([&](std::string_view member) {
        // A member given twice would be read twice (two shapes concatenated, the last dtype
        // winning): refused, as JSON readers that follow RFC 8259's advice do.
        if ((member == "dtype" && has_dtype) || (member == "shape" && has_shape) ||
            (member == "data_offsets" && has_offsets))
          r.fail("tensor has '" + std::string(member) + "' twice");
        if (member == "dtype") {
          const std::string_view d = r.string();
          if (!safetensors_dtype(d, t.dtype)) {
            // The specification adds dtypes (F8_E8M0, F4, F6_E2M3, C64, ...): a name of capital
            // letters, digits and '_' is one cairn does not have; anything else is no dtype.
            const bool name_like = !d.empty() && d.size() <= 40 && std::all_of(d.begin(), d.end(), [](char c) {
              return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
            });
            if (!name_like) r.fail("unknown dtype '" + printable_prefix(d) + "'");
            other = std::string(d);
          }
          has_dtype = true;
        } else if (member == "shape") {
          r.array([&] {
            t.shape.push_back(r.int64());
            if (t.shape.back() < 0) r.fail("negative dimension");
          });
          has_shape = true;
        } else if (member == "data_offsets") {
          std::vector<std::uint64_t> o;
          r.array([&] { o.push_back(r.uint64()); });
          if (o.size() != 2) r.fail("data_offsets must be [begin, end]");
          t.begin = o[0];
          t.end = o[1];
          has_offsets = true;
        } else {
          r.skip();  // a member the specification does not name: ignored, as its reference reader does
        }
      });
      if (!has_dtype || !has_shape || !has_offsets)
        r.fail(std::string("tensor lacks '") + (!has_dtype ? "dtype" : !has_shape ? "shape" : "data_offsets") + "'");
      if (t.end < t.begin) r.fail("data_offsets end before they begin");
      if (!other.empty()) {
        (void)byte_count(t.shape, 1);  // the shape's element count must not overflow either
        h.others.push_back({t.name, std::move(other), std::move(t.shape), t.begin, t.end});
        return;
      }
      const std::uint64_t want = byte_count(t.shape, dtype_size(t.dtype));  // throws on overflow
      if (t.end - t.begin != want)
        r.fail("data_offsets hold " + std::to_string(t.end - t.begin) + " bytes, " + dtype_name(t.dtype) +
               to_string(t.shape) + " needs " + std::to_string(want));
    } catch (const Error& e) {
      throw Error(ErrorKind::corrupt, e.message(), file, t.name);
    }
    h.tensors.push_back(std::move(t));
  });
  r.finish();
  // The byte ranges, in order, tile the buffer exactly (those of tensors cairn does not read
  // too).
  struct Range {
    const std::string* name;
    std::uint64_t begin, end;
  };
  std::sort(h.tensors.begin(), h.tensors.end(), [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::vector<Range> ranges;
  ranges.reserve(h.tensors.size() + h.others.size());
  for (const auto& t : h.tensors) ranges.push_back({&t.name, t.begin, t.end});
  if (!h.others.empty()) {  // (else the tensors' order is the ranges')
    for (const auto& t : h.others) ranges.push_back({&t.name, t.begin, t.end});
    std::sort(ranges.begin(), ranges.end(),
              [](const Range& a, const Range& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  }
  // A tensor past the end is named first: the hole it leaves before it is its doing.
  for (const auto& t : ranges)
    if (t.end > data_bytes)
      throw Error(ErrorKind::corrupt, "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                  ") run past the end of the buffer after the header, which is " + std::to_string(data_bytes) + " bytes",
                  file, *t.name);
  std::uint64_t at = 0;
  const Range* before = nullptr;
  for (const auto& t : ranges) {
    if (t.begin < at)
      throw Error(ErrorKind::corrupt, "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                  ") overlap those of '" + *before->name + "' [" + std::to_string(before->begin) + ", " +
                  std::to_string(before->end) + ")", file, *t.name);
    if (t.begin != at)
      throw Error(ErrorKind::corrupt, t.begin > at ? "bytes " + std::to_string(at) + ".." + std::to_string(t.begin) +
                  " of the buffer belong to no tensor" : "data_offsets overlap the tensor before", file, *t.name);
    at = t.end;
    before = &t;
  }
  if (at != data_bytes)
    throw Error(ErrorKind::corrupt, "the tensors hold " + std::to_string(at) + " bytes, the buffer after the header is " +
                std::to_string(data_bytes), file);
  return h;
}

// Reads and validates the header of the safetensors blob at `key`.
// The header's JSON text of the safetensors file at `key`, checked against the file's size
// (in `file_size`) and the limit, not parsed.
inline std::string read_safetensors_header_text(const Store& store, const std::string& key, std::uint64_t& file_size) {
  const std::string file = store.describe(key);
  std::unique_ptr<StoreReader> in = store.open(key);
  const std::uint64_t size = file_size = in->size();
  if (size < 8) throw Error(ErrorKind::corrupt, "file of " + std::to_string(size) + " bytes is too short for safetensors", file);
  unsigned char len[8];
  in->read_at(len, 8, 0);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n > max_safetensors_header_bytes)
    throw Error(ErrorKind::corrupt, "safetensors header of " + std::to_string(n) + " bytes is over the 100 MB limit", file);
  if (n > size - 8)
    throw Error(ErrorKind::corrupt, "safetensors header of " + std::to_string(n) + " bytes is longer than the file", file);
  std::string json(n, '\0');
  in->read_at(json.data(), n, 8);
  return json;
}

// Parses a header read by read_safetensors_header_text from a file of `file_size` bytes.
inline SafetensorsHeader parse_safetensors_header_text(const std::string& json, std::uint64_t file_size, const std::string& file) {
  SafetensorsHeader h = parse_safetensors_header(json, file_size - 8 - json.size(), file);
  h.data_offset = 8 + json.size();
  return h;
}

}  // namespace detail
CAIRN_END_NAMESPACE
