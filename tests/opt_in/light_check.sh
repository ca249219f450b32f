#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fails if an object file of a separately compiled program holds code of the Orbax reader and
# writer or of the S3 store (tests/opt_in/light.cpp says why).
#   tests/opt_in/light_check.sh OBJECT...
set -euo pipefail
[ "$#" -gt 0 ] || { echo "usage: $0 OBJECT..."; exit 2; }
symbols=$(nm -C --defined-only "$@")
[ -n "$symbols" ] || { echo "$*: no symbols (not the object file of tests/opt_in/light.cpp?)"; exit 1; }
# Functions, virtual tables and type information of those classes and namespaces (a shared_ptr's
# control block for an S3Store is the standard library's, and small).
leaked=$(grep -E '^[0-9a-f]* [TtWwVv] ((vtable|typeinfo|typeinfo name) for )?cairn::v[0-9]+::(S3Store|s3::|detail::orbax::)' <<<"$symbols" || true)
if [ -n "$leaked" ]; then
  echo "code of cairn/orbax.hpp or cairn/s3.hpp compiled into a file that only includes them ($(wc -l <<<"$leaked") symbols):"
  head -20 <<<"$leaked" | cut -c1-200
  exit 1
fi
echo "light_check: no Orbax or S3 code in $*"
