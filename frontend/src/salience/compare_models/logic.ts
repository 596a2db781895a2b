/**
 * Compare models, the pure part: two models' whole-response salience of one datapoint on one
 * shared scale per aligned prompt segment, the difference B − A, the diff of their responses and
 * each model's log p of the other's answer. The alignment, aligned values, scales and the cross
 * payload are the prompt comparison's (../compare/alignment.ts, logic.ts); the segments the aggregation's
 * (../../shared/aggregate/). The same definitions as sequence_salience/compare/models.py.
 */
import {COMPARE_VIEW_MODELS, RESPONSE_FIELD} from '../../shared/fields.js';
import {segment, type Granularity} from '../../shared/aggregate/index.js';
import {alignSegmentations, alignTexts, type Alignment} from '../compare/alignment.js';
import {compareInput, promptValues, responseOf, type CrossPayload, type PromptValues} from '../compare/logic.js';
import {extraKey, segmentKey, type Extra, type SegmentAsk} from '../request.js';
import type {MethodRegistry} from '../../shared/methods.js';
import {salienceModelFor, type IndexedInputLike, type ModelInfoLike} from '../../shared/request.js';

/** The first two selected models that generate and have a salience companion, or null. */
export function modelPair(currentModels: readonly string[], models: Record<string, ModelInfoLike>):
    [string, string] | null {
  const usable = currentModels.filter((m) => RESPONSE_FIELD in (models[m]?.spec?.output ?? {}) &&
      salienceModelFor(m, models) !== null);
  return usable.length >= 2 ? [usable[0], usable[1]] : null;
}

/**
 * The pair a salience module instance shows the comparison for: LIT shows the module once per selected model,
 * and only the instance of the pair's first model (A) holds the section, so it is there once. Null otherwise.
 */
export function pairShownBy(shownModel: string, currentModels: readonly string[],
                            models: Record<string, ModelInfoLike>): [string, string] | null {
  const pair = modelPair(currentModels, models);
  return pair !== null && pair[0] === shownModel ? pair : null;
}

/** What the salience module shows: its Method selector, the gradient method it goes back to, the counts. */
export interface MethodChoice {
  method: string;
  /** The token method the module shows instead of a segment method ("Show gradient"). */
  gradient: string;
  /** Count of each method computed on request (IG steps, SmoothGrad samples), by method name. */
  counts: Readonly<Record<string, number>>;
  /** A segment method's settings as the module measures it (../segments.ts `ask`), else null. */
  segment: SegmentAsk | null;
}

/** The method both maps show, as the server's registry names it. */
export interface ComparedMethod {
  method: string;
  /** "Integrated gradients (16 steps)": the registry's label, with the count of a method computed on request. */
  label: string;
  /** The method computed on request with its count (asked for in each model's request), or null. */
  extra: Extra | null;
  /** A segment method's settings (each model's whole response is measured with them), or null. */
  segment: Omit<SegmentAsk, 'span'> | null;
  /** What to know about the values ('' when nothing): a segment method is measured per segment. */
  note: string;
  /** Changes with the method and its count (a new key asks again). */
  key: string;
}

/**
 * The method Compare models shows: the salience module's, with its count, or a segment method with the module's
 * segmentation (measured on each model's whole response). Null until the module has a method.
 */
export function comparedMethod(reg: MethodRegistry | null, shown: MethodChoice): ComparedMethod | null {
  if (shown.method === '') return null;
  if (reg === null) {
    return {method: shown.method, label: shown.method, extra: null, segment: null, note: '', key: shown.method};
  }
  const seg = reg.segment(shown.method);
  if (seg !== undefined && shown.segment !== null && shown.segment.method === shown.method) {
    const {method, count, granularity, pattern, removal} = shown.segment;  // not the span: the whole response
    const ask = {method, count, granularity, pattern, removal};
    return {method: shown.method, label: reg.label(shown.method), extra: null, segment: ask, key: `seg:${segmentKey(ask)}`,
            note: `measured per ${ask.granularity === 'regex' ? 'match of the custom pattern' : ask.granularity} ` +
                  'on each model\'s whole response'};
  }
  const method = seg === undefined ? shown.method : shown.gradient || reg.tokens[0]?.name || shown.method;
  const info = reg.extra(method);
  const extra = info === undefined ? null : {method, count: shown.counts[method] ?? info.default_count};
  return {method, label: extra === null ? reg.label(method) : `${reg.label(method)} (${extra.count} ${info!.count_unit})`,
          extra, segment: null, note: '', key: extra === null ? method : extraKey(extra)};
}

/** One model's side: the salience payload's text and offsets and the whole response's token values. */
export interface Side {
  model: string;
  text: string;
  promptEnd: number;
  offsets: ReadonlyArray<readonly [number, number]>;
  roleSpans: ReadonlyArray<readonly [number, number, string]>;
  /** [N] whole-response salience of each token (the payload's span values of the method). */
  values: ArrayLike<number>;
  /** log p of its own response, per token (the payload's target_logprobs). */
  targetLogprobs: ArrayLike<number>;
}

/** Both sides' prompt values (a, b, diff, scale, diffScale: ../compare/logic.ts PromptValues) and the rest. */
export interface ModelsView extends PromptValues {
  labels: [string, string];
  responseA: string;
  responseB: string;
  prompts: Alignment;
  responses: Alignment;
}

function sum(v: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < v.length; i++) s += v[i];
  return s;
}

/** Code point length (positions in the payload are code points). */
function cpLength(text: string): number {
  return Array.from(text).length;
}

/** Both sides aligned, their values per aligned prompt segment on one scale (at the module's `intensity`), and B − A. */
export function compareSides(a: Side, b: Side, signed: boolean, granularity: Granularity = 'word', intensity = 1):
    ModelsView {
  const seg = (s: Side) => segment(s.text, s.offsets, granularity, {roleSpans: s.roleSpans});
  const segA = seg(a), segB = seg(b);
  const prompts = alignSegmentations(a.text, segA, b.text, segB, [0, a.promptEnd], [0, b.promptEnd]);
  const responseA = responseOf(a.text, a.promptEnd), responseB = responseOf(b.text, b.promptEnd);
  return {
    labels: [a.model, b.model], responseA, responseB, prompts, responses: alignTexts(responseA, responseB),
    ...promptValues(prompts, segA, a.values, segB, b.values, [a.promptEnd, b.promptEnd], signed, intensity),
  };
}

/** Whole-response log p of one model's own answer (its salience payload's target_logprobs). */
export function ownLogprob(side: Side): number {
  return sum(side.targetLogprobs);
}

/**
 * The request for `model`'s log p of `answer` (the other model's response) after the selected
 * prompt: the compare wrapper's input (../compare/logic.ts) with the selected datapoint "pinned"
 * to itself with `answer` as its target; the answer's log p under this model is `under_b`.
 */
export function crossInput(selected: IndexedInputLike, answer: string, answerOf: string): IndexedInputLike {
  const pinned = {id: `${selected.id}~answer-of-${answerOf}-${cpLength(answer)}`,
                  data: {...selected.data, target: answer}, meta: {}};
  return compareInput(selected, pinned, COMPARE_VIEW_MODELS);
}

/** Rows of the log p table: each answer's log p under model A and under model B. */
export interface CrossRow {
  answerOf: string;
  underA: number;
  underB: number;
}

/** crossA: model A's answer scored by model B (`under_b`); crossB: model B's answer scored by model A. */
export function crossRows(view: ModelsView, a: Side, b: Side, crossA: CrossPayload, crossB: CrossPayload): CrossRow[] {
  return [
    {answerOf: view.labels[0], underA: ownLogprob(a), underB: crossA.under_b.total},
    {answerOf: view.labels[1], underA: crossB.under_b.total, underB: ownLogprob(b)},
  ];
}
