#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# Reads the arrays of cairn's Orbax exports in the zarr v2, one-directory-per-parameter layout
# (.zarray, chunk files <name>/<i>.<j>, zstd or none; v1's state/ or v0's top level) with
# zarr-python 2 (Debian's python3-zarr), an independent zarr reader, and compares every byte with
# the manifest the export test wrote beside them (DIR/expected/<name>/manifest.json: key path,
# dtype, shape, raw C-order bytes). numpy has no bfloat16 or float8 dtypes: those leaves are
# listed as skipped, by name. Strings are not zarr arrays in Orbax. Exits 1 on any difference.
#
#   zarr_python_check.py EXPORTS_DIR NAME...
import json
import os
import sys

import numpy as np
import zarr

UNSUPPORTED = {"bfloat16", "float8_e4m3fn", "float8_e5m2"}


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: zarr_python_check.py EXPORTS_DIR NAME...")
    root, names = sys.argv[1], sys.argv[2:]
    failed = 0
    for name in names:
        with open(os.path.join(root, "expected", name, "manifest.json")) as f:
            manifest = json.load(f)
        state = os.path.join(root, name, "state")
        top = state if os.path.isdir(state) else os.path.join(root, name)
        same, skipped = 0, []
        for leaf in manifest:
            key = ".".join(str(k) for k in leaf["path"])
            if "file" not in leaf:
                continue  # a string leaf
            if leaf["dtype"] in UNSUPPORTED:
                skipped.append("%s (%s)" % (key, leaf["dtype"]))
                continue
            try:
                a = zarr.open_array(os.path.join(top, key), mode="r")
                got = np.array(a[...], order="C")  # (ascontiguousarray makes a 0-d array 1-d)
                if list(got.shape) != leaf["shape"]:
                    raise ValueError("shape %s, expected %s" % (list(got.shape), leaf["shape"]))
                with open(os.path.join(root, "expected", name, leaf["file"]), "rb") as f:
                    want = f.read()
                if got.tobytes() != want:
                    raise ValueError("bytes differ (%d read, %d expected)" % (got.nbytes, len(want)))
                same += 1
            except Exception as e:  # every failure is reported, then the next leaf
                print("FAIL %s %s: %s" % (name, key, e))
                failed += 1
        print("%s: zarr-python %s read %d arrays bit-exactly%s" % (
            name, zarr.__version__, same, "; skipped (no such dtype in numpy): " + ", ".join(skipped) if skipped else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
