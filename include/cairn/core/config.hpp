// Version, namespace and portability macros shared by every cairn header.
// Everything else includes this first, so the inline namespace and the
// host/device macro are defined in one place.
#pragma once

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

// Thrust defaults its device system to CUDA. A host compiler cannot build that, so when the
// user has not chosen, the kernels run on Thrust's sequential C++ backend (or OpenMP when the
// user defines THRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_OMP and compiles with -fopenmp).
#if !defined(__CUDACC__) && !defined(THRUST_DEVICE_SYSTEM)
#define THRUST_DEVICE_SYSTEM THRUST_DEVICE_SYSTEM_CPP
#endif

// The on-disk format is little-endian and data is written straight from memory.
static_assert(std::endian::native == std::endian::little,
              "cairn: only little-endian hosts are supported (the checkpoint format is little-endian)");
