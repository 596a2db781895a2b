/** Styles of the "Inside the model" module (module.ts). */
import {css} from 'lit';

export const INSIDE_STYLES = css`
  :host { display: block; height: 100%; }
  .module { display: flex; flex-direction: column; height: 100%; font-family: Roboto, sans-serif; font-size: 13px; }
  .scroll { flex: 1; overflow-y: auto; padding: 4px 8px; min-height: 0; }
  .header { padding: 6px 8px; border-bottom: 1px solid #dadce0; }
  .empty { padding: 16px; color: #5f6368; }
  .hint { color: #5f6368; font-weight: normal; }
  .facts { color: #3c4043; margin-left: 4px; }
  .status { display: flex; gap: 8px; align-items: center; padding: 4px 0; }
  .status.inline { display: inline-flex; padding: 0 6px; }
  .status.error { background: #fce8e6; color: #a50e0e; border-radius: 4px; padding: 4px 8px; }
  .status.notice { color: #137333; }
  .run-progress { margin: 2px 0 6px; }
  .pbar-run { width: 140px; height: 6px; background: #e8eaed; border-radius: 3px; overflow: hidden; flex: none; }
  .pbar-run > div { height: 100%; background: #1a73e8; transition: width 0.3s; }
  .run-steps { list-style: none; margin: 2px 0; padding: 0; display: flex; gap: 14px; flex-wrap: wrap; font-size: 12px; }
  .run-step { color: #5f6368; } .run-step.running { color: #1a73e8; font-weight: 500; } .run-step.done { color: #137333; }
  .run-step .mark { margin-right: 4px; } .step-detail { margin-left: 4px; color: #5f6368; font-weight: normal; }
  .status .bar { width: 100px; height: 4px; background: #e8eaed; overflow: hidden; border-radius: 2px; flex: none; display: inline-block; }
  .status .bar > * { display: block; width: 40%; height: 100%; background: #1a73e8; animation: slide 1.2s ease-in-out infinite; }
  @keyframes slide { from { transform: translateX(-100%); } to { transform: translateX(250%); } }
  .section-label { font-weight: 500; color: #5f6368; margin: 8px 0 4px; }
  .sub-title { font-weight: 500; color: #3c4043; margin: 4px 0; }
  .chart svg { display: block; border: 1px solid #e8eaed; border-radius: 4px; background: #fafafa; }
  .chart polyline { fill: none; stroke-width: 1.5; vector-effect: non-scaling-stroke; }
  .line-after { stroke: #1a73e8; }
  .line-before { stroke: #8ab4f8; stroke-dasharray: 3 2; }
  .line-iv { stroke: #f29900; }
  .plot { display: flex; gap: 4px; }
  .plot svg { flex: 1; min-width: 0; }
  .y-axis { display: flex; flex-direction: column; justify-content: space-between; font-size: 10px; color: #5f6368;
            text-align: right; width: 22px; flex: none; line-height: 1; }
  .chart line.grid { stroke: #e8eaed; stroke-width: 1; vector-effect: non-scaling-stroke; }
  .chart-legend { display: flex; gap: 14px; flex-wrap: wrap; font-size: 11px; color: #3c4043; margin-top: 2px; }
  .key { display: inline-block; width: 18px; height: 0; border-top: 2px solid #1a73e8; vertical-align: middle; margin-right: 4px; }
  .key-before { border-top: 2px dashed #8ab4f8; } .key-iv { border-top-color: #f29900; }
  .columns-help { font-size: 11.5px; margin: 0 0 4px; }
  .axis { padding-left: 26px; display: flex; justify-content: space-between; font-size: 11px; color: #5f6368; }
  table.layers { width: 100%; border-collapse: collapse; font-size: 12px; }
  table.layers th { text-align: left; color: #5f6368; font-weight: 500; border-bottom: 1px solid #dadce0; padding: 2px 4px; position: sticky; top: 0; background: #fff; }
  .layer-row td { padding: 1px 4px; border-bottom: 1px solid #f1f3f4; vertical-align: middle; }
  table.layers { table-layout: fixed; }
  table.layers th:nth-child(1) { width: 36px; } table.layers th:nth-child(2) { width: 128px; }
  table.layers th:nth-child(3) { width: 150px; } table.layers th:nth-child(4) { width: 20%; }
  .chips { display: flex; flex-wrap: nowrap; overflow: hidden; align-items: center; }
  .subs .chips { flex-wrap: wrap; overflow: visible; }  /* every chip shown: wraps instead of being cut */
  .chips > * { flex: none; }
  .layer-row { cursor: pointer; }
  .layer-row:hover { background: #f8f9fa; }
  .layer-row:focus-visible { outline: 2px solid #1a73e8; }
  .layer-row.is-top .num { color: #137333; font-weight: 500; }
  .num { width: 36px; font-variant-numeric: tabular-nums; }
  .rank { white-space: nowrap; font-variant-numeric: tabular-nums; }
  .prob { white-space: nowrap; min-width: 110px; }
  .pbar { display: inline-block; width: 32px; height: 8px; background: #e8eaed; border-radius: 2px; vertical-align: middle; }
  .pbar > div { height: 100%; background: #1a73e8; border-radius: 2px; }
  .pval, .ival { font-variant-numeric: tabular-nums; margin-left: 3px; font-size: 11.5px; }
  .ival.up { color: #137333; } .ival.down { color: #a50e0e; }
  .tok { font-family: 'Roboto Mono', monospace; background: #f1f3f4; border-radius: 2px; padding: 0 3px; margin-right: 3px; white-space: pre; }
  .sub-update { font: inherit; font-size: 11.5px; border: 1px solid #dadce0; border-radius: 10px; background: #fff;
                padding: 0 6px; margin: 1px 2px; cursor: pointer; white-space: nowrap; }
  .sub-update:hover { border-color: #1a73e8; }
  .sub-update.listed { background: #fde293; border-color: #f29900; }
  .sub-update .vid { color: #5f6368; margin-right: 3px; }
  .sub-update.pos .coef { color: #137333; } .sub-update.neg .coef { color: #a50e0e; }
  .vtoks { font-family: 'Roboto Mono', monospace; margin-left: 4px; white-space: pre; }
  .details td { background: #f8f9fa; padding: 4px 8px; }
  .details-grid { display: grid; grid-template-columns: 150px 150px minmax(0, 1fr); gap: 8px; }
  .plist li { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
  .slist { overflow: hidden; }
  .plist ol { margin: 0; padding-left: 18px; } .pv { color: #5f6368; font-variant-numeric: tabular-nums; }
  .sub-line { display: flex; align-items: center; gap: 4px; min-width: 0; }
  .sub-line .sub-update { flex: 0 1 auto; min-width: 0; overflow: hidden; text-overflow: ellipsis; }
  .sub-line .add-on { flex: none; }
  button.small { font: inherit; font-size: 11px; padding: 0 4px; }
  .panel { border-top: 1px solid #dadce0; margin-top: 8px; padding-top: 2px; }
  .iv-list { display: flex; flex-wrap: wrap; gap: 6px; align-items: center; min-height: 24px; }
  .iv-item { display: inline-flex; gap: 4px; align-items: center; border: 1px solid #dadce0; border-radius: 12px; padding: 1px 4px 1px 8px; }
  .iv-item.off { background: #fce8e6; } .iv-item.on { background: #e6f4ea; }
  .iv-item button { font: inherit; font-size: 11px; border: none; background: none; cursor: pointer; padding: 0 3px; }
  .iv-mode { font-weight: 500; text-decoration: underline dotted; }
  .iv-actions { display: flex; gap: 8px; align-items: center; margin: 6px 0; }
  .compare table { border-collapse: collapse; width: 100%; }
  .compare th, .compare td { text-align: left; padding: 2px 6px; border-bottom: 1px solid #f1f3f4; vertical-align: top; }
  .compare td { white-space: pre-wrap; font-family: 'Roboto Mono', monospace; font-size: 12px; }
  .compare tr.changed td.after { background: #fef7e0; }
  .compare.stale { opacity: 0.6; }
  .compare .same { color: #5f6368; font-family: Roboto, sans-serif; font-style: italic; }
  .search-row { display: flex; gap: 6px; }
  .search-input { flex: 1; max-width: 260px; }
  .search-status { margin: 4px 0; color: #3c4043; }
  ol.hits { list-style: none; padding: 0; margin: 0; }
  .search-hit { display: flex; gap: 6px; align-items: center; padding: 1px 0; }
  .hit-add { font: inherit; font-size: 12px; cursor: pointer; }
`;
