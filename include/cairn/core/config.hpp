// SPDX-License-Identifier: Apache-2.0
// Version, namespace and portability macros shared by every cairn header.
// Everything else includes this first, so the inline namespace and the
// host/device macro are defined in one place.
#pragma once

// Checked before anything else, so that a translation unit built without C++20 stops at one
// message instead of many about std::endian, concepts and designated initializers.
#if !defined(__cplusplus) || (__cplusplus < 202002L && !(defined(_MSVC_LANG) && _MSVC_LANG >= 202002L))
#error "cairn needs C++20: compile with -std=c++20 (CMake: target_compile_features(... cxx_std_20); meson: cpp_std=c++20)"
// #error does not stop g++, clang or MSVC, and the headers below would add dozens of errors;
// a missing include does (a fatal error, named for what it is).
#include "cairn: compilation stopped, see the error above"
#endif

#include <bit>

#define CAIRN_VERSION_MAJOR 0
#define CAIRN_VERSION_MINOR 1
#define CAIRN_VERSION_PATCH 0

// A versioned inline namespace lets two incompatible cairn versions live in one program.
#define CAIRN_BEGIN_NAMESPACE namespace cairn { inline namespace v1 {
#define CAIRN_END_NAMESPACE } }

// CCCL 3 (CUDA 13) no longer defines __host__/__device__ for host compilers, so kernels
// use our own macro: empty for g++/clang, the CUDA qualifiers under nvcc.
#if defined(__CUDACC__) || defined(__HIPCC__)
#define CAIRN_HD __host__ __device__
#else
#define CAIRN_HD
#endif

// For the few small functions a hot loop calls at many places (the JSON reader's next-character
// test), where the compiler's inlining budget otherwise leaves a call per character.
#if defined(__GNUC__) || defined(__clang__)
#define CAIRN_ALWAYS_INLINE [[gnu::always_inline]] inline
#elif defined(_MSC_VER)
#define CAIRN_ALWAYS_INLINE __forceinline
#else
#define CAIRN_ALWAYS_INLINE inline
#endif

// Thrust defaults its device system to CUDA. A host compiler cannot build that, so when the
// user has not chosen, the kernels run on Thrust's sequential C++ backend (or OpenMP when the
// user defines THRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_OMP and compiles with -fopenmp).
#if !defined(__CUDACC__) && !defined(THRUST_DEVICE_SYSTEM)
#define THRUST_DEVICE_SYSTEM THRUST_DEVICE_SYSTEM_CPP
#endif

// Separate compilation (docs/compile-time.md). By default cairn is header-only: every
// translation unit that saves or loads compiles the runtime (the I/O, the metadata, the cast
// kernels, the commit). With CAIRN_SEPARATE_COMPILATION defined in every translation unit,
// cairn/cairn.hpp declares the runtime's entry points only, and one translation unit of the
// program compiles them by including cairn/src.hpp (CMake: link cairn::compiled instead).
// CAIRN_API marks those entry points: inline when header-only, ordinary functions otherwise.
// CAIRN_DEFINES_RUNTIME: whether this translation unit compiles the runtime's definitions
// (every one when header-only; with separate compilation, the one of cairn/src.hpp).
#if defined(CAIRN_SEPARATE_COMPILATION)
#define CAIRN_API
#if defined(CAIRN_BUILDING_RUNTIME)
#define CAIRN_DEFINES_RUNTIME 1
#else
#define CAIRN_DEFINES_RUNTIME 0
#endif
#else
#define CAIRN_API inline
#define CAIRN_DEFINES_RUNTIME 1
#endif
// The opt-in parts follow the same rule, each with a library of its own (CMake: cairn::orbax,
// cairn::s3): with CAIRN_SEPARATE_COMPILATION, cairn/orbax.hpp and cairn/s3.hpp declare their
// entry points (CAIRN_API) and compile none of their code into the including file; their
// definitions are compiled once, where CAIRN_BUILDING_ORBAX or CAIRN_BUILDING_S3 is defined
// (src/orbax.cpp, src/s3.cpp). Header-only, every file that includes them compiles them.
#if defined(CAIRN_SEPARATE_COMPILATION) && !defined(CAIRN_BUILDING_ORBAX)
#define CAIRN_DEFINES_ORBAX 0
#else
#define CAIRN_DEFINES_ORBAX 1
#endif
#if defined(CAIRN_SEPARATE_COMPILATION) && !defined(CAIRN_BUILDING_S3)
#define CAIRN_DEFINES_S3 0
#else
#define CAIRN_DEFINES_S3 1
#endif

// The on-disk format is little-endian and data is written straight from memory.
static_assert(std::endian::native == std::endian::little,
              "cairn: only little-endian hosts are supported (the checkpoint format is little-endian)");
