/**
 * Loading a test's text (a reduced prompt, a flipped word) into LIT's datapoint editor, as if
 * the user had typed it, so they can check it and click "Add".
 */

const EDITOR_TAGS = ['single-datapoint-editor-module', 'simple-datapoint-editor-module'];

/** Deep querySelectorAll through open shadow roots (LIT nests modules in several). */
function deepQuery(root: Document | ShadowRoot | Element, selector: string, out: Element[] = []): Element[] {
  for (const el of Array.from(root.querySelectorAll('*'))) {
    if (el.matches(selector)) out.push(el);
    if (el.shadowRoot) deepQuery(el.shadowRoot, selector, out);
  }
  return out;
}

/**
 * Puts field values into LIT's datapoint editor as edits (as if typed), so the user can
 * check them and click "Add". Also brings the editor's tab to the front.
 * @returns an error message, or '' on success.
 */
export function loadIntoEditor(values: Record<string, string>): string {
  const editor = deepQuery(document, EDITOR_TAGS.join(','))[0] as
      (HTMLElement & {dataEdits?: Record<string, unknown>; baseData?: {data: Record<string, unknown>};
        requestUpdate?: () => void}) | undefined;
  if (editor === undefined || editor.dataEdits == null) {
    return 'No datapoint editor in this layout. Copy the text instead.';
  }
  for (const [k, v] of Object.entries(values)) {
    if (editor.baseData?.data?.[k] === v) delete editor.dataEdits[k];
    else editor.dataEdits[k] = v;
  }
  editor.requestUpdate?.();
  for (const tab of deepQuery(document, '.tab')) {
    if (tab.textContent?.trim() === 'Editor') (tab as HTMLElement).click();
  }
  return '';
}
