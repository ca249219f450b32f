// SPDX-License-Identifier: Apache-2.0
// Json's parser and writer. Compiled in every translation unit that includes core/json.hpp,
// or once with CAIRN_SEPARATE_COMPILATION (docs/compile-time.md).
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "cairn/core/json.hpp"
#include "cairn/core/json_reader.hpp"

CAIRN_BEGIN_NAMESPACE

// Builds Json values from detail::JsonReader's tokens.
struct Json::Parser {
  detail::JsonReader& r;

  Json value() {
    switch (r.peek()) {
      case '{': {
        Json j = Json::object();
        auto& members = std::get<Members>(j.v_);
        // Duplicate keys are refused: checked as each key comes while the object is small, and
        // once at its end, sorted, for a large one (a linear check per key was quadratic: 27%
        // of reading an Orbax _METADATA of 10,000 parameters).
        constexpr std::size_t scan_up_to = 16;
        r.object([&](std::string_view key) {
          if (members.size() < scan_up_to)
            for (const auto& kv : members)
              if (kv.first == key) r.fail("duplicate key '" + std::string(key) + "'");
          std::string name(key);
          members.emplace_back(std::move(name), value());
        });
        if (members.size() > scan_up_to) {
          std::vector<std::string_view> keys;
          keys.reserve(members.size());
          for (const auto& kv : members) keys.push_back(kv.first);
          std::sort(keys.begin(), keys.end());
          for (std::size_t i = 1; i < keys.size(); ++i)
            if (keys[i] == keys[i - 1]) r.fail("duplicate key '" + std::string(keys[i]) + "'");
        }
        return j;
      }
      case '[': {
        Json j = Json::array();
        auto& list = std::get<List>(j.v_);
        r.array([&] { list.push_back(value()); });
        return j;
      }
      case '"': return Json(std::string(r.string()));
      default: break;
    }
    if (r.consume("true")) return Json(true);
    if (r.consume("false")) return Json(false);
    if (r.null()) return Json();
    bool is_float = false;
    const std::string_view tok = r.number_token(&is_float);
    if (!is_float) {
      std::int64_t v = 0;
      const auto [end, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
      if (ec == std::errc() && end == tok.data() + tok.size()) return Json(v);
      std::uint64_t u = 0;
      const auto [uend, uec] = std::from_chars(tok.data(), tok.data() + tok.size(), u);
      if (uec == std::errc() && uend == tok.data() + tok.size()) return Json(u);
    }
    // Integers beyond uint64 and fractions: as the nearest double, as JSON readers commonly do.
    return Json(std::strtod(std::string(tok).c_str(), nullptr));
  }
};

CAIRN_API Json::Json() noexcept = default;
CAIRN_API Json::Json(bool b) : v_(b) {}
CAIRN_API Json::Json(std::int64_t i, int_tag) : v_(i) {}
CAIRN_API Json::Json(std::uint64_t u, uint_tag) {
  if (u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) v_ = static_cast<std::int64_t>(u);
  else v_ = u;
}
CAIRN_API Json::Json(double d) : v_(d) {}
CAIRN_API Json::Json(std::string s) : v_(std::move(s)) {}
CAIRN_API Json::Json(std::string_view s) : v_(std::string(s)) {}
CAIRN_API Json::Json(const Json& o) = default;
CAIRN_API Json::Json(Json&& o) noexcept = default;
CAIRN_API Json& Json::operator=(const Json& o) = default;
CAIRN_API Json& Json::operator=(Json&& o) noexcept = default;
CAIRN_API Json::~Json() = default;

CAIRN_API Json Json::array_of(const Json* items, std::size_t n) {
  Json j;
  j.v_ = List(items, items + n);
  return j;
}
CAIRN_API Json Json::object_of(const std::pair<std::string, Json>* items, std::size_t n) {
  Json j;
  j.v_ = Members{};
  for (std::size_t i = 0; i < n; ++i) j[items[i].first] = items[i].second;
  return j;
}

CAIRN_API bool Json::is_null() const { return std::holds_alternative<std::monostate>(v_); }
CAIRN_API bool Json::is_bool() const { return std::holds_alternative<bool>(v_); }
CAIRN_API bool Json::is_int() const { return std::holds_alternative<std::int64_t>(v_); }
CAIRN_API bool Json::is_uint() const {
  return std::holds_alternative<std::uint64_t>(v_) || (is_int() && std::get<std::int64_t>(v_) >= 0);
}
CAIRN_API bool Json::is_number() const { return is_int() || is_uint() || std::holds_alternative<double>(v_); }
CAIRN_API bool Json::is_string() const { return std::holds_alternative<std::string>(v_); }
CAIRN_API bool Json::is_array() const { return std::holds_alternative<List>(v_); }
CAIRN_API bool Json::is_object() const { return std::holds_alternative<Members>(v_); }

template <class T>
const T& Json::get(const char* what) const {
  if (!std::holds_alternative<T>(v_)) throw_type(what);
  return std::get<T>(v_);
}
CAIRN_API void Json::throw_type(const char* what) {
  throw Error(ErrorKind::invalid_argument, std::string("JSON value is not ") + what);
}

CAIRN_API bool Json::as_bool() const { return get<bool>("a bool"); }
CAIRN_API std::int64_t Json::as_int() const {
  if (std::holds_alternative<std::uint64_t>(v_))
    throw Error(ErrorKind::invalid_argument, "JSON value " + std::to_string(std::get<std::uint64_t>(v_)) +
                " is beyond int64's range (read it with as_uint())");
  return get<std::int64_t>("an integer");
}
CAIRN_API std::uint64_t Json::as_uint() const {
  if (std::holds_alternative<std::uint64_t>(v_)) return std::get<std::uint64_t>(v_);
  const std::int64_t i = get<std::int64_t>("an unsigned integer");
  if (i < 0) throw Error(ErrorKind::invalid_argument, "JSON value " + std::to_string(i) + " is negative, not an unsigned integer");
  return static_cast<std::uint64_t>(i);
}
CAIRN_API double Json::as_double() const {
  if (is_int()) return static_cast<double>(std::get<std::int64_t>(v_));
  if (std::holds_alternative<std::uint64_t>(v_)) return static_cast<double>(std::get<std::uint64_t>(v_));
  return get<double>("a number");
}
CAIRN_API const std::string& Json::as_string() const { return get<std::string>("a string"); }
CAIRN_API const Json::List& Json::as_array() const { return get<List>("an array"); }
CAIRN_API const Json::Members& Json::items() const { return get<Members>("an object"); }

CAIRN_API std::size_t Json::size() const {
  if (is_array()) return std::get<List>(v_).size();
  if (is_object()) return std::get<Members>(v_).size();
  return 0;
}

CAIRN_API Json& Json::operator[](const std::string& key) {
  if (is_null()) v_ = Members{};
  if (!is_object()) throw_type("an object");
  auto& obj = std::get<Members>(v_);
  for (auto& kv : obj)
    if (kv.first == key) return kv.second;
  obj.emplace_back(key, Json());
  return obj.back().second;
}
CAIRN_API const Json* Json::find(std::string_view key) const {
  if (!is_object()) return nullptr;
  for (auto& kv : std::get<Members>(v_))
    if (kv.first == key) return &kv.second;
  return nullptr;
}
CAIRN_API const Json& Json::at(std::string_view key) const {
  const Json* j = find(key);
  if (!j) throw Error(ErrorKind::not_found, "JSON object has no member '" + std::string(key) + "'");
  return *j;
}
CAIRN_API void Json::push_back(Json j) {
  if (is_null()) v_ = List{};
  if (!is_array()) throw_type("an array");
  std::get<List>(v_).push_back(std::move(j));
}
CAIRN_API bool Json::equals(const Json& o) const { return v_ == o.v_; }

CAIRN_API std::string Json::dump() const {
  std::string out;
  dump_to(out);
  return out;
}

CAIRN_API Json Json::parse(std::string_view text, const std::string& file) {
  detail::JsonReader reader(text, file, max_parse_depth);
  Json j = Parser{reader}.value();
  reader.finish();
  return j;
}

CAIRN_API int Json::depth(int stop) const {
  if (!is_array() && !is_object()) return 0;
  int deepest = 0;
  if (stop > 0) {
    if (is_array())
      for (const Json& j : std::get<List>(v_)) deepest = std::max(deepest, j.depth(stop - 1));
    else
      for (const auto& kv : std::get<Members>(v_)) deepest = std::max(deepest, kv.second.depth(stop - 1));
  }
  return 1 + deepest;
}

CAIRN_API void Json::dump_to(std::string& out) const {
  if (is_null()) out += "null";
  else if (is_bool()) out += std::get<bool>(v_) ? "true" : "false";
  else if (is_int()) detail::append_json_int(out, std::get<std::int64_t>(v_));
  else if (std::holds_alternative<std::uint64_t>(v_)) detail::append_json_int(out, std::get<std::uint64_t>(v_));
  else if (std::holds_alternative<double>(v_)) {
    double d = std::get<double>(v_);
    // JSON has no NaN or infinity. Refusing them would fail a whole save over one metric (a
    // diverged loss, an fp16 gradient norm that overflowed), so they are written as null, as
    // JavaScript's JSON.stringify and nlohmann/json do.
    if (!std::isfinite(d)) {
      out += "null";
      return;
    }
    // The shortest text that reads back as the same double (0.0025, not 0.0025000000000000001),
    // as numpy, Python's json and JavaScript print it.
    char buf[40];
    const auto end = std::to_chars(buf, buf + sizeof buf, d).ptr;
    const std::string_view text(buf, static_cast<std::size_t>(end - buf));
    out += text;
    if (text.find_first_of(".eE") == std::string_view::npos) out += ".0";
  } else if (is_string()) detail::append_json_string(out, std::get<std::string>(v_));
  else if (is_array()) {
    out += '[';
    bool first = true;
    for (auto& j : std::get<List>(v_)) { if (!first) out += ','; first = false; j.dump_to(out); }
    out += ']';
  } else {
    out += '{';
    bool first = true;
    for (auto& kv : std::get<Members>(v_)) {
      if (!first) out += ',';
      first = false;
      detail::append_json_string(out, kv.first);
      out += ':';
      kv.second.dump_to(out);
    }
    out += '}';
  }
}

CAIRN_END_NAMESPACE
