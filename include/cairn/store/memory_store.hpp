// MemoryStore: checkpoints held in memory, for tests (and for programs that want a checkpoint
// as bytes). It keeps the Store contract exactly (tests/store_conformance.hpp) and can fail
// on demand: the Nth read, write, finish (the fsync of a file) or publish, a short read (the
// blob looks cut short), or a torn write (half the bytes land, then the call fails). Every
// call is counted, so a test can fail each I/O call of a save in turn.
//
// Thread-safe: the ranks of a ThreadCoordinator may share one.
#pragma once

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cairn/store/store.hpp"

CAIRN_BEGIN_NAMESPACE

class MemoryStore final : public Store {
 public:
  enum class Op { read, write, finish, publish };
  enum class Failure {
    error,       // the call throws an I/O error and does nothing
    short_read,  // a read finds the blob shorter than the range (it throws, as for a truncated file)
    torn_write,  // a write stores the first half of its bytes, then throws
  };

  // Makes the `nth` call of `op` from now (1 = the next one) fail; one rule per op.
  void fail(Op op, std::uint64_t nth, Failure how = Failure::error) {
    std::lock_guard<std::mutex> lock(mutex_);
    rules_[op] = {counts_[op] + nth, how};
  }
  void clear_failures() {
    std::lock_guard<std::mutex> lock(mutex_);
    rules_.clear();
  }
  // Calls of `op` so far.
  std::uint64_t count(Op op) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = counts_.find(op);
    return it == counts_.end() ? 0 : it->second;
  }

  // A copy of a blob's bytes (tests).
  std::string bytes(const std::string& key) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blobs_.find(detail::normalize_key(key));
    if (it == blobs_.end()) throw Error(ErrorKind::not_found, "no such blob", describe(key));
    return std::string(it->second->begin(), it->second->end());
  }
  // Replaces a blob's bytes (tests that damage a checkpoint).
  void put(const std::string& key, const std::string& content) {
    std::lock_guard<std::mutex> lock(mutex_);
    blobs_[detail::normalize_key(key)] = std::make_shared<Bytes>(content.begin(), content.end());
  }
  // Every key, sorted.
  std::vector<std::string> keys() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> out;
    for (const auto& kv : blobs_) out.push_back(kv.first);
    return out;
  }

  std::string describe(const std::string& key) const override { return "memory://" + detail::normalize_key(key); }

  std::unique_ptr<StoreReader> open(const std::string& key) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blobs_.find(detail::normalize_key(key));
    if (it == blobs_.end()) throw Error(ErrorKind::not_found, "open failed: no such blob", describe(key));
    return std::make_unique<Reader>(*this, it->second, describe(key));
  }
  std::unique_ptr<StoreWriter> create(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string k = detail::normalize_key(key);
    if (blobs_.count(k)) throw Error(ErrorKind::io, "open (create) failed: the blob exists", describe(key));
    auto bytes = std::make_shared<Bytes>();
    blobs_[k] = bytes;  // visible (as an empty blob) from now on, as a created file is
    return std::make_unique<Writer>(*this, bytes, describe(key));
  }
  bool exists(const std::string& key) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string k = detail::normalize_key(key);
    return blobs_.count(k) || has_prefix(k);
  }
  bool is_blob(const std::string& key) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return blobs_.count(detail::normalize_key(key)) != 0;
  }
  std::vector<StoreEntry> list(const std::string& prefix) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string p = detail::normalize_key(prefix) + "/";
    std::map<std::string, bool> names;
    for (auto it = blobs_.lower_bound(p); it != blobs_.end() && it->first.starts_with(p); ++it) {
      const std::string rest = it->first.substr(p.size());
      const auto slash = rest.find('/');
      if (slash == std::string::npos) names.emplace(rest, false);
      else names[rest.substr(0, slash)] = true;
    }
    std::vector<StoreEntry> out;
    for (const auto& [name, is_prefix] : names) out.push_back({name, is_prefix});
    return out;
  }
  void remove(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mutex_);
    erase_under(detail::normalize_key(key));
  }

  // Staging is a prefix beside the final key, "<key>.cairn-staging-<n>"; publishing moves its
  // blobs under the final key in one step under the lock, so a reader sees the old
  // checkpoint or the new one.
  std::unique_ptr<CheckpointStaging> stage(const std::string& key_in, bool overwrite) override {
    const std::string key = detail::normalize_key(key_in);
    if (key.empty()) throw Error(ErrorKind::invalid_argument, "empty checkpoint key");
    if (is_internal_name(key)) throw Error(ErrorKind::invalid_argument, "checkpoint keys may not contain '" +
                                           std::string(staging_infix) + "'", describe(key));
    std::lock_guard<std::mutex> lock(mutex_);
    check_target(key, overwrite);
    return std::make_unique<Staging>(*this, key, key + staging_infix + std::to_string(++next_staging_), overwrite);
  }
  bool is_internal_name(const std::string& name) const override { return name.find(staging_infix) != std::string::npos; }
  void remove_checkpoints(const std::vector<std::string>& keys) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& k : keys) erase_under(detail::normalize_key(k));
  }
  void write_atomically(const std::string& key, const std::string& content) override {
    count_and_check(Op::write, describe(key));
    put(key, content);
  }
  std::unique_ptr<StoreWriter> create_atomically(const std::string& key, bool overwrite) override {
    const std::string k = detail::normalize_key(key);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      check_blob_target(k, overwrite);
    }
    return std::make_unique<AtomicWriter>(*this, k, overwrite);
  }

 private:
  using Bytes = std::vector<unsigned char>;
  struct Rule {
    std::uint64_t at = 0;
    Failure how = Failure::error;
  };
  static constexpr const char* staging_infix = ".cairn-staging-";

  // Counts a call; returns how it must fail, or throws for a plain error.
  std::optional<Failure> count_and_check(Op op, const std::string& what) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return count_locked(op, what);
  }
  std::optional<Failure> count_locked(Op op, const std::string& what) const {
    const std::uint64_t n = ++counts_[op];
    auto it = rules_.find(op);
    if (it == rules_.end() || it->second.at != n) return std::nullopt;
    if (it->second.how == Failure::error) throw Error(ErrorKind::io, std::string(op_name(op)) + " failed (injected)", what);
    return it->second.how;
  }
  static const char* op_name(Op op) {
    switch (op) {
      case Op::read: return "read";
      case Op::write: return "write";
      case Op::finish: return "fsync";
      case Op::publish: return "publish";
    }
    return "?";
  }

  bool has_prefix(const std::string& k) const {
    const std::string p = k + "/";
    auto it = blobs_.lower_bound(p);
    return it != blobs_.end() && it->first.starts_with(p);
  }
  void erase_under(const std::string& k) {
    blobs_.erase(k);
    const std::string p = k + "/";
    for (auto it = blobs_.lower_bound(p); it != blobs_.end() && it->first.starts_with(p);) it = blobs_.erase(it);
  }
  void check_target(const std::string& key, bool overwrite) const {
    if (blobs_.count(key)) throw Error(ErrorKind::already_exists, "a blob (not a checkpoint) is at this key; cairn will not replace it", describe(key));
    if (!has_prefix(key)) return;
    if (blobs_.count(key + "/" + detail::commit_marker_name)) {
      if (!overwrite) throw Error(ErrorKind::already_exists, "a checkpoint already exists here (pass overwrite to replace it)", describe(key));
      return;
    }
    throw Error(ErrorKind::already_exists, "this key holds blobs but no cairn checkpoint; cairn will not write into it or "
                "replace it, even with overwrite", describe(key));
  }

  class Reader final : public StoreReader {
   public:
    Reader(const MemoryStore& store, std::shared_ptr<const Bytes> bytes, std::string name)
        : store_(store), bytes_(std::move(bytes)), name_(std::move(name)) {}
    std::uint64_t size() const override { return bytes_->size(); }
    std::uint64_t cached_bytes(std::uint64_t, std::uint64_t n) const override { return n; }  // it is memory
    void read_at(void* dst, std::uint64_t n, std::uint64_t offset) const override {
      const auto how = store_.count_and_check(Op::read, name_);
      std::uint64_t size = bytes_->size();
      if (how == Failure::short_read) size = std::min(size, offset + n / 2);
      if (offset > size || n > size - offset)
        throw Error(ErrorKind::corrupt, "file ends at byte " + std::to_string(size) + ", before the data its metadata "
                    "describes (truncated?)", name_);
      if (n) std::memcpy(dst, bytes_->data() + offset, static_cast<std::size_t>(n));
    }

   private:
    const MemoryStore& store_;
    std::shared_ptr<const Bytes> bytes_;
    std::string name_;
  };

  class Writer final : public StoreWriter {
   public:
    Writer(MemoryStore& store, std::shared_ptr<Bytes> bytes, std::string name)
        : store_(store), bytes_(std::move(bytes)), name_(std::move(name)) {}
    void write_at(const void* src, std::uint64_t n, std::uint64_t offset) override {
      const auto how = store_.count_and_check(Op::write, name_);
      const std::uint64_t take = how == Failure::torn_write ? n / 2 : n;
      std::lock_guard<std::mutex> lock(store_.mutex_);
      if (bytes_->size() < offset + take) bytes_->resize(static_cast<std::size_t>(offset + take));
      if (take) std::memcpy(bytes_->data() + offset, src, static_cast<std::size_t>(take));
      if (how == Failure::torn_write) throw Error(ErrorKind::io, "write failed after " + std::to_string(take) + " of " +
                                                  std::to_string(n) + " bytes (injected torn write)", name_);
    }
    void finish(std::uint64_t size) override {
      store_.count_and_check(Op::finish, name_);
      std::lock_guard<std::mutex> lock(store_.mutex_);
      bytes_->resize(static_cast<std::size_t>(size));
    }

   private:
    MemoryStore& store_;
    std::shared_ptr<Bytes> bytes_;
    std::string name_;
  };

  // create_atomically's target: a blob (with overwrite) or nothing.
  void check_blob_target(const std::string& k, bool overwrite) const {
    if (has_prefix(k)) throw Error(ErrorKind::already_exists, "this key holds other blobs; cairn will not replace it", describe(k));
    if (blobs_.count(k) && !overwrite)
      throw Error(ErrorKind::already_exists, "a blob already exists here (pass overwrite to replace it)", describe(k));
  }

  // Writes into bytes of its own, which join the store only at finish.
  class AtomicWriter final : public StoreWriter {
   public:
    AtomicWriter(MemoryStore& store, std::string key, bool overwrite)
        : store_(store), key_(std::move(key)), overwrite_(overwrite), bytes_(std::make_shared<Bytes>()),
          inner_(store, bytes_, store.describe(key_)) {}
    void write_at(const void* src, std::uint64_t n, std::uint64_t offset) override { inner_.write_at(src, n, offset); }
    void finish(std::uint64_t size) override {
      inner_.finish(size);
      std::lock_guard<std::mutex> lock(store_.mutex_);
      store_.count_locked(Op::publish, store_.describe(key_));
      store_.check_blob_target(key_, overwrite_);  // again: something may have appeared meanwhile
      store_.blobs_[key_] = bytes_;
    }

   private:
    MemoryStore& store_;
    std::string key_;
    bool overwrite_;
    std::shared_ptr<Bytes> bytes_;
    Writer inner_;
  };

  class Staging final : public CheckpointStaging {
   public:
    Staging(MemoryStore& store, std::string final_key, std::string key, bool overwrite)
        : store_(store), final_(std::move(final_key)), key_(std::move(key)), overwrite_(overwrite) {}
    ~Staging() override {
      if (published_) return;
      std::lock_guard<std::mutex> lock(store_.mutex_);
      store_.erase_under(key_);
    }
    const std::string& key() const override { return key_; }
    void publish(const std::map<std::string, std::uint64_t>& expected) override {
      std::lock_guard<std::mutex> lock(store_.mutex_);
      store_.count_locked(Op::publish, store_.describe(final_));
      for (const auto& [name, bytes] : expected) {
        auto it = store_.blobs_.find(key_ + "/" + name);
        if (it == store_.blobs_.end() || it->second->size() != bytes)
          throw Error(ErrorKind::io, "a file of the staged checkpoint is missing or has the wrong size; nothing was "
                      "published", store_.describe(key_ + "/" + name));
      }
      store_.check_target(final_, overwrite_);  // again: something may have appeared meanwhile
      store_.erase_under(final_);
      const std::string from = key_ + "/";
      for (auto it = store_.blobs_.lower_bound(from); it != store_.blobs_.end() && it->first.starts_with(from);) {
        store_.blobs_[final_ + "/" + it->first.substr(from.size())] = it->second;
        it = store_.blobs_.erase(it);
      }
      published_ = true;
    }

   private:
    MemoryStore& store_;
    std::string final_, key_;
    bool overwrite_ = false, published_ = false;
  };

  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Bytes>> blobs_;
  mutable std::map<Op, std::uint64_t> counts_;
  std::map<Op, Rule> rules_;
  std::uint64_t next_staging_ = 0;
};

CAIRN_END_NAMESPACE
