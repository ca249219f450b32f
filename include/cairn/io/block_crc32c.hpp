// SPDX-License-Identifier: Apache-2.0
// The CRC32C of each fixed-size block of a stream, and the whole stream's CRC32C derived from
// them. A chunk larger than one block stores its blocks' checksums (docs/format.md, "Block
// checksums"), so that a load that reads part of the chunk verifies the blocks it reads; the
// chunk's own CRC32C is joined from the blocks' (one table shift per block), not computed again.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "cairn/io/crc32c.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// The shift by one block's length, made once per block size a program meets (building one
// costs 32 shifts of about 16 matrix squarings each).
inline const Crc32cShift& block_shift(std::uint64_t block_bytes) {
  thread_local std::uint64_t last_bytes = 0;
  thread_local std::unique_ptr<Crc32cShift> last;
  if (!last || last_bytes != block_bytes) {
    last = std::make_unique<Crc32cShift>(static_cast<std::size_t>(block_bytes));
    last_bytes = block_bytes;
  }
  return *last;
}

// The CRC32C of `total` bytes from the CRC32Cs of their consecutive blocks of `block_bytes`
// (the last one shorter where `total` is not a multiple).
inline std::uint32_t join_block_crcs(const std::vector<std::uint32_t>& blocks, std::uint64_t block_bytes,
                                     std::uint64_t total) {
  if (blocks.empty()) return 0;
  const Crc32cShift& shift = block_shift(block_bytes);
  std::uint32_t crc = blocks[0];
  for (std::size_t k = 1; k < blocks.size(); ++k) {
    const std::uint64_t len = std::min<std::uint64_t>(block_bytes, total - k * block_bytes);
    crc = (len == block_bytes ? shift(crc) : crc32c_combine(crc, 0, len)) ^ blocks[k];
  }
  return crc;
}

// Accumulates the blocks' CRC32Cs of a stream fed in pieces of any length.
class BlockCrc32c {
 public:
  explicit BlockCrc32c(std::uint64_t block_bytes) : block_(block_bytes) {}

  void extend(const void* data, std::size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    total_ += n;
    while (n > 0) {
      const std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(n, block_ - filled_));
      crc_ = crc32c_extend(crc_, p, take);
      filled_ += take;
      p += take;
      n -= take;
      if (filled_ == block_) {
        blocks_.push_back(crc_);
        crc_ = 0;
        filled_ = 0;
      }
    }
  }

  std::uint64_t block_bytes() const { return block_; }
  std::uint64_t total() const { return total_; }
  // The blocks so far, the last (partial) one included.
  std::vector<std::uint32_t> blocks() const {
    std::vector<std::uint32_t> b = blocks_;
    if (filled_ > 0) b.push_back(crc_);
    return b;
  }
  // The CRC32C of everything fed.
  std::uint32_t whole() const { return join_block_crcs(blocks(), block_, total_); }

 private:
  std::uint64_t block_;
  std::uint64_t filled_ = 0, total_ = 0;
  std::uint32_t crc_ = 0;
  std::vector<std::uint32_t> blocks_;
};

}  // namespace detail
CAIRN_END_NAMESPACE
