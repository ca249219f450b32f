// SPDX-License-Identifier: Apache-2.0
// Separate compilation (docs/compile-time.md): include this in exactly one .cpp file of a
// program whose every translation unit defines CAIRN_SEPARATE_COMPILATION; that file then
// compiles cairn's runtime once, and the others only declare it. CMake's cairn::compiled
// target is such a file (src/cairn.cpp). With the single header, the same file is
//   #define CAIRN_BUILDING_RUNTIME
//   #include "cairn.hpp"
#pragma once

#if !defined(CAIRN_SEPARATE_COMPILATION)
#error "cairn/src.hpp compiles cairn's runtime for CAIRN_SEPARATE_COMPILATION: define it in every translation unit of the program, or leave both out (header-only)"
#endif

// Each header that declares an entry point of the runtime (CAIRN_API) includes its
// definition (an *_impl.hpp) at its end when CAIRN_DEFINES_RUNTIME, which this turns on.
#define CAIRN_BUILDING_RUNTIME 1
#include "cairn/cairn.hpp"
