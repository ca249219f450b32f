// SPDX-License-Identifier: Apache-2.0
// What the tool prints comes in part from the checkpoint it reads (keys, item names, string
// values, the names of files in a directory, user metadata), and a checkpoint is untrusted: a
// key holding "\x1b]0;...\x07" or "\x1b[2J" would retitle or clear the user's terminal, and
// "\r" or "\b" would overwrite what was printed before it. So every byte the tool writes goes
// through TerminalSafeBuf, which writes the control characters (C0 but the newline, DEL, and
// C1 as UTF-8 spells them) as \u00XX, the escape JSON uses (so --json output stays valid
// JSON: its strings already escape C0, and DEL and C1 may appear escaped there too), and bytes
// that are no well-formed UTF-8 as \xNN (\udcNN in JSON). The progress line, the one place the
// tool writes "\r" itself, goes to the unfiltered stream.
#pragma once

#include <cstdint>
#include <cstdio>
#include <sstream>
#include <streambuf>
#include <string>

namespace cairn::cli {

class TerminalSafeBuf : public std::streambuf {
 public:
  explicit TerminalSafeBuf(std::streambuf* to) : to_(to) {}
  TerminalSafeBuf(const TerminalSafeBuf&) = delete;
  TerminalSafeBuf& operator=(const TerminalSafeBuf&) = delete;
  ~TerminalSafeBuf() override { flush_pending(); }

  // How a byte that is no part of well-formed UTF-8 is written: \xNN in text, and in JSON
  // output (--json) \udcNN, the lone surrogate Python's "surrogateescape" decodes back to the
  // byte, so that the output stays JSON and a key that is no UTF-8 can still be told apart.
  void set_json(bool json) { json_ = json; }

 protected:
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    const char ch = traits_type::to_char_type(c);
    put(&ch, 1);
    return c;
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    put(s, static_cast<std::size_t>(n));
    return n;
  }
  // (An incomplete UTF-8 sequence stays held: a flush between the bytes of one character must
  // not split it.)
  int sync() override { return to_->pubsync(); }

 private:
  void put(const char* s, std::size_t n) {
    std::string out;
    out.reserve(n + 16);
    for (std::size_t i = 0; i < n; ++i) take(static_cast<unsigned char>(s[i]), out);
    to_->sputn(out.data(), static_cast<std::streamsize>(out.size()));
  }
  void take(unsigned char b, std::string& out) {
    if (need_ > 0) {
      if ((b & 0xC0) == 0x80) {
        pending_ += static_cast<char>(b);
        cp_ = (cp_ << 6) | (b & 0x3Fu);
        if (--need_ > 0) return;
        if (cp_ < min_ || cp_ > 0x10FFFF || (cp_ >= 0xD800 && cp_ <= 0xDFFF)) {
          invalid_pending(out);
        } else if (cp_ <= 0x9F) {
          escape(cp_, out);  // a C1 control (U+0080..U+009F)
        } else {
          out += pending_;
        }
        pending_.clear();
        return;
      }
      invalid_pending(out);  // cut short: its bytes are no character, and b starts afresh
    }
    if (b < 0x80) {
      if ((b < 0x20 && b != '\n') || b == 0x7F) escape(b, out);
      else out += static_cast<char>(b);
    } else if ((b & 0xE0) == 0xC0) {
      start(b, 1, 0x80, b & 0x1Fu);
    } else if ((b & 0xF0) == 0xE0) {
      start(b, 2, 0x800, b & 0x0Fu);
    } else if ((b & 0xF8) == 0xF0) {
      start(b, 3, 0x10000, b & 0x07u);
    } else {
      invalid(b, out);
    }
  }
  void start(unsigned char b, int need, std::uint32_t min, std::uint32_t cp) {
    pending_.assign(1, static_cast<char>(b));
    need_ = need;
    min_ = min;
    cp_ = cp;
  }
  void invalid_pending(std::string& out) {
    for (char c : pending_) invalid(static_cast<unsigned char>(c), out);
    pending_.clear();
    need_ = 0;
  }
  void invalid(unsigned char b, std::string& out) {
    char buf[8];
    std::snprintf(buf, sizeof buf, json_ ? "\\udc%02x" : "\\x%02x", b);
    out += buf;
  }
  static void escape(std::uint32_t c, std::string& out) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
    out += buf;
  }
  void flush_pending() {
    if (pending_.empty()) return;
    std::string out;
    invalid_pending(out);
    to_->sputn(out.data(), static_cast<std::streamsize>(out.size()));
  }

  std::streambuf* to_;
  bool json_ = false;
  std::string pending_;  // the bytes of a UTF-8 sequence read so far
  int need_ = 0;         // its continuation bytes still to come
  std::uint32_t min_ = 0, cp_ = 0;
};

// `text` as TerminalSafeBuf writes it, for what goes to the unfiltered stream.
inline std::string terminal_safe(const std::string& text) {
  std::stringbuf to;
  {
    TerminalSafeBuf buf(&to);
    buf.sputn(text.data(), static_cast<std::streamsize>(text.size()));
  }
  return to.str();
}

// The columns a terminal gives one character: 0 for a combining mark or another character of
// no width, 2 for the wide and fullwidth characters of East Asian scripts and for emoji, else 1.
// The main blocks of each, after Markus Kuhn's wcwidth and Unicode's East Asian Width (W, F);
// not every combining mark of every script. Written here rather than asked of the C library,
// whose answer depends on the locale the program runs in.
inline int code_point_columns(std::uint32_t c) {
  struct Range { std::uint32_t first, last; };
  static constexpr Range zero[] = {
      {0x0300, 0x036F}, {0x0483, 0x0489}, {0x0591, 0x05BD}, {0x05BF, 0x05BF}, {0x05C1, 0x05C2}, {0x05C4, 0x05C5},
      {0x05C7, 0x05C7}, {0x0610, 0x061A}, {0x064B, 0x065F}, {0x0670, 0x0670}, {0x06D6, 0x06DC}, {0x06DF, 0x06E4},
      {0x06E7, 0x06E8}, {0x06EA, 0x06ED}, {0x0900, 0x0902}, {0x093A, 0x093A}, {0x093C, 0x093C}, {0x0941, 0x0948},
      {0x094D, 0x094D}, {0x0951, 0x0957}, {0x0962, 0x0963}, {0x0E31, 0x0E31}, {0x0E34, 0x0E3A}, {0x0E47, 0x0E4E},
      {0x1160, 0x11FF}, {0x1AB0, 0x1AFF}, {0x1DC0, 0x1DFF}, {0x200B, 0x200F}, {0x202A, 0x202E}, {0x2060, 0x2064},
      {0x20D0, 0x20FF}, {0x302A, 0x302D}, {0x3099, 0x309A}, {0xFE00, 0xFE0F}, {0xFE20, 0xFE2F}, {0xFEFF, 0xFEFF},
      {0x1D167, 0x1D169}, {0xE0000, 0xE0FFF}};
  static constexpr Range wide[] = {
      {0x1100, 0x115F}, {0x231A, 0x231B}, {0x2329, 0x232A}, {0x23E9, 0x23EC}, {0x23F0, 0x23F0}, {0x23F3, 0x23F3},
      {0x25FD, 0x25FE}, {0x2614, 0x2615}, {0x2648, 0x2653}, {0x267F, 0x267F}, {0x2693, 0x2693}, {0x26A1, 0x26A1},
      {0x26AA, 0x26AB}, {0x26BD, 0x26BE}, {0x26C4, 0x26C5}, {0x26CE, 0x26CE}, {0x26D4, 0x26D4}, {0x26EA, 0x26EA},
      {0x26F2, 0x26F3}, {0x26F5, 0x26F5}, {0x26FA, 0x26FA}, {0x26FD, 0x26FD}, {0x2705, 0x2705}, {0x270A, 0x270B},
      {0x2728, 0x2728}, {0x274C, 0x274C}, {0x274E, 0x274E}, {0x2753, 0x2755}, {0x2757, 0x2757}, {0x2795, 0x2797},
      {0x27B0, 0x27B0}, {0x27BF, 0x27BF}, {0x2B1B, 0x2B1C}, {0x2B50, 0x2B50}, {0x2B55, 0x2B55}, {0x2E80, 0x3029},
      {0x302E, 0x303E}, {0x3041, 0x3098}, {0x309B, 0x33FF}, {0x3400, 0x4DBF}, {0x4E00, 0x9FFF}, {0xA000, 0xA4CF},
      {0xA960, 0xA97F}, {0xAC00, 0xD7A3}, {0xF900, 0xFAFF}, {0xFE10, 0xFE19}, {0xFE30, 0xFE6F}, {0xFF00, 0xFF60},
      {0xFFE0, 0xFFE6}, {0x16FE0, 0x16FE4}, {0x17000, 0x18CFF}, {0x1B000, 0x1B2FF}, {0x1F004, 0x1F004},
      {0x1F0CF, 0x1F0CF}, {0x1F18E, 0x1F18E}, {0x1F191, 0x1F19A}, {0x1F200, 0x1F202}, {0x1F210, 0x1F23B},
      {0x1F240, 0x1F248}, {0x1F250, 0x1F251}, {0x1F260, 0x1F265}, {0x1F300, 0x1F64F}, {0x1F680, 0x1F6FF},
      {0x1F7E0, 0x1F7EB}, {0x1F90C, 0x1F9FF}, {0x1FA70, 0x1FAFF}, {0x20000, 0x2FFFD}, {0x30000, 0x3FFFD}};
  const auto in = [c](const auto& ranges) {
    for (const Range& r : ranges)
      if (c >= r.first && c <= r.last) return true;
    return false;
  };
  if (c < 0x300) return 1;
  if (in(zero)) return 0;
  return in(wide) ? 2 : 1;
}

// The columns text already as TerminalSafeBuf prints it (terminal_safe's, well-formed UTF-8)
// takes, by code_point_columns.
inline std::size_t printed_columns(const std::string& shown) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < shown.size();) {
    const auto b = static_cast<unsigned char>(shown[i]);
    const std::size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    std::uint32_t c = len == 1 ? b : len == 2 ? b & 0x1Fu : len == 3 ? b & 0x0Fu : b & 0x07u;
    for (std::size_t k = 1; k < len && i + k < shown.size(); ++k) c = (c << 6) | (static_cast<unsigned char>(shown[i + k]) & 0x3Fu);
    n += static_cast<std::size_t>(code_point_columns(c));
    i += len;
  }
  return n;
}

// The columns `text` takes as TerminalSafeBuf prints it: its escapes (\u001b, \xff) as the
// characters they are spelled with.
inline std::size_t columns(const std::string& text) { return printed_columns(terminal_safe(text)); }

// A key on one line of a listing: its newlines escaped too (TerminalSafeBuf keeps newlines,
// which the tool's own lines end with), so that a key cannot print lines that look like
// other leaves.
inline std::string one_line(const std::string& text) {
  if (text.find('\n') == std::string::npos) return text;
  std::string out;
  for (char c : text) out += c == '\n' ? std::string("\\u000a") : std::string(1, c);
  return out;
}

// A leaf's key as ls, show and diff print it: on one line, and the root leaf's "" as (root).
inline std::string key_label(const std::string& key) { return key.empty() ? std::string("(root)") : one_line(key); }

}  // namespace cairn::cli
