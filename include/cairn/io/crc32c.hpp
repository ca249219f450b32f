// CRC32C (Castagnoli), the checksum of every stored chunk and metadata file. x86-64 uses the
// SSE4.2 crc32 instruction (chosen at run time, no compile flags needed), three streams at
// once to hide its latency; elsewhere a slice-by-8 table. Both give the same values.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cairn/core/config.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDA_ARCH__)
#define CAIRN_CRC32C_X86 1
#include <nmmintrin.h>
#endif

CAIRN_BEGIN_NAMESPACE
namespace detail {

inline constexpr std::uint32_t crc32c_poly = 0x82F63B78u;  // reflected Castagnoli polynomial

using crc_tables = std::array<std::array<std::uint32_t, 256>, 8>;

constexpr crc_tables make_crc32c_tables() {
  crc_tables t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ crc32c_poly : c >> 1;
    t[0][i] = c;
  }
  for (std::uint32_t i = 0; i < 256; ++i)
    for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
  return t;
}

inline const crc_tables& crc32c_table() {
  static constexpr crc_tables tables = make_crc32c_tables();
  return tables;
}

inline std::uint32_t crc32c_software(std::uint32_t crc, const unsigned char* p, std::size_t n) {
  const auto& t = crc32c_table();
  while (n >= 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    w ^= crc;
    crc = t[7][w & 0xff] ^ t[6][(w >> 8) & 0xff] ^ t[5][(w >> 16) & 0xff] ^ t[4][(w >> 24) & 0xff] ^
          t[3][(w >> 32) & 0xff] ^ t[2][(w >> 40) & 0xff] ^ t[1][(w >> 48) & 0xff] ^ t[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xff];
  return crc;
}

// crc of `len` zero bytes appended: multiply by x^(8*len) mod P, to combine stream CRCs.
inline std::uint32_t crc32c_shift(std::uint32_t crc, std::size_t len) {
  // GF(2) matrix squaring, as in zlib's crc32_combine, for the Castagnoli polynomial.
  auto times = [](const std::uint32_t* mat, std::uint32_t vec) {
    std::uint32_t sum = 0;
    for (int i = 0; vec; ++i, vec >>= 1)
      if (vec & 1) sum ^= mat[i];
    return sum;
  };
  auto square = [&](std::uint32_t* sq, const std::uint32_t* mat) {
    for (int n = 0; n < 32; ++n) sq[n] = times(mat, mat[n]);
  };
  std::uint32_t even[32], odd[32];
  odd[0] = crc32c_poly;
  for (int n = 1; n < 32; ++n) odd[n] = 1u << (n - 1);
  square(even, odd);  // 2 zero bits
  square(odd, even);  // 4 zero bits
  do {
    square(even, odd);
    if (len & 1) crc = times(even, crc);
    len >>= 1;
    if (!len) break;
    square(odd, even);
    if (len & 1) crc = times(odd, crc);
    len >>= 1;
  } while (len);
  return crc;
}

// Shifting by the 8 KiB stream block is linear in the register, so it is four table look-ups.
// The tables come from the shifts of the 32 single bits (a shift costs about 16 matrix
// squarings; 1,024 of them took milliseconds at each program's first checksum).
inline constexpr std::size_t crc32c_stream_block = 8192;
inline std::uint32_t crc32c_shift_block(std::uint32_t crc) {
  static const auto table = [] {
    std::uint32_t bit[32];
    for (int i = 0; i < 32; ++i) bit[i] = crc32c_shift(1u << i, crc32c_stream_block);
    std::array<std::array<std::uint32_t, 256>, 4> t{};
    for (int byte = 0; byte < 4; ++byte)
      for (std::uint32_t v = 0; v < 256; ++v)
        for (int b = 0; b < 8; ++b)
          if (v & (1u << b)) t[byte][v] ^= bit[8 * byte + b];
    return t;
  }();
  return table[0][crc & 0xff] ^ table[1][(crc >> 8) & 0xff] ^ table[2][(crc >> 16) & 0xff] ^ table[3][crc >> 24];
}

#ifdef CAIRN_CRC32C_X86
__attribute__((target("sse4.2"))) inline std::uint32_t crc32c_hardware(std::uint32_t crc, const unsigned char* p,
                                                                        std::size_t n) {
  std::uint64_t c0 = crc;
  // Three independent streams over large inputs: the instruction has latency 3, throughput 1.
  constexpr std::size_t block = crc32c_stream_block;
  while (n >= 3 * block) {
    std::uint64_t c1 = 0, c2 = 0;
    const unsigned char* a = p;
    const unsigned char* b = p + block;
    const unsigned char* c = p + 2 * block;
    for (std::size_t i = 0; i < block; i += 8) {
      std::uint64_t wa, wb, wc;
      std::memcpy(&wa, a + i, 8);
      std::memcpy(&wb, b + i, 8);
      std::memcpy(&wc, c + i, 8);
      c0 = _mm_crc32_u64(c0, wa);
      c1 = _mm_crc32_u64(c1, wb);
      c2 = _mm_crc32_u64(c2, wc);
    }
    c0 = crc32c_shift_block(static_cast<std::uint32_t>(c0)) ^ c1;
    c0 = crc32c_shift_block(static_cast<std::uint32_t>(c0)) ^ c2;
    p += 3 * block;
    n -= 3 * block;
  }
  while (n >= 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    c0 = _mm_crc32_u64(c0, w);
    p += 8;
    n -= 8;
  }
  std::uint32_t c32 = static_cast<std::uint32_t>(c0);
  while (n--) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}

inline bool cpu_has_sse42() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

}  // namespace detail

// Extend a running CRC32C (start with 0) by n bytes.
inline std::uint32_t crc32c_extend(std::uint32_t crc, const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
#ifdef CAIRN_CRC32C_X86
  if (detail::cpu_has_sse42()) return ~detail::crc32c_hardware(crc, p, n);
#endif
  return ~detail::crc32c_software(crc, p, n);
}

inline std::uint32_t crc32c(const void* data, std::size_t n) { return crc32c_extend(0, data, n); }

CAIRN_END_NAMESPACE
