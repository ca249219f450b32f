// SPDX-License-Identifier: Apache-2.0
// A vector that keeps its first N elements in itself and only more on the heap. For lists in
// the metadata records that almost always hold one element: a leaf's chunk list (a sharded
// leaf has several chunks, every other leaf one). As a std::vector the chunk list was an
// allocation and a pointer to follow per leaf, in every pass over 100,000 records. Shape
// (core/shape.hpp) is one of int64 dimensions, four inline.
#pragma once

#include <algorithm>
#include <compare>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "cairn/core/config.hpp"

CAIRN_BEGIN_NAMESPACE

// std::vector's interface, the parts the records and shapes use: construction from a count,
// a list, an iterator range or a std::vector (and conversion back), assign, element access,
// iteration, push_back, emplace_back, pop_back, resize, reserve, insert, erase, clear,
// comparison.
template <class T, std::size_t N>
class InlineVector {
  static_assert(N >= 1, "InlineVector keeps at least one element inline");
  // Moves never throw, so that a move of the vector (which moves inline elements) cannot fail.
  static_assert(std::is_nothrow_move_constructible_v<T>, "InlineVector needs elements that move without throwing");

 public:
  using value_type = T;
  using size_type = std::size_t;
  using difference_type = std::ptrdiff_t;
  using reference = T&;
  using const_reference = const T&;
  using pointer = T*;
  using const_pointer = const T*;
  using iterator = T*;
  using const_iterator = const T*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;
  static constexpr size_type inline_capacity = N;

  InlineVector() noexcept {}
  explicit InlineVector(size_type n) { resize(n); }
  InlineVector(size_type n, const T& v) { assign(n, v); }
  InlineVector(std::initializer_list<T> values) { assign(values.begin(), values.end()); }
  template <std::input_iterator It>
  InlineVector(It first, It last) { assign(first, last); }
  InlineVector(const std::vector<T>& v) { assign(v.begin(), v.end()); }
  InlineVector(const InlineVector& o) { assign(o.begin(), o.end()); }
  InlineVector(InlineVector&& o) noexcept { take(o); }
  ~InlineVector() { release(); }

  InlineVector& operator=(const InlineVector& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  InlineVector& operator=(InlineVector&& o) noexcept {
    if (this != &o) {
      release();
      take(o);
    }
    return *this;
  }
  InlineVector& operator=(std::initializer_list<T> values) {
    assign(values.begin(), values.end());
    return *this;
  }
  operator std::vector<T>() const { return std::vector<T>(begin(), end()); }

  void assign(size_type n, const T& v) {
    const T value(v);  // v may be an element of this vector
    clear();
    reserve(n);
    std::uninitialized_fill_n(data_, n, value);
    size_ = static_cast<std::uint32_t>(n);
  }
  // [first, last) may lie in this vector.
  template <std::input_iterator It>
  void assign(It first, It last) {
    if constexpr (std::forward_iterator<It>) {
      const auto n = static_cast<size_type>(std::distance(first, last));
      if (n > capacity_) {
        // A new block filled before the old one goes.
        InlineVector grown;
        grown.move_to(n, n);
        std::uninitialized_copy(first, last, grown.data_);
        grown.size_ = static_cast<std::uint32_t>(n);
        *this = std::move(grown);
      } else if (n <= size_) {
        // Copied forwards over the front: a range that starts later in this vector is safe.
        T* new_end = std::copy(first, last, data_);
        std::destroy(new_end, end());
        size_ = static_cast<std::uint32_t>(n);
      } else {
        It mid = first;
        std::advance(mid, size_);
        std::copy(first, mid, data_);
        std::uninitialized_copy(mid, last, end());
        size_ = static_cast<std::uint32_t>(n);
      }
    } else {
      clear();
      for (; first != last; ++first) emplace_back(*first);
    }
  }
  void assign(std::initializer_list<T> values) { assign(values.begin(), values.end()); }

  size_type size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  size_type capacity() const noexcept { return capacity_; }
  static constexpr size_type max_size() noexcept { return UINT32_MAX; }
  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }

  iterator begin() noexcept { return data_; }
  iterator end() noexcept { return data_ + size_; }
  const_iterator begin() const noexcept { return data_; }
  const_iterator end() const noexcept { return data_ + size_; }
  const_iterator cbegin() const noexcept { return begin(); }
  const_iterator cend() const noexcept { return end(); }
  reverse_iterator rbegin() noexcept { return reverse_iterator(end()); }
  reverse_iterator rend() noexcept { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const noexcept { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const noexcept { return const_reverse_iterator(begin()); }

  T& operator[](size_type i) noexcept { return data_[i]; }
  const T& operator[](size_type i) const noexcept { return data_[i]; }
  T& at(size_type i) {
    if (i >= size_) throw std::out_of_range("cairn::InlineVector::at");
    return data_[i];
  }
  const T& at(size_type i) const {
    if (i >= size_) throw std::out_of_range("cairn::InlineVector::at");
    return data_[i];
  }
  T& front() noexcept { return data_[0]; }
  const T& front() const noexcept { return data_[0]; }
  T& back() noexcept { return data_[size_ - 1]; }
  const T& back() const noexcept { return data_[size_ - 1]; }

  void reserve(size_type n) {
    if (n > capacity_) move_to(std::min<size_type>(std::max<size_type>(n, 2 * size_type{capacity_}), max_size()), n);
  }
  template <class... Args>
  T& emplace_back(Args&&... args) {
    if (size_ == capacity_) {
      // The new element is made first: an argument may be an element of this vector.
      T value(std::forward<Args>(args)...);
      reserve(size_type{size_} + 1);
      ::new (static_cast<void*>(data_ + size_)) T(std::move(value));
    } else {
      ::new (static_cast<void*>(data_ + size_)) T(std::forward<Args>(args)...);
    }
    return data_[size_++];
  }
  void push_back(const T& v) { emplace_back(v); }
  void push_back(T&& v) { emplace_back(std::move(v)); }
  void pop_back() noexcept { std::destroy_at(data_ + --size_); }
  void clear() noexcept {
    std::destroy(begin(), end());
    size_ = 0;
  }
  void resize(size_type n) {
    if (n < size_) {
      std::destroy(begin() + n, end());
      size_ = static_cast<std::uint32_t>(n);
      return;
    }
    reserve(n);
    std::uninitialized_value_construct(end(), begin() + n);
    size_ = static_cast<std::uint32_t>(n);
  }
  void resize(size_type n, const T& v) {
    if (n <= size_) {
      resize(n);
      return;
    }
    const T value(v);  // v may be an element of this vector
    reserve(n);
    std::uninitialized_fill(end(), begin() + n, value);
    size_ = static_cast<std::uint32_t>(n);
  }
  iterator insert(const_iterator pos, const T& v) {
    const auto at = pos - begin();
    push_back(v);
    std::rotate(begin() + at, end() - 1, end());
    return begin() + at;
  }
  template <std::input_iterator It>
  iterator insert(const_iterator pos, It first, It last) {
    const auto at = pos - begin();
    const size_type old = size_;
    for (; first != last; ++first) emplace_back(*first);
    std::rotate(begin() + at, begin() + old, end());
    return begin() + at;
  }
  iterator erase(const_iterator first, const_iterator last) {
    T* at = data_ + (first - data_);
    const auto n = last - first;
    if (n > 0) {
      T* new_end = std::move(at + n, end(), at);
      std::destroy(new_end, end());
      size_ -= static_cast<std::uint32_t>(n);
    }
    return at;
  }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  void swap(InlineVector& o) noexcept {
    InlineVector t(std::move(o));
    o = std::move(*this);
    *this = std::move(t);
  }
  friend void swap(InlineVector& a, InlineVector& b) noexcept { a.swap(b); }

  friend bool operator==(const InlineVector& a, const InlineVector& b)
    requires std::equality_comparable<T>
  {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend auto operator<=>(const InlineVector& a, const InlineVector& b)
    requires std::three_way_comparable<T>
  {
    return std::lexicographical_compare_three_way(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  T* inline_data() noexcept { return std::launder(reinterpret_cast<T*>(inline_)); }
  bool on_heap() const noexcept { return static_cast<const void*>(data_) != static_cast<const void*>(inline_); }

  // Moves the elements into a heap block of `capacity` (at least `needed`, which must fit).
  void move_to(size_type capacity, size_type needed) {
    if (needed > max_size()) throw std::length_error("cairn::InlineVector: more elements than it can hold");
    std::allocator<T> alloc;
    T* p = alloc.allocate(capacity);
    try {
      std::uninitialized_move(begin(), end(), p);
    } catch (...) {
      alloc.deallocate(p, capacity);
      throw;
    }
    std::destroy(begin(), end());
    if (on_heap()) alloc.deallocate(data_, capacity_);
    data_ = p;
    capacity_ = static_cast<std::uint32_t>(capacity);
  }
  // Destroys the elements and frees a heap block: empty and inline after.
  void release() noexcept {
    std::destroy(begin(), end());
    if (on_heap()) std::allocator<T>().deallocate(data_, capacity_);
    data_ = inline_data();
    size_ = 0;
    capacity_ = N;
  }
  // Takes o's elements, leaving o empty; this holds nothing before.
  void take(InlineVector& o) noexcept {
    if (o.on_heap()) {
      data_ = o.data_;
      size_ = o.size_;
      capacity_ = o.capacity_;
      o.data_ = o.inline_data();
      o.capacity_ = N;
    } else {
      std::uninitialized_move(o.begin(), o.end(), inline_data());
      size_ = o.size_;
      std::destroy(o.begin(), o.end());
    }
    o.size_ = 0;
  }

  // The elements: inline_ while they fit there, else a block of capacity_ on the heap.
  T* data_ = inline_data();
  std::uint32_t size_ = 0;
  std::uint32_t capacity_ = N;
  alignas(T) unsigned char inline_[N * sizeof(T)];
};

CAIRN_END_NAMESPACE
