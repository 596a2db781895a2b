/**
 * Choosing the target on the response with the pointer and the keyboard: a click or a drag over response segments,
 * arrows (Shift: extend), Escape (whole response); and the target widened to whole segments when the segmentation
 * changes. The drag and the cursor are the element's state (../salience_module.ts); the span is the controller's.
 */
import type {SalienceController} from './controller.js';
import {numTargets} from './payload.js';
import type {ShownText} from './shown_text.js';
import {dragSpan, firstIndexIn, isWhole, snapSpan, spanForKey, targetSegments, type TargetSegment, wholeResponse} from './target.js';

/** What the target input reads and sets of the element. */
export interface TargetInputHost {
  readonly ctl: SalienceController;
  readonly text: ShownText;
  /** The response segment with the keyboard focus, and the drag's first and current segments (indices in the list). */
  cursor: number | null;
  dragAnchor: number | null;
  dragTo: number | null;
  readonly renderRoot: ParentNode;
  readonly updateComplete: Promise<unknown>;
}

/** The response segment index (`data-ti`) under an event, or null. */
export function targetIndexOf(e: Event): number | null {
  const el = (e.target as HTMLElement).closest?.('[data-ti]') as HTMLElement | null;
  return el === null ? null : Number(el.dataset['ti']);
}

/** The element with the keyboard focus, looked for through open shadow roots (LIT's modules are in them). */
export function focusedElement(doc: Document): Element | null {
  let el: Element | null = doc.activeElement;
  while (el?.shadowRoot?.activeElement != null) el = el.shadowRoot.activeElement;
  return el;
}

/**
 * Whether an Escape that reached the window resets the target to the whole response (issue 45: once Tab had moved the
 * focus out of the response, Escape did nothing): a plain Escape nobody handled (the response's own key handler
 * prevents the default of the one it handles), pressed outside a text field or list, whose Escape is their own.
 */
export function isPageEscape(e: Pick<KeyboardEvent, 'key' | 'defaultPrevented' | 'altKey' | 'ctrlKey' | 'metaKey' | 'shiftKey'>,
                             focused: {tagName: string; isContentEditable?: boolean} | null): boolean {
  if (e.key !== 'Escape' || e.defaultPrevented || e.altKey || e.ctrlKey || e.metaKey || e.shiftKey) return false;
  return focused === null || !(focused.isContentEditable || ['INPUT', 'TEXTAREA', 'SELECT'].includes(focused.tagName));
}

export class TargetInput {
  constructor(private readonly host: TargetInputHost) {}

  /** Widens the target to the segments it touches at the current granularity. */
  snapToSegments() {
    const {ctl, text} = this.host;
    const p = ctl.payload;
    if (p === null || isWhole(ctl.span, numTargets(p))) return;
    let seg;
    try {
      seg = text.segmentation();
    } catch {
      return;  // bad regex: shown by the text pane
    }
    ctl.setSpan(snapSpan(targetSegments(seg, p.n_prompt_tokens), ctl.span), null);
  }

  down(e: MouseEvent) {
    const ti = targetIndexOf(e);
    if (ti === null || e.button !== 0) return;
    e.preventDefault();
    this.host.dragAnchor = ti;
    this.host.dragTo = ti;
    this.host.cursor = ti;
    (e.target as HTMLElement).focus({preventScroll: true});
  }

  over(e: MouseEvent) {
    if (this.host.dragAnchor === null) return;
    const ti = targetIndexOf(e);
    if (ti !== null && ti !== this.host.dragTo) this.host.dragTo = ti;
  }

  /** The drag ends (the mouse is released anywhere in the window): its span becomes the target. */
  finishDrag() {
    const h = this.host;
    const p = h.ctl.payload;
    if (h.dragAnchor === null || h.dragTo === null || p === null) return;
    const list = targetSegments(h.text.shown(p).seg, p.n_prompt_tokens);
    const a = list[h.dragAnchor];
    const b = list[h.dragTo];
    h.dragAnchor = null;
    h.dragTo = null;
    if (a !== undefined && b !== undefined) h.ctl.setSpan(dragSpan(a, b));
  }

  /** A window-level key (see isPageEscape): Escape gives back the whole response as target. */
  pageKey(e: KeyboardEvent, doc: Document) {
    const p = this.host.ctl.payload;
    if (p === null || isWhole(this.host.ctl.span, numTargets(p)) || !isPageEscape(e, focusedElement(doc))) return;
    this.host.cursor = null;
    this.host.ctl.setSpan(wholeResponse(numTargets(p)));
  }

  key(e: KeyboardEvent, list: TargetSegment[]) {
    const h = this.host;
    const p = h.ctl.payload;
    if (p === null) return;
    const first = firstIndexIn(list, h.ctl.span);
    const extendFrom = e.shiftKey && first >= 0 ? first : null;
    const r = spanForKey(list, h.cursor, e.key, numTargets(p), extendFrom);
    if (r === null) return;
    e.preventDefault();
    h.cursor = r.cursor;
    h.ctl.setSpan(r.span);
    if (r.cursor !== null) {
      void h.updateComplete.then(() => {
        h.renderRoot.querySelector<HTMLElement>(`.tgt[data-ti="${r.cursor}"]`)?.focus();
      });
    }
  }
}
