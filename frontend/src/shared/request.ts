/**
 * Talking to LIT's server, for every module of the bundle: the parts of LIT's
 * inputs and model metadata the modules read, which model carries the
 * salience field, derived inputs (a datapoint plus request fields under an id
 * of their own) and turning server failures into messages that name the cause.
 */
import {RESPONSE_FIELD, SALIENCE_FIELD} from './fields.js';

/** The parts of LIT's IndexedInput the module uses. */
export interface IndexedInputLike {
  id: string;
  data: Record<string, unknown>;
  meta: Record<string, unknown>;
}

/** LIT's per-model metadata (appState.metadata.models[name]). */
export interface ModelInfoLike {
  spec?: {input?: Record<string, unknown>; output?: Record<string, unknown>};
}

/** LitType names accepted for the salience field (lit-nlp 1.3.1 has no JsonDict; the app uses LitType). */
const JSON_TYPES = new Set(['JsonDict', 'LitType']);

/** A spec entry's LitType name (`__name__` in JSON, the class name once LIT's client revived it). */
export function typeName(t: unknown): string | undefined {
  if (t == null || typeof t !== 'object') return undefined;
  const o = t as {__name__?: string; constructor?: {name?: string}};
  return o.__name__ ?? o.constructor?.name;
}

/** True when an output spec has a `salience` field of a JSON type. */
export function hasSalienceField(output: Record<string, unknown> | undefined): boolean {
  if (output == null || !(SALIENCE_FIELD in output)) return false;
  const name = typeName(output[SALIENCE_FIELD]);
  return name === undefined || JSON_TYPES.has(name);
}

/**
 * True for a salience model of LIT's own prompt-debugging convention (lit_nlp.examples.prompt_debugging):
 * a `target_mask` input and TokenScores outputs, no `salience` payload (../salience/lit_convention.ts).
 */
export function isLitConventionSalience(info: ModelInfoLike | undefined): boolean {
  const out = info?.spec?.output;
  if (out == null || hasSalienceField(out) || !('target_mask' in (info?.spec?.input ?? {}))) return false;
  return Object.values(out).some((t) => typeName(t) === 'TokenScores');
}

/**
 * The model to ask for salience: the model itself when it has a `salience`
 * output, else its hidden companion `_<model>_salience` (LIT's convention for
 * prompt debugging; ours, or LIT's own models' answered through
 * ../salience/lit_convention.ts), else null.
 */
export function salienceModelFor(model: string, models: Record<string, ModelInfoLike>): string | null {
  if (hasSalienceField(models[model]?.spec?.output)) return model;
  const hidden = `_${model}_salience`;
  if (hasSalienceField(models[hidden]?.spec?.output) || isLitConventionSalience(models[hidden])) return hidden;
  return null;
}

/**
 * The model a module (one instance for all models) works with: `attr` (the model LIT rendered it
 * with) while it is still selected, else the first selected model. LIT keeps the attribute of its
 * first render when the model selector changes, so a switch from a to b shows in `selected` only.
 */
export function activeModel(attr: string | undefined, selected: readonly string[]): string {
  if (attr && (selected.length === 0 || selected.includes(attr))) return attr;
  return selected[0] ?? attr ?? '';
}

/** Whether the module applies to the selected models (LIT's shouldDisplayModule). */
export function shouldDisplay(modelSpecs: Record<string, ModelInfoLike>): boolean {
  return Object.values(modelSpecs ?? {}).some((info) => {
    const out = info?.spec?.output;
    return hasSalienceField(out) || (out != null && RESPONSE_FIELD in out);
  });
}

/**
 * A copy of the datapoint with extra input fields, under a derived id so that
 * LIT's prediction cache (keyed by id) keeps it apart from the original, sent
 * in full (meta.added) rather than as an id the server would look up.
 */
export function derivedInput(
    input: IndexedInputLike, extra: Record<string, unknown>, tag: string): IndexedInputLike {
  const id = `${input.id}~${tag}`;
  return {id, data: {...input.data, ...extra, _id: id}, meta: {...input.meta, added: true}};
}

/**
 * How our server's answer to a cancelled request starts (lit_app/errors.py `CANCELLED_PREFIX`, the same text:
 * tests/unit/test_frontend_field_names.py): work a newer request superseded, or that the user stopped. It is
 * expected, not a fault (HTTP 409).
 */
export const CANCELLED_PREFIX = 'Cancelled:';

/** Whether a failed request's error (or its text) is the server's answer to a cancelled request. */
export function isCancellation(e: unknown): boolean {
  return errorMessage(e).startsWith(CANCELLED_PREFIX);
}

/**
 * A one-paragraph message for a failed request. LIT's server answers an
 * exception with "Uncaught error: <message>\n\nDetails: <traceback>"; a
 * network failure is a TypeError from fetch.
 */
export function errorMessage(e: unknown): string {
  const raw = e instanceof Error ? e.message : String(e);
  let msg = raw.split(/\n\nDetails:/)[0].replace(/^Uncaught error:\s*/, '').trim();
  if (/^(Failed to fetch|NetworkError|Load failed)/i.test(msg)) {
    return `Could not reach the LIT server (${msg}). Check that it is still running, then retry.`;
  }
  if (/^<(!doctype|html)/i.test(msg)) {
    msg = msg.replace(/<[^>]*>/g, ' ').replace(/\s+/g, ' ').trim();
    return `The server answered with an error page: ${msg.slice(0, 300)}`;
  }
  return msg || 'The server answered with an empty error. See the server log.';
}
