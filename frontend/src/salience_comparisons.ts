/**
 * The two comparisons the Sequence Salience element (salience_module.ts) mounts above its map: "Compare an
 * edit", the selected datapoint against LIT's pinned one (salience/compare/room.ts), and "Compare models", the
 * selection under a second selected model (salience/compare_models/room.ts). What each follows in LIT, what it
 * takes from the module's choices after every render, the colour scale the module's map takes from them, and
 * their sections. Like the element, it builds on the folders it mounts, so it stands beside it, not inside one.
 */
import {html, nothing, type TemplateResult} from 'lit';

import type {Granularity} from './shared/aggregate/index.js';
import {pinnedSelection, type LitServices, type ModuleFacts} from './shared/lit_module.js';
import {CompareRoom} from './salience/compare/room.js';
import {compareView, showFirstEdit} from './salience/compare/view.js';
import {CompareModelsRoom} from './salience/compare_models/room.js';
import {compareModelsView} from './salience/compare_models/view.js';
import type {SalienceController} from './salience/controller.js';
import type {SalienceHost} from './salience/page.js';
import type {PatternMatcher} from './salience/pattern_runner.js';

/** The module's choices a comparison shows with (its granularity, custom pattern and colour intensity). */
export interface ComparedView {
  granularity: Granularity;
  regex: string;
  intensity: number;
}

export class SalienceComparisons {
  // LIT's pin: the comparison with the pinned datapoint (salience/compare/room.ts).
  private readonly compare: CompareRoom;
  // Two models selected in LIT's model selector: the "Compare models" section (salience/compare_models/room.ts).
  private readonly compareModels: CompareModelsRoom;

  constructor(host: SalienceHost) {
    this.compare = new CompareRoom(host);
    this.compareModels = new CompareModelsRoom(host);
  }

  /** Follows LIT's pin and compare mode, the selection and the selected models (from the element's firstUpdated). */
  follow(module: LitServices & ModuleFacts) {
    const pinned = pinnedSelection(module);
    module.reactImmediately(() => [module.appState.compareExamplesEnabled ?? false, pinned?.primarySelectedInputData ?? null,
                                   module.selectionService.primarySelectedInputData] as const,
                            ([on, p, d]) => void this.compare.update(on, p, d));
    module.reactImmediately(() => [module.selectionService.primarySelectedInputData,
                                   (module.appState.currentModels ?? []).join(','), module.modelName()] as const,
                            ([d, models, m]) => this.compareModels.update(d, models === '' ? [] : models.split(','), m));
  }

  /** After each render: both comparisons take the module's method and choices; `dataset` says Compare models' state. */
  sync(ctl: SalienceController, view: ComparedView, root: ParentNode, dataset: DOMStringMap) {
    this.compare.sync(ctl);
    showFirstEdit(root);
    this.compareModels.sync(view.granularity, {method: ctl.method, gradient: ctl.gradientMethod,
                                               counts: ctl.counts, segment: ctl.segmentAsk()}, view.intensity);
    dataset['compareModels'] = this.compareModels.state;
  }

  /** The scale the module's map takes while a comparison shows its method (drawn before the map: this render's). */
  scaleFor(ctl: SalienceController, granularity: Granularity): number | null {
    const scales = [this.compare.scaleFor(ctl), this.compareModels.scaleFor(granularity)];
    return scales.reduce<number | null>((m, s) => (s === null ? m : Math.max(m ?? s, s)), null);
  }

  /**
   * What the map's legend says of its scale: with `shared`, that it is the comparison's (above: the edit's; beside:
   * Compare models'); else why it keeps its own while a comparison shows its prompt on a shared one ('' if none).
   */
  scaleNote(shared: boolean, ctl: SalienceController, granularity: Granularity): string {
    if (!shared) return this.compareModels.ownScaleNote();
    const where = [this.compare.scaleFor(ctl) !== null ? 'above' : '',
                   this.compareModels.scaleFor(granularity) !== null ? 'beside' : ''].filter((w) => w !== '');
    return `one scale with the comparison${where.length > 1 ? 's' : ''} ${where.join(' and ')}`;
  }

  /**
   * The sections and the module's `map`: "Compare an edit" above it; "Compare models" closed, its head line above
   * it, open, beside it (.beside-map.open: LIT gives each of two models' modules about 243 px at 1280×720, too few
   * for a comparison above a readable map), scrolling on its own within the map's height.
   */
  render(ctl: SalienceController, view: ComparedView, patterns: PatternMatcher,
         drawMap: () => TemplateResult | typeof nothing): TemplateResult {
    const m = this.compare.model(ctl, view.granularity, view.regex, view.intensity, patterns);
    const edit = m === null ? nothing : compareView(m, {
      setMode: (mode) => this.compare.setMode(mode),
      explainOldAnswer: () => this.compare.explainOldAnswer(),
      setUseOld: (on) => this.compare.setUseOld(on),
    });
    // The map is drawn after this render's comparison model: its colour scale and legend read it (scaleFor).
    const map = drawMap();
    if (this.compareModels.pair === null) return html`${edit}${map}`;
    // One structure open or closed (CSS lays it out), so that the toggle keeps the keyboard focus.
    return html`${edit}<div class="beside-map ${this.compareModels.open ? 'open' : 'closed'}">
      <div class="models-column">${compareModelsView(this.compareModels, () => this.compareModels.toggle())}</div>
      <div class="map-column">${map}</div></div>`;
  }

  /** The map's width in px (the heatmap's numbers-fit rule): the module's, or its column's beside Compare models. */
  mapWidth(module: HTMLElement & {renderRoot: ParentNode}): number {
    const column = module.renderRoot.querySelector<HTMLElement>('.beside-map.open .map-column');
    return (column ?? module).getBoundingClientRect().width || innerWidth;
  }

  dispose() {
    this.compare.dispose();
    this.compareModels.dispose();
  }
}
