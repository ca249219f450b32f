#!/usr/bin/env bash
# Packaging tests: a consumer project using the installed cairn through find_package, one
# using add_subdirectory, and one compiled against the single header alone.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)

echo "== install, then find_package(cairn)"
cmake -S "$root" -B "$work/cairn-build" "${gen[@]}" -DCAIRN_BUILD_TESTS=OFF -DCAIRN_BUILD_EXAMPLES=OFF \
  -DCAIRN_BUILD_BENCH=OFF -DCMAKE_INSTALL_PREFIX="$work/prefix" >/dev/null
cmake --install "$work/cairn-build" >/dev/null
test -f "$work/prefix/share/pkgconfig/cairn.pc"
cmake -S "$root/tests/package/find_package" -B "$work/fp" "${gen[@]}" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/fp" >/dev/null
"$work/fp/consumer" "$work/fp"

echo "== add_subdirectory(cairn)"
cmake -S "$root/tests/package/subdirectory" -B "$work/sd" "${gen[@]}" -DCAIRN_SOURCE_DIR="$root" >/dev/null
cmake --build "$work/sd" >/dev/null
"$work/sd/consumer" "$work/sd"

echo "== single header only"
eigen=$(pkg-config --cflags eigen3 2>/dev/null || echo -I/usr/include/eigen3)
g++ -std=c++20 -O1 -I"$root/single_include" $eigen "$root/tests/package/consumer.cpp" -o "$work/single" -pthread
"$work/single" "$work"
echo "packaging: 3 passed, 0 failed"
