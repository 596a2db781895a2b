/**
 * A row's `target` field (or one typed in LIT's datapoint editor) forces the response: the salience,
 * the traces and the tests explain that text as if the model had written it (teacher forcing), and
 * nothing is generated. Every view that shows such a response labels it so (issue 35), with this one
 * label, so that a forced target is never read as the model's own answer.
 */
import {css, html, nothing, type TemplateResult} from 'lit';

import {TARGET_FIELD} from './fields.js';

export const FORCED_TARGET_LABEL = 'Forced target — not the model\u2019s own answer';
const FORCED_TARGET_TITLE = 'This row has a target: it is explained as if the model had written it (teacher ' +
    'forcing); the model was not asked to generate. Clear the target field in the datapoint editor to explain ' +
    'the model\u2019s own response.';

/** Whether a datapoint's data (or a request input built from it) carries its own target text. */
export function isForcedTarget(data: Readonly<Record<string, unknown>> | null | undefined): boolean {
  const t = data?.[TARGET_FIELD];
  return typeof t === 'string' && t !== '';
}

/** The label beside a forced response (`.forced-target`), or nothing for the model's own answer. */
export function forcedTargetNote(forced: boolean): TemplateResult | typeof nothing {
  return forced ? html`<span class="forced-target" title=${FORCED_TARGET_TITLE}>${FORCED_TARGET_LABEL}</span>` : nothing;
}

/** Its look, added to every module's styles (shared/lit_module.ts). */
export const FORCED_TARGET_STYLES = css`
  .forced-target {
    display: inline-block; margin-left: 6px; padding: 0 6px; border-radius: 3px;
    background: #fff3e0; color: #8a4b00; border: 1px solid #f0b36b;
    font-size: 11px; font-weight: 500; line-height: 16px; white-space: nowrap; text-transform: none;
  }
`;
