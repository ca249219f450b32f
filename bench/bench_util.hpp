// SPDX-License-Identifier: Apache-2.0
// What the benchmark programs need: a clock, byte sizes with suffixes, evicting written files
// from the page cache (for cold reads), the median of repeated runs, and the process's resident
// memory and its peak.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace bench {

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// "64M", "1G", "4KiB", "1000".
inline std::uint64_t parse_bytes(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string unit = end;
  if (unit == "K" || unit == "KiB") v *= 1024;
  else if (unit == "M" || unit == "MiB") v *= 1024 * 1024;
  else if (unit == "G" || unit == "GiB") v *= 1024.0 * 1024 * 1024;
  return static_cast<std::uint64_t>(v);
}

inline void evict(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}
inline void evict_tree(const std::string& dir) {
  for (auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file()) evict(e.path().string());
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
// The value below which a fraction q of the values lie (the nearest one; q in [0, 1]).
inline double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

// A field of /proc/self/status in KiB (0 where it is not there).
inline std::uint64_t proc_status_kib(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field, 0) == 0) return std::strtoull(line.c_str() + std::strlen(field), nullptr, 10);
  return 0;
}
// Resident memory now (VmRSS), and its peak since the last reset_peak_rss (VmHWM), in bytes.
inline std::uint64_t rss_bytes() { return proc_status_kib("VmRSS:") * 1024; }
inline std::uint64_t peak_rss_bytes() { return proc_status_kib("VmHWM:") * 1024; }
// Resets the peak (Linux 4.0+), so that each phase measures its own.
inline void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }

}  // namespace bench
