// SPDX-License-Identifier: Apache-2.0
// The msgpack `checkpoint` file of Orbax's older layout, where values saved with
// `aggregate` (skip_deserialize in _METADATA) live: a msgpack map of the tree, whose arrays are
// flax's ndarray extension (type 1: [shape, dtype name, C-order bytes]) and whose other values
// are numbers, booleans and strings. Read whole (bounded: depth, counts and sizes never exceed
// the bytes there are) into a small tree, then looked up by key path.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "cairn/core/error.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail::orbax {

struct MsgValue {
  enum class Kind { nil, boolean, int_, uint, float_, str, bin, array, map, ext } kind = Kind::nil;
  bool b = false;
  std::int64_t i = 0;
  std::uint64_t u = 0;
  double f = 0;
  std::string s;                                      // str, bin, ext's payload
  std::int8_t ext_type = 0;
  std::vector<MsgValue> items;  // array; a map's values
  // A map's keys (as text: strings, or integers printed), items[i] being keys[i]'s value. Two
  // vectors, not one of pairs: a pair holding the type being defined is not allowed (clang's
  // libstdc++ checks; a vector of an incomplete type is).
  std::vector<std::string> keys;
  const MsgValue* find(std::string_view key) const {
    if (kind != Kind::map) return nullptr;
    for (std::size_t k = 0; k < keys.size(); ++k)
      if (keys[k] == key) return &items[k];
    return nullptr;
  }
};

class MsgReader {
 public:
  MsgReader(std::string_view bytes, const std::string& file) : p_(bytes.data()), end_(p_ + bytes.size()), file_(file) {}
  MsgValue read_all() {
    MsgValue v = value(0);
    if (p_ != end_) fail("has bytes after its value");
    return v;
  }
  MsgValue value(int depth) {
    if (depth > 64) fail("nests deeper than 64");
    const std::uint8_t t = byte();
    MsgValue v;
    auto str = [&](std::uint64_t n, MsgValue::Kind k) { v.kind = k, v.s = std::string(take(n)); };
    if (t <= 0x7f) v.kind = MsgValue::Kind::int_, v.i = t;
    else if (t >= 0xe0) v.kind = MsgValue::Kind::int_, v.i = static_cast<std::int8_t>(t);
    else if ((t & 0xf0) == 0x80) read_map(v, t & 0x0f, depth);
    else if ((t & 0xf0) == 0x90) read_array(v, t & 0x0f, depth);
    else if ((t & 0xe0) == 0xa0) str(t & 0x1f, MsgValue::Kind::str);
    else switch (t) {
      case 0xc0: break;
      case 0xc2: v.kind = MsgValue::Kind::boolean; break;
      case 0xc3: v.kind = MsgValue::Kind::boolean, v.b = true; break;
      case 0xc4: str(be(1), MsgValue::Kind::bin); break;
      case 0xc5: str(be(2), MsgValue::Kind::bin); break;
      case 0xc6: str(be(4), MsgValue::Kind::bin); break;
      case 0xc7: ext(v, be(1)); break;
      case 0xc8: ext(v, be(2)); break;
      case 0xc9: ext(v, be(4)); break;
      case 0xca: { const std::uint32_t x = static_cast<std::uint32_t>(be(4)); float f; std::memcpy(&f, &x, 4); v.kind = MsgValue::Kind::float_, v.f = static_cast<double>(f); break; }
      case 0xcb: { const std::uint64_t x = be(8); std::memcpy(&v.f, &x, 8); v.kind = MsgValue::Kind::float_; break; }
      case 0xcc: v.kind = MsgValue::Kind::uint, v.u = be(1); break;
      case 0xcd: v.kind = MsgValue::Kind::uint, v.u = be(2); break;
      case 0xce: v.kind = MsgValue::Kind::uint, v.u = be(4); break;
      case 0xcf: v.kind = MsgValue::Kind::uint, v.u = be(8); break;
      case 0xd0: v.kind = MsgValue::Kind::int_, v.i = static_cast<std::int8_t>(be(1)); break;
      case 0xd1: v.kind = MsgValue::Kind::int_, v.i = static_cast<std::int16_t>(be(2)); break;
      case 0xd2: v.kind = MsgValue::Kind::int_, v.i = static_cast<std::int32_t>(be(4)); break;
      case 0xd3: v.kind = MsgValue::Kind::int_, v.i = static_cast<std::int64_t>(be(8)); break;
      case 0xd4: ext(v, 1); break;
      case 0xd5: ext(v, 2); break;
      case 0xd6: ext(v, 4); break;
      case 0xd7: ext(v, 8); break;
      case 0xd8: ext(v, 16); break;
      case 0xd9: str(be(1), MsgValue::Kind::str); break;
      case 0xda: str(be(2), MsgValue::Kind::str); break;
      case 0xdb: str(be(4), MsgValue::Kind::str); break;
      case 0xdc: read_array(v, be(2), depth); break;
      case 0xdd: read_array(v, be(4), depth); break;
      case 0xde: read_map(v, be(2), depth); break;
      case 0xdf: read_map(v, be(4), depth); break;
      default: fail("has the unknown type byte " + std::to_string(t));
    }
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw Error(ErrorKind::corrupt, "msgpack " + why, file_);
  }
  std::size_t left() const { return static_cast<std::size_t>(end_ - p_); }
  std::uint8_t byte() {
    if (p_ == end_) fail("ends early");
    return static_cast<std::uint8_t>(*p_++);
  }
  std::uint64_t be(int n) {
    std::uint64_t v = 0;
    for (int k = 0; k < n; ++k) v = (v << 8) | byte();
    return v;
  }
  std::string_view take(std::uint64_t n) {
    if (n > left()) fail("ends early (" + std::to_string(n) + " bytes wanted, " + std::to_string(left()) + " left)");
    std::string_view s(p_, static_cast<std::size_t>(n));
    p_ += n;
    return s;
  }
  void ext(MsgValue& v, std::uint64_t n) {
    v.kind = MsgValue::Kind::ext;
    v.ext_type = static_cast<std::int8_t>(byte());
    v.s = std::string(take(n));
  }
  // A count is never more than the bytes left (each element takes one at least).
  void read_array(MsgValue& v, std::uint64_t n, int depth) {
    if (n > left()) fail("array of " + std::to_string(n) + " elements in " + std::to_string(left()) + " bytes");
    v.kind = MsgValue::Kind::array;
    v.items.reserve(static_cast<std::size_t>(n));
    for (std::uint64_t k = 0; k < n; ++k) v.items.push_back(value(depth + 1));
  }
  void read_map(MsgValue& v, std::uint64_t n, int depth) {
    if (n > left() / 2) fail("map of " + std::to_string(n) + " entries in " + std::to_string(left()) + " bytes");
    v.kind = MsgValue::Kind::map;
    v.keys.reserve(static_cast<std::size_t>(n));
    v.items.reserve(static_cast<std::size_t>(n));
    for (std::uint64_t k = 0; k < n; ++k) {
      MsgValue key = value(depth + 1);
      std::string text;
      if (key.kind == MsgValue::Kind::str) text = key.s;
      else if (key.kind == MsgValue::Kind::int_) text = std::to_string(key.i);
      else if (key.kind == MsgValue::Kind::uint) text = std::to_string(key.u);
      else fail("map key is neither a string nor an integer");
      v.keys.push_back(std::move(text));
      v.items.push_back(value(depth + 1));
    }
  }

  const char* p_;
  const char* end_;
  const std::string& file_;
};

}  // namespace detail::orbax
CAIRN_END_NAMESPACE
