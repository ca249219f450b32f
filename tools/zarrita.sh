#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# zarrita 0.7.5 (and @zarrita/storage 0.2.0) from the npm registry: an independent zarr v3
# reader (with `sharding_indexed` and zstd) that the tests read cairn's Orbax exports with
# (tests/orbax/zarrita_check.mjs). A test tool only; nothing of npm is ever a dependency of cairn.
#
#   tools/zarrita.sh install DIR       npm install into DIR (once; needs node and npm)
set -euo pipefail
cmd=${1:?install}
dir=${2:?a directory}
case "$cmd" in
  install)
    if [ -f "$dir/node_modules/zarrita/package.json" ] && [ -f "$dir/node_modules/@zarrita/storage/package.json" ]; then exit 0; fi
    if ! command -v npm >/dev/null; then
      echo "tools/zarrita.sh: npm is missing (the zarrita check of Orbax exports needs Node.js 20 and npm):" >&2
      echo "  sudo apt-get update && sudo apt-get install -y nodejs npm" >&2
      exit 1
    fi
    mkdir -p "$dir"
    (cd "$dir" && npm install --no-audit --no-fund --loglevel=error --prefix "$dir" zarrita@0.7.5 @zarrita/storage@0.2.0 >/dev/null)
    ;;
  *)
    echo "usage: tools/zarrita.sh install DIR" >&2
    exit 2
    ;;
esac
