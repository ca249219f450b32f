// SPDX-License-Identifier: Apache-2.0
// Appending to a blob being written, for writers that put many values one after another into
// one file (the safetensors export, the OCDBT writer of the Orbax export): small values gather
// in one buffer written 8 MiB at a time, so that 10,000 small arrays are a few writes rather
// than 10,000; a large value goes straight from the caller's memory, after what is gathered.
#pragma once

#include <cstdint>
#include <string>

#include "cairn/store/store.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

class GatheredWriter {
 public:
  static constexpr std::size_t batch = std::size_t{8} << 20;

  explicit GatheredWriter(StoreWriter& w) : w_(w) {}

  // Appends n bytes at the end of what is written.
  void append(const void* bytes, std::uint64_t n) {
    if (n == 0) return;
    if (n >= batch / 8) {
      flush();
      w_.write_at(bytes, n, end_);
    } else {
      if (pending_.size() + n > batch) flush();
      pending_.append(static_cast<const char*>(bytes), static_cast<std::size_t>(n));
    }
    end_ += n;
  }
  // The blob's size so far (what is gathered included).
  std::uint64_t size() const { return end_; }
  // Writes what is gathered, then makes the blob durable (StoreWriter::finish).
  void finish() {
    flush();
    w_.finish(end_);
  }

 private:
  void flush() {
    if (pending_.empty()) return;
    w_.write_at(pending_.data(), pending_.size(), end_ - pending_.size());
    pending_.clear();
  }

  StoreWriter& w_;
  std::string pending_;  // the last pending_.size() bytes before end_, not yet written
  std::uint64_t end_ = 0;
};

}  // namespace detail
CAIRN_END_NAMESPACE
