/** Rendering of the Compare models module (module.ts): the responses diff-marked, the log p table, both maps on
 * one shared scale per aligned prompt segment (A top half, B bottom half), the difference, the legends; all
 * but the head and the layout are ../compare/sides.ts's (shared with the compare view of an edit). */
import {css, html, type TemplateResult} from 'lit';

import {changed} from '../compare/logic.js';
import {legendView, logpTable, promptView, responsesView, type SideLabels} from '../compare/sides.js';
import {COMPARE_SIDES_STYLES} from '../compare/styles.js';
import type {CrossRow, ModelsView} from './logic.js';

export const COMPARE_MODELS_STYLES = [COMPARE_SIDES_STYLES, css`
  :host { display: block; height: 100%; }
  .module { font-family: Roboto, sans-serif; font-size: 13px; padding: 6px 8px; overflow: auto; height: 100%;
            box-sizing: border-box; }
  .label { font-weight: 500; color: #3c4043; margin: 10px 0 2px; }
  .text { white-space: pre-wrap; line-height: 1.9; }
  .legend-bar { height: 10px; border: 1px solid #dadce0; border-radius: 2px; }
  .legend-labels { display: flex; justify-content: space-between; font-size: 11px; color: #5f6368; }
  .legend-title { font-size: 11px; color: #5f6368; }
  .hint, .status { color: #5f6368; padding: 8px 0; }
  .error { color: #c5221f; padding: 8px 0; }
`];

export function modelsView(view: ModelsView, rows: CrossRow[] | null, method: string, granularity: string):
    TemplateResult {
  const [la, lb] = view.labels;
  const labels: SideLabels = {a: la, b: lb};
  return html`
    <div class="head">${method} · <span class="granularity">${granularity}</span> · <b>${la}</b> vs <b>${lb}</b></div>
    <div class="label">Responses (${changed(view.responses) ? 'different' : 'the same'})</div>
    ${responsesView(view.responses, labels)}
    <div class="label">Each answer under both models (teacher-forced log p)</div>
    ${rows === null ? html`<div class="status cross-pending">Scoring each answer under the other model ...</div>`
        : logpTable('cross', ['', `under ${la}`, `under ${lb}`, `Δ (${lb} − ${la})`], rows.map((r) => ({
          label: `${r.answerOf}'s answer`, a: r.underA, b: r.underB, delta: r.underB - r.underA})), 'cross-row')}
    <div class="label">Prompt salience, both (${la} top half, ${lb} bottom half; one scale)</div>
    <div class="text cprompt view-both">${promptView(view.prompts, view, 'both', labels)}</div>
    <div class="label">Difference (${lb} − ${la})</div>
    <div class="text cprompt view-difference">${promptView(view.prompts, view, 'difference', labels)}</div>
    <div class="clegends">${legendView('Shared scale', view.scale, 'legend-shared')}${
        legendView(`Difference ${lb} − ${la}`, view.diffScale, 'legend-diff')}</div>
  `;
}

export function hintView(text: string, cls = 'hint'): TemplateResult {
  return html`<div class=${cls}>${text}</div>`;
}
