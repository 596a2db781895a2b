/**
 * The segment-level alignment of two texts, with the rules of sequence_salience/compare/alignment.py: units are
 * the aggregation's segments (../../shared/aggregate/), compared by their text with whitespace collapsed;
 * positions are code points. The diff is difflib's (`diffKeys`): the same alignment as Python's on the
 * hand-derived cases both test suites share (tests/data/alignment_cases.json). Then each side's values per
 * aligned segment and their difference.
 */
import {segment, type Granularity, type Segmentation} from '../../shared/aggregate/index.js';
import {codePointToUtf16} from '../../shared/pieces.js';

export type AlignKind = 'equal' | 'insert' | 'delete' | 'replace';

/** One aligned segment: code point spans in A and B (empty on the side without text) and the segments. */
export interface AlignedSegment {
  kind: AlignKind;
  a: [number, number];
  b: [number, number];
  aSegs: number[];
  bSegs: number[];
}

export interface Alignment {
  textA: string;
  textB: string;
  segments: AlignedSegment[];
}

/** What two segments share when they align as equal: their text with whitespace collapsed and trimmed. */
export function segmentKey(text: string): string {
  return text.split(/\s+/u).filter((w) => w.length > 0).join(' ');
}

/** A run of equal keys: a[i, i + size) == b[j, j + size). */
type Block = [i: number, j: number, size: number];

/**
 * The longest run of equal keys inside a[alo, ahi) x b[blo, bhi): the earliest in a, then in b, of the
 * longest (difflib's find_longest_match with no junk). `where`: each key's positions in b, increasing.
 */
function longestRun(a: readonly string[], where: Map<string, number[]>, alo: number, ahi: number, blo: number,
                    bhi: number): Block {
  let best: Block = [alo, blo, 0];
  let runs = new Map<number, number>();  // j -> length of the run of equal keys ending at (i - 1, j)
  for (let i = alo; i < ahi; i++) {
    const next = new Map<number, number>();
    for (const j of where.get(a[i]) ?? []) {
      if (j < blo) continue;
      if (j >= bhi) break;
      const k = (runs.get(j - 1) ?? 0) + 1;
      next.set(j, k);
      if (k > best[2]) best = [i - k + 1, j - k + 1, k];
    }
    runs = next;
  }
  return best;
}

/**
 * Opcodes [kind, i1, i2, j1, j2] turning keys a into keys b: difflib.SequenceMatcher(None, a, b,
 * autojunk=False).get_opcodes(), as sequence_salience/compare/alignment.py computes them: the longest run
 * of equal keys first, then the same on each side of it.
 */
export function diffKeys(a: readonly string[], b: readonly string[]): Array<[AlignKind, number, number, number, number]> {
  const where = new Map<string, number[]>();
  b.forEach((key, j) => {
    const list = where.get(key);
    if (list === undefined) where.set(key, [j]); else list.push(j);
  });
  const blocks: Block[] = [];
  const todo: Array<[number, number, number, number]> = [[0, a.length, 0, b.length]];
  while (todo.length > 0) {
    const [alo, ahi, blo, bhi] = todo.pop()!;
    const [i, j, k] = longestRun(a, where, alo, ahi, blo, bhi);
    if (k === 0) continue;
    blocks.push([i, j, k]);
    if (alo < i && blo < j) todo.push([alo, i, blo, j]);
    if (i + k < ahi && j + k < bhi) todo.push([i + k, ahi, j + k, bhi]);
  }
  blocks.sort((x, y) => x[0] - y[0] || x[1] - y[1]);
  blocks.push([a.length, b.length, 0]);
  const ops: Array<[AlignKind, number, number, number, number]> = [];
  let i = 0, j = 0;
  for (const [bi, bj, size] of blocks) {
    if (i < bi || j < bj) ops.push([i < bi && j < bj ? 'replace' : i < bi ? 'delete' : 'insert', i, bi, j, bj]);
    const last = ops[ops.length - 1];
    if (size > 0 && last !== undefined && last[0] === 'equal' && last[2] === bi && last[4] === bj) {
      last[2] += size; last[4] += size;  // adjacent runs are one equal opcode
    } else if (size > 0) {
      ops.push(['equal', bi, bi + size, bj, bj + size]);
    }
    i = bi + size;
    j = bj + size;
  }
  return ops;
}

interface Unit {
  seg: number;
  start: number;
  end: number;
}

function units(text: string, u16: Int32Array, seg: Segmentation, lo: number, hi: number): Unit[] {
  const out: Unit[] = [];
  for (let s = 0; s < seg.kinds.length; s++) {
    const a = seg.starts[s];
    const b = Math.min(seg.ends[s], hi);
    if (a >= lo && a < hi && b > a && text.slice(u16[a], u16[b]).trim() !== '') out.push({seg: s, start: a, end: b});
  }
  return out;
}

/** Aligns two segmented texts over code point regions [lo, hi) (default: the whole texts). */
export function alignSegmentations(textA: string, segA: Segmentation, textB: string, segB: Segmentation,
                                   regionA?: [number, number], regionB?: [number, number]): Alignment {
  const ua16 = codePointToUtf16(textA);
  const ub16 = codePointToUtf16(textB);
  const ra = regionA ?? [0, ua16.length - 1];
  const rb = regionB ?? [0, ub16.length - 1];
  const ua = units(textA, ua16, segA, ra[0], ra[1]);
  const ub = units(textB, ub16, segB, rb[0], rb[1]);
  const keysA = ua.map((u) => segmentKey(textA.slice(ua16[u.start], ua16[u.end])));
  const keysB = ub.map((u) => segmentKey(textB.slice(ub16[u.start], ub16[u.end])));
  const span = (us: Unit[], i1: number, i2: number, region: [number, number]): [number, number] => {
    if (i2 > i1) return [us[i1].start, us[i2 - 1].end];
    if (i1 < us.length) return [us[i1].start, us[i1].start];
    const end = us.length ? us[us.length - 1].end : region[0];
    return [end, end];
  };
  const segments: AlignedSegment[] = [];
  for (const [kind, i1, i2, j1, j2] of diffKeys(keysA, keysB)) {
    if (kind === 'equal') {
      for (let k = 0; k < i2 - i1; k++) {
        const x = ua[i1 + k], y = ub[j1 + k];
        segments.push({kind, a: [x.start, x.end], b: [y.start, y.end], aSegs: [x.seg], bSegs: [y.seg]});
      }
      continue;
    }
    segments.push({kind, a: span(ua, i1, i2, ra), b: span(ub, j1, j2, rb),
                   aSegs: ua.slice(i1, i2).map((u) => u.seg), bSegs: ub.slice(j1, j2).map((u) => u.seg)});
  }
  return {textA, textB, segments};
}

/** Aligns two plain texts (the responses) word by word. */
export function alignTexts(textA: string, textB: string, granularity: Granularity = 'word'): Alignment {
  return alignSegmentations(textA, segment(textA, [], granularity), textB, segment(textB, [], granularity));
}

/** The text of aligned segment k on side 'a' or 'b'. */
export function alignedText(al: Alignment, k: number, side: 'a' | 'b'): string {
  return sideText(al, side, side === 'a' ? al.segments[k].a : al.segments[k].b);
}

/** The text of side 'a' or 'b' between code points [start, end). */
export function sideText(al: Alignment, side: 'a' | 'b', [start, end]: readonly [number, number]): string {
  const text = side === 'a' ? al.textA : al.textB;
  const u16 = codePointToUtf16(text);
  return text.slice(u16[start], u16[end]);
}

/** Whether anything but whitespace differs. */
export function changed(al: Alignment): boolean {
  return al.segments.some((s) => s.kind !== 'equal');
}

/** Per aligned segment, each side's value: the sum of its segments' finite values; NaN without any. */
export function alignedValues(al: Alignment, valuesA: ArrayLike<number>, valuesB: ArrayLike<number>):
    {a: Float64Array; b: Float64Array} {
  const side = (segs: number[], v: ArrayLike<number>) => {
    let sum = 0, any = false;
    for (const s of segs) {
      if (Number.isFinite(v[s])) { sum += v[s]; any = true; }
    }
    return any ? sum : NaN;
  };
  return {a: Float64Array.from(al.segments, (s) => side(s.aSegs, valuesA)),
          b: Float64Array.from(al.segments, (s) => side(s.bSegs, valuesB))};
}

/** One segment of a changed run on one side: its code point span in that side's text, its index and value. */
export interface RunPiece {
  start: number;
  end: number;
  seg: number;
  value: number;
}

/**
 * Per aligned segment, the segments of one side that a changed run (not 'equal') holds, each with its own value
 * (`values` per segment of that side); [] for an equal one. A changed run's aligned value sums them: no map shows
 * that sum, so the comparison colours each of them by its own value.
 */
export function runPieces(al: Alignment, side: 'a' | 'b', seg: Segmentation, values: ArrayLike<number>): RunPiece[][] {
  return al.segments.map((s) => {
    if (s.kind === 'equal') return [];
    const [lo, hi] = side === 'a' ? s.a : s.b;
    return (side === 'a' ? s.aSegs : s.bSegs).map((g) => ({
      start: Math.max(seg.starts[g], lo), end: Math.min(seg.ends[g], hi), seg: g, value: values[g]}));
  });
}

/** b − a per aligned segment; text only one side has counts 0 on the other; NaN where neither has a value. */
export function difference(al: Alignment, a: Float64Array, b: Float64Array): Float64Array {
  return Float64Array.from(al.segments, (s, k) => (s.bSegs.length ? b[k] : 0) - (s.aSegs.length ? a[k] : 0));
}
