// SPDX-License-Identifier: Apache-2.0
// Checkpointables: one checkpoint holding several named items. The array tree, a JSON object
// (epoch, loss, learning rate), and any cereal-serializable object (a data iterator's
// position, an RNG state, a config struct). Save all of them together; load all or a subset.
//
//   cairn::Items items;
//   items.tree("state", state).json("progress", progress).object("rng", rng_state);
//   cairn::save(path, items);
//   cairn::load(path, cairn::Items().tree("state", state).object("rng", rng_state));
#pragma once

#include <functional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <cereal/archives/portable_binary.hpp>

#include "cairn/checkpoint/load.hpp"
#include "cairn/checkpoint/save.hpp"

CAIRN_BEGIN_NAMESPACE

// Whose value an item is. A per-rank item (a data iterator's position, an RNG state) is each
// rank's own: every rank saves its value, stored as "<name>@<rank>", and a load gives each
// rank its own value back, on the same number of ranks (see docs/multiprocess.md).
enum class ItemScope { global, per_rank };
inline constexpr ItemScope per_rank = ItemScope::per_rank;

class Items {
 public:
  // A tree item. Pass a const object to save only, a mutable one to save or load into.
  template <class T>
  Items& tree(std::string name, T& value, ItemScope scope = ItemScope::global) {
    require_tree_type<std::remove_const_t<T>>();
    Entry e{std::move(name), ItemKind::tree, scope == ItemScope::per_rank, {}, {}};
    const T* cvalue = &value;
    e.snapshot = [cvalue](const std::string& n) { return detail::view_tree(n, *cvalue); };
    if constexpr (!std::is_const_v<T>) {
      T* target = &value;
      e.load = [target, per = e.per_rank](const Store& store, const std::string& key, const std::string& n, LoadOptions options) {
        options.item = n;
        return detail::load_item(store, key, *target, options, per);
      };
    }
    return add(std::move(e));
  }

  // A JSON object (or any JSON value), stored as its text.
  template <class J>
  Items& json(std::string name, J& value, ItemScope scope = ItemScope::global) {
    static_assert(std::is_same_v<std::remove_const_t<J>, Json>, "cairn::Items::json takes a cairn::Json");
    Entry e{std::move(name), ItemKind::json, scope == ItemScope::per_rank, {}, {}};
    const Json* cvalue = &value;
    e.snapshot = [cvalue](const std::string& n) { return detail::bytes_item(n, ItemKind::json, DType::string, cvalue->dump()); };
    if constexpr (!std::is_const_v<J>) {
      Json* target = &value;
      e.load = [target, per = e.per_rank](const Store& store, const std::string& key, const std::string& n, LoadOptions options) {
        options.item = n;
        options.subtree.clear();
        std::string text;
        LoadReport r = detail::load_item(store, key, text, options, per);
        if (r.loaded.empty()) return r;  // a per-rank item left as it is (allow_missing)
        *target = Json::parse(text, store.describe(key) + " (item '" + n + "')");
        return r;
      };
    }
    return add(std::move(e));
  }

  // Any object cereal can serialize, stored as a portable binary cereal archive.
  template <class T>
  Items& object(std::string name, T& value, ItemScope scope = ItemScope::global) {
    Entry e{std::move(name), ItemKind::cereal, scope == ItemScope::per_rank, {}, {}};
    const T* cvalue = &value;
    e.snapshot = [cvalue](const std::string& n) {
      std::ostringstream out;
      {
        cereal::PortableBinaryOutputArchive ar(out);
        ar(*cvalue);
      }
      return detail::bytes_item(n, ItemKind::cereal, DType::uint8, out.str());
    };
    if constexpr (!std::is_const_v<T>) {
      T* target = &value;
      e.load = [target, per = e.per_rank](const Store& store, const std::string& key, const std::string& n, LoadOptions options) {
        options.item = n;
        options.subtree.clear();
        std::vector<std::uint8_t> bytes;
        LoadReport r = detail::load_item(store, key, bytes, options, per);
        if (r.loaded.empty()) return r;
        try {
          std::istringstream in(std::string(bytes.begin(), bytes.end()));
          cereal::PortableBinaryInputArchive ar(in);
          T loaded{};
          ar(loaded);
          *target = std::move(loaded);
        } catch (const Error&) {
          throw;
        } catch (const std::exception& ex) {
          throw Error(ErrorKind::corrupt, std::string("cereal could not read the object: ") + ex.what(), store.describe(key), n);
        }
        return r;
      };
    }
    return add(std::move(e));
  }

  std::size_t size() const { return entries_.size(); }

  // For the writers: one snapshot per item (views into the objects' memory for trees).
  CAIRN_API std::vector<detail::ItemSnapshot> snapshots() const;

  // Loads every item named here from the checkpoint (reads nothing of the other items).
  CAIRN_API std::vector<std::pair<std::string, LoadReport>> load_all(const Location& location,
                                                                    const LoadOptions& options) const;

 private:
  struct Entry {
    std::string name;
    ItemKind kind;
    bool per_rank;
    std::function<detail::ItemSnapshot(const std::string&)> snapshot;
    std::function<LoadReport(const Store&, const std::string&, const std::string&, LoadOptions)> load;
  };
  CAIRN_API Items& add(Entry e);
  std::vector<Entry> entries_;
};

// Saves several named items as one checkpoint (committed atomically, like save()).
CAIRN_API SaveReport save(const Location& location, const Items& items, const SaveOptions& options = {});
// The same in the background, as save_async of a tree (the items' values are snapshotted
// before it returns).
CAIRN_API AsyncSave save_async(const Location& location, const Items& items, const SaveOptions& options = {});

// Loads the items named in `items` (a subset of the checkpoint's is fine); one report per item.
inline std::vector<std::pair<std::string, LoadReport>> load(const Location& location, const Items& items,
                                                            const LoadOptions& options = {}) {
  return items.load_all(location, options);
}
inline std::vector<std::pair<std::string, LoadReport>> load(const Location& location, Items& items,
                                                            const LoadOptions& options = {}) {
  return items.load_all(location, options);
}

CAIRN_END_NAMESPACE

// Header-only: the definitions of the entry points declared here (with
// CAIRN_SEPARATE_COMPILATION, only in the translation unit of cairn/src.hpp).
#if CAIRN_DEFINES_RUNTIME
#include "cairn/checkpoint/items_impl.hpp"
#endif
