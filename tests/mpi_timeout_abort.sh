#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# MpiOptions::on_timeout = abort: a rank that never arrives must stop the whole job (the other
# rank sleeps 60 s), with the message that names the phase and the missing rank on rank 0's
# stderr. Each rank's stderr goes straight to a file: the launcher's forwarding of output can
# lose the last lines of a job it is tearing down.
# Usage: mpi_timeout_abort.sh MPI_TESTS MPIEXEC
set -u
tests=$1
mpiexec=$2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
"$mpiexec" -n 2 sh -c 'exec "$0" --no-skip "-tc=*abort*" 2>>"$1"' "$tests" "$log" >/dev/null 2>&1
rc=$?
elapsed=$(( $(date +%s) - start ))
want="cairn: rank 0 of 2 waited 1000 ms in phase 'gathering chunk records': rank 1 did not arrive; aborting the job"
grep -qF "$want" "$log" || { echo "the abort message is missing; the ranks' stderr:"; cat "$log"; exit 1; }
[ "$rc" -ne 0 ] || { echo "the job exited with status 0"; exit 1; }
[ "$elapsed" -lt 30 ] || { echo "the job took ${elapsed} s to stop: the other rank was not aborted"; exit 1; }
echo "the job stopped after ${elapsed} s (status $rc) with: $want"
echo "mpi_timeout_abort: 1 passed, 0 failed"
