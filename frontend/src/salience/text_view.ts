/**
 * The Sequence Salience module's text templates: the prompt and response as they stream in, the text pieces of
 * the prompt (its folded head) and response coloured by their segment's value, and the side panel (legend, facts,
 * top segments). Functions of what they show and of callbacks; the text pane (text_pane.ts) computes the values.
 * The controls and status lines are view.ts's.
 */
import {html, nothing, type TemplateResult} from 'lit';

import type {Segmentation} from '../shared/aggregate/index.js';
import {colorFor, formatValue, legendGradient, legendStops, type ColorScale} from '../shared/colormap.js';
import {methodNameView} from '../shared/method_help.js';
import {segmentText, type Piece} from '../shared/pieces.js';
import type {IndexedInputLike} from '../shared/request.js';
import {tokenCount} from '../shared/tokens.js';
import {describeVerdict, verdictOn, type FirstMapShown} from './confirm.js';
import type {SalienceController} from './controller.js';
import type {MethodPayload, SaliencePayload} from './payload.js';
import type {Ranked} from './rank.js';
import {SEGMENT_NOUNS} from './segments.js';
import type {TargetSpan} from './spans.js';
import type {StreamStatus} from './stream.js';
import {isWhole, overlaps, targetSegments, type TargetSegment} from './target.js';
import type {CompletenessVerdict} from './values.js';
import {GRANULARITY_LABELS} from './view.js';

/** The prompt as typed (dimmed: no values yet), then the response line with `hint` and `response`. */
function pendingTexts(d: IndexedInputLike, hint: string, response: TemplateResult) {
  const system = typeof d.data['system'] === 'string' ? d.data['system'] : '';
  const prompt = typeof d.data['prompt'] === 'string' ? d.data['prompt'] : '';
  return html`
    <div class="body">
      <div class="texts">
        <div class="section-label">Prompt</div>
        <div class="text prompt pending">${system ? html`<span class="markup">${system}\n\n</span>` : nothing}${prompt}</div>
        <div class="section-label">Response <span class="hint">— ${hint}</span></div>
        ${response}
      </div>
    </div>`;
}

/** Before the first highlight: the prompt as typed and the response as far as it is generated. */
export function streamingView(d: IndexedInputLike, s: StreamStatus) {
  const hint = s.state === 'done' ? `${tokenCount(s.tokens)}; computing the salience of the whole response`
      : s.state === 'running' ? `${s.tokens} of at most ${s.max_new_tokens} tokens so far` : 'waiting for the model';
  return pendingTexts(d, hint, html`<div class="text response streaming" data-tokens=${s.tokens}
      data-stream-state=${s.state}>${s.text}</div>`);
}

/**
 * Before the first highlight of a row with a fixed target (nothing is generated, so nothing streams): the prompt and
 * the target at once (issue 45: "Computing salience…" alone for 14.5 s).
 */
export function fixedTargetView(d: IndexedInputLike) {
  const target = typeof d.data['target'] === 'string' ? d.data['target'] : '';
  return pendingTexts(d, 'the fixed target; computing its salience',
                      html`<div class="text response pending fixed-target">${target}</div>`);
}

/** The inline style of a scored segment ('' when it has no colour: markup, no value). */
function segmentStyle(seg: Segmentation, s: number, values: Float64Array | null, cs: ColorScale): string {
  const v = values?.[s] ?? NaN;
  const c = seg.excluded[s] !== 1 && Number.isFinite(v) ? colorFor(v, cs) : null;
  return c ? `background:${c.bg};color:${c.fg}` : '';
}

/**
 * The prompt text before the user's turn (chat template markup and the system prompt), folded by
 * default so that the prompt view starts at the user's turn; `nRanked` of the top list lie in it.
 */
export function headView(pieces: readonly TemplateResult[], open: boolean, nRanked: number,
                         toggle: (open: boolean) => void) {
  // No line breaks inside the tags: the prompt box keeps white space (pre-wrap).
  const ranked = nRanked > 0 ? html` <span class="head-ranked">(${nRanked} of the top list)</span>` : nothing;
  return html`<details class="head" ?open=${open} @toggle=${(e: Event) => toggle((e.target as HTMLDetailsElement).open)}><summary>System prompt and chat template${ranked}</summary>${pieces}</details>`;
}

/** A prompt piece coloured by its segment's value; `notes` (coarse-to-fine) marks a segment whose value was not
 * measured (hatched, with the note as its title: "inside a sentence that did not matter (coarse value …)"). */
export function promptPieceView(pc: Piece, seg: Segmentation, values: Float64Array | null, cs: ColorScale,
                                notes?: ReadonlyMap<number, string>) {
  if (pc.seg < 0) return html`<span class="gap">${pc.text}</span>`;
  const excluded = seg.excluded[pc.seg] === 1;
  const note = notes?.get(pc.seg);
  if (note !== undefined) {
    return html`<span class="seg unmeasured" data-s=${pc.seg} title=${note} style=${segmentStyle(seg, pc.seg, values, cs)}>${pc.text}</span>`;
  }
  return html`<span class="seg${excluded ? ' markup' : ''}" data-s=${pc.seg} style=${segmentStyle(seg, pc.seg, values, cs)}>${pc.text}</span>`;
}

/** How the response pieces are drawn: the clickable target segments, the target and the drag preview. */
export interface ResponseLook {
  seg: Segmentation;
  values: Float64Array | null;
  cs: ColorScale;
  /** Target segments in order, and the index of each one's segment. */
  list: readonly TargetSegment[];
  tiOf: ReadonlyMap<number, number>;
  span: TargetSpan;
  numTargets: number;
  preview: TargetSpan | null;
  cursor: number | null;
}

export function responsePiecesView(pieces: readonly Piece[], r: ResponseLook): TemplateResult[] {
  const out: TemplateResult[] = [];
  for (const pc of pieces) {
    if (!pc.response) continue;
    if (pc.seg < 0) {
      out.push(html`<span class="gap">${pc.text}</span>`);
      continue;
    }
    const ti = r.tiOf.get(pc.seg);
    if (ti === undefined) {
      out.push(html`<span class="seg${r.seg.excluded[pc.seg] === 1 ? ' markup' : ''}" data-s=${pc.seg}>${pc.text}</span>`);
      continue;
    }
    const ts = r.list[ti];
    // The target's segments are not coloured: they are what is explained (outside the colour scale
    // and the top list); a part of the response is outlined, the whole response is not.
    const inTarget = overlaps(ts, r.span);
    const selected = inTarget && !isWhole(r.span, r.numTargets);
    const inPreview = r.preview !== null && overlaps(ts, r.preview);
    out.push(html`<span class="tgt${selected ? ' sel' : ''}${inPreview ? ' preview' : ''}"
        data-s=${pc.seg} data-ti=${ti} tabindex=${(r.cursor ?? 0) === ti ? '0' : '-1'}
        role="button" aria-pressed=${selected ? 'true' : 'false'}
        style=${inTarget ? '' : segmentStyle(r.seg, pc.seg, r.values, r.cs)}>${pc.text}</span>`);
  }
  return out;
}

/** The map's legend; `shared`: why its scale is not its own largest value ('' when it is). */
export function legendView(cs: ColorScale, m: MethodPayload | null, shared = '') {
  const stops = legendStops(cs, 3);
  return html`<div class="legend" aria-label="colour legend">
    <div class="legend-title">${cs.signed ? 'Signed (diverging)' : 'Magnitude (sequential)'}
      ${m?.steps ? html`· ${m.steps} steps` : m?.samples ? html`· ${m.samples} samples` : nothing}
      ${shared ? html`<span class="legend-shared-note">· ${shared}</span>` : nothing}</div>
    <div class="legend-bar" style="background:${legendGradient(cs)}"></div>
    <div class="legend-labels">${stops.map((s) => html`<span>${formatValue(s.value)}</span>`)}</div>
    <div class="legend-meaning">${cs.signed ? 'blue lowers, red raises log p(target)'
        : 'darker: more influence (direction not shown)'}</div>
  </div>`;
}

/** The IG completeness error the server gave; beyond its tolerance (or not checked), a warning with what to do. */
export function completenessView(v: CompletenessVerdict) {
  const title = 'Sum of the attributions minus the log-prob difference to the baseline, over the target';
  const {check, tolerance} = v;
  if (check === null) {
    return html`<div class="completeness warn" role="note" title=${title}>IG completeness not checked for this span
      (the server checks the whole response, each token and each span it computes): click the span's tokens one by
      one, or the whole response.</div>`;
  }
  const {error, relative} = check;
  if (!v.rejected) {
    return html`<div class="completeness" title=${title}>IG completeness error: ${formatValue(error)}${relative === null ? nothing
        : html` (${(100 * relative).toFixed(1)} %)`}</div>`;
  }
  return html`<div class="completeness warn" role="note" title=${title}>
    <b>⚠ IG completeness error ${formatValue(error)}</b> — ${(100 * relative!).toFixed(0)} % of the log-prob change to
    the baseline (over ${(100 * tolerance).toFixed(0)} %): the attributions do not add up, so their sizes should not
    be trusted. More steps help only where the error falls as they double: Test this explanation → IG steps tries
    8, 16, 32, … and says which count is enough, or that none within the cap is (then use Gradient × input for
    sizes).</div>`;
}

/** What a rejected check's line names: the method's label, the one-step method's, what a unit costs, this run's cost. */
export interface RejectedFacts {
  label: string;
  oneStep: string;
  unit: string;
  costUnit: string;
  /** The count of these values (path points evaluated) and the forward rows run when the payload has them. */
  cost: {steps: number; forwards: number | null} | null;
}

/**
 * The one line that replaces the colours when the values on screen fail their completeness check, with the "show
 * anyway" toggle (a button: mouse, Enter and Space); once shown anyway, the line stays and says so.
 */
export function rejectedView(v: CompletenessVerdict, f: RejectedFacts, shown: boolean, toggle: () => void) {
  const spent = f.cost === null ? ''
      : `; these values: ${f.cost.steps} ${f.unit}${f.cost.forwards === null ? '' : `, ${f.cost.forwards} forwards`}`;
  const cost = `${f.costUnit}${spent}`;
  const c = v.check;
  const why = c === null
    ? html`${f.label}'s completeness was not checked for this span: the server checks the whole response, each token
      and each span it computes, and this one was read from the per-token matrix.`
    : html`${f.label} fails its completeness check here: the values sum to ${formatValue(c.change + c.error)} but the
      answer's log p changed by ${formatValue(c.change)} (error ${(100 * (c.relative ?? 0)).toFixed(0)} %).`;
  return html`<div class="status inline completeness-rejected warn" role="note" data-shown=${shown ? 'yes' : 'no'}
      data-checked=${c === null ? 'no' : 'yes'}>
    ⚠ ${why}
    ${shown ? 'Values shown anyway' : 'Values hidden'}${c === null ? '.' : html`; ${f.oneStep} is the one-step version,
      or raise ${f.unit} (cost: ${cost}).`}
    <button class="show-anyway" aria-pressed=${shown ? 'true' : 'false'} @click=${toggle}>${shown ? 'Hide values'
        : 'Show anyway'}</button></div>`;
}

/**
 * Whether exact leave-one-out confirmed the first map (the same top segment and top three) or what changed, for the
 * segmentation on screen: the first map's values (`first`) against the exact ones (`exact`) on screen now.
 */
export function confirmView(ctl: SalienceController, first: FirstMapShown, p: SaliencePayload, seg: Segmentation,
                            exact: Float64Array, signed: boolean, u16: Int32Array) {
  const reg = ctl.registry();
  if (reg === null) return nothing;
  const skip = new Set(targetSegments(seg, p.n_prompt_tokens).filter((ts) => overlaps(ts, ctl.span)).map((ts) => ts.seg));
  const v = verdictOn(seg, first, exact, signed, skip);
  const noun = SEGMENT_NOUNS[seg.granularity] ?? seg.granularity;
  const w = describeVerdict(v, reg.label(first.method), reg.label(ctl.method), noun, (s) => segmentText(p.text, seg, s, u16));
  const verdict = v.confirmed ? 'confirmed' : 'changed';
  return html`<div class="confirm ${verdict}" role="status" data-verdict=${verdict} data-first=${first.method}>
    <div class="confirm-headline">${v.confirmed ? '✓' : '↻'} ${w.headline}</div>
    ${v.confirmed ? nothing : html`<div class="confirm-before">${w.before}</div><div class="confirm-after">${w.after}</div>
      ${w.moved ? html`<div class="confirm-moved">${w.moved}</div>` : nothing}`}</div>`;
}

/** The side panel: legend, facts about the values, and the top segments (a click scrolls to one). */
export function sidePanelView(ctl: SalienceController, p: SaliencePayload, seg: Segmentation, cs: ColorScale,
                              ranked: readonly Ranked[], u16: Int32Array, scrollTo: (s: number) => void,
                              sharedScale = '') {
  const m = ctl.methodPayload();
  const spanLogprob = p.target_logprobs.slice(ctl.span.t0, ctl.span.t1).reduce((a, b) => a + b, 0);
  const check = ctl.completenessCheck();
  const tokenValues = ctl.tokenValues();
  if (tokenValues === null) {
    // Nothing to scale yet: no placeholder legend, no empty list (the status line says it computes).
    return html`<div class="side">
      <div class="legend pending" aria-label="colour legend">Colour scale and top list appear with the values.</div>
      <div class="facts"><div class="precision" data-detail=${ctl.detailState()} data-exact="none">${ctl.precision()}</div></div>
    </div>`;
  }
  const first = ctl.confirmation();
  return html`<div class="side">
    ${legendView(cs, m, sharedScale)}
    ${first !== null ? confirmView(ctl, first, p, seg, tokenValues, cs.signed, u16) : nothing}
    <div class="facts">
      ${p.target_logprobs.length >= ctl.span.t1 ? html`<div>log p(target) = ${spanLogprob.toFixed(3)}</div>` : nothing}
      <div class="precision" data-detail=${ctl.detailState()}
          data-exact=${m?.matrix != null ? 'matrix' : 'span'}>${ctl.precision()}</div>
      ${p.dtype ? html`<div class="dtype">computed in ${p.dtype}</div>` : nothing}
      ${check !== null ? completenessView(check) : nothing}
    </div>
    <div class="section-label top-label">Top ${GRANULARITY_LABELS[seg.granularity].toLowerCase()} by
      ${methodNameView(ctl.registry(), ctl.method, 'top-list')}</div>
    <ol class="top">
      ${ranked.map((r) => {
        const c = colorFor(r.value, cs);
        const text = segmentText(p.text, seg, r.seg, u16).trim();
        return html`<li><button class="top-item" data-s=${r.seg} data-value=${r.value} @click=${() => scrollTo(r.seg)} title=${text}>
          <span class="swatch" style="background:${c.bg}"></span>
          <span class="top-text">${text.length > 40 ? text.slice(0, 39) + '…' : text}</span>
          ${seg.starts[r.seg] >= p.prompt_end ? html`<span class="where" title="in the response">resp.</span>` : nothing}
          <span class="top-value">${formatValue(r.value)}</span></button></li>`;
      })}
    </ol>
  </div>`;
}
