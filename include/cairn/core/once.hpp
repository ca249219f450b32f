// SPDX-License-Identifier: Apache-2.0
// detail::Once: work done once, by the first caller that finishes it; a caller whose work
// throws leaves it undone, for the next caller to try again. std::call_once promises the same,
// but under ThreadSanitizer (whose pthread_once keeps the flag taken when the function throws)
// every later caller waits forever: CI's TSan step hung at the first S3 store whose
// credential source refused once. Callers that meet the work under way wait for it.
#pragma once

#include <atomic>
#include <mutex>

#include "cairn/core/config.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

class Once {
 public:
  template <class F>
  void operator()(F&& work) {
    if (done_.load(std::memory_order_acquire)) return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_.load(std::memory_order_relaxed)) return;
    work();  // a throw leaves done_ false and releases the lock
    done_.store(true, std::memory_order_release);
  }
  bool done() const { return done_.load(std::memory_order_acquire); }

 private:
  std::mutex mutex_;
  std::atomic<bool> done_{false};
};

}  // namespace detail
CAIRN_END_NAMESPACE
