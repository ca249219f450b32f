// Json's parser and writer. Compiled in every translation unit that includes core/json.hpp,
// or once with CAIRN_SEPARATE_COMPILATION (docs/compile-time.md).
#pragma once

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <string>
#include <string_view>

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
        r.object([&](std::string_view key) {
          for (const auto& kv : members)
            if (kv.first == key) r.fail("duplicate key '" + std::string(key) + "'");
          std::string name(key);
          members.emplace_back(std::move(name), value());
        });
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
    }
    // Larger integers and fractions: as the nearest double, as JSON readers commonly do.
    return Json(std::strtod(std::string(tok).c_str(), nullptr));
  }
};

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

CAIRN_API void Json::dump_to(std::string& out) const {
  if (is_null()) out += "null";
  else if (is_bool()) out += std::get<bool>(v_) ? "true" : "false";
  else if (is_int()) detail::append_json_int(out, std::get<std::int64_t>(v_));
  else if (std::holds_alternative<double>(v_)) {
    double d = std::get<double>(v_);
    if (!std::isfinite(d)) throw Error(ErrorKind::invalid_argument, "JSON cannot hold NaN or infinity");
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", d);
    out += buf;
    if (std::string_view(buf).find_first_of(".eE") == std::string_view::npos) out += ".0";
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
