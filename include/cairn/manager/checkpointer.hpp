// cairn::Checkpointer: the training-loop manager. Step directories under one root, save and
// retention policies, async saves that return once the state is snapshotted, a `latest`
// marker published only after a commit, and crash-safe resume (docs/checkpointer.md).
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <set>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cairn/checkpoint/items.hpp"
#include "cairn/manager/policies.hpp"
#include "cairn/store/posix_store.hpp"

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

struct StepSaveOptions {
  Json metrics = Json::object();          // used by RetentionPolicy::best_n; returned by metrics(step)
  Json custom_metadata = Json::object();  // anything else to keep with the step
  bool force = false;                     // save even when the save policy says no
  bool overwrite = false;                 // replace an existing checkpoint of this step
  bool allow_older = false;               // allow a step older than the latest
  std::vector<CastRule> cast = {};        // as SaveOptions::cast
  OnOverflow on_overflow = OnOverflow::error;
};

class Checkpointer {
 public:
  // Opens the root directory; creates nothing until the first save (a Checkpointer made only
  // to read leaves the filesystem as it is, apart from removing the leftovers of dead saves).
  explicit Checkpointer(std::string root, CheckpointerOptions options = {})
      : Checkpointer(std::make_shared<PosixStore>(), std::move(root), std::move(options)) {}

  // Steps under the key `root` of a store.
  Checkpointer(std::shared_ptr<Store> store, std::string root, CheckpointerOptions options = {})
      : store_(std::move(store)), root_(detail::normalize_key(std::move(root))), options_(std::move(options)) {
    if (!store_) throw Error(ErrorKind::invalid_argument, "a Checkpointer needs a store");
    if (root_.empty()) throw Error(ErrorKind::invalid_argument, "empty checkpoint root");
    if (multi_rank()) {
      // The primary opens the root; the others take its view.
      coordinator().set_phase("opening the checkpoint root");
      const std::string steps = detail::run_on_primary(coordinator(), [&] {
        open_root();
        return encode_steps();
      });
      if (!coordinator().is_primary()) decode_steps(steps);
      return;
    }
    open_root();
  }

 private:
  // Checks the root, removes the leftovers of dead saves, lists the steps, repairs `latest`.
  void open_root() {
    if (store_->is_blob(root_))
      throw Error(ErrorKind::invalid_argument, "the checkpoint root is a file, not a directory", describe(root_));
    if (detail::is_committed_checkpoint(*store_, root_))
      throw Error(ErrorKind::invalid_argument, "this is one checkpoint, not a root of step directories: load it with "
                  "cairn::load, or give the Checkpointer its parent directory", describe(root_));
    store_->clean_leftovers(root_);
    scan();
    // Repairs a `latest` marker that a crash left stale. Advisory (cairn never reads it), so a
    // read-only root is no error.
    if (auto l = latest()) {
      std::string current;
      try { current = detail::read_blob(*store_, latest_key(), 4096); } catch (const Error&) {}
      if (current != step_name(*l) + "\n") {
        try { write_latest_marker(*l); } catch (const Error&) {}
      }
    }
  }

  bool multi_rank() const { return options_.coordinator && options_.coordinator->size() > 1; }
  Coordinator& coordinator() const { return *options_.coordinator; }

  // The steps, their metrics and the damaged ones, as the primary sends them.
  std::string encode_steps() const {
    std::lock_guard<std::mutex> lock(mutex_);
    detail::WireWriter w;
    w.u64(steps_.size());
    for (const auto& [step, info] : steps_)
      w.u64(static_cast<std::uint64_t>(step)).u64(static_cast<std::uint64_t>(info.created_unix_ms)).str(info.metrics.dump());
    w.u64(damaged_.size());
    for (const auto& [step, e] : damaged_) {
      w.u64(static_cast<std::uint64_t>(step));
      detail::encode_error(w, e);
    }
    return w.take();
  }
  void decode_steps(const std::string& bytes) {
    detail::WireReader in(bytes);
    std::map<std::int64_t, StepInfo> steps;
    std::map<std::int64_t, Error> damaged;
    for (std::uint64_t i = 0, n = in.u64(); i < n; ++i) {
      const auto step = static_cast<std::int64_t>(in.u64());
      const auto created = static_cast<std::int64_t>(in.u64());
      steps[step] = StepInfo{step, created, Json::parse(in.str(), "the primary's step list")};
    }
    for (std::uint64_t i = 0, n = in.u64(); i < n; ++i) {
      const auto step = static_cast<std::int64_t>(in.u64());
      damaged.emplace(step, detail::decode_error(in));
    }
    std::lock_guard<std::mutex> lock(mutex_);
    steps_ = std::move(steps);
    damaged_ = std::move(damaged);
  }

 public:
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Finishes the save in flight. Its error, if any, can no longer be thrown: it is printed.
  ~Checkpointer() {
    try {
      wait();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cairn::Checkpointer: the last async save failed: %s\n", e.what());
    }
  }

  const std::string& root() const { return root_; }
  Store& store() const { return *store_; }
  // The key of a step's checkpoint in the store (its path, for a directory root).
  std::string step_path(std::int64_t step) const { return root_ + "/" + step_name(step); }

  std::optional<std::int64_t> latest() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (steps_.empty()) return std::nullopt;
    return steps_.rbegin()->first;
  }
  std::vector<std::int64_t> steps() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::int64_t> out;
    for (const auto& kv : steps_) out.push_back(kv.first);
    return out;
  }
  // The metrics saved with a step. Throws the verification error for a damaged step.
  Json metrics(std::int64_t step) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = steps_.find(step);
    if (it == steps_.end()) throw Error(ErrorKind::not_found, "no checkpoint of step " + std::to_string(step), describe(root_));
    if (auto d = damaged_.find(step); d != damaged_.end()) throw d->second;
    return it->second.metrics;
  }

  // Steps whose commit marker or _USER_METADATA failed verification (a flipped bit, a
  // truncated file), with the error. Such a step is kept: retention never ranks it or
  // deletes it, and its metrics are not used. Loading it reports the damage in full.
  std::map<std::int64_t, Error> damaged_steps() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return damaged_;
  }

  // With a coordinator: a collective; a preemption signal on any rank counts, and the
  // primary's policy decides for all.
  bool should_save(std::int64_t step) const {
    SaveContext c;
    c.step = step;
    c.latest_step = latest();
    c.preemption = preemption_requested();
    c.seconds_since_last_save = seconds_since_last_save();
    if (!multi_rank()) return options_.save_policy.should_save(c);
    coordinator().set_phase("deciding whether to save");
    c.preemption = !coordinator().all_agree(!c.preemption);
    const bool yes = coordinator().is_primary() && options_.save_policy.should_save(c);
    return coordinator().broadcast(yes ? "1" : "0") == "1";
  }

  // Saves a tree (or Items) as this step if the save policy says so (or `force`); returns
  // whether it saved. Blocks until the checkpoint has committed.
  template <class T>
  bool save(std::int64_t step, const T& state, const StepSaveOptions& args = {}) {
    wait();
    if (!args.force && !should_save(step)) return false;
    auto job = prepare(step, snapshots_of(state), args);
    for (auto& item : job->items)
      for (auto& leaf : item.leaves) leaf.ready = true;
    run_job(*job);
    return true;
  }

  // Like save, but returns once the state is snapshotted (copied to host memory, within
  // options.async_memory_budget); writing, fsync, commit and retention run on a background
  // thread. The caller may change the state as soon as this returns. One save is in flight
  // at a time: this first waits for the previous one (and throws its error, if it failed).
  template <class T>
  bool save_async(std::int64_t step, const T& state, const StepSaveOptions& args = {}) {
    wait();
    if (!args.force && !should_save(step)) return false;
    std::shared_ptr<Job> job = prepare(step, snapshots_of(state), args);
    // With several ranks the collectives stay on this thread: staging now, the commit in
    // wait(). Alone, the worker does it all.
    const bool commit_here = multi_rank();
    if (commit_here) start_session(*job);
    job->commit_on_caller = commit_here;
    worker_ = std::thread([this, job, commit_here] {
      try {
        if (commit_here) write_job(*job);
        else run_job(*job);
      } catch (...) {
        std::lock_guard<std::mutex> lock(job->mutex);
        job->error = std::current_exception();
        job->failed = true;
        job->changed.notify_all();
      }
    });
    try {
      snapshot_streaming(*job);
    } catch (...) {
      {
        std::lock_guard<std::mutex> lock(job->mutex);
        job->abandoned = true;
        job->changed.notify_all();
      }
      worker_.join();
      if (commit_here) commit_job(*job, std::current_exception());  // every rank learns of it, and throws
      throw;
    }
    in_flight_ = job;
    return true;
  }

  // Waits for the save in flight; throws its error if it failed.
  // With a coordinator, this is where an async save commits (a collective: every rank calls
  // it, as every method that waits does).
  void wait() {
    if (worker_.joinable()) worker_.join();
    if (in_flight_) {
      std::shared_ptr<Job> job = std::move(in_flight_);
      in_flight_.reset();
      if (job->commit_on_caller) commit_job(*job, job->error);
      else if (job->error) std::rethrow_exception(job->error);
    }
  }

  template <class T>
    requires(!std::is_same_v<std::remove_const_t<T>, Items>)
  LoadReport load(std::int64_t step, T& target, const LoadOptions& options = {}) {
    wait();
    return cairn::load(*store_, existing_step_path(step), target, with_coordinator(options));
  }
  // From the latest checkpoint.
  template <class T>
    requires(!std::is_same_v<std::remove_const_t<T>, Items>)
  LoadReport load(T& target, const LoadOptions& options = {}) {
    wait();
    return cairn::load(*store_, latest_step_path(), target, with_coordinator(options));
  }
  std::vector<std::pair<std::string, LoadReport>> load(std::int64_t step, const Items& items, const LoadOptions& options = {}) {
    wait();
    return cairn::load(*store_, existing_step_path(step), items, with_coordinator(options));
  }
  std::vector<std::pair<std::string, LoadReport>> load(const Items& items, const LoadOptions& options = {}) {
    wait();
    return cairn::load(*store_, latest_step_path(), items, with_coordinator(options));
  }

  CheckpointMetadata metadata(std::int64_t step) const { return cairn::metadata(*store_, existing_step_path(step)); }

 private:
  struct JobLeaf {
    KeyPath path;
    LeafView view;
    bool ready = false;    // snapshotted (or, for a direct leaf, may be written from user memory)
    bool direct = false;   // larger than the budget: written from the caller's memory
    bool written = false;
  };
  struct JobItem {
    std::string name;
    ItemKind kind;
    std::vector<NodeRecord> nodes;
    std::vector<JobLeaf> leaves;
    bool per_rank = false;
  };
  struct Job {
    std::int64_t step = 0;
    StepSaveOptions args;
    std::vector<JobItem> items;
    std::mutex mutex;
    std::condition_variable changed;
    std::uint64_t in_flight_bytes = 0;
    bool failed = false, abandoned = false;
    std::exception_ptr error;
    // The save itself: its options, its one clock reading, the session, and whether the
    // commit waits for the caller's thread (several ranks, async).
    SaveOptions so;
    std::int64_t now_ms = 0;
    std::unique_ptr<detail::SaveSession> session;
    bool commit_on_caller = false;
  };

  LoadOptions with_coordinator(LoadOptions options) const {
    if (!options.coordinator) options.coordinator = options_.coordinator;
    return options;
  }

  template <class T>
  static std::vector<detail::ItemSnapshot> snapshots_of(const T& state) {
    if constexpr (std::is_same_v<T, Items>) return state.snapshots();
    else return {detail::view_tree(default_item_name, state)};
  }

  std::shared_ptr<Job> prepare(std::int64_t step, std::vector<detail::ItemSnapshot> snapshots, const StepSaveOptions& args) {
    if (step < 0) throw Error(ErrorKind::invalid_argument, "steps are non-negative, got " + std::to_string(step), describe(root_));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (steps_.count(step) && !args.overwrite)
        throw Error(ErrorKind::already_exists, "step " + std::to_string(step) + " is already saved (pass overwrite to replace it)", describe(step_path(step)));
      if (!steps_.empty() && step < steps_.rbegin()->first && !args.allow_older)
        throw Error(ErrorKind::invalid_argument, "step " + std::to_string(step) + " is older than the latest checkpoint (" +
                    std::to_string(steps_.rbegin()->first) + "); pass allow_older to save it anyway", describe(root_));
    }
    auto job = std::make_shared<Job>();
    job->step = step;
    job->args = args;
    for (auto& s : snapshots) {
      JobItem item{s.name, s.kind, std::move(s.nodes), {}, s.per_rank};
      for (auto& l : s.leaves) item.leaves.push_back({std::move(l.path), std::move(l.view)});
      job->items.push_back(std::move(item));
    }
    return job;
  }

  // The caller's half of an async save: copy each leaf once the budget allows, in the order
  // the writer takes them; leaves over the budget are written from the caller's memory while
  // it waits.
  void snapshot_streaming(Job& job) {
    const std::uint64_t budget = options_.async_memory_budget;
    for (auto& item : job.items) {
      for (auto& leaf : item.leaves) {
        std::unique_lock<std::mutex> lock(job.mutex);
        if (leaf.view.owner || leaf.view.nbytes == 0) {  // already owned (JSON, cereal bytes) or empty
          leaf.ready = true;
          job.changed.notify_all();
          continue;
        }
        if (leaf.view.nbytes > budget) {
          leaf.direct = true;
          leaf.ready = true;
          job.changed.notify_all();
          job.changed.wait(lock, [&] { return leaf.written || job.failed; });
        } else {
          job.changed.wait(lock, [&] { return job.in_flight_bytes + leaf.view.nbytes <= budget || job.failed; });
          if (!job.failed) {
            job.in_flight_bytes += leaf.view.nbytes;
            lock.unlock();
            detail::own_copy(leaf.view);
            lock.lock();
            leaf.ready = true;
            job.changed.notify_all();
          }
        }
        if (job.failed) return;  // the error surfaces from wait()
      }
    }
  }

  // A whole save: stage, write, commit. A write error still reaches the commit's collectives.
  void run_job(Job& job) {
    start_session(job);
    std::exception_ptr failure;
    try {
      write_job(job);
    } catch (...) {
      failure = std::current_exception();
    }
    commit_job(job, failure);
  }

  // Stages the step's checkpoint (with several ranks, a collective).
  void start_session(Job& job) {
    SaveOptions& so = job.so;
    so.overwrite = job.args.overwrite;
    so.cast = job.args.cast;
    so.on_overflow = job.args.on_overflow;
    // One clock reading for the step's metadata and the checkpoint's.
    job.now_ms = detail::now_unix_ms();
    so.user_metadata = Json::object({{"step", job.step},
                                     {"created_unix_ms", job.now_ms},
                                     {"metrics", job.args.metrics},
                                     {"custom", job.args.custom_metadata}});
    Coordinator& c = options_.coordinator ? *options_.coordinator : local_;
    job.session = std::make_unique<detail::SaveSession>(*store_, step_path(job.step), so.overwrite, c);
  }

  // The writer's half: write leaves as they become ready, then make this rank's data durable.
  // No collective: it may run on the worker thread.
  void write_job(Job& job) {
    detail::SaveSession& writer = *job.session;
    SaveReport report;
    for (auto& item : job.items) {
      writer.begin_item(item.name, item.kind, item.nodes, item.per_rank);
      for (auto& leaf : item.leaves) {
        {
          std::unique_lock<std::mutex> lock(job.mutex);
          job.changed.wait(lock, [&] { return leaf.ready || job.abandoned; });
          if (job.abandoned) throw Error(ErrorKind::io, "the snapshot was abandoned", describe(step_path(job.step)));
        }
        writer.add_leaf(leaf.path, leaf.view, job.so, report);
        std::lock_guard<std::mutex> lock(job.mutex);
        if (!leaf.direct) {
          if (leaf.view.owner) job.in_flight_bytes -= std::min(job.in_flight_bytes, leaf.view.nbytes);
          leaf.view.owner.reset();  // frees the copy
          leaf.view.data = nullptr;
        }
        leaf.written = true;
        job.changed.notify_all();
      }
    }
    writer.finish_writes();
  }

  // The commit (collective), then the primary's `latest` marker and retention, whose outcome
  // and deletions every rank learns. `failure`: this rank's error while writing, if any.
  void commit_job(Job& job, std::exception_ptr failure) {
    std::unique_ptr<detail::SaveSession> session = std::move(job.session);
    // From the moment the checkpoint is published, this manager lists it, whatever fails after.
    auto record = [&] {
      std::lock_guard<std::mutex> lock(mutex_);
      steps_[job.step] = StepInfo{job.step, job.now_ms, job.args.metrics};
      damaged_.erase(job.step);
      last_save_ = std::chrono::steady_clock::now();
    };
    try {
      session->commit(job.so.user_metadata, job.now_ms, failure);
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::after_commit) record();
      throw;
    }
    session.reset();
    record();
    if (!multi_rank()) {
      after_commit();
      return;
    }
    coordinator().set_phase("retention");
    detail::WireWriter out;
    std::exception_ptr mine;
    if (coordinator().is_primary()) {
      try {
        after_commit();
        out.u64(1);
      } catch (...) {
        mine = std::current_exception();
        out.u64(0);
        detail::encode_error(out, detail::as_error(mine));
      }
      out.str(encode_steps());
    }
    const std::string got = coordinator().broadcast(out.take());
    if (mine) std::rethrow_exception(mine);
    if (coordinator().is_primary()) return;
    detail::WireReader in(got);
    const bool ok = in.u64() == 1;
    const std::optional<Error> error = ok ? std::nullopt : std::optional<Error>(detail::decode_error(in));
    decode_steps(in.str());
    if (error) throw *error;
  }

  // After a commit: `latest`, then retention.
  void after_commit() {
    try {
      write_latest_marker(*latest());
    } catch (const Error& e) {
      throw detail::after_commit_error(e, "updating the latest marker");
    }
    try {
      apply_retention();
    } catch (const Error& e) {
      throw detail::after_commit_error(e, "deleting checkpoints by the retention policy");
    }
  }

  std::string step_name(std::int64_t step) const {
    std::string digits = std::to_string(step);
    if (static_cast<int>(digits.size()) < options_.step_digits)
      digits.insert(0, static_cast<std::size_t>(options_.step_digits) - digits.size(), '0');
    return options_.step_prefix + digits;
  }

  // The step a directory name stands for under this manager's scheme, if it is one.
  std::optional<std::int64_t> parse_step(const std::string& name) const {
    if (name.rfind(options_.step_prefix, 0) != 0) return std::nullopt;
    std::string digits = name.substr(options_.step_prefix.size());
    if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    const std::int64_t step = std::stoll(digits);
    if (step_name(step) != name) return std::nullopt;
    return step;
  }

  // Names another scheme would give a step: digits with any padding, with or without "step_".
  static bool looks_like_step(const std::string& name) {
    std::string digits = name.rfind("step_", 0) == 0 ? name.substr(5) : name;
    return !digits.empty() && digits.size() <= 18 && digits.find_first_not_of("0123456789") == std::string::npos;
  }

  void scan() {
    std::map<std::int64_t, StepInfo> found;
    std::map<std::int64_t, Error> damaged;
    std::vector<std::string> foreign;
    for (const auto& e : store_->list(root_)) {
      if (!e.is_prefix || store_->is_internal_name(e.name)) continue;
      const bool committed = detail::is_committed_checkpoint(*store_, detail::join_key(root_, e.name));
      auto step = parse_step(e.name);
      if (!step) {
        if (committed && looks_like_step(e.name)) foreign.push_back(e.name);
        continue;
      }
      // A step directory without its commit marker is incomplete (or was copied without it):
      // ignored, never deleted.
      if (!committed) continue;
      try {
        found[*step] = read_step_info(*step);
      } catch (const Error& err) {
        found[*step] = StepInfo{*step, 0, Json::object()};
        damaged.emplace(*step, err);
      }
    }
    if (!foreign.empty()) throw foreign_scheme_error(foreign);
    std::lock_guard<std::mutex> lock(mutex_);
    steps_ = std::move(found);
    damaged_ = std::move(damaged);
  }

  // Names the option values that would read the foreign directories.
  Error foreign_scheme_error(const std::vector<std::string>& foreign) const {
    std::string list;
    for (const auto& f : foreign) list += (list.empty() ? "" : ", ") + f;
    const std::string& f = foreign.front();
    const std::string prefix = f.rfind("step_", 0) == 0 ? "step_" : "";
    const std::string digits = f.substr(prefix.size());
    const std::size_t width = digits.size() > 1 && digits[0] == '0' ? digits.size() : 0;
    return Error(ErrorKind::invalid_argument,
                 "the root holds checkpoints named with another step scheme (" + list + ") than this manager's ('" +
                     step_name(23) + "' for step 23); to read them, set CheckpointerOptions::step_prefix = \"" + prefix +
                     "\" and step_digits = " + std::to_string(width) +
                     (width ? "" : " (or the padding width they were written with)"),
                 describe(root_));
  }

  // A step's metrics and commit time, from its _USER_METADATA checked against the CRC in its
  // commit marker like every other file. Throws when that check fails.
  StepInfo read_step_info(std::int64_t step) const {
    StepInfo info;
    info.step = step;
    const std::string key = step_path(step);
    const auto digests = detail::read_marker(*store_, key);
    const std::string path = describe(detail::join_key(key, detail::user_metadata_file));
    Json user = Json::parse(detail::read_verified(*store_, key, digests, detail::user_metadata_file, std::uint64_t{1} << 24), path);
    if (!user.is_object()) throw Error(ErrorKind::corrupt, "user metadata is not a JSON object", path);
    if (const Json* m = user.find("metrics"); m && m->is_object()) info.metrics = *m;
    if (const Json* t = user.find("created_unix_ms"); t && t->is_int()) info.created_unix_ms = t->as_int();
    return info;
  }

  std::string latest_step_path() const {
    auto l = latest();
    if (!l) throw Error(ErrorKind::not_found, "no checkpoint to load: the root holds none", describe(root_));
    return step_path(*l);
  }

  std::string existing_step_path(std::int64_t step) const {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!steps_.count(step))
        throw Error(ErrorKind::not_found, "no committed checkpoint of step " + std::to_string(step), describe(step_path(step)));
    }
    return step_path(step);
  }

  double seconds_since_last_save() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (last_save_) return std::chrono::duration<double>(std::chrono::steady_clock::now() - *last_save_).count();
    if (steps_.empty()) return 0;
    const std::int64_t now_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    // In double: a stored time is untrusted, and any int64 difference could overflow.
    return (static_cast<double>(now_ms) - static_cast<double>(steps_.rbegin()->second.created_unix_ms)) / 1000.0;
  }

  // `latest` names the newest committed step; replaced atomically, only after a commit.
  void write_latest_marker(std::int64_t step) { store_->write_atomically(latest_key(), step_name(step) + "\n"); }
  std::string latest_key() const { return root_ + "/latest"; }
  std::string describe(const std::string& key) const { return store_->describe(key); }

  // Deletes what the retention policy does not keep; never the latest. Each checkpoint first
  // stops being one at once (Store::remove_checkpoints: renamed to a staging name on a
  // filesystem), so a crash mid-deletion leaves nothing that looks like a complete
  // checkpoint; the leftover is removed on the next start.
  void apply_retention() {
    std::vector<StepInfo> infos;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& kv : steps_) infos.push_back(kv.second);
    }
    if (infos.empty()) return;
    const std::int64_t newest = infos.back().step;
    std::set<std::int64_t> damaged;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& kv : damaged_) damaged.insert(kv.first);
    }
    // Damaged steps are neither ranked nor deleted: what their metadata says cannot be trusted.
    std::erase_if(infos, [&](const StepInfo& i) { return damaged.count(i.step) != 0; });
    std::set<std::int64_t> keep = options_.retention.keep(infos);
    keep.insert(newest);
    std::vector<std::string> doomed;
    for (const auto& i : infos)
      if (!keep.count(i.step)) doomed.push_back(step_path(i.step));
    if (doomed.empty()) return;
    try {
      store_->remove_checkpoints(doomed);
    } catch (...) {
      try { scan(); } catch (const Error&) {}  // list what is still there
      throw;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& i : infos)
      if (!keep.count(i.step)) steps_.erase(i.step);
  }

  std::shared_ptr<Store> store_;
  std::string root_;
  CheckpointerOptions options_;
  LocalCoordinator local_;  // the coordinator without options.coordinator
  mutable std::mutex mutex_;  // guards steps_ and last_save_ (the worker updates them)
  std::map<std::int64_t, StepInfo> steps_;
  std::map<std::int64_t, Error> damaged_;  // steps whose metadata failed verification
  std::optional<std::chrono::steady_clock::time_point> last_save_;
  std::thread worker_;
  std::shared_ptr<Job> in_flight_;
};

CAIRN_END_NAMESPACE
