// SPDX-License-Identifier: Apache-2.0
// Loading into an Eigen::Map of const data must fail to compile with cairn's static_assert
// (saving one compiles: tests/unit-save_load.cpp).
#include <cairn/cairn.hpp>

int main() {
  float values[4] = {};
  Eigen::Map<const Eigen::Matrix2f> view(values);
  cairn::load("/tmp/never", view);
}
