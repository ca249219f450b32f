// SPDX-License-Identifier: Apache-2.0
// MemoryStore: checkpoints held in memory, for tests (and for programs that want a checkpoint
// as bytes). It keeps the Store contract exactly (tests/store_conformance.hpp) and can fail
// on demand: the Nth read, write, finish (the fsync of a file) or publish, a short read (the
// blob looks cut short), or a torn write (half the bytes land, then the call fails). Every
// call is counted, so a test can fail each I/O call of a save in turn.
//
// Thread-safe: the ranks of a ThreadCoordinator may share one.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
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
  CAIRN_API void fail(Op op, std::uint64_t nth, Failure how = Failure::error);
  CAIRN_API void clear_failures();
  // Calls of `op` so far.
  CAIRN_API std::uint64_t count(Op op) const;

  // A copy of a blob's bytes (tests).
  CAIRN_API std::string bytes(const std::string& key) const;
  // Replaces a blob's bytes (tests that damage a checkpoint).
  CAIRN_API void put(const std::string& key, const std::string& content);
  // Every key, sorted.
  CAIRN_API std::vector<std::string> keys() const;

  CAIRN_API std::string describe(const std::string& key) const override;

  CAIRN_API std::unique_ptr<StoreReader> open(const std::string& key) const override;
  CAIRN_API std::unique_ptr<StoreWriter> create(const std::string& key) override;
  CAIRN_API bool exists(const std::string& key) const override;
  CAIRN_API bool is_blob(const std::string& key) const override;
  bool readers_hold_files() const override { return false; }
  CAIRN_API std::vector<StoreEntry> list(const std::string& prefix) const override;
  CAIRN_API void remove(const std::string& key) override;

  // Staging is a prefix beside the final key, "<key>.cairn-staging-<n>"; publishing moves its
  // blobs under the final key in one step under the lock, so a reader sees the old
  // checkpoint or the new one.
  CAIRN_API std::unique_ptr<CheckpointStaging> stage(const std::string& key_in, bool overwrite) override;
  CAIRN_API bool is_internal_name(const std::string& name) const override;
  CAIRN_API void remove_checkpoints(const std::vector<std::string>& keys) override;
  CAIRN_API void write_atomically(const std::string& key, const std::string& content) override;
  CAIRN_API std::unique_ptr<StoreWriter> create_atomically(const std::string& key, bool overwrite) override;

 private:
  using Bytes = std::vector<unsigned char>;
  struct Rule {
    std::uint64_t at = 0;
    Failure how = Failure::error;
  };
  static constexpr const char* staging_infix = ".cairn-staging-";

  // Counts a call; returns how it must fail, or throws for a plain error.
  CAIRN_API std::optional<Failure> count_and_check(Op op, const std::string& what) const;
  CAIRN_API std::optional<Failure> count_locked(Op op, const std::string& what) const;
  CAIRN_API static const char* op_name(Op op);

  CAIRN_API bool has_prefix(const std::string& k) const;
  CAIRN_API void erase_under(const std::string& k);
  CAIRN_API void check_target(const std::string& key, bool overwrite) const;

  class Reader;
  class Writer;

  // create_atomically's target: a blob (with overwrite) or nothing.
  CAIRN_API void check_blob_target(const std::string& k, bool overwrite) const;

  class AtomicWriter;  // writes into bytes of its own, which join the store only at finish
  class Staging;

  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Bytes>> blobs_;
  mutable std::map<Op, std::uint64_t> counts_;
  std::map<Op, Rule> rules_;
  std::uint64_t next_staging_ = 0;
};

CAIRN_END_NAMESPACE

// The members: once in the runtime with separate compilation (a test store has no place in
// the compile time of every file that includes cairn), inline when header-only.
#if CAIRN_DEFINES_RUNTIME
#include "cairn/store/memory_store_impl.hpp"
#endif
