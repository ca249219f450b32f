// SPDX-License-Identifier: Apache-2.0
// cairn::Json: a small JSON value for user metadata (epoch, loss, learning rate ...) and
// metrics. Objects keep insertion order. The parser is strict and depth-limited because it
// reads files from disk, which are untrusted.
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "cairn/core/error.hpp"

CAIRN_BEGIN_NAMESPACE

class Json {
 public:
  using List = std::vector<Json>;
  using Members = std::vector<std::pair<std::string, Json>>;
  template <class I>
  static constexpr bool is_wide_unsigned = std::is_integral_v<I> && std::is_unsigned_v<I> && !std::is_same_v<I, bool> &&
                                           sizeof(I) >= sizeof(std::uint64_t);

  // The members are defined in core/json_impl.hpp, not here: Json is in every file that
  // includes cairn (the options' user metadata), and its variant's copies, comparisons and
  // accessors instantiated inline cost each of them about half a second of compile time
  // (docs/compile-time.md). Header-only, that file is included at the end of this one.
  CAIRN_API Json() noexcept;  // null
  Json(std::nullptr_t) noexcept : Json() {}
  CAIRN_API Json(bool b);
  template <class I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool> && !is_wide_unsigned<I>, int> = 0>
  Json(I i) : Json(static_cast<std::int64_t>(i), int_tag{}) {}
  // Unsigned 64-bit values of 2^63 and more (seeds, hashes, ids) keep their value rather than
  // wrapping to a negative int64.
  template <class I, std::enable_if_t<is_wide_unsigned<I>, int> = 0>
  Json(I u) : Json(static_cast<std::uint64_t>(u), uint_tag{}) {}
  CAIRN_API Json(double d);
  Json(float f) : Json(static_cast<double>(f)) {}
  Json(const char* s) : Json(std::string_view(s)) {}
  CAIRN_API Json(std::string s);
  CAIRN_API Json(std::string_view s);
  CAIRN_API Json(const Json& o);
  CAIRN_API Json(Json&& o) noexcept;
  CAIRN_API Json& operator=(const Json& o);
  CAIRN_API Json& operator=(Json&& o) noexcept;
  CAIRN_API ~Json();

  static Json array(std::initializer_list<Json> items = {}) { return array_of(items.begin(), items.size()); }
  static Json object(std::initializer_list<std::pair<std::string, Json>> items = {}) {
    return object_of(items.begin(), items.size());
  }

  CAIRN_API bool is_null() const;
  CAIRN_API bool is_bool() const;
  CAIRN_API bool is_int() const;   // an integer that as_int() returns (int64's range)
  CAIRN_API bool is_uint() const;  // an integer that as_uint() returns (0 to 2^64 - 1)
  CAIRN_API bool is_number() const;
  CAIRN_API bool is_string() const;
  CAIRN_API bool is_array() const;
  CAIRN_API bool is_object() const;

  CAIRN_API bool as_bool() const;
  CAIRN_API std::int64_t as_int() const;
  CAIRN_API std::uint64_t as_uint() const;
  CAIRN_API double as_double() const;
  CAIRN_API const std::string& as_string() const;
  CAIRN_API const List& as_array() const;
  List& as_array() { return const_cast<List&>(std::as_const(*this).as_array()); }
  CAIRN_API const Members& items() const;

  CAIRN_API std::size_t size() const;

  // Members access; a null value becomes an empty object on first insertion.
  CAIRN_API Json& operator[](const std::string& key);
  CAIRN_API const Json* find(std::string_view key) const;
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  CAIRN_API const Json& at(std::string_view key) const;
  CAIRN_API void push_back(Json j);

  friend bool operator==(const Json& a, const Json& b) { return a.equals(b); }

  // Compact JSON text. NaN and infinity have no JSON spelling and are written as null.
  CAIRN_API std::string dump() const;

  // parse() refuses text whose arrays and objects nest deeper than this (untrusted files).
  static constexpr int max_parse_depth = 128;
  CAIRN_API static Json parse(std::string_view text, const std::string& file = {});
  // How deeply arrays and objects nest: 0 for a number, string, bool or null, 1 for [] or
  // {"a": 1}, 2 for {"a": []}. Counted no further than `stop` + 1, which it then returns (so
  // that a check of a deep value costs no more than the check needs). parse() refuses text
  // deeper than max_parse_depth, and a save refuses user metadata that its load would refuse.
  CAIRN_API int depth(int stop = max_parse_depth) const;

 private:
  struct int_tag {};
  struct uint_tag {};
  CAIRN_API Json(std::int64_t i, int_tag);
  CAIRN_API Json(std::uint64_t u, uint_tag);  // int64 where it fits
  CAIRN_API static Json array_of(const Json* items, std::size_t n);
  CAIRN_API static Json object_of(const std::pair<std::string, Json>* items, std::size_t n);
  CAIRN_API bool equals(const Json& o) const;
  template <class T>
  const T& get(const char* what) const;
  [[noreturn]] CAIRN_API static void throw_type(const char* what);

  CAIRN_API void dump_to(std::string& out) const;

  struct Parser;  // core/json_impl.hpp

  // std::uint64_t holds only integers above int64's range, so that each number has one form.
  std::variant<std::monostate, bool, std::int64_t, std::uint64_t, double, std::string, List, Members> v_;
};

CAIRN_END_NAMESPACE

// The definitions of the members, the parser and the writer: in every translation unit when
// header-only, only in cairn/src.hpp's with CAIRN_SEPARATE_COMPILATION.
#if CAIRN_DEFINES_RUNTIME
#include "cairn/core/json_impl.hpp"
#endif
