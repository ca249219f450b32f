// SPDX-License-Identifier: Apache-2.0
// detail::JsonReader: a strict pull reader of JSON text, the one tokenizer behind Json::parse
// and the checkpoint metadata (format/metadata_json.hpp). Reading the metadata straight into
// its records, without a tree of Json values in between, is what keeps metadata() of 100,000
// leaves fast; sharing the tokenizer keeps the two from disagreeing about what JSON is.
//
// Everything it reads is untrusted: nesting is bounded (objects and arrays count against
// max_depth, including values skipped unread), integers are checked to fit their type, and
// every failure is a cairn::Error of kind corrupt naming the file and the byte offset.
#pragma once

#include <charconv>
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include "cairn/core/error.hpp"
#include "cairn/core/utf8.hpp"

#if defined(__SSE2__) && !defined(__CUDA_ARCH__)
#include <emmintrin.h>
#define CAIRN_JSON_SSE2 1
#endif

CAIRN_BEGIN_NAMESPACE
namespace detail {

// Equal text, compared inline: member and dtype names are a few bytes, where a call to
// memcmp per comparison was 6% of reading the metadata.
inline bool same_text(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return false;
  return true;
}

class JsonReader {
 public:
  // `what` starts every error message: "invalid JSON at byte 12: expected ':'".
  JsonReader(std::string_view text, const std::string& file, int max_depth, const char* what = "invalid JSON")
      : s_(text), file_(file), what_(what), max_depth_(max_depth) {}

  [[noreturn]] void fail(const std::string& why) const {
    throw Error(ErrorKind::corrupt, std::string(what_) + " at byte " + std::to_string(pos_) + ": " + why, file_);
  }
  std::size_t position() const { return pos_; }
  std::size_t remaining() const { return s_.size() - pos_; }

  // The first character of the next value (after white space); fails at the end of the text.
  CAIRN_ALWAYS_INLINE char peek() {
    // Compact text (what cairn writes) has no white space: one test, inlined, and the rest
    // out of line.
    if (pos_ < s_.size() && static_cast<unsigned char>(s_[pos_]) > ' ') [[likely]]
      return s_[pos_];
    return peek_after_space();
  }
  // Only white space is left.
  void finish() {
    skip_ws();
    if (pos_ != s_.size()) fail("unexpected text after the JSON value");
  }

  // An object: member(key) is called for each member, with the reader at its value, and must
  // read (or skip) that value. The key is valid until the next read.
  template <class F>
  void object(F&& member) {
    object(std::forward<F>(member), [] { return std::string_view(); });
  }
  // The same, where the caller can guess each member's name: guess() returns the name it
  // expects next (or an empty view), and a key spelled exactly so in the text is taken without
  // decoding it (a plain name followed by its closing quote is that name).
  template <class F, class Guess>
  void object(F&& member, Guess&& guess) {
    expect('{', "expected an object");
    enter();
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == '}') { ++pos_; --depth_; return; }
    while (true) {
      if (peek() != '"') fail("expected a string key");
      const std::string_view expected = guess();
      std::string_view key;
      if (!expected.empty() && s_.size() - pos_ > expected.size() + 1 && s_[pos_ + 1 + expected.size()] == '"' &&
          same_text(s_.substr(pos_ + 1, expected.size()), expected)) {
        key = s_.substr(pos_ + 1, expected.size());
        pos_ += expected.size() + 2;
      } else {
        key = string();
      }
      if (peek() != ':') fail("expected ':'");
      ++pos_;
      member(key);
      const char c = peek();
      ++pos_;
      if (c == ',') continue;
      if (c == '}') break;
      --pos_;
      fail("expected ',' or '}'");
    }
    --depth_;
  }
  // An array: element() is called with the reader at each element, and must read it.
  template <class F>
  void array(F&& element) {
    expect('[', "expected an array");
    enter();
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == ']') { ++pos_; --depth_; return; }
    while (true) {
      element();
      const char c = peek();
      ++pos_;
      if (c == ',') continue;
      if (c == ']') break;
      --pos_;
      fail("expected ',' or ']'");
    }
    --depth_;
  }

  // A string, decoded (escapes and surrogate pairs to UTF-8). The view is valid until the
  // next read.
  std::string_view string() {
    expect('"', "expected a string");
    const std::size_t start = pos_;
    // The common case, no escapes: a view of the text itself. Sixteen bytes a step to the
    // first quote, backslash or control character where SSE2 is there (every x86-64): key
    // paths of 20-40 characters were a twentieth of reading the metadata a byte at a time.
#ifdef CAIRN_JSON_SSE2
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), below_space = _mm_set1_epi8(0x1f);
    while (s_.size() - pos_ >= 16) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s_.data() + pos_));
      const __m128i control = _mm_cmpeq_epi8(_mm_max_epu8(v, below_space), below_space);  // v <= 0x1f, unsigned
      const int stop = _mm_movemask_epi8(
          _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)), control));
      if (stop) {
        pos_ += static_cast<std::size_t>(__builtin_ctz(static_cast<unsigned>(stop)));
        break;
      }
      pos_ += 16;
    }
#endif
    while (pos_ < s_.size()) {
      const unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') return s_.substr(start, pos_++ - start);
      if (c == '\\' || c < 0x20) break;
      ++pos_;
    }
    buf_.assign(s_.data() + start, pos_ - start);
    decode_rest();
    return buf_;
  }

  // An integer that fits the type: no fraction, exponent or sign a type cannot hold.
  std::int64_t int64() { return integer<std::int64_t>(); }
  std::uint64_t uint64() { return integer<std::uint64_t>(); }
  template <class I>
  I integer() {
    const char first_char = peek();
    // The common case, a plain non-negative integer of up to 18 digits ended by neither a
    // fraction nor an exponent, read in one pass (number_token, then from_chars, were a tenth
    // of reading metadata of many small leaves). Anything else, also a value too large for
    // I, is read the general way below, which names what is wrong.
    if (is_digit(first_char) && (first_char != '0' || pos_ + 1 >= s_.size() || !is_digit(s_[pos_ + 1]))) {
      std::size_t p = pos_;
      const std::size_t end = std::min(s_.size(), pos_ + 18);
      std::uint64_t v = 0;
      while (p < end && is_digit(s_[p])) v = v * 10 + static_cast<std::uint64_t>(s_[p++] - '0');
      if ((p == s_.size() || (!is_digit(s_[p]) && s_[p] != '.' && s_[p] != 'e' && s_[p] != 'E')) &&
          v <= static_cast<std::uint64_t>(std::numeric_limits<I>::max())) {
        pos_ = p;
        return static_cast<I>(v);
      }
    }
    if (first_char != '-' && !is_digit(first_char)) fail("expected an integer");
    const std::size_t start = pos_;
    const std::string_view tok = number_token();
    I v{};
    const char* first = tok.data();
    const char* last = tok.data() + tok.size();
    const auto [end, ec] = std::from_chars(first, last, v);
    if (ec != std::errc() || end != last) {
      pos_ = start;
      fail("number '" + std::string(tok.substr(0, 40)) + "' is not an integer that fits in " +
           (sizeof(I) == 8 ? "64" : std::to_string(sizeof(I) * 8)) + " bits");
    }
    return v;
  }

  // A number's text as JSON spells it ("-12", "1.5e3"); is_float says whether it has a
  // fraction or an exponent.
  std::string_view number_token(bool* is_float = nullptr) {
    skip_ws();
    const std::size_t start = pos_;
    if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
    const std::size_t digits = pos_;
    while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
    if (pos_ == digits) fail("expected a value");
    if (s_[digits] == '0' && pos_ - digits > 1) { pos_ = digits; fail("leading zero in a number"); }
    bool fractional = false;
    if (pos_ < s_.size() && s_[pos_] == '.') {
      fractional = true;
      const std::size_t frac = ++pos_;
      while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
      if (pos_ == frac) fail("expected digits after '.'");
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      fractional = true;
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      const std::size_t exp = pos_;
      while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
      if (pos_ == exp) fail("expected exponent digits");
    }
    if (is_float) *is_float = fractional;
    return s_.substr(start, pos_ - start);
  }

  bool boolean() {
    if (consume("true")) return true;
    if (consume("false")) return false;
    fail("expected true or false");
  }
  // Consumes a null if one is next.
  bool null() { return consume("null"); }
  // Consumes the literal if it is next (after white space).
  bool consume(std::string_view lit) {
    skip_ws();
    if (s_.substr(pos_, lit.size()) == lit) { pos_ += lit.size(); return true; }
    return false;
  }

  // Reads past any value, checking it as strictly as reading it would.
  void skip() {
    switch (peek()) {
      case '{': object([&](std::string_view) { skip(); }); return;
      case '[': array([&] { skip(); }); return;
      case '"': (void)string(); return;
      default:
        if (consume("true") || consume("false") || consume("null")) return;
        (void)number_token();
    }
  }

 private:
  [[gnu::noinline]] char peek_after_space() {
    skip_ws();
    if (pos_ >= s_.size()) fail("unexpected end");
    return s_[pos_];
  }
  static bool is_digit(char c) { return c >= '0' && c <= '9'; }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }
  CAIRN_ALWAYS_INLINE void expect(char c, const char* what) {
    if (peek() != c) fail(what);
    ++pos_;
  }
  void enter() {
    if (++depth_ > max_depth_) fail("nested deeper than " + std::to_string(max_depth_));
  }
  unsigned hex4() {
    if (pos_ + 4 > s_.size()) fail("short \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<unsigned>(c - 'A' + 10);
      else fail("bad \\u escape");
    }
    return v;
  }
  // The rest of a string from an escape or a control character on, into buf_.
  void decode_rest() {
    while (true) {
      if (pos_ >= s_.size()) fail("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return;
      if (static_cast<unsigned char>(c) < 0x20) { --pos_; fail("control character in string"); }
      if (c != '\\') { buf_ += c; continue; }
      if (pos_ >= s_.size()) fail("unterminated escape");
      switch (s_[pos_++]) {
        case '"': buf_ += '"'; break;
        case '\\': buf_ += '\\'; break;
        case '/': buf_ += '/'; break;
        case 'b': buf_ += '\b'; break;
        case 'f': buf_ += '\f'; break;
        case 'n': buf_ += '\n'; break;
        case 'r': buf_ += '\r'; break;
        case 't': buf_ += '\t'; break;
        case 'u': append_utf8(buf_, code_point()); break;
        default: fail("bad escape");
      }
    }
  }
  unsigned code_point() {
    unsigned cp = hex4();
    if (cp >= 0xD800 && cp < 0xDC00) {
      if (s_.substr(pos_, 2) != "\\u") fail("lone surrogate");
      pos_ += 2;
      const unsigned lo = hex4();
      if (lo < 0xDC00 || lo >= 0xE000) fail("bad surrogate pair");
      return 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    if (cp >= 0xDC00 && cp < 0xE000) fail("lone surrogate");
    return cp;
  }
  std::string_view s_;
  const std::string& file_;
  const char* what_;
  int max_depth_;
  int depth_ = 0;
  std::size_t pos_ = 0;
  std::string buf_;
};

// Appends s as a JSON string: quotes, backslashes and control characters escaped, every
// other byte as it is.
inline void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  std::size_t run = 0;  // bytes since the last escape, appended together
  for (std::size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(s.data() + run, i - run);
    run = i + 1;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default: {
        static constexpr char hex[] = "0123456789abcdef";
        out += "\\u00";
        out += hex[c >> 4];
        out += hex[c & 15];
      }
    }
  }
  out.append(s.data() + run, s.size() - run);
  out += '"';
}

// Appends an integer's decimal digits.
template <class I>
void append_json_int(std::string& out, I v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

}  // namespace detail
CAIRN_END_NAMESPACE
