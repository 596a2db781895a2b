/** Styles of the Sequence Salience module (../salience_module.ts, view.ts, text_view.ts, text_pane.ts). */
import {css} from 'lit';

export const SALIENCE_STYLES = css`
  :host { display: block; height: 100%; position: relative; }
  /* The map keeps a readable height (issue 45 §5: stacked under two models or a comparison it shrank to two lines or
     its header): the comparisons above it give up room first (they scroll on their own, compare/styles.ts), then
     the module scrolls. */
  .module { display: flex; flex-direction: column; height: 100%; overflow-y: auto; font-family: Roboto, sans-serif;
            font-size: 13px; }
  .controls { display: flex; flex-wrap: wrap; gap: 10px; align-items: center; padding: 6px 8px;
              border-bottom: 1px solid #dadce0; }
  .controls label { display: flex; gap: 4px; align-items: center; color: #3c4043; }
  .controls input[type=number] { width: 56px; }
  /* Sized by its longest option and group label, it pushed the controls onto a second line at 1280×720. */
  .controls select.method { max-width: 11em; }
  .controls input.regex { width: 200px; font-family: 'Roboto Mono', monospace; }
  /* Narrower than the browser's 129 px, so that the model's name fits on the controls line at 1280×720. */
  .controls input.intensity { width: 80px; }
  .status { display: flex; gap: 8px; align-items: center; padding: 6px 8px; }
  .status.inline { padding: 4px 0; }
  .status.error { background: #fce8e6; color: #a50e0e; border-radius: 4px; }
  .status .icon { flex: none; }
  /* Static on purpose: an endless animation repaints every frame and takes CPU from the model the
     page is waiting for (docs/benchmarks.md, "First highlight in the browser"). */
  .status .bar { width: 120px; height: 4px; background: #e8eaed; overflow: hidden; border-radius: 2px; flex: none; }
  .status .bar > div { width: 100%; height: 100%;
                       background: repeating-linear-gradient(90deg, #1a73e8 0 8px, #e8eaed 8px 12px); }
  .segment-status { display: flex; flex-wrap: wrap; gap: 8px; align-items: center; padding: 4px 8px;
                    background: #e8f0fe; color: #174ea6; border-radius: 4px; margin: 2px 8px; }
  .segment-status.pending { background: #f1f3f4; color: #3c4043; }
  .segment-status .bar { width: 60px; height: 4px; background: #e8eaed; border-radius: 2px; flex: none; }
  .segment-status .bar > div { width: 100%; height: 100%;
                               background: repeating-linear-gradient(90deg, #1a73e8 0 8px, #e8eaed 8px 12px); }
  .segment-status .fit.warn, .segment-status .error-text { color: #a50e0e; }
  .count-error { color: #a50e0e; font-size: 12px; }
  .segment-warning { flex-basis: 100%; color: #a50e0e; }
  .confirm { margin: 6px 0; padding: 4px 6px; border-left: 3px solid #1e8e3e; background: #e6f4ea; color: #0d652d; }
  .confirm.changed { border-left-color: #f9ab00; background: #fef7e0; color: #5f3b00; }
  .confirm-headline { font-weight: 500; }
  .confirm-before, .confirm-after, .confirm-moved { font-size: 12px; }
  .empty { padding: 16px; color: #5f6368; }
  /* At least the prompt's six lines (.prompt) and its padding, the response's box (.response) and both labels. */
  .body { flex: 1; display: flex; gap: 12px; min-height: calc(6 * 1.7 * 12.5px + 170px); padding: 4px 8px; }
  .texts { flex: 1; min-width: 0; display: flex; flex-direction: column; min-height: 0; }
  .side { width: 250px; flex: none; overflow-y: auto; }
  .checked-pane { flex: 1; min-width: 0; display: flex; flex-direction: column; min-height: 0; }
  .completeness-rejected { border-left: 3px solid #e37400; padding-left: 6px; }
  .completeness-rejected .show-anyway { margin-left: 6px; }
  .section-label { font-weight: 500; color: #5f6368; margin: 6px 0 2px; }
  .hint { font-weight: normal; }
  .text { white-space: pre-wrap; overflow-wrap: anywhere; font-family: 'Roboto Mono', monospace; font-size: 12.5px;
          line-height: 1.7; border: 1px solid #e8eaed; border-radius: 4px; padding: 6px; }
  /* The prompt and the response each take what they need; when both do not fit, each gives up room in proportion to
     its length (issue 45: the response was capped at 30 % below a half-empty prompt box, and the chain-of-thought
     row's answer sat below its fold). */
  /* At least six lines, or all of a shorter prompt (where calc-size() is known; else six lines, some empty). */
  .prompt { flex: 0 1 auto; overflow-y: auto; contain: content; min-height: calc(6 * 1.7em);
            min-height: calc-size(max-content, min(size, calc(6 * 1.7em))); }
  .response { flex: 0 1 auto; min-height: 60px; overflow-y: auto; user-select: none; }
  .pending { opacity: 0.6; }
  .text.prompt.previous { opacity: 0.75; }
  details.head > summary { cursor: pointer; white-space: normal; color: #5f6368; font-family: Roboto, sans-serif;
                           font-size: 12px; line-height: 1.5; margin-bottom: 2px; }
  details.head[open] > summary { margin-bottom: 0; }
  .head-ranked { color: #1a73e8; }
  .seg, .tgt { border-radius: 2px; transition: none; }
  /* Coarse-to-fine: a segment whose own value was not measured (inside a unit that did not matter): hatched. */
  .seg.unmeasured { background-image: repeating-linear-gradient(135deg, rgba(95, 99, 104, 0.35) 0 1px, transparent 1px 5px) !important; }
  .refined { color: #5f6368; }
  .markup { color: #9aa0a6; }
  .tgt { cursor: pointer; outline: 1px dashed #bdc1c6; outline-offset: -1px; }
  .tgt:hover { outline: 1px solid #1a73e8; }
  .tgt:focus-visible { outline: 2px solid #1a73e8; }
  .tgt.sel { background: #fde293; color: #202124; outline: 2px solid #f29900; }
  .tgt.preview { outline: 2px solid #1a73e8; }
  .flash { outline: 2px solid #f29900; }
  .tooltip { position: absolute; z-index: 10; max-width: 250px; padding: 4px 8px; background: #3c4043; color: #fff;
             border-radius: 4px; font-size: 12px; pointer-events: none; white-space: pre-wrap; }
  .legend-bar { height: 10px; border: 1px solid #dadce0; border-radius: 2px; }
  .legend-labels { display: flex; justify-content: space-between; font-size: 11px; color: #5f6368; }
  .legend-title { color: #3c4043; margin-bottom: 2px; }
  .legend-meaning { font-size: 11px; color: #5f6368; }
  .facts { margin: 6px 0; color: #3c4043; }
  .legend.pending { color: #5f6368; font-style: italic; padding: 4px 0; }
  .completeness.warn { background: #fef7e0; color: #7a4f01; border-left: 3px solid #f9ab00; padding: 4px 6px;
                       margin: 4px 0; border-radius: 2px; }
  ol.top { list-style: none; padding: 0; margin: 0; }
  .top-item { display: flex; width: 100%; gap: 6px; align-items: center; border: none; background: none;
              padding: 2px 0; cursor: pointer; text-align: left; font: inherit; }
  .top-item:hover { background: #f1f3f4; }
  .swatch { width: 12px; height: 12px; border-radius: 2px; border: 1px solid #dadce0; flex: none; }
  .top-text { flex: 1; overflow: hidden; white-space: nowrap; text-overflow: ellipsis; font-family: 'Roboto Mono', monospace; }
  .where { color: #9aa0a6; font-size: 11px; }
  .top-value { color: #5f6368; font-variant-numeric: tabular-nums; }
  button.reset { font: inherit; font-size: 12px; }
`;
