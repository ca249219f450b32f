// SPDX-License-Identifier: Apache-2.0
// Saving a struct that is not annotated must fail to compile with cairn's static_assert.
#include <cairn/cairn.hpp>

struct NotAnnotated { int x; };

int main() { cairn::save("/tmp/never", NotAnnotated{}); }
