/** Rendering of the "Compare models" section of the salience module (room.ts says what to show): the toggle,
 * the responses diff-marked, the log p table, both maps on one shared scale per aligned prompt segment (A top
 * half, B bottom half), the difference, the legends; all but the head and the layout are ../compare/sides.ts's
 * (shared with the compare view of an edit). */
import {css, html, nothing, type TemplateResult} from 'lit';

import {methodNameView} from '../../shared/method_help.js';
import type {MethodRegistry} from '../../shared/methods.js';
import {changed} from '../compare/alignment.js';
import {legendView, logpTable, promptView, responsesView, RUN_NOTE, type SideLabels} from '../compare/sides.js';
import type {ComparedMethod, CrossRow, ModelsView} from './logic.js';
import type {CompareModelsRoom} from './room.js';

/** Added to the salience module's styles (which include COMPARE_STYLES: `.compare`, the shared sides). */
export const COMPARE_MODELS_STYLES = css`
  .compare-models .toggle { font: inherit; font-size: 12px; border: 1px solid #dadce0; background: #fff;
                            border-radius: 12px; padding: 1px 10px; cursor: pointer; }
  .compare-models .toggle[aria-expanded="true"] { background: #e8f0fe; border-color: #1a73e8; color: #1967d2; }
  .compare-models .toggle:focus-visible { outline: 2px solid #1a73e8; }
  .compare-models .models-head { color: #3c4043; margin: 4px 0; }
  .compare-models .models-status { color: #5f6368; padding: 4px 0; }
  .compare-models .models-error { color: #a50e0e; background: #fce8e6; border-radius: 4px; padding: 4px 8px; }
  /* Open, the section sits beside the map (../../salience_comparisons.ts render): the map keeps the module's height
     below the controls (at 1280×720 LIT gives each of two models' modules about 243 px), the section scrolls within
     it (absolutely placed, so its length never makes the row taller than the map). */
  .beside-map { flex: 1; display: flex; flex-direction: column; }
  .beside-map .map-column { flex: 1; min-width: 0; display: flex; flex-direction: column; }
  .beside-map.open { flex-direction: row; min-height: calc(6 * 1.7 * 12.5px + 170px); }  /* the map's (../styles.ts) */
  .beside-map.open .map-column { flex: 1 1 58%; }
  .beside-map.open .models-column { flex: 0 0 42%; order: 1; min-width: 0; position: relative; }
  .beside-map.open .models-column > .compare { position: absolute; inset: 0; max-height: none; min-height: 0;
                                               border-bottom: none; border-left: 2px solid #dadce0; }
  .beside-map.open .side { width: 170px; }
`;

function modelsView(view: ModelsView, rows: CrossRow[] | null, method: ComparedMethod | null, granularity: string,
                    reg: MethodRegistry | null): TemplateResult {
  const [la, lb] = view.labels;
  const labels: SideLabels = {a: la, b: lb};
  return html`
    <div class="models-head"><span class="method" data-method=${method?.method ?? ''}>${method === null ? ''
        : methodNameView(reg, method.method, 'compare-models', method.label)}</span>
      · <span class="granularity">${granularity}</span> · <b>${la}</b> vs <b>${lb}</b></div>
    ${method?.note ? html`<div class="models-status method-note" role="note">${method.note}</div>` : nothing}
    <div class="section-label">Responses (${changed(view.responses) ? 'different' : 'the same'})</div>
    ${responsesView(view.responses, labels)}
    <div class="section-label">Each answer under both models (teacher-forced log p)</div>
    ${rows === null ? html`<div class="models-status cross-pending">Scoring each answer under the other model ...</div>`
        : logpTable('cross', ['', `under ${la}`, `under ${lb}`, `Δ (${lb} − ${la})`], rows.map((r) => ({
          label: `${r.answerOf}'s answer`, a: r.underA, b: r.underB, delta: r.underB - r.underA})), 'cross-row')}
    <div class="section-label">Prompt salience, both (${la} top half, ${lb} bottom half; one scale)</div>
    <div class="text cprompt view-both">${promptView(view.prompts, view, 'both', labels)}</div>
    <div class="section-label">Difference (${lb} − ${la})</div>
    <div class="text cprompt view-difference">${promptView(view.prompts, view, 'difference', labels)}</div>
    <div class="clegends">${legendView('Shared scale', view.scale, 'legend-shared')}${
        legendView(`Difference ${lb} − ${la}`, view.diffScale, 'legend-diff', changed(view.prompts) ? RUN_NOTE : '')}</div>
  `;
}

/**
 * The section: nothing unless two models are selected (in the first model's salience module only); the toggle,
 * then (open) the comparison with the module's method.
 */
export function compareModelsView(room: CompareModelsRoom, toggle: () => void): TemplateResult | typeof nothing {
  if (room.pair === null) return nothing;
  const [a, b] = room.pair;
  return html`
    <div class="compare compare-models ${room.open ? 'open' : 'closed'}" role="region" aria-label="Compare models">
      <div class="compare-head">
        <span class="section-label">Two models selected: <b>${a}</b> and <b>${b}</b></span>
        <button class="toggle" aria-expanded=${room.open ? 'true' : 'false'} aria-controls="compare-models-body"
            title="Both responses, both salience maps on one scale, the difference and each model's log p of the other's answer"
            @click=${toggle}>Compare models</button>
      </div>
      ${!room.open ? nothing : html`<div id="compare-models-body">
        ${room.error ? html`<div class="models-error" role="alert">${room.error}</div>` : nothing}
        ${room.status ? html`<div class="models-status" role="status">${room.status}</div>` : nothing}
        ${room.view !== null ? modelsView(room.view, room.rows, room.method, room.granularity, room.registry()) : nothing}
      </div>`}
    </div>`;
}
