/**
 * Bundle entry, loaded by a <script> tag right after LIT's prebuilt main.js.
 *
 * LIT's client is not on npm, so its LitModule base class is found at run
 * time: walk the prototype chain up from a built-in module's class to the
 * class named "LitModule" (class names survive LIT's minification), then
 * define our module on top of it. LIT resolves layout modules with
 * customElements.get(tag) only after /get_info returns, which is later.
 */
import {makeModuleClass, TAG} from './salience_module.js';
import {EXPLAIN_TAG, makeExplainModuleClass} from './explain/module.js';
import {INSIDE_TAG, makeInsideModuleClass} from './inside/module.js';
import {LIT_PATCHES} from './lit_fixes.js';
import {defineOnce} from './shared/lit_module.js';

export {TAG};

const PROBE_TAG = 'data-table-module';

/** LIT's LitModule class, found from any class that extends it. */
export function findLitModule(start: unknown): unknown {
  let c = start as {name?: string} | null;
  while (c != null && c !== Function.prototype) {
    if (c.name === 'LitModule') return c;
    c = Object.getPrototypeOf(c);
  }
  throw new Error(`Sequence Salience: no LitModule above <${PROBE_TAG}>; is this LIT's client?`);
}

async function register() {
  if (customElements.get(TAG) !== undefined) return;
  await customElements.whenDefined(PROBE_TAG);
  const LitModule = findLitModule(customElements.get(PROBE_TAG));
  defineOnce(TAG, makeModuleClass(LitModule));
  defineOnce(INSIDE_TAG, makeInsideModuleClass(LitModule));
  defineOnce(EXPLAIN_TAG, makeExplainModuleClass(LitModule));
}

if (typeof customElements !== 'undefined') {
  register().catch((e) => console.error(e));
  for (const [tag, patch] of LIT_PATCHES) {
    customElements.whenDefined(tag).then(() => patch(customElements.get(tag))).catch((e) => console.error(e));
  }
}
