// SPDX-License-Identifier: Apache-2.0
// Reading a checkpoint's data files: open them by name through the store (each once), the
// read sizes, the checksum check and the normalization of stored bools.
#pragma once

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <thread>
#include <string>
#include <unordered_map>
#include <utility>

#include "cairn/core/progress.hpp"
#include "cairn/core/tuning.hpp"
#include "cairn/format/files.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// Counts the bytes a load reads and tells LoadOptions::progress, from the loading thread only
// (reads on a helper thread are counted and told at the loading thread's next read or at the
// end), at most every 4 MiB so that small leaves do not call it 10,000 times.
class ProgressMeter {
 public:
  ProgressMeter(const Progress& fn, std::uint64_t total) : fn_(fn), total_(total), owner_(std::this_thread::get_id()) {}
  void add(std::uint64_t n) {
    const std::uint64_t done = done_.fetch_add(n, std::memory_order_relaxed) + n;
    if (std::this_thread::get_id() != owner_ || done - told_ < (std::uint64_t{4} << 20)) return;
    told_ = done;
    fn_(std::min(done, total_), total_);
  }
  // The end: what was read is all there was to read.
  void finish() {
    const std::uint64_t done = done_.load(std::memory_order_relaxed);
    fn_(done, done);
  }

 private:
  const Progress& fn_;
  std::uint64_t total_;
  std::thread::id owner_;
  std::atomic<std::uint64_t> done_{0};
  std::uint64_t told_ = 0;
};

// A reader that counts what it reads into a ProgressMeter.
class CountingReader final : public StoreReader {
 public:
  CountingReader(std::unique_ptr<StoreReader> r, ProgressMeter& m) : r_(std::move(r)), m_(m) {}
  std::uint64_t size() const override { return r_->size(); }
  std::uint64_t cached_bytes(std::uint64_t offset, std::uint64_t n) const override { return r_->cached_bytes(offset, n); }
  bool decodes() const override { return r_->decodes(); }
  void read_at(void* dst, std::uint64_t n, std::uint64_t offset) const override {
    r_->read_at(dst, n, offset);
    m_.add(n);
  }
  void read_scattered(const ReadPiece* pieces, std::size_t count, std::uint64_t offset) const override {
    r_->read_scattered(pieces, count, offset);
    std::uint64_t n = 0;
    for (std::size_t i = 0; i < count; ++i) n += pieces[i].n;
    m_.add(n);
  }

 private:
  std::unique_ptr<StoreReader> r_;
  ProgressMeter& m_;
};

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
    std::unique_ptr<StoreReader> r = store_.open(key_of(name));
    if (meter_) r = std::make_unique<CountingReader>(std::move(r), *meter_);
    return *files_.emplace(name, std::move(r)).first;
  }
  // Every file opened from now on counts its reads into `meter` (LoadOptions::progress).
  void count_into(ProgressMeter* meter) { meter_ = meter; }
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
  ProgressMeter* meter_ = nullptr;
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
