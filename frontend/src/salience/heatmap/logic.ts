/**
 * The answer × prompt heatmap (the matrix researchers know from inseq, and from this
 * project's `display.heatmap` / `sequence-salience show --heatmap`), without a DOM: which
 * rows (response tokens, or response segments at the granularity shown) and columns (prompt
 * segments at that granularity) it has, each cell's value, and its colour scale.
 *
 * With `prefix` the columns go on with the response's segments before each row (the answer's own earlier
 * tokens, as inseq's matrix and the top list's "resp." entries): a row's cell is blank (NaN) for a
 * response column that does not start before the row's first token.
 *
 * A cell is the salience of its column's prompt segment for its row's target: the row's span
 * salience (../spans.ts: the sum of the per-token rows for the methods linear in log p, the norm
 * of the summed gradients for gradient norm) summed over the column's tokens, as the text view
 * aggregates (shared/aggregate, reduction "sum"). Python's `display.plot.segment_matrix` draws
 * the same cells for token rows.
 */
import {aggregate, type Segmentation} from '../../shared/aggregate/index.js';
import {maxAbs, type ColorScale} from '../../shared/colormap.js';
import {segmentText} from '../../shared/pieces.js';
import type {MethodPayload, SaliencePayload} from '../payload.js';
import {spanSalience, type TargetSpan} from '../spans.js';
import {targetSegments} from '../target.js';

/** What a row is: one response token, or one response segment at the granularity shown. */
export type HeatmapRows = 'token' | 'segment';
export const HEATMAP_ROWS: readonly HeatmapRows[] = ['token', 'segment'];
/** One colour scale for the whole matrix, or each row on its own (Python's normalize="row"). */
export type HeatmapScale = 'all' | 'row';

/** Longest row or column label, in characters (longer ones end in "…"; the tooltip has the whole text). */
export const MAX_LABEL = 24;

export interface HeatmapColumn {
  /** Segment index in the segmentation. */
  seg: number;
  label: string;
  /** The segment's whole text. */
  text: string;
  /** Whether it lies in the response (a prefix column, drawn as "… (resp.)"). */
  response: boolean;
  /** Its first token (index into the payload's tokens). */
  first: number;
}

export interface HeatmapRow {
  /** The target tokens [t0, t1) the row explains (a click makes them the target). */
  t0: number;
  t1: number;
  label: string;
  text: string;
  /** <float>[C]: one value per column. */
  cells: Float64Array;
}

export interface Heatmap {
  rows: HeatmapRow[];
  cols: HeatmapColumn[];
  signed: boolean;
}

/** A label for a row or column: white space collapsed, visible when there is nothing else, shortened. */
export function cellLabel(text: string): string {
  const collapsed = text.split(/\s+/u).filter((w) => w !== '').join(' ');
  if (collapsed === '') return text.includes('\n') ? '⏎' : text === '' ? '∅' : '␣';
  return collapsed.length <= MAX_LABEL ? collapsed : collapsed.slice(0, MAX_LABEL - 1) + '…';
}

/**
 * The columns: the segments that start in the prompt (with `prefix`, in the response too), without template
 * markup, without the text between regex matches and without white-space-only segments (as
 * display.plot.segment_matrix).
 */
export function heatmapColumns(p: Pick<SaliencePayload, 'text' | 'prompt_end'>, seg: Segmentation,
                               u16: Int32Array, prefix = false): HeatmapColumn[] {
  const first = new Int32Array(seg.starts.length).fill(-1);
  seg.tokenSegment.forEach((s, k) => { if (s >= 0 && first[s] < 0) first[s] = k; });
  const out: HeatmapColumn[] = [];
  for (let s = 0; s < seg.starts.length; s++) {
    const response = seg.starts[s] >= p.prompt_end;
    if ((response && (!prefix || first[s] < 0)) || seg.excluded[s] === 1 || seg.kinds[s] === 'gap') continue;
    const text = segmentText(p.text, seg, s, u16);
    if (text.trim() === '') continue;
    out.push({seg: s, label: cellLabel(text), text, response, first: first[s]});
  }
  return out;
}

/** A column's heading: its label, "(resp.)" after a response segment's. */
export function columnHeading(c: Pick<HeatmapColumn, 'label' | 'response'>): string {
  return c.response ? `${c.label} (resp.)` : c.label;
}

/** The rows' target spans and labels: every response token, or every response segment (the text view's targets). */
export function heatmapRowSpans(p: Pick<SaliencePayload, 'text' | 'tokens' | 'n_prompt_tokens'>, seg: Segmentation,
                                mode: HeatmapRows, u16: Int32Array): Array<TargetSpan & {label: string; text: string}> {
  if (mode === 'token') {
    const out = [];
    for (let k = p.n_prompt_tokens; k < p.tokens.length; k++) {
      const text = p.tokens[k];
      out.push({t0: k - p.n_prompt_tokens, t1: k - p.n_prompt_tokens + 1, label: cellLabel(text), text});
    }
    return out;
  }
  return targetSegments(seg, p.n_prompt_tokens).map((ts) => {
    const text = segmentText(p.text, seg, ts.seg, u16);
    return {t0: ts.t0, t1: ts.t1, label: cellLabel(text), text};
  });
}

/**
 * The heatmap of a method's per-token matrix (`prefix`: with the response's earlier segments as columns), or null while a row cannot be computed here (no matrix
 * yet; gradient norm over a multi-token segment without the Gram matrix). `linear`: the method's registry
 * record (shared/methods.ts `MethodInfo.linear`; a span is then the sum of its rows).
 */
export function buildHeatmap(m: MethodPayload, p: SaliencePayload, seg: Segmentation, mode: HeatmapRows,
                             u16: Int32Array, linear: boolean, prefix = false): Heatmap | null {
  if (m.matrix == null) return null;
  const cols = heatmapColumns(p, seg, u16, prefix);
  const n = p.tokens.length;
  const rows: HeatmapRow[] = [];
  for (const r of heatmapRowSpans(p, seg, mode, u16)) {
    const tokenValues = spanSalience(m, r, n, linear);  // <float>[N]
    if (tokenValues === null) return null;
    const bySegment = aggregate(tokenValues, seg, 'sum');  // <float>[S]
    const before = p.n_prompt_tokens + r.t0;  // the row's first token: a prefix column must start before it
    rows.push({...r, cells: Float64Array.from(cols, (c) => (c.response && c.first >= before ? NaN : bySegment[c.seg]))});
  }
  return {rows, cols, signed: m.signed};
}

/**
 * A segment method's values on screen as the matrix's one row (those methods measure one target at a time): the
 * target span shown, each column its segment's value (`values`: [S], the text view's, on the same segmentation).
 */
export function segmentMethodHeatmap(values: ArrayLike<number>, p: SaliencePayload, seg: Segmentation, span: TargetSpan,
                                     u16: Int32Array, signed: boolean, prefix = false): Heatmap {
  const cols = heatmapColumns(p, seg, u16, prefix);
  const text = p.tokens.slice(p.n_prompt_tokens + span.t0, p.n_prompt_tokens + span.t1).join('');
  const before = p.n_prompt_tokens + span.t0;
  const cells = Float64Array.from(cols, (c) => (c.response && c.first >= before ? NaN : values[c.seg]));
  return {rows: [{t0: span.t0, t1: span.t1, label: cellLabel(text), text, cells}], cols, signed};
}

/**
 * The heatmap with the rows `hidden` says are hidden (their values fail the server's completeness check, or it did not
 * check them: ../values.ts) emptied: no colour, no number, nothing in the scale or the exports, as the text view hides
 * the same values until "Show anyway". Returns the map itself when no row is hidden, and how many rows are.
 */
export function hideRows(h: Heatmap, hidden: (row: TargetSpan) => boolean): {map: Heatmap; hidden: number} {
  const hide = h.rows.map((r) => hidden(r));
  const n = hide.filter((x) => x).length;
  if (n === 0) return {map: h, hidden: 0};
  return {map: {...h, rows: h.rows.map((r, i) => (hide[i] ? {...r, cells: r.cells.map(() => NaN)} : r))}, hidden: n};
}

/**
 * The colour scale of row `r` (the module's colour maps and intensity): the largest |value| of the
 * whole matrix, or of that row alone with scale "row".
 */
export function rowScale(h: Heatmap, r: number, scale: HeatmapScale, intensity: number): ColorScale {
  if (scale === 'row') return {signed: h.signed, scale: maxAbs(h.rows[r].cells), intensity};
  return matrixScale(h, intensity);
}

/** The colour scale of the whole matrix (its legend's): the largest |value| over every cell. */
export function matrixScale(h: Heatmap, intensity: number): ColorScale {
  let m = 0;
  for (const row of h.rows) {
    for (const v of row.cells) if (Number.isFinite(v)) m = Math.max(m, Math.abs(v));
  }
  return {signed: h.signed, scale: m > 0 ? m : 1, intensity};
}

/** Indices of the rows that lie in the target span (drawn as selected). */
export function selectedRows(h: Heatmap, span: TargetSpan): number[] {
  const out: number[] = [];
  h.rows.forEach((r, i) => { if (r.t0 < span.t1 && span.t0 < r.t1) out.push(i); });
  return out;
}

/**
 * Keyboard on the rows: the focused row after a key (ArrowUp/ArrowDown, Home/End, PageUp/PageDown by
 * `page` rows), or null for a key that does not move.
 */
export function moveRow(focus: number, key: string, count: number, page = 10): number | null {
  if (count === 0) return null;
  const clamp = (i: number) => Math.max(0, Math.min(count - 1, i));
  switch (key) {
    case 'ArrowUp': return clamp(focus - 1);
    case 'ArrowDown': return clamp(focus + 1);
    case 'PageUp': return clamp(focus - page);
    case 'PageDown': return clamp(focus + page);
    case 'Home': return 0;
    case 'End': return count - 1;
    default: return null;
  }
}

/**
 * Why there is no heatmap for the method on screen, in words with what to do; '' when there is one
 * to draw. `detail` is the text view's status of the per-token matrices (progress, or the failure).
 */
export function heatmapWaitReason(o: {segmentMethod: boolean; extraWithoutMatrix: string | null; matrix: boolean;
                                      detail: string}): string {
  if (o.segmentMethod) {
    return 'The heatmap shows a segment method\'s values once they are measured for the target on screen (one row: ' +
        'these methods measure one target at a time; for a row per token choose a gradient method).';
  }
  if (o.extraWithoutMatrix !== null) {
    return `The heatmap needs ${o.extraWithoutMatrix} for every response token: tick “per-token” beside its count.`;
  }
  if (!o.matrix) return `The heatmap needs the per-token matrices: ${o.detail}.`;
  return '';
}
