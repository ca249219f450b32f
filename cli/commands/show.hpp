// SPDX-License-Identifier: Apache-2.0
// cairn show PATH KEY[SLICE]: a leaf's values, e.g. params/w[0:2, :], read with
// cairn::read_arrays: only the boxes it prints (the first and last few along each dimension of
// a large slice) are read.
#pragma once

#include <algorithm>
#include <functional>
#include <optional>
#include <ostream>

#include "../output.hpp"
#include "cairn/checkpoint/missing_key.hpp"

namespace cairn::cli {

// "params/w[0:2, :]" -> the key and, per dimension given, [start, stop) or one index.
struct Slice {
  struct Dim {
    std::optional<std::int64_t> start, stop;
    bool index = false;  // a single index: the dimension is dropped from the output
  };
  std::string key;
  std::vector<Dim> dims;
  bool given = false;
  // Where "..." stood among the dims (it is none of them): as many whole dimensions as the
  // array's rank leaves, as in numpy ("w[..., 0]": the first element of the last dimension).
  std::optional<std::size_t> ellipsis;
  // The dims, one per dimension of an array of rank `rank`: "..." spelled out, and those not
  // given at the end whole.
  std::vector<Dim> spelled(std::size_t rank, const std::string& for_key) const {
    if (dims.size() > rank)
      throw Error(ErrorKind::invalid_argument, std::to_string(dims.size()) + " indices for an array of rank " +
                  std::to_string(rank), {}, for_key);
    std::vector<Dim> out(dims.begin(), dims.end());
    out.insert(out.begin() + static_cast<std::ptrdiff_t>(ellipsis.value_or(dims.size())), rank - dims.size(), Dim{});
    return out;
  }
};

inline Slice parse_slice(const std::string& arg) {
  Slice s;
  const auto open = arg.find('[');
  if (open == std::string::npos) { s.key = arg; return s; }
  if (arg.back() != ']') throw Error(ErrorKind::invalid_argument, "a slice ends with ']': " + arg);
  s.key = arg.substr(0, open);
  s.given = true;
  std::string body = arg.substr(open + 1, arg.size() - open - 2);
  // numpy's chained indexing, "w[0][1]": each bracket indexes what the one before left, which is
  // "w[0, 1]" as long as every bracket but the last holds single indices only (each drops its
  // dimension). After a slice or "...", the next bracket would index the same dimension again.
  for (std::size_t joint; (joint = body.find("][")) != std::string::npos;) {
    const std::string before = body.substr(0, joint);
    if (before.find(':') != std::string::npos || before.find("...") != std::string::npos)
      throw Error(ErrorKind::invalid_argument, "a bracket after a slice indexes that dimension again; write one bracket, "
                  "as in '" + s.key + "[0:2, 1]': " + arg);
    body = before + "," + body.substr(joint + 2);
  }
  auto number = [&](std::string t) -> std::optional<std::int64_t> {
    t.erase(std::remove(t.begin(), t.end(), ' '), t.end());
    if (t.empty()) return std::nullopt;
    std::int64_t v = 0;
    if (!parse_integer(t, v)) throw Error(ErrorKind::invalid_argument, "'" + t + "' is not an index in " + arg);
    return v;
  };
  std::size_t start = 0;
  while (start <= body.size()) {
    const std::size_t comma = std::min(body.find(',', start), body.size());
    const std::string part = body.substr(start, comma - start);
    std::string bare = part;
    bare.erase(std::remove(bare.begin(), bare.end(), ' '), bare.end());
    if (bare == "...") {
      if (s.ellipsis) throw Error(ErrorKind::invalid_argument, "a slice takes one '...': " + arg);
      s.ellipsis = s.dims.size();
      start = comma + 1;
      continue;
    }
    Slice::Dim d;
    const auto colon = part.find(':');
    if (colon == std::string::npos) {
      d.index = true;
      d.start = number(part);
      if (!d.start) throw Error(ErrorKind::invalid_argument, "an empty index in " + arg);
    } else {
      if (part.find(':', colon + 1) != std::string::npos)
        throw Error(ErrorKind::invalid_argument, "slices take no step: " + arg);
      d.start = number(part.substr(0, colon));
      d.stop = number(part.substr(colon + 1));
    }
    s.dims.push_back(d);
    start = comma + 1;
  }
  return s;
}

// The box a slice selects of a shape (python's rules: negative from the end, stops clamped).
inline Box slice_box(const Slice& s, const Shape& shape, const std::string& key) {
  const std::vector<Slice::Dim> dims = s.spelled(shape.size(), key);
  Box b{Shape(shape.size(), 0), shape};
  for (std::size_t d = 0; d < dims.size(); ++d) {
    const std::int64_t n = shape[d];
    auto clamp = [&](std::int64_t v) { return std::clamp<std::int64_t>(v < 0 ? v + n : v, 0, n); };
    const auto& dim = dims[d];
    if (dim.index) {
      const std::int64_t i = *dim.start < 0 ? *dim.start + n : *dim.start;
      if (i < 0 || i >= n)
        throw Error(ErrorKind::invalid_argument, "index " + std::to_string(*dim.start) + " is out of range for dimension " +
                    std::to_string(d) + " of size " + std::to_string(n), {}, key);
      b.start[d] = i;
      b.shape[d] = 1;
    } else {
      const std::int64_t lo = dim.start ? clamp(*dim.start) : 0, hi = dim.stop ? clamp(*dim.stop) : n;
      b.start[d] = lo;
      b.shape[d] = std::max<std::int64_t>(0, hi - lo);
    }
  }
  return b;
}

inline constexpr std::int64_t show_threshold = 1000, show_edge = 3;

// `verify_first`: read the whole leaf first, so that every chunk the printed values come from
// is checked against its checksum (memory: the whole leaf); needed only for checkpoints
// written before block checksums, whose large chunks a slice reads in part, unverified.
// `item`: the checkpoint's item to show a leaf of ("" is "state"). `progress`: where progress
// of the reads goes (stderr on a terminal), or null. `inspected`: what inspect(path) found, where
// the caller already looked (else it looks).
inline int show(const std::string& path, const std::string& what, std::ostream& out, std::ostream& err,
                bool verify_first = false, std::string item = {}, std::ostream* progress = nullptr,
                const Inspection* inspected = nullptr, const SafetensorsOptions& names = {}) {
  if (item.empty()) item = default_item_name;
  const Slice s = parse_slice(what);
  std::optional<Inspection> looked;
  const Inspection& found = inspected ? *inspected : looked.emplace(inspect(path, names));
  if (found.kind == LocationKind::checkpointer_root)
    throw Error(ErrorKind::invalid_argument, "this is a Checkpointer root: show a leaf of one of its steps", path);
  const ItemRecord* stored_item = found.metadata.find_item(item);
  if (!stored_item) throw Error(ErrorKind::not_found, "no item '" + item + "' (cairn ls lists them)", path);
  std::string key = detail::resolve_key(s.key, [&](const std::string& k) { return stored_item->names(k); });
  auto find = [&](const std::string& k) -> const LeafRecord* { return stored_item->find_leaf(k); };
  const LeafRecord* leaf = find(key);
  // A safetensors file's own names ("layers.0.w") name the leaves ls prints as layers/0/w.
  if (!leaf && found.kind == LocationKind::safetensors && s.key.find('/') == std::string::npos) {
    std::string as_path = s.key;
    std::replace(as_path.begin(), as_path.end(), '.', '/');
    if (const LeafRecord* l = find(detail::canonical_key(as_path))) {
      leaf = l;
      key = l->key();
    }
  }
  if (!leaf) {
    std::string as_path = key;  // (a safetensors name, as above)
    if (found.kind == LocationKind::safetensors) std::replace(as_path.begin(), as_path.end(), '.', '/');
    const UnreadLeaf* u = stored_item->find_unread(key);  // a leaf of a dtype cairn does not have
    if (!u) u = stored_item->find_unread(detail::canonical_key(as_path));
    if (u) throw Error(ErrorKind::dtype_mismatch, "this leaf is of " + u->reason, path, u->path.str());
    // A subtree: what it holds (the first eight), so that the next try names a leaf.
    std::string under;
    std::size_t count = 0;
    for (const auto& l : stored_item->leaves) {
      const std::string k = l.key();
      if (key.empty() || !key_path_has_prefix(k, key)) continue;
      if (++count <= 8) under += (count > 1 ? ", " : "") + k;
    }
    if (count > 8) under += ", ... (" + std::to_string(count) + " in all)";
    if (count) throw Error(ErrorKind::not_found, "'" + key + "' is a subtree, not a leaf: its leaves are " + under, path, key);
    throw Error(ErrorKind::not_found, "no leaf '" + key + "'" + detail::missing_key_hint(stored_item->leaves, key) + " (cairn ls lists them)",
                path, key);
  }
  ProgressLine line(progress, "reading " + key);
  const ReadArraysOptions from_item{.item = item, .progress = line.callback(), .safetensors = names};
  if (verify_first && leaf->dtype != DType::string) (void)read_arrays(path, {key}, from_item);  // every chunk read whole and checked
  if (leaf->dtype == DType::string) {
    // A string is one value (its shape counts bytes, which a slice could cut mid-character):
    // an index is refused rather than passed over, so what is printed is what was asked for.
    if (s.given)
      throw Error(ErrorKind::invalid_argument, "'" + key + "' is a string: it takes no index (cairn show " + key +
                  " prints it whole)", path, key);
    const auto v = read_arrays(path, {key}, from_item);
    const auto& b = v.at(key).bytes;
    out << key_label(key) << ": string\n" << std::string(b.begin(), b.end()) << "\n";
    return exit_ok;
  }
  const Box box = slice_box(s, leaf->shape, key);
  // What is printed: the box, or when it is large its first and last few along each dimension.
  const std::size_t rank = box.shape.size();
  std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> runs(rank);  // per dim: [lo, hi) in the box
  const bool summarize = element_count(box.shape) > static_cast<std::uint64_t>(show_threshold);
  for (std::size_t d = 0; d < rank; ++d) {
    const std::int64_t n = box.shape[d];
    if (summarize && n > 2 * show_edge) runs[d] = {{0, show_edge}, {n - show_edge, n}};
    else runs[d] = {{0, n}};
  }
  std::vector<Box> boxes;
  std::vector<std::size_t> pick(rank, 0);
  while (true) {
    Box part{Shape(rank), Shape(rank)};
    for (std::size_t d = 0; d < rank; ++d) {
      part.start[d] = box.start[d] + runs[d][pick[d]].first;
      part.shape[d] = runs[d][pick[d]].second - runs[d][pick[d]].first;
    }
    boxes.push_back(part);
    std::size_t d = rank;
    while (d > 0 && ++pick[d - 1] == runs[d - 1].size()) pick[--d] = 0;
    if (d == 0) break;
  }
  const DType as = printed_dtype(leaf->dtype);
  const bool empty = element_count(box.shape) == 0;
  std::map<std::string, ArrayValue> got;
  LoadReport report;
  if (!empty) got = read_arrays(path, {key}, {.as = as, .boxes = boxes, .item = item, .progress = line.callback(), .safetensors = names}, &report);
  // Parts of chunks are verified by their blocks' checksums; a large chunk written before
  // block checksums has none, and only a read of all of it checks it.
  if (!verify_first && found.kind == LocationKind::checkpoint && report.unverified_bytes > 0)
    err << "cairn: note: these values were read from part of a chunk written without block checksums (cairn before "
           "2026-11-26), which its checksum cannot cover: they are not checksum-verified (show --verify reads the "
           "whole leaf first; cairn verify checks every byte)\n";
  const std::size_t item_size = dtype_size(as);
  // The element at (box-relative) index idx: find its part.
  auto at = [&](const std::vector<std::int64_t>& idx) -> std::string {
    const ArrayValue& v = got.at(key);
    std::uint64_t offset = 0;
    for (const Box& part : v.boxes) {
      bool inside = true;
      std::uint64_t linear = 0;
      for (std::size_t d = 0; d < rank && inside; ++d) {
        const std::int64_t g = box.start[d] + idx[d];
        inside = g >= part.start[d] && g < part.start[d] + part.shape[d];
        linear = linear * static_cast<std::uint64_t>(part.shape[d]) + static_cast<std::uint64_t>(g - part.start[d]);
      }
      if (inside) return value_text(as, v.bytes.data() + offset + linear * item_size, leaf->dtype);
      offset += byte_count(part.shape, item_size);
    }
    return "?";
  };
  std::string shown = "[";
  for (std::size_t d = 0; d < rank; ++d)
    shown += (d ? ", " : "") + std::to_string(box.start[d]) + ":" + std::to_string(box.start[d] + box.shape[d]);
  shown += "]";
  out << key_label(key) << ": " << dtype_name(leaf->dtype) << to_string(leaf->shape);
  if (s.given) out << ", showing " << shown;
  out << "\n";
  // Dimensions indexed by a single number are dropped, as numpy does.
  const std::vector<Slice::Dim> dims = s.spelled(rank, key);
  std::vector<std::size_t> shown_dims;
  for (std::size_t d = 0; d < rank; ++d)
    if (!dims[d].index) shown_dims.push_back(d);
  std::vector<std::int64_t> idx(rank, 0);
  std::string text;
  std::function<void(std::size_t)> print = [&](std::size_t level) {
    if (level == shown_dims.size()) { text += empty ? "" : at(idx); return; }
    const std::size_t d = shown_dims[level];
    text += '[';
    bool first = true;
    for (std::size_t r = 0; r < runs[d].size(); ++r) {
      if (r) text += level + 1 == shown_dims.size() ? ", ..." : ",\n" + std::string(level + 1, ' ') + "...";
      for (std::int64_t i = runs[d][r].first; i < runs[d][r].second; ++i) {
        if (!first) text += level + 1 == shown_dims.size() ? ", " : ",\n" + std::string(level + 1, ' ');
        first = false;
        idx[d] = i;
        print(level + 1);
      }
    }
    text += ']';
  };
  if (empty) {
    text = "[]";
  } else {
    print(0);
  }
  out << text << "\n";
  return exit_ok;
}

}  // namespace cairn::cli
