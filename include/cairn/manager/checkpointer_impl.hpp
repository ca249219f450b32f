// SPDX-License-Identifier: Apache-2.0
// The Checkpointer's non-template members: opening the root, the save jobs (sync and async),
// the commit with `latest` and retention, and the scan of the steps. Compiled in every
// translation unit that includes cairn/cairn.hpp, or once with CAIRN_SEPARATE_COMPILATION
// (cairn/runtime.hpp includes it; see docs/compile-time.md).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <future>
#include <memory>
#include <optional>
#include <set>

#include "cairn/checkpoint/commit.hpp"
#include "cairn/checkpoint/save_job.hpp"
#include "cairn/core/parallel.hpp"
#include "cairn/coordination/wire.hpp"
#include "cairn/format/files.hpp"
#include "cairn/manager/checkpointer.hpp"
#include "cairn/store/posix_store.hpp"

CAIRN_BEGIN_NAMESPACE

CAIRN_API std::optional<std::int64_t> Checkpointer::latest() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (steps_.empty()) return std::nullopt;
  return steps_.rbegin()->first;
}

CAIRN_API std::vector<std::int64_t> Checkpointer::steps() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::int64_t> out;
  for (const auto& kv : steps_) out.push_back(kv.first);
  return out;
}

CAIRN_API std::map<std::int64_t, Error> Checkpointer::damaged_steps() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return damaged_;
}

CAIRN_API Checkpointer::Checkpointer(const Location& root, CheckpointerOptions options)
    : store_(root.shared_store()), root_(root.key()), options_(std::move(options)) {
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

CAIRN_API void Checkpointer::open_root() {
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

CAIRN_API std::string Checkpointer::encode_steps() const {
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

CAIRN_API void Checkpointer::decode_steps(const std::string& bytes) {
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

CAIRN_API Checkpointer::~Checkpointer() {
  try {
    wait();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cairn::Checkpointer: the last async save failed: %s\n", e.what());
  }
}

CAIRN_API Json Checkpointer::metrics(std::int64_t step) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = steps_.find(step);
  if (it == steps_.end()) throw Error(ErrorKind::not_found, "no checkpoint of step " + std::to_string(step), describe(root_));
  if (auto d = damaged_.find(step); d != damaged_.end()) throw d->second;
  return it->second.metrics;
}

CAIRN_API bool Checkpointer::should_save(std::int64_t step) const {
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

CAIRN_API void Checkpointer::wait() {
  if (!worker_) return;
  std::shared_ptr<detail::SaveWorker> worker = std::move(worker_);
  worker_.reset();
  worker->wait();
}

CAIRN_API SaveReport Checkpointer::save_snapshots(std::int64_t step,
                                                  detail::FunctionRef<std::vector<detail::ItemSnapshot>()> snapshot,
                                                  const StepSaveOptions& args) {
  std::shared_ptr<detail::SaveJob> job = prepare(step, args);
  return job->run(snapshot, [&](detail::SaveJob& j, std::exception_ptr failure) {
    commit_job(j, step, args.metrics, failure);
  });
}

CAIRN_API void Checkpointer::save_snapshots_async(std::int64_t step,
                                                  detail::FunctionRef<std::vector<detail::ItemSnapshot>()> snapshot,
                                                  const StepSaveOptions& args) {
  std::shared_ptr<detail::SaveJob> job = prepare(step, args);
  auto worker = std::make_shared<detail::SaveWorker>();
  const Json metrics = args.metrics;
  worker->start(job, snapshot, options_.async_memory_budget,
                [this, step, metrics](detail::SaveJob& j, std::exception_ptr failure) {
                  commit_job(j, step, metrics, failure);
                });
  worker_ = std::move(worker);
}

CAIRN_API std::shared_ptr<detail::SaveJob> Checkpointer::prepare(std::int64_t step, const StepSaveOptions& args) {
  if (step < 0) throw Error(ErrorKind::invalid_argument, "steps are non-negative, got " + std::to_string(step), describe(root_));
  // Checked before anything is written: a step saved with metrics of another kind would have
  // them dropped when the root is next opened.
  if (!args.metrics.is_object() && !args.metrics.is_null())
    throw Error(ErrorKind::invalid_argument,
                "step " + std::to_string(step) + ": metrics must be a JSON object of named values, such as {\"loss\": 0.25}",
                describe(root_));
  if (args.save.coordinator && args.save.coordinator != options_.coordinator)
    throw Error(ErrorKind::invalid_argument, "StepSaveOptions::save.coordinator differs from the Checkpointer's: a "
                "Checkpointer saves with CheckpointerOptions::coordinator (leave the step's unset)", describe(root_));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (steps_.count(step) && !args.save.overwrite)
      throw Error(ErrorKind::already_exists, "step " + std::to_string(step) + " is already saved (pass overwrite to replace it)", describe(step_path(step)));
    if (!steps_.empty() && step < steps_.rbegin()->first && !args.allow_older)
      throw Error(ErrorKind::invalid_argument, "step " + std::to_string(step) + " is older than the latest checkpoint (" +
                  std::to_string(steps_.rbegin()->first) + "); pass allow_older to save it anyway", describe(root_));
  }
  SaveOptions so = args.save;
  so.coordinator = options_.coordinator;
  // One clock reading for the step's metadata and the checkpoint's.
  const std::int64_t now_ms = detail::now_unix_ms();
  Json user = Json::object({{"step", step},
                            {"created_unix_ms", now_ms},
                            {"metrics", args.metrics},
                            {"custom", args.save.user_metadata}});
  // The user's part is checked as cairn::save checks it (the job checks the whole, which is an object).
  if (!args.save.user_metadata.is_object() && !args.save.user_metadata.is_null())
    throw Error(ErrorKind::invalid_argument, "user metadata must be a JSON object", describe(step_path(step)));
  return std::make_shared<detail::SaveJob>(*store_, step_path(step), std::move(so), std::move(user), now_ms);
}

CAIRN_API void Checkpointer::commit_job(detail::SaveJob& job, std::int64_t step, const Json& metrics,
                                        std::exception_ptr failure) {
  const std::int64_t now_ms = job.created_unix_ms();  // the step's time, as its metadata records it
  // From the moment the checkpoint is published, this manager lists it, whatever fails after.
  auto record = [&] {
    std::lock_guard<std::mutex> lock(mutex_);
    // The metrics as written (NaN and infinity become null), so that they read the same
    // before and after the root is opened again.
    steps_[step] = StepInfo{step, now_ms, metrics.is_object() ? Json::parse(metrics.dump()) : Json::object()};
    damaged_.erase(step);
    last_save_ = std::chrono::steady_clock::now();
  };
  try {
    job.commit(failure);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::after_commit) record();
    throw;
  }
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

CAIRN_API void Checkpointer::after_commit() {
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

CAIRN_API std::string Checkpointer::step_name(std::int64_t step) const {
  std::string digits = std::to_string(step);
  if (static_cast<int>(digits.size()) < options_.step_digits)
    digits.insert(0, static_cast<std::size_t>(options_.step_digits) - digits.size(), '0');
  return options_.step_prefix + digits;
}

CAIRN_API std::optional<std::int64_t> Checkpointer::parse_step(const std::string& name) const {
  if (name.rfind(options_.step_prefix, 0) != 0) return std::nullopt;
  // Every int64 step has a name, up to 19 digits after any padding: a name this scheme writes is
  // one it reads back (a nanosecond timestamp as the step, about 1.8e18, was saved and then not
  // seen after a restart when this stopped at 18 digits).
  std::int64_t step = 0;
  if (!detail::parse_step_digits(std::string_view(name).substr(options_.step_prefix.size()), step)) return std::nullopt;
  if (step_name(step) != name) return std::nullopt;
  return step;
}

CAIRN_API bool Checkpointer::looks_like_step(const std::string& name) { return detail::looks_like_step_name(name); }

CAIRN_API void Checkpointer::scan() {
  std::map<std::int64_t, StepInfo> found;
  std::map<std::int64_t, Error> damaged;
  std::vector<std::string> foreign;
  // What each directory under the root is, looked at Store::parallel_reads() at a time (on a
  // bucket each look is a few round trips: 20 steps took 2.4 s one after another against a
  // store 20 ms away), then folded in the listing's order, as one by one.
  struct Look {
    std::string name;
    std::optional<std::int64_t> step;
    bool committed = false;
    std::optional<StepInfo> info;
    std::optional<Error> damage;
    std::exception_ptr failure;  // the look itself failed (the store unreachable): rethrown
  };
  std::vector<Look> looks;
  for (const auto& e : store_->list(root_))
    if (e.is_prefix && !store_->is_internal_name(e.name)) {
      Look l;
      l.name = e.name;
      l.step = parse_step(e.name);
      looks.push_back(std::move(l));
    }
  auto look = [&](Look& l) {
    try {
      const std::string key = detail::join_key(root_, l.name);
      if (!l.step) {
        l.committed = detail::is_committed_checkpoint(*store_, key);
        return;
      }
      // A step's marker is read straight away (on a bucket, asking first whether it is there
      // was one more round trip per step); only where that fails is the marker's presence
      // asked, to tell a step that never committed from a damaged one. A step directory
      // without its commit marker is incomplete (or was copied without it): ignored, never
      // deleted.
      try {
        l.info = read_step_info(*l.step);
        l.committed = true;
      } catch (const Error& err) {
        l.committed = detail::is_committed_checkpoint(*store_, key);
        if (l.committed) l.damage = err;
      }
    } catch (...) {
      l.failure = std::current_exception();
    }
  };
  detail::for_each_index(looks.size(), store_->parallel_reads(), [&](std::size_t i) { look(looks[i]); });
  for (Look& l : looks) {
    if (l.failure) std::rethrow_exception(l.failure);
    if (!l.step) {
      if (l.committed && looks_like_step(l.name)) foreign.push_back(l.name);
      continue;
    }
    if (!l.committed) continue;
    if (l.damage) {
      found[*l.step] = StepInfo{*l.step, 0, Json::object()};
      damaged.emplace(*l.step, std::move(*l.damage));
    } else {
      found[*l.step] = std::move(*l.info);
    }
  }
  if (!foreign.empty()) throw foreign_scheme_error(foreign);
  std::lock_guard<std::mutex> lock(mutex_);
  steps_ = std::move(found);
  damaged_ = std::move(damaged);
}

CAIRN_API Error Checkpointer::foreign_scheme_error(const std::vector<std::string>& foreign) const {
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

CAIRN_API StepInfo Checkpointer::read_step_info(std::int64_t step) const {
  StepInfo info;
  info.step = step;
  // Where the store keeps the step (an object store: the generation its marker names).
  const std::string key = store_->readable_checkpoint(step_path(step));
  // The marker and _USER_METADATA together (Store::read_whole_each: one round trip on a
  // bucket); where the marker cannot be read, require_marker says what is there instead.
  auto read = store_->read_whole_each({{detail::join_key(key, detail::marker_file), detail::max_marker_bytes},
                                       {detail::join_key(key, detail::user_metadata_file), std::uint64_t{1} << 24}});
  if (read[0].error) detail::require_marker(*store_, key);
  const auto digests = detail::parse_marker(*store_, key, read[0].take());
  const std::string path = describe(detail::join_key(key, detail::user_metadata_file));
  Json user = Json::parse(detail::verified(*store_, key, digests, detail::user_metadata_file, std::move(read[1])), path);
  if (!user.is_object()) throw Error(ErrorKind::corrupt, "user metadata is not a JSON object", path);
  if (const Json* m = user.find("metrics"); m && m->is_object()) info.metrics = *m;
  if (const Json* t = user.find("created_unix_ms"); t && t->is_int()) info.created_unix_ms = t->as_int();
  return info;
}

CAIRN_API std::string Checkpointer::latest_step_path() const {
  auto l = latest();
  if (!l) throw Error(ErrorKind::not_found, "no checkpoint to load: the root holds none", describe(root_));
  return step_path(*l);
}

CAIRN_API std::string Checkpointer::existing_step_path(std::int64_t step) const {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!steps_.count(step))
      throw Error(ErrorKind::not_found, "no committed checkpoint of step " + std::to_string(step), describe(step_path(step)));
  }
  return step_path(step);
}

CAIRN_API double Checkpointer::seconds_since_last_save() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (last_save_) return std::chrono::duration<double>(std::chrono::steady_clock::now() - *last_save_).count();
  if (steps_.empty()) return 0;
  const std::int64_t now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  // In double: a stored time is untrusted, and any int64 difference could overflow.
  return (static_cast<double>(now_ms) - static_cast<double>(steps_.rbegin()->second.created_unix_ms)) / 1000.0;
}

CAIRN_API void Checkpointer::apply_retention() {
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

CAIRN_END_NAMESPACE
