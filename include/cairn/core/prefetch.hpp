// SPDX-License-Identifier: Apache-2.0
// Asking the CPU for an object's cache lines ahead of the pass that reads it. At 100,000 leaves
// a load's metadata records are some 26 MB, more than the caches, and a pass that follows a
// pointer out of each record (a key path's entries) or reads one line of each 264-byte record
// waits on memory once per leaf: the hardware's own prefetcher does not see that pattern. A
// hint only, it changes no result. Measured per pass (docs/benchmarks.md): it took half of the
// children lists' time away, and cost time where a pass reads the whole record anyway
// (validate_metadata), so it is used only where perf shows the wait.
#pragma once

#include <cstddef>

#include "cairn/core/config.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// How many records ahead a pass asks for: far enough for memory's latency to pass while the
// records in between are worked on, near enough for the lines to be in the cache still.
inline constexpr std::size_t prefetch_distance = 8;

// Every cache line of `object` (its own bytes, not what its members point to).
template <class T>
inline void prefetch(const T& object) {
#if defined(__GNUC__) || defined(__clang__)
  const char* p = reinterpret_cast<const char*>(&object);
  for (std::size_t at = 0; at < sizeof(T); at += 64) __builtin_prefetch(p + at);
#else
  (void)object;
#endif
}

}  // namespace detail
CAIRN_END_NAMESPACE
