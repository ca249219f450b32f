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
#include <utility>
#include <variant>
#include <vector>

#include "cairn/core/error.hpp"

CAIRN_BEGIN_NAMESPACE

class Json {
 public:
  using List = std::vector<Json>;
  using Members = std::vector<std::pair<std::string, Json>>;

  Json() = default;  // null
  Json(std::nullptr_t) {}
  Json(bool b) : v_(b) {}
  template <class I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
  Json(I i) : v_(static_cast<std::int64_t>(i)) {}
  Json(double d) : v_(d) {}
  Json(float f) : v_(static_cast<double>(f)) {}
  Json(const char* s) : v_(std::string(s)) {}
  Json(std::string s) : v_(std::move(s)) {}
  Json(std::string_view s) : v_(std::string(s)) {}

  static Json array(std::initializer_list<Json> items = {}) { Json j; j.v_ = List(items); return j; }
  static Json object(std::initializer_list<std::pair<std::string, Json>> items = {}) {
    Json j;
    j.v_ = Members{};
    for (auto& kv : items) j[kv.first] = kv.second;
    return j;
  }

  bool is_null() const { return std::holds_alternative<std::monostate>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_int() const { return std::holds_alternative<std::int64_t>(v_); }
  bool is_number() const { return is_int() || std::holds_alternative<double>(v_); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_array() const { return std::holds_alternative<List>(v_); }
  bool is_object() const { return std::holds_alternative<Members>(v_); }

  bool as_bool() const { return get<bool>("a bool"); }
  std::int64_t as_int() const { return get<std::int64_t>("an integer"); }
  double as_double() const {
    if (is_int()) return static_cast<double>(std::get<std::int64_t>(v_));
    return get<double>("a number");
  }
  const std::string& as_string() const { return get<std::string>("a string"); }
  const List& as_array() const { return get<List>("an array"); }
  List& as_array() { return const_cast<List&>(std::as_const(*this).as_array()); }
  const Members& items() const { return get<Members>("an object"); }

  std::size_t size() const {
    if (is_array()) return std::get<List>(v_).size();
    if (is_object()) return std::get<Members>(v_).size();
    return 0;
  }

  // Members access; a null value becomes an empty object on first insertion.
  Json& operator[](const std::string& key) {
    if (is_null()) v_ = Members{};
    if (!is_object()) throw_type("an object");
    auto& obj = std::get<Members>(v_);
    for (auto& kv : obj)
      if (kv.first == key) return kv.second;
    obj.emplace_back(key, Json());
    return obj.back().second;
  }
  const Json* find(std::string_view key) const {
    if (!is_object()) return nullptr;
    for (auto& kv : std::get<Members>(v_))
      if (kv.first == key) return &kv.second;
    return nullptr;
  }
  bool contains(std::string_view key) const { return find(key) != nullptr; }
  const Json& at(std::string_view key) const {
    const Json* j = find(key);
    if (!j) throw Error(ErrorKind::not_found, "JSON object has no member '" + std::string(key) + "'");
    return *j;
  }
  void push_back(Json j) {
    if (is_null()) v_ = List{};
    if (!is_array()) throw_type("an array");
    std::get<List>(v_).push_back(std::move(j));
  }

  friend bool operator==(const Json& a, const Json& b) { return a.v_ == b.v_; }

  // Compact JSON text. NaN and infinity have no JSON spelling and are refused.
  std::string dump() const;

  static Json parse(std::string_view text, const std::string& file = {});

 private:
  template <class T>
  const T& get(const char* what) const {
    if (!std::holds_alternative<T>(v_)) throw_type(what);
    return std::get<T>(v_);
  }
  [[noreturn]] static void throw_type(const char* what) {
    throw Error(ErrorKind::invalid_argument, std::string("JSON value is not ") + what);
  }

  void dump_to(std::string& out) const;

  struct Parser;  // core/json_impl.hpp
  static constexpr int max_parse_depth = 128;

  std::variant<std::monostate, bool, std::int64_t, double, std::string, List, Members> v_;
};

CAIRN_END_NAMESPACE

// The definitions of the parser and the writer: in every translation unit when header-only,
// only in cairn/src.hpp's with CAIRN_SEPARATE_COMPILATION.
#if CAIRN_DEFINES_RUNTIME
#include "cairn/core/json_impl.hpp"
#endif
