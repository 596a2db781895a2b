/**
 * The heatmap pane of the salience module (the answer × prompt view in place of the text): the method's matrix on
 * the segmentation shown (rebuilt only when either or the row mode changes), or why there is none yet, with its
 * controls and colour scale. Its state (rows, scale, focus) is the element's (../../salience_module.ts).
 */
import {html, nothing, type TemplateResult} from 'lit';

import type {Segmentation} from '../../shared/aggregate/index.js';
import {forcedTargetNote, isForcedTarget} from '../../shared/forced_target.js';
import type {SalienceController} from '../controller.js';
import {describeDetail, numTargets, type SaliencePayload} from '../payload.js';
import {describeSpan, isWhole, wholeResponse} from '../target.js';
import {buildHeatmap, heatmapWaitReason, hideRows, segmentMethodHeatmap, matrixScale, moveRow, selectedRows, type Heatmap,
        type HeatmapRows, type HeatmapScale} from './logic.js';
import {download, exportName} from '../../shared/download.js';
import {heatmapCanvas, heatmapCsv, showNumbers, type NumbersChoice} from './export.js';
import {heatmapControlsView, heatmapTableView, heatmapWaitView, hiddenRowsView} from './view.js';

/** What the element keeps of the heatmap: the row mode, the colour scale, the focused row, the intensity. */
export interface HeatmapState {
  rows: HeatmapRows;
  scale: HeatmapScale;
  focus: number;
  intensity: number;
  /** The map's width in px (whether numbers fit in the cells). */
  width: number;
  /** The user chose "Show anyway": values that fail (or lack) the completeness check are shown. */
  showRejected: boolean;
}

export class HeatmapPane {
  /** The heatmap of a method payload on a segmentation (rebuilt when either or the row mode changes). */
  private memo: {m: unknown; seg: Segmentation; mode: HeatmapRows; prefix: boolean; map: Heatmap | null} | null = null;
  /** The answer's earlier tokens as columns; numbers in the cells ("auto": when they fit). Changed by set({}). */
  private prefix = false;
  private numbers: NumbersChoice = 'auto';

  /**
   * The pane for payload `p` cut into `seg` (`segError`: why the segmentation shown is not the one chosen);
   * `segValues`: a segment method's values on screen ([S], null for a gradient method or before they come);
   * `set` changes the element's state (`Partial<HeatmapState>`).
   */
  render(ctl: SalienceController, p: SaliencePayload, seg: Segmentation, segError: string, codePoints: Int32Array,
         segValues: Float64Array | null, state: HeatmapState, set: (change: Partial<HeatmapState>) => void): TemplateResult {
    const m = ctl.methodPayload();
    const reg = ctl.registry();
    const extra = ctl.extra();
    let map: Heatmap | null = null;
    if (m?.matrix != null) {
      const memo = this.memo;
      if (memo !== null && memo.m === m && memo.seg === seg && memo.mode === state.rows && memo.prefix === this.prefix) {
        map = memo.map;
      } else {
        const linear = reg?.get(ctl.method)?.linear ?? false;  // unknown: not a sum of rows
        map = buildHeatmap(m, p, seg, state.rows, codePoints, linear, this.prefix);
        this.memo = {m, seg, mode: state.rows, prefix: this.prefix, map};
      }
    }
    const segmentMethod = reg?.isSegment(ctl.method) ?? false;
    if (segmentMethod && segValues !== null) {
      map = segmentMethodHeatmap(segValues, p, seg, ctl.span, codePoints, reg?.get(ctl.method)?.signed ?? true, this.prefix);
    }
    // Rows whose values fail the server's completeness check (or were not checked) are empty until "Show anyway",
    // as the text view hides them; the text pane's line says why when the target on screen is one of them.
    const checked = map === null || state.showRejected ? {map, hidden: 0}
        : hideRows(map, (r) => ctl.completenessCheck(r)?.rejected ?? false);
    map = checked.map;
    const rowsLine = checked.hidden > 0 && !(ctl.completenessCheck()?.rejected ?? false)
      ? hiddenRowsView(checked.hidden, map!.rows.length, reg?.label(ctl.method) ?? ctl.method, () => set({showRejected: true}))
      : nothing;
    let reason = segmentMethod && map !== null ? '' : heatmapWaitReason({
      segmentMethod,
      extraWithoutMatrix: extra !== null && m?.matrix == null ? reg?.label(extra.method) ?? extra.method : null,
      matrix: m?.matrix != null,
      detail: describeDetail(ctl.detail),
    });
    if (reason === '' && map === null) {
      reason = 'The gradient norm of a segment of several tokens is not a sum of token rows, and this server ' +
          'sent no Gram matrix to combine them: choose rows “Response tokens”.';
    }
    const selected = map === null ? new Set<number>() : new Set(selectedRows(map, ctl.span));
    const focus = map === null ? 0 : Math.min(state.focus, Math.max(0, map.rows.length - 1));
    const numbers = showNumbers(this.numbers, map?.cols.length ?? 0, state.width);
    const look = {mode: state.rows, scale: state.scale, intensity: state.intensity, selected, focus, prefix: this.prefix,
                  numbers};
    const name = (ext: string) => exportName(`${ctl.method} ${seg.granularity} ${p.text.slice(p.prompt_end)}`, ext);
    const on = {
      rows: (mode: HeatmapRows) => set({rows: mode, focus: 0}),
      scale: (scale: HeatmapScale) => set({scale}),
      pick: (row: number) => {
        const r = map?.rows[row];
        if (r === undefined) return;
        set({focus: row});
        ctl.setSpan({t0: r.t0, t1: r.t1});
      },
      whole: () => { ctl.setSpan(wholeResponse(numTargets(p))); },
      key: (e: KeyboardEvent, from: number) => moveRow(from, e.key, map?.rows.length ?? 0),
      prefix: (on: boolean) => { this.prefix = on; set({}); },
      numbers: (on: boolean) => { this.numbers = on ? 'on' : 'off'; set({}); },
      csv: () => { if (map) download(name('csv'), new Blob([heatmapCsv(map)], {type: 'text/csv'})); },
      png: () => {
        if (!map) return;
        heatmapCanvas(map, state.scale, state.intensity, numbers).toBlob((b) => { if (b) download(name('png'), b); });
      },
    };
    const T = numTargets(p);
    return html`<div class="texts heatmap-pane">
      ${segError ? html`<div class="status error inline">${segError}</div>` : nothing}
      <div class="section-label">Answer × prompt ${forcedTargetNote(isForcedTarget(ctl.input?.data))}
        <span class="hint">— target: <b class="target-desc">${describeSpan(ctl.span, T)}</b>
          ${isWhole(ctl.span, T) ? nothing : html`<button class="reset" @click=${on.whole}>Whole response</button>`}</span>
      </div>
      ${rowsLine}
      ${heatmapControlsView(look, on, map === null ? null : matrixScale(map, state.intensity))}
      ${map === null ? heatmapWaitView(reason) : heatmapTableView(map, look, on)}
    </div>`;
  }
}
