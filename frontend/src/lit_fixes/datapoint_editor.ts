/** The datapoint editor's "Add": a row the server would refuse is refused before it is added, in words. */
import {CASE_FIELD, PROMPT_FIELD, SYSTEM_FIELD, TARGET_FIELD} from '../shared/fields.js';
import {afterUpdated, patchOnce, wrapGetter, type UpdatingElementLike} from './patch.js';

/** What the server publishes of its request limits in /get_info (lit_app/server.py `publish_limits`). */
export interface RequestLimitsLike {
  max_prompt_chars?: number;
}

/** The fields whose total length the server bounds (lit_app/edge/limits.py `_TEXT_FIELDS`, "foil" aside). */
const BOUNDED_TEXT_FIELDS = [PROMPT_FIELD, SYSTEM_FIELD, TARGET_FIELD] as const;

/**
 * Why the server would refuse this new row's model requests, in words, or '' when it would not: an empty or
 * whitespace-only prompt ("The prompt is empty"), or prompt + system + target longer than the server's
 * --max_prompt_chars (published in /get_info as `requestLimits`). The field it is about comes with it.
 */
export function editorRefusal(data: Record<string, unknown>, limits: RequestLimitsLike | undefined):
    {field: string; message: string} | null {
  const prompt = data[PROMPT_FIELD];
  if (typeof prompt === 'string' && prompt.trim() === '') {
    return {field: PROMPT_FIELD, message: prompt === '' ? 'The prompt is empty: type a prompt to add this row.'
        : 'The prompt is only spaces or line breaks: type a prompt to add this row.'};
  }
  const most = limits?.max_prompt_chars;
  if (typeof most === 'number') {
    const total = BOUNDED_TEXT_FIELDS.reduce((n, f) => n + (typeof data[f] === 'string' ? (data[f] as string).length : 0), 0);
    if (total > most) {
      return {field: PROMPT_FIELD, message: `prompt + system + target is ${total.toLocaleString('en-US')} characters;` +
          ` this server accepts up to ${most.toLocaleString('en-US')} (--max_prompt_chars). Shorten the prompt to add this row.`};
    }
  }
  return null;
}

/** LIT's `IndexedInput` as the editor builds it: the row's fields in `data`. */
interface EditedInputLike {
  data: Record<string, unknown>;
}

/**
 * The row the editor would add, less the case label it copied from the selected row: once a field is edited and the
 * case is not, the new row's case is '' (was: a new row about another prompt kept "simple question"). The editor
 * shows the value it would add, so the emptied case box says so. `edits`: LIT's `dataEdits` (the fields typed).
 */
export function withoutCopiedCase<T extends EditedInputLike>(input: T, edits: Record<string, unknown> | undefined): T {
  const edited = edits !== undefined && Object.keys(edits).length > 0;
  if (!edited || CASE_FIELD in edits! || !input.data?.[CASE_FIELD]) return input;
  return {...input, data: {...input.data, [CASE_FIELD]: ''}};
}

interface DatapointEditorLike extends UpdatingElementLike {
  editedData: EditedInputLike;
  dataEdits?: Record<string, unknown>;
  appState: {metadata?: {requestLimits?: RequestLimitsLike} | null};
}

const EDITOR_PATCHED = Symbol.for('sequence-salience.datapoint-editor-patched');
const REFUSAL_CLASS = 'ss-add-refusal';

/**
 * Patches LIT's `datapoint-editor-module`: its `missingFields` getter (a MobX computed read when a module is
 * constructed, so this runs before the first editor exists, as for the data table) also names the prompt when
 * `editorRefusal` refuses the edited row, which disables "Add" (LIT adds a row only when no field is missing);
 * after each update the refusal is said in words in the editor's footer (role="alert"). Returns false when
 * there is nothing to patch or it was patched.
 */
export function patchDatapointEditor(cls: unknown): boolean {
  return patchOnce(cls, EDITOR_PATCHED, (proto) => {
    const refusalOf = (el: DatapointEditorLike) =>
      el.editedData?.data == null ? null : editorRefusal(el.editedData.data, el.appState?.metadata?.requestLimits);
    const withRefusal = wrapGetter(proto, 'missingFields', (el: DatapointEditorLike, missing) => {
      const fields = missing as string[];
      const refusal = refusalOf(el);
      return refusal === null || fields.includes(refusal.field) ? fields : [...fields, refusal.field];
    });
    if (!withRefusal) return false;
    wrapGetter(proto, 'editedData', (el: DatapointEditorLike, input) =>
      withoutCopiedCase(input as EditedInputLike, el.dataEdits));
    afterUpdated(proto, (el: DatapointEditorLike) => showRefusal(el, refusalOf(el)));
  });
}

/**
 * Says `refusal` in words on a line of its own just above the editor's footer (role="alert"), or removes the line
 * when there is none. Not inside the footer: LIT's footer is one 36 px row of buttons, where the sentence was
 * squeezed into a column drawn from x = -65 px (the user read "m +" and "up to").
 */
function showRefusal(el: DatapointEditorLike, refusal: {message: string} | null): void {
  const footer = el.shadowRoot?.querySelector('.module-footer');
  if (footer == null || footer.parentElement == null) return;
  let line = footer.parentElement.querySelector(`:scope > .${REFUSAL_CLASS}`);
  if (refusal === null) {
    line?.remove();
    return;
  }
  if (line === null) {
    line = footer.ownerDocument.createElement('div');
    line.className = REFUSAL_CLASS;
    line.setAttribute('role', 'alert');
    (line as HTMLElement).style.cssText = 'color: #a50e0e; font-size: 12px; margin: 4px 8px; flex-shrink: 0;';
    footer.before(line);
  }
  if (line.textContent !== refusal.message) line.textContent = refusal.message;
}
