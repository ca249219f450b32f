#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# Writes arrays with zarr-python (Debian's python3-zarr, zarr v2 with numcodecs' zstd) in
# Orbax's older layout (one zarr v2 directory per parameter, a _METADATA naming them), for
# tests/orbax/unit-orbax.cpp: an independent writer of what cairn's Orbax reader reads.
# Beside it, expected/<param>.bin holds each array's C-order bytes as numpy has them, and
# expected/index.json its dtype and shape.
#
#   zarr_ref.py write DIR [ORBAX_TESTDATA]
import json
import os
import subprocess
import sys

import numpy as np
import zarr
from numcodecs import Zstd


def main():
    if len(sys.argv) not in (3, 4) or sys.argv[1] != "write":
        sys.exit("usage: zarr_ref.py write DIR [ORBAX_TESTDATA]")
    out = sys.argv[2]
    ckpt = os.path.join(out, "legacy")
    exp = os.path.join(out, "expected")
    os.makedirs(ckpt, exist_ok=True)
    os.makedirs(exp, exist_ok=True)
    rng = np.random.default_rng(20261126)
    arrays = {}  # param -> (array, zarr kwargs, key_metadata)

    def add(param, a, keys=None, **kw):
        arrays[param] = (a, kw, keys or [(k, 2) for k in param.split(".")])

    add("f32", rng.standard_normal((13, 7)).astype(np.float32), chunks=(5, 4), compressor=Zstd(level=1))
    add("f64_F", rng.standard_normal((6, 5)), chunks=(4, 3), order="F", compressor=None)
    add("i8", rng.integers(-128, 128, 10).astype(np.int8), chunks=(4,), compressor=Zstd(level=3))
    for name, dt in [("u8", np.uint8), ("i16", np.int16), ("u16", np.uint16), ("i32", np.int32), ("u32", np.uint32),
                     ("i64", np.int64), ("u64", np.uint64)]:
        info = np.iinfo(dt)
        add(name, rng.integers(info.min, info.max, 17, dtype=dt, endpoint=True), chunks=(8,), compressor=Zstd(level=1))
    add("f16", rng.standard_normal(17).astype(np.float16), chunks=(8,), compressor=Zstd(level=1))
    add("flags", rng.integers(0, 2, 17).astype(bool), chunks=(8,), compressor=Zstd(level=1))
    add("scalar", np.array(3.5, dtype=np.float32), chunks=(), compressor=Zstd(level=1))
    # Chunks of megabytes: the loader reads them in pieces, which decode one after another.
    add("big", rng.standard_normal(300000).astype(np.float32), chunks=(300000,), compressor=Zstd(level=1))
    add("big2d", rng.standard_normal((600, 500)), chunks=(400, 500), compressor=Zstd(level=1))
    add("layers.0.w", rng.standard_normal((3, 2)).astype(np.float32), keys=[("layers", 2), (0, 1), ("w", 2)],
        chunks=(3, 2), compressor=None)
    add("layers.1.w", rng.standard_normal((3, 2)).astype(np.float32), keys=[("layers", 2), (1, 1), ("w", 2)],
        chunks=(2, 2), compressor=Zstd(level=1))

    tree = {}
    index = {}
    for param, (a, kw, keys) in arrays.items():
        z = zarr.open_array(os.path.join(ckpt, param), mode="w", shape=a.shape, dtype=a.dtype,
                            dimension_separator=".", fill_value=None, **kw)
        z[...] = a
        tree[str(tuple(k for k, _ in keys))] = {
            "key_metadata": [{"key": k, "key_type": t} for k, t in keys],
            "value_metadata": {"value_type": "np.ndarray", "skip_deserialize": False}}
        with open(os.path.join(exp, param + ".bin"), "wb") as f:
            f.write(np.ascontiguousarray(a).tobytes())
        index[param] = {"dtype": a.dtype.name, "shape": list(a.shape)}

    # A chunk never written reads as the fill value.
    z = zarr.open_array(os.path.join(ckpt, "holes"), mode="w", shape=(8,), chunks=(4,), dtype=np.int32,
                        fill_value=7, dimension_separator=".", compressor=Zstd(level=1))
    z[0:4] = np.arange(4, dtype=np.int32)
    holes = np.array([0, 1, 2, 3, 7, 7, 7, 7], dtype=np.int32)
    assert not os.path.exists(os.path.join(ckpt, "holes", "1"))
    tree["('holes',)"] = {"key_metadata": [{"key": "holes", "key_type": 2}],
                          "value_metadata": {"value_type": "np.ndarray", "skip_deserialize": False}}
    with open(os.path.join(exp, "holes.bin"), "wb") as f:
        f.write(holes.tobytes())
    index["holes"] = {"dtype": "int32", "shape": [8]}

    with open(os.path.join(ckpt, "_METADATA"), "w") as f:
        json.dump({"tree_metadata": tree, "use_zarr3": False}, f)
    with open(os.path.join(exp, "index.json"), "w") as f:
        json.dump(index, f)

    # Orbax's own files of 2024 (../shared/testdata/orbax/legacy), decoded by the zstd tool
    # (numcodecs 0.11 refuses TensorStore's frames without a content size, tensorstore#182)
    # and read by numpy as their .zarray says.
    if len(sys.argv) == 4:
        legacy = os.path.join(sys.argv[3], "legacy", "aggregate_some.checkpoint")
        if os.path.isdir(legacy):
            for p in ("a", "b"):
                with open(os.path.join(legacy, p, ".zarray")) as f:
                    meta = json.load(f)
                assert meta["compressor"]["id"] == "zstd" and meta["chunks"] == meta["shape"]
                raw = subprocess.run(["zstd", "-dc", os.path.join(legacy, p, "0")], check=True,
                                     capture_output=True).stdout
                a = np.frombuffer(raw, dtype=np.dtype(meta["dtype"])).reshape(meta["shape"])
                with open(os.path.join(exp, "aggregate_some." + p + ".bin"), "wb") as f:
                    f.write(np.ascontiguousarray(a).tobytes())


if __name__ == "__main__":
    main()
