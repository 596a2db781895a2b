/**
 * The "Inside the model" module's trace: p(target) by layer, and a table row per layer with
 * the target's rank and probability before and after the feed-forward block, the top
 * predictions and the largest sub-updates (click: add to the interventions).
 */
import {html, nothing, svg} from 'lit';

import {formatProb, formatRank, interventionKey, probPolyline, settlesAt, showToken} from './logic.js';
import {layerDeltas} from './run.js';
import {
  type InterventionPayload, type LayerTrace, type Mode, type PartialIntervention, type SubUpdate,
  type TracePayload,
} from './payload.js';

const INLINE_SUBS = 3;
const INLINE_PREDS = 3;

/** A run's result, or what a running (or cancelled) run has brought so far; null: none. */
type Shown = InterventionPayload | PartialIntervention | null;

/** What the trace needs from the element: expanded rows, the intervention list, and actions. */
export interface TraceContext {
  expanded: ReadonlySet<number>;
  /** Whether the sub-update with this interventionKey is in the list. */
  listed(key: string): boolean;
  add(layer: number, index: number, mode: Mode): void;
  toggle(layer: number): void;
}

function chartView(tr: TracePayload, r: Shown) {
  const w = 300, h = 60;
  const after = tr.layers.map((l) => l.after.target_prob);
  const before = tr.layers.map((l) => l.before.target_prob);
  const deltas = r ? layerDeltas(r) : [];
  const iv = deltas.length ? deltas.map((d) => d.after) : null;
  return html`<div class="chart">
    <div class="plot">
      <div class="y-axis" aria-hidden="true"><span>1</span><span>0.5</span><span>0</span></div>
      <svg viewBox="0 0 ${w} ${h}" preserveAspectRatio="none" width="100%" height="${h}"
          aria-label="p(${showToken(tr.target_token)}) by layer, 0 to 1">
        ${svg`<line class="grid" x1="0" x2=${w} y1=${h / 2} y2=${h / 2}></line>
              <polyline class="line-before" points=${probPolyline(before, w, h)}></polyline>
              <polyline class="line-after" points=${probPolyline(after, w, h)}></polyline>
              ${iv ? svg`<polyline class="line-iv" points=${probPolyline(iv, w, h)}></polyline>` : nothing}`}
      </svg>
    </div>
    <div class="axis"><span>layer 0</span><span>p(${showToken(tr.target_token)}) by layer (y: probability, 0–1)</span><span>layer ${tr.layers.length - 1}</span></div>
    <div class="chart-legend">
      <span><i class="key key-after"></i>after the layer's feed-forward block</span>
      <span><i class="key key-before"></i>before it (after attention)</span>
      ${iv ? html`<span><i class="key key-iv"></i>with the interventions</span>` : nothing}
    </div>
  </div>`;
}

/**
 * The trace of the target token, layer by layer: a chart of p(target), then a row per layer
 * (expanded rows show both predictions and every sub-update). `r`, when given, is a run's
 * result (or what a running one brought so far): its probabilities are drawn beside.
 */
export function traceView(tr: TracePayload, r: Shown, ctx: TraceContext) {
  const after = r?.after.trace ? r.after.trace.layers : null;
  const settle = settlesAt(tr.layers);
  return html`
    ${chartView(tr, r)}
    <div class="section-label">Layer by layer${settle >= 0 ? html` <span class="hint">— the top prediction from layer ${settle} on</span>` : nothing}</div>
    <div class="columns-help hint">Rank: where ${showToken(tr.target_token)} stands among all tokens before → after the
      layer's feed-forward block (1st = the model's top prediction at that layer). p: its probability after the block.
      Sub-updates: the feed-forward values that moved the prediction most (coefficient; the tokens each value
      promotes); click one to switch it off in a run.</div>
    <table class="layers">
      <thead><tr><th>Layer</th><th title="Rank of the target before → after the feed-forward block">Rank before → after</th>
        <th title="${after ? 'before → under the interventions' : 'after the feed-forward block'}">p(${showToken(tr.target_token)})${after ? ' → with interventions' : ''}</th>
        <th>Top predictions (after FFN)</th><th title="Largest |coefficient| × ‖value‖; click to add to the interventions">Top sub-updates</th></tr></thead>
      <tbody>${tr.layers.map((l) => layerView(l, after?.[l.layer] ?? null, ctx))}</tbody>
    </table>`;
}

function layerView(l: LayerTrace, iv: LayerTrace | null, ctx: TraceContext) {
  const open = ctx.expanded.has(l.layer);
  const p = l.after.target_prob;
  const top = l.after.target_rank === 0;
  return html`
    <tr class="layer-row ${open ? 'open' : ''} ${top ? 'is-top' : ''}" data-layer=${l.layer} tabindex="0"
        @click=${() => ctx.toggle(l.layer)}
        @keydown=${(e: KeyboardEvent) => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); ctx.toggle(l.layer); } }}>
      <td class="num">${l.layer}</td>
      <td class="rank">${formatRank(l.before.target_rank)} → <b>${formatRank(l.after.target_rank)}</b></td>
      <td class="prob"><div class="pbar"><div style="width:${(p * 100).toFixed(1)}%"></div></div>
        <span class="pval">${formatProb(p)}</span>
        ${iv ? html`<span class="ival ${iv.after.target_prob > p ? 'up' : iv.after.target_prob < p ? 'down' : ''}">→ ${formatProb(iv.after.target_prob)}</span>` : nothing}</td>
      <td class="preds"><div class="chips">${l.after.tokens.slice(0, INLINE_PREDS).map((t, i) =>
          html`<span class="tok" title="p=${formatProb(l.after.probs[i])}">${showToken(t)}</span>`)}</div></td>
      <td class="subs"><div class="chips">${l.sub_updates.slice(0, INLINE_SUBS).map((s) => subView(s, ctx))}</div></td>
    </tr>
    ${open ? detailsView(l, ctx) : nothing}`;
}

function subView(s: SubUpdate, ctx: TraceContext, withButtons = false) {
  const key = interventionKey(s);
  const listed = ctx.listed(key);
  const title = `layer ${s.layer}, value ${s.index}: coefficient ${s.coef.toFixed(3)}, ‖v‖ ${s.norm.toFixed(3)}` +
      `, score ${s.score.toFixed(3)}${s.coef < 0 ? ' (negative: pushes these tokens down)' : ''}` +
      `\ntop tokens: ${s.top_tokens.map(showToken).join(' ')}\nclick: add to the interventions (off)`;
  const chip = html`<button class="sub-update ${listed ? 'listed' : ''} ${s.coef < 0 ? 'neg' : 'pos'}"
      data-layer=${s.layer} data-index=${s.index} title=${title}
      @click=${(e: Event) => { e.stopPropagation(); ctx.add(s.layer, s.index, 'off'); }}>
      <span class="vid">v${s.index}</span><span class="coef">${s.coef >= 0 ? '+' : '−'}${Math.abs(s.coef).toFixed(2)}</span>
      <span class="vtoks">${s.top_tokens.slice(0, withButtons ? 8 : 2).map(showToken).join(' ')}</span></button>`;
  if (!withButtons) return chip;
  return html`<div class="sub-line">
    <button class="small add-on" title="Add switched on" @click=${(e: Event) => { e.stopPropagation(); ctx.add(s.layer, s.index, 'on'); }}>+ on</button>${chip}</div>`;
}

function detailsView(l: LayerTrace, ctx: TraceContext) {
  const list = (title: string, p: LayerTrace['after']) => html`<div class="plist"><div class="sub-title">${title}</div>
    <ol>${p.tokens.map((t, i) => html`<li><span class="tok">${showToken(t)}</span> <span class="pv">${formatProb(p.probs[i])}</span></li>`)}</ol></div>`;
  return html`<tr class="details" data-layer=${l.layer}><td colspan="5"><div class="details-grid">
    ${list('Before FFN', l.before)}
    ${list('After FFN', l.after)}
    <div class="slist"><div class="sub-title">Sub-updates (|coef| × ‖v‖) · max coef ${l.max_coef.toFixed(2)} · ‖FFN out‖ ${l.ffn_norm.toFixed(2)}</div>
      ${l.sub_updates.map((s) => subView(s, ctx, true))}</div>
  </div></td></tr>`;
}
