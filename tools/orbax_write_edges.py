#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes Orbax checkpoints of what tools/orbax_write.py leaves out, for cairn's Orbax reader to
be tried against: dtypes cairn does not have, values that are no arrays, many leaves, many
data files, casts on save and a checkpoint of several items.

    python3 tools/orbax_write_edges.py OUT_DIR      # where orbax-checkpoint and JAX are installed

OUT_DIR/<name>/ is one checkpoint per case; OUT_DIR/expected/<name>/manifest.json lists the
array leaves cairn must read (key path, dtype, shape, a file of their C-order bytes) and
OUT_DIR/expected/<name>/others.json the leaves it cannot read (key path and what they are),
which it must list or refuse by name, never drop silently or crash on. OUT_DIR/versions.json
says what wrote them and which cases this Orbax could not write.
"""
import json
import os
import sys
import traceback

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import orbax.checkpoint as ocp  # noqa: E402

jax.config.update("jax_enable_x64", True)
out = os.path.abspath(sys.argv[1])
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(20261128)
written, skipped = [], {}


def bits(dtype, shape):
    dtype = np.dtype(dtype)
    n = int(np.prod(shape)) if shape else 1
    raw = rng.integers(0, 256, size=n * dtype.itemsize, dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


def keys_of(path):
    keys = []
    for k in path:
        keys.append(k.key if hasattr(k, "key") else k.idx if hasattr(k, "idx") else str(k))
    return keys


def write_expected(name, readable, others):
    d = os.path.join(out, "expected", name)
    os.makedirs(d, exist_ok=True)
    manifest = []
    for i, (path, leaf) in enumerate(jax.tree_util.tree_flatten_with_path(readable)[0]):
        a = np.asarray(leaf)
        with open(os.path.join(d, f"{i}.bin"), "wb") as fh:
            fh.write(np.ascontiguousarray(a).tobytes())
        manifest.append({"path": keys_of(path), "dtype": str(a.dtype), "shape": list(a.shape), "file": f"{i}.bin"})
    json.dump(manifest, open(os.path.join(d, "manifest.json"), "w"), indent=1)
    json.dump(others, open(os.path.join(d, "others.json"), "w"), indent=1)


def attempt(name, fn):
    try:
        readable, others = fn(os.path.join(out, name))
        write_expected(name, readable, others)
        written.append(name)
        print("wrote", name, flush=True)
    except Exception as e:  # noqa: BLE001  (what this Orbax cannot write: recorded)
        skipped[name] = f"{type(e).__name__}: {e}"[:500]
        traceback.print_exc()


def standard(path, t):
    c = ocp.StandardCheckpointer()
    c.save(path, t)
    c.wait_until_finished()


# One checkpoint per dtype cairn does not have, beside an array it reads.
odd = {
    "int4": jnp.int4, "uint4": jnp.uint4, "int2": getattr(jnp, "int2", None),
    "complex64": np.complex64, "complex128": np.complex128,
    "float8_e4m3fnuz": ml_dtypes.float8_e4m3fnuz, "float8_e4m3b11fnuz": ml_dtypes.float8_e4m3b11fnuz,
    "float8_e5m2fnuz": ml_dtypes.float8_e5m2fnuz, "float8_e8m0fnu": getattr(ml_dtypes, "float8_e8m0fnu", None),
    "float4_e2m1fn": getattr(ml_dtypes, "float4_e2m1fn", None),
}
for name, dt in odd.items():
    if dt is None:
        skipped[f"dtype_{name}"] = "this JAX has no such dtype"
        continue

    def case(path, dt=dt):
        ok = bits(np.float32, (3, 4))
        if np.dtype(dt).itemsize == 1 and np.dtype(dt).kind not in "c":
            v = jnp.asarray(rng.integers(0, 4, size=(4, 6)).astype(np.float32)).astype(dt)
        else:
            v = jnp.asarray(rng.standard_normal((4, 6))).astype(dt)
        standard(path, {"ok": ok, "odd": v})
        return {"ok": ok}, [{"path": ["odd"], "what": str(np.dtype(dt))}]
    attempt(f"dtype_{name}", case)


def values(path):
    # Python values and empty containers beside arrays: str, int, float, bool, None, {}, [].
    t = {"a": bits(np.int32, (5,)), "text": "hello", "n": 7, "x": 0.25, "flag": True, "none": None,
         "empty_dict": {}, "empty_list": [], "nested": {"b": bits(np.float64, (2, 2)), "m": 3}}
    ocp.PyTreeCheckpointer().save(path, t)  # (StandardCheckpointer refuses str)
    return {"a": t["a"], "nested": {"b": t["nested"]["b"]}}, [
        {"path": ["text"], "what": "str 'hello'"}, {"path": ["n"], "what": "int 7"}, {"path": ["x"], "what": "float 0.25"},
        {"path": ["flag"], "what": "bool True"}, {"path": ["nested", "m"], "what": "int 3"},
        {"path": ["none"], "what": "None"}, {"path": ["empty_dict"], "what": "{}"}, {"path": ["empty_list"], "what": "[]"}]


def prng(path):
    t = {"w": bits(np.float32, (4,)), "key": jax.random.key(42), "raw_key": jax.random.PRNGKey(7)}
    standard(path, t)
    return {"w": t["w"], "raw_key": np.asarray(t["raw_key"])}, [{"path": ["key"], "what": "typed PRNG key"}]


def many_leaves(path):
    # 3,000 arrays: the B+tree of the OCDBT database has more than one level.
    t = {"params": {f"layer_{i:04d}": {"w": bits(np.float32, (8,)), "b": bits(np.int16, (3,))} for i in range(1500)}}
    standard(path, t)
    return t, []


def many_files(path):
    # Data files of at most 4 KiB: the values spread over many files.
    t = {f"p{i}": bits(np.float32, (64, 16)) for i in range(12)}
    h = ocp.PyTreeCheckpointHandler(use_ocdbt=True, use_zarr3=True)
    c = ocp.Checkpointer(h)
    c.save(path, args=ocp.args.PyTreeSave(t, ocdbt_target_data_file_size=4096))
    return t, []


def cast_on_save(path):
    t = {"w": rng.standard_normal((16, 8)).astype(np.float32), "i": bits(np.int64, (6,))}
    save_args = {"w": ocp.SaveArgs(dtype=np.dtype(ml_dtypes.bfloat16)), "i": ocp.SaveArgs(dtype=np.dtype(np.int32))}
    h = ocp.PyTreeCheckpointHandler(use_ocdbt=True, use_zarr3=True)
    ocp.Checkpointer(h).save(path, args=ocp.args.PyTreeSave(t, save_args=save_args))
    return {"w": t["w"].astype(ml_dtypes.bfloat16), "i": t["i"].astype(np.int32)}, []


def composite(path):
    t = {"w": bits(np.float32, (5, 3))}
    m = ocp.CheckpointManager(path)
    m.save(1, args=ocp.args.Composite(state=ocp.args.StandardSave(t), extra=ocp.args.JsonSave({"lr": 0.1, "name": "run"})))
    m.wait_until_finished()
    m.close()
    return t, []


def v1_custom(path):
    try:
        from orbax.checkpoint import v1 as ocp1
    except ImportError:
        from orbax.checkpoint.experimental import v1 as ocp1
    t = {"w": bits(np.float32, (6,)), "s": bits(np.uint8, (2, 3))}
    ocp1.save_pytree(path, t, custom_metadata={"run": 7, "tags": ["a", "b"]})
    return t, []


for name, fn in [("values", values), ("prng", prng), ("many_leaves", many_leaves), ("many_files", many_files),
                 ("cast_on_save", cast_on_save), ("composite", composite), ("v1_custom", v1_custom)]:
    attempt(name, fn)

versions = {"orbax": __import__("importlib.metadata").metadata.version("orbax-checkpoint"), "jax": jax.__version__,
            "ml_dtypes": ml_dtypes.__version__, "written": written, "skipped": skipped}
json.dump(versions, open(os.path.join(out, "versions.json"), "w"), indent=1)
print(json.dumps(versions, indent=1))
