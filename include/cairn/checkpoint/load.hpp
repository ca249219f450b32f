// Loading a tree from a checkpoint: into a new object (load<T>) or into an existing target.
// The load is planned first (which stored leaf goes where, what is missing or unexpected), so
// a strict mismatch is reported with every key before any data is read. Then only the byte
// ranges of the planned leaves are read, sorted by offset (small neighbours in one read),
// each verified against its CRC32C, cast and reordered where the target differs.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "cairn/checkpoint/box_reader.hpp"
#include "cairn/checkpoint/commit.hpp"
#include "cairn/checkpoint/data_files.hpp"
#include "cairn/checkpoint/options.hpp"
#include "cairn/format/files.hpp"
#include "cairn/kernels/cast.hpp"
#include "cairn/kernels/scatter.hpp"
#include "cairn/tree/walk.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// Stored keys of one item, indexed by their printed path.
class StoredIndex {
 public:
  explicit StoredIndex(const ItemRecord& item) : item_(item) {
    for (const auto& l : item.leaves) leaves_.emplace(l.key(), &l);
    auto add_child = [&](const KeyPath& p) {
      if (p.empty()) return;
      KeyPath parent = p;
      parent.pop_back();
      children_[parent.str()].push_back(p.back());
    };
    for (const auto& n : item.nodes) { nodes_.emplace(n.path.str(), &n); add_child(n.path); }
    for (const auto& l : item.leaves) add_child(l.path);
  }
  const LeafRecord* leaf(const std::string& key) const {
    auto it = leaves_.find(key);
    return it == leaves_.end() ? nullptr : it->second;
  }
  bool has_node(const std::string& key) const { return nodes_.count(key) != 0; }
  const std::vector<KeyEntry>* children(const std::string& key) const {
    auto it = children_.find(key);
    return it == children_.end() ? nullptr : &it->second;
  }
  const ItemRecord& item() const { return item_; }

 private:
  const ItemRecord& item_;
  std::unordered_map<std::string, const LeafRecord*> leaves_;
  std::unordered_map<std::string, const NodeRecord*> nodes_;
  std::unordered_map<std::string, std::vector<KeyEntry>> children_;
};

inline std::string join_key(const std::string& prefix, const std::string& key) {
  if (prefix.empty()) return key;
  if (key.empty()) return prefix;
  return prefix + "/" + key;
}

// A printed key path in canonical form (segments re-escaped), so "a/b/" and "a/b" agree.
inline std::string canonical_key(const std::string& key) {
  std::string out;
  for (const auto& seg : split_key_path(key)) {
    if (seg.empty()) continue;
    if (!out.empty()) out += '/';
    out += escape_key_segment(seg);
  }
  return out;
}

struct PlannedLeaf {
  std::string key;            // in the target
  const LeafRecord* stored;
  std::function<LeafBuffer(const StoredLeafInfo&)> prepare;
};

struct LoadPlan {
  std::vector<PlannedLeaf> leaves;
  LoadReport report;
};

template <class T>
LoadPlan plan_load(T& target, const StoredIndex& index, const LoadOptions& options) {
  LoadPlan plan;
  const std::string prefix = canonical_key(options.subtree);
  if (!prefix.empty() && !index.leaf(prefix) && !index.has_node(prefix))
    throw Error(ErrorKind::not_found, "the checkpoint has no subtree '" + prefix + "'", {}, prefix);
  std::unordered_map<std::string, bool> visited;
  auto skipped = [&](const std::string& key) {
    for (const auto& g : options.skip)
      if (glob_matches(g, key)) return true;
    return false;
  };
  walk_tree(
      target,
      [&](auto& value, const KeyPath& p, NodeKind) {
        using U = std::remove_cvref_t<decltype(value)>;
        // Containers whose children come from the checkpoint take the stored children now,
        // before their children are visited (so references taken below stay valid).
        if constexpr (requires(U& u, const StoredChildren& c) { node_traits<U>::prepare(u, c); }) {
          const std::string key = p.str();
          if (key.empty() || !skipped(key)) {
            const std::string stored = join_key(prefix, key);
            static const std::vector<KeyEntry> no_children;
            const auto* children = index.children(stored);
            if (children || index.has_node(stored)) {
              try {
                node_traits<U>::prepare(value, StoredChildren{children ? *children : no_children, !options.allow_missing});
              } catch (const Error& e) {
                throw e.with_key(stored);
              }
            }
          }
        }
        return true;
      },
      [&](auto& value, const KeyPath& p) {
        using L = std::remove_cvref_t<decltype(value)>;
        const std::string key = p.str();
        if (skipped(key)) { plan.report.skipped.push_back(key); return; }
        const std::string stored_key = join_key(prefix, key);
        const LeafRecord* stored = index.leaf(stored_key);
        if (!stored) { plan.report.missing.push_back(key); return; }
        visited[stored_key] = true;
        plan.leaves.push_back({key, stored, [&value](const StoredLeafInfo& info) {
                                 return leaf_traits<L>::prepare(value, info);
                               }});
      });
  for (const auto& l : index.item().leaves) {
    const std::string key = l.key();
    if (!key_path_has_prefix(key, prefix) || visited.count(key)) continue;
    std::string rel = prefix.empty() ? key : key.substr(std::min(key.size(), prefix.size() + 1));
    if (skipped(rel)) continue;  // skipped target keys are not "unexpected" either
    plan.report.unexpected.push_back(rel);
  }
  return plan;
}

inline void check_strict(const LoadReport& r, const LoadOptions& options, const std::string& dir) {
  const bool bad_missing = !options.allow_missing && !r.missing.empty();
  const bool bad_unexpected = !options.allow_unexpected && !r.unexpected.empty();
  if (!bad_missing && !bad_unexpected) return;
  std::string msg = "the target and the checkpoint have different keys.";
  auto list = [&](const std::vector<std::string>& keys) {
    std::string s;
    for (std::size_t i = 0; i < keys.size(); ++i) s += (i ? ", " : " ") + keys[i];
    return s;
  };
  if (bad_missing)
    msg += " In the target but not in the checkpoint (" + std::to_string(r.missing.size()) + "):" + list(r.missing) + ".";
  if (bad_unexpected)
    msg += " In the checkpoint but not in the target (" + std::to_string(r.unexpected.size()) + "):" +
           list(r.unexpected) + ".";
  msg += " Pass LoadOptions::partial(), allow_missing / allow_unexpected, or skip globs to load anyway.";
  throw Error(ErrorKind::structure_mismatch, msg, dir);
}

// Turns stored bytes into the target's dtype and order, a piece of whole outer blocks at a time.
class LeafConverter {
 public:
  LeafConverter(const LeafRecord& stored, const LeafBuffer& target, OnOverflow on_overflow)
      : s_(stored), t_(target), on_overflow_(on_overflow) {
    transpose_ = s_.shape.size() == 2 && s_.order != t_.order;
    if (transpose_) {
      // Outer blocks are columns of an F-order array, rows of a C-order one.
      outer_total_ = static_cast<std::uint64_t>(s_.order == Order::F ? s_.shape[1] : s_.shape[0]);
      inner_ = static_cast<std::uint64_t>(s_.order == Order::F ? s_.shape[0] : s_.shape[1]);
    }
  }
  bool identity() const { return !transpose_ && s_.dtype == t_.dtype; }
  // Elements per piece must be whole outer blocks when transposing.
  std::uint64_t piece_elements(std::uint64_t wanted) const {
    if (!transpose_ || inner_ == 0) return std::max<std::uint64_t>(wanted, 1);
    return std::max<std::uint64_t>(wanted / inner_, 1) * inner_;
  }
  // `src` holds stored elements [first, first + n) (bools already normalized).
  void convert(const void* src, std::uint64_t first, std::uint64_t n) {
    if (n == 0) return;
    const std::size_t out_size = dtype_size(t_.dtype);
    const void* p = src;
    if (s_.dtype != t_.dtype) {
      void* out = static_cast<char*>(t_.data) + first * out_size;
      if (transpose_) {
        scratch_.resize(static_cast<std::size_t>(n * out_size));
        out = scratch_.data();
      }
      cast_host(s_.dtype, src, t_.dtype, out, static_cast<std::size_t>(n), on_overflow_);
      if (!transpose_) return;
      p = scratch_.data();
    }
    if (!transpose_) {
      std::memcpy(static_cast<char*>(t_.data) + first * out_size, p, static_cast<std::size_t>(n * out_size));
      return;
    }
    if (inner_ == 0) return;
    scatter_transposed_host(p, t_.data, out_size, inner_, outer_total_, first / inner_, n / inner_);
  }

 private:
  const LeafRecord& s_;
  const LeafBuffer& t_;
  OnOverflow on_overflow_;
  bool transpose_ = false;
  std::uint64_t inner_ = 0, outer_total_ = 0;
  std::vector<unsigned char> scratch_;
};

struct ReadTask {
  PlannedLeaf* leaf;
  LeafBuffer buffer;
};

// Reads one leaf from its file, a piece at a time (bounded extra memory for any leaf size).
inline void read_leaf_streaming(ReadTask& task, DataFiles& files, const std::string& dir, OnOverflow on_overflow,
                                bool verify, LoadReport& report) {
  const LeafRecord& s = *task.leaf->stored;
  const ChunkRecord& c = s.chunks.front();
  const File& f = files.get(c.file);
  LeafConverter conv(s, task.buffer, on_overflow);
  const std::size_t item = dtype_size(s.dtype);
  std::uint32_t crc = 0;
  if (conv.identity()) {
    // Straight into the target, a piece at a time, each piece checksummed on this thread
    // while it is still in cache and while the kernel's readahead fetches the next one. (A
    // helper thread for the checksum was measured slower here: on two cores it competes with
    // the kernel's own I/O work.)
    auto* dst = static_cast<unsigned char*>(task.buffer.data);
    for (std::uint64_t done = 0; done < c.nbytes;) {
      const std::uint64_t n = std::min<std::uint64_t>(crc_piece_bytes, c.nbytes - done);
      f.read_at(dst + done, n, c.offset + done);
      if (verify) crc = crc32c_extend(crc, dst + done, static_cast<std::size_t>(n));
      done += n;
    }
    if (!verify) crc = c.crc32c;
    if (s.dtype == DType::bool_) normalize_bools(task.buffer.data, c.nbytes);
  } else {
    const std::uint64_t total = c.nbytes / item;
    const std::uint64_t per_piece = conv.piece_elements(read_piece_bytes / item);
    std::vector<unsigned char> piece(static_cast<std::size_t>(std::min(total, per_piece) * item));
    for (std::uint64_t first = 0; first < total; first += per_piece) {
      const std::uint64_t n = std::min(per_piece, total - first);
      f.read_at(piece.data(), n * item, c.offset + first * item);
      if (verify) crc = crc32c_extend(crc, piece.data(), static_cast<std::size_t>(n * item));
      if (s.dtype == DType::bool_) normalize_bools(piece.data(), n);
      conv.convert(piece.data(), first, n);
    }
    if (!verify) crc = c.crc32c;
  }
  report.bytes_read += c.nbytes;
  check_crc(crc, s, c, dir);
}

// Delivers a leaf whose bytes are already in memory (part of a coalesced read).
inline void deliver_from_memory(ReadTask& task, unsigned char* bytes, const std::string& dir,
                                OnOverflow on_overflow, bool verify) {
  const LeafRecord& s = *task.leaf->stored;
  const ChunkRecord& c = s.chunks.front();
  if (verify) check_crc(crc32c(bytes, static_cast<std::size_t>(c.nbytes)), s, c, dir);
  if (s.dtype == DType::bool_) normalize_bools(bytes, c.nbytes);
  LeafConverter conv(s, task.buffer, on_overflow);
  conv.convert(bytes, 0, c.nbytes / dtype_size(s.dtype));
}

inline void execute_plan(LoadPlan& plan, const std::string& dir, const LoadOptions& options) {
  DataFiles files(dir);
  std::vector<ReadTask> tasks, box_tasks;
  std::vector<CastRecord> lossy;  // casts that could lose information, not allowed
  tasks.reserve(plan.leaves.size());
  for (auto& leaf : plan.leaves) {
    const LeafRecord& s = *leaf.stored;
    // Every chunk must lie inside its file before the target allocates anything: shapes in
    // untrusted metadata could otherwise ask for terabytes.
    for (const auto& c : s.chunks) {
      const std::uint64_t fsize = files.size(c.file);
      if (c.offset > fsize || c.nbytes > fsize - c.offset)
        throw Error(ErrorKind::corrupt, "bytes " + std::to_string(c.offset) + ".." + std::to_string(c.offset + c.nbytes) +
                    " lie beyond the end of the file (" + std::to_string(fsize) + " bytes; truncated?)",
                    join_path(dir, c.file), leaf.key);
    }
    LeafBuffer buf;
    try {
      buf = leaf.prepare(StoredLeafInfo{s.dtype, s.shape, s.order, s.nbytes(), s.sharding ? &*s.sharding : nullptr});
    } catch (const Error& e) {
      throw Error(e.kind(), e.message(), dir, leaf.key);
    }
    if (buf.dtype != s.dtype) {
      if (!options.allow_cast)
        throw Error(ErrorKind::dtype_mismatch, std::string("stored as ") + dtype_name(s.dtype) + ", the target is " +
                    dtype_name(buf.dtype) + " and casting is disabled", dir, leaf.key);
      if (buf.dtype == DType::string || s.dtype == DType::string)
        throw Error(ErrorKind::dtype_mismatch, std::string("cannot cast ") + dtype_name(s.dtype) + " to " +
                    dtype_name(buf.dtype), dir, leaf.key);
      if (!cast_is_exact(s.dtype, buf.dtype) &&
          std::none_of(options.allow_lossy_cast.begin(), options.allow_lossy_cast.end(),
                       [&](const std::string& g) { return glob_matches(g, leaf.key); }))
        lossy.push_back({leaf.key, s.dtype, buf.dtype});
      plan.report.cast.push_back({leaf.key, s.dtype, buf.dtype});
    }
    const std::uint64_t want = element_count(s.shape) * dtype_size(buf.dtype);
    if (buf.nbytes != want)
      throw Error(ErrorKind::shape_mismatch, "target buffer holds " + std::to_string(buf.nbytes) + " bytes, " +
                  std::to_string(want) + " needed for stored shape " + to_string(s.shape), dir, leaf.key);
    if (s.chunks.size() != 1 || !buf.shards.empty()) {
      if (s.dtype == DType::string || buf.dtype == DType::string)
        throw Error(ErrorKind::dtype_mismatch, "a string leaf cannot be stored in chunks or loaded into shards", dir,
                    leaf.key);
      box_tasks.push_back({&leaf, std::move(buf)});
      continue;
    }
    plan.report.bytes_needed += s.chunks.front().nbytes;
    tasks.push_back({&leaf, std::move(buf)});
  }
  if (!lossy.empty()) {
    std::string list;
    for (std::size_t i = 0; i < lossy.size() && i < 20; ++i)
      list += (i ? ", " : "") + (lossy[i].key.empty() ? std::string("the root leaf") : lossy[i].key) + " (" +
              dtype_name(lossy[i].from) + " -> " + dtype_name(lossy[i].to) + ")";
    if (lossy.size() > 20) list += ", ... (" + std::to_string(lossy.size()) + " in all)";
    throw Error(ErrorKind::dtype_mismatch, "loading these leaves would need casts that can lose information: " + list +
                ". Give the target the stored dtype, or allow it for these keys with LoadOptions::allow_lossy_cast "
                "(key globs; \"**\" for all)", dir, lossy.size() == 1 ? lossy.front().key : "");
  }
  std::sort(tasks.begin(), tasks.end(), [](const ReadTask& a, const ReadTask& b) {
    const auto& ca = a.leaf->stored->chunks.front();
    const auto& cb = b.leaf->stored->chunks.front();
    return ca.file != cb.file ? ca.file < cb.file : ca.offset < cb.offset;
  });
  std::vector<unsigned char> group;
  for (std::size_t i = 0; i < tasks.size();) {
    const auto& c = tasks[i].leaf->stored->chunks.front();
    std::size_t j = i + 1;
    if (c.nbytes < small_leaf_bytes) {
      // Coalesce neighbours: small leaves of the same file separated by alignment padding.
      std::uint64_t end = c.offset + c.nbytes;
      while (j < tasks.size()) {
        const auto& n = tasks[j].leaf->stored->chunks.front();
        if (n.file != c.file || n.nbytes >= small_leaf_bytes || n.offset < end || n.offset - end > coalesce_gap_bytes ||
            n.offset + n.nbytes - c.offset > staging_bytes)
          break;
        end = n.offset + n.nbytes;
        ++j;
      }
    }
    try {
      if (j == i + 1) {
        read_leaf_streaming(tasks[i], files, dir, options.on_overflow, options.verify_checksums, plan.report);
      } else {
        const std::uint64_t end = tasks[j - 1].leaf->stored->chunks.front().offset +
                                  tasks[j - 1].leaf->stored->chunks.front().nbytes;
        group.resize(static_cast<std::size_t>(end - c.offset));
        files.get(c.file).read_at(group.data(), group.size(), c.offset);
        plan.report.bytes_read += group.size();
        for (std::size_t k = i; k < j; ++k)
          deliver_from_memory(tasks[k], group.data() + (tasks[k].leaf->stored->chunks.front().offset - c.offset), dir,
                              options.on_overflow, options.verify_checksums);
      }
    } catch (const Error& e) {
      throw e.with_key(tasks[i].leaf->key).with_file(join_path(dir, c.file));
    }
    i = j;
  }
  for (auto& t : box_tasks) BoxLeafReader(*t.leaf->stored, t.buffer, t.leaf->key, dir, options, plan.report).read(files);
  for (auto* list : {&tasks, &box_tasks})
    for (auto& t : *list) {
      if (t.buffer.commit) {
        try {
          t.buffer.commit();
        } catch (const Error& e) {
          throw e.with_key(t.leaf->key).with_file(dir);
        }
      }
      plan.report.loaded.push_back(t.leaf->key);
    }
}

}  // namespace detail

// Loads into an existing target (its "abstract" shape: types, and the sizes of fixed-size
// parts). On error the target is left valid but possibly partly loaded; use load<T>() for
// all-or-nothing.
template <class T>
LoadReport load(const std::string& path, T& target, const LoadOptions& options = {}) {
  require_tree_type<T>();
  const std::string dir = detail::readable_checkpoint_dir(detail::normalize_dir(path));
  CheckpointMetadata meta = detail::read_metadata(dir);
  const ItemRecord* item = meta.find_item(options.item);
  if (!item) throw Error(ErrorKind::not_found, "the checkpoint has no item '" + options.item + "'", dir);
  detail::StoredIndex index(*item);
  detail::LoadPlan plan = [&] {
    try {
      return detail::plan_load(target, index, options);
    } catch (const Error& e) {
      throw e.kind() == ErrorKind::corrupt ? e.with_file(detail::join_path(dir, detail::metadata_file)) : e;
    }
  }();
  detail::check_strict(plan.report, options, dir);
  detail::execute_plan(plan, dir, options);
  return std::move(plan.report);
}

// Loads a new T (default-constructed, then filled from the checkpoint).
template <class T>
T load(const std::string& path, const LoadOptions& options = {}) {
  T value{};
  load(path, value, options);
  return value;
}

// Loads a single leaf (or subtree) by key path: load_subtree<Eigen::MatrixXf>(dir, "params/dense/kernel").
template <class T>
T load_subtree(const std::string& path, const std::string& key, LoadOptions options = {}) {
  options.subtree = key;
  return load<T>(path, options);
}

// Structure, dtypes, shapes and user metadata of a checkpoint; reads no array data.
inline CheckpointMetadata metadata(const std::string& path) {
  return detail::read_metadata(detail::readable_checkpoint_dir(detail::normalize_dir(path)));
}

CAIRN_END_NAMESPACE
