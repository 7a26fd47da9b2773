#!/usr/bin/env node
// Runs a model with ONNX Runtime (onnxruntime-node, CPU) on inputs stored as .npy files.
//
// usage: node ort_run.js MODEL IN_DIR OUT_DIR [threads]
//
// IN_DIR/inputs.json: [{"name": "x", "file": "x.npy"}, ...] (relative files are relative to IN_DIR).
// Writes OUT_DIR/output_<i>.npy in the model's output order and OUT_DIR/outputs.json
// ([{name, file, dtype, shape}], the same layout as `basalt run --output-dir`).
// ORT: graphOptimizationLevel 'all', intraOpNumThreads = threads (default 1).
// The onnxruntime-node package is taken from $ORT_NODE_PATH, else <repo>/.cache/ort/...
// (scripts/setup_ort.sh installs it there).
'use strict';
const fs = require('fs');
const path = require('path');

// numpy descr <-> ORT tensor type <-> typed array
const TYPES = [
  // descr, ort type, array ctor, basalt dtype name
  ['<f4', 'float32', Float32Array, 'float32'],
  ['<f8', 'float64', Float64Array, 'float64'],
  ['<f2', 'float16', Uint16Array, 'float16'],
  ['<i8', 'int64', BigInt64Array, 'int64'],
  ['<i4', 'int32', Int32Array, 'int32'],
  ['<i2', 'int16', Int16Array, 'int16'],
  ['|i1', 'int8', Int8Array, 'int8'],
  ['<u8', 'uint64', BigUint64Array, 'uint64'],
  ['<u4', 'uint32', Uint32Array, 'uint32'],
  ['<u2', 'uint16', Uint16Array, 'uint16'],
  ['|u1', 'uint8', Uint8Array, 'uint8'],
  ['|b1', 'bool', Uint8Array, 'bool'],
];
const byDescr = new Map(TYPES.map(t => ['=<|'.includes(t[0][0]) ? t[0].slice(1) : t[0], t]));

function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.length < 10 || buf.toString('latin1', 0, 6) !== '\x93NUMPY') throw new Error(`${file}: not a .npy file`);
  const major = buf[6];
  let hlen, hstart;
  if (major === 1) { hlen = buf.readUInt16LE(8); hstart = 10; }
  else { hlen = buf.readUInt32LE(8); hstart = 12; }
  const h = buf.toString('latin1', hstart, hstart + hlen);
  const descr = /'descr'\s*:\s*'([^']*)'/.exec(h);
  const fortran = /'fortran_order'\s*:\s*(True|False)/.exec(h);
  const shape = /'shape'\s*:\s*\(([^)]*)\)/.exec(h);
  if (!descr || !fortran || !shape) throw new Error(`${file}: malformed npy header ${h}`);
  if (fortran[1] === 'True') throw new Error(`${file}: Fortran-order arrays are not supported`);
  const d = descr[1];
  if (d[0] === '>' && d.slice(1) !== 'i1' && d.slice(1) !== 'u1' && d.slice(1) !== 'b1') throw new Error(`${file}: big-endian data not supported`);
  const t = byDescr.get(d.slice(1));
  if (!t) throw new Error(`${file}: npy dtype '${d}' is not supported`);
  const dims = shape[1].split(',').map(s => s.trim()).filter(s => s.length).map(Number);
  const n = dims.reduce((a, b) => a * b, 1);
  const Ctor = t[2];
  const off = hstart + hlen;
  if (buf.length - off < n * Ctor.BYTES_PER_ELEMENT) throw new Error(`${file}: truncated data`);
  // copy into an aligned buffer
  const data = new Ctor(n);
  new Uint8Array(data.buffer).set(buf.subarray(off, off + n * Ctor.BYTES_PER_ELEMENT));
  return { type: t[1], data, dims };
}

function writeNpy(file, type, data, dims) {
  const t = TYPES.find(x => x[1] === type);
  if (!t) throw new Error(`cannot write a ${type} tensor as .npy`);
  let shape = '(' + dims.join(', ') + (dims.length === 1 ? ',' : '') + ')';
  let h = `{'descr': '${t[0]}', 'fortran_order': False, 'shape': ${shape}, }`;
  const total = 10 + h.length + 1;
  h += ' '.repeat((64 - (total % 64)) % 64) + '\n';
  const head = Buffer.alloc(10);
  head.write('\x93NUMPY', 0, 'latin1');
  head[6] = 1; head[7] = 0;
  head.writeUInt16LE(h.length, 8);
  let bytes;
  if (type === 'bool') bytes = Buffer.from(Uint8Array.from(data, v => (v ? 1 : 0)));
  else if (type === 'float16' && !(data instanceof Uint16Array)) {
    // Float16Array (newer runtimes): reinterpret its bits
    bytes = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  } else bytes = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  fs.writeFileSync(file, Buffer.concat([head, Buffer.from(h, 'latin1'), bytes]));
  return t[3];
}

function loadOrt() {
  const candidates = [];
  if (process.env.ORT_NODE_PATH) candidates.push(process.env.ORT_NODE_PATH);
  candidates.push(path.resolve(__dirname, '../../.cache/ort/node_modules/onnxruntime-node'));
  candidates.push('onnxruntime-node');
  for (const c of candidates) {
    try { return require(c); } catch (e) { if (c === candidates[candidates.length - 1]) throw e; }
  }
}

async function main() {
  const [model, inDir, outDir, threadsArg] = process.argv.slice(2);
  if (!model || !inDir || !outDir) {
    console.error('usage: node ort_run.js MODEL IN_DIR OUT_DIR [threads]');
    process.exit(2);
  }
  const threads = threadsArg ? parseInt(threadsArg, 10) : 1;
  const ort = loadOrt();
  const list = JSON.parse(fs.readFileSync(path.join(inDir, 'inputs.json'), 'utf8'));
  const feeds = {};
  for (const it of list) {
    const a = readNpy(path.resolve(inDir, it.file));
    let data = a.data;
    if (a.type === 'bool') data = Uint8Array.from(data, v => (v ? 1 : 0));
    feeds[it.name] = new ort.Tensor(a.type, data, a.dims);
  }
  const sess = await ort.InferenceSession.create(model, {
    executionProviders: ['cpu'],
    graphOptimizationLevel: 'all',
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
  });
  const t0 = process.hrtime.bigint();
  const res = await sess.run(feeds);
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  fs.mkdirSync(outDir, { recursive: true });
  const out = [];
  sess.outputNames.forEach((name, i) => {
    const v = res[name];
    if (!v || v.data === undefined) throw new Error(`output '${name}' is not a tensor`);
    const file = `output_${i}.npy`;
    const dtype = writeNpy(path.join(outDir, file), v.type, v.data, Array.from(v.dims));
    out.push({ name, file, dtype, shape: Array.from(v.dims) });
  });
  fs.writeFileSync(path.join(outDir, 'outputs.json'), JSON.stringify(out, null, 1) + '\n');
  console.log(`ort run ${ms.toFixed(2)} ms`);
}

main().catch(e => {
  console.error(`ort_run.js: ${String(e && e.message ? e.message : e).split('\n')[0]}`);
  process.exit(1);
});
