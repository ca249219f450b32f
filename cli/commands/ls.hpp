// SPDX-License-Identifier: Apache-2.0
// cairn ls PATH [--json]: what a location holds (cairn::inspect): a checkpoint's or a
// safetensors file's tree (key, dtype, shape, sharding, bytes), items and user metadata; a
// Checkpointer root's steps, their metrics, and the latest (a damaged `latest` marker is named),
// and the steps that never committed (incomplete).
#pragma once

#include <algorithm>
#include <ostream>

#include "../output.hpp"

namespace cairn::cli {

inline int ls_root(const Inspection& root, bool json, std::ostream& out) {
  Json list = Json::array();
  for (const InspectedStep& s : root.steps) {
    Json step = Json::object({{"step", step_json(s.name)}, {"kind", location_kind_name(s.kind)}, {"latest", s.latest}});
    if (!s.error.empty()) {
      step["error"] = s.error;
    } else {
      step["created"] = s.created;
      step["bytes"] = static_cast<std::int64_t>(s.bytes);
      if (!s.metrics.is_null()) step["metrics"] = s.metrics;
    }
    list.push_back(step);
  }
  // A plain directory of checkpoints has no steps in order: none is the latest.
  const std::string latest_committed = root.steps.empty() || root.plain_directory ? "" : root.steps.back().name;
  if (json) {
    Json j = Json::object({{"path", root.path}, {"kind", location_kind_name(root.kind)},
                           {"latest", root.latest.empty() ? Json() : step_json(root.latest)},
                           {"latest_committed", latest_committed.empty() ? Json() : step_json(latest_committed)},
                           {"plain_directory", root.plain_directory}, {"steps", list}});
    if (!root.latest_problem.empty()) j["latest_problem"] = root.latest_problem;
    if (!root.incomplete.empty()) {
      Json incomplete = Json::array();
      for (const auto& n : root.incomplete) incomplete.push_back(step_json(n));
      j["incomplete"] = incomplete;
    }
    out << j.dump() << "\n";
    return exit_ok;
  }
  const std::size_t n = root.steps.size();
  if (root.plain_directory)
    out << root.path << ": directory of " << n << (n == 1 ? " checkpoint\n" : " checkpoints\n");
  else
    out << root.path << ": Checkpointer root, " << n << (n == 1 ? " step" : " steps")
        << (root.latest.empty() || !root.latest_problem.empty() ? "" : ", latest " + root.latest) << "\n";
  // A missing marker is a note (nothing is damaged); a marker that does not read, or names no
  // committed step, a warning.
  if (!root.latest_problem.empty())
    out << (root.latest_marker ? "warning: " : "note: ") << root.latest_problem << "; the latest committed step is "
        << latest_committed
        << " (a Checkpointer opening this root repairs the marker)\n";
  // One line per step, in columns: the names (on one line each: a directory's name is the
  // store's, untrusted) padded to the widest, and where any step is another system's
  // checkpoint, which system wrote each.
  const bool mixed = std::any_of(root.steps.begin(), root.steps.end(),
                                 [](const InspectedStep& s) { return s.kind != LocationKind::checkpoint; });
  std::vector<std::string> labels;
  std::size_t width = 0;
  for (const InspectedStep& s : root.steps) {
    labels.push_back(one_line(s.name) + (s.latest ? " (latest)" : ""));
    width = std::max(width, columns(labels.back()));
  }
  for (const auto& n : root.incomplete) width = std::max(width, columns(one_line(n)));
  const auto padded = [&](const std::string& label) { return label + std::string(width - columns(label), ' '); };
  for (std::size_t i = 0; i < root.steps.size(); ++i) {
    const Json& s = list.as_array()[i];
    out << "  " << padded(labels[i]);
    if (mixed) out << "  " << (root.steps[i].kind == LocationKind::checkpoint ? "cairn" : location_kind_name(root.steps[i].kind));
    if (const Json* e = s.find("error")) out << "  damaged: " << e->as_string();
    if (const Json* c = s.find("created")) out << "  " << c->as_string() << "  " << human_bytes(static_cast<std::uint64_t>(s.at("bytes").as_int()));
    if (const Json* m = s.find("metrics"); m && m->size()) out << "  " << m->dump();
    out << "\n";
  }
  for (const auto& n : root.incomplete)
    out << "  " << padded(one_line(n)) << "  incomplete: no commit marker (a save in progress, or one that died)\n";
  return exit_ok;
}

inline int ls(const std::string& path, bool json, std::ostream& out, const SafetensorsOptions& names = {}) {
  const Inspection found = inspect(path, names);
  if (found.kind == LocationKind::checkpointer_root) return ls_root(found, json, out);
  const CheckpointMetadata& m = found.metadata;
  const bool safetensors = found.kind == LocationKind::safetensors;
  if (json) {
    Json items = Json::array();
    for (const auto& item : m.items) {
      Json leaves = Json::array();
      for (const auto& l : item.leaves) leaves.push_back(leaf_json(l));
      Json entry = Json::object({{"name", item.name}, {"kind", item_kind_name(item.kind)}, {"leaves", leaves}});
      if (!item.unread.empty()) {  // an import's leaves that cairn cannot read
        Json unread = Json::array();
        for (const auto& u : item.unread) unread.push_back(Json::object({{"key", u.path.str()}, {"reason", u.reason}}));
        entry["unread"] = unread;
      }
      items.push_back(std::move(entry));
    }
    Json j = Json::object({{"path", path}, {"kind", location_kind_name(found.kind)}});
    if (!safetensors) {
      j["format_version"] = m.format_version;
      j["library_version"] = m.library_version;
      j["created"] = m.created;
      j["created_unix_ms"] = m.created_unix_ms;
    }
    j["files"] = static_cast<std::int64_t>(m.data_files.size());
    j["bytes"] = static_cast<std::int64_t>(m.total_bytes());
    j["items"] = items;
    j["user_metadata"] = m.user_metadata;
    out << j.dump() << "\n";
    return exit_ok;
  }
  if (safetensors)
    out << path << ": safetensors, " << counted(m.data_files.size(), "file", "files");
  else if (found.kind == LocationKind::orbax)
    out << path << ": " << m.library_version << " checkpoint, " << (m.created.empty() ? "no commit time" : "committed at " + m.created);
  else
    out << path << ": cairn checkpoint, format " << m.format_version << ", written by cairn " << m.library_version << " at "
        << m.created;
  out << ", " << human_bytes(m.total_bytes()) << "\n";
  for (const auto& item : m.items) {
    out << "item '" << item.name << "' (" << item_kind_name(item.kind) << ", " << counted(item.leaves.size(), "leaf", "leaves")
        << (item.unread.empty() ? "" : ", " + std::to_string(item.unread.size()) + " that cairn cannot read") << ")\n";
    // Keys as printed (escaped), padded to the widest in the columns a terminal shows.
    std::vector<std::string> shown;
    std::vector<std::size_t> shown_columns;
    std::size_t width = 0;
    for (const auto& l : item.leaves) {
      shown.push_back(terminal_safe(key_label(l.key())));
      shown_columns.push_back(printed_columns(shown.back()));
      width = std::max(width, shown_columns.back());
    }
    for (std::size_t i = 0; i < item.leaves.size(); ++i) {
      const LeafRecord& l = item.leaves[i];
      std::string line = "  " + shown[i] + std::string(width - shown_columns[i] + 2, ' ') + dtype_name(l.dtype) + to_string(l.shape);
      if (l.shape.size() >= 2 && l.order == Order::F) line += " F-order";
      if (l.saved_from != l.dtype) line += std::string(" (saved from ") + dtype_name(l.saved_from) + ")";
      line += "  " + human_bytes(l.nbytes());
      if (l.sharding) line += "  sharded over " + l.sharding->describe();
      if (l.chunks.size() > 1) line += ", " + std::to_string(l.chunks.size()) + " chunks";
      out << line << "\n";
    }
    for (const auto& u : item.unread) out << "  " << one_line(u.path.str()) << "  not read: " << u.reason << "\n";
  }
  if (m.user_metadata.size()) out << "user metadata: " << m.user_metadata.dump() << "\n";
  return exit_ok;
}

}  // namespace cairn::cli
