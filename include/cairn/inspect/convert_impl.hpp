// SPDX-License-Identifier: Apache-2.0
// The runtime of inspect/convert.hpp.
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "cairn/checkpoint/save.hpp"
#include "cairn/inspect/convert.hpp"
#include "cairn/inspect/formats.hpp"
#include "cairn/safetensors/save.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// Leaves of a conversion's source read together (one read_arrays) when a writer fetches the
// first of them. Each value is handed to the view that writes it, so that a batch holds only
// its leaves not yet written.
struct ConvertBatch {
  std::string item;
  std::vector<std::string> keys;
  std::uint64_t bytes = 0;
  bool read = false;
  std::map<std::string, ArrayValue> values;  // read and not yet fetched
};

// What a conversion's batches share: the source, and the progress over all of them (batches
// are read in the order the writer takes them, so the bytes count up).
class ConvertSource {
 public:
  ConvertSource(const Location& src, const Progress& progress) : src_(src), progress_(progress) {}
  ReadArraysOptions options;     // the source's safetensors names
  std::uint64_t all_bytes = 0;  // of every batch

  // The leaf at `key` of `batch` with its value, which it owns: read with its batch, or alone
  // where a writer asks for it a second time.
  LeafView fetch(ConvertBatch& batch, const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!batch.read) {
      batch.values = read(batch.item, batch.keys, batch.bytes);
      batch.read = true;
      read_bytes_ += batch.bytes;
    }
    auto value = std::make_shared<ArrayValue>();
    if (auto it = batch.values.find(key); it != batch.values.end()) {
      *value = std::move(it->second);
      batch.values.erase(it);
    } else {
      *value = std::move(read(batch.item, {key}, 0).at(key));
    }
    LeafView view = leaf_traits<ArrayValue>::view(*value);
    view.owner = std::move(value);
    return view;
  }

 private:
  // The leaves at `keys`, with progress counted as `bytes` of all (0: not counted). A load's
  // own count is of the bytes it reads (a run of small leaves with the gaps between them), so
  // it is scaled to the leaves' bytes: the count goes up across batches and ends at all_bytes.
  std::map<std::string, ArrayValue> read(const std::string& item, const std::vector<std::string>& keys, std::uint64_t bytes) {
    ReadArraysOptions ro = options;
    ro.item = item;
    if (progress_ && bytes)
      ro.progress = [this, before = read_bytes_, bytes](std::uint64_t done, std::uint64_t total) {
        const long double part = total ? static_cast<long double>(std::min(done, total)) / static_cast<long double>(total) : 1;
        progress_(before + std::min(bytes, static_cast<std::uint64_t>(part * static_cast<long double>(bytes))), all_bytes);
      };
    return read_arrays(src_, keys, ro);
  }

  const Location& src_;
  const Progress& progress_;
  std::mutex mutex_;
  std::uint64_t read_bytes_ = 0;  // by the batches read so far
};

// A leaf of a conversion: read with its batch when the writer reaches it.
class ConvertedLeaf final : public LeafFetch {
 public:
  ConvertedLeaf(ConvertSource& source, std::shared_ptr<ConvertBatch> batch, std::string key)
      : source_(source), batch_(std::move(batch)), key_(std::move(key)) {}
  LeafView fetch() const override { return source_.fetch(*batch_, key_); }

 private:
  ConvertSource& source_;
  std::shared_ptr<ConvertBatch> batch_;
  std::string key_;
};

}  // namespace detail

CAIRN_API ConvertReport convert(const Location& src, const Location& dst, const ConvertOptions& options) {
  const Inspection source = inspect(src, options.safetensors);
  if (source.kind == LocationKind::checkpointer_root)
    throw Error(ErrorKind::invalid_argument, "this is a Checkpointer root: convert one of its steps", source.path);
  const CheckpointMetadata& m = source.metadata;
  std::vector<const ItemRecord*> items;
  if (!options.item.empty()) {
    const ItemRecord* item = m.find_item(options.item);
    if (!item) throw Error(ErrorKind::not_found, "the source has no item '" + options.item + "'", source.path);
    items.push_back(item);
  } else {
    for (const ItemRecord& item : m.items) items.push_back(&item);
  }
  const bool to_safetensors = options.to == ConvertTo::safetensors ||
                              (options.to == ConvertTo::automatic &&
                               (dst.key().ends_with(".safetensors") || options.max_file_bytes > 0));
  const bool to_orbax = options.to == ConvertTo::orbax;
  const detail::ForeignFormat* orbax = to_orbax ? detail::foreign_format_of(LocationKind::orbax) : nullptr;
  if (to_orbax && (!orbax || !orbax->save))
    throw Error(ErrorKind::invalid_argument, "converting to an Orbax checkpoint needs cairn/orbax.hpp (CMake: cairn::orbax, "
                "which links libzstd); this program was built without it", dst.describe());
  if (!to_orbax && options.orbax != ConvertToOrbax{})
    throw Error(ErrorKind::invalid_argument, "ConvertOptions::orbax chooses an Orbax checkpoint's layout: it goes with "
                "ConvertTo::orbax (cairn convert --to orbax)", dst.describe());
  if (options.link) {
    if (!to_orbax)
      throw Error(ErrorKind::invalid_argument, "link makes an Orbax checkpoint that reads a cairn checkpoint's data files: "
                  "it goes with ConvertTo::orbax (cairn convert --to orbax --link)", dst.describe());
    if (source.kind != LocationKind::checkpoint || !orbax->link)
      throw Error(ErrorKind::invalid_argument, "link shares a cairn checkpoint's data files; the source is not a cairn "
                  "checkpoint", source.path);
    if (!options.cast.empty() || !options.select.empty() || !options.exclude.empty() || options.max_file_bytes ||
        options.overwrite || !(options.item.empty() || options.item == default_item_name))
      throw Error(ErrorKind::invalid_argument, "link shares the tree item's bytes as stored: no cast, select, exclude, "
                  "max_file_bytes, overwrite or other item", dst.describe());
    const detail::ForeignExport r = orbax->link(src, dst, options);
    ConvertReport report;
    report.to = ConvertTo::orbax;
    report.items = {default_item_name};
    report.leaves = r.leaves;
    report.bytes = r.bytes;
    report.linked = r.shared;
    report.copied_by_store = r.copied_by_store;
    return report;
  }
  if ((to_safetensors || to_orbax) && items.size() > 1) {
    std::string names;
    for (const ItemRecord* i : items) names += (names.empty() ? "'" : ", '") + i->name + "'";
    throw Error(ErrorKind::invalid_argument, "the source holds the items " + names +
                std::string("; ") + (to_orbax ? "an Orbax checkpoint" : "a safetensors file") +
                " holds one: choose it (ConvertOptions::item, cairn convert --item NAME)",
                source.path);
  }
  auto matches = [](const std::vector<std::string>& globs, const std::string& k) {
    return std::any_of(globs.begin(), globs.end(), [&](const std::string& g) { return glob_matches(g, k); });
  };
  auto selected = [&](const std::string& k) {
    return (options.select.empty() || matches(options.select, k)) && !matches(options.exclude, k);
  };
  // Every glob asked for must match a leaf: one that matches none is a typo (or the wrong
  // source), and would have converted what was not meant without a word (an optimizer state
  // not left out, a model not cast). Casts count among the leaves converted.
  {
    std::vector<std::string> keys;
    for (const ItemRecord* item : items) {
      for (const auto& l : item->leaves) keys.push_back(l.key());
      for (const auto& u : item->unread) keys.push_back(u.path.str());
    }
    auto any_key = [&](const std::string& glob, bool converted_only) {
      return std::any_of(keys.begin(), keys.end(),
                         [&](const std::string& k) { return glob_matches(glob, k) && (!converted_only || selected(k)); });
    };
    std::vector<std::string> unmatched;
    for (const auto& g : options.select)
      if (!any_key(g, false)) unmatched.push_back("select '" + g + "' matches no leaf");
    for (const auto& g : options.exclude)
      if (!any_key(g, false)) unmatched.push_back("exclude '" + g + "' matches no leaf");
    for (const auto& c : options.cast)
      if (!any_key(c.pattern, true))
        unmatched.push_back("cast '" + c.pattern + "=" + dtype_name(c.dtype) + "' matches no leaf converted");
    if (!unmatched.empty())
      throw Error(ErrorKind::invalid_argument,
                  detail::listed_names(unmatched, 8, "; ") + "; " +
                      (keys.empty() ? std::string("it has no leaves") : "its leaves: " + detail::listed_names(keys)),
                  source.path);
  }
  // A leaf cairn cannot read (a safetensors tensor of a dtype it does not have) is never left
  // out of a conversion silently: it must be excluded by name.
  for (const ItemRecord* item : items)
    for (const auto& u : item->unread) {
      const std::string k = u.path.str();
      if (selected(k))
        throw Error(ErrorKind::dtype_mismatch, "this leaf is of " + u.reason + ": leave it out (ConvertOptions::exclude, "
                    "cairn convert --exclude '" + k + "') to convert the rest", source.path, k);
    }
  // Each item's structure, with a view of each selected leaf that reads its value when the
  // writer reaches it: in batches of about batch_bytes, in the order the writer takes them.
  detail::ConvertSource reader(src, options.progress);
  reader.options.safetensors = options.safetensors;
  const std::uint64_t batch_limit = options.batch_bytes ? options.batch_bytes : detail::convert_batch_bytes;
  std::vector<detail::ItemSnapshot> snaps;
  for (const ItemRecord* item : items) {
    std::vector<const LeafRecord*> chosen;
    for (const auto& l : item->leaves)
      if (selected(l.key())) chosen.push_back(&l);
    if (chosen.empty()) continue;
    // The writer's order: the tree's, but a safetensors file's tensors by element size.
    std::vector<const LeafRecord*> order = chosen;
    if (to_safetensors)
      std::stable_sort(order.begin(), order.end(), [&](const LeafRecord* a, const LeafRecord* b) {
        return detail::safetensors_writes_before(detail::cast_rule_target(options.cast, a->key(), a->dtype),
                                                 detail::cast_rule_target(options.cast, b->key(), b->dtype));
      });
    // Strings in batches of their own: the Orbax export reads them before any array.
    std::unordered_map<const LeafRecord*, std::shared_ptr<detail::ConvertBatch>> batch_of;
    std::shared_ptr<detail::ConvertBatch> strings, arrays;
    for (const LeafRecord* l : order) {
      std::shared_ptr<detail::ConvertBatch>& b = l->dtype == DType::string ? strings : arrays;
      if (!b || (b->bytes > 0 && b->bytes + l->nbytes() > batch_limit)) {
        b = std::make_shared<detail::ConvertBatch>();
        b->item = item->name;
      }
      b->keys.push_back(l->key());
      b->bytes += l->nbytes();
      reader.all_bytes += l->nbytes();
      batch_of.emplace(l, b);
    }
    detail::ItemSnapshot snap;
    snap.name = item->name;
    snap.kind = item->kind;
    snap.nodes = item->nodes;
    for (const LeafRecord* l : chosen) {
      detail::SnapshotLeaf leaf;
      leaf.path = l->path;
      leaf.view = LeafView{l->dtype, l->shape, Order::C, nullptr, l->nbytes()};
      leaf.fetch = std::make_shared<detail::ConvertedLeaf>(reader, batch_of.at(l), l->key());
      snap.leaves.push_back(std::move(leaf));
    }
    snaps.push_back(std::move(snap));
  }
  if (snaps.empty()) {
    // What was asked and what is there, so that the next try is a glob that matches.
    auto quoted = [](const std::vector<std::string>& globs) {
      std::string out;
      for (const auto& g : globs) out += (out.empty() ? "'" : ", '") + g + "'";
      return out;
    };
    std::vector<std::string> keys;
    for (const ItemRecord* item : items)
      for (const auto& l : item->leaves) keys.push_back(l.key());
    std::string asked = options.select.empty() ? "" : "select " + quoted(options.select);
    if (!options.exclude.empty()) asked += (asked.empty() ? "" : "; ") + std::string("exclude ") + quoted(options.exclude);
    throw Error(ErrorKind::invalid_argument,
                "no leaf matches the selection (" + asked + "); " +
                    (keys.empty() ? std::string("it has no leaves") : "its leaves: " + detail::listed_names(keys)),
                source.path);
  }
  ConvertReport report;
  // Leaves a rule matched and left alone (the first matching rule decides, as on save).
  for (const ItemRecord* item : items)
    for (const auto& l : item->leaves) {
      const std::string k = l.key();
      if (!selected(k)) continue;
      const auto rule = std::find_if(options.cast.begin(), options.cast.end(), [&](const CastRule& r) { return glob_matches(r.pattern, k); });
      if (rule != options.cast.end() && rule->dtype != l.dtype && detail::cast_rule_target(options.cast, k, l.dtype) == l.dtype)
        report.not_cast.push_back(k + " (" + dtype_name(l.dtype) + ")");
    }
  for (const auto& snap : snaps) report.items.push_back(snap.name);
  if (to_orbax) {
    if (options.max_file_bytes)
      throw Error(ErrorKind::invalid_argument, "max_file_bytes is a safetensors option; an Orbax checkpoint is one database",
                  dst.describe());
    if (options.overwrite)
      throw Error(ErrorKind::invalid_argument, "an Orbax export never replaces what is at its path: remove it first",
                  dst.describe());
    const detail::ForeignExport r = orbax->save(dst.store(), dst.key(), snaps.front(), options,
                                                m.user_metadata.is_object() ? m.user_metadata : Json::object());
    report.to = ConvertTo::orbax;
    report.leaves = r.leaves;
    report.bytes = r.bytes;
    report.cast = r.cast;
    return report;
  }
  if (to_safetensors) {
    const detail::ItemSnapshot& snap = snaps.front();
    SafetensorsSaveOptions o;
    o.overwrite = options.overwrite;
    o.cast = options.cast;
    o.max_file_bytes = options.max_file_bytes;
    for (const auto& [k, v] : m.user_metadata.items()) o.metadata[k] = v.is_string() ? v.as_string() : v.dump();
    const SafetensorsSaveReport r = detail::save_safetensors_snapshot(dst.store(), dst.key(), snap, o);
    report.to = ConvertTo::safetensors;
    report.leaves = snap.leaves.size();
    report.bytes = r.tensor_bytes;
    report.files = r.files;
    report.cast = r.cast;
    return report;
  }
  SaveOptions o;
  o.overwrite = options.overwrite;
  o.cast = options.cast;
  o.user_metadata = m.user_metadata.is_object() ? m.user_metadata : Json::object();
  const SaveReport r =
      detail::save_snapshots(dst.store(), dst.key(), [&] { return std::move(snaps); }, o);
  report.to = ConvertTo::checkpoint;
  report.leaves = r.leaves;
  report.bytes = r.bytes_written;
  for (const CastRecord& c : r.cast) report.cast.push_back(c.key);
  return report;
}

CAIRN_END_NAMESPACE
