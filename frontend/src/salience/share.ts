/**
 * "Share this view": asks the model's share wrapper (lit_app/wrappers/share.py, `_<name>_share`) for the
 * standalone page of what is on screen (sequence_salience/display/share.py: model, prompt, answer, method,
 * granularity, the map, the answer × prompt matrix with its numbers, the faithfulness test of this target when
 * the "Test this explanation" module ran one, a notebook cell) and downloads it.
 * The request carries the datapoint, the method, granularity, regex and target span shown and the extra
 * method's count, so the page is computed from the same result as the module's matrices; for a segment method
 * (leave one out, the surrogate ...) the settings of its segment request, so the page holds the values on screen.
 */
import {FAITHFULNESS_FIELD, GRANULARITY_FIELD, PATTERN_FIELD, SEGMENT_METHOD_FIELD, SHARE_FIELD, SHARE_METHOD_FIELD,
        TARGET_SPAN_FIELD} from '../shared/fields.js';
import {faithfulnessStore} from '../shared/faithfulness_store.js';
import type {MethodRegistry} from '../shared/methods.js';
import {derivedInput, errorMessage, type IndexedInputLike} from '../shared/request.js';
import {download, exportName} from '../shared/download.js';
import type {SalienceController} from './controller.js';
import {countFields, segmentFields, type Extra, type SegmentAsk} from './request.js';
import {spanToString, type TargetSpan} from './spans.js';

/** The share wrapper of generation model `model` (lit_app/schema/fields.py share_model_name). */
export function shareModelName(model: string): string {
  return `_${model}_share`;
}

/** What the page shows: the view's method, segmentation and target, and what else is known of it. */
export interface ShareAsk {
  method: string;
  granularity: string;
  pattern: string;
  span: TargetSpan;
  extra: Extra | null;
  /** The segment method's request on screen (its segmentation, removal, count); null for a token method. */
  segment: SegmentAsk | null;
  /** The finished faithfulness test of this target (the explain wrapper's curves payload), or null. */
  faithfulness: Readonly<Record<string, unknown>> | null;
}

/** The parts of a curves payload the page shows (display/share.py FaithfulnessTable.of): the table, what it removed. */
export function faithfulnessField(payload: Readonly<Record<string, unknown>>): Record<string, unknown> {
  const {table, granularity, removal, span} = payload;
  return {table, granularity, removal, span};
}

/** The share wrapper's input for datapoint `input` and the view `ask`. */
export function shareInput(reg: MethodRegistry, input: IndexedInputLike, ask: ShareAsk): IndexedInputLike {
  let fields: Record<string, unknown>;
  if (ask.segment !== null) {  // the segment request's settings; its method goes as the method shared
    fields = segmentFields(reg, ask.segment);
    delete fields[SEGMENT_METHOD_FIELD];
    fields = {...fields, [SHARE_METHOD_FIELD]: ask.segment.method, [TARGET_SPAN_FIELD]: spanToString(ask.segment.span)};
  } else {
    fields = {[SHARE_METHOD_FIELD]: ask.method, [GRANULARITY_FIELD]: ask.granularity,
              [PATTERN_FIELD]: ask.granularity === 'regex' ? ask.pattern : '', [TARGET_SPAN_FIELD]: spanToString(ask.span),
              ...countFields(reg, ask.extra)};
  }
  if (ask.faithfulness !== null) fields[FAITHFULNESS_FIELD] = faithfulnessField(ask.faithfulness);
  const tag = `share-${ask.method}-${ask.granularity}-${spanToString(ask.span)}${ask.faithfulness !== null ? '-f' : ''}`;
  return derivedInput(input, fields, tag);
}

/** The page in the wrapper's answer; throws naming what came instead. */
export function sharePage(res: Array<Record<string, unknown>>): string {
  const out = res[0]?.[SHARE_FIELD] as {html?: unknown} | undefined;
  if (typeof out?.html !== 'string') throw new Error(`The server's "${SHARE_FIELD}" answer holds no page; reload the page and try again.`);
  return out.html;
}

/**
 * Asks for the page of the view on screen and downloads it; a failure (the server gone, a segment method not
 * measured yet) goes to the module's side line. `busy` is called with true before and false after.
 */
export async function shareView(ctl: SalienceController, granularity: string, pattern: string,
                                busy: (on: boolean) => void): Promise<void> {
  const reg = ctl.registry();
  const input = ctl.input;
  const p = ctl.payload;
  if (reg === null || input == null) return;
  const segment = ctl.segmentAsk();
  if (segment !== null && (ctl.segmentValues() === null || ctl.segmentValues()!.partial)) {
    ctl.side = {kind: 'error', text: `Share this view: ${reg.label(segment.method)} is not measured for this target yet; share once its ` +
                                     'map is on screen.'};
    ctl.host.changed();
    return;
  }
  const tested = ctl.salienceModel === null || p === null ? null : faithfulnessStore.of(ctl.salienceModel,
      {datapointId: input.id, text: p.text, t0: ctl.span.t0, t1: ctl.span.t1});
  const ask: ShareAsk = {method: ctl.method, granularity, pattern, span: ctl.span, extra: ctl.extra(), segment,
                         faithfulness: tested};
  busy(true);
  try {
    const res = await ctl.host.getPreds([shareInput(reg, input, ask)], shareModelName(ctl.host.modelName()),
                                        [SHARE_FIELD], 'Writing the page of this view…');
    const name = exportName(`salience ${ask.method} ${granularity} ${p ? p.text.slice(p.prompt_end) : ''}`, 'html');
    download(name, new Blob([sharePage(res)], {type: 'text/html'}));
  } catch (e) {
    ctl.side = {kind: 'error', text: `Share this view: ${errorMessage(e)}`};
  } finally {
    busy(false);
  }
}
