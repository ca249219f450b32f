#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Restores cairn's Orbax exports with Orbax itself and compares every leaf with what cairn wrote.

    CAIRN_ORBAX_EXPORT_DIR=DIR build/tests/unit-orbax -tc='*saved as an Orbax*,ranks export*,*shown to Orbax*'
    python3 tools/orbax_restore_check.py DIR      # where orbax-checkpoint and JAX are installed

DIR/exports.json names the exports; DIR/expected/<name>/manifest.json lists each leaf's key
path, dtype, shape and bytes (or string). Each export is restored every way this Orbax offers
for its layout (v1: orbax.checkpoint.v1's load_pytree; v0: StandardCheckpointer and
PyTreeCheckpointer) without a target, as a user who has only the path would, on 8 CPU devices
so that the sharded leaf is restored with its mesh. Prints one line per restore and writes
DIR/restore.json; exits 1 if any leaf differs or any restore fails.
"""
import json
import os
import sys
import traceback

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"

import jax  # noqa: E402
import numpy as np  # noqa: E402
import orbax.checkpoint as ocp  # noqa: E402

jax.config.update("jax_enable_x64", True)
root = os.path.abspath(sys.argv[1])
names = json.load(open(os.path.join(root, "exports.json")))["written"]


def v1():
    try:
        from orbax.checkpoint import v1 as m
    except ImportError:
        from orbax.checkpoint.experimental import v1 as m
    return m


def ways(name):
    path = os.path.join(root, name)
    if os.path.isdir(os.path.join(path, "state")):  # Orbax v1's layout (also the ranks' exports)
        m = v1()
        yield "v1.load_pytree", lambda: m.load_pytree(path)
        yield "StandardCheckpointer(state/)", lambda: ocp.StandardCheckpointer().restore(os.path.join(path, "state"))
    else:
        yield "StandardCheckpointer", lambda: ocp.StandardCheckpointer().restore(path)
        yield "PyTreeCheckpointer", lambda: ocp.PyTreeCheckpointer().restore(path)


def compare(tree, manifest, exp_dir):
    problems, checked = [], 0
    for leaf in manifest:
        node = tree
        try:
            for k in leaf["path"]:
                node = node[k]
        except (KeyError, IndexError, TypeError) as e:
            problems.append(f"{leaf['path']}: not in the restored tree ({type(e).__name__}: {e})")
            continue
        if "string" in leaf:
            if node != leaf["string"]:
                problems.append(f"{leaf['path']}: {node!r} != {leaf['string']!r}")
            checked += 1
            continue
        a = np.asarray(node)
        want = open(os.path.join(exp_dir, leaf["file"]), "rb").read()
        if str(a.dtype) != leaf["dtype"]:
            problems.append(f"{leaf['path']}: dtype {a.dtype} != {leaf['dtype']}")
        elif list(a.shape) != leaf["shape"]:
            problems.append(f"{leaf['path']}: shape {list(a.shape)} != {leaf['shape']}")
        elif np.ascontiguousarray(a).tobytes() != want:
            problems.append(f"{leaf['path']}: values differ")
        checked += 1
    return checked, problems


results, failed = {}, False
for name in names:
    exp_dir = os.path.join(root, "expected", name)
    manifest = json.load(open(os.path.join(exp_dir, "manifest.json")))
    for way, restore in ways(name):
        key = f"{name} via {way}"
        try:
            tree = restore()
            checked, problems = compare(tree, manifest, exp_dir)
            kernel = tree.get("kernel") if isinstance(tree, dict) else None
            sharding = str(getattr(kernel, "sharding", None))
            results[key] = {"checked": checked, "problems": problems, "kernel_sharding": sharding}
            failed = failed or bool(problems)
            print(f"{key}: {checked} leaves compared, {len(problems)} differ; kernel sharding {sharding}", flush=True)
            for p in problems[:10]:
                print("   ", p)
        except Exception as e:
            failed = True
            results[key] = {"error": f"{type(e).__name__}: {e}"}
            print(f"{key}: FAILED {type(e).__name__}: {e}", flush=True)
            traceback.print_exc()

results["versions"] = {"orbax": __import__("importlib.metadata").metadata.version("orbax-checkpoint"), "jax": jax.__version__}
json.dump(results, open(os.path.join(root, "restore.json"), "w"), indent=1)
print(json.dumps(results["versions"]))
sys.exit(1 if failed else 0)
