// SPDX-License-Identifier: Apache-2.0
// Reading a checkpoint's data files: open them by name through the store (each once), the
// read sizes, the checksum check and the normalization of stored bools.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include "cairn/core/tuning.hpp"
#include "cairn/format/files.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

class DataFiles {
 public:
  // An open file: its name and its reader. Each file has one entry, at a stable address, so
  // two chunks are in the same file exactly when their entries are the same object.
  using Entry = std::pair<const std::string, std::unique_ptr<StoreReader>>;

  // `file_keys`: names read from another key than key/name (OpenedCheckpoint::file_keys).
  DataFiles(const Store& store, std::string key, const std::map<std::string, std::string>* file_keys = nullptr)
      : store_(store), key_(std::move(key)), file_keys_(file_keys) {}
  const Entry& entry(const std::string& name) {
    auto it = files_.find(name);
    if (it != files_.end()) return *it;
    return *files_.emplace(name, store_.open(key_of(name))).first;
  }
  const StoreReader& get(const std::string& name) { return *entry(name).second; }
  std::uint64_t size(const std::string& name) { return get(name).size(); }
  // How errors name a data file.
  std::string describe(const std::string& name) const { return store_.describe(key_of(name)); }
  std::string describe() const { return store_.describe(key_); }

 private:
  std::string key_of(const std::string& name) const {
    if (file_keys_)
      if (auto it = file_keys_->find(name); it != file_keys_->end()) return it->second;
    return join_key(key_, name);
  }

  const Store& store_;
  std::string key_;
  const std::map<std::string, std::string>* file_keys_ = nullptr;
  std::unordered_map<std::string, std::unique_ptr<StoreReader>> files_;
};

// A stored bool is one byte; any value but 0 reads as true (as in numpy). Bytes are made 0 or
// 1 before anything treats them as bool, since another byte value in a bool is undefined
// behaviour and the file is untrusted.
inline void normalize_bools(void* data, std::uint64_t n) {
  auto* p = static_cast<unsigned char*>(data);
  for (std::uint64_t i = 0; i < n; ++i) p[i] = p[i] != 0;
}

// The error names the chunk's data file, described only when the check fails: describing it
// takes a few allocations, and a load of 100,000 small leaves checks 100,000 chunks.
inline void check_crc(std::uint32_t got, const LeafRecord& s, const ChunkRecord& c, const DataFiles& files) {
  if (got != c.crc32c)
    throw Error(ErrorKind::corrupt, "checksum mismatch in bytes " + std::to_string(c.offset) + ".." +
                std::to_string(c.offset + c.nbytes) + " (CRC32C " + std::to_string(got) + ", expected " +
                std::to_string(c.crc32c) + ")", files.describe(c.file), s.key());
}

}  // namespace detail
CAIRN_END_NAMESPACE
