// SPDX-License-Identifier: Apache-2.0
// POSIX file access for checkpoints: positioned reads and writes that finish or throw,
// fsync of files and directories, and the renames that commit a checkpoint atomically.
// Every failure is a cairn::Error naming the file and the call that failed.
//
// Every system call here first asks injected_fault(), a test seam in the manner of {fmt}'s
// posix-mock: tests make the Nth write, fsync, close or rename fail (or stop the process
// there) without a special filesystem. In a program that sets no hook it is one load of a
// null pointer per call.
#pragma once

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <new>
#include <string>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <stdio.h>
#include <climits>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "cairn/core/error.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

[[noreturn]] inline void throw_errno(const char* call, const std::string& file, int err = errno) {
  throw Error(err == ENOENT ? ErrorKind::not_found : ErrorKind::io,
              std::string(call) + " failed: " + std::strerror(err), file);
}

// The fault-injection seam: a hook that returns an errno value to make the named call fail
// ("open", "pread", "pwrite", "ftruncate", "fsync", "close", "mkdir", "rename", "renameat2",
// "remove", "fcntl" for the claim locks of store/posix_staging.hpp and for a read's clearing
// of O_NONBLOCK, and "mincore", whose failure only means "not cached"), or 0 to let it run.
// EAGAIN at "pread" is handled as a filesystem's real one (File::retry_blocking).
// Tests only.
using FaultHook = int (*)(const char* call, const std::string& path);
inline std::atomic<FaultHook>& fault_hook() {
  static std::atomic<FaultHook> hook{nullptr};
  return hook;
}
inline int injected_fault(const char* call, const std::string& path) {
  const FaultHook h = fault_hook().load(std::memory_order_relaxed);
  return h ? h(call, path) : 0;
}

class File {
 public:
  File() = default;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  File(File&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)), blocking_(o.blocking_.load()) { o.fd_ = -1; }
  File& operator=(File&& o) noexcept {
    if (this != &o) { close_quietly(); fd_ = o.fd_; path_ = std::move(o.path_); blocking_ = o.blocking_.load(); o.fd_ = -1; }
    return *this;
  }
  ~File() { close_quietly(); }

  // Opens a file of a checkpoint for reading. Only a regular file is accepted: a symbolic
  // link (which could lead out of the checkpoint) is refused, and a FIFO or device, which
  // could block the load forever, is refused without blocking (opened with O_NONBLOCK).
  // `size`, where given, gets the file's size from the check's fstat (a second fstat per file
  // was a seventh of the system calls of a load of 10,000 one-chunk files).
  // O_NONBLOCK stays set: it "has no effect for regular files" (open(2); POSIX leaves it
  // unspecified), and the fcntl that cleared it was a fifth of the system calls of a load of
  // a file per chunk (docs/benchmarks.md, "Orbax import"). Should a filesystem answer EAGAIN
  // all the same, the read clears it then and tries again (retry_blocking).
  static File open_read(const std::string& path, std::uint64_t* size = nullptr) {
    if (int e = injected_fault("open", path)) throw_errno("open", path, e);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
      if (errno == ELOOP) throw Error(ErrorKind::corrupt, "is a symbolic link; cairn reads only regular files inside a checkpoint", path);
      throw_errno("open", path);
    }
    File f(fd, path);
    struct stat st;
    if (::fstat(fd, &st) != 0) throw_errno("fstat", path);
    if (!S_ISREG(st.st_mode)) throw Error(ErrorKind::corrupt, "is not a regular file (a directory, FIFO or device)", path);
    if (size) *size = static_cast<std::uint64_t>(st.st_size);
    return f;
  }
  // A new file; fails if it exists (checkpoint files are written once, into a fresh directory).
  static File create(const std::string& path) {
    if (int e = injected_fault("open", path)) throw_errno("open (create)", path, e);
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
    if (int e = injected_fault("pwrite", path_)) throw_errno("pwrite", path_, e);
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
    if (int e = injected_fault("pread", path_); e && !injected_eagain_retried(e)) throw_errno("pread", path_, e);
    while (n > 0) {
      const std::size_t step = static_cast<std::size_t>(std::min<std::uint64_t>(n, 1u << 30));
      ssize_t r = ::pread(fd_, p, step, static_cast<off_t>(offset));
      if (r < 0) {
        if (errno == EINTR || retry_blocking()) continue;
        throw_errno("pread", path_);
      }
      if (r == 0) throw Error(ErrorKind::corrupt, "file ends at byte " + std::to_string(offset) + ", before the data its metadata describes (truncated?)", path_);
      p += r;
      n -= static_cast<std::uint64_t>(r);
      offset += static_cast<std::uint64_t>(r);
    }
  }

  // About how many of the n bytes at `offset` are in the page cache, so that reading them
  // waits for no disk (cached_file_bytes below). Any failure says 0: the answer only chooses
  // how to read.
  std::uint64_t cached_bytes(std::uint64_t offset, std::uint64_t n, int samples = 8) const {
    if (n == 0 || samples < 1 || injected_fault("mincore", path_)) return 0;
    return cached_file_bytes(fd_, offset, n, samples);
  }

  // The share of `samples` pages spread over the range that mincore finds resident, over a
  // temporary mapping (mapping a range of a file reads nothing). Sampled, since mincore over
  // all 4,096 pages of 16 MiB took 80 us here against 17 us for 8 pages. Any failure says 0.
  static std::uint64_t cached_file_bytes(int fd, std::uint64_t offset, std::uint64_t n, int samples = 8) {
    if (n == 0 || samples < 1) return 0;
    static const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    const std::uint64_t start = offset / page * page;
    const std::size_t len = static_cast<std::size_t>(offset + n - start);
    void* map = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(start));
    if (map == MAP_FAILED) return 0;
    const std::uint64_t pages = (len + page - 1) / page;
    const std::uint64_t checks = std::min<std::uint64_t>(pages, static_cast<std::uint64_t>(samples));
    std::uint64_t resident = 0;
    for (std::uint64_t i = 0; i < checks; ++i) {
      const std::uint64_t at = checks == 1 ? 0 : i * (pages - 1) / (checks - 1);  // first and last page included
      unsigned char r = 0;
      if (::mincore(static_cast<char*>(map) + at * page, static_cast<std::size_t>(page), &r) != 0) {
        resident = 0;
        break;
      }
      resident += r & 1;
    }
    ::munmap(map, len);
    return n / checks * resident + (resident == checks ? n % checks : 0);
  }

  // Fills the buffers of `iov` in turn from `offset` on, with preadv (up to IOV_MAX buffers a
  // call): many small leaves straight into their targets in a few system calls. Exactly the
  // bytes asked for, or throws as read_at does. `iov` is used up (advanced past short reads).
  void read_vectored(std::vector<iovec>& iov, std::uint64_t offset) const {
    if (int e = injected_fault("pread", path_); e && !injected_eagain_retried(e)) throw_errno("pread", path_, e);
    vectored(iov, offset, "preadv", [&](const iovec* v, int k, off_t at) { return ::preadv(fd_, v, k, at); }, [&](std::uint64_t at) {
      throw Error(ErrorKind::corrupt, "file ends at byte " + std::to_string(at) + ", before the data its metadata describes (truncated?)", path_);
    });
  }

  // Writes `count` pieces (each with `src` and `n`: a store's WritePiece) one after another
  // from `offset` on, with pwritev (up to IOV_MAX buffers a call): many small values from
  // where they lie in a few system calls (GatheredWriter, through PosixStore's writers).
  template <class Piece>
  void write_vectored(const Piece* pieces, std::size_t count, std::uint64_t offset) {
    if (int e = injected_fault("pwrite", path_)) throw_errno("pwrite", path_, e);
    std::vector<iovec> iov;
    iov.reserve(count);
    for (std::size_t i = 0; i < count; ++i) iov.push_back({const_cast<void*>(pieces[i].src), static_cast<std::size_t>(pieces[i].n)});
    vectored(iov, offset, "pwritev", [&](const iovec* v, int k, off_t at) { return ::pwritev(fd_, v, k, at); }, [&](std::uint64_t at) {
      throw Error(ErrorKind::io, "pwritev wrote nothing at byte " + std::to_string(at), path_);
    });
  }

  void truncate(std::uint64_t size) {
    if (int e = injected_fault("ftruncate", path_)) throw_errno("ftruncate", path_, e);
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) throw_errno("ftruncate", path_);
  }
  void sync() {
    if (int e = injected_fault("fsync", path_)) throw_errno("fsync", path_, e);
    if (::fsync(fd_) != 0) throw_errno("fsync", path_);
  }
  // On NFS and parallel filesystems close() is where delayed write errors surface, so a
  // failed close fails the save.
  void close() {
    if (fd_ >= 0) {
      int fd = fd_;
      fd_ = -1;
      const int injected = injected_fault("close", path_);
      if (::close(fd) != 0) throw_errno("close", path_);
      if (injected) throw_errno("close", path_, injected);
    }
  }

 private:
  // read_vectored's and write_vectored's loop: `call` (preadv or pwritev) on up to IOV_MAX
  // buffers at a time; a short transfer goes on from where it stopped, mid-buffer if need be;
  // a call that moves no byte is `nothing`'s error (given the offset).
  template <class Call, class Nothing>
  void vectored(std::vector<iovec>& iov, std::uint64_t offset, const char* call_name, Call&& call, Nothing&& nothing) const {
    constexpr std::size_t batch = std::min<std::size_t>(IOV_MAX, 1024);
    for (std::size_t next = 0; next < iov.size();) {
      if (iov[next].iov_len == 0) { ++next; continue; }
      const std::size_t k = std::min(batch, iov.size() - next);
      const ssize_t n = call(&iov[next], static_cast<int>(k), static_cast<off_t>(offset));
      if (n < 0) {
        if (errno == EINTR || retry_blocking()) continue;
        throw_errno(call_name, path_);
      }
      if (n == 0) nothing(offset);
      offset += static_cast<std::uint64_t>(n);
      for (auto left = static_cast<std::size_t>(n); left > 0;) {
        if (left >= iov[next].iov_len) {
          left -= iov[next].iov_len;
          ++next;
        } else {
          iov[next].iov_base = static_cast<char*>(iov[next].iov_base) + left;
          iov[next].iov_len -= left;
          left = 0;
        }
      }
    }
  }

  // After a read failed with EAGAIN on a file opened with O_NONBLOCK (open_read): clears
  // the flag and says to try again, once. O_NONBLOCK is the one file status flag open_read
  // sets (O_CLOEXEC and O_NOFOLLOW are none, and F_SETFL leaves the access mode), so setting
  // none clears it without asking for the flags first.
  bool retry_blocking() const {
#if EAGAIN == EWOULDBLOCK
    if (errno != EAGAIN) return false;
#else
    if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
#endif
    if (blocking_) return false;  // cleared already: a real EAGAIN, which the caller reports
    if (int e = injected_fault("fcntl", path_)) throw_errno("fcntl", path_, e);
    if (::fcntl(fd_, F_SETFL, 0) != 0) throw_errno("fcntl", path_);
    blocking_ = true;
    return true;
  }

  // An EAGAIN injected at "pread" stands for a filesystem that honours O_NONBLOCK on a
  // regular file: handled as a real one is (the tests' only way to reach retry_blocking).
  bool injected_eagain_retried(int e) const {
    errno = e;
    return retry_blocking();
  }

  File(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  void close_quietly() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
  std::string path_;
  mutable std::atomic<bool> blocking_{false};  // O_NONBLOCK cleared (retry_blocking); reads may run on several threads
};

// Reads up to the first `bytes` of the file at `path` into a scratch buffer, 256 KiB a step,
// so that the page cache holds them when a load reads them into its targets: the read-ahead
// of a load that is parsing its metadata (PosixStore::read_ahead, checkpoint/read_ahead.hpp).
// 4 MiB windows that are mostly cached already are skipped (a warm load costs it a few
// mincore calls). Returns at `stop`, at the end of the file, and at any failure, which it
// does not report: this is a hint, and what the load reads is checked where it reads it.
// Returns how many bytes from the start it covered (read, or skipped as cached).
// Only a regular file is read (a FIFO or device is left alone, as File::open_read refuses
// them). Not a fault-injection site: the hint's calls come from another thread, at times that
// differ from run to run, and a test that counts a load's calls must see the same ones each
// time.
inline std::uint64_t prefetch_file(const std::string& path, std::uint64_t bytes, const std::atomic<bool>& stop) noexcept {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return 0;
  std::uint64_t at = 0;
  struct stat st;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    constexpr std::uint64_t step = 256 << 10, window = 4 << 20;
    const std::uint64_t end = std::min(bytes, static_cast<std::uint64_t>(st.st_size));
    std::unique_ptr<char[]> scratch(new (std::nothrow) char[step]);
    std::uint64_t next_check = 0;
    while (scratch && at < end && !stop.load(std::memory_order_relaxed)) {
      if (at >= next_check) {
        const std::uint64_t n = std::min(window, end - at);
        next_check = at + n;
        if (File::cached_file_bytes(fd, at, n) >= n / 4 * 3) {
          at += n;
          continue;
        }
      }
      const ssize_t r = ::pread(fd, scratch.get(), static_cast<std::size_t>(std::min(step, next_check - at)), static_cast<off_t>(at));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      at += static_cast<std::uint64_t>(r);
    }
  }
  ::close(fd);
  return at;
}

// Whether most of the first `bytes` of the file at `path` (or of all of it) are in the page
// cache: a sample of pages over that head, as File::cached_bytes takes it. False on any
// failure. Not a fault-injection site, for the reason prefetch_file gives.
inline bool file_head_cached(const std::string& path, std::uint64_t bytes) noexcept {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return false;
  bool cached = false;
  struct stat st;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    const std::uint64_t n = std::min(bytes, static_cast<std::uint64_t>(st.st_size));
    cached = n == 0 || File::cached_file_bytes(fd, 0, n) >= n / 4 * 3;
  }
  ::close(fd);
  return cached;
}

inline void write_whole_file(const std::string& path, const std::string& content) {
  File f = File::create(path);
  f.write_at(content.data(), content.size(), 0);
  f.sync();
  f.close();
}

inline void fsync_dir(const std::string& dir) {
  if (int e = injected_fault("fsync", dir)) throw_errno("fsync (directory)", dir, e);
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_errno("open (directory)", dir);
  int rc = ::fsync(fd);
  int err = errno;
  const int injected = injected_fault("close", dir);
  if (::close(fd) != 0 && rc == 0) { rc = -1; err = errno; }
  if (rc != 0) throw_errno("fsync (directory)", dir, err);
  if (injected) throw_errno("close (directory)", dir, injected);
}

inline void make_dir(const std::string& dir) {
  if (int e = injected_fault("mkdir", dir)) throw_errno("mkdir", dir, e);
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

inline bool is_regular_file(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

inline void rename_path(const std::string& from, const std::string& to) {
  if (int e = injected_fault("rename", from)) throw_errno("rename", from + " -> " + to, e);
  if (::rename(from.c_str(), to.c_str()) != 0) throw_errno("rename", from + " -> " + to);
}

// Renames `from` to `to` only where nothing is at `to`, in one step: two saves racing to one
// new path cannot both publish, and the loser's returns false with nothing moved. Linux's
// renameat2 RENAME_NOREPLACE where the kernel and filesystem have it. Where they have not
// (EINVAL: some network and FUSE filesystems), the fallback keeps the guarantee for what cairn
// publishes: a file is linked (link(2) never replaces) and the staging name unlinked; a
// directory is renamed with rename(2), which fails on a non-empty directory and replaces only
// an empty one (holding nothing to lose: a published checkpoint is never empty). The fault
// name is "renameat2" (EINVAL selects the fallback, as on such filesystems).
inline bool rename_no_replace(const std::string& from, const std::string& to, bool directory) {
  auto exists = [](int e) { return e == EEXIST || e == ENOTEMPTY; };
  bool fallback = false;
#if defined(__linux__) && defined(RENAME_NOREPLACE)
  if (int e = injected_fault("renameat2", from)) {
    if (e != EINVAL && e != ENOSYS && e != ENOTSUP) throw_errno("renameat2 (no replace)", from + " -> " + to, e);
    fallback = true;
  } else if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) {
    return true;
  } else if (exists(errno)) {
    return false;
  } else if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) {
    fallback = true;
  } else {
    throw_errno("renameat2 (no replace)", from + " -> " + to);
  }
#else
  fallback = true;
#endif
  (void)fallback;
  if (directory) {
    if (int e = injected_fault("rename", from)) throw_errno("rename", from + " -> " + to, e);
    if (::rename(from.c_str(), to.c_str()) == 0) return true;
    if (exists(errno)) return false;
    throw_errno("rename", from + " -> " + to);
  }
  if (int e = injected_fault("rename", from)) throw_errno("link", from + " -> " + to, e);
  if (::link(from.c_str(), to.c_str()) != 0) {
    if (errno == EEXIST) return false;
    throw_errno("link", from + " -> " + to);
  }
  ::unlink(from.c_str());  // the staging name; the published file is `to` from here on
  return true;
}

// Atomically swap two paths (Linux renameat2 RENAME_EXCHANGE). Returns false where the
// kernel or filesystem does not support it, so the caller can fall back.
inline bool exchange_paths(const std::string& a, const std::string& b) {
#if defined(__linux__) && defined(RENAME_EXCHANGE)
  if (int e = injected_fault("renameat2", a)) {
    if (e == EINVAL || e == ENOSYS || e == ENOTSUP) return false;
    throw_errno("renameat2 (exchange)", a + " <-> " + b, e);
  }
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0) return true;
  if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) return false;
  throw_errno("renameat2 (exchange)", a + " <-> " + b);
#else
  (void)a; (void)b;
  return false;
#endif
}

inline void remove_tree(const std::string& p) {
  if (int e = injected_fault("remove", p)) throw_errno("remove_all", p, e);
  std::error_code ec;
  std::filesystem::remove_all(p, ec);
  if (ec) throw Error(ErrorKind::io, "remove_all failed: " + ec.message(), p);
}

inline std::string parent_dir(const std::string& p) {
  std::filesystem::path parent = std::filesystem::path(p).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

// `mkdir -p` whose directories stay made: each one made here is fsynced into its parent, as
// a new file is (a name is on disk only once the directory holding it is fsynced; on a
// filesystem without a journal, or with one that does not order metadata, a crash could
// otherwise take a new directory away under a checkpoint published in it). Another process
// making one of them meanwhile is no error.
inline void make_dirs_durably(const std::string& dir) {
  std::vector<std::string> missing;  // deepest first
  for (std::string p = dir; !p.empty() && p != "." && p != "/" && !is_directory(p); p = parent_dir(p))
    missing.push_back(p);
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (int e = injected_fault("mkdir", *it)) throw_errno("mkdir", *it, e);
    if (::mkdir(it->c_str(), 0777) != 0) {
      if (errno != EEXIST || !is_directory(*it)) throw_errno("mkdir", *it);
      continue;  // made by someone else, who makes it durable
    }
    fsync_dir(parent_dir(*it));
  }
}

}  // namespace detail
CAIRN_END_NAMESPACE
