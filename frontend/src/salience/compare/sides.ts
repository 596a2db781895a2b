/**
 * The rendering both comparison rooms share, parameterized by the two sides' labels: ./view.ts (an
 * edit: A = pinned, B = selected) and ../compare_models/view.ts (two models: A, B = model names).
 * Both responses with the word diff marked (<del> only in A, <ins> only in B), the aligned prompt
 * segments coloured by both values (top half A, bottom half B, one shared scale) or by the difference
 * B − A (text only one side has: <del>/<ins>, each in its own colour), a legend and a log p table.
 * Styles: COMPARE_SIDES_STYLES (./styles.ts).
 */
import {html, nothing, type TemplateResult} from 'lit';

import {colorFor, formatValue, legendGradient, legendStops, type ColorScale} from '../../shared/colormap.js';
import {forcedTargetNote} from '../../shared/forced_target.js';
import {alignedText, sideText, type Alignment, type RunPiece} from './alignment.js';
import type {CompareMode, PromptValues} from './logic.js';

/** The names of side A and side B, as the user sees them. */
export interface SideLabels {
  a: string;
  b: string;
}

function fmt(v: number): string {
  return Number.isFinite(v) ? formatValue(v) : '–';
}

/** One response with the word diff marked: side 'a' marks what only A has (<del>), 'b' what only B has (<ins>). */
export function responseView(al: Alignment, side: 'a' | 'b', labels: SideLabels): TemplateResult[] {
  return al.segments.map((s, k) => {
    const text = alignedText(al, k, side);
    if (text === '') return html``;
    if (s.kind === 'equal') return html`${text}`;
    return side === 'a' ? html`<del class="diff" title="only in ${labels.a}">${text}</del>`
        : html`<ins class="diff" title="only in ${labels.b}">${text}</ins>`;
  });
}

/**
 * Both responses, one row each: the label (with the forced-target label for a side whose datapoint has
 * its own target), then the diff-marked text (.response-a, .response-b).
 */
export function responsesView(al: Alignment, labels: SideLabels,
                              forced: {a: boolean; b: boolean} = {a: false, b: false}): TemplateResult {
  return html`
    <div class="crow"><span class="who">${labels.a}${forcedTargetNote(forced.a)}</span><div class="text cresp response-a">${responseView(al, 'a', labels)}</div></div>
    <div class="crow"><span class="who">${labels.b}${forcedTargetNote(forced.b)}</span><div class="text cresp response-b">${responseView(al, 'b', labels)}</div></div>`;
}

function bg(v: number, cs: ColorScale): {bg: string; fg: string} | null {
  return Number.isFinite(v) ? colorFor(v, cs) : null;
}

/**
 * The aligned prompt segments (.cseg, data-k = the aligned segment). `values` null: the text only
 * (still loading). A segment neither side has a value for is template markup (not scored).
 */
export function promptView(prompts: Alignment, values: PromptValues | null, mode: CompareMode, labels: SideLabels):
    TemplateResult[] {
  return prompts.segments.map((s, k) => {
    const ta = alignedText(prompts, k, 'a'), tb = alignedText(prompts, k, 'b');
    const va = values?.a[k] ?? NaN, vb = values?.b[k] ?? NaN, d = values?.diff[k] ?? NaN;
    const markup = values !== null && !Number.isFinite(va) && !Number.isFinite(vb);
    const title = markup ? 'template markup (not scored)' : `${labels.a} ${fmt(va)} · ${labels.b} ${fmt(vb)} · Δ ${fmt(d)}`;
    const one = (v: number, cs: ColorScale | undefined) => {
      const c = cs === undefined || markup ? null : bg(v, cs);
      return c === null ? '' : `background:${c.bg};color:${c.fg}`;
    };
    if (s.kind === 'equal') {
      let style = '';
      if (mode === 'difference') {
        style = one(d, values?.diffScale);
      } else if (values !== null && !markup) {
        const ca = bg(va, values.scale)?.bg ?? '#fff', cb = bg(vb, values.scale)?.bg ?? '#fff';
        style = `background:linear-gradient(to bottom, ${ca} 0 50%, ${cb} 50% 100%)`;
      }
      return html`<span class="cseg ${markup ? 'markup' : ''}" data-k=${k} title=${title} style=${style}>${tb}</span>`;
    }
    // A changed run: in "both", each of its segments in its own colour (the maps' values); its difference is one
    // value, the run's sums (its segments do not pair up: RUN_NOTE).
    const byPiece = mode === 'both' && values !== null;
    const styleD = mode === 'difference' ? one(d, values?.diffScale) : '';
    const side = (which: 'a' | 'b', text: string) => (byPiece ? runView(prompts, which, s[which], values.runs[which][k],
                                                                         values.scale, labels[which]) : text);
    return html`${ta ? html`<del class="cseg" data-k=${k} title=${title} style=${styleD}>${side('a', ta)}</del>` : nothing}${
        tb ? html`<ins class="cseg" data-k=${k} title=${title} style=${styleD}>${side('b', tb)}</ins>` : nothing}`;
  });
}

/** Why the difference colours a changed run as one block (said beside the difference's legend). */
export const RUN_NOTE = 'A struck-through or underlined run is one colour: its segments do not pair up, so its ' +
    'difference is the sum of one side\'s minus the sum of the other\'s.';

/** One side's text of a changed run, each of its segments (.cpiece, data-s = the side's segment) in its colour. */
function runView(al: Alignment, side: 'a' | 'b', span: readonly [number, number], pieces: readonly RunPiece[],
                 cs: ColorScale, label: string): TemplateResult[] {
  const out: TemplateResult[] = [];
  let at = span[0];
  for (const p of pieces) {
    if (p.start > at) out.push(html`${sideText(al, side, [at, p.start])}`);
    const c = bg(p.value, cs);
    out.push(html`<span class="cpiece" data-s=${p.seg} title="${label} ${fmt(p.value)}"
        style=${c === null ? '' : `background:${c.bg};color:${c.fg}`}>${sideText(al, side, [p.start, p.end])}</span>`);
    at = Math.max(at, p.end);
  }
  if (span[1] > at) out.push(html`${sideText(al, side, [at, span[1]])}`);
  return out;
}

/** A colour legend (.clegend plus `cls`): its title, the bar and three values, then `note` (.legend-note) if any. */
export function legendView(title: string, cs: ColorScale, cls = '', note = ''): TemplateResult {
  return html`<div class="clegend ${cls}"><div class="legend-title">${title}</div>
    <div class="legend-bar" style="background:${legendGradient(cs)}"></div>
    <div class="legend-labels">${legendStops(cs, 3).map((s) => html`<span>${formatValue(s.value)}</span>`)}</div>
    ${note ? html`<div class="legend-note">${note}</div>` : nothing}</div>`;
}

/** One row of a log p table: the log p of one text under A and under B, and Δ = B − A. */
export interface LogpRow {
  label: string;
  a: number;
  b: number;
  delta: number;
}

/** A log p table (table.logp plus `cls`): a header row of four cells, then label · A · B · signed Δ. */
export function logpTable(cls: string, head: readonly [string, string, string, string], rows: readonly LogpRow[],
                          rowCls = '', labelCls = ''): TemplateResult {
  return html`<table class="logp ${cls}"><tr>${head.map((h) => html`<th>${h}</th>`)}</tr>
    ${rows.map((r) => html`<tr class=${rowCls}><td class=${labelCls}>${r.label}</td><td>${r.a.toFixed(3)}</td>
      <td>${r.b.toFixed(3)}</td><td>${r.delta >= 0 ? '+' : ''}${r.delta.toFixed(3)}</td></tr>`)}
  </table>`;
}
