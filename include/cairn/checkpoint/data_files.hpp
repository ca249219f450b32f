// SPDX-License-Identifier: Apache-2.0
// Reading a checkpoint's data files: open them by name through the store (each once, and at most
// a quarter of the open-file limit at a time), the read sizes, the checksum check and the
// normalization of stored bools.
#pragma once

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <string>
#include <unordered_map>
#include <utility>

#include <sys/resource.h>

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
  // The bytes counted so far, on every thread.
  std::uint64_t done() const { return done_.load(std::memory_order_relaxed); }
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

// How many data files a load keeps open at once: a quarter of the process's limit on open
// files (the rest is the program's own), at least 16. With the usual limit of 1,024: 256.
inline std::size_t data_files_kept_open() {
  rlimit l{};
  if (::getrlimit(RLIMIT_NOFILE, &l) != 0 || l.rlim_cur == RLIM_INFINITY) return 1 << 16;
  return static_cast<std::size_t>(std::clamp<rlim_t>(l.rlim_cur / 4, 16, rlim_t{1} << 16));
}

class DataFiles {
 public:
  // An open file: its name and its reader. Each file has one entry, at a stable address, so
  // two chunks are in the same file exactly when their entries are the same object.
  using Entry = std::pair<const std::string, std::unique_ptr<StoreReader>>;

  // `file_keys`: names read from another key than key/name (OpenedCheckpoint::file_keys).
  DataFiles(const Store& store, std::string key, const std::map<std::string, std::string>* file_keys = nullptr)
      : store_(store), key_(std::move(key)), file_keys_(file_keys), keep_open_(data_files_kept_open()) {}
  const Entry& entry(const std::string& name) {
    auto it = files_.find(name);
    if (it != files_.end()) return *it;
    std::unique_ptr<StoreReader> r =
        store_.readers_hold_files() ? std::make_unique<PooledReader>(*this, key_of(name)) : store_.open(key_of(name));
    if (meter_) r = std::make_unique<CountingReader>(std::move(r), *meter_);
    return *files_.emplace(name, std::move(r)).first;
  }
  // Every file opened from now on counts its reads into `meter` (LoadOptions::progress).
  void count_into(ProgressMeter* meter) { meter_ = meter; }
  const StoreReader& get(const std::string& name) { return *entry(name).second; }
  std::uint64_t size(const std::string& name) { return get(name).size(); }
  // How errors name a data file.
  std::string describe(const std::string& name) const { return store_.describe(key_of(name)); }
  // How errors about the checkpoint as a whole name it: where the load was pointed (set by
  // describe_as: on an object store, not the generation its files are read from).
  std::string describe() const { return name_.empty() ? store_.describe(key_) : name_; }
  void describe_as(std::string name) { name_ = std::move(name); }
  // How many reads of these files gain from being in flight at once (Store::parallel_reads).
  int parallel_reads() const { return store_.parallel_reads(); }
  // The store's hint that these files are about to be read (Store::read_ahead), by name.
  std::unique_ptr<StoreReadAhead> read_ahead(const std::vector<std::string>& names, std::uint64_t bytes) const {
    std::vector<std::string> keys;
    keys.reserve(names.size());
    for (const auto& n : names) keys.push_back(key_of(n));
    return store_.read_ahead(keys, bytes);
  }

 private:
  std::string key_of(const std::string& name) const {
    if (file_keys_)
      if (auto it = file_keys_->find(name); it != file_keys_->end()) return it->second;
    return join_key(key_, name);
  }

  // A data file's reader that opens the file when first used, and that its DataFiles closes
  // again once more of its files are open than it keeps (keep_open_): a checkpoint saved by
  // more ranks than a process may open files (the usual limit is 1,024) holds a file per
  // rank, and a load that kept each open failed with "Too many open files". A file closed is
  // opened again by its next read, which checks that it is still the size it was (a file
  // replaced meanwhile is refused; the chunks' checksums catch one of the same size). Each
  // read holds its own reference to the store's reader, so a close never takes it from under
  // a read on another thread. Below the limit nothing is ever closed.
  class PooledReader final : public StoreReader {
   public:
    PooledReader(DataFiles& owner, std::string key) : owner_(owner), key_(std::move(key)) {}
    std::uint64_t size() const override {
      if (!sized_.load(std::memory_order_acquire)) acquire();
      return size_;
    }
    std::uint64_t cached_bytes(std::uint64_t offset, std::uint64_t n) const override { return acquire()->cached_bytes(offset, n); }
    void read_at(void* dst, std::uint64_t n, std::uint64_t offset) const override { acquire()->read_at(dst, n, offset); }
    void read_scattered(const ReadPiece* pieces, std::size_t count, std::uint64_t offset) const override {
      acquire()->read_scattered(pieces, count, offset);
    }
    // Called by the owner (under its lock); the reader goes once no read holds it.
    void close(std::uint64_t generation) const {
      std::lock_guard<std::mutex> lock(mutex_);
      if (generation == generation_) r_.reset();
    }

   private:
    std::shared_ptr<const StoreReader> acquire() const {
      std::shared_ptr<const StoreReader> r;
      std::uint64_t generation;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (r_) return r_;
        r = std::shared_ptr<const StoreReader>(owner_.store_.open(key_));
        if (!sized_.load(std::memory_order_relaxed)) {
          size_ = r->size();
          sized_.store(true, std::memory_order_release);
        } else if (r->size() != size_) {
          throw Error(ErrorKind::corrupt, "the file changed while it was read: it was " + std::to_string(size_) +
                      " bytes, and is " + std::to_string(r->size()) + " now", owner_.store_.describe(key_));
        }
        r_ = r;
        generation = ++generation_;
      }
      owner_.opened(*this, generation);  // outside this reader's lock: the owner's lock takes others'
      return r;
    }
    DataFiles& owner_;
    std::string key_;
    mutable std::mutex mutex_;
    mutable std::shared_ptr<const StoreReader> r_;
    mutable std::uint64_t size_ = 0, generation_ = 0;
    mutable std::atomic<bool> sized_{false};
  };

  // A reader opened its file: the oldest opened are closed while more than keep_open_ are.
  void opened(const PooledReader& r, std::uint64_t generation) {
    std::lock_guard<std::mutex> lock(open_mutex_);
    open_.push_back({&r, generation});
    while (open_.size() > keep_open_) {
      open_.front().first->close(open_.front().second);
      open_.pop_front();
    }
  }

  const Store& store_;
  std::string key_;
  std::string name_;  // describe()'s, where set
  const std::map<std::string, std::string>* file_keys_ = nullptr;
  std::unordered_map<std::string, std::unique_ptr<StoreReader>> files_;
  ProgressMeter* meter_ = nullptr;
  std::size_t keep_open_;
  std::mutex open_mutex_;
  std::deque<std::pair<const PooledReader*, std::uint64_t>> open_;  // (reader, its open), oldest first
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
