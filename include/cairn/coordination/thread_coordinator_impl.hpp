// SPDX-License-Identifier: Apache-2.0
// ThreadGroup's members and its ranks' coordinators (coordination/thread_coordinator.hpp).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cairn/coordination/thread_coordinator.hpp"

CAIRN_BEGIN_NAMESPACE

class ThreadGroup::Rank final : public Coordinator {
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

CAIRN_API ThreadGroup::ThreadGroup(int size) : slots_(static_cast<std::size_t>(size)) {
  if (size < 1) throw Error(ErrorKind::invalid_argument, "a ThreadGroup needs at least one rank");
  for (int r = 0; r < size; ++r) ranks_.push_back(std::make_unique<Rank>(*this, r));
}
CAIRN_API ThreadGroup::~ThreadGroup() = default;

CAIRN_API Coordinator& ThreadGroup::rank(int r) { return *ranks_.at(static_cast<std::size_t>(r)); }

CAIRN_API std::vector<std::string> ThreadGroup::exchange(int rank, std::string bytes) {
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

CAIRN_END_NAMESPACE
