import {describe, expect, it} from 'vitest';
import type {TemplateResult} from 'lit';

import {comparisonRows, describeRun, layerDeltas, runFraction, stepViews} from '../src/inside/run.js';
import {
  parseRunStatus, type PartialIntervention, type RunJob, type RunStep, type TracePayload,
} from '../src/inside/payload.js';
import {renderRunSteps} from '../src/inside/run_view.js';

function trace(prob: number, rank: number): TracePayload {
  const p = {ids: [5], tokens: [' Paris'], probs: [prob], target_rank: rank, target_prob: prob};
  return {family: 'llama', ids: [1, 2], position: 1, target_id: 5, target_token: ' Paris', t: 0, n_targets: 3,
          layers: [{layer: 0, before: p, after: p, max_coef: 1, ffn_norm: 1, sub_updates: []}], output: p, seconds: 0.1};
}

const steps = (...states: RunStep['state'][]): RunStep[] => ['trace', 'generate', 'salience'].map((name, i) => ({
  name, state: states[i], seconds: states[i] === 'done' ? 0.84 : null, before: i === 0 ? 'cached' : null,
}));

function partial(gen: boolean, stopped: string | null = null): PartialIntervention {
  return {
    interventions: [{layer: 1, index: 7, mode: 'off'}],
    steps: steps('done', gen ? 'running' : 'pending', 'pending'),
    before: {trace: trace(0.7, 0), ...(gen ? {generation: {text: 'Paris.', stopped_by: 'eos'}} : {})},
    after: {trace: trace(0.1, 2), ...(gen ? {generation: {text: 'Lon', stopped_by: stopped}} : {})},
  };
}

/** The text a template renders (its static parts and values, nested templates included). */
function text(t: unknown): string {
  if (Array.isArray(t)) return t.map(text).join('');
  const r = t as TemplateResult;
  if (r && Array.isArray(r.strings)) {
    return r.strings.map((s, i) => s.replace(/<[^>]*>/g, '') + (i < r.values.length ? text(r.values[i]) : '')).join('');
  }
  return typeof t === 'string' || typeof t === 'number' ? String(t) : '';
}

/** The step names with their state, read from the rendered classes and data-step attributes. */
function renderedSteps(t: TemplateResult): string[] {
  const items = (t.values[0] as TemplateResult[]);
  return items.map((li) => `${li.values[1]}:${li.values[0]}`);
}

describe('the run in steps', () => {
  it('shows the probabilities first, then the streamed text, then salience', () => {
    expect(comparisonRows(partial(false)).map((r) => r.label)).toEqual(['p(␣Paris)', 'rank of ␣Paris', 'top prediction']);
    const streaming = comparisonRows(partial(true));
    expect(streaming.map((r) => r.label)).toEqual(['p(␣Paris)', 'rank of ␣Paris', 'top prediction', 'generated']);
    expect(streaming[3]).toMatchObject({before: 'Paris.', after: 'Lon…'});  // more is coming
    expect(comparisonRows(partial(true, 'eos'))[3].after).toBe('Lon');
    expect(layerDeltas(partial(false))).toEqual([{layer: 0, before: 0.7, after: 0.1}]);
    expect(layerDeltas({...partial(false), after: {}})).toEqual([]);
  });

  it('describes the steps and the share done', () => {
    const job: RunJob = {action: 'run', stage: 'generate', done: 16, total: 64, elapsed_s: 2, cancelled: false,
                         partial: partial(true)};
    expect(stepViews(job.partial!.steps, job)).toEqual([
      {name: 'trace', label: 'Probabilities and ranks', state: 'done', detail: '0.8 s · before: cached'},
      {name: 'generate', label: 'Regenerating the answer', state: 'running', detail: '16 / 64 tokens'},
      {name: 'salience', label: 'Salience of the new answer', state: 'pending', detail: ''},
    ]);
    expect(runFraction(job)).toBeCloseTo((1 + 16 / 64) / 3);
    expect(describeRun(job)).toBe('Regenerating the answer: 16 / 64 tokens (41%)');
    expect(describeRun(null)).toBe('Starting…');
    expect(runFraction({...job, stage: 'salience', done: 2, total: 2})).toBe(1);
    // Before the first status with partial results: the job's stage alone.
    expect(stepViews(undefined, {...job, stage: 'trace', done: 0, total: 1}).map((v) => v.state))
        .toEqual(['running', 'pending', 'pending']);
  });

  it('reads the status answer and rejects a malformed one', () => {
    expect(parseRunStatus({action: 'status', job: null})).toBeNull();
    const job = parseRunStatus({action: 'status', job: {action: 'run', stage: 'trace', done: 0, total: 1, partial: partial(false)}});
    expect(job?.partial?.after.trace?.output.target_prob).toBe(0.1);
    expect(() => parseRunStatus({job: {action: 'run', stage: 'trace', partial: {steps: 3}}})).toThrow(/partial/);
  });

  it('renders each step with its state, label and detail', () => {
    const job: RunJob = {action: 'run', stage: 'generate', done: 3, total: 64, elapsed_s: 1, cancelled: false};
    const t = renderRunSteps(stepViews(steps('done', 'running', 'pending'), job));
    expect(renderedSteps(t)).toEqual(['trace:done', 'generate:running', 'salience:pending']);
    const shown = text(t).replace(/\s+/g, ' ');
    expect(shown).toContain('✓Probabilities and ranks0.8 s · before: cached');
    expect(shown).toContain('…Regenerating the answer3 / 64 tokens');
    expect(shown).toContain('○Salience of the new answer');
  });
});
