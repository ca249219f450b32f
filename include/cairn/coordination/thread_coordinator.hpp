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
  explicit ThreadGroup(int size) : slots_(static_cast<std::size_t>(size)) {
    if (size < 1) throw Error(ErrorKind::invalid_argument, "a ThreadGroup needs at least one rank");
    for (int r = 0; r < size; ++r) ranks_.push_back(std::make_unique<Rank>(*this, r));
  }
  ThreadGroup(const ThreadGroup&) = delete;
  ThreadGroup& operator=(const ThreadGroup&) = delete;

  int size() const { return static_cast<int>(ranks_.size()); }
  Coordinator& rank(int r) { return *ranks_.at(static_cast<std::size_t>(r)); }

 private:
  class Rank final : public Coordinator {
   public:
    Rank(ThreadGroup& g, int r) : group_(g), rank_(r) {}
    int rank() const override { return rank_; }
    int size() const override { return group_.size(); }
    void barrier() override { group_.exchange(rank_, {}); }
    std::vector<std::string> gather(std::string bytes) override {
      auto all = group_.exchange(rank_, std::move(bytes));
      return rank_ == 0 ? all : std::vector<std::string>{};
    }
    std::string broadcast(std::string bytes) override { return group_.exchange(rank_, std::move(bytes)).front(); }
    bool all_agree(bool ok) override {
      for (const auto& v : group_.exchange(rank_, ok ? "1" : "0"))
        if (v != "1") return false;
      return true;
    }

   private:
    ThreadGroup& group_;
    int rank_;
  };

  // Every rank hands in its bytes and gets everyone's. A round ends only when every rank has
  // taken the result, so the next round cannot overwrite it early.
  std::vector<std::string> exchange(int rank, std::string bytes) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return !draining_; });
    slots_[static_cast<std::size_t>(rank)] = std::move(bytes);
    const std::uint64_t round = round_;
    if (++arrived_ == slots_.size()) {
      result_ = std::move(slots_);
      slots_.assign(result_.size(), {});
      draining_ = true;
      leaving_ = result_.size();
      ++round_;
      changed_.notify_all();
    } else {
      changed_.wait(lock, [&] { return round_ != round; });
    }
    std::vector<std::string> out = result_;
    if (--leaving_ == 0) {
      draining_ = false;
      arrived_ = 0;
      changed_.notify_all();
    }
    return out;
  }

  std::vector<std::unique_ptr<Rank>> ranks_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::string> slots_, result_;
  std::size_t arrived_ = 0, leaving_ = 0;
  std::uint64_t round_ = 0;
  bool draining_ = false;
};

CAIRN_END_NAMESPACE
