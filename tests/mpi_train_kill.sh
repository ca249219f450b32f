#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Kills one rank of examples/mpi_train (4 ranks) with SIGKILL at random moments of repeated
# multi-process runs, restarting after each kill; then resumes on 2 ranks to the end. Checks
# that the job stops when a rank dies, that no step directory without its commit marker is
# ever left at a final path, and that the final weights are bit-identical to an uninterrupted
# run.
# Usage: mpi_train_kill.sh MPI_TRAIN MPIEXEC [KILLS]
set -u
exe=$1
mpiexec=$2
want_kills=${3:-6}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
steps=60
args=(--steps $steps --step-ms 15)
t0=$(date +%s%N)
"$mpiexec" -n 4 "$exe" --dir "$work/ref" "${args[@]}" --quiet >/dev/null 2>&1 || { echo "reference run failed"; exit 1; }
ref_ns=$(( $(date +%s%N) - t0 ))
ref=$("$exe" --dir "$work/ref" --digest)
check_final_paths() {
  # Every step directory (digits only) is a committed checkpoint: no half-written one.
  for d in "$1"/*/; do
    [ -d "$d" ] || continue
    name=$(basename "$d")
    case "$name" in (*[!0-9]*) continue ;; esac
    [ -f "$d/_CHECKPOINT" ] || { echo "step directory $name has no commit marker"; exit 1; }
  done
}
# Rounds: in a fresh directory, run on 4 ranks and kill a random rank at a random moment, twice
# (restarting in between, so the second run resumes); then resume on 2 ranks (resharding onto
# a 1x2 mesh) and finish. A run that ends before its kill lands just ends its round early.
kills=0
rounds=0
while [ "$kills" -lt "$want_kills" ] && [ "$rounds" -lt 12 ]; do
  rounds=$((rounds + 1))
  run="$work/run$rounds"
  for attempt in 1 2; do
    "$mpiexec" -n 4 "$exe" --dir "$run" "${args[@]}" >>"$work/log" 2>&1 &
    launcher=$!
    sleep "$(awk -v ns="$ref_ns" -v r="$RANDOM" 'BEGIN { printf "%.3f", ns / 1e9 * (0.15 + 0.45 * r / 32767) }')"
    ranks=($(pgrep -f -- "$exe --dir $run " | grep -v "^$launcher\$" || true))
    landed=0
    if kill -0 $launcher 2>/dev/null && [ ${#ranks[@]} -gt 0 ] && kill -9 "${ranks[$((RANDOM % ${#ranks[@]}))]}" 2>/dev/null; then
      landed=1
      kills=$((kills + 1))
    fi
    # The launcher must end: the job stops when one of its ranks dies.
    for _ in $(seq 1 300); do kill -0 $launcher 2>/dev/null || break; sleep 0.1; done
    if kill -0 $launcher 2>/dev/null; then echo "the job did not stop after a rank was killed"; kill -9 $launcher; exit 1; fi
    wait $launcher 2>/dev/null
    check_final_paths "$run"
    [ $landed -eq 1 ] || break
  done
  "$mpiexec" -n 2 "$exe" --dir "$run" "${args[@]}" >>"$work/log" 2>&1 || { echo "the 2-rank resume failed:"; tail -5 "$work/log"; exit 1; }
  check_final_paths "$run"
  got=$("$exe" --dir "$run" --digest)
  [ "$ref" = "$got" ] || { echo "round $rounds: final weights differ: $got, reference $ref"; exit 1; }
done
resumes=$(grep -c "^resuming" "$work/log")
echo "uninterrupted 4-rank run $(( ref_ns / 1000000 )) ms; $rounds rounds, $kills ranks killed, $resumes runs resumed from a checkpoint"
echo "every round ended on 2 ranks with the reference weights: $ref"
if [ "$kills" -lt "$want_kills" ]; then echo "too few kills landed ($kills of $want_kills) to test anything"; exit 1; fi
echo "mpi_train_kill: 1 passed, 0 failed"
