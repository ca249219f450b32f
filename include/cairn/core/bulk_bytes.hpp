// SPDX-License-Identifier: Apache-2.0
// Host buffers of megabytes that a save or load fills once (an object store's transfer parts
// and read-ahead objects, a commit marker's body, the leaf records of thousands of leaves), in
// transparent huge pages where the system offers them; the smaller of those mappings, let go,
// kept for the next buffer of their size (KeptMappings).
//
// Why: a buffer fresh from the allocator is mapped one 4 KiB page at a time as it is first
// written, and each of those page faults costs the kernel a trap and a page to zero. On the
// benchmark VM (docs/benchmarks.md, "Huge pages for the S3 store's buffers") one costs about
// 10 us: filling a new 4 MiB buffer took 11 ms, so that the first load of 10,000 small leaves
// from an object store spent most of its time in page faults its limit never makes. Asked for
// with madvise(MADV_HUGEPAGE) on a region aligned to 2 MiB, the same buffer is two faults of
// 2 MiB pages: 0.5 ms. Linux's default setting ("madvise" on Debian and Ubuntu) gives huge
// pages to exactly such requests; where huge pages are off ("never"), or on other systems, the
// buffer is plain memory, as before. The cost: a buffer takes whole 2 MiB pages once touched
// (at most 2 MiB more than it fills), so only buffers of at least `huge_page_buffer_min` take
// them. Not for a buffer the allocator would hand out again to the next save or load (the data
// file's staging of small leaves: a mapping of its own was slower there, docs/benchmarks.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <utility>

#if defined(__linux__)
#include <sys/mman.h>
#endif

// Under AddressSanitizer every buffer comes from new[], whose bounds it checks (it does not
// watch a mapping's).
#if defined(__SANITIZE_ADDRESS__)
#define CAIRN_BULK_BYTES_MAPPED 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CAIRN_BULK_BYTES_MAPPED 0
#endif
#endif
#if !defined(CAIRN_BULK_BYTES_MAPPED) && defined(__linux__) && defined(MADV_HUGEPAGE)
#define CAIRN_BULK_BYTES_MAPPED 1
#elif !defined(CAIRN_BULK_BYTES_MAPPED)
#define CAIRN_BULK_BYTES_MAPPED 0
#endif

#include "cairn/core/config.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

inline constexpr std::size_t huge_page_bytes = std::size_t{2} << 20;
// Smaller buffers come from the allocator (rounding them up to a huge page would waste more
// than it saves; the allocator also reuses their memory between operations).
inline constexpr std::size_t huge_page_buffer_min = std::size_t{2} << 20;

#if CAIRN_BULK_BYTES_MAPPED
inline std::size_t huge_pages_for(std::size_t size) { return (size + huge_page_bytes - 1) / huge_page_bytes * huge_page_bytes; }
// A mapping of huge_pages_for(size) bytes, at an address aligned to a huge page, that asked for
// huge pages; null where there is no address space for it. Unmapped with
// munmap(p, huge_pages_for(size)).
inline void* map_huge_pages(std::size_t size) {
  // One huge page more than needed, so that an aligned start lies inside it; the unaligned
  // head and tail are unmapped again.
  const std::size_t whole = huge_pages_for(size);
  void* m = ::mmap(nullptr, whole + huge_page_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<std::uintptr_t>(m);
  const auto aligned = (start + huge_page_bytes - 1) / huge_page_bytes * huge_page_bytes;
  if (aligned > start) ::munmap(m, aligned - start);
  const std::size_t tail = start + whole + huge_page_bytes - (aligned + whole);
  if (tail) ::munmap(reinterpret_cast<void*>(aligned + whole), tail);
  // A refusal (huge pages off, an old kernel) leaves plain pages: nothing else changes.
  (void)::madvise(reinterpret_cast<void*>(aligned), whole, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}

// Mappings let go, kept for the next buffer of the same size: a program that loads a
// checkpoint again (an evaluation loop, a server reloading weights) otherwise maps, faults in
// and zeroes the same huge pages every time (the leaf records and the commit marker's body of
// a load of 10,000 small leaves from an object store: four 2 MiB pages, most of a repeated
// load's page faults, docs/benchmarks.md). Each of at most `kept_mapping_bytes_max` (8 MiB:
// a save of 10,000 small leaves lets go of a 6 MiB mapping, its leaf records, and mapped and
// zeroed it anew each time while 4 MiB was the bound, 2026-12-04), at most
// `kept_mappings_max` of them and `kept_bytes_max` (16 MiB) in all, less than glibc's malloc
// keeps of freed memory (it serves blocks of up to 32 MiB from its heap and holds on to them).
// Larger mappings (a transfer part of 16 MiB, the records of 100,000 leaves) are unmapped at
// once, as before; so are those beyond the bounds (the oldest kept go first). Shared by every
// thread: a mutex guards it.
inline constexpr std::size_t kept_mappings_max = 4;
inline constexpr std::size_t kept_mapping_bytes_max = std::size_t{8} << 20;
inline constexpr std::size_t kept_bytes_max = std::size_t{16} << 20;
class KeptMappings {
 public:
  static KeptMappings& instance() {
    // Never destroyed: a buffer freed while the program exits (a static's) may still come here.
    static KeptMappings* k = new KeptMappings;
    return *k;
  }
  // A kept mapping of exactly `whole` bytes, or null.
  void* take(std::size_t whole) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (std::size_t i = count_; i-- > 0;)
      if (kept_[i].bytes == whole) {
        void* p = kept_[i].p;
        bytes_ -= whole;
        for (std::size_t j = i + 1; j < count_; ++j) kept_[j - 1] = kept_[j];
        --count_;
        return p;
      }
    return nullptr;
  }
  // Keeps the mapping at `p` of `whole` bytes, or unmaps it; the oldest kept are unmapped to
  // make room.
  void give(void* p, std::size_t whole) {
    if (whole > kept_mapping_bytes_max) {
      ::munmap(p, whole);
      return;
    }
    Kept gone[kept_mappings_max];
    std::size_t going = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::size_t drop = 0;  // the oldest, while the new one would not fit beside them
      while (drop < count_ && (count_ - drop == kept_mappings_max || bytes_ + whole > kept_bytes_max)) {
        bytes_ -= kept_[drop].bytes;
        gone[going++] = kept_[drop++];
      }
      for (std::size_t j = drop; j < count_; ++j) kept_[j - drop] = kept_[j];
      count_ -= drop;
      kept_[count_++] = {p, whole};
      bytes_ += whole;
    }
    for (std::size_t i = 0; i < going; ++i) ::munmap(gone[i].p, gone[i].bytes);
  }
  std::size_t kept_bytes() const {  // (for tests)
    std::lock_guard<std::mutex> lock(mutex_);
    return bytes_;
  }
  std::size_t size() const {  // (for tests)
    std::lock_guard<std::mutex> lock(mutex_);
    return count_;
  }

 private:
  struct Kept {
    void* p;
    std::size_t bytes;
  };
  mutable std::mutex mutex_;
  Kept kept_[kept_mappings_max] = {};
  std::size_t count_ = 0;  // kept_[0, count_), oldest first
  std::size_t bytes_ = 0;  // their bytes in all
};

// huge_pages_for(size) bytes in huge pages (a kept mapping of that size, or a new one);
// null where there is no address space. Let go with give_back_huge_pages (kept or unmapped).
inline void* take_huge_pages(std::size_t size) {
  if (void* p = KeptMappings::instance().take(huge_pages_for(size))) return p;
  return map_huge_pages(size);
}
inline void give_back_huge_pages(void* p, std::size_t size) { KeptMappings::instance().give(p, huge_pages_for(size)); }
#endif

// `size` bytes, contents undefined (never zeroed: its users fill what they use). Move-only.
class BulkBytes {
 public:
  BulkBytes() = default;
  explicit BulkBytes(std::size_t size) : size_(size) {
    if (size == 0) return;
#if CAIRN_BULK_BYTES_MAPPED
    if (size >= huge_page_buffer_min) {
      if (void* m = take_huge_pages(size)) {
        p_ = static_cast<unsigned char*>(m);
        mapped_ = huge_pages_for(size);
        return;
      }
      // Out of address space for the mapping: the allocator throws bad_alloc below if it is too.
    }
#endif
    p_ = new unsigned char[size];
  }
  BulkBytes(BulkBytes&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), size_(std::exchange(o.size_, 0)), mapped_(std::exchange(o.mapped_, 0)) {}
  BulkBytes& operator=(BulkBytes&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
      size_ = std::exchange(o.size_, 0);
      mapped_ = std::exchange(o.mapped_, 0);
    }
    return *this;
  }
  BulkBytes(const BulkBytes&) = delete;
  BulkBytes& operator=(const BulkBytes&) = delete;
  ~BulkBytes() { release(); }

  unsigned char* data() { return p_; }
  const unsigned char* data() const { return p_; }
  std::size_t size() const { return size_; }
  explicit operator bool() const { return p_ != nullptr; }
  // The memory it may hold once touched: its size rounded up to whole huge pages where it is
  // in them (what a cache of such buffers counts against its bound).
  std::size_t allocated() const { return mapped_ ? mapped_ : size_; }
  // Whether the buffer is a mapping that asked for huge pages (for tests).
  bool huge_pages_asked() const { return mapped_ != 0; }

 private:
  void release() {
    if (!p_) return;
#if CAIRN_BULK_BYTES_MAPPED
    if (mapped_) {
      give_back_huge_pages(p_, mapped_);
      p_ = nullptr;
      return;
    }
#endif
    delete[] p_;
    p_ = nullptr;
  }

  unsigned char* p_ = nullptr;
  std::size_t size_ = 0;
  std::size_t mapped_ = 0;  // bytes mapped (whole huge pages), or 0: from new[]
};

// An allocator whose arrays of at least `huge_page_buffer_min` bytes are mappings in huge pages
// (map_huge_pages), and smaller ones std::allocator's: for a vector of records that a save or
// load fills once (LeafRecords: 10,000 leaves' records are 2.7 MB, which took 600 page faults,
// 6 ms of a 30 ms load from an object store). Which of the two an array came from follows
// from its size, so that deallocate needs nothing stored. No mapping: std::bad_alloc.
template <class T>
struct BulkAllocator {
  using value_type = T;
  BulkAllocator() = default;
  template <class U>
  BulkAllocator(const BulkAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    const std::size_t bytes = n * sizeof(T);
#if CAIRN_BULK_BYTES_MAPPED
    if (bytes >= huge_page_buffer_min) {
      if (void* p = take_huge_pages(bytes)) return static_cast<T*>(p);
      throw std::bad_alloc();
    }
#endif
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    const std::size_t bytes = n * sizeof(T);
#if CAIRN_BULK_BYTES_MAPPED
    if (bytes >= huge_page_buffer_min) {
      give_back_huge_pages(p, bytes);
      return;
    }
#endif
    std::allocator<T>().deallocate(p, n);
  }
  template <class U>
  friend bool operator==(const BulkAllocator&, const BulkAllocator<U>&) { return true; }
};

}  // namespace detail
CAIRN_END_NAMESPACE
