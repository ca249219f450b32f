// SPDX-License-Identifier: Apache-2.0
// Wall-clock time as cairn writes it: milliseconds since the epoch (a checkpoint's
// created_unix_ms), and ISO 8601 in UTC to the second ("2026-11-28T09:00:00Z": its "created",
// an Orbax export's metadata, an SSO token cache's expiresAt).
#pragma once

#include <chrono>
#include <cstdint>
#include <ctime>
#include <string>

#include "cairn/core/config.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

inline std::int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// ISO 8601 in UTC, to the second, of a time in milliseconds since the epoch.
inline std::string iso8601_utc(std::int64_t unix_ms) {
  std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace detail
CAIRN_END_NAMESPACE
