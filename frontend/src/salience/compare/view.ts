/**
 * Templates of the compare view (room.ts computes what they show): the pinned and the selected
 * response with the word diff marked (<del> only in the pinned one, <ins> only in the selected one),
 * the pinned answer's log p under both prompts with Δ log p (per token on request), and the aligned
 * prompt (first, right under the view buttons: at 1280×720 it is on screen with them) coloured either by both values (top half pinned, bottom half selected, one shared scale) or
 * by the difference (selected − pinned, signed scale). The two view buttons are a toggle group:
 * Tab reaches them, Enter/Space or ←/→ switch, and "d" anywhere in the view toggles. The responses,
 * prompt, legend and log p table are ./sides.ts's (shared with the Compare models section of the salience module, ../compare_models/).
 */
import {html, nothing, type TemplateResult} from 'lit';

import {changed} from './alignment.js';
import {describeDelta, type CompareMode, type CrossPayload} from './logic.js';
import type {CompareModel} from './room.js';
import {modelLabelView} from '../../shared/lit_module.js';
import {methodNameView} from '../../shared/method_help.js';
import {legendView, logpTable, promptView, responsesView, RUN_NOTE, type SideLabels} from './sides.js';

const LABELS: SideLabels = {a: 'Pinned', b: 'Selected'};

/** "1 teacher-forced forward; pinned salience from the cache" (what the comparison cost the server). */
export function costText(c: CrossPayload): string {
  const fw = `${c.forwards} teacher-forced forward${c.forwards === 1 ? '' : 's'}`;
  const sal = c.pinned_salience_passes > 0 ? 'pinned salience computed (1 forward + backward)' : 'pinned salience from the cache';
  return `(${fw}; ${sal})`;
}

function crossView(m: CompareModel): TemplateResult {
  if (m.crossError) return html`<div class="cross status error inline" role="alert">${m.crossError}</div>`;
  if (m.cross === null) {
    return html`<div class="cross">${m.crossLoading ? 'Scoring the pinned answer under the selected prompt…' : ''}</div>`;
  }
  const c = m.cross;
  const per = c.per_token_delta;
  return html`<div class="cross">
    log p(pinned answer | pinned prompt) = <b class="logp-a">${c.under_a.total.toFixed(3)}</b> ·
    | selected prompt = <b class="logp-b">${c.under_b.total.toFixed(3)}</b> ·
    Δ log p = <b class="delta ${c.delta < 0 ? 'neg' : 'pos'}">${describeDelta(c.delta)}</b>
    <span class="cost" title="model passes the server ran for this comparison">${costText(c)}</span>
    ${per === null ? nothing : html`<details class="per-token"><summary>per token (${per.length})</summary>
      ${logpTable('', ['token', LABELS.a, LABELS.b, 'Δ'], per.map((d, t) => ({
        label: JSON.stringify(c.under_a.tokens[t]), a: c.under_a.logprobs[t], b: c.under_b.logprobs[t], delta: d})),
        '', 'tok')}</details>`}
  </div>`;
}

/** What the user can do in the compare view. */
export interface CompareEvents {
  /** Colour the prompt by both values or by the difference. */
  setMode(mode: CompareMode): void;
  /** Ask for the pinned answer's salience under the selected prompt. */
  explainOldAnswer(): void;
  /** Which answer the selected side explains: the pinned one (true) or its own. */
  setUseOld(on: boolean): void;
}

function oldAnswerView(m: CompareModel, on: CompareEvents): TemplateResult {
  if (m.oldAnswer === 'off') {
    return html`<button class="old-answer" @click=${() => on.explainOldAnswer()}
        title="One forward + backward: which parts of the selected prompt drive the pinned answer">
        Explain the pinned answer under the selected prompt</button>`;
  }
  if (m.oldAnswer === 'loading') return html`<span class="old-answer-status">Explaining the pinned answer…</span>`;
  return html`<label class="old-answer-choice">Selected side explains
    <select class="old-answer-select" @change=${(e: Event) => on.setUseOld((e.target as HTMLSelectElement).value === 'pinned')}>
      <option value="own" ?selected=${!m.useOld}>its own answer</option>
      <option value="pinned" ?selected=${m.useOld}>the pinned answer</option>
    </select></label>`;
}

/** The compare view. */
export function compareView(m: CompareModel, on: CompareEvents): TemplateResult {
  const setMode = (mode: CompareMode) => on.setMode(mode);
  const modes: Array<[CompareMode, string]> = [['both', 'Both values'], ['difference', `Difference (${LABELS.b.toLowerCase()} − ${LABELS.a.toLowerCase()})`]];
  const other = (mode: CompareMode): CompareMode => (mode === 'both' ? 'difference' : 'both');
  const onKey = (e: KeyboardEvent) => {
    const target = e.target as HTMLElement;
    if (target.tagName === 'INPUT' || target.tagName === 'SELECT' || target.tagName === 'TEXTAREA') return;
    if (e.key === 'd' || ((e.key === 'ArrowLeft' || e.key === 'ArrowRight') && target.classList.contains('mode'))) {
      e.preventDefault();
      setMode(other(m.mode));
    }
  };
  const body = m.pinnedStatus === 'error' ? html`<div class="status error inline" role="alert">
        The pinned datapoint: ${m.pinnedMessage}</div>`
      : m.responses === null ? html`<div class="status inline">Loading the pinned datapoint…</div>`
      : html`
        <div class="section-label">Prompt${m.useOld ? ' (selected side: the pinned answer under the selected prompt)' : ''},
            ${methodNameView(m.registry, m.method, 'compare')}: ${m.mode === 'both'
            ? html`top half ${LABELS.a.toLowerCase()}, bottom half ${LABELS.b.toLowerCase()} (one scale)`
            : html`selected − pinned per aligned segment`}; struck through: only in the pinned prompt, underlined: only in the selected one</div>
        <div class="text cprompt mode-${m.mode} ${m.values === null ? 'pending' : ''}" data-pair=${m.pair}>${
            m.prompts ? promptView(m.prompts, m.values, m.mode, LABELS) : nothing}</div>
        <div class="clegends">${m.values === null ? (m.valuesNote ? html`<span class="values-note">${m.valuesNote}</span>` : nothing) : m.mode === 'both'
            ? legendView('Shared scale', m.values.scale, 'legend-shared')
            : legendView('Difference', m.values.diffScale, 'legend-diff', m.prompts && changed(m.prompts) ? RUN_NOTE : '')}</div>
        <div class="section-label">Responses ${changed(m.responses) ? '(different)' : '(the same)'}</div>
        ${responsesView(m.responses, LABELS, m.forced)}
        ${crossView(m)}
        <div class="old-answer-row">${oldAnswerView(m, on)}</div>`;
  return html`
    <div class="compare" role="region" aria-label="Compared with the pinned datapoint" tabindex="-1" @keydown=${onKey}>
      <div class="compare-head">
        <span class="section-label">Compared with the pinned datapoint (LIT's pin; unpin to leave)
          ${modelLabelView(m.model)}</span>
        <span class="modes" role="group" aria-label="Prompt colours (d toggles)">
          ${modes.map(([mode, label]) => html`<button class="mode mode-${mode}" aria-pressed=${m.mode === mode ? 'true' : 'false'}
              @click=${() => setMode(mode)}>${label}</button>`)}
        </span>
      </div>
      ${body}
    </div>`;
}

/**
 * After a render (the element's `updated`): the aligned prompt scrolls to its first edit, once per compared pair, so
 * that the edit is in the comparison's few lines (it gives up room to the map below: ./styles.ts); then it stays
 * where the user scrolls it.
 */
export function showFirstEdit(root: ParentNode) {
  const box = root.querySelector<HTMLElement>('.compare .cprompt[data-pair]');
  if (box === null || box.childElementCount === 0 || box.dataset['shown'] === box.dataset['pair']) return;
  box.dataset['shown'] = box.dataset['pair'];  // the aligned prompt is drawn: its edit (if any) is shown once
  const edit = box.querySelector('ins, del');
  if (edit === null) return;
  const lineHeight = parseFloat(getComputedStyle(box).lineHeight) || 20;
  box.scrollTop += edit.getBoundingClientRect().top - box.getBoundingClientRect().top - lineHeight;
  edit.scrollIntoView({block: 'nearest', inline: 'nearest'});  // the comparison's own scroll, when it is below
}
