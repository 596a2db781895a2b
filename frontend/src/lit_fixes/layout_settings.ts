import {patchEachUpdate} from './patch.js';

/**
 * LIT 1.3.1's `lit-modules` reads the layout's `layoutSettings` (mainHeight, leftWidth) in a
 * reaction that runs before the layout arrives from /get_info and is not re-run when it does,
 * so every layout opens at 50 % / 50 % whatever it declares. This patch applies a declared
 * setting after an update whenever the declared value changes (first load, layout switch);
 * a height or width the user drags is kept until then.
 */
interface LitModulesLike {
  upperHeight: string;
  leftColumnWidth: string;
  modulesService?: {getSetting?(name: string): unknown};
  updated?(...args: unknown[]): void;
}

const SETTINGS_PATCHED = Symbol.for('sequence-salience.layout-settings-patched');
const APPLIED = Symbol.for('sequence-salience.layout-settings-applied');

/** Applies the declared mainHeight / leftWidth when they changed since last applied; true if it set one. */
export function applyLayoutSettings(el: LitModulesLike): boolean {
  const get = (name: string) => el.modulesService?.getSetting?.(name);
  const main = get('mainHeight');
  const left = get('leftWidth');
  const key = `${String(main)}/${String(left)}`;
  const host = el as unknown as Record<symbol, string | undefined>;
  if (host[APPLIED] === key) return false;
  host[APPLIED] = key;
  let changed = false;
  if (typeof main === 'number' && main >= 0 && main <= 100) {
    el.upperHeight = `${main}%`;
    changed = true;
  }
  if (typeof left === 'number' && left > 0 && left < 100) {
    el.leftColumnWidth = `${left}%`;
    changed = true;
  }
  return changed;
}

/** Patches LIT's `lit-modules` class so that the declared layout settings apply (see above). */
export function patchLayoutSettings(cls: unknown): boolean {
  return patchEachUpdate(cls, SETTINGS_PATCHED, (el: LitModulesLike) => {
    applyLayoutSettings(el);
  });
}
