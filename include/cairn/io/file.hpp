// POSIX file access for checkpoints: positioned reads and writes that finish or throw,
// fsync of files and directories, and the renames that commit a checkpoint atomically.
// Every failure is a cairn::Error naming the file and the call that failed.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cairn/core/error.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

[[noreturn]] inline void throw_errno(const char* call, const std::string& file, int err = errno) {
  throw Error(err == ENOENT ? ErrorKind::not_found : ErrorKind::io,
              std::string(call) + " failed: " + std::strerror(err), file);
}

class File {
 public:
  File() = default;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  File(File&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }
  File& operator=(File&& o) noexcept {
    if (this != &o) { close_quietly(); fd_ = o.fd_; path_ = std::move(o.path_); o.fd_ = -1; }
    return *this;
  }
  ~File() { close_quietly(); }

  static File open_read(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw_errno("open", path);
    return File(fd, path);
  }
  // A new file; fails if it exists (checkpoint files are written once, into a fresh directory).
  static File create(const std::string& path) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) throw_errno("open (create)", path);
    return File(fd, path);
  }

  const std::string& path() const { return path_; }
  int fd() const { return fd_; }

  std::uint64_t size() const {
    struct stat st;
    if (::fstat(fd_, &st) != 0) throw_errno("fstat", path_);
    return static_cast<std::uint64_t>(st.st_size);
  }

  void write_at(const void* data, std::uint64_t n, std::uint64_t offset) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const std::size_t step = static_cast<std::size_t>(std::min<std::uint64_t>(n, 1u << 30));
      ssize_t w = ::pwrite(fd_, p, step, static_cast<off_t>(offset));
      if (w < 0) {
        if (errno == EINTR) continue;
        throw_errno("pwrite", path_);
      }
      p += w;
      n -= static_cast<std::uint64_t>(w);
      offset += static_cast<std::uint64_t>(w);
    }
  }

  // Reads exactly n bytes or throws: a short read means the file is shorter than its
  // metadata says (truncated).
  void read_at(void* data, std::uint64_t n, std::uint64_t offset) const {
    char* p = static_cast<char*>(data);
    while (n > 0) {
      const std::size_t step = static_cast<std::size_t>(std::min<std::uint64_t>(n, 1u << 30));
      ssize_t r = ::pread(fd_, p, step, static_cast<off_t>(offset));
      if (r < 0) {
        if (errno == EINTR) continue;
        throw_errno("pread", path_);
      }
      if (r == 0) throw Error(ErrorKind::corrupt, "file ends at byte " + std::to_string(offset) + ", before the data its metadata describes (truncated?)", path_);
      p += r;
      n -= static_cast<std::uint64_t>(r);
      offset += static_cast<std::uint64_t>(r);
    }
  }

  void truncate(std::uint64_t size) {
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) throw_errno("ftruncate", path_);
  }
  void sync() {
    if (::fsync(fd_) != 0) throw_errno("fsync", path_);
  }
  void close() {
    if (fd_ >= 0) {
      int fd = fd_;
      fd_ = -1;
      if (::close(fd) != 0) throw_errno("close", path_);
    }
  }

 private:
  File(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  void close_quietly() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
  std::string path_;
};

inline void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_errno("open (directory)", dir);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) throw_errno("fsync (directory)", dir, err);
}

inline void make_dir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0) throw_errno("mkdir", dir);
}

inline bool path_exists(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0;
}

inline bool is_directory(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

inline void rename_path(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) throw_errno("rename", from + " -> " + to);
}

// Atomically swap two paths (Linux renameat2 RENAME_EXCHANGE). Returns false where the
// kernel or filesystem does not support it, so the caller can fall back.
inline bool exchange_paths(const std::string& a, const std::string& b) {
#if defined(__linux__) && defined(RENAME_EXCHANGE)
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0) return true;
  if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) return false;
  throw_errno("renameat2 (exchange)", a + " <-> " + b);
#else
  (void)a; (void)b;
  return false;
#endif
}

inline void remove_tree(const std::string& p) {
  std::error_code ec;
  std::filesystem::remove_all(p, ec);
  if (ec) throw Error(ErrorKind::io, "remove_all failed: " + ec.message(), p);
}

inline std::string parent_dir(const std::string& p) {
  std::filesystem::path parent = std::filesystem::path(p).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

// A path without trailing separators, so "ckpt/100/" and "ckpt/100" name one checkpoint.
inline std::string normalize_dir(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

}  // namespace detail
CAIRN_END_NAMESPACE
