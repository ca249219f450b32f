// SPDX-License-Identifier: Apache-2.0
// cairn::Checkpointer: the training-loop manager. Step directories under one root, save and
// retention policies, async saves that return once the state is snapshotted, a `latest`
// marker published only after a commit, and crash-safe resume (docs/checkpointer.md).
#pragma once

#include <chrono>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cairn/checkpoint/items.hpp"
#include "cairn/manager/policies.hpp"

CAIRN_BEGIN_NAMESPACE

struct CheckpointerOptions {
  // Step directory names: prefix + step, zero-padded to `step_digits`:
  // "" / 0 -> "23", "" / 4 -> "0023", "step_" / 0 -> "step_23", "step_" / 4 -> "step_0023".
  std::string step_prefix = {};
  int step_digits = 0;
  SavePolicy save_policy = SavePolicy::every_n_steps(1);
  RetentionPolicy retention = RetentionPolicy::keep_all();
  // Host memory an async save may hold for its snapshot. Up to this much, save_async copies
  // the state and returns; beyond it, the snapshot streams: the call waits for earlier leaves
  // to be written before copying more, and leaves larger than the budget are written from the
  // caller's memory before the call returns.
  std::uint64_t async_memory_budget = std::uint64_t{1} << 30;
  // The ranks sharing this root (cairn/mpi.hpp). Every rank then calls every method in the
  // same order (each is a collective); the primary (rank 0) scans, decides, deletes and
  // writes `latest`, and broadcasts what the others need. Async saves write in the background
  // and commit from the caller's thread: in wait(), or in the next call that waits.
  Coordinator* coordinator = nullptr;
};

// What a step's save takes: the step's own options, and the options of the save itself.
struct StepSaveOptions {
  Json metrics = Json::object();  // used by RetentionPolicy::best_n; returned by metrics(step)
  bool force = false;             // save even when the save policy says no
  bool allow_older = false;       // allow a step older than the latest
  // The save itself, as cairn::save takes it: overwrite (replace an existing checkpoint of this
  // step), cast, on_overflow, replicas, and user_metadata (anything else to keep with the step,
  // stored under "custom" beside the metrics). Its coordinator is the Checkpointer's
  // (CheckpointerOptions::coordinator; another one here is an error), and an async save's
  // memory budget is CheckpointerOptions::async_memory_budget.
  SaveOptions save = {};
};

class Checkpointer {
 public:
  // Opens the root (a directory path, a URI, or {store, key}); creates nothing until the
  // first save (a Checkpointer made only to read leaves the store as it is, apart from
  // removing the leftovers of dead saves). A store given by reference must outlive it.
  explicit Checkpointer(const Location& root, CheckpointerOptions options = {});

 private:
  // Checks the root, removes the leftovers of dead saves, lists the steps, repairs `latest`.
  void open_root();

  bool multi_rank() const { return options_.coordinator && options_.coordinator->size() > 1; }
  Coordinator& coordinator() const { return *options_.coordinator; }

  // The steps, their metrics and the damaged ones, as the primary sends them.
  std::string encode_steps() const;
  void decode_steps(const std::string& bytes);

 public:
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Finishes the save in flight. Its error, if any, can no longer be thrown: it is printed.
  ~Checkpointer();

  const std::string& root() const { return root_; }
  Store& store() const { return *store_; }
  // The key of a step's checkpoint in the store (its path, for a directory root).
  std::string step_path(std::int64_t step) const { return root_ + "/" + step_name(step); }

  CAIRN_API std::optional<std::int64_t> latest() const;
  CAIRN_API std::vector<std::int64_t> steps() const;
  // The metrics saved with a step. Throws the verification error for a damaged step.
  Json metrics(std::int64_t step) const;

  // Steps whose commit marker or _USER_METADATA failed verification (a flipped bit, a
  // truncated file), with the error. Such a step is kept: retention never ranks it or
  // deletes it, and its metrics are not used. Loading it reports the damage in full.
  CAIRN_API std::map<std::int64_t, Error> damaged_steps() const;

  // With a coordinator: a collective; a preemption signal on any rank counts, and the
  // primary's policy decides for all.
  bool should_save(std::int64_t step) const;

  // Saves a tree (or Items) as this step if the save policy says so (or `force`), and returns
  // its report, or nothing when the policy said no (so `if (ck.save(step, state))` reads as
  // "if it saved"). Blocks until the checkpoint has committed.
  template <class T>
  std::optional<SaveReport> save(std::int64_t step, const T& state, const StepSaveOptions& args = {}) {
    wait();
    if (!args.force && !should_save(step)) return std::nullopt;
    return save_snapshots(step, [&] { return snapshots_of(state); }, args);
  }

  // Like save, but returns once the state is snapshotted (copied to host memory, within
  // options.async_memory_budget); writing, fsync, commit and retention run on a background
  // thread. The caller may change the state as soon as this returns. One save is in flight
  // at a time: this first waits for the previous one (and throws its error, if it failed).
  template <class T>
  bool save_async(std::int64_t step, const T& state, const StepSaveOptions& args = {}) {
    wait();
    if (!args.force && !should_save(step)) return false;
    save_snapshots_async(step, [&] { return snapshots_of(state); }, args);
    return true;
  }

  // Waits for the save in flight; throws its error if it failed.
  // With a coordinator, this is where an async save commits (a collective: every rank calls
  // it, as every method that waits does).
  void wait();

  template <class T>
    requires(!std::is_same_v<std::remove_const_t<T>, Items>)
  LoadReport load(std::int64_t step, T& target, const LoadOptions& options = {}) {
    wait();
    return cairn::load(Location(store_, existing_step_path(step)), target, with_coordinator(options));
  }
  // From the latest checkpoint.
  template <class T>
    requires(!std::is_same_v<std::remove_const_t<T>, Items>)
  LoadReport load(T& target, const LoadOptions& options = {}) {
    wait();
    return cairn::load(Location(store_, latest_step_path()), target, with_coordinator(options));
  }
  std::vector<std::pair<std::string, LoadReport>> load(std::int64_t step, const Items& items, const LoadOptions& options = {}) {
    wait();
    return cairn::load(Location(store_, existing_step_path(step)), items, with_coordinator(options));
  }
  std::vector<std::pair<std::string, LoadReport>> load(const Items& items, const LoadOptions& options = {}) {
    wait();
    return cairn::load(Location(store_, latest_step_path()), items, with_coordinator(options));
  }

  CheckpointMetadata metadata(std::int64_t step) const { return cairn::metadata(Location(store_, existing_step_path(step))); }

 private:

  LoadOptions with_coordinator(LoadOptions options) const {
    if (!options.coordinator) options.coordinator = options_.coordinator;
    return options;
  }

  template <class T>
  static std::vector<detail::ItemSnapshot> snapshots_of(const T& state) {
    if constexpr (std::is_same_v<T, Items>) return state.snapshots();
    else {
      std::vector<detail::ItemSnapshot> items;  // moved in: braces would copy every leaf's view
      items.push_back(detail::view_tree(default_item_name, state));
      return items;
    }
  }

  // The non-template halves of save and save_async: a SaveJob (checkpoint/save_job.hpp) of the
  // step's checkpoint, run here or on the worker.
  SaveReport save_snapshots(std::int64_t step, detail::FunctionRef<std::vector<detail::ItemSnapshot>()> snapshot,
                            const StepSaveOptions& args);
  void save_snapshots_async(std::int64_t step, detail::FunctionRef<std::vector<detail::ItemSnapshot>()> snapshot,
                            const StepSaveOptions& args);
  // The checks of a step before anything is staged, and its job.
  std::shared_ptr<detail::SaveJob> prepare(std::int64_t step, const StepSaveOptions& args);
  // The job's commit (collective), then the primary's `latest` marker and retention, whose
  // outcome and deletions every rank learns. `failure`: this rank's error so far, if any.
  void commit_job(detail::SaveJob& job, std::int64_t step, const Json& metrics, std::exception_ptr failure);
  // After a commit: `latest`, then retention.
  void after_commit();

  std::string step_name(std::int64_t step) const;

  // The step a directory name stands for under this manager's scheme, if it is one.
  std::optional<std::int64_t> parse_step(const std::string& name) const;

  // Names another scheme would give a step: digits with any padding, with or without "step_".
  static bool looks_like_step(const std::string& name);

  void scan();

  // Names the option values that would read the foreign directories.
  Error foreign_scheme_error(const std::vector<std::string>& foreign) const;

  // A step's metrics and commit time, from its _USER_METADATA checked against the CRC in its
  // commit marker like every other file. Throws when that check fails.
  StepInfo read_step_info(std::int64_t step) const;

  std::string latest_step_path() const;

  std::string existing_step_path(std::int64_t step) const;

  double seconds_since_last_save() const;

  // `latest` names the newest committed step; replaced atomically, only after a commit.
  void write_latest_marker(std::int64_t step) { store_->write_atomically(latest_key(), step_name(step) + "\n"); }
  std::string latest_key() const { return root_ + "/latest"; }
  std::string describe(const std::string& key) const { return store_->describe(key); }

  // Deletes what the retention policy does not keep; never the latest. Each checkpoint first
  // stops being one at once (Store::remove_checkpoints: renamed to a staging name on a
  // filesystem), so a crash mid-deletion leaves nothing that looks like a complete
  // checkpoint; the leftover is removed on the next start.
  void apply_retention();

  std::shared_ptr<Store> store_;
  std::string root_;
  CheckpointerOptions options_;
  LocalCoordinator local_;  // the coordinator without options.coordinator
  mutable std::mutex mutex_;  // guards steps_ and last_save_ (the worker updates them)
  std::map<std::int64_t, StepInfo> steps_;
  std::map<std::int64_t, Error> damaged_;  // steps whose metadata failed verification
  std::optional<std::chrono::steady_clock::time_point> last_save_;
  std::shared_ptr<detail::SaveWorker> worker_;  // the async save in flight, if any
};

CAIRN_END_NAMESPACE

// Header-only: the definitions of the entry points declared here (with
// CAIRN_SEPARATE_COMPILATION, only in the translation unit of cairn/src.hpp).
#if CAIRN_DEFINES_RUNTIME
#include "cairn/manager/checkpointer_impl.hpp"
#endif
