// SPDX-License-Identifier: Apache-2.0
// The runtime of save(): a session per save that writes every item's leaves and commits them
// once on every rank. Compiled in every translation unit that includes cairn/cairn.hpp, or
// once with CAIRN_SEPARATE_COMPILATION (see docs/compile-time.md).
#pragma once

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cairn/checkpoint/commit.hpp"
#include "cairn/checkpoint/save_job.hpp"
#include "cairn/checkpoint/save.hpp"
#include "cairn/coordination/coordinator.hpp"
#include "cairn/store/location.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

// One SaveJob (checkpoint/save_job.hpp) run on this thread: whatever fails on this rank while
// writing still reaches the commit's collectives, so that every rank returns the same outcome.
CAIRN_API SaveReport save_snapshots(Store& store, const std::string& key,
                                    FunctionRef<std::vector<ItemSnapshot>()> snapshot, const SaveOptions& options) {
  SaveJob job(store, key, options, options.user_metadata, now_unix_ms());
  return job.run(snapshot, [](SaveJob& j, std::exception_ptr failure) { j.commit(failure); });
}

CAIRN_API AsyncSave save_snapshots_async(const Location& location,
                                         FunctionRef<std::vector<ItemSnapshot>()> snapshot, const SaveOptions& options) {
  auto job = std::make_shared<SaveJob>(location.store(), location.key(), options, options.user_metadata, now_unix_ms());
  job->keep_store(location.shared_store());
  auto worker = std::make_shared<SaveWorker>();
  worker->start(job, snapshot, options.async_memory_budget,
                [](SaveJob& j, std::exception_ptr failure) { j.commit(failure); });
  return AsyncSave(std::move(worker));
}

CAIRN_API SaveReport save_tree(Store& store, const std::string& key, FunctionRef<void(ItemSnapshot&)> view,
                               const SaveOptions& options) {
  return save_snapshots(
      store, key,
      [&] {
        // Moved in, not listed in braces: an initializer list would copy every leaf's view
        // (20 MB of a 100,000-leaf save's peak).
        std::vector<ItemSnapshot> items(1);
        items[0].name = default_item_name;
        view(items[0]);
        return items;
      },
      options);
}

}  // namespace detail

CAIRN_API AsyncSave& AsyncSave::operator=(AsyncSave&& other) {
  if (this != &other) {
    if (worker_) wait();
    worker_ = std::move(other.worker_);
  }
  return *this;
}

CAIRN_API AsyncSave::~AsyncSave() {
  if (!worker_) return;
  try {
    wait();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cairn::AsyncSave: the save failed, and its handle was destroyed without wait(): %s\n", e.what());
  }
}

CAIRN_API SaveReport AsyncSave::wait() {
  if (!worker_) throw Error(ErrorKind::invalid_argument, "this AsyncSave holds no save (it was waited for, or moved from)");
  std::shared_ptr<detail::SaveWorker> worker = std::move(worker_);
  worker_.reset();
  return worker->wait();
}

CAIRN_END_NAMESPACE
