// SPDX-License-Identifier: Apache-2.0
// PosixStore's members: files through io/file.hpp, staging and publishing through
// store/posix_staging.hpp. Compiled in every translation unit that includes
// store/posix_store.hpp, or once with CAIRN_SEPARATE_COMPILATION (docs/compile-time.md).
#pragma once

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <sys/stat.h>

#include "cairn/io/batched_reads.hpp"
#include "cairn/io/file.hpp"
#include "cairn/store/posix_staging.hpp"
#include "cairn/store/posix_store.hpp"

CAIRN_BEGIN_NAMESPACE

class PosixStore::Reader final : public StoreReader {
 public:
  Reader(detail::File f, std::uint64_t size) : file_(std::move(f)), size_(size) {}
  std::uint64_t size() const override { return size_; }
  void read_at(void* dst, std::uint64_t n, std::uint64_t offset) const override { file_.read_at(dst, n, offset); }
  std::uint64_t cached_bytes(std::uint64_t offset, std::uint64_t n) const override { return file_.cached_bytes(offset, n); }
  void read_scattered(const ReadPiece* pieces, std::size_t count, std::uint64_t offset) const override {
    std::uint64_t skip = 0;
    for (std::size_t i = 0; i < count; ++i)
      if (!pieces[i].dst) skip = std::max(skip, pieces[i].n);
    std::vector<unsigned char> sink(static_cast<std::size_t>(skip));  // every skipped range lands here
    std::vector<iovec> iov;
    iov.reserve(count);
    for (std::size_t i = 0; i < count; ++i)
      iov.push_back({pieces[i].dst ? pieces[i].dst : sink.data(), static_cast<std::size_t>(pieces[i].n)});
    file_.read_vectored(iov, offset);
  }

 private:
  detail::File file_;
  std::uint64_t size_;
};

class PosixStore::Writer final : public StoreWriter {
 public:
  explicit Writer(detail::File f) : file_(std::move(f)) {}
  void write_at(const void* src, std::uint64_t n, std::uint64_t offset) override { file_.write_at(src, n, offset); }
  void write_gathered(const WritePiece* pieces, std::size_t count, std::uint64_t offset) override {
    file_.write_vectored(pieces, count, offset);
  }
  void finish(std::uint64_t size) override {
    if (file_.size() != size) file_.truncate(size);
    file_.sync();
    file_.close();
  }

 private:
  detail::File file_;
};

// Writes a claimed staging file beside the final path and renames it there at finish.
class PosixStore::AtomicWriter final : public StoreWriter {
 public:
  AtomicWriter(detail::StagingClaim claim, std::string final_path, bool overwrite)
      : claim_(std::move(claim)), final_path_(std::move(final_path)), overwrite_(overwrite),
        file_(detail::File::create(claim_.staging_path())) {}
  ~AtomicWriter() override {
    if (!published_) ::unlink(claim_.staging_path().c_str());  // best effort; the claim's lock goes too
  }
  void write_at(const void* src, std::uint64_t n, std::uint64_t offset) override { file_.write_at(src, n, offset); }
  void write_gathered(const WritePiece* pieces, std::size_t count, std::uint64_t offset) override {
    file_.write_vectored(pieces, count, offset);
  }
  void finish(std::uint64_t size) override {
    if (file_.size() != size) file_.truncate(size);
    file_.sync();
    file_.close();
    check_target(final_path_, overwrite_);  // again: something may have appeared meanwhile
    if (overwrite_) {
      detail::rename_path(claim_.staging_path(), final_path_);
    } else if (!detail::rename_no_replace(claim_.staging_path(), final_path_, false)) {
      // Another export published here first: its file stays, and this one is refused.
      check_target(final_path_, false);
      throw Error(ErrorKind::already_exists, "something appeared at this path while the file was written", final_path_);
    }
    published_ = true;
    detail::fsync_dir(detail::parent_dir(final_path_));
  }
  static void check_target(const std::string& p, bool overwrite) {
    std::error_code ec;
    const auto st = std::filesystem::symlink_status(p, ec);
    if (!std::filesystem::exists(st)) return;
    if (!std::filesystem::is_regular_file(st))
      throw Error(ErrorKind::already_exists, "something other than a file is at this path; cairn will not replace it", p);
    if (!overwrite) throw Error(ErrorKind::already_exists, "a file already exists here (pass overwrite to replace it)", p);
  }

 private:
  detail::StagingClaim claim_;
  std::string final_path_;
  bool overwrite_;
  detail::File file_;
  bool published_ = false;
};

class PosixStore::Staging final : public CheckpointStaging {
 public:
  Staging(detail::StagingClaim claim, std::string final_path, bool overwrite)
      : claim_(std::move(claim)), final_path_(std::move(final_path)), overwrite_(overwrite) {}
  ~Staging() override {
    if (!published_) {
      std::error_code ec;  // best effort: what is left, the next save or Checkpointer removes
      std::filesystem::remove_all(claim_.staging_path(), ec);
    }
    claim_.release();
  }
  const std::string& key() const override { return key_; }
  void publish(const std::map<std::string, std::uint64_t>& expected) override {
    const std::string& dir = claim_.staging_path();
    detail::fsync_tree(dir);  // the staging directory and every one under it
    // Never publish a checkpoint that lacks a file: had anything removed the staging
    // directory or a file in it meanwhile, the writes could have gone to unlinked files.
    for (const auto& [name, bytes] : expected) {
      struct stat st;
      const std::string p = detail::join_key(dir, name);
      if (::lstat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || static_cast<std::uint64_t>(st.st_size) != bytes)
        throw Error(ErrorKind::io, "a file of the staged checkpoint is missing or has the wrong size; nothing was "
                    "published", p);
    }
    detail::publish(claim_, final_path_, overwrite_);
    published_ = true;
    claim_.release();
  }

 private:
  friend class PosixStore;
  detail::StagingClaim claim_;
  std::string final_path_, key_;
  bool overwrite_ = false, published_ = false;
};


CAIRN_API std::unique_ptr<StoreReader> PosixStore::open(const std::string& key) const {
  std::uint64_t size = 0;
  detail::File f = detail::File::open_read(path(key), &size);
  return std::make_unique<Reader>(std::move(f), size);
}

CAIRN_API std::vector<Store::WholeBlob> PosixStore::read_whole_each(const std::vector<std::pair<std::string, std::uint64_t>>& reads) const {
  std::vector<detail::WholeFileRead> files;
  if (reads.size() >= detail::batched_read_min) {
    files.resize(reads.size());
    for (std::size_t i = 0; i < reads.size(); ++i) files[i].path = path(reads[i].first), files[i].limit = reads[i].second;
    detail::read_files_batched(files);
  }
  std::vector<WholeBlob> out(reads.size());
  for (std::size_t i = 0; i < reads.size(); ++i) {
    if (!files.empty() && files[i].done) {
      out[i].bytes = std::move(files[i].bytes);
      continue;
    }
    try {  // what the batch left (or all): read the ordinary way, which names what is wrong
      out[i].bytes = read_whole(reads[i].first, reads[i].second);
    } catch (...) {
      out[i].error = std::current_exception();
    }
  }
  return out;
}

class PosixStore::ReadAhead final : public StoreReadAhead {
 public:
  ReadAhead(std::vector<std::string> paths, std::uint64_t bytes) {
    thread_ = std::thread([this, paths = std::move(paths), bytes] {
      std::uint64_t left = bytes;
      for (const auto& p : paths) {
        if (left == 0 || stop_.load(std::memory_order_relaxed)) break;
        left -= std::min(left, detail::prefetch_file(p, left, stop_));
      }
    });
  }
  ~ReadAhead() override {
    stop_.store(true, std::memory_order_relaxed);
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

CAIRN_API std::unique_ptr<StoreReadAhead> PosixStore::read_ahead(const std::vector<std::string>& keys, std::uint64_t bytes) const {
  try {
    std::vector<std::string> paths;
    for (const auto& k : keys) paths.push_back(path(k));
    // Checked here rather than on the thread: a warm load (a checkpoint just written or read)
    // then starts no thread at all, whose memory mappings would contend with the parse's page
    // faults.
    if (paths.empty() || bytes == 0 || detail::file_head_cached(paths.front(), bytes)) return nullptr;
    return std::make_unique<ReadAhead>(std::move(paths), bytes);
  } catch (...) {  // no memory or no thread to be had: the load reads as it would have
    return nullptr;
  }
}

CAIRN_API std::unique_ptr<StoreWriter> PosixStore::create(const std::string& key) {
  const std::string p = path(key);
  try {
    return std::make_unique<Writer>(detail::File::create(p));
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::not_found) throw;
  }
  std::error_code ec;
  std::filesystem::create_directories(detail::parent_dir(p), ec);
  if (ec) throw Error(ErrorKind::io, "cannot create parent directory: " + ec.message(), detail::parent_dir(p));
  return std::make_unique<Writer>(detail::File::create(p));
}

CAIRN_API bool PosixStore::exists(const std::string& key) const { return detail::path_exists(path(key)); }

CAIRN_API bool PosixStore::is_blob(const std::string& key) const {
  struct stat st;
  return ::lstat(path(key).c_str(), &st) == 0 && !S_ISDIR(st.st_mode) &&
         !(S_ISLNK(st.st_mode) && detail::is_directory(path(key)));
}

CAIRN_API std::vector<StoreEntry> PosixStore::list(const std::string& prefix) const {
  std::vector<StoreEntry> out;
  std::error_code ec;
  std::filesystem::directory_iterator it(path(prefix), ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    out.push_back({it->path().filename().string(), it->is_directory(type_ec)});
  }
  return out;
}

CAIRN_API void PosixStore::remove(const std::string& key) { detail::remove_tree(path(key)); }

CAIRN_API std::unique_ptr<CheckpointStaging> PosixStore::stage(const std::string& key, bool overwrite) {
  const std::string final_path = path(key);
  if (final_path.empty()) throw Error(ErrorKind::invalid_argument, "empty checkpoint path");
  if (final_path.find(detail::temp_infix) != std::string::npos ||
      final_path.find(detail::legacy_old_infix) != std::string::npos)
    throw Error(ErrorKind::invalid_argument, std::string("checkpoint paths may not contain '") + detail::temp_infix +
                "' or '" + detail::legacy_old_infix + "'", final_path);
  const std::string parent = detail::parent_dir(final_path);
  if (!detail::is_directory(parent)) detail::make_dirs_durably(parent);  // (its rename's fsync of parent would not keep it)
  // The leftovers of earlier saves of this path that died: staging directories are removed,
  // and a previous checkpoint that an interrupted overwrite set aside is put back first, so
  // the overwrite rule below sees it.
  const std::string name = detail::base_name(final_path);
  detail::clean_leftovers(parent, &name);
  detail::check_target(final_path, overwrite);
  auto staging = std::make_unique<Staging>(detail::StagingClaim::create(final_path), final_path, overwrite);
  staging->key_ = detail::normalize_key(key) + staging->claim_.staging_path().substr(final_path.size());
  detail::make_dir(staging->claim_.staging_path());
  return staging;
}

CAIRN_API std::string PosixStore::readable_checkpoint(const std::string& key) const {
  const std::string p = path(key);
  // A staging directory is never loaded; a previous checkpoint set aside under a staging
  // name (".old") is complete and may be.
  if (p.find(detail::temp_infix) != std::string::npos && !p.ends_with(detail::old_suffix))
    throw Error(ErrorKind::incomplete, "this is a temporary directory of a save that has not committed; it is never "
                "loaded", p);
  const std::string found = detail::readable_checkpoint_dir(p);
  if (found == p) return key;
  return detail::join_key(detail::key_parent(detail::normalize_key(key)), detail::base_name(found));
}

CAIRN_API bool PosixStore::is_internal_name(const std::string& name) const {
  return name.find(detail::temp_infix) != std::string::npos || name.find(detail::legacy_old_infix) != std::string::npos;
}

CAIRN_API void PosixStore::clean_leftovers(const std::string& prefix) { detail::clean_leftovers(path(prefix)); }

CAIRN_API void PosixStore::remove_checkpoints(const std::vector<std::string>& keys) {
  std::vector<detail::StagingClaim> doomed;
  std::set<std::string> parents;
  for (const auto& key : keys) {
    const std::string from = path(key);
    detail::StagingClaim claim = detail::StagingClaim::create(from);
    detail::rename_path(from, claim.staging_path());
    doomed.push_back(std::move(claim));
    parents.insert(detail::parent_dir(from));
  }
  for (const auto& p : parents) detail::fsync_dir(p);
  for (auto& d : doomed) {
    detail::remove_tree(d.staging_path());
    d.release();
  }
}

CAIRN_API void PosixStore::write_atomically(const std::string& key, const std::string& content) {
  const std::string p = path(key);
  detail::make_dirs_durably(detail::parent_dir(p));
  detail::StagingClaim claim = detail::StagingClaim::create(p);
  detail::write_whole_file(claim.staging_path(), content);
  detail::rename_path(claim.staging_path(), p);
  detail::fsync_dir(detail::parent_dir(p));
}

CAIRN_API bool PosixStore::share_blob(const Store& from_store, const std::string& from, const std::string& to) {
  const auto* posix = dynamic_cast<const PosixStore*>(&from_store);
  if (!posix) return false;
  const std::string src = posix->path(from), dst = path(to);
  if (!detail::is_regular_file(src)) return false;  // never a link to a directory or a device
  std::error_code ec;
  std::filesystem::create_directories(detail::parent_dir(dst), ec);
  if (ec) throw Error(ErrorKind::io, "cannot create parent directory: " + ec.message(), detail::parent_dir(dst));
  int err = detail::injected_fault("link", dst);
  if (!err && ::link(src.c_str(), dst.c_str()) != 0) err = errno;
  if (err == EXDEV || err == EPERM || err == ENOTSUP || err == EOPNOTSUPP || err == EMLINK) return false;  // copy instead
  if (err) detail::throw_errno("link", dst, err);
  detail::fsync_dir(detail::parent_dir(dst));
  return true;
}

CAIRN_API std::string PosixStore::follow_link(const std::string& key) const {
  const std::string p = path(key);
  std::error_code ec;
  if (!std::filesystem::is_symlink(std::filesystem::symlink_status(p, ec))) return key;
  const std::filesystem::path target = std::filesystem::canonical(p, ec);
  if (ec) throw Error(ErrorKind::not_found, "a symbolic link whose target cannot be reached (" + ec.message() + ")", p);
  if (root_.empty()) return target.string();
  const std::filesystem::path root = std::filesystem::canonical(root_, ec);
  const std::filesystem::path rel = ec ? std::filesystem::path() : target.lexically_relative(root);
  if (rel.empty() || *rel.begin() == "..")
    throw Error(ErrorKind::invalid_argument, "a symbolic link that leads out of the store's root (" + root_ + ") to " +
                target.string(), p);
  return rel.string();
}

CAIRN_API std::unique_ptr<StoreWriter> PosixStore::create_atomically(const std::string& key, bool overwrite) {
  const std::string p = path(key);
  AtomicWriter::check_target(p, overwrite);
  // (finish() fsyncs the file's directory; a directory made here is fsynced into its own)
  detail::make_dirs_durably(detail::parent_dir(p));
  return std::make_unique<AtomicWriter>(detail::StagingClaim::create(p), p, overwrite);
}

CAIRN_END_NAMESPACE
