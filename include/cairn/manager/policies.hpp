// When a training loop saves (SavePolicy) and which checkpoints it keeps (RetentionPolicy),
// composable as Orbax's and TensorFlow's managers compose them; and the preemption flag a
// signal handler sets.
#pragma once

#include <algorithm>
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
  static SavePolicy every_n_steps(std::int64_t n) {
    if (n <= 0) n = 1;
    return SavePolicy([n](const SaveContext& c) { return c.step % n == 0 && (!c.latest_step || *c.latest_step != c.step); });
  }
  static SavePolicy at_steps(std::set<std::int64_t> steps) {
    return SavePolicy([steps = std::move(steps)](const SaveContext& c) { return steps.count(c.step) != 0; });
  }
  // At least `seconds` since the last save (the first step always qualifies).
  static SavePolicy every_n_seconds(double seconds) {
    return SavePolicy([seconds](const SaveContext& c) { return !c.latest_step || c.seconds_since_last_save >= seconds; });
  }
  static SavePolicy on_preemption() {
    return SavePolicy([](const SaveContext& c) { return c.preemption; });
  }
  // The first step seen when no checkpoint exists yet.
  static SavePolicy initial_save() {
    return SavePolicy([](const SaveContext& c) { return !c.latest_step.has_value(); });
  }
  static SavePolicy any_of(std::vector<SavePolicy> policies) {
    return SavePolicy([ps = std::move(policies)](const SaveContext& c) {
      return std::any_of(ps.begin(), ps.end(), [&](const SavePolicy& p) { return p.should_save(c); });
    });
  }
  static SavePolicy all_of(std::vector<SavePolicy> policies) {
    return SavePolicy([ps = std::move(policies)](const SaveContext& c) {
      return std::all_of(ps.begin(), ps.end(), [&](const SavePolicy& p) { return p.should_save(c); });
    });
  }
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

  static RetentionPolicy keep_all() {
    return RetentionPolicy([](const std::vector<StepInfo>& s) {
      std::set<std::int64_t> out;
      for (const auto& i : s) out.insert(i.step);
      return out;
    });
  }
  static RetentionPolicy keep_latest(std::size_t n) {
    return RetentionPolicy([n](const std::vector<StepInfo>& s) {
      std::set<std::int64_t> out;
      for (std::size_t i = s.size() > n ? s.size() - n : 0; i < s.size(); ++i) out.insert(s[i].step);
      return out;
    });
  }
  // Steps that are multiples of n.
  static RetentionPolicy keep_every_n_steps(std::int64_t n) {
    return RetentionPolicy([n](const std::vector<StepInfo>& s) {
      std::set<std::int64_t> out;
      for (const auto& i : s)
        if (n > 0 && i.step % n == 0) out.insert(i.step);
      return out;
    });
  }
  // One checkpoint per `seconds` of wall time (TensorFlow's keep_checkpoint_every_n_hours): the
  // oldest, then each one at least `seconds` after the previous one kept.
  static RetentionPolicy keep_every_n_seconds(double seconds) {
    return RetentionPolicy([seconds](const std::vector<StepInfo>& s) {
      std::set<std::int64_t> out;
      std::optional<std::int64_t> last_ms;
      for (const auto& i : s) {
        // In double: stored times are untrusted, and an int64 difference could overflow.
        if (!last_ms || static_cast<double>(i.created_unix_ms) - static_cast<double>(*last_ms) >= seconds * 1000.0) {
          out.insert(i.step);
          last_ms = i.created_unix_ms;
        }
      }
      return out;
    });
  }
  enum class Mode { min, max };
  // The n best steps by a numeric metric saved with them. Steps without that metric are never
  // among the best (combine with keep_latest to keep them for a while).
  static RetentionPolicy best_n(std::size_t n, std::string metric, Mode mode) {
    return RetentionPolicy([n, metric = std::move(metric), mode](const std::vector<StepInfo>& s) {
      std::vector<std::pair<double, std::int64_t>> scored;
      for (const auto& i : s) {
        const Json* v = i.metrics.find(metric);
        if (v && v->is_number()) scored.emplace_back(mode == Mode::min ? v->as_double() : -v->as_double(), i.step);
      }
      std::sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first < b.first : a.second > b.second;  // ties: the newer step
      });
      std::set<std::int64_t> out;
      for (std::size_t i = 0; i < scored.size() && i < n; ++i) out.insert(scored[i].second);
      return out;
    });
  }
  // Keeps what any of the policies keeps.
  static RetentionPolicy any_of(std::vector<RetentionPolicy> policies) {
    return RetentionPolicy([ps = std::move(policies)](const std::vector<StepInfo>& s) {
      std::set<std::int64_t> out;
      for (const auto& p : ps) {
        auto k = p.keep(s);
        out.insert(k.begin(), k.end());
      }
      return out;
    });
  }
  static RetentionPolicy custom(Keep k) { return RetentionPolicy(std::move(k)); }

 private:
  Keep k_;
};

CAIRN_END_NAMESPACE
