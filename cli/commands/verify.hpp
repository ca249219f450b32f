// SPDX-License-Identifier: Apache-2.0
// cairn verify PATH: every byte read and every checksum checked (cairn::verify); exit 0 only
// if intact. On a Checkpointer root, every committed step, one line each, and the `latest`
// marker.
#pragma once

#include <ostream>

#include "../output.hpp"

namespace cairn::cli {

inline void print_problems(const VerifyReport& r, std::ostream& out) {
  for (const auto& p : r.problems) {
    if (p.key.empty() && p.end == 0) out << "BAD " << p.file << ": " << p.why << "\n";
    else out << "BAD " << p.file << " bytes " << p.offset << ".." << p.end << " (key '" << p.key << "'): " << p.why << "\n";
  }
}

inline int verify_one(const Location& location, const std::string& path, std::ostream& out, std::ostream* progress) {
  VerifyReport r;
  {
    ProgressLine line(progress, "verifying " + path);
    r = cairn::verify(location, VerifyOptions{.progress = line.callback()});
  }
  print_problems(r, out);
  if (!r.ok()) {
    out << "FAILED " << path << ": " << r.problems.size() << " of " << r.chunks << " chunks bad\n";
    return exit_differs;
  }
  if (r.kind == LocationKind::orbax)
    out << "OK " << path << ": " << r.chunks << " chunks, " << human_bytes(r.bytes)
        << " decoded; every OCDBT node and shard index checksum matches (Orbax's chunks carry none of their own)\n";
  else
    out << "OK " << path << ": " << r.chunks << (r.checksummed ? " chunks, " : " tensors, ") << human_bytes(r.bytes)
        << (r.checksummed ? ", every checksum matches\n" : " read; the header is valid (safetensors has no checksums)\n");
  return exit_ok;
}

// `progress`: where progress goes (stderr on a terminal), or null.
inline int verify(const std::string& path, std::ostream& out, std::ostream* progress = nullptr) {
  const Location location(path);
  const Inspection found = inspect(location);
  if (found.kind != LocationKind::checkpointer_root) return verify_one(location, path, out, progress);
  int status = exit_ok;
  if (found.latest_marker && !found.latest_problem.empty()) {
    out << "BAD " << found.latest_problem << "\n";
    status = exit_differs;
  }
  for (const InspectedStep& step : found.steps) {
    const Location at = location / step.name;
    try {
      status = std::max(status, verify_one(at, at.describe(), out, progress));
    } catch (const Error& e) {
      out << "BAD " << e.what() << "\n";
      status = exit_differs;
    }
  }
  return status;
}

}  // namespace cairn::cli
