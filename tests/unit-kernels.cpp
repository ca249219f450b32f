// SPDX-License-Identifier: Apache-2.0
// The box-copy kernel on its own, against a plain loop over indices: random boxes of rank 1
// to 4 in C or F order on either side, element sizes 1 to 8, regions anywhere inside both.
// Includes only the kernel's header, so it compiles fast. (The cast kernels have theirs in
// unit-dtype.cpp.)
#include "cairn/kernels/box_copy.hpp"
#include "cairn/core/inline_vector.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using cairn::Box;
using cairn::Shape;

namespace {

std::mt19937_64 rng(20261122);

// Offset (in elements) of global index `at` inside a buffer holding `box` in the given order.
std::uint64_t offset_in(const Box& box, const Shape& at, bool column_major) {
  std::uint64_t off = 0, stride = 1;
  const std::size_t rank = box.rank();
  for (std::size_t k = 0; k < rank; ++k) {
    const std::size_t d = column_major ? k : rank - 1 - k;
    off += static_cast<std::uint64_t>(at[d] - box.start[d]) * stride;
    stride *= static_cast<std::uint64_t>(box.shape[d]);
  }
  return off;
}

Box random_box_around(const Box& region) {
  Box b = region;
  for (std::size_t d = 0; d < b.rank(); ++d) {
    const std::int64_t before = static_cast<std::int64_t>(rng() % 3), after = static_cast<std::int64_t>(rng() % 3);
    b.start[d] -= before;
    b.shape[d] += before + after;
  }
  return b;
}

}  // namespace

TEST_CASE("box copy equals an element-by-element copy, for any orders, element sizes and boxes") {
  for (int iter = 0; iter < 400; ++iter) {
    const std::size_t rank = 1 + rng() % 4;
    Box region{Shape(rank), Shape(rank)};
    for (std::size_t d = 0; d < rank; ++d) {
      region.start[d] = static_cast<std::int64_t>(rng() % 5);
      region.shape[d] = 1 + static_cast<std::int64_t>(rng() % 5);
    }
    const Box src_box = random_box_around(region), dst_box = random_box_around(region);
    const bool src_f = rng() % 2, dst_f = rng() % 2;
    const std::size_t item = std::size_t{1} << (rng() % 4);
    CAPTURE(iter);
    std::vector<unsigned char> src(src_box.elements() * item), dst(dst_box.elements() * item), want;
    for (auto& b : src) b = static_cast<unsigned char>(rng());
    for (auto& b : dst) b = static_cast<unsigned char>(rng());
    want = dst;
    // The reference: every index of the region, one element at a time.
    Shape at = region.start;
    for (std::uint64_t n = 0; n < region.elements(); ++n) {
      std::memcpy(&want[offset_in(dst_box, at, dst_f) * item], &src[offset_in(src_box, at, src_f) * item], item);
      for (std::size_t d = rank; d-- > 0;) {
        if (++at[d] < region.start[d] + region.shape[d]) break;
        at[d] = region.start[d];
      }
    }
    cairn::detail::box_copy_host(item, src.data(), dst.data(), cairn::detail::plan_box_copy(region, src_box, src_f, dst_box, dst_f));
    CHECK(dst == want);
  }
}

// cairn::Shape keeps small ranks inline and larger ones on the heap: every operation, on
// shapes that cross between the two, against std::vector<std::int64_t> as the model.
TEST_CASE("Shape behaves as a std::vector<int64_t>, inline and on the heap") {
  auto same = [](const Shape& s, const std::vector<std::int64_t>& v) {
    return s.size() == v.size() && std::equal(s.begin(), s.end(), v.begin()) && s.capacity() >= s.size() &&
           (s.size() == 0 || (s.front() == v.front() && s.back() == v.back()));
  };
  auto value = [] { return static_cast<std::int64_t>(rng() % 2000) - 1000; };
  Shape s, other;
  std::vector<std::int64_t> m, other_m;
  for (int step = 0; step < 20000; ++step) {
    CAPTURE(step);
    const std::size_t at = m.empty() ? 0 : rng() % (m.size() + 1);
    switch (rng() % 12) {
      case 0: case 1: { const auto v = value(); s.push_back(v); m.push_back(v); break; }
      case 2: if (!m.empty()) { s.pop_back(); m.pop_back(); } break;
      case 3: { const std::size_t n = rng() % 10; const auto v = value(); s.resize(n, v); m.resize(n, v); break; }
      case 4: { const std::size_t n = rng() % 10; const auto v = value(); s.assign(n, v); m.assign(n, v); break; }
      case 5: { const auto v = value(); s.insert(s.begin() + at, v); m.insert(m.begin() + at, v); break; }
      case 6: if (at < m.size()) { s.erase(s.begin() + at); m.erase(m.begin() + static_cast<std::ptrdiff_t>(at)); } break;
      case 7: {  // a copy of part of itself, which may move it between inline and heap
        const std::size_t from = m.empty() ? 0 : rng() % m.size();
        s.assign(s.begin() + from, s.end());
        m.assign(m.begin() + static_cast<std::ptrdiff_t>(from), m.end());
        break;
      }
      case 8: other = s; other_m = m; break;
      case 9: s.swap(other); m.swap(other_m); break;
      case 10: { Shape moved(std::move(other)); other = std::move(s); s = std::move(moved); std::swap(m, other_m); break; }
      case 11: { const std::vector<std::int64_t> v(rng() % 9, value()); s = v; m = v; break; }
    }
    REQUIRE(same(s, m));
    REQUIRE(same(other, other_m));
    REQUIRE(std::vector<std::int64_t>(s) == m);
    REQUIRE((s == other) == (m == other_m));
    REQUIRE((s < other) == (m < other_m));
    REQUIRE((s == m) == true);
  }
  // The constructors std::vector has, with the same meanings.
  CHECK(same(Shape(3), {0, 0, 0}));
  CHECK(same(Shape(6, 7), {7, 7, 7, 7, 7, 7}));
  CHECK(same(Shape{6, 7}, {6, 7}));
  const std::vector<std::int64_t> seven{1, 2, 3, 4, 5, 6, 7};
  CHECK(same(Shape(seven.begin(), seven.end()), seven));
  CHECK(same(Shape(seven), seven));
  Shape self{1, 2, 3, 4, 5, 6};
  const Shape& alias = self;
  self = alias;
  CHECK(same(self, {1, 2, 3, 4, 5, 6}));
  CHECK_THROWS_AS(self.at(6), std::out_of_range);
}

// cairn::InlineVector (a leaf's chunk list) keeps N elements inline and more on the heap. An
// element that owns memory and counts itself: every operation against std::vector, and no
// element is left alive or destroyed twice (ASan in CI sees leaks and double frees).
namespace {
int live = 0;
struct Counted {
  std::string text;  // longer than a short-string buffer: owns a heap block
  Counted() : text(40, 'x') { ++live; }
  explicit Counted(int v) : text(std::to_string(v) + std::string(30, '.')) { ++live; }
  Counted(const Counted& o) : text(o.text) { ++live; }
  Counted(Counted&& o) noexcept : text(std::move(o.text)) { ++live; }
  Counted& operator=(const Counted&) = default;
  Counted& operator=(Counted&&) noexcept = default;
  ~Counted() { --live; }
  friend bool operator==(const Counted& a, const Counted& b) { return a.text == b.text; }
};
template <std::size_t N>
void inline_vector_against_std_vector() {
  using V = cairn::InlineVector<Counted, N>;
  auto same = [](const V& v, const std::vector<Counted>& m) {
    return v.size() == m.size() && std::equal(v.begin(), v.end(), m.begin()) && v.capacity() >= v.size() &&
           v.capacity() >= N && std::vector<Counted>(v) == m;
  };
  {
    V v, other;
    std::vector<Counted> m, other_m;
    for (int step = 0; step < 20000; ++step) {
      CAPTURE(step);
      const int x = static_cast<int>(rng() % 1000);
      const std::size_t at = m.empty() ? 0 : rng() % m.size();
      switch (rng() % 11) {
        case 0: case 1: v.push_back(Counted(x)); m.push_back(Counted(x)); break;
        case 2: v.emplace_back(x); m.emplace_back(x); break;
        case 3: if (!m.empty()) { v.push_back(v[at]); m.push_back(m[at]); } break;  // an element of itself
        case 4: if (!m.empty()) { v.pop_back(); m.pop_back(); } break;
        case 5: { const std::size_t n = rng() % (2 * N + 3); v.resize(n); m.resize(n); break; }
        case 6: if (!m.empty()) { v.erase(v.begin() + at); m.erase(m.begin() + static_cast<std::ptrdiff_t>(at)); } break;
        case 7: other = v; other_m = m; break;
        case 8: v.swap(other); m.swap(other_m); break;
        case 9: { V moved(std::move(other)); other = std::move(v); v = std::move(moved); std::swap(m, other_m); break; }
        case 10: if (rng() % 4 == 0) { v.clear(); m.clear(); } else { v.reserve(rng() % (3 * N + 2)); } break;
      }
      REQUIRE(same(v, m));
      REQUIRE(same(other, other_m));
      REQUIRE((v == other) == (m == other_m));
      REQUIRE(live == static_cast<int>(2 * (m.size() + other_m.size())));
    }
    const std::vector<Counted> three{Counted(1), Counted(2), Counted(3)};
    CHECK(same(V(three), three));
    CHECK(same(V(three.begin(), three.end()), three));
    CHECK(same(V{Counted(1), Counted(2), Counted(3)}, three));
    CHECK(V(2).size() == 2);
    CHECK_THROWS_AS(V(three).at(3), std::out_of_range);
  }
  CHECK(live == 0);
}
}  // namespace

TEST_CASE("InlineVector behaves as a std::vector, inline and on the heap, and leaves no element alive") {
  inline_vector_against_std_vector<1>();
  inline_vector_against_std_vector<3>();
}
