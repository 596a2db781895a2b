/**
 * The Sequence Salience module's controls and status lines: granularity, method and counts, the status of the
 * first highlight, the segment method on screen (the first map, its confirmation, the buttons that measure on
 * request). Functions of what they show and of callbacks for what the user does; the element
 * (../salience_module.ts) owns the state. The text and the side panel are text_view.ts's.
 */
import {html, nothing, type TemplateResult} from 'lit';
import {live} from 'lit/directives/live.js';

import {GRANULARITIES, type Granularity} from '../shared/aggregate/index.js';
import {errorIcon} from '../shared/icons.js';
import {methodHelpView, methodNameView} from '../shared/method_help.js';
import type {ExtraMethodInfo, MethodInfo, SegmentMethodInfo} from '../shared/methods.js';
import {describeRefinement, segmentProgress} from './coarse.js';
import type {SalienceController} from './controller.js';
import {describeFit} from './segment_payload.js';
import {SEGMENT_NOUNS} from './segments.js';

export const GRANULARITY_LABELS: Record<Granularity, string> = {
  token: 'Tokens', word: 'Words', sentence: 'Sentences', paragraph: 'Paragraphs',
  line: 'Lines', regex: 'Custom regex', role: 'Chat roles',
};

/** The view settings the element keeps (not sent to the server). */
export interface ViewSettings {
  granularity: Granularity;
  regex: string;
  intensity: number;
}

/** What the controls report. */
export interface ControlEvents {
  granularity(g: Granularity): void;
  /** A pattern typed (now: false, applied after a pause) or committed (Enter, leaving the box). */
  regex(pattern: string, now: boolean): void;
  intensity(x: number): void;
}

const value = (e: Event) => (e.target as HTMLInputElement | HTMLSelectElement).value;

/** The controls row; `extra` goes at its end (the element's view toggle). */
export function controlsView(ctl: SalienceController, v: ViewSettings, on: ControlEvents,
                             extra: TemplateResult | typeof nothing = nothing): TemplateResult {
  const reg = ctl.registry();
  return html`
    <div class="controls">
      <label>Method
        <select class="method" @change=${(e: Event) => ctl.setMethod(value(e))}>
          ${reg?.segments.length ? html`
            <optgroup label="Gradients (one pass)">${reg.tokens.map((m) => methodOption(ctl, m))}</optgroup>
            <optgroup label="Removing segments (forwards; per granularity)">
              ${reg.segmentsAt(v.granularity).map((m) => methodOption(ctl, m))}</optgroup>`
            : reg?.methods.map((m) => methodOption(ctl, m))}
        </select>
      </label>${methodHelpView(reg, 'controls', ctl.method || null)}
      ${reg?.extras.map((m) => countControlsView(ctl, m))}
      <label>Granularity
        <select class="granularity" @change=${(e: Event) => on.granularity(value(e) as Granularity)}>
          ${GRANULARITIES.map((g) => html`<option value=${g} ?selected=${g === v.granularity}>${GRANULARITY_LABELS[g]}</option>`)}
        </select>
      </label>
      ${v.granularity === 'regex' ? html`<label>Regex
        <input class="regex" type="text" .value=${v.regex} spellcheck="false"
            title="Each match is a segment (ranked and coloured); the text between matches is context"
            @input=${(e: Event) => on.regex(value(e), false)}
            @change=${(e: Event) => on.regex(value(e), true)}></label>`
        : nothing}
      <label>Intensity
        <input class="intensity" type="range" min="0.25" max="4" step="0.05" .value=${String(v.intensity)}
            @input=${(e: Event) => on.intensity(Number(value(e)))}>
      </label>
      ${extra}
    </div>`;
}

/** A method's option: its menu name (short enough for the select at 1280×720), its label as the title; selected while
 * its method is on screen. The page changes the method itself (a new selection's gradient, the first map, the exact
 * map, "Show gradient"): a `selected` attribute no longer moves an option the user once picked (its dirtiness), so
 * the select showed the gradient's name while the exact map the user had chosen was on screen. The property is set
 * against the live option. */
function methodOption(ctl: SalienceController, m: MethodInfo) {
  return html`<option value=${m.name} title=${m.label} .selected=${live(m.name === ctl.method)}>${
    ctl.registry()!.menu(m.name)}</option>`;
}

/**
 * What a segment method on screen is and how it was measured (or what is measured for the automatic
 * switch while the gradient is shown): its name, the unit ("measured per sentence: changing granularity
 * re-measures"), progress, the surrogate's fit and warning, the button that measures at an on-request
 * granularity (with its cost), and the way back to the gradient.
 */
export function segmentStatusView(ctl: SalienceController,
                                  on: {showGradient(): void; measure(): void; measureWith(method: string): void}) {
  const reg = ctl.registry();
  if (reg === null || ctl.payload === null) return nothing;
  const info = reg.segment(ctl.method);
  const noun = SEGMENT_NOUNS[ctl.granularity] ?? ctl.granularity;
  const pending = ctl.pendingDefault();
  // While the exact method confirms the first map: its progress, and a way to stop it (the first map stays).
  const stop = html`<button class="stop-confirm" title="Stop measuring ${pending ? reg.label(pending) : ''}; the map on screen stays"
      @click=${() => ctl.stopConfirming()}>Stop: keep this map</button>`;
  const first = ctl.firstMap();
  if (info === undefined) {
    if (pending === null) return nothing;
    const measuring = ctl.autoMeasuring();
    const lead = measuring !== null && measuring === first
      ? html`Gradient shown. <b class="first-map" data-method=${first}>${methodNameView(reg, first, 'status')}</b>, the first map (${FIRST_MAP_WHY}),
          is being measured per ${noun}${segmentProgress(ctl.segmentDetail)}; then exact <b>${methodNameView(reg, pending, 'status')}</b> confirms it.`
      : html`First map: <b class="first-map" data-method=${ctl.method}>${methodNameView(reg, ctl.method, 'status')}</b>
          (${first === null ? GRADIENT_WHY : `${reg.label(first)} could not be measured`}).
          <b>${methodNameView(reg, pending, 'status')}</b> is being measured per ${noun}${segmentProgress(ctl.segmentDetail)} to confirm it; it replaces
          the first map when done.`;
    return html`<div class="segment-status pending" role="status" data-pending=${pending} data-first=${ctl.method}>
      <div class="bar"><div></div></div>
      <span>${lead}</span> ${stop}
      ${ctl.segmentError ? html`<span class="error-text">${ctl.segmentError}</span>` : nothing}</div>`;
  }
  const s = ctl.segmentValues();
  const gradient = html`<button class="show-gradient" accesskey="g" title="Back to ${reg.label(ctl.gradientMethod)} (one pass; Alt+G)"
      @click=${() => on.showGradient()}>Show gradient (${reg.get(ctl.gradientMethod)?.short ?? ctl.gradientMethod})</button>`;
  let body;
  if (ctl.autoShown && s !== null && s.partial) {
    // The first map's job is running: its values so far (the estimate, then the segments verified so far).
    const look = ctl.partialName(info.name, s);
    return html`<div class="segment-status pending" role="status" data-method=${info.name} data-first=${info.name}
        data-auto="true" data-stage=${look}>
      <div class="bar"><div></div></div>
      <span>First map: <b class="method-on-screen first-map" data-method=${info.name}>${methodNameView(reg, info.name, 'status')}</b>, per ${noun}
        (${FIRST_MAP_WHY}), still verifying: <b class="first-stage" data-method=${look}>${ctl.firstLook(info.name, s, noun)}…</b>
        Hatched: estimated, not measured. ${pending !== null ? html`Then exact <b>${methodNameView(reg, pending, 'status')}</b> confirms it.` : nothing}</span>
      ${stop} ${gradient}</div>`;
  } else if (ctl.autoShown && pending !== null && s !== null) {
    // A first map the server names is on screen; the exact method confirms it.
    return html`<div class="segment-status pending" role="status" data-method=${info.name} data-pending=${pending}
        data-first=${info.name} data-auto="true">
      <div class="bar"><div></div></div>
      <span>First map: <b class="method-on-screen first-map" data-method=${info.name}>${methodNameView(reg, info.name, 'status')}</b>, per ${noun}
        (${FIRST_MAP_WHY}). <b>${methodNameView(reg, pending, 'status')}</b> is being measured${segmentProgress(ctl.segmentDetail)} to confirm it;
        it replaces the first map when done.</span> ${stop} ${gradient}
      ${ctl.segmentError ? html`<span class="error-text">${ctl.segmentError}</span>` : nothing}</div>`;
  } else if (ctl.segmentError) {
    body = html`<span class="error-text" role="alert">${ctl.segmentError}</span>`;
  } else if (s !== null && s.partial) {  // a method you chose, still measuring: its values so far
    body = html`<span class="measuring">measuring${segmentProgress(ctl.segmentDetail)}; on screen so far:
      <b class="first-stage" data-method=${ctl.partialName(info.name, s)}>${ctl.firstLook(info.name, s, noun)}</b> (hatched: estimated, not measured)…</span>`;
  } else if (s !== null) {
    const fit = describeFit(s);
    const refined = describeRefinement(s, noun);
    body = html`${fit ? html`<span class="fit ${s.warning ? 'warn' : ''}">${fit}</span>` : nothing}
      ${refined ? html`<span class="refined">${refined}</span>` : nothing}
      ${s.warning ? html`<div class="segment-warning" role="note">⚠ ${s.warning}</div>` : nothing}`;
  } else if (ctl.segmentsOnRequest()) {
    const verb = info.count_field !== null ? `Fit ${info.short} on ${info.default_count} random ${noun} removals`
        : `Measure each ${noun} by removing it`;
    const n = ctl.segmentCost();  // 0: measured already on this server (another page): the answer is its cache's
    const cost = n === 0 ? 'measured already, no forward' : `~${n} forwards`;
    // Where the server names a faster default for this granularity (word_verified at word, coarse-to-fine at token), the
    // button runs it, worded by its record (its forwards where its budget states them, else its cost unit); the
    // method on screen (every word) stays one click away.
    const faster = ctl.requestDefault();
    const fasterCost = (m: SegmentMethodInfo) => (m.budget ? `~${ctl.segmentCost(m.name)} forwards` : m.cost_unit);
    body = faster !== null
      ? html`<button class="measure" data-method=${faster.name} title=${`${faster.cost_unit}. ${faster.trust ?? ''}`}
          @click=${() => on.measureWith(faster.name)}>Measure with ${faster.label}: ${fasterCost(faster)}</button>
        <button class="measure-all" @click=${() => on.measure()}>${verb}: ${cost}</button>`
      : ctl.isRequestDefault()
      ? html`<button class="measure" data-method=${info.name} title=${`${info.cost_unit}. ${info.trust ?? ''}`}
          @click=${() => on.measure()}>Measure with ${info.label}: ${fasterCost(info)}</button>`
      : html`<button class="measure" @click=${() => on.measure()}>${verb}: ${cost}</button>`;
  } else {
    body = html`<span class="measuring">measuring${segmentProgress(ctl.segmentDetail)}…</span>`;
  }
  return html`<div class="segment-status" role="status" data-method=${info.name} data-auto=${ctl.autoShown ? 'true' : 'false'}>
    <span>On screen: <b class="method-on-screen">${methodNameView(reg, info.name, 'status')}</b>, measured per ${noun}: changing granularity
      re-measures${ctl.autoShown ? ` (shown instead of the first map${ctl.firstShown ? `, ${reg.label(ctl.firstShown.method)},` : ''} once measured)` : ''}.</span>
    ${body} ${gradient}</div>`;
}

/** Why the first map is the method the server names (sequence_salience/first_map.py's rule), or the gradient. */
const FIRST_MAP_WHY = 'the fastest method whose agreement with exact leave-one-out on held-out prompts clears the bar';
const GRADIENT_WHY = 'no faster method agrees well enough with exact leave-one-out on held-out prompts';

/** The step / sample count of a method computed on request, and its per-token switch when it is selected. */
function countControlsView(ctl: SalienceController, info: ExtraMethodInfo) {
  const {name, label, count_unit: unit} = info;
  const selected = ctl.method === name;
  if (!selected) return nothing;  // the step / sample count is used only by its own method
  return html`
      <label title="${label}: number of ${unit}">${info.short} ${unit}
        <input class="${info.tag}-${unit}" type="number" min="1" max=${info.max_count}
            .value=${String(ctl.counts[name])}
            @change=${(e: Event) => ctl.enterCount(name, value(e))}></label>
      ${ctl.countErrors[name] ? html`<span class="count-error" role="alert">${ctl.countErrors[name]}</span>` : nothing}
      ${html`<label title="Compute ${label} for every response token (slow: minutes on a CPU); otherwise only the span on screen">
        <input class="${info.tag}-per-token" type="checkbox" .checked=${ctl.perToken[name]}
            @change=${(e: Event) => ctl.setPerToken(name, (e.target as HTMLInputElement).checked)}>
        per-token ${info.short}</label>`}`;
}

export function statusView(ctl: SalienceController) {
  if (ctl.status === 'loading') {
    return html`<div class="status loading" role="status">
      <div class="bar"><div></div></div>
      <span>${ctl.message} ${ctl.elapsed > 0 && !ctl.tokensStreaming() ? html`(${ctl.elapsed} s)` : nothing}</span></div>`;
  }
  if (ctl.status === 'error') {
    return html`<div class="status error" role="alert">
      ${errorIcon()}
      <span class="error-text">${ctl.message}</span>
      <button @click=${() => ctl.retry()}>Retry</button></div>`;
  }
  return nothing;
}

export function emptyView(ctl: SalienceController) {
  if (ctl.status !== 'idle') return nothing;
  return html`<div class="empty">Select a prompt in the data table, or write one in the datapoint editor and click “Add”.</div>`;
}
