/**
 * Compare an edit, the pure part: the values per aligned segment (alignment.ts) on one shared scale, the
 * difference B − A, the `compare` payload of `_<model>_compare` (lit_app/wrappers/compare.py) and its input.
 *
 * A = the pinned datapoint (LIT's *Pin datapoint*, or the parent of *Add and compare*), B = the
 * selected one.
 */
import {COMPARE_VIEW_FIELD, MAX_NEW_TOKENS_FIELD, OLD_ANSWER_FIELD, PINNED_MAX_NEW_TOKENS_FIELD, PINNED_PROMPT_FIELD,
  PINNED_SYSTEM_FIELD, PINNED_TARGET_FIELD, WITH_PINNED_SALIENCE_FIELD, type CompareView} from '../../shared/fields.js';
import {aggregate, matchesOnly, type Segmentation} from '../../shared/aggregate/index.js';
import {maxAbs, type ColorScale} from '../../shared/colormap.js';
import {codePointToUtf16} from '../../shared/pieces.js';
import {derivedInput, type IndexedInputLike} from '../../shared/request.js';
import {numTargets, type SaliencePayload} from '../payload.js';
import {spanSalience} from '../spans.js';
import {alignedValues, difference, runPieces, type Alignment, type RunPiece} from './alignment.js';

/** What the compared prompt shows: both values (top half A, bottom half B, one scale) or the difference B − A. */
export type CompareMode = 'both' | 'difference';

/** Both sides' values per aligned prompt segment on one shared scale, and the difference B − A. */
export interface PromptValues {
  a: Float64Array;
  b: Float64Array;
  diff: Float64Array;
  scale: ColorScale;
  diffScale: ColorScale;
  /** Per aligned segment of a changed run, each side's own segments and values (alignment.ts runPieces): "both"
   * colours them one by one, as the maps do; the difference has one value per run (its segments do not pair up). */
  runs: {a: RunPiece[][]; b: RunPiece[][]};
}

/**
 * Token values summed per segment (aggregate 'sum'; a regex's text between matches is context, as in the map:
 * matchesOnly), per aligned segment (alignedValues), B − A and both scales. The shared scale follows the map's
 * rule on each side: the largest |value| of one segment of its prompt (before code point `promptEnds`), not of the
 * aligned sums: a replaced run sums its segments and would set a scale no map of either prompt has (issue 45 §5:
 * the comparison's legend and the map's differed for one method on one prompt); such a run saturates instead. The
 * map below takes this scale while the comparison shows its method (room.ts scaleFor).
 */
export function promptValues(prompts: Alignment, segA: Segmentation, tokA: ArrayLike<number>, segB: Segmentation,
                             tokB: ArrayLike<number>, promptEnds: readonly [number, number], signed: boolean,
                             intensity = 1): PromptValues {
  const valsA = matchesOnly(aggregate(tokA, segA, 'sum'), segA), valsB = matchesOnly(aggregate(tokB, segB, 'sum'), segB);
  const {a, b} = alignedValues(prompts, valsA, valsB);
  const diff = difference(prompts, a, b);
  const scale = sharedScale(signed, promptSegmentValues(valsA, segA, promptEnds[0]),
                            promptSegmentValues(valsB, segB, promptEnds[1]), intensity);
  return {a, b, diff, scale, diffScale: differenceScale(diff, intensity),
          runs: {a: runPieces(prompts, 'a', segA, valsA), b: runPieces(prompts, 'b', segB, valsB)}};
}

/** The values of the segments that start before code point `promptEnd` (the prompt's: what sets a map's scale). */
export function promptSegmentValues(values: ArrayLike<number>, seg: Segmentation, promptEnd: number): number[] {
  const out: number[] = [];
  for (let s = 0; s < values.length && seg.starts[s] < promptEnd; s++) out.push(values[s]);
  return out;
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
 * The request for the pinned response under the selected prompt: the selected datapoint plus pinned_*, `view` (the
 * section that asks, Compare an edit or Compare models: the server supersedes a page's comparisons per view) and
 * `counts` (../request.ts countFields: the extra method shown, so the pinned salience has it; or segmentFields: the
 * segment method shown, measured on both prompts);
 * `tag` names the method and count in the derived id; `oldAnswer` also asks for the pinned answer's salience
 * under the selected prompt (one forward + backward on the server); `withSalience` asks for the pinned
 * datapoint's whole-response salience too (the compare view; compare_models wants the log-probs only).
 */
export function compareInput(selected: IndexedInputLike, pinned: IndexedInputLike, view: CompareView,
                             counts: Record<string, unknown> = {}, tag = '', oldAnswer = false,
                             withSalience = false): IndexedInputLike {
  const str = (v: unknown) => (typeof v === 'string' ? v : '');
  return derivedInput(selected, {
    ...counts,
    [OLD_ANSWER_FIELD]: oldAnswer,
    [WITH_PINNED_SALIENCE_FIELD]: withSalience,
    [COMPARE_VIEW_FIELD]: view,
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
