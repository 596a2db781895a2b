import {CASE_FIELD, PROMPT_FIELD, SYSTEM_FIELD, TARGET_FIELD} from '../shared/fields.js';
import {addStyleOnce, afterMethod, afterUpdated, patchOnce, wrapGetter, type UpdatingElementLike} from './patch.js';

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
    if (typeof proto['updateColumns'] !== 'function' ||
        !wrapGetter(proto, 'keys', (_el, headers) => fitColumnWidths(headers as ColumnHeaderLike[]))) {
      return false;
    }
    afterMethod(proto, 'updateColumns', (el: DataTableModuleLike) => hideColumns(el.columnVisibility));
    afterUpdated(proto, (el: DataTableModuleLike) => addStyleOnce(el, 'tableFit', DATA_TABLE_CSS));
  });
}
