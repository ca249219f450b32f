#!/usr/bin/env bash
# The README's first command: installs what the example needs, builds examples/quickstart.cpp
# and runs it (save a training state, print its metadata, load it back).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/deps.sh" g++ libeigen3-dev libcereal-dev libthrust-dev
mkdir -p "$root/build-example"
g++ -std=c++20 -O2 -I"$root/include" -I/usr/include/eigen3 "$root/examples/quickstart.cpp" \
  -o "$root/build-example/quickstart" -pthread
"$root/build-example/quickstart" "${1:-/tmp/cairn-quickstart}"
