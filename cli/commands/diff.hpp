// SPDX-License-Identifier: Apache-2.0
// cairn diff A B [--atol X] [--rtol Y]: structure (keys, shapes, dtypes) and values, read as
// float64 (integers exactly) in groups of up to 256 MiB so that memory stays bounded; exit 0
// same, 1 different.
#pragma once

#include <cstdio>
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

struct DiffOptions {
  double atol = 0, rtol = 0;
  std::uint64_t max_report = 10;  // differing elements listed per leaf (h5diff's -r lists all; 0: none)
  std::ostream* progress = nullptr;  // where progress goes (stderr on a terminal), or null
  SafetensorsOptions names = {};     // a safetensors file's names (--separator, --aliases)
};

// Compares one item of A with the item of the same name in B; returns the differences and
// adds the leaves compared to `leaves`. Keys print as they are for the item "state", and as
// "item: key" for the others.
// Progress over every read of a diff: the bytes read before this one, out of both sides' all.
struct DiffProgress {
  ProgressLine* line = nullptr;
  std::uint64_t before = 0, total = 0;
  // read_arrays with progress counted on from what was read before.
  std::map<std::string, ArrayValue> read(const std::string& at, const std::vector<std::string>& keys, ReadArraysOptions ro) {
    if (line) ro.progress = line->callback(before, total);
    LoadReport r;
    auto v = read_arrays(at, keys, ro, &r);
    before += r.bytes_read;
    return v;
  }
};

inline int diff_item(const std::string& a, const std::string& b, const ItemRecord& item_a, const ItemRecord& item_b,
                     const DiffOptions& o, std::ostream& out, std::size_t& leaves, DiffProgress& progress) {
  const double atol = o.atol, rtol = o.rtol;
  const std::uint64_t max_report = o.max_report;
  const std::string prefix = item_a.name == default_item_name ? "" : item_a.name + ": ";
  const ReadArraysOptions from_item{.item = item_a.name, .safetensors = o.names};
  const ReadArraysOptions as_double{.as = DType::float64, .item = item_a.name, .safetensors = o.names};
  std::map<std::string, const LeafRecord*> la, lb;
  for (const auto& l : item_a.leaves) la[l.key()] = &l;
  for (const auto& l : item_b.leaves) lb[l.key()] = &l;
  leaves += la.size();
  int differences = 0;
  std::vector<std::string> compare;
  for (const auto& [k, l] : la) {
    auto it = lb.find(k);
    if (it == lb.end()) { out << "only in A: " << prefix << key_label(k) << "\n"; ++differences; continue; }
    const LeafRecord& r = *it->second;
    if (l->shape != r.shape) {
      out << "shape differs: " << prefix << key_label(k) << ": " << to_string(l->shape) << " vs " << to_string(r.shape) << "\n";
      ++differences;
      continue;
    }
    if (l->dtype != r.dtype) {
      out << "dtype differs: " << prefix << key_label(k) << ": " << dtype_name(l->dtype) << " vs " << dtype_name(r.dtype) << "\n";
      ++differences;
    }
    if ((l->dtype == DType::string) != (r.dtype == DType::string)) { ++differences; continue; }
    compare.push_back(k);
  }
  for (const auto& [k, l] : lb)
    if (!la.count(k)) { out << "only in B: " << prefix << key_label(k) << "\n"; ++differences; }
  // Values in groups of leaves up to 256 MiB as float64, so memory stays bounded.
  for (std::size_t i = 0; i < compare.size();) {
    std::vector<std::string> group;
    std::uint64_t bytes = 0;
    while (i < compare.size() && (group.empty() || bytes < (std::uint64_t{256} << 20))) {
      bytes += element_count(la[compare[i]]->shape) * 8;
      group.push_back(compare[i++]);
    }
    // Strings compare as bytes, and integers (and bools) on both sides exactly: both read as
    // stored, in one read per side. As float64 (which holds integers exactly only up to 2^53)
    // an RNG key or a counter that differs in its low bits read as the same. Any other pair
    // of numbers is read as float64.
    std::vector<std::string> as_stored, strings, numbers, floats;
    for (const auto& k : group) {
      const bool is_string = la[k]->dtype == DType::string;
      const bool is_float = is_float_dtype(la[k]->dtype) || is_float_dtype(lb[k]->dtype);
      (is_string ? strings : numbers).push_back(k);
      (is_float ? floats : as_stored).push_back(k);
    }
    const auto read_side = [&](const std::string& at) {
      std::map<std::string, ArrayValue> got;
      if (!as_stored.empty()) got = progress.read(at, as_stored, from_item);
      if (!floats.empty()) got.merge(progress.read(at, floats, as_double));
      return got;
    };
    const auto va = read_side(a), vb = read_side(b);
    for (const auto& k : strings)
      if (va.at(k).bytes != vb.at(k).bytes) { out << "values differ: " << prefix << key_label(k) << " (strings)\n"; ++differences; }
    // An integer element as a sign and a magnitude (every int64 and uint64 fits).
    struct Exact {
      bool negative;
      std::uint64_t magnitude;
    };
    const auto exact_at = [](const ArrayValue& v, std::size_t e) -> Exact {
      const unsigned char* p = v.bytes.data() + e * dtype_size(v.dtype);
      const auto from = [p](auto zero) {
        decltype(zero) x = zero;
        std::memcpy(&x, p, sizeof x);
        return x;
      };
      const auto from_signed = [](std::int64_t x) {
        return x < 0 ? Exact{true, std::uint64_t{0} - static_cast<std::uint64_t>(x)} : Exact{false, static_cast<std::uint64_t>(x)};
      };
      switch (v.dtype) {
        case DType::bool_: return {false, *p ? 1u : 0u};
        case DType::uint8: return {false, from(std::uint8_t{0})};
        case DType::uint16: return {false, from(std::uint16_t{0})};
        case DType::uint32: return {false, from(std::uint32_t{0})};
        case DType::uint64: return {false, from(std::uint64_t{0})};
        case DType::int8: return from_signed(from(std::int8_t{0}));
        case DType::int16: return from_signed(from(std::int16_t{0}));
        case DType::int32: return from_signed(from(std::int32_t{0}));
        default: return from_signed(from(std::int64_t{0}));
      }
    };
    const auto element_text = [&](const ArrayValue& v, std::size_t e, DType stored) {
      if (is_float_dtype(v.dtype)) return value_text(v.dtype, v.bytes.data() + 8 * e, stored);
      if (v.dtype == DType::bool_) return value_text(DType::bool_, v.bytes.data() + e);
      const Exact x = exact_at(v, e);
      return (x.negative ? "-" : "") + std::to_string(x.magnitude);
    };
    const auto number_text = [](double x) {  // printf writes a NaN's sign ("-nan")
      if (std::isnan(x)) return std::string("nan");
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.6g", x);
      return std::string(buf);
    };
    for (const auto& k : numbers) {
      const ArrayValue& x = va.at(k);
      const ArrayValue& y = vb.at(k);
      const bool exact = !is_float_dtype(x.dtype);
      const std::size_t n = static_cast<std::size_t>(x.elements());
      double max_abs = 0, max_rel = 0;
      std::size_t beyond = 0;
      std::vector<std::string> listed;
      for (std::size_t e = 0; e < n; ++e) {
        double d, q;  // |A - B| and |B|
        if (exact) {
          const Exact p = exact_at(x, e), r = exact_at(y, e);
          if (p.negative == r.negative && p.magnitude == r.magnitude) continue;
          d = p.negative == r.negative ? static_cast<double>(p.magnitude > r.magnitude ? p.magnitude - r.magnitude : r.magnitude - p.magnitude)
                                       : static_cast<double>(p.magnitude) + static_cast<double>(r.magnitude);
          q = static_cast<double>(r.magnitude);
        } else {
          double p, r;
          std::memcpy(&p, x.bytes.data() + 8 * e, 8);
          std::memcpy(&r, y.bytes.data() + 8 * e, 8);
          if (std::isnan(p) && std::isnan(r)) continue;
          if (p == r) continue;  // equal, infinities included
          d = std::fabs(p - r);
          q = std::fabs(r);
        }
        const double rel = q != 0 && std::isfinite(q) ? d / q : INFINITY;
        if (!(d <= max_abs)) max_abs = d;
        if (!(rel <= max_rel)) max_rel = rel;
        if (!(d <= atol + rtol * q)) {
          ++beyond;
          if (listed.size() < max_report)
            listed.push_back("  " + index_text(e, la[k]->shape) + " " + element_text(x, e, la[k]->dtype) + " " +
                             element_text(y, e, lb[k]->dtype) + " " + number_text(d));
        }
      }
      if (beyond) {
        out << "values differ: " << prefix << key_label(k) << ": max abs " << number_text(max_abs) << ", max rel "
            << number_text(max_rel) << ", " << beyond << " of " << n << " elements beyond tolerance\n";
        for (const auto& l : listed) out << l << "\n";
        if (beyond > listed.size() && max_report) out << "  ... (--max-report N lists more)\n";
        ++differences;
      }
    }
  }
  return differences;
}

// Every item of A and B: those in one only are differences, the others are compared leaf by
// leaf (a checkpoint's RNG and data-loader items as well as its tree).
inline int diff(const std::string& a, const std::string& b, const DiffOptions& o, std::ostream& out) {
  const Inspection ia = inspect(a, o.names), ib = inspect(b, o.names);
  for (const Inspection* i : {&ia, &ib})
    if (i->kind == LocationKind::checkpointer_root)
      throw Error(ErrorKind::invalid_argument, "this is a Checkpointer root: diff one of its steps", i->path);
  int differences = 0;
  std::size_t leaves = 0;
  ProgressLine line(o.progress, "comparing");
  DiffProgress progress{o.progress ? &line : nullptr, 0, 0};
  for (const ItemRecord& item : ia.metadata.items)
    if (const ItemRecord* other = ib.metadata.find_item(item.name))
      for (const auto& l : item.leaves)
        if (const LeafRecord* r = other->find_leaf(l.key())) progress.total += l.nbytes() + r->nbytes();
  for (const ItemRecord& item : ia.metadata.items) {
    const ItemRecord* other = ib.metadata.find_item(item.name);
    if (!other) {
      out << "only in A: item '" << item.name << "'\n";
      ++differences;
      continue;
    }
    differences += diff_item(a, b, item, *other, o, out, leaves, progress);
  }
  for (const ItemRecord& item : ib.metadata.items)
    if (!ia.metadata.find_item(item.name)) {
      out << "only in B: item '" << item.name << "'\n";
      ++differences;
    }
  if (differences) {
    out << differences << " difference" << (differences == 1 ? "" : "s") << "\n";
    return exit_differs;
  }
  out << "same: " << counted(leaves, "leaf", "leaves") << " (atol " << o.atol << ", rtol " << o.rtol << ")\n";
  return exit_ok;
}

}  // namespace cairn::cli
