/** Rendering of the Compare models module (module.ts): responses diff-marked, the log p table, both maps on
 * one shared scale per aligned prompt segment (A top half, B bottom half), the difference, the legends. */
import {css, html, type TemplateResult} from 'lit';

import {alignedText, changed} from '../compare/logic.js';
import {colorFor, formatValue, legendGradient, legendStops, type ColorScale} from '../shared/colormap.js';
import type {CrossRow, ModelsView} from './logic.js';

export const COMPARE_MODELS_STYLES = css`
  :host { display: block; height: 100%; }
  .module { font-family: Roboto, sans-serif; font-size: 13px; padding: 6px 8px; overflow: auto; height: 100%;
            box-sizing: border-box; }
  .label { font-weight: 500; color: #3c4043; margin: 10px 0 2px; }
  .text { white-space: pre-wrap; line-height: 1.9; }
  .side { display: inline-block; min-width: 64px; color: #5f6368; font-size: 12px; }
  del.diff { background: #fce8e6; text-decoration: line-through; }
  ins.diff { background: #e6f4ea; text-decoration: none; }
  .seg { border-radius: 2px; }
  table.logp { border-collapse: collapse; font-size: 12px; }
  table.logp td, table.logp th { border: 1px solid #dadce0; padding: 2px 8px; text-align: right; }
  table.logp td:first-child { text-align: left; }
  .legend { display: inline-block; width: 220px; margin: 6px 16px 0 0; font-size: 11px; color: #5f6368; }
  .legend-bar { height: 10px; border: 1px solid #dadce0; border-radius: 2px; }
  .legend-labels { display: flex; justify-content: space-between; }
  .hint, .status { color: #5f6368; padding: 8px 0; }
  .error { color: #c5221f; padding: 8px 0; }
`;

function responseHtml(view: ModelsView, side: 'a' | 'b'): TemplateResult[] {
  return view.responses.segments.map((s, k) => {
    const text = alignedText(view.responses, k, side);
    if (s.kind === 'equal' || text === '') return html`${text}`;
    const other = view.labels[side === 'a' ? 1 : 0];
    return side === 'a' ? html`<del class="diff" title="not in ${other}">${text}</del>`
                        : html`<ins class="diff" title="not in ${other}">${text}</ins>`;
  });
}

function both(view: ModelsView): TemplateResult[] {
  return view.prompts.segments.map((s, k) => {
    const text = alignedText(view.prompts, k, 'b') || alignedText(view.prompts, k, 'a');
    const a = view.a[k], b = view.b[k];
    if (!Number.isFinite(a) && !Number.isFinite(b)) return html`<span class="seg">${text}</span>`;
    const ca = Number.isFinite(a) ? colorFor(a, view.scale).bg : 'transparent';
    const cb = Number.isFinite(b) ? colorFor(b, view.scale).bg : 'transparent';
    const title = `${view.labels[0]} ${Number.isFinite(a) ? formatValue(a) : '–'} · ${view.labels[1]} ` +
        `${Number.isFinite(b) ? formatValue(b) : '–'} (${s.kind})`;
    return html`<span class="seg both" data-k=${k} title=${title}
        style="background: linear-gradient(to bottom, ${ca} 50%, ${cb} 50%)">${text}</span>`;
  });
}

function diffView(view: ModelsView): TemplateResult[] {
  return view.prompts.segments.map((s, k) => {
    const text = alignedText(view.prompts, k, 'b') || alignedText(view.prompts, k, 'a');
    const d = view.diff[k];
    if (!Number.isFinite(d)) return html`<span class="seg">${text}</span>`;
    const c = colorFor(d, view.diffScale);
    return html`<span class="seg diff-seg" data-k=${k} title="Δ ${formatValue(d)} (${s.kind})"
        style="background: ${c.bg}; color: ${c.fg}">${text}</span>`;
  });
}

function legend(title: string, cs: ColorScale, cls: string): TemplateResult {
  return html`<div class="legend ${cls}"><div>${title}</div>
    <div class="legend-bar" style="background: ${legendGradient(cs)}"></div>
    <div class="legend-labels">${legendStops(cs, 3).map((s) => html`<span>${formatValue(s.value)}</span>`)}</div></div>`;
}

export function modelsView(view: ModelsView, rows: CrossRow[] | null, method: string, granularity: string):
    TemplateResult {
  const [la, lb] = view.labels;
  return html`
    <div class="head">${method} · <span class="granularity">${granularity}</span> · <b>${la}</b> vs <b>${lb}</b></div>
    <div class="label">Responses (${changed(view.responses) ? 'different' : 'the same'})</div>
    <div class="text response response-a"><span class="side">${la}</span>${responseHtml(view, 'a')}</div>
    <div class="text response response-b"><span class="side">${lb}</span>${responseHtml(view, 'b')}</div>
    <div class="label">Each answer under both models (teacher-forced log p)</div>
    ${rows === null ? html`<div class="status cross-pending">Scoring each answer under the other model ...</div>` : html`
      <table class="logp cross">
        <tr><th></th><th>under ${la}</th><th>under ${lb}</th><th>Δ (${lb} − ${la})</th></tr>
        ${rows.map((r) => html`<tr class="cross-row"><td>${r.answerOf}'s answer</td><td>${r.underA.toFixed(3)}</td>
          <td>${r.underB.toFixed(3)}</td><td>${(r.underB - r.underA >= 0 ? '+' : '') + (r.underB - r.underA).toFixed(3)}</td></tr>`)}
      </table>`}
    <div class="label">Prompt salience, both (${la} top half, ${lb} bottom half; one scale)</div>
    <div class="text prompt view-both">${both(view)}</div>
    <div class="label">Difference (${lb} − ${la})</div>
    <div class="text prompt view-difference">${diffView(view)}</div>
    ${legend('Shared scale', view.scale, 'legend-shared')}${legend(`Difference ${lb} − ${la}`, view.diffScale, 'legend-diff')}
  `;
}

export function hintView(text: string, cls = 'hint'): TemplateResult {
  return html`<div class=${cls}>${text}</div>`;
}

