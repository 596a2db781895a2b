/**
 * Compare models inside the salience module: when two models are selected in LIT's model selector
 * (the server serves several with --models), LIT shows the salience module once per model and the first
 * model's instance (pairShownBy) shows a "Compare models" section whose toggle
 * opens the selected datapoint under both: both responses (diff-marked), both prompt salience maps on
 * one shared scale per aligned segment, the difference B − A, and each model's teacher-forced log p of
 * the other model's answer. Only while open does it ask each model's compare wrapper (`_<model>_compare`,
 * lit_app/wrappers/compare.py): for the whole response's salience (its `pinned_salience`, with the selected datapoint
 * as the "pinned" one: the server's caches answer it when the salience module computed it already; unlike a
 * span request to `_<model>_salience` it neither supersedes nor is superseded by the salience module's own
 * span requests), then for each model's log p of the other's answer. The segments follow the
 * module's granularity (a regex shows as words), the maps its method and count, or its segment method measured
 * on each model's whole response (comparedMethod). Pure logic in ./logic.ts; rendering in ./view.ts.
 */
import {COMPARE_FIELD, COMPARE_VIEW_MODELS} from '../../shared/fields.js';
import {compareInput, compareModelName, parseCross, wholeResponseValues, type CrossPayload} from '../compare/logic.js';
import {parsePayload} from '../payload.js';
import {countFields, segmentFields} from '../request.js';
import {parseSegments} from '../segment_payload.js';
import type {Granularity} from '../../shared/aggregate/index.js';
import {JobClient, type ServerHost} from '../../shared/jobs.js';
import {registryOf} from '../../shared/methods.js';
import {salienceModelFor, type IndexedInputLike} from '../../shared/request.js';
import {comparedMethod, compareSides, crossInput, crossRows, modelPair, pairShownBy, type ComparedMethod, type CrossRow,
        type MethodChoice, type ModelsView, type Side} from './logic.js';

/** Where the comparison stands (the module's data-compare-models attribute; e2e tests wait on it). */
export type CompareModelsState = 'off' | 'closed' | 'idle' | 'values' | 'done' | 'error';

export class CompareModelsRoom {
  /** The two models compared (the first two usable ones selected), or null: the section is hidden. */
  pair: [string, string] | null = null;
  /** In the second model's module (no section): the pair, whose first model's module compares them; else null. */
  private partOf: [string, string] | null = null;
  /** Whether the section is open (the toggle); closed, nothing is asked. */
  open = false;
  view: ModelsView | null = null;
  rows: CrossRow[] | null = null;
  status = '';
  error = '';
  granularity: Granularity = 'word';
  /** The module's colour intensity (both maps' legends as the module's). */
  intensity = 1;
  /** The method both maps show (the salience module's), or null until the module has one. */
  method: ComparedMethod | null = null;
  private input: IndexedInputLike | null = null;
  private sides: {a: Side; b: Side; signed: boolean} | null = null;
  /** What was last asked for (datapoint, pair and method); a new one asks again. */
  private key = '';
  /** Both sides' salience, then each model's log p of the other's answer, as one job (../../shared/jobs.ts). */
  private readonly requests: JobClient<CrossRow[] | null>;

  constructor(private readonly host: ServerHost) {
    this.requests = new JobClient(host, {tickRenders: () => false});  // no clock on screen
  }

  get state(): CompareModelsState {
    if (this.pair === null) return 'off';
    if (!this.open) return 'closed';
    return this.error ? 'error' : this.rows !== null ? 'done' : this.view !== null ? 'values' : 'idle';
  }

  dispose() {
    this.requests.dispose();
  }

  /** LIT's selection or model selector changed; `shownModel`: the model of the salience module holding the room. */
  update(input: IndexedInputLike | null, currentModels: readonly string[], shownModel: string) {
    this.input = input;
    this.pair = pairShownBy(shownModel, currentModels, this.host.models());
    const both = modelPair(currentModels, this.host.models());
    this.partOf = both !== null && both[1] === shownModel ? both : null;
    void this.run();
  }

  /** The toggle (mouse or keyboard): opens or closes the section. */
  toggle(open = !this.open) {
    if (open === this.open) return;
    this.open = open;
    this.host.changed();
    void this.run();
  }

  /**
   * Follows the module's granularity (a regex shows as words), intensity and method with its count (a new method or
   * count asks again); called after each render.
   */
  sync(granularity: Granularity, shown: MethodChoice, intensity: number) {
    const g: Granularity = granularity === 'regex' ? 'word' : granularity;
    const method = comparedMethod(this.registry(), shown);
    if (JSON.stringify(method) !== JSON.stringify(this.method)) {  // the registry arrives with the pair
      this.method = method;
      this.host.changed();
      void this.run();
    }
    if (g === this.granularity && intensity === this.intensity) return;
    this.granularity = g;
    this.intensity = intensity;
    if (this.sides !== null) this.view = compareSides(this.sides.a, this.sides.b, this.sides.signed, g, intensity);
    this.host.changed();
  }

  /** The maps' shared scale while the open section shows the module's method at its `granularity` (the module's
   * map takes it: one scale for one method on one prompt), else null. */
  scaleFor(granularity: Granularity): number | null {
    return this.open && this.view !== null && this.granularity === granularity ? this.view.scale.scale : null;
  }

  /**
   * In the second model's module: why its map keeps its own scale (a scale per model: two models' values differ by
   * orders of magnitude, and on the pair's shared scale the smaller one's map would show nothing); '' elsewhere.
   */
  ownScaleNote(): string {
    if (this.partOf === null) return '';
    const [a, b] = this.partOf;
    return `scale of ${b} alone; Compare models (in ${a}'s module) puts ${a} and ${b} on one scale`;
  }

  /** The method registry of the first model's salience companion (null before a pair, or from an older server). */
  registry() {
    const models = this.host.models();
    const sal = this.pair === null ? null : salienceModelFor(this.pair[0], models);
    return sal === null ? null : registryOf(models[sal]);
  }

  private async salience(model: string, input: IndexedInputLike, method: ComparedMethod): Promise<Side> {
    const models = this.host.models();
    const reg = registryOf(models[salienceModelFor(model, models)!]);
    const fields = reg === null ? {} : method.segment !== null ? segmentFields(reg, method.segment)
        : countFields(reg, method.extra);
    const wrapper = compareModelName(model);
    const ask = compareInput(input, input, COMPARE_VIEW_MODELS, fields, method.key, false, true);
    const [pred] = await this.host.getPreds([ask], wrapper, [COMPARE_FIELD], `Salience of ${model} (${method.label})`);
    const cross = parseCross(pred[COMPARE_FIELD]);
    const p = parsePayload(cross.pinned_salience);
    // A segment method: each segment's value spread over its tokens (summed per segment: the values back).
    const values = method.segment !== null ? parseSegments(cross.pinned_segments, p.tokens.length).values?.token_values ?? null
        : wholeResponseValues(p, method.method, reg?.get(method.method)?.linear ?? false);
    if (values === null) throw new Error(`${wrapper} sent no ${method.method} values for the whole response.`);
    return {model, text: p.text, promptEnd: p.prompt_end, offsets: p.offsets, roleSpans: p.role_spans, values,
            targetLogprobs: p.target_logprobs};
  }

  private async cross(model: string, input: IndexedInputLike, answer: string, answerOf: string): Promise<CrossPayload> {
    const [pred] = await this.host.getPreds([crossInput(input, answer, answerOf)], compareModelName(model),
                                            [COMPARE_FIELD], `${model}'s log p of ${answerOf}'s answer`);
    return parseCross(pred[COMPARE_FIELD]);
  }

  private async run() {
    const pair = this.pair, input = this.input, method = this.method;
    const key = !this.open || pair === null || method === null ? '' : `${input?.id ?? ''}|${pair.join(',')}|${method.key}`;
    if (key === this.key) return;
    this.key = key;
    this.requests.reset();
    this.view = null;
    this.rows = null;
    this.sides = null;
    this.error = '';
    this.status = '';
    if (key === '') {
      this.host.changed();
      return;
    }
    if (input === null) {
      this.status = 'Select a datapoint.';
      this.host.changed();
      return;
    }
    const [ma, mb] = pair!;
    this.status = `Explaining the response of ${ma} and of ${mb} with ${method!.label} ...`;
    this.host.changed();
    const settled = await this.requests.run({
      run: async () => {
        const ticket = this.requests.latestTicket;
        const a = await this.salience(ma, input, method!);
        if (!this.requests.isLatest(ticket)) return null;  // superseded (another method or count): b is not asked
        const b = await this.salience(mb, input, method!);
        if (!this.requests.isLatest(ticket)) return null;
        const signed = this.registry()?.get(method!.method)?.signed ?? true;
        this.sides = {a, b, signed};
        const view = this.view = compareSides(a, b, signed, this.granularity, this.intensity);
        this.status = '';
        this.host.changed();
        const crossA = await this.cross(mb, input, view.responseA, ma);
        const crossB = await this.cross(ma, input, view.responseB, mb);
        return crossRows(view, a, b, crossA, crossB);
      },
    });
    if (!settled.latest) return;
    if (settled.ok) {
      this.rows = settled.value;
    } else {
      this.error = settled.error;
      this.status = '';
      this.key = `failed:${key}`;  // closing and opening again (or another datapoint) retries
    }
    this.host.changed();
  }
}
