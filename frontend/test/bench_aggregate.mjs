// Times src/shared/aggregate on an 8,000-token chat prompt at every granularity.
//
// The same synthetic prompt as benchmarks/bench_aggregate.py. Prints ms per
// granularity (median and best of repeats) for segment() and for
// segment()+aggregate() with one score row [N] and with 64 rows [64][N].
// Prints figures only; asserts nothing.
//
//   cd frontend && node test/bench_aggregate.mjs [tokens] [repeats]
import {buildSync} from 'esbuild';
import {mkdtempSync, writeFileSync} from 'node:fs';
import {tmpdir} from 'node:os';
import {dirname, join} from 'node:path';
import {fileURLToPath, pathToFileURL} from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const bundle = buildSync({
  entryPoints: [join(here, '../src/shared/aggregate/index.ts')], bundle: true, format: 'esm', write: false,
  target: 'es2020',
});
const file = join(mkdtempSync(join(tmpdir(), 'bench-aggregate-')), 'aggregate.mjs');
writeFileSync(file, bundle.outputFiles[0].text);
const agg = await import(pathToFileURL(file).href);

const SENTENCES = [
  'Dr. Smith paid $3.14 for tea, e.g. green tea.',
  'It was cheap!',
  'Was it really worth it?',
  'The U.S. team won 2,000 points in 3.5 hours.',
  "Don't forget the \u6771\u4eac trip \u{1F600}.",
  'Steps follow:\n1. Open the box.\n2. Take it out.',
];
const PIECE_RE = /<\|[a-z_]+\|>| ?[A-Za-z]+| ?[0-9]+|\s+|./gsu;

/** Token spans in code points (the payload's unit). */
function pieces(text) {
  const cpOf = new Int32Array(text.length + 1);
  let cp = 0;
  for (let i = 0; i < text.length; i++) {
    cpOf[i] = cp;
    const c = text.charCodeAt(i);
    if (c < 0xd800 || c > 0xdbff) cp++;
  }
  cpOf[text.length] = cp;
  return Array.from(text.matchAll(PIECE_RE), (m) => [cpOf[m.index], cpOf[m.index + m[0].length]]);
}

function makePrompt(nTokens) {
  const head = '<|im_start|>system\n';
  const system = 'You are a careful assistant.';
  const mid = '<|im_end|>\n<|im_start|>user\n';
  const body = [];
  let i = 0;
  while (pieces(body.join('')).length < nTokens) {
    for (let k = 0; k < 10; k++, i++) body.push(SENTENCES[i % SENTENCES.length] + (i % 7 === 6 ? '\n\n' : ' '));
  }
  const user = body.join('');
  const tail = '<|im_end|>\n<|im_start|>assistant\n';
  const text = head + system + mid + user + tail;
  const len = (s) => Array.from(s).length;
  const a = len(head);
  const b = a + len(system);
  const c = b + len(mid);
  const d = c + len(user);
  const spans = [[0, a, 'markup'], [a, b, 'system'], [b, c, 'markup'], [c, d, 'user'], [d, len(text), 'markup']];
  return {text, offsets: pieces(text), spans};
}

const nTokens = Number(process.argv[2] ?? 8000);
const repeats = Number(process.argv[3] ?? 20);
const {text, offsets, spans} = makePrompt(nTokens);
const n = offsets.length;
let seed = 1;
const rand = () => ((seed = (seed * 16807) % 2147483647) / 2147483647) * 2 - 1;
const row = Float32Array.from({length: n}, rand);
const matrix = Array.from({length: 64}, () => Float32Array.from({length: n}, rand));
const median = (v) => [...v].sort((x, y) => x - y)[Math.floor(v.length / 2)];
const fmt = (v) => `${median(v).toFixed(2)} (${Math.min(...v).toFixed(2)})`;

console.log(`aggregate.ts (node ${process.version}): ${n} tokens, ${Array.from(text).length} characters; ` +
            `ms, median (best) of ${repeats} runs`);
console.log('granularity'.padEnd(12) + 'segments'.padStart(9) + 'segment'.padStart(16) +
            'segment+agg [N]'.padStart(18) + 'segment+agg [64,N]'.padStart(20));
let total = 0;
let totalMat = 0;
for (const g of agg.GRANULARITIES) {
  const opts = {pattern: '[^,;.!?]+', roleSpans: spans};
  const times = {seg: [], row: [], mat: []};
  let seg;
  for (let r = 0; r < repeats + 2; r++) {  // two warm-up runs for the JIT
    const t0 = performance.now();
    seg = agg.segment(text, offsets, g, opts);
    const t1 = performance.now();
    agg.aggregate(row, seg, 'sum');
    const t2 = performance.now();
    agg.aggregate(matrix, seg, 'sum');
    const t3 = performance.now();
    if (r < 2) continue;
    times.seg.push(t1 - t0);
    times.row.push(t2 - t0);
    times.mat.push(t1 - t0 + (t3 - t2));
  }
  total += median(times.row);
  totalMat += median(times.mat);
  console.log(g.padEnd(12) + String(seg.kinds.length).padStart(9) + fmt(times.seg).padStart(16) +
              fmt(times.row).padStart(18) + fmt(times.mat).padStart(20));
}
console.log('all'.padEnd(12) + ''.padStart(9) + ''.padStart(16) + total.toFixed(2).padStart(18) +
            totalMat.toFixed(2).padStart(20));
