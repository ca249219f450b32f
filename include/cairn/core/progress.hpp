// SPDX-License-Identifier: Apache-2.0
// Progress of long work (a load's reads, a verify, a conversion): a callback that takes the
// bytes done so far and the bytes in all. Owning and cheap to copy (a shared pointer and a
// function pointer), and without std::function, whose instantiations every file that builds an
// options struct would pay for (docs/compile-time.md).
#pragma once

#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

#include "cairn/core/config.hpp"

CAIRN_BEGIN_NAMESPACE

class Progress {
 public:
  Progress() = default;
  // Any callable as f(std::uint64_t done, std::uint64_t total).
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, Progress>>>
  Progress(F f)  // NOLINT: implicit, so that `options.progress = [](auto d, auto t) {...}` reads plainly
      : state_(std::make_shared<std::decay_t<F>>(std::move(f))),
        call_([](void* s, std::uint64_t done, std::uint64_t total) { (*static_cast<std::decay_t<F>*>(s))(done, total); }) {}
  explicit operator bool() const { return call_ != nullptr; }
  void operator()(std::uint64_t done, std::uint64_t total) const {
    if (call_) call_(state_.get(), done, total);
  }

 private:
  std::shared_ptr<void> state_;
  void (*call_)(void*, std::uint64_t, std::uint64_t) = nullptr;
};

CAIRN_END_NAMESPACE
