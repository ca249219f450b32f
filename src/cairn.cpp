// SPDX-License-Identifier: Apache-2.0
// cairn's runtime, compiled once: the source of CMake's cairn::compiled library and meson's
// cairn_compiled_dep (build with -DCAIRN_SEPARATE_COMPILATION, as every user of it must).
#include <cairn/src.hpp>
