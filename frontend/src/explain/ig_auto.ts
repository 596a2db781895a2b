/** "IG steps needed" in words: the outcome and what to do next. No DOM. */
import {percent} from './logic.js';
import type {IgAutoPayload} from './payload.js';

/** One line on the outcome: the step count chosen, the error reached and whether the cap was hit. */
export function igAutoSummary(p: IgAutoPayload): string {
  const reached = `completeness error ${p.error.toPrecision(3)} nats = ${percent(p.relative_error)} of ` +
                  `F(x) − F(baseline) = ${p.delta.toPrecision(3)}`;
  return p.stopped_by === 'tolerance'
      ? `${p.steps} steps are enough: ${reached}, within the ${percent(p.tolerance)} tolerance.`
      : `Cap hit at ${p.max_steps} steps without meeting the ${percent(p.tolerance)} tolerance; the best count ` +
        `tried is ${p.steps} steps: ${reached}.`;
}

/**
 * What to do next, honestly: the steps to use; at the cap, more steps only where the error fell
 * steadily (the server's estimate, within the most it allows: `maxSteps`, 0 when unknown), else
 * another method or the figure reached.
 */
export function igAutoAdvice(p: IgAutoPayload, maxSteps: number): string {
  if (p.stopped_by === 'tolerance') return `Use ${p.steps} IG steps in the salience module for this span.`;
  const figure = `IG with ${p.steps} steps (the best tried) is off by ${percent(p.relative_error)}`;
  const n = p.needed_steps;
  if (n != null && (maxSteps === 0 || n <= maxSteps)) {
    return `The error at least halved at each of the last two doublings; at that rate about ${n} steps reach ` +
           `${percent(p.tolerance)}: set Most steps to ${n} and run again` +
           `${maxSteps ? ` (this server allows up to ${maxSteps})` : ''}.`;
  }
  if (n != null) {
    return `At the last doubling's rate about ${n} steps would be needed, more than this server allows ` +
           `(${maxSteps}). For sizes on this span use Gradient × input; ${figure}.`;
  }
  const path = p.tried.map((r) => percent(r.relative_error)).join(' → ');
  return `The error is not falling steadily as the steps double (${path}), so no step count can be promised. ` +
         `For sizes on this span use Gradient × input; ${figure}.`;
}
