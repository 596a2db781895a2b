/**
 * Pure logic of the "Inside the model" module: which token to trace for the
 * salience module's target, the intervention list, request ids, search polling,
 * the run's steps and the before/after comparison. No DOM, no LIT. The payloads
 * and their checks are payload.ts's.
 */
import type {SharedTarget} from '../shared/target_store.js';
import {aboutLeft} from '../shared/time_left.js';
import {describeTokens, responseLength} from '../shared/tokens.js';
import {MODE_ORDER, type Intervention, type InterventionPayload, type LayerTrace, type Mode, type PartialIntervention, type RunJob, type RunStep, type Scope, type SearchPayload, type SidePayload} from './payload.js';

// ------------------------------------------------------------------ models

/** The model group of a salience model name: "_smollm2_salience" -> "smollm2"; another name is its own group. */
export function modelGroup(salienceModel: string): string {
  const m = /^_(.+)_salience$/.exec(salienceModel);
  return m ? m[1] : salienceModel;
}

export interface InsideModels {
  trace: string;
  intervene: string;
  search: string;
}

export function insideModels(group: string): InsideModels {
  return {trace: `_${group}_inside_trace`, intervene: `_${group}_inside_intervene`,
          search: `_${group}_inside_search`};
}

// ------------------------------------------------------------------ target

/** What the module traces for the salience module's selection. */
export interface TraceTarget {
  datapointId: string;
  input: Record<string, unknown>;
  group: string;
  /** Response token to trace (the first token of the selected span). */
  t: number;
  /** Number of response tokens. */
  nTargets: number;
  /** Its display text, and whether the whole response is selected (then the first token is traced). */
  token: string;
  whole: boolean;
  /** End (exclusive) of the selected span, numbered as the salience module numbers it (t + 1 … spanEnd). */
  spanEnd: number;
}

/**
 * Which token is traced, in the salience module's numbering ("token 3 of 8", "tokens 3–4 of 8",
 * 1-based): one numbering across the two modules.
 */
export function describeTraced(tt: TraceTarget): string {
  const pos = `response ${describeTokens(tt.t, tt.t + 1, tt.nTargets)}`;
  if (tt.whole) return `${pos} — the whole response is selected: tracing its first token; click a token to trace it`;
  if (tt.spanEnd - tt.t > 1) {
    return `${pos} — the first of the selected ${describeTokens(tt.t, tt.spanEnd, tt.nTargets)}; click one token to trace it`;
  }
  return pos;
}

export function traceTarget(s: SharedTarget | null): TraceTarget | null {
  if (s === null) return null;
  const nTargets = responseLength(s);
  if (nTargets <= 0) return null;
  const t = Math.min(Math.max(0, s.t0), nTargets - 1);
  return {
    datapointId: s.datapointId, input: s.input, group: modelGroup(s.salienceModel), t, nTargets,
    token: s.tokens[s.nPromptTokens + t] ?? '', whole: s.t0 <= 0 && s.t1 >= nTargets,
    spanEnd: Math.min(Math.max(t + 1, s.t1), nTargets),
  };
}

/** Key of a trace request: same key, same answer. */
export function traceKey(tt: TraceTarget): string {
  return `${tt.group}|${tt.datapointId}|${tt.t}`;
}

// ----------------------------------------------------------- interventions

export function interventionKey(iv: {layer: number; index: number}): string {
  return `${iv.layer}:${iv.index}`;
}

/** Adds a value (mode off, scope all) unless it is listed; returns a new list. */
export function addIntervention(list: readonly Intervention[], layer: number, index: number,
                                mode: Mode = 'off', scope: Scope = 'all'): Intervention[] {
  if (list.some((iv) => iv.layer === layer && iv.index === index)) return [...list];
  return [...list, {layer, index, mode, scope}];
}

/** The next mode in MODE_ORDER (off → on → on_layer_max → off). */
export function toggleMode(list: readonly Intervention[], key: string): Intervention[] {
  return list.map((iv) => interventionKey(iv) === key
      ? {...iv, mode: MODE_ORDER[(MODE_ORDER.indexOf(iv.mode) + 1) % MODE_ORDER.length]} : iv);
}

export function setScope(list: readonly Intervention[], key: string, scope: Scope): Intervention[] {
  return list.map((iv) => interventionKey(iv) === key ? {...iv, scope} : iv);
}

export function removeIntervention(list: readonly Intervention[], key: string): Intervention[] {
  return list.filter((iv) => interventionKey(iv) !== key);
}

/** The request field: a JSON list in a canonical order (layer, index), so equal lists give equal requests. */
export function interventionsJson(list: readonly Intervention[]): string {
  const sorted = [...list].sort((a, b) => a.layer - b.layer || a.index - b.index);
  return JSON.stringify(sorted.map(({layer, index, mode, scope}) => ({layer, index, mode, scope: scope ?? 'all'})));
}

/** A short stable hash (FNV-1a, hex) for request ids. */
export function hashString(s: string): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return (h >>> 0).toString(16).padStart(8, '0');
}

export function describeIntervention(iv: Intervention): string {
  const scope = (iv.scope ?? 'all') === 'position' ? ' @pos' : '';
  const value = iv.mode === 'on' && typeof iv.value === 'number' ? ` (${iv.value.toPrecision(3)})` : '';
  return `L${iv.layer}·v${iv.index} ${iv.mode}${value}${scope}`;
}

// ----------------------------------------------------------------- display

/** Three significant digits: "0.953", "0.0412", "4.1e-4", "<1e-6". */
export function formatProb(p: number): string {
  if (!Number.isFinite(p)) return '–';
  if (p >= 0.9995) return '1.00';
  if (p >= 0.001) return p.toPrecision(3);
  if (p < 1e-6) return '<1e-6';
  return p.toExponential(1);
}

/** A signed change of probability: "+0.012", "−2.1e-5", "±0". */
export function formatDelta(d: number): string {
  if (!Number.isFinite(d)) return '–';
  if (d === 0) return '±0';
  const sign = d > 0 ? '+' : '−';
  const a = Math.abs(d);
  return sign + (a >= 0.001 ? a.toFixed(3) : a.toExponential(1));
}

/** Rank as shown: 0 -> "1st". */
export function formatRank(rank: number): string {
  const n = rank + 1;
  const s = n % 100 >= 11 && n % 100 <= 13 ? 'th' : ({1: 'st', 2: 'nd', 3: 'rd'} as Record<number, string>)[n % 10] ?? 'th';
  return `${n.toLocaleString('en-US')}${s}`;
}

/** Visible form of a token: spaces as "␣", newlines as "⏎". */
export function showToken(tok: string): string {
  return tok.replace(/ /g, '␣').replace(/\n/g, '⏎').replace(/\t/g, '⇥') || '∅';
}

/** Polyline points of p(target) by layer in a w x h box (layer 0 left; p on a linear 0..1 axis). */
export function probPolyline(probs: readonly number[], w: number, h: number): string {
  const n = probs.length;
  if (n === 0) return '';
  return probs.map((p, i) => {
    const x = n === 1 ? w / 2 : (i / (n - 1)) * w;
    const y = h - Math.max(0, Math.min(1, p)) * h;
    return `${x.toFixed(1)},${y.toFixed(1)}`;
  }).join(' ');
}

/** First layer from which the target stays the top prediction after the FFN (or -1). */
export function settlesAt(layers: readonly LayerTrace[]): number {
  let at = -1;
  for (let i = layers.length - 1; i >= 0; i--) {
    if (layers[i].after.target_rank !== 0) break;
    at = i;
  }
  return at;
}

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

// ------------------------------------------------------------------ search

/** Whether to ask again: the index's build job is still queued or running (hits may grow). */
export function shouldPoll(s: SearchPayload | null): boolean {
  return s !== null && s.ranking !== 'projection' && (s.index.state === 'queued' || s.index.state === 'running');
}

export function searchStatus(s: SearchPayload): string {
  const ix = s.index;
  if (s.ranking === 'projection') {
    return `All ${s.total.toLocaleString('en-US')} values of the ${s.num_layers} layers ranked by their projection ` +
        'score (E·v)[token]; strongest first.';
  }
  const found = `${s.total.toLocaleString('en-US')} value${s.total === 1 ? '' : 's'}`;
  if (ix.state === 'done') {
    return `${found} across all ${s.num_layers} layers.`;
  }
  if (ix.state === 'error') return `The value index failed: ${ix.error}`;
  const sofar = `${found} in layers 0–${Math.max(0, s.layers_searched - 1)} so far`;
  const built = `${s.layers_searched}/${s.num_layers} layers indexed`;
  if (ix.state === 'cancelled' || ix.state === 'none') {
    return `${sofar} (${built}); the index build stopped: search again to go on building it.`;
  }
  const left = aboutLeft(ix);
  const wait = ix.waiting ? ', waiting for the model' : left ? `, ${left}` : '';
  return `${sofar} (${built}, ${Math.round(ix.elapsed_s)} s${wait}); more appear as the index builds.`;
}
