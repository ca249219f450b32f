#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Reads cairn checkpoints by docs/format.md alone, independently of cairn, as another program
would: the commit marker and the sizes and CRC32Cs of the files it lists, `_METADATA` with
Python's json, an item's leaves as records or as a leaf table (format 3), and each leaf's
bytes from its data file, checked against its CRC32C.

    format_ref.py check DIR

`check` reads every checkpoint cairn's test left under DIR (DIR/<name>/checkpoint, beside
DIR/<name>/expected.json and expected.bin: each leaf's key, dtype, shape and offset in
expected.bin, and the format version the checkpoint must have) and fails unless each leaf of
item "state" holds exactly the expected bytes and nothing else is there.
"""
import json
import os
import sys

import numpy as np

DTYPES = {"bool": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint8": 1, "uint16": 2, "uint32": 4,
          "uint64": 8, "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "float8_e4m3fn": 1,
          "float8_e5m2": 1, "string": 1}


def crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


CRC_TABLE = crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def fail(why):
    sys.exit("format_ref.py: " + why)


def expand_runs(runs, n, column):
    out = []
    for value, count in runs:
        if count < 1:
            fail(f"a run of '{column}' has count {count}")
        out.extend([value] * count)
    if len(out) != n:
        fail(f"the runs of '{column}' cover {len(out)} leaves, not {n}")
    return out


def table_leaves(table, data_files):
    """A leaf table's columns as the records they stand for (docs/format.md, "Leaf tables")."""
    keys, before = [], b""
    pairs = table["keys"]
    if len(pairs) % 2:
        fail("the keys of a leaf table are not [shared, suffix] pairs")
    for shared, suffix in zip(pairs[0::2], pairs[1::2]):
        if shared > len(before):
            fail("a key shares more than the key before it has")
        key = before[:shared] + suffix.encode("utf-8", "surrogateescape")
        keys.append(key)
        before = key
    n = len(keys)
    kinds = expand_runs(table["key_kinds"], n, "key_kinds")
    dtypes = expand_runs(table["dtype"], n, "dtype")
    ranks = expand_runs(table["rank"], n, "rank")
    files = expand_runs(table["file"], n, "file")
    dims, offsets, crcs = table["shape"], table["offset"], table["crc32c"]
    if sum(ranks) != len(dims) or len(offsets) != n or len(crcs) != 8 * n:
        fail("a leaf table's columns do not agree with its keys")
    leaves, at, end, file_before = [], 0, 0, None
    for i in range(n):
        shape = dims[at:at + ranks[i]]
        at += ranks[i]
        nbytes = int(np.prod(shape, dtype=np.int64)) * DTYPES[dtypes[i]]
        offset = offsets[i] if i == 0 or files[i] != file_before else end + offsets[i]
        if offset < 0:
            fail("a leaf table's offset is negative")
        end, file_before = offset + nbytes, files[i]
        leaves.append({"key": keys[i].decode("utf-8", "surrogateescape"), "key_kinds": kinds[i], "dtype": dtypes[i],
                       "shape": shape, "chunks": [{"file": data_files[files[i]], "offset": offset, "nbytes": nbytes,
                                                   "crc32c": int(crcs[8 * i:8 * i + 8], 16)}]})
    return leaves


def record_leaves(records, data_files):
    """A leaf record's short form with its defaults filled in (docs/format.md, "_METADATA")."""
    leaves = []
    for r in records:
        chunks = []
        for c in r["chunks"]:
            shape = c.get("shape", r["shape"])
            nbytes = c.get("nbytes", int(np.prod(shape, dtype=np.int64)) * DTYPES[r["dtype"]])
            f = c["file"]
            chunks.append({"file": data_files[f] if isinstance(f, int) else f, "offset": c["offset"],
                           "nbytes": nbytes, "crc32c": c["crc32c"], "start": c.get("start", [0] * len(r["shape"])),
                           "shape": shape})
        leaves.append({"key": r["key"], "key_kinds": r["key_kinds"], "dtype": r["dtype"], "shape": r["shape"],
                       "order": r.get("order", "C"), "chunks": chunks})
    return leaves


def read_checkpoint(path):
    with open(os.path.join(path, "_CHECKPOINT"), "rb") as f:
        marker = json.load(f)
    if marker.get("format") != "cairn" or marker.get("format_version") not in (1, 2, 3):
        fail(f"{path}: not a cairn checkpoint this script reads")
    for name, digest in marker["files"].items():
        with open(os.path.join(path, name), "rb") as f:
            data = f.read()
        if len(data) != digest["bytes"] or crc32c(data) != digest["crc32c"]:
            fail(f"{path}/{name}: not the size and CRC32C its marker says")
    with open(os.path.join(path, "_METADATA"), "rb") as f:
        meta = json.load(f)
    if meta["format_version"] != marker["format_version"]:
        fail(f"{path}: _METADATA's format version {meta['format_version']} is not its marker's")
    items = {}
    for item in meta["items"]:
        if ("leaves" in item) == ("leaf_table" in item):
            fail(f"{path}: item '{item['name']}' has both or neither of 'leaves' and 'leaf_table'")
        if "leaf_table" in item:
            items[item["name"]] = table_leaves(item["leaf_table"], meta["data_files"])
        else:
            items[item["name"]] = record_leaves(item["leaves"], meta["data_files"])
        if "leaf_count" in item and item["leaf_count"] != len(items[item["name"]]):
            fail(f"{path}: item '{item['name']}' has leaf_count {item['leaf_count']}")
    return marker["format_version"], meta, items


def check(root):
    names = sorted(os.listdir(root))
    if not names:
        fail(f"nothing under {root}")
    for name in names:
        here = os.path.join(root, name)
        with open(os.path.join(here, "expected.json")) as f:
            expected = json.load(f)
        with open(os.path.join(here, "expected.bin"), "rb") as f:
            expected_bytes = f.read()
        ckpt = os.path.join(here, "checkpoint")
        version, meta, items = read_checkpoint(ckpt)
        if version != expected["format_version"]:
            fail(f"{ckpt}: format {version}, expected {expected['format_version']}")
        leaves = {leaf["key"]: leaf for leaf in items["state"]}
        if len(leaves) != len(expected["leaves"]):
            fail(f"{ckpt}: {len(leaves)} leaves, expected {len(expected['leaves'])}")
        for want in expected["leaves"]:
            leaf = leaves.get(want["key"])
            if leaf is None:
                fail(f"{ckpt}: no leaf '{want['key']}'")
            if leaf["dtype"] != want["dtype"] or list(leaf["shape"]) != want["shape"]:
                fail(f"{ckpt}: leaf '{want['key']}' is {leaf['dtype']}{leaf['shape']}")
            if len(leaf["chunks"]) != 1:
                fail(f"{ckpt}: leaf '{want['key']}' is not one chunk")
            c = leaf["chunks"][0]
            with open(os.path.join(ckpt, c["file"]), "rb") as f:
                f.seek(c["offset"])
                data = f.read(c["nbytes"])
            if crc32c(data) != c["crc32c"]:
                fail(f"{ckpt}: leaf '{want['key']}' fails its CRC32C")
            if data != expected_bytes[want["offset"]:want["offset"] + want["nbytes"]]:
                fail(f"{ckpt}: leaf '{want['key']}' holds other bytes")
        print(f"format_ref.py: {name}: format {version}, {len(leaves)} leaves, every byte as expected")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "check":
        sys.exit("usage: format_ref.py check DIR")
    check(sys.argv[2])
