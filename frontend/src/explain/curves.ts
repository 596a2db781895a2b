/**
 * What a faithfulness test's result says: the preliminary pass's label, the AOPC rows with their verdicts and
 * the upper bound in words. No DOM.
 */
import {curveColor} from './logic.js';
import type {CurvesPayload, Mode, Verdict} from './payload.js';

/**
 * The label of a preliminary (coarse) curves result: what it has, and what the full one will add.
 * `running`: whether the refinement is still computed (else it was stopped before it finished).
 */
export function preliminaryLabel(p: CurvesPayload, running: boolean): string {
  const k = p.steps ?? p.n_removed.length - 1;
  const coarse = `Coarse: ${k} step${k === 1 ? '' : 's'}, ${p.n_random} random order${p.n_random === 1 ? '' : 's'}` +
                 `${p.upper_bound ? '' : ', no upper bound'}`;
  const r = p.refining;
  const full = r ? ` to ${r.steps} steps, ${r.n_random} random orders${r.upper_bound ? ' and the upper bound' : ''}` : '';
  return running ? `${coarse} — refining${full}…`
                 : `${coarse} — the refinement${full} was stopped; run again for the full result.`;
}

/**
 * Whether a coarse result read from the job's status belongs to the run that asked for `fields`
 * (a status read can still see the job this run replaced, for the same prompt, before the server
 * started the new one).
 */
export function partialMatches(p: CurvesPayload, fields: Record<string, unknown>, span: [number, number]): boolean {
  return p.granularity === fields['granularity'] && p.removal === fields['removal'] &&
      p.methods.join(',') === fields['methods'] && p.refining?.steps === fields['steps'] &&
      p.span[0] === span[0] && p.span[1] === span[1];
}

export interface AopcRow {
  method: string;
  /** The curve's key: the method, or method + ":abs" for a signed method ranked by |value|. */
  name: string;
  label: string;
  ordering: string;
  color: string;
  aopc: number;
  random: number;
  randomStd: number;
  length: number;
  gap: number;
  gapLength: number;
  verdict: Verdict | null;
}

const ORDERING_LABEL: Record<string, string> = {value: '', signed: 'most positive first', abs: 'largest |value| first'};

/** One row per method and ordering for a mode, best gap to random first (with baselines and verdicts
 * from the server's table; an older payload without one gives rows without length and verdict).
 * `label` names a method (the registry's label). */
export function aopcRows(p: CurvesPayload, mode: Mode, label: (method: string) => string): AopcRow[] {
  const random = p.curves['random']?.[mode]?.aopc ?? NaN;
  const rows: AopcRow[] = [];
  if (p.table) {
    for (const r of p.table) {
      if (r.mode !== mode) continue;
      const ordering = ORDERING_LABEL[r.ordering] ?? r.ordering;
      rows.push({method: r.method, name: r.name, label: `${label(r.method)}${ordering ? ` (${ordering})` : ''}`,
                 ordering: r.ordering, color: curveColor(r.method), aopc: r.aopc, random: r.random_aopc,
                 randomStd: r.random_std, length: r.length_aopc, gap: r.gap, gapLength: r.gap_length, verdict: r.verdict});
    }
  } else {
    for (const m of p.methods) {
      const c = p.curves[m]?.[mode];
      if (c == null) continue;
      rows.push({method: m, name: m, label: label(m), ordering: 'value', color: curveColor(m),
                 aopc: c.aopc, random, randomStd: NaN, length: NaN, gap: c.aopc - random, gapLength: NaN, verdict: null});
    }
  }
  return rows.sort((a, b) => b.gap - a.gap);
}

/** What one mode's upper bound says, for the chart and the table (null: no bound in the payload). */
export interface BoundView {
  /** The key of its curve in the payload's `curves`. */
  name: string;
  aopc: number;
  decidable: boolean;
  /** How it was found, in words. */
  search: string;
  /** One sentence for the researcher. */
  text: string;
}

/** The upper bound of `mode` in words; `label` names a tested curve that beat the greedy search. */
export function boundView(p: CurvesPayload, mode: Mode, label: (name: string) => string): BoundView | null {
  const up = p.upper_bound;
  const curve = up ? p.curves[up.name]?.[mode] : undefined;
  if (!up || !curve || up.decidable[mode] === undefined) return null;
  const how = up.search[mode] ?? '';
  const search = how === 'exhaustive' ? 'exact search over every order'
      : how === 'greedy' ? 'greedy search' : `the order of ${label(how)} (greedy search found none better)`;
  const margin = `${p.noise_sigmas ?? 2}× the random spread`;
  const decidable = up.decidable[mode] === true;
  const text = decidable
      ? `Best order found (${search}): AOPC ${curve.aopc.toFixed(3)}; an order can beat random and length by ` +
        `${margin} on this prompt, so the verdicts can tell methods apart.`
      : `${up.undecidable[0].toUpperCase()}${up.undecidable.slice(1)}: even the best order found (${search}, AOPC ` +
        `${curve.aopc.toFixed(3)}) does not beat random and length by ${margin}, so no method can; “within noise” ` +
        'here says nothing against a method. More segments (a finer granularity) or a longer prompt can decide.';
  return {name: up.name, aopc: curve.aopc, decidable, search, text};
}
