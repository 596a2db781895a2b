import {describe, expect, it} from 'vitest';

import {DATA_TABLE_CSS, fitColumnWidths, patchDataTableColumns} from '../src/lit_fixes/data_table.js';
import {patchGeneratedTextModule} from '../src/lit_fixes/generated_text.js';
import {patchLayoutSettings} from '../src/lit_fixes/layout_settings.js';
import {dropCancellations, patchStatusBar, QUIET_STATUS_CSS} from '../src/lit_fixes/status_bar.js';
import {placeTooltip} from '../src/lit_fixes/tooltip.js';

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

/** A shadow root with just what the style patches use (the unit tests run without a DOM). */
function fakeShadowRoot() {
  const children: Array<{dataset: Record<string, string>; textContent: string}> = [];
  const markers: Record<string, string> = {'style[data-quiet-status]': 'quietStatus', 'style[data-table-fit]': 'tableFit'};
  return {
    children,
    ownerDocument: {createElement: () => ({dataset: {} as Record<string, string>, textContent: ''})},
    querySelector: (sel: string) => {
      const marker = markers[sel];
      return marker === undefined ? null : children.find((c) => marker in c.dataset) ?? null;
    },
    appendChild: (c: {dataset: Record<string, string>; textContent: string}) => { children.push(c); },
  };
}

describe('patchStatusBar', () => {
  it('adds the style that stops the sliding line once per element, after LIT\'s own updated()', () => {
    const calls: string[] = [];
    class StatusBar {
      shadowRoot = fakeShadowRoot() as unknown as ShadowRoot;
      updated() { calls.push('lit'); }
    }
    expect(patchStatusBar(StatusBar)).toBe(true);
    expect(patchStatusBar(StatusBar)).toBe(false);
    const bar = new StatusBar();
    bar.updated();
    bar.updated();
    const root = bar.shadowRoot as unknown as ReturnType<typeof fakeShadowRoot>;
    expect(calls).toEqual(['lit', 'lit']);
    expect(root.children.map((c) => c.textContent)).toEqual([QUIET_STATUS_CSS]);
    expect(QUIET_STATUS_CSS).toContain('animation: none');
    expect(patchStatusBar(undefined)).toBe(false);
  });
});

/** LIT 1.3.1's StatusService, as its ApiService uses it (client/services/status_service.ts): errors by key. */
class FakeStatusService {
  errorEvents = new Map<string, {message: string; fullMessage: string}>();
  addError(message: string, fullMessage?: string, key?: string) {
    this.errorEvents.set(key ?? message, {message, fullMessage: fullMessage ?? message});
  }
  get errorMessages() { return Array.from(this.errorEvents.values(), (e) => e.message); }
}

/** What LIT's ApiService.queryServer reports for a failed request: the answer's first line when "Details" follow
 * (the request guard adds them to one-line answers), else "Unknown error"; the full text as `Error: <answer>`. */
function reportFailure(service: FakeStatusService, answer: string, key: string) {
  const error = new Error(answer);
  const first = error.message.match('^.*?(?=\n\nDetails:)');
  service.addError(first ? first[0] : 'Unknown error', error.toString(), key);
}

describe('dropCancellations (LIT\'s status bar does not show our server\'s cancellation answers)', () => {
  const details = (status: number) => `\n\nDetails: HTTP ${status} from ./get_preds?model=m; the server log has more.`;
  // The answer the user saw in red (lit_app/wrappers/salience.py, a span superseded by a newer IG count).
  const superseded = 'Cancelled: a newer selection replaced this request. It stopped after 8 of 16 IG steps or SmoothGrad samples.';

  it('drops a cancellation, with or without the request guard\'s "Details"', () => {
    const service = new FakeStatusService();
    expect(dropCancellations(service)).toBe(true);
    reportFailure(service, superseded + details(409), 'a');
    reportFailure(service, superseded, 'b');  // LIT's "Unknown error", the answer in the full message
    reportFailure(service, `Uncaught error: ${superseded}\n\nDetails: Traceback ...`, 'c');  // LIT's own 500 body
    expect(service.errorMessages).toEqual([]);
  });

  it('keeps every other error: a 400 naming a field, a 500, LIT\'s own 409, a network failure', () => {
    const service = new FakeStatusService();
    dropCancellations(service);
    const field = 'ig_steps must be a whole number from 1 to 256, not 300. Fix: send a count in that range.';
    reportFailure(service, field + details(400), 'a');
    reportFailure(service, 'Internal server error; the server log has the details.' + details(500), 'b');
    reportFailure(service, 'Model(s) m already exist. Fix: choose another config "new_name".' + details(409), 'c');
    service.addError('Failed to fetch');
    expect(service.errorMessages).toEqual([field, 'Internal server error; the server log has the details.',
                                           'Model(s) m already exist. Fix: choose another config "new_name".',
                                           'Failed to fetch']);
    // "Cancelled" elsewhere than at the start of the answer is not our cancellation.
    reportFailure(service, 'The job was not Cancelled: it failed.' + details(500), 'd');
    expect(service.errorMessages).toHaveLength(5);
  });

  it('wraps a service once and leaves what is not one alone', () => {
    const service = new FakeStatusService();
    expect(dropCancellations(service)).toBe(true);
    expect(dropCancellations(service)).toBe(false);
    expect(dropCancellations({})).toBe(false);
    expect(dropCancellations(undefined)).toBe(false);
  });

  it('is applied to the status bar\'s service by patchStatusBar, on the bar\'s first update', () => {
    const service = new FakeStatusService();
    class StatusBar {
      shadowRoot = fakeShadowRoot() as unknown as ShadowRoot;
      statusService = service;
      updated() {}
    }
    patchStatusBar(StatusBar);
    reportFailure(service, superseded + details(409), 'before');  // no bar yet: LIT's behaviour
    new StatusBar().updated();
    reportFailure(service, superseded + details(409), 'after');
    expect([...service.errorEvents.keys()]).toEqual(['before']);
  });
});

describe('patchLayoutSettings', () => {
  /** LIT's lit-modules as far as the patch reads it: the declared settings and the two sizes. */
  class LitModules {
    upperHeight = 'calc(50% - 4px)';
    leftColumnWidth = 'calc(50% - 8px)';
    settings: Record<string, unknown> = {};
    modulesService = {getSetting: (name: string) => this.settings[name]};
    calls = 0;
    updated() { this.calls++; }
  }

  it('applies the declared mainHeight and leftWidth once they arrive, and again only when they change', () => {
    expect(patchLayoutSettings(LitModules)).toBe(true);
    expect(patchLayoutSettings(LitModules)).toBe(false);
    const el = new LitModules();
    el.updated();  // before /get_info: nothing declared, LIT's defaults stay
    expect([el.upperHeight, el.leftColumnWidth, el.calls]).toEqual(['calc(50% - 4px)', 'calc(50% - 8px)', 1]);
    el.settings = {mainHeight: 100, leftWidth: 30};
    el.updated();
    expect([el.upperHeight, el.leftColumnWidth]).toEqual(['100%', '30%']);
    el.upperHeight = '300px';  // the user drags the divider: kept over later updates
    el.updated();
    expect(el.upperHeight).toBe('300px');
    el.settings = {mainHeight: 60, leftWidth: 30};  // another layout
    el.updated();
    expect([el.upperHeight, el.leftColumnWidth, el.calls]).toEqual(['60%', '30%', 4]);
    expect(patchLayoutSettings(undefined)).toBe(false);
  });
});

describe('patchDataTableColumns', () => {
  /** LIT's data-table-module as far as the patch reads it: `keys` by LIT type, `updateColumns` showing all. */
  class DataTableModule {
    shadowRoot = fakeShadowRoot() as unknown as ShadowRoot;
    updates = 0;
    updated() { this.updates++; }
    names = ['case', 'prompt', 'target', 'system', 'source'];
    columnVisibility = new Map<string, boolean>();
    get keys() {
      return this.names.map((name) => name === 'case' ? {name, minWidth: 60, maxWidth: 100, width: 100}
          : {name, minWidth: 220, maxWidth: 600, width: 600});
    }
    updateColumns() {
      this.columnVisibility = new Map([['index', true], ...this.names.map((n) => [n, true] as [string, boolean])]);
    }
  }

  it('narrows the prompt datasets\' columns to fit the left panel and starts the system column hidden', () => {
    expect(patchDataTableColumns(DataTableModule)).toBe(true);
    expect(patchDataTableColumns(DataTableModule)).toBe(false);
    const m = new DataTableModule();
    const widths = Object.fromEntries(m.keys.map((k) => [k.name, [k.minWidth, k.width, k.maxWidth]]));
    expect(widths).toEqual({
      case: [72, 100, 120], prompt: [112, 360, 360], target: [64, 140, 240], system: [112, 360, 360],
      source: [220, 600, 600],  // not ours: LIT's widths
    });
    // (Whether the row then fits the ~370 px panel at 1280x720 is measured in tests/e2e/test_layout.py.)
    m.updateColumns();
    expect([...m.columnVisibility]).toEqual(
        [['index', true], ['case', true], ['prompt', true], ['target', true], ['system', false], ['source', true]]);
    m.names = ['prompt'];  // a dataset without a system column: nothing to hide
    m.updateColumns();
    expect([...m.columnVisibility]).toEqual([['index', true], ['prompt', true]]);
    // The narrower cell padding, once, after LIT's own updated().
    m.updated();
    m.updated();
    const root = m.shadowRoot as unknown as ReturnType<typeof fakeShadowRoot>;
    expect(m.updates).toBe(2);
    expect(root.children.map((c) => c.textContent)).toEqual([DATA_TABLE_CSS]);
  });

  it('leaves a class alone that lacks the getter or the method', () => {
    expect(patchDataTableColumns(class { updateColumns() {} })).toBe(false);
    expect(patchDataTableColumns(undefined)).toBe(false);
    expect(fitColumnWidths([{name: 'x', width: 5}])).toEqual([{name: 'x', width: 5}]);
  });
});

describe('placeTooltip (the whole help text inside the window)', () => {
  const anchor = {left: 100, top: 300, right: 116, bottom: 316};
  it('goes below its anchor when it fits', () => {
    expect(placeTooltip(anchor, 520, 200, 1280, 720)).toEqual({left: 100, top: 320, width: 520, maxHeight: 704});
  });
  it('moves up and left to stay inside the window, with an 8 px margin', () => {
    // 400 px tall below y=320 would end at 720: it moves up to end at 712.
    expect(placeTooltip(anchor, 520, 400, 1280, 720).top).toBe(312);
    const right = {left: 1000, top: 10, right: 1016, bottom: 26};
    expect(placeTooltip(right, 520, 100, 1280, 720).left).toBe(1280 - 8 - 520);
  });
  it('is cut to the window (then scrolls) when taller, and narrowed on a narrow window', () => {
    expect(placeTooltip(anchor, 520, 2000, 1280, 720)).toEqual({left: 100, top: 8, width: 520, maxHeight: 704});
    expect(placeTooltip(anchor, 520, 100, 400, 720)).toMatchObject({left: 8, width: 384});
  });
});
