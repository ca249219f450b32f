#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's MPI command: installs MPICH and what the example needs, builds
# examples/mpi_train.cpp, and runs it on 4 ranks (a 2x2 data x model mesh) checkpointing
# asynchronously; one rank is killed with SIGKILL mid-run, which stops the job; the run then
# resumes on 2 ranks from the latest committed checkpoint, resharding onto a 1x2 mesh, and ends
# with the same weights as a run that was never interrupted.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/deps.sh" g++ libeigen3-dev libcereal-dev libthrust-dev mpich libmpich-dev
out="$root/build-example"
mkdir -p "$out"
mpicxx -std=c++20 -O2 -I"$root/include" -I/usr/include/eigen3 "$root/examples/mpi_train.cpp" -o "$out/mpi_train" -pthread
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
args=(--steps 60 --step-ms 40)

echo "== mpi_train on 4 ranks; one rank is killed after 1.5 s"
mpiexec -n 4 "$out/mpi_train" --dir "$work/run" "${args[@]}" &
launcher=$!
sleep 1.5
victim=$(pgrep -f -- "$out/mpi_train --dir $work/run" | grep -v "^$launcher\$" | shuf -n 1)
kill -9 "$victim" && echo "(killed rank process $victim)"
wait $launcher 2>/dev/null || echo "(the job stopped: exit code $?)"
echo
echo "== mpi_train again, on 2 ranks: it resumes"
mpiexec -n 2 "$out/mpi_train" --dir "$work/run" "${args[@]}"
echo
echo "== the same run on 4 ranks, never interrupted"
mpiexec -n 4 "$out/mpi_train" --dir "$work/reference" "${args[@]}" --quiet
resumed=$("$out/mpi_train" --dir "$work/run" --digest)
reference=$("$out/mpi_train" --dir "$work/reference" --digest)
echo "resumed:   $resumed"
echo "reference: $reference"
[ "$resumed" = "$reference" ] && echo "identical" || { echo "DIFFERENT"; exit 1; }
