import {describe, expect, it} from 'vitest';

import {patchGeneratedTextModule} from '../src/lit_fixes';

/** Mimics LIT's module: fills `generatedText` in place after awaiting predictions. */
class FakeGeneratedTextModule {
  generatedText: Record<string, unknown> = {};
  assignments = 0;
  constructor() {
    let value = this.generatedText;
    Object.defineProperty(this, 'generatedText', {
      get: () => value,
      set: (v) => { value = v; this.assignments += 1; },
    });
  }
  async updateSelection(response: string) {
    this.generatedText = {};
    await Promise.resolve();
    this.generatedText['response'] = [[response, null]];
  }
}

describe('patchGeneratedTextModule', () => {
  it('re-assigns the filled object once predictions are in', async () => {
    class Module extends FakeGeneratedTextModule {}
    expect(patchGeneratedTextModule(Module)).toBe(true);
    const m = new Module();
    await m.updateSelection('Paris.');
    expect(m.generatedText).toEqual({response: [['Paris.', null]]});
    expect(m.assignments).toBe(2);  // the reset, then the re-assignment that re-renders
  });

  it('patches once and ignores classes without updateSelection', () => {
    class Module extends FakeGeneratedTextModule {}
    expect(patchGeneratedTextModule(Module)).toBe(true);
    expect(patchGeneratedTextModule(Module)).toBe(false);
    expect(patchGeneratedTextModule(class {})).toBe(false);
    expect(patchGeneratedTextModule(undefined)).toBe(false);
  });
});
