/**
 * An intervention run, drawn: its step list (probabilities → regenerated text → salience),
 * its progress while it runs, and the before/after comparison; functions of the run's
 * status and result, so that they can be tested without a DOM.
 */
import {html, nothing, type TemplateResult} from 'lit';

import {describeIntervention} from './logic.js';
import {comparisonRows, describeRun, runFraction, type StepView, stepViews} from './run.js';
import {type InterventionPayload, type PartialIntervention, type RunJob} from './payload.js';

const MARKS: Record<StepView['state'], string> = {done: '✓', running: '…', pending: '○'};

export function renderRunSteps(views: readonly StepView[]): TemplateResult {
  return html`<ol class="run-steps">${views.map((v) => html`<li class="run-step ${v.state}" data-step=${v.name}>
      <span class="mark" aria-hidden="true">${MARKS[v.state]}</span><span class="step-label">${v.label}</span>${
      v.detail ? html`<span class="step-detail">${v.detail}</span>` : nothing}</li>`)}</ol>`;
}

/** A running run: a bar, the stage and the elapsed time, and its steps so far. */
export function runProgressView(job: RunJob | null, partial: PartialIntervention | null, elapsed: number) {
  const frac = runFraction(job);
  return html`<div class="run-progress" role="status">
    <div class="status loading"><div class="pbar-run" role="progressbar" aria-valuemin="0" aria-valuemax="100"
        aria-valuenow=${Math.floor(frac * 100)}><div style="width:${(frac * 100).toFixed(1)}%"></div></div>
      <span class="progress-text">${describeRun(job)}${elapsed > 0 ? ` (${elapsed} s)` : ''}</span></div>
    ${renderRunSteps(stepViews(job?.partial?.steps ?? partial?.steps, job))}
  </div>`;
}

/**
 * Before vs. with the interventions. `done`: r is the finished result (else what a running or
 * cancelled run brought); `stale`: the list changed since; `running`: a run is under way.
 */
export function comparisonView(r: InterventionPayload | PartialIntervention, stale: boolean, done: boolean,
                               running: boolean) {
  const rows = comparisonRows(r);
  return html`<div class="compare ${stale ? 'stale' : ''} ${done ? 'done' : 'partial'}">
    <div class="sub-title">Before vs. with ${r.interventions.map((iv) => describeIntervention(iv)).join(', ')}
      ${stale ? html`<span class="hint">(the list changed: run again)</span>` : nothing}
      ${!done && !running ? html`<span class="hint">(stopped before the end: run again for the rest)</span>` : nothing}</div>
    ${rows.length ? html`<table>
      <thead><tr><th></th><th>Before</th><th>After</th></tr></thead>
      <tbody>${rows.map((row) => html`<tr class="${row.changed ? 'changed' : ''}" data-row=${row.label.split(/[ (]/)[0]}>
        <th>${row.label}</th><td class="before">${row.before}</td><td class="after">${row.changed ? row.after
          : html`<span class="same" title=${row.after}>unchanged</span>`}</td></tr>`)}</tbody>
    </table>` : nothing}
    ${done && r.steps ? renderRunSteps(stepViews(r.steps)) : nothing}
  </div>`;
}
