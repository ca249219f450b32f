#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks cairn's safetensors files against Hugging Face's own `safetensors` library (with
PyTorch), where it is installed; tests/safetensors_ref.py checks the same files by the
specification alone, in every test run.

    safetensors_library_check.py check DIR   # DIR: the exports unit-safetensors leaves
                                             # (build/tests/safetensors-export)
    safetensors_library_check.py write DIR   # files for cairn to read (unit-safetensors,
                                             # CAIRN_SAFETENSORS_LIBRARY=DIR)

`check` opens every export under DIR (a directory with expected.json and expected.bin, as
unit-safetensors writes them) with `safetensors.safe_open(..., framework="pt")`, through a
sharded set's index where there is one, and compares each tensor's bytes with expected.bin;
exits 1 if any differs or cannot be read.

`write` writes with `safetensors.torch`: `all.safetensors` (a tensor of every dtype cairn has,
0-d and empty ones, `__metadata__`), `tied.safetensors` (`save_model` of a module whose two
layers share one weight: the library keeps one name), `sharded/` (a set split by
`transformers`' own sharding helper where it is installed, else by hand with the library's
index layout), and `unknown-<DTYPE>.safetensors`, one per dtype this library writes that cairn
does not have (each must be refused, naming the file and the tensor). Beside them, as
tests/safetensors_ref.py writes them: expected.json (name -> dtype, shape, offset, nbytes) and
expected.bin (the bytes in C order). versions.json says what wrote them.
"""
import importlib.metadata
import json
import os
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file, save_model

CAIRN_DTYPES = {  # torch dtype -> the safetensors name cairn reads
    torch.bool: "BOOL", torch.uint8: "U8", torch.int8: "I8", torch.int16: "I16", torch.int32: "I32",
    torch.int64: "I64", torch.float16: "F16", torch.bfloat16: "BF16", torch.float32: "F32",
    torch.float64: "F64", torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2",
}
for name, code in (("uint16", "U16"), ("uint32", "U32"), ("uint64", "U64")):
    if hasattr(torch, name):
        CAIRN_DTYPES[getattr(torch, name)] = code
OTHER_DTYPES = {}  # what this library writes that cairn does not read
for name, code in (("float8_e8m0fnu", "F8_E8M0"), ("complex64", "C64"), ("float4_e2m1fn_x2", "F4")):
    if hasattr(torch, name):
        OTHER_DTYPES[getattr(torch, name)] = code


def raw(t):
    """A tensor's bytes in C order."""
    t = t.contiguous()
    if t.dim() == 0:
        t = t.reshape(1)
    return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""


def random_tensor(dtype, shape, g):
    n = 1
    for s in shape:
        n *= s
    size = torch.empty((), dtype=dtype).element_size()
    bits = torch.randint(0, 256, (n * size,), dtype=torch.uint8, generator=g)
    if dtype == torch.bool:
        bits &= 1
    return bits.view(dtype).reshape(shape)


def write_expected(out, named):
    expected, offset = {}, 0
    with open(os.path.join(out, "expected.bin"), "wb") as f:
        for name, t in named.items():
            data = raw(t)
            f.write(data)
            code = CAIRN_DTYPES.get(t.dtype) or OTHER_DTYPES[t.dtype]
            expected[name] = {"dtype": code, "shape": list(t.shape), "offset": offset, "nbytes": len(data)}
            offset += len(data)
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f)


def write(out):
    g = torch.Generator().manual_seed(20261128)
    written = []
    os.makedirs(out, exist_ok=True)

    d = os.path.join(out, "all")
    os.makedirs(d, exist_ok=True)
    named = {f"dtypes.{code}": random_tensor(dt, (3, 5), g) for dt, code in CAIRN_DTYPES.items()}
    named["model.layers.0.weight"] = torch.randn(64, 32, generator=g)
    named["scalar"] = torch.tensor(7, dtype=torch.int64)
    named["empty"] = torch.zeros(0, 4, dtype=torch.float32)
    save_file(named, os.path.join(d, "all.safetensors"), metadata={"format": "pt", "run": "7"})
    write_expected(d, named)
    written.append("all")

    # save_model drops all but one name of tensors that share memory (tied weights).
    d = os.path.join(out, "tied")
    os.makedirs(d, exist_ok=True)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 16))
    model[1].weight = model[0].weight
    save_model(model, os.path.join(d, "tied.safetensors"))
    kept = {}
    with safe_open(os.path.join(d, "tied.safetensors"), framework="pt") as f:
        for k in f.keys():
            kept[k] = f.get_tensor(k)
    write_expected(d, kept)
    written.append("tied")

    # A sharded set as Hugging Face writes one: model-0000i-of-0000n.safetensors and an index.
    d = os.path.join(out, "sharded")
    os.makedirs(d, exist_ok=True)
    named = {f"layers.{i}.weight": torch.randn(32, 32, generator=g).to(torch.bfloat16) for i in range(6)}
    named["embed.weight"] = torch.randn(100, 32, generator=g)
    shards = [dict(list(named.items())[i::3]) for i in range(3)]
    weight_map, total = {}, 0
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, os.path.join(d, fname), metadata={"format": "pt"})
        for k, t in shard.items():
            weight_map[k] = fname
            total += t.numel() * t.element_size()
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    write_expected(d, named)
    written.append("sharded")

    for dt, code in OTHER_DTYPES.items():
        d = os.path.join(out, f"unknown-{code}")
        os.makedirs(d, exist_ok=True)
        if code == "F4":
            t = random_tensor(torch.uint8, (4, 4), g).view(dt)
        else:
            t = random_tensor(torch.uint8 if dt.itemsize == 1 else torch.float32, (4, 4), g)
            t = t.view(dt) if dt.itemsize == 1 else t.to(dt)
        try:
            save_file({"ok": torch.ones(2), "odd.one": t}, os.path.join(d, "model.safetensors"))
            written.append(f"unknown-{code}")
        except Exception as ex:  # noqa: BLE001  (this library version may not write it)
            print(f"unknown-{code}: not written: {type(ex).__name__}: {ex}")
            os.rmdir(d)

    versions = {"safetensors": importlib.metadata.version("safetensors"), "torch": torch.__version__,
                "written": written, "unknown": sorted(OTHER_DTYPES.values())}
    with open(os.path.join(out, "versions.json"), "w") as f:
        json.dump(versions, f, indent=1)
    print(json.dumps(versions))


def check(root):
    checked, failed = 0, False
    for dirpath, _, files in sorted(os.walk(root)):
        if "expected.json" not in files:
            continue
        expected = json.load(open(os.path.join(dirpath, "expected.json")))
        blob = open(os.path.join(dirpath, "expected.bin"), "rb").read()
        index = os.path.join(dirpath, "model.safetensors.index.json")
        if os.path.exists(index):
            where = {k: os.path.join(dirpath, v) for k, v in json.load(open(index))["weight_map"].items()}
        else:
            (only,) = [f for f in files if f.endswith(".safetensors")]
            with safe_open(os.path.join(dirpath, only), framework="pt") as f:
                where = {k: os.path.join(dirpath, only) for k in f.keys()}
        problems = []
        if set(where) != set(expected):
            problems.append(f"names {sorted(where)} != {sorted(expected)}")
        for name in sorted(set(where) & set(expected)):
            try:
                with safe_open(where[name], framework="pt") as f:
                    t = f.get_tensor(name)
                e = expected[name]
                want = blob[e["offset"]:e["offset"] + e["nbytes"]]
                if raw(t) != want:
                    problems.append(f"{name}: bytes differ ({t.dtype}, {list(t.shape)})")
                checked += 1
            except Exception as ex:  # noqa: BLE001
                problems.append(f"{name}: {type(ex).__name__}: {ex}")
        status = "ok" if not problems else "FAILED: " + "; ".join(problems)
        failed = failed or bool(problems)
        print(f"{os.path.relpath(dirpath, root)}: {len(expected)} tensors: {status}")
    print(f"safetensors {importlib.metadata.version('safetensors')}, torch {torch.__version__}: "
          f"{checked} tensors read as cairn wrote them" + (" (with failures)" if failed else ""))
    sys.exit(1 if failed or not checked else 0)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("write", "check"):
        sys.exit(__doc__)
    (write if sys.argv[1] == "write" else check)(sys.argv[2])
