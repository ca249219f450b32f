// SPDX-License-Identifier: Apache-2.0
// CRC32C on its own: the check value of the specification, and every implementation this CPU
// can run (carry-less-multiply folding, the crc32 instruction on three streams, the table)
// against the table on random lengths, alignments and starting values, including the
// lengths where one path hands over to another. Includes only the checksum's headers.
#include "cairn/io/crc32c.hpp"
#include "cairn/io/crc_worker.hpp"

#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

namespace {
std::mt19937_64 rng(20261122);

std::vector<unsigned char> random_bytes(std::size_t n) {
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

// The reference: the table, one byte at a time (no slicing).
std::uint32_t bytewise(std::uint32_t crc, const unsigned char* p, std::size_t n) {
  const auto& t = cairn::detail::crc32c_table();
  crc = ~crc;
  while (n--) crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xff];
  return ~crc;
}
}  // namespace

TEST_CASE("CRC32C: the check value, and the known answers of RFC 3720") {
  CHECK(cairn::crc32c("123456789", 9) == 0xE3069283u);
  const std::vector<unsigned char> zeros(32, 0), ones(32, 0xff);
  CHECK(cairn::crc32c(zeros.data(), 32) == 0x8A9136AAu);
  CHECK(cairn::crc32c(ones.data(), 32) == 0x62A8AB43u);
  std::vector<unsigned char> up(32), down(32);
  for (int i = 0; i < 32; ++i) up[i] = static_cast<unsigned char>(i), down[i] = static_cast<unsigned char>(31 - i);
  CHECK(cairn::crc32c(up.data(), 32) == 0x46DD794Eu);
  CHECK(cairn::crc32c(down.data(), 32) == 0x113FDB5Cu);
  CHECK(cairn::crc32c(nullptr, 0) == 0u);
}

TEST_CASE("CRC32C: every implementation agrees with the table, at every length and alignment") {
  const auto data = random_bytes(200000);
  std::vector<std::size_t> lengths;
  for (std::size_t n = 0; n < 600; ++n) lengths.push_back(n);  // around the 256-byte fold minimum
  for (std::size_t n : {1023u, 1024u, 1025u, 4095u, 4096u, 4097u, 3u * 8192 - 1, 3u * 8192, 3u * 8192 + 1, 100000u})
    lengths.push_back(n);
  for (int i = 0; i < 300; ++i) lengths.push_back(rng() % 150000);
  for (std::size_t n : lengths) {
    const std::size_t offset = rng() % 64;
    const auto start = static_cast<std::uint32_t>(rng());
    const unsigned char* p = data.data() + offset;
    const std::uint32_t want = bytewise(start, p, n);
    CAPTURE(n);
    CAPTURE(offset);
    CHECK(cairn::crc32c_extend(start, p, n) == want);
    CHECK(~cairn::detail::crc32c_software(~start, p, n) == want);
#ifdef CAIRN_CRC32C_X86
    if (cairn::detail::cpu_has_sse42()) CHECK(~cairn::detail::crc32c_hardware(~start, p, n) == want);
    if (cairn::detail::cpu_has_crc32c_fold() && n >= 256) CHECK(~cairn::detail::crc32c_fold(~start, p, n) == want);
#endif
    // Extending in two parts gives the CRC of the whole.
    const std::size_t cut = n ? rng() % n : 0;
    CHECK(cairn::crc32c_extend(cairn::crc32c_extend(start, p, cut), p + cut, n - cut) == want);
  }
#ifdef CAIRN_CRC32C_X86
  const std::string runs = std::string("this CPU runs: folding ") + (cairn::detail::cpu_has_crc32c_fold() ? "yes" : "no") +
                          ", crc32 instruction " + (cairn::detail::cpu_has_sse42() ? "yes" : "no");
  MESSAGE(runs);
#endif
}

TEST_CASE("CRC32C: the checksum thread gives the same value over a stream of buffers, and its blocks'") {
  const auto data = random_bytes(1 << 20);
  cairn::detail::CrcWorker worker;
  for (std::uint64_t block : {std::uint64_t{4096}, std::uint64_t{65536} + 3, std::uint64_t{1} << 20, std::uint64_t{1} << 21}) {
    CAPTURE(block);
    worker.begin(block);
    std::size_t at = 0;
    while (at < data.size()) {
      const std::size_t n = std::min<std::size_t>(data.size() - at, rng() % 70000);
      worker.submit(data.data() + at, n);
      at += n;
    }
    CHECK(worker.finish() == bytewise(0, data.data(), data.size()));
    const auto blocks = worker.blocks();
    REQUIRE(blocks.size() == (data.size() + block - 1) / block);
    for (std::size_t k = 0; k < blocks.size(); ++k) {
      const std::size_t from = k * block, n = std::min<std::size_t>(block, data.size() - from);
      CHECK(blocks[k] == bytewise(0, data.data() + from, n));
    }
  }
}

TEST_CASE("CRC32C: blocks of a stream fed in any pieces, and the whole joined from them") {
  const auto data = random_bytes((3 << 20) + 777);
  for (int trial = 0; trial < 30; ++trial) {
    const std::size_t len = trial == 0 ? 0 : rng() % (data.size() + 1);
    const std::uint64_t block = trial % 3 == 0 ? (256 << 10) : 1 + rng() % 300000;
    CAPTURE(len);
    CAPTURE(block);
    cairn::detail::BlockCrc32c acc(block);
    for (std::size_t at = 0; at < len;) {
      const std::size_t n = std::min<std::size_t>(len - at, rng() % 200000);
      acc.extend(data.data() + at, n);
      at += n;
    }
    CHECK(acc.total() == len);
    CHECK(acc.whole() == bytewise(0, data.data(), len));
    const auto blocks = acc.blocks();
    REQUIRE(blocks.size() == (len + block - 1) / block);
    for (std::size_t k = 0; k < blocks.size(); ++k) {
      const std::size_t from = k * block, n = std::min<std::size_t>(block, len - from);
      CHECK(blocks[k] == bytewise(0, data.data() + from, n));
    }
    CHECK(cairn::detail::join_block_crcs(blocks, block, len) == acc.whole());
  }
}

TEST_CASE("CRC32C: combining the checksums of two parts gives the checksum of the whole") {
  const auto data = random_bytes(3 << 20);
  for (int trial = 0; trial < 40; ++trial) {
    // Split points at the ends, at piece boundaries and anywhere.
    std::size_t split = rng() % (data.size() + 1);
    if (trial == 0) split = 0;
    if (trial == 1) split = data.size();
    if (trial == 2) split = 256 << 10;
    const std::uint32_t a = cairn::crc32c(data.data(), split);
    const std::uint32_t b = cairn::crc32c(data.data() + split, data.size() - split);
    CHECK(cairn::crc32c_combine(a, b, data.size() - split) == bytewise(0, data.data(), data.size()));
  }
}
