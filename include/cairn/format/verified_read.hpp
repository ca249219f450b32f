// SPDX-License-Identifier: Apache-2.0
// Reading a committed checkpoint's metadata through a store, safely: the commit marker first,
// then each file it names, refused above its size cap and checked against the CRC32C the
// marker records, then parsed (metadata_json.hpp) and cross-checked (validation.hpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "cairn/format/layout.hpp"
#include "cairn/format/metadata_json.hpp"
#include "cairn/format/records.hpp"
#include "cairn/format/root_layout.hpp"
#include "cairn/format/validation.hpp"
#include "cairn/io/crc32c.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// A data file's name as layout.hpp's data_file_name gives it.
inline bool is_data_file_name(std::string_view name) { return name.starts_with("data-") && name.ends_with(".bin"); }

// Where a directory without a commit marker holds an Orbax checkpoint: the file that says so
// (what orbax/checkpoint.hpp's looks_like_orbax looks for, but for `_METADATA`, which a cairn
// checkpoint has too: it counts only beside no data file and no _USER_METADATA, which are
// cairn's; a checkpoint of an empty tree has no data file); "" otherwise.
inline std::string orbax_sign(const std::vector<StoreEntry>& entries) {
  bool metadata = false, cairn_data = false;
  for (const auto& e : entries) {
    if (e.is_prefix) continue;
    for (const char* name : {"_CHECKPOINT_METADATA", "orbax.checkpoint", "commit_success.txt", "manifest.ocdbt"})
      if (e.name == name) return e.name;
    metadata |= e.name == metadata_file;
    cairn_data |= is_data_file_name(e.name) || e.name == user_metadata_file;
  }
  return metadata && !cairn_data ? metadata_file : "";
}

// Set where the program includes cairn/orbax.hpp (its registration sets it), so that the hint
// below says to include it only where that is what is missing.
inline std::atomic<bool> orbax_reader_included{false};

inline std::string orbax_hint() {
  return orbax_reader_included ? "read it with cairn::load_orbax or cairn::orbax_metadata"
                               : "read it with cairn::load_orbax or cairn::orbax_metadata (include <cairn/orbax.hpp>; "
                                 "CMake: link cairn::orbax)";
}

// Where `entries` (the listing of `key`) are an Orbax CheckpointManager's step directories:
// the newest step whose directory is an Orbax checkpoint (its name), "" otherwise. One more
// listing, of that step: a root of Orbax's steps is named before it is listed as "something
// else". Steps are Orbax's names, digits after an optional prefix ("100", "checkpoint_100").
inline std::string orbax_manager_step(const Store& store, const std::string& key, const std::vector<StoreEntry>& entries) {
  const StoreEntry* newest = nullptr;
  std::int64_t newest_step = -1;
  for (const auto& e : entries) {
    std::int64_t step = 0;
    const std::size_t digits = e.name.find_last_not_of("0123456789") + 1;  // (npos + 1: all digits)
    if (e.is_prefix && parse_step_digits(std::string_view(e.name).substr(digits), step) && step > newest_step)
      newest = &e, newest_step = step;
  }
  if (!newest) return "";
  return orbax_sign(store.list(join_key(key, newest->name))).empty() ? "" : newest->name;
}

// Throws, saying what is there instead, where `key` holds no commit marker: nothing; a file
// (a safetensors file named as such); a directory of checkpoints; an Orbax checkpoint; cairn's
// files without their marker (a save that did not commit, or a copy that stopped short:
// incomplete); or a directory of something else.
inline void require_marker(const Store& store, const std::string& key) {
  if (store.exists(join_key(key, marker_file))) return;
  const std::string dir = store.describe(key);
  if (!store.exists(key)) throw Error(ErrorKind::not_found, "no checkpoint at this path (nothing is there)", dir);
  if (store.is_blob(key)) {
    if (std::string_view(key).ends_with(".safetensors") || std::string_view(key).ends_with(".index.json"))
      throw Error(ErrorKind::not_found, "a safetensors file, not a cairn checkpoint: read it with cairn::load_safetensors", dir);
    throw Error(ErrorKind::not_found, "this path is a file, not a checkpoint directory", dir);
  }
  const std::vector<StoreEntry> entries = store.list(key);  // one listing for each look below
  if (std::string root = describe_checkpointer_root(store, key, &entries); !root.empty())
    throw Error(ErrorKind::not_found, root, dir);
  if (entries.empty()) throw Error(ErrorKind::not_found, "an empty directory, not a checkpoint", dir);
  if (const std::string sign = orbax_sign(entries); !sign.empty())
    throw Error(ErrorKind::not_found, "an Orbax checkpoint (it has " + sign + "), not a cairn one: " + orbax_hint(), dir);
  // What cairn writes into a checkpoint, or a store's staging (a generation on a bucket).
  const bool cairn_files = std::any_of(entries.begin(), entries.end(), [&](const StoreEntry& e) {
    return store.is_internal_name(e.name) || (!e.is_prefix && (e.name == metadata_file || e.name == user_metadata_file ||
                                                              is_data_file_name(e.name)));
  });
  if (cairn_files)
    throw Error(ErrorKind::incomplete, std::string("no ") + marker_file +
                " file beside the checkpoint's other files: a save that did not commit, or a copy that stopped short", dir);
  if (const std::string step = orbax_manager_step(store, key, entries); !step.empty())
    throw Error(ErrorKind::not_found, "an Orbax CheckpointManager's directory of steps (the newest, " + step +
                ", is an Orbax checkpoint), not a cairn checkpoint: " + orbax_hint() + ", on a step such as " +
                store.describe(join_key(key, step)), dir);
  std::vector<std::string> names;
  for (const auto& e : entries) names.push_back(e.name + (e.is_prefix ? "/" : ""));
  std::sort(names.begin(), names.end());
  throw Error(ErrorKind::not_found, std::string("not a checkpoint: no ") + marker_file +
              " file, and nothing else cairn writes (it holds " + listed_names(names) + ")", dir);
}

// The digests a commit marker's text records (`key`: the checkpoint, named in errors).
inline std::map<std::string, FileDigest> parse_marker(const Store& store, const std::string& key, const std::string& text) {
  const std::string path = store.describe(join_key(key, marker_file));
  Json marker = Json::parse(text, path);
  try {
    if (!marker.is_object() || !marker.contains("format") || marker.at("format").as_string() != "cairn")
      throw Error(ErrorKind::corrupt, "not a cairn commit marker", path);
    const std::int64_t version = marker.at("format_version").as_int();
    if (version < 1 || version > cairn::format_version)
      throw Error(ErrorKind::unsupported_version, "format version " + std::to_string(version) +
                  " (this cairn reads up to " + std::to_string(cairn::format_version) + ")", path);
    std::map<std::string, FileDigest> out;
    for (const auto& [name, d] : marker.at("files").items()) {
      const std::int64_t bytes = d.at("bytes").as_int(), crc = d.at("crc32c").as_int();
      if (bytes < 0 || crc < 0 || crc > 0xffffffffLL) throw Error(ErrorKind::corrupt, "bad digest for " + name, path);
      out[name] = {static_cast<std::uint64_t>(bytes), static_cast<std::uint32_t>(crc)};
    }
    return out;
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::corrupt || e.kind() == ErrorKind::unsupported_version) throw e.with_file(path);
    throw Error(ErrorKind::corrupt, "malformed commit marker: " + e.message(), path);
  }
}

// Checks a checkpoint's commit marker and returns the digests it records.
inline std::map<std::string, FileDigest> read_marker(const Store& store, const std::string& key) {
  require_marker(store, key);
  return parse_marker(store, key, read_blob(store, join_key(key, marker_file), max_marker_bytes));
}

// A file named in the marker, read (`read`: its bytes, or what reading it threw), checked
// against its size and CRC32C.
inline std::string verified(const Store& store, const std::string& key, const std::map<std::string, FileDigest>& digests,
                            const char* name, Store::WholeBlob read) {
  const std::string path = store.describe(join_key(key, name));
  auto it = digests.find(name);
  if (it == digests.end()) throw Error(ErrorKind::corrupt, std::string("commit marker does not list ") + name, store.describe(key));
  std::string content = read.take();
  if (content.size() != it->second.bytes)
    throw Error(ErrorKind::corrupt, "file is " + std::to_string(content.size()) + " bytes, the commit marker says " +
                std::to_string(it->second.bytes), path);
  const std::uint32_t crc = crc32c(content.data(), content.size());
  if (crc != it->second.crc32c)
    throw Error(ErrorKind::corrupt, "checksum mismatch (CRC32C " + std::to_string(crc) + ", the commit marker says " +
                std::to_string(it->second.crc32c) + ")", path);
  return content;
}

// Reads a file named in the marker and checks its size and CRC32C.
inline std::string read_verified(const Store& store, const std::string& key,
                                 const std::map<std::string, FileDigest>& digests, const char* name, std::uint64_t limit) {
  if (!digests.count(name)) throw Error(ErrorKind::corrupt, std::string("commit marker does not list ") + name, store.describe(key));
  Store::WholeBlob read;
  try {
    read.bytes = read_blob(store, join_key(key, name), limit);
  } catch (...) {
    read.error = std::current_exception();
  }
  return verified(store, key, digests, name, std::move(read));
}

// A committed checkpoint's _METADATA and _USER_METADATA, verified against the commit marker
// but not parsed: what a primary reads and broadcasts to the other ranks.
struct MetadataText {
  std::string metadata, user;
  // Which commit this is: the marker's sizes and CRCs of the two files (free: the marker
  // names them). A checkpoint replaced by an overwrite has another, unless identical.
  std::uint64_t commit = 0;
};
// `commit_seen`, when given, is set as soon as the marker is read (before the files it names),
// so that a caller whose read of those files fails knows which commit it had opened.
inline MetadataText read_metadata_text(const Store& store, const std::string& key, std::uint64_t* commit_seen = nullptr) {
  require_marker(store, key);
  // The marker and the two files it names, read at once where the store can (Store::
  // read_whole_each: one round trip on an object store, whose generations never change under
  // a reader), else one after another as before; checked in that order.
  auto read = store.read_whole_each({{join_key(key, marker_file), max_marker_bytes},
                                     {join_key(key, metadata_file), max_metadata_bytes},
                                     {join_key(key, user_metadata_file), max_metadata_bytes}});
  auto digests = parse_marker(store, key, read[0].take());
  MetadataText t;
  for (const auto& [name, d] : digests)
    t.commit = (t.commit * 0x100000001b3ull) ^ (d.bytes * 0x9e3779b97f4a7c15ull) ^ d.crc32c;
  if (commit_seen) *commit_seen = t.commit;
  t.metadata = verified(store, key, digests, metadata_file, std::move(read[1]));
  t.user = verified(store, key, digests, user_metadata_file, std::move(read[2]));
  return t;
}

// Parses and validates the metadata of the checkpoint at `key` (named in errors).
inline CheckpointMetadata parse_metadata(const Store& store, const std::string& key, const MetadataText& t,
                                         PrintedKeys* leaf_keys = nullptr) {
  const std::string path = store.describe(join_key(key, metadata_file));
  CheckpointMetadata m = metadata_from_json(t.metadata, path, leaf_keys);
  validate_metadata(m, path, leaf_keys);
  m.user_metadata = Json::parse(t.user, store.describe(join_key(key, user_metadata_file)));
  return m;
}

// Reads, verifies and validates a committed checkpoint's metadata.
inline CheckpointMetadata read_metadata(const Store& store, const std::string& key_in, PrintedKeys* leaf_keys = nullptr) {
  const std::string key = normalize_key(key_in);
  return parse_metadata(store, key, read_metadata_text(store, key), leaf_keys);
}

}  // namespace detail
CAIRN_END_NAMESPACE
