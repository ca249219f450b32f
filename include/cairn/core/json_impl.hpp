// Json's parser and writer. Compiled in every translation unit that includes core/json.hpp,
// or once with CAIRN_SEPARATE_COMPILATION (docs/compile-time.md).
#pragma once

#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>

#include "cairn/core/json.hpp"

CAIRN_BEGIN_NAMESPACE

struct Json::Parser {
  std::string_view s;
  std::size_t pos;
  const std::string& file;
  static constexpr int max_depth = 128;

  [[noreturn]] void fail(const std::string& why) const {
    throw Error(ErrorKind::corrupt, "invalid JSON at byte " + std::to_string(pos) + ": " + why, file);
  }
  void skip_ws() {
    while (pos < s.size() && (s[pos] == ' ' || s[pos] == '\n' || s[pos] == '\r' || s[pos] == '\t')) ++pos;
  }
  bool consume(std::string_view lit) {
    if (s.substr(pos, lit.size()) == lit) { pos += lit.size(); return true; }
    return false;
  }
  Json value(int depth) {
    if (depth > max_depth) fail("nested deeper than " + std::to_string(max_depth));
    skip_ws();
    if (pos >= s.size()) fail("unexpected end");
    char c = s[pos];
    if (c == '{') {
      ++pos;
      Json j = Json::object();
      skip_ws();
      if (pos < s.size() && s[pos] == '}') { ++pos; return j; }
      while (true) {
        skip_ws();
        if (pos >= s.size() || s[pos] != '"') fail("expected a string key");
        std::string key = string();
        skip_ws();
        if (pos >= s.size() || s[pos] != ':') fail("expected ':'");
        ++pos;
        if (j.find(key)) fail("duplicate key '" + key + "'");
        std::get<Members>(j.v_).emplace_back(std::move(key), value(depth + 1));
        skip_ws();
        if (pos < s.size() && s[pos] == ',') { ++pos; continue; }
        if (pos < s.size() && s[pos] == '}') { ++pos; return j; }
        fail("expected ',' or '}'");
      }
    }
    if (c == '[') {
      ++pos;
      Json j = Json::array();
      skip_ws();
      if (pos < s.size() && s[pos] == ']') { ++pos; return j; }
      while (true) {
        std::get<List>(j.v_).push_back(value(depth + 1));
        skip_ws();
        if (pos < s.size() && s[pos] == ',') { ++pos; continue; }
        if (pos < s.size() && s[pos] == ']') { ++pos; return j; }
        fail("expected ',' or ']'");
      }
    }
    if (c == '"') return Json(string());
    if (consume("true")) return Json(true);
    if (consume("false")) return Json(false);
    if (consume("null")) return Json();
    return number();
  }
  Json number() {
    std::size_t start = pos;
    if (pos < s.size() && s[pos] == '-') ++pos;
    std::size_t digits = pos;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') ++pos;
    if (pos == digits) fail("expected a value");
    bool is_float = false;
    if (pos < s.size() && s[pos] == '.') {
      is_float = true;
      ++pos;
      std::size_t frac = pos;
      while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') ++pos;
      if (pos == frac) fail("expected digits after '.'");
    }
    if (pos < s.size() && (s[pos] == 'e' || s[pos] == 'E')) {
      is_float = true;
      ++pos;
      if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) ++pos;
      std::size_t exp = pos;
      while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') ++pos;
      if (pos == exp) fail("expected exponent digits");
    }
    std::string text(s.substr(start, pos - start));
    if (!is_float) {
      errno = 0;
      char* end = nullptr;
      long long v = std::strtoll(text.c_str(), &end, 10);
      if (errno == 0 && end == text.c_str() + text.size()) return Json(static_cast<std::int64_t>(v));
    }
    return Json(std::strtod(text.c_str(), nullptr));
  }
  unsigned hex4() {
    if (pos + 4 > s.size()) fail("short \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s[pos++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<unsigned>(c - 'A' + 10);
      else fail("bad \\u escape");
    }
    return v;
  }
  std::string string() {
    ++pos;  // opening quote
    std::string out;
    while (true) {
      if (pos >= s.size()) fail("unterminated string");
      char c = s[pos++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') { out += c; continue; }
      if (pos >= s.size()) fail("unterminated escape");
      char e = s[pos++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00) {
            if (!consume("\\u")) fail("lone surrogate");
            unsigned lo = hex4();
            if (lo < 0xDC00 || lo >= 0xE000) fail("bad surrogate pair");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            fail("lone surrogate");
          }
          if (cp < 0x80) out += static_cast<char>(cp);
          else if (cp < 0x800) { out += static_cast<char>(0xC0 | (cp >> 6)); out += static_cast<char>(0x80 | (cp & 0x3F)); }
          else if (cp < 0x10000) {
            out += static_cast<char>(0xE0 | (cp >> 12)); out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          } else {
            out += static_cast<char>(0xF0 | (cp >> 18)); out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F)); out += static_cast<char>(0x80 | (cp & 0x3F));
          }
          break;
        }
        default: fail("bad escape");
      }
    }
  }
};


CAIRN_API std::string Json::dump() const {
  std::string out;
  dump_to(out);
  return out;
}

CAIRN_API Json Json::parse(std::string_view text, const std::string& file) {
  Parser p{text, 0, file};
  Json j = p.value(0);
  p.skip_ws();
  if (p.pos != text.size()) p.fail("unexpected text after the JSON value");
  return j;
}

CAIRN_API void Json::dump_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

CAIRN_API void Json::dump_to(std::string& out) const {
  if (is_null()) out += "null";
  else if (is_bool()) out += std::get<bool>(v_) ? "true" : "false";
  else if (is_int()) out += std::to_string(std::get<std::int64_t>(v_));
  else if (std::holds_alternative<double>(v_)) {
    double d = std::get<double>(v_);
    if (!std::isfinite(d)) throw Error(ErrorKind::invalid_argument, "JSON cannot hold NaN or infinity");
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", d);
    out += buf;
    if (std::string_view(buf).find_first_of(".eE") == std::string_view::npos) out += ".0";
  } else if (is_string()) dump_string(out, std::get<std::string>(v_));
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
      dump_string(out, kv.first);
      out += ':';
      kv.second.dump_to(out);
    }
    out += '}';
  }
}

CAIRN_END_NAMESPACE
