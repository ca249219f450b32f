#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# Writes the seed corpus of the `orbax` fuzz target (tests/fuzz/fuzz_orbax.cpp) into
# tests/fuzz/corpus/orbax/: a manifest and a B+tree leaf node encoded here as TensorStore's
# OCDBT format specifies them, zarr metadata, a zarr v3 shard, a zstd frame (the zstd tool) and
# a msgpack aggregate.
#   make_orbax_corpus.py DIR
import os
import struct
import subprocess
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def varint(v):
    out = b""
    while v >= 0x80:
        out += bytes([(v & 0x7F) | 0x80])
        v >>= 7
    return out + bytes([v])


def frame(magic, body):
    total = 4 + 8 + 2 + len(body) + 4
    out = struct.pack(">I", magic) + struct.pack("<Q", total) + b"\0\0" + body
    return out + struct.pack("<I", crc32c(out))


def zstd(data):
    return subprocess.run(["zstd", "-q", "-c", "--no-check"], input=data, check=True, capture_output=True).stdout


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    # A leaf node: keys "a", "ab", "b"; values inline "xyz", "", and 4 bytes at 0 of data file "d/v".
    leaf = bytes([0])                                            # height
    leaf += varint(1) + varint(0) + varint(3) + varint(0) + b"d/v"  # data file table: one file
    leaf += varint(3)                                            # entries
    leaf += varint(1) + varint(0)                                # key prefix lengths (entries 1, 2)
    leaf += varint(1) + varint(1) + varint(1)                    # key suffix lengths
    leaf += b"a" + b"b" + b"b"
    leaf += varint(3) + varint(0) + varint(4)                    # value lengths
    leaf += bytes([0, 0, 1])                                     # value kinds
    leaf += varint(0) + varint(0)                                # indirect: file id, offset
    leaf += b"xyz"
    node = frame(0x0CDB20DE, leaf)
    with open(os.path.join(out, "btree_leaf"), "wb") as f:
        f.write(bytes([1, 0]) + node)
    # A manifest whose root is that node at offset 0 of d/a.
    body = b"u" * 16 + b"\0" + varint(100) + varint(1 << 20) + b"\x04" + varint(0)
    body += varint(1) + varint(3) + varint(0) + b"d/a"
    body += varint(1) + varint(1) + b"\0" + varint(0) + varint(0) + varint(len(node)) + varint(0) * 3 + b"\0" * 8 + varint(0)
    with open(os.path.join(out, "manifest"), "wb") as f:
        f.write(bytes([0, 0]) + frame(0x0CDB3A2A, body))
    with open(os.path.join(out, "zarr_v2"), "wb") as f:
        f.write(b"\x02\x00" + b'{"chunks":[4,3],"compressor":{"id":"zstd","level":1},"dimension_separator":".",'
                b'"dtype":"<f4","fill_value":null,"filters":null,"order":"F","shape":[10,7],"zarr_format":2}')
    with open(os.path.join(out, "zarr_v3"), "wb") as f:
        f.write(b"\x02\x01" + b'{"zarr_format":3,"node_type":"array","shape":[10,7],"data_type":"bfloat16",'
                b'"chunk_grid":{"name":"regular","configuration":{"chunk_shape":[8,6]}},"chunk_key_encoding":'
                b'{"name":"default"},"fill_value":"NaN","codecs":[{"name":"transpose","configuration":{"order":[1,0]}},'
                b'{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":3}},'
                b'{"name":"crc32c"}]}')
    # A shard of two inner int32[4] chunks, the second missing.
    c0 = zstd(struct.pack("<4i", 1, 2, 3, 4))
    index = struct.pack("<QQ", 0, len(c0)) + struct.pack("<QQ", 2**64 - 1, 2**64 - 1)
    with open(os.path.join(out, "shard"), "wb") as f:
        f.write(b"\x03\x00" + c0 + index + struct.pack("<I", crc32c(index)))
    with open(os.path.join(out, "zstd"), "wb") as f:
        f.write(b"\x04\x10" + zstd(b"cairn reads Orbax " * 20))
    # The msgpack aggregate: {"a": flax ndarray int32[2], "b": 1.5, "c": {"d": "PLACEHOLDER://c.d"}}.
    nd = b"\x93" + b"\x91\x02" + b"\xa5int32" + b"\xc4\x08" + struct.pack("<2i", 7, -7)
    agg = b"\x83" + b"\xa1a" + b"\xc7" + bytes([len(nd), 1]) + nd + b"\xa1b" + b"\xcb" + struct.pack(">d", 1.5)
    agg += b"\xa1c" + b"\x81" + b"\xa1d" + b"\xb1PLACEHOLDER://c.d"
    with open(os.path.join(out, "msgpack"), "wb") as f:
        f.write(b"\x05\x00" + agg)
    # A pytree's _METADATA: a dict key, a sequence index, a scalar and a string leaf.
    with open(os.path.join(out, "tree_metadata"), "wb") as f:
        f.write(b"\x06\x00" + b'{"tree_metadata":{"(\'params\', \'w\')":{"key_metadata":[{"key":"params","key_type":2},'
                b'{"key":"w","key_type":2}],"value_metadata":{"value_type":"jax.Array","skip_deserialize":false}},'
                b'"(\'layers\', \'0\')":{"key_metadata":[{"key":"layers","key_type":2},{"key":"0","key_type":1}],'
                b'"value_metadata":{"value_type":"scalar"}},"(\'name\',)":{"key_metadata":[{"key":"name","key_type":2}],'
                b'"value_metadata":{"value_type":"string","skip_deserialize":false}}},"use_ocdbt":true,"use_zarr3":false}')


if __name__ == "__main__":
    main()
