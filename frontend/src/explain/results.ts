/**
 * The results of the explanation tests, drawn: faithfulness charts and AOPC tables, the
 * reduced prompt, token flips, the IG step search and the contrastive map (coloured as the
 * salience module colours: the same aggregation and colour map). Functions of a payload;
 * the element (module.ts) owns the state.
 */
import {html, nothing, svg} from 'lit';

import {colorFor, formatValue, legendGradient, legendStops, maxAbs} from '../shared/colormap.js';
import {methodNameView} from '../shared/method_help.js';
import type {MethodRegistry} from '../shared/methods.js';
import {buildPieces} from '../shared/pieces.js';
import {errorMessage} from '../shared/request.js';
import {describeTokens} from '../shared/tokens.js';
import {bandPath, chartValues, fractions, linearScale, linePath, paddedExtent} from './chart.js';
import {contrastiveSegments, strongestSegments} from './contrastive.js';
import {aopcRows, boundView, preliminaryLabel} from './curves.js';
import {igAutoAdvice, igAutoSummary} from './ig_auto.js';
import {
  curveColor, LENGTH_COLOR, mergePieces, percent, RANDOM_COLOR, UPPER_COLOR, type Action,
} from './logic.js';
import {MODES, type ContrastivePayload, type CurvesPayload, type IgAutoPayload, type Mode} from './payload.js';

export interface ReducePayload {
  fields: Record<string, {reduced: string; pieces: Array<[string, boolean]>}>;
  criterion: string;
  removal: string;
  filler: string;
  n_segments: number;
  n_removed: number;
  stopped_by: string;
  n_checks: number;
  original_logprob: number;
  reduced_logprob: number;
  granularity: string;
  seconds: number;
  cancelled?: boolean;
}

export interface FlipEntry {
  field: string;
  value: string;
  old: string;
  new: string;
  before: string;
  after: string;
  delta: number;
  estimated_delta: number;
  keeps_greedy: boolean;
  retokenized?: boolean;  // the loaded text re-tokenizes to other ids than the one-token edit
  word_end?: number;
}

export interface FlipsPayload {
  flips: FlipEntry[];
  original_logprob: number;
  original_keeps_greedy: boolean;
  seconds: number;
  cancelled?: boolean;
}

/** Puts field values into LIT's datapoint editor; `what` names them in the notice. */
export type Load = (values: Record<string, string>, what: string) => void;

/** What a result is drawn with besides its payload. */
export interface ResultContext {
  /** The salience module's granularity. */
  granularity: string;
  /** The method chosen for the contrastive map (the payload's first one when it lacks it). */
  contrastMethod: string;
  /** A method's label (the server's registry). */
  label(method: string): string;
  /** The server's registry: a method's name in a result opens its help (shared/method_help.ts). */
  registry: MethodRegistry | null;
  /** Number of response tokens (a payload's span is numbered against it: shared/tokens.ts). */
  nTargets: number;
  load: Load;
  /** Whether the test still runs (a preliminary result is then being refined). */
  running: boolean;
  /** The most IG steps this server allows (0 when unknown): the IG search's advice stays within it. */
  maxIgSteps: number;
}

/** A finished test's result. */
export function resultView(action: Action, r: unknown, ctx: ResultContext) {
  if (action === 'curves') return curvesView(r as CurvesPayload, ctx.label, ctx.running, ctx.registry);
  if (action === 'reduce') return reduceView(r as ReducePayload, ctx.load);
  if (action === 'flips') return flipsView(r as FlipsPayload, ctx.load);
  if (action === 'ig_auto') return igAutoView(r as IgAutoPayload, ctx.nTargets, ctx.maxIgSteps);
  return contrastiveView(r as ContrastivePayload, ctx.granularity, ctx.contrastMethod, ctx.nTargets);
}

function curvesView(p: CurvesPayload, label: (method: string) => string, running: boolean,
                    reg: MethodRegistry | null) {
  const coarse = p.preliminary === true;
  return html`<div class="curves ${coarse ? 'preliminary' : 'final'}" data-steps=${p.n_removed.length - 1}
      data-random=${p.n_random}>
    ${coarse ? html`<div class="preliminary-label" role="status">${preliminaryLabel(p, running)}</div>` : nothing}
    ${MODES.map((mode) => html`<div class="chart-box">${chartView(p, mode)}${aopcView(p, mode, label, reg)}${boundNotice(p, mode, label)}</div>`)}
    <div class="facts">${p.n_segments} ${p.granularity} segments${p.fields?.length
        ? ` of the ${p.fields.join(' and ')} (the template's own text is kept)` : ''} · removal: ${p.removal === 'filler'
        ? html`filler token “${p.filler}” (positions kept)` : 'text deleted'} ·
      log p(target) ${p.original_logprob.toFixed(2)} → ${p.empty_logprob.toFixed(2)} with all removed ·
      random: mean of ${p.n_random} seeded orders (band: range; ± their standard deviation of AOPC) ·
      length: longest segments first · verdict: beats both by more than ${p.noise_sigmas ?? 2}× the random
      spread, “worse” when a baseline does better by that much${p.upper_bound ? html`, “${p.upper_bound.undecidable}”
      when not even the best order found (dotted line; ${p.upper_bound.rows} more forward rows) does` : nothing} ·
      ${p.seconds.toFixed(1)} s</div>
  </div>`;
}

/**
 * The stroke width of the `i`-th of `n` method lines in drawing order: each line drawn later is narrower (1.5 px,
 * less when many lines share the 6 px above the last one's 2 px), so that where two methods' curves coincide (the
 * same order of segments) the one drawn first still shows as a border around the other (issue 45: gradient norm's
 * line hid under leave one out's).
 */
export function methodStrokeWidth(i: number, n: number): number {
  const step = n > 1 ? Math.min(1.5, 6 / (n - 1)) : 0;
  return 2 + step * Math.max(0, n - 1 - i);
}

function chartView(p: CurvesPayload, mode: Mode) {
  const W = 320, H = 160, L = 44, R = 18, T = 18, B = 30;
  const xs = fractions(p);
  const sx = linearScale(0, 1, L, W - R);
  const [y0, y1] = paddedExtent(chartValues(p, mode));
  const sy = linearScale(y0, y1, H - B, T);
  const random = p.curves['random']?.[mode];
  const length = p.curves['length']?.[mode];
  const upper = p.upper_bound ? p.curves[p.upper_bound.name]?.[mode] : undefined;
  const ticks = [y0, (y0 + y1) / 2, y1];
  return html`<svg class="chart ${mode}" viewBox="0 0 ${W} ${H}" width=${W} height=${H} role="img"
      aria-label="${mode} curve: log p(target) against the fraction of segments ${mode === 'deletion' ? 'removed' : 'revealed'}">
    <text x=${L} y="12" class="title">${mode === 'deletion' ? 'Deletion (most salient removed first)' : 'Insertion (most salient revealed first)'}</text>
    ${ticks.map((v) => svg`<line x1=${L} x2=${W - R} y1=${sy(v)} y2=${sy(v)} class="grid"></line>
      <text x=${L - 4} y=${sy(v) + 3} class="tick" text-anchor="end">${v.toFixed(1)}</text>`)}
    ${[0, 0.5, 1].map((f) => svg`<text x=${sx(f)} y=${H - B + 12} class="tick" text-anchor="middle">${Math.round(f * 100)}%</text>`)}
    <text x=${(L + W - R) / 2} y=${H - 4} class="axis" text-anchor="middle">segments ${mode === 'deletion' ? 'removed' : 'revealed'}</text>
    ${random?.low && random.high ? svg`<path class="band" d=${bandPath(xs, random.low, random.high, sx, sy)}></path>` : nothing}
    ${random ? svg`<path class="line random" d=${linePath(xs, random.logprobs, sx, sy)} stroke=${RANDOM_COLOR}></path>` : nothing}
    ${length ? svg`<path class="line length" d=${linePath(xs, length.logprobs, sx, sy)} stroke=${LENGTH_COLOR}></path>` : nothing}
    ${upper ? svg`<path class="line upper-bound" d=${linePath(xs, upper.logprobs, sx, sy)} stroke=${UPPER_COLOR}></path>` : nothing}
    ${(p.ranked ?? p.methods).map((name, i, drawn) => {
      const c = p.curves[name]?.[mode];
      const m = name.replace(/:abs$/, '');
      const color = curveColor(m);
      return c ? svg`<path class="line method ${name.endsWith(':abs') ? 'abs' : ''}" data-method=${name}
          d=${linePath(xs, c.logprobs, sx, sy)} stroke=${color} style="stroke-width: ${methodStrokeWidth(i, drawn.length)}px"></path>` : nothing;
    })}
  </svg>`;
}

/** Whether this prompt can decide in `mode`: the upper bound's sentence (nothing without a bound). */
function boundNotice(p: CurvesPayload, mode: Mode, label: (method: string) => string) {
  const b = boundView(p, mode, label);
  if (b === null) return nothing;
  return html`<div class="bound ${b.decidable ? 'decidable' : 'undecidable'}" data-mode=${mode}
      data-decidable=${String(b.decidable)}>${b.text}</div>`;
}

function aopcView(p: CurvesPayload, mode: Mode, label: (method: string) => string, reg: MethodRegistry | null) {
  const rows = aopcRows(p, mode, label);
  const bound = boundView(p, mode, label);
  const signedGap = (g: number) => Number.isFinite(g) ? `${g >= 0 ? '+' : ''}${g.toFixed(3)}` : '–';
  const r0 = rows[0];
  return html`<table class="aopc ${mode}">
    <tr><th>${mode}</th><th title="Area over the perturbation curve (nats; higher = more faithful)">AOPC</th>
      <th>vs random</th><th>vs length</th><th>verdict</th></tr>
    ${rows.map((r) => html`<tr data-method=${r.name} data-verdict=${r.verdict ?? ''}>
      <td><span class="swatch ${r.ordering === 'abs' ? 'hollow' : ''}" style="background:${r.color};border-color:${r.color}"></span>${methodNameView(reg, r.method, 'test', r.label)}</td>
      <td>${r.aopc.toFixed(3)}</td><td class=${r.gap > 0 ? 'better' : 'worse'}>${signedGap(r.gap)}</td>
      <td class=${r.gapLength > 0 ? 'better' : 'worse'}>${signedGap(r.gapLength)}</td>
      <td class="verdict ${r.verdict === 'worse' ? 'worse' : r.verdict?.startsWith('beats') ? 'better'
          : r.verdict === p.upper_bound?.undecidable ? 'undecidable' : ''}">${r.verdict ?? ''}</td></tr>`)}
    <tr class="random-row"><td><span class="swatch dashed"></span>random (${p.n_random})</td>
      <td>${r0?.random.toFixed(3) ?? ''}${r0 && Number.isFinite(r0.randomStd) ? ` ± ${r0.randomStd.toFixed(3)}` : ''}</td><td></td><td></td><td></td></tr>
    ${r0 && Number.isFinite(r0.length) ? html`<tr class="length-row"><td><span class="swatch" style="background:${LENGTH_COLOR}"></span>length</td>
      <td>${r0.length.toFixed(3)}</td><td></td><td></td><td></td></tr>` : nothing}
    ${bound ? html`<tr class="upper-bound-row" title=${bound.search}><td><span class="swatch dotted" style="border-color:${UPPER_COLOR}"></span>best order found</td>
      <td>${bound.aopc.toFixed(3)}</td><td></td><td></td>
      <td class="verdict ${bound.decidable ? '' : 'undecidable'}">${bound.decidable ? 'decidable' : 'not decidable'}</td></tr>` : nothing}
  </table>`;
}

function reduceView(p: ReducePayload, load: Load) {
  const names = Object.keys(p.fields);
  const values: Record<string, string> = {};
  for (const n of names) values[n] = p.fields[n].reduced;
  return html`<div class="reduce" data-removal=${p.removal ?? 'delete'}>
    <div class="facts">Removed ${p.n_removed} of ${p.n_segments} ${p.granularity} segments
      (${p.criterion === 'greedy' ? 'same greedy response' : 'log p(target) within tolerance'};
      ${p.n_checks} checks, ${p.stopped_by === 'done' ? 'search finished' : `stopped by the ${p.stopped_by} budget`});
      log p(target) ${p.original_logprob.toFixed(2)} → ${p.reduced_logprob.toFixed(2)}.
      ${p.removal === 'filler' ? html`<span class="filler-note">Removed tokens were replaced by the filler token
        “${p.filler}” (positions kept); the loaded text spells the fillers out and is re-tokenized, so its
        response may differ.</span>` : nothing}</div>
    ${names.map((n) => html`<div class="section-label">${n}</div>
      <div class="text reduced-text" data-field=${n}>${mergePieces(p.fields[n].pieces).map(([text, removed]) =>
          removed ? html`<s class="removed">${text}</s>` : html`<span>${text}</span>`)}</div>`)}
    <button class="load-reduced" @click=${() => load(values, 'reduced prompt')}>Load into editor</button>
  </div>`;
}

function flipsView(p: FlipsPayload, load: Load) {
  if (p.flips.length === 0) return html`<div class="hint">No word substitutions found in the editable text.</div>`;
  return html`<div class="flips">
    <div class="facts">log p(target) = ${p.original_logprob.toFixed(2)}; the target is
      ${p.original_keeps_greedy ? '' : 'not '}the greedy response. Ranked by the first-order estimate; Δ and
      the response check are measured on the text “Load” gives (re-tokenized). Strongest drops first.</div>
    <ol class="flip-list">${p.flips.map((f, i) => html`<li class="flip" data-i=${i}>
      <span class="ctx">…${f.before}<s>${f.old}</s><b>${f.new}</b>${f.after}…</span>
      <span class="delta" title="exact change of log p(target) for the loaded (re-tokenized) text; first-order estimate ${formatValue(f.estimated_delta)}${f.retokenized ? '; the text re-tokenizes differently from the one-token edit' : ''}">Δ ${formatValue(f.delta)}${f.retokenized ? '*' : ''}</span>
      <span class="greedy ${f.keeps_greedy ? 'same' : 'changed'}">${f.keeps_greedy ? 'same response' : 'response changes'}</span>
      <button class="load-flip" @click=${() => load({[f.field]: f.value}, 'flipped prompt')}>Load</button></li>`)}
    </ol></div>`;
}

function igAutoView(p: IgAutoPayload, nTargets: number, maxIgSteps: number) {
  return html`<div class="ig-auto" data-stopped-by=${p.stopped_by}>
    <div class="ig-summary ${p.stopped_by}">${igAutoSummary(p)}</div>
    <table class="ig-runs">
      <tr><th>steps</th><th title="sum of attributions − (F(x) − F(baseline)), nats">error</th>
        <th>relative</th><th>time</th></tr>
      ${p.tried.map((r) => html`<tr class=${r.steps === p.steps ? 'chosen' : ''} data-steps=${r.steps}>
        <td>${r.steps}</td><td>${formatValue(r.error)}</td>
        <td class=${r.relative_error <= p.tolerance ? 'better' : 'worse'}>${percent(r.relative_error)}</td>
        <td>${r.seconds.toFixed(1)} s</td></tr>`)}
    </table>
    <div class="facts">Target: ${describeTokens(p.span[0], p.span[1], nTargets)}; counts tried: ${p.schedule.join(', ')} (up to
      ${p.max_steps}).</div>
    <div class="ig-advice">${igAutoAdvice(p, maxIgSteps)}</div>
  </div>`;
}

function contrastiveView(p: ContrastivePayload, granularity: string, contrastMethod: string, nTargets: number) {
  const method = p.methods[contrastMethod] ? contrastMethod : Object.keys(p.methods)[0];
  const signed = p.methods[method].signed;
  let seg;
  let values: Float64Array;
  try {
    ({seg, values} = contrastiveSegments(p, method, granularity === 'regex' ? 'word' : granularity));
  } catch (e) {
    return html`<div class="status error">${errorMessage(e)}</div>`;
  }
  const shown = Array.from(values).filter((v, s) => Number.isFinite(v) && !seg.excluded[s]);
  // The salience module's colour scale: the same colormap, scaled to the largest |value| shown.
  const cs = {signed, scale: maxAbs(shown), intensity: 1};
  const nChars = Array.from(p.text).length;  // code points, as Python counts prompt_end
  const promptEnd = p.prompt_end ?? nChars;
  const pieces = buildPieces(p.text, seg, promptEnd);  // piece.response: the answer before the span
  const stops = legendStops(cs, 3);
  const top = strongestSegments(p.text, seg, values);
  const span = p.span ? `target: ${describeTokens(p.span[0], p.span[1], nTargets)}` : 'the whole response';
  return html`<div class="contrastive" data-span=${p.span ? p.span.join(':') : ''}>
    <div class="facts">Why “${p.target.trim().slice(0, 60)}” (${span}) rather than “${p.foil.trim().slice(0, 60)}”
      at the same position: log p(target) − log p(foil) = ${p.target_logprob.toFixed(2)} − (${p.foil_logprob.toFixed(2)})
      = <b class="difference">${(p.target_logprob - p.foil_logprob).toFixed(2)}</b> nats.
      ${signed ? 'Red: favours the target; blue: favours the foil.' : 'Magnitude of the gradient of the difference.'}
      ${promptEnd < nChars ? html`<span class="hint">The underlined text is the response before the span
        (shared by both continuations).</span>` : nothing}</div>
    <div class="legend contrast-legend" aria-label="colour legend">
      <div class="legend-bar" style="background:${legendGradient(cs)}"></div>
      <div class="legend-labels">${stops.map((s) => html`<span>${formatValue(s.value)}</span>`)}</div>
    </div>
    <div class="text contrast-map">${pieces.map((pc) => {
      const prefix = pc.response;
      if (pc.seg < 0 || seg.excluded[pc.seg]) return html`<span class="gap ${prefix ? 'answer' : ''}">${pc.text}</span>`;
      const v = values[pc.seg];
      const c = Number.isFinite(v) ? colorFor(v, cs) : null;
      return html`<span class="seg ${prefix ? 'answer' : ''}" data-s=${pc.seg} data-v=${formatValue(v)} title=${formatValue(v)}
          style=${c ? `background:${c.bg};color:${c.fg}` : ''}>${pc.text}</span>`;
    })}</div>
    <table class="contrast-top"><tr><th>strongest segments</th><th>${method}</th></tr>
      ${top.map((r) => {
        const c = colorFor(r.value, cs);
        return html`<tr data-s=${r.seg}><td>${r.text.slice(0, 50)}</td>
          <td class="num" style="background:${c.bg};color:${c.fg}">${formatValue(r.value)}</td></tr>`;
      })}</table></div>`;
}
