// HeapOptional<T>: std::optional's interface over a value kept on the heap, for a member that
// most records lack. LeafRecord::sharding is one: in place, a std::optional<NamedSharding> made
// every leaf record 80 bytes larger, 8 MB of the peak memory of a 100,000-leaf load, where
// most leaves are not sharded.
#pragma once

#include <memory>
#include <optional>
#include <utility>

#include "cairn/core/config.hpp"

CAIRN_BEGIN_NAMESPACE

template <class T>
class HeapOptional {
 public:
  HeapOptional() = default;
  HeapOptional(std::nullopt_t) {}
  HeapOptional(const T& v) : p_(std::make_unique<T>(v)) {}
  HeapOptional(T&& v) : p_(std::make_unique<T>(std::move(v))) {}
  HeapOptional(const std::optional<T>& v) : p_(v ? std::make_unique<T>(*v) : nullptr) {}
  HeapOptional(const HeapOptional& o) : p_(o.p_ ? std::make_unique<T>(*o.p_) : nullptr) {}
  HeapOptional(HeapOptional&&) noexcept = default;
  HeapOptional& operator=(const HeapOptional& o) {
    if (this != &o) p_ = o.p_ ? std::make_unique<T>(*o.p_) : nullptr;
    return *this;
  }
  HeapOptional& operator=(HeapOptional&&) noexcept = default;
  HeapOptional& operator=(std::nullopt_t) {
    p_.reset();
    return *this;
  }

  template <class... Args>
  T& emplace(Args&&... args) {
    p_ = std::make_unique<T>(std::forward<Args>(args)...);
    return *p_;
  }
  void reset() { p_.reset(); }

  bool has_value() const { return p_ != nullptr; }
  explicit operator bool() const { return p_ != nullptr; }
  T& operator*() { return *p_; }
  const T& operator*() const { return *p_; }
  T* operator->() { return p_.get(); }
  const T* operator->() const { return p_.get(); }
  const T& value() const {
    if (!p_) throw std::bad_optional_access();
    return *p_;
  }
  operator std::optional<T>() const { return p_ ? std::optional<T>(*p_) : std::nullopt; }

  friend bool operator==(const HeapOptional& a, const HeapOptional& b) {
    return a.has_value() == b.has_value() && (!a || *a == *b);
  }
  friend bool operator==(const HeapOptional& a, std::nullopt_t) { return !a; }

 private:
  std::unique_ptr<T> p_;
};

CAIRN_END_NAMESPACE
