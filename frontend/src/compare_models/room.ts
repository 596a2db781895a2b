/**
 * Compare models inside the salience module: when two models are selected in LIT's model selector
 * (the server serves several with --models), the module shows a "Compare models" section whose toggle
 * opens the selected datapoint under both: both responses (diff-marked), both prompt salience maps on
 * one shared scale per aligned segment, the difference B − A, and each model's teacher-forced log p of
 * the other model's answer. Only while open does it ask each model's salience companion
 * (`_<model>_salience`, the whole response's salience: the same request as the salience module's first
 * highlight, so the server answers it from cache when the module asked already) and each model's compare
 * wrapper (`_<model>_compare`, lit_app/compare.py) for the other's answer. The segments follow the
 * module's granularity (a regex shows as words). Pure logic in ./logic.ts; rendering in ./view.ts.
 */
import {COMPARE_FIELD, SALIENCE_FIELD, SPAN_SALIENCE_FIELD} from '../shared/fields.js';
import {compareModelName, parseCross, type CrossPayload} from '../compare/logic.js';
import type {SaliencePayload} from '../salience/payload.js';
import {quickInput} from '../salience/request.js';
import type {Granularity} from '../shared/aggregate/index.js';
import {JobClient, type ServerHost} from '../shared/jobs.js';
import {registryOf} from '../shared/methods.js';
import {salienceModelFor, type IndexedInputLike} from '../shared/request.js';
import {COMPARE_MODELS_METHOD, compareSides, crossInput, crossRows, modelPair, type CrossRow, type ModelsView,
        type Side} from './logic.js';

/** Where the comparison stands (the module's data-compare-models attribute; e2e tests wait on it). */
export type CompareModelsState = 'off' | 'closed' | 'idle' | 'values' | 'done' | 'error';

export class CompareModelsRoom {
  /** The two models compared (the first two usable ones selected), or null: the section is hidden. */
  pair: [string, string] | null = null;
  /** Whether the section is open (the toggle); closed, nothing is asked. */
  open = false;
  view: ModelsView | null = null;
  rows: CrossRow[] | null = null;
  status = '';
  error = '';
  granularity: Granularity = 'word';
  private input: IndexedInputLike | null = null;
  private sides: {a: Side; b: Side; signed: boolean} | null = null;
  /** What was last asked for (datapoint and pair); a new one asks again. */
  private key = '';
  /** Both sides' salience, then each model's log p of the other's answer, as one job (../shared/jobs.ts). */
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

  /** LIT's selection or model selector changed. */
  update(input: IndexedInputLike | null, currentModels: readonly string[]) {
    this.input = input;
    this.pair = modelPair(currentModels, this.host.models());
    void this.run();
  }

  /** The toggle (mouse or keyboard): opens or closes the section. */
  toggle(open = !this.open) {
    if (open === this.open) return;
    this.open = open;
    this.host.changed();
    void this.run();
  }

  /** Follows the module's granularity (a regex shows as words); called after each render. */
  sync(granularity: Granularity) {
    const g: Granularity = granularity === 'regex' ? 'word' : granularity;
    if (g === this.granularity) return;
    this.granularity = g;
    if (this.sides !== null) this.view = compareSides(this.sides.a, this.sides.b, this.sides.signed, g);
    this.host.changed();
  }

  private async salience(model: string, input: IndexedInputLike): Promise<Side> {
    const models = this.host.models();
    const sal = salienceModelFor(model, models)!;
    const reg = registryOf(models[sal]);
    const req = reg !== null ? quickInput(reg, input) : input;
    const [pred] = await this.host.getPreds([req], sal, [SALIENCE_FIELD, SPAN_SALIENCE_FIELD], `Salience of ${model}`);
    const p = pred[SALIENCE_FIELD] as SaliencePayload;
    const values = (pred[SPAN_SALIENCE_FIELD] as Record<string, number[]> | undefined)?.[COMPARE_MODELS_METHOD];
    if (values === undefined) throw new Error(`${sal} sent no ${COMPARE_MODELS_METHOD} values for the whole response.`);
    return {model, text: p.text, promptEnd: p.prompt_end, offsets: p.offsets, roleSpans: p.role_spans, values,
            targetLogprobs: p.target_logprobs};
  }

  private async cross(model: string, input: IndexedInputLike, answer: string, answerOf: string): Promise<CrossPayload> {
    const [pred] = await this.host.getPreds([crossInput(input, answer, answerOf)], compareModelName(model),
                                            [COMPARE_FIELD], `${model}'s log p of ${answerOf}'s answer`);
    return parseCross(pred[COMPARE_FIELD]);
  }

  private async run() {
    const pair = this.pair, input = this.input;
    const key = !this.open || pair === null ? '' : `${input?.id ?? ''}|${pair.join(',')}`;
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
    this.status = `Explaining the response of ${ma} and of ${mb} ...`;
    this.host.changed();
    const settled = await this.requests.run({
      run: async () => {
        const ticket = this.requests.latestTicket;
        const a = await this.salience(ma, input);
        const b = await this.salience(mb, input);
        if (!this.requests.isLatest(ticket)) return null;
        const models = this.host.models();
        const signed = registryOf(models[salienceModelFor(ma, models)!])?.get(COMPARE_MODELS_METHOD)?.signed ?? true;
        this.sides = {a, b, signed};
        const view = this.view = compareSides(a, b, signed, this.granularity);
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
