#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs each libFuzzer target of a CAIRN_FUZZ=ON build for a bounded time, on a copy of its seed
# corpus (the repository's corpus is not changed) with tests/fuzz/cairn.dict.
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
for target in metadata user_metadata marker checkpointer_root safetensors cli s3_response s3_marker orbax; do
  work=$(mktemp -d)
  cp -r "$root/tests/fuzz/corpus/$target" "$work/corpus"
  mkdir -p "$build/fuzz-crashes/$target"
  echo "fuzz.sh: $target for ${seconds}s"
  # The inputs that once failed, where the target has any (an empty folder is not in git).
  regressions=()
  [ -d "$root/tests/fuzz/regressions/$target" ] && regressions=("$root/tests/fuzz/regressions/$target")
  if ! CAIRN_FUZZ_TARGET=$target "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
       -dict="$root/tests/fuzz/cairn.dict" -artifact_prefix="$build/fuzz-crashes/$target/" \
       -print_final_stats=1 "$work/corpus" "${regressions[@]}" > "$work/log" 2>&1; then
    tail -60 "$work/log"
    echo "fuzz.sh: $target FAILED; the input is in $build/fuzz-crashes/$target/"
    exit 1
  fi
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$work/log" | sed "s/^/  /"
  rm -rf "$work"
done
echo "fuzz.sh: every target ran ${seconds}s without a failure"
