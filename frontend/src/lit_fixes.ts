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

interface GeneratedTextModuleLike {
  generatedText: Record<string, unknown>;
  updateSelection(...args: unknown[]): Promise<unknown>;
}

const PATCHED = Symbol.for('sequence-salience.generated-text-patched');

/** Patches the class's prototype; returns false when there is nothing to patch. */
export function patchGeneratedTextModule(cls: unknown): boolean {
  const proto = (cls as {prototype?: Record<PropertyKey, unknown>} | null)?.prototype;
  if (proto == null || proto[PATCHED] || typeof proto['updateSelection'] !== 'function') return false;
  const original = proto['updateSelection'] as GeneratedTextModuleLike['updateSelection'];
  proto['updateSelection'] = async function (this: GeneratedTextModuleLike, ...args: unknown[]) {
    const result = await original.apply(this, args);
    this.generatedText = {...this.generatedText};
    return result;
  };
  proto[PATCHED] = true;
  return true;
}

/**
 * LIT's status bar (`lit-app-statusbar`) shows a pending request as a line whose light part
 * slides by animating `margin-left`/`margin-right` forever: a layout and a repaint every frame
 * for as long as any request is pending. On a 2-core machine with a software-rendered page
 * that took 0.2 of a core from the model computing the very answer the page waits for (our
 * own sliding bar took another 0.1; docs/benchmarks.md, "First highlight in the browser").
 * This keeps the line's colour as the busy signal and stops the slide.
 */
export const QUIET_STATUS_CSS = '.progress-line:before { animation: none !important; display: none !important; }';

const QUIETED = Symbol.for('sequence-salience.statusbar-quieted');

interface UpdatingElementLike {
  shadowRoot: ShadowRoot | null;
  updated?(...args: unknown[]): void;
}

/** Adds QUIET_STATUS_CSS to the element's shadow root once (idempotent). */
export function quietStatusBarElement(el: UpdatingElementLike): boolean {
  const root = el.shadowRoot;
  if (root == null || root.querySelector('style[data-quiet-status]') !== null) return false;
  const style = root.ownerDocument.createElement('style');
  style.dataset['quietStatus'] = '';
  style.textContent = QUIET_STATUS_CSS;
  root.appendChild(style);
  return true;
}

/**
 * Patches LIT's status bar class so that every instance gets QUIET_STATUS_CSS after each update
 * (before the frame is painted); returns false when there is nothing to patch or it was patched.
 */
export function patchStatusBar(cls: unknown): boolean {
  const proto = (cls as {prototype?: Record<PropertyKey, unknown>} | null)?.prototype;
  if (proto == null || proto[QUIETED]) return false;
  const original = proto['updated'] as UpdatingElementLike['updated'];
  proto['updated'] = function (this: UpdatingElementLike, ...args: unknown[]) {
    original?.apply(this, args);
    quietStatusBarElement(this);
  };
  proto[QUIETED] = true;
  return true;
}

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
  const proto = (cls as {prototype?: Record<PropertyKey, unknown>} | null)?.prototype;
  if (proto == null || proto[SETTINGS_PATCHED]) return false;
  const original = proto['updated'] as LitModulesLike['updated'];
  proto['updated'] = function (this: LitModulesLike, ...args: unknown[]) {
    original?.apply(this, args);
    applyLayoutSettings(this);
  };
  proto[SETTINGS_PATCHED] = true;
  return true;
}
