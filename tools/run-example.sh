#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's first command: installs what the examples need, builds them, and runs
#  1. examples/quickstart.cpp: save a training state, print its metadata, load it back;
#  2. examples/train_loop.cpp: a training run checkpointing asynchronously, killed with SIGKILL
#     half-way, then restarted: it resumes from the latest checkpoint and finishes with the same
#     parameters as a run that was never interrupted.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/deps.sh" g++ libeigen3-dev libcereal-dev libthrust-dev
out="$root/build-example"
mkdir -p "$out"
echo "compiling examples/quickstart.cpp and examples/train_loop.cpp header-only with g++ -O2:" \
     "about a minute each on one core (cairn's whole runtime compiles in each file; nothing prints meanwhile)"
for e in quickstart train_loop; do
  echo "  compiling $e ..."
  g++ -std=c++20 -O2 -I"$root/include" -I/usr/include/eigen3 "$root/examples/$e.cpp" -o "$out/$e" -pthread
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== quickstart"
"$out/quickstart" "$work/quickstart"

echo
echo "== train_loop, killed at step 1234"
"$out/train_loop" --dir "$work/train" --crash-at 1234 || echo "(the process was killed: exit code $?)"
echo
echo "== train_loop again: it resumes"
"$out/train_loop" --dir "$work/train"
echo
echo "== the same run, never interrupted"
"$out/train_loop" --dir "$work/reference" --quiet
