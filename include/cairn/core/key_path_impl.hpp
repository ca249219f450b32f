// SPDX-License-Identifier: Apache-2.0
// The key paths' functions that are not templates: in every translation unit when
// header-only, once in the runtime with CAIRN_SEPARATE_COMPILATION (docs/compile-time.md).
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cairn/core/key_path.hpp"

CAIRN_BEGIN_NAMESPACE

namespace detail {
// Appends s escaped: the stretches between '/' and '%' in one append each (most segments have
// neither, and are one append).
inline void append_escaped(std::string& out, std::string_view s) {
  std::size_t start = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '/' && s[i] != '%') continue;
    out.append(s.data() + start, i - start);
    out += s[i] == '/' ? "%2F" : "%25";
    start = i + 1;
  }
  out.append(s.data() + start, s.size() - start);
}
}  // namespace detail

CAIRN_API std::string escape_key_segment(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  detail::append_escaped(out, s);
  return out;
}

CAIRN_API std::string unescape_key_segment(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      std::string_view code = s.substr(i + 1, 2);
      if (code == "2F" || code == "2f") { out += '/'; i += 2; continue; }
      if (code == "25") { out += '%'; i += 2; continue; }
    }
    out += s[i];
  }
  return out;
}

CAIRN_API void KeyPath::push_back(KeyEntry e) {
  if (entries_.size() >= max_tree_depth) {
    // The key names where: its first entries (all of them would be thousands of characters).
    KeyPath first(std::vector<KeyEntry>(entries_.begin(), entries_.begin() + 8));
    throw Error(ErrorKind::invalid_argument, "the tree is deeper here than key paths of " + std::to_string(max_tree_depth) +
                " entries (cairn::max_tree_depth): cairn walks trees recursively, and deeper ones could overflow the "
                "stack", {}, first.str() + "/...");
  }
  entries_.push_back(std::move(e));
}
CAIRN_API void KeyPath::pop_back() { entries_.pop_back(); }

// Printed into one string, sized first: it runs for every leaf of every save and load, and
// through text() and escape_key_segment a key of more than 15 characters cost three
// allocations.
CAIRN_API std::string KeyPath::str() const {
  // Exactly (a string of up to 15 characters then needs no allocation at all), less any escapes.
  auto digits_of = [](std::int64_t v) {
    std::size_t n = v < 0 ? 2 : 1;
    for (std::uint64_t u = v < 0 ? 0 - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v); u >= 10; u /= 10) ++n;
    return n;
  };
  std::size_t size = entries_.empty() ? 0 : entries_.size() - 1;
  for (const auto& e : entries_)
    size += e.kind == KeyEntry::Kind::index || e.kind == KeyEntry::Kind::int_key ? digits_of(e.number) : e.name.size();
  std::string s;
  s.reserve(size);
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    if (i) s += '/';
    const KeyEntry& e = entries_[i];
    if (e.kind == KeyEntry::Kind::index || e.kind == KeyEntry::Kind::int_key) {
      char digits[24];
      const auto end = std::to_chars(digits, digits + sizeof digits, e.number).ptr;
      s.append(digits, static_cast<std::size_t>(end - digits));
    } else {
      detail::append_escaped(s, e.name);
    }
  }
  return s;
}

CAIRN_API std::string KeyPath::kinds() const {
  std::string s;
  for (const auto& e : entries_) s += static_cast<char>(e.kind);
  return s;
}

CAIRN_API std::vector<std::string> split_key_path(std::string_view path) {
  std::vector<std::string> out;
  if (path.empty()) return out;
  std::size_t start = 0;
  while (true) {
    std::size_t slash = path.find('/', start);
    std::string_view seg = path.substr(start, slash == std::string_view::npos ? path.npos : slash - start);
    out.push_back(unescape_key_segment(seg));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return out;
}

namespace detail {
CAIRN_API bool parse_uint64(std::string_view s, std::uint64_t& out) {
  if (s.empty() || s.size() > 20) return false;
  std::uint64_t v = 0;
  for (const char c : s) {
    if (c < '0' || c > '9') return false;
    const std::uint64_t d = static_cast<std::uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  out = v;
  return true;
}

CAIRN_API bool parse_int64(std::string_view s, std::int64_t& out) {
  const bool neg = !s.empty() && s[0] == '-';
  std::uint64_t v = 0;
  if (!parse_uint64(neg ? s.substr(1) : s, v)) return false;
  if (!neg && v > static_cast<std::uint64_t>(INT64_MAX)) return false;
  if (neg && v > static_cast<std::uint64_t>(INT64_MAX) + 1) return false;
  out = neg ? static_cast<std::int64_t>(0 - v) : static_cast<std::int64_t>(v);
  return true;
}
}  // namespace detail

// One pass over the stored text, each entry built in place (a vector of segments in between
// was a tenth of reading the metadata of many small leaves).
CAIRN_API KeyPath KeyPath::from_stored(std::string_view path, std::string_view kinds) {
  // "" is the root, or one empty string key when the kinds say so.
  const std::size_t n = path.empty() ? (kinds.size() == 1 ? 1 : 0)
                                     : 1 + static_cast<std::size_t>(std::count(path.begin(), path.end(), '/'));
  if (n != kinds.size())
    throw Error(ErrorKind::corrupt, "key path '" + std::string(path) + "' has " + std::to_string(n) +
                " entries but its kinds '" + std::string(kinds) + "' name " + std::to_string(kinds.size()));
  if (n > max_tree_depth)
    throw Error(ErrorKind::corrupt, "a key path of " + std::to_string(n) + " entries, more than the " +
                std::to_string(max_tree_depth) + " a tree may have (cairn::max_tree_depth): '" +
                std::string(path.substr(0, 200)) + "...'");
  KeyPath p;
  p.entries_.reserve(n);
  std::size_t start = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t slash = path.find('/', start);
    const std::string_view seg = path.substr(start, slash == std::string_view::npos ? path.npos : slash - start);
    start = slash + 1;
    const char k = kinds[i];
    // Each entry is made in its place: a name built apart and moved in twice (into a KeyEntry,
    // then into the path) was half of this function's time at 10,000 leaves.
    if (k == 'f' || k == 'k') {
      if (k == 'f' && seg.empty())
        throw Error(ErrorKind::corrupt, "empty field name in key path '" + std::string(path) + "'");
      KeyEntry& e = p.entries_.emplace_back();
      e.kind = k == 'f' ? KeyEntry::Kind::field : KeyEntry::Kind::key;
      if (seg.find('%') == std::string_view::npos) e.name.assign(seg);
      else e.name = unescape_key_segment(seg);
    } else if (k == 'i' || k == 'n') {
      std::int64_t v = 0;
      const bool escaped = seg.find('%') != std::string_view::npos;
      if (!detail::parse_int64(escaped ? std::string_view(unescape_key_segment(seg)) : seg, v) || (k == 'i' && v < 0))
        throw Error(ErrorKind::corrupt, "bad index '" + unescape_key_segment(seg) + "' in key path '" + std::string(path) + "'");
      KeyEntry& e = p.entries_.emplace_back();
      e.kind = k == 'i' ? KeyEntry::Kind::index : KeyEntry::Kind::int_key;
      e.number = v;
    } else {
      throw Error(ErrorKind::corrupt, std::string("unknown key kind '") + k + "' in key path '" +
                  std::string(path) + "'");
    }
  }
  return p;
}

namespace detail {
CAIRN_API bool glob_match_here(std::string_view pat, std::string_view text) {
  // Iterative matcher with backtracking for the last star (classic wildcard algorithm),
  // extended so that a single '*' refuses to cross '/'.
  std::size_t p = 0, t = 0;
  std::size_t star_p = std::string_view::npos, star_t = 0;
  bool star_crosses = false;
  while (t < text.size()) {
    if (p < pat.size() && pat[p] == '*') {
      star_crosses = (p + 1 < pat.size() && pat[p + 1] == '*');
      p += star_crosses ? 2 : 1;
      star_p = p;
      star_t = t;
    } else if (p < pat.size() && (pat[p] == '?' ? text[t] != '/' : pat[p] == text[t])) {
      ++p;
      ++t;
    } else if (star_p != std::string_view::npos && (star_crosses || text[star_t] != '/')) {
      p = star_p;
      t = ++star_t;
    } else {
      return false;
    }
  }
  while (p < pat.size() && pat[p] == '*') ++p;
  return p == pat.size();
}
}  // namespace detail

CAIRN_API bool glob_matches(std::string_view pattern, std::string_view path) {
  if (detail::glob_match_here(pattern, path)) return true;
  for (std::size_t i = 0; i < path.size(); ++i)
    if (path[i] == '/' && detail::glob_match_here(pattern, path.substr(0, i))) return true;
  return false;
}

namespace detail {
// The segments of `key` re-escaped and joined, its empty ones kept or dropped.
inline std::string rejoined_key(const std::string& key, bool keep_empty) {
  std::string out;
  bool first = true;
  for (const auto& seg : split_key_path(key)) {
    if (seg.empty() && !keep_empty) continue;
    if (!first) out += '/';
    first = false;
    out += escape_key_segment(seg);
  }
  return out;
}

CAIRN_API std::string canonical_key(const std::string& key) { return rejoined_key(key, true); }
CAIRN_API std::string key_without_empty_segments(const std::string& key) { return rejoined_key(key, false); }
}  // namespace detail

CAIRN_END_NAMESPACE
