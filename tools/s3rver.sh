#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The S3 server the tests run against: @20minutes/s3rver 5.0.0 from the npm registry (a test
# tool only; nothing of npm is ever a dependency of cairn). It checks SigV4 signatures,
# multipart uploads, ranged GETs and ListObjectsV2, on 127.0.0.1 only.
#
#   tools/s3rver.sh install DIR        npm install into DIR (once; needs node and npm)
#   tools/s3rver.sh start DIR          starts it on a free port; writes DIR/endpoint
#   tools/s3rver.sh stop DIR           stops it and removes its data
set -euo pipefail
cmd=${1:?install, start or stop}
dir=${2:?a directory}
here=$(cd "$(dirname "$0")" && pwd)
case "$cmd" in
  install)
    if [ -f "$dir/node_modules/@20minutes/s3rver/package.json" ]; then exit 0; fi
    if ! command -v npm >/dev/null; then
      echo "tools/s3rver.sh: npm is missing (the S3 tests need Node.js 20 and npm):" >&2
      echo "  sudo apt-get update && sudo apt-get install -y nodejs npm" >&2
      exit 1
    fi
    mkdir -p "$dir"
    # --engine-strict off: 5.0.0 declares node >= 24 but runs on Debian's and this machine's 20.
    (cd "$dir" && npm install --no-audit --no-fund --loglevel=error --prefix "$dir" @20minutes/s3rver@5.0.0 >/dev/null)
    ;;
  start)
    "$0" stop "$dir" 2>/dev/null || true
    mkdir -p "$dir/data"
    rm -f "$dir/endpoint"
    NODE_PATH="$dir/node_modules" nohup node "$here/../tests/s3/s3rver.js" "$dir" >"$dir/log" 2>&1 &
    echo $! >"$dir/pid"
    for _ in $(seq 100); do
      [ -s "$dir/endpoint" ] && { echo "S3 test server at $(cat "$dir/endpoint")"; exit 0; }
      kill -0 "$(cat "$dir/pid")" 2>/dev/null || break
      sleep 0.1
    done
    echo "tools/s3rver.sh: the S3 test server did not start; its log:" >&2
    cat "$dir/log" >&2
    exit 1
    ;;
  stop)
    if [ -f "$dir/pid" ]; then kill "$(cat "$dir/pid")" 2>/dev/null || true; rm -f "$dir/pid"; fi
    rm -rf "$dir/data" "$dir/endpoint"
    ;;
  *) echo "usage: $0 install|start|stop DIR" >&2; exit 2 ;;
esac
