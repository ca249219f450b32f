#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes checkpoints with real Orbax (and JAX), for cairn's Orbax reader to be checked against.

Run where orbax-checkpoint and jax are installed (no network is needed; JAX runs on 8 CPU
devices so that arrays are really sharded):

    python3 tools/orbax_write.py OUT_DIR

OUT_DIR/<name>/ is one checkpoint (or CheckpointManager root) per way of saving that this
Orbax has; OUT_DIR/expected/<name>/manifest.json lists every array leaf (its Orbax key path,
dtype, shape and a file of its C-order bytes) and OUT_DIR/versions.json what wrote them.
tests/orbax/check_real.py reads them back through cairn and compares every byte. A way of
saving that this Orbax lacks is recorded in versions.json's "skipped", not an error.
"""
import json
import os
import sys
import traceback

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import orbax.checkpoint as ocp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

jax.config.update("jax_enable_x64", True)  # int64, uint64 and float64 jax.Arrays stay 64-bit
out = os.path.abspath(sys.argv[1])
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(20261126)
mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("data", "model"))


def bits(dtype, shape):
    """Random values of every bit pattern the dtype has (NaNs too), bools as 0/1."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape)) if shape else 1
    raw = rng.integers(0, 256, size=n * dtype.itemsize, dtype=np.uint8)
    if dtype == np.bool_:
        raw = raw & 1
    return raw.view(dtype).reshape(shape)


def tree():
    """One tree with every dtype, nesting by dicts and lists, scalars and sharded arrays."""
    dtypes = {
        "bool": np.bool_, "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
        "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
        "float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32,
        "float64": np.float64, "float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2,
    }
    t = {"dtypes": {name: bits(d, (3, 5)) for name, d in dtypes.items()}}
    w = rng.standard_normal((64, 96)).astype(np.float32)
    t["params"] = {
        "dense": {"kernel": jax.device_put(w, NamedSharding(mesh, P("data", "model"))),
                  "bias": jax.device_put(rng.standard_normal((96,)).astype(np.float32),
                                         NamedSharding(mesh, P("model")))},
        "embed": jax.device_put(bits(ml_dtypes.bfloat16, (40, 24)), NamedSharding(mesh, P(None, "model"))),
        "replicated": jax.device_put(bits(np.int32, (7, 9)), NamedSharding(mesh, P())),
        # Uneven: 10 rows over 4 devices is not allowed by JAX, so 12 rows over 4, 9 columns over 1.
        "rows": jax.device_put(bits(np.float64, (12, 9)), NamedSharding(mesh, P("model", None))),
    }
    t["layers"] = [{"w": bits(np.float32, (4, 4)), "b": bits(np.float16, (4,))} for _ in range(3)]
    t["step"] = np.asarray(1234, dtype=np.int64)
    t["scalar_f"] = np.asarray(0.5, dtype=np.float32)
    t["big"] = jax.device_put(rng.standard_normal((256, 512)).astype(np.float32), NamedSharding(mesh, P("data")))
    return t


def flatten(t):
    leaves = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(t)[0]:
        keys = []
        for k in path:
            if hasattr(k, "key"):
                keys.append(k.key)
            elif hasattr(k, "idx"):
                keys.append(k.idx)
            else:
                keys.append(str(k))
        leaves.append((keys, np.asarray(leaf)))
    return leaves


def write_expected(name, t):
    d = os.path.join(out, "expected", name)
    os.makedirs(d, exist_ok=True)
    manifest = []
    for i, (keys, a) in enumerate(flatten(t)):
        f = f"{i}.bin"
        with open(os.path.join(d, f), "wb") as fh:
            fh.write(np.ascontiguousarray(a).tobytes())
        manifest.append({"path": keys, "dtype": str(a.dtype), "shape": list(a.shape), "file": f})
    with open(os.path.join(d, "manifest.json"), "w") as fh:
        json.dump(manifest, fh, indent=1)


written, skipped = [], {}


def attempt(name, fn, t):
    path = os.path.join(out, name)
    try:
        fn(path, t)
        write_expected(name, t)
        written.append(name)
        print("wrote", name, flush=True)
    except Exception as e:  # an API this Orbax lacks: recorded, not fatal
        skipped[name] = f"{type(e).__name__}: {e}"
        traceback.print_exc()


def standard(path, t):
    c = ocp.StandardCheckpointer()
    c.save(path, t)
    c.wait_until_finished()


def handler_save(use_ocdbt, use_zarr3):
    def fn(path, t):
        h = ocp.PyTreeCheckpointHandler(use_ocdbt=use_ocdbt, use_zarr3=use_zarr3)
        c = ocp.Checkpointer(h)
        c.save(path, args=ocp.args.PyTreeSave(t))
    return fn


def v1_save(path, t):
    try:
        from orbax.checkpoint import v1 as ocp1
    except ImportError:
        from orbax.checkpoint.experimental import v1 as ocp1
    ocp1.save_pytree(path, t)


def manager(path, t):
    m = ocp.CheckpointManager(path, options=ocp.CheckpointManagerOptions(max_to_keep=2))
    for step in (10, 20, 30):
        t2 = dict(t)
        t2["step"] = np.asarray(step, dtype=np.int64)
        m.save(step, args=ocp.args.StandardSave(t2), metrics={"loss": 1.0 / step})
    m.wait_until_finished()
    m.close()
    t["step"] = np.asarray(30, dtype=np.int64)  # the latest step is what is expected


def small_chunks(path, t):
    # Chunks of at most 4 KiB (Orbax's chunk_byte_size), so that arrays span many chunks.
    h = ocp.PyTreeCheckpointHandler(use_ocdbt=True, use_zarr3=True)
    c = ocp.Checkpointer(h)
    save_args = jax.tree_util.tree_map(lambda _: ocp.SaveArgs(chunk_byte_size=4096), t)
    c.save(path, args=ocp.args.PyTreeSave(t, save_args=save_args))


base = tree()
attempt("standard", standard, base)
attempt("ocdbt_zarr3", handler_save(True, True), base)
attempt("ocdbt_zarr2", handler_save(True, False), base)
attempt("dirs_zarr2", handler_save(False, False), base)
attempt("dirs_zarr3", handler_save(False, True), base)
attempt("v1", v1_save, base)
attempt("small_chunks", small_chunks, base)
attempt("manager", manager, dict(base))

versions = {"orbax": __import__("importlib.metadata").metadata.version("orbax-checkpoint"), "jax": jax.__version__, "numpy": np.__version__,
            "written": written, "skipped": skipped}
with open(os.path.join(out, "versions.json"), "w") as fh:
    json.dump(versions, fh, indent=1)
print(json.dumps(versions, indent=1))
