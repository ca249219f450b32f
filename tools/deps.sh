#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Makes sure the Debian packages named as arguments are installed: installs them with apt-get
# when run as root, otherwise prints the exact command to run and fails.
set -euo pipefail
missing=()
for pkg in "$@"; do
  # The status is taken whole, not piped into grep -q, which under pipefail can fail a
  # match by killing the writer with SIGPIPE.
  [[ $(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null) == "install ok installed" ]] || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ]; then
  echo "Installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "Missing Debian packages: ${missing[*]}" >&2
  echo "Install them with:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
