// SPDX-License-Identifier: Apache-2.0
// for_each_index: a loop whose iterations wait on a store (a bucket's round trips), run a
// few at a time where the store says it gains from that (Store::parallel_reads), in order on
// this thread where it does not (a filesystem, whose calls are local: no thread is made).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <future>
#include <vector>

#include "cairn/core/config.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// Calls f(i) for every i in [0, count). With `threads` <= 1: here, in order, as a plain loop
// (the first exception stops it). Otherwise on up to `threads` threads at once, this one
// among them: every call has ended when it returns, and the exception of the lowest i that
// threw is rethrown then.
template <class F>
void for_each_index(std::size_t count, int threads, F&& f) {
  if (threads <= 1 || count <= 1) {
    for (std::size_t i = 0; i < count; ++i) f(i);
    return;
  }
  std::vector<std::exception_ptr> errors(count);
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t i; (i = next++) < count;) {
      try {
        f(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  {
    std::vector<std::future<void>> helpers;
    const std::size_t n = std::min(count, static_cast<std::size_t>(threads)) - 1;
    for (std::size_t h = 0; h < n; ++h) helpers.push_back(std::async(std::launch::async, worker));
    worker();
  }  // (each helper's future waits for it)
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace detail
CAIRN_END_NAMESPACE
