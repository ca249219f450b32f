// SPDX-License-Identifier: Apache-2.0
// Many whole small files read with a few system calls: io_uring on Linux. A load of a
// checkpoint of a file per chunk (Orbax's directory per parameter) opens 20,000 files for
// 10,000 small arrays; one system call at a time that is four calls per file (open, fstat,
// pread, close: File::open_read), and on a VM whose every call is dear those calls are most of
// the load (docs/benchmarks.md, "Orbax import", 2026-12-01). Here the calls of up to 64 files
// go to the kernel together: each batch opens every file, reads each one's first 4 KiB (its
// limit and a byte more, where that is less), and closes them all: three io_uring_enter calls
// a batch. A file that fits is read whole with no further call. One that fills its read,
// reads empty or would wait for the disk is checked with a statx of its descriptor
// (File::open_read's fstat check, on the file that was opened, so nothing can be swapped in
// between) and, where it is a regular file within its limit, its rest read in a fourth round.
// The files are opened relative to the directory the batch's paths share, opened once, so that
// each open looks up only the rest of its path.
//
// Only a fast path: a file it does not read whole (missing, no regular file, over the limit,
// changed meanwhile, a kernel without these operations, anything unusual) is left for the
// caller to read the ordinary way, which reports what is wrong exactly as before. One
// difference, by design (step 2 below): a FIFO whose writer has put a few bytes in it may be
// read as those bytes, where the ordinary read refuses it as no regular file; it is never
// waited on. Where there is no io_uring (another OS, a kernel built without it, or a seccomp
// profile that refuses it, as container runtimes often do) or a fault-injection hook is set
// (tests count and fail the ordinary calls), it reads nothing. Raw system calls through
// <linux/io_uring.h>: no liburing.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "cairn/core/config.hpp"
#include "cairn/io/file.hpp"

#if defined(__linux__) && __has_include(<linux/io_uring.h>)
#include <linux/io_uring.h>
#include <sys/syscall.h>
#endif
// The operations used here came with Linux 5.6, as did this feature flag: older headers lack them.
#if defined(IORING_FEAT_CUR_PERSONALITY) && defined(__NR_io_uring_setup) && defined(__NR_io_uring_enter) && defined(__NR_statx)
#define CAIRN_HAS_IO_URING 1
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#else
#define CAIRN_HAS_IO_URING 0
#endif

CAIRN_BEGIN_NAMESPACE
namespace detail {

// One whole file to read: `path` and the most bytes it may hold. read_files_batched sets
// `bytes` and `done` for each file it read whole.
struct WholeFileRead {
  std::string path;
  std::uint64_t limit = 0;
  std::string bytes;
  bool done = false;
};

// Fewer files than this are read the ordinary way: setting up a ring and tearing it down (a
// system call, three mappings, their removal) took about 100 us on the 2-core VM of
// docs/benchmarks.md, where 16 files took 106 us one at a time and 179 us batched, and 64
// files 466 us and 282 us (2026-12-01).
inline constexpr std::size_t batched_read_min = 32;

#if CAIRN_HAS_IO_URING

// The seam for testing a ring that refuses entries: where set, each io_uring_enter of
// read_files_batched goes through it, with the arguments and the call itself, and it returns
// what the call would (-1 with errno set for a failure). Tests only.
using UringEnterHook = long (*)(int ring, unsigned to_submit, unsigned min_complete, unsigned flags,
                                long (*enter)(int ring, unsigned to_submit, unsigned min_complete, unsigned flags));
inline std::atomic<UringEnterHook>& uring_enter_hook() {
  static std::atomic<UringEnterHook> hook{nullptr};
  return hook;
}

// How many files read_files_batched checked with a statx (those that filled their first read,
// read empty or would have waited for the disk) in this process. Tests count by it that a file
// that fits its first read costs no system call of its own.
inline std::atomic<std::uint64_t>& batched_read_checks() {
  static std::atomic<std::uint64_t> checks{0};
  return checks;
}

// A submission and completion ring of one thread, used for one call of read_files_batched.
class UringBatch {
 public:
  static constexpr unsigned files_per_batch = 64;
  // A file's first read asks for this much at most: a zarr.json or a small array's chunk
  // fits, and a batch's slots (256 KiB) are touched only as far as its files reach.
  static constexpr unsigned probe_bytes = 4096;

  UringBatch() {
    io_uring_params p{};
    fd_ = static_cast<int>(::syscall(__NR_io_uring_setup, files_per_batch, &p));
    if (fd_ < 0) return;
    sq_len_ = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    cq_len_ = p.cq_off.cqes + p.cq_entries * sizeof(io_uring_cqe);
    const bool single = (p.features & IORING_FEAT_SINGLE_MMAP) != 0;
    if (single) sq_len_ = cq_len_ = std::max(sq_len_, cq_len_);
    sq_ = ::mmap(nullptr, sq_len_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_, IORING_OFF_SQ_RING);
    if (sq_ == MAP_FAILED) return;
    cq_ = single ? sq_ : ::mmap(nullptr, cq_len_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_, IORING_OFF_CQ_RING);
    if (cq_ == MAP_FAILED) return;
    sqes_len_ = p.sq_entries * sizeof(io_uring_sqe);
    void* sqes = ::mmap(nullptr, sqes_len_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_, IORING_OFF_SQES);
    if (sqes == MAP_FAILED) return;
    sqes_ = static_cast<io_uring_sqe*>(sqes);
    sq_tail_ = field(sq_, p.sq_off.tail);
    sq_mask_ = *field(sq_, p.sq_off.ring_mask);
    sq_array_ = field(sq_, p.sq_off.array);
    cq_head_ = field(cq_, p.cq_off.head);
    cq_tail_ = field(cq_, p.cq_off.tail);
    cq_mask_ = *field(cq_, p.cq_off.ring_mask);
    cqes_ = reinterpret_cast<io_uring_cqe*>(static_cast<char*>(cq_) + p.cq_off.cqes);
    ok_ = p.sq_entries >= files_per_batch && p.cq_entries >= files_per_batch;
  }
  ~UringBatch() {
    if (sqes_) ::munmap(sqes_, sqes_len_);
    if (cq_ && cq_ != MAP_FAILED && cq_ != sq_) ::munmap(cq_, cq_len_);
    if (sq_ && sq_ != MAP_FAILED) ::munmap(sq_, sq_len_);
    if (fd_ >= 0) ::close(fd_);
  }
  UringBatch(const UringBatch&) = delete;
  UringBatch& operator=(const UringBatch&) = delete;
  bool ok() const { return ok_; }

  // Reads files[0, n) (n <= files_per_batch) whole where it can, each path from its
  // `skip`th character relative to `dir_fd` (a directory holding every one of them, or
  // AT_FDCWD with skip 0). False if the ring itself failed (the caller stops using it; what
  // was read stays read).
  bool read(WholeFileRead* files, unsigned n, int dir_fd = AT_FDCWD, std::size_t skip = 0) {
    int fds[files_per_batch];
    std::fill(fds, fds + n, -1);  // an open the kernel refused to take leaves nothing to close
    // 1. Open each. O_NONBLOCK: a FIFO cannot block the open (nor the read, were it reached);
    //    O_NOFOLLOW: a symbolic link is not followed (File::open_read's rules).
    for (unsigned k = 0; k < n; ++k) {
      io_uring_sqe* s = next();
      s->opcode = IORING_OP_OPENAT;
      s->fd = dir_fd;
      s->addr = reinterpret_cast<std::uint64_t>(files[k].path.c_str() + skip);
      s->open_flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
      s->user_data = k;
    }
    bool ring_ok = run(n, [&](unsigned k, int res) { fds[k] = res; });
    // 2. Read each open one into its slot of the scratch: its limit and one byte more, at most
    //    `probe_bytes`. What comes back shorter than that is the whole file, within its limit,
    //    with no further call: a statx of each file, one system call each, was a third of the
    //    time of a load of 10,000 small arrays of a file per chunk on the 2-core VM of
    //    docs/benchmarks.md (2026-12-02: 2.2 us a call, 20,000 calls). A read that fills the
    //    probe (a larger file, or one over its limit) or comes back empty is checked below
    //    with a statx. Why that suffices for what is no regular file: a directory's read
    //    fails (EISDIR); the read is made RWF_NOWAIT, which a FIFO, socket or terminal answers
    //    with EOPNOTSUPP (a FIFO on Linux 6.18), EAGAIN, end of file or the bytes it holds,
    //    and never waits on (without it io_uring waits on a FIFO with a writer until it gives
    //    bytes, O_NONBLOCK or not: unit-store's FIFO case hung so); a device that gives bytes
    //    (/dev/zero, a disk) fills any probe and goes to the check. Left: a kernel on which a
    //    FIFO's writer has put fewer bytes in it than the probe asks reads it as those bytes,
    //    as untrusted as any file's. A regular file whose first page is not in memory answers
    //    EAGAIN then, having started the disk's read-ahead, and goes to the check and a read
    //    that may wait. The probe lies within the file's first page,
    //    which the page cache holds whole or not at all, so a read that does not wait cannot
    //    return part of it: a short answer is the file's end. An error leaves the file to the
    //    ordinary read.
    int got[files_per_batch];
    unsigned want[files_per_batch];
    unsigned probes = 0;
    for (unsigned k = 0; k < n; ++k) {
      got[k] = -1;
      if (!ring_ok || fds[k] < 0) continue;
      want[k] = static_cast<unsigned>(std::min<std::uint64_t>(files[k].limit, probe_bytes - 1) + 1);
      io_uring_sqe* s = next();
      s->opcode = IORING_OP_READ;
      s->fd = fds[k];
      s->addr = reinterpret_cast<std::uint64_t>(slot(k));
      s->len = want[k];
      s->off = 0;
      s->rw_flags = RWF_NOWAIT;
      s->user_data = k;
      ++probes;
    }
    if (ring_ok) ring_ok = run(probes, [&](unsigned k, int res) { got[k] = res; });
    // 3. Each probe's answer: the whole file; over its limit (it asked for one byte more than
    //    the limit allows, and got it); or, where it filled a probe that the limit allows, came
    //    back empty or would have waited, a statx of the descriptor (the file that was opened:
    //    nothing can be swapped in between) for what it is, and the rest of a regular file
    //    within its limit read at the probe's end. The statx is made here, not through the
    //    ring: io_uring's STATX always runs on a kernel worker thread, and handing each file to
    //    one and back cost more than the call (2026-12-01). A system call of its own, not
    //    glibc's fstat: the ring opens and closes these descriptors out of ThreadSanitizer's
    //    sight, and a call it intercepts on one made it believe the descriptor outlived the
    //    ring's close, and report the next close of that number on another thread as a race
    //    (CI, 2026-12-01). Anything else (an error, a short read of the rest, a file that
    //    changed meanwhile) is left for the ordinary read.
    unsigned rests = 0;
    unsigned rest[files_per_batch];  // the bytes of each file after its probe, read in round 4
    for (unsigned k = 0; k < n; ++k) {
      const bool would_wait = got[k] == -EAGAIN;
      if (!ring_ok || (got[k] < 0 && !would_wait)) continue;
      const unsigned have = would_wait ? 0 : static_cast<unsigned>(got[k]);
      if (have > 0 && have < want[k]) {
        files[k].bytes.assign(slot(k), have);
        files[k].done = true;
        continue;
      }
      if (have == want[k] && files[k].limit < probe_bytes) continue;  // over its limit
      struct statx st {};
      batched_read_checks().fetch_add(1, std::memory_order_relaxed);
      if (::syscall(__NR_statx, fds[k], "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, STATX_TYPE | STATX_SIZE, &st) != 0 ||
          (st.stx_mask & (STATX_TYPE | STATX_SIZE)) != (STATX_TYPE | STATX_SIZE) || !S_ISREG(st.stx_mode) ||
          st.stx_size < have || st.stx_size > files[k].limit || st.stx_size > max_read)
        continue;
      files[k].bytes.resize(static_cast<std::size_t>(st.stx_size));
      std::memcpy(files[k].bytes.data(), slot(k), have);
      rest[k] = static_cast<unsigned>(st.stx_size - have);
      if (rest[k] == 0) {
        files[k].done = true;
        continue;
      }
      io_uring_sqe* s = next();
      s->opcode = IORING_OP_READ;
      s->fd = fds[k];
      s->addr = reinterpret_cast<std::uint64_t>(files[k].bytes.data() + have);
      s->len = rest[k];
      s->off = have;
      s->user_data = k;
      ++rests;
    }
    // A short read of the rest (the file shrank meanwhile), an error or EAGAIN leaves the file
    // to the ordinary read.
    if (ring_ok && rests > 0)
      ring_ok = run(rests, [&](unsigned k, int res) { files[k].done = res >= 0 && static_cast<unsigned>(res) == rest[k]; });
    for (unsigned k = 0; k < n; ++k)
      if (!files[k].done) files[k].bytes.clear();
    // 4. Close every one opened: through the ring, or, where it failed or refused a close, with
    //    close(2) (a close it took has run once its completion is seen; run waits for all).
    unsigned to_close = 0;
    bool closed[files_per_batch] = {};
    for (unsigned k = 0; k < n; ++k) {
      if (fds[k] < 0 || !ring_ok) continue;
      io_uring_sqe* s = next();
      s->opcode = IORING_OP_CLOSE;
      s->fd = fds[k];
      s->user_data = k;
      ++to_close;
    }
    if (ring_ok) ring_ok = run(to_close, [&](unsigned k, int) { closed[k] = true; });
    for (unsigned k = 0; k < n; ++k)
      if (fds[k] >= 0 && !closed[k]) ::close(fds[k]);
    return ring_ok;
  }

 private:
  static constexpr std::uint64_t max_read = 1u << 30;  // one READ's length is 32 bits
  char* slot(unsigned k) { return scratch_.get() + std::size_t{k} * probe_bytes; }

  static long enter(int ring, unsigned to_submit, unsigned min_complete, unsigned flags) {
    const auto call = [](int fd, unsigned submit, unsigned complete, unsigned f) {
      return ::syscall(__NR_io_uring_enter, fd, submit, complete, f, nullptr, 0);
    };
    if (const UringEnterHook h = uring_enter_hook().load(std::memory_order_relaxed)) return h(ring, to_submit, min_complete, flags, call);
    return call(ring, to_submit, min_complete, flags);
  }

  static unsigned* field(void* base, unsigned offset) { return reinterpret_cast<unsigned*>(static_cast<char*>(base) + offset); }

  io_uring_sqe* next() {
    const unsigned tail = *sq_tail_;
    const unsigned i = tail & sq_mask_;
    std::memset(&sqes_[i], 0, sizeof(io_uring_sqe));
    sq_array_[i] = i;
    __atomic_store_n(sq_tail_, tail + 1, __ATOMIC_RELEASE);
    return &sqes_[i];
  }

  // Submits the `n` entries queued and waits for the completions of all the kernel took,
  // giving each to `done(index, result)`. False if io_uring_enter refused entries: those it did
  // not take are dropped from the queue, and those it took are still waited for, since they
  // write into the caller's buffers (nothing is in flight when this returns). The ring is not
  // used again after a false.
  template <class Done>
  bool run(unsigned n, Done&& done) {
    unsigned to_submit = n, taken = 0, seen = 0;
    bool refused = false;
    for (long failures = 0; to_submit > 0 || seen < taken;) {
      // (A call that takes fewer entries than it is given returns without waiting.)
      const long r = enter(fd_, to_submit, (to_submit ? n : taken) - seen, IORING_ENTER_GETEVENTS);
      if (r < 0) {
        if (errno == EINTR) continue;
        if (to_submit > 0) {
          __atomic_store_n(sq_tail_, *sq_tail_ - to_submit, __ATOMIC_RELEASE);
          to_submit = 0;
          refused = true;
          continue;
        }
        // Waiting alone fails only with EINTR; were it to fail otherwise, returning would let
        // the kernel write into buffers their owners free.
        if (++failures > 1000000) std::abort();
        continue;
      }
      if (to_submit > 0) {
        const auto took = std::min(to_submit, static_cast<unsigned>(r));
        taken += took;
        to_submit -= took;
      }
      unsigned head = *cq_head_;
      const unsigned tail = __atomic_load_n(cq_tail_, __ATOMIC_ACQUIRE);
      for (; head != tail; ++head, ++seen) {
        const io_uring_cqe& c = cqes_[head & cq_mask_];
        done(static_cast<unsigned>(c.user_data), c.res);
      }
      __atomic_store_n(cq_head_, head, __ATOMIC_RELEASE);
    }
    return !refused;
  }

  std::unique_ptr<char[]> scratch_{new char[std::size_t{files_per_batch} * probe_bytes]};
  int fd_ = -1;
  bool ok_ = false;
  std::size_t sq_len_ = 0, cq_len_ = 0, sqes_len_ = 0;
  void* sq_ = nullptr;
  void* cq_ = nullptr;
  io_uring_sqe* sqes_ = nullptr;
  io_uring_cqe* cqes_ = nullptr;
  unsigned *sq_tail_ = nullptr, *sq_array_ = nullptr, *cq_head_ = nullptr, *cq_tail_ = nullptr;
  unsigned sq_mask_ = 0, cq_mask_ = 0;
};

// The deepest directory (without its final '/') that every one of files[0, n)'s paths lies
// below, or "" where they share none but the root or the working directory.
inline std::string shared_directory(const WholeFileRead* files, unsigned n) {
  const std::string& first = files[0].path;
  std::size_t common = first.size();
  for (unsigned k = 1; k < n; ++k) {
    const std::string& p = files[k].path;
    common = std::min(common, p.size());
    common = static_cast<std::size_t>(std::mismatch(first.begin(), first.begin() + static_cast<std::ptrdiff_t>(common), p.begin()).first - first.begin());
  }
  const std::size_t slash = first.rfind('/', common == 0 ? 0 : common - 1);
  return slash == std::string::npos || slash == 0 ? std::string() : first.substr(0, slash);
}

#endif  // CAIRN_HAS_IO_URING

// Reads whole every file of `files` that it can, in batches of 64 through io_uring, marking
// each read one `done`; the rest are the caller's to read the ordinary way. Returns how many
// it read (0 where io_uring is not to be had, for fewer than batched_read_min files, or while
// a fault-injection hook is set).
inline std::size_t read_files_batched(std::vector<WholeFileRead>& files) {
#if CAIRN_HAS_IO_URING
  if (files.size() < batched_read_min || fault_hook().load(std::memory_order_relaxed)) return 0;
  UringBatch ring;
  if (!ring.ok()) return 0;
  std::size_t read = 0;
  // The deepest directory all of a batch's paths go through, opened once (following links as
  // a path's walk does), so that each file's open walks only the rest of its path: a lookup a
  // component, which a checkpoint's depth in the filesystem multiplied. Where it cannot be
  // opened, the paths are opened whole. Closed on the way out, also by an exception.
  struct Directory {
    std::string path;  // "" for none: AT_FDCWD and whole paths
    int fd = AT_FDCWD;
    ~Directory() {
      if (fd >= 0) ::close(fd);
    }
  } dir;
  for (std::size_t from = 0; from < files.size(); from += UringBatch::files_per_batch) {
    const auto n = static_cast<unsigned>(std::min<std::size_t>(UringBatch::files_per_batch, files.size() - from));
    std::string here = shared_directory(files.data() + from, n);
    if (here != dir.path) {
      if (dir.fd >= 0) ::close(dir.fd);
      dir.fd = here.empty() ? AT_FDCWD : ::open(here.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (dir.fd < 0) dir.fd = AT_FDCWD, here.clear();
      dir.path = std::move(here);
    }
    const bool ring_ok = ring.read(files.data() + from, n, dir.fd, dir.path.empty() ? 0 : dir.path.size() + 1);
    for (unsigned k = 0; k < n; ++k) read += files[from + k].done;
    if (!ring_ok) break;
  }
  return read;
#else
  (void)files;
  return 0;
#endif
}

}  // namespace detail
CAIRN_END_NAMESPACE
