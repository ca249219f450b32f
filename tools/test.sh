#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's second command: installs what the build needs, builds every test, example and
# the benchmark, and runs the whole test suite with ctest. Extra arguments go to cmake.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
start=$(date +%s)
say() { echo "test.sh [$(( $(date +%s) - start ))s]: $*"; }
say "checking the Debian packages the build needs"
"$root/tools/deps.sh" g++ cmake ninja-build python3 libeigen3-dev libcereal-dev libthrust-dev doctest-dev mpich libmpich-dev python3-numpy \
  libcurl4-openssl-dev libssl-dev libzstd-dev zstd python3-zarr python3-numcodecs
build="${CAIRN_BUILD_DIR:-$root/build-test}"
say "configuring in $build"
# -g1 (line tables, enough for backtraces) rather than -g: full debug info of these template-heavy
# tests costs about a quarter of the compile time.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
  -DCAIRN_STRICT_WARNINGS=ON "$@" >/dev/null
say "building with $(nproc) jobs: cairn's runtime once, the test programs and the examples on it, the" \
    "benchmarks header-only (6-8 minutes on 2 cores); ninja prints each program as it finishes"
cmake --build "$build" -j "$(nproc)"
say "running the tests (about a minute)"
cd "$build"
ctest --output-on-failure -j "$(nproc)"
say "done"
