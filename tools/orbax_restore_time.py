#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Times Orbax itself restoring checkpoints, for docs/benchmarks.md's comparison with cairn.

    cairn-bench-orbax --export --keep --dir DIR ...   # leaves DIR/export-large-raw, ...
    python3 tools/orbax_restore_time.py DIR/export-large-raw DIR/export-small-raw ...

Each checkpoint (written by cairn::save_orbax in Orbax v1's layout) is restored without a
target with orbax.checkpoint.v1's load_pytree, on JAX's CPU backend (the bench loads into host
memory too), after one untimed restore so that the files are in the page cache (as the bench's
--warm figures). Prints the median of --repeat restores (3) and every sample; every leaf is
made ready (block_until_ready) before the clock stops.
"""
import os
import statistics
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax  # noqa: E402
import orbax.checkpoint as ocp  # noqa: E402

try:
    from orbax.checkpoint import v1 as ocp1
except ImportError:
    from orbax.checkpoint.experimental import v1 as ocp1

args = sys.argv[1:]
repeat = 3
if "--repeat" in args:
    i = args.index("--repeat")
    repeat = int(args[i + 1])
    del args[i:i + 2]


def restore(path):
    t0 = time.perf_counter()
    tree = ocp1.load_pytree(path)
    leaves = jax.tree_util.tree_leaves(tree)
    for x in leaves:
        if hasattr(x, "block_until_ready"):
            x.block_until_ready()
    return time.perf_counter() - t0, len(leaves)


print(f"orbax-checkpoint {__import__('importlib.metadata').metadata.version('orbax-checkpoint')}, jax {jax.__version__}, "
      f"{os.cpu_count()} CPUs", flush=True)
for path in args:
    restore(path)  # warm: files in the page cache, Orbax's and JAX's first-use costs paid
    times = []
    for _ in range(repeat):
        t, n = restore(path)
        times.append(t)
    print(f"{os.path.basename(path)}: {n} leaves, Orbax load_pytree median {statistics.median(times) * 1e3:.1f} ms "
          f"(runs: {', '.join(f'{t * 1e3:.1f}' for t in times)})", flush=True)
