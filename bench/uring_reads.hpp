// SPDX-License-Identifier: Apache-2.0
// Whole small files read through io_uring, for the benchmarks only: what a reader of many
// small files could reach if it batched its system calls (docs/benchmarks.md, "Orbax import",
// 2026-12-01). Each batch of files costs four io_uring_enter calls, not four calls per file:
// every file opened; each open one checked with a statx of its descriptor (AT_EMPTY_PATH: the
// same check as File::open_read's fstat, on the file that was opened, so nothing can swap it
// in between); each regular one read; every one closed. Raw system calls through
// <linux/io_uring.h>; no liburing. Not part of cairn: a measurement of a design.
#pragma once

#include <fcntl.h>
#include <linux/io_uring.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <vector>

namespace bench {

// One file to read whole into `dst`, which holds `size` bytes: the file must be a regular
// file of exactly that size.
struct UringRead {
  const char* path;
  char* dst;
  std::uint64_t size;
};

class UringReader {
 public:
  // `batch` files at a time. ok() is false where the kernel has no io_uring (or a seccomp
  // profile refuses it, as Docker's default does).
  explicit UringReader(unsigned batch) : batch_(batch), statx_(batch), fds_(batch) {
    io_uring_params p{};
    fd_ = static_cast<int>(::syscall(__NR_io_uring_setup, batch, &p));
    if (fd_ < 0) return;
    entries_ = p.sq_entries;
    sq_len_ = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    cq_len_ = p.cq_off.cqes + p.cq_entries * sizeof(io_uring_cqe);
    if (p.features & IORING_FEAT_SINGLE_MMAP) sq_len_ = cq_len_ = std::max(sq_len_, cq_len_);
    sq_ = ::mmap(nullptr, sq_len_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_, IORING_OFF_SQ_RING);
    cq_ = (p.features & IORING_FEAT_SINGLE_MMAP) ? sq_
                                                 : ::mmap(nullptr, cq_len_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_, IORING_OFF_CQ_RING);
    sqes_len_ = p.sq_entries * sizeof(io_uring_sqe);
    void* sqes = ::mmap(nullptr, sqes_len_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_, IORING_OFF_SQES);
    if (sq_ == MAP_FAILED || cq_ == MAP_FAILED || sqes == MAP_FAILED) return;
    auto at = [](void* base, unsigned off) { return reinterpret_cast<unsigned*>(static_cast<char*>(base) + off); };
    sq_tail_ = at(sq_, p.sq_off.tail);
    sq_mask_ = *at(sq_, p.sq_off.ring_mask);
    sq_array_ = at(sq_, p.sq_off.array);
    cq_head_ = at(cq_, p.cq_off.head);
    cq_tail_ = at(cq_, p.cq_off.tail);
    cq_mask_ = *at(cq_, p.cq_off.ring_mask);
    cqes_ = reinterpret_cast<io_uring_cqe*>(static_cast<char*>(cq_) + p.cq_off.cqes);
    sqes_ = static_cast<io_uring_sqe*>(sqes);
    ok_ = true;
  }
  ~UringReader() {
    if (sqes_) ::munmap(sqes_, sqes_len_);
    if (cq_ && cq_ != sq_ && cq_ != MAP_FAILED) ::munmap(cq_, cq_len_);
    if (sq_ && sq_ != MAP_FAILED) ::munmap(sq_, sq_len_);
    if (fd_ >= 0) ::close(fd_);
  }
  UringReader(const UringReader&) = delete;
  UringReader& operator=(const UringReader&) = delete;
  bool ok() const { return ok_; }

  // Reads every file; false at the first one that fails (not there, not a regular file, not
  // of its size, or any call's error).
  bool read(const UringRead* files, std::size_t count) {
    for (std::size_t from = 0; from < count; from += batch_) {
      const unsigned n = static_cast<unsigned>(std::min<std::size_t>(batch_, count - from));
      const UringRead* f = files + from;
      bool good = true;
      // 1. Open each (O_NONBLOCK: a FIFO cannot block the open).
      for (unsigned k = 0; k < n; ++k) {
        io_uring_sqe* s = next();
        s->opcode = IORING_OP_OPENAT;
        s->fd = AT_FDCWD;
        s->addr = reinterpret_cast<std::uint64_t>(f[k].path);
        s->open_flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
        s->user_data = k;
      }
      run(n, [&](unsigned k, int res) {
        fds_[k] = res;
        if (res < 0) good = false;
      });
      // 2. Check each open file: a regular file of the size expected.
      if (good) {
        for (unsigned k = 0; k < n; ++k) {
          io_uring_sqe* s = next();
          s->opcode = IORING_OP_STATX;
          s->fd = fds_[k];
          s->addr = reinterpret_cast<std::uint64_t>("");
          s->statx_flags = AT_EMPTY_PATH;
          s->len = STATX_TYPE | STATX_SIZE;
          s->off = reinterpret_cast<std::uint64_t>(&statx_[k]);
          s->user_data = k;
        }
        run(n, [&](unsigned k, int res) {
          if (res < 0 || !S_ISREG(statx_[k].stx_mode) || statx_[k].stx_size != f[k].size) good = false;
        });
      }
      // 3. Read each. A file opened with O_NONBLOCK makes io_uring answer EAGAIN where the
      // read would wait for the disk (it does not hand it to a worker): those are read with
      // pread once the flag is cleared.
      if (good) {
        for (unsigned k = 0; k < n; ++k) {
          io_uring_sqe* r = next();
          r->opcode = IORING_OP_READ;
          r->fd = fds_[k];
          r->addr = reinterpret_cast<std::uint64_t>(f[k].dst);
          r->len = static_cast<unsigned>(f[k].size);
          r->off = 0;
          r->user_data = k;
        }
        run(n, [&](unsigned k, int res) {
          if (res == -EAGAIN) {
            if (::fcntl(fds_[k], F_SETFL, 0) != 0) good = false;
            res = static_cast<int>(::pread(fds_[k], f[k].dst, f[k].size, 0));
          }
          if (res < 0 || static_cast<std::uint64_t>(res) != f[k].size) good = false;
        });
      }
      // 4. Close every one opened.
      unsigned opened = 0;
      for (unsigned k = 0; k < n; ++k) {
        if (fds_[k] < 0) continue;
        io_uring_sqe* c = next();
        c->opcode = IORING_OP_CLOSE;
        c->fd = fds_[k];
        c->user_data = k;
        ++opened;
      }
      run(opened, [](unsigned, int) {});
      if (!good) return false;
    }
    return true;
  }

 private:
  io_uring_sqe* next() {
    const unsigned tail = *sq_tail_;
    const unsigned i = tail & sq_mask_;
    std::memset(&sqes_[i], 0, sizeof(io_uring_sqe));
    sq_array_[i] = i;
    __atomic_store_n(sq_tail_, tail + 1, __ATOMIC_RELEASE);
    return &sqes_[i];
  }
  // Submits the `n` entries queued and waits for their `n` completions, each given to `done`
  // with its user_data and result.
  template <class Done>
  void run(unsigned n, Done&& done) {
    unsigned submit = n, seen = 0;
    while (seen < n) {
      const long r = ::syscall(__NR_io_uring_enter, fd_, submit, n - seen, IORING_ENTER_GETEVENTS, nullptr, 0);
      if (r < 0) {
        if (errno == EINTR) continue;
        std::abort();  // a benchmark: the ring itself failing is not a result
      }
      submit -= std::min<unsigned>(submit, static_cast<unsigned>(r));
      unsigned head = *cq_head_;
      const unsigned tail = __atomic_load_n(cq_tail_, __ATOMIC_ACQUIRE);
      for (; head != tail; ++head, ++seen) {
        const io_uring_cqe& c = cqes_[head & cq_mask_];
        done(static_cast<unsigned>(c.user_data), c.res);
      }
      __atomic_store_n(cq_head_, head, __ATOMIC_RELEASE);
    }
  }

  unsigned batch_;
  int fd_ = -1;
  bool ok_ = false;
  unsigned entries_ = 0;
  std::size_t sq_len_ = 0, cq_len_ = 0, sqes_len_ = 0;
  void *sq_ = nullptr, *cq_ = nullptr;
  unsigned *sq_tail_ = nullptr, *sq_array_ = nullptr, *cq_head_ = nullptr, *cq_tail_ = nullptr;
  unsigned sq_mask_ = 0, cq_mask_ = 0;
  io_uring_cqe* cqes_ = nullptr;
  io_uring_sqe* sqes_ = nullptr;
  std::vector<struct statx> statx_;
  std::vector<int> fds_;
};

}  // namespace bench
