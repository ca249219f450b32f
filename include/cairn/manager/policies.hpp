// SPDX-License-Identifier: Apache-2.0
// When a training loop saves (SavePolicy) and which checkpoints it keeps (RetentionPolicy),
// composable as Orbax's and TensorFlow's managers compose them; and the preemption flag a
// signal handler sets.
#pragma once

#include <atomic>
#include <csignal>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cairn/core/json.hpp"

CAIRN_BEGIN_NAMESPACE

// ---- preemption ----

namespace detail {
inline volatile std::sig_atomic_t& preemption_flag() {
  static volatile std::sig_atomic_t flag = 0;
  return flag;
}
extern "C" inline void cairn_preemption_handler(int) { preemption_flag() = 1; }
}  // namespace detail

// Installs a handler for these signals (SIGTERM by default, as schedulers send) that only
// sets a flag. The next should_save() says yes under SavePolicy::on_preemption(), and
// preemption_requested() tells the loop to stop after that save.
inline void handle_preemption_signals(std::initializer_list<int> signals = {SIGTERM}) {
  for (int s : signals) std::signal(s, detail::cairn_preemption_handler);
}
inline bool preemption_requested() { return detail::preemption_flag() != 0; }
inline void request_preemption() { detail::preemption_flag() = 1; }  // for tests and custom triggers
inline void clear_preemption() { detail::preemption_flag() = 0; }

// ---- save policies ----

// What a save policy sees when asked about a step.
struct SaveContext {
  std::int64_t step = 0;
  std::optional<std::int64_t> latest_step;  // newest committed checkpoint, if any
  double seconds_since_last_save = 0;       // since the last save of this process, or the latest checkpoint's commit
  bool preemption = false;                  // a preemption signal has arrived
};

class SavePolicy {
 public:
  using Predicate = std::function<bool(const SaveContext&)>;
  explicit SavePolicy(Predicate p) : p_(std::move(p)) {}

  bool should_save(const SaveContext& c) const { return p_(c); }

  // Steps that are multiples of n (and not already saved).
  CAIRN_API static SavePolicy every_n_steps(std::int64_t n);
  CAIRN_API static SavePolicy at_steps(std::set<std::int64_t> steps);
  // At least `seconds` since the last save (the first step always qualifies).
  CAIRN_API static SavePolicy every_n_seconds(double seconds);
  CAIRN_API static SavePolicy on_preemption();
  // The first step seen when no checkpoint exists yet.
  CAIRN_API static SavePolicy initial_save();
  CAIRN_API static SavePolicy any_of(std::vector<SavePolicy> policies);
  CAIRN_API static SavePolicy all_of(std::vector<SavePolicy> policies);
  static SavePolicy custom(Predicate p) { return SavePolicy(std::move(p)); }

 private:
  Predicate p_;
};

// ---- retention policies ----

// What a retention policy knows of each committed checkpoint.
struct StepInfo {
  std::int64_t step = 0;
  std::int64_t created_unix_ms = 0;
  Json metrics = Json::object();
};

class RetentionPolicy {
 public:
  // Given every committed step (sorted by step), the steps this policy keeps.
  using Keep = std::function<std::set<std::int64_t>(const std::vector<StepInfo>&)>;
  explicit RetentionPolicy(Keep k) : k_(std::move(k)) {}

  std::set<std::int64_t> keep(const std::vector<StepInfo>& steps) const { return k_(steps); }

  CAIRN_API static RetentionPolicy keep_all();
  CAIRN_API static RetentionPolicy keep_latest(std::size_t n);
  // Steps that are multiples of n.
  CAIRN_API static RetentionPolicy keep_every_n_steps(std::int64_t n);
  // One checkpoint per `seconds` of wall time (TensorFlow's keep_checkpoint_every_n_hours): the
  // oldest, then each one at least `seconds` after the previous one kept.
  CAIRN_API static RetentionPolicy keep_every_n_seconds(double seconds);
  enum class Mode { min, max };
  // The n best steps by a numeric metric saved with them. Steps without that metric are never
  // among the best (combine with keep_latest to keep them for a while); but while no step has
  // it (a mistyped name, or none saved yet), every step is kept: nothing can be ranked.
  CAIRN_API static RetentionPolicy best_n(std::size_t n, std::string metric, Mode mode);
  // Keeps what any of the policies keeps.
  CAIRN_API static RetentionPolicy any_of(std::vector<RetentionPolicy> policies);
  static RetentionPolicy custom(Keep k) { return RetentionPolicy(std::move(k)); }

 private:
  Keep k_;
};

CAIRN_END_NAMESPACE

// The policies' factories (each a lambda in a std::function): once in the runtime with separate
// compilation, inline when header-only.
#if CAIRN_DEFINES_RUNTIME
#include "cairn/manager/policies_impl.hpp"
#endif
