// Array shapes and the overflow-checked arithmetic on them. Shapes come from untrusted
// checkpoint metadata, so element and byte counts are computed with explicit overflow checks.
#pragma once

#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "cairn/core/error.hpp"

CAIRN_BEGIN_NAMESPACE

// An array's extent per dimension: a vector of int64 that keeps up to four dimensions in
// itself and only larger ranks on the heap (PyTorch's tensor sizes are kept the same way). A load
// of 100,000 small leaves holds three shapes a leaf in its metadata records; as std::vectors
// they were three allocations a leaf, more than half of all a load made. It has std::vector's
// interface for what shapes need, converts to and from std::vector<std::int64_t> implicitly,
// and compares with one.
class Shape {
 public:
  using value_type = std::int64_t;
  using size_type = std::size_t;
  using difference_type = std::ptrdiff_t;
  using reference = value_type&;
  using const_reference = const value_type&;
  using pointer = value_type*;
  using const_pointer = const value_type*;
  using iterator = value_type*;
  using const_iterator = const value_type*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;
  // Ranks up to this many live inside the Shape.
  static constexpr size_type inline_rank = 4;

  Shape() noexcept {}
  explicit Shape(size_type n, value_type v = 0) { assign(n, v); }
  Shape(std::initializer_list<value_type> values) { assign(values.begin(), values.end()); }
  template <std::input_iterator It>
  Shape(It first, It last) { assign(first, last); }
  Shape(const std::vector<value_type>& v) { assign(v.begin(), v.end()); }
  Shape(const Shape& o) { assign(o.begin(), o.end()); }
  Shape(Shape&& o) noexcept { take(o); }
  ~Shape() { free_heap(); }

  Shape& operator=(const Shape& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  Shape& operator=(Shape&& o) noexcept {
    if (this != &o) {
      free_heap();
      take(o);
    }
    return *this;
  }
  Shape& operator=(std::initializer_list<value_type> values) {
    assign(values.begin(), values.end());
    return *this;
  }
  operator std::vector<value_type>() const { return std::vector<value_type>(begin(), end()); }

  void assign(size_type n, value_type v) {
    clear();
    reserve(n);
    std::fill_n(data(), n, v);
    size_ = static_cast<std::uint32_t>(n);
  }
  template <std::input_iterator It>
  void assign(It first, It last) {
    if constexpr (std::forward_iterator<It>) {
      const auto n = static_cast<size_type>(std::distance(first, last));
      if (n > capacity_) {
        // A new block filled before the old one goes: [first, last) may lie in this shape.
        value_type* p = allocate(n);
        std::copy(first, last, p);
        free_heap();
        data_ = p;
        capacity_ = static_cast<std::uint32_t>(n);
      } else {
        std::copy(first, last, data_);
      }
      size_ = static_cast<std::uint32_t>(n);
    } else {
      clear();
      for (; first != last; ++first) push_back(*first);
    }
  }
  void assign(std::initializer_list<value_type> values) { assign(values.begin(), values.end()); }

  size_type size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  size_type capacity() const noexcept { return capacity_; }
  static constexpr size_type max_size() noexcept { return UINT32_MAX; }
  value_type* data() noexcept { return data_; }
  const value_type* data() const noexcept { return data_; }

  iterator begin() noexcept { return data(); }
  iterator end() noexcept { return data() + size_; }
  const_iterator begin() const noexcept { return data(); }
  const_iterator end() const noexcept { return data() + size_; }
  const_iterator cbegin() const noexcept { return begin(); }
  const_iterator cend() const noexcept { return end(); }
  reverse_iterator rbegin() noexcept { return reverse_iterator(end()); }
  reverse_iterator rend() noexcept { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const noexcept { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const noexcept { return const_reverse_iterator(begin()); }

  value_type& operator[](size_type i) noexcept { return data()[i]; }
  const value_type& operator[](size_type i) const noexcept { return data()[i]; }
  value_type& at(size_type i) {
    if (i >= size_) throw std::out_of_range("cairn::Shape::at");
    return data()[i];
  }
  const value_type& at(size_type i) const {
    if (i >= size_) throw std::out_of_range("cairn::Shape::at");
    return data()[i];
  }
  value_type& front() noexcept { return data()[0]; }
  const value_type& front() const noexcept { return data()[0]; }
  value_type& back() noexcept { return data()[size_ - 1]; }
  const value_type& back() const noexcept { return data()[size_ - 1]; }

  void reserve(size_type n) {
    if (n <= capacity_) return;
    const size_type grown = std::min<size_type>(std::max<size_type>(n, 2 * size_type{capacity_}), max_size());
    value_type* p = allocate(grown);
    std::copy(begin(), end(), p);
    free_heap();
    data_ = p;
    capacity_ = static_cast<std::uint32_t>(grown);
  }
  void clear() noexcept { size_ = 0; }
  void push_back(value_type v) {
    if (size_ == capacity_) reserve(size_ + 1);
    data()[size_++] = v;
  }
  value_type& emplace_back(value_type v) {
    push_back(v);
    return back();
  }
  void pop_back() noexcept { --size_; }
  void resize(size_type n, value_type v = 0) {
    reserve(n);
    if (n > size_) std::fill(data() + size_, data() + n, v);
    size_ = static_cast<std::uint32_t>(n);
  }
  iterator insert(const_iterator pos, value_type v) {
    const auto at = static_cast<size_type>(pos - begin());
    push_back(v);
    std::rotate(begin() + at, end() - 1, end());
    return begin() + at;
  }
  template <std::input_iterator It>
  iterator insert(const_iterator pos, It first, It last) {
    const auto at = static_cast<size_type>(pos - begin());
    const size_type old = size_;
    for (; first != last; ++first) push_back(*first);
    std::rotate(begin() + at, begin() + old, end());
    return begin() + at;
  }
  iterator erase(const_iterator first, const_iterator last) {
    const auto at = static_cast<size_type>(first - begin());
    const auto n = static_cast<size_type>(last - first);
    std::copy(begin() + at + n, end(), begin() + at);
    size_ -= static_cast<std::uint32_t>(n);
    return begin() + at;
  }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  void swap(Shape& o) noexcept {
    Shape t(std::move(o));
    o = std::move(*this);
    *this = std::move(t);
  }
  friend void swap(Shape& a, Shape& b) noexcept { a.swap(b); }

  friend bool operator==(const Shape& a, const Shape& b) noexcept {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend std::strong_ordering operator<=>(const Shape& a, const Shape& b) noexcept {
    return std::lexicographical_compare_three_way(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  bool on_heap() const noexcept { return data_ != inline_; }
  static value_type* allocate(size_type n) {
    if (n > max_size()) throw std::length_error("cairn::Shape: more dimensions than it can hold");
    return new value_type[n];
  }
  void free_heap() noexcept {
    if (on_heap()) delete[] data_;
    data_ = inline_;
    capacity_ = inline_rank;
  }
  // Takes o's elements, leaving o empty; this holds no heap block.
  void take(Shape& o) noexcept {
    if (o.on_heap()) {
      data_ = o.data_;
      capacity_ = o.capacity_;
      o.data_ = o.inline_;
      o.capacity_ = inline_rank;
    } else {
      std::copy(o.inline_, o.inline_ + o.size_, inline_);
    }
    size_ = o.size_;
    o.size_ = 0;
  }

  // The elements: inline_ while they fit there, else a block of capacity_ on the heap. A
  // pointer rather than a union with a test on every access.
  value_type* data_ = inline_;
  std::uint32_t size_ = 0;
  std::uint32_t capacity_ = inline_rank;
  value_type inline_[inline_rank];
};

// "[2, 3]".
CAIRN_API std::string to_string(const Shape& shape);

// Multiply with overflow detection; false when a*b does not fit in uint64.
inline bool checked_mul(std::uint64_t a, std::uint64_t b, std::uint64_t& out) {
  return !__builtin_mul_overflow(a, b, &out);
}
inline bool checked_add(std::uint64_t a, std::uint64_t b, std::uint64_t& out) {
  return !__builtin_add_overflow(a, b, &out);
}

// Number of elements, or a corrupt-input error when a dimension is negative or the product
// overflows. A 0-d shape has one element.
inline std::uint64_t element_count(const Shape& shape) {
  std::uint64_t n = 1;
  for (std::int64_t d : shape) {
    if (d < 0) throw Error(ErrorKind::corrupt, "negative dimension in shape " + to_string(shape));
    if (!checked_mul(n, static_cast<std::uint64_t>(d), n))
      throw Error(ErrorKind::corrupt, "element count of shape " + to_string(shape) + " overflows");
  }
  return n;
}

inline std::uint64_t byte_count(const Shape& shape, std::size_t item_size) {
  std::uint64_t bytes = 0;
  if (!checked_mul(element_count(shape), item_size, bytes))
    throw Error(ErrorKind::corrupt, "byte size of shape " + to_string(shape) + " overflows");
  return bytes;
}

// byte_count without throwing: false when a dimension is negative or the count overflows.
inline bool try_byte_count(const Shape& shape, std::size_t item_size, std::uint64_t& out) {
  std::uint64_t n = item_size;
  for (std::int64_t d : shape)
    if (d < 0 || !checked_mul(n, static_cast<std::uint64_t>(d), n)) return false;
  out = n;
  return true;
}

// Throws shape_mismatch unless two shapes are equal; for fixed-size targets.
CAIRN_API void require_shape(const Shape& expected, const Shape& stored);

CAIRN_END_NAMESPACE

#if CAIRN_DEFINES_RUNTIME
#include "cairn/core/shape_impl.hpp"
#endif
