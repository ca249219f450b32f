// SPDX-License-Identifier: Apache-2.0
// The XML of S3's responses (ListBucketResult, Error, InitiateMultipartUploadResult, ...), read
// into a small tree. A response comes from the network and is untrusted: the parser takes
// bounded input (the HTTP layer caps a body's size), refuses nesting deeper than 32 elements,
// and says what is wrong instead of guessing. It reads the XML S3 servers write: elements,
// text, the five named entities and numeric character references, CDATA, comments, the
// declaration; no DTDs (a DOCTYPE is refused, so no entity expansion can blow up).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cairn/core/config.hpp"
#include "cairn/core/error.hpp"
#include "cairn/core/utf8.hpp"

CAIRN_BEGIN_NAMESPACE
namespace s3 {

struct XmlElement {
  std::string name;  // without a namespace prefix ("Key" of "s3:Key")
  std::string text;  // the text directly inside, entities decoded
  std::vector<XmlElement> children;

  // The first child named `n`, or null.
  const XmlElement* child(std::string_view n) const {
    for (const auto& c : children)
      if (c.name == n) return &c;
    return nullptr;
  }
  // The text of the first child named `n`, or "" where there is none.
  std::string child_text(std::string_view n) const {
    const XmlElement* c = child(n);
    return c ? c->text : std::string();
  }
  template <class F>
  void each(std::string_view n, F&& f) const {
    for (const auto& c : children)
      if (c.name == n) f(c);
  }
};

namespace detail {

class XmlParser {
 public:
  explicit XmlParser(std::string_view s) : s_(s) {}

  XmlElement parse_document() {
    skip_misc();
    if (!peek("<")) fail("no root element");
    XmlElement root = element(0);
    skip_misc();
    if (at_ < s_.size()) fail("text after the root element");
    return root;
  }

 private:
  static constexpr int max_depth = 32;
  std::string_view s_;
  std::size_t at_ = 0;

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(ErrorKind::corrupt, "malformed XML in the response (" + what + ", at byte " + std::to_string(at_) + ")");
  }
  bool peek(std::string_view p) const { return s_.substr(at_, p.size()) == p; }
  void skip_space() {
    while (at_ < s_.size() && (s_[at_] == ' ' || s_[at_] == '\t' || s_[at_] == '\r' || s_[at_] == '\n')) ++at_;
  }
  void skip_past(std::string_view end, const char* what) {
    const auto p = s_.find(end, at_);
    if (p == std::string_view::npos) fail(std::string("unterminated ") + what);
    at_ = p + end.size();
  }
  // Whitespace, comments, processing instructions (the <?xml ?> declaration) between elements.
  void skip_misc() {
    while (true) {
      skip_space();
      if (peek("<?")) skip_past("?>", "declaration");
      else if (peek("<!--")) skip_past("-->", "comment");
      else if (peek("<!")) fail("DOCTYPE and other declarations are not accepted");
      else return;
    }
  }
  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.' || c == ':' || static_cast<unsigned char>(c) >= 0x80;
  }
  std::string name() {
    const std::size_t start = at_;
    while (at_ < s_.size() && name_char(s_[at_])) ++at_;
    if (at_ == start) fail("an element without a name");
    return std::string(s_.substr(start, at_ - start));
  }
  static std::string local(const std::string& n) {
    const auto colon = n.rfind(':');
    return colon == std::string::npos ? n : n.substr(colon + 1);
  }
  void entity(std::string& out) {
    const auto semi = s_.find(';', at_);
    if (semi == std::string_view::npos || semi - at_ > 12) fail("an unterminated entity");
    const std::string_view e = s_.substr(at_ + 1, semi - at_ - 1);
    if (e == "amp") out += '&';
    else if (e == "lt") out += '<';
    else if (e == "gt") out += '>';
    else if (e == "quot") out += '"';
    else if (e == "apos") out += '\'';
    else if (e.size() > 1 && e[0] == '#') {
      const bool is_hex = e[1] == 'x';
      std::uint32_t cp = 0;
      const std::string_view digits = e.substr(is_hex ? 2 : 1);
      if (digits.empty() || digits.size() > 8) fail("a bad character reference");
      for (char c : digits) {
        int d = -1;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (is_hex && c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (is_hex && c >= 'A' && c <= 'F') d = c - 'A' + 10;
        if (d < 0) fail("a bad character reference");
        cp = cp * (is_hex ? 16 : 10) + static_cast<std::uint32_t>(d);
      }
      if (cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail("a character reference out of range");
      ::cairn::detail::append_utf8(out, cp);
    } else {
      fail("an unknown entity");
    }
    at_ = semi + 1;
  }
  XmlElement element(int depth) {
    if (depth >= max_depth) fail("elements nested deeper than " + std::to_string(max_depth));
    ++at_;  // '<'
    XmlElement el;
    const std::string open = name();
    el.name = local(open);
    // Attributes (xmlns and the like): skipped, quoted values honoured.
    while (true) {
      skip_space();
      if (at_ >= s_.size()) fail("an unterminated tag");
      if (peek("/>")) {
        at_ += 2;
        return el;
      }
      if (s_[at_] == '>') {
        ++at_;
        break;
      }
      name();
      skip_space();
      if (!peek("=")) fail("an attribute without a value");
      ++at_;
      skip_space();
      if (at_ >= s_.size() || (s_[at_] != '"' && s_[at_] != '\'')) fail("an unquoted attribute value");
      const char q = s_[at_++];
      const auto end = s_.find(q, at_);
      if (end == std::string_view::npos) fail("an unterminated attribute value");
      at_ = end + 1;
    }
    while (true) {
      if (at_ >= s_.size()) fail("element <" + open + "> is not closed");
      const char c = s_[at_];
      if (c == '&') {
        entity(el.text);
      } else if (c != '<') {
        el.text += c;
        ++at_;
      } else if (peek("</")) {
        at_ += 2;
        if (name() != open) fail("</...> does not match <" + open + ">");
        skip_space();
        if (!peek(">")) fail("an unterminated closing tag");
        ++at_;
        return el;
      } else if (peek("<![CDATA[")) {
        const auto end = s_.find("]]>", at_ + 9);
        if (end == std::string_view::npos) fail("unterminated CDATA");
        el.text.append(s_.substr(at_ + 9, end - at_ - 9));
        at_ = end + 3;
      } else if (peek("<!--")) {
        skip_past("-->", "comment");
      } else if (peek("<?")) {
        skip_past("?>", "processing instruction");
      } else if (peek("<!")) {
        fail("declarations are not accepted");
      } else {
        el.children.push_back(element(depth + 1));
      }
    }
  }
};

}  // namespace detail

// Parses a response body; throws ErrorKind::corrupt saying what is malformed.
inline XmlElement parse_xml(std::string_view body) { return detail::XmlParser(body).parse_document(); }

}  // namespace s3
CAIRN_END_NAMESPACE
