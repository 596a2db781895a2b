/**
 * "Share this view": asks the model's share wrapper (lit_app/wrappers/share.py, `_<name>_share`) for the
 * standalone page of what is on screen (sequence_salience/display/share.py: model, prompt, answer, method,
 * granularity, the map, the answer × prompt matrix with its numbers, a notebook cell) and downloads it.
 * The request carries the datapoint, the method, granularity, regex and target span shown and the extra
 * method's count, so the page is computed from the same result as the module's matrices.
 */
import {GRANULARITY_FIELD, PATTERN_FIELD, SHARE_FIELD, SHARE_METHOD_FIELD, TARGET_SPAN_FIELD} from '../shared/fields.js';
import type {MethodRegistry} from '../shared/methods.js';
import {derivedInput, errorMessage, type IndexedInputLike} from '../shared/request.js';
import {download, exportName} from '../shared/download.js';
import type {SalienceController} from './controller.js';
import {countFields, type Extra} from './request.js';
import {spanToString, type TargetSpan} from './spans.js';

/** The share wrapper of generation model `model` (lit_app/schema/fields.py share_model_name). */
export function shareModelName(model: string): string {
  return `_${model}_share`;
}

/** What the page shows: the view's method, segmentation and target. */
export interface ShareAsk {
  method: string;
  granularity: string;
  pattern: string;
  span: TargetSpan;
  extra: Extra | null;
}

/** The share wrapper's input for datapoint `input` and the view `ask`. */
export function shareInput(reg: MethodRegistry, input: IndexedInputLike, ask: ShareAsk): IndexedInputLike {
  const fields = {[SHARE_METHOD_FIELD]: ask.method, [GRANULARITY_FIELD]: ask.granularity,
                  [PATTERN_FIELD]: ask.granularity === 'regex' ? ask.pattern : '', [TARGET_SPAN_FIELD]: spanToString(ask.span),
                  ...countFields(reg, ask.extra)};
  return derivedInput(input, fields, `share-${ask.method}-${ask.granularity}-${spanToString(ask.span)}`);
}

/** The page in the wrapper's answer; throws naming what came instead. */
export function sharePage(res: Array<Record<string, unknown>>): string {
  const out = res[0]?.[SHARE_FIELD] as {html?: unknown} | undefined;
  if (typeof out?.html !== 'string') throw new Error(`The server's "${SHARE_FIELD}" answer holds no page; reload the page and try again.`);
  return out.html;
}

/**
 * Asks for the page of the view on screen and downloads it; a failure (a segment method, the server
 * gone) goes to the module's side line. `busy` is called with true before and false after.
 */
export async function shareView(ctl: SalienceController, granularity: string, pattern: string,
                                busy: (on: boolean) => void): Promise<void> {
  const reg = ctl.registry();
  const input = ctl.input;
  if (reg === null || input == null) return;
  const ask: ShareAsk = {method: ctl.method, granularity, pattern, span: ctl.span, extra: ctl.extra()};
  busy(true);
  try {
    const res = await ctl.host.getPreds([shareInput(reg, input, ask)], shareModelName(ctl.host.modelName()),
                                        [SHARE_FIELD], 'Writing the page of this view…');
    const p = ctl.payload;
    const name = exportName(`salience ${ask.method} ${granularity} ${p ? p.text.slice(p.prompt_end) : ''}`, 'html');
    download(name, new Blob([sharePage(res)], {type: 'text/html'}));
  } catch (e) {
    ctl.side = {kind: 'error', text: `Share this view: ${errorMessage(e)}`};
  } finally {
    busy(false);
  }
}
