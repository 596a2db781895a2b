/**
 * A work-around for a LIT 1.3.1 client bug that our layout exposes.
 *
 * LIT's Generated Text module (`generated-text-module`) sets its observable
 * `inputData` (which re-renders it at once) and only then fills `generatedText`
 * in place; `generatedText` is a MobX `observable.ref`, so the in-place writes
 * are not seen and the module stays empty until something else re-renders it.
 * Re-assigning the filled object after `updateSelection` finishes makes MobX
 * re-render it. The patch is applied once and only if the method exists.
 */

import {patchOnce} from './patch.js';

interface GeneratedTextModuleLike {
  generatedText: Record<string, unknown>;
  updateSelection(...args: unknown[]): Promise<unknown>;
}

const PATCHED = Symbol.for('sequence-salience.generated-text-patched');

/** Patches the class's prototype; returns false when there is nothing to patch. */
export function patchGeneratedTextModule(cls: unknown): boolean {
  return patchOnce(cls, PATCHED, (proto) => {
    if (typeof proto['updateSelection'] !== 'function') return false;
    const original = proto['updateSelection'] as GeneratedTextModuleLike['updateSelection'];
    proto['updateSelection'] = async function (this: GeneratedTextModuleLike, ...args: unknown[]) {
      const result = await original.apply(this, args);
      this.generatedText = {...this.generatedText};
      return result;
    };
  });
}
