// SPDX-License-Identifier: Apache-2.0
// cairn verify PATH: every byte read and every checksum checked (cairn::verify); exit 0 only
// if intact. On a Checkpointer root, every committed step, one line each, and the `latest`
// marker.
#pragma once

#include <numeric>
#include <ostream>

#include "../output.hpp"

namespace cairn::cli {

inline void print_problems(const VerifyReport& r, std::ostream& out) {
  for (const auto& p : r.problems) {
    if (p.key.empty() && p.end == 0) out << "BAD " << p.file << ": " << p.why << "\n";
    else out << "BAD " << p.file << " bytes " << p.offset << ".." << p.end << " (key '" << p.key << "'): " << p.why << "\n";
  }
}

// One checkpoint's report: its problems, then FAILED or OK.
inline int print_one(const VerifyReport& r, const std::string& path, std::ostream& out) {
  print_problems(r, out);
  if (!r.ok()) {
    out << "FAILED " << path << ": " << r.problems.size() << " of " << r.chunks << " chunks bad\n";
    return exit_differs;
  }
  if (r.kind == LocationKind::orbax)
    out << "OK " << path << ": " << r.chunks << " chunks, " << human_bytes(r.bytes)
        << " decoded; every checksum the layout stores matches (OCDBT nodes and shard indexes, where it has them;"
           " Orbax's chunks carry none of their own)\n";
  else
    out << "OK " << path << ": " << r.chunks << (r.checksummed ? " chunks, " : " tensors, ") << human_bytes(r.bytes)
        << (r.checksummed ? ", every checksum matches\n" : " read; the header is valid (safetensors has no checksums)\n");
  for (const auto& n : r.not_verified) out << "  not verified: " << n << "\n";
  return exit_ok;
}

// `progress`: where progress goes (stderr on a terminal), or null. One call of cairn::verify,
// which tells a root from a checkpoint on the way (an inspect first read a checkpoint's
// metadata once more: 5 of a bucket's 12 requests for a small one).
inline int verify(const std::string& path, std::ostream& out, std::ostream* progress = nullptr) {
  VerifyReport r;
  {
    ProgressLine line(progress, "verifying " + path);  // a root's steps each count from zero
    r = cairn::verify(Location(path), VerifyOptions{.progress = line.callback()});
  }
  if (r.kind != LocationKind::checkpointer_root) return print_one(r, path, out);
  int status = exit_ok;
  // The root's own problems (its `latest` marker) come before its steps'.
  const std::size_t own = r.problems.size() - std::accumulate(r.steps.begin(), r.steps.end(), std::size_t{0},
                                                               [](std::size_t n, const VerifyReport& s) { return n + s.problems.size(); });
  for (std::size_t i = 0; i < own; ++i) {
    out << "BAD " << r.problems[i].why << "\n";
    status = exit_differs;
  }
  for (const VerifyReport& step : r.steps) {
    // A step whose metadata does not read: its one problem says why.
    if (step.chunks == 0 && step.problems.size() == 1 && step.problems[0].key.empty() && step.problems[0].end == 0) {
      out << "BAD " << step.problems[0].why << "\n";
      status = exit_differs;
      continue;
    }
    status = std::max(status, print_one(step, step.path, out));
  }
  return status;
}

}  // namespace cairn::cli
