/**
 * Templates of the compare view (room.ts computes what they show): the pinned and the selected
 * response with the word diff marked (<del> only in the pinned one, <ins> only in the selected one),
 * the pinned answer's log p under both prompts with Δ log p (per token on request), and the aligned
 * prompt coloured either by both values (top half pinned, bottom half selected, one shared scale) or
 * by the difference (selected − pinned, signed scale). The two view buttons are a toggle group:
 * Tab reaches them, Enter/Space or ←/→ switch, and "d" anywhere in the view toggles.
 */
import {html, nothing, type TemplateResult} from 'lit';

import {colorFor, formatValue, legendGradient, legendStops, type ColorScale} from '../shared/colormap.js';
import {alignedText, changed, describeDelta, type Alignment, type CrossPayload} from './logic.js';
import type {CompareMode, CompareModel} from './room.js';

const LABEL_A = 'Pinned';
const LABEL_B = 'Selected';

function fmt(v: number): string {
  return Number.isFinite(v) ? formatValue(v) : '–';
}

function responseView(al: Alignment, side: 'a' | 'b'): TemplateResult[] {
  return al.segments.map((s, k) => {
    const text = alignedText(al, k, side);
    if (text === '') return html``;
    if (s.kind === 'equal') return html`${text}`;
    return side === 'a' ? html`<del class="diff" title="not in the selected response">${text}</del>`
        : html`<ins class="diff" title="not in the pinned response">${text}</ins>`;
  });
}

function bg(v: number, cs: ColorScale): {bg: string; fg: string} | null {
  return Number.isFinite(v) ? colorFor(v, cs) : null;
}

function promptView(m: CompareModel): TemplateResult[] {
  const al = m.prompts!;
  return al.segments.map((s, k) => {
    const ta = alignedText(al, k, 'a'), tb = alignedText(al, k, 'b');
    const va = m.valuesA?.[k] ?? NaN, vb = m.valuesB?.[k] ?? NaN, d = m.diff?.[k] ?? NaN;
    const markup = m.valuesA !== null && !Number.isFinite(va) && !Number.isFinite(vb);
    const title = markup ? 'template markup (not scored)'
        : `${LABEL_A} ${fmt(va)} · ${LABEL_B} ${fmt(vb)} · Δ ${fmt(d)}`;
    const one = (v: number, cs: ColorScale | null) => {
      const c = cs === null || markup ? null : bg(v, cs);
      return c === null ? '' : `background:${c.bg};color:${c.fg}`;
    };
    if (s.kind === 'equal') {
      let style = '';
      if (m.mode === 'difference') {
        style = one(d, m.diffScale);
      } else if (m.scale !== null && !markup) {
        const ca = bg(va, m.scale)?.bg ?? '#fff', cb = bg(vb, m.scale)?.bg ?? '#fff';
        style = `background:linear-gradient(to bottom, ${ca} 0 50%, ${cb} 50% 100%)`;
      }
      return html`<span class="cseg ${markup ? 'markup' : ''}" data-k=${k} title=${title} style=${style}>${tb}</span>`;
    }
    const styleA = m.mode === 'difference' ? one(d, m.diffScale) : one(va, m.scale);
    const styleB = m.mode === 'difference' ? one(d, m.diffScale) : one(vb, m.scale);
    return html`${ta ? html`<del class="cseg" data-k=${k} title=${title} style=${styleA}>${ta}</del>` : nothing}${
        tb ? html`<ins class="cseg" data-k=${k} title=${title} style=${styleB}>${tb}</ins>` : nothing}`;
  });
}

function legendView(title: string, cs: ColorScale): TemplateResult {
  return html`<div class="clegend"><div class="legend-title">${title}</div>
    <div class="legend-bar" style="background:${legendGradient(cs)}"></div>
    <div class="legend-labels">${legendStops(cs, 3).map((s) => html`<span>${formatValue(s.value)}</span>`)}</div></div>`;
}

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
      <table><tr><th>token</th><th>${LABEL_A}</th><th>${LABEL_B}</th><th>Δ</th></tr>
        ${per.map((d, t) => html`<tr><td class="tok">${JSON.stringify(c.under_a.tokens[t])}</td>
          <td>${c.under_a.logprobs[t].toFixed(3)}</td><td>${c.under_b.logprobs[t].toFixed(3)}</td>
          <td>${d >= 0 ? '+' : ''}${d.toFixed(3)}</td></tr>`)}
      </table></details>`}
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
  const modes: Array<[CompareMode, string]> = [['both', 'Both values'], ['difference', `Difference (${LABEL_B.toLowerCase()} − ${LABEL_A.toLowerCase()})`]];
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
        <div class="section-label">Responses ${changed(m.responses) ? '(different)' : '(the same)'}</div>
        <div class="crow"><span class="who">${LABEL_A}</span><div class="text cresp response-a">${responseView(m.responses, 'a')}</div></div>
        <div class="crow"><span class="who">${LABEL_B}</span><div class="text cresp response-b">${responseView(m.responses, 'b')}</div></div>
        ${crossView(m)}
        <div class="old-answer-row">${oldAnswerView(m, on)}</div>
        <div class="section-label">Prompt${m.useOld ? ' (selected side: the pinned answer under the selected prompt)' : ''}: ${m.mode === 'both'
            ? html`top half ${LABEL_A.toLowerCase()}, bottom half ${LABEL_B.toLowerCase()} (one scale)`
            : html`selected − pinned per aligned segment`}; struck through: only in the pinned prompt, underlined: only in the selected one</div>
        <div class="text cprompt mode-${m.mode} ${m.valuesA === null ? 'pending' : ''}">${m.prompts ? promptView(m) : nothing}</div>
        <div class="clegends">${m.scale && m.mode === 'both' ? legendView('Shared scale', m.scale) : nothing}
          ${m.diffScale && m.mode === 'difference' ? legendView('Difference', m.diffScale) : nothing}</div>`;
  return html`
    <div class="compare" role="region" aria-label="Compared with the pinned datapoint" tabindex="-1" @keydown=${onKey}>
      <div class="compare-head">
        <span class="section-label">Compared with the pinned datapoint (LIT's pin; unpin to leave)</span>
        <span class="modes" role="group" aria-label="Prompt colours (d toggles)">
          ${modes.map(([mode, label]) => html`<button class="mode mode-${mode}" aria-pressed=${m.mode === mode ? 'true' : 'false'}
              @click=${() => setMode(mode)}>${label}</button>`)}
        </span>
      </div>
      ${body}
    </div>`;
}
