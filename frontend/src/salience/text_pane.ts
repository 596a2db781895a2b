/**
 * The body of the salience module once a payload is there: the prompt (its head folded: chat template, system
 * prompt) and the response coloured by the method on screen, the target chosen on the response, the status lines
 * above them, the top list beside them, and a segment's tooltip; or the heatmap pane in place of the text. The
 * prompt's thousands of spans are rebuilt only when their colours change, not on drag previews, cursor moves or
 * tooltip-free re-renders. The state it shows (cursor, drag, fold, view) is the element's (../salience_module.ts).
 */
import {html, nothing, type TemplateResult} from 'lit';

import type {Segmentation} from '../shared/aggregate/index.js';
import {maxAbs, type ColorScale} from '../shared/colormap.js';
import {forcedTargetNote, isForcedTarget} from '../shared/forced_target.js';
import {segmentText, type Piece} from '../shared/pieces.js';
import type {SalienceController} from './controller.js';
import {numTargets, type SaliencePayload} from './payload.js';
import {PreviousMap, previousMapLabel} from './previous_map.js';
import {topSegments} from './rank.js';
import type {ShownText} from './shown_text.js';
import {describeSpan, dragSpan, isWhole, overlaps, targetSegments, type TargetSegment} from './target.js';
import {headView, promptPieceView, rejectedView, responsePiecesView, sidePanelView, type RejectedFacts} from './text_view.js';
import type {CompletenessVerdict} from './values.js';

const TOP_K = 10;
/**
 * The system prompt and chat template start folded, unless at least this many of the first highlight's top list
 * lie in them (the constitutional case's principles): then they start open, as what matters is there.
 */
export const HEAD_OPEN_RANKED = 3;

/** What the body reads and sets of the element. */
export interface TextPaneHost {
  readonly ctl: SalienceController;
  readonly text: ShownText;
  readonly intensity: number;
  readonly cursor: number | null;
  readonly dragAnchor: number | null;
  readonly dragTo: number | null;
  readonly heatmap: boolean;
  /** Whether the text before the user's turn is expanded. */
  showHead: boolean;
  /** Whether values that fail their completeness check are coloured anyway ("show anyway"). */
  showRejected: boolean;
  readonly renderRoot: ParentNode;
  getBoundingClientRect(): DOMRect;
  /** The comparisons' shared scale while one shows this map's method and segmentation (null: none does); the map of
   * the whole response takes the larger of it and its own, so one method on one prompt has one colour scale. */
  comparedScale(): number | null;
  /** What the legend says of the scale: with `shared` (the comparedScale taken), whose it is; else why the map
   * keeps its own while another module shows its prompt on a shared one (the second of two models); or ''. */
  scaleNote(shared: boolean): string;
  /** The heatmap pane (heatmap/pane.ts) for `p` cut into `seg`. */
  heatmapPane(p: SaliencePayload, seg: Segmentation, segError: string): TemplateResult;
  targetDown(e: MouseEvent): void;
  targetOver(e: MouseEvent): void;
  targetKey(e: KeyboardEvent, list: TargetSegment[]): void;
  /** The "Whole response" button. */
  wholeTarget(): void;
}

/** Code point where the user's (last) turn starts: 0 without a chat template or role spans. */
export function userTurnStart(p: Pick<SaliencePayload, 'role_spans'>): number {
  let start = 0;
  for (const [a, , role] of p.role_spans) if (role === 'user') start = a;
  return start;
}

export class TextPane {
  /** Values shown now, for the tooltip (segment values and their segmentation). */
  private shown: {values: Float64Array; seg: Segmentation; rank: Map<number, number>} | null = null;
  private promptMemo: {pieces: Piece[]; values: Float64Array | null; scale: number; intensity: number;
                       signed: boolean; notes: ReadonlyMap<number, string>; head: TemplateResult[];
                       templates: TemplateResult[]} | null = null;
  /** The values the tooltip's text was read from (a re-render with others hides it: no stale value). */
  private tipValues: Float64Array | null = null;
  /** Whether the head's fold is decided for this selection (by the first highlight's top list, or by the user). */
  private headDecided = false;
  /** The last map shown, kept while the method on screen is computed. */
  private readonly previous = new PreviousMap();

  constructor(private readonly host: TextPaneHost) {}

  /** A new selection: the head's fold is decided again. */
  clear() {
    this.headDecided = false;
  }

  /** After a render: a tooltip showing values no longer on screen is hidden. */
  updated() {
    if (this.tipValues !== null && this.tipValues !== (this.shown?.values ?? null)) this.hideTooltip();
  }

  render(p: SaliencePayload): TemplateResult {
    const {ctl, text} = this.host;
    const T = numTargets(p);
    const span = ctl.span;
    const {seg, note: segNote, error: segError} = text.shown(p);
    const m = ctl.methodPayload();
    const check = ctl.completenessCheck();
    const hidden = check !== null && check.rejected && !this.host.showRejected;
    const shownValues = text.segmentValues(seg);
    const tokens = ctl.tokenValues();
    let signed = m?.signed ?? ctl.registry()?.get(ctl.method)?.signed ?? true;
    if (tokens !== null && !hidden) this.previous.remember(ctl, tokens, signed);
    // While the method on screen is computed, the last map stays on screen, marked as the previous one (previous_map.ts).
    const previous = shownValues === null ? this.previous.during(ctl, seg) : null;
    if (previous !== null) signed = previous.signed;
    // Values the completeness check rejects colour nothing (and rank nothing) until the user shows them anyway.
    const values = hidden && shownValues !== null ? shownValues.map(() => NaN) : shownValues ?? previous?.values ?? null;
    const list = targetSegments(seg, p.n_prompt_tokens);
    const tiOf = new Map<number, number>(list.map((ts, i) => [ts.seg, i]));
    // Segments that are (part of) the target do not set the colour scale.
    const targetSegs = new Set(list.filter((ts) => overlaps(ts, span)).map((ts) => ts.seg));
    const {dragAnchor, dragTo} = this.host;
    const preview = dragAnchor !== null && dragTo !== null && list[dragAnchor] && list[dragTo]
        ? dragSpan(list[dragAnchor], list[dragTo]) : null;
    let scaleVals: number[] = [];
    if (values !== null) {
      scaleVals = Array.from(values).filter((v, s) => Number.isFinite(v) && !targetSegs.has(s));
    }
    const compared = previous === null && isWhole(span, T) ? this.host.comparedScale() : null;
    const scale = compared === null ? maxAbs(scaleVals) : Math.max(maxAbs(scaleVals), compared);
    const cs: ColorScale = {signed, scale, intensity: this.host.intensity};
    const ranked = values === null || previous !== null ? [] : topSegments(values, TOP_K, signed, targetSegs);
    this.shown = values === null || previous !== null ? null : {values, seg, rank: new Map(ranked.map((r, i) => [r.seg, i]))};
    const side = sidePanelView(ctl, p, seg, cs, ranked, text.codePoints(p), (s) => this.scrollToSegment(s),
                               this.host.scaleNote(compared !== null));
    const rejected = check?.rejected ? this.rejectedLine(check, m) : nothing;
    if (this.host.heatmap) {
      // The side panel keeps the text view's scale: its top list is the target's, as in the text view.
      return html`<div class="body"><div class="checked-pane">${rejected}${this.host.heatmapPane(p, seg, segError)}</div>
        ${side}</div>`;
    }

    const pieces = text.pieces(seg);
    const notes = text.unmeasured();
    const {head: headPieces, templates: promptPieces} = this.prompt(p, pieces, seg, values, cs, notes);
    const responsePieces = responsePiecesView(pieces, {seg, values, cs, list, tiOf, span, numTargets: T, preview,
                                                       cursor: this.host.cursor});
    const headRanked = ranked.filter((r) => seg.starts[r.seg] < userTurnStart(p)).length;
    const status = ctl.side;
    return html`
      <div class="body">
        <div class="texts" @mouseover=${(e: MouseEvent) => this.showTooltip(e)} @mouseleave=${() => this.hideTooltip()}>
          ${segError ? html`<div class="status error inline">${segError}</div>` : nothing}
          ${rejected}
          ${segNote ? html`<div class="status inline pattern-note" role="status">${segNote}</div>` : nothing}
          ${status ? html`<div class="status ${status.kind} inline" role=${status.kind === 'error' ? 'alert' : 'status'}>
              ${status.kind === 'loading' ? html`<div class="bar"><div></div></div>` : nothing}
              <span>${status.text}</span></div>` : nothing}
          <div class="section-label">Prompt</div>
          ${previous === null ? nothing : html`<div class="status inline previous-map" role="status"
              data-method=${previous.method}>${previousMapLabel(ctl.registry(), previous, ctl.method)}</div>`}
          <div class="text prompt ${values === null ? 'pending' : previous !== null ? 'previous' : ''}">${headPieces.length === 0 ? nothing
            : headView(headPieces, this.headOpen(headRanked, values !== null && isWhole(span, T)), headRanked,
                       (open) => {
                         if (open !== this.host.showHead) this.headDecided = true;  // the user's (not our own ?open)
                         this.host.showHead = open;
                       })}${promptPieces}</div>
          <div class="section-label">Response ${forcedTargetNote(isForcedTarget(ctl.input?.data))}
            <span class="hint">— target: <b class="target-desc">${describeSpan(span, T)}</b>
              ${isWhole(span, T) ? html`(click or drag over the response to choose)` :
                html`<button class="reset" @click=${() => this.host.wholeTarget()}>Whole response</button>`}
            </span>
          </div>
          <div class="text response" @mousedown=${(e: MouseEvent) => this.host.targetDown(e)}
              @mouseover=${(e: MouseEvent) => this.host.targetOver(e)}
              @keydown=${(e: KeyboardEvent) => this.host.targetKey(e, list)}>${responsePieces}</div>
        </div>
        ${side}
      </div>`;
  }

  /** The line saying why the values are hidden (or shown anyway), with its toggle. */
  private rejectedLine(check: CompletenessVerdict, m: ReturnType<SalienceController['methodPayload']>): TemplateResult {
    const {ctl} = this.host;
    const reg = ctl.registry();
    const info = reg?.get(ctl.method);
    // The count's search (when it ran) says what it used; else the values' count is what they cost.
    const unit = info?.count_unit ?? 'steps';
    const used = m?.steps_used?.[0] ?? (m as Record<string, unknown> | null)?.[unit];
    const steps = typeof used === 'number' ? used : null;
    const facts: RejectedFacts = {
      label: reg?.label(ctl.method) ?? ctl.method, oneStep: reg?.label('grad_x_input') ?? 'grad_x_input',
      unit, costUnit: info?.cost_unit ?? '',
      cost: steps === null ? null : {steps, forwards: m?.forwards?.[0] ?? null},
    };
    return rejectedView(check, facts, this.host.showRejected, () => {
      this.host.showRejected = !this.host.showRejected;
    });
  }

  /** The prompt's pieces as templates: before the user's turn (template markup, system prompt) the head, then the rest. */
  private prompt(p: SaliencePayload, pieces: Piece[], seg: Segmentation, values: Float64Array | null, cs: ColorScale,
                 notes: ReadonlyMap<number, string>): {head: TemplateResult[]; templates: TemplateResult[]} {
    const memo = this.promptMemo;
    if (memo !== null && memo.pieces === pieces && memo.values === values && memo.scale === cs.scale &&
        memo.intensity === cs.intensity && memo.signed === cs.signed && memo.notes === notes) {
      return memo;
    }
    const headEnd = this.host.text.codePoints(p)[userTurnStart(p)] ?? 0;
    const head: TemplateResult[] = [];
    const templates: TemplateResult[] = [];
    let pos = 0;
    for (const pc of pieces) {
      if (pc.response) break;
      (pos < headEnd ? head : templates).push(promptPieceView(pc, seg, values, cs, notes));
      pos += pc.text.length;
    }
    this.promptMemo = {pieces, values, scale: cs.scale, intensity: cs.intensity, signed: cs.signed, notes, head, templates};
    return this.promptMemo;
  }

  /**
   * Whether the head is open: once the first highlight (whole response) has values, it opens when
   * HEAD_OPEN_RANKED of its top list lie in it; after that (or after the user's toggle) it stays as it is.
   */
  private headOpen(nRanked: number, firstHighlight: boolean): boolean {
    if (!this.headDecided && firstHighlight) {
      this.headDecided = true;
      if (nRanked >= HEAD_OPEN_RANKED) this.host.showHead = true;
      return this.host.showHead || nRanked >= HEAD_OPEN_RANKED;
    }
    return this.host.showHead;
  }

  private showTooltip(e: MouseEvent) {
    const tip = this.host.renderRoot.querySelector<HTMLElement>('.tooltip');
    const el = (e.target as HTMLElement).closest?.('[data-s]') as HTMLElement | null;
    if (tip === null) return;
    const p = this.host.ctl.payload;
    if (el === null || this.shown === null || p === null) {
      tip.hidden = true;
      return;
    }
    const s = Number(el.dataset['s']);
    const v = this.shown.values[s];
    const text = segmentText(p.text, this.shown.seg, s, this.host.text.codePoints(p));
    const rank = this.shown.rank.get(s);
    const label = this.shown.seg.excluded[s] ? 'template markup (not scored)'
        : this.shown.seg.kinds[s] === 'gap' ? 'between matches (context, not scored)'
        : Number.isFinite(v) ? `salience ${v.toPrecision(6)}${rank !== undefined ? ` · rank ${rank + 1}` : ''}`
        : 'no value';
    tip.textContent = `${JSON.stringify(text.length > 60 ? text.slice(0, 57) + '…' : text)} — ${label}`;
    tip.hidden = false;
    this.tipValues = this.shown.values;
    const host = this.host.getBoundingClientRect();
    tip.style.left = `${Math.min(e.clientX - host.left + 12, host.width - 260)}px`;
    tip.style.top = `${e.clientY - host.top + 16}px`;
  }

  private hideTooltip() {
    const tip = this.host.renderRoot.querySelector<HTMLElement>('.tooltip');
    if (tip) tip.hidden = true;
    this.tipValues = null;
  }

  private scrollToSegment(s: number) {
    const el = this.host.renderRoot.querySelector<HTMLElement>(`.prompt [data-s="${s}"], .response [data-s="${s}"]`);
    if (el == null) return;
    const head = el.closest('details');
    if (head !== null && !head.open) this.host.showHead = head.open = true;
    el.scrollIntoView({block: 'center', behavior: 'smooth'});
    el.classList.add('flash');
    setTimeout(() => el.classList.remove('flash'), 1200);
  }
}
