/**
 * The one way a LIT 1.3.1 class is patched here (each work-around beside this file; ../lit_fixes.ts lists them):
 * once per class, marked by a symbol, and the shapes of what a patch changes: a method that runs more after the
 * class's own, a getter whose value is rewritten, a style added to an instance's shadow root.
 */

export type Prototype = Record<PropertyKey, unknown>;

export interface UpdatingElementLike {
  shadowRoot: ShadowRoot | null;
  updated?(...args: unknown[]): void;
}

/**
 * The one way a LIT class is patched here: takes the class's prototype, skips it when `mark` says it was
 * patched, runs `apply` (which returns false, before changing anything, when the class lacks what it
 * patches) and marks it. Returns whether it patched.
 */
export function patchOnce(cls: unknown, mark: symbol, apply: (proto: Prototype) => boolean | void): boolean {
  const proto = (cls as {prototype?: Prototype} | null)?.prototype;
  if (proto == null || proto[mark] || apply(proto) === false) return false;
  proto[mark] = true;
  return true;
}

/** Runs `after` on the instance after the class's own method `name` (if it has one), which keeps its arguments. */
export function afterMethod<T>(proto: Prototype, name: string, after: (el: T) => void): void {
  const original = proto[name] as ((...args: unknown[]) => void) | undefined;
  proto[name] = function (this: T, ...args: unknown[]) {
    original?.apply(this, args);
    after(this);
  };
}

/** Runs `after` on each instance after the class's own `updated` (LIT runs it after every render). */
export function afterUpdated<T>(proto: Prototype, after: (el: T) => void): void {
  afterMethod(proto, 'updated', after);
}

/** Patches the class once (`mark`) so that `after` runs on each instance after each of its updates. */
export function patchEachUpdate<T>(cls: unknown, mark: symbol, after: (el: T) => void): boolean {
  return patchOnce(cls, mark, (proto) => afterUpdated(proto, after));
}

/**
 * Replaces the prototype's getter `name` by one that returns `rewrite(instance, the original's value)`; false,
 * changing nothing, when the prototype has no getter of that name that can be replaced.
 */
export function wrapGetter<T>(proto: Prototype, name: string, rewrite: (el: T, value: unknown) => unknown): boolean {
  const found = Object.getOwnPropertyDescriptor(proto, name);
  if (found?.get === undefined || !found.configurable) return false;
  const original = found.get;
  Object.defineProperty(proto, name, {
    ...found,
    get(this: T) {
      return rewrite(this, original.call(this));
    },
  });
  return true;
}

/** Adds a <style data-`marker`> with `cssText` to the element's shadow root once (idempotent). */
export function addStyleOnce(el: UpdatingElementLike, marker: string, cssText: string): boolean {
  const root = el.shadowRoot;
  const attr = marker.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
  if (root == null || root.querySelector(`style[data-${attr}]`) !== null) return false;
  const style = root.ownerDocument.createElement('style');
  style.dataset[marker] = '';
  style.textContent = cssText;
  root.appendChild(style);
  return true;
}
