// SPDX-License-Identifier: Apache-2.0
// What every command of the `cairn` tool shares: exit statuses, and how sizes, leaves and
// values are written out. The tool uses cairn's public names only (cairn/cairn.hpp), so that
// refactors of the library below them do not break it.
#pragma once

#include <cairn/cairn.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <ostream>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <system_error>

#include "terminal_text.hpp"

namespace cairn::cli {

inline constexpr int exit_ok = 0, exit_differs = 1, exit_error = 2;

inline std::string human_bytes(std::uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) { v /= 1024; ++u; }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", v, units[u]);
  return buf;
}

// Progress of long work, on stderr where it is a terminal (or with --progress), never with
// --quiet and never on stdout: "\r<what>: 1.2 GiB of 4.0 GiB (30%), 812.0 MiB/s, 3 s left",
// redrawn at most ten times a second, and a last line when the work is done.
class ProgressLine {
 public:
  ProgressLine(std::ostream* err, const std::string& what) : err_(err), what_(terminal_safe(what)) {}
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;
  ~ProgressLine() {
    if (shown_) *err_ << "\n" << std::flush;
  }
  // The callback for the library's progress options (empty where progress is off). Work done
  // in several calls adds `before` bytes and reports against `total` when it is given.
  Progress callback(std::uint64_t before = 0, std::uint64_t total = 0) {
    if (!err_) return {};
    return [this, before, total](std::uint64_t done, std::uint64_t all) {
      update(before + done, total ? total : before + all);
    };
  }
  void update(std::uint64_t done, std::uint64_t total) {
    total = std::max(total, done);  // a read may take a little more than the stored bytes (padding between leaves)
    const auto now = std::chrono::steady_clock::now();
    if (!started_) started_ = true, start_ = now;
    if (done < total && shown_ && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const double s = std::chrono::duration<double>(now - start_).count();
    std::string line = what_ + ": " + human_bytes(done) + " of " + human_bytes(total);
    if (total) line += " (" + std::to_string(done >= total ? 100 : done * 100 / total) + "%)";
    if (s > 0.05 && done) {
      line += ", " + human_bytes(static_cast<std::uint64_t>(static_cast<double>(done) / s)) + "/s";
      if (done < total) line += ", " + std::to_string(static_cast<long long>((total - done) * s / done) + 1) + " s left";
      else line += ", " + std::to_string(static_cast<long long>(s * 10) / 10.0).substr(0, 4) + " s";
    }
    if (line.size() < width_) line += std::string(width_ - line.size(), ' ');  // over the longer line before
    width_ = std::max(width_, line.size());
    *err_ << "\r" << line << std::flush;
    shown_ = true;
  }

 private:
  std::ostream* err_;
  std::string what_;
  bool shown_ = false, started_ = false;
  std::size_t width_ = 0;
  std::chrono::steady_clock::time_point start_, last_;
};

// A sharding for scripts: the mesh's axes with their sizes, the processes its devices are
// on, the partition spec (per dimension, the mesh axes it is split over; [] replicated), and
// the text ls prints.
inline Json sharding_json(const NamedSharding& s) {
  Json axes = Json::array();
  for (const auto& a : s.mesh.axes()) axes.push_back(Json::object({{"name", a.name}, {"size", a.size}}));
  Json spec = Json::array();
  for (const auto& d : s.spec.dims()) {
    Json names = Json::array();
    for (const auto& a : d.axes) names.push_back(a);
    spec.push_back(names);
  }
  std::int64_t processes = 0;
  for (const auto& d : s.mesh.devices()) processes = std::max<std::int64_t>(processes, d.process + 1);
  return Json::object({{"mesh", axes}, {"devices", static_cast<std::int64_t>(s.mesh.devices().size())},
                       {"processes", processes}, {"spec", spec}, {"text", s.describe()}});
}

inline Json leaf_json(const LeafRecord& l) {
  Json shape = Json::array();
  for (auto d : l.shape) shape.push_back(d);
  Json j = Json::object({{"key", l.key()}, {"dtype", dtype_name(l.dtype)}, {"shape", shape},
                         {"bytes", static_cast<std::int64_t>(l.nbytes())},
                         {"chunks", static_cast<std::int64_t>(l.chunks.size())}});
  if (l.saved_from != l.dtype) j["saved_from"] = dtype_name(l.saved_from);
  if (l.shape.size() >= 2 && l.order == Order::F) j["order"] = "F";
  if (l.sharding) j["sharding"] = sharding_json(*l.sharding);
  return j;
}

// "1 leaf", "3 leaves".
inline std::string counted(std::uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// A decimal integer, all of `text` and nothing else.
inline bool parse_integer(const std::string& text, std::int64_t& out) {
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, out);
  return !text.empty() && ec == std::errc() && p == end;
}

// Where a command that reads one checkpoint (show, diff, convert; and ls or verify given
// --step) is pointed at a Checkpointer root: its step `step` (--step N), or else its latest
// committed step, said on `err` so that the output is not mistaken for the root's. Any other
// location is returned as it is (and --step there is an error: it names a step of a root).
// Where `path` itself is returned, what was found there goes to `inspected` (where given), so
// that the command need not look again (on a bucket, each look is requests).
inline std::string checkpoint_of(const std::string& path, const std::optional<std::string>& step, bool latest_if_root,
                                 std::ostream& err, std::optional<Inspection>* inspected = nullptr,
                                 const SafetensorsOptions& names = {}) {
  if (!step && !latest_if_root) return path;
  Inspection found = inspect(path, names);
  if (found.kind != LocationKind::checkpointer_root) {
    if (step) throw Error(ErrorKind::invalid_argument, "--step picks a step of a Checkpointer root, and this is a " +
                          std::string(location_kind_name(found.kind)), found.path);
    if (inspected) *inspected = std::move(found);
    return path;
  }
  if (found.steps.empty()) throw Error(ErrorKind::not_found, "this Checkpointer root has no committed step", found.path);
  std::string name = found.steps.back().name;
  // For errors: the first eight (as detail::listed_names does; the tool sees only the public API).
  std::string listed;
  for (std::size_t i = 0; i < found.steps.size() && i < 8; ++i) listed += (i ? ", " : "") + found.steps[i].name;
  if (found.steps.size() > 8) listed += ", ... (" + std::to_string(found.steps.size()) + " in all)";
  if (step) {
    const auto it = std::find_if(found.steps.begin(), found.steps.end(), [&](const InspectedStep& s) { return s.name == *step; });
    if (it == found.steps.end())
      throw Error(ErrorKind::not_found,
                  (found.plain_directory ? "no checkpoint " + *step + " (the checkpoints: " : "no committed step " + *step + " (the steps: ") +
                      listed + ")",
                  found.path);
    name = it->name;
  } else if (found.plain_directory) {
    // Checkpoints named "best" and "final" have no order: which to read is the user's call.
    throw Error(ErrorKind::invalid_argument,
                "a directory of checkpoints (" + listed + "), not one checkpoint: name one, such as " +
                    (Location(path) / name).describe() + " (or --step NAME)",
                found.path);
  } else {
    err << "cairn: " << found.path << " is a Checkpointer root: reading its latest committed step, " << name
        << " (--step N reads another)\n";
  }
  return (Location(path) / name).describe();
}

// A step name as JSON: a number where it is one ("100"), else the name as it is.
inline Json step_json(const std::string& name) {
  std::int64_t n = 0;
  if (parse_integer(name, n)) return Json(n);
  return Json(name);
}

// One value as text: integers exactly, bools as numpy does, floats as numpy and h5dump print
// them: the shortest text that reads back as the same value of the stored dtype (a float32's
// 0.01 is "0.01", not 0.0099999998). `p` holds a bool, an int64, a uint64 or a float64, as
// `as` says; `stored` is the leaf's own dtype.
// The dtype `show` reads a leaf as: its integers exactly (int64 or uint64: a float64 holds
// integers exactly only up to 2^53), its floats as float64. (`diff` reads integers as stored.)
inline DType printed_dtype(DType stored) {
  switch (stored) {
    case DType::bool_: return DType::bool_;
    case DType::uint8: case DType::uint16: case DType::uint32: case DType::uint64: return DType::uint64;
    case DType::int8: case DType::int16: case DType::int32: case DType::int64: return DType::int64;
    default: return DType::float64;
  }
}

inline std::string value_text(DType as, const unsigned char* p, DType stored = DType::float64) {
  char buf[40];
  if (as == DType::bool_) return *p ? "True" : "False";
  if (as == DType::int64) { std::int64_t v; std::memcpy(&v, p, 8); return std::to_string(v); }
  if (as == DType::uint64) { std::uint64_t v; std::memcpy(&v, p, 8); return std::to_string(v); }
  double v;
  std::memcpy(&v, p, 8);
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  // Every narrower float is exactly a float32, and its shortest float32 text reads back as it.
  const auto end = stored == DType::float64 ? std::to_chars(buf, buf + sizeof buf, v).ptr
                                            : std::to_chars(buf, buf + sizeof buf, static_cast<float>(v)).ptr;
  return std::string(buf, end);
}

}  // namespace cairn::cli
