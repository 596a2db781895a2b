import {describe, expect, it} from 'vitest';
import registry from './fixtures/method_registry.json';
import {METHOD_REGISTRY_FIELD, registryOf} from '../src/shared/methods.js';
import {helpSections, methodHelp, methodLines} from '../src/shared/method_help.js';

const reg = registryOf({spec: {output: {[METHOD_REGISTRY_FIELD]: {default: registry}}}})!;

describe('the help that teaches (issue 45 §2)', () => {
  it('gives every published method two lines: its cost from the record, then when to trust it from the record', () => {
    const lines = methodHelp(reg);
    expect(lines.map((l) => l.name)).toEqual(registry.map((m) => m.name));
    for (const [l, m] of lines.map((l, i) => [l, registry[i]] as const)) {
      expect(l.label).toBe(m.label);
      expect(l.what).toContain(`Cost: ${m.cost_unit}`);
      expect(m.trust.length).toBeGreaterThan(20);
      expect(l.trust).toBe(`When to trust it: ${m.trust}`);
    }
  });

  it('says how each method measures and reads: per token or per segment, signed or magnitude, its default count', () => {
    const byName = (n: string) => methodLines(reg.get(n)!);
    expect(byName('grad_norm').what).toMatch(/^per token, .*unsigned \(magnitude only\)/);
    expect(byName('leave_one_out').what).toMatch(/^per segment .*signed \(red raises/);
    const ig = registry.find((m) => m.name === 'integrated_gradients')!;
    expect(byName('integrated_gradients').what).toContain(`, ${ig.default_count} ${ig.count_unit} by default.`);
    expect(byName('leave_one_out').what).not.toContain('by default');
  });

  it('an older server without the record field: the line says so rather than inventing a reason', () => {
    const {trust: _, ...old} = registry[0];
    expect(methodLines({...old, kind: 'token'} as never).trust).toMatch(/did not say/);
  });

  it('explains the colours, R², "not decidable", the switch (from the registry) and the keys', () => {
    const sections = helpSections(reg);
    expect(sections.map((s) => s.title)).toEqual(['Colours', 'R²', '"Not decidable"', 'The automatic switch',
                                                  'Show gradient', 'Keys']);
    const exact = registry.find((m) => (m.default_at ?? []).length > 0)!;
    const sw = sections.find((s) => s.title === 'The automatic switch')!.text;
    expect(sw).toContain(`At ${exact.default_at!.join(', ')} granularity`);
    expect(sw).toContain(exact.label);
    const keys = sections.find((s) => s.title === 'Keys')!.text;
    for (const k of ['Escape', 'Shift+arrows', 'Alt+H', 'Alt+G']) expect(keys).toContain(k);
  });
});
