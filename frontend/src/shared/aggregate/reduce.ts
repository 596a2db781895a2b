/**
 * Reductions of token scores to segment scores, and the normalisations the views use.
 */
import {segment} from './segment.js';
import {REDUCTIONS, SalienceError, type Granularity, type Reduction, type Segmentation, type SegmentOptions} from './types.js';

/** Scores: [N] or [T][N]; typed rows are fine. */
export type Scores = ArrayLike<number> | ReadonlyArray<ArrayLike<number>>;

function isMatrix(scores: Scores): scores is ReadonlyArray<ArrayLike<number>> {
  return scores.length > 0 && typeof (scores as ArrayLike<unknown>)[0] !== 'number';
}

function aggregateRow(row: ArrayLike<number>, seg: Segmentation, reduction: Reduction,
                      keepExcluded: boolean): Float64Array {
  const nSeg = seg.kinds.length;
  const ts = seg.tokenSegment;
  if (row.length !== ts.length) {
    throw new SalienceError(
      `scores rows have ${row.length} entries; expected ${ts.length} (one per token). ` +
      'Fix: pass scores for the same tokens as the offsets.');
  }
  const out = new Float64Array(nSeg);
  const counts = new Int32Array(nSeg);
  if (reduction === 'max') out.fill(-Infinity);
  for (let k = 0; k < ts.length; k++) {
    const s = ts[k];
    if (s < 0) continue;
    const v = row[k];
    counts[s]++;
    if (reduction === 'max') {
      if (v > out[s] || Number.isNaN(v)) out[s] = v;
    } else {
      out[s] += reduction === 'abs_sum' ? Math.abs(v) : v;
    }
  }
  for (let s = 0; s < nSeg; s++) {
    if (reduction === 'mean') out[s] = counts[s] ? out[s] / counts[s] : NaN;
    if (reduction === 'max' && counts[s] === 0) out[s] = NaN;
    if (!keepExcluded && seg.excluded[s]) out[s] = NaN;
  }
  return out;
}

/**
 * Reduces token scores to segment scores.
 *
 * @param scores [N] or [T][N] token salience.
 * @param seg from `segment` over the same tokens.
 * @param reduction "sum" (default), "mean", "max" or "abs_sum".
 * @param keepExcluded if false, excluded (markup) segments score NaN.
 * @returns Float64Array [S], or one per row for [T][N]. Segments without
 *   tokens: 0 for sum/abs_sum, NaN for mean/max.
 */
export function aggregate(scores: ArrayLike<number>, seg: Segmentation, reduction?: Reduction | string,
                          keepExcluded?: boolean): Float64Array;
export function aggregate(scores: ReadonlyArray<ArrayLike<number>>, seg: Segmentation,
                          reduction?: Reduction | string, keepExcluded?: boolean): Float64Array[];
export function aggregate(scores: Scores, seg: Segmentation, reduction: Reduction | string = 'sum',
                          keepExcluded = false): Float64Array | Float64Array[] {
  if (!(REDUCTIONS as readonly string[]).includes(reduction)) {
    throw new SalienceError(`unknown reduction "${reduction}". Fix: use one of ${REDUCTIONS.join(', ')}.`);
  }
  const r = reduction as Reduction;
  if (isMatrix(scores)) return scores.map((row) => aggregateRow(row, seg, r, keepExcluded));
  return aggregateRow(scores as ArrayLike<number>, seg, r, keepExcluded);
}

/** `segment` then `aggregate`: [segmentation, Float64Array [S] or one per row]. */
export function aggregateSalience(
    text: string, offsets: ArrayLike<ArrayLike<number>>, scores: Scores, granularity: Granularity | string = 'word',
    reduction: Reduction | string = 'sum', opts: SegmentOptions = {},
    keepExcluded = false): [Segmentation, Float64Array | Float64Array[]] {
  const seg = segment(text, offsets, granularity, opts);
  return [seg, aggregate(scores as ReadonlyArray<ArrayLike<number>>, seg, reduction, keepExcluded)];
}

function displayValues(values: ArrayLike<number> | ReadonlyArray<ArrayLike<number>>,
                       excluded?: ArrayLike<number | boolean>): {rows: Float64Array[]; magnitudes: number[]} {
  const rowsIn: ArrayLike<number>[] = isMatrix(values as Scores)
    ? Array.from(values as ReadonlyArray<ArrayLike<number>>) : [values as ArrayLike<number>];
  const magnitudes: number[] = [];
  const rows = rowsIn.map((row) => {
    const out = Float64Array.from(row as ArrayLike<number>);
    for (let s = 0; s < out.length; s++) {
      if (excluded && excluded[s]) out[s] = NaN;
      if (Number.isFinite(out[s])) magnitudes.push(Math.abs(out[s])); else out[s] = NaN;
    }
    return out;
  });
  return {rows, magnitudes};
}

function scaleRows(rows: Float64Array[], scale: number, clip: boolean): Float64Array[] {
  for (const row of rows) {
    for (let s = 0; s < row.length; s++) {
      if (Number.isNaN(row[s])) continue;
      let v = scale > 0 ? row[s] / scale : 0;
      if (clip) v = Math.min(1, Math.max(-1, v));
      row[s] = v;
    }
  }
  return rows;
}

/**
 * Scales values by their largest magnitude into [-1, 1]; one scale over all
 * rows. Excluded / non-finite entries become NaN and do not set the scale.
 */
export function normalizeMaxAbs(values: ArrayLike<number>, excluded?: ArrayLike<number | boolean>): Float64Array;
export function normalizeMaxAbs(values: ReadonlyArray<ArrayLike<number>>,
                                excluded?: ArrayLike<number | boolean>): Float64Array[];
export function normalizeMaxAbs(values: ArrayLike<number> | ReadonlyArray<ArrayLike<number>>,
                                excluded?: ArrayLike<number | boolean>): Float64Array | Float64Array[] {
  const {rows, magnitudes} = displayValues(values, excluded);
  let scale = 0;
  for (const m of magnitudes) if (m > scale) scale = m;
  scaleRows(rows, scale, false);
  return isMatrix(values as Scores) ? rows : rows[0];
}

/** Linear-interpolation percentile (numpy's default), q in [0, 100]. */
export function percentile(values: ArrayLike<number>, q: number): number {
  const a = Float64Array.from(values).sort();
  if (a.length === 0) return NaN;
  const rank = (q / 100) * (a.length - 1);
  const lo = Math.floor(rank);
  const hi = Math.min(lo + 1, a.length - 1);
  return a[lo] + (a[hi] - a[lo]) * (rank - lo);
}

/**
 * Clips magnitudes at their q-th percentile and scales into [-1, 1]; one scale
 * over all rows. Excluded / non-finite entries become NaN and do not set it.
 */
export function normalizePercentile(values: ArrayLike<number>, q?: number,
                                    excluded?: ArrayLike<number | boolean>): Float64Array;
export function normalizePercentile(values: ReadonlyArray<ArrayLike<number>>, q?: number,
                                    excluded?: ArrayLike<number | boolean>): Float64Array[];
export function normalizePercentile(values: ArrayLike<number> | ReadonlyArray<ArrayLike<number>>, q = 95,
                                    excluded?: ArrayLike<number | boolean>): Float64Array | Float64Array[] {
  if (!(q >= 0 && q <= 100)) {
    throw new SalienceError(`percentile q=${q} is outside [0, 100]. Fix: pass e.g. q=95.`);
  }
  const {rows, magnitudes} = displayValues(values, excluded);
  const scale = magnitudes.length ? percentile(magnitudes, q) : 0;
  scaleRows(rows, scale, true);
  return isMatrix(values as Scores) ? rows : rows[0];
}

/**
 * Segment values with the text between regex matches (kind "gap") set to NaN (a copy): with
 * granularity "regex" the matches are the segments asked about, the text between them is context
 * (uncoloured, not ranked, no say in the colour scale). `matches_only` in reductions.py.
 */
export function matchesOnly(values: ArrayLike<number>, seg: Segmentation): Float64Array {
  const out = Float64Array.from(values);
  for (let s = 0; s < seg.kinds.length && s < out.length; s++) if (seg.kinds[s] === 'gap') out[s] = NaN;
  return out;
}
