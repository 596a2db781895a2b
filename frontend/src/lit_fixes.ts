/**
 * A work-around for a LIT 1.3.1 client bug that our layout exposes.
 *
 * LIT's Generated Text module (`generated-text-module`) sets its observable
 * `inputData` (which re-renders it at once) and only then fills `generatedText`
 * in place; `generatedText` is a MobX `observable.ref`, so the in-place writes
 * are not seen and the module stays empty until something else re-renders it.
 * Re-assigning the filled object after `updateSelection` finishes makes MobX
 * re-render it. The patch is applied once and only if the method exists.
 */

import {CASE_FIELD, PROMPT_FIELD, SYSTEM_FIELD, TARGET_FIELD} from './shared/fields.js';
import {isCancellation} from './shared/request.js';

interface GeneratedTextModuleLike {
  generatedText: Record<string, unknown>;
  updateSelection(...args: unknown[]): Promise<unknown>;
}

const PATCHED = Symbol.for('sequence-salience.generated-text-patched');

type Prototype = Record<PropertyKey, unknown>;

/**
 * The one way a LIT class is patched here: takes the class's prototype, skips it when `mark` says it was
 * patched, runs `apply` (which returns false, before changing anything, when the class lacks what it
 * patches) and marks it. Returns whether it patched.
 */
function patchOnce(cls: unknown, mark: symbol, apply: (proto: Prototype) => boolean | void): boolean {
  const proto = (cls as {prototype?: Prototype} | null)?.prototype;
  if (proto == null || proto[mark] || apply(proto) === false) return false;
  proto[mark] = true;
  return true;
}

/** Runs `after` on each instance after the class's own `updated` (LIT runs it after every render). */
function afterUpdated<T>(proto: Prototype, after: (el: T) => void): void {
  const original = proto['updated'] as ((...args: unknown[]) => void) | undefined;
  proto['updated'] = function (this: T, ...args: unknown[]) {
    original?.apply(this, args);
    after(this);
  };
}

/** Patches the class's prototype; returns false when there is nothing to patch. */
export function patchGeneratedTextModule(cls: unknown): boolean {
  return patchOnce(cls, PATCHED, (proto) => {
    if (typeof proto['updateSelection'] !== 'function') return false;
    const original = proto['updateSelection'] as GeneratedTextModuleLike['updateSelection'];
    proto['updateSelection'] = async function (this: GeneratedTextModuleLike, ...args: unknown[]) {
      const result = await original.apply(this, args);
      this.generatedText = {...this.generatedText};
      return result;
    };
  });
}

/**
 * LIT's status bar (`lit-app-statusbar`) shows a pending request as a line whose light part
 * slides by animating `margin-left`/`margin-right` forever: a layout and a repaint every frame
 * for as long as any request is pending. On a 2-core machine with a software-rendered page
 * that took 0.2 of a core from the model computing the very answer the page waits for (our
 * own sliding bar took another 0.1; docs/benchmarks.md, "First highlight in the browser").
 * This keeps the line's colour as the busy signal and stops the slide.
 */
export const QUIET_STATUS_CSS = '.progress-line:before { animation: none !important; display: none !important; }';

const QUIETED = Symbol.for('sequence-salience.statusbar-quieted');

interface UpdatingElementLike {
  shadowRoot: ShadowRoot | null;
  updated?(...args: unknown[]): void;
}

/** Adds a <style data-`marker`> with `cssText` to the element's shadow root once (idempotent). */
function addStyleOnce(el: UpdatingElementLike, marker: string, cssText: string): boolean {
  const root = el.shadowRoot;
  const attr = marker.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
  if (root == null || root.querySelector(`style[data-${attr}]`) !== null) return false;
  const style = root.ownerDocument.createElement('style');
  style.dataset[marker] = '';
  style.textContent = cssText;
  root.appendChild(style);
  return true;
}

/** Adds QUIET_STATUS_CSS to the element's shadow root once (idempotent). */
export function quietStatusBarElement(el: UpdatingElementLike): boolean {
  return addStyleOnce(el, 'quietStatus', QUIET_STATUS_CSS);
}

/**
 * LIT's ApiService reports every failed request to its status service, `addError(message, fullMessage,
 * key)` (key: the request's URL; fullMessage: the error's `toString()`, "Error: <the answer>"), and the
 * status bar shows it in red until a request of the same URL succeeds. Our server answers a request that a
 * newer one superseded, or that the user stopped, with "Cancelled: ..." (409; lit_app/errors.py): expected,
 * not a fault, and our modules do not show it. Issue 35: after IG's steps changed while IG ran, "Cancelled:
 * a newer selection replaced this request" stayed red in the status bar for the whole newer run. This keeps
 * those answers out of the status service's errors; every other error goes in as before.
 */
interface StatusServiceLike {
  addError(message: string, fullMessage?: string, key?: string): void;
}

/** Whether LIT's `addError(message, fullMessage)` reports our server's answer to a cancelled request. */
export function reportsCancellation(message: unknown, fullMessage?: unknown): boolean {
  const text = String(fullMessage ?? message ?? '').replace(/^Error:\s*/, '');
  return isCancellation(text);
}

const CANCELLATIONS_DROPPED = Symbol.for('sequence-salience.status-cancellations-dropped');

/** Wraps a status service's `addError` so that it drops cancellation answers (above); false when it is
 * not one or was wrapped. */
export function dropCancellations(service: unknown): boolean {
  const s = service as (StatusServiceLike & Record<symbol, boolean>) | null | undefined;
  if (s == null || typeof s.addError !== 'function' || s[CANCELLATIONS_DROPPED]) return false;
  const original = s.addError;
  s.addError = function (this: StatusServiceLike, ...args: Parameters<StatusServiceLike['addError']>) {
    if (!reportsCancellation(args[0], args[1])) original.apply(this, args);
  };
  s[CANCELLATIONS_DROPPED] = true;
  return true;
}

/**
 * Patches LIT's status bar class so that every instance gets QUIET_STATUS_CSS after each update
 * (before the frame is painted), and its status service (LIT's one, which every request reports to)
 * drops cancellation answers from its first update on; returns false when there is nothing to patch or
 * it was patched.
 */
export function patchStatusBar(cls: unknown): boolean {
  return patchOnce(cls, QUIETED, (proto) => afterUpdated(proto, (el: UpdatingElementLike & {statusService?: unknown}) => {
    quietStatusBarElement(el);
    dropCancellations(el.statusService);
  }));
}

/**
 * LIT 1.3.1's `lit-modules` reads the layout's `layoutSettings` (mainHeight, leftWidth) in a
 * reaction that runs before the layout arrives from /get_info and is not re-run when it does,
 * so every layout opens at 50 % / 50 % whatever it declares. This patch applies a declared
 * setting after an update whenever the declared value changes (first load, layout switch);
 * a height or width the user drags is kept until then.
 */
interface LitModulesLike {
  upperHeight: string;
  leftColumnWidth: string;
  modulesService?: {getSetting?(name: string): unknown};
  updated?(...args: unknown[]): void;
}

const SETTINGS_PATCHED = Symbol.for('sequence-salience.layout-settings-patched');
const APPLIED = Symbol.for('sequence-salience.layout-settings-applied');

/** Applies the declared mainHeight / leftWidth when they changed since last applied; true if it set one. */
export function applyLayoutSettings(el: LitModulesLike): boolean {
  const get = (name: string) => el.modulesService?.getSetting?.(name);
  const main = get('mainHeight');
  const left = get('leftWidth');
  const key = `${String(main)}/${String(left)}`;
  const host = el as unknown as Record<symbol, string | undefined>;
  if (host[APPLIED] === key) return false;
  host[APPLIED] = key;
  let changed = false;
  if (typeof main === 'number' && main >= 0 && main <= 100) {
    el.upperHeight = `${main}%`;
    changed = true;
  }
  if (typeof left === 'number' && left > 0 && left < 100) {
    el.leftColumnWidth = `${left}%`;
    changed = true;
  }
  return changed;
}

/** Patches LIT's `lit-modules` class so that the declared layout settings apply (see above). */
export function patchLayoutSettings(cls: unknown): boolean {
  return patchOnce(cls, SETTINGS_PATCHED, (proto) => afterUpdated(proto, (el: LitModulesLike) => {
    applyLayoutSettings(el);
  }));
}

/**
 * LIT 1.3.1's data table sizes its columns by LIT type, whatever the panel's width: every
 * TextSegment 220-600 px, a CategoryLabel 60-100 px. In our layout's left column (30 % of the page,
 * about 370 px at 1280x720) a row of our prompt datasets was ~850 px wide: the prompt cut after a
 * few words, the target out of view on the right, and the `system` column (one case of four has a
 * system prompt) taking 220 px more. A click that first brings the row into view (Playwright's, on
 * the row's centre) scrolled the table sideways onto that system column. This patch gives the
 * prompt datasets' columns widths that fit that panel (the prompt the widest, the target narrow
 * with its text wrapped, the case name on two lines; half LIT's cell padding) and starts the
 * system column hidden: LIT's
 * "Columns" menu shows it, and the salience module shows a row's system prompt (folded) above the
 * prompt. Columns of other names keep LIT's widths.
 */
export interface ColumnHeaderLike {
  name: string;
  minWidth?: number;
  maxWidth?: number;
  width?: number;
}

/**
 * [min, preferred, max] px per column name. The table (auto layout) gives each column its preferred
 * width when the panel has room and shrinks them towards the min (the longest word) when not: at
 * 1280x720 the four columns fit 372 px, wider panels go to the prompt first. LIT's text cells also
 * clip their text at about 0.4 characters per px of the max ("…" shows the rest): 120 px keeps a
 * whole case name, 360 px ~145 characters of a prompt (the shipped prompts whole but the few-shot
 * one, which no longer pushes the next case out of view), 240 px a one-sentence target.
 */
export const DATA_TABLE_WIDTHS: Readonly<Record<string, readonly [number, number, number]>> = {
  [CASE_FIELD]: [72, 100, 120],
  [PROMPT_FIELD]: [112, 360, 360],
  [TARGET_FIELD]: [64, 140, 240],
  [SYSTEM_FIELD]: [112, 360, 360],
};
/** Half LIT's horizontal cell padding (8 px): 8 px more for the text of each column. */
export const DATA_TABLE_CSS = 'lit-data-table { --table-cell-padding: 2px 4px; }';
/** Columns the table starts without (LIT's "Columns" menu shows them). */
export const DATA_TABLE_HIDDEN = [SYSTEM_FIELD] as const;

/** The headers with DATA_TABLE_WIDTHS applied by name (new objects; the others unchanged). */
export function fitColumnWidths<T extends ColumnHeaderLike>(headers: readonly T[]): T[] {
  return headers.map((h) => {
    const w = DATA_TABLE_WIDTHS[h.name];
    return w === undefined ? h : {...h, minWidth: w[0], width: w[1], maxWidth: w[2]};
  });
}

/** Sets DATA_TABLE_HIDDEN columns invisible in LIT's column-visibility map; true if it hid one. */
export function hideColumns(visibility: Map<string, boolean> | undefined): boolean {
  let hid = false;
  for (const name of DATA_TABLE_HIDDEN) {
    if (visibility?.get(name) === true) {
      visibility.set(name, false);
      hid = true;
    }
  }
  return hid;
}

interface DataTableModuleLike extends UpdatingElementLike {
  columnVisibility?: Map<string, boolean>;
  updateColumns?(...args: unknown[]): void;
}

const COLUMNS_PATCHED = Symbol.for('sequence-salience.data-table-columns-patched');

/**
 * Patches LIT's `data-table-module` class: its `keys` getter (the column headers; a MobX computed,
 * which takes the getter from the prototype when a module is constructed, so this must run before
 * the first data table is created: LIT creates modules only after /get_info) and its
 * `updateColumns` (the default visibility, re-run when the dataset or models change), and adds
 * DATA_TABLE_CSS to each instance after its updates (as for the status bar). Returns false
 * when there is nothing to patch or it was patched.
 */
export function patchDataTableColumns(cls: unknown): boolean {
  return patchOnce(cls, COLUMNS_PATCHED, (proto) => {
    const keys = Object.getOwnPropertyDescriptor(proto, 'keys');
    const update = proto['updateColumns'];
    if (keys?.get === undefined || !keys.configurable || typeof update !== 'function') return false;
    const originalKeys = keys.get;
    Object.defineProperty(proto, 'keys', {
      ...keys,
      get(this: unknown) {
        return fitColumnWidths(originalKeys.call(this) as ColumnHeaderLike[]);
      },
    });
    proto['updateColumns'] = function (this: DataTableModuleLike, ...args: unknown[]) {
      (update as (...a: unknown[]) => void).apply(this, args);
      hideColumns(this.columnVisibility);
    };
    afterUpdated(proto, (el: DataTableModuleLike) => addStyleOnce(el, 'tableFit', DATA_TABLE_CSS));
  });
}

// ------------------------------------------------------------------ the datapoint editor's "Add"

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
    const missing = Object.getOwnPropertyDescriptor(proto, 'missingFields');
    if (missing?.get === undefined || !missing.configurable) return false;
    const originalMissing = missing.get;
    const refusalOf = (el: DatapointEditorLike) =>
      el.editedData?.data == null ? null : editorRefusal(el.editedData.data, el.appState?.metadata?.requestLimits);
    Object.defineProperty(proto, 'missingFields', {
      ...missing,
      get(this: DatapointEditorLike) {
        const fields = originalMissing.call(this) as string[];
        const refusal = refusalOf(this);
        return refusal === null || fields.includes(refusal.field) ? fields : [...fields, refusal.field];
      },
    });
    const edited = Object.getOwnPropertyDescriptor(proto, 'editedData');
    if (edited?.get !== undefined && edited.configurable) {
      const originalEdited = edited.get;
      Object.defineProperty(proto, 'editedData', {
        ...edited,
        get(this: DatapointEditorLike) {
          return withoutCopiedCase(originalEdited.call(this) as EditedInputLike, this.dataEdits);
        },
      });
    }
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

/**
 * LIT 1.3.1's tooltip (`lit-tooltip`, the (?) of every module header) clamps its text to six lines
 * of 232 px (`-webkit-line-clamp: 6`): the module help was cut after its first paragraph, so the
 * explanations of the methods and the colours could not be read (issue 35). When the pointer enters
 * a tooltip whose text is clamped, this shows the whole text instead: unclamped, FULL_TOOLTIP_WIDTH px
 * wide (less on a narrow window), placed inside the window (`placeTooltip`) and scrolling inside
 * itself only if it is taller than the window. Tooltips that fit keep LIT's look.
 */
export const FULL_TOOLTIP_CSS = `
.lit-tooltip .tooltip-text.ss-full {
  display: block; -webkit-line-clamp: unset; overflow-y: auto; position: fixed;
  max-width: none; right: auto; bottom: auto; padding: 2px 10px; box-sizing: border-box;
}
.lit-tooltip .tooltip-text.ss-full p { margin: 6px 0; }`;
export const FULL_TOOLTIP_WIDTH = 520;
const TOOLTIP_MARGIN = 8;
const TOOLTIP_PATCHED = Symbol.for('sequence-salience.tooltip-patched');
const TOOLTIP_LISTENING = Symbol.for('sequence-salience.tooltip-listening');

interface Box {
  left: number;
  top: number;
  right: number;
  bottom: number;
}

/**
 * Where a tooltip of `width` x `height` px goes for an anchor at `anchor`, in a window of `vw` x `vh`:
 * below the anchor, moved left and up as far as needed to stay inside the window (with a margin);
 * its height is cut to the window's (it then scrolls).
 */
export function placeTooltip(anchor: Box, width: number, height: number, vw: number, vh: number):
    {left: number; top: number; width: number; maxHeight: number} {
  const m = TOOLTIP_MARGIN;
  const w = Math.max(0, Math.min(width, vw - 2 * m));
  const maxHeight = Math.max(0, vh - 2 * m);
  const h = Math.min(height, maxHeight);
  const left = Math.max(m, Math.min(anchor.left, vw - m - w));
  const top = Math.max(m, Math.min(anchor.bottom + 4, vh - m - h));
  return {left, top, width: w, maxHeight};
}

/** Shows a clamped tooltip's whole text inside the window (see FULL_TOOLTIP_CSS); false when it fits as it is. */
export function showFullTooltip(root: ShadowRoot | null, vw: number, vh: number): boolean {
  const text = root?.querySelector('.tooltip-text') as HTMLElement | null | undefined;
  const anchor = root?.querySelector('.lit-tooltip') as HTMLElement | null | undefined;
  if (text == null || anchor == null) return false;
  if (!text.classList.contains('ss-full')) {
    if (text.scrollHeight <= text.clientHeight + 1) return false;  // nothing is cut
    text.classList.add('ss-full');
  }
  text.style.width = `${Math.min(FULL_TOOLTIP_WIDTH, vw - 2 * TOOLTIP_MARGIN)}px`;
  text.style.maxHeight = 'none';
  const place = placeTooltip(anchor.getBoundingClientRect(), text.offsetWidth, text.scrollHeight, vw, vh);
  Object.assign(text.style, {left: `${place.left}px`, top: `${place.top}px`, width: `${place.width}px`,
                             maxHeight: `${place.maxHeight}px`});
  return true;
}

/** Patches LIT's tooltip class: FULL_TOOLTIP_CSS in each instance, and the whole text when the pointer enters. */
export function patchTooltip(cls: unknown): boolean {
  return patchOnce(cls, TOOLTIP_PATCHED, (proto) => afterUpdated(proto, (el: UpdatingElementLike) => {
    addStyleOnce(el, 'fullTooltip', FULL_TOOLTIP_CSS);
    const host = el as unknown as Record<symbol, boolean> & UpdatingElementLike;
    if (host[TOOLTIP_LISTENING] || el.shadowRoot == null) return;
    host[TOOLTIP_LISTENING] = true;
    el.shadowRoot.addEventListener('mouseover', () => {
      const view = el.shadowRoot?.ownerDocument.defaultView;
      if (view != null) showFullTooltip(el.shadowRoot, view.innerWidth, view.innerHeight);
    });
  }));
}

/**
 * LIT's app toolbar lets its title ("Sequence Salience"), its subtitle ("Powered by LIT") and "Copy Link" wrap onto
 * two lines of a 40 px bar when the layout names crowd it (issue 45: at 1280 px the title was cut across two lines).
 * This keeps the title on one line in the room the two wrapped lines took, by leaving out the subtitle (the status
 * bar's "Made with ... by the LIT team" stays), so that the layout names keep their width and every toolbar button
 * stays inside the window.
 */
export const TOOLBAR_CSS = `
#title-group { white-space: nowrap; flex-shrink: 0; }
#title-group .subtitle { display: none; }`;
const TOOLBAR_PATCHED = Symbol.for('sequence-salience.toolbar-patched');

/** Patches LIT's app toolbar class: TOOLBAR_CSS in each instance. */
export function patchAppToolbar(cls: unknown): boolean {
  return patchOnce(cls, TOOLBAR_PATCHED, (proto) => afterUpdated(proto, (el: UpdatingElementLike) => {
    addStyleOnce(el, 'oneLineToolbar', TOOLBAR_CSS);
  }));
}

/** Every patch above with the tag of the LIT element class it patches (index.ts applies each once it is defined). */
export const LIT_PATCHES: readonly (readonly [tag: string, patch: (cls: unknown) => boolean])[] = [
  ['generated-text-module', patchGeneratedTextModule],
  ['lit-app-statusbar', patchStatusBar],
  ['data-table-module', patchDataTableColumns],
  ['datapoint-editor-module', patchDatapointEditor],
  ['lit-tooltip', patchTooltip],
  ['lit-modules', patchLayoutSettings],
  ['lit-app-toolbar', patchAppToolbar],
];
