#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs each libFuzzer target of a CAIRN_FUZZ=ON build for a bounded time, on a copy of its seed
# corpus (the repository's corpus is not changed) with tests/fuzz/cairn.dict, as many at once
# as there are cores (CAIRN_FUZZ_JOBS=N for another number).
#   tools/fuzz.sh BUILD_DIR [SECONDS_PER_TARGET]
# A crash stops with the input saved as BUILD_DIR/fuzz-crashes/<target>/crash-*: copy it into
# tests/fuzz/regressions/<target>/ with the fix, so every later build replays it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: tools/fuzz.sh BUILD_DIR [SECONDS]}
seconds=${2:-30}
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$root/tests/ubsan.supp"
export ASAN_OPTIONS="detect_leaks=1"
exe="$build/tests/cairn-fuzz"
[ -x "$exe" ] || { echo "fuzz.sh: $exe not built (configure with -DCAIRN_FUZZ=ON and clang)"; exit 1; }
targets=(metadata user_metadata marker checkpointer_root safetensors cli s3_response s3_marker orbax)
# As many targets at once as there are cores (CAIRN_FUZZ_JOBS): each is one process on one
# core, so two cores run the nine targets in five rounds of `seconds` instead of nine.
jobs=${CAIRN_FUZZ_JOBS:-$(nproc)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run_target() {
  local target=$1 dir="$work/$1"
  mkdir -p "$dir"
  cp -r "$root/tests/fuzz/corpus/$target" "$dir/corpus"
  mkdir -p "$build/fuzz-crashes/$target"
  # The inputs that once failed, where the target has any (an empty folder is not in git).
  local regressions=()
  [ -d "$root/tests/fuzz/regressions/$target" ] && regressions=("$root/tests/fuzz/regressions/$target")
  CAIRN_FUZZ_TARGET=$target "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -dict="$root/tests/fuzz/cairn.dict" -artifact_prefix="$build/fuzz-crashes/$target/" \
    -print_final_stats=1 "$dir/corpus" "${regressions[@]}" > "$dir/log" 2>&1
}
pids=()
for target in "${targets[@]}"; do
  # Wait for a free core: the oldest run still going.
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  echo "fuzz.sh: $target for ${seconds}s"
  run_target "$target" &
  pids+=($!)
done
# Each target's outcome, in order: the first failure stops with its log.
for i in "${!targets[@]}"; do
  target=${targets[$i]}
  if ! wait "${pids[$i]}"; then
    tail -60 "$work/$target/log"
    echo "fuzz.sh: $target FAILED; the input is in $build/fuzz-crashes/$target/"
    exit 1
  fi
  echo "fuzz.sh: $target:"
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$work/$target/log" | sed "s/^/  /"
done
echo "fuzz.sh: every target ran ${seconds}s without a failure"
