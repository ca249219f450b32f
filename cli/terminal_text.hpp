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

// The columns `text` takes (printed by TerminalSafeBuf: well-formed UTF-8): one per character
// (a character twice as wide, of CJK scripts, is counted one; keys rarely hold them).
inline std::size_t columns(const std::string& text) {
  std::size_t n = 0;
  for (char c : text) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

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
