import {addStyleOnce, patchEachUpdate, type UpdatingElementLike} from './patch.js';

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
  return patchEachUpdate(cls, TOOLBAR_PATCHED, (el: UpdatingElementLike) => {
    addStyleOnce(el, 'oneLineToolbar', TOOLBAR_CSS);
  });
}
