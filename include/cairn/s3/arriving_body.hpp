// SPDX-License-Identifier: Apache-2.0
// A response body that its readers use while it arrives. A load of a checkpoint written inline
// in its commit marker GETs the marker (megabytes: its metadata, then its data); with the whole
// body awaited first, the metadata's parse and the load's plan began only after the last byte,
// one after the other, so that a load of 10,000 small leaves took twice the GET's time. Here the
// GET runs on a thread of its own, its bytes written into one buffer sized by the response's
// Content-Length; S3Store::read_generation returns once the marker's first line is in, and each
// reader of a file inline (S3Store::HeldReader) waits only for its own bytes.
//
// One writer (the transfer, through HttpClient's BodyStream) and any number of readers. A byte
// is written once: a request retried after a body cut short starts again from byte 0, and the
// bytes that arrived the first time are not written again (a reader may be reading them), only
// checked to come from the same object: a retry whose ETag or size differs is refused, and the
// readers get that error, never a body of two versions.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "cairn/core/config.hpp"
#include "cairn/core/error.hpp"
#include "cairn/s3/buffer_pool.hpp"
#include "cairn/s3/http.hpp"

CAIRN_BEGIN_NAMESPACE
namespace s3 {

class ArrivingBody final : public BodyStream {
 public:
  // At most `limit` bytes are kept: a longer body is cut there (the transfer ends). `name`:
  // the object, as errors name it.
  ArrivingBody(std::uint64_t limit, std::string name) : limit_(limit), name_(std::move(name)) {}

  // The transfer's side ------------------------------------------------------------------
  bool start(const HttpResponse& r) override {
    const std::string length = r.header("content-length");
    char* end = nullptr;
    const std::uint64_t announced = length.empty() ? 0 : std::strtoull(length.c_str(), &end, 10);
    const bool sized = !length.empty() && end == length.c_str() + length.size();
    const std::string etag = r.header("etag");
    std::lock_guard<std::mutex> lock(mutex_);
    if (!started_) {
      started_ = true;
      response_.status = r.status;
      response_.headers = r.headers;
      etag_ = etag;
      // Without a Content-Length (chunked), room for the most kept, and the readers wait for
      // the end (finish) before they look.
      sized_ = sized;
      buffer_ = std::make_shared<Buffer>(static_cast<std::size_t>(sized ? std::min(announced, limit_) : limit_));
      announced_ = announced;
    } else if (etag.empty() || etag != etag_ || !sized_ || !sized || announced != announced_ || r.status != response_.status) {
      // A retry that got another version (the marker was replaced meanwhile), or one that
      // cannot be told apart from another: the bytes the readers have are not mixed with it.
      refused_ = "the object changed while it was being read (a retried GET got ETag " + etag + ", the first " + etag_ + ")";
      return false;
    }
    at_ = 0;
    return true;
  }

  bool take(const char* p, std::size_t n) override {
    // buffer_ and arrived_ are written by this thread alone (start, take): read without the lock.
    const std::uint64_t size = buffer_->capacity();
    const std::uint64_t room = at_ < size ? size - at_ : 0;
    const std::uint64_t kept = std::min<std::uint64_t>(room, n);
    const std::uint64_t have = arrived_.load(std::memory_order_relaxed);
    if (at_ + kept > have) {  // bytes not there yet: an earlier attempt's are left as they are
      const std::uint64_t from = std::max(at_, have);
      std::memcpy(buffer_->data() + from, p + (from - at_), static_cast<std::size_t>(at_ + kept - from));
      {
        std::lock_guard<std::mutex> lock(mutex_);
        arrived_.store(at_ + kept, std::memory_order_release);
      }
      arrived_cv_.notify_all();
    }
    at_ += kept;
    return kept == n;
  }

  // The exchange ended with `r` (its status and headers): everything that will arrive has.
  void finish(const HttpResponse& r) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!refused_.empty()) {
        error_ = Error(ErrorKind::io, refused_, name_);
      } else if (!started_) {  // no body (an empty object's 416, an empty 200)
        response_.status = r.status;
        response_.headers = r.headers;
        buffer_ = std::make_shared<Buffer>(0);
      } else if (!sized_) {
        buffer_->n = static_cast<std::size_t>(arrived_.load(std::memory_order_relaxed));
      }
      done_ = true;
    }
    arrived_cv_.notify_all();
  }
  // The exchange failed: every reader waiting, and every later one, gets `e`.
  void fail(const Error& e) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = e;
      done_ = true;
    }
    arrived_cv_.notify_all();
  }

  // The readers' side --------------------------------------------------------------------
  // Waits until the body's first line has arrived (or all of it, where that has no line or
  // the response no Content-Length); returns how many of its first bytes may be looked at
  // now: those up to and with the line's end, or the whole body. Throws the transfer's error.
  std::uint64_t wait_for_line() const {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      if (error_) throw fresh(*error_);
      const std::uint64_t have = arrived_.load(std::memory_order_relaxed);
      if (started_ && sized_ && have > scanned_) {
        const void* nl = std::memchr(buffer_->data() + scanned_, '\n', static_cast<std::size_t>(have - scanned_));
        if (nl) return static_cast<std::uint64_t>(static_cast<const unsigned char*>(nl) - buffer_->data()) + 1;
        scanned_ = have;
      }
      if (done_) return buffer_->size();
      arrived_cv_.wait(lock);
    }
  }
  // Waits until the body's first `end` bytes have arrived. Throws the transfer's error, or
  // io where it ended before them.
  void wait_for(std::uint64_t end) const {
    if (arrived_.load(std::memory_order_acquire) >= end) return;
    std::unique_lock<std::mutex> lock(mutex_);
    arrived_cv_.wait(lock, [&] { return arrived_.load(std::memory_order_relaxed) >= end || done_; });
    if (arrived_.load(std::memory_order_relaxed) >= end) return;
    if (error_) throw fresh(*error_);
    throw Error(ErrorKind::io, "the response ended at byte " + std::to_string(arrived_.load(std::memory_order_relaxed)) +
                " of the " + std::to_string(buffer_ ? buffer_->size() : 0) + " it announced", name_);
  }
  // After wait_for_line: the buffer (its bytes readable as wait_for says), and the response's
  // status and headers.
  std::shared_ptr<const Buffer> bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return buffer_;
  }
  const HttpResponse& response() const { return response_; }  // (set before the first byte)

 private:
  // The error rebuilt from its parts, not copied: a copy of a std::runtime_error shares its
  // message's count of references (in the uninstrumented C++ runtime) with the one kept here,
  // which the transfer's thread may free while a reader prints its copy, a race as
  // ThreadSanitizer sees it (unit-s3-faults under TSan did).
  static Error fresh(const Error& e) { return Error(e.kind(), e.message(), e.file(), e.key_path()); }

  const std::uint64_t limit_;
  const std::string name_;
  mutable std::mutex mutex_;
  mutable std::condition_variable arrived_cv_;
  std::shared_ptr<Buffer> buffer_;     // from the first start (finish, where none)
  std::atomic<std::uint64_t> arrived_{0};  // bytes [0, arrived_) are in the buffer
  std::uint64_t at_ = 0;               // the transfer's place in this attempt's body
  std::uint64_t announced_ = 0;        // the first attempt's Content-Length
  HttpResponse response_;              // its status and headers (no body)
  std::string etag_, refused_;
  bool started_ = false, sized_ = false, done_ = false;
  std::optional<Error> error_;
  mutable std::uint64_t scanned_ = 0;  // wait_for_line: no newline before this byte
};

}  // namespace s3
CAIRN_END_NAMESPACE
