// SPDX-License-Identifier: Apache-2.0
// CRC32C (Castagnoli), the checksum of every stored chunk and metadata file. Chosen at run
// time, no compile flags needed: on x86-64 with AVX-512 and VPCLMULQDQ, carry-less-multiply
// folding of 256 bytes at a time (about 2.5x the crc32 instruction here, so that a warm load
// is bound by the copy, not the checksum); with SSE4.2, the crc32 instruction on three streams
// at once to hide its latency; elsewhere a slice-by-8 table. All give the same values.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cairn/core/tuning.hpp"
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
    for (std::size_t s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
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

// Shifting by a fixed length is linear in the register, so it is four table look-ups. The
// tables come from the shifts of the 32 single bits (a shift costs about 16 matrix squarings;
// 1,024 of them took milliseconds at each program's first checksum). Used for the 8 KiB
// blocks of the crc32 instruction's three streams, and to join the checksums of a chunk's
// pieces read by two threads.
class Crc32cShift {
 public:
  explicit Crc32cShift(std::size_t len) {
    std::uint32_t bit[32];
    for (int i = 0; i < 32; ++i) bit[i] = crc32c_shift(1u << i, len);
    for (std::size_t byte = 0; byte < 4; ++byte)
      for (std::uint32_t v = 0; v < 256; ++v) {
        t_[byte][v] = 0;
        for (std::size_t b = 0; b < 8; ++b)
          if (v & (1u << b)) t_[byte][v] ^= bit[8 * byte + b];
      }
  }
  std::uint32_t operator()(std::uint32_t crc) const {
    return t_[0][crc & 0xff] ^ t_[1][(crc >> 8) & 0xff] ^ t_[2][(crc >> 16) & 0xff] ^ t_[3][crc >> 24];
  }

 private:
  std::array<std::array<std::uint32_t, 256>, 4> t_;
};

inline std::uint32_t crc32c_shift_block(std::uint32_t crc) {
  static const Crc32cShift shift(crc32c_stream_block);
  return shift(crc);
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

// Folding. Each 128-bit lane holds 16 bytes of the message (the first 8 in its low half); it
// is carried `d` bits further on by multiplying its low half by x^(d+31) mod P and its high
// half by x^(d-33) mod P (bit-reflected CRC registers; the offsets absorb the reflected
// product's one-bit shift and the crc32 instruction's x^32), which keeps the message's CRC.
// The folded lanes are the message's last 64 bytes in effect, finished with crc32.
constexpr std::uint32_t crc32c_x_pow_mod(std::uint64_t e) {
  std::uint32_t r = 1;  // x^0, normal bit order, then reflected
  for (std::uint64_t i = 0; i < e; ++i) r = (r << 1) ^ ((r & 0x80000000u) ? 0x1EDC6F41u : 0u);
  std::uint32_t out = 0;
  for (int b = 0; b < 32; ++b)
    if (r & (1u << b)) out |= 1u << (31 - b);
  return out;
}
inline constexpr std::uint32_t crc32c_fold_2048[2] = {crc32c_x_pow_mod(2048 + 31), crc32c_x_pow_mod(2048 - 33)};
inline constexpr std::uint32_t crc32c_fold_512[2] = {crc32c_x_pow_mod(512 + 31), crc32c_x_pow_mod(512 - 33)};

// The fold uses the compilers' vector types and one builtin instead of <immintrin.h>, which
// costs every file that includes it about 0.45 s and 100 MB of compiler memory.
typedef long long crc32c_v8 __attribute__((vector_size(64)));
// The same, for loads from any address (as <immintrin.h> defines its unaligned loads).
typedef long long crc32c_v8_unaligned __attribute__((vector_size(64), aligned(1), may_alias));
#if defined(__clang__)
#define CAIRN_CRC32C_CLMUL(a, b, imm) __builtin_ia32_pclmulqdq512(a, b, imm)
#else
#define CAIRN_CRC32C_CLMUL(a, b, imm) __builtin_ia32_vpclmulqdq_v8di(a, b, imm)
#endif
#define CAIRN_CRC32C_LOAD(at) (*reinterpret_cast<const crc32c_v8_unaligned*>(at))
#define CAIRN_CRC32C_FOLD(x, k, next) (CAIRN_CRC32C_CLMUL(x, k, 0x00) ^ CAIRN_CRC32C_CLMUL(x, k, 0x11) ^ (next))
#define CAIRN_CRC32C_FOLD_TARGET __attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.2")))
// n >= 256. Takes and returns the register as crc32c_hardware does.
CAIRN_CRC32C_FOLD_TARGET inline std::uint32_t crc32c_fold(std::uint32_t crc, const unsigned char* p, std::size_t n) {
  const long long a = crc32c_fold_2048[0], b = crc32c_fold_2048[1], c = crc32c_fold_512[0], d = crc32c_fold_512[1];
  const crc32c_v8 k2048 = {a, b, a, b, a, b, a, b};  // element 0 is a lane's low half
  const crc32c_v8 k512 = {c, d, c, d, c, d, c, d};
  crc32c_v8 x0 = CAIRN_CRC32C_LOAD(p), x1 = CAIRN_CRC32C_LOAD(p + 64), x2 = CAIRN_CRC32C_LOAD(p + 128), x3 = CAIRN_CRC32C_LOAD(p + 192);
  x0[0] ^= static_cast<long long>(crc);
  p += 256;
  n -= 256;
  for (; n >= 256; p += 256, n -= 256) {
    x0 = CAIRN_CRC32C_FOLD(x0, k2048, CAIRN_CRC32C_LOAD(p));
    x1 = CAIRN_CRC32C_FOLD(x1, k2048, CAIRN_CRC32C_LOAD(p + 64));
    x2 = CAIRN_CRC32C_FOLD(x2, k2048, CAIRN_CRC32C_LOAD(p + 128));
    x3 = CAIRN_CRC32C_FOLD(x3, k2048, CAIRN_CRC32C_LOAD(p + 192));
  }
  x1 = CAIRN_CRC32C_FOLD(x0, k512, x1);
  x2 = CAIRN_CRC32C_FOLD(x1, k512, x2);
  x3 = CAIRN_CRC32C_FOLD(x2, k512, x3);
  for (; n >= 64; p += 64, n -= 64) x3 = CAIRN_CRC32C_FOLD(x3, k512, CAIRN_CRC32C_LOAD(p));
  unsigned char last[64];
  std::memcpy(last, &x3, sizeof last);
  return crc32c_hardware(crc32c_hardware(0, last, 64), p, n);
}
#undef CAIRN_CRC32C_FOLD
#undef CAIRN_CRC32C_LOAD
#undef CAIRN_CRC32C_CLMUL
#undef CAIRN_CRC32C_FOLD_TARGET

inline bool cpu_has_crc32c_fold() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("pclmul") &&
                          __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

}  // namespace detail

// Extend a running CRC32C (start with 0) by n bytes.
inline std::uint32_t crc32c_extend(std::uint32_t crc, const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
#ifdef CAIRN_CRC32C_X86
  if (n >= 256 && detail::cpu_has_crc32c_fold()) return ~detail::crc32c_fold(crc, p, n);
  if (detail::cpu_has_sse42()) return ~detail::crc32c_hardware(crc, p, n);
#endif
  return ~detail::crc32c_software(crc, p, n);
}

inline std::uint32_t crc32c(const void* data, std::size_t n) { return crc32c_extend(0, data, n); }

// The CRC32C of A followed by B, from the CRC32C of each and B's length (as zlib's
// crc32_combine). For many parts of one length, detail::Crc32cShift(len) shifts faster.
inline std::uint32_t crc32c_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t len_b) {
  return detail::crc32c_shift(crc_a, static_cast<std::size_t>(len_b)) ^ crc_b;
}

CAIRN_END_NAMESPACE
