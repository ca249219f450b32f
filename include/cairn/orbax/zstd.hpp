// SPDX-License-Identifier: Apache-2.0
// Zstandard decompression of untrusted bytes (OCDBT nodes and zarr chunks of Orbax
// checkpoints), bounded: the output never grows past a limit the caller derives from the
// format (a node's max_decoded_node_bytes, a chunk's element count), so a small frame that
// claims or expands to gigabytes (a zstd bomb) is a clear error, not an allocation. Frames
// without a content size (TensorStore writes them so, tensorstore#182) decode by streaming.
// libzstd's own window limit (128 MiB by default) bounds its memory.
#pragma once

#include <zstd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "cairn/core/error.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail::orbax {

struct ZstdDCtxFree {
  void operator()(ZSTD_DCtx* c) const { ZSTD_freeDCtx(c); }
};
using ZstdDecoder = std::unique_ptr<ZSTD_DCtx, ZstdDCtxFree>;

// A decoder kept by each thread between chunks: making one (ZSTD_createDCtx, its tables and
// buffers) was a quarter of a load of 10,000 small zstd arrays, one per chunk
// (docs/benchmarks.md, "Orbax import"). take_decoder() hands out this thread's, or a new one,
// reset to begin a frame; give_back_decoder() keeps it for the thread's next chunk (any
// thread may give back a decoder another took: each keeps at most one).
inline ZstdDecoder& kept_decoder() {
  thread_local ZstdDecoder kept;
  return kept;
}
inline ZstdDecoder take_decoder() {
  ZstdDecoder d = std::move(kept_decoder());
  if (!d) d.reset(ZSTD_createDCtx());
  else ZSTD_DCtx_reset(d.get(), ZSTD_reset_session_only);
  return d;
}
inline void give_back_decoder(ZstdDecoder d) {
  if (d && !kept_decoder()) kept_decoder() = std::move(d);
}

// Decompresses every frame in src[0, n) into dst, which must come out exactly `expected`
// bytes; `what` (a key, a node) and `file` name the bytes in errors.
inline void zstd_decompress_exact(void* dst, std::uint64_t expected, const void* src, std::uint64_t n,
                                  const std::string& file, const std::string& key,
                                  const std::string& what = "zstd data") {
  ZstdDecoder ctx = take_decoder();
  if (!ctx) throw Error(ErrorKind::io, "out of memory for a zstd decoder", file, key);
  ZSTD_inBuffer in{src, static_cast<std::size_t>(n), 0};
  ZSTD_outBuffer out{dst, static_cast<std::size_t>(expected), 0};
  while (true) {
    const std::size_t before_in = in.pos, before_out = out.pos;
    std::size_t last;
    if (out.pos < out.size) {
      last = ZSTD_decompressStream(ctx.get(), &out, &in);
    } else {
      // Full: anything more it produces is too much (a frame's epilogue may still be read).
      unsigned char probe;
      ZSTD_outBuffer more{&probe, 1, 0};
      last = ZSTD_decompressStream(ctx.get(), &more, &in);
      if (!ZSTD_isError(last) && more.pos)
        throw Error(ErrorKind::corrupt, what + " decodes to more than the " + std::to_string(expected) + " bytes expected",
                    file, key);
    }
    if (ZSTD_isError(last))
      throw Error(ErrorKind::corrupt, what + " does not decode: " + ZSTD_getErrorName(last), file, key);
    if (last == 0 && in.pos == in.size) break;  // every frame ended
    if (in.pos == before_in && out.pos == before_out)
      throw Error(ErrorKind::corrupt, what + " is truncated (its last frame does not end)", file, key);
  }
  if (out.pos != expected)
    throw Error(ErrorKind::corrupt, what + " decodes to " + std::to_string(out.pos) + " bytes, expected " +
                std::to_string(expected), file, key);
  give_back_decoder(std::move(ctx));
}

// Decompresses every frame in src[0, n) into a new string of at most `limit` bytes.
inline std::string zstd_decompress(const void* src, std::uint64_t n, std::uint64_t limit, const std::string& file,
                                   const std::string& key, const std::string& what = "zstd data") {
  ZstdDecoder ctx = take_decoder();
  if (!ctx) throw Error(ErrorKind::io, "out of memory for a zstd decoder", file, key);
  std::string out;
  // Start from the frame's own claim where it makes one (never trusted beyond the limit).
  const unsigned long long claimed = ZSTD_getFrameContentSize(src, static_cast<std::size_t>(n));
  std::uint64_t cap = 64 * 1024;
  if (claimed != ZSTD_CONTENTSIZE_ERROR && claimed != ZSTD_CONTENTSIZE_UNKNOWN) cap = claimed + 1;
  if (cap > limit + 1) cap = limit + 1;
  out.resize(static_cast<std::size_t>(cap));
  ZSTD_inBuffer in{src, static_cast<std::size_t>(n), 0};
  std::size_t produced = 0, last = 1;
  while (true) {
    ZSTD_outBuffer o{out.data(), out.size(), produced};
    last = ZSTD_decompressStream(ctx.get(), &o, &in);
    if (ZSTD_isError(last))
      throw Error(ErrorKind::corrupt, what + " does not decode: " + ZSTD_getErrorName(last), file, key);
    const bool progressed = o.pos != produced;
    produced = o.pos;
    if (produced > limit)
      throw Error(ErrorKind::corrupt, what + " decodes to more than the limit of " + std::to_string(limit) + " bytes",
                  file, key);
    if (in.pos == in.size && (last == 0 || produced < out.size())) break;
    if (produced == out.size()) {
      out.resize(static_cast<std::size_t>(std::min<std::uint64_t>(limit + 1, out.size() * 2)));
      continue;
    }
    if (!progressed && in.pos == in.size) break;
  }
  if (last != 0) throw Error(ErrorKind::corrupt, what + " is truncated (its last frame does not end)", file, key);
  give_back_decoder(std::move(ctx));
  out.resize(produced);
  return out;
}

}  // namespace detail::orbax
CAIRN_END_NAMESPACE
