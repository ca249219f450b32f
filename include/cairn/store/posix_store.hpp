// SPDX-License-Identifier: Apache-2.0
// PosixStore: checkpoints as directories of files on a POSIX filesystem (local disk, NFS,
// Lustre, GPFS). A key is a path, relative to the store's root when it has one. This is what
// every path overload of save, load and the Checkpointer uses.
//
// Staging and publishing are store/posix_staging.hpp: a claimed staging directory beside the
// final path, fsyncs of the files and the directory, then one rename (or an atomic exchange
// with the previous checkpoint), and an fsync of the parent directory.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cairn/store/store.hpp"

CAIRN_BEGIN_NAMESPACE

class PosixStore final : public Store {
 public:
  // Keys are paths as given ("ckpt/100", "/data/run/ckpt/100").
  PosixStore() = default;
  // Keys are paths under `root` ("100" is root/100).
  explicit PosixStore(std::string root) : root_(detail::normalize_key(std::move(root))) {}

  const std::string& root() const { return root_; }

  std::string path(const std::string& key) const {
    const std::string k = detail::normalize_key(key);
    if (root_.empty()) return k;
    return k.empty() ? root_ : root_ + "/" + k;
  }
  std::string describe(const std::string& key) const override { return path(key); }

  std::unique_ptr<StoreReader> open(const std::string& key) const override;
  // Many small files (32 or more: an Orbax checkpoint's zarr metadata files) are read through
  // io_uring where the kernel offers it, 64 at a time (io/batched_reads.hpp); any file that
  // path does not read whole, and every file elsewhere, is read as read_whole reads it.
  std::vector<WholeBlob> read_whole_each(const std::vector<std::pair<std::string, std::uint64_t>>& reads) const override;
  // A link at `key` resolved to the file it leads to (through any chain of links); with a
  // root, a file outside the root is refused.
  std::string follow_link(const std::string& key) const override;
  bool share_blob(const Store& from_store, const std::string& from, const std::string& to) override;
  // Missing directories on the way are created, as an object store needs none.
  std::unique_ptr<StoreWriter> create(const std::string& key) override;
  bool exists(const std::string& key) const override;
  bool is_blob(const std::string& key) const override;
  std::vector<StoreEntry> list(const std::string& prefix) const override;
  void remove(const std::string& key) override;
  // Unless the first file's head is in the page cache already, a thread reads the files'
  // first bytes into a scratch buffer (io/file.hpp, prefetch_file).
  std::unique_ptr<StoreReadAhead> read_ahead(const std::vector<std::string>& keys, std::uint64_t bytes) const override;

  std::unique_ptr<CheckpointStaging> stage(const std::string& key, bool overwrite) override;

  std::string readable_checkpoint(const std::string& key) const override;

  bool is_internal_name(const std::string& name) const override;

  void clean_leftovers(const std::string& prefix) override;

  // Each directory is renamed to a claimed staging name first (atomic: from then on nothing
  // there looks like a checkpoint), the renames are made durable, then the trees are removed.
  // A crash midway leaves leftovers that the next Checkpointer removes.
  void remove_checkpoints(const std::vector<std::string>& keys) override;

  void write_atomically(const std::string& key, const std::string& content) override;

  std::unique_ptr<StoreWriter> create_atomically(const std::string& key, bool overwrite) override;

 private:
  // The store's files and its staging (store/posix_store_impl.hpp).
  class Reader;
  class Writer;
  class AtomicWriter;
  class Staging;
  class ReadAhead;

  std::string root_;
};

CAIRN_END_NAMESPACE

// The definitions of the members declared here: in every translation unit when header-only,
// only in cairn/src.hpp's with CAIRN_SEPARATE_COMPILATION.
#if CAIRN_DEFINES_RUNTIME
#include "cairn/store/posix_store_impl.hpp"
#endif
