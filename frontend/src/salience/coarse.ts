/**
 * What coarse-to-fine leave one out measured (sequence_salience/methods/coarse_to_fine.py): the segments it
 * refined have their own measured value; the others lie inside a coarser unit (a sentence, a paragraph) that did
 * not matter and carry its value. Pure logic: the notes the prompt view puts on unmeasured segments, the status
 * line's summary and the progress of a job that comes in stages.
 */
import {describeProgress, timeLeft, type DetailStatus} from './payload.js';
import type {SegmentPayload} from './segment_payload.js';

/**
 * The `coarse_granularity` mark of a segment whose value is a method's estimate rather than a coarser unit's measured
 * value (sequence_salience/methods/base.py ESTIMATE_MARK; tests/unit/test_unmeasured_wording.py keeps them equal).
 */
export const ESTIMATE_MARK = 'estimate';

/**
 * "inside a sentence that did not matter (coarse value 0.012)", or "estimated, not measured (estimate 0.012)": the
 * title of an unmeasured segment (methods/base.py unmeasured_note words the CLI's the same way).
 */
export function coarseNote(mark: string, value: number): string {
  if (mark === ESTIMATE_MARK) return `estimated, not measured (estimate ${value.toPrecision(3)})`;
  return `inside a ${mark} that did not matter (coarse value ${value.toPrecision(3)})`;
}

/** Where the values not measured come from (methods/base.py unmeasured_origin). */
function unmeasuredOrigin(marks: readonly string[]): string {
  const set = Array.from(new Set(marks.filter((g) => g !== ''))).sort();
  const units = set.filter((g) => g !== ESTIMATE_MARK);
  const parts: string[] = [];
  if (units.length) {
    parts.push(`inside a ${units.join(' or ')} that did not matter (its coarse value shared among its parts)`);
  }
  if (set.includes(ESTIMATE_MARK)) parts.push('estimated, not measured');
  return parts.join('; ');
}

/**
 * The note of each unmeasured segment, by its index into the segmentation at this granularity (the payload's
 * `segment_index`); empty when every value was measured.
 */
export function unmeasuredNotes(s: SegmentPayload | null): Map<number, string> {
  const notes = new Map<number, string>();
  if (s?.measured === undefined) return notes;
  s.measured.forEach((m, i) => {
    const value = s.coarse_values?.[i];
    if (!m && typeof value === 'number') notes.set(s.segment_index[i], coarseNote(s.coarse_granularity?.[i] ?? 'unit', value));
  });
  return notes;
}

/** "18 of 92 words measured exactly; hatched: inside a sentence or paragraph that did not matter (…)", or "3 of 36
 * paragraphs measured exactly; hatched: estimated, not measured", or '' when every value was measured. */
export function describeRefinement(s: SegmentPayload, noun: string): string {
  if (s.measured === undefined) return '';
  const measured = s.measured.filter((m) => m).length;
  const origin = unmeasuredOrigin(s.coarse_granularity ?? []);
  return `${measured} of ${s.measured.length} ${noun}s measured exactly; hatched: ${origin}`;
}

/**
 * "coarse pass: 5 / 10 forwards", "refining: 21 / 32 forwards", or "21 / 32 forwards" for a job without stages.
 * A segment job reports the edited prompts it scored (sequence_salience/ablation/engine.py ProgressFrame); the
 * unedited prompt's forward ran before the first of them (the PrefixScorer's base forward), so the line counts it
 * too, as the measure button's cost ("~9 forwards") and the result (its stats.rows) do (issue 45: the progress
 * said "8 forwards" and the result "9 forwards").
 */
export function stageProgress(d: DetailStatus): string {
  const count = `${d.done + 1} / ${d.total + 1} forwards`;
  return d.stage ? `${d.stage}: ${count}` : count;
}

/**
 * A segment job's progress after the status line's words: " (waiting for the model…)" before it started,
 * " (coarse pass: 5 / 10 forwards · about 4 s left)" while it runs, " (paused: another user's work goes first)" while
 * it waits for the model before its first report (another client's equal job holding it: was nothing), '' otherwise.
 */
export function segmentProgress(d: DetailStatus | null): string {
  if (d === null || d.state === 'queued') return ' (waiting for the model…)';
  if (d.state !== 'running') return '';
  if (d.total > 0) return ` (${stageProgress(d)}${describeProgress(d).replace(/^ \d+ %/, '')})`;
  return d.waiting ? ` (${timeLeft(d)})` : '';
}
