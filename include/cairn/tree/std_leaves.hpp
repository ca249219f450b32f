// SPDX-License-Identifier: Apache-2.0
// Leaves from the standard library: arithmetic scalars (0-d arrays), std::string (bytes),
// contiguous containers of numbers as 1-D arrays (std::vector<float>, std::array<int, N>,
// std::vector<bool>), a std::vector of small fixed-size arrays as one 2-D array, and the
// random number engines (std::mt19937 and the others), stored
// as their standard text state.
#pragma once

#include <array>
#include <concepts>
#include <cstring>
#include <istream>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "cairn/tree/traits.hpp"

CAIRN_BEGIN_NAMESPACE

// Scalars with a dtype: bool, integers, float, double, cairn's 16/8-bit floats.
template <class T>
struct leaf_traits<T, std::enable_if_t<has_dtype<T>>> {
  static LeafView view(const T& v) { return {dtype_of<T>, {}, Order::C, &v, sizeof(T)}; }
  static LeafBuffer prepare(T& v, const StoredLeafInfo& stored) {
    require_shape({}, stored.shape);
    return {dtype_of<T>, Order::C, &v, sizeof(T)};
  }
};

template <>
struct leaf_traits<std::string> {
  static LeafView view(const std::string& s) {
    return {DType::string, {static_cast<std::int64_t>(s.size())}, Order::C, s.data(), s.size()};
  }
  static LeafBuffer prepare(std::string& s, const StoredLeafInfo& stored) {
    if (stored.shape.size() != 1) require_shape({-1}, stored.shape);
    s.resize(static_cast<std::size_t>(stored.nbytes));
    return {DType::string, Order::C, s.data(), s.size()};
  }
};

template <class T, class Alloc>
struct leaf_traits<std::vector<T, Alloc>, std::enable_if_t<has_dtype<T> && !std::is_same_v<T, bool>>> {
  static LeafView view(const std::vector<T, Alloc>& v) {
    return {dtype_of<T>, {static_cast<std::int64_t>(v.size())}, Order::C, v.data(), v.size() * sizeof(T)};
  }
  static LeafBuffer prepare(std::vector<T, Alloc>& v, const StoredLeafInfo& stored) {
    if (stored.shape.size() != 1)
      throw Error(ErrorKind::shape_mismatch, "stored shape " + to_string(stored.shape) +
                  " is not 1-D, but the target is a std::vector");
    v.resize(static_cast<std::size_t>(stored.shape[0]));
    return {dtype_of<T>, Order::C, v.data(), v.size() * sizeof(T)};
  }
};

// cairn::Shape, a vector of int64 that keeps small ranks inline: a 1-D int64 array, as it
// was when Shape was a std::vector<std::int64_t>.
template <>
struct leaf_traits<Shape> {
  static LeafView view(const Shape& v) {
    return {DType::int64, {static_cast<std::int64_t>(v.size())}, Order::C, v.data(), v.size() * sizeof(std::int64_t)};
  }
  static LeafBuffer prepare(Shape& v, const StoredLeafInfo& stored) {
    if (stored.shape.size() != 1)
      throw Error(ErrorKind::shape_mismatch, "stored shape " + to_string(stored.shape) +
                  " is not 1-D, but the target is a cairn::Shape");
    v.resize(static_cast<std::size_t>(stored.shape[0]));
    return {DType::int64, Order::C, v.data(), v.size() * sizeof(std::int64_t)};
  }
};

// std::vector<bool> packs bits, so it goes through a byte buffer each way.
template <class Alloc>
struct leaf_traits<std::vector<bool, Alloc>> {
  static LeafView view(const std::vector<bool, Alloc>& v) {
    auto bytes = std::make_shared<std::vector<bool_byte>>(v.begin(), v.end());
    return {DType::bool_, {static_cast<std::int64_t>(v.size())}, Order::C, bytes->data(), bytes->size(), bytes};
  }
  static LeafBuffer prepare(std::vector<bool, Alloc>& v, const StoredLeafInfo& stored) {
    if (stored.shape.size() != 1)
      throw Error(ErrorKind::shape_mismatch, "stored shape " + to_string(stored.shape) +
                  " is not 1-D, but the target is a std::vector<bool>");
    auto bytes = std::make_shared<std::vector<bool_byte>>(static_cast<std::size_t>(stored.shape[0]));
    LeafBuffer out{DType::bool_, Order::C, bytes->data(), bytes->size()};
    out.commit = [&v, bytes] { v.assign(bytes->begin(), bytes->end()); };
    return out;
  }

 private:
  struct bool_byte { bool value = false; bool_byte() = default; bool_byte(bool b) : value(b) {} operator bool() const { return value; } };
};

// A random number engine of <random> (or any type with their interface): its state is the
// text that operator<< writes and operator>> reads back, which the standard defines for every
// engine, so a restored engine continues the same sequence. Stored as a string leaf.
template <class E>
concept random_number_engine = std::is_default_constructible_v<E> && !has_dtype<E> &&
    requires(E& e, std::ostream& os, std::istream& is) {
      typename E::result_type;
      { E::min() } -> std::same_as<typename E::result_type>;
      { E::max() } -> std::same_as<typename E::result_type>;
      e.seed();
      e.discard(1ull);
      os << e;
      is >> e;
    };

template <random_number_engine E>
struct leaf_traits<E> {
  static LeafView view(const E& e) {
    std::ostringstream out;
    out << e;
    auto text = std::make_shared<std::string>(out.str());
    return {DType::string, {static_cast<std::int64_t>(text->size())}, Order::C, text->data(), text->size(), text};
  }
  static LeafBuffer prepare(E& e, const StoredLeafInfo& stored) {
    if (stored.shape.size() != 1) require_shape({-1}, stored.shape);
    auto text = std::make_shared<std::string>(static_cast<std::size_t>(stored.nbytes), '\0');
    LeafBuffer out{DType::string, Order::C, text->data(), text->size()};
    out.commit = [&e, text] {
      std::istringstream in(*text);
      E restored;
      in >> restored;
      if (in.fail()) throw Error(ErrorKind::corrupt, "the stored text is not a state of this random number engine");
      e = restored;
    };
    return out;
  }
};

// A std::vector of small fixed-size arrays (traits.hpp, packed_element): one leaf of shape
// [n, size]. Checkpoints written before 2026-11-30 hold such a vector as a sequence of n
// leaves; the planner reads those into it too (LoadPlanner::leaf, `packed`).
template <class T, class Alloc>
struct leaf_traits<std::vector<T, Alloc>, std::enable_if_t<packable_element<T>>> {
  using Scalar = typename packed_element<T>::scalar;
  static constexpr std::int64_t packed_element_size = packed_element<T>::size;
  static_assert(has_dtype<Scalar> && packed_element_size > 0 &&
                    sizeof(T) == static_cast<std::size_t>(packed_element_size) * sizeof(Scalar),
                "cairn: a packed_element<T> must be exactly `size` scalars, with nothing between or after them");
  static constexpr DType packed_element_dtype = dtype_of<Scalar>;

  static LeafView view(const std::vector<T, Alloc>& v) {
    return {dtype_of<Scalar>, {static_cast<std::int64_t>(v.size()), packed_element_size}, Order::C,
            static_cast<const void*>(v.data()), v.size() * sizeof(T)};
  }
  static LeafBuffer prepare(std::vector<T, Alloc>& v, const StoredLeafInfo& stored) {
    if (stored.shape.size() != 2 || stored.shape[1] != packed_element_size)
      throw Error(ErrorKind::shape_mismatch, "stored shape " + to_string(stored.shape) + " does not fit the target, a "
                  "std::vector of arrays of " + std::to_string(packed_element_size) + " (shape [any, " +
                  std::to_string(packed_element_size) + "])");
    v.resize(static_cast<std::size_t>(stored.shape[0]));
    return {dtype_of<Scalar>, Order::C, static_cast<void*>(v.data()), v.size() * sizeof(T)};
  }
};

template <class T, std::size_t N>
struct packed_element<std::array<T, N>, std::enable_if_t<has_dtype<T> && (N > 0)>> {
  using scalar = T;
  static constexpr std::int64_t size = static_cast<std::int64_t>(N);
};

template <class T, std::size_t N>
struct leaf_traits<std::array<T, N>, std::enable_if_t<has_dtype<T>>> {
  static LeafView view(const std::array<T, N>& v) {
    return {dtype_of<T>, {static_cast<std::int64_t>(N)}, Order::C, v.data(), N * sizeof(T)};
  }
  static LeafBuffer prepare(std::array<T, N>& v, const StoredLeafInfo& stored) {
    require_shape({static_cast<std::int64_t>(N)}, stored.shape);
    return {dtype_of<T>, Order::C, v.data(), N * sizeof(T)};
  }
};

CAIRN_END_NAMESPACE
