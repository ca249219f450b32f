// SPDX-License-Identifier: Apache-2.0
// What ranks send each other (a flat little-endian encoding with 64-bit lengths, checked on
// decoding), errors as messages, and the one agreement every multi-rank operation ends with:
// success everywhere, or an error everywhere that names the failing rank.
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "cairn/coordination/coordinator.hpp"
#include "cairn/core/error.hpp"
#include "cairn/core/shape.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// What ranks send each other: a flat little-endian encoding with 64-bit lengths. Decoding
// checks every length against what is left.
class WireWriter {
 public:
  WireWriter& u64(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) out_ += static_cast<char>((v >> (8 * i)) & 0xff);
    return *this;
  }
  WireWriter& str(const std::string& s) {
    u64(s.size());
    out_ += s;
    return *this;
  }
  WireWriter& shape(const Shape& s) {
    u64(s.size());
    for (auto v : s) u64(static_cast<std::uint64_t>(v));
    return *this;
  }
  WireWriter& u32s(const std::vector<std::uint32_t>& v) {
    u64(v.size());
    for (std::uint32_t x : v)
      for (int i = 0; i < 4; ++i) out_ += static_cast<char>((x >> (8 * i)) & 0xff);
    return *this;
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class WireReader {
 public:
  explicit WireReader(const std::string& in) : in_(in) {}
  std::uint64_t u64() {
    need(8);
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < 8; ++i) v |= std::uint64_t{static_cast<unsigned char>(in_[pos_ + i])} << (8 * i);
    pos_ += 8;
    return v;
  }
  std::string str() {
    const std::uint64_t n = u64();
    need(n);
    std::string s = in_.substr(pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return s;
  }
  Shape shape() {
    const std::uint64_t n = u64();
    need(n * 8);
    Shape s;
    for (std::uint64_t i = 0; i < n; ++i) s.push_back(static_cast<std::int64_t>(u64()));
    return s;
  }
  std::vector<std::uint32_t> u32s() {
    const std::uint64_t n = u64();
    if (n > (in_.size() - pos_) / 4) need(in_.size() - pos_ + 1);  // cut short (and n * 4 could overflow)
    std::vector<std::uint32_t> v(static_cast<std::size_t>(n));
    for (auto& x : v) {
      for (std::size_t i = 0; i < 4; ++i) x |= std::uint32_t{static_cast<unsigned char>(in_[pos_ + i])} << (8 * i);
      pos_ += 4;
    }
    return v;
  }

 private:
  void need(std::uint64_t n) const {
    if (n > in_.size() - pos_) throw Error(ErrorKind::io, "a message between ranks was cut short");
  }
  const std::string& in_;
  std::size_t pos_ = 0;
};

inline void encode_error(WireWriter& w, const Error& e) {
  w.u64(static_cast<std::uint64_t>(e.kind())).str(e.message()).str(e.file()).str(e.key_path());
}
inline Error decode_error(WireReader& r) {
  const auto kind = static_cast<ErrorKind>(r.u64());
  std::string message = r.str(), file = r.str(), key = r.str();
  return Error(kind, message, file, key);
}

// Any exception as a cairn::Error, so that it can travel to the other ranks.
inline Error as_error(std::exception_ptr p) {
  try {
    std::rethrow_exception(p);
  } catch (const Error& e) {
    return e;
  } catch (const std::exception& e) {
    return Error(ErrorKind::io, e.what());
  } catch (...) {
    return Error(ErrorKind::io, "unknown exception");
  }
}

// What ranks compare to learn they hold the same thing (a tree, a checkpoint's layout): a
// 64-bit FNV-1a over what each feeds it, strings with their lengths. The same on every process
// of every build, unlike std::hash.
struct WireDigest {
  std::uint64_t value = 0xcbf29ce484222325ull;
  void bytes(const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) value = (value ^ b[i]) * 0x100000001b3ull;
  }
  void str(const std::string& s) {
    const std::uint64_t n = s.size();
    bytes(&n, sizeof n);
    bytes(s.data(), s.size());
  }
};

// The primary runs `work` (which returns the bytes every rank needs) and broadcasts them, or
// its error; every rank returns the bytes or throws that error (the primary its own).
template <class Work>
std::string run_on_primary(Coordinator& coordinator, Work&& work) {
  WireWriter out;
  std::exception_ptr failure;
  if (coordinator.is_primary()) {
    try {
      std::string result = work();
      out.u64(1).str(result);
    } catch (...) {
      failure = std::current_exception();
      out = WireWriter();
      out.u64(0);
      encode_error(out, as_error(failure));
    }
  }
  const std::string got = coordinator.broadcast(out.take());
  if (failure) std::rethrow_exception(failure);
  WireReader in(got);
  if (in.u64() != 1) {
    // The other ranks learn whose error it is, as agree_on_outcome tells them.
    const Error e = decode_error(in);
    throw Error(e.kind(), "rank 0 failed: " + e.message(), e.file(), e.key_path());
  }
  return in.str();
}

// Every rank calls this with its own failure (or none) and returns the same outcome: if any
// rank failed, the failing ranks rethrow their own error and the others throw the first
// failing rank's, prefixed with "rank N failed: ". One gather and one broadcast.
inline void agree_on_outcome(Coordinator& coordinator, std::exception_ptr failure) {
  if (coordinator.size() == 1) {
    if (failure) std::rethrow_exception(failure);
    return;
  }
  WireWriter mine;
  if (failure) {
    mine.u64(0);
    encode_error(mine, as_error(failure));
  } else {
    mine.u64(1);
  }
  const std::vector<std::string> all = coordinator.gather(mine.take());
  WireWriter outcome;
  if (coordinator.is_primary()) {
    outcome.u64(1);
    for (std::size_t r = 0; r < all.size(); ++r) {
      WireReader in(all[r]);
      if (in.u64() == 1) continue;
      const Error e = decode_error(in);
      outcome = WireWriter();
      outcome.u64(0);
      encode_error(outcome, Error(e.kind(), "rank " + std::to_string(r) + " failed: " + e.message(), e.file(), e.key_path()));
      break;
    }
  }
  const std::string agreed = coordinator.broadcast(outcome.take());
  if (failure) std::rethrow_exception(failure);
  WireReader in(agreed);
  if (in.u64() != 1) throw decode_error(in);
}

}  // namespace detail
CAIRN_END_NAMESPACE
