// SPDX-License-Identifier: Apache-2.0
// FunctionRef<R(Args...)>: a callable passed down to a function that calls it before it
// returns, by reference: the callable's address and one plain function that calls it. The
// runtime's entry points take their callbacks this way (save's snapshot, load's plan), so a
// user's translation unit instantiates one small function per callback instead of a
// std::function's manager, invoker and their copies (part of #11's compile time). It never
// owns what it refers to: do not keep one beyond the call it was passed to.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

#include "cairn/core/config.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {

template <class Sig>
class FunctionRef;

template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> && std::is_invocable_r_v<R, F&, Args...>)
  FunctionRef(F&& f) noexcept  // NOLINT: implicit, as a std::function parameter is
      : callable_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* c, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(c))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(callable_, std::forward<Args>(args)...); }

 private:
  void* callable_;
  R (*call_)(void*, Args...);
};

}  // namespace detail
CAIRN_END_NAMESPACE
