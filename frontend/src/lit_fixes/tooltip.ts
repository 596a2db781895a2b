import {addStyleOnce, patchEachUpdate, type UpdatingElementLike} from './patch.js';

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
  return patchEachUpdate(cls, TOOLTIP_PATCHED, (el: UpdatingElementLike) => {
    addStyleOnce(el, 'fullTooltip', FULL_TOOLTIP_CSS);
    const host = el as unknown as Record<symbol, boolean> & UpdatingElementLike;
    if (host[TOOLTIP_LISTENING] || el.shadowRoot == null) return;
    host[TOOLTIP_LISTENING] = true;
    el.shadowRoot.addEventListener('mouseover', () => {
      const view = el.shadowRoot?.ownerDocument.defaultView;
      if (view != null) showFullTooltip(el.shadowRoot, view.innerWidth, view.innerHeight);
    });
  });
}
