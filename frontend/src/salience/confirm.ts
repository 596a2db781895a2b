/**
 * What the user sees first at sentence granularity and coarser, then the confirm step (issue 42 §5,
 * docs/architecture.md "What the user sees first"): the first map is the method the server names for the
 * granularity (`first_map_at`: the fastest method whose held-out agreement with exact leave-one-out clears the bar
 * of sequence_salience/first_map.py), else the gradient of the first highlight; meanwhile the granularity's default
 * segment method (`default_at`: exact leave one segment out) is measured, and once its values are there it replaces
 * the first map, and the view says whether it confirmed the first map (the same top segment and the same top three)
 * or what changed (the top segment and the top three before and after).
 *
 * Pure logic without a DOM or requests: the next automatic step (`nextAutoStep`, which controller.ts follows with its
 * segment requests and polls), the comparison of the two maps (`compareTops`) and its words (`describeVerdict`).
 * No method name is spelled here: the registry says which method is which.
 */
import {aggregate, matchesOnly, type Segmentation} from '../shared/aggregate/index.js';
import type {MethodRegistry, SegmentMethodInfo} from '../shared/methods.js';
import {topSegments} from './rank.js';

/** How many top segments the confirm step compares: the top three (as the held-out top-3 agreement). */
export const CONFIRM_TOP_K = 3;

/**
 * The segment method the server names the first map at `granularity` (its record's `first_map_at`), or undefined:
 * the gradient stays the first map (also on an older server, which publishes no `first_map_at`).
 */
export function firstMapAt(reg: MethodRegistry, granularity: string): SegmentMethodInfo | undefined {
  return reg.segments.find((m) => ((m as {first_map_at?: unknown}).first_map_at as string[] | undefined ?? [])
      .includes(granularity));
}

/** What the automatic steps do next (nextAutoStep). */
export type AutoStep =
  /** Nothing (no automatic steps at this granularity, the user chose a method, or the exact map is on screen). */
  | {kind: 'none'}
  /** Start or poll this segment method's job (the first map's, then the exact one's). */
  | {kind: 'measure'; method: string}
  /** The first map's values, or its values so far (its job's first look), are there: show them (then, its job
   * still running, measure it on; once done, the exact one is measured next). */
  | {kind: 'show-first'; method: string}
  /** The exact values are there: keep what the first map showed (for the verdict), then show them. */
  | {kind: 'show-exact'; method: string};

/** What nextAutoStep decides on. */
export interface AutoState {
  /** Whether the automatic steps still run for this selection (false once the user chose a method or stopped them). */
  auto: boolean;
  /** The method on screen, and whether it is a segment method. */
  onScreen: string;
  onScreenIsSegment: boolean;
  /** Whether the module put the segment method on screen itself (the first map or the exact map). */
  autoShown: boolean;
  /** The first map's segment method at this granularity (firstMapAt), or null: the gradient. */
  first: string | null;
  /** The exact method that confirms it (the granularity's default segment method), or null: no automatic steps. */
  exact: string | null;
  /** Whether this segment method's values (this granularity, span and removal) are there. */
  has(method: string): boolean;
  /** Whether its values so far are there (a running job's first look: attention_verified's estimate). */
  hasPartial(method: string): boolean;
  /** Whether the first map's job failed for these settings (then the gradient stays the first map). */
  firstFailed: boolean;
}

/**
 * The next automatic step: with the gradient on screen, measure the first map's method (when the server names one
 * and it has not failed) and show it once its values so far (its first look) or its values are there; measure it
 * on until its values are there (its job's values so far on screen meanwhile); then measure the exact method, and
 * once measured show it. A segment method on screen that the module did not put there, or the exact one, ends the
 * steps.
 */
export function nextAutoStep(s: AutoState): AutoStep {
  if (!s.auto || s.exact === null) return {kind: 'none'};
  if (s.onScreenIsSegment && !(s.autoShown && s.onScreen === s.first && s.first !== s.exact)) return {kind: 'none'};
  if (s.first !== null && s.first !== s.exact && !s.firstFailed) {
    const there = s.has(s.first);
    if (!s.onScreenIsSegment && (there || s.hasPartial(s.first))) return {kind: 'show-first', method: s.first};
    if (!there) return {kind: 'measure', method: s.first};
  }
  return s.has(s.exact) ? {kind: 'show-exact', method: s.exact} : {kind: 'measure', method: s.exact};
}

/** What the first map showed when the exact map replaced it: its method and token values for the target span. */
export interface FirstMapShown {
  method: string;
  signed: boolean;
  /** <float>[N] token values of `method` for the span (the gradient's, or a segment method's spread over its tokens). */
  tokens: Float64Array;
  /** The exact method's cache key of the values it was compared with (granularity, span, removal): a verdict
   * belongs to those values only. */
  exactKey: string;
}

/** The exact map against the first one, over the top segments (indices into one segmentation, in rank order). */
export interface Verdict {
  /** The same top segment and the same set of top three. */
  confirmed: boolean;
  before: number[];
  after: number[];
  /** Segments in the exact top three that were not in the first map's, and those that left it. */
  entered: number[];
  left: number[];
}

/**
 * Compares the top CONFIRM_TOP_K segments of the first map and of the exact map, each ranked as the module's top
 * list ranks it (rank.ts: by |value| when signed, by value otherwise; NaN, zero and `skip`, the target's own
 * segments, left out).
 */
export function compareTops(first: ArrayLike<number>, firstSigned: boolean, exact: ArrayLike<number>,
                            exactSigned: boolean, skip: ReadonlySet<number> = new Set(), k = CONFIRM_TOP_K): Verdict {
  const before = topSegments(first, k, firstSigned, skip).map((r) => r.seg);
  const after = topSegments(exact, k, exactSigned, skip).map((r) => r.seg);
  const entered = after.filter((s) => !before.includes(s));
  const left = before.filter((s) => !after.includes(s));
  const confirmed = after.length > 0 && before[0] === after[0] && entered.length === 0 && left.length === 0;
  return {confirmed, before, after, entered, left};
}

/** The verdict for the segmentation on screen: both maps' token values summed per segment (as the module does;
 * a regex's gaps left out), then compareTops. */
export function verdictOn(seg: Segmentation, first: FirstMapShown, exactTokens: ArrayLike<number>, exactSigned: boolean,
                          skip: ReadonlySet<number>): Verdict {
  const per = (tokens: ArrayLike<number>) => matchesOnly(aggregate(tokens, seg, 'sum'), seg);
  return compareTops(per(first.tokens), first.signed, per(exactTokens), exactSigned, skip);
}

/** The words of a verdict: a headline and, when something changed, the top segments before and after. */
export interface VerdictWords {
  headline: string;
  /** "was", "now" lines ('' when confirmed). */
  before: string;
  after: string;
  moved: string;
}

/**
 * "Confirmed by exact leave-one-out: the same top sentence and top three as the first map (Gradient norm)", or
 * "Changed by exact leave-one-out: the top sentence is now “…” (was “…” in the first map, Gradient norm)" with the
 * top three before and after and the segments that moved. `exactLabel` names the exact method as the registry
 * labels it, `textOf` gives a segment's text.
 */
export function describeVerdict(v: Verdict, firstLabel: string, exactLabel: string, noun: string,
                                textOf: (seg: number) => string): VerdictWords {
  const by = `by exact ${exactLabel.toLowerCase()}`;
  const quote = (s: number | undefined) => s === undefined ? '(none)' : `“${clip(textOf(s))}”`;
  const list = (segs: number[]) => segs.length === 0 ? '(none)' : segs.map((s, i) => `${i + 1}. ${quote(s)}`).join(' ');
  if (v.confirmed) {
    return {headline: `Confirmed ${by}: the same top ${noun} and top ${v.after.length} as the first map (${firstLabel}).`,
            before: '', after: '', moved: ''};
  }
  const top = v.before[0] === v.after[0]
      ? `the top ${noun} stays ${quote(v.after[0])}, the top ${CONFIRM_TOP_K} changed`
      : `the top ${noun} is now ${quote(v.after[0])} (was ${quote(v.before[0])})`;
  const moved = [v.entered.length ? `in: ${v.entered.map(quote).join(', ')}` : '',
                 v.left.length ? `out: ${v.left.map(quote).join(', ')}` : ''].filter((x) => x !== '').join('; ');
  return {headline: `Changed ${by}: ${top}.`, before: `First map (${firstLabel}): ${list(v.before)}`,
          after: `Exact: ${list(v.after)}`, moved};
}

function clip(text: string): string {
  const t = text.trim().replace(/\s+/g, ' ');
  return t.length > 40 ? t.slice(0, 39) + '…' : t;
}
