/**
 * An intervention run in the "Inside the model" module: its steps as shown (from the job's status while it
 * runs, from the payload's steps once done), its share done, and the before/after comparison of its result,
 * rows as their parts arrive. Pure: no DOM, no LIT.
 */
import {formatDelta, formatProb, formatRank, showToken} from './logic.js';
import type {InterventionPayload, PartialIntervention, RunJob, RunStep, SidePayload} from './payload.js';

export interface ComparisonRow {
  label: string;
  before: string;
  after: string;
  changed: boolean;
}

/**
 * The before/after table of an intervention result, or of a run still going: the rows
 * whose parts have arrived (probabilities first, then the generated text, then salience).
 */
export function comparisonRows(r: InterventionPayload | PartialIntervention): ComparisonRow[] {
  const b = r.before, a = r.after;
  const rows: Array<Omit<ComparisonRow, 'changed'>> = [];
  if (b.trace && a.trace) {
    const tok = showToken(b.trace.target_token);
    const pb = b.trace.output.target_prob, pa = a.trace.output.target_prob;
    rows.push(
      {label: `p(${tok})`, before: formatProb(pb), after: pa === pb ? formatProb(pa) : `${formatProb(pa)} (${formatDelta(pa - pb)})`},
      {label: `rank of ${tok}`, before: formatRank(b.trace.output.target_rank), after: formatRank(a.trace.output.target_rank)},
      {label: 'top prediction', before: showToken(b.trace.output.tokens[0] ?? ''), after: showToken(a.trace.output.tokens[0] ?? '')},
    );
  }
  if (b.generation && a.generation) {
    // A streamed text (no stop reason yet) ends with "…": more is coming.
    rows.push({label: 'generated', before: b.generation.text,
               after: a.generation.stopped_by === null ? `${a.generation.text}…` : a.generation.text});
  }
  if (b.top_salient && a.top_salient) {
    rows.push({label: `most salient (${b.salience_method ?? ''})`, before: salientText(b.top_salient),
               after: salientText(a.top_salient)});
  }
  return rows.map((row) => ({...row, changed: row.before !== row.after}));
}

function salientText(top: SidePayload['top_salient']): string {
  return top.slice(0, 5).map(([, tok]) => tok.trim() || showToken(tok)).join(', ');
}

/** Per-layer p(target) after each FFN, before and under the interventions ([] until both traces are in). */
export function layerDeltas(r: InterventionPayload | PartialIntervention): Array<{layer: number; before: number; after: number}> {
  const b = r.before.trace, a = r.after.trace;
  if (!b || !a) return [];
  return b.layers.map((l, i) => ({
    layer: l.layer, before: l.after.target_prob, after: a.layers[i]?.after.target_prob ?? NaN,
  }));
}

// ---------------------------------------------------------- the run in steps

export const RUN_STEPS = ['trace', 'generate', 'salience'] as const;
const STEP_LABELS: Record<string, string> = {
  trace: 'Probabilities and ranks', generate: 'Regenerating the answer', salience: 'Salience of the new answer',
};


export interface StepView {
  name: string;
  label: string;
  state: 'pending' | 'running' | 'done';
  /** "12 / 64 tokens", "0.8 s", "before: cached" … */
  detail: string;
}

/** The step list as shown, from the job's status (running) or the final payload's steps (done). */
export function stepViews(steps: readonly RunStep[] | undefined, job: RunJob | null = null): StepView[] {
  const byName = new Map((steps ?? []).map((s) => [s.name, s]));
  return RUN_STEPS.map((name) => {
    const s = byName.get(name);
    const state = s?.state ?? (job?.stage === name ? 'running' : 'pending');
    const parts: string[] = [];
    if (state === 'running' && job?.stage === name && job.total > 0) {
      parts.push(name === 'generate' ? `${job.done} / ${job.total} tokens` : `${job.done} / ${job.total}`);
    }
    if (state === 'done' && s?.seconds != null) parts.push(`${s.seconds.toFixed(1)} s`);
    if (s?.before) parts.push(`before: ${s.before}`);
    return {name, label: STEP_LABELS[name] ?? name, state, detail: parts.join(' · ')};
  });
}

/** Share of the run done, in [0, 1]: whole steps plus the running step's fraction (generation: tokens of the most). */
export function runFraction(job: RunJob | null): number {
  if (job === null) return 0;
  const k = (RUN_STEPS as readonly string[]).indexOf(job.stage);
  if (k < 0) return 0;
  const within = job.total > 0 ? Math.max(0, Math.min(1, job.done / job.total)) : 0;
  return (k + within) / RUN_STEPS.length;
}

/** "Regenerating the answer: 12 / 64 tokens (45%)". */
export function describeRun(job: RunJob | null): string {
  if (job === null) return 'Starting…';
  const view = stepViews(job.partial?.steps, job).find((v) => v.name === job.stage);
  const label = view?.label ?? job.stage;
  return `${label}${view?.detail ? `: ${view.detail}` : '…'} (${Math.floor(runFraction(job) * 100)}%)`;
}
