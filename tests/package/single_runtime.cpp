// SPDX-License-Identifier: Apache-2.0
// The one translation unit that compiles cairn's runtime when the single header is used with
// separate compilation (every file defines CAIRN_SEPARATE_COMPILATION).
#define CAIRN_BUILDING_RUNTIME
#include <cairn/cairn.hpp>
