/** Styles of the "Test this explanation" module (module.ts). */
import {css, unsafeCSS} from 'lit';

import {RANDOM_COLOR} from './logic.js';

export const EXPLAIN_STYLES = css`
  :host { display: block; height: 100%; }
  .module { display: flex; flex-direction: column; height: 100%; font-family: Roboto, sans-serif; font-size: 13px; }
  /* One line per item; what does not fit (the target, the forced-target label) goes to a second row. */
  .tabs { display: flex; flex-wrap: wrap; gap: 2px 4px; align-items: center; border-bottom: 1px solid #dadce0;
          padding: 4px 8px 0; }
  .tab-btn { border: none; background: none; padding: 4px 10px; border-bottom: 2px solid transparent; cursor: pointer;
             font: inherit; color: #3c4043; white-space: nowrap; }
  .tab-btn.on { border-bottom-color: #1a73e8; color: #1a73e8; font-weight: 500; }
  .target-line { margin-left: auto; display: flex; gap: 6px; align-items: center; }  /* the target and its label together */
  .for { color: #5f6368; font-size: 12px; white-space: nowrap; }
  .tabs .forced-target { white-space: nowrap; }
  .controls { display: flex; flex-wrap: wrap; gap: 10px; align-items: center; padding: 6px 8px; }
  .controls label { display: flex; gap: 4px; align-items: center; color: #3c4043; }
  .controls input.steps { width: 48px; }
  .controls input.foil { width: 260px; }
  .contrast-legend { width: 220px; margin: 4px 0; }
  .contrast-legend .legend-bar { height: 10px; border: 1px solid #dadce0; border-radius: 2px; }
  .contrast-legend .legend-labels { display: flex; justify-content: space-between; font-size: 11px; color: #5f6368; }
  .contrast-map .answer { text-decoration: underline dotted #5f6368; }
  table.contrast-top { border-collapse: collapse; font-size: 12px; margin-top: 6px; }
  table.contrast-top td, table.contrast-top th { padding: 1px 8px; text-align: left; }
  table.contrast-top td.num { text-align: right; font-variant-numeric: tabular-nums; }
  .controls input.ig-tolerance, .controls input.ig-cap { width: 56px; }
  .ig-summary, .ig-advice { margin: 4px 0; } .ig-summary.cap { color: #a50e0e; } .ig-summary.tolerance { color: #137333; }
  table.ig-runs { border-collapse: collapse; font-size: 12px; }
  table.ig-runs th, table.ig-runs td { padding: 2px 8px; text-align: right; }
  table.ig-runs tr.chosen { font-weight: 500; background: #e8f0fe; }
  .swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 4px; }
  .swatch.dashed { border-top: 2px dashed ${unsafeCSS(RANDOM_COLOR)}; height: 0; border-radius: 0; vertical-align: middle; }
  .status { display: flex; gap: 8px; align-items: center; padding: 4px 8px; }
  .status.error { background: #fce8e6; color: #a50e0e; border-radius: 4px; margin: 0 8px; }
  .status.notice { color: #137333; }
  .bar { width: 160px; height: 4px; background: #e8eaed; overflow: hidden; border-radius: 2px; flex: none; }
  .bar > div { height: 100%; background: #1a73e8; }
  .bar.indeterminate > div { width: 40%; animation: slide 1.2s ease-in-out infinite; }
  @keyframes slide { from { transform: translateX(-100%); } to { transform: translateX(250%); } }
  .result { flex: 1; overflow: auto; padding: 4px 8px; min-height: 0; }
  .empty, .hint { padding: 8px; color: #5f6368; }
  .curves { display: flex; flex-wrap: wrap; gap: 16px; align-items: flex-start; }
  .preliminary-label { flex-basis: 100%; background: #fef7e0; color: #7a4f01; border-left: 3px solid #f9ab00;
    padding: 4px 6px; }
  .curves.preliminary .chart { opacity: 0.8; }
  .chart-box { display: flex; flex-wrap: wrap; gap: 8px; align-items: flex-start; }
  .bound { flex-basis: 100%; max-width: 640px; font-size: 12px; padding: 4px 6px; border-radius: 4px; }
  .bound.undecidable { background: #fef7e0; color: #7a4f01; } .bound.decidable { color: #5f6368; }
  td.undecidable { color: #7a4f01; }
  svg.chart .line.upper-bound { stroke-dasharray: 2 2; stroke-width: 1.5; }
  .swatch.dotted { background: none; border-top: 2px dotted; height: 0; border-radius: 0; vertical-align: middle; }
  svg.chart .title { font-size: 11px; fill: #3c4043; font-weight: 500; }
  svg.chart .tick, svg.chart .axis { font-size: 10px; fill: #5f6368; }
  svg.chart .grid { stroke: #e8eaed; }
  svg.chart .line { fill: none; stroke-width: 2; }
  svg.chart .line.random { stroke-dasharray: 4 3; stroke-width: 1.5; }
  svg.chart .line.length { stroke-dasharray: 1 3; stroke-width: 1.5; }
  svg.chart .line.method.abs { stroke-dasharray: 6 2; stroke-width: 1.5; }
  .swatch.hollow { background: none !important; border: 2px solid; width: 6px; height: 6px; }
  svg.chart .band { fill: ${unsafeCSS(RANDOM_COLOR)}; opacity: 0.15; }
  table.aopc { border-collapse: collapse; font-size: 12px; }
  table.aopc th, table.aopc td { padding: 2px 6px; text-align: right; }
  table.aopc th:first-child, table.aopc td:first-child { text-align: left; white-space: nowrap; }
  td.better { color: #137333; } td.worse { color: #a50e0e; }
  .facts { color: #5f6368; margin: 4px 0; flex-basis: 100%; }
  .section-label { font-weight: 500; color: #5f6368; margin: 6px 0 2px; }
  .text { white-space: pre-wrap; overflow-wrap: anywhere; font-family: 'Roboto Mono', monospace; font-size: 12.5px;
          line-height: 1.7; border: 1px solid #e8eaed; border-radius: 4px; padding: 6px; }
  s.removed { color: #a50e0e; background: #fce8e6; }
  ol.flip-list { padding-left: 20px; margin: 4px 0; }
  li.flip { display: flex; gap: 10px; align-items: center; padding: 2px 0; }
  li.flip .ctx { flex: 1; font-family: 'Roboto Mono', monospace; font-size: 12px; white-space: pre; overflow: hidden; text-overflow: ellipsis; }
  li.flip .ctx s { color: #a50e0e; } li.flip .ctx b { color: #137333; }
  .delta { font-variant-numeric: tabular-nums; color: #3c4043; width: 80px; }
  .greedy.changed { color: #a50e0e; } .greedy.same { color: #5f6368; }
  button { font: inherit; font-size: 12px; }
`;
