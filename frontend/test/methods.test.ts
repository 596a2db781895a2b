/**
 * The method registry the server publishes (src/shared/methods.ts): read from a model's output
 * spec, checked field by field with errors that name the entry and the field.
 */
import {describe, expect, it} from 'vitest';

import registry from './fixtures/method_registry.json';
import {METHOD_REGISTRY_FIELD, parseRegistry, registryOf, withCountLimits} from '../src/shared/methods.js';

const copy = () => structuredClone(registry) as Array<Record<string, unknown>>;

describe('the method registry', () => {
  it('is read from the default of the output field, in display order', () => {
    const reg = registryOf({spec: {output: {[METHOD_REGISTRY_FIELD]: {__name__: 'LitType', default: registry}}}})!;
    expect(reg.methods.map((m) => m.name)).toEqual(['grad_norm', 'grad_x_input', 'integrated_gradients', 'smooth_grad',
                                                    'leave_one_out', 'ablation_surrogate', 'coarse_to_fine',
                                                    'attention_attribution', 'attention_verified', 'word_verified']);
    expect(reg.get('grad_norm')?.signed).toBe(false);
    expect(reg.extra('integrated_gradients')).toMatchObject({count_field: 'ig_steps', count_unit: 'steps', tag: 'ig',
                                                            matrix_detail: 'ig_matrix', default_count: 16});
    expect(reg.extra('grad_x_input')).toBeUndefined();
    expect(reg.label('unknown_method')).toBe('unknown_method');
  });

  it("names each method in the method select by its record's menu name, else its label", () => {
    const reg = parseRegistry(registry);
    // word_verified's label, 53 characters, was cut to "Estimate, then leave" in the select at 1280x720.
    expect(reg.menu('word_verified')).toBe('Words: best quarter');
    expect(reg.label('word_verified')).toBe('Estimate, then leave one word out on the best quarter');
    expect(reg.menu('grad_norm')).toBe(reg.label('grad_norm'));
    const older = copy();
    for (const m of older) delete m['menu'];  // a server from before `menu`: the label
    expect(parseRegistry(older).menu('word_verified')).toBe('Estimate, then leave one word out on the best quarter');
    expect(reg.menu('unknown_method')).toBe('unknown_method');
  });

  it('tells the segment methods apart: not extras, their detail, and the default per granularity', () => {
    const reg = parseRegistry(registry);
    expect(reg.segments.map((m) => m.name)).toEqual(['leave_one_out', 'ablation_surrogate', 'coarse_to_fine',
                                                     'attention_attribution', 'attention_verified', 'word_verified']);
    expect(reg.tokens.map((m) => m.name)).toEqual(['grad_norm', 'grad_x_input', 'integrated_gradients', 'smooth_grad']);
    // The surrogate has a count (its random ablations) but is not a token method computed on request.
    expect(reg.extras.map((m) => m.name)).toEqual(['integrated_gradients', 'smooth_grad']);
    expect(reg.segment('ablation_surrogate')).toMatchObject({count_field: 'surrogate_masks', detail: 'segments'});
    expect(reg.isSegment('grad_norm')).toBe(false);
    expect(reg.defaultSegment('sentence')?.name).toBe('leave_one_out');
    expect(reg.defaultSegment('word')).toBeUndefined();
    // Coarse-to-fine refines inside coarser units: it is offered only where there are some (the server's list).
    expect(reg.segmentsAt('word').map((m) => m.name)).toContain('coarse_to_fine');
    expect(reg.segmentsAt('paragraph').map((m) => m.name)).not.toContain('coarse_to_fine');
    expect(reg.segmentsAt('regex').map((m) => m.name)).toEqual(['leave_one_out', 'ablation_surrogate',
                                                                'attention_attribution', 'attention_verified']);
    const broken = copy();
    delete broken[4]['detail'];
    expect(() => parseRegistry(broken)).toThrow(/entry 4 \("leave_one_out"\) is a segment method without a string "detail"/);
  });

  it("lowers each count's maximum (and a default above it) to the server's published limit", () => {
    const reg = parseRegistry(registry);
    // A server started with --max_ig_steps 8 (requestLimits.max_counts): IG 1..8, default 16 -> 8; SmoothGrad as published.
    const low = withCountLimits(reg, {ig_steps: 8, smooth_grad_samples: 256});
    expect(low.extra('integrated_gradients')).toMatchObject({max_count: 8, default_count: 8});
    expect(low.extra('smooth_grad')).toMatchObject({max_count: reg.extra('smooth_grad')!.max_count,
                                                    default_count: reg.extra('smooth_grad')!.default_count});
    expect(withCountLimits(reg, {ig_steps: 100}).extra('integrated_gradients')).toMatchObject({max_count: 100, default_count: 16});
    expect(withCountLimits(reg, undefined)).toBe(reg);
    const viaSpec = registryOf({spec: {output: {[METHOD_REGISTRY_FIELD]: {default: registry}}}}, {ig_steps: 32})!;
    expect(viaSpec.extra('integrated_gradients')?.max_count).toBe(32);
    expect(viaSpec.extras.map((m) => m.name)).toEqual(['integrated_gradients', 'smooth_grad']);
  });

  it('is null for a model that publishes none', () => {
    expect(registryOf({spec: {output: {salience: {}}}})).toBeNull();
    expect(registryOf(undefined)).toBeNull();
  });

  it('names the entry and the field that is wrong', () => {
    expect(() => parseRegistry([])).toThrow(/Malformed method registry: the list is missing or empty/);
    const noLabel = copy();
    delete noLabel[1]['label'];
    expect(() => parseRegistry(noLabel)).toThrow(/entry 1 \("grad_x_input"\) has no string "label"/);
    const badUnit = copy();
    badUnit[3]['count_unit'] = 'draws';
    expect(() => parseRegistry(badUnit)).toThrow(/entry 3 \("smooth_grad"\) has a count_unit other than steps\/samples/);
    const noTag = copy();
    noTag[2]['tag'] = null;
    expect(() => parseRegistry(noTag)).toThrow(/entry 2 \("integrated_gradients"\) has a count_field but no "tag"/);
    const twice = copy();
    twice[1]['name'] = 'grad_norm';
    expect(() => parseRegistry(twice)).toThrow(/entry 1 \("grad_norm"\) repeats a name/);
  });
});
