#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that the Orbax exports cairn writes to a bucket are read from that bucket by
TensorStore (the library Orbax reads every array with), through its own `s3` driver.

Orbax 0.12 opens paths through etils' epath, which has no `s3://` backend without s3fs, so
Orbax itself cannot be pointed at an S3 endpoint (it cannot write `s3://` at all); what it would
do is read `_METADATA` and the other JSON files, then hand TensorStore a kvstore spec for the
arrays. This script does the TensorStore half against an S3 server; `orbax_restore_check.py`
on a copy of the same objects does the Orbax half.

  orbax_bucket_check.py snapshot ENDPOINT BUCKET PREFIX OUTDIR
      copies every object under BUCKET/PREFIX/ from an S3 server that does not check
      signatures (tests/s3/fake_s3.py) into OUTDIR, one file per object, key for path.
  orbax_bucket_check.py check DIR
      starts tests/s3/fake_s3.py, puts each export named in DIR/exports.json into a bucket
      (one object per file, as it was written), opens every array leaf of
      DIR/expected/<name>/manifest.json with TensorStore over `s3` (OCDBT or not, zarr v3 or
      v2, as the export is) and compares dtype, shape and bytes. Writes DIR/bucket.json;
      exits 1 if any leaf differs or cannot be read.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from xml.etree import ElementTree

def request(method, url, data=None):
    req = urllib.request.Request(url, data=data, method=method)
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.read()


def list_keys(endpoint, bucket, prefix):
    keys, token = [], None
    while True:
        q = {"list-type": "2", "prefix": prefix}
        if token:
            q["continuation-token"] = token
        body = request("GET", f"{endpoint}/{bucket}?" + urllib.parse.urlencode(q))
        root = ElementTree.fromstring(body)
        for e in root.iter():  # with S3's namespace or without (tests/s3/fake_s3.py)
            e.tag = e.tag.split("}")[-1]
        keys += [c.find("Key").text for c in root.iter("Contents")]
        truncated = root.find("IsTruncated")
        if truncated is None or truncated.text != "true":
            return keys
        token = root.find("NextContinuationToken").text


def snapshot(endpoint, bucket, prefix, out):
    prefix = prefix.rstrip("/") + "/"
    keys = list_keys(endpoint, bucket, prefix)
    for key in keys:
        path = os.path.join(out, key[len(prefix):])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(request("GET", f"{endpoint}/{bucket}/{urllib.parse.quote(key)}"))
    print(f"{bucket}/{prefix}: {len(keys)} objects copied to {out}")


def s3_specs(bucket, path, endpoint):
    base = {"driver": "s3", "bucket": bucket, "path": path, "endpoint": endpoint,
            "aws_region": "us-fake-1"}
    # The credentials member changed between TensorStore versions: try the spellings in turn.
    yield dict(base, aws_credentials={"type": "anonymous"})
    yield dict(base, aws_credentials={"type": "environment"})
    yield base


def check(root):
    import numpy as np
    import tensorstore as ts

    here = os.path.dirname(os.path.abspath(__file__))
    server_dir = tempfile.mkdtemp()
    server = subprocess.Popen([sys.executable, os.path.join(here, "..", "tests", "s3", "fake_s3.py"), server_dir])
    try:
        for _ in range(100):
            if os.path.exists(os.path.join(server_dir, "endpoint")):
                break
            time.sleep(0.1)
        endpoint = open(os.path.join(server_dir, "endpoint")).read().strip()
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "FAKE")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "FAKE")
        os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
        bucket = "orbax-exports"
        request("PUT", f"{endpoint}/{bucket}")
        names = json.load(open(os.path.join(root, "exports.json")))["written"]
        version = __import__("importlib.metadata").metadata.version("tensorstore")
        results, failed = {"tensorstore": version}, False
        for name in names:
            top = os.path.join(root, name)
            count = 0
            for d, _, files in os.walk(top):
                for f in files:
                    rel = os.path.relpath(os.path.join(d, f), top).replace(os.sep, "/")
                    request("PUT", f"{endpoint}/{bucket}/{name}/{urllib.parse.quote(rel)}",
                            open(os.path.join(d, f), "rb").read())
                    count += 1
            state = os.path.isdir(os.path.join(top, "state"))
            prefix = f"{name}/state/" if state else f"{name}/"
            tree_dir = os.path.join(top, "state") if state else top
            ocdbt = os.path.exists(os.path.join(tree_dir, "manifest.ocdbt"))
            exp_dir = os.path.join(root, "expected", name)
            manifest = json.load(open(os.path.join(exp_dir, "manifest.json")))
            problems, checked, used = [], 0, None
            for leaf in manifest:
                if "string" in leaf:
                    continue  # strings live in _strings.json, a plain object
                param = ".".join(str(k) for k in leaf["path"])
                if ocdbt:
                    zarr3 = True  # found below by trying
                else:
                    zarr3 = os.path.exists(os.path.join(tree_dir, param, "zarr.json"))
                arr, errors = None, []
                for spec in s3_specs(bucket, prefix, endpoint):
                    kv = {"driver": "ocdbt", "base": spec, "path": param + "/"} if ocdbt else \
                        dict(spec, path=prefix + param + "/")
                    for driver in (["zarr3", "zarr"] if ocdbt else ["zarr3" if zarr3 else "zarr"]):
                        try:
                            arr = ts.open({"driver": driver, "kvstore": kv}, open=True).result().read().result()
                            used = (driver, spec.get("aws_credentials"))
                            break
                        except Exception as e:  # noqa: BLE001
                            errors.append(f"{driver} {spec.get('aws_credentials')}: {type(e).__name__}: {e}")
                    if arr is not None:
                        break
                if arr is None:
                    problems.append(f"{param}: not read: " + " | ".join(errors)[:600])
                    continue
                want = open(os.path.join(exp_dir, leaf["file"]), "rb").read()
                if str(arr.dtype) != leaf["dtype"]:
                    problems.append(f"{param}: dtype {arr.dtype} != {leaf['dtype']}")
                elif list(arr.shape) != leaf["shape"]:
                    problems.append(f"{param}: shape {list(arr.shape)} != {leaf['shape']}")
                elif np.ascontiguousarray(arr).tobytes() != want:
                    problems.append(f"{param}: values differ")
                checked += 1
            failed = failed or bool(problems) or checked == 0
            results[name] = {"objects": count, "ocdbt": ocdbt, "checked": checked,
                             "problems": problems, "driver": str(used)}
            print(f"{name}: {count} objects in the bucket, {'OCDBT' if ocdbt else 'directories'}; "
                  f"{checked} arrays read by TensorStore over s3 ({used}), {len(problems)} problems", flush=True)
            for p in problems[:5]:
                print("   ", p)
        json.dump(results, open(os.path.join(root, "bucket.json"), "w"), indent=1)
        print(json.dumps({"tensorstore": version}))
        return 1 if failed else 0
    finally:
        server.terminate()


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "snapshot":
        snapshot(*sys.argv[2:])
    elif len(sys.argv) == 3 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2]))
    else:
        sys.exit(__doc__)
