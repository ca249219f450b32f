// SPDX-License-Identifier: Apache-2.0
// Appending to a blob being written, for writers that put many values one after another into
// one file (the safetensors export, the OCDBT writer of the Orbax export): small values gather
// into one write of many pieces (StoreWriter::write_gathered: pwritev on a file), so that
// 10,000 small arrays are a few writes rather than 10,000; a large value goes straight from
// the caller's memory, after what is gathered. A value the caller keeps where it is until the
// blob is finished (append_kept: an array's own memory, a text shared by many arrays) is
// written from there; any other is copied into a buffer of the writer's own, reused.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "cairn/store/store.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

class GatheredWriter {
 public:
  static constexpr std::size_t batch = std::size_t{8} << 20;  // bytes gathered before they are written
  static constexpr std::size_t max_pieces = 1024;             // pieces gathered (pwritev takes IOV_MAX)
  // The buffer of copies: allocated once and reused. Gathering copies into one buffer that
  // grew to 8 MiB (a std::string doubling) was a third of an Orbax export of 10,000 small
  // arrays, most of it the page faults of memory new to each export.
  static constexpr std::size_t copies_bytes = std::size_t{256} << 10;

  explicit GatheredWriter(StoreWriter& w) : w_(w) {}

  // Appends a copy of n bytes at the end of what is written.
  void append(const void* bytes, std::uint64_t n) {
    if (n == 0) return;
    if (n > copies_bytes) return write_alone(bytes, n);
    make_room(n, n > copies_bytes - used_);
    if (!copies_) copies_ = std::make_unique_for_overwrite<char[]>(copies_bytes);
    char* at = copies_.get() + used_;
    std::memcpy(at, bytes, static_cast<std::size_t>(n));
    used_ += static_cast<std::size_t>(n);
    add(at, n);
  }
  // Appends n bytes that the caller leaves where they are, unchanged, until finish() returns
  // or the writer is destroyed: written from there, never copied.
  void append_kept(const void* bytes, std::uint64_t n) {
    if (n == 0) return;
    if (n >= batch / 8) return write_alone(bytes, n);
    make_room(n, false);
    add(bytes, n);
  }
  // The blob's size so far (what is gathered included).
  std::uint64_t size() const { return end_; }
  // Writes what is gathered, then makes the blob durable (StoreWriter::finish).
  void finish() {
    flush();
    w_.finish(end_);
  }

 private:
  void write_alone(const void* bytes, std::uint64_t n) {
    flush();
    w_.write_at(bytes, n, end_);
    end_ += n;
  }
  // Writes what is gathered first where n more bytes (or a copy that does not fit the buffer
  // of copies, or another piece) would pass a limit.
  void make_room(std::uint64_t n, bool copies_full) {
    if (copies_full || pieces_.size() >= max_pieces || pending_ + n > batch) flush();
  }
  void add(const void* p, std::uint64_t n) {
    // A piece that continues the last one (copies one after another, a value given in parts)
    // joins it.
    if (!pieces_.empty() && static_cast<const char*>(pieces_.back().src) + pieces_.back().n == p) pieces_.back().n += n;
    else pieces_.push_back({p, n});
    pending_ += n;
    end_ += n;
  }
  void flush() {
    if (pieces_.empty()) return;
    w_.write_gathered(pieces_.data(), pieces_.size(), end_ - pending_);
    pieces_.clear();
    pending_ = 0;
    used_ = 0;
  }

  StoreWriter& w_;
  std::vector<WritePiece> pieces_;  // gathered, not yet written: the last pending_ bytes before end_
  std::uint64_t pending_ = 0, end_ = 0;
  std::unique_ptr<char[]> copies_;  // the buffer of copies, used_ bytes of it by pieces_
  std::size_t used_ = 0;
};

}  // namespace detail
CAIRN_END_NAMESPACE
