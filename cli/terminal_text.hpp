// SPDX-License-Identifier: Apache-2.0
// What the tool prints comes in part from the checkpoint it reads (keys, item names, string
// values, the names of files in a directory, user metadata), and a checkpoint is untrusted: a
// key holding "\x1b]0;...\x07" or "\x1b[2J" would retitle or clear the user's terminal, and
// "\r" or "\b" would overwrite what was printed before it. So every byte the tool writes goes
// through TerminalSafeBuf, which writes the control characters (C0 but the newline, DEL, and
// C1 as UTF-8 spells them) as \u00XX, the escape JSON uses (so --json output stays valid
// JSON: its strings already escape C0, and DEL and C1 may appear escaped there too). The
// progress line, the one place the tool writes "\r" itself, goes to the unfiltered stream.
#pragma once

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
  ~TerminalSafeBuf() override { flush_lead(); }

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
  // (A held 0xC2 stays held: a flush between the two bytes of one character must not split it.)
  int sync() override { return to_->pubsync(); }

 private:
  // Writes s, its safe stretches in one call each.
  void put(const char* s, std::size_t n) {
    std::size_t start = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const auto b = static_cast<unsigned char>(s[i]);
      if (lead_) {  // the byte after a 0xC2: a C1 control is 0xC2 0x80-0x9F
        lead_ = false;
        if (b >= 0x80 && b <= 0x9F) {
          escape(b);
          start = i + 1;
          continue;
        }
        to_->sputc(static_cast<char>(0xC2));
      }
      if ((b < 0x20 && b != '\n') || b == 0x7F || b == 0xC2) {
        to_->sputn(s + start, static_cast<std::streamsize>(i - start));
        start = i + 1;
        if (b == 0xC2) lead_ = true;  // held until the next byte says what it starts
        else escape(b);
      }
    }
    to_->sputn(s + start, static_cast<std::streamsize>(n - start));
  }
  void escape(unsigned char b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\u%04x", b);
    to_->sputn(buf, 6);
  }
  void flush_lead() {
    if (lead_) to_->sputc(static_cast<char>(0xC2));
    lead_ = false;
  }

  std::streambuf* to_;
  bool lead_ = false;
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

// A key on one line of a listing: its newlines escaped too (TerminalSafeBuf keeps newlines,
// which the tool's own lines end with), so that a key cannot print lines that look like
// other leaves.
inline std::string one_line(const std::string& text) {
  if (text.find('\n') == std::string::npos) return text;
  std::string out;
  for (char c : text) out += c == '\n' ? std::string("\\u000a") : std::string(1, c);
  return out;
}

}  // namespace cairn::cli
