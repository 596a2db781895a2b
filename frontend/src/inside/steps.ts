/**
 * The step list of an intervention run (probabilities → regenerated text → salience),
 * rendered by the Inside-the-model module; separate so that it can be tested without a DOM.
 */
import {html, nothing, type TemplateResult} from 'lit';

import type {StepView} from './logic.js';

const MARKS: Record<StepView['state'], string> = {done: '✓', running: '…', pending: '○'};

export function renderRunSteps(views: readonly StepView[]): TemplateResult {
  return html`<ol class="run-steps">${views.map((v) => html`<li class="run-step ${v.state}" data-step=${v.name}>
      <span class="mark" aria-hidden="true">${MARKS[v.state]}</span><span class="step-label">${v.label}</span>${
      v.detail ? html`<span class="step-detail">${v.detail}</span>` : nothing}</li>`)}</ol>`;
}
