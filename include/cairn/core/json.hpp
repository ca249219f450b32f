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
  std::string dump() const {
    std::string out;
    dump_to(out);
    return out;
  }

  static Json parse(std::string_view text, const std::string& file = {}) {
    Parser p{text, 0, file};
    Json j = p.value(0);
    p.skip_ws();
    if (p.pos != text.size()) p.fail("unexpected text after the JSON value");
    return j;
  }

 private:
  template <class T>
  const T& get(const char* what) const {
    if (!std::holds_alternative<T>(v_)) throw_type(what);
    return std::get<T>(v_);
  }
  [[noreturn]] static void throw_type(const char* what) {
    throw Error(ErrorKind::invalid_argument, std::string("JSON value is not ") + what);
  }

  static void dump_string(std::string& out, const std::string& s) {
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

  void dump_to(std::string& out) const {
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

  struct Parser {
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

  std::variant<std::monostate, bool, std::int64_t, double, std::string, List, Members> v_;
};

CAIRN_END_NAMESPACE
