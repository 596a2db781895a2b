/**
 * Icons drawn as inline SVG: they render offline and need no icon font (LIT's page names its icons by
 * Material Icons ligatures, which show as words such as "error_outline" when the font is missing).
 * Paths: Material Icons (Apache License 2.0), 24 × 24 view box.
 */
import {html, type TemplateResult} from 'lit';

const ERROR_OUTLINE = 'M11 15h2v2h-2zm0-8h2v6h-2zm.99-5C6.47 2 2 6.48 2 12s4.47 10 9.99 10C17.52 22 22 17.52 22 12S17.52 ' +
    '2 11.99 2zM12 20c-4.42 0-8-3.58-8-8s3.58-8 8-8 8 3.58 8 8-3.58 8-8 8z';

/** The error icon (a circled "!"), `size` px square, in the text colour; hidden from screen readers. */
export function errorIcon(size = 18): TemplateResult {
  return html`<svg class="icon icon-error" width=${size} height=${size} viewBox="0 0 24 24" aria-hidden="true"
      focusable="false" fill="currentColor"><path d=${ERROR_OUTLINE}></path></svg>`;
}
