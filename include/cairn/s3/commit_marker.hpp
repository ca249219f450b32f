// SPDX-License-Identifier: Apache-2.0
// The object store's commit marker, read from the bytes a GET brought (docs/format.md, "In an
// object store"): the generation it names, the sizes of that generation's files, and where a
// checkpoint written inline keeps each file in the marker. Untrusted input: anything that is
// not such a marker is corrupt, never guessed at. No libcurl here (fuzzed on its own:
// tests/fuzz/fuzz_s3_marker.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "cairn/core/error.hpp"
#include "cairn/core/json.hpp"

CAIRN_BEGIN_NAMESPACE
namespace s3 {

// How every generation's name begins: ".cairn-gen-<ms>-<hex>".
inline constexpr const char* generation_prefix = ".cairn-gen-";

struct InlineFile {
  std::uint64_t offset = 0, size = 0;  // in the marker object
};

struct CommitMarker {
  std::string generation;
  // The sizes its "files" gives, where every entry is usable (a plain name, a size of 0 or
  // more); empty otherwise, and the objects are then asked for theirs.
  std::map<std::string, std::uint64_t> sizes;
  bool inlined = false;                       // its checkpoint's files follow its first line
  std::map<std::string, InlineFile> files;    // inlined: each file's bytes in the marker
  std::uint64_t line_end = 0;                 // the offset of the byte after its first line
};

// `first`: the marker's first bytes as read; `total`: the whole marker's size. Throws corrupt
// with a message that names no object (the caller adds which).
inline CommitMarker parse_commit_marker(std::string_view first, std::uint64_t total) {
  CommitMarker m;
  const auto newline = first.find('\n');
  if (newline == std::string_view::npos && total > first.size())
    throw Error(ErrorKind::corrupt, "not a cairn object-store commit marker: no end of its first line in its first " +
                std::to_string(first.size()) + " bytes");
  const std::string_view line = newline == std::string_view::npos ? first : first.substr(0, newline);
  Json j;
  try {
    j = Json::parse(line);
    m.generation = j.at("generation").as_string();
  } catch (const Error& e) {
    throw Error(ErrorKind::corrupt, "not a cairn object-store commit marker: " + e.message());
  }
  if (m.generation.rfind(generation_prefix, 0) != 0 || m.generation.find('/') != std::string::npos)
    throw Error(ErrorKind::corrupt, "the commit marker names no generation of this checkpoint");
  if (const Json* files = j.find("files"); files && files->is_object()) {
    for (const auto& [name, size] : files->items()) {
      if (name.empty() || name.find('/') != std::string::npos || !size.is_int() || size.as_int() < 0) {
        m.sizes.clear();
        break;
      }
      m.sizes[name] = static_cast<std::uint64_t>(size.as_int());
    }
  }
  const Json* in = j.find("inline");
  m.inlined = in != nullptr;
  if (!in) return m;
  const std::string damaged = "a commit marker with its checkpoint inline, damaged: ";
  if (newline == std::string_view::npos) throw Error(ErrorKind::corrupt, damaged + "no end to its first line");
  if (!in->is_object()) throw Error(ErrorKind::corrupt, damaged + "its \"inline\" is not an object");
  m.line_end = newline + 1;
  const std::uint64_t room = total - m.line_end;  // total >= first.size() > newline
  // Each file inline has its size in `files` (m.sizes: every entry usable), and lies in the
  // object; `files` names no other.
  for (const auto& [name, off] : in->items()) {
    const auto size = m.sizes.find(name);
    if (size == m.sizes.end()) throw Error(ErrorKind::corrupt, damaged + "'" + name + "' has no size in its files");
    const std::int64_t o = off.is_int() ? off.as_int() : -1;
    if (o < 0 || static_cast<std::uint64_t>(o) > room || size->second > room - static_cast<std::uint64_t>(o))
      throw Error(ErrorKind::corrupt, damaged + "'" + name + "' lies outside the marker's " + std::to_string(total) + " bytes");
    m.files[name] = InlineFile{m.line_end + static_cast<std::uint64_t>(o), size->second};
  }
  if (m.files.size() != m.sizes.size()) throw Error(ErrorKind::corrupt, damaged + "it names files that are not in it");
  return m;
}

}  // namespace s3
CAIRN_END_NAMESPACE
