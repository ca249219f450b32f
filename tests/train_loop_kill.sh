#!/usr/bin/env bash
# Kills examples/train_loop with SIGKILL at random moments, restarts it each time, and checks
# that the final parameters are bit-identical to an uninterrupted run.
set -u
exe=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
steps=15000
"$exe" --dir "$work/ref" --steps $steps --every 20 --quiet --out "$work/ref.txt" >/dev/null || { echo "reference run failed"; exit 1; }
kills=0
for attempt in $(seq 1 60); do
  "$exe" --dir "$work/run" --steps $steps --every 20 --quiet --out "$work/run.txt" >>"$work/log" 2>&1 &
  pid=$!
  sleep "0.$(( RANDOM % 25 + 2 ))"
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
echo "killed $kills times, resumed $resumes times; reference $(cat "$work/ref.txt"), interrupted $(cat "$work/run.txt")"
if [ "$kills" -lt 5 ]; then echo "too few kills landed to test anything"; exit 1; fi
cmp -s "$work/ref.txt" "$work/run.txt" || { echo "final parameters differ"; exit 1; }
echo "train_loop_kill: 1 passed, 0 failed"
