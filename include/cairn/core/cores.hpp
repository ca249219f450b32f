// Whether a second core is there for cairn's helper threads (a second reader of cached data,
// the second half of a large metadata parse). Asked once: hardware_concurrency reads
// /sys on Linux, too slow to ask on every load.
#pragma once

#include <thread>

#include "cairn/core/config.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

inline bool second_core() {
  static const bool yes = std::thread::hardware_concurrency() > 1;
  return yes;
}

}  // namespace detail
CAIRN_END_NAMESPACE
