/**
 * What leaves the heatmap (../heatmap/logic.ts `Heatmap`), without lit: the rule that decides whether the cells
 * can hold their numbers, the matrix as CSV text, and as a PNG drawn on a canvas in the browser (no network;
 * ../../shared/download.ts saves them).
 * The standalone HTML of the whole view is the server's (sequence_salience/display/share.py through
 * lit_app/wrappers/share.py; salience/share.ts asks for it).
 */
import {colorFor, formatValue} from '../../shared/colormap.js';
import {columnHeading, rowScale, type Heatmap, type HeatmapScale} from './logic.js';

/** Width of a cell that holds a number (formatValue's longest, "-1.234e-4", at the table's 10 px monospace). */
export const NUMBER_CELL_PX = 56;
/** Width kept for the row labels (MAX_LABEL characters at 11 px monospace, and padding). */
export const ROW_LABEL_PX = 180;

/** Whether `numCols` cells with numbers fit beside the row labels in `widthPx` (the "auto" rule of the toggle). */
export function numbersFit(numCols: number, widthPx: number): boolean {
  return numCols > 0 && ROW_LABEL_PX + numCols * NUMBER_CELL_PX <= widthPx;
}

/** Numbers in the cells: the user's choice, else whether they fit. */
export type NumbersChoice = 'auto' | 'on' | 'off';
export function showNumbers(choice: NumbersChoice, numCols: number, widthPx: number): boolean {
  return choice === 'auto' ? numbersFit(numCols, widthPx) : choice === 'on';
}

/** One CSV field (RFC 4180: quoted when it holds a comma, quote or line break; quotes doubled). */
export function csvField(s: string): string {
  return /[",\r\n]/u.test(s) ? `"${s.replace(/"/gu, '""')}"` : s;
}

/**
 * The matrix as CSV: a header (the corner, then each column's whole text (trimmed), "(resp.)" after a response
 * segment's), then one line per row (its whole text, then its values at full precision; empty for a blank cell).
 */
export function heatmapCsv(h: Heatmap): string {
  const head = ['response \\ prompt', ...h.cols.map((c) => columnHeading({label: c.text.trim(), response: c.response}))];
  const lines = [head.map(csvField).join(',')];
  for (const r of h.rows) {
    lines.push([csvField(r.text), ...Array.from(r.cells, (v) => (Number.isFinite(v) ? String(v) : ''))].join(','));
  }
  return lines.join('\r\n') + '\r\n';
}

/** The matrix drawn on a canvas as the table shows it (colours, labels, numbers when `numbers`). */
export function heatmapCanvas(h: Heatmap, scale: HeatmapScale, intensity: number, numbers: boolean): HTMLCanvasElement {
  const cell = numbers ? NUMBER_CELL_PX : 18;
  const rowH = 18;
  const canvas = document.createElement('canvas');
  const probe = canvas.getContext('2d')!;
  probe.font = '11px monospace';
  const labelW = Math.ceil(Math.max(40, ...h.rows.map((r) => probe.measureText(r.label).width))) + 8;
  const headH = Math.ceil(Math.max(40, ...h.cols.map((c) => probe.measureText(columnHeading(c)).width))) + 8;
  canvas.width = labelW + h.cols.length * cell + 4;
  canvas.height = headH + h.rows.length * rowH + 4;
  const g = canvas.getContext('2d')!;
  g.fillStyle = '#fff';
  g.fillRect(0, 0, canvas.width, canvas.height);
  g.font = '11px monospace';
  g.fillStyle = '#3c4043';
  h.cols.forEach((c, j) => {  // headings written upwards, as the table's
    g.save();
    g.translate(labelW + j * cell + cell / 2 + 4, headH - 4);
    g.rotate(-Math.PI / 2);
    g.fillText(columnHeading(c), 0, 0);
    g.restore();
  });
  h.rows.forEach((r, i) => {
    const y = headH + i * rowH;
    const cs = rowScale(h, i, scale, intensity);
    g.fillStyle = '#3c4043';
    g.textAlign = 'right';
    g.fillText(r.label, labelW - 4, y + 13);
    g.textAlign = 'center';
    r.cells.forEach((v, j) => {
      if (!Number.isFinite(v)) return;
      const c = colorFor(v, cs);
      g.fillStyle = c.bg;
      g.fillRect(labelW + j * cell, y, cell - 1, rowH - 1);
      if (numbers) {
        g.fillStyle = c.fg;
        g.fillText(formatValue(v), labelW + j * cell + cell / 2, y + 13);
      }
    });
  });
  return canvas;
}
