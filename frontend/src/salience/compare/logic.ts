/**
 * Compare an edit, the pure part: the segment-level alignment of two texts (the rules of
 * sequence_salience/compare/alignment.py), the values per aligned segment on one shared scale, the
 * difference B − A, the `compare` payload of `_<model>_compare` (lit_app/wrappers/compare.py) and its input.
 *
 * A = the pinned datapoint (LIT's *Pin datapoint*, or the parent of *Add and compare*), B = the
 * selected one. Units are the aggregation's segments (../../shared/aggregate/), compared by their text
 * with whitespace collapsed; positions are code points. The diff is difflib's (`diffKeys`): the same
 * alignment as Python's on the hand-derived cases both test suites share (tests/data/alignment_cases.json).
 */
import {MAX_NEW_TOKENS_FIELD, OLD_ANSWER_FIELD, PINNED_MAX_NEW_TOKENS_FIELD, PINNED_PROMPT_FIELD, PINNED_SYSTEM_FIELD,
  PINNED_TARGET_FIELD, WITH_PINNED_SALIENCE_FIELD} from '../../shared/fields.js';
import {aggregate, segment, type Granularity, type Segmentation} from '../../shared/aggregate/index.js';
import {maxAbs, type ColorScale} from '../../shared/colormap.js';
import {codePointToUtf16} from '../../shared/pieces.js';
import {derivedInput, type IndexedInputLike} from '../../shared/request.js';
import {numTargets, type SaliencePayload} from '../payload.js';
import {spanSalience} from '../spans.js';

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
  const text = side === 'a' ? al.textA : al.textB;
  const [s, e] = side === 'a' ? al.segments[k].a : al.segments[k].b;
  const u16 = codePointToUtf16(text);
  return text.slice(u16[s], u16[e]);
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

/** b − a per aligned segment; text only one side has counts 0 on the other; NaN where neither has a value. */
export function difference(al: Alignment, a: Float64Array, b: Float64Array): Float64Array {
  return Float64Array.from(al.segments, (s, k) => (s.bSegs.length ? b[k] : 0) - (s.aSegs.length ? a[k] : 0));
}

/** What the compared prompt shows: both values (top half A, bottom half B, one scale) or the difference B − A. */
export type CompareMode = 'both' | 'difference';

/** Both sides' values per aligned prompt segment on one shared scale, and the difference B − A. */
export interface PromptValues {
  a: Float64Array;
  b: Float64Array;
  diff: Float64Array;
  scale: ColorScale;
  diffScale: ColorScale;
}

/** Token values summed per segment (aggregate 'sum'), per aligned segment (alignedValues), B − A and both scales. */
export function promptValues(prompts: Alignment, segA: Segmentation, tokA: ArrayLike<number>, segB: Segmentation,
                             tokB: ArrayLike<number>, signed: boolean, intensity = 1): PromptValues {
  const {a, b} = alignedValues(prompts, aggregate(tokA, segA, 'sum'), aggregate(tokB, segB, 'sum'));
  const diff = difference(prompts, a, b);
  return {a, b, diff, scale: sharedScale(signed, a, b, intensity), diffScale: differenceScale(diff, intensity)};
}

/** The response part of a payload's text: after code point `promptEnd`. */
export function responseOf(text: string, promptEnd: number): string {
  return text.slice(codePointToUtf16(text)[promptEnd]);
}

/** One colour scale for both sides: the largest |value| of either. */
export function sharedScale(signed: boolean, a: ArrayLike<number>, b: ArrayLike<number>, intensity = 1): ColorScale {
  const all = [...Array.from(a), ...Array.from(b)].filter((v) => Number.isFinite(v));
  return {signed, scale: maxAbs(all), intensity};
}

/** The signed scale of the difference. */
export function differenceScale(diff: ArrayLike<number>, intensity = 1): ColorScale {
  return {signed: true, scale: maxAbs(Array.from(diff).filter((v) => Number.isFinite(v))), intensity};
}

// ------------------------------------------------------------ the server's compare payload

/** The compare wrapper of generation model `model` (lit_app/schema/fields.py compare_model_name). */
export function compareModelName(model: string): string {
  return `_${model}_compare`;
}

export interface TokenLogprobs {
  response: string;
  ids: number[];
  tokens: string[];
  logprobs: number[];
  total: number;
}

/** `compare` of `_<model>_compare`: the pinned response under the pinned (a) and the selected (b) prompt,
 * and the pinned datapoint's whole-response salience (a salience payload, parsed by ../payload.ts). */
export interface CrossPayload {
  under_a: TokenLogprobs;
  under_b: TokenLogprobs;
  delta: number;
  per_token_delta: number[] | null;
  forwards: number;
  pinned_salience: unknown;
  pinned_salience_passes: number;
  /** With `old_answer`: the pinned answer's salience under the selected prompt (a salience payload), else null. */
  old_answer_salience: unknown;
  /** With a segment method asked for: each side's whole-response segment values (the `salience` of a finished
   * segment request, parsed by ../payload.ts parseSegments); the old answer's with `old_answer`; else null. */
  pinned_segments: unknown;
  selected_segments: unknown;
  old_answer_segments: unknown;
}

function check(cond: boolean, what: string): void {
  if (!cond) throw new Error(`Malformed compare payload: ${what}. Fix: restart the server with this version.`);
}

function parseSide(x: unknown, name: string): TokenLogprobs {
  const s = x as Record<string, unknown> | null;
  check(s !== null && typeof s === 'object', `"${name}" is not an object`);
  check(typeof s!['response'] === 'string', `"${name}.response" is not a string`);
  for (const f of ['ids', 'tokens', 'logprobs']) check(Array.isArray(s![f]), `"${name}.${f}" is not a list`);
  const n = (s!['ids'] as unknown[]).length;
  check((s!['tokens'] as unknown[]).length === n && (s!['logprobs'] as unknown[]).length === n,
        `"${name}" has ${n} ids but other lengths of tokens or logprobs`);
  check(typeof s!['total'] === 'number', `"${name}.total" is not a number`);
  return s as unknown as TokenLogprobs;
}

export function parseCross(x: unknown): CrossPayload {
  const p = x as Record<string, unknown> | null;
  check(p !== null && typeof p === 'object', 'not an object');
  const a = parseSide(p!['under_a'], 'under_a');
  const b = parseSide(p!['under_b'], 'under_b');
  check(typeof p!['delta'] === 'number', '"delta" is not a number');
  const per = p!['per_token_delta'];
  check(per === null || (Array.isArray(per) && per.length === a.ids.length), '"per_token_delta" does not match the tokens');
  const num = (f: string) => (typeof p![f] === 'number' ? (p![f] as number) : 0);
  return {under_a: a, under_b: b, delta: p!['delta'] as number, per_token_delta: per as number[] | null,
          forwards: num('forwards'), pinned_salience: p!['pinned_salience'] ?? null,
          pinned_salience_passes: num('pinned_salience_passes'), old_answer_salience: p!['old_answer_salience'] ?? null,
          pinned_segments: p!['pinned_segments'] ?? null, selected_segments: p!['selected_segments'] ?? null,
          old_answer_segments: p!['old_answer_segments'] ?? null};
}

/**
 * The request for the pinned response under the selected prompt: the selected datapoint plus pinned_*
 * and `counts` (../request.ts countFields: the extra method shown, so the pinned salience has it; or
 * segmentFields: the segment method shown, measured on both prompts);
 * `tag` names the method and count in the derived id; `oldAnswer` also asks for the pinned answer's salience
 * under the selected prompt (one forward + backward on the server); `withSalience` asks for the pinned
 * datapoint's whole-response salience too (the compare view; compare_models wants the log-probs only).
 */
export function compareInput(selected: IndexedInputLike, pinned: IndexedInputLike,
                             counts: Record<string, unknown> = {}, tag = '', oldAnswer = false,
                             withSalience = false): IndexedInputLike {
  const str = (v: unknown) => (typeof v === 'string' ? v : '');
  return derivedInput(selected, {
    ...counts,
    [OLD_ANSWER_FIELD]: oldAnswer,
    [WITH_PINNED_SALIENCE_FIELD]: withSalience,
    [PINNED_PROMPT_FIELD]: str(pinned.data['prompt']),
    [PINNED_SYSTEM_FIELD]: str(pinned.data['system']),
    [PINNED_TARGET_FIELD]: str(pinned.data['target']),
    // the pinned row's own budget (absent: none), so its generated response is the one shown for it
    [PINNED_MAX_NEW_TOKENS_FIELD]: pinned.data[MAX_NEW_TOKENS_FIELD] ?? '',
  }, `compare-${pinned.id}${tag ? `-${tag}` : ''}${oldAnswer ? '-old' : ''}${withSalience ? '-sal' : ''}`);
}

/** A payload's whole-response salience for `method` (`linear`: its registry record's): from its matrix, else the
 * span it holds; null if neither. */
export function wholeResponseValues(p: SaliencePayload, method: string, linear: boolean): Float64Array | null {
  const T = numTargets(p);
  const m = p.methods[method];
  const fromMatrix = m === undefined ? null : spanSalience(m, {t0: 0, t1: T}, p.tokens.length, linear);
  const fromSpan = p.spans?.[`0:${T}`]?.[method];
  return fromMatrix ?? (fromSpan == null ? null : Float64Array.from(fromSpan));
}

/** Whether the module shows the comparison: LIT's compare mode on, a pinned datapoint, another one selected. */
export function isComparing(enabled: boolean, pinned: IndexedInputLike | null, selected: IndexedInputLike | null):
    boolean {
  return enabled && pinned !== null && selected !== null && pinned.id !== selected.id;
}

/** "−4.43 (B makes the old answer less likely)" */
export function describeDelta(delta: number): string {
  const dir = delta > 0 ? 'more' : delta < 0 ? 'less' : 'equally';
  const sign = delta > 0 ? '+' : delta < 0 ? '−' : '±';
  return `${sign}${Math.abs(delta).toFixed(3)} (the edit makes the pinned answer ${dir} likely)`;
}
