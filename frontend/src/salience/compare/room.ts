/**
 * Compare an edit in the salience module: follows LIT's pin (appState.compareExamplesEnabled and the
 * pinned SelectionService, ../../shared/lit_module.ts `pinnedSelection`). While a datapoint is pinned and
 * another is selected, it asks `_<model>_compare` (lit_app/wrappers/compare.py) once per pair and method for the
 * pinned datapoint's whole-response salience (from the server's caches when it was shown before) and the
 * pinned answer's log p under the selected prompt (one teacher-forced forward); the selected side is the
 * module's own controller. Not a second salience controller: its requests would move the server's focus
 * (the datapoint whose background matrices run) away from the selected datapoint. It derives what
 * view.ts draws: both responses aligned word by word, both prompts aligned with both values per
 * segment on one shared scale, and the difference (selected − pinned). Unpinning drops all of it.
 */
import {COMPARE_FIELD, COMPARE_VIEW_EDIT} from '../../shared/fields.js';
import {segment, type Granularity, type Segmentation} from '../../shared/aggregate/index.js';
import {JobClient} from '../../shared/jobs.js';
import type {MethodRegistry} from '../../shared/methods.js';
import type {IndexedInputLike} from '../../shared/request.js';
import type {SalienceController} from '../controller.js';
import type {SalienceHost} from '../page.js';
import type {PatternMatcher} from '../pattern_runner.js';
import {numTargets, parsePayload, type SaliencePayload} from '../payload.js';
import {countFields, segmentFields} from '../request.js';
import {parseSegments} from '../segment_payload.js';
import {wholeResponse} from '../target.js';
import {isForcedTarget} from '../../shared/forced_target.js';
import {alignSegmentations, alignTexts, type Alignment} from './alignment.js';
import {compareInput, compareModelName, isComparing, parseCross, promptValues, responseOf, wholeResponseValues,
        type CrossPayload, type CompareMode, type PromptValues} from './logic.js';

/** What view.ts draws. A = pinned, B = selected. */
export interface CompareModel {
  /** The LIT model both sides are explained with (the salience module's). */
  model: string;
  /** The compared pair's datapoint ids, "pinned|selected". */
  pair: string;
  mode: CompareMode;
  /** Pinned side still loading / failed (its message), else ''. */
  pinnedStatus: 'loading' | 'error' | 'ready';
  pinnedMessage: string;
  responses: Alignment | null;
  prompts: Alignment | null;
  /** Both sides' values per aligned prompt segment, B − A and the scales; null until both are known. */
  values: PromptValues | null;
  cross: CrossPayload | null;
  crossLoading: boolean;
  crossError: string;
  /** The pinned answer's salience under the selected prompt: not asked for, being computed, or shown
   * as the selected side's values (`useOld`; else the selected datapoint's own answer). */
  oldAnswer: 'off' | 'loading' | 'ready';
  useOld: boolean;
  /** What the prompt colours wait for, '' when nothing (a segment method is measured on both prompts). */
  valuesNote: string;
  /** Whether each side's response is its datapoint's own target (forced), not the model's answer. */
  forced: {a: boolean; b: boolean};
  /** The method both sides' colours show (the module's, or its segment method on screen) and the registry naming it. */
  method: string;
  registry: MethodRegistry | null;
}

/** A segment method's whole-response values of each side, as the compare model answers them (parsed against
 * each side's token count when drawn: segmentTokens). */
interface SideSegments {
  pinned: unknown;
  selected: unknown;
  old: unknown;
}

type CrossAnswer = {cross: CrossPayload; pinned: SaliencePayload; old: SaliencePayload | null; segments: SideSegments | null};

export class CompareRoom {
  pinned: IndexedInputLike | null = null;
  selected: IndexedInputLike | null = null;
  mode: CompareMode = 'both';
  cross: CrossPayload | null = null;
  pinnedPayload: SaliencePayload | null = null;
  /** The pinned answer's salience under the selected prompt (asked for with explainOldAnswer). */
  oldPayload: SaliencePayload | null = null;
  wantOld = false;
  useOld = false;
  crossError = '';
  /** The `_<model>_compare` request of the pair, method and old-answer choice shown (../../shared/jobs.ts). */
  private readonly requests: JobClient<CrossAnswer | null>;
  /** The method (and count, or segment settings) the selected side shows: the pinned salience is asked for it. */
  private method: {name: string; counts: Record<string, unknown>; tag: string; segment: string} | null = null;
  /** A segment method's values of both sides, for `method` (null for a gradient method, or until measured). */
  private segments: SideSegments | null = null;
  private crossKey = '';
  /** The shared scale last drawn and the method it is of (null while no values are drawn, or the selected side
   * shows the pinned answer's salience: not the map's). */
  private drawn: {tag: string; scale: number} | null = null;
  private segMemo = new Map<string, {payload: SaliencePayload; seg: Segmentation}>();
  private alignMemo: {key: string; a: SaliencePayload; b: SaliencePayload; own: SaliencePayload; prompts: Alignment;
                      responses: Alignment} | null = null;

  constructor(private readonly host: SalienceHost) {
    this.requests = new JobClient(host, {tickRenders: () => false});  // no clock on screen
  }

  get active(): boolean {
    return this.pinned !== null && this.selected !== null;
  }

  /** The comparison's shared scale while it shows the method of `main`'s map for the selected datapoint's own
   * answer (the map takes it: one scale for one method on one prompt), else null. */
  scaleFor(main: SalienceController): number | null {
    return this.active && this.drawn !== null && this.drawn.tag === main.valuesName() ? this.drawn.scale : null;
  }

  /** Whether the pinned side's request runs. */
  get crossLoading(): boolean {
    return this.requests.running;
  }

  dispose() {
    this.crossKey = '';
    this.requests.dispose();
  }

  /** LIT's compare mode, pinned datapoint or selection changed. */
  async update(enabled: boolean, pinned: IndexedInputLike | null, selected: IndexedInputLike | null) {
    if (!isComparing(enabled, pinned, selected)) {
      if (this.pinned !== null || this.selected !== null) {
        this.pinned = this.selected = this.cross = this.pinnedPayload = this.oldPayload = null;
        this.wantOld = this.useOld = false;
        this.crossKey = '';
        this.crossError = '';
        this.requests.reset();
        this.host.changed();
      }
      return;
    }
    this.pinned = pinned;
    this.selected = selected;
    this.host.changed();
    await this.fetchCross();
  }

  /** On request: the pinned answer's salience under the selected prompt, then shown as the selected side. */
  explainOldAnswer() {
    this.wantOld = true;
    this.useOld = true;
    void this.fetchCross();
  }

  /** Which answer the selected side's values explain: the pinned one (true) or its own. */
  setUseOld(on: boolean) {
    this.useOld = on && this.oldPayload !== null;
    this.host.changed();
  }

  setMode(mode: CompareMode) {
    if (mode === this.mode) return;
    this.mode = mode;
    this.host.changed();
  }

  /** Follows the selected side's method and count, or segment method and segmentation (called after each
   * render): a new one asks again. A segment method's values live on a segmentation, not on the gradient's
   * tokens: the compare model measures it on both prompts' whole responses (lit_app/wrappers/compare.py). */
  sync(main: SalienceController) {
    const reg = main.registry();
    if (!this.active || main.method === '' || reg === null) return;
    const tag = main.valuesName();
    if (this.method?.tag === tag) return;
    const ask = main.segmentAsk();
    const counts = ask === null ? countFields(reg, main.extra()) : segmentFields(reg, ask);
    this.method = {name: main.method, counts, tag, segment: ask === null ? '' : ask.method};
    void this.fetchCross();
  }

  private async fetchCross() {
    const pinned = this.pinned, selected = this.selected, method = this.method;
    if (pinned === null || selected === null || method === null) return;
    const pair = `${pinned.id}|${selected.id}|`;
    if (!this.crossKey.startsWith(pair)) this.wantOld = this.useOld = false;  // a new pair: not asked for yet
    const key = `${pair}${method.tag}|${this.wantOld}`;
    if (key === this.crossKey) return;
    const samePair = this.crossKey.startsWith(pair);
    this.crossKey = key;
    if (!samePair) this.cross = this.pinnedPayload = this.oldPayload = null;  // same pair: shown until replaced
    this.segments = null;  // another method or segmentation: not these values
    this.crossError = '';
    const model = compareModelName(this.host.modelName());
    if (this.host.models()[model] === undefined) {
      this.requests.reset();  // an earlier pair's answer is not this one's
      this.crossError = `This server has no "${model}" model, so the pinned datapoint cannot be compared. ` +
          'Fix: start the server with python -m lit_app.server (its make_models adds it).';
      this.host.changed();
      return;
    }
    const wantOld = this.wantOld;
    const settled = await this.requests.run({
      run: async () => {
        const input = compareInput(selected, pinned, COMPARE_VIEW_EDIT, method.counts, method.tag, wantOld, true);
        const req = this.host.getPreds([input], model, [COMPARE_FIELD], 'Comparing with the pinned datapoint…');
        const res = await this.host.loadLatest('compare', req);
        if (res === null || key !== this.crossKey) return null;
        const cross = parseCross(res[0]?.[COMPARE_FIELD]);
        const segments = method.segment === '' ? null
            : {pinned: cross.pinned_segments, selected: cross.selected_segments, old: cross.old_answer_segments};
        return {cross, pinned: parsePayload(cross.pinned_salience), segments,
                old: cross.old_answer_salience == null ? null : parsePayload(cross.old_answer_salience)};
      },
    });
    if (!settled.latest || key !== this.crossKey) return;
    if (!settled.ok) {
      this.crossError = settled.error;
    } else if (settled.value !== null) {
      ({cross: this.cross, pinned: this.pinnedPayload, old: this.oldPayload, segments: this.segments} = settled.value);
    }
    this.host.changed();
  }

  private segmentation(side: string, p: SaliencePayload, granularity: Granularity, regex: string,
                       patterns: PatternMatcher): Segmentation {
    const key = `${side}|${granularity}|${granularity === 'regex' ? regex : ''}`;
    const hit = this.segMemo.get(key);
    if (hit !== undefined && hit.payload === p) return hit.seg;
    // A custom pattern is matched off the main thread (throws PatternPending until it is).
    const matches = granularity === 'regex' ? patterns.matches(p.text, regex) : undefined;
    const seg = segment(p.text, p.offsets, granularity, {pattern: regex, matches, roleSpans: p.role_spans});
    this.segMemo.set(key, {payload: p, seg});
    return seg;
  }

  /** What to draw, from the selected datapoint's controller (B) and the pinned payload (A); null when inactive. */
  model(main: SalienceController, granularity: Granularity, regex: string, intensity: number,
        patterns: PatternMatcher): CompareModel | null {
    this.drawn = null;
    if (!this.active) return null;
    const a = this.pinnedPayload;
    const out: CompareModel = {
      model: this.host.modelName(), pair: `${this.pinned!.id}|${this.selected!.id}`, mode: this.mode, pinnedStatus: a !== null ? 'ready' : this.crossError ? 'error' : 'loading',
      pinnedMessage: this.crossError, responses: null, prompts: null, values: null, cross: this.cross, crossLoading: this.crossLoading, crossError: this.crossError,
      oldAnswer: this.oldPayload !== null ? 'ready' : this.wantOld && this.crossLoading ? 'loading' : 'off',
      useOld: this.useOld && this.oldPayload !== null, valuesNote: '',
      forced: {a: isForcedTarget(this.pinned?.data), b: isForcedTarget(this.selected?.data)},
      method: this.method?.segment || main.method, registry: main.registry(),
    };
    const own = main.payload;
    if (a === null || own === null) return out;
    // The selected side: its own answer, or (on request) the pinned answer under the selected prompt.
    const b = out.useOld ? this.oldPayload! : own;
    let segA: Segmentation, segB: Segmentation;
    try {
      segA = this.segmentation('a', a, granularity, regex, patterns);
      segB = this.segmentation(out.useOld ? 'old' : 'b', b, granularity, regex, patterns);
    } catch {
      return out;  // a bad regex (the module says so), or one still being matched
    }
    const key = `${granularity}|${regex}`;
    const memo = this.alignMemo;
    let prompts: Alignment, responses: Alignment;
    if (memo !== null && memo.key === key && memo.a === a && memo.b === b && memo.own === own) {
      ({prompts, responses} = memo);
    } else {
      prompts = alignSegmentations(a.text, segA, b.text, segB, [0, a.prompt_end], [0, b.prompt_end]);
      responses = alignTexts(responseOf(a.text, a.prompt_end), responseOf(own.text, own.prompt_end));
      this.alignMemo = {key, a, b, own, prompts, responses};
    }
    out.prompts = prompts;
    out.responses = responses;
    let tokA: Float64Array | null, tokB: Float64Array | null;
    if (this.method?.segment) {
      const s = this.segments;
      if (s === null) {
        tokA = tokB = null;
        const label = main.registry()?.label(this.method.segment) ?? this.method.segment;
        out.valuesNote = this.crossLoading ? `Measuring ${label} on both prompts…` : '';
      } else {
        try {
          tokA = segmentTokens(s.pinned, a.tokens.length);
          tokB = out.useOld ? segmentTokens(s.old, b.tokens.length) : segmentTokens(s.selected, own.tokens.length);
        } catch (e) {
          tokA = tokB = null;
          out.valuesNote = e instanceof Error ? e.message : String(e);
        }
      }
    } else {
      const linear = main.registry()?.get(main.method)?.linear ?? false;
      tokA = wholeResponseValues(a, main.method, linear);
      tokB = out.useOld ? wholeResponseValues(b, main.method, linear) : main.tokenValues(wholeResponse(numTargets(b)));
    }
    if (tokA === null || tokB === null) return out;
    const signed = main.methodPayload()?.signed ?? main.registry()?.get(main.method)?.signed ?? true;
    out.values = promptValues(prompts, segA, tokA, segB, tokB, [a.prompt_end, b.prompt_end], signed, intensity);
    this.drawn = out.useOld || this.method === null ? null : {tag: this.method.tag, scale: out.values.scale.scale};
    return out;
  }
}

/** A side's segment values (the `salience` of a finished segment request) spread over its `n` tokens. */
function segmentTokens(x: unknown, n: number): Float64Array {
  const values = parseSegments(x, n).values;
  if (values === null) throw new Error('Malformed compare payload: a side has no segment values. Fix: restart the server with this version.');
  return Float64Array.from(values.token_values);
}
