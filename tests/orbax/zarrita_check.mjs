// SPDX-License-Identifier: Apache-2.0
// Reads the arrays of cairn's Orbax exports in the one-directory-per-parameter layout (zarr v3,
// `sharding_indexed`, optional zstd; v1's state/ or v0's top level) with zarrita, an independent zarr reader (npm; a test tool,
// never a dependency of cairn), and compares every byte with the manifest the export test
// wrote beside them (DIR/expected/<name>/manifest.json: key path, dtype, shape, raw C-order
// bytes). zarrita has no bfloat16 or float8 dtypes (nor float16 where Node has no Float16Array):
// those leaves are listed as skipped, by name.
// Strings are not zarr arrays in Orbax. Exits 1 on any difference or failure.
//
//   node tests/orbax/zarrita_check.mjs NODE_MODULES EXPORTS_DIR NAME...
//
// NODE_MODULES is where tools/zarrita.sh installed zarrita (ES modules do not search NODE_PATH:
// each package is imported from its own entry file there).
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [modules, root, ...names] = process.argv.slice(2);
async function load(pkg, sub = ".") {
  const dir = path.join(modules, pkg);
  const entry = JSON.parse(fs.readFileSync(path.join(dir, "package.json"), "utf8")).exports[sub].import;
  return import(pathToFileURL(path.join(dir, entry)).href);
}
const zarr = await load("zarrita");
const { default: FileSystemStore } = await load("@zarrita/storage", "./fs");
const unsupported = new Set(["bfloat16", "float8_e4m3fn", "float8_e5m2"]);
if (!globalThis.Float16Array) unsupported.add("float16");  // zarrita reads float16 into one (Node 20 has none)
let failed = 0;

// got.data in C order: as it is where got.stride is C-contiguous, else gathered element by
// element through the strides.
function cOrder(got) {
  const shape = Array.from(got.shape), stride = Array.from(got.stride ?? []);
  let expect = 1, contiguous = true;
  for (let d = shape.length - 1; d >= 0; --d) {
    if (shape[d] > 1 && stride[d] !== expect) contiguous = false;
    expect *= shape[d];
  }
  if (contiguous || !got.data.constructor || got.data._bytes) return got.data;
  const out = new got.data.constructor(expect);
  const idx = new Array(shape.length).fill(0);
  for (let i = 0; i < expect; ++i) {
    let at = 0;
    for (let d = 0; d < shape.length; ++d) at += idx[d] * stride[d];
    out[i] = got.data[at];
    for (let d = shape.length - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}
for (const name of names) {
  const manifest = JSON.parse(fs.readFileSync(path.join(root, "expected", name, "manifest.json"), "utf8"));
  // Orbax v1 keeps the pytree under state/; v0 at the checkpoint's top.
  const state = path.join(root, name, "state");
  const store = new FileSystemStore(fs.existsSync(state) ? state : path.join(root, name));
  let same = 0;
  const skipped = [];
  for (const leaf of manifest) {
    const key = leaf.path.join(".");
    if (!leaf.file) continue;  // a string leaf
    if (unsupported.has(leaf.dtype)) {
      skipped.push(`${key} (${leaf.dtype})`);
      continue;
    }
    if (leaf.shape.includes(0)) {  // zarrita cannot select from a zero-size array
      skipped.push(`${key} (zero-size)`);
      continue;
    }
    try {
      const arr = await zarr.open(zarr.root(store).resolve(key), { kind: "array" });
      // zarr.get returns a 0-d array's value as a plain number: its one chunk instead.
      const got = arr.shape.length === 0 ? await arr.getChunk([]) : await zarr.get(arr);
      const shape = Array.from(got.shape);
      if (JSON.stringify(shape) !== JSON.stringify(leaf.shape)) throw new Error(`shape ${shape}, expected ${leaf.shape}`);
      // A transposed chunk (a column-major array) comes back as a strided view: C order first.
      const data = cOrder(got);
      // Booleans come back as a BoolArray over bytes; numbers as typed arrays.
      const view = data.buffer !== undefined && !(data instanceof ArrayBuffer) && data.BYTES_PER_ELEMENT !== undefined
        ? new Uint8Array(data.buffer, data.byteOffset, data.byteLength)
        : new Uint8Array(data._bytes ? data._bytes.buffer : data.buffer);
      const want = fs.readFileSync(path.join(root, "expected", name, leaf.file));
      if (view.length !== want.length || !want.equals(Buffer.from(view.buffer, view.byteOffset, view.length)))
        throw new Error(`bytes differ (${view.length} read, ${want.length} expected)`);
      same += 1;
    } catch (e) {
      console.log(`FAIL ${name} ${key}: ${e.message}`);
      failed += 1;
    }
  }
  console.log(`${name}: zarrita read ${same} arrays bit-exactly` +
              (skipped.length ? `; skipped (no such dtype in zarrita, or zero-size): ${skipped.join(", ")}` : ""));
}
process.exit(failed ? 1 : 0);
