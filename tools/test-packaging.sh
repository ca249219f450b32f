#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Packaging tests: a consumer project using the installed cairn through find_package, one
# using add_subdirectory, and one compiled against the single header alone; each both with the
# runtime compiled once (cairn::cairn, the default; cairn::compiled, its earlier name) and
# header-only (cairn::header_only). The runtime is also built and installed as a shared library
# once, and pkg-config's two packages are used from the installed .pc files.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
# Compiles of one file each, two at a time (each is one g++ process; CI has two cores): `both
# CMD1 -- CMD2` runs them side by side and fails if either does.
both() {
  local first=() second=()
  while [ "$1" != "--" ]; do first+=("$1"); shift; done
  shift
  second=("$@")
  "${first[@]}" & local p1=$!
  "${second[@]}" & local p2=$!
  local rc=0
  wait "$p1" || rc=1
  wait "$p2" || rc=1
  return "$rc"
}

echo "== install, then find_package(cairn)"
cmake -S "$root" -B "$work/cairn-build" "${gen[@]}" -DCAIRN_BUILD_TESTS=OFF -DCAIRN_BUILD_EXAMPLES=OFF \
  -DCAIRN_BUILD_BENCH=OFF -DCMAKE_INSTALL_PREFIX="$work/prefix" >/dev/null
cmake --build "$work/cairn-build" >/dev/null  # the runtime library, cairn::cairn
# Without CMAKE_BUILD_TYPE, cairn's own build is optimized (Release).
grep -q "^CMAKE_BUILD_TYPE:STRING=Release$" "$work/cairn-build/CMakeCache.txt" ||
  { echo "a build without CMAKE_BUILD_TYPE is not Release"; exit 1; }
cmake --install "$work/cairn-build" >/dev/null
test -f "$work/prefix/share/pkgconfig/cairn.pc"
# The licence goes with the installed files, and every installed header states it.
test -f "$work/prefix/share/doc/cairn/LICENSE"
unlicensed=$(grep -rL "SPDX-License-Identifier: Apache-2.0" "$work/prefix/include/cairn" || true)
[ -z "$unlicensed" ] || { echo "installed headers without an SPDX line:"; echo "$unlicensed"; exit 1; }
cmake -S "$root/tests/package/find_package" -B "$work/fp" "${gen[@]}" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/fp" >/dev/null
"$work/fp/consumer" "$work/fp"
"$work/fp/consumer_compiled" "$work/fp"
"$work/fp/consumer_compat" "$work/fp"
"$work/fp/consumer_s3"  # cairn::s3: built where libcurl and OpenSSL are, as they are here
"$work/fp/consumer_orbax" "$work/fp"  # cairn::orbax: built where libzstd is, as it is here
"$work/fp/consumer_orbax_header_only" "$work/fp"  # cairn::orbax_header_only
# pkg-config: `cairn` links the compiled runtime, `cairn-header-only` needs no library.
"$root/tools/deps.sh" pkgconf
export PKG_CONFIG_PATH="$work/prefix/share/pkgconfig"
both g++ $(pkg-config --cflags cairn) "$root/tests/package/consumer.cpp" -o "$work/pc" $(pkg-config --libs cairn) -- \
  g++ $(pkg-config --cflags cairn-header-only) -O1 "$root/tests/package/consumer.cpp" -o "$work/pc_ho" $(pkg-config --libs cairn-header-only)
"$work/pc" "$work"
"$work/pc_ho" "$work"
# The opt-in parts compiled once (cairn-s3, cairn-orbax: libcairn-s3, libcairn-orbax).
both g++ $(pkg-config --cflags cairn-s3) "$root/tests/package/consumer_s3.cpp" -o "$work/pc_s3" $(pkg-config --libs cairn-s3) -- \
  g++ $(pkg-config --cflags cairn-orbax) "$root/tests/package/consumer_orbax.cpp" -o "$work/pc_orbax" $(pkg-config --libs cairn-orbax)
"$work/pc_s3"
"$work/pc_orbax" "$work"
# And header-only (cairn-s3-header-only, cairn-orbax-header-only): their flags are those of
# cairn-header-only and the part's libraries, without a cairn library or separate
# compilation. (A header-only program with the Orbax part is compiled and run through CMake
# above, consumer_orbax_header_only; each such compile costs half a minute.)
for part in s3 orbax; do
  flags=$(pkg-config --cflags --libs "cairn-$part-header-only")
  case "$part" in s3) want="-lcurl -lcrypto" ;; orbax) want="-lzstd" ;; esac
  for w in $want -pthread; do
    grep -qe "$w" <<<"$flags" || { echo "cairn-$part-header-only lacks $w: $flags"; exit 1; }
  done
  if grep -qE "CAIRN_SEPARATE_COMPILATION|-lcairn" <<<"$flags"; then
    echo "cairn-$part-header-only is not header-only: $flags"; exit 1
  fi
done
unset PKG_CONFIG_PATH

echo "== the runtime as a shared library (CAIRN_SHARED=ON), installed, then find_package(cairn)"
# Without the S3 part (CMake told not to look for libcurl), as on a machine without it: the
# installed package must then work without cairn::s3, and the shared runtime and the Orbax
# part are what this build checks.
cmake -S "$root" -B "$work/shared-build" "${gen[@]}" -DCAIRN_SHARED=ON -DCAIRN_BUILD_TESTS=OFF \
  -DCAIRN_BUILD_EXAMPLES=OFF -DCAIRN_BUILD_BENCH=OFF -DCAIRN_BUILD_CLI=OFF -DCMAKE_DISABLE_FIND_PACKAGE_CURL=ON \
  -DCMAKE_INSTALL_PREFIX="$work/shared-prefix" >/dev/null
cmake --build "$work/shared-build" >/dev/null
cmake --install "$work/shared-build" >/dev/null
test ! -e "$work/shared-prefix/lib/libcairn-s3.so" || { echo "the S3 part was built without libcurl"; exit 1; }
cmake -S "$root/tests/package/find_package" -B "$work/fps" "${gen[@]}" -DCMAKE_PREFIX_PATH="$work/shared-prefix" >/dev/null
# Only the programs run here: the others are the same compiles as in fp above.
cmake --build "$work/fps" --target consumer_compiled consumer_orbax >/dev/null
"$work/fps/consumer_compiled" "$work/fps"
"$work/fps/consumer_orbax" "$work/fps"
# It runs on the installed libcairn.so.0.1 (the name carries the minor version), not a copy.
# ldd's output is taken whole first: piped into grep -q under pipefail, grep leaving at the
# first match can kill ldd with SIGPIPE and fail the check on a correct listing.
libs=$(ldd "$work/fps/consumer_compiled")
grep -q "libcairn.so.0.1 => $work/shared-prefix/" <<<"$libs" ||
  { echo "consumer_compiled does not load the installed libcairn.so.0.1:"; echo "$libs"; exit 1; }
libs=$(ldd "$work/fps/consumer_orbax")
grep -q "libcairn-orbax.so.0.1 => $work/shared-prefix/" <<<"$libs" ||
  { echo "consumer_orbax does not load the installed libcairn-orbax.so.0.1:"; echo "$libs"; exit 1; }

echo "== add_subdirectory(cairn)"
cmake -S "$root/tests/package/subdirectory" -B "$work/sd" "${gen[@]}" -DCAIRN_SOURCE_DIR="$root" >/dev/null
# Only the consumers: the build of the opt-in parts' libraries is the same as the install's.
cmake --build "$work/sd" --target consumer consumer_compiled consumer_compat >/dev/null
"$work/sd/consumer" "$work/sd"
"$work/sd/consumer_compiled" "$work/sd"
"$work/sd/consumer_compat" "$work/sd"

echo "== single header only"
eigen=$(pkg-config --cflags eigen3 2>/dev/null || echo -I/usr/include/eigen3)
# Header-only, and separate compilation with the single header (one file compiles the runtime).
both g++ -std=c++20 -O1 -I"$root/single_include" $eigen "$root/tests/package/consumer.cpp" -o "$work/single" -pthread -- \
  g++ -std=c++20 -DCAIRN_SEPARATE_COMPILATION -I"$root/single_include" $eigen "$root/tests/package/consumer.cpp" \
  "$root/tests/package/single_runtime.cpp" -o "$work/single_compiled" -pthread
"$work/single" "$work"
"$work/single_compiled" "$work"

echo "== a translation unit without C++20 stops at cairn's one #error"
if g++ -std=c++17 -fsyntax-only -I"$root/include" $eigen "$root/tests/package/consumer.cpp" >"$work/cxx17.log" 2>&1; then
  echo "compiled without C++20"; exit 1
fi
grep -q "cairn needs C++20" "$work/cxx17.log" || { cat "$work/cxx17.log"; exit 1; }
# The #error, then the fatal error that stops the compiler there, and nothing else.
[ "$(grep -cE ': (fatal )?error:' "$work/cxx17.log")" -eq 2 ] && grep -q "compilation stopped" "$work/cxx17.log" ||
  { echo "not stopped at the first error without C++20:"; head -20 "$work/cxx17.log"; exit 1; }
echo "packaging: 16 passed, 0 failed"
