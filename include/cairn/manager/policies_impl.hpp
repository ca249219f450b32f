// SPDX-License-Identifier: Apache-2.0
// SavePolicy's and RetentionPolicy's factories (manager/policies.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cairn/manager/policies.hpp"

CAIRN_BEGIN_NAMESPACE

CAIRN_API SavePolicy SavePolicy::every_n_steps(std::int64_t n) {
  if (n <= 0) n = 1;
  return SavePolicy([n](const SaveContext& c) { return c.step % n == 0 && (!c.latest_step || *c.latest_step != c.step); });
}

CAIRN_API SavePolicy SavePolicy::at_steps(std::set<std::int64_t> steps) {
  return SavePolicy([steps = std::move(steps)](const SaveContext& c) { return steps.count(c.step) != 0; });
}

CAIRN_API SavePolicy SavePolicy::every_n_seconds(double seconds) {
  return SavePolicy([seconds](const SaveContext& c) { return !c.latest_step || c.seconds_since_last_save >= seconds; });
}

CAIRN_API SavePolicy SavePolicy::on_preemption() {
  return SavePolicy([](const SaveContext& c) { return c.preemption; });
}

CAIRN_API SavePolicy SavePolicy::initial_save() {
  return SavePolicy([](const SaveContext& c) { return !c.latest_step.has_value(); });
}

CAIRN_API SavePolicy SavePolicy::any_of(std::vector<SavePolicy> policies) {
  return SavePolicy([ps = std::move(policies)](const SaveContext& c) {
    return std::any_of(ps.begin(), ps.end(), [&](const SavePolicy& p) { return p.should_save(c); });
  });
}

CAIRN_API SavePolicy SavePolicy::all_of(std::vector<SavePolicy> policies) {
  return SavePolicy([ps = std::move(policies)](const SaveContext& c) {
    return std::all_of(ps.begin(), ps.end(), [&](const SavePolicy& p) { return p.should_save(c); });
  });
}

CAIRN_API RetentionPolicy RetentionPolicy::keep_all() {
  return RetentionPolicy([](const std::vector<StepInfo>& s) {
    std::set<std::int64_t> out;
    for (const auto& i : s) out.insert(i.step);
    return out;
  });
}

CAIRN_API RetentionPolicy RetentionPolicy::keep_latest(std::size_t n) {
  return RetentionPolicy([n](const std::vector<StepInfo>& s) {
    std::set<std::int64_t> out;
    for (std::size_t i = s.size() > n ? s.size() - n : 0; i < s.size(); ++i) out.insert(s[i].step);
    return out;
  });
}

CAIRN_API RetentionPolicy RetentionPolicy::keep_every_n_steps(std::int64_t n) {
  return RetentionPolicy([n](const std::vector<StepInfo>& s) {
    std::set<std::int64_t> out;
    for (const auto& i : s)
      if (n > 0 && i.step % n == 0) out.insert(i.step);
    return out;
  });
}

CAIRN_API RetentionPolicy RetentionPolicy::keep_every_n_seconds(double seconds) {
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

CAIRN_API RetentionPolicy RetentionPolicy::best_n(std::size_t n, std::string metric, Mode mode) {
  return RetentionPolicy([n, metric = std::move(metric), mode](const std::vector<StepInfo>& s) {
    std::vector<std::pair<double, std::int64_t>> scored;
    for (const auto& i : s) {
      const Json* v = i.metrics.find(metric);
      // NaN and infinity are stored as null, so they rank as a missing metric here too (and a
      // NaN would break the sort's ordering).
      if (v && v->is_number() && std::isfinite(v->as_double())) scored.emplace_back(mode == Mode::min ? v->as_double() : -v->as_double(), i.step);
    }
    std::set<std::int64_t> out;
    // No step has the metric (a name mistyped, or never saved): nothing can be ranked, and a
    // metric that is not there is no reason to delete a checkpoint. Every step is kept.
    if (scored.empty()) {
      for (const auto& i : s) out.insert(i.step);
      return out;
    }
    std::sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first < b.first : a.second > b.second;  // ties: the newer step
    });
    for (std::size_t i = 0; i < scored.size() && i < n; ++i) out.insert(scored[i].second);
    return out;
  });
}

CAIRN_API RetentionPolicy RetentionPolicy::any_of(std::vector<RetentionPolicy> policies) {
  return RetentionPolicy([ps = std::move(policies)](const std::vector<StepInfo>& s) {
    std::set<std::int64_t> out;
    for (const auto& p : ps) {
      auto k = p.keep(s);
      out.insert(k.begin(), k.end());
    }
    return out;
  });
}

CAIRN_END_NAMESPACE
