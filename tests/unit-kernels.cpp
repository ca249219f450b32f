// The box-copy kernel on its own, against a plain loop over indices: random boxes of rank 1
// to 4 in C or F order on either side, element sizes 1 to 8, regions anywhere inside both.
// Includes only the kernel's header, so it compiles fast. (The cast kernels have theirs in
// unit-dtype.cpp.)
#include "cairn/kernels/box_copy.hpp"

#include <doctest/doctest.h>

#include <cstring>
#include <random>
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
