/**
 * The "Compare models" LIT module: when two models are selected in LIT's model selector (the server
 * serves several with --models), it shows the selected datapoint under both: both responses
 * (diff-marked), both prompt salience maps on one shared scale per aligned segment, the difference
 * B − A, and each model's teacher-forced log p of the other model's answer. It asks each model's
 * salience companion (`_<model>_salience`, the whole response's salience: the same request as the
 * salience module's first highlight, so the server answers it from cache when that module asked
 * already) and each model's compare wrapper (`_<model>_compare`, lit_app/compare.py) for the other's
 * answer. The segments follow the salience module's granularity (its shared target; a regex shows as
 * words). Logic in ./logic.ts; rendering in ./view.ts.
 */
import {html, type PropertyValues, type TemplateResult} from 'lit';

import {compareModelName, COMPARE_FIELD, parseCross, type CrossPayload} from '../compare/logic.js';
import {quickInput} from '../salience/request.js';
import type {SaliencePayload} from '../salience/payload.js';
import {GRANULARITIES, type Granularity} from '../shared/aggregate/index.js';
import {moduleBase} from '../shared/lit_module.js';
import {registryOf} from '../shared/methods.js';
import {errorMessage, salienceModelFor, SALIENCE_FIELD, type IndexedInputLike} from '../shared/request.js';
import type {SharedTarget} from '../shared/target_store.js';
import {COMPARE_MODELS_METHOD, compareSides, crossInput, crossRows, modelPair, type CrossRow, type ModelsView, type Side} from './logic.js';
import {COMPARE_MODELS_STYLES, hintView, modelsView} from './view.js';

export const COMPARE_MODELS_TAG = 'compare-models-module';

const SPAN_SALIENCE_FIELD = 'span_salience';

export function makeCompareModelsModuleClass(LitModule: unknown): CustomElementConstructor {
  class CompareModelsModule extends moduleBase(LitModule, {
    tag: COMPARE_MODELS_TAG, title: 'Compare models', numCols: 12, styles: COMPARE_MODELS_STYLES,
    infoMarkdown:
        'Select two models in LIT\'s model selector: the selected datapoint\'s responses of both (diff marked), ' +
        'both prompt salience maps on one shared scale, their difference, and each model\'s log p of the ' +
        'other model\'s answer.',
    followsTarget: true,
    state: ['view', 'rows', 'status', 'error', 'granularity'],
  }) {
    declare view: ModelsView | null;
    declare rows: CrossRow[] | null;
    declare status: string;
    declare error: string;
    /** The salience module's granularity (shared/target_store.ts); regex shows as words. */
    declare granularity: Granularity;
    private seq = 0;
    private sides: {a: Side; b: Side; signed: boolean} | null = null;

    constructor() {
      super();
      this.view = null;
      this.rows = null;
      this.status = '';
      this.error = '';
      this.granularity = 'word';
    }

    override onTarget(t: SharedTarget | null) {
      const g = t?.granularity;
      if (g === undefined || g === 'regex' || g === this.granularity || !(GRANULARITIES as readonly string[]).includes(g)) {
        return;
      }
      this.granularity = g as Granularity;
      if (this.sides !== null) this.view = compareSides(this.sides.a, this.sides.b, this.sides.signed, this.granularity);
    }

    override firstUpdated(changed: PropertyValues) {
      (super.firstUpdated as ((c: PropertyValues) => void) | undefined)?.call(this, changed);
      this.reactImmediately(
          () => [this.selectionService.primarySelectedInputData, (this.appState.currentModels ?? []).join(',')] as const,
          ([input]) => void this.run(input));
    }

    private async salience(model: string, input: IndexedInputLike): Promise<Side> {
      const models = this.appState.metadata.models;
      const sal = salienceModelFor(model, models)!;
      const reg = registryOf(models[sal]);
      const req = reg !== null ? quickInput(reg, input) : input;
      const [pred] = await this.apiService.getPreds([req], sal, this.appState.currentDataset, [],
                                                    [SALIENCE_FIELD, SPAN_SALIENCE_FIELD], `Salience of ${model}`);
      const p = pred[SALIENCE_FIELD] as SaliencePayload;
      const values = (pred[SPAN_SALIENCE_FIELD] as Record<string, number[]> | undefined)?.[COMPARE_MODELS_METHOD];
      if (values === undefined) throw new Error(`${sal} sent no ${COMPARE_MODELS_METHOD} values for the whole response.`);
      return {model, text: p.text, promptEnd: p.prompt_end, offsets: p.offsets, roleSpans: p.role_spans, values,
              targetLogprobs: p.target_logprobs};
    }

    private async cross(model: string, input: IndexedInputLike, answer: string, answerOf: string): Promise<CrossPayload> {
      const [pred] = await this.apiService.getPreds([crossInput(input, answer, answerOf)], compareModelName(model),
                                                    this.appState.currentDataset, [], [COMPARE_FIELD],
                                                    `${model}'s log p of ${answerOf}'s answer`);
      return parseCross(pred[COMPARE_FIELD]);
    }

    private async run(input: IndexedInputLike | null) {
      const seq = ++this.seq;
      this.view = null;
      this.rows = null;
      this.sides = null;
      this.error = '';
      const pair = modelPair(this.appState.currentModels ?? [], this.appState.metadata.models);
      if (pair === null) {
        this.status = 'Select two models in LIT\'s model selector (top bar) to compare them on one prompt.';
        return;
      }
      if (input === null) {
        this.status = 'Select a datapoint.';
        return;
      }
      const [ma, mb] = pair;
      this.status = `Explaining the response of ${ma} and of ${mb} ...`;
      try {
        const a = await this.salience(ma, input);
        const b = await this.salience(mb, input);
        if (seq !== this.seq) return;
        const reg = registryOf(this.appState.metadata.models[salienceModelFor(ma, this.appState.metadata.models)!]);
        const signed = reg?.get(COMPARE_MODELS_METHOD)?.signed ?? true;
        this.sides = {a, b, signed};
        this.view = compareSides(a, b, signed, this.granularity);
        this.status = '';
        const crossA = await this.cross(mb, input, this.view.responseA, ma);
        const crossB = await this.cross(ma, input, this.view.responseB, mb);
        if (seq !== this.seq) return;
        this.rows = crossRows(this.view, a, b, crossA, crossB);
      } catch (e) {
        if (seq === this.seq) {
          this.error = errorMessage(e);
          this.status = '';
        }
      }
    }

    override updated(changed: PropertyValues) {
      (super.updated as ((c: PropertyValues) => void) | undefined)?.call(this, changed);
      this.dataset['state'] = this.error ? 'error' : this.rows !== null ? 'done' : this.view !== null ? 'values' : 'idle';
    }

    renderImpl(): TemplateResult {
      return html`<div class="module">
        ${this.error ? hintView(this.error, 'error') : ''}
        ${this.status ? hintView(this.status, 'status') : ''}
        ${this.view !== null ? modelsView(this.view, this.rows, COMPARE_MODELS_METHOD, this.granularity) : ''}
      </div>`;
    }
  }
  return CompareModelsModule;
}
