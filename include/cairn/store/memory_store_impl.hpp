// SPDX-License-Identifier: Apache-2.0
// MemoryStore's members and its readers, writers and staging (store/memory_store.hpp).
#pragma once

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cairn/store/memory_store.hpp"

CAIRN_BEGIN_NAMESPACE

class MemoryStore::Reader final : public StoreReader {
 public:
  Reader(const MemoryStore& store, std::shared_ptr<const Bytes> bytes, std::string name)
      : store_(store), bytes_(std::move(bytes)), name_(std::move(name)) {}
  std::uint64_t size() const override { return bytes_->size(); }
  std::uint64_t cached_bytes(std::uint64_t, std::uint64_t n) const override { return n; }  // it is memory
  void read_at(void* dst, std::uint64_t n, std::uint64_t offset) const override {
    check_read(n, offset);
    if (n) std::memcpy(dst, bytes_->data() + offset, static_cast<std::size_t>(n));
  }
  // Straight from the bytes into each piece, as one read (one operation for fault injection):
  // the default reads the span into a buffer of its own first, a third copy of a load's bytes.
  void read_scattered(const ReadPiece* pieces, std::size_t count, std::uint64_t offset) const override {
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < count; ++i) total += pieces[i].n;
    check_read(total, offset);
    detail::copy_to_pieces(bytes_->data() + offset, pieces, count);
  }

 private:
  // Counts the read (and fails it where a failure is injected); throws where the blob ends
  // before its last byte.
  void check_read(std::uint64_t n, std::uint64_t offset) const {
    const auto how = store_.count_and_check(Op::read, name_);
    std::uint64_t size = bytes_->size();
    if (how == Failure::short_read) size = std::min(size, offset + n / 2);
    if (offset > size || n > size - offset)
      throw Error(ErrorKind::corrupt, "file ends at byte " + std::to_string(size) + ", before the data its metadata "
                  "describes (truncated?)", name_);
  }

  const MemoryStore& store_;
  std::shared_ptr<const Bytes> bytes_;
  std::string name_;
};

class MemoryStore::Writer final : public StoreWriter {
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

class MemoryStore::AtomicWriter final : public StoreWriter {
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

class MemoryStore::Staging final : public CheckpointStaging {
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

CAIRN_API void MemoryStore::fail(Op op, std::uint64_t nth, Failure how) {
  std::lock_guard<std::mutex> lock(mutex_);
  rules_[op] = {counts_[op] + nth, how};
}

CAIRN_API void MemoryStore::clear_failures() {
  std::lock_guard<std::mutex> lock(mutex_);
  rules_.clear();
}

CAIRN_API std::uint64_t MemoryStore::count(Op op) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = counts_.find(op);
  return it == counts_.end() ? 0 : it->second;
}

CAIRN_API std::string MemoryStore::bytes(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blobs_.find(detail::normalize_key(key));
  if (it == blobs_.end()) throw Error(ErrorKind::not_found, "no such blob", describe(key));
  return std::string(it->second->begin(), it->second->end());
}

CAIRN_API void MemoryStore::put(const std::string& key, const std::string& content) {
  std::lock_guard<std::mutex> lock(mutex_);
  blobs_[detail::normalize_key(key)] = std::make_shared<Bytes>(content.begin(), content.end());
}

CAIRN_API std::vector<std::string> MemoryStore::keys() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> out;
  for (const auto& kv : blobs_) out.push_back(kv.first);
  return out;
}

CAIRN_API std::string MemoryStore::describe(const std::string& key) const { return "memory://" + detail::normalize_key(key); }

CAIRN_API std::unique_ptr<StoreReader> MemoryStore::open(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blobs_.find(detail::normalize_key(key));
  if (it == blobs_.end()) throw Error(ErrorKind::not_found, "open failed: no such blob", describe(key));
  return std::make_unique<Reader>(*this, it->second, describe(key));
}

CAIRN_API std::unique_ptr<StoreWriter> MemoryStore::create(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string k = detail::normalize_key(key);
  if (blobs_.count(k)) throw Error(ErrorKind::io, "open (create) failed: the blob exists", describe(key));
  auto bytes = std::make_shared<Bytes>();
  blobs_[k] = bytes;  // visible (as an empty blob) from now on, as a created file is
  return std::make_unique<Writer>(*this, bytes, describe(key));
}

CAIRN_API bool MemoryStore::exists(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string k = detail::normalize_key(key);
  return blobs_.count(k) || has_prefix(k);
}

CAIRN_API bool MemoryStore::is_blob(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return blobs_.count(detail::normalize_key(key)) != 0;
}

CAIRN_API std::vector<StoreEntry> MemoryStore::list(const std::string& prefix) const {
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

CAIRN_API void MemoryStore::remove(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  erase_under(detail::normalize_key(key));
}

CAIRN_API std::unique_ptr<CheckpointStaging> MemoryStore::stage(const std::string& key_in, bool overwrite) {
  const std::string key = detail::normalize_key(key_in);
  if (key.empty()) throw Error(ErrorKind::invalid_argument, "empty checkpoint key");
  if (is_internal_name(key)) throw Error(ErrorKind::invalid_argument, "checkpoint keys may not contain '" +
                                         std::string(staging_infix) + "'", describe(key));
  std::lock_guard<std::mutex> lock(mutex_);
  check_target(key, overwrite);
  return std::make_unique<Staging>(*this, key, key + staging_infix + std::to_string(++next_staging_), overwrite);
}

CAIRN_API bool MemoryStore::is_internal_name(const std::string& name) const { return name.find(staging_infix) != std::string::npos; }

CAIRN_API void MemoryStore::remove_checkpoints(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& k : keys) erase_under(detail::normalize_key(k));
}

CAIRN_API void MemoryStore::write_atomically(const std::string& key, const std::string& content) {
  count_and_check(Op::write, describe(key));
  put(key, content);
}

CAIRN_API std::unique_ptr<StoreWriter> MemoryStore::create_atomically(const std::string& key, bool overwrite) {
  const std::string k = detail::normalize_key(key);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    check_blob_target(k, overwrite);
  }
  return std::make_unique<AtomicWriter>(*this, k, overwrite);
}

CAIRN_API std::optional<MemoryStore::Failure> MemoryStore::count_and_check(Op op, const std::string& what) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return count_locked(op, what);
}

CAIRN_API std::optional<MemoryStore::Failure> MemoryStore::count_locked(Op op, const std::string& what) const {
  const std::uint64_t n = ++counts_[op];
  auto it = rules_.find(op);
  if (it == rules_.end() || it->second.at != n) return std::nullopt;
  if (it->second.how == Failure::error) throw Error(ErrorKind::io, std::string(op_name(op)) + " failed (injected)", what);
  return it->second.how;
}

CAIRN_API const char* MemoryStore::op_name(Op op) {
  switch (op) {
    case Op::read: return "read";
    case Op::write: return "write";
    case Op::finish: return "fsync";
    case Op::publish: return "publish";
  }
  return "?";
}

CAIRN_API bool MemoryStore::has_prefix(const std::string& k) const {
  const std::string p = k + "/";
  auto it = blobs_.lower_bound(p);
  return it != blobs_.end() && it->first.starts_with(p);
}

CAIRN_API void MemoryStore::erase_under(const std::string& k) {
  blobs_.erase(k);
  const std::string p = k + "/";
  for (auto it = blobs_.lower_bound(p); it != blobs_.end() && it->first.starts_with(p);) it = blobs_.erase(it);
}

CAIRN_API void MemoryStore::check_target(const std::string& key, bool overwrite) const {
  if (blobs_.count(key)) throw Error(ErrorKind::already_exists, "a blob (not a checkpoint) is at this key; cairn will not replace it", describe(key));
  if (!has_prefix(key)) return;
  if (blobs_.count(key + "/" + detail::commit_marker_name)) {
    if (!overwrite) throw Error(ErrorKind::already_exists, "a checkpoint already exists here (pass overwrite to replace it)", describe(key));
    return;
  }
  if (blobs_.count(key + "/" + detail::set_index_name)) {
    if (!overwrite)
      throw Error(ErrorKind::already_exists, "a sharded safetensors set already exists here (pass overwrite to replace it)",
                  describe(key));
    return;
  }
  throw Error(ErrorKind::already_exists, "this key holds blobs but no cairn checkpoint; cairn will not write into it or "
              "replace it, even with overwrite", describe(key));
}

CAIRN_API void MemoryStore::check_blob_target(const std::string& k, bool overwrite) const {
  if (has_prefix(k)) throw Error(ErrorKind::already_exists, "this key holds other blobs; cairn will not replace it", describe(k));
  if (blobs_.count(k) && !overwrite)
    throw Error(ErrorKind::already_exists, "a blob already exists here (pass overwrite to replace it)", describe(k));
}

CAIRN_END_NAMESPACE
