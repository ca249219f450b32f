#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes Orbax checkpoints from two JAX processes, as Orbax does on several hosts.

Run after tools/orbax_write.py, into the same directory, where orbax-checkpoint and JAX are
installed (no network: the two processes meet on localhost, 4 CPU devices each, one 2x4 mesh
over both):

    python3 tools/orbax_write_processes.py OUT_DIR

Each process writes its own blocks into its own OCDBT database (ocdbt.process_0/ and
ocdbt.process_1/), and process 0 the root database that refers into both: the layout cairn's
reader must graft together. OUT_DIR/processes_v0 (StandardCheckpointer) and processes_v1
(v1's save_pytree) are added to OUT_DIR/versions.json's "written", with manifests in
OUT_DIR/expected/, so unit-orbax's "checkpoints written by Orbax itself" reads them; a way this
Orbax or JAX cannot do is recorded in "skipped".
"""
import json
import os
import socket
import subprocess
import sys
import traceback

out = os.path.abspath(sys.argv[1])
NAMES = ("processes_v0", "processes_v1")


def values():
    """The tree's global values, the same in both processes (a fixed seed)."""
    import ml_dtypes
    import numpy as np
    rng = np.random.default_rng(20261127)
    return {
        "params": {
            "kernel": rng.standard_normal((64, 96)).astype(np.float32),
            "embed": rng.integers(0, 1 << 16, size=(40, 24), dtype=np.uint16).view(ml_dtypes.bfloat16),
            "rows": rng.standard_normal((16, 9)),
            "replicated": rng.integers(-1000, 1000, size=(7, 9), dtype=np.int32),
        },
        "step": np.asarray(77, dtype=np.int64),
    }


def child(process, port):
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    import jax
    try:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    except Exception:  # older or newer JAX: its default
        pass
    jax.config.update("jax_enable_x64", True)
    jax.distributed.initialize(coordinator_address=f"localhost:{port}", num_processes=2, process_id=process)
    import numpy as np
    import orbax.checkpoint as ocp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    devices = np.array(sorted(jax.devices(), key=lambda d: (d.process_index, d.id))).reshape(2, 4)
    mesh = Mesh(devices, ("data", "model"))
    v = values()
    specs = {"kernel": P("data", "model"), "embed": P(None, "model"), "rows": P("data"), "replicated": P()}

    def global_array(a, spec):
        return jax.make_array_from_callback(a.shape, NamedSharding(mesh, spec), lambda idx: a[idx])

    t = {"params": {k: global_array(a, specs[k]) for k, a in v["params"].items()}, "step": v["step"]}
    done = {}
    for name in NAMES:
        path = os.path.join(out, name)
        try:
            if name == "processes_v0":
                c = ocp.StandardCheckpointer()
                c.save(path, t)
                c.wait_until_finished()
            else:
                try:
                    from orbax.checkpoint import v1 as ocp1
                except ImportError:
                    from orbax.checkpoint.experimental import v1 as ocp1
                ocp1.save_pytree(path, t)
            done[name] = "ok"
        except Exception as e:
            done[name] = f"{type(e).__name__}: {e}"
            traceback.print_exc()
    if process == 0:
        with open(os.path.join(out, "processes.json"), "w") as fh:
            json.dump(done, fh)
    jax.distributed.shutdown()


if len(sys.argv) > 3 and sys.argv[2] == "--process":
    child(int(sys.argv[3]), int(sys.argv[4]))
    sys.exit(0)

os.makedirs(out, exist_ok=True)
with socket.socket() as s:
    s.bind(("localhost", 0))
    port = s.getsockname()[1]
procs = [subprocess.Popen([sys.executable, __file__, out, "--process", str(i), str(port)]) for i in range(2)]
codes = [p.wait(timeout=300) for p in procs]
try:
    done = json.load(open(os.path.join(out, "processes.json")))
except OSError:
    done = {n: f"the processes exited {codes}" for n in NAMES}

import numpy as np  # noqa: E402

listing = os.path.join(out, "versions.json")
versions = json.load(open(listing)) if os.path.exists(listing) else {"orbax": "?", "jax": "?", "written": [], "skipped": {}}
for name in NAMES:
    if done.get(name) != "ok":
        versions["skipped"][name] = done.get(name, "not written")
        continue
    d = os.path.join(out, "expected", name)
    os.makedirs(d, exist_ok=True)
    v = values()
    leaves = [(["params", k], a) for k, a in v["params"].items()] + [(["step"], v["step"])]
    manifest = []
    for i, (keys, a) in enumerate(leaves):
        with open(os.path.join(d, f"{i}.bin"), "wb") as fh:
            fh.write(np.ascontiguousarray(a).tobytes())
        manifest.append({"path": keys, "dtype": str(a.dtype), "shape": list(a.shape), "file": f"{i}.bin"})
    with open(os.path.join(d, "manifest.json"), "w") as fh:
        json.dump(manifest, fh, indent=1)
    if name not in versions["written"]:
        versions["written"].append(name)
with open(listing, "w") as fh:
    json.dump(versions, fh, indent=1)
print(json.dumps({n: done.get(n) for n in NAMES}, indent=1))
sys.exit(0 if all(done.get(n) == "ok" for n in NAMES) else 1)
