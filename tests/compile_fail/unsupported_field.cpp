// SPDX-License-Identifier: Apache-2.0
// A CAIRN_TREE struct with a field cairn cannot store must fail to compile with one error that
// names the struct, the field and its type, and says to specialize leaf_traits.
#include <cairn/cairn.hpp>

#include <complex>

struct Model { std::vector<float> w; std::complex<float> phase; };
CAIRN_TREE(Model, w, phase)

int main() { cairn::save("/tmp/never", Model{}); }
