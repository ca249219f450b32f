#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Reference safetensors files for cairn's tests, written with numpy by following the
specification (https://github.com/huggingface/safetensors, "Format"), independently of cairn:
an 8-byte little-endian header length, a JSON header, then the tensors' bytes in C order.

    safetensors_ref.py write DIR
    safetensors_ref.py check DIR

`write` writes into DIR:
  all.safetensors        one tensor of every dtype, nested names, a 0-d and an empty tensor,
                         a __metadata__ map, the header padded with spaces
  sharded/model-0000{1,2}-of-00002.safetensors and sharded/model.safetensors.index.json
  empty.safetensors      no tensors at all: the header is {}
  expected.bin, expected.json   every tensor's bytes, and its name, dtype, shape and offset in
                         expected.bin, for the test to compare with what cairn loads

`check` reads every export cairn's test left under DIR (a directory with a .safetensors file
or a sharded set's index, beside the expected.bin and expected.json the test wrote) by the
specification, and fails unless each file is valid and holds exactly the expected bytes.
"""
import json
import os
import struct
import sys

import numpy as np

rng = np.random.default_rng(20261122)


def tensors():
    t = {}
    t["b"] = ("BOOL", rng.integers(0, 2, size=(7,)).astype(np.bool_))
    for name, dtype, code in [("u8", np.uint8, "U8"), ("i8", np.int8, "I8"), ("i16", np.int16, "I16"),
                              ("u16", np.uint16, "U16"), ("i32", np.int32, "I32"), ("u32", np.uint32, "U32"),
                              ("i64", np.int64, "I64"), ("u64", np.uint64, "U64")]:
        info = np.iinfo(dtype)
        t[name] = (code, rng.integers(info.min, info.max, size=(2, 3), dtype=dtype, endpoint=True))
    t["f16"] = ("F16", rng.standard_normal((4,)).astype(np.float16))
    t["f32"] = ("F32", rng.standard_normal((3, 2)).astype(np.float32))
    t["f64"] = ("F64", rng.standard_normal((5,)))
    # numpy has no bfloat16 or float8: their bytes, as the dtype's bit patterns
    t["bf16"] = ("BF16", (rng.standard_normal((6,)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16))
    t["f8e4m3"] = ("F8_E4M3", rng.integers(0, 0x7f, size=(5,), dtype=np.uint8))
    t["f8e5m2"] = ("F8_E5M2", rng.integers(0, 0x7c, size=(5,), dtype=np.uint8))
    for i in range(2):
        t[f"model.layers.{i}.w"] = ("F32", rng.standard_normal((3, 4)).astype(np.float32))
    t["model.norm"] = ("BF16", (rng.standard_normal((4,)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16))
    t["scalar"] = ("F64", np.array(rng.standard_normal(), dtype=np.float64))
    t["empty"] = ("F32", np.zeros((0, 3), dtype=np.float32))
    return t


def write_file(path, named, metadata=None, pad=0):
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    offset = 0
    blobs = []
    for name, (code, array) in named.items():
        data = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": code, "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode() + b" " * pad
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def write(out):
    os.makedirs(os.path.join(out, "sharded"), exist_ok=True)
    t = tensors()
    write_file(os.path.join(out, "all.safetensors"), t, {"format": "pt", "note": "written by numpy"}, pad=5)
    names = list(t)
    half = len(names) // 2
    weight_map = {}
    for part, chunk in enumerate([names[:half], names[half:]]):
        fname = f"model-0000{part + 1}-of-00002.safetensors"
        write_file(os.path.join(out, "sharded", fname), {n: t[n] for n in chunk})
        weight_map.update({n: fname for n in chunk})
    with open(os.path.join(out, "sharded", "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(a.nbytes for _, a in t.values())}, "weight_map": weight_map}, f)
    write_file(os.path.join(out, "empty.safetensors"), {})
    expected = {}
    with open(os.path.join(out, "expected.bin"), "wb") as f:
        offset = 0
        for name, (code, array) in t.items():
            data = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
            f.write(data)
            expected[name] = {"dtype": code, "shape": list(array.shape), "offset": offset, "nbytes": len(data)}
            offset += len(data)
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f)


DTYPES = {"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4,
          "F64": 8, "I64": 8, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1}


def read_file(path):
    """The tensors of one file as {name: (dtype, shape, bytes)}, checked as the spec says."""
    with open(path, "rb") as f:
        blob = f.read()
    assert len(blob) >= 8, f"{path}: too short"
    (n,) = struct.unpack("<Q", blob[:8])
    assert n <= 100_000_000 and 8 + n <= len(blob), f"{path}: header length {n}"
    text = blob[8:8 + n]
    assert text[:1] == b"{", f"{path}: header does not begin with {{"
    assert (8 + n) % 8 == 0, f"{path}: the buffer does not start at a multiple of 8"
    header = json.loads(text.decode("utf-8"))
    buf = blob[8 + n:]
    meta = header.pop("__metadata__", {})
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()), f"{path}: __metadata__"
    ranges = []
    out = {}
    for name, t in header.items():
        assert set(t) == {"dtype", "shape", "data_offsets"}, f"{path}: {name}: members {sorted(t)}"
        begin, end = t["data_offsets"]
        count = int(np.prod(t["shape"], dtype=np.int64)) if t["shape"] else 1
        assert end - begin == count * DTYPES[t["dtype"]], f"{path}: {name}: {end - begin} bytes"
        ranges.append((begin, end))
        out[name] = (t["dtype"], t["shape"], buf[begin:end])
    at = 0
    for begin, end in sorted(ranges):
        assert begin == at, f"{path}: hole or overlap at {begin}"
        at = end
    assert at == len(buf), f"{path}: the tensors hold {at} bytes of {len(buf)}"
    return out


def check(root):
    checked = 0
    for dirpath, _, files in os.walk(root):
        if "expected.json" not in files:
            continue
        with open(os.path.join(dirpath, "expected.json")) as f:
            expected = json.load(f)
        with open(os.path.join(dirpath, "expected.bin"), "rb") as f:
            bin_ = f.read()
        index = [f for f in files if f.endswith(".index.json")]
        tensors = {}
        if index:
            with open(os.path.join(dirpath, index[0])) as f:
                weight_map = json.load(f)["weight_map"]
            for fname in sorted(set(weight_map.values())):
                part = read_file(os.path.join(dirpath, fname))
                assert {n for n, f in weight_map.items() if f == fname} == set(part), f"{fname}: weight_map"
                tensors.update(part)
        else:
            for fname in files:
                if fname.endswith(".safetensors"):
                    tensors.update(read_file(os.path.join(dirpath, fname)))
        assert set(tensors) == set(expected), f"{dirpath}: names {sorted(tensors)} != {sorted(expected)}"
        for name, e in expected.items():
            want = bin_[e["offset"]:e["offset"] + e["nbytes"]]
            assert tensors[name][2] == want, f"{dirpath}: {name}: bytes differ"
        print(f"safetensors_ref: {dirpath}: {len(tensors)} tensors as expected")
        checked += 1
    assert checked > 0, f"no exports under {root}"


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("write", "check"):
        sys.exit(__doc__)
    (write if sys.argv[1] == "write" else check)(sys.argv[2])
