/**
 * The heatmap's templates and styles: its row / scale controls, the matrix as a table (rows: the
 * response's tokens or segments, columns: the prompt's segments), the selected rows (the target)
 * outlined. Functions of what they show and of callbacks; the element (../../salience_module.ts) keeps the state.
 */
import {css, html, nothing, type TemplateResult} from 'lit';

import {colorFor, formatValue, legendGradient, type ColorScale} from '../../shared/colormap.js';
import {columnHeading, rowScale, type Heatmap, type HeatmapRows, type HeatmapScale} from './logic.js';

/** Alt+H (and no other modifier): the key that toggles the heatmap (the element listens on the window). */
export function isHeatmapKey(e: Pick<KeyboardEvent, 'altKey' | 'ctrlKey' | 'metaKey' | 'shiftKey' | 'code'>): boolean {
  return e.altKey && !e.ctrlKey && !e.metaKey && !e.shiftKey && e.code === 'KeyH';
}

/** The button that switches between the text view and the heatmap (Alt+H, or Tab and Enter). */
export function viewToggleView(on: boolean, toggle: () => void): TemplateResult {
  return html`<button class="view-toggle" aria-keyshortcuts="Alt+H" aria-pressed=${on ? 'true' : 'false'}
      title=${on ? 'Back to the text view (Alt+H)' : 'Answer × prompt heatmap: rows are response tokens or segments, columns prompt segments (Alt+H)'}
      @click=${toggle}>${on ? 'Text view' : 'Heatmap'}</button>`;
}

/** "Share this view": downloads the standalone page of what is on screen (../share.ts; Tab and Enter too). */
export function shareButtonView(busy: boolean, disabled: boolean, share: () => void): TemplateResult {
  return html`<button class="share-view" ?disabled=${busy || disabled} aria-busy=${busy ? 'true' : 'false'}
      title="Download this view as one HTML file that opens offline: model, prompt, answer, method, granularity, the map, the answer × prompt matrix with its numbers, the faithfulness test of this target when one ran (Test this explanation), and a notebook cell that recomputes it"
      @click=${share}>${busy ? 'Writing…' : 'Share this view'}</button>`;
}

/**
 * When the target on screen passes its completeness check but other rows do not (or were not checked): how many rows
 * are empty and why, with "Show anyway" (the text view's rejected line says it for the target itself).
 */
export function hiddenRowsView(hidden: number, rows: number, label: string, show: () => void): TemplateResult {
  return html`<div class="status inline completeness-rejected warn hidden-rows" role="note" data-shown="no">
    ⚠ ${hidden} of ${rows} rows empty: ${label}'s values there fail the server's completeness check, or it did not
    check them. <button class="show-anyway" aria-pressed="false" @click=${show}>Show anyway</button></div>`;
}

export interface HeatmapEvents {
  rows(mode: HeatmapRows): void;
  scale(scale: HeatmapScale): void;
  /** A row chosen (click, Enter, arrows): its target span. */
  pick(row: number): void;
  /** Escape: the whole response. */
  whole(): void;
  /** Keyboard move from row `from` (returns the row to focus, or null). */
  key(e: KeyboardEvent, from: number): number | null;
  /** The answer's earlier tokens as columns (on / off). */
  prefix(on: boolean): void;
  /** Numbers in the cells (on / off). */
  numbers(on: boolean): void;
  /** Downloads: the matrix as CSV, as PNG. */
  csv(): void;
  png(): void;
}

export interface HeatmapLook {
  mode: HeatmapRows;
  scale: HeatmapScale;
  intensity: number;
  /** Rows inside the target span. */
  selected: ReadonlySet<number>;
  /** The row with tabindex 0 (keyboard focus). */
  focus: number;
  /** Whether the response's earlier segments are columns. */
  prefix: boolean;
  /** Whether the cells show their numbers. */
  numbers: boolean;
}

/**
 * The row / scale choices, the colour legend (`matrix`: the whole matrix's scale; null before there is one)
 * and what a click does.
 */
export function heatmapControlsView(look: HeatmapLook, on: HeatmapEvents, matrix: ColorScale | null): TemplateResult {
  const legend = matrix === null ? nothing : html`<span class="heatmap-legend">
    <span class="heatmap-legend-bar" style="background:${legendGradient({...matrix, intensity: 1})}"></span>
    ${look.scale === 'row' ? html`0 … each row's largest |value|` : html`${matrix.signed ? formatValue(-matrix.scale) : '0'} … ${formatValue(matrix.scale)}`}
  </span>`;
  return html`<div class="heatmap-controls">
    <label>Rows <select class="heatmap-rows" @change=${(e: Event) => on.rows((e.target as HTMLSelectElement).value as HeatmapRows)}>
      <option value="token" ?selected=${look.mode === 'token'}>Response tokens</option>
      <option value="segment" ?selected=${look.mode === 'segment'}>Response segments (granularity)</option>
    </select></label>
    <label title="Each row on its own colour scale (as the text view colours that target); untick: one scale for the whole matrix">
      <input type="checkbox" class="heatmap-row-scale" .checked=${look.scale === 'row'}
          @change=${(e: Event) => on.scale((e.target as HTMLInputElement).checked ? 'row' : 'all')}> scale each row</label>
    <label title="Columns for the answer's own earlier tokens too (a row's later ones stay blank: the model had not written them)">
      <input type="checkbox" class="heatmap-prefix" .checked=${look.prefix}
          @change=${(e: Event) => on.prefix((e.target as HTMLInputElement).checked)}> answer's earlier tokens</label>
    <label title="Each cell's value written in it (on by default when the cells are wide enough)">
      <input type="checkbox" class="heatmap-numbers" .checked=${look.numbers}
          @change=${(e: Event) => on.numbers((e.target as HTMLInputElement).checked)}> numbers</label>
    <button class="heatmap-csv" title="Download the matrix as CSV (its rows and columns as shown)" @click=${on.csv}>CSV</button>
    <button class="heatmap-png" title="Download the matrix as a PNG image" @click=${on.png}>PNG</button>
    ${legend}
    <span class="hint">Click a row to explain it (↑ ↓ move, Esc: whole response).</span>
  </div>`;
}

/** The matrix. Each cell's title has its row, column and value. */
export function heatmapTableView(h: Heatmap, look: HeatmapLook, on: HeatmapEvents): TemplateResult {
  const rows = h.rows.map((r, i) => {
    const cs: ColorScale = rowScale(h, i, look.scale, look.intensity);
    const sel = look.selected.has(i);
    return html`<tr class="hrow${sel ? ' sel' : ''}" data-row=${i} data-t0=${r.t0} data-t1=${r.t1}
        tabindex=${i === look.focus ? '0' : '-1'} role="button" aria-pressed=${sel ? 'true' : 'false'}
        @click=${() => on.pick(i)}
        @keydown=${(e: KeyboardEvent) => rowKey(e, i, on)}>
      <th class="row-label" scope="row" title=${JSON.stringify(r.text)}>${r.label}</th>
      ${Array.from(r.cells, (v, c) => {
        const color = Number.isFinite(v) ? colorFor(v, cs) : null;
        return html`<td class=${h.cols[c].response ? 'resp' : ''} style=${color ? `background:${color.bg};color:${color.fg}` : ''}
            title=${`${JSON.stringify(r.text)} ← ${JSON.stringify(h.cols[c].text)}: ${formatValue(v)}`}
            >${look.numbers && color !== null ? formatValue(v) : nothing}</td>`;
      })}</tr>`;
  });
  return html`<div class="heatmap-scroll">
    <table class="heatmap${look.numbers ? ' numbers' : ''}" aria-label="salience: response ${look.mode === 'token' ? 'tokens' : 'segments'} × prompt segments">
      <thead><tr><th class="corner">response ↓ · prompt →</th>
        ${h.cols.map((c) => html`<th class="col${c.response ? ' resp' : ''}" scope="col" title=${c.text}><span>${columnHeading(c)}</span></th>`)}</tr></thead>
      <tbody>${rows}</tbody>
    </table></div>`;
}

function rowKey(e: KeyboardEvent, i: number, on: HeatmapEvents) {
  if (e.key === 'Escape') {
    e.preventDefault();
    on.whole();
    return;
  }
  if (e.key === 'Enter' || e.key === ' ') {
    e.preventDefault();
    on.pick(i);
    return;
  }
  const next = on.key(e, i);
  if (next === null) return;
  e.preventDefault();
  const tr = (e.currentTarget as HTMLElement).parentElement?.querySelector<HTMLElement>(`tr[data-row="${next}"]`);
  tr?.focus();
  on.pick(next);
}

/** Why there is no matrix to show yet, with what to do. */
export function heatmapWaitView(reason: string): TemplateResult | typeof nothing {
  return reason === '' ? nothing : html`<div class="heatmap-wait" role="status">${reason}</div>`;
}

export const HEATMAP_STYLES = css`
  .view-toggle { font: inherit; }
  .view-toggle[aria-pressed=true] { background: #e8f0fe; border: 1px solid #1a73e8; border-radius: 4px; }
  .heatmap-controls { display: flex; flex-wrap: wrap; gap: 12px; align-items: center; padding: 2px 0 4px; color: #3c4043; }
  .heatmap-wait { padding: 12px; color: #5f6368; }
  .heatmap-legend { display: inline-flex; gap: 6px; align-items: center; font-size: 11px; color: #5f6368; }
  .heatmap-legend-bar { display: inline-block; width: 80px; height: 10px; border: 1px solid #dadce0; border-radius: 2px; }
  .heatmap-scroll { flex: 1 1 auto; min-height: 0; overflow: auto; border: 1px solid #e8eaed; border-radius: 4px; }
  table.heatmap { border-collapse: separate; border-spacing: 1px; font-family: 'Roboto Mono', monospace; font-size: 11px; }
  table.heatmap thead th { position: sticky; top: 0; background: #fff; z-index: 1; }
  table.heatmap th.corner { left: 0; z-index: 2; font-family: Roboto, sans-serif; font-weight: normal; color: #5f6368;
                            vertical-align: bottom; text-align: left; white-space: nowrap; }
  table.heatmap th.col { vertical-align: bottom; padding: 0; font-weight: normal; color: #3c4043; }
  table.heatmap th.col > span { writing-mode: vertical-rl; transform: rotate(180deg); white-space: nowrap;
                                display: inline-block; max-height: 150px; overflow: hidden; text-overflow: ellipsis; }
  table.heatmap th.row-label { position: sticky; left: 0; background: #fff; text-align: right; font-weight: normal;
                               padding: 0 4px; white-space: nowrap; color: #3c4043; }
  table.heatmap td { min-width: 14px; height: 15px; padding: 0; }
  table.heatmap.numbers td { min-width: 52px; padding: 0 2px; font-size: 10px; text-align: right; }
  table.heatmap th.col.resp { font-style: italic; }
  tr.hrow { cursor: pointer; }
  tr.hrow:hover th.row-label { color: #1a73e8; }
  tr.hrow:focus-visible { outline: 2px solid #1a73e8; }
  tr.hrow.sel th.row-label { background: #fde293; outline: 2px solid #f29900; outline-offset: -2px; }
`;
