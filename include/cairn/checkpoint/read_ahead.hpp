// SPDX-License-Identifier: Apache-2.0
// Reading a checkpoint's data files ahead while its metadata is parsed. A cold load of many
// small leaves used to wait for the disk only after parsing _METADATA and planning (a fifth of
// a cold load of 10,000 leaves); it now asks the store to fetch the data files from their
// start meanwhile (Store::read_ahead: for files, a thread reading them into the page cache).
// A load of every stored leaf lets it go on ahead of its own reads until those are done (the
// disk is then also busy while the load checksums what it read); a load of some leaves stops
// it before its reads begin, since they may lie anywhere in the files. What the load reads is
// read and checked as before: the read-ahead only changes how long those reads wait.
// Measured in docs/benchmarks.md (2026-11-24).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cairn/core/tuning.hpp"
#include "cairn/store/store.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// The data files that a metadata text names at its head ("data_files":["data-0-0.bin", ...],
// which cairn writes before the items; docs/format.md), found without parsing the rest.
// Only names of the form data-<process>-<n>.bin are taken, and any surprise (another
// layout, an escape, a name of another form, more than 64 names, a list that does not start
// in the first 4 KiB) gives none: the read-ahead is a hint, and the text is not validated yet.
inline std::vector<std::string> data_files_in_head(std::string_view text) {
  constexpr std::string_view member = "\"data_files\":[";
  const std::size_t at = text.substr(0, 4096).find(member);
  if (at == std::string_view::npos) return {};
  std::vector<std::string> names;
  std::size_t i = at + member.size();
  auto digits_then = [&](char next) {
    const std::size_t from = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
    if (i == from || i - from > 9 || i >= text.size() || text[i] != next) return false;
    ++i;
    return true;
  };
  while (i < text.size() && text[i] != ']') {
    if (!names.empty()) {
      if (text[i] != ',') return {};
      ++i;
    }
    const std::size_t start = i;
    if (text.substr(i, 6) != "\"data-") return {};
    i += 6;
    if (!digits_then('-') || !digits_then('.') || text.substr(i, 4) != "bin\"" || names.size() == 64) return {};
    i += 4;
    names.emplace_back(text.substr(start + 1, i - start - 2));
  }
  if (i >= text.size()) return {};
  return names;
}

// A read-ahead of the blobs at `keys` (its handle stops it), or none: on one core (it would
// take the parse's time), or where the store has nothing to do.
inline std::unique_ptr<StoreReadAhead> start_read_ahead(const Store& store, std::vector<std::string> keys) {
  static const bool cores = std::thread::hardware_concurrency() > 1;
  if (!cores || keys.empty()) return nullptr;
  try {
    return store.read_ahead(keys, read_ahead_max_bytes);
  } catch (...) {  // a hint: a store that fails at it leaves the load as it was
    return nullptr;
  }
}

// The read-ahead of the checkpoint at `key` whose _METADATA is `metadata_text`, or none: also
// for a short text, or where the head names no data files.
inline std::unique_ptr<StoreReadAhead> start_read_ahead(const Store& store, const std::string& key, std::string_view metadata_text) {
  if (metadata_text.size() < read_ahead_min_metadata_bytes) return nullptr;
  std::vector<std::string> files = data_files_in_head(metadata_text);
  for (auto& f : files) f = join_key(key, f);
  return start_read_ahead(store, std::move(files));
}

}  // namespace detail
CAIRN_END_NAMESPACE
