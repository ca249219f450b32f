// SPDX-License-Identifier: Apache-2.0
// The runtime of checkpoint/items.hpp: the members of Items that do not depend on the items'
// types. Out of line with separate compilation because their bodies (the snapshot and report
// vectors, the entries' std::function calls) cost every file that includes cairn/cairn.hpp
// about 0.3 s to instantiate, whether it uses Items or not.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "cairn/checkpoint/items.hpp"

CAIRN_BEGIN_NAMESPACE

CAIRN_API std::vector<detail::ItemSnapshot> Items::snapshots() const {
  std::vector<detail::ItemSnapshot> out;
  for (const auto& e : entries_) {
    out.push_back(e.snapshot(e.name));
    out.back().per_rank = e.per_rank;
  }
  return out;
}

CAIRN_API std::vector<std::pair<std::string, LoadReport>> Items::load_all(const Location& location,
                                                                         const LoadOptions& options) const {
  const Store& store = location.store();
  const std::string& key = location.key();
  std::vector<std::pair<std::string, LoadReport>> reports;
  for (const auto& e : entries_) {
    if (!e.load)
      throw Error(ErrorKind::invalid_argument, "item '" + e.name + "' was given as const: it can be saved, not loaded",
                  store.describe(key));
    reports.emplace_back(e.name, e.load(store, key, e.name, options));
  }
  return reports;
}

CAIRN_API Items& Items::add(Entry e) {
  if (e.name.empty()) throw Error(ErrorKind::invalid_argument, "items need a name");
  if (e.per_rank && e.name.find('@') != std::string::npos)
    throw Error(ErrorKind::invalid_argument, "per-rank item '" + e.name + "': the name may not hold '@' (it is "
                "stored as '" + e.name + "@<rank>')");
  for (const auto& x : entries_)
    if (x.name == e.name) throw Error(ErrorKind::invalid_argument, "two items named '" + e.name + "'");
  entries_.push_back(std::move(e));
  return *this;
}

CAIRN_API SaveReport save(const Location& location, const Items& items, const SaveOptions& options) {
  return detail::save_snapshots(location.store(), location.key(), [&] { return items.snapshots(); }, options);
}

CAIRN_API AsyncSave save_async(const Location& location, const Items& items, const SaveOptions& options) {
  return detail::save_snapshots_async(location, [&] { return items.snapshots(); }, options);
}

CAIRN_END_NAMESPACE
