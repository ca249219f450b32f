// SPDX-License-Identifier: Apache-2.0
// Key paths name a node of a tree: a list of typed entries (struct field, sequence index,
// map key) printed as one string such as "params/dense/kernel" or "layers/0/w".
// Separators inside keys are escaped ('/' -> "%2F", '%' -> "%25") so every string round-trips.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cairn/core/error.hpp"
#include "cairn/core/inline_vector.hpp"

CAIRN_BEGIN_NAMESPACE

struct KeyEntry {
  enum class Kind : char { field = 'f', index = 'i', key = 'k', int_key = 'n' };
  Kind kind = Kind::field;
  std::string name;   // field name or string key
  std::int64_t number = 0;  // index or integer key

  static KeyEntry field(std::string n) { return {Kind::field, std::move(n), 0}; }
  static KeyEntry index(std::int64_t i) { return {Kind::index, {}, i}; }
  static KeyEntry key(std::string k) { return {Kind::key, std::move(k), 0}; }
  static KeyEntry int_key(std::int64_t k) { return {Kind::int_key, {}, k}; }

  // The entry as it prints, unescaped: "kernel", "0", "dense".
  std::string text() const {
    return (kind == Kind::index || kind == Kind::int_key) ? std::to_string(number) : name;
  }
  friend bool operator==(const KeyEntry& a, const KeyEntry& b) {
    return a.kind == b.kind && a.name == b.name && a.number == b.number;
  }
};

// "/" -> "%2F" and "%" -> "%25" in one segment, and back.
CAIRN_API std::string escape_key_segment(std::string_view s);
CAIRN_API std::string unescape_key_segment(std::string_view s);

// The deepest a tree may be: key paths of at most this many entries (a struct field, an index
// and a map key are an entry each). cairn walks a tree recursively, and a recursive type
// (struct Node { std::vector<Node> children; }) can be built, or asked by an untrusted
// checkpoint to be built, deep enough to overflow the stack: past this depth a save or load
// refuses with an error instead (Python's pickle and JAX's tree functions stop near 1,000
// levels of recursion too).
inline constexpr std::size_t max_tree_depth = 1000;

// The entries of a key path: the first `inline_key_entries` kept in the path itself, so that
// a path such as "layers/0/w" is no allocation of its own (a save and a load of 10,000 leaves
// made 10,000 each, a quarter of a first load's page faults, docs/benchmarks.md).
inline constexpr std::size_t inline_key_entries = 3;
using KeyEntries = InlineVector<KeyEntry, inline_key_entries>;

class KeyPath {
 public:
  KeyPath() = default;
  KeyPath(const std::vector<KeyEntry>& entries) : entries_(entries) {}
  KeyPath(std::initializer_list<KeyEntry> entries) : entries_(entries) {}
  KeyPath(KeyEntries entries) : entries_(std::move(entries)) {}

  const KeyEntries& entries() const { return entries_; }
  std::size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  const KeyEntry& operator[](std::size_t i) const { return entries_[i]; }
  const KeyEntry& back() const { return entries_.back(); }

  // Out of line with separate compilation: every tree walk a user's file instantiates pushes
  // and pops an entry per child. Past max_tree_depth entries, push_back throws
  // invalid_argument, which ends any walk before its recursion can overflow the stack.
  CAIRN_API void push_back(KeyEntry e);
  CAIRN_API void pop_back();
  KeyPath child(KeyEntry e) const { KeyPath p = *this; p.push_back(std::move(e)); return p; }

  // "params/dense/kernel"; the root prints as "".
  CAIRN_API std::string str() const;
  // One letter per entry (f field, i index, k string key, n integer key): the types that
  // the string form loses. Stored beside the string in the checkpoint metadata.
  CAIRN_API std::string kinds() const;

  // Rebuild a typed path from its string and kind letters (as stored in metadata).
  CAIRN_API static KeyPath from_stored(std::string_view path, std::string_view kinds);

  friend bool operator==(const KeyPath& a, const KeyPath& b) { return a.entries_ == b.entries_; }

 private:
  KeyEntries entries_;
};

// Split a printed path into unescaped segments: "a%2Fb/c" -> {"a/b", "c"}; "" -> {}.
CAIRN_API std::vector<std::string> split_key_path(std::string_view path);

namespace detail {
// A decimal int64 with an optional '-', nothing else; false when it does not fit.
CAIRN_API bool parse_int64(std::string_view s, std::int64_t& out);
// Decimal digits that fit a uint64, nothing else (no sign).
CAIRN_API bool parse_uint64(std::string_view s, std::uint64_t& out);
// A printed key path in canonical form: each segment re-escaped ("a%2fb" is "a%2Fb"). Empty
// segments are kept, since one is a map's empty-string key: "a/" is the entry "" under "a".
CAIRN_API std::string canonical_key(const std::string& key);
// The same with every empty segment dropped: "a/b/", "/a/b" and "a//b" are "a/b".
CAIRN_API std::string key_without_empty_segments(const std::string& key);
// The key a user means by the key path `given` (a subtree, a leaf to read or show): the one it
// spells where `names(key)` says that is a leaf or node; else, where it has empty segments, the
// same without them where that names one ("params/" is "params", unless "params" holds the
// empty string as a key); else the one it spells, for the error to name. `names` is asked only
// where `given` has an empty segment.
template <class Names>
std::string resolve_key(const std::string& given, Names&& names) {
  std::string spelled = canonical_key(given);
  std::string loose = key_without_empty_segments(given);
  if (spelled == loose || names(static_cast<const std::string&>(spelled))) return spelled;
  if (loose.empty() || names(static_cast<const std::string&>(loose))) return loose;
  return spelled;
}
// True when a stored key path that KeyPath::from_stored accepted is the text its KeyPath
// prints, so a reader copies it instead of printing it again (about 3% of `metadata()` of many
// small leaves). Names print as stored unless the text escapes something ('%'), numbers unless
// written with a leading zero or as "-0".
inline bool prints_as_stored(std::string_view path, std::string_view kinds) {
  if (path.find('%') != std::string_view::npos) return false;
  std::size_t start = 0;
  for (const char k : kinds) {
    const std::size_t slash = path.find('/', start);
    const std::string_view seg = path.substr(start, slash == std::string_view::npos ? path.npos : slash - start);
    start = slash + 1;
    if (k == 'i' || k == 'n') {
      const std::string_view digits = !seg.empty() && seg[0] == '-' ? seg.substr(1) : seg;
      if (digits.empty() || (digits[0] == '0' && (digits.size() > 1 || digits.size() < seg.size()))) return false;
    }
  }
  return true;
}
}  // namespace detail

// Glob patterns over printed key paths. '*' matches any run of characters within one
// segment, '**' any run across segments, '?' one character. A pattern matches a path when
// it matches the whole path or one of its ancestors, so "opt" and "opt/*" both select
// every leaf under "opt".
CAIRN_API bool glob_matches(std::string_view pattern, std::string_view path);

// True when `prefix` names `path` itself or one of its ancestors, segment-wise.
inline bool key_path_has_prefix(std::string_view path, std::string_view prefix) {
  if (prefix.empty()) return true;
  if (path.size() < prefix.size() || path.compare(0, prefix.size(), prefix) != 0) return false;
  return path.size() == prefix.size() || path[prefix.size()] == '/';
}

CAIRN_END_NAMESPACE

#if CAIRN_DEFINES_RUNTIME
#include "cairn/core/key_path_impl.hpp"
#endif
