// SPDX-License-Identifier: Apache-2.0
// ThreadCoordinator: N ranks inside one process, one thread each, for tests of the
// multi-rank commit protocol without MPI. ThreadGroup holds the shared state; each thread
// takes the coordinator of its rank:
//
//   cairn::ThreadGroup group(4);
//   std::vector<std::thread> ranks;
//   for (int r = 0; r < 4; ++r)
//     ranks.emplace_back([&, r] { cairn::save(store, "ckpt", state[r], {.coordinator = &group.rank(r)}); });
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cairn/coordination/coordinator.hpp"
#include "cairn/core/error.hpp"

CAIRN_BEGIN_NAMESPACE

class ThreadGroup {
 public:
  CAIRN_API explicit ThreadGroup(int size);
  CAIRN_API ~ThreadGroup();
  ThreadGroup(const ThreadGroup&) = delete;
  ThreadGroup& operator=(const ThreadGroup&) = delete;

  int size() const { return static_cast<int>(ranks_.size()); }
  CAIRN_API Coordinator& rank(int r);

 private:
  class Rank;  // coordination/thread_coordinator_impl.hpp

  // Every rank hands in its bytes and gets everyone's. A round ends only when every rank has
  // taken the result, so the next round cannot overwrite it early.
  CAIRN_API std::vector<std::string> exchange(int rank, std::string bytes);

  std::vector<std::unique_ptr<Rank>> ranks_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::string> slots_, result_;
  std::size_t arrived_ = 0, leaving_ = 0;
  std::uint64_t round_ = 0;
  bool draining_ = false;
};

CAIRN_END_NAMESPACE

// The group's members: once in the runtime with separate compilation, inline when header-only.
#if CAIRN_DEFINES_RUNTIME
#include "cairn/coordination/thread_coordinator_impl.hpp"
#endif
