#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Kills examples/train_loop with SIGKILL at random moments, restarts it each time, and checks
# that the final parameters are bit-identical to an uninterrupted run. Each kill comes after a
# random 2-10% of the uninterrupted run's time, so a run is interrupted about a dozen times or
# more whatever the machine's speed (at least 9 by construction).
set -u
exe=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
steps=15000
t0=$(date +%s%N)
"$exe" --dir "$work/ref" --steps $steps --every 20 --quiet --out "$work/ref.txt" >/dev/null || { echo "reference run failed"; exit 1; }
ref_ns=$(( $(date +%s%N) - t0 ))
kills=0
for attempt in $(seq 1 200); do
  "$exe" --dir "$work/run" --steps $steps --every 20 --quiet --out "$work/run.txt" >>"$work/log" 2>&1 &
  pid=$!
  sleep "$(awk -v ns="$ref_ns" -v r="$RANDOM" 'BEGIN { printf "%.4f", ns / 1e9 * (0.02 + 0.08 * r / 32767) }')"
  if kill -9 $pid 2>/dev/null; then
    wait $pid 2>/dev/null
    kills=$((kills + 1))
  else
    wait $pid || { echo "a run failed:"; tail -5 "$work/log"; exit 1; }
  fi
  [ -f "$work/run.txt" ] && break
done
if [ ! -f "$work/run.txt" ]; then
  "$exe" --dir "$work/run" --steps $steps --every 20 --quiet --out "$work/run.txt" >>"$work/log" 2>&1 || exit 1
fi
resumes=$(grep -c resuming "$work/log")
echo "uninterrupted run $(( ref_ns / 1000000 )) ms; killed $kills times, resumed $resumes times"
echo "reference $(cat "$work/ref.txt"), interrupted $(cat "$work/run.txt")"
if [ "$kills" -lt 3 ]; then echo "too few kills landed to test anything"; exit 1; fi
cmp -s "$work/ref.txt" "$work/run.txt" || { echo "final parameters differ"; exit 1; }
echo "train_loop_kill: 1 passed, 0 failed"
