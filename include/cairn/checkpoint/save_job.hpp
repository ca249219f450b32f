// SPDX-License-Identifier: Apache-2.0
// The one save pipeline: every save (save(), save_async(), Items, the Checkpointer's save and
// save_async) is a SaveJob that stages, takes the tree's views, writes and commits, in that
// order, through one SaveSession (checkpoint/commit.hpp). A driver only chooses where each
// part runs: all on the caller's thread (a synchronous save), or the writing on a worker
// (SaveWorker) while the caller copies the state within a memory budget. So every check a save
// makes runs for every driver: a new check is written once, here or in SaveSession.
//
//   stage()        collective: the primary stages the key; every rank learns it.
//   take_views()   the tree's views (a leaf that cannot be viewed fails here, after staging,
//                  so that its error reaches every rank through the commit; one process on a
//                  bucket takes them while it stages, and fails after the staging too).
//   snapshot()     async only, on the caller's thread: copies each leaf once the budget allows,
//                  in the order the writer takes them; leaves over the budget are written from
//                  the caller's memory while it waits.
//   write()        no collective (it may run on the worker): every item's leaves, then this
//                  rank's data made durable.
//   commit()       collective: checkpoint/commit.hpp's steps 3 to 5.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cairn/checkpoint/commit.hpp"
#include "cairn/checkpoint/save.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

class SaveJob {
 public:
  // `user_metadata` is what _USER_METADATA holds (the Checkpointer wraps the step's metrics
  // around the user's); `created_unix_ms` the time the metadata records.
  SaveJob(Store& store, std::string key, SaveOptions options, Json user_metadata, std::int64_t created_unix_ms)
      : store_(store), key_(std::move(key)), options_(std::move(options)), user_metadata_(std::move(user_metadata)),
        created_unix_ms_(created_unix_ms) {}
  SaveJob(const SaveJob&) = delete;
  SaveJob& operator=(const SaveJob&) = delete;

  const SaveOptions& options() const { return options_; }
  // Shares the store for as long as the job lives (an async save of a store made from a URI).
  void keep_store(std::shared_ptr<Store> store) { keep_store_ = std::move(store); }
  Coordinator& coordinator() { return options_.coordinator ? *options_.coordinator : local_; }
  bool multi_rank() { return coordinator().size() > 1; }
  std::string describe() const { return store_.describe(normalize_key(key_)); }

  // Collective. Throws (on every rank) what the primary's staging threw.
  void stage() {
    session_ = std::make_unique<SaveSession>(store_, key_, options_.overwrite, coordinator());
    report_.path = session_->describe();
  }

  // The items to save, with every check that needs only the snapshot (user metadata, repeated
  // key paths): run before any leaf is written, by every driver.
  void take_views(FunctionRef<std::vector<ItemSnapshot>()> snapshot) {
    if (!user_metadata_.is_object() && !user_metadata_.is_null())
      throw Error(ErrorKind::invalid_argument, "user metadata must be a JSON object", describe());
    // What a load would refuse is refused here, before a byte is written: a checkpoint saved
    // with metadata nested deeper than the reader takes could not be loaded at all.
    if (user_metadata_.depth() > Json::max_parse_depth)
      throw Error(ErrorKind::invalid_argument, "user metadata nests arrays and objects more than " +
                  std::to_string(Json::max_parse_depth) + " deep (with the Checkpointer's metrics, if any, around " +
                  "it), more than a load reads", describe());
    items_ = snapshot();
    for (const auto& item : items_) check_distinct_key_paths(item, describe());
    state_.clear();
    for (const auto& item : items_) state_.emplace_back(item.leaves.size());
  }
  // A synchronous save writes from the caller's memory: every leaf is ready at once.
  void all_ready() {
    for (auto& leaves : state_)
      for (auto& l : leaves) l.ready = true;
  }

  // The caller's half of an async save (see the top of this file). Returns early when the
  // writer failed; its error surfaces from the commit.
  void snapshot(std::uint64_t budget) {
    for (std::size_t i = 0; i < items_.size(); ++i) {
      for (std::size_t j = 0; j < items_[i].leaves.size(); ++j) {
        LeafView& view = items_[i].leaves[j].view;
        LeafState& leaf = state_[i][j];
        std::unique_lock<std::mutex> lock(mutex_);
        // Already owned (JSON, cereal bytes), empty, or read when the writer reaches it (fetch).
        if (view.owner || view.nbytes == 0 || items_[i].leaves[j].fetch) {
          leaf.ready = true;
          changed_.notify_all();
          continue;
        }
        if (view.nbytes > budget) {
          leaf.direct = true;
          leaf.ready = true;
          changed_.notify_all();
          changed_.wait(lock, [&] { return leaf.written || failed_; });
        } else {
          changed_.wait(lock, [&] { return in_flight_bytes_ + view.nbytes <= budget || failed_; });
          if (!failed_) {
            in_flight_bytes_ += view.nbytes;
            lock.unlock();
            own_copy(view, options_.replicas == ReplicaWrites::split);
            lock.lock();
            leaf.ready = leaf.copied = true;
            changed_.notify_all();
          }
        }
        if (failed_) return;
      }
    }
  }
  // The caller's snapshot failed: the writer stops waiting for it.
  void abandon() {
    std::lock_guard<std::mutex> lock(mutex_);
    abandoned_ = true;
    changed_.notify_all();
  }
  // The writer failed: the caller's snapshot stops waiting for it.
  void writer_failed() {
    std::lock_guard<std::mutex> lock(mutex_);
    failed_ = true;
    changed_.notify_all();
  }

  // Writes every leaf as it becomes ready, freeing each leaf's view (and its copy) once it is
  // written, then makes this rank's data durable. No collective.
  void write() {
    for (std::size_t i = 0; i < items_.size(); ++i) {
      ItemSnapshot& item = items_[i];
      session_->begin_item(item.name, item.kind, std::move(item.nodes), item.per_rank, item.leaves.size());
      for (std::size_t j = 0; j < item.leaves.size(); ++j) {
        LeafState& leaf = state_[i][j];
        {
          std::unique_lock<std::mutex> lock(mutex_);
          changed_.wait(lock, [&] { return leaf.ready || abandoned_; });
          if (abandoned_) throw Error(ErrorKind::io, "the snapshot was abandoned", describe());
        }
        SnapshotLeaf& l = item.leaves[j];
        {
          LeafView fetched;  // a fetched leaf's bytes, dropped once it is written
          session_->add_leaf(l.path, leaf_data(l, fetched), options_, report_);
        }
        std::lock_guard<std::mutex> lock(mutex_);
        if (leaf.copied) in_flight_bytes_ -= std::min(in_flight_bytes_, l.view.nbytes);
        l = SnapshotLeaf{};  // frees the view, and the copy of an async save
        leaf.written = true;
        changed_.notify_all();
      }
    }
    session_->finish_writes();
  }

  // Collective: steps 3 to 5 of the commit. `failure`: this rank's error so far, if any.
  void commit(std::exception_ptr failure) {
    std::unique_ptr<SaveSession> session = std::move(session_);
    session->commit(user_metadata_, created_unix_ms_, failure);
  }

  // A whole synchronous save on this thread, from the caller's memory. `commit` is the
  // driver's commit: the job's own, or the Checkpointer's, which adds `latest` and retention.
  SaveReport run(FunctionRef<std::vector<ItemSnapshot>()> snapshot,
                 FunctionRef<void(SaveJob&, std::exception_ptr)> commit) {
    // Where staging waits on a network (a bucket: its looks at the key, a round trip or two),
    // the store answers stage() at once and looks meanwhile (S3Store; CheckpointStaging::
    // checked): the views are taken and the leaves written while it does. The views' error
    // reaches the commit, where a refusal of the key still comes first. (Until 2026-12-04
    // stage() waited for its looks, on a thread of its own while the views were taken.)
    stage();
    std::exception_ptr failure;
    try {
      take_views(snapshot);
    } catch (...) {
      failure = std::current_exception();
    }
    if (!failure) {
      try {
        all_ready();
        write();
      } catch (...) {
        failure = std::current_exception();
      }
    }
    commit(*this, failure);
    return report_;
  }

  const SaveReport& report() const { return report_; }
  std::int64_t created_unix_ms() const { return created_unix_ms_; }

 private:
  struct LeafState {
    bool ready = false;    // snapshotted (or, for a direct leaf, may be written from user memory)
    bool direct = false;   // larger than the budget: written from the caller's memory
    bool copied = false;   // an async save's copy, counted against its budget
    bool written = false;
  };

  Store& store_;
  std::shared_ptr<Store> keep_store_;
  std::string key_;
  SaveOptions options_;
  Json user_metadata_;
  std::int64_t created_unix_ms_ = 0;
  LocalCoordinator local_;
  std::unique_ptr<SaveSession> session_;
  std::vector<ItemSnapshot> items_;
  std::vector<std::vector<LeafState>> state_;
  SaveReport report_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::uint64_t in_flight_bytes_ = 0;
  bool failed_ = false, abandoned_ = false;
};

// One async save in flight: the job and its worker thread. Alone, the worker stages, writes
// and commits; with several ranks the collectives stay on the caller's thread (staging in
// start, the commit in wait), and the worker only writes. `commit` is the driver's commit: the
// job's own, and for the Checkpointer the `latest` marker and retention after it.
class SaveWorker {
 public:
  using Commit = std::function<void(SaveJob&, std::exception_ptr)>;
  SaveWorker() = default;
  SaveWorker(const SaveWorker&) = delete;
  SaveWorker& operator=(const SaveWorker&) = delete;
  ~SaveWorker() {
    if (thread_.joinable()) thread_.join();
  }

  bool in_flight() const { return job_ != nullptr; }

  // Returns once the state is snapshotted within `budget`; throws (on every rank, committing
  // nothing) when staging or the snapshot fails.
  void start(std::shared_ptr<SaveJob> job, FunctionRef<std::vector<ItemSnapshot>()> snapshot, std::uint64_t budget,
             Commit commit) {
    const bool commit_here = job->multi_rank();
    if (commit_here) {
      job->stage();
      try {
        job->take_views(snapshot);
      } catch (...) {
        commit(*job, std::current_exception());  // every rank learns of it, and throws
        throw;
      }
    } else {
      job->take_views(snapshot);  // before the worker stages: nothing to undo
    }
    commit_on_caller_ = commit_here;
    commit_ = std::move(commit);
    error_ = nullptr;
    thread_ = std::thread([this, job, commit_here] {
      try {
        if (commit_here) {
          job->write();
        } else {
          job->stage();
          std::exception_ptr failure;
          try {
            job->write();
          } catch (...) {
            failure = std::current_exception();
            job->writer_failed();
          }
          commit_(*job, failure);
        }
      } catch (...) {
        error_ = std::current_exception();
        job->writer_failed();
      }
    });
    try {
      job->snapshot(budget);
    } catch (...) {
      job->abandon();
      thread_.join();
      if (commit_here) commit_(*job, std::current_exception());
      throw;
    }
    job_ = std::move(job);
  }

  // Waits for the save in flight (with several ranks, commits it: a collective), and returns
  // its report or throws its error. Nothing in flight: an empty report at once.
  SaveReport wait() {
    if (thread_.joinable()) thread_.join();
    if (!job_) return {};
    std::shared_ptr<SaveJob> job = std::move(job_);
    job_.reset();
    if (commit_on_caller_) commit_(*job, error_);
    else if (error_) std::rethrow_exception(error_);
    return job->report();
  }

 private:
  std::thread thread_;
  std::shared_ptr<SaveJob> job_;
  bool commit_on_caller_ = false;
  Commit commit_;
  std::exception_ptr error_;
};

}  // namespace detail
CAIRN_END_NAMESPACE
