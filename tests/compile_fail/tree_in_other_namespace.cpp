// SPDX-License-Identifier: Apache-2.0
// CAIRN_TREE written outside the struct's namespace is not found (it is looked up by the
// struct's namespace): the build fails, and the message says where the macro belongs.
#include <cairn/cairn.hpp>

namespace app {
struct Model { int x; };
}  // namespace app
CAIRN_TREE(app::Model, x)  // in the global namespace, not in app

int main() { cairn::save("/tmp/never", app::Model{}); }
