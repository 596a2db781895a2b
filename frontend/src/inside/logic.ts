/**
 * Pure logic of the "Inside the model" module: which token to trace for the
 * salience module's target, the intervention list, request ids, numbers and tokens
 * as shown, search polling. No DOM, no LIT. The payloads and their checks are
 * payload.ts's; an intervention run's steps and its before/after comparison, run.ts's.
 */
import type {SharedTarget} from '../shared/target_store.js';
import {aboutLeft} from '../shared/time_left.js';
import {describeTokens, responseLength} from '../shared/tokens.js';
import {MODE_ORDER, type Intervention, type LayerTrace, type Mode, type Scope, type SearchPayload} from './payload.js';

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
