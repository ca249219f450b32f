#!/usr/bin/env bash
# The README's second command: installs what the build needs, builds every test, example and
# the benchmark, and runs the whole test suite with ctest. Extra arguments go to cmake.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/deps.sh" g++ cmake ninja-build python3 libeigen3-dev libcereal-dev libthrust-dev doctest-dev
build="${CAIRN_BUILD_DIR:-$root/build-test}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
cmake --build "$build" -j "$(nproc)"
cd "$build"
ctest --output-on-failure -j "$(nproc)"
