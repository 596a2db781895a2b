/** Styles of the compare view (view.ts), added to the salience module's, and COMPARE_SIDES_STYLES: those of
 * the rendering it shares with the Compare models section (sides.ts, ../compare_models/view.ts). */
import {css} from 'lit';

/** Responses with the diff marked, the aligned prompt, the legends, the log p table (sides.ts). */
export const COMPARE_SIDES_STYLES = css`
  .crow { display: flex; gap: 6px; align-items: baseline; margin: 2px 0; }
  .who { min-width: 60px; flex: none; color: #5f6368; font-size: 11px; }
  .cresp { flex: 1; padding: 3px 6px; }
  del.diff { background: #fce8e6; text-decoration: line-through; text-decoration-color: #b3261e; }
  ins.diff { background: #e6f4ea; text-decoration: underline; text-decoration-color: #188038; }
  .cprompt { max-height: 180px; overflow-y: auto; }
  .cprompt del { text-decoration: line-through; text-decoration-color: #b3261e; text-decoration-thickness: 2px; }
  .cprompt ins { text-decoration: underline; text-decoration-color: #188038; text-decoration-thickness: 2px; }
  .cseg { border-radius: 2px; }
  table.logp { border-collapse: collapse; font-size: 12px; }
  table.logp td, table.logp th { padding: 0 8px; text-align: right; font-variant-numeric: tabular-nums; }
  table.logp td:first-child { text-align: left; }
  table.logp td.tok { font-family: 'Roboto Mono', monospace; }
  .clegends { display: flex; gap: 16px; margin-top: 4px; }
  .clegend { width: 240px; }
  .clegend .legend-note { color: #5f6368; font-size: 11px; }
`;

export const COMPARE_STYLES = css`
  ${COMPARE_SIDES_STYLES}
  /* Above the map, which keeps its height (../styles.ts .body): a comparison gives up room down to its head and a
     few lines, and scrolls. */
  .compare { flex: 0 1 auto; max-height: 55%; min-height: min(45%, 10em); overflow-y: auto; padding: 4px 8px 8px;
             border-bottom: 2px solid #dadce0; }
  .compare.closed { flex: none; min-height: 0; padding: 2px 8px; }
  .compare:focus { outline: none; }
  /* The view buttons stay on screen while the view scrolls (the aligned prompt comes right under them). */
  .compare-head { display: flex; align-items: center; justify-content: space-between; gap: 8px;
                  position: sticky; top: 0; z-index: 1; background: #fff; }
  .modes { display: flex; gap: 4px; }
  .mode { font: inherit; font-size: 12px; border: 1px solid #dadce0; background: #fff; border-radius: 12px;
          padding: 1px 10px; cursor: pointer; }
  .mode[aria-pressed="true"] { background: #e8f0fe; border-color: #1a73e8; color: #1967d2; }
  .mode:focus-visible { outline: 2px solid #1a73e8; }
  .cross { margin: 4px 0; color: #3c4043; }
  .cross .cost { color: #5f6368; font-size: 11px; margin-left: 4px; }
  .cross .delta.neg { color: #a50e0e; }
  .cross .delta.pos { color: #137333; }
  .old-answer-row { margin: 4px 0; }
  button.old-answer { font: inherit; font-size: 12px; }
  .old-answer-status { color: #5f6368; }
`;
