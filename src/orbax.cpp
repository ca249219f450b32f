// SPDX-License-Identifier: Apache-2.0
// cairn/orbax.hpp compiled once: the source of CMake's cairn::orbax library and meson's
// cairn-orbax dependency (built with CAIRN_SEPARATE_COMPILATION, as every user of it is; it
// links cairn's runtime and libzstd). docs/compile-time.md.
#define CAIRN_BUILDING_ORBAX 1
#include <cairn/orbax.hpp>
