/**
 * Compare models, the pure part: two models' whole-response salience of one datapoint on one
 * shared scale per aligned prompt segment, the difference B − A, the diff of their responses and
 * each model's log p of the other's answer. The alignment, aligned values, scales and the cross
 * payload are the prompt comparison's (../compare/logic.ts); the segments the aggregation's
 * (../shared/aggregate/). The same definitions as sequence_salience/compare/models.py.
 */
import {RESPONSE_FIELD} from '../shared/fields.js';
import {segment, type Granularity} from '../shared/aggregate/index.js';
import {
  alignSegmentations, alignTexts, compareInput, promptValues, responseOf, type Alignment, type CrossPayload,
  type PromptValues,
} from '../compare/logic.js';
import {salienceModelFor, type IndexedInputLike, type ModelInfoLike} from '../shared/request.js';

/** The method both maps show (sequence_salience.compare DEFAULT_METHOD). */
export const COMPARE_MODELS_METHOD = 'grad_x_input';

/** The first two selected models that generate and have a salience companion, or null. */
export function modelPair(currentModels: readonly string[], models: Record<string, ModelInfoLike>):
    [string, string] | null {
  const usable = currentModels.filter((m) => RESPONSE_FIELD in (models[m]?.spec?.output ?? {}) &&
      salienceModelFor(m, models) !== null);
  return usable.length >= 2 ? [usable[0], usable[1]] : null;
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

/** Both sides aligned, their values per aligned prompt segment on one scale, and B − A. */
export function compareSides(a: Side, b: Side, signed: boolean, granularity: Granularity = 'word'): ModelsView {
  const seg = (s: Side) => segment(s.text, s.offsets, granularity, {roleSpans: s.roleSpans});
  const segA = seg(a), segB = seg(b);
  const prompts = alignSegmentations(a.text, segA, b.text, segB, [0, a.promptEnd], [0, b.promptEnd]);
  const responseA = responseOf(a.text, a.promptEnd), responseB = responseOf(b.text, b.promptEnd);
  return {
    labels: [a.model, b.model], responseA, responseB, prompts, responses: alignTexts(responseA, responseB),
    ...promptValues(prompts, segA, a.values, segB, b.values, signed),
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
  return compareInput(selected, pinned);
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
