// SPDX-License-Identifier: Apache-2.0
// HeapOptional<T>: std::optional's interface over a value kept on the heap, for a member that
// most records lack. LeafRecord::sharding and LeafView::sharding are two: in place, a
// std::optional<NamedSharding> made every leaf record and view 80 bytes larger, 8 MB of the
// peak memory of a 100,000-leaf load and more of a save, where most leaves are not sharded.
//
// T may be incomplete wherever a HeapOptional is only made empty, copied, moved or destroyed
// (the value lives in a box with a virtual destructor and clone), so that the light model
// header (cairn/tree.hpp) declares LeafView without the sharding types' headers.
#pragma once

#include <optional>
#include <utility>

#include "cairn/core/config.hpp"

CAIRN_BEGIN_NAMESPACE
namespace detail {
struct HeapBox {
  virtual ~HeapBox() = default;
  virtual HeapBox* clone() const = 0;
};
template <class T>
struct HeapBoxOf final : HeapBox {
  template <class... Args>
  explicit HeapBoxOf(Args&&... args) : value(std::forward<Args>(args)...) {}
  HeapBox* clone() const override { return new HeapBoxOf(value); }
  T value;
};
}  // namespace detail

template <class T>
class HeapOptional {
 public:
  HeapOptional() = default;
  HeapOptional(std::nullopt_t) {}
  HeapOptional(const T& v) : box_(new detail::HeapBoxOf<T>(v)) {}
  HeapOptional(T&& v) : box_(new detail::HeapBoxOf<T>(std::move(v))) {}
  HeapOptional(const std::optional<T>& v) : box_(v ? new detail::HeapBoxOf<T>(*v) : nullptr) {}
  HeapOptional(const HeapOptional& o) : box_(o.box_ ? o.box_->clone() : nullptr) {}
  HeapOptional(HeapOptional&& o) noexcept : box_(std::exchange(o.box_, nullptr)) {}
  ~HeapOptional() { delete box_; }
  HeapOptional& operator=(const HeapOptional& o) {
    if (this != &o) {
      detail::HeapBox* copy = o.box_ ? o.box_->clone() : nullptr;
      delete box_;
      box_ = copy;
    }
    return *this;
  }
  HeapOptional& operator=(HeapOptional&& o) noexcept {
    if (this != &o) {
      delete box_;
      box_ = std::exchange(o.box_, nullptr);
    }
    return *this;
  }
  HeapOptional& operator=(std::nullopt_t) {
    reset();
    return *this;
  }

  template <class... Args>
  T& emplace(Args&&... args) {
    auto* b = new detail::HeapBoxOf<T>(std::forward<Args>(args)...);
    delete box_;
    box_ = b;
    return b->value;
  }
  void reset() {
    delete box_;
    box_ = nullptr;
  }

  bool has_value() const { return box_ != nullptr; }
  explicit operator bool() const { return box_ != nullptr; }
  T& operator*() { return get(); }
  const T& operator*() const { return get(); }
  T* operator->() { return &get(); }
  const T* operator->() const { return &get(); }
  const T& value() const {
    if (!box_) throw std::bad_optional_access();
    return get();
  }
  operator std::optional<T>() const { return box_ ? std::optional<T>(get()) : std::nullopt; }

  friend bool operator==(const HeapOptional& a, const HeapOptional& b) {
    return a.has_value() == b.has_value() && (!a || *a == *b);
  }
  friend bool operator==(const HeapOptional& a, std::nullopt_t) { return !a; }

 private:
  T& get() const { return static_cast<detail::HeapBoxOf<T>*>(box_)->value; }
  detail::HeapBox* box_ = nullptr;
};

CAIRN_END_NAMESPACE
