// SPDX-License-Identifier: Apache-2.0
// The files of a checkpoint directory: their names, the limits on their sizes, and the commit
// marker's content. (format.md describes them for users.)
//
//   <checkpoint>/_CHECKPOINT      commit marker, written last (format, version, CRCs of the two below)
//   <checkpoint>/_METADATA        tree structure, dtypes, shapes, chunk locations (JSON)
//   <checkpoint>/_USER_METADATA   the caller's JSON object
//   <checkpoint>/data-<process>-<n>.bin   array bytes
#pragma once

#include <cstdint>
#include <string>

#include "cairn/core/json.hpp"
#include "cairn/format/records.hpp"
#include "cairn/store/store.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

inline constexpr const char* marker_file = commit_marker_name;
inline constexpr const char* metadata_file = "_METADATA";
inline constexpr const char* user_metadata_file = "_USER_METADATA";
inline constexpr std::uint64_t max_metadata_bytes = std::uint64_t{1} << 30;
inline constexpr std::uint64_t max_marker_bytes = std::uint64_t{1} << 20;
// Pairs of chunks compared for overlap in a leaf whose chunks are not a grid (cairn writes
// only grids): about a second of work at most.
inline constexpr std::uint64_t max_overlap_checks = std::uint64_t{1} << 26;

inline std::string data_file_name(int process, int index) {
  return "data-" + std::to_string(process) + "-" + std::to_string(index) + ".bin";
}

// Data file names come from untrusted metadata: only plain names, never a path out of the
// checkpoint directory.
inline bool is_plain_file_name(const std::string& name) {
  if (name.empty() || name.size() > 255 || name[0] == '.') return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
      return false;
  return true;
}

struct FileDigest {
  std::uint64_t bytes = 0;
  std::uint32_t crc32c = 0;
};

// `version`: the format version of the metadata's text (metadata_to_json's).
inline Json marker_json(const FileDigest& metadata, const FileDigest& user, int version = cairn::format_version) {
  auto digest = [](const FileDigest& d) {
    return Json::object({{"bytes", static_cast<std::int64_t>(d.bytes)}, {"crc32c", static_cast<std::int64_t>(d.crc32c)}});
  };
  return Json::object({{"format", "cairn"},
                       {"format_version", version},
                       {"files", Json::object({{metadata_file, digest(metadata)}, {user_metadata_file, digest(user)}})}});
}

}  // namespace detail
CAIRN_END_NAMESPACE
