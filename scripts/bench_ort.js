#!/usr/bin/env node
// ONNX Runtime's side of the benchmarks (scripts/bench.sh): the same measurements as
// `basalt bench`, `basalt perf shapes` and `basalt perf switch`, with onnxruntime-node
// (CPU EP, graphOptimizationLevel 'all', intraOpNumThreads = --threads, interOpNumThreads 1).
//
//   node bench_ort.js bench MODEL --inputs DIR [--threads N] [--warmup W] [--iters K] [--keep-profile FILE]
//   node bench_ort.js shapes MODEL --input NAME --sizes HxW,... [--repeat R] [--threads N]
//   node bench_ort.js switch --cycles K [--threads N] MODEL:NAME=DIMS[,NAME=DIMS] ...
//
// bench: DIR/inputs.json lists [{name, file}] (.npy files, as tests/parity/ort_run.js reads).
//   Per-run times come from ORT's own profiler (enableProfiling; the "model_run" events of its
//   JSON trace), so the Node binding's overhead is left out; wall_* are the same runs timed
//   from JavaScript. session_create_ms is InferenceSession.create timed from JavaScript;
//   session_init_ms is the profiler's "session_initialization" event.
// shapes/switch: no profiler (its per-node events would grow memory with every run), so times
//   are wall times from JavaScript; runs there take 10..1000 ms, the binding adds well under 1%.
//   Inputs are seeded uniform [-1,1) floats. The JS garbage collector is run (node --expose-gc)
//   before each RSS reading so that dead JS tensors do not count against ORT.
// Output: JSON lines like basalt's. Memory in MB from /proc/self/status (VmRSS, VmHWM) of this
// node process, which includes Node itself (rss_before_load_mb shows how much).
// onnxruntime-node comes from $ORT_NODE_PATH, else <repo>/.cache/ort (scripts/setup_ort.sh).
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');

const ORT_DIR = process.env.ORT_NODE_PATH || path.resolve(__dirname, '../.cache/ort/node_modules/onnxruntime-node');
const loadOrt = () => require(ORT_DIR);

function statusMb(key) {
  const m = new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(fs.readFileSync('/proc/self/status', 'utf8'));
  return m ? Number(m[1]) / 1024 : 0;
}
const rss = () => { if (global.gc) global.gc(); return statusMb('VmRSS'); };
const hwm = () => statusMb('VmHWM');
const r3 = v => Math.round(v * 1000) / 1000;
const now = () => Number(process.hrtime.bigint()) / 1e6;

function pct(sorted, p) {
  if (!sorted.length) return 0;
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length)));
  return sorted[rank - 1];
}
function median(v) {
  const s = [...v].sort((a, b) => a - b), n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}
function stats(v) {
  const s = [...v].sort((a, b) => a - b);
  return { median_ms: r3(pct(s, 50)), p90_ms: r3(pct(s, 90)), p99_ms: r3(pct(s, 99)), min_ms: r3(s[0]),
           mean_ms: r3(s.reduce((a, b) => a + b, 0) / s.length) };
}

// .npy reader for the dtypes the benchmark inputs use.
const NPY = { f4: ['float32', Float32Array], f8: ['float64', Float64Array], i8: ['int64', BigInt64Array],
              i4: ['int32', Int32Array], b1: ['bool', Uint8Array], u1: ['uint8', Uint8Array], i1: ['int8', Int8Array] };
function readNpy(ort, file) {
  const buf = fs.readFileSync(file);
  if (buf.toString('latin1', 0, 6) !== '\x93NUMPY') throw new Error(`${file}: not a .npy file`);
  const hlen = buf[6] === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8), hstart = buf[6] === 1 ? 10 : 12;
  const h = buf.toString('latin1', hstart, hstart + hlen);
  const descr = /'descr'\s*:\s*'[<|=]?([a-z]\d)'/.exec(h), shape = /'shape'\s*:\s*\(([^)]*)\)/.exec(h);
  if (!descr || !shape || /'fortran_order'\s*:\s*True/.test(h)) throw new Error(`${file}: unsupported npy header ${h}`);
  const t = NPY[descr[1]];
  if (!t) throw new Error(`${file}: npy dtype ${descr[1]} not supported`);
  const dims = shape[1].split(',').map(s => s.trim()).filter(s => s).map(Number);
  const n = dims.reduce((a, b) => a * b, 1), off = hstart + hlen;
  const data = new t[1](n);
  new Uint8Array(data.buffer).set(buf.subarray(off, off + n * t[1].BYTES_PER_ELEMENT));
  return new ort.Tensor(t[0], data, dims);
}

// Seeded uniform [-1,1) floats (mulberry32), so the shape and switch scenarios need no files.
function randomTensor(ort, dims, seed) {
  let a = seed >>> 0;
  const n = dims.reduce((x, y) => x * y, 1), data = new Float32Array(n);
  for (let i = 0; i < n; ++i) {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    data[i] = (((t ^ (t >>> 14)) >>> 0) / 4294967296) * 2 - 1;
  }
  return new ort.Tensor('float32', data, dims);
}

function options(threads, extra = {}) {
  return { executionProviders: ['cpu'], graphOptimizationLevel: 'all', intraOpNumThreads: threads,
           interOpNumThreads: 1, ...extra };
}

function parseArgs(argv, spec) {
  const o = { _: [] };
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i];
    if (a.startsWith('--')) {
      const k = a.slice(2);
      if (!(k in spec)) throw new Error(`unknown option ${a}`);
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      o[k] = spec[k] === 'int' ? parseInt(argv[++i], 10) : argv[++i];
      if (spec[k] === 'int' && !(o[k] >= 0)) throw new Error(`${a}: not a non-negative integer`);
    } else o._.push(a);
  }
  return o;
}

async function bench(argv) {
  const ort = loadOrt();
  const o = parseArgs(argv, { inputs: 's', threads: 'int', warmup: 'int', iters: 'int', spin: 'int', 'keep-profile': 's' });
  const model = o._[0], threads = o.threads || 1, warmup = o.warmup ?? 3, iters = o.iters || 20;
  if (!model || !o.inputs) throw new Error('usage: bench MODEL --inputs DIR [--threads N] [--warmup W] [--iters K] [--spin 0|1]');
  // --spin 0: ORT's intra-op threads sleep instead of spinning between runs (session config
  // session.intra_op.allow_spinning); default: ORT's default (spinning on).
  const spinExtra = o.spin === 0 ? { extra: { session: { intra_op: { allow_spinning: '0' } } } } : {};
  const list = JSON.parse(fs.readFileSync(path.join(o.inputs, 'inputs.json'), 'utf8'));
  const feeds = {};
  for (const it of list) feeds[it.name] = readNpy(ort, path.resolve(o.inputs, it.file));
  const profDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ort_prof_'));
  const before = rss();
  let t0 = now();
  const sess = await ort.InferenceSession.create(model, options(threads, {
    enableProfiling: true, profileFilePrefix: path.join(profDir, 'ort'), ...spinExtra }));
  const createMs = now() - t0;
  const afterLoad = rss();
  const wall = [];
  for (let k = 0; k < 1 + warmup + iters; ++k) {
    t0 = now();
    await sess.run(feeds);
    wall.push(now() - t0);
  }
  sess.endProfiling();
  const peak = hwm();
  await sess.release();
  const files = fs.readdirSync(profDir).filter(f => f.endsWith('.json'));
  if (files.length !== 1) throw new Error(`expected one ORT profile in ${profDir}, found ${files.length}`);
  const trace = JSON.parse(fs.readFileSync(path.join(profDir, files[0]), 'utf8'));
  if (o['keep-profile']) fs.copyFileSync(path.join(profDir, files[0]), o['keep-profile']);
  fs.rmSync(profDir, { recursive: true, force: true });
  const runs = trace.filter(e => e.name === 'model_run').sort((a, b) => a.ts - b.ts).map(e => e.dur / 1000);
  const init = trace.find(e => e.name === 'session_initialization');
  if (runs.length !== wall.length) throw new Error(`ORT profile has ${runs.length} model_run events for ${wall.length} runs`);
  const timed = runs.slice(1 + warmup), wtimed = wall.slice(1 + warmup);
  console.log(JSON.stringify({
    model, runtime: 'ort', ort_version: require(path.join(ORT_DIR, 'package.json')).version,
    threads, warmup, iters, spin: o.spin === 0 ? 0 : 1, ...stats(timed), first_run_ms: r3(runs[0]), session_create_ms: r3(createMs),
    session_init_ms: init ? r3(init.dur / 1000) : null, wall_median_ms: r3(median(wtimed)),
    rss_before_load_mb: r3(before), rss_after_load_mb: r3(afterLoad), peak_rss_mb: r3(peak) }));
}

async function shapes(argv) {
  const ort = loadOrt();
  const o = parseArgs(argv, { input: 's', sizes: 's', repeat: 'int', threads: 'int' });
  const model = o._[0], threads = o.threads || 1, repeat = o.repeat || 3;
  if (!model || !o.input || !o.sizes) throw new Error('usage: shapes MODEL --input NAME --sizes HxW,... [--repeat R] [--threads N]');
  const sizes = o.sizes.split(',').map(s => {
    const m = /^(\d+)x(\d+)$/.exec(s);
    if (!m) throw new Error(`--sizes: '${s}' is not HxW`);
    return [Number(m[1]), Number(m[2])];
  });
  const base = rss();
  let t0 = now();
  let sess = await ort.InferenceSession.create(model, options(threads));
  const createMs = now() - t0;
  const afterLoad = rss();
  let seed = 1;
  for (const [h, w] of sizes) {
    const feeds = { [o.input]: randomTensor(ort, [1, 3, h, w], seed++) };
    t0 = now();
    await sess.run(feeds);
    const first = now() - t0, reps = [];
    for (let k = 0; k < repeat; ++k) {
      t0 = now();
      await sess.run(feeds);
      reps.push(now() - t0);
    }
    console.log(JSON.stringify({ h, w, first_ms: r3(first), repeat_ms: r3(median(reps)), rss_mb: r3(rss()) }));
  }
  const afterLast = rss();
  await sess.release();
  sess = null;
  const afterRelease = rss();
  console.log(JSON.stringify({ summary: true, model, runtime: 'ort', threads, base_rss_mb: r3(base), create_ms: r3(createMs),
    rss_after_load_mb: r3(afterLoad), peak_rss_mb: r3(hwm()), rss_after_last_size_mb: r3(afterLast),
    rss_after_release_mb: r3(afterRelease), sizes: sizes.length }));
}

async function switchModels(argv) {
  const ort = loadOrt();
  const o = parseArgs(argv, { cycles: 'int', threads: 'int' });
  const threads = o.threads || 1, cycles = o.cycles;
  if (!cycles || !o._.length) throw new Error('usage: switch --cycles K [--threads N] MODEL:NAME=DIMS ...');
  const models = o._.map(s => {
    const c = s.lastIndexOf(':');
    const feeds = s.slice(c + 1).split(',').map(kv => {
      const [n, d] = kv.split('=');
      return [n, d.split('x').map(Number)];
    });
    return { path: s.slice(0, c), feeds };
  });
  const base = rss(), after = [];
  for (let c = 1; c <= cycles; ++c) {
    const runMs = [];
    for (const m of models) {
      let sess = await ort.InferenceSession.create(m.path, options(threads));
      const feeds = {};
      m.feeds.forEach(([n, d], i) => { feeds[n] = randomTensor(ort, d, c * 100 + i); });
      const t0 = now();
      await sess.run(feeds);
      runMs.push(r3(now() - t0));
      await sess.release();
      sess = null;
    }
    after.push(rss());
    console.log(JSON.stringify({ cycle: c, rss_after_release_mb: r3(after[after.length - 1]), run_ms: runMs }));
  }
  console.log(JSON.stringify({ summary: true, runtime: 'ort', models: models.map(m => m.path), threads,
    base_rss_mb: r3(base), peak_rss_mb: r3(hwm()), rss_after_first_cycle_mb: r3(after[0]),
    rss_after_last_cycle_mb: r3(after[after.length - 1]), cycles }));
}

const [mode, ...rest] = process.argv.slice(2);
const fn = { bench, shapes, switch: switchModels }[mode];
if (!fn) {
  console.error('usage: node bench_ort.js bench|shapes|switch ... (see the header of this file)');
  process.exit(2);
}
fn(rest).catch(e => {
  console.error(`bench_ort.js ${mode}: ${String(e && e.message ? e.message : e).split('\n')[0]}`);
  process.exit(1);
});
