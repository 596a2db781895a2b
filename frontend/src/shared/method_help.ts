/**
 * The help that teaches (issue 45 §2): each published method in two lines (what it measures and its cost; when to
 * trust it, the record's `trust`), then how to read the colours, R² and "not decidable", the automatic switch from
 * the gradient, *Show gradient* / Alt+G and the other keys. Text from the registry (shared/methods.ts) only; the
 * builder is pure; `methodHelpView` draws it behind an (i) beside the method select, `methodNameView` behind a
 * method's name wherever one appears (the salience module, its comparisons, Test this explanation), opened at it.
 */
import {css, html, render, type TemplateResult} from 'lit';
import {ref} from 'lit/directives/ref.js';
import type {MethodInfo, MethodRegistry} from './methods.js';

/** One method's two lines: what it measures and what it costs; when to trust its map. */
export interface MethodLines {
  name: string;
  label: string;
  what: string;
  trust: string;
}

/** A method's two lines, from its published record. */
export function methodLines(m: MethodInfo): MethodLines {
  const segment = m.kind === 'segment';
  const how = segment ? 'per segment of the granularity shown (re-measured when it changes)'
      : 'per token, from the gradient at the input (any granularity at no extra cost)';
  const sign = m.signed ? 'signed (red raises log p(target), blue lowers it)' : 'unsigned (magnitude only)';
  const count = m.count_field !== null && m.count_unit !== null ? `, ${m.default_count} ${m.count_unit} by default` : '';
  return {name: m.name, label: m.label, what: `${how}; ${sign}. Cost: ${m.cost_unit}${count}.`,
          trust: `When to trust it: ${m.trust ?? 'the server did not say (an older version).'}`};
}

/** The general sections after the methods: a title and a paragraph each (the switch's granularities and method from `reg`). */
export function helpSections(reg: Pick<MethodRegistry, 'methods' | 'label'> | null): Array<{title: string; text: string}> {
  const exact = reg?.methods.find((m) => (m.default_at ?? []).length > 0);
  const at = exact?.default_at?.join(', ') ?? 'the coarse granularities';
  const exactLabel = exact?.label ?? 'exact leave one segment out';
  return [
    {title: 'Colours', text: 'Darker means a larger value, scaled to the largest value outside the target (the legend ' +
      'shows the range; Intensity stretches it). Hover a segment for its value and rank; the top list ranks them.'},
    {title: 'R²', text: 'The surrogate fits a linear model to random removals; R² is how much of the change in ' +
      'log p(target) that fit explains. Near 1 the values can be read as each segment\'s effect; low, segments ' +
      'interact and the status line warns.'},
    {title: '"Not decidable"', text: 'In Test this explanation: even the best order of removals the test can find stays ' +
      'within the noise on this prompt, so "within noise" says nothing about the method there.'},
    {title: 'The automatic switch', text: `At ${at} granularity the gradient (or the first map the server names) ` +
      `shows at once while ${exactLabel} is measured; it replaces the ` +
      'first map when done and says whether it confirmed it or what changed. Choosing a method stops the switch; ' +
      'while a chosen segment method measures, the previous map stays, marked as such.'},
    {title: 'Show gradient', text: 'The button beside a segment method (Alt+G) goes back to the gradient, one pass.'},
    {title: 'Keys', text: 'Click or drag over the response to choose the target; arrows move it, Shift+arrows extend ' +
      'it, Enter or space select, Escape the whole response; Alt+H switches the heatmap; Alt+G shows the gradient.'},
  ];
}

/** Every published method's two lines, in the registry's order. */
export function methodHelp(reg: Pick<MethodRegistry, 'methods'>): MethodLines[] {
  return reg.methods.map(methodLines);
}

/** The help panel: every method's two lines (`current`'s marked), then the sections. */
function helpPanel(reg: MethodRegistry | null, current: string | null): TemplateResult {
  return html`<button class="help-close" title="Close the help" @click=${closeHelp}>Close</button>
    <ul class="help-methods">${reg === null ? html`<li>Methods load with the model.</li>` : methodHelp(reg).map((l) => html`
      <li data-method=${l.name} class=${l.name === current ? 'current' : ''}><b>${l.label}</b>:
        <span class="help-what">${l.what}</span><br><span class="help-trust">${l.trust}</span></li>`)}</ul>
    ${helpSections(reg).map((s) => html`<p class="help-section"><b>${s.title}</b>: ${s.text}</p>`)}`;
}

/**
 * The one help, behind a `<details>` whose summary is `summary`: drawn when opened (a page with many method names
 * keeps one panel's DOM per open help), `current`'s entry marked and scrolled into view; drawn again at each render
 * while open, so that the marked entry follows the method on screen (the automatic steps, "Show gradient").
 */
function helpDetails(reg: MethodRegistry | null, where: string, current: string | null, cls: string,
                     summary: TemplateResult | string, title: string): TemplateResult {
  const draw = (details: Element | undefined): HTMLElement | null => {
    const panel = details?.querySelector<HTMLElement>(':scope > .method-help-panel') ?? null;
    if (!(details instanceof HTMLDetailsElement) || !details.open || panel === null) return null;
    render(helpPanel(reg, current), panel);
    return panel;
  };
  const onToggle = (e: Event) => {
    const panel = draw(e.currentTarget as HTMLDetailsElement);
    panel?.querySelector<HTMLElement>('li.current')?.scrollIntoView({block: 'nearest'});
  };
  return html`<details class=${cls} data-where=${where} data-method=${current ?? ''} @toggle=${onToggle} ${ref(draw)}>
    <summary title=${title}>${summary}</summary><div class="method-help-panel" role="note"></div></details>`;
}

/** The (i) beside a method's select or status: opens the help (every method's two lines, then the sections). */
export function methodHelpView(reg: MethodRegistry | null, where: string, current: string | null = null): TemplateResult {
  return helpDetails(reg, where, current, 'method-help', html`<span aria-label="Help on the methods">ⓘ</span>`,
                     'How each method works, what it costs and when to trust it');
}

/**
 * A method's name wherever it appears (the status line, the top list, the comparisons, Test this explanation): a
 * link that opens the same help at that method's two lines. `text` replaces the label (e.g. "IG (16 steps)").
 */
export function methodNameView(reg: MethodRegistry | null, name: string, where: string, text?: string): TemplateResult {
  return helpDetails(reg, where, name, 'method-help method-name', text ?? reg?.label(name) ?? name,
                     'What this method measures, what it costs and when to trust it (click)');
}

/** The help's styles, in every module that shows a method's name (each module has its own shadow root). */
export const METHOD_HELP_STYLES = css`
  .method-help { display: inline-block; position: relative; margin: 0 4px; }
  .method-help summary { cursor: pointer; list-style: none; color: #1a73e8; }
  .method-help summary::-webkit-details-marker { display: none; }
  .method-help.method-name { margin: 0; }
  .method-help.method-name > summary { color: inherit; text-decoration: underline dotted #1a73e8; text-underline-offset: 2px; }
  .method-help-panel { position: fixed; z-index: 10; left: 50%; transform: translateX(-50%); top: 10vh;
    width: min(640px, 90vw); max-height: 80vh;
    overflow: auto; background: #fff; border: 1px solid #dadce0; border-radius: 4px; padding: 8px 12px;
    box-shadow: 0 2px 6px rgba(0,0,0,.2); font-size: 12px; font-weight: normal; line-height: 1.4; color: #202124;
    text-align: left; white-space: normal; font-family: Roboto, sans-serif; }
  .help-close { float: right; }
  .help-methods { padding-left: 16px; margin: 0 0 6px; } .help-methods li { margin-bottom: 4px; }
  .help-methods li.current { background: #e8f0fe; outline: 1px solid #1a73e8; border-radius: 2px; }
`;

function closeHelp(e: Event) {
  const details = (e.currentTarget as HTMLElement).closest('details');
  if (details !== null) details.open = false;
}
