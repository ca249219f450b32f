// SPDX-License-Identifier: Apache-2.0
// The commit mechanics of PosixStore: how a checkpoint directory appears at its final path
// all at once, how an existing one is replaced, and how the leftovers of interrupted saves
// are told apart from the work of saves that are still running. (The order of a save's steps
// across ranks is checkpoint/commit.hpp; this file is what "stage" and "publish" mean on a
// POSIX filesystem.)
//
// Names beside a final path F (all contain ".cairn-tmp-", which load refuses):
//
//   F.cairn-tmp-<token>.lock   the claim: a lock file, created and locked (an open-file-description
//                              lock, fcntl F_OFD_SETLK) before anything below exists, and
//                              unlinked only after everything below is gone
//   F.cairn-tmp-<token>        the staging directory of a save; or a step being deleted; or the
//                              temporary file of a `latest` marker
//   F.cairn-tmp-<token>.old    the previous checkpoint of F, set aside while an overwrite runs on
//                              a filesystem that cannot exchange two directories atomically
//
// A cleaner (the next save of F, a Checkpointer starting on the root) removes a group only when
// it can lock the group's lock file itself, or when there is none: then the process that made
// it has died, on this host or another (NFS releases the locks of dead clients). A lock held
// by a live save, in this process (open-file-description locks conflict between two opens in
// one process) or any other, keeps the group. Where the filesystem cannot lock at all, nothing
// is removed automatically. A set-aside `.old` checkpoint is moved back to F when F holds no
// committed checkpoint, and removed when it does; until then `load` reads F from it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cairn/core/parallel.hpp"
#include "cairn/io/file.hpp"
#include "cairn/store/store.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

inline constexpr const char* temp_infix = ".cairn-tmp-";
// A previous checkpoint set aside under a staging name during an overwrite.
inline constexpr const char* old_suffix = ".old";
inline constexpr const char* lock_suffix = ".lock";
// Set-aside checkpoints of cairn 0.1's overwrite fallback: F.cairn-old-<pid>, never locked.
inline constexpr const char* legacy_old_infix = ".cairn-old-";

// A directory that holds a commit marker (a regular file; its contents are checked on read).
inline bool is_committed_checkpoint(const std::string& dir) { return is_regular_file(join_key(dir, commit_marker_name)); }

// A directory that overwrite may replace whole: a committed checkpoint, or a safetensors set
// (store.hpp, set_index_name).
inline bool is_replaceable(const std::string& dir) {
  return is_committed_checkpoint(dir) || is_regular_file(join_key(dir, set_index_name));
}

inline bool is_empty_dir(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::is_directory(std::filesystem::symlink_status(dir, ec)) && std::filesystem::is_empty(dir, ec);
}

inline std::string base_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

enum class LockResult { taken, held_elsewhere, unsupported };

// An exclusive, non-blocking lock on an open file. Open-file-description locks belong to the
// open file, not the process, so two Checkpointers in one process exclude each other.
inline LockResult try_lock(int fd, const std::string& path) {
  if (int e = injected_fault("fcntl", path)) {
    errno = e;
    return e == EAGAIN || e == EACCES || e == EWOULDBLOCK ? LockResult::held_elsewhere : LockResult::unsupported;
  }
#if defined(F_OFD_SETLK)
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  if (::fcntl(fd, F_OFD_SETLK, &fl) == 0) return LockResult::taken;
  if (errno == EAGAIN || errno == EACCES) return LockResult::held_elsewhere;
#else
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return LockResult::taken;
  if (errno == EWOULDBLOCK) return LockResult::held_elsewhere;
#endif
  return LockResult::unsupported;
}

inline std::string new_claim_token() {
  static std::mt19937_64 rng = [] {
    std::random_device rd;
    return std::mt19937_64((std::uint64_t{rd()} << 32) ^ rd() ^ static_cast<std::uint64_t>(::getpid()));
  }();
  static std::mutex m;
  std::lock_guard<std::mutex> lock(m);
  static const char* hex = "0123456789abcdef";
  std::uint64_t v = rng();
  std::string t = std::to_string(::getpid()) + "-";
  for (int i = 0; i < 12; ++i, v >>= 4) t += hex[v & 15];
  return t;
}

// A claim on the staging names of one final path (see the top of this file). Held from before
// the staging directory exists until after it is gone.
class StagingClaim {
 public:
  StagingClaim() = default;
  StagingClaim(const StagingClaim&) = delete;
  StagingClaim& operator=(const StagingClaim&) = delete;
  StagingClaim(StagingClaim&& o) noexcept : base_(std::move(o.base_)), fd_(o.fd_) { o.fd_ = -1; }
  StagingClaim& operator=(StagingClaim&& o) noexcept {
    if (this != &o) { release(); base_ = std::move(o.base_); fd_ = o.fd_; o.fd_ = -1; }
    return *this;
  }
  ~StagingClaim() { release(); }

  static StagingClaim create(const std::string& final_path) {
    for (int attempt = 0; attempt < 100; ++attempt) {
      StagingClaim c;
      c.base_ = final_path + temp_infix + new_claim_token();
      const std::string lock = c.lock_path();
      if (int e = injected_fault("open", lock)) throw_errno("open (create)", lock, e);
      c.fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (c.fd_ < 0) {
        if (errno == EEXIST) continue;
        throw_errno("open (create)", lock);
      }
      const LockResult r = try_lock(c.fd_, lock);
      if (r == LockResult::held_elsewhere) continue;  // a cleaner took it in the instant before our lock
      // A cleaner may have locked and unlinked the file in that instant and let go: then our
      // lock is on a file nobody can find, and we start again.
      struct stat by_fd, by_name;
      if (::fstat(c.fd_, &by_fd) != 0 || ::lstat(lock.c_str(), &by_name) != 0 || by_fd.st_ino != by_name.st_ino ||
          by_fd.st_dev != by_name.st_dev)
        continue;
      (void)r;  // unsupported: no filesystem locks here, so no cleaner removes this group either
      return c;
    }
    throw Error(ErrorKind::io, "could not claim a staging name", final_path);
  }

  const std::string& staging_path() const { return base_; }
  std::string old_path() const { return base_ + old_suffix; }
  std::string lock_path() const { return base_ + lock_suffix; }

  // Unlinks the lock file, then lets go of the lock: a cleaner never finds an unlocked lock
  // file of a live claim.
  void release() noexcept {
    if (fd_ < 0) return;
    ::unlink(lock_path().c_str());
    ::close(fd_);
    fd_ = -1;
  }

 private:
  std::string base_;
  int fd_ = -1;
};

// Staging names beside one final path that belong to one claim token.
struct LeftoverGroup {
  std::string final_path, base;  // base: F.cairn-tmp-<token> (or a legacy name)
  std::vector<std::string> paths;  // everything of the group except the lock file
};

// The committed checkpoint (or set) that a set-aside `.old` holds, or the old one put back at F.
inline void restore_or_drop_old(const std::string& final_path, const std::string& old) {
  std::error_code ec;
  if (is_replaceable(final_path) || !is_replaceable(old)) {
    std::filesystem::remove_all(old, ec);
    return;
  }
  // F is absent (the crash came between the two renames) or an empty directory: rename
  // replaces either atomically. Anything else at F is left alone, and so is the old copy.
  if (path_exists(final_path) && !is_empty_dir(final_path)) return;
  try {
    rename_path(old, final_path);
    fsync_dir(parent_dir(final_path));
  } catch (const Error&) {
    // Left for the next cleaner; load reads F from the old copy meanwhile.
  }
}

// Removes the leftovers of dead saves and deletions in `dir` (those of final paths named
// `only_name`, or all), and puts back checkpoints that an interrupted overwrite set aside.
// Best effort: what cannot be removed now is left for the next time.
inline void clean_leftovers(const std::string& dir, const std::string* only_name = nullptr) {
  std::map<std::string, LeftoverGroup> groups;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec), end;
  if (ec) return;
  for (; it != end; it.increment(ec)) {
    if (ec) return;
    const std::string name = it->path().filename().string();
    std::size_t pos = name.find(temp_infix);
    const bool legacy_old = pos == std::string::npos && (pos = name.find(legacy_old_infix)) != std::string::npos;
    if (pos == std::string::npos || pos == 0) continue;
    const std::string final_name = name.substr(0, pos);
    if (only_name && final_name != *only_name) continue;
    const std::string full = join_key(dir, name);
    if (legacy_old) {
      LeftoverGroup& g = groups[full];
      g.final_path = join_key(dir, final_name);
      g.base = full;
      g.paths.push_back(full);
      continue;
    }
    const std::size_t token_start = pos + std::string(temp_infix).size();
    const std::size_t dot = name.find('.', token_start);
    const std::string base = join_key(dir, name.substr(0, dot));
    const std::string suffix = dot == std::string::npos ? "" : name.substr(dot);
    LeftoverGroup& g = groups[base];
    g.final_path = join_key(dir, final_name);
    g.base = base;
    if (suffix != lock_suffix) g.paths.push_back(full);
  }
  for (auto& [base, g] : groups) {
    // The lock file is opened whether or not the listing showed it: a listing may show a
    // staging directory created while it ran without the lock file created just before it.
    // A writer creates the lock file before anything else and unlinks it after everything
    // else, so if it is absent now, nothing of this group belongs to a live save.
    const std::string lock = base + lock_suffix;
    const int fd = ::open(lock.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0 && errno != ENOENT) continue;  // cannot tell: keep
    if (fd >= 0 && try_lock(fd, lock) != LockResult::taken) {
      ::close(fd);
      continue;  // a live save (or a filesystem without locks): keep
    }
    for (const auto& p : g.paths) {
      const bool set_aside = p.find(legacy_old_infix) != std::string::npos || p.ends_with(old_suffix);
      if (set_aside) restore_or_drop_old(g.final_path, p);
      else std::filesystem::remove_all(p, ec);
    }
    if (fd >= 0) {
      ::unlink(lock.c_str());
      ::close(fd);
    }
  }
}

// The directory to read the checkpoint at `path` from: the path itself, or, while an
// interrupted overwrite has left nothing committed there, the previous checkpoint it set aside.
inline std::string readable_checkpoint_dir(const std::string& path) {
  if (is_replaceable(path) || path.find(temp_infix) != std::string::npos) return path;
  const std::string name = base_name(path);
  if (name.empty()) return path;
  const std::string parent = parent_dir(path);
  std::error_code ec;
  std::filesystem::directory_iterator it(parent, ec), end;
  if (ec) return path;
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    const std::string entry = it->path().filename().string();
    if (entry.rfind(name, 0) != 0) continue;
    const std::string rest = entry.substr(name.size());
    const bool ours = rest.starts_with(temp_infix) && rest.ends_with(old_suffix);
    const bool legacy = rest.starts_with(legacy_old_infix);
    const std::string full = join_key(parent, entry);
    if ((ours || legacy) && is_replaceable(full)) return full;
  }
  return path;
}

// What lies at a path a save is about to publish to, and whether that may be replaced. An
// empty directory (`mkdir -p ckpt/100` before saving) is the same as nothing.
inline void check_target(const std::string& path, bool overwrite) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return;
  if (!S_ISDIR(st.st_mode))
    throw Error(ErrorKind::already_exists, S_ISLNK(st.st_mode)
                    ? "a symbolic link is at this path; cairn saves only to a directory it can replace (pass its target instead)"
                    : "a file (not a directory) is at this path; cairn will not replace it", path);
  if (is_committed_checkpoint(path)) {
    if (!overwrite) throw Error(ErrorKind::already_exists, "a checkpoint already exists here (pass overwrite to replace it)", path);
    return;
  }
  if (is_replaceable(path)) {
    if (!overwrite)
      throw Error(ErrorKind::already_exists, "a sharded safetensors set already exists here (pass overwrite to replace it)", path);
    return;
  }
  if (is_empty_dir(path)) return;
  throw Error(ErrorKind::already_exists,
              "this directory is not empty and holds no cairn checkpoint (no " + std::string(commit_marker_name) +
                  "); cairn will not write into it or replace it, even with overwrite. Save to a new path or an empty "
                  "directory",
              path);
}

// Makes every name in the staged tree at `dir` durable before it is published: each file was
// fsynced as it was finished, but its name is on disk only once the directory holding it is
// fsynced, and a subdirectory's (an Orbax export's state/d/) only once its parent is. Without
// this, on a filesystem without a journal (or one that does not order its metadata), a crash
// after the rename could show a published checkpoint without a file under a subdirectory.
// Each directory's fsync waits on the disk, not the CPU: many (an Orbax export of a directory
// per parameter has two per array) go on up to eight threads. Links are not followed.
inline void fsync_tree(const std::string& dir) {
  std::vector<std::string> dirs{dir};
  std::error_code ec;
  for (std::filesystem::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    if (it->is_directory(type_ec) && !it->is_symlink(type_ec)) dirs.push_back(it->path().string());
  }
  if (ec) throw Error(ErrorKind::io, "cannot list the staged checkpoint: " + ec.message(), dir);
  for_each_index(dirs.size(), dirs.size() > 8 ? 8 : 1, [&](std::size_t i) { fsync_dir(dirs[i]); });
}

// Publishes the complete staging directory at `final_path`: one rename where nothing (or an
// empty directory) is there; an atomic exchange with the previous checkpoint where the
// filesystem has one (renameat2 RENAME_EXCHANGE); otherwise the previous checkpoint is set
// aside under the claim's `.old` name first, and put back if the second rename fails.
// Until this returns, F holds either the previous complete checkpoint or the new one; a crash
// between the fallback's two renames leaves F empty for a moment, and then load reads the
// old one, and the next save or Checkpointer puts it back. Errors after the publish are
// ErrorKind::after_commit.
inline void publish(const StagingClaim& claim, const std::string& final_path, bool overwrite) {
  const std::string parent = parent_dir(final_path);
  const std::string& staged = claim.staging_path();
  check_target(final_path, overwrite);  // again: something may have appeared while we wrote
  std::optional<std::string> previous;  // where the replaced checkpoint is now, to be removed
  // A new path (nothing there, or an empty directory) is published with a rename that fails
  // when something is there by then (rename_no_replace): of two saves racing to one new path,
  // one publishes and the other gets already_exists, the winner's checkpoint untouched. (A
  // check followed by a plain rename, or by an exchange, let both succeed and lost one.)
  bool published = false;
  for (int attempt = 0; attempt < 3 && !published; ++attempt) {
    // An empty directory goes first (rmdir fails when it is not empty by then).
    if (is_empty_dir(final_path) && ::rmdir(final_path.c_str()) != 0 && errno != ENOENT && errno != ENOTEMPTY &&
        errno != EEXIST)
      throw_errno("rmdir", final_path);
    if (path_exists(final_path) && !is_empty_dir(final_path)) break;
    published = rename_no_replace(staged, final_path, true);
  }
  if (!published) {
    // Something is there: a checkpoint another save published meanwhile is already_exists
    // without overwrite (check_target throws), and replaced atomically with it.
    check_target(final_path, overwrite);
    if (!path_exists(final_path) || is_empty_dir(final_path))
      throw Error(ErrorKind::io, "the path kept changing while this save published to it (a directory made and "
                  "removed by another program?)", final_path);
    if (exchange_paths(staged, final_path)) {
      previous = staged;
    } else {
      const std::string old = claim.old_path();
      rename_path(final_path, old);
      try {
        rename_path(staged, final_path);
      } catch (...) {
        try { rename_path(old, final_path); } catch (const Error&) { /* the next cleaner puts it back */ }
        throw;
      }
      previous = old;
    }
  }
  try {
    fsync_dir(parent);
  } catch (const Error& e) {
    throw after_commit_error(e, "making the rename durable (fsync of the parent directory)");
  }
  if (previous) {
    try {
      remove_tree(*previous);
      fsync_dir(parent);
    } catch (const Error& e) {
      throw after_commit_error(e, "removing the replaced checkpoint");
    }
  }
}

}  // namespace detail
CAIRN_END_NAMESPACE
