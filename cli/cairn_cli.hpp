// SPDX-License-Identifier: Apache-2.0
// The `cairn` command-line tool: ls, verify, show, diff and convert over checkpoints,
// Checkpointer roots and safetensors files (docs/cli.md). All of it is here, behind run(), so
// that tests and the fuzz target call it in-process; cli/main.cpp only forwards argv.
//
// Everything it opens is untrusted, and so is its command line: every failure is one line on
// `err` naming the file and the key, and an exit status; never a crash.
#pragma once

#include <cairn/cairn.hpp>
#include <cairn/format/files.hpp>         // is_committed_checkpoint, crc32c: inline helpers of the runtime
#include <cairn/checkpoint/stored_index.hpp>  // the stored keys a plan of its own looks up
#include <cairn/safetensors/header.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace cairn::cli {

inline constexpr int exit_ok = 0, exit_differs = 1, exit_error = 2;

inline constexpr const char* usage_text =
    "usage: cairn <command> [options]\n"
    "  ls PATH [--json]                  the tree (key, dtype, shape, sharding, bytes), items, user metadata;\n"
    "                                    on a Checkpointer root: its steps, the latest, their metrics\n"
    "  verify PATH                       read every chunk and check every checksum (exit 0 only if intact)\n"
    "  show PATH KEY[SLICE]              a leaf's values, e.g. params/w[0:2, :] (reads only what it prints)\n"
    "  diff A B [--atol X] [--rtol Y]    structure and values (exit 0 same, 1 different)\n"
    "  convert SRC DST [--cast GLOB=DTYPE]... [--select GLOB]... [--max-file-bytes N] [--overwrite]\n"
    "                                    between cairn checkpoints and safetensors (DST ending in\n"
    "                                    .safetensors, or a directory with --max-file-bytes, is safetensors)\n"
    "PATH is a checkpoint directory, a Checkpointer root, a .safetensors file or a *.index.json.\n";

// ---- sources ----

enum class SourceKind { checkpoint, checkpointer_root, safetensors };

inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

inline SourceKind classify(const std::string& path) {
  if (ends_with(path, ".safetensors") || ends_with(path, detail::safetensors_index_suffix)) return SourceKind::safetensors;
  const Store& store = detail::path_store();
  const std::string key = detail::normalize_key(path);
  if (!detail::is_committed_checkpoint(store, key) && !detail::describe_checkpointer_root(store, key).empty())
    return SourceKind::checkpointer_root;
  return SourceKind::checkpoint;
}

inline CheckpointMetadata read_metadata(const std::string& path) {
  return classify(path) == SourceKind::safetensors ? safetensors_metadata(path) : metadata(path);
}

// A leaf of any dtype, as the CLI reads it.
struct Values {
  DType dtype = DType::float64;
  Shape shape;                       // of the whole leaf, or of the box read
  std::vector<unsigned char> bytes;  // C order
  std::vector<Box> boxes;            // when read in boxes: where each part's bytes came from
};

// A leaf of read_values' plan: where its values go and how they are to be read.
struct ValuesTarget {
  Values* values;
  std::optional<DType> as;
  const std::vector<Box>* boxes;
};

inline LeafBuffer prepare_values(void* target, const StoredLeafInfo& info) {
  const ValuesTarget& t = *static_cast<const ValuesTarget*>(target);
  Values* v = t.values;
  v->dtype = t.as ? *t.as : info.dtype;
  const std::size_t item = dtype_size(v->dtype);
  LeafBuffer b;
  b.dtype = v->dtype;
  if (t.boxes->empty()) {
    v->shape = info.shape;
    v->bytes.resize(static_cast<std::size_t>(byte_count(info.shape, item)));
    b.data = v->bytes.data();
    b.nbytes = v->bytes.size();
    return b;
  }
  std::uint64_t total = 0;
  for (const Box& box : *t.boxes) total += byte_count(box.shape, item);
  b.nbytes = byte_count(info.shape, item);  // shards: the whole array's size
  v->bytes.resize(static_cast<std::size_t>(total));
  v->boxes = *t.boxes;
  v->shape = info.shape;
  std::uint64_t at = 0;
  for (const Box& box : *t.boxes) {
    b.shards.push_back({box, v->bytes.data() + at, MemoryKind::host, 0});
    at += byte_count(box.shape, item);
  }
  return b;
}

// Reads the stored leaves named in `keys` (every leaf when empty) of the source's main item,
// each as `as` (its stored dtype when unset), whole or only the `boxes` of it (then `bytes`
// holds the boxes one after another). One pass over the files, reading only what is asked.
inline std::map<std::string, Values> read_values(const std::string& path, const std::vector<std::string>& keys,
                                                 std::optional<DType> as, const std::vector<Box>& boxes = {},
                                                 std::uint64_t* bytes_read = nullptr) {
  std::map<std::string, Values> out;
  std::deque<ValuesTarget> targets;  // the plan points into it: a deque keeps addresses
  auto plan_fn = [&](const detail::StoredIndex& index) {
    detail::LoadPlan plan;
    for (const auto& l : index.item().leaves) {
      const std::string key = l.key();
      if (!keys.empty() && std::find(keys.begin(), keys.end(), key) == keys.end()) continue;
      targets.push_back({&out[key], as, &boxes});
      plan.leaves.push_back({key, &l, &targets.back(), &prepare_values});
    }
    for (const auto& k : keys)
      if (!index.leaf(k)) throw Error(ErrorKind::not_found, "no leaf '" + k + "' (cairn ls lists them)", {}, k);
    return plan;
  };
  LoadOptions options;
  options.allow_cast = true;
  options.allow_lossy_cast = {"*"};  // display and diff read as float64/int64; the caller chose `as`
  options.on_overflow = OnOverflow::saturate;
  const LoadReport report = classify(path) == SourceKind::safetensors
                                ? detail::load_safetensors_planned(detail::path_store(), path, options, {}, plan_fn)
                                : detail::load_planned(detail::path_store(), path, options, false, plan_fn);
  if (bytes_read) *bytes_read = report.bytes_read;
  return out;
}

// ---- output helpers ----

inline std::string human_bytes(std::uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) { v /= 1024; ++u; }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", v, units[u]);
  return buf;
}

inline Json leaf_json(const LeafRecord& l) {
  Json shape = Json::array();
  for (auto d : l.shape) shape.push_back(d);
  Json j = Json::object({{"key", l.key()}, {"dtype", dtype_name(l.dtype)}, {"shape", shape},
                         {"bytes", static_cast<std::int64_t>(l.nbytes())},
                         {"chunks", static_cast<std::int64_t>(l.chunks.size())}});
  if (l.saved_from != l.dtype) j["saved_from"] = dtype_name(l.saved_from);
  if (l.shape.size() >= 2 && l.order == Order::F) j["order"] = "F";
  if (l.sharding) j["sharding"] = l.sharding->describe();
  return j;
}

// ---- ls ----

inline int ls_root(const std::string& path, bool json, std::ostream& out) {
  const Store& store = detail::path_store();
  const std::string key = detail::normalize_key(path);
  std::vector<std::string> steps;
  for (const auto& e : store.list(key))
    if (e.is_prefix && !store.is_internal_name(e.name) && detail::is_committed_checkpoint(store, detail::join_key(key, e.name)))
      steps.push_back(e.name);
  std::sort(steps.begin(), steps.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  std::string latest;
  const std::string marker = detail::join_key(key, "latest");
  if (store.is_blob(marker)) {
    latest = detail::read_blob(store, marker, 4096);
    while (!latest.empty() && (latest.back() == '\n' || latest.back() == '\r')) latest.pop_back();
  }
  Json list = Json::array();
  for (const auto& s : steps) {
    Json step = Json::object({{"step", s}, {"latest", s == latest}});
    try {
      const CheckpointMetadata m = metadata(detail::join_key(key, s));
      step["created"] = m.created;
      step["bytes"] = static_cast<std::int64_t>(m.total_bytes());
      if (const Json* metrics = m.user_metadata.find("metrics")) step["metrics"] = *metrics;
    } catch (const Error& e) {
      step["error"] = e.what();
    }
    list.push_back(step);
  }
  if (json) {
    out << Json::object({{"path", path}, {"kind", "checkpointer_root"}, {"latest", latest}, {"steps", list}}).dump() << "\n";
    return exit_ok;
  }
  out << path << ": Checkpointer root, " << steps.size() << " steps" << (latest.empty() ? "" : ", latest " + latest) << "\n";
  for (const auto& s : list.as_array()) {
    out << "  " << s.at("step").as_string() << (s.at("latest").as_bool() ? " (latest)" : "");
    if (const Json* e = s.find("error")) out << "  damaged: " << e->as_string();
    if (const Json* c = s.find("created")) out << "  " << c->as_string() << "  " << human_bytes(static_cast<std::uint64_t>(s.at("bytes").as_int()));
    if (const Json* m = s.find("metrics"); m && m->size()) out << "  " << m->dump();
    out << "\n";
  }
  return exit_ok;
}

inline int ls(const std::string& path, bool json, std::ostream& out) {
  const SourceKind kind = classify(path);
  if (kind == SourceKind::checkpointer_root) return ls_root(path, json, out);
  const CheckpointMetadata m = read_metadata(path);
  if (json) {
    Json items = Json::array();
    for (const auto& item : m.items) {
      Json leaves = Json::array();
      for (const auto& l : item.leaves) leaves.push_back(leaf_json(l));
      items.push_back(Json::object({{"name", item.name}, {"kind", item_kind_name(item.kind)}, {"leaves", leaves}}));
    }
    Json j = Json::object({{"path", path}, {"kind", kind == SourceKind::safetensors ? "safetensors" : "checkpoint"}});
    if (kind == SourceKind::checkpoint) {
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
  if (kind == SourceKind::safetensors)
    out << path << ": safetensors, " << m.data_files.size() << " file" << (m.data_files.size() == 1 ? "" : "s");
  else
    out << path << ": cairn checkpoint, format " << m.format_version << ", written by cairn " << m.library_version << " at "
        << m.created;
  out << ", " << human_bytes(m.total_bytes()) << "\n";
  for (const auto& item : m.items) {
    out << "item '" << item.name << "' (" << item_kind_name(item.kind) << ", " << item.leaves.size() << " leaves)\n";
    auto shown = [](const LeafRecord& l) { return l.path.empty() ? std::string("(root)") : l.key(); };
    std::size_t width = 0;
    for (const auto& l : item.leaves) width = std::max(width, shown(l).size());
    for (const auto& l : item.leaves) {
      std::string line = "  " + shown(l) + std::string(width - shown(l).size() + 2, ' ') + dtype_name(l.dtype) + to_string(l.shape);
      if (l.shape.size() >= 2 && l.order == Order::F) line += " F-order";
      if (l.saved_from != l.dtype) line += std::string(" (saved from ") + dtype_name(l.saved_from) + ")";
      line += "  " + human_bytes(l.nbytes());
      if (l.sharding) line += "  sharded over " + l.sharding->describe();
      if (l.chunks.size() > 1) line += ", " + std::to_string(l.chunks.size()) + " chunks";
      out << line << "\n";
    }
  }
  if (m.user_metadata.size()) out << "user metadata: " << m.user_metadata.dump() << "\n";
  return exit_ok;
}

// ---- verify ----

struct Problem {
  std::string file, key, why;
  std::uint64_t offset = 0, end = 0;
};

// Every chunk of the records read (in 4 MiB pieces) and, with check_crc, checksummed; the
// problems found. `dir` is where the data files are.
inline std::vector<Problem> verify_chunks(const std::string& dir, const CheckpointMetadata& m, bool check_crc,
                                          std::uint64_t& chunks, std::uint64_t& bytes) {
  std::vector<Problem> problems;
  const Store& store = detail::path_store();
  std::map<std::string, std::unique_ptr<StoreReader>> files;
  std::vector<unsigned char> buf(std::size_t{4} << 20);
  for (const auto& item : m.items)
    for (const auto& l : item.leaves)
      for (const auto& c : l.chunks) {
        ++chunks;
        const std::string file = store.describe(detail::join_key(dir, c.file));
        try {
          auto& r = files[c.file];
          if (!r) r = store.open(detail::join_key(dir, c.file));
          std::uint32_t crc = 0;
          for (std::uint64_t at = 0; at < c.nbytes;) {
            const std::uint64_t n = std::min<std::uint64_t>(buf.size(), c.nbytes - at);
            r->read_at(buf.data(), n, c.offset + at);
            if (check_crc) crc = crc32c_extend(crc, buf.data(), static_cast<std::size_t>(n));
            at += n;
          }
          bytes += c.nbytes;
          if (check_crc && crc != c.crc32c)
            problems.push_back({file, l.key(), "checksum mismatch (CRC32C " + std::to_string(crc) + ", expected " +
                                std::to_string(c.crc32c) + ")", c.offset, c.offset + c.nbytes});
        } catch (const Error& e) {
          problems.push_back({file, l.key(), e.message(), c.offset, c.offset + c.nbytes});
        }
      }
  return problems;
}

inline int verify(const std::string& path, std::ostream& out) {
  const SourceKind kind = classify(path);
  if (kind == SourceKind::checkpointer_root) {
    const Store& store = detail::path_store();
    int status = exit_ok;
    for (const auto& e : store.list(detail::normalize_key(path)))
      if (e.is_prefix && !store.is_internal_name(e.name) &&
          detail::is_committed_checkpoint(store, detail::join_key(detail::normalize_key(path), e.name))) {
        try {
          status = std::max(status, verify(detail::join_key(detail::normalize_key(path), e.name), out));
        } catch (const Error& err) {
          out << "BAD " << err.what() << "\n";
          status = exit_differs;
        }
      }
    return status;
  }
  std::uint64_t chunks = 0, bytes = 0;
  std::vector<Problem> problems;
  const bool safetensors = kind == SourceKind::safetensors;
  if (safetensors) {
    // No checksums to check: the header is validated, and every tensor byte read.
    const CheckpointMetadata m = safetensors_metadata(path);
    problems = verify_chunks(detail::key_parent(detail::normalize_key(path)), m, false, chunks, bytes);
  } else {
    const CheckpointMetadata m = metadata(path);  // checks the marker and both metadata files
    problems = verify_chunks(detail::path_store().readable_checkpoint(detail::normalize_key(path)), m, true, chunks, bytes);
  }
  for (const auto& p : problems)
    out << "BAD " << p.file << " bytes " << p.offset << ".." << p.end << " (key '" << p.key << "'): " << p.why << "\n";
  if (!problems.empty()) {
    out << "FAILED " << path << ": " << problems.size() << " of " << chunks << " chunks bad\n";
    return exit_differs;
  }
  out << "OK " << path << ": " << chunks << (safetensors ? " tensors, " : " chunks, ") << human_bytes(bytes)
      << (safetensors ? " read; the header is valid (safetensors has no checksums)\n" : ", every checksum matches\n");
  return exit_ok;
}

// ---- show ----

// "params/w[0:2, :]" -> the key and, per dimension given, [start, stop) or one index.
struct Slice {
  struct Dim {
    std::optional<std::int64_t> start, stop;
    bool index = false;  // a single index: the dimension is dropped from the output
  };
  std::string key;
  std::vector<Dim> dims;
  bool given = false;
};

inline Slice parse_slice(const std::string& arg) {
  Slice s;
  const auto open = arg.find('[');
  if (open == std::string::npos) { s.key = arg; return s; }
  if (arg.back() != ']') throw Error(ErrorKind::invalid_argument, "a slice ends with ']': " + arg);
  s.key = arg.substr(0, open);
  s.given = true;
  const std::string body = arg.substr(open + 1, arg.size() - open - 2);
  auto number = [&](std::string t) -> std::optional<std::int64_t> {
    t.erase(std::remove(t.begin(), t.end(), ' '), t.end());
    if (t.empty()) return std::nullopt;
    std::int64_t v = 0;
    if (!detail::parse_int64(t, v)) throw Error(ErrorKind::invalid_argument, "'" + t + "' is not an index in " + arg);
    return v;
  };
  std::size_t start = 0;
  while (start <= body.size()) {
    const std::size_t comma = std::min(body.find(',', start), body.size());
    const std::string part = body.substr(start, comma - start);
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
  if (s.dims.size() > shape.size())
    throw Error(ErrorKind::invalid_argument, std::to_string(s.dims.size()) + " indices for an array of rank " +
                std::to_string(shape.size()), {}, key);
  Box b{Shape(shape.size(), 0), shape};
  for (std::size_t d = 0; d < s.dims.size(); ++d) {
    const std::int64_t n = shape[d];
    auto clamp = [&](std::int64_t v) { return std::clamp<std::int64_t>(v < 0 ? v + n : v, 0, n); };
    const auto& dim = s.dims[d];
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

// One value as text: integers exactly, floats with 8 significant digits, bools as numpy does.
inline std::string value_text(DType as, const unsigned char* p) {
  char buf[40];
  if (as == DType::bool_) return *p ? "True" : "False";
  if (as == DType::int64) { std::int64_t v; std::memcpy(&v, p, 8); return std::to_string(v); }
  if (as == DType::uint64) { std::uint64_t v; std::memcpy(&v, p, 8); return std::to_string(v); }
  double v;
  std::memcpy(&v, p, 8);
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::snprintf(buf, sizeof buf, "%.8g", v);
  return buf;
}

inline int show(const std::string& path, const std::string& what, std::ostream& out) {
  const Slice s = parse_slice(what);
  const std::string key = detail::canonical_key(s.key);
  const CheckpointMetadata m = read_metadata(path);
  const LeafRecord* leaf = nullptr;
  for (const auto& l : m.leaves())
    if (l.key() == key) leaf = &l;
  if (!leaf) throw Error(ErrorKind::not_found, "no leaf '" + key + "' (cairn ls lists them)", path, key);
  if (leaf->dtype == DType::string) {
    const auto v = read_values(path, {key}, std::nullopt);
    const auto& b = v.at(key).bytes;
    out << key << ": string\n" << std::string(b.begin(), b.end()) << "\n";
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
  const DType as = leaf->dtype == DType::bool_ ? DType::bool_
                   : is_float_dtype(leaf->dtype) ? DType::float64
                   : (leaf->dtype == DType::uint64 || leaf->dtype == DType::uint32 || leaf->dtype == DType::uint16 ||
                      leaf->dtype == DType::uint8) ? DType::uint64
                                                    : DType::int64;
  const bool empty = element_count(box.shape) == 0;
  std::map<std::string, Values> got;
  if (!empty) got = read_values(path, {key}, as, boxes);
  const std::size_t item = dtype_size(as);
  // The element at (box-relative) index idx: find its part.
  auto at = [&](const std::vector<std::int64_t>& idx) -> std::string {
    const Values& v = got.at(key);
    std::uint64_t offset = 0;
    for (const Box& part : v.boxes) {
      bool inside = true;
      std::uint64_t linear = 0;
      for (std::size_t d = 0; d < rank && inside; ++d) {
        const std::int64_t g = box.start[d] + idx[d];
        inside = g >= part.start[d] && g < part.start[d] + part.shape[d];
        linear = linear * static_cast<std::uint64_t>(part.shape[d]) + static_cast<std::uint64_t>(g - part.start[d]);
      }
      if (inside) return value_text(as, v.bytes.data() + offset + linear * item);
      offset += byte_count(part.shape, item);
    }
    return "?";
  };
  std::string shown = "[";
  for (std::size_t d = 0; d < rank; ++d)
    shown += (d ? ", " : "") + std::to_string(box.start[d]) + ":" + std::to_string(box.start[d] + box.shape[d]);
  shown += "]";
  out << key << ": " << dtype_name(leaf->dtype) << to_string(leaf->shape);
  if (s.given) out << ", showing " << shown;
  out << "\n";
  // Dimensions indexed by a single number are dropped, as numpy does.
  std::vector<std::size_t> shown_dims;
  for (std::size_t d = 0; d < rank; ++d)
    if (!(d < s.dims.size() && s.dims[d].index)) shown_dims.push_back(d);
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

// ---- diff ----

inline int diff(const std::string& a, const std::string& b, double atol, double rtol, std::ostream& out) {
  const CheckpointMetadata ma = read_metadata(a), mb = read_metadata(b);
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
      const auto va = read_values(a, strings, std::nullopt), vb = read_values(b, strings, std::nullopt);
      for (const auto& k : strings)
        if (va.at(k).bytes != vb.at(k).bytes) { out << "values differ: " << k << " (strings)\n"; ++differences; }
    }
    if (numbers.empty()) continue;
    const auto va = read_values(a, numbers, DType::float64), vb = read_values(b, numbers, DType::float64);
    for (const auto& k : numbers) {
      const auto& x = va.at(k).bytes;
      const auto& y = vb.at(k).bytes;
      const std::size_t n = x.size() / 8;
      double max_abs = 0, max_rel = 0;
      std::size_t beyond = 0;
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
        if (!(d <= atol + rtol * std::fabs(q))) ++beyond;
      }
      if (beyond) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "max abs %.6g, max rel %.6g, %zu of %zu elements beyond tolerance", max_abs,
                      max_rel, beyond, n);
        out << "values differ: " << k << ": " << buf << "\n";
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

// ---- convert ----

inline bool is_safetensors_target(const std::string& dst, std::uint64_t max_file_bytes) {
  return ends_with(dst, ".safetensors") || max_file_bytes > 0;
}

inline int convert(const std::string& src, const std::string& dst, const std::vector<CastRule>& cast,
                   const std::vector<std::string>& select, std::uint64_t max_file_bytes, bool overwrite, std::ostream& out) {
  const CheckpointMetadata m = read_metadata(src);
  const ItemRecord* item = m.find_item(default_item_name);
  if (!item) throw Error(ErrorKind::not_found, "the source has no item 'state' to convert", src);
  std::vector<std::string> keys;
  for (const auto& l : item->leaves) {
    const std::string k = l.key();
    if (select.empty() || std::any_of(select.begin(), select.end(), [&](const std::string& g) { return glob_matches(g, k); }))
      keys.push_back(k);
  }
  if (keys.empty()) throw Error(ErrorKind::invalid_argument, "no leaf matches the selection", src);
  const auto values = read_values(src, keys, std::nullopt);
  detail::ItemSnapshot snap;
  snap.name = default_item_name;
  snap.nodes = item->nodes;
  for (const auto& l : item->leaves) {
    auto it = values.find(l.key());
    if (it == values.end()) continue;
    const Values& v = it->second;
    snap.leaves.push_back({l.path, LeafView{v.dtype, v.shape, Order::C, v.bytes.data(), v.bytes.size()}});
  }
  if (is_safetensors_target(dst, max_file_bytes)) {
    SafetensorsSaveOptions o;
    o.overwrite = overwrite;
    o.cast = cast;
    o.max_file_bytes = max_file_bytes;
    for (const auto& [k, v] : m.user_metadata.items())
      if (v.is_string()) o.metadata[k] = v.as_string();
      else o.metadata[k] = v.dump();
    auto r = detail::save_safetensors_snapshot(detail::path_store(), dst, snap, o);
    out << "wrote " << dst << ": " << snap.leaves.size() << " tensors, " << human_bytes(r.tensor_bytes) << " in "
        << r.files.size() << " file" << (r.files.size() == 1 ? "" : "s");
    if (!r.cast.empty()) out << ", " << r.cast.size() << " cast";
    out << "\n";
    return exit_ok;
  }
  SaveOptions o;
  o.overwrite = overwrite;
  o.cast = cast;
  o.user_metadata = m.user_metadata.is_object() ? m.user_metadata : Json::object();
  const SaveReport r = detail::save_snapshots(detail::path_store(), dst, [&] { return std::vector<detail::ItemSnapshot>{snap}; }, o);
  out << "wrote " << dst << ": cairn checkpoint, " << r.leaves << " leaves, " << human_bytes(r.bytes_written);
  if (!r.cast.empty()) out << ", " << r.cast.size() << " cast";
  out << "\n";
  return exit_ok;
}

// ---- the command line ----

inline CastRule parse_cast(const std::string& arg) {
  const auto eq = arg.rfind('=');
  DType d;
  if (eq == std::string::npos || eq == 0 || !parse_dtype(arg.substr(eq + 1), d))
    throw Error(ErrorKind::invalid_argument, "--cast takes GLOB=DTYPE (a dtype as numpy names it, e.g. 'params/*=bfloat16'), "
                "not '" + arg + "'");
  return {arg.substr(0, eq), d};
}

inline double parse_double(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end || !(d >= 0)) throw Error(ErrorKind::invalid_argument, flag + " takes a number >= 0, not '" + v + "'");
  return d;
}

// Runs the tool on `args` (without the program name); returns the exit status.
inline int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  try {
    if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
      (args.empty() ? err : out) << usage_text;
      return args.empty() ? exit_error : exit_ok;
    }
    const std::string& cmd = args[0];
    std::vector<std::string> pos;
    bool json = false, overwrite = false;
    double atol = 0, rtol = 0;
    std::vector<CastRule> cast;
    std::vector<std::string> select;
    std::uint64_t max_file_bytes = 0;
    for (std::size_t i = 1; i < args.size(); ++i) {
      const std::string& a = args[i];
      auto value = [&]() -> const std::string& {
        if (i + 1 >= args.size()) throw Error(ErrorKind::invalid_argument, a + " needs a value");
        return args[++i];
      };
      if (a == "--json") json = true;
      else if (a == "--overwrite") overwrite = true;
      else if (a == "--atol") atol = parse_double(a, value());
      else if (a == "--rtol") rtol = parse_double(a, value());
      else if (a == "--cast") cast.push_back(parse_cast(value()));
      else if (a == "--select") select.push_back(value());
      else if (a == "--max-file-bytes") {
        const std::string& v = value();
        std::int64_t n = 0;
        if (!detail::parse_int64(v, n) || n <= 0)
          throw Error(ErrorKind::invalid_argument, "--max-file-bytes takes a positive number of bytes, not '" + v + "'");
        max_file_bytes = static_cast<std::uint64_t>(n);
      } else if (a.size() > 1 && a[0] == '-' && a[1] == '-') throw Error(ErrorKind::invalid_argument, "unknown option " + a);
      else pos.push_back(a);
    }
    auto need = [&](std::size_t n, const char* what) {
      if (pos.size() != n) throw Error(ErrorKind::invalid_argument, "cairn " + cmd + " takes " + what);
    };
    if (cmd == "ls") { need(1, "PATH"); return ls(pos[0], json, out); }
    if (cmd == "verify") { need(1, "PATH"); return verify(pos[0], out); }
    if (cmd == "show") { need(2, "PATH KEY[SLICE]"); return show(pos[0], pos[1], out); }
    if (cmd == "diff") { need(2, "A B"); return diff(pos[0], pos[1], atol, rtol, out); }
    if (cmd == "convert") { need(2, "SRC DST"); return convert(pos[0], pos[1], cast, select, max_file_bytes, overwrite, out); }
    throw Error(ErrorKind::invalid_argument, "unknown command '" + cmd + "' (cairn --help lists them)");
  } catch (const Error& e) {
    err << e.what() << "\n";  // "cairn: <kind>: <file>: key '<key>': <why>"
  } catch (const std::exception& e) {
    err << "cairn: error: " << e.what() << "\n";
  }
  return exit_error;
}

}  // namespace cairn::cli
