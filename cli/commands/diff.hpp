// SPDX-License-Identifier: Apache-2.0
// cairn diff A B [--atol X] [--rtol Y]: structure (keys, shapes, dtypes) and values, read as
// float64 in groups of up to 256 MiB so that memory stays bounded; exit 0 same, 1 different.
#pragma once

#include <cmath>
#include <cstring>
#include <map>
#include <ostream>
#include <vector>

#include "../output.hpp"

namespace cairn::cli {

// The index of element `linear` of a C-order array of `shape`, as "[i, j]".
inline std::string index_text(std::uint64_t linear, const Shape& shape) {
  std::vector<std::int64_t> idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    const auto n = static_cast<std::uint64_t>(shape[d]);
    idx[d] = n ? static_cast<std::int64_t>(linear % n) : 0;
    linear = n ? linear / n : 0;
  }
  std::string out = "[";
  for (std::size_t d = 0; d < idx.size(); ++d) out += (d ? ", " : "") + std::to_string(idx[d]);
  return out + "]";
}

// `max_report`: how many differing elements of each leaf to list (h5diff's -r lists them all;
// 0 lists none).
inline int diff(const std::string& a, const std::string& b, double atol, double rtol, std::ostream& out,
                std::uint64_t max_report = 10) {
  const Inspection ia = inspect(a), ib = inspect(b);
  for (const Inspection* i : {&ia, &ib})
    if (i->kind == LocationKind::checkpointer_root)
      throw Error(ErrorKind::invalid_argument, "this is a Checkpointer root: diff one of its steps", i->path);
  const CheckpointMetadata &ma = ia.metadata, &mb = ib.metadata;
  std::map<std::string, const LeafRecord*> la, lb;
  for (const auto& l : ma.leaves()) la[l.key()] = &l;
  for (const auto& l : mb.leaves()) lb[l.key()] = &l;
  int differences = 0;
  std::vector<std::string> compare;
  for (const auto& [k, l] : la) {
    auto it = lb.find(k);
    if (it == lb.end()) { out << "only in A: " << k << "\n"; ++differences; continue; }
    const LeafRecord& r = *it->second;
    if (l->shape != r.shape) {
      out << "shape differs: " << k << ": " << to_string(l->shape) << " vs " << to_string(r.shape) << "\n";
      ++differences;
      continue;
    }
    if (l->dtype != r.dtype) {
      out << "dtype differs: " << k << ": " << dtype_name(l->dtype) << " vs " << dtype_name(r.dtype) << "\n";
      ++differences;
    }
    if ((l->dtype == DType::string) != (r.dtype == DType::string)) { ++differences; continue; }
    compare.push_back(k);
  }
  for (const auto& [k, l] : lb)
    if (!la.count(k)) { out << "only in B: " << k << "\n"; ++differences; }
  // Values in groups of leaves up to 256 MiB as float64, so memory stays bounded.
  for (std::size_t i = 0; i < compare.size();) {
    std::vector<std::string> group;
    std::uint64_t bytes = 0;
    while (i < compare.size() && (group.empty() || bytes < (std::uint64_t{256} << 20))) {
      bytes += element_count(la[compare[i]]->shape) * 8;
      group.push_back(compare[i++]);
    }
    std::vector<std::string> strings, numbers;
    for (const auto& k : group) (la[k]->dtype == DType::string ? strings : numbers).push_back(k);
    if (!strings.empty()) {
      const auto va = read_arrays(a, strings), vb = read_arrays(b, strings);
      for (const auto& k : strings)
        if (va.at(k).bytes != vb.at(k).bytes) { out << "values differ: " << k << " (strings)\n"; ++differences; }
    }
    if (numbers.empty()) continue;
    const auto va = read_arrays(a, numbers, {.as = DType::float64}), vb = read_arrays(b, numbers, {.as = DType::float64});
    for (const auto& k : numbers) {
      const auto& x = va.at(k).bytes;
      const auto& y = vb.at(k).bytes;
      const std::size_t n = x.size() / 8;
      double max_abs = 0, max_rel = 0;
      std::size_t beyond = 0;
      std::vector<std::string> listed;
      for (std::size_t e = 0; e < n; ++e) {
        double p, q;
        std::memcpy(&p, x.data() + 8 * e, 8);
        std::memcpy(&q, y.data() + 8 * e, 8);
        if (std::isnan(p) && std::isnan(q)) continue;
        if (p == q) continue;  // equal, infinities included
        const double d = std::fabs(p - q);
        const double rel = q != 0 ? d / std::fabs(q) : INFINITY;
        if (!(d <= max_abs)) max_abs = d;
        if (!(rel <= max_rel)) max_rel = rel;
        if (!(d <= atol + rtol * std::fabs(q))) {
          ++beyond;
          if (listed.size() < max_report) {
            char line[160];
            std::snprintf(line, sizeof line, " %s %s %.6g", value_text(DType::float64, x.data() + 8 * e, la[k]->dtype).c_str(),
                          value_text(DType::float64, y.data() + 8 * e, lb[k]->dtype).c_str(), d);
            listed.push_back("  " + index_text(e, la[k]->shape) + line);
          }
        }
      }
      if (beyond) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "max abs %.6g, max rel %.6g, %zu of %zu elements beyond tolerance", max_abs,
                      max_rel, beyond, n);
        out << "values differ: " << k << ": " << buf << "\n";
        for (const auto& l : listed) out << l << "\n";
        if (beyond > listed.size() && max_report) out << "  ... (--max-report N lists more)\n";
        ++differences;
      }
    }
  }
  if (differences) {
    out << differences << " difference" << (differences == 1 ? "" : "s") << "\n";
    return exit_differs;
  }
  out << "same: " << la.size() << " leaves (atol " << atol << ", rtol " << rtol << ")\n";
  return exit_ok;
}

}  // namespace cairn::cli
